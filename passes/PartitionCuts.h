// The partition's cut search (gpipe-partition), apart so that it can be
// tested against brute force.
#ifndef GPIPE_PASSES_PARTITIONCUTS_H
#define GPIPE_PASSES_PARTITIONCUTS_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/SmallVector.h"

#include <cstdint>
#include <optional>

namespace gpipe {

/// Whether units [begin, end) may form group `group` (0-based), e.g. fit a
/// memory budget.
using GroupFits =
    llvm::function_ref<bool(int64_t group, size_t begin, size_t end)>;

/// Cuts `cost` (one entry per unit, in order) into `k` contiguous non-empty
/// groups that minimise the largest group's sum, among the cuts whose every
/// group `fits` (all, when null). Among equally good cuts the later one is
/// kept (an earlier group takes the extra units). Returns the first unit of
/// each group; nullopt when no cut fits (or `k` exceeds the units, or is
/// below 1). Exact (dynamic programming over prefixes, O(k n^2)).
std::optional<llvm::SmallVector<size_t>>
balancedCuts(llvm::ArrayRef<double> cost, int64_t k,
             GroupFits fits = nullptr);

} // namespace gpipe

#endif // GPIPE_PASSES_PARTITIONCUTS_H
