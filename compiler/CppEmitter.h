// Lowers a training-step function (nn + pipe ops) to C++ calling the runtime.
#ifndef GPIPE_COMPILER_CPPEMITTER_H
#define GPIPE_COMPILER_CPPEMITTER_H

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <string>
#include <vector>

namespace gpipe {

/// Where one parameter lives and which file holds its initial value.
struct EmittedParam {
  std::string name;
  std::string file; // inside the weights directory
  std::vector<int64_t> shape;
};

/// The static memory plan of a stage, all in bytes.
struct MemoryPlan {
  int64_t arenaBytes = 0;      // everything the stage allocates, once
  int64_t parameterBytes = 0;  // parameters
  int64_t optimizerBytes = 0;  // optimizer state (momentum, Adam moments)
  int64_t inputBytes = 0;      // one mini-batch of graph inputs
  int64_t activationBytes = 0; // peak of all temporaries (activations, grads)
  int64_t constantBytes = 0;   // constants compiled into the executable
};

struct EmittedStage {
  std::string source; // a complete C++17 translation unit
  std::vector<EmittedParam> params;
  MemoryPlan memory;
  int64_t flops = 0; // estimated FLOPs of one training step
};

/// Emits the stage program for `func`. Reports unsupported ops as located
/// errors and returns failure.
mlir::FailureOr<EmittedStage> emitStageCpp(mlir::func::FuncOp func,
                                           const std::string &programName);

/// Maps a parameter name to a portable file name ("fc1.weight" ->
/// "fc1.weight.npy", "a/b:c" -> "a_b_c.npy"), unique within `taken`.
std::string weightFileName(const std::string &name,
                           std::vector<std::string> &taken);

} // namespace gpipe

#endif
