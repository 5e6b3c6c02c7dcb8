// Breadth-first pipeline parallelism (BFPP, Lamy-Poirier 2022, "Breadth-First
// Pipeline Parallelism"; the "looped BFS" of its figures): the model cut into
// K*V pieces placed as interleaved 1F1B's (stage s holds pieces s, s+K, ...),
// and each stage runs GPipe's order chunk by chunk: the forwards of every
// micro-batch through its chunk 0, then through chunk 1, ..., then the
// backwards, the last chunk first, micro-batches in reverse. A micro-batch
// passes every stage V times, so the pipeline fills V times faster than
// GPipe's: the bubble is (K-1)/V pieces' time instead of K-1 stages' (as
// interleaved 1F1B), with GPipe's memory (every micro-batch's stash on every
// chunk) and no requirement on M. The next chunk's forwards wait for the
// last stage's previous chunk (stage 0's chunk c+1 receives from stage K-1's
// chunk c), so its sends must not block: Sends::Buffered.
#include "passes/schedules/Schedules.h"

namespace gpipe {
namespace schedules {

using pipeline::ActionAttr;
using pipeline::Phase;

Table generateBreadthFirst(mlir::MLIRContext *ctx, int64_t k, int64_t m,
                           int64_t v) {
  Table table(k);
  for (auto &actions : table) {
    for (int64_t c = 0; c < v; ++c)
      for (int64_t i = 0; i < m; ++i)
        actions.push_back(ActionAttr::get(ctx, Phase::Forward, i, c));
    for (int64_t c = v - 1; c >= 0; --c)
      for (int64_t i = m - 1; i >= 0; --i)
        actions.push_back(ActionAttr::get(ctx, Phase::Backward, i, c));
    actions.push_back(ActionAttr::get(ctx, Phase::Update));
  }
  return table;
}

} // namespace schedules
} // namespace gpipe
