// Pooling windows shared by the CPU and CUDA kernels (gp_max_pool,
// gp_avg_pool and their gradients): the same window bounds, scan order and
// divisor on both targets, torch's.
#ifndef GPIPE_RUNTIME_POOL_H
#define GPIPE_RUNTIME_POOL_H

#include "gpipe/runtime.h"
#include "host_device.h"

#include <cmath>
#include <cstdint>

namespace gpipe {

/// The maximum of output (oh, ow)'s window of one plane and its flat index
/// in the plane: the first maximum in row-major scan order, NaN winning (the
/// last NaN, as torch's CPU kernel); padding never counts.
GP_HOST_DEVICE inline void maxPoolWindow(const float *plane,
                                         const gp_pool_window &w, int64_t oh,
                                         int64_t ow, float *maxOut,
                                         int64_t *idxOut) {
  int64_t h0 = oh * w.sh - w.ph, w0 = ow * w.sw - w.pw;
  float best = -INFINITY;
  int64_t bestIdx = -1;
  for (int64_t i = 0; i < w.kh; ++i) {
    int64_t h = h0 + i * w.dh;
    if (h < 0 || h >= w.ih)
      continue;
    for (int64_t j = 0; j < w.kw; ++j) {
      int64_t c = w0 + j * w.dw;
      if (c < 0 || c >= w.iw)
        continue;
      float v = plane[h * w.iw + c];
      if (bestIdx < 0)
        bestIdx = h * w.iw + c;
      if (v > best || v != v) {
        best = v;
        bestIdx = h * w.iw + c;
      }
    }
  }
  *maxOut = best;
  *idxOut = bestIdx;
}

/// The input range [*hBegin, *hEnd) x [*wBegin, *wEnd) of output (oh, ow)'s
/// average window, and its divisor: the window clipped to the padded input
/// with count_include_pad, else the count of its input elements (torch).
GP_HOST_DEVICE inline float avgPoolWindow(const gp_pool_window &w, int64_t oh,
                                          int64_t ow, int32_t countIncludePad,
                                          int64_t *hBegin, int64_t *hEnd,
                                          int64_t *wBegin, int64_t *wEnd) {
  int64_t hs = oh * w.sh - w.ph, ws = ow * w.sw - w.pw;
  int64_t he = hs + w.kh < w.ih + w.ph_end ? hs + w.kh : w.ih + w.ph_end;
  int64_t we = ws + w.kw < w.iw + w.pw_end ? ws + w.kw : w.iw + w.pw_end;
  int64_t padded = (he - hs) * (we - ws);
  hs = hs < 0 ? 0 : hs;
  ws = ws < 0 ? 0 : ws;
  he = he > w.ih ? w.ih : he;
  we = we > w.iw ? w.iw : we;
  *hBegin = hs, *hEnd = he, *wBegin = ws, *wEnd = we;
  return static_cast<float>(countIncludePad ? padded : (he - hs) * (we - ws));
}

} // namespace gpipe

#endif
