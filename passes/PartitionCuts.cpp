// gpipe-partition's cut search: see PartitionCuts.h.
#include "passes/PartitionCuts.h"

#include <algorithm>
#include <limits>
#include <vector>

std::optional<llvm::SmallVector<size_t>>
gpipe::balancedCuts(llvm::ArrayRef<double> cost, int64_t k, GroupFits fits) {
  const size_t n = cost.size();
  if (k < 1 || static_cast<size_t>(k) > n)
    return std::nullopt;
  std::vector<double> prefix(n + 1, 0.0);
  for (size_t i = 0; i < n; ++i)
    prefix[i + 1] = prefix[i] + cost[i];
  const double inf = std::numeric_limits<double>::infinity();
  // best[j][i]: the smallest maximum over the first i units in j groups
  // (inf: none fits); from[j][i]: where its last group starts.
  std::vector<std::vector<double>> best(k + 1, std::vector<double>(n + 1, inf));
  std::vector<std::vector<size_t>> from(k + 1, std::vector<size_t>(n + 1, 0));
  best[0][0] = 0.0;
  for (int64_t j = 1; j <= k; ++j)
    for (size_t i = j; i <= n; ++i)
      for (size_t p = j - 1; p < i; ++p) {
        if (best[j - 1][p] == inf || (fits && !fits(j - 1, p, i)))
          continue;
        double v = std::max(best[j - 1][p], prefix[i] - prefix[p]);
        // Ties keep the later cut: the earlier group takes the extra units.
        if (v <= best[j][i]) {
          best[j][i] = v;
          from[j][i] = p;
        }
      }
  if (best[k][n] == inf)
    return std::nullopt;
  llvm::SmallVector<size_t> starts(k);
  size_t i = n;
  for (int64_t j = k; j >= 1; --j) {
    starts[j - 1] = from[j][i];
    i = from[j][i];
  }
  return starts;
}
