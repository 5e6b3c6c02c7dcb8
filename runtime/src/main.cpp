// gp_main: command line, joining the other stages, weight/data loading, the
// schedule loop, logging and weight output of a generated stage program.
#include "internal.h"

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <sys/stat.h>
#include <vector>

namespace gpipe {

void printError(int32_t stage, const std::string &msg) {
  if (stage >= 0)
    std::fprintf(stderr, "gpipe: error: stage %d: %s\n", stage, msg.c_str());
  else
    std::fprintf(stderr, "gpipe: error: %s\n", msg.c_str());
  std::fflush(stderr);
}

void fatal(const gp_step_ctx *ctx, int code, const std::string &msg) {
  const Runtime *rt =
      ctx ? static_cast<const Runtime *>(ctx->runtime) : nullptr;
  fatalInStage(rt ? rt->stage : -1, code, msg);
}

void fatalInStage(int32_t stage, int code, const std::string &msg) {
  printError(stage, msg);
  std::fflush(stdout);
  statusWriteExit(code);
  if (transportActive())
    transportAbort(code);
  std::exit(code);
}

namespace {

const char kUsage[] =
    "usage: %s [options]\n"
    "  --data DIR          one <input name>.npy per graph input (first axis "
    "= sample)\n"
    "  --steps N           optimizer steps (default 1; mini-batches in order, "
    "wrapping)\n"
    "  --weights-in DIR    initial parameters (default \"weights\")\n"
    "  --weights-out DIR   write the trained parameters there at the end\n"
    "  --log-json FILE     one JSON object per step: "
    "{\"step\":1,\"loss\":..,\"ms\":..} (loss stage only)\n"
    "  --threads T         CPU target: OpenMP threads (oneDNN GEMMs, generated "
    "loops;\n"
    "                      default 1)\n"
    "  --device N          CUDA target: the GPU to use (default: the stage's "
    "rank on\n"
    "                      its node modulo the visible GPUs)\n"
    "  --comm-timeout S    CUDA target: end the run when a step's transfers "
    "make no\n"
    "                      progress for S seconds (default 300)\n"
    "  --status-file FILE  \"exit <code>\" at the end, \"signal <n>\" on a "
    "crash\n"
    "  --pipeline FILE     check that FILE (the pipeline.json compiled with "
    "this\n"
    "                      executable) describes it\n"
    "  --heartbeat FILE    rewrite FILE every 0.5 s with the pid, host and "
    "progress\n"
    "                      (gpipe-run's watchdog); the stage also dies with "
    "its parent\n"
    "  --on-nan stop|continue  a NaN or infinite loss ends the run at its "
    "step,\n"
    "                      without writing weights (stop, the default), or "
    "is only\n"
    "                      printed (continue)\n"
    "  --quiet             no per-step lines on stdout\n"
    "  --help              this message\n"
    "Stage %d of %d: a multi-stage pipeline runs under MPI, one rank per "
    "stage (use gpipe-run).\n";

struct Options {
  std::string data;
  bool haveData = false;
  int64_t steps = 1;
  std::string weightsIn = "weights";
  std::string weightsOut;
  std::string logJson;
  std::string statusFile;
  std::string pipeline;
  std::string heartbeat;
  bool stopOnNan = true; // --on-nan stop (else continue)
  int64_t threads = 1;
  int64_t device = -1;
  double commTimeout = 300.0;
  bool quiet = false;
  bool help = false;
};

bool parseInt(const std::string &s, int64_t minValue, int64_t &out) {
  if (s.empty())
    return false;
  errno = 0;
  char *end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || v < minValue)
    return false;
  out = v;
  return true;
}

/// Parses argv into `opt`; on a usage error returns false with `err` set
/// (reported once MPI is up, so that the other stages are torn down).
bool parseArgs(int argc, char **argv, Options &opt, std::string &err) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      opt.help = true;
      continue;
    }
    if (arg == "--quiet") {
      opt.quiet = true;
      continue;
    }
    // Accept both "--flag value" and "--flag=value".
    std::string flag = arg, value;
    bool inlineValue = false;
    size_t eq = arg.find('=');
    if (arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      flag = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      inlineValue = true;
    }
    if (flag != "--data" && flag != "--steps" && flag != "--weights-in" &&
        flag != "--weights-out" && flag != "--log-json" &&
        flag != "--threads" && flag != "--status-file" &&
        flag != "--pipeline" && flag != "--device" &&
        flag != "--comm-timeout" && flag != "--heartbeat" &&
        flag != "--on-nan") {
      if (arg.rfind("-", 0) == 0)
        err = "unknown flag '" + flag + "' (see --help)";
      else
        err = "unexpected argument '" + arg + "' (see --help)";
      return false;
    }
    if (!inlineValue) {
      if (i + 1 >= argc) {
        err = "flag '" + flag + "' requires a value";
        return false;
      }
      value = argv[++i];
    }
    if (value.empty()) {
      err = "flag '" + flag + "' requires a non-empty value";
      return false;
    }
    if (flag == "--data") {
      opt.data = value;
      opt.haveData = true;
    } else if (flag == "--steps") {
      if (!parseInt(value, 0, opt.steps)) {
        err = "invalid value '" + value +
              "' for --steps (expected an integer >= 0)";
        return false;
      }
    } else if (flag == "--threads") {
      if (!parseInt(value, 1, opt.threads) || opt.threads > 4096) {
        err = "invalid value '" + value +
              "' for --threads (expected an integer in [1, 4096])";
        return false;
      }
    } else if (flag == "--device") {
      if (!parseInt(value, 0, opt.device) || opt.device > 1024) {
        err = "invalid value '" + value +
              "' for --device (expected an integer in [0, 1024])";
        return false;
      }
    } else if (flag == "--comm-timeout") {
      errno = 0;
      char *end = nullptr;
      double v = std::strtod(value.c_str(), &end);
      if (errno != 0 || *end != '\0' || !(v > 0.0) || v > 1e6) {
        err = "invalid value '" + value +
              "' for --comm-timeout (expected seconds in (0, 1e6])";
        return false;
      }
      opt.commTimeout = v;
    } else if (flag == "--weights-in") {
      opt.weightsIn = value;
    } else if (flag == "--weights-out") {
      opt.weightsOut = value;
    } else if (flag == "--status-file") {
      opt.statusFile = value;
    } else if (flag == "--pipeline") {
      opt.pipeline = value;
    } else if (flag == "--heartbeat") {
      opt.heartbeat = value;
    } else if (flag == "--on-nan") {
      if (value != "stop" && value != "continue") {
        err = "invalid value '" + value +
              "' for --on-nan (expected 'stop' or 'continue')";
        return false;
      }
      opt.stopOnNan = value == "stop";
    } else {
      opt.logJson = value;
    }
  }
  return true;
}

