// ZB-H1, the zero-bubble schedule of Qi et al. 2024 ("Zero Bubble Pipeline
// Parallelism") with 1F1B's activation memory: the backward is split into
// the input gradient (B, which the stage before waits for) and the weight
// gradient (W, which nobody waits for), and the W's fill the time a stage
// would otherwise wait. The W actions run the weight-gradient GEMMs that
// gpipe-split-weight-grad deferred out of each micro-batch's backward.
//
// Built by simulating the pipeline with equal costs for F, B and W (the
// paper's assumption; for a GEMM layer each is one product of the same
// size): whenever a stage is free it runs, in this order of preference, the
// next B whose gradient has arrived, the next F whose input has arrived and
// whose stash fits 1F1B's bound (min(K-s, M) micro-batches between F and B
// on stage s), or the oldest W it owes; the update comes last. The result is
// a static order per stage like any other schedule's; its sends must not
// block (as 1F1B's): Sends::Buffered.
#include "passes/schedules/Schedules.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

namespace gpipe {
namespace schedules {

using pipeline::ActionAttr;
using pipeline::Phase;

Table generateZBH1(mlir::MLIRContext *ctx, int64_t k, int64_t m,
                   int64_t /*v: one chunk*/) {
  constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
  // When (in unit steps) micro-batch i's forward / backward ends on stage s.
  std::vector<std::vector<int64_t>> forwardEnd(k, std::vector<int64_t>(m, kNever));
  std::vector<std::vector<int64_t>> backwardEnd(k,
                                                std::vector<int64_t>(m, kNever));
  std::vector<int64_t> nextF(k, 0), nextB(k, 0), nextW(k, 0);
  Table table(k);
  int64_t left = 3 * k * m;
  // Each unit step at least one stage can run something (the dependencies
  // form no cycle), so this ends within 3KM + 2K steps.
  for (int64_t t = 0; left > 0; ++t) {
    for (int64_t s = 0; s < k; ++s) {
      const int64_t limit = std::min(k - s, m);
      const int64_t f = nextF[s], b = nextB[s];
      const bool backwardReady =
          b < f && (s == k - 1 ? forwardEnd[s][b] : backwardEnd[s + 1][b]) <= t;
      const bool forwardReady = f < m && f - b < limit &&
                                (s == 0 || forwardEnd[s - 1][f] <= t);
      if (backwardReady) {
        table[s].push_back(ActionAttr::get(ctx, Phase::Backward, b));
        backwardEnd[s][b] = t + 1;
        ++nextB[s];
      } else if (forwardReady) {
        table[s].push_back(ActionAttr::get(ctx, Phase::Forward, f));
        forwardEnd[s][f] = t + 1;
        ++nextF[s];
      } else if (nextW[s] < b) {
        table[s].push_back(ActionAttr::get(ctx, Phase::Weight, nextW[s]++));
      } else {
        continue;
      }
      --left;
    }
  }
  for (int64_t s = 0; s < k; ++s)
    table[s].push_back(ActionAttr::get(ctx, Phase::Update));
  return table;
}

} // namespace schedules
} // namespace gpipe
