// gp_main: command line, joining the other stages, weight/data loading, the
// schedule loop, logging and weight output of a generated stage program.
#include "internal.h"

#include "gpipe/checkpoint.h"
#include "gpipe/manifest.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <set>
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
    "  --checkpoint-dir DIR  write a checkpoint under DIR after the last "
    "step\n"
    "  --checkpoint-every N  ... and after every N-th step\n"
    "  --keep K            keep the newest K checkpoints (default 0: all)\n"
    "  --resume-from CKPT  start from the checkpoint directory CKPT "
    "(DIR/step-<S>):\n"
    "                      its parameters, optimizer state and step; runs "
    "steps S+1..N\n"
    "  --shuffle           each epoch reads the samples in a permutation "
    "drawn from\n"
    "                      (--seed, epoch) instead of file order\n"
    "  --seed N            the shuffle's seed (default 0)\n"
    "  --eval-data DIR     after the last step (and every --eval-every "
    "steps), the\n"
    "                      forward-only loss over DIR's mini-batches (torch's "
    "eval mode)\n"
    "  --eval-every N      ... also after every N-th step\n"
    "  --report FILE       at the end, write this stage's step times "
    "(compute,\n"
    "                      transfer wait) and peak memory to FILE (JSON)\n"
    "  --trace FILE        record every action and transfer wait; write them "
    "to FILE\n"
    "                      at the end (Chrome trace events, one per line)\n"
    "  --profile FILE      (a gpipe-compile --profile build) write the time of "
    "each\n"
    "                      unit of generated code, summed over the steps after "
    "the\n"
    "                      first, to FILE: the cost table of gpipe-compile "
    "--costs\n"
    "  --heartbeat FILE    rewrite FILE every 0.5 s with the pid, host and "
    "progress\n"
    "                      (gpipe-run's watchdog); the stage also dies with "
    "its parent\n"
    "  --on-nan stop|skip|continue  a NaN or infinite loss ends the run at "
    "its step,\n"
    "                      without writing weights (stop, the default), "
    "skips that\n"
    "                      step's optimizer update on every stage (skip; CPU "
    "target),\n"
    "                      or is only printed (continue)\n"
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
  std::string report;  // --report: the end-of-run numbers
  std::string trace;   // --trace: this stage's events
  std::string profile; // --profile: the per-unit times (a --profile build)
  std::string heartbeat;
  std::string onNan = "stop"; // --on-nan stop | skip | continue
  int64_t threads = 1;
  int64_t device = -1;
  double commTimeout = 300.0;
  std::string checkpointDir;
  int64_t checkpointEvery = 0;
  int64_t keep = 0;
  std::string resumeFrom;
  std::string evalData;
  int64_t evalEvery = 0;
  bool shuffle = false;
  uint64_t seed = 0;
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
    if (arg == "--shuffle") {
      opt.shuffle = true;
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
        flag != "--comm-timeout" && flag != "--checkpoint-dir" &&
        flag != "--checkpoint-every" && flag != "--keep" &&
        flag != "--resume-from" && flag != "--seed" && flag != "--eval-data" &&
        flag != "--eval-every" && flag != "--report" && flag != "--trace" &&
        flag != "--profile" && flag != "--heartbeat" && flag != "--on-nan") {
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
    } else if (flag == "--checkpoint-every" || flag == "--keep" ||
               flag == "--eval-every") {
      int64_t &out = flag == "--keep"         ? opt.keep
                     : flag == "--eval-every" ? opt.evalEvery
                                              : opt.checkpointEvery;
      if (!parseInt(value, flag == "--keep" ? 0 : 1, out)) {
        err = "invalid value '" + value + "' for " + flag +
              (flag == "--keep" ? " (expected an integer >= 0)"
                                : " (expected an integer >= 1)");
        return false;
      }
    } else if (flag == "--seed") {
      int64_t v = 0;
      if (!parseInt(value, 0, v)) {
        err = "invalid value '" + value +
              "' for --seed (expected an integer >= 0)";
        return false;
      }
      opt.seed = static_cast<uint64_t>(v);
    } else if (flag == "--checkpoint-dir") {
      opt.checkpointDir = value;
    } else if (flag == "--resume-from") {
      opt.resumeFrom = value;
    } else if (flag == "--eval-data") {
      opt.evalData = value;
    } else if (flag == "--weights-in") {
      opt.weightsIn = value;
    } else if (flag == "--weights-out") {
      opt.weightsOut = value;
    } else if (flag == "--status-file") {
      opt.statusFile = value;
    } else if (flag == "--pipeline") {
      opt.pipeline = value;
    } else if (flag == "--report") {
      opt.report = value;
    } else if (flag == "--trace") {
      opt.trace = value;
    } else if (flag == "--profile") {
      opt.profile = value;
    } else if (flag == "--heartbeat") {
      opt.heartbeat = value;
    } else if (flag == "--on-nan") {
      if (value != "stop" && value != "skip" && value != "continue") {
        err = "invalid value '" + value +
              "' for --on-nan (expected 'stop', 'skip' or 'continue')";
        return false;
      }
      opt.onNan = value;
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
    if (rc != 0 && (program_->num_stages > 1 || replicas_ > 1))
      return rc;
    deviceShutdown();
    return rc;
  }