std::string joinPath(const std::string &dir, const std::string &file) {
  if (dir.empty() || dir.back() == '/')
    return dir + file;
  return dir + "/" + file;
}

bool fileExists(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

int64_t numElements(const gp_tensor_desc &d) {
  int64_t n = 1;
  for (int32_t i = 0; i < d.rank; ++i)
    n *= d.shape[i];
  return n;
}

/// The message of --on-nan stop.
std::string lossNotFinite(int64_t step, double loss) {
  return "step " + std::to_string(step) + ": the loss is " +
         (std::isnan(loss) ? "nan"
          : loss > 0       ? "inf"
                           : "-inf") +
         "; the run stops here without writing the trained weights (--on-nan "
         "stop)";
}

/// One run of a stage program; every error prints its line and returns the
/// exit code.
class StageRun {
public:
  StageRun(const gp_program *program, const Options &opt)
      : program_(program), opt_(opt), stage_(program->stage) {}

  /// Runs the stage, then releases the device (before MPI_Finalize).
  int run() {
    int rc = runSteps();
    // After an error with other stages running, the job is aborted first
    // (finish): tearing down now could wait forever on transfers a peer
    // never completes, and pending CUDA host functions still point at this
    // run's state.
    if (rc != 0 && program_->num_stages > 1)
      return rc;
    deviceShutdown();
    return rc;
  }

private:
  int runSteps();
  int error(const std::string &msg) {
    printError(stage_, msg);
    return 1;
  }
  bool checkDesc(const gp_tensor_desc &d, bool inArena, const char *what);
  int checkProgram();
  int agreeWithOtherStages();
  int sameSamplesAsOtherStages();
  int loadParams();
  int writeParams();

  const gp_program *program_;
  const Options &opt_;
  int32_t stage_;
  int32_t lossStage_ = -1; // the stage with has_loss, -1 if none
  bool logger_ = false;    // prints the steps: the loss stage, else stage 0
  unsigned char *arena_ = nullptr; // owned by the device
  Runtime rt_;
};

/// Catches code generator bugs (descriptors outside the arena) as errors.
bool StageRun::checkDesc(const gp_tensor_desc &d, bool inArena,
                         const char *what) {
  const char *name = d.name ? d.name : "?";
  bool ok = d.name && d.rank >= 0 && (d.rank == 0 || d.shape) &&
            d.offset >= 0 && (d.dtype == GP_F32 || d.dtype == GP_I64);
  for (int32_t i = 0; ok && i < d.rank; ++i)
    ok = d.shape[i] >= 0;
  if (ok && inArena)
    ok =
        d.offset + numElements(d) * dtypeSize(d.dtype) <= program_->arena_bytes;
  if (!ok)
    error(std::string("invalid program: ") + what + " '" + name +
          "' is malformed or does not fit the arena");
  return ok;
}

int StageRun::checkProgram() {
  const gp_program &p = *program_;
  if (p.arena_bytes < 0 || p.num_inputs < 0 || p.num_params < 0 ||
      p.num_actions < 0 || (p.num_inputs > 0 && !p.inputs) ||
      (p.num_params > 0 && !p.params) || (p.num_actions > 0 && !p.actions) ||
      p.num_transfers < 0 || (p.num_transfers > 0 && !p.transfers))
    return error("invalid program description");
  if (p.target != deviceTarget()) {
    auto name = [](int32_t t) {
      return t == GP_TARGET_CPU    ? std::string("cpu")
             : t == GP_TARGET_CUDA ? std::string("cuda")
                                   : "unknown (" + std::to_string(t) + ")";
    };
    return error("invalid program: compiled for target " + name(p.target) +
                 " but linked with the " + name(deviceTarget()) + " runtime");
  }
  if (p.scratch_bytes < 0)
    return error("invalid program description");
  if (p.microbatches < 1 || p.batch_size < 1 ||
      p.batch_size % p.microbatches != 0)
    return error("invalid program: batch size " + std::to_string(p.batch_size) +
                 " is not a positive multiple of the " +
                 std::to_string(p.microbatches) + " micro-batch(es)");
  for (int32_t i = 0; i < p.num_actions; ++i) {
    const gp_action &a = p.actions[i];
    bool ok;
    switch (a.kind) {
    case GP_FORWARD:
      ok = p.forward && a.microbatch >= 0 && a.microbatch < p.microbatches;
      break;
    case GP_BACKWARD:
      ok = p.backward && a.microbatch >= 0 && a.microbatch < p.microbatches;
      break;
    case GP_UPDATE:
      ok = p.update != nullptr;
      break;
    default:
      ok = false;
    }
    if (!ok)
      return error("invalid program: schedule entry " + std::to_string(i) +
                   " (kind " + std::to_string(static_cast<int>(a.kind)) +
                   ", micro-batch " + std::to_string(a.microbatch) +
                   ") is malformed");
  }
  int64_t microRows = p.batch_size / p.microbatches;
  for (int32_t i = 0; i < p.num_inputs; ++i) {
    const gp_tensor_desc &d = p.inputs[i];
    if (!checkDesc(d, /*inArena=*/false, "input"))
      return 1;
    if (d.rank < 1 || d.shape[0] != microRows)
      return error(std::string("invalid program: input '") + d.name +
                   "' needs a micro-batch dimension of " +
                   std::to_string(microRows) + " (batch " +
                   std::to_string(p.batch_size) + " / " +
                   std::to_string(p.microbatches) + " micro-batches)");
  }
  for (int32_t i = 0; i < p.num_params; ++i) {
    const gp_tensor_desc &d = p.params[i];
    if (!checkDesc(d, /*inArena=*/true, "parameter"))
      return 1;
    if (d.dtype != GP_F32 || !d.file)
      return error(std::string("invalid program: parameter '") + d.name +
                   "' must be float32 with a weight file name");
  }
  return 0;
}

/// Multi-stage: every rank shares (has_loss, K, M, B); all must describe the
/// same pipeline and at most one stage computes the loss.
int StageRun::agreeWithOtherStages() {
  const int n = 4;
  int64_t mine[n] = {program_->has_loss ? 1 : 0, program_->num_stages,
                     program_->microbatches, program_->batch_size};
  std::vector<int64_t> all;
  std::string err;
  if (!transportAllGather(mine, n, all, err))
    return error(err);
  auto describe = [&](int32_t s) {
    const int64_t *v = &all[static_cast<size_t>(s) * n];
    return "stage " + std::to_string(s) + " (of a " + std::to_string(v[1]) +
           "-stage pipeline, batch " + std::to_string(v[3]) + " in " +
           std::to_string(v[2]) + " micro-batches)";
  };
  std::string problem;
  for (int32_t s = 0; s < program_->num_stages && problem.empty(); ++s) {
    const int64_t *v = &all[static_cast<size_t>(s) * n];
    if (v[1] != all[1] || v[2] != all[2] || v[3] != all[3])
      problem =
          describe(s) + " and " + describe(0) + " were not compiled together";
    else if (v[0] && lossStage_ >= 0)
      problem = "invalid pipeline: stages " + std::to_string(lossStage_) +
                " and " + std::to_string(s) + " both compute the loss";
    else if (v[0])
      lossStage_ = s;
  }
  if (!problem.empty()) {
    // Every rank sees the same table: stage 0 reports it, the others wait to
    // be torn down.
    if (stage_ != 0)
      transportWaitForAbort();
    return error(problem);
  }
  return 0;
}

/// Multi-stage: the stages read different files (x.npy on the first, y.npy
/// on the last); they must have the same number of samples, or the stages
/// would wrap around at different steps and train on mismatched rows.
int StageRun::sameSamplesAsOtherStages() {
  int64_t mine = rt_.inputs.empty() ? -1 : rt_.inputs[0].file.shape()[0];
  std::vector<int64_t> all;
  std::string err;
  if (!transportAllGather(&mine, 1, all, err))
    return error(err);
  int32_t ref = -1;
  for (int32_t s = 0; s < program_->num_stages; ++s) {
    if (all[s] < 0)
      continue;
    if (ref < 0) {
      ref = s;
      continue;
    }
    if (all[s] == all[ref])
      continue;
    // The first stage that disagrees reports; the others wait for the abort.
    if (s != stage_)
      transportWaitForAbort();
    return error(rt_.inputs[0].path + " has " + std::to_string(all[s]) +
                 " samples but stage " + std::to_string(ref) +
                 "'s data files have " + std::to_string(all[ref]) +
                 " (every graph input needs the same number of samples)");
  }
  return 0;
}

int StageRun::loadParams() {
  for (int32_t i = 0; i < program_->num_params; ++i) {
    const gp_tensor_desc &d = program_->params[i];
    std::string path = joinPath(opt_.weightsIn, d.file);
    if (!fileExists(path))
      return error("missing weight file " + path + " for parameter '" + d.name +
                   "'");
    NpyFile f;
    std::string err;
    if (!f.open(path, GP_F32, err))
      return error(err);
    if (f.shape() != std::vector<int64_t>(d.shape, d.shape + d.rank))
      return error(path + ": expected shape " +
                   shapeToString(d.shape, static_cast<size_t>(d.rank)) +
                   " for parameter '" + d.name + "', found " +
                   shapeToString(f.shape()));
    if (!deviceUpload(arena_ + d.offset, f.data(), f.dataBytes(), err))
      return error("loading " + path + ": " + err);
  }
  return 0;
}

int StageRun::writeParams() {
  std::error_code ec;
  std::filesystem::create_directories(opt_.weightsOut, ec);
  if (ec)
    return error("cannot create directory " + opt_.weightsOut + ": " +
                 ec.message());
  std::vector<float> host;
  for (int32_t i = 0; i < program_->num_params; ++i) {
    const gp_tensor_desc &d = program_->params[i];
    std::string path = joinPath(opt_.weightsOut, d.file);
    host.resize(static_cast<size_t>(numElements(d)));
    std::string err;
    if (!deviceDownload(host.data(), arena_ + d.offset,
                        numElements(d) * static_cast<int64_t>(sizeof(float)),
                        err))
      return error("reading parameter '" + std::string(d.name) + "': " + err);
    // The file name may contain directories of its own.
    std::filesystem::create_directories(
        std::filesystem::path(path).parent_path(), ec);
    if (ec)
      return error("cannot create directory for " + path + ": " + ec.message());
    if (!npyWriteF32(path, host.data(), d.shape, static_cast<size_t>(d.rank),
                     err))
      return error(err);
  }
  return 0;
}

int StageRun::runSteps() {
  if (int rc = checkProgram())
    return rc;
  if (!opt_.pipeline.empty()) {
    std::string err;
    if (!checkPipelineFile(*program_, opt_.pipeline, err))
      return error(err);
  }
  if (program_->num_stages > 1) {
    if (int rc = agreeWithOtherStages())
      return rc;
  } else {
    lossStage_ = program_->has_loss ? 0 : -1;
  }
  logger_ = stage_ == (lossStage_ >= 0 ? lossStage_ : 0);
  if (program_->num_inputs > 0 && !opt_.haveData) {
    error("--data DIR is required: the program has " +
          std::to_string(program_->num_inputs) + " graph input(s)");
    return 2;
  }

  std::string err;
  DeviceOptions deviceOptions;
  deviceOptions.threads = opt_.threads;
  deviceOptions.device = opt_.device;
  deviceOptions.commTimeoutSeconds = opt_.commTimeout;
  if (!deviceInit(*program_, deviceOptions, err))
    return error(err);
  if (program_->num_stages > 1 && program_->buffered_sends) {
    if (program_->target != GP_TARGET_CPU)
      return error("invalid program: its schedule needs buffered sends, "
                   "which only the CPU runtime has");
    if (!transportUseBufferedSends(*program_, err))
      return error(err);
  }
  // The arena, allocated once and zeroed: nothing is allocated in the steps.
  arena_ = deviceAllocArena(program_->arena_bytes, err);
  if (!arena_)
    return error(err);

  if (int rc = loadParams())
    return rc;

  rt_.program = program_;
  rt_.stage = stage_;
  rt_.batchSize = program_->batch_size;
  rt_.microRows = program_->batch_size / program_->microbatches;
  int64_t numBatches = 0;
  if (!openInputs(rt_, opt_.data, numBatches, err))
    return error(err);
  if (program_->num_stages > 1)
    if (int rc = sameSamplesAsOtherStages())
      return rc;

  // Only the logging stage writes the log (all stages get the same flag).
  FILE *log = nullptr;
  if (logger_ && !opt_.logJson.empty()) {
    log = std::fopen(opt_.logJson.c_str(), "w");
    if (!log)
      return error("cannot open log file " + opt_.logJson + ": " +
                   std::strerror(errno));
  }
  std::unique_ptr<FILE, int (*)(FILE *)> logCloser(
      log, [](FILE *f) { return f ? std::fclose(f) : 0; });

  gp_step_ctx ctx{};
  ctx.arena = arena_;
  ctx.runtime = &rt_;
  // The mini-batch after step s (data files wrap around); -1: none.
  auto nextMiniFirst = [&](int64_t s) -> int64_t {
    if (s >= opt_.steps || numBatches == 0)
      return -1;
    return s % numBatches * rt_.batchSize;
  };
  if (program_->init)
    program_->init(&ctx);
  // Asynchronous targets may start loading step 1's mini-batch here.
  rt_.nextMiniFirst = nextMiniFirst(0);
  if (!deviceStepEnd(ctx, err))
    return error(err);
  double totalMs = 0.0;
  for (int64_t s = 1; s <= opt_.steps; ++s) {
    // Stages without data files (middle stages) still count steps; their
    // first_sample is relative to an unknown mini-batch and unused.
    int64_t batch = numBatches ? (s - 1) % numBatches : 0;
    rt_.miniFirst = batch * rt_.batchSize;
    ctx.step = s;
    ctx.loss = 0.0;
    ctx.microbatch = 0;
    ctx.first_sample = rt_.miniFirst;
    auto t0 = std::chrono::steady_clock::now();
    for (int32_t i = 0; i < program_->num_actions; ++i) {
      const gp_action &a = program_->actions[i];
      heartbeatAction(s, a);
      if (a.kind == GP_UPDATE) {
        ctx.first_sample = rt_.miniFirst;
        program_->update(&ctx);
        continue;
      }
      ctx.microbatch = a.microbatch;
      ctx.first_sample = rt_.miniFirst + a.microbatch * rt_.microRows;
      if (a.kind == GP_FORWARD)
        program_->forward(&ctx, a.microbatch);
      else
        program_->backward(&ctx, a.microbatch);
    }
    // Asynchronous targets finish the step's work here, and report its loss
    // (and may load the next mini-batch while it runs).
    rt_.nextMiniFirst = nextMiniFirst(s);
    if (!deviceStepEnd(ctx, err))
      return error("step " + std::to_string(s) + ": " + err);
    auto t1 = std::chrono::steady_clock::now();
    double ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
    totalMs += ms;
    if (!logger_)
      continue;
    double loss = program_->has_loss ? ctx.loss
                                     : std::numeric_limits<double>::quiet_NaN();
    if (!opt_.quiet) {
      if (std::isnan(loss))
        std::printf("step %lld loss nan\n", static_cast<long long>(s));
      else
        std::printf("step %lld loss %.6f\n", static_cast<long long>(s), loss);
      // Progress must be visible through pipes, and survive a later crash.
      std::fflush(stdout);
    }
    if (log) {
      // JSON has no NaN/Infinity literals.
      char lossStr[32] = "null";
      if (std::isfinite(loss))
        std::snprintf(lossStr, sizeof(lossStr), "%.9g", loss);
      if (std::fprintf(log, "{\"step\":%lld,\"loss\":%s,\"ms\":%.6f}\n",
                       static_cast<long long>(s), lossStr, ms) < 0 ||
          std::fflush(log) != 0)
        return error("cannot write log file " + opt_.logJson + ": " +
                     std::strerror(errno));
    }
    if (program_->has_loss && opt_.stopOnNan && !std::isfinite(loss))
      return error(lossNotFinite(s, loss));
  }
  heartbeatPhase("after the last step");
  std::fflush(stdout);
  if (log) {
    logCloser.release();
    if (std::fclose(log) != 0)
      return error("cannot write log file " + opt_.logJson + ": " +
                   std::strerror(errno));
  }
  if (logger_)
    std::fprintf(stderr, "gpipe: %lld steps, mean %.3f ms/step (%s)\n",
                 static_cast<long long>(opt_.steps),
                 opt_.steps ? totalMs / static_cast<double>(opt_.steps) : 0.0,
                 deviceDescription().c_str());

  if (opt_.weightsOut.empty())
    return 0;
  // Every stage finished its steps (none stopped at a bad loss) before any
  // writes its weights: no partial set of trained weights.
  if (program_->num_stages > 1) {
    int64_t done = 1;
    std::vector<int64_t> all;
    if (!transportAllGather(&done, 1, all, err))
      return error(err);
  }
  heartbeatPhase("writing the trained weights");
  return writeParams();
}

/// Ends gp_main: a failure with other stages running aborts them all (after
/// the status file); otherwise leaves MPI, writes the status, returns.
int finish(int code) {
  heartbeatPhase("finishing");
  std::fflush(stdout);
  if (code != 0 && transportActive()) {
    statusWriteExit(code);
    transportAbort(code);
  }
  transportFinalize();
  statusWriteExit(code);
  statusReset();
  heartbeatStop();
  return code;
}

} // namespace
} // namespace gpipe

