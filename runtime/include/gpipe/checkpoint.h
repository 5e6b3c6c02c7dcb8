// Training checkpoints (docs/formats.md#checkpoints): what the stages write
// with --checkpoint-dir, what --resume reads. A checkpoint is the directory
// DIR/step-<S> (S zero-padded to 8 digits) holding one .npy per parameter and
// per optimizer state tensor, one index per stage (stage<K>.json) and, written
// last, manifest.json. A directory without a valid manifest.json is not a
// checkpoint: a save that died half-way is ignored and later removed.
#ifndef GPIPE_CHECKPOINT_H
#define GPIPE_CHECKPOINT_H

#include <cstdint>
#include <string>
#include <vector>

namespace gpipe {
namespace checkpoint {

inline constexpr const char *kFormat = "gpipe-checkpoint";
inline constexpr int64_t kVersion = 1;

/// One saved tensor: a parameter (slot "") or one of its optimizer state
/// tensors (slot "momentum_buffer", "exp_avg", "exp_avg_sq"), float32.
struct Tensor {
  std::string name; // the parameter's ONNX name
  std::string slot;
  std::string file; // relative to the checkpoint directory
  std::vector<int64_t> shape;
};

/// How the training data was walked: step s (1-based) reads mini-batch
/// (s - 1) mod (samples / batch) of epoch (s - 1) div (samples / batch),
/// in file order or, with shuffle, in the order of the epoch's permutation.
struct DataPosition {
  int64_t samples = 0;   // rows of the data files (-1: the stage had none)
  int64_t batchSize = 0; // B
  bool shuffle = false;
  uint64_t seed = 0;
};

/// A whole checkpoint (manifest.json).
struct Manifest {
  int64_t step = 0; // the optimizer steps done: a resumed run starts at step+1
  int64_t stages = 0, microbatches = 0; // of the pipeline that wrote it
  std::string optimizer;                // sgd | adam | adamw
  int64_t skippedUpdates = 0; // --on-nan skip: steps whose update was skipped
  DataPosition data;
  std::vector<Tensor> tensors;
};

/// "DIR/step-00000042".
std::string directoryFor(const std::string &dir, int64_t step);

/// A stage's part of a checkpoint being written into `tmpDir`: its tensor
/// list, synced to disk (tmpDir/stage<K>.json).
bool writeStageIndex(const std::string &tmpDir, int64_t stage,
                     const std::vector<Tensor> &tensors, std::string &err);

/// Completes the checkpoint in `tmpDir` once every stage wrote its part:
/// merges the stage indexes into manifest.json (written to a temporary name,
/// synced, renamed), syncs the directory, renames it to
/// directoryFor(dir, m.step) (replacing a checkpoint of the same step) and
/// syncs `dir`. Then keeps only the newest `keep` checkpoints (0: all).
bool commit(const std::string &dir, const std::string &tmpDir, Manifest m,
            int64_t keep, std::string &err);

/// Reads DIR/step-N/manifest.json.
bool read(const std::string &path, Manifest &m, std::string &err);

/// The newest complete checkpoint under `dir` ("" when there is none; an
/// unreadable directory is an error).
bool findLatest(const std::string &dir, std::string &path, std::string &err);

/// Removes what interrupted saves left under `dir` (step-*.tmp).
void removeIncomplete(const std::string &dir);

/// Creates `path` and its parents; syncs nothing.
bool makeDirectories(const std::string &path, std::string &err);

/// fsync of a directory (after a rename in it).
bool syncDirectory(const std::string &path, std::string &err);

} // namespace checkpoint
} // namespace gpipe

#endif
