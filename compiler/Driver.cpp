// The gpipe-compile pipeline: import, differentiate, optimize, emit, build.
#include "compiler/Driver.h"

#include "compiler/CppEmitter.h"
#include "compiler/importer/OnnxImporter.h"
#include "dialects/nn/NNOps.h"
#include "dialects/pipe/PipeOps.h"
#include "passes/Passes.h"
#include "passes/schedules/Schedules.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

#include "npy.h" // the runtime's .npy writer

#include <cmath>

using namespace mlir;
using namespace gpipe;

#ifndef GPIPE_RUNTIME_INCLUDE_DIR
#error "GPIPE_RUNTIME_INCLUDE_DIR must be defined by the build"
#endif

namespace {

llvm::raw_ostream &errorLine() {
  return llvm::errs() << "gpipe-compile: error: ";
}

/// "model.onnx: node 'Gemm_0': " for op locations, "model.onnx: " for files.
std::string describe(Location loc) {
  if (auto name = dyn_cast<NameLoc>(loc))
    return describe(name.getChildLoc()) + "node '" +
           name.getName().getValue().str() + "': ";
  if (auto file = dyn_cast<FileLineColLoc>(loc)) {
    std::string s = file.getFilename().getValue().str();
    if (file.getLine())
      s += ":" + std::to_string(file.getLine()) + ":" +
           std::to_string(file.getColumn());
    return s + ": ";
  }
  if (auto fused = dyn_cast<FusedLoc>(loc))
    return fused.getLocations().empty() ? ""
                                        : describe(fused.getLocations()[0]);
  return "";
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

LogicalResult fail(const llvm::Twine &msg) {
  errorLine() << msg << "\n";
  return failure();
}

/// The SM versions of --cuda-arch ("80,90" -> {80, 90}).
FailureOr<std::vector<int>> cudaArchitectures(const std::string &list) {
  std::vector<int> archs;
  llvm::SmallVector<llvm::StringRef> parts;
  llvm::StringRef(list).split(parts, ',');
  for (llvm::StringRef part : parts) {
    part = part.trim();
    part.consume_front("sm_");
    int arch = 0;
    if (part.getAsInteger(10, arch) || arch < 50 || arch > 200) {
      (void)fail("--cuda-arch must be a comma-separated list of SM versions "
                 "such as 80,90 (sm_80 also works), got '" +
                 list + "'");
      return failure();
    }
    if (!llvm::is_contained(archs, arch))
      archs.push_back(arch);
  }
  return archs;
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
  if (o.remat != "none" && o.remat != "stage" && o.remat != "auto")
    return fail("--remat must be none, stage or auto, got '" + o.remat + "'");
  if (const schedules::Schedule *s = schedules::lookup(o.schedule); !s)
    return fail("--schedule must be one of " + schedules::names() + ", got '" +
                o.schedule + "'");
  else if (s->sends == schedules::Sends::Buffered && o.target == "cuda")
    return fail("--schedule " + o.schedule +
                " needs buffered sends, which the CUDA runtime does not have "
                "yet: use --target cpu, or --schedule gpipe");
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

gpipe::OptimizerOptions optimizerPassOptions(const OptimizerConfig &c) {
  gpipe::OptimizerOptions o;
  o.optimizer = c.kind;
  o.lr = c.lr;
  o.momentum = c.momentum;
  o.nesterov = c.nesterov;
  o.weightDecay = c.weightDecay;
  o.beta1 = c.beta1;
  o.beta2 = c.beta2;
  o.eps = c.eps;
  return o;
}

LogicalResult writeFile(const std::string &path, llvm::StringRef contents) {
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec);
  if (ec)
    return fail("cannot write " + path + ": " + ec.message());
  os << contents;
  os.close();
  if (os.has_error())
    return fail("cannot write " + path + ": " + os.error().message());
  return success();
}

/// Writes pipeline.json: what gpipe-run and the stage programs need, plus
/// the partition, transfers, schedule, memory plan and cost estimate of every
/// stage, for people and tools.
std::string pipelineJson(const CompileOptions &o, const ImportedModel &model,
                         const std::vector<EmittedStage> &stages,
                         const std::string &remat, const std::string &srcAbs,
                         const std::string &buildId) {
  std::string s;
  llvm::raw_string_ostream os(s);
  llvm::json::OStream j(os, 2);
  int64_t lossStage = -1;
  for (auto [i, st] : llvm::enumerate(stages))
    if (st.hasLoss)
      lossStage = i;
  j.object([&] {
    j.attribute("format", "gpipe-pipeline");
    j.attribute("version", 2);
    j.attribute("build_id", buildId);
    j.attribute("model", "model.onnx");
    j.attribute("source_model", srcAbs);
    j.attribute("target", o.target);
    j.attribute("precision", o.precision);
    if (o.target == "cuda") {
      j.attribute("allow_tf32", o.allowTf32);
      std::vector<int> archs = *cudaArchitectures(o.cudaArch);
      j.attributeArray("cuda_arch", [&] {
        for (int a : archs)
          j.value(static_cast<int64_t>(a));
      });
    }
    j.attribute("batch_size", model.batchSize);
    j.attribute("microbatches", o.microbatches);
    j.attribute("microbatch_size", model.batchSize / o.microbatches);
    j.attribute("remat", remat);
    j.attribute("schedule", o.schedule);
    j.attribute("loss", model.lossName);
    j.attribute("loss_stage", lossStage);
    j.attributeObject("optimizer", [&] {
      j.attribute("kind", o.optimizer.kind);
      j.attribute("lr", o.optimizer.lr);
      if (o.optimizer.kind == "sgd") {
        j.attribute("momentum", o.optimizer.momentum);
        j.attribute("nesterov", o.optimizer.nesterov);
      } else {
        j.attributeArray("betas", [&] {
          j.value(o.optimizer.beta1);
          j.value(o.optimizer.beta2);
        });
        j.attribute("eps", o.optimizer.eps);
      }
      j.attribute("weight_decay", o.optimizer.weightDecay);
    });
    j.attributeArray("inputs", [&] {
      for (const ImportedInput &in : model.inputs)
        j.object([&] {
          j.attribute("name", in.name);
          j.attribute("dtype", in.isFloat ? "float32" : "int64");
          j.attributeArray("shape", [&] {
            for (int64_t d : in.shape)
              j.value(d);
          });
          int64_t reader = -1;
          for (auto [i, st] : llvm::enumerate(stages))
            for (const EmittedInput &e : st.inputs)
              if (e.name == in.name && reader < 0)
                reader = i;
          j.attribute("stage", reader);
        });
    });
    j.attributeArray("stages", [&] {
      for (auto [i, stage] : llvm::enumerate(stages))
        j.object([&] {
          j.attribute("index", static_cast<int64_t>(i));
          j.attribute("rank", static_cast<int64_t>(i));
          j.attribute("executable", "stage" + std::to_string(i));
          j.attribute("weights", "weights");
          j.attribute("flops_per_step", stage.flops);
          j.attribute("forward_flops_per_microbatch", stage.forwardFlops);
          j.attribute("backward_flops_per_microbatch", stage.backwardFlops);
          j.attributeArray("inputs", [&] {
            for (const EmittedInput &in : stage.inputs)
              j.value(in.name);
          });
          j.attributeArray("params", [&] {
            for (const EmittedParam &p : stage.params)
              j.object([&] {
                j.attribute("name", p.name);
                j.attribute("file", p.file);
                j.attributeArray("shape", [&] {
                  for (int64_t d : p.shape)
                    j.value(d);
                });
              });
          });
          j.attributeObject("memory", [&] {
            const MemoryPlan &m = stage.memory;
            j.attribute("arena_bytes", m.arenaBytes);
            j.attribute("parameter_bytes", m.parameterBytes);
            j.attribute("optimizer_state_bytes", m.optimizerBytes);
            j.attribute("gradient_bytes", m.gradientBytes);
            j.attribute("activation_bytes_per_microbatch",
                        m.stashBytesPerMicrobatch);
            j.attribute("in_flight_microbatches", m.stashSlots);
            j.attribute("activation_bytes", m.stashBytes);
            j.attribute("transient_peak_bytes", m.transientBytes);
            j.attribute("input_bytes_per_microbatch", m.inputBytes);
            j.attribute("constant_bytes", m.constantBytes);
            if (o.target == "cuda" || o.precision == "bf16")
              j.attribute("bf16_copy_bytes", m.shadowBytes);
            if (o.target == "cuda") {
              j.attribute("arena_constant_bytes", m.arenaConstantBytes);
              j.attribute("scratch_bytes", m.scratchBytes);
              j.attribute("send_staging_bytes", m.sendStagingBytes);
            }
          });
          j.attributeArray("boundaries", [&] {
            for (const EmittedTransfer &t : stage.transfers)
              j.object([&] {
                j.attribute("direction", t.isSend ? "send" : "recv");
                j.attribute("phase", t.phase);
                j.attribute("peer", t.peer);
                j.attribute("tag", t.tag);
                j.attribute("type", t.type);
                j.attribute("bytes", t.bytes);
              });
          });
          j.attributeArray("schedule", [&] {
            for (const std::string &a : stage.schedule)
              j.value(a);
          });
        });
    });
  });
  os << "\n";
  return s;
}

std::string findCxx(const CompileOptions &o) {
  if (!o.cxx.empty())
    return o.cxx;
  if (auto env = llvm::sys::Process::GetEnv("CXX"))
    return *env;
  return GPIPE_HOST_CXX;
}

/// The CUDA compiler: --nvcc, $NVCC, else the one the runtime was built with
/// (empty when gpipe-compile was built without the CUDA target).
std::string findNvcc(const CompileOptions &o) {
  if (!o.nvcc.empty())
    return o.nvcc;
  if (auto env = llvm::sys::Process::GetEnv("NVCC"))
    return *env;
  return GPIPE_CUDA_COMPILER;
}

struct RuntimePaths {
  std::string includeDir, library;
};

/// Where the stage programs' runtime is: $GPIPE_RUNTIME_DIR (a prefix with
/// include/gpipe/runtime.h and lib/gpipe/libgpipe_runtime.a, or
/// libgpipe_runtime_cuda.a for the CUDA target), else next to an installed
/// gpipe-compile (<prefix>/bin/../{include,lib/gpipe}), else the build tree
/// gpipe-compile was built in.
FailureOr<RuntimePaths> findRuntime(bool cuda) {
  std::string lib = cuda ? "libgpipe_runtime_cuda.a" : "libgpipe_runtime.a";
  auto complete =
      [&](const std::string &prefix) -> std::optional<RuntimePaths> {
    RuntimePaths p{prefix + "/include", prefix + "/lib/gpipe/" + lib};
    if (llvm::sys::fs::exists(p.includeDir + "/gpipe/runtime.h") &&
        llvm::sys::fs::exists(p.library))
      return p;
    return std::nullopt;
  };
  if (auto env = llvm::sys::Process::GetEnv("GPIPE_RUNTIME_DIR")) {
    if (auto p = complete(*env))
      return *p;
    (void)fail("GPIPE_RUNTIME_DIR=" + *env +
               " has no include/gpipe/runtime.h and lib/gpipe/" + lib);
    return failure();
  }
  static int anchor;
  std::string exe = llvm::sys::fs::getMainExecutable(nullptr, &anchor);
  llvm::StringRef bin = llvm::sys::path::parent_path(exe);
  if (auto p = complete(llvm::sys::path::parent_path(bin).str()))
    return *p;
  RuntimePaths built{GPIPE_RUNTIME_INCLUDE_DIR,
                     cuda ? GPIPE_RUNTIME_CUDA_LIBRARY : GPIPE_RUNTIME_LIBRARY};
  if (!built.library.empty() && llvm::sys::fs::exists(built.library))
    return built;
  (void)fail("cannot find the runtime library (" + lib +
             "): install gpipe-compile or set GPIPE_RUNTIME_DIR");
  return failure();
}

/// Compiles and links the stage programs with the host C++ compiler (CPU) or
/// nvcc (CUDA), all at once (one compiler process per stage).
LogicalResult buildExecutables(const CompileOptions &o, const std::string &dir,
                               const std::vector<std::string> &names) {
  bool cuda = o.target == "cuda";
  std::string cxx = cuda ? findNvcc(o) : findCxx(o);
  if (cuda && cxx.empty())
    return fail("--target cuda: this gpipe-compile was built without the "
                "CUDA target (no nvcc, cuBLASLt or NCCL at build time); use "
                "--target cpu, or rebuild where the CUDA toolkit is installed");
  auto found = llvm::sys::findProgramByName(cxx);
  if (!found)
    return fail(
        cuda
            ? "cannot find the CUDA compiler '" + cxx + "' (set --nvcc or NVCC)"
            : "cannot find the C++ compiler '" + cxx + "' (set --cxx or CXX)");
  FailureOr<RuntimePaths> runtime = findRuntime(cuda);
  if (failed(runtime))
    return failure();
  llvm::SmallVector<llvm::StringRef> linkFlags;
  llvm::StringRef(cuda ? GPIPE_RUNTIME_CUDA_LINK_FLAGS
                       : GPIPE_RUNTIME_LINK_FLAGS)
      .split(linkFlags, ';', -1, false);
  struct Job {
    std::string name, log;
    llvm::sys::ProcessInfo process;
  };
  std::vector<Job> jobs;
  std::string startError;
  for (const std::string &name : names) {
    std::vector<std::string> args;
    if (cuda) {
      args = {*found, "-std=c++17", "-O3", "-I" + runtime->includeDir};
      // SASS for every architecture, plus PTX of the newest for later GPUs.
      std::vector<int> archs = *cudaArchitectures(o.cudaArch);
      for (int a : archs)
        args.push_back("-gencode=arch=compute_" + std::to_string(a) +
                       ",code=sm_" + std::to_string(a));
      args.push_back("-gencode=arch=compute_" + std::to_string(archs.back()) +
                     ",code=compute_" + std::to_string(archs.back()));
      args.insert(args.end(), {dir + "/" + name + ".cu", "-o", dir + "/" + name,
                               runtime->library});
    } else {
      args = {*found,
              "-std=c++17",
              "-O3",
              "-march=" + o.cpuArch,
              "-fopenmp",
              "-I" + runtime->includeDir,
              dir + "/" + name + ".cpp",
              "-o",
              dir + "/" + name,
              runtime->library};
    }
    for (llvm::StringRef f : linkFlags)
      args.push_back(f.str());
    std::vector<llvm::StringRef> argRefs(args.begin(), args.end());
    Job job{name, dir + "/" + name + ".build.log", {}};
    std::optional<llvm::StringRef> redirects[] = {
        std::nullopt, llvm::StringRef(job.log), llvm::StringRef(job.log)};
    if (o.verbose) {
      llvm::errs() << "gpipe-compile: building " << name << ":";
      for (auto &a : args)
        llvm::errs() << " " << a;
      llvm::errs() << "\n";
    }
    bool failedToStart = false;
    job.process =
        llvm::sys::ExecuteNoWait(*found, argRefs, std::nullopt, redirects, 0,
                                 &startError, &failedToStart);
    if (failedToStart)
      break;
    jobs.push_back(std::move(job));
  }
  // Wait for every job, even after a failure, so none outlives the compile.
  std::string failedName;
  int failedRc = 0;
  std::string failedError;
  for (Job &job : jobs) {
    std::string err;
    llvm::sys::ProcessInfo done =
        llvm::sys::Wait(job.process, std::nullopt, &err);
    if (done.ReturnCode != 0 && failedName.empty()) {
      failedName = job.name;
      failedRc = done.ReturnCode;
      failedError = err;
    } else if (done.ReturnCode == 0) {
      llvm::sys::fs::remove(job.log);
    }
  }
  if (jobs.size() != names.size())
    return fail(std::string("cannot run the ") + (cuda ? "CUDA" : "C++") +
                " compiler " + *found + ": " + startError);
  if (!failedName.empty()) {
    errorLine() << "building " << failedName << " failed (exit " << failedRc
                << ")" << (failedError.empty() ? "" : ": " + failedError)
                << "; compiler output:\n";
    if (auto buf =
            llvm::MemoryBuffer::getFile(dir + "/" + failedName + ".build.log"))
      llvm::errs() << (*buf)->getBuffer().take_back(4000);
    return failure();
  }
  return success();
}

/// Whether `name` is a file gpipe-compile writes into an output directory.
bool ownedByCompiler(llvm::StringRef name) {
  if (name == "pipeline.json" || name == "model.onnx" || name == "weights" ||
      name == "pipeline.mlir" || name == "pipeline.import.mlir")
    return true;
  if (!name.consume_front("stage"))
    return false;
  llvm::StringRef digits = name.take_while(llvm::isDigit);
  if (digits.empty())
    return false;
  name = name.drop_front(digits.size());
  return name.empty() || name == ".cpp" || name == ".cu" || name == ".mlir" ||
         name == ".import.mlir" || name == ".build.log";
}

/// Moves every entry of `staging` into `out`. The compiler's files from an
/// earlier compile (including ones this compile does not write, like a
/// stage0 left from --emit exe under --emit cpp) are moved aside first and
/// deleted only once every new file is in place; if a move fails, OUT is
/// restored as it was. Other files (trained weights, logs) are left alone.
LogicalResult publish(const std::string &staging, const std::string &out) {
  namespace fs = llvm::sys::fs;
  if (std::error_code ec = fs::create_directories(out))
    return fail("cannot create the output directory " + out + ": " +
                ec.message());
  std::string backup =
      out + ".gpipe-old-" + std::to_string(llvm::sys::Process::getProcessId());
  fs::remove_directories(backup);
  if (std::error_code ec = fs::create_directories(backup))
    return fail("cannot create " + backup + ": " + ec.message());
  auto list = [](const std::string &dir, bool ownedOnly) {
    std::vector<std::string> names;
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; it != end && !ec;
         it.increment(ec)) {
      std::string name = llvm::sys::path::filename(it->path()).str();
      if (!ownedOnly || ownedByCompiler(name))
        names.push_back(name);
    }
    return names;
  };
  std::vector<std::string> asideNames, inNames;
  auto rollback = [&](const llvm::Twine &msg) {
    for (const std::string &name : inNames)
      (void)fs::rename(out + "/" + name, staging + "/" + name);
    for (const std::string &name : asideNames)
      (void)fs::rename(backup + "/" + name, out + "/" + name);
    fs::remove_directories(backup);
    return fail(msg);
  };
  for (const std::string &name : list(out, /*ownedOnly=*/true)) {
    if (std::error_code ec = fs::rename(out + "/" + name, backup + "/" + name))
      return rollback("cannot move " + out + "/" + name +
                      " aside: " + ec.message());
    asideNames.push_back(name);
  }
  for (const std::string &name : list(staging, /*ownedOnly=*/false)) {
    if (std::error_code ec = fs::rename(staging + "/" + name, out + "/" + name))
      return rollback("cannot move " + staging + "/" + name + " to " + out +
                      ": " + ec.message());
    inNames.push_back(name);
  }
  fs::remove_directories(backup);
  fs::remove_directories(staging);
  return success();
}

/// --explain: for each stage, its parameters, its forward ops with their
/// ONNX node, result type and cost, the tensors crossing its boundaries, its
/// schedule and its memory plan.
void explainStage(int64_t index, func::FuncOp forward,
                  const EmittedStage &stage, const std::string &remat,
                  int64_t microbatches, bool cuda) {
  const MemoryPlan &m = stage.memory;
  llvm::raw_ostream &os = llvm::outs();
  llvm::SmallVector<Operation *> ops;
  forward.walk([&](Operation *op) {
    if (isa<nn::NNDialect>(op->getDialect()) &&
        !isa<nn::ParamOp, nn::ConstantOp, nn::ReshapeOp>(op))
      ops.push_back(op);
  });
  os << "stage " << index << " (rank " << index << "): " << ops.size()
     << " forward ops, " << stage.params.size() << " parameters, "
     << llvm::format("%.6g", stage.forwardFlops / 1e6) << " MFLOP forward + "
     << llvm::format("%.6g", stage.backwardFlops / 1e6)
     << " MFLOP backward per micro-batch, "
     << llvm::format("%.6g", stage.flops / 1e6) << " MFLOP per step\n";
  os << "  parameters:\n";
  for (const EmittedParam &p : stage.params) {
    os << "    " << p.name << " [";
    llvm::interleave(p.shape, os, "x");
    os << "]\n";
  }
  if (!stage.inputs.empty()) {
    os << "  reads:";
    for (const EmittedInput &in : stage.inputs)
      os << " " << in.name;
    os << "\n";
  }
  os << "  forward ops:\n";
  for (Operation *op : ops) {
    std::string type;
    llvm::raw_string_ostream ts(type);
    ts << op->getResult(0).getType();
    int64_t flops = 0;
    if (auto cost = dyn_cast<nn::CostOpInterface>(op))
      flops = cost.getFlops();
    os << "    " << llvm::left_justify(op->getName().getStringRef(), 30) << " "
       << llvm::left_justify(type, 24) << " "
       << llvm::format("%10lld", static_cast<long long>(flops)) << " FLOP";
    if (auto name = dyn_cast<NameLoc>(op->getLoc()))
      os << "  node '" << name.getName().getValue() << "'";
    os << "\n";
  }
  os << "  boundary tensors:";
  if (stage.transfers.empty())
    os << " none";
  os << "\n";
  for (const EmittedTransfer &t : stage.transfers)
    os << "    " << t.phase << " " << (t.isSend ? "send to" : "recv from")
       << " stage " << t.peer << " tag " << t.tag << " " << t.type << " ("
       << t.bytes << " bytes)\n";
  os << "  schedule:";
  for (const std::string &a : stage.schedule)
    os << " " << a;
  os << "\n";
  os << "  activation memory per in-flight micro-batch: "
     << m.stashBytesPerMicrobatch << " bytes (remat " << remat << ")\n";
  os << "  peak activation memory: " << m.stashBytes << " bytes ("
     << m.stashSlots << " of " << microbatches
     << " micro-batches in flight under this schedule)\n";
  int64_t parts = m.parameterBytes + m.optimizerBytes + m.gradientBytes +
                  m.stashBytes + m.transientBytes + m.arenaConstantBytes +
                  m.shadowBytes;
  os << "  memory: arena " << m.arenaBytes << " bytes (" << (cuda ? 256 : 64)
     << "-byte aligned) = parameters " << m.parameterBytes
     << " + optimizer state " << m.optimizerBytes << " + gradients "
     << m.gradientBytes << " + activations " << m.stashBytes << " ("
     << m.stashSlots << " x " << m.stashBytesPerMicrobatch << ") + temporaries "
     << m.transientBytes;
  if (cuda)
    os << " + constants " << m.arenaConstantBytes;
  if (cuda || m.shadowBytes)
    os << " + bf16 copies " << m.shadowBytes;
  os << " + alignment " << m.arenaBytes - parts << "\n";
  if (cuda)
    os << "  device memory outside the arena: bf16 scratch " << m.scratchBytes
       << " + send staging " << m.sendStagingBytes
       << " bytes (+ the runtime's 32 MiB cuBLASLt workspace)\n";
}

/// Prints diagnostics as "gpipe-compile: error: FILE: node 'N': message".
LogicalResult printDiagnostic(Diagnostic &diag) {
  const char *kind = diag.getSeverity() == DiagnosticSeverity::Error ? "error"
                     : diag.getSeverity() == DiagnosticSeverity::Warning
                         ? "warning"
                         : "note";
  llvm::errs() << "gpipe-compile: " << kind << ": "
               << describe(diag.getLocation()) << diag.str() << "\n";
  for (const Diagnostic &note : diag.getNotes())
    llvm::errs() << "  note: " << describe(note.getLocation()) << note.str()
                 << "\n";
  return success();
}

std::string printModule(ModuleOp module) {
  std::string text;
  llvm::raw_string_ostream os(text);
  module.print(os, OpPrintingFlags().enableDebugInfo(false));
  return text;
}

} // namespace

