// The step time of a schedule under given costs (zero-time transfers):
// schedules built by simulation compare candidate orders with it.
#include "passes/schedules/Schedules.h"

#include <algorithm>
#include <limits>
#include <map>
#include <tuple>

namespace gpipe {
namespace schedules {

using pipeline::ActionAttr;
using pipeline::Phase;

double replayStepTime(const Table &table, int64_t v, const Costs &costs,
                      const Schedule &schedule) {
  const int64_t k = static_cast<int64_t>(table.size());
  const int64_t n = k * v;
  auto pieceOf = [&](int64_t s, int64_t c) {
    return schedule.virtualStage(k, v, s, c);
  };
  // When (phase, piece, micro-batch) ends; absent: not yet run.
  std::map<std::tuple<int, int64_t, int64_t>, double> end;
  std::vector<size_t> pos(k, 0);
  std::vector<double> freeAt(k, 0.0);
  double last = 0.0;
  for (bool progress = true; progress;) {
    progress = false;
    for (int64_t s = 0; s < k; ++s)
      while (pos[s] < table[s].size()) {
        ActionAttr a = table[s][pos[s]];
        if (a.getPhase() == Phase::Update) {
          ++pos[s];
          continue;
        }
        const int64_t p = pieceOf(s, a.getChunk());
        const int64_t mb = *a.getMicrobatch();
        double ready = freeAt[s], cost = 0;
        if (a.getPhase() == Phase::Forward) {
          if (p > 0) {
            auto it = end.find({0, p - 1, mb});
            if (it == end.end())
              break;
            ready = std::max(ready, it->second);
          }
          cost = costs.f(p);
        } else if (a.getPhase() == Phase::Backward) {
          if (p + 1 < n) {
            auto it = end.find({1, p + 1, mb});
            if (it == end.end())
              break;
            ready = std::max(ready, it->second);
          }
          cost = costs.b(p);
        } else {
          cost = costs.w(p);
        }
        freeAt[s] = ready + cost;
        end[{a.getPhase() == Phase::Forward    ? 0
             : a.getPhase() == Phase::Backward ? 1
                                               : 2,
             p, mb}] = freeAt[s];
        last = std::max(last, freeAt[s]);
        ++pos[s];
        progress = true;
      }
  }
  for (int64_t s = 0; s < k; ++s)
    if (pos[s] < table[s].size())
      return std::numeric_limits<double>::infinity(); // cannot run
  return last;
}

} // namespace schedules
} // namespace gpipe
