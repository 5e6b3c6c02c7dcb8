// The gpipe-compile pipeline: ONNX -> training step -> stage executables.
#ifndef GPIPE_COMPILER_DRIVER_DRIVER_H
#define GPIPE_COMPILER_DRIVER_DRIVER_H

#include <optional>
#include <string>
#include <vector>

namespace gpipe {

struct OptimizerConfig {
  std::string kind = "sgd"; // sgd | adam | adamw
  double lr = 0.01;
  double momentum = 0.0;
  bool nesterov = false;
  double weightDecay = 0.0;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
};

struct CompileOptions {
  std::string modelPath;
  std::string outDir;
  std::optional<int64_t> batchSize;
  int64_t stages = 1;
  int64_t microbatches = 1;
  std::string target = "cpu";
  std::string emit = "exe"; // exe | cpp | mlir
  std::string lossName;
  std::string freeze; // --freeze REGEX: parameters not trained
  uint64_t seed = 0; // --seed: the random numbers of Dropout
  std::string remat = "auto"; // none | stage | auto
  /// --remat-stages: with remat stage, the pieces to rematerialize (empty:
  /// all).
  std::vector<int64_t> rematStages;
  /// remat segments (planned by --remat auto under --memory-per-stage): per
  /// stage, the stash bytes per micro-batch it may keep (-1: all).
  std::vector<int64_t> rematStashBytes;
  std::string schedule = "gpipe";
  /// Model chunks per stage (--virtual-stages V): the graph is cut into
  /// K*V pieces; interleaved schedules place V of them on each stage.
  int64_t virtualStages = 1;
  /// --data-parallel D: D replicas of the pipeline, each training on B/D
  /// of every mini-batch, their gradients averaged before each update.
  int64_t dataParallel = 1;
  /// --shard-optimizer (ZeRO-1): the optimizer state split across the
  /// replicas.
  bool shardOptimizer = false;
  /// --partition: the split points by hand (node names or module paths),
  /// K*V-1 of them; empty: the cost-balanced partition.
  std::vector<std::string> partition;
  /// --memory-per-stage: bytes each stage must fit (0: no limit).
  int64_t memoryPerStage = 0;
  /// BatchNorm running statistics: microbatch or deferred.
  std::string batchnorm = "microbatch";
  OptimizerConfig optimizer;
  std::string cxx;                // host C++ compiler for the CPU target
  std::string cpuArch = "native"; // -march= for the stage programs
  std::string cudaArch = "80,90"; // --cuda-arch: SM versions to build for
  std::string precision = "fp32"; // fp32 | bf16 (CUDA)
  bool allowTf32 = false;         // CUDA fp32 GEMMs may use TF32
  std::string nvcc;               // CUDA compiler (default: the build's)
  std::string compilerLauncher;   // e.g. ccache: runs each stage's compile
  bool explain = false;           // print the stage plan (ops, memory, cost)
  bool profile = false;           // --profile: timers in the stage programs
  std::string costs;              // --costs FILE: a measured cost table
  /// --auto: choose M, the schedule, its chunks and remat (compiler/driver/
  /// Auto.h) instead of taking them from the options.
  bool autoConfig = false;
  bool verbose = false;           // print the build commands
};

/// Runs the whole compilation. Every error is printed as one
/// "gpipe-compile: error: ..." line (plus context lines), and a non-zero code
/// is returned; the output directory is only touched once everything
/// succeeded, so a failed compile never corrupts an earlier result.
int compile(const CompileOptions &options);

} // namespace gpipe

#endif
