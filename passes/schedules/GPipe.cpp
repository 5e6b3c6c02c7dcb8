// The GPipe schedule: all forwards, then all backwards in reverse, then the
// update, on every stage.
#include "passes/schedules/Schedules.h"

namespace gpipe {
namespace schedules {

Table generateGPipe(int64_t k, int64_t m) {
  Table table(k);
  for (auto &actions : table) {
    for (int64_t i = 0; i < m; ++i)
      actions.push_back({Action::Forward, i});
    for (int64_t i = m - 1; i >= 0; --i)
      actions.push_back({Action::Backward, i});
    actions.push_back({Action::Update, -1});
  }
  return table;
}

} // namespace schedules
} // namespace gpipe
