// ZB-V, the V-shaped zero-bubble schedule of Qi et al. 2024 ("Zero Bubble
// Pipeline Parallelism", section 6): the model is cut into 2K pieces and
// stage s holds pieces s (its chunk 0) and 2K-1-s (its chunk 1), so a
// micro-batch goes down the stages and back up: stage 0 holds the first and
// the last piece (it reads the inputs and computes the loss), and stage K-1
// hands its chunk 0's output to its own chunk 1 (in its arena). As ZB-H1,
// each backward is split into B (the input gradient) and W (the
// weight-gradient GEMMs, gpipe-split-weight-grad's), and the W's fill what
// would be waits.
//
// Built by simulating the pipeline with equal costs for every piece's F, B
// and W (the paper's assumption): whenever a stage is free it runs, in this
// order of preference, the B whose gradient has arrived (the oldest
// micro-batch first, then chunk 1), the F whose input has arrived (chunk 1
// first, the oldest micro-batch first) if the stage holds fewer than 2K
// pieces' stashes (K micro-batches of both chunks: 1F1B's stage-0 memory,
// the same on every stage), or its oldest pending W. The update comes last.
// Sends must not block: Sends::Buffered.
#include "passes/schedules/Schedules.h"

#include <algorithm>
#include <cstdint>
#include <deque>
#include <limits>
#include <vector>

namespace gpipe {
namespace schedules {

using pipeline::ActionAttr;
using pipeline::Phase;

int64_t placeV(int64_t k, int64_t /*v*/, int64_t s, int64_t c) {
  return c == 0 ? s : 2 * k - 1 - s;
}

/// The simulation with at most `limit` stashes per stage; empty when it
/// stalls (every stage full of stashes whose gradients cannot arrive).
static Table simulateZBV(mlir::MLIRContext *ctx, int64_t k, int64_t m,
                         int64_t limit) {
  constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
  const int64_t n = 2 * k; // pieces
  auto chunkOf = [&](int64_t p) { return p < k ? int64_t(0) : int64_t(1); };
  // When (in unit steps) micro-batch i's forward / backward of piece p ends.
  std::vector<std::vector<int64_t>> forwardEnd(n,
                                               std::vector<int64_t>(m, kNever));
  std::vector<std::vector<int64_t>> backwardEnd(
      n, std::vector<int64_t>(m, kNever));
  std::vector<int64_t> nextF(n, 0), nextB(n, 0);
  std::vector<std::deque<std::pair<int64_t, int64_t>>> pendingW(k);
  std::vector<int64_t> live(k, 0); // stashes held: F done, B not yet
  Table table(k);
  int64_t left = 3 * n * m;
  for (int64_t t = 0; left > 0; ++t) {
    bool ran = false;
    for (int64_t s = 0; s < k; ++s) {
      const int64_t pieces[2] = {s, 2 * k - 1 - s}; // chunks 0 and 1
      auto backwardReady = [&](int64_t p) {
        int64_t b = nextB[p];
        return b < nextF[p] &&
               (p == n - 1 ? forwardEnd[p][b] : backwardEnd[p + 1][b]) <= t;
      };
      auto forwardReady = [&](int64_t p) {
        int64_t f = nextF[p];
        return f < m && live[s] < limit &&
               (p == 0 || forwardEnd[p - 1][f] <= t);
      };
      // B: the oldest micro-batch, then chunk 1.
      int64_t pick = -1;
      for (int64_t c : {1, 0})
        if (backwardReady(pieces[c]) &&
            (pick < 0 || nextB[pieces[c]] < nextB[pick]))
          pick = pieces[c];
      if (pick >= 0) {
        int64_t b = nextB[pick]++;
        table[s].push_back(
            ActionAttr::get(ctx, Phase::Backward, b, chunkOf(pick)));
        backwardEnd[pick][b] = t + 1;
        pendingW[s].push_back({pick, b});
        --live[s];
        --left;
        ran = true;
        continue;
      }
      // F: chunk 1 first (it drains towards the loss), the oldest first.
      for (int64_t c : {1, 0})
        if (forwardReady(pieces[c]) &&
            (pick < 0 || nextF[pieces[c]] < nextF[pick]))
          pick = pieces[c];
      if (pick >= 0) {
        int64_t f = nextF[pick]++;
        table[s].push_back(
            ActionAttr::get(ctx, Phase::Forward, f, chunkOf(pick)));
        forwardEnd[pick][f] = t + 1;
        ++live[s];
        --left;
        ran = true;
        continue;
      }
      if (!pendingW[s].empty()) {
        auto [p, mb] = pendingW[s].front();
        pendingW[s].pop_front();
        table[s].push_back(
            ActionAttr::get(ctx, Phase::Weight, mb, chunkOf(p)));
        --left;
        ran = true;
      }
    }
    // Nothing ran and nothing is running (every action ends at t + 1): no
    // later step can run anything either.
    if (!ran && left > 0) {
      bool running = false;
      for (int64_t p = 0; p < n && !running; ++p)
        for (int64_t i = 0; i < m && !running; ++i)
          running = (forwardEnd[p][i] != kNever && forwardEnd[p][i] > t) ||
                    (backwardEnd[p][i] != kNever && backwardEnd[p][i] > t);
      if (!running)
        return {};
    }
  }
  for (int64_t s = 0; s < k; ++s)
    table[s].push_back(ActionAttr::get(ctx, Phase::Update));
  return table;
}

Table generateZBV(mlir::MLIRContext *ctx, int64_t k, int64_t m,
                  int64_t /*v: two chunks*/) {
  // 2K stashes (K micro-batches of both chunks, each half a stage), or more
  // where that stalls; with 2M nothing waits for memory and the
  // dependencies (acyclic) always let some stage run.
  for (int64_t limit = std::min(2 * k, 2 * m);; ++limit)
    if (Table table = simulateZBV(ctx, k, m, limit); !table.empty()) {
      // Each run of W's chunk by chunk (micro-batches in order within a
      // chunk): the step loop runs a chunk's consecutive W's as one call,
      // whose GEMMs cover their rows at once (one W alone streams the
      // whole weight gradient for its few rows). Any order of a run's W's
      // is valid: each comes after its B, and nothing waits for a W.
      for (auto &actions : table)
        for (size_t i = 0; i < actions.size();) {
          size_t j = i;
          while (j < actions.size() && actions[j].getPhase() == Phase::Weight)
            ++j;
          std::stable_sort(actions.begin() + i, actions.begin() + j,
                           [](ActionAttr a, ActionAttr b) {
                             return std::make_pair(a.getChunk(),
                                                   *a.getMicrobatch()) <
                                    std::make_pair(b.getChunk(),
                                                   *b.getMicrobatch());
                           });
          i = j == i ? i + 1 : j;
        }
      return table;
    }
}

} // namespace schedules
} // namespace gpipe
