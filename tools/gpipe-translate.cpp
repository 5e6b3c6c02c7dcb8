// gpipe-translate: prints the C++ (or CUDA C++) program of one pipeline stage
// from pipeline IR (gpipe-compile --emit mlir, or gpipe-opt's output), so code
// generation is tested from IR.
#include "compiler/CppEmitter.h"
#include "dialects/nn/NNOps.h"
#include "dialects/pipe/PipeOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Tools/mlir-translate/MlirTranslateMain.h"
#include "mlir/Tools/mlir-translate/Translation.h"

#include "llvm/Support/CommandLine.h"

using namespace mlir;

static llvm::cl::opt<int64_t>
    stageIndex("stage", llvm::cl::desc("the stage to print (default 0)"),
               llvm::cl::init(0));
static llvm::cl::opt<std::string>
    target("target", llvm::cl::desc("cpu (C++, default) or cuda (CUDA C++)"),
           llvm::cl::init("cpu"));
static llvm::cl::opt<std::string>
    precision("precision", llvm::cl::desc("fp32 (default) or bf16"),
              llvm::cl::init("fp32"));
static llvm::cl::opt<bool>
    allowTf32("allow-tf32",
              llvm::cl::desc("CUDA, fp32: GEMMs may round inputs to TF32"),
              llvm::cl::init(false));
static llvm::cl::opt<bool>
    profile("profile",
            llvm::cl::desc("time every unit of generated code (the CPU "
                           "target's gpipe-compile --profile)"),
            llvm::cl::init(false));
static llvm::cl::opt<std::string>
    buildId("build-id",
            llvm::cl::desc("the compile's identifier the program checks "
                           "pipeline.json against (default empty)"),
            llvm::cl::init(""));

/// Emits stages 0..--stage in order (weight file names are unique across the
/// stages emitted before, as in gpipe-compile) and prints the last.
static LogicalResult stageToCpp(Operation *op, llvm::raw_ostream &os) {
  auto module = dyn_cast<ModuleOp>(op);
  if (!module)
    return op->emitError("expected a module");
  if (target != "cpu" && target != "cuda")
    return module.emitError("--target must be cpu or cuda, got '")
           << target << "'";
  if (precision != "fp32" && precision != "bf16")
    return module.emitError("--precision must be fp32 or bf16, got '")
           << precision << "'";
  if (!module->hasAttr(
          gpipe::pipeline::PipeDialect::StagesAttrHelper::getNameStr()))
    return module.emitError("not pipeline IR: the module has no pipe.stages "
                            "(run gpipe-compile --emit mlir or gpipe-opt "
                            "--gpipe-pipeline first)");
  // The stages (executables): one per pipe.schedule; before scheduling,
  // the module's pieces (the emitter then reports the missing schedule).
  int64_t stages = gpipe::pipeline::getNumStages(module);
  if (auto scheduled = llvm::range_size(
          module.getOps<gpipe::pipeline::ScheduleOp>()))
    stages = static_cast<int64_t>(scheduled);
  if (stageIndex < 0 || stageIndex >= stages)
    return module.emitError("--stage ")
           << stageIndex.getValue() << " is out of range: the pipeline has "
           << stages << " stage(s)";
  gpipe::EmitOptions options;
  options.cuda = target == "cuda";
  options.bf16 = precision == "bf16";
  options.allowTf32 = allowTf32;
  options.profile = profile;
  std::vector<std::string> takenFiles;
  for (int64_t s = 0; s <= stageIndex; ++s) {
    FailureOr<gpipe::EmittedStage> stage = gpipe::emitStageCpp(
        module, s, "stage" + std::to_string(s), takenFiles, buildId, options);
    if (failed(stage))
      return failure();
    if (s == stageIndex)
      os << stage->source;
  }
  return success();
}

int main(int argc, char **argv) {
  TranslateFromMLIRRegistration registration(
      "gpipe-stage-to-cpp",
      "print one stage's program (--stage, --target, --precision)", stageToCpp,
      [](DialectRegistry &registry) {
        registry.insert<gpipe::nn::NNDialect, gpipe::pipeline::PipeDialect,
                        func::FuncDialect>();
      });
  return failed(mlirTranslateMain(argc, argv, "gpipe-translate"));
}