private:
  int runSteps();
  /// Before action i: lists the receives of the next forward or backward
  /// after it (across a run of W's and flushes; at the first action of such
  /// a run, of every forward and backward up to the next W, flush or
  /// update), so that their messages are taken while the stage computes
  /// (transportExpectReceives). One model chunk per stage only: the
  /// transfers table does not say which chunk receives what.
  void expectReceivesAhead(int32_t i) {
    const gp_action *acts = program_->actions;
    const int32_t n = program_->num_actions;
    if (program_->num_chunks > 1)
      return;
    auto inRun = [&](int32_t j) {
      return acts[j].kind == GP_WEIGHT || acts[j].kind == GP_FLUSH;
    };
    auto isFB = [&](int32_t j) {
      return acts[j].kind == GP_FORWARD || acts[j].kind == GP_BACKWARD;
    };
    int32_t j = i + 1, limit = -1;
    while (j < n && inRun(j))
      ++j;
    if (j < n && isFB(j))
      limit = j;
    if (inRun(i) && (i == 0 || !inRun(i - 1)))
      for (; j < n && isFB(j); ++j)
        limit = j;
    for (j = std::max(listedThrough_ + 1, i + 1); j <= limit; ++j)
      if (isFB(j))
        transportExpectReceives(*program_, acts[j].kind == GP_FORWARD ? 0 : 1);
    listedThrough_ = std::max(listedThrough_, limit);
  }
  int32_t listedThrough_ = -1; // the last action whose receives are listed
  int error(const std::string &msg) {
    printError(stage_, msg);
    return 1;
  }
  bool checkDesc(const gp_tensor_desc &d, bool inArena, const char *what);
  int checkProgram();
  int agreeWithOtherStages();
  /// ... of `inputs` (the training or the --eval-data files); the number
  /// agreed on is returned in `samples`.
  int sameSamplesAsOtherStages(const std::vector<InputData> &inputs,
                               int64_t &samples);
  int openEvalData();
  /// The forward-only loss over every mini-batch of --eval-data after step
  /// `step` (the logger prints and logs it).
  int evaluate(int64_t step, gp_step_ctx &ctx, FILE *log);
  /// The logger's line "<prefix>step S loss L" on stdout (unless --quiet)
  /// and {"step":S,"<key>":L,"ms":T} in the --log-json log.
  int logLoss(int64_t step, const char *key, const char *prefix, double loss,
              double ms, FILE *log);
  /// The step's update: with --on-nan skip, first agrees with every stage
  /// whether the loss is finite, and skips it (only clearing the gradient
  /// accumulators) when not. The optimizers count the updates done
  /// (ctx->step during the update), as torch.optim does.
  int runUpdate(gp_step_ctx &ctx);
  int loadParams();
  /// Copies `f`'s data to `dst` in the arena piece by piece, dropping each
  /// piece's mapped pages once copied.
  bool uploadReleasing(unsigned char *dst, const NpyFile &f, std::string &err);
  /// `elements` floats of the arena at `offset` readable on the host: the
  /// arena itself on the CPU target, else a copy in `host`.
  const float *hostView(int64_t offset, int64_t elements,
                        std::vector<float> &host, std::string &err);
  int loadCheckpoint();
  int saveCheckpoint(int64_t step);
  /// --shard-optimizer: each state slot's floats from every replica's share
  /// (by the slot's arena offset); collective over the stage's replicas;
  /// nothing otherwise.
  int gatherStateShares(std::map<int64_t, std::vector<float>> &shared);
  int writeParams();
  /// Multi-stage: waits until every stage reached this point.
  int barrier();

  const gp_program *program_;
  const Options &opt_;
  int32_t stage_;
  int32_t lossStage_ = -1; // the stage with has_loss, -1 if none
  bool logger_ = false;    // prints the steps: the loss stage, else stage 0
  // --data-parallel: the pipeline's replicas (1: one pipeline); replica 0
  // alone logs, evaluates and writes weights and checkpoints.
  int64_t replicas_ = program_->data_parallel > 1 ? program_->data_parallel : 1;
  bool writer_ = transportReplica() == 0;
  unsigned char *arena_ = nullptr; // owned by the device
  Runtime rt_;
  int64_t samples_ = -1;       // rows of the data files (any stage's)
  int64_t firstStep_ = 1;      // after --resume-from: the checkpoint's step + 1
  int64_t skippedUpdates_ = 0; // --on-nan skip: the steps without update
  std::vector<InputData> evalInputs_;     // --eval-data
  int64_t evalBatches_ = 0;               // its mini-batches
  std::string optimizerKind_ = "unknown"; // from --pipeline, for checkpoints
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
  if (p.num_chunks < 0 || (p.num_chunks > 1 && !p.chunks))
    return error("invalid program description");
  const int32_t chunks = std::max<int32_t>(p.num_chunks, 1);
  for (int32_t i = 0; i < p.num_actions; ++i) {
    const gp_action &a = p.actions[i];
    bool ok = a.chunk >= 0 && a.chunk < chunks;
    const ChunkFns f = ok ? chunkFns(p, a.chunk) : ChunkFns{};
    switch (a.kind) {
    case GP_FORWARD:
      ok =
          ok && f.forward && a.microbatch >= 0 && a.microbatch < p.microbatches;
      break;
    case GP_BACKWARD:
      ok = ok && f.backward && a.microbatch >= 0 &&
           a.microbatch < p.microbatches;
      break;
    case GP_WEIGHT:
      ok = ok && f.weight && a.microbatch >= 0 && a.microbatch < p.microbatches;
      break;
    case GP_UPDATE:
      ok = ok && a.chunk == 0 && p.update != nullptr;
      break;
    case GP_FLUSH:
      ok = ok && a.chunk == 0 && a.microbatch == -1;
      break;
    default:
      ok = false;
    }
    if (!ok)
      return error("invalid program: schedule entry " + std::to_string(i) +
                   " (kind " + std::to_string(static_cast<int>(a.kind)) +
                   ", micro-batch " + std::to_string(a.microbatch) +
                   ", chunk " + std::to_string(a.chunk) + ") is malformed");
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

/// Multi-stage: every rank shares (has_loss, K, M, B, --profile); all must
/// describe the same pipeline, at most one stage computes the loss, and all
/// or none profile (the stages measure their links in pairs at the end).
int StageRun::agreeWithOtherStages() {
  const int n = 5;
  int64_t mine[n] = {program_->has_loss ? 1 : 0, program_->num_stages,
                     program_->microbatches, program_->batch_size,
                     opt_.profile.empty() ? 0 : 1};
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
    else if (v[4] != all[4])
      problem = "stage " + std::to_string(v[4] ? s : 0) +
                " runs with --profile and stage " +
                std::to_string(v[4] ? 0 : s) +
                " without: give every stage --profile (the stages measure "
                "their links together)";
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
int StageRun::sameSamplesAsOtherStages(const std::vector<InputData> &inputs,
                                       int64_t &samples) {
  int64_t mine = inputs.empty() ? -1 : inputs[0].file.shape()[0];
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
      samples = all[s];
      continue;
    }
    if (all[s] == all[ref])
      continue;
    // The first stage that disagrees reports; the others wait for the abort.
    if (s != stage_)
      transportWaitForAbort();
    return error(inputs[0].path + " has " + std::to_string(all[s]) +
                 " samples but stage " + std::to_string(ref) +
                 "'s data files have " + std::to_string(all[ref]) +
                 " (every graph input needs the same number of samples)");
  }
  return 0;
}

