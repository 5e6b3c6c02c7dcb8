// The 1F1B schedule (PipeDream-flush, as in Narayanan et al. 2021): stage s
// runs min(K-1-s, M) warm-up forwards, then alternates one forward and one
// backward, then runs the remaining backwards (cool-down), then the update.
// Backwards run in micro-batch order, so stage s holds at most
// min(K-s, M) micro-batches' stashes at once, instead of GPipe's M.
//
// Its sends must not block (stage s sends micro-batch i+1's activation while
// stage s+1 sends micro-batch i's gradient back): Sends::Buffered.
#include "passes/schedules/Schedules.h"

#include <algorithm>

namespace gpipe {
namespace schedules {

using pipeline::ActionAttr;
using pipeline::Phase;

Table generateOneFOneB(mlir::MLIRContext *ctx, int64_t k, int64_t m,
                       int64_t /*v: one chunk*/) {
  Table table(k);
  for (int64_t s = 0; s < k; ++s) {
    auto &actions = table[s];
    const int64_t warmup = std::min(k - 1 - s, m);
    int64_t forward = 0, backward = 0;
    for (; forward < warmup; ++forward)
      actions.push_back(ActionAttr::get(ctx, Phase::Forward, forward));
    while (forward < m) {
      actions.push_back(ActionAttr::get(ctx, Phase::Forward, forward++));
      actions.push_back(ActionAttr::get(ctx, Phase::Backward, backward++));
    }
    while (backward < m)
      actions.push_back(ActionAttr::get(ctx, Phase::Backward, backward++));
    actions.push_back(ActionAttr::get(ctx, Phase::Update));
  }
  return table;
}

} // namespace schedules
} // namespace gpipe
