// The pipeline.json format: the manifest gpipe-compile writes into OUT, which
// gpipe-run and every stage program read (docs/formats.md#pipelinejson).
#ifndef GPIPE_MANIFEST_H
#define GPIPE_MANIFEST_H

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace gpipe {
namespace manifest {

/// The value of the "format" field, and the version this release writes
/// (version 1, the single-stage format of an earlier release, is still read).
inline constexpr const char *kFormat = "gpipe-pipeline";
inline constexpr int64_t kVersion = 2;

/// A stage program maps a weight file this many bytes at a time while it
/// loads it (each piece's pages dropped once copied into the arena): the
/// compiler's memory prediction adds the largest such piece of a stage.
inline constexpr int64_t kWeightLoadPieceBytes = int64_t(16) << 20;

/// The optimizer the update functions run (--optimizer and its flags).
struct Optimizer {
  std::string kind = "sgd"; // sgd | adam | adamw
  double lr = 0;
  double momentum = 0;                        // sgd only
  bool nesterov = false;                      // sgd only
  std::array<double, 2> betas = {0.9, 0.999}; // adam and adamw only
  double eps = 1e-8;                          // adam and adamw only
  double weightDecay = 0;
};

/// A graph input: the data file <name>.npy, one mini-batch of it.
struct Input {
  std::string name;
  std::string dtype; // float32 | int64
  std::vector<int64_t> shape;
  int64_t stage = -1; // the first stage that reads it, -1 if none
};

/// A parameter and its weight file (inside the weights directories).
struct Param {
  std::string name, file;
  std::vector<int64_t> shape;
};

/// A stage's static memory plan, all in bytes.
struct Memory {
  int64_t arenaBytes = 0;
  int64_t parameterBytes = 0;
  int64_t optimizerStateBytes = 0;
  int64_t gradientBytes = 0;
  int64_t activationBytesPerMicrobatch = 0;
  int64_t inFlightMicrobatches = 0;
  int64_t activationBytes = 0;
  int64_t transientPeakBytes = 0;
  int64_t inputBytesPerMicrobatch = 0;
  int64_t constantBytes = 0;
  int64_t bf16CopyBytes = 0;      // written for CUDA or bf16
  int64_t arenaConstantBytes = 0; // written for CUDA only, as the next two
  int64_t scratchBytes = 0;
  int64_t sendStagingBytes = 0;
  // CPU: the arena, the runtime's own memory (a cost table's runtime_bytes,
  // else 40 MiB) and MPI's send buffer; 0 when not predicted (CUDA).
  int64_t predictedPeakBytes = 0;
  int64_t predictedDeviceBytes = 0; // CUDA, from a CUDA cost table
};

/// One tensor crossing a stage's boundary, per micro-batch (in the update:
/// once per step).
struct Boundary {
  std::string direction; // send | recv
  std::string phase;     // forward | backward | update
  int64_t peer = 0, tag = 0;
  std::string type; // the MLIR tensor type, at micro-batch size
  int64_t bytes = 0;
};

struct Stage {
  int64_t index = 0, rank = 0;
  std::string executable;          // relative to OUT
  std::string weights = "weights"; // initial weights, relative to OUT
  int64_t flopsPerStep = 0;
  int64_t forwardFlopsPerMicrobatch = 0, backwardFlopsPerMicrobatch = 0;
  // Of the backward's: the deferred weight-gradient GEMMs (the update's, or
  // the W actions').
  int64_t weightFlopsPerMicrobatch = 0;
  std::vector<std::string> inputs; // graph inputs read from --data
  std::vector<Param> params;
  Memory memory;
  std::vector<Boundary> boundaries;
  std::vector<std::string> schedule; // "F0", ..., "B0", "W0", "U"; "F0c1"
  // Interleaved schedules (written when virtual_stages > 1): the virtual
  // stage (piece of the model) of each of the stage's chunks, and one
  // action's FLOPs per chunk (the *_flops_per_microbatch above are their
  // sums).
  std::vector<int64_t> virtualStages;
  std::vector<int64_t> chunkForwardFlops, chunkBackwardFlops, chunkWeightFlops;
  // gpipe-compile --costs: the predicted seconds per step of the stage's
  // forwards, backwards, weight-gradient GEMMs and update (written when
  // present), and the share of them the analytic model predicted.
  std::vector<double> predictedSeconds;
  double predictedAnalyticShare = 0;
};

/// The whole of pipeline.json. The reader leaves a field that is absent
/// from the file at the value below (unless it is required: see
/// readManifest).
struct Manifest {
  int64_t version = kVersion;
  std::string buildId;
  std::string model = "model.onnx"; // relative to OUT
  std::string sourceModel;          // absolute path of the compiled MODEL
  std::string target = "cpu";       // cpu | cuda
  std::string precision = "fp32";   // fp32 | bf16
  bool allowTf32 = false;           // written for CUDA only, as cudaArch
  std::vector<int64_t> cudaArch;
  int64_t batchSize = 0, microbatches = 0, microbatchSize = 0;
  std::string remat;    // none | stage
  std::vector<int64_t> rematStages; // --remat-stages (empty: all)
  // remat "segments": per stage, the stash bytes per micro-batch it may
  // keep (-1: all)
  std::vector<int64_t> rematStashBytes;
  std::string costs;    // --costs: the cost table the predictions are from
  bool profile = false; // --profile: the stages have timers
  std::string schedule; // the schedule's name
  int64_t virtualStages = 1; // model chunks per stage (--virtual-stages)
  // --data-parallel: replicas of the pipeline; batch_size is the global
  // mini-batch, microbatch_size a replica's micro-batch (B / (D * M)).
  int64_t dataParallel = 1;
  bool shardOptimizer = false; // --shard-optimizer (ZeRO-1)
  std::string loss;     // the graph output trained
  int64_t lossStage = -1;
  Optimizer optimizer;
  std::vector<Input> inputs;
  std::vector<Stage> stages;
};

/// The JSON text of `m` (with a final newline). Fields that apply only to
/// some compiles are written only for them: allow_tf32, cuda_arch and the
/// memory plan's arena_constant_bytes, scratch_bytes and send_staging_bytes
/// for target cuda, bf16_copy_bytes for cuda or bf16, the optimizer's
/// momentum and nesterov for sgd, its betas and eps for adam and adamw.
std::string writeManifest(const Manifest &m);

/// Reads the pipeline.json at `path` into `m`. Fails, with `err` saying
/// "PATH: ..." and naming the field, when the file cannot be read, is not
/// JSON, is not a gpipe pipeline description of version 1 or 2, lacks a
/// required field (stages, and in each its executable and params, and in
/// each parameter its name, file and shape), has a field of the wrong type,
/// or a stage whose index is not its position.
bool readManifest(const std::string &path, Manifest &m, std::string &err);

} // namespace manifest
} // namespace gpipe

#endif
