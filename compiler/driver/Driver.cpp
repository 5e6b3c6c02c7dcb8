// The gpipe-compile sequence: validate, import, run the passes, emit, write
// the output directory (staged, then published), build the executables.
#include "compiler/driver/Driver.h"

#include "compiler/CppEmitter.h"
#include "compiler/driver/Auto.h"
#include "compiler/driver/Diagnostics.h"
#include "compiler/driver/Explain.h"
#include "compiler/driver/Manifest.h"
#include "compiler/driver/PassPipeline.h"
#include "compiler/driver/Publish.h"
#include "compiler/driver/Toolchain.h"
#include "compiler/importer/OnnxImporter.h"
#include "dialects/nn/NNOps.h"
#include "dialects/pipe/PipeOps.h"
#include "passes/CostTable.h"
#include "passes/schedules/Schedules.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/raw_ostream.h"

#include "npy.h" // the runtime's .npy writer

#include <cmath>

using namespace mlir;
using namespace gpipe;
using namespace gpipe::driver;

namespace {

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

LogicalResult validate(const CompileOptions &o) {
  auto &opt = o.optimizer;
  if (o.stages < 1)
    return fail("--stages must be >= 1, got " + llvm::Twine(o.stages));
  if (o.microbatches < 1)
    return fail("--microbatches must be >= 1, got " +
                llvm::Twine(o.microbatches));
  if (o.target != "cpu" && o.target != "cuda")
    return fail("--target must be cpu or cuda, got '" + o.target + "'");
  if (o.precision != "fp32" && o.precision != "bf16")
    return fail("--precision must be fp32 or bf16, got '" + o.precision + "'");
  if (o.target == "cpu" && o.allowTf32)
    return fail("--allow-tf32 needs --target cuda");
  if (o.precision == "bf16" && o.allowTf32)
    return fail("--allow-tf32 applies to --precision fp32 only");
  if (o.target == "cuda" && failed(cudaArchitectures(o.cudaArch)))
    return failure();
  if (o.emit != "exe" && o.emit != "cpp" && o.emit != "mlir" &&
      o.emit != "import")
    return fail("--emit must be exe, cpp, mlir or import, got '" + o.emit +
                "'");
  if (o.outDir == "-" && o.emit != "mlir" && o.emit != "import")
    return fail("-o - (stdout) works with --emit mlir or --emit import only");
  if (o.remat != "none" && o.remat != "stage" && o.remat != "auto" &&
      o.remat != "segments")
    return fail("--remat must be none, stage, segments or auto, got '" +
                o.remat + "'");
  if (!o.rematStages.empty() && o.remat != "stage")
    return fail("--remat-stages needs --remat stage");
  if (o.remat == "segments") {
    if (o.virtualStages != 1)
      return fail("--remat segments runs one model chunk per stage "
                  "(--virtual-stages 1)");
    if (static_cast<int64_t>(o.rematStashBytes.size()) != o.stages)
      return fail("--remat segments needs --remat-stash-bytes with one "
                  "entry per stage (" +
                  std::to_string(o.stages) + "), got " +
                  std::to_string(o.rematStashBytes.size()));
  } else if (!o.rematStashBytes.empty()) {
    return fail("--remat-stash-bytes needs --remat segments");
  }
  for (int64_t s : o.rematStages)
    if (s < 0 || s >= o.stages * o.virtualStages)
      return fail("--remat-stages: stage " + std::to_string(s) +
                  " is out of range: the pipeline has " +
                  std::to_string(o.stages * o.virtualStages) + " piece(s)");
  if (o.batchnorm != "microbatch" && o.batchnorm != "deferred")
    return fail("--batchnorm must be microbatch or deferred, got '" +
                o.batchnorm + "'");
  const schedules::Schedule *sched = schedules::lookup(o.schedule);
  if (!sched)
    return fail("--schedule must be one of " + schedules::names() + ", got '" +
                o.schedule + "'");
  if (o.virtualStages < 1)
    return fail("--virtual-stages must be >= 1, got " +
                llvm::Twine(o.virtualStages));
  if (!o.partition.empty() &&
      int64_t(o.partition.size()) != o.stages * o.virtualStages - 1)
    return fail("--partition names " + llvm::Twine(o.partition.size()) +
                " split point(s), but " +
                (o.virtualStages > 1
                     ? "--stages " + std::to_string(o.stages) +
                           " x --virtual-stages " +
                           std::to_string(o.virtualStages) + " pieces need "
                     : "--stages " + std::to_string(o.stages) + " needs ") +
                llvm::Twine(o.stages * o.virtualStages - 1));
  if (o.memoryPerStage < 0)
    return fail("--memory-per-stage must be positive");
  if (o.dataParallel < 1)
    return fail("--data-parallel must be >= 1, got " +
                llvm::Twine(o.dataParallel));
  if (o.shardOptimizer && o.dataParallel < 2)
    return fail("--shard-optimizer splits the optimizer state across the "
                "replicas: it needs --data-parallel D >= 2");
  if (o.shardOptimizer && (o.target != "cpu" || o.precision != "fp32"))
    return fail("--shard-optimizer runs on the CPU target in fp32 only for "
                "now");

  if (o.memoryPerStage > 0 && o.virtualStages > 1)
    return fail("--memory-per-stage needs one model chunk per stage "
                "(--virtual-stages 1) for now");
  if (o.memoryPerStage > 0 && !o.partition.empty())
    return fail("--memory-per-stage chooses the partition: it cannot be "
                "combined with --partition");
  if (std::string why = sched->check(o.stages, o.microbatches, o.virtualStages);
      !why.empty())
    return fail(why);
  if (opt.kind != "sgd" && opt.kind != "adam" && opt.kind != "adamw")
    return fail("--optimizer must be sgd, adam or adamw, got '" + opt.kind +
                "'");
  auto bad = [](double v) { return !std::isfinite(v) || v < 0; };
  if (bad(opt.lr))
    return fail("--lr must be a number >= 0, got " + num(opt.lr));
  if (bad(opt.momentum))
    return fail("--momentum must be >= 0, got " + num(opt.momentum));
  if (opt.nesterov && (opt.kind != "sgd" || opt.momentum <= 0))
    return fail("--nesterov needs --optimizer sgd and a --momentum > 0");
  if (opt.momentum > 0 && opt.kind != "sgd")
    return fail("--momentum applies to --optimizer sgd only");
  if (bad(opt.weightDecay))
    return fail("--weight-decay must be >= 0, got " + num(opt.weightDecay));
  if (bad(opt.beta1) || opt.beta1 >= 1 || bad(opt.beta2) || opt.beta2 >= 1)
    return fail("--betas must be two numbers in [0, 1), got " + num(opt.beta1) +
                "," + num(opt.beta2));
  if (bad(opt.eps))
    return fail("--eps must be >= 0, got " + num(opt.eps));
  if (o.outDir.empty())
    return fail("-o OUT is required");
  if (o.batchSize && *o.batchSize <= 0)
    return fail("--batch-size must be positive, got " +
                std::to_string(*o.batchSize));
  return success();
}

std::string printModule(ModuleOp module) {
  std::string text;
  llvm::raw_string_ostream os(text);
  module.print(os, OpPrintingFlags().enableDebugInfo(false));
  return text;
}

} // namespace