bool StageRun::uploadReleasing(unsigned char *dst, const NpyFile &f,
                               std::string &err) {
  // 16 MiB at a time, each piece's mapped pages dropped once copied: the
  // file is never resident whole beside the arena (the largest parameter
  // would otherwise add its size to the stage's peak memory).
  constexpr int64_t kPiece = manifest::kWeightLoadPieceBytes;
  for (int64_t at = 0; at < f.dataBytes(); at += kPiece) {
    int64_t n = std::min(kPiece, f.dataBytes() - at);
    profileNoteLoadPiece(n);
    if (!deviceUpload(dst + at, f.data() + at, n, err))
      return false;
    f.release(at, at + n);
  }
  return true;
}

const float *StageRun::hostView(int64_t offset, int64_t elements,
                                std::vector<float> &host, std::string &err) {
  // The CPU target's arena is host memory: no copy (a copy of the largest
  // parameter would add its size to the stage's peak memory).
  if (program_->target == GP_TARGET_CPU)
    return reinterpret_cast<const float *>(arena_ + offset);
  host.resize(static_cast<size_t>(elements));
  if (!deviceDownload(host.data(), arena_ + offset,
                      elements * static_cast<int64_t>(sizeof(float)), err))
    return nullptr;
  return host.data();
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
    if (!uploadReleasing(arena_ + d.offset, f, err))
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
    std::string err;
    const float *values = hostView(d.offset, numElements(d), host, err);
    if (!values)
      return error("reading parameter '" + std::string(d.name) + "': " + err);
    // The file name may contain directories of its own.
    std::filesystem::create_directories(
        std::filesystem::path(path).parent_path(), ec);
    if (ec)
      return error("cannot create directory for " + path + ": " + ec.message());
    if (!npyWriteF32(path, values, d.shape, static_cast<size_t>(d.rank), err))
      return error(err);
  }
  return 0;
}

int StageRun::runUpdate(gp_step_ctx &ctx) {
  // --data-parallel: the step's loss is the replicas' mean (what is logged,
  // and what --on-nan decides on: the same on every replica). CUDA knows it
  // only at the step's end (averaged there).
  if (replicas_ > 1 && program_->has_loss &&
      program_->target == GP_TARGET_CPU) {
    std::string err;
    if (!transportAverageReplicas(ctx.loss, err))
      return error(err);
  }
  bool skip = false;
  if (opt_.onNan == "skip") {
    int64_t bad = program_->has_loss && !std::isfinite(ctx.loss) ? 1 : 0;
    if (program_->num_stages > 1) {
      std::vector<int64_t> all;
      std::string err;
      if (!transportAllGather(&bad, 1, all, err))
        return error(err);
      for (int64_t b : all)
        bad |= b;
    }
    skip = bad != 0;
  }
  const int64_t step = ctx.step;
  if (skip) {
    ++skippedUpdates_;
    if (logger_)
      std::fprintf(stderr,
                   "gpipe: warning: stage %d: step %lld: the loss is not "
                   "finite; this step's update is skipped on every stage "
                   "(--on-nan skip)\n",
                   stage_, static_cast<long long>(step));
  }
  ctx.skip_update = skip ? 1 : 0;
  ctx.step = step - skippedUpdates_ + (skip ? 1 : 0);
  program_->update(&ctx);
  ctx.step = step;
  ctx.skip_update = 0;
  return 0;
}

