// ZB-H1 and ZB-H2, the zero-bubble schedules of Qi et al. 2024 ("Zero Bubble
// Pipeline Parallelism", section 3): the backward is split into the input
// gradient (B, which the stage before waits for) and the weight gradient (W,
// which nobody waits for), and the W's fill the time a stage would otherwise
// wait. The W actions run the weight-gradient GEMMs that
// gpipe-split-weight-grad deferred out of each micro-batch's backward.
//
// Both are built by simulating the pipeline with equal costs for F, B and W
// (the paper's assumption; for a GEMM layer each is one product of the same
// size): whenever a stage is free it runs, in this order of preference, the
// next B whose gradient has arrived, the next F whose input has arrived and
// whose stash fits the schedule's bound, or W's it owes; the update comes
// last. The result is a static order per stage like any other schedule's;
// its sends must not block (as 1F1B's): Sends::Buffered.
//
// - ZB-H1 keeps 1F1B's bound, min(K-s, M) micro-batches between F and B on
//   stage s, and runs the oldest W it owes, one at a time.
// - ZB-H2 doubles it, min(2(K-s)-1, M): the extra warm-up forwards fill the
//   wait before a stage's first B, and more W's are left for the waits near
//   the end. Where a stage runs out of forwards (its cool-down) it can run
//   every W it owes as one run, which the step loop executes as one call
//   (one GEMM over their rows, the weight gradient read and written once).
//   Whether that pays depends on what one call costs beyond its rows: the
//   generator builds both orders and keeps the one whose simulated step is
//   shorter, charging each run of W's a fixed M/16 of one micro-batch's W
//   on top of its rows (at a fixed batch the call streams the same weight
//   gradient while a micro-batch's rows shrink as 1/M). Ties keep the
//   paper's order (one W at a time).
#include "passes/schedules/Schedules.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