extern "C" int gp_main(int argc, char **argv, const gp_program *program) {
  using namespace gpipe;
  if (!program) {
    printError(-1, "no program");
    return 1;
  }
  const char *prog = argc > 0 && argv && argv[0] ? argv[0] : "stage";
  int32_t stage = program->stage;
  Options opt;
  std::string usageErr;
  bool usageOk = parseArgs(argc, argv, opt, usageErr);
  if (usageOk && opt.help) {
    std::printf(kUsage, prog, program->stage, program->num_stages);
    return 0;
  }
  if (!opt.statusFile.empty() && !statusSetPath(opt.statusFile) && usageOk) {
    usageOk = false;
    usageErr = "--status-file path is too long";
  }
  // Before joining the other stages: a stage stuck there is seen too.
  if (usageOk && !opt.heartbeat.empty() &&
      !heartbeatStart(opt.heartbeat, stage, usageErr))
    usageOk = false;
  if (program->num_stages < 1 || stage < 0 || stage >= program->num_stages) {
    printError(stage, "invalid program: stage " + std::to_string(stage) +
                          " of " + std::to_string(program->num_stages));
    return finish(1);
  }
  if (program->num_stages > 1) {
    // Joined before anything can fail, so that every error can tear the
    // other stages down instead of leaving them blocked in a receive.
    int rank = 0, size = 0;
    std::string err;
    if (!transportInit(&argc, &argv, rank, size,
                       /*multiThreaded=*/deviceTarget() == GP_TARGET_CUDA,
                       err)) {
      printError(stage, err);
      return finish(1);
    }
    statusInstallHandlers(); // after MPI_Init: replaces Open MPI's handlers
    if (size != program->num_stages || rank != stage) {
      std::string k = std::to_string(program->num_stages);
      printError(stage,
                 "stage " + std::to_string(stage) +
                     " executable was launched as rank " +
                     std::to_string(rank) + " of " + std::to_string(size) +
                     " ranks " +
                     (size == 1 ? "(a " + k + "-stage pipeline runs as " + k +
                                      " MPI ranks: launch it with gpipe-run)"
                                : "(it belongs to a " + k +
                                      "-stage pipeline: were its "
                                      "pipeline.json and executables "
                                      "compiled together?)"));
      return finish(1);
    }
  } else {
    statusInstallHandlers();
  }
  // Usage errors exit 2, like gpipe-compile and gpipe-run.
  if (!usageOk) {
    printError(stage, usageErr);
    return finish(2);
  }
  if (program->num_stages > 1) {
    std::string err;
    if (!transportConfigureWaits(opt.threads, err)) {
      printError(stage, err);
      return finish(1);
    }
  }
  StageRun run(program, opt);
  return finish(run.run());
}