int StageRun::logLoss(int64_t step, const char *key, const char *prefix,
                      double loss, double ms, FILE *log) {
  if (!opt_.quiet) {
    if (std::isnan(loss))
      std::printf("%sstep %lld loss nan\n", prefix,
                  static_cast<long long>(step));
    else
      std::printf("%sstep %lld loss %.6f\n", prefix,
                  static_cast<long long>(step), loss);
    // Progress must be visible through pipes, and survive a later crash.
    std::fflush(stdout);
  }
  if (!log)
    return 0;
  // JSON has no NaN/Infinity literals.
  char lossStr[32] = "null";
  if (std::isfinite(loss))
    std::snprintf(lossStr, sizeof(lossStr), "%.9g", loss);
  if (std::fprintf(log, "{\"step\":%lld,\"%s\":%s,\"ms\":%.6f}\n",
                   static_cast<long long>(step), key, lossStr, ms) < 0 ||
      std::fflush(log) != 0)
    return error("cannot write log file " + opt_.logJson + ": " +
                 std::strerror(errno));
  return 0;
}

int StageRun::openEvalData() {
  // Opened like the training data, then set aside until an evaluation.
  std::vector<InputData> training;
  std::swap(training, rt_.inputs);
  std::string err;
  bool ok = openInputs(rt_, opt_.evalData, evalBatches_, err);
  std::swap(training, rt_.inputs);
  evalInputs_ = std::move(training);
  if (!ok)
    return error("--eval-data: " + err);
  int64_t samples = evalInputs_.empty() ? -1 : evalInputs_[0].file.shape()[0];
  if (program_->num_stages > 1)
    if (int rc = sameSamplesAsOtherStages(evalInputs_, samples))
      return rc;
  // A replica's batch at a time (with --data-parallel, replica 0 alone
  // evaluates).
  evalBatches_ = samples / program_->batch_size;
  return 0;
}

int StageRun::evaluate(int64_t step, gp_step_ctx &ctx, FILE *log) {
  // The evaluation data in place of the training data, in file order;
  // nothing prefetched, the training mini-batch already loaded stays.
  heartbeatPhase("evaluating (--eval-data)");
  std::swap(rt_.inputs, evalInputs_);
  const int64_t trainingStep = rt_.miniStep, nextStep = rt_.nextMiniStep;
  double sum = 0.0;
  std::string err;
  auto t0 = std::chrono::steady_clock::now();
  ctx.eval = 1;
  for (int64_t b = 0; b < evalBatches_ && err.empty(); ++b) {
    rt_.miniFirst = b * rt_.batchSize;
    rt_.miniStep = -2 - b; // never a prefetched step
    rt_.nextMiniStep = -1;
    rt_.order.epoch = -1;
    rt_.order.rows.clear();
    for (InputData &in : rt_.inputs)
      in.cur = in.file.data() + rt_.miniFirst * in.rowBytes;
    ctx.loss = 0.0;
    // The schedule's forwards, in its order (with buffered sends or not,
    // they cannot deadlock where the whole schedule does not).
    for (int32_t i = 0; i < program_->num_actions; ++i) {
      const gp_action &a = program_->actions[i];
      if (a.kind != GP_FORWARD)
        continue;
      const int64_t mb = a.microbatch;
      ctx.microbatch = mb;
      ctx.first_sample = rt_.miniFirst + mb * rt_.microRows;
      int64_t t = timingNowNs();
      chunkFns(*program_, a.chunk).forward(&ctx, mb);
      timingAction(TimedKind::Eval, step, mb, t, timingNowNs(), a.chunk);
    }
    if (!deviceStepEnd(ctx, err))
      err = "evaluation after step " + std::to_string(step) + ": " + err;
    sum += ctx.loss;
  }
  ctx.eval = 0;
  std::swap(rt_.inputs, evalInputs_);
  rt_.miniStep = trainingStep;
  rt_.nextMiniStep = nextStep;
  // The training order of the current epoch is rebuilt by the next step.
  rt_.order.epoch = -1;
  if (!err.empty())
    return error(err);
  if (!logger_ || !program_->has_loss)
    return 0;
  double ms = std::chrono::duration<double, std::milli>(
                  std::chrono::steady_clock::now() - t0)
                  .count();
  return logLoss(step, "eval_loss", "eval ",
                 sum / static_cast<double>(evalBatches_), ms, log);
}

int StageRun::barrier() {
  if (program_->num_stages == 1)
    return 0;
  int64_t one = 1;
  std::vector<int64_t> all;
  std::string err;
  if (!transportAllGather(&one, 1, all, err))
    return error(err);
  return 0;
}

namespace {

/// The .npy name of a parameter's optimizer state: "<file stem>.<slot>.npy".
std::string stateFileName(const std::string &paramFile,
                          const std::string &slot) {
  std::string stem = paramFile;
  if (stem.size() > 4 && stem.compare(stem.size() - 4, 4, ".npy") == 0)
    stem.resize(stem.size() - 4);
  return stem + "." + slot + ".npy";
}

/// The parameter description of `name`, or null.
const gp_tensor_desc *findParam(const gp_program &p, const char *name) {
  for (int32_t i = 0; i < p.num_params; ++i)
    if (std::strcmp(p.params[i].name, name) == 0)
      return &p.params[i];
  return nullptr;
}

/// Test hook (docs/contributing.md): GPIPE_TEST_KILL_IN_CHECKPOINT=S:K makes
/// stage K kill itself (SIGKILL) half-way through writing the checkpoint of
/// step S, after some of its tensors are on disk.
bool killInCheckpoint(int64_t step, int32_t stage) {
  const char *v = std::getenv("GPIPE_TEST_KILL_IN_CHECKPOINT");
  long long s = 0, k = 0;
  return v && std::sscanf(v, "%lld:%lld", &s, &k) == 2 && s == step &&
         k == stage;
}

} // namespace