namespace gpipe {
namespace schedules {

using pipeline::ActionAttr;
using pipeline::Phase;

namespace {

/// One action of the simulation: its phase and micro-batch.
struct Step {
  Phase phase;
  int64_t microbatch;
};
using Order = std::vector<std::vector<Step>>;

/// The greedy simulation above with at most bound(s) micro-batches stashed on
/// stage s; with `mergeCoolDown`, a stage that has run all its forwards and
/// must wait runs every W it owes at once (busy one unit per W).
template <typename Bound>
Order greedy(int64_t k, int64_t m, Bound bound, bool mergeCoolDown) {
  constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
  // When (in unit steps) micro-batch i's forward / backward ends on stage s.
  std::vector<std::vector<int64_t>> forwardEnd(k,
                                               std::vector<int64_t>(m, kNever));
  std::vector<std::vector<int64_t>> backwardEnd(
      k, std::vector<int64_t>(m, kNever));
  std::vector<int64_t> nextF(k, 0), nextB(k, 0), nextW(k, 0), busy(k, 0);
  Order order(k);
  int64_t left = 3 * k * m; // F, B and W actions still to place
  // Each unit step at least one stage can run something (the dependencies
  // form no cycle), so this ends within 3KM + 2K steps.
  for (int64_t t = 0; left > 0; ++t) {
    for (int64_t s = 0; s < k; ++s) {
      if (busy[s] > t)
        continue;
      const int64_t limit = std::min<int64_t>(bound(s), m);
      const int64_t f = nextF[s], b = nextB[s];
      const bool backwardReady =
          b < f && (s == k - 1 ? forwardEnd[s][b] : backwardEnd[s + 1][b]) <= t;
      const bool forwardReady =
          f < m && f - b < limit && (s == 0 || forwardEnd[s - 1][f] <= t);
      if (backwardReady) {
        order[s].push_back({Phase::Backward, b});
        backwardEnd[s][b] = t + 1;
        ++nextB[s];
        busy[s] = t + 1;
        --left;
      } else if (forwardReady) {
        order[s].push_back({Phase::Forward, f});
        forwardEnd[s][f] = t + 1;
        ++nextF[s];
        busy[s] = t + 1;
        --left;
      } else if (nextW[s] < b) {
        const int64_t run = mergeCoolDown && f == m ? b - nextW[s] : 1;
        for (int64_t i = 0; i < run; ++i)
          order[s].push_back({Phase::Weight, nextW[s]++});
        busy[s] = t + run;
        left -= run;
      }
    }
  }
  return order;
}

/// The step time of `order` in the steady state, in units of one
/// micro-batch's F (= B = W): each stage starts a step after its own update
/// of the last (U costs 1/2), a run of consecutive W's is one call costing
/// `callCost` more than its rows, transfers are free. Infinite if it stalls.
double steadyStep(const Order &order, int64_t m, double callCost) {
  const int64_t k = static_cast<int64_t>(order.size());
  constexpr double kUnset = -1;
  std::vector<double> free(k, 0), lastUpdate;
  for (int step = 0; step < 3; ++step) {
    std::vector<std::vector<double>> fEnd(k, std::vector<double>(m, kUnset));
    std::vector<std::vector<double>> bEnd(k, std::vector<double>(m, kUnset));
    std::vector<size_t> next(k, 0);
    for (bool moved = true; moved;) {
      moved = false;
      for (int64_t s = 0; s < k; ++s) {
        const std::vector<Step> &acts = order[s];
        while (next[s] < acts.size()) {
          const Step &a = acts[next[s]];
          double ready = free[s], cost = 1;
          size_t width = 1;
          if (a.phase == Phase::Forward && s > 0) {
            if (fEnd[s - 1][a.microbatch] == kUnset)
              break;
            ready = std::max(ready, fEnd[s - 1][a.microbatch]);
          } else if (a.phase == Phase::Backward && s < k - 1) {
            if (bEnd[s + 1][a.microbatch] == kUnset)
              break;
            ready = std::max(ready, bEnd[s + 1][a.microbatch]);
          } else if (a.phase == Phase::Weight) {
            while (next[s] + width < acts.size() &&
                   acts[next[s] + width].phase == Phase::Weight)
              ++width;
            cost = callCost + static_cast<double>(width);
          }
          free[s] = ready + cost;
          if (a.phase == Phase::Forward)
            fEnd[s][a.microbatch] = free[s];
          else if (a.phase == Phase::Backward)
            bEnd[s][a.microbatch] = free[s];
          next[s] += width;
          moved = true;
        }
      }
    }
    for (int64_t s = 0; s < k; ++s)
      if (next[s] < order[s].size())
        return std::numeric_limits<double>::infinity();
    for (int64_t s = 0; s < k; ++s)
      free[s] += 0.5; // the update
    lastUpdate.push_back(free[k - 1]);
  }
  return lastUpdate[2] - lastUpdate[1];
}

Table toTable(mlir::MLIRContext *ctx, const Order &order) {
  Table table(order.size());
  for (size_t s = 0; s < order.size(); ++s) {
    for (const Step &a : order[s])
      table[s].push_back(ActionAttr::get(ctx, a.phase, a.microbatch));
    table[s].push_back(ActionAttr::get(ctx, Phase::Update));
  }
  return table;
}

} // namespace

Table generateZBH1(mlir::MLIRContext *ctx, int64_t k, int64_t m,
                   int64_t /*v: one chunk*/) {
  return toTable(ctx, greedy(
                          k, m, [k](int64_t s) { return k - s; }, false));
}

Table generateZBH2(mlir::MLIRContext *ctx, int64_t k, int64_t m,
                   int64_t /*v: one chunk*/) {
  auto bound = [k](int64_t s) { return 2 * (k - s) - 1; };
  Order single = greedy(k, m, bound, false);
  Order merged = greedy(k, m, bound, true);
  const double callCost = static_cast<double>(m) / 16;
  return toTable(ctx, steadyStep(merged, m, callCost) <
                              steadyStep(single, m, callCost)
                          ? merged
                          : single);
}

} // namespace schedules
} // namespace gpipe
