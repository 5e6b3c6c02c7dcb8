// The GPipe schedule: all forwards, then all backwards in reverse, then the
// update, on every stage.
#include "passes/schedules/Schedules.h"

namespace gpipe {
namespace schedules {

using pipeline::ActionAttr;
using pipeline::Phase;

Table generateGPipe(mlir::MLIRContext *ctx, int64_t k, int64_t m,
                    int64_t /*v: one chunk*/) {
  Table table(k);
  for (auto &actions : table) {
    for (int64_t i = 0; i < m; ++i)
      actions.push_back(ActionAttr::get(ctx, Phase::Forward, i));
    for (int64_t i = m - 1; i >= 0; --i)
      actions.push_back(ActionAttr::get(ctx, Phase::Backward, i));
    actions.push_back(ActionAttr::get(ctx, Phase::Update));
  }
  return table;
}

} // namespace schedules
} // namespace gpipe