int StageRun::gatherStateShares(std::map<int64_t, std::vector<float>> &shared) {
  if (program_->shard_optimizer <= 1)
    return 0;
  int64_t lo = 0, hi = 0;
  transportShare(program_->shard_floats, lo, hi);
  std::string err;
  for (int32_t i = 0; i < program_->num_states; ++i) {
    const gp_state_desc &sd = program_->states[i];
    if (sd.elem < 0 || shared.count(sd.offset))
      continue;
    std::vector<float> &all = shared[sd.offset];
    all.assign(static_cast<size_t>(program_->shard_floats), 0.0f);
    std::memcpy(all.data() + lo, arena_ + sd.offset,
                static_cast<size_t>(hi - lo) * sizeof(float));
    if (!transportShardGather(all.data(), program_->shard_floats, err))
      return error("checkpoint: " + err);
  }
  return 0;
}

int StageRun::saveCheckpoint(int64_t step) {
  namespace ck = checkpoint;
  heartbeatPhase("writing a checkpoint");
  const std::string &dir = opt_.checkpointDir;
  const std::string tmp = ck::directoryFor(dir, step) + ".tmp";
  std::string err;
  // --shard-optimizer: every replica's share of each state slot gathered
  // (every replica takes part; replica 0 writes them by name).
  std::map<int64_t, std::vector<float>> shared;
  if (int rc = gatherStateShares(shared))
    return rc;
  if (!writer_)
    return 0;
  // Stage 0 prepares the directory (removing what a save that died left),
  // the others wait for it.
  if (stage_ == 0) {
    if (!ck::makeDirectories(dir, err))
      return error("checkpoint: " + err);
    ck::removeIncomplete(dir);
    if (!ck::makeDirectories(tmp, err))
      return error("checkpoint: " + err);
  }
  if (int rc = barrier())
    return rc;

  // This stage's tensors, under stage<K>/ (file names are unique per stage).
  const std::string sub = "stage" + std::to_string(stage_);
  if (!ck::makeDirectories(tmp + "/" + sub, err))
    return error("checkpoint: " + err);
  std::vector<ck::Tensor> tensors;
  std::vector<float> host;
  auto save = [&](const gp_tensor_desc &d, const std::string &slot,
                  int64_t offset, int64_t elem = -1) {
    ck::Tensor t;
    t.name = d.name;
    t.slot = slot;
    t.file = sub + "/" +
             (slot.empty() ? std::string(d.file) : stateFileName(d.file, slot));
    t.shape.assign(d.shape, d.shape + d.rank);
    const float *values = elem >= 0
                              ? shared[offset].data() + elem
                              : hostView(offset, numElements(d), host, err);
    if (!values || !npyWriteF32(tmp + "/" + t.file, values, d.shape,
                                static_cast<size_t>(d.rank), err))
      return false;
    tensors.push_back(std::move(t));
    return true;
  };
  for (int32_t i = 0; i < program_->num_params; ++i) {
    if (!save(program_->params[i], "", program_->params[i].offset))
      return error("checkpoint of step " + std::to_string(step) + ": " + err);
    if (i == program_->num_params / 2 && killInCheckpoint(step, stage_))
      std::raise(SIGKILL);
  }
  for (int32_t i = 0; i < program_->num_states; ++i) {
    const gp_state_desc &sd = program_->states[i];
    const gp_tensor_desc *d = findParam(*program_, sd.param);
    if (!d)
      return error(std::string("invalid program: optimizer state of unknown "
                               "parameter '") +
                   sd.param + "'");
    if (!save(*d, sd.slot, sd.offset, sd.elem))
      return error("checkpoint of step " + std::to_string(step) + ": " + err);
  }
  if (!ck::writeStageIndex(tmp, stage_, tensors, err))
    return error("checkpoint: " + err);
  // Stage 0 publishes once every stage's part is on disk.
  if (int rc = barrier())
    return rc;
  if (stage_ != 0)
    return 0;
  ck::Manifest m;
  m.step = step;
  m.skippedUpdates = skippedUpdates_;
  m.stages = program_->num_stages;
  m.microbatches = program_->microbatches;
  m.optimizer = optimizerKind_;
  m.data.samples = samples_;
  m.data.batchSize = program_->batch_size * replicas_; // the global batch
  m.data.shuffle = opt_.shuffle;
  m.data.seed = opt_.seed;
  if (!ck::commit(dir, tmp, m, opt_.keep, err))
    return error("checkpoint: " + err);
  return 0;
}

