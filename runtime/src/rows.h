// Computations shared by the CPU and CUDA kernels (log-softmax rows, the
// maximum of gp_reduce_max): the same arithmetic on both targets. A row is n
// elements `stride` apart.
#ifndef GPIPE_RUNTIME_ROWS_H
#define GPIPE_RUNTIME_ROWS_H

#include "host_device.h"

#include <cmath>
#include <cstdint>

namespace gpipe {

/// a * b rounded on its own: CUDA would otherwise fuse it with a following
/// addition into an FMA, which the CPU does not.
GP_HOST_DEVICE inline float mulRounded(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

/// max(a, b), NaN if either is (torch's max and amax; fmaxf skips NaNs).
GP_HOST_DEVICE inline float maxPropagatingNaN(float a, float b) {
  return (a > b || a != a) ? a : b;
}

/// The maximum of the row (NaNs skipped, as std::max and fmaxf do).
GP_HOST_DEVICE inline float rowMax(const float *x, int64_t n, int64_t stride) {
  float m = -INFINITY;
  for (int64_t k = 0; k < n; ++k)
    m = fmaxf(m, x[k * stride]);
  return m;
}

/// y = x - (m + log(sum exp(x - m))), m the row's maximum, the sum in double.
/// y may alias x.
GP_HOST_DEVICE inline void logSoftmaxRow(const float *x, float *y, int64_t n,
                                         int64_t stride) {
  const float m = rowMax(x, n, stride);
  double s = 0.0;
  for (int64_t k = 0; k < n; ++k)
    s += expf(x[k * stride] - m);
  const float lse = m + static_cast<float>(log(s));
  for (int64_t k = 0; k < n; ++k)
    y[k * stride] = x[k * stride] - lse;
}

/// dx = dy - exp(y) * sum(dy) from the log-softmax's output y, the sum in
/// double. dx may alias dy.
GP_HOST_DEVICE inline void logSoftmaxBwdRow(const float *y, const float *dy,
                                            float *dx, int64_t n,
                                            int64_t stride) {
  double s = 0.0;
  for (int64_t k = 0; k < n; ++k)
    s += dy[k * stride];
  const float sf = static_cast<float>(s);
  for (int64_t k = 0; k < n; ++k)
    dx[k * stride] = dy[k * stride] - mulRounded(expf(y[k * stride]), sf);
}

} // namespace gpipe

#endif // GPIPE_RUNTIME_ROWS_H
