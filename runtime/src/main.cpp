// gp_main: command line, weight/data loading, the step loop, logging and
// weight output of a generated stage program.
#include "gpipe/runtime.h"

#include <omp.h>
#include "npy.h"

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <sys/stat.h>
#include <vector>

// OpenBLAS' cblas.h declares it too, but the runtime's includes must not
// depend on which cblas.h is found first.
extern "C" void openblas_set_num_threads(int num_threads);

namespace gpipe {
namespace {

int error(const std::string &msg) {
  std::fprintf(stderr, "gpipe: error: %s\n", msg.c_str());
  std::fflush(stderr);
  return 1;
}

const char kUsage[] =
    "usage: %s [options]\n"
    "  --data DIR          one <input name>.npy per graph input (first axis "
    "= sample)\n"
    "  --steps N           optimizer steps (default 1; mini-batches in order, "
    "wrapping)\n"
    "  --weights-in DIR    initial parameters (default \"weights\")\n"
    "  --weights-out DIR   write the trained parameters there at the end\n"
    "  --log-json FILE     one JSON object per step: "
    "{\"step\":1,\"loss\":..,\"ms\":..}\n"
    "  --threads T         BLAS threads (default 1)\n"
    "  --quiet             no per-step lines on stdout\n"
    "  --help              this message\n";

struct Options {
  std::string data;
  bool haveData = false;
  int64_t steps = 1;
  std::string weightsIn = "weights";
  std::string weightsOut;
  std::string logJson;
  int64_t threads = 1;
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

/// Parses argv into `opt`; returns false after printing the error.
bool parseArgs(int argc, char **argv, Options &opt) {
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
        flag != "--threads") {
      if (arg.rfind("-", 0) == 0)
        error("unknown flag '" + flag + "' (see --help)");
      else
        error("unexpected argument '" + arg + "' (see --help)");
      return false;
    }
    if (!inlineValue) {
      if (i + 1 >= argc) {
        error("flag '" + flag + "' requires a value");
        return false;
      }
      value = argv[++i];
    }
    if (value.empty()) {
      error("flag '" + flag + "' requires a non-empty value");
      return false;
    }
    if (flag == "--data") {
      opt.data = value;
      opt.haveData = true;
    } else if (flag == "--steps") {
      if (!parseInt(value, 0, opt.steps)) {
        error("invalid value '" + value +
              "' for --steps (expected an integer >= 0)");
        return false;
      }
    } else if (flag == "--threads") {
      if (!parseInt(value, 1, opt.threads) || opt.threads > 4096) {
        error("invalid value '" + value +
              "' for --threads (expected an integer in [1, 4096])");
        return false;
      }
    } else if (flag == "--weights-in") {
      opt.weightsIn = value;
    } else if (flag == "--weights-out") {
      opt.weightsOut = value;
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

/// "(S, 28, 28)": an input's shape with the sample axis left open.
std::string sampleShape(const gp_tensor_desc &d) {
  std::string s = shapeToString(d.shape, d.rank);
  size_t end = s.find_first_of(",)");
  return "(S" + s.substr(end);
}

int64_t numElements(const gp_tensor_desc &d) {
  int64_t n = 1;
  for (int32_t i = 0; i < d.rank; ++i)
    n *= d.shape[i];
  return n;
}

/// Catches code generator bugs (descriptors outside the arena) as errors.
bool checkDesc(const gp_tensor_desc &d, int64_t arenaBytes, const char *what) {
  const char *name = d.name ? d.name : "?";
  bool ok = d.name && d.rank >= 0 && (d.rank == 0 || d.shape) &&
            d.offset >= 0 && (d.dtype == GP_F32 || d.dtype == GP_I64);
  for (int32_t i = 0; ok && i < d.rank; ++i)
    ok = d.shape[i] >= 0;
  if (ok)
    ok = d.offset + numElements(d) * dtypeSize(d.dtype) <= arenaBytes;
  if (!ok)
    error(std::string("invalid program: ") + what + " '" + name +
          "' is malformed or does not fit the arena");
  return ok;
}

struct FreeDeleter {
  void operator()(unsigned char *p) const { std::free(p); }
};

/// One graph input: its mapped data file and the bytes per sample.
struct InputData {
  std::string path;
  NpyFile file;
  int64_t rowBytes = 0;
  int64_t batch = 0;
};

int run(int argc, char **argv, const gp_program *program) {
  const char *prog = argc > 0 && argv && argv[0] ? argv[0] : "stage";
  if (!program)
    return error("no program");
  Options opt;
  // Usage errors (bad flags) exit 2, like gpipe-compile and gpipe-run.
  if (!parseArgs(argc, argv, opt))
    return 2;
  if (opt.help) {
    std::printf(kUsage, prog);
    return 0;
  }
  if (program->num_inputs > 0 && !opt.haveData) {
    error("--data DIR is required: the program has " +
          std::to_string(program->num_inputs) + " graph input(s)");
    return 2;
  }
  if (program->arena_bytes < 0 || program->num_inputs < 0 ||
      program->num_params < 0 || !program->step)
    return error("invalid program description");

  openblas_set_num_threads(static_cast<int>(opt.threads));
  // Generated elementwise loops and the update kernels use OpenMP.
  omp_set_num_threads(static_cast<int>(opt.threads));

  // The arena: 64-byte aligned (aligned_alloc needs a multiple of the
  // alignment), zeroed once.
  size_t arenaSize = (static_cast<size_t>(program->arena_bytes) + 63) / 64 * 64;
  if (arenaSize == 0)
    arenaSize = 64;
  std::unique_ptr<unsigned char, FreeDeleter> arena(
      static_cast<unsigned char *>(std::aligned_alloc(64, arenaSize)));
  if (!arena)
    return error("cannot allocate the " + std::to_string(arenaSize) +
                 "-byte arena");
  std::memset(arena.get(), 0, arenaSize);

  // Parameters.
  for (int32_t i = 0; i < program->num_params; ++i) {
    const gp_tensor_desc &d = program->params[i];
    if (!checkDesc(d, program->arena_bytes, "parameter"))
      return 1;
    if (d.dtype != GP_F32 || !d.file)
      return error(std::string("invalid program: parameter '") + d.name +
                   "' must be float32 with a weight file name");
    std::string path = joinPath(opt.weightsIn, d.file);
    if (!fileExists(path))
      return error("missing weight file " + path + " for parameter '" + d.name +
                   "'");
    NpyFile f;
    std::string err;
    if (!f.open(path, GP_F32, err))
      return error(err);
    if (f.shape() != std::vector<int64_t>(d.shape, d.shape + d.rank))
      return error(path + ": expected shape " + shapeToString(d.shape, d.rank) +
                   " for parameter '" + d.name + "', found " +
                   shapeToString(f.shape()));
    std::memcpy(arena.get() + d.offset, f.data(),
                static_cast<size_t>(f.dataBytes()));
  }

  // Graph inputs: map each file once, check it, copy a mini-batch per step.
  std::vector<InputData> inputs(program->num_inputs);
  int64_t numBatches = 0;
  for (int32_t i = 0; i < program->num_inputs; ++i) {
    const gp_tensor_desc &d = program->inputs[i];
    if (!checkDesc(d, program->arena_bytes, "input"))
      return 1;
    if (d.rank < 1 || d.shape[0] < 1)
      return error(std::string("invalid program: input '") + d.name +
                   "' needs a mini-batch dimension");
    InputData &in = inputs[i];
    in.path = joinPath(opt.data, std::string(d.name) + ".npy");
    if (!fileExists(in.path))
      return error("missing data file " + in.path + " for graph input '" +
                   d.name + "'");
    std::string err;
    if (!in.file.open(in.path, d.dtype, err))
      return error(err);
    const std::vector<int64_t> &s = in.file.shape();
    bool sameRow = s.size() == static_cast<size_t>(d.rank);
    for (int32_t k = 1; sameRow && k < d.rank; ++k)
      sameRow = s[k] == d.shape[k];
    if (!sameRow)
      return error(in.path + ": expected shape " + sampleShape(d) +
                   " for graph input '" + d.name + "', found " +
                   shapeToString(s));
    in.batch = d.shape[0];
    in.rowBytes = numElements(d) / d.shape[0] * dtypeSize(d.dtype);
    if (s[0] < in.batch)
      return error(in.path + ": " + std::to_string(s[0]) +
                   " samples, fewer than the mini-batch size " +
                   std::to_string(in.batch) + " of graph input '" + d.name +
                   "'");
    if (i == 0) {
      numBatches = s[0] / in.batch;
    } else if (s[0] != inputs[0].file.shape()[0]) {
      return error(in.path + " has " + std::to_string(s[0]) + " samples but " +
                   inputs[0].path + " has " +
                   std::to_string(inputs[0].file.shape()[0]));
    }
  }

  FILE *log = nullptr;
  if (!opt.logJson.empty()) {
    log = std::fopen(opt.logJson.c_str(), "w");
    if (!log)
      return error("cannot open log file " + opt.logJson + ": " +
                   std::strerror(errno));
  }
  std::unique_ptr<FILE, int (*)(FILE *)> logCloser(
      log, [](FILE *f) { return f ? std::fclose(f) : 0; });

  gp_step_ctx ctx{arena.get(), 0, 0};
  double totalMs = 0.0;
  for (int64_t s = 1; s <= opt.steps; ++s) {
    int64_t first = numBatches ? (s - 1) % numBatches : 0;
    for (int32_t i = 0; i < program->num_inputs; ++i) {
      const InputData &in = inputs[i];
      size_t bytes = static_cast<size_t>(in.batch * in.rowBytes);
      std::memcpy(arena.get() + program->inputs[i].offset,
                  in.file.data() + first * in.batch * in.rowBytes, bytes);
    }
    ctx.step = s;
    ctx.first_sample = first * (program->num_inputs ? inputs[0].batch : 0);
    auto t0 = std::chrono::steady_clock::now();
    float loss = program->step(&ctx);
    auto t1 = std::chrono::steady_clock::now();
    double ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
    totalMs += ms;
    if (!opt.quiet) {
      if (std::isnan(loss))
        std::printf("step %lld loss nan\n", static_cast<long long>(s));
      else
        std::printf("step %lld loss %.6f\n", static_cast<long long>(s),
                    static_cast<double>(loss));
      // Progress must be visible through pipes, and survive a later crash.
      std::fflush(stdout);
    }
    if (log) {
      // JSON has no NaN/Infinity literals.
      char lossStr[32] = "null";
      if (std::isfinite(loss))
        std::snprintf(lossStr, sizeof(lossStr), "%.9g",
                      static_cast<double>(loss));
      if (std::fprintf(log, "{\"step\":%lld,\"loss\":%s,\"ms\":%.6f}\n",
                       static_cast<long long>(s), lossStr, ms) < 0 ||
          std::fflush(log) != 0)
        return error("cannot write log file " + opt.logJson + ": " +
                     std::strerror(errno));
    }
  }
  std::fflush(stdout);
  if (log) {
    logCloser.release();
    if (std::fclose(log) != 0)
      return error("cannot write log file " + opt.logJson + ": " +
                   std::strerror(errno));
  }
  std::fprintf(stderr, "gpipe: %lld steps, mean %.3f ms/step\n",
               static_cast<long long>(opt.steps),
               opt.steps ? totalMs / static_cast<double>(opt.steps) : 0.0);

  if (opt.weightsOut.empty())
    return 0;
  std::error_code ec;
  std::filesystem::create_directories(opt.weightsOut, ec);
  if (ec)
    return error("cannot create directory " + opt.weightsOut + ": " +
                 ec.message());
  for (int32_t i = 0; i < program->num_params; ++i) {
    const gp_tensor_desc &d = program->params[i];
    std::string path = joinPath(opt.weightsOut, d.file);
    // The file name may contain directories of its own.
    std::filesystem::create_directories(
        std::filesystem::path(path).parent_path(), ec);
    if (ec)
      return error("cannot create directory for " + path + ": " + ec.message());
    std::string err;
    if (!npyWriteF32(path,
                     reinterpret_cast<const float *>(arena.get() + d.offset),
                     d.shape, static_cast<size_t>(d.rank), err))
      return error(err);
  }
  return 0;
}

} // namespace
} // namespace gpipe

extern "C" int gp_main(int argc, char **argv, const gp_program *program) {
  return gpipe::run(argc, argv, program);
}
