// Interleaved 1F1B (Narayanan et al. 2021, "Efficient Large-Scale Language
// Model Training on GPU Clusters Using Megatron-LM"): the model is cut into
// K*V pieces (virtual stages) and stage s holds V of them, pieces s, s + K,
// ..., s + (V-1)K (its chunks 0..V-1). A micro-batch passes every stage V
// times, so each pass is V times shorter and the pipeline fills and drains
// V times faster: the bubble is (K-1)/(V*M) of the step instead of
// (K-1)/M, for V times the transfers.
//
// Micro-batches run in groups of K: stage s runs the group's forwards of
// chunk 0, then of chunk 1, ..., then the next group's; backwards go the
// same way with the chunks in reverse (the last chunk first). Stage s runs
// (K-1-s)*2 + (V-1)*K warm-up forwards (at most all M*V), then one forward
// and one backward in turn, then the remaining backwards, then the update.
// It needs M to be a multiple of K (whole groups), K >= 2 (a stage never
// passes a micro-batch to itself) and sends that do not block (as 1F1B).
#include "passes/schedules/Schedules.h"

#include <algorithm>

namespace gpipe {
namespace schedules {

using pipeline::ActionAttr;
using pipeline::Phase;

std::string requireInterleaved(int64_t k, int64_t m, int64_t v) {
  if (k < 2)
    return "--schedule interleaved needs --stages >= 2 (its chunks pass "
           "micro-batches from stage to stage), got " +
           std::to_string(k);
  if (m % k != 0)
    return "--schedule interleaved needs --microbatches to be a multiple of "
           "--stages (micro-batches run in groups of K), got " +
           std::to_string(m) + " and " + std::to_string(k);
  (void)v;
  return "";
}

Table generateInterleaved(mlir::MLIRContext *ctx, int64_t k, int64_t m,
                          int64_t v) {
  const int64_t total = m * v; // forwards (and backwards) per stage
  const int64_t group = k * v; // actions of one group of K micro-batches
  // The i-th forward (backward) of a stage: its micro-batch and chunk.
  auto nth = [&](int64_t i, Phase phase) {
    const int64_t r = i % group;
    const int64_t mb = (i / group) * k + r % k;
    const int64_t chunk = phase == Phase::Forward ? r / k : v - 1 - r / k;
    return ActionAttr::get(ctx, phase, mb, chunk);
  };
  Table table(k);
  for (int64_t s = 0; s < k; ++s) {
    auto &actions = table[s];
    const int64_t warmup = std::min((k - 1 - s) * 2 + (v - 1) * k, total);
    int64_t forward = 0, backward = 0;
    for (; forward < warmup; ++forward)
      actions.push_back(nth(forward, Phase::Forward));
    while (forward < total) {
      actions.push_back(nth(forward++, Phase::Forward));
      actions.push_back(nth(backward++, Phase::Backward));
    }
    while (backward < total)
      actions.push_back(nth(backward++, Phase::Backward));
    actions.push_back(ActionAttr::get(ctx, Phase::Update));
  }
  return table;
}

} // namespace schedules
} // namespace gpipe