int gpipe::compile(const CompileOptions &options) {
  if (failed(validate(options)))
    return 2;
  // --auto replaces M, the schedule, its chunks and remat below.
  CompileOptions o = options;
  if (!llvm::sys::fs::exists(o.modelPath)) {
    errorLine() << o.modelPath << ": no such file\n";
    return 1;
  }

  MLIRContext ctx;
  ctx.loadDialect<nn::NNDialect, pipeline::PipeDialect, func::FuncDialect>();
  // Diagnostics name the node; a dump of the op would drown the message.
  ctx.printOpOnDiagnostic(false);
  ScopedDiagnosticHandler handler(&ctx, printDiagnostic);

  ImportOptions io;
  io.batchSize = o.batchSize;
  io.lossName = o.lossName;
  io.freeze = o.freeze;
  io.seed = o.seed;
  // --data-parallel D: the stage programs are a replica's, B/D rows a step:
  // imported at B/D when --batch-size gives B, else imported again at it
  // once the model's batch is known.
  auto notDividing = [&](int64_t global) {
    if (o.dataParallel <= 1 || global % o.dataParallel == 0)
      return false;
    errorLine() << "--data-parallel " << o.dataParallel
                << " does not divide the mini-batch size " << global
                << " (--batch-size, or the model's batch)\n";
    return true;
  };
  if (o.batchSize) {
    if (notDividing(*o.batchSize))
      return 2;
    io.batchSize = *o.batchSize / o.dataParallel;
  }
  FailureOr<ImportedModel> model = importOnnxModel(ctx, o.modelPath, io);
  if (failed(model))
    return 1;
  if (o.dataParallel > 1 && !o.batchSize) {
    if (notDividing(model->batchSize))
      return 2;
    io.batchSize = model->batchSize / o.dataParallel;
    model = importOnnxModel(ctx, o.modelPath, io);
    if (failed(model))
      return 1;
  }
  for (const std::string &note : model->notes)
    llvm::errs() << "gpipe-compile: note: " << o.modelPath << ": " << note
                 << "\n";
  ModuleOp module = *model->module;
  bool toStdout = o.outDir == "-";
  if (o.emit == "import" && toStdout) {
    llvm::outs() << printModule(module);
    return 0;
  }
  // --costs: the table the partition balances (gpipe-partition reads it
  // too), for --auto's choice and each stage's predicted step time.
  std::optional<CostTable> costs;
  if (!o.costs.empty()) {
    std::string err;
    costs = loadCostTable(o.costs, err);
    if (!costs) {
      errorLine() << "--costs: " << err << "\n";
      return 1;
    }
  }
  if (o.autoConfig) {
    CostTable none; // the analytic model, at scale 1
    FailureOr<std::vector<driver::AutoCandidate>> chosen =
        driver::chooseConfiguration(module, o, model->batchSize,
                                    costs ? *costs : none);
    if (failed(chosen))
      return 1;
    const driver::AutoCandidate &best = chosen->front();
    o.microbatches = best.microbatches;
    o.schedule = best.schedule;
    o.virtualStages = best.virtualStages;
    o.remat = best.remat;
    o.rematStages = best.rematStages;
    o.rematStashBytes = best.rematStashBytes;
    if (o.explain) {
      driver::explainChoice(*chosen, o, costs ? *costs : none);
      llvm::outs().flush();
    }
    int64_t peak = *std::max_element(best.stagePeakBytes.begin(),
                                     best.stagePeakBytes.end());
    llvm::errs() << "gpipe-compile: --auto: --microbatches "
                 << best.microbatches << " --schedule " << best.schedule;
    if (best.virtualStages > 1)
      llvm::errs() << " --virtual-stages " << best.virtualStages;
    llvm::errs() << " --remat " << best.remat;
    if (!best.rematStages.empty()) {
      llvm::errs() << " --remat-stages ";
      llvm::interleave(best.rematStages, llvm::errs(), ",");
    }
    if (!best.rematStashBytes.empty()) {
      llvm::errs() << " --remat-stash-bytes ";
      llvm::interleave(best.rematStashBytes, llvm::errs(), ",");
    }
    llvm::errs() << ": predicted "
                 << llvm::format("%.3f", 1e3 * best.stepSeconds)
                 << " ms per step, fullest stage " << (peak >> 20) << " MiB";
    if (o.memoryPerStage > 0)
      llvm::errs() << " of " << (o.memoryPerStage >> 20) << " MiB";
    llvm::errs() << " (" << chosen->size() << " configurations planned, "
                 << llvm::count_if(*chosen,
                                   [](const driver::AutoCandidate &c) {
                                     return !c.rejected.empty();
                                   })
                 << " rejected; --explain lists them)\n";
    // The partition the chosen plan had (the arenas checked against its
    // budget, which fitted).
    o.memoryPerStage = best.partitionBytes;
  }
  if (model->batchSize % o.microbatches != 0) {
    errorLine() << "--microbatches " << o.microbatches
                << " does not divide the mini-batch size " << model->batchSize
                << (o.dataParallel > 1
                        ? " of each of the " + std::to_string(o.dataParallel) +
                              " replicas (--batch-size / --data-parallel)\n"
                        : std::string(
                              " (--batch-size, or the model's batch)\n"));
    return 2;
  }
  // auto under a budget, one chunk per stage: per stage, what of its stash
  // to recompute so that it fits (gpipe-remat mode=segments).
  if (o.remat == "auto" && o.memoryPerStage > 0 && o.virtualStages == 1 &&
      o.target == "cpu") {
    CostTable none;
    if (failed(driver::planSegmentRemat(module, o, costs ? *costs : none)))
      return 1;
  }
  // auto: rematerialize whenever a micro-batch's activations stay in flight
  // while others run, i.e. in every pipeline but one stage on one batch.
  std::string remat = o.remat;
  if (remat == "auto")
    remat = (o.stages > 1 || o.microbatches > 1) ? "stage" : "none";

  std::string mlirText;
  if (o.emit != "import") {
    PassManager pm(&ctx);
    buildPassPipeline(pm, o, remat);
    if (failed(pm.run(module)))
      return 1;
    mlirText = printModule(module);
    if (o.emit == "mlir" && toStdout) {
      llvm::outs() << mlirText;
      return 0;
    }
  }

  // Everything goes to a staging directory next to OUT first, and is moved
  // into OUT only once all of it succeeded.
  std::string out = o.outDir;
  while (out.size() > 1 && out.back() == '/')
    out.pop_back();
  std::string staging = out + ".gpipe-staging-" +
                        std::to_string(llvm::sys::Process::getProcessId());
  llvm::sys::fs::remove_directories(staging);
  if (std::error_code ec = llvm::sys::fs::create_directories(staging)) {
    errorLine() << "cannot create " << staging << ": " << ec.message() << "\n";
    return 1;
  }
  auto finish = [&](const char *what) {
    if (failed(publish(staging, out))) {
      llvm::sys::fs::remove_directories(staging);
      return 1;
    }
    llvm::outs() << "gpipe-compile: wrote " << out << "/" << what << "\n";
    return 0;
  };
  auto cleanupAndFail = [&]() {
    llvm::sys::fs::remove_directories(staging);
    return 1;
  };

  if (o.emit == "import")
    return failed(writeFile(staging + "/pipeline.import.mlir",
                            printModule(module)))
               ? cleanupAndFail()
               : finish("pipeline.import.mlir");
  if (o.emit == "mlir")
    return failed(writeFile(staging + "/pipeline.mlir", mlirText))
               ? cleanupAndFail()
               : finish("pipeline.mlir");

  // Identifies this compile in pipeline.json and in every stage program,
  // which checks it at start-up: a hash of the stage IR and the options.
  std::string buildId;
  {
    uint64_t h = 1469598103934665603ULL; // FNV-1a
    auto mix = [&](llvm::StringRef text) {
      for (unsigned char c : text) {
        h ^= c;
        h *= 1099511628211ULL;
      }
    };
    mix(mlirText);
    mix(o.target);
    mix(o.cpuArch);
    mix(o.precision);
    if (o.target == "cuda") {
      mix(o.cudaArch);
      mix(o.allowTf32 ? "tf32" : "");
    }
    mix(model->originalModel);
    mix(o.profile ? "profile" : "");
    buildId = llvm::utohexstr(h, /*LowerCase=*/true);
  }
  // Below the pipeline IR: what code generation reads (gpipe-lower). The
  // explanation reads the forward functions, which lowering leaves as they
  // are.
  {
    PassManager lower(&ctx);
    LoweringOptions lo;
    lo.target = o.target;
    lo.precision = o.precision;
    lo.shardOptimizer = o.shardOptimizer ? o.dataParallel : 1;
    buildLoweringPipeline(lower, lo);
    if (failed(lower.run(module)))
      return cleanupAndFail();
  }
  std::vector<EmittedStage> stages;
  std::vector<std::string> names, takenFiles;
  std::vector<SmallVector<func::FuncOp>> forwards; // per stage, per chunk
  for (int64_t s = 0; s < o.stages; ++s) {
    names.push_back("stage" + std::to_string(s));
    EmitOptions eo;
    eo.cuda = o.target == "cuda";
    eo.bf16 = o.precision == "bf16";
    eo.allowTf32 = o.allowTf32;
    eo.profile = o.profile;
    eo.dataParallel = o.dataParallel;
    eo.shardOptimizer = o.shardOptimizer;
    eo.costs = costs ? &*costs : nullptr;
    FailureOr<EmittedStage> stage =
        emitStageCpp(module, s, names.back(), takenFiles, buildId, eo);
    if (failed(stage))
      return cleanupAndFail();
    // The partition met the budget by an estimate; the planned arena is
    // what the stage allocates (the runtime adds its own overhead).
    if (o.memoryPerStage > 0 && stage->memory.arenaBytes > o.memoryPerStage) {
      errorLine() << o.modelPath << ": stage " << s << "'s planned arena is "
                  << stage->memory.arenaBytes
                  << " bytes, over --memory-per-stage " << o.memoryPerStage
                  << " (the partition's estimate fitted; raise the budget"
                  << (remat == "none" ? ", add stages, or use --remat stage)\n"
                                      : " or add stages)\n");
      return cleanupAndFail();
    }
    // What the stage report compares the measured peak with.
    if (eo.cuda && costs && costs->cuda &&
        costs->runtimeBytesFor(s, o.stages) > 0)
      stage->predictedDeviceBytes =
          stage->memory.arenaBytes + costs->runtimeBytesFor(s, o.stages);
    stage->predictedPeakBytes = driver::predictedPeakBytes(
        *stage,
        driver::runtimeBytesOf(costs ? *costs : CostTable(), s, o.stages,
                               *stage),
        o.microbatches, o.stages, eo.cuda);
    forwards.emplace_back();
    for (int64_t piece : stage->virtualStages)
      for (auto f : module.getOps<func::FuncOp>())
        if (pipeline::getStage(f) == piece &&
            pipeline::getPhase(f) == pipeline::Phase::Forward)
          forwards.back().push_back(f);
    stages.push_back(std::move(*stage));
  }

  // Initial weights, the model (for --save-onnx), the plan, the sources.
  std::string weights = staging + "/weights";
  llvm::sys::fs::create_directories(weights);
  for (const EmittedStage &stage : stages)
    for (const EmittedParam &p : stage.params) {
      const ImportedParam *src = nullptr;
      for (const ImportedParam &ip : model->params)
        if (ip.name == p.name)
          src = &ip;
      std::string err;
      // A parameter left in external data goes from that file to its
      // weight file a piece at a time.
      if (!src ||
          !(src->externalFile.empty()
                ? npyWriteF32(weights + "/" + p.file, src->data.data(),
                              p.shape.data(), p.shape.size(), err)
                : npyWriteF32FromFile(weights + "/" + p.file, p.shape.data(),
                                      p.shape.size(), src->externalFile,
                                      src->externalOffset, err))) {
        errorLine() << "cannot write the weights of '" << p.name << "': " << err
                    << "\n";
        return cleanupAndFail();
      }
    }
  llvm::SmallString<256> srcAbs(o.modelPath);
  llvm::sys::fs::make_absolute(srcAbs);
  if (failed(writeFile(staging + "/model.onnx", model->originalModel)) ||
      failed(writeFile(
          staging + "/pipeline.json",
          manifest::writeManifest(makeManifest(
              o, *model, stages, remat, srcAbs.str().str(), buildId)))) ||
      failed(writeFile(staging + "/pipeline.mlir", mlirText)))
    return cleanupAndFail();
  for (auto [name, stage] : llvm::zip(names, stages))
    if (failed(writeFile(staging + "/" + name +
                             (o.target == "cuda" ? ".cu" : ".cpp"),
                         stage.source)))
      return cleanupAndFail();

  if (o.explain)
    for (auto [s, stage] : llvm::enumerate(stages)) {
      // --remat-stages: whether any of this stage's pieces rematerializes.
      bool any = o.rematStages.empty() ||
                 llvm::any_of(stage.virtualStages, [&](int64_t piece) {
                   return llvm::is_contained(o.rematStages, piece);
                 });
      std::string stageRemat = remat == "stage" && !any ? "none" : remat;
      if (remat == "segments" && s < o.rematStashBytes.size())
        stageRemat = o.rematStashBytes[s] < 0
                         ? std::string("segments: keeps its whole stash")
                         : "segments: stash at most " +
                               std::to_string(o.rematStashBytes[s]) +
                               " bytes per micro-batch";
      explainStage(s, forwards[s], stage, stageRemat, o.microbatches,
                   o.target == "cuda", o.stages, o.dataParallel);
    }

  if (o.emit == "exe" && failed(buildExecutables(o, staging, names)))
    return cleanupAndFail();
  if (failed(publish(staging, out)))
    return cleanupAndFail();
  int64_t numParams = 0, maxArena = 0;
  for (const EmittedStage &stage : stages) {
    numParams += stage.params.size();
    maxArena = std::max(maxArena, stage.memory.arenaBytes);
  }
  llvm::outs() << "gpipe-compile: " << out << ": " << o.stages
               << (o.stages == 1 ? " stage" : " stages");
  if (o.dataParallel > 1)
    llvm::outs() << " x " << o.dataParallel << " replicas ("
                 << o.stages * o.dataParallel << " ranks: rank r is stage r % "
                 << o.stages << " of replica r / " << o.stages << ")";
  llvm::outs() << ", batch " << model->batchSize * o.dataParallel;
  if (o.dataParallel > 1)
    llvm::outs() << " (" << model->batchSize << " per replica)";
  llvm::outs() << " in " << o.microbatches
               << (o.microbatches == 1 ? " micro-batch" : " micro-batches")
               << ", remat " << remat << ", " << numParams
               << " parameters, largest arena " << maxArena << " bytes\n";
  return 0;
}