int gpipe::compile(const CompileOptions &o) {
  if (failed(validate(o)))
    return 2;
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
  FailureOr<ImportedModel> model = importOnnxModel(ctx, o.modelPath, io);
  if (failed(model))
    return 1;
  for (const std::string &note : model->notes)
    llvm::errs() << "gpipe-compile: note: " << o.modelPath << ": " << note
                 << "\n";
  ModuleOp module = *model->module;
  bool toStdout = o.outDir == "-";
  if (o.emit == "import" && toStdout) {
    llvm::outs() << printModule(module);
    return 0;
  }
  if (model->batchSize % o.microbatches != 0) {
    errorLine() << "--microbatches " << o.microbatches
                << " does not divide the mini-batch size " << model->batchSize
                << " (--batch-size, or the model's batch)\n";
    return 2;
  }
  // auto: rematerialize whenever a micro-batch's activations stay in flight
  // while others run, i.e. in every pipeline but one stage on one batch.
  std::string remat = o.remat;
  if (remat == "auto")
    remat = (o.stages > 1 || o.microbatches > 1) ? "stage" : "none";

  std::string mlirText;
  if (o.emit != "import") {
    PassManager pm(&ctx);
    auto &fpm = pm.nest<func::FuncOp>();
    MicrobatchOptions mb;
    mb.microbatches = o.microbatches;
    fpm.addPass(createMicrobatch(mb));
    PartitionOptions part;
    part.stages = o.stages;
    fpm.addPass(createPartition(part));
    fpm.addPass(createAutodiff());
    fpm.addPass(createOptimizer(optimizerPassOptions(o.optimizer)));
    pm.addPass(createCSEPass());
    pm.addPass(createOutlineStages());
    RematOptions rm;
    rm.mode = remat;
    pm.addPass(createRemat(rm));
    ScheduleOptions sched;
    sched.schedule = o.schedule;
    pm.addPass(createSchedule(sched));
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
    buildId = llvm::utohexstr(h, /*LowerCase=*/true);
  }
  // The explanation reads the forward functions, which emission leaves as
  // they are.
  std::vector<EmittedStage> stages;
  std::vector<std::string> names, takenFiles;
  std::vector<func::FuncOp> forwards;
  for (int64_t s = 0; s < o.stages; ++s) {
    names.push_back("stage" + std::to_string(s));
    EmitOptions eo;
    eo.cuda = o.target == "cuda";
    eo.bf16 = o.precision == "bf16";
    eo.allowTf32 = o.allowTf32;
    FailureOr<EmittedStage> stage =
        emitStageCpp(module, s, names.back(), takenFiles, buildId, eo);
    if (failed(stage))
      return cleanupAndFail();
    stages.push_back(std::move(*stage));
    for (auto f : module.getOps<func::FuncOp>())
      if (auto a = f->getAttrOfType<IntegerAttr>("pipe.stage"))
        if (a.getInt() == s &&
            f->getAttrOfType<StringAttr>("pipe.phase").getValue() == "forward")
          forwards.push_back(f);
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
      if (!src || !npyWriteF32(weights + "/" + p.file, src->data.data(),
                               p.shape.data(), p.shape.size(), err)) {
        errorLine() << "cannot write the weights of '" << p.name << "': " << err
                    << "\n";
        return cleanupAndFail();
      }
    }
  llvm::SmallString<256> srcAbs(o.modelPath);
  llvm::sys::fs::make_absolute(srcAbs);
  if (failed(writeFile(staging + "/model.onnx", model->originalModel)) ||
      failed(writeFile(staging + "/pipeline.json",
                       pipelineJson(o, *model, stages, remat,
                                    srcAbs.str().str(), buildId))) ||
      failed(writeFile(staging + "/pipeline.mlir", mlirText)))
    return cleanupAndFail();
  for (auto [name, stage] : llvm::zip(names, stages))
    if (failed(writeFile(staging + "/" + name +
                             (o.target == "cuda" ? ".cu" : ".cpp"),
                         stage.source)))
      return cleanupAndFail();

  if (o.explain)
    for (auto [s, stage] : llvm::enumerate(stages))
      explainStage(s, forwards[s], stage, remat, o.microbatches,
                   o.target == "cuda");

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
               << (o.stages == 1 ? " stage" : " stages") << ", batch "
               << model->batchSize << " in " << o.microbatches
               << (o.microbatches == 1 ? " micro-batch" : " micro-batches")
               << ", remat " << remat << ", " << numParams
               << " parameters, largest arena " << maxArena << " bytes\n";
  return 0;
}