int StageRun::loadCheckpoint() {
  namespace ck = checkpoint;
  ck::Manifest m;
  std::string err;
  const std::string &path = opt_.resumeFrom;
  if (!ck::read(path, m, err))
    return error("--resume-from: " + err);
  auto mismatch = [&](const std::string &what) {
    return error("--resume-from " + path + ": " + what);
  };
  if (m.data.batchSize != program_->batch_size * replicas_)
    return mismatch("the checkpoint was trained with mini-batches of " +
                    std::to_string(m.data.batchSize) +
                    " samples, this pipeline takes " +
                    std::to_string(program_->batch_size * replicas_));
  if (m.data.shuffle != opt_.shuffle ||
      (opt_.shuffle && m.data.seed != opt_.seed))
    return mismatch(std::string("the checkpoint's data order was ") +
                    (m.data.shuffle
                         ? "--shuffle --seed " + std::to_string(m.data.seed)
                         : "file order (no --shuffle)") +
                    "; resume with the same");
  auto find = [&](const char *name, const char *slot) -> const ck::Tensor * {
    for (const ck::Tensor &t : m.tensors)
      if (t.name == name && t.slot == slot)
        return &t;
    return nullptr;
  };
  // --shard-optimizer: each state slot's floats, every parameter's at its
  // place (elem), of which this replica keeps its share.
  std::map<int64_t, std::vector<float>> shared;
  auto load = [&](const gp_tensor_desc &d, const char *slot, int64_t offset,
                  int64_t elem = -1) {
    const ck::Tensor *t = find(d.name, slot);
    std::string what = std::string("parameter '") + d.name + "'" +
                       (*slot ? std::string(" (optimizer state ") + slot + ")"
                              : std::string());
    if (!t)
      return mismatch("no " + what +
                      (*slot ? " (the checkpoint was trained with " +
                                   m.optimizer + ")"
                             : std::string(" (another model?)"))),
             1;
    std::vector<int64_t> shape(d.shape, d.shape + d.rank);
    std::string file = path + "/" + t->file;
    NpyFile f;
    if (t->shape != shape)
      return mismatch(what + " has shape " + shapeToString(t->shape) +
                      " in the checkpoint, " + shapeToString(shape) + " here"),
             1;
    if (!f.open(file, GP_F32, err))
      return error("--resume-from: " + err), 1;
    if (f.shape() != shape)
      return mismatch(file + " has shape " + shapeToString(f.shape()) +
                      ", its manifest says " + shapeToString(shape)),
             1;
    if (elem >= 0) {
      std::vector<float> &all = shared[offset];
      all.resize(static_cast<size_t>(program_->shard_floats));
      if (elem + numElements(d) > program_->shard_floats ||
          f.dataBytes() != numElements(d) * 4)
        return error("loading " + file + ": invalid program: state of " +
                     std::to_string(numElements(d)) + " floats at " +
                     std::to_string(elem) + " of " +
                     std::to_string(program_->shard_floats)),
               1;
      std::memcpy(all.data() + elem, f.data(),
                  static_cast<size_t>(f.dataBytes()));
      return 0;
    }
    if (!uploadReleasing(arena_ + offset, f, err))
      return error("loading " + file + ": " + err), 1;
    return 0;
  };
  for (int32_t i = 0; i < program_->num_params; ++i)
    if (load(program_->params[i], "", program_->params[i].offset))
      return 1;
  std::set<std::pair<std::string, std::string>> used;
  for (int32_t i = 0; i < program_->num_states; ++i) {
    const gp_state_desc &sd = program_->states[i];
    const gp_tensor_desc *d = findParam(*program_, sd.param);
    if (!d)
      return error(std::string("invalid program: optimizer state of unknown "
                               "parameter '") +
                   sd.param + "'");
    if (load(*d, sd.slot, sd.offset, sd.elem))
      return 1;
    used.insert({sd.param, sd.slot});
  }
  // This replica's share of each sharded slot.
  for (auto &[offset, all] : shared) {
    int64_t lo = 0, hi = 0;
    transportShare(program_->shard_floats, lo, hi);
    if (!deviceUpload(arena_ + offset, all.data() + lo, (hi - lo) * 4, err))
      return error("--resume-from: " + err);
  }
  // State this pipeline's optimizer would drop silently is an error.
  for (int32_t i = 0; i < program_->num_params; ++i)
    for (const ck::Tensor &t : m.tensors)
      if (t.name == program_->params[i].name && !t.slot.empty() &&
          !used.count({t.name, t.slot}))
        return mismatch("it has optimizer state " + t.slot +
                        " for parameter '" + t.name + "' (" + m.optimizer +
                        "), which this pipeline's optimizer does not keep");
  firstStep_ = m.step + 1;
  skippedUpdates_ = m.skippedUpdates;
  return 0;
}

