// The analytic cost model: what an op costs before anything is measured
// (gpipe-partition's fallback, and the estimate that a --profile build's
// cost table splits a fused unit's time with).
#ifndef GPIPE_DIALECTS_NN_COSTMODEL_H
#define GPIPE_DIALECTS_NN_COSTMODEL_H

#include "dialects/nn/NNOps.h"

#include <algorithm>

namespace gpipe::nn {

/// A 100 GFLOP/s core with 20 GB/s of memory bandwidth.
constexpr double kAnalyticFlopsPerSecond = 100e9;
constexpr double kAnalyticBytesPerSecond = 20e9;

/// The estimated seconds of one run of `op` (0 for ops without a cost).
inline double analyticSeconds(mlir::Operation *op) {
  auto cost = llvm::dyn_cast<CostOpInterface>(op);
  if (!cost)
    return 0.0;
  return std::max(double(cost.getFlops()) / kAnalyticFlopsPerSecond,
                  double(cost.getBytesAccessed()) / kAnalyticBytesPerSecond);
}

} // namespace gpipe::nn

#endif
