// Counter-based random numbers shared by the CPU and CUDA kernels (Dropout):
// a pure function of (key, step, index), so any recomputation, on any stage or
// target, draws the same bits.
#ifndef GPIPE_RUNTIME_RANDOM_H
#define GPIPE_RUNTIME_RANDOM_H

#include "host_device.h"

#include <cstdint>

namespace gpipe {

/// splitmix64's finalizer: a bijective mix of 64 bits.
GP_HOST_DEVICE inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

/// A uniform number in [0, 1) with 24 random bits for element `index` of the
/// tensor keyed `key` at optimizer step `step`.
GP_HOST_DEVICE inline float uniform01(uint64_t key, int64_t step,
                                      int64_t index) {
  uint64_t h =
      mix64(key ^ mix64(static_cast<uint64_t>(step) + 0x9E3779B97F4A7C15ULL));
  h = mix64(h ^ (static_cast<uint64_t>(index) * 0xD1B54A32D192ED03ULL));
  return static_cast<float>(h >> 40) * (1.0f / 16777216.0f);
}

/// Dropout's keep decision and scale: x / (1 - ratio) when kept, else 0.
GP_HOST_DEVICE inline float dropoutApply(uint64_t key, int64_t step,
                                         int64_t index, float ratio, float x) {
  return uniform01(key, step, index) >= ratio ? x / (1.0f - ratio) : 0.0f;
}

} // namespace gpipe

#endif // GPIPE_RUNTIME_RANDOM_H