int StageRun::runSteps() {
  if (int rc = checkProgram())
    return rc;
  if (!opt_.pipeline.empty()) {
    std::string err;
    if (!checkPipelineFile(*program_, opt_.pipeline, err))
      return error(err);
    manifest::Manifest m;
    if (manifest::readManifest(opt_.pipeline, m, err))
      optimizerKind_ = m.optimizer.kind;
  }
  if (program_->num_stages > 1) {
    if (int rc = agreeWithOtherStages())
      return rc;
  } else {
    lossStage_ = program_->has_loss ? 0 : -1;
  }
  logger_ = writer_ && stage_ == (lossStage_ >= 0 ? lossStage_ : 0);
  if (opt_.onNan == "skip" && program_->target != GP_TARGET_CPU)
    return error("--on-nan skip needs the CPU target: a CUDA stage knows the "
                 "step's loss only after its update is queued");
  if (!opt_.profile.empty() && program_->num_profile_units <= 0) {
    error("--profile " + opt_.profile +
          ": this program has no timers (compile it with gpipe-compile "
          "--profile)");
    return 2;
  }
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
  // The CPU runtime's buffered sends are MPI_Bsend; the CUDA runtime's
  // host-staged sends return at once (deviceInit).
  if (program_->num_stages > 1 && program_->buffered_sends &&
      program_->target == GP_TARGET_CPU &&
      !transportUseBufferedSends(*program_, err))
    return error(err);
  // The arena, allocated once and zeroed: nothing is allocated in the steps.
  timingNoteStartRss();
  arena_ = deviceAllocArena(program_->arena_bytes, err);
  if (!arena_)
    return error(err);

  if (int rc = opt_.resumeFrom.empty() ? loadParams() : loadCheckpoint())
    return rc;

  rt_.program = program_;
  rt_.stage = stage_;
  rt_.batchSize = program_->batch_size;
  rt_.globalBatch = program_->batch_size * replicas_;
  rt_.replicaOffset = program_->batch_size * transportReplica();
  rt_.microRows = program_->batch_size / program_->microbatches;
  int64_t numBatches = 0;
  if (!openInputs(rt_, opt_.data, numBatches, err))
    return error(err);
  rt_.numBatches = numBatches;
  rt_.shuffle = opt_.shuffle;
  rt_.seed = opt_.seed;
  if (!rt_.inputs.empty())
    samples_ = rt_.inputs[0].file.shape()[0];
  if (program_->num_stages > 1)
    if (int rc = sameSamplesAsOtherStages(rt_.inputs, samples_))
      return rc;
  if (!opt_.evalData.empty())
    if (int rc = openEvalData())
      return rc;

  // Only the logging stage writes the log (all stages get the same flag).
  FILE *log = nullptr;
  if (logger_ && !opt_.logJson.empty()) {
    // A resumed run continues the log.
    log = std::fopen(opt_.logJson.c_str(), opt_.resumeFrom.empty() ? "w" : "a");
    if (!log)
      return error("cannot open log file " + opt_.logJson + ": " +
                   std::strerror(errno));
  }
  std::unique_ptr<FILE, int (*)(FILE *)> logCloser(
      log, [](FILE *f) { return f ? std::fclose(f) : 0; });

  gp_step_ctx ctx{};
  ctx.arena = arena_;
  ctx.runtime = &rt_;
  // The step after s, -1: none.
  auto nextStep = [&](int64_t s) -> int64_t {
    return s < opt_.steps ? s + 1 : -1;
  };
  if (program_->init)
    program_->init(&ctx);
  // Asynchronous targets may start loading the first step's mini-batch here.
  rt_.nextMiniStep = nextStep(firstStep_ - 1);
  if (!deviceStepEnd(ctx, err))
    return error(err);
  // Per step: the actions, the step's end and the transfer waits (the
  // boundaries' per micro-batch, or a few per action for hand-written
  // programs that list none).
  timingInit(stage_, !opt_.trace.empty(), opt_.steps,
             program_->num_actions + 1 +
                 std::max<int64_t>(
                     int64_t(program_->num_transfers) * program_->microbatches,
                     program_->num_stages > 1 ? 2 * program_->num_actions : 0));
  double totalMs = 0.0;
  const int64_t stepsRun = std::max<int64_t>(0, opt_.steps - firstStep_ + 1);
  // --profile: every step is timed; the first one's sums (first touches of
  // the arena, the math libraries' set-up) are dropped when more follow.
  profileInit(*program_);
  profileCount(!opt_.profile.empty());
  // --profile: what the math libraries' calls make resident, in the first
  // step (their set-up, JIT kernels, scratch).
  profileMeasureLibrary(!opt_.profile.empty());
  for (int64_t s = firstStep_; s <= opt_.steps; ++s) {
    // Stages without data files (middle stages) still count steps; their
    // first_sample is relative to an unknown mini-batch and unused.
    selectMiniBatch(rt_, s);
    ctx.step = s;
    ctx.loss = 0.0;
    ctx.microbatch = 0;
    ctx.first_sample = rt_.miniFirst;
    auto t0 = std::chrono::steady_clock::now();
    int64_t stepStartNs = timingNowNs();
    listedThrough_ = -1;
    for (int32_t i = 0; i < program_->num_actions; ++i) {
      const gp_action &a = program_->actions[i];
      int64_t actionStartNs = timingNowNs(), actionCpu = timingCpuNs();
      // The thread's CPU time in the action (with --trace), or -1.
      auto cpuSince = [&] {
        return actionCpu < 0 ? int64_t(-1) : timingCpuNs() - actionCpu;
      };
      heartbeatAction(s, a);
      expectReceivesAhead(i);
      if (a.kind == GP_UPDATE) {
        ctx.first_sample = rt_.miniFirst;
        // The update computes for a long time without a receive, during
        // which a buffered send would barely move: deliver the step's
        // last sends first (their receivers are waiting for them). Nothing
        // to do without buffered sends (one stage, GPipe, CUDA).
        transportFlushSends();
        if (int rc = runUpdate(ctx))
          return rc;
        timingAction(TimedKind::Update, s, -1, actionStartNs, timingNowNs(), 0,
                     cpuSince());
        continue;
      }
      if (a.kind == GP_FLUSH) {
        // gpipe-flush-sends placed it (before W actions, which make no MPI
        // call that would move the stage's last sends on).
        transportFlushSends();
        timingTransfer(TimedKind::Flush, &ctx, -1, 0, actionStartNs,
                       timingNowNs(), cpuSince());
        continue;
      }
      ctx.microbatch = a.microbatch;
      ctx.first_sample = rt_.miniFirst + a.microbatch * rt_.microRows;
      const ChunkFns fns = chunkFns(*program_, a.chunk);
      if (a.kind == GP_WEIGHT) {
        // W actions in a row, of micro-batches in a row of one chunk: one
        // call, whose GEMMs cover their rows at once (the deferred operands
        // of consecutive micro-batches are consecutive row blocks).
        int32_t count = 1;
        while (i + count < program_->num_actions &&
               program_->actions[i + count].kind == GP_WEIGHT &&
               program_->actions[i + count].chunk == a.chunk &&
               program_->actions[i + count].microbatch == a.microbatch + count)
          ++count;
        fns.weight(&ctx, a.microbatch, count);
        i += count - 1;
        // The trace shows each micro-batch's share, one after the other.
        int64_t endNs = timingNowNs(), t = actionStartNs, cpu = cpuSince();
        for (int32_t k = 0; k < count; ++k) {
          int64_t next =
              actionStartNs + (endNs - actionStartNs) * (k + 1) / count;
          timingAction(TimedKind::Weight, s, a.microbatch + k, t, next, a.chunk,
                       cpu < 0 ? -1 : cpu / count);
          t = next;
        }
        continue;
      } else if (a.kind == GP_FORWARD) {
        fns.forward(&ctx, a.microbatch);
      } else {
        fns.backward(&ctx, a.microbatch);
      }
      timingAction(
          a.kind == GP_FORWARD ? TimedKind::Forward : TimedKind::Backward, s,
          a.microbatch, actionStartNs, timingNowNs(), a.chunk, cpuSince());
    }
    // Asynchronous targets finish the step's work here, and report its loss
    // (and may load the next mini-batch while it runs).
    rt_.nextMiniStep = nextStep(s);
    int64_t stepEndNs = timingNowNs();
    if (!deviceStepEnd(ctx, err))
      return error("step " + std::to_string(s) + ": " + err);
    int64_t stepDoneNs = timingNowNs();
    timingAction(TimedKind::StepEnd, s, -1, stepEndNs, stepDoneNs);
    timingStep(s, stepStartNs, stepDoneNs);
    profileStepDone();
    profileMeasureLibrary(false);
    if (s == firstStep_ && s < opt_.steps)
      profileRestart();
    auto t1 = std::chrono::steady_clock::now();
    double ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
    totalMs += ms;
    if (replicas_ > 1 && program_->has_loss &&
        program_->target != GP_TARGET_CPU &&
        !transportAverageReplicas(ctx.loss, err))
      return error(err);
    const double loss = program_->has_loss ? ctx.loss : NAN;
    if (logger_)
      if (int rc = logLoss(s, "loss", "", loss, ms, log))
        return rc;
    // A bad loss stops the run before it is evaluated or saved: the last
    // checkpoint stays the last good one.
    if (program_->has_loss && opt_.onNan == "stop" && !std::isfinite(loss))
      return error(lossNotFinite(s, loss));
    auto due = [&](int64_t every) {
      return (every > 0 && s % every == 0) || s == opt_.steps;
    };
    if (evalBatches_ > 0 && writer_ && due(opt_.evalEvery)) {
      profileCount(false);
      if (int rc = evaluate(s, ctx, log))
        return rc;
      profileCount(!opt_.profile.empty());
    }
    if (!opt_.checkpointDir.empty() &&
        (writer_ || program_->shard_optimizer > 1) && due(opt_.checkpointEvery))
      if (int rc = saveCheckpoint(s))
        return rc;
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
                 static_cast<long long>(stepsRun),
                 stepsRun ? totalMs / static_cast<double>(stepsRun) : 0.0,
                 deviceDescription().c_str());
  if (!opt_.trace.empty() && !timingWriteTrace(opt_.trace, err))
    return error(err);
  if (!opt_.profile.empty()) {
    // The runtime's own memory after the steps (before the link
    // measurement's buffers), then the links between the stages.
    std::vector<LinkSample> links;
    int64_t runtimeBytes = -1;
    if (!deviceRuntimeBytes(*program_, runtimeBytes, err))
      return error(err);
    const RuntimeMemory memory = profileRuntimeMemory(program_->arena_bytes);
    if (program_->num_stages > 1 && !deviceMeasureLinks(*program_, links, err))
      return error(err);
    if (!profileWrite(opt_.profile, *program_, opt_.threads, links,
                      runtimeBytes, memory, err))
      return error(err);
  }
  if (!opt_.report.empty() &&
      !timingWriteReport(opt_.report, deviceMemoryInUse(), err))
    return error(err);

  if (opt_.weightsOut.empty() || !writer_)
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
  const int replicas = program->data_parallel > 1 ? program->data_parallel : 1;
  if (program->num_stages > 1 || replicas > 1) {
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
    if (replicas > 1 && (size != program->num_stages * replicas ||
                         rank % program->num_stages != stage)) {
      printError(stage,
                 "stage " + std::to_string(stage) +
                     " executable was launched as rank " +
                     std::to_string(rank) + " of " + std::to_string(size) +
                     " ranks (--data-parallel " + std::to_string(replicas) +
                     " x " + std::to_string(program->num_stages) +
                     " stages run as " +
                     std::to_string(replicas * program->num_stages) +
                     " ranks, rank r being stage r % K of replica r / K: "
                     "launch them with gpipe-run)");
      return finish(1);
    }
    if (replicas == 1 && (size != program->num_stages || rank != stage)) {
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
    if (!transportSetReplicas(program->num_stages, replicas, err)) {
      printError(stage, err);
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
  if (program->num_stages > 1 || replicas > 1) {
    std::string err;
    if (!transportConfigureWaits(opt.threads, err)) {
      printError(stage, err);
      return finish(1);
    }
  }
  StageRun run(program, opt);
  return finish(run.run());
}
