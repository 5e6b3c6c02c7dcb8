// ZB-H1, the zero-bubble schedule of Qi et al. 2024 ("Zero Bubble Pipeline
// Parallelism") with 1F1B's activation memory: the backward is split into
// the input gradient (B, which the stage before waits for) and the weight
// gradient (W, which nobody waits for), and the W's fill the time a stage
// would otherwise wait. The W actions run the weight-gradient GEMMs that
// gpipe-split-weight-grad deferred out of each micro-batch's backward.
//
// Built by simulating the pipeline with each stage's estimated costs of F, B
// and W (gpipe-schedule's, from the compiler's FLOPs; equal costs, the
// paper's assumption, when it has none): whenever a stage is free it runs,
// in this order of preference, the next B whose gradient has arrived, the
// next F whose input has arrived and whose stash fits 1F1B's bound (min(K-s, M) micro-batches between F and B
// on stage s), or the oldest W it owes; the update comes last. It does so
// with equal costs and with the estimates, and keeps the order whose step is
// shorter under the estimates. The result is a static order per stage like
// any other schedule's; its sends must not
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

/// The order the simulation gives with `costs`.
static Table simulateZBH1(mlir::MLIRContext *ctx, int64_t k, int64_t m,
                          const Costs &costs) {
  constexpr double kNever = std::numeric_limits<double>::infinity();
  // When micro-batch i's forward / backward ends on stage s.
  std::vector<std::vector<double>> forwardEnd(k, std::vector<double>(m, kNever));
  std::vector<std::vector<double>> backwardEnd(k,
                                               std::vector<double>(m, kNever));
  std::vector<int64_t> nextF(k, 0), nextB(k, 0), nextW(k, 0);
  std::vector<double> freeAt(k, 0.0); // when each stage's last action ends
  Table table(k);
  int64_t left = 3 * k * m;
  // Event by event: at each time some action ends, every free stage picks
  // its next action (stages in order). Some stage is always running or able
  // to run (the dependencies form no cycle), so this ends.
  for (double now = 0.0; left > 0;) {
    for (int64_t s = 0; s < k; ++s) {
      if (freeAt[s] > now)
        continue;
      const int64_t limit = std::min(k - s, m);
      const int64_t f = nextF[s], b = nextB[s];
      const bool backwardReady =
          b < f &&
          (s == k - 1 ? forwardEnd[s][b] : backwardEnd[s + 1][b]) <= now;
      const bool forwardReady = f < m && f - b < limit &&
                                (s == 0 || forwardEnd[s - 1][f] <= now);
      if (backwardReady) {
        table[s].push_back(ActionAttr::get(ctx, Phase::Backward, b));
        freeAt[s] = backwardEnd[s][b] = now + costs.b(s);
        ++nextB[s];
      } else if (forwardReady) {
        table[s].push_back(ActionAttr::get(ctx, Phase::Forward, f));
        freeAt[s] = forwardEnd[s][f] = now + costs.f(s);
        ++nextF[s];
      } else if (nextW[s] < b) {
        table[s].push_back(ActionAttr::get(ctx, Phase::Weight, nextW[s]++));
        freeAt[s] = now + costs.w(s);
      } else {
        continue;
      }
      --left;
    }
    double next = kNever;
    for (double t : freeAt)
      if (t > now)
        next = std::min(next, t);
    if (next == kNever)
      break; // nothing runs and nothing can: not reached
    now = next;
  }
  for (int64_t s = 0; s < k; ++s)
    table[s].push_back(ActionAttr::get(ctx, Phase::Update));
  return table;
}

Table generateZBH1(mlir::MLIRContext *ctx, int64_t k, int64_t m,
                   int64_t /*v: one chunk*/, const Costs &costs) {
  // Built with equal costs, and with the estimated ones when there are any:
  // the greedy choices differ, and either can be the better one; keep the
  // order with the shorter step under the estimates (theirs on a tie).
  Table equal = simulateZBH1(ctx, k, m, Costs());
  if (costs.forward.empty())
    return equal;
  Table fitted = simulateZBH1(ctx, k, m, costs);
  const Schedule &self = *lookup("zbh1");
  return replayStepTime(fitted, 1, costs, self) <=
                 replayStepTime(equal, 1, costs, self)
             ? fitted
             : equal;
}

} // namespace schedules
} // namespace gpipe
