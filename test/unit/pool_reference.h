// Naive references of the pooling kernels for the CPU and CUDA unit tests:
// windows read from an explicitly padded plane, output sizes from torch's
// formula, gradients by scattering (max) or as the adjoint (average).
#ifndef GPIPE_TEST_UNIT_POOL_REFERENCE_H
#define GPIPE_TEST_UNIT_POOL_REFERENCE_H

#include "gpipe/runtime.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace pool_ref {

/// torch's output size: (in + pads - dilation * (k - 1) - 1) / stride + 1,
/// rounded up with ceil_mode, minus one if the last window starts past the
/// input and its leading padding.
inline int64_t outSize(int64_t in, int64_t k, int64_t s, int64_t pb, int64_t pe,
                       int64_t d, bool ceil) {
  double span = static_cast<double>(in + pb + pe - d * (k - 1) - 1) / s;
  int64_t out =
      static_cast<int64_t>(ceil ? std::ceil(span) : std::floor(span)) + 1;
  if (ceil && (out - 1) * s >= in + pb)
    --out;
  return out;
}

/// A window over ih x iw planes (ceil_mode decides the output size).
inline gp_pool_window window(int64_t ih, int64_t iw, int64_t kh, int64_t kw,
                             int64_t sh, int64_t sw, int64_t ph, int64_t pw,
                             int64_t phe, int64_t pwe, int64_t dh, int64_t dw,
                             bool ceil) {
  return gp_pool_window{ih,
                        iw,
                        outSize(ih, kh, sh, ph, phe, dh, ceil),
                        outSize(iw, kw, sw, pw, pwe, dw, ceil),
                        kh,
                        kw,
                        sh,
                        sw,
                        ph,
                        pw,
                        phe,
                        pwe,
                        dh,
                        dw};
}

/// Rows and columns of the padded plane, room for ceil_mode's last window.
inline int64_t paddedRows(const gp_pool_window &w) {
  return std::max(w.ph + w.ih + w.ph_end,
                  (w.oh - 1) * w.sh + (w.kh - 1) * w.dh + 1);
}
inline int64_t paddedCols(const gp_pool_window &w) {
  return std::max(w.pw + w.iw + w.pw_end,
                  (w.ow - 1) * w.sw + (w.kw - 1) * w.dw + 1);
}

/// Max pooling: the first largest element of the window scanned row by row
/// (NaN largest, the last NaN kept, torch's CPU rule); index h * iw + w.
inline void maxPool(const std::vector<float> &x, int64_t nc,
                    const gp_pool_window &w, std::vector<float> &y,
                    std::vector<int64_t> &idx) {
  const int64_t R = paddedRows(w), C = paddedCols(w);
  const float ninf = -std::numeric_limits<float>::infinity();
  y.assign(nc * w.oh * w.ow, 0.0f);
  idx.assign(nc * w.oh * w.ow, -1);
  for (int64_t p = 0; p < nc; ++p) {
    std::vector<float> pad(R * C, ninf);
    std::vector<int64_t> src(R * C, -1);
    for (int64_t h = 0; h < w.ih; ++h)
      for (int64_t c = 0; c < w.iw; ++c) {
        pad[(h + w.ph) * C + c + w.pw] = x[p * w.ih * w.iw + h * w.iw + c];
        src[(h + w.ph) * C + c + w.pw] = h * w.iw + c;
      }
    for (int64_t oh = 0; oh < w.oh; ++oh)
      for (int64_t ow = 0; ow < w.ow; ++ow) {
        float best = ninf;
        int64_t at = -1;
        for (int64_t i = 0; i < w.kh; ++i)
          for (int64_t j = 0; j < w.kw; ++j) {
            int64_t r = oh * w.sh + i * w.dh, c = ow * w.sw + j * w.dw;
            if (src[r * C + c] < 0)
              continue;
            float v = pad[r * C + c];
            if (at < 0) // all -inf: torch keeps the first position
              at = src[r * C + c];
            if (v > best || std::isnan(v)) {
              best = v;
              at = src[r * C + c];
            }
          }
        y[p * w.oh * w.ow + oh * w.ow + ow] = best;
        idx[p * w.oh * w.ow + oh * w.ow + ow] = at;
      }
  }
}

/// Its gradient: dy added at the indices, outputs in order.
inline std::vector<float> maxPoolBwd(const std::vector<int64_t> &idx,
                                     const std::vector<float> &dy, int64_t nc,
                                     const gp_pool_window &w) {
  std::vector<float> dx(nc * w.ih * w.iw, 0.0f);
  for (int64_t p = 0; p < nc; ++p)
    for (int64_t o = 0; o < w.oh * w.ow; ++o)
      dx[p * w.ih * w.iw + idx[p * w.oh * w.ow + o]] += dy[p * w.oh * w.ow + o];
  return dx;
}

/// Average pooling in double over a zero-padded plane: the divisor counts
/// the window's positions inside the padded input (count_include_pad) or
/// inside the input.
inline std::vector<double> avgPool(const std::vector<float> &x, int64_t nc,
                                   const gp_pool_window &w, bool includePad) {
  std::vector<double> y(nc * w.oh * w.ow, 0.0);
  for (int64_t p = 0; p < nc; ++p)
    for (int64_t oh = 0; oh < w.oh; ++oh)
      for (int64_t ow = 0; ow < w.ow; ++ow) {
        double sum = 0;
        int64_t inside = 0, padded = 0;
        for (int64_t i = 0; i < w.kh; ++i)
          for (int64_t j = 0; j < w.kw; ++j) {
            int64_t h = oh * w.sh - w.ph + i, c = ow * w.sw - w.pw + j;
            if (h >= -w.ph && h < w.ih + w.ph_end && c >= -w.pw &&
                c < w.iw + w.pw_end)
              ++padded;
            if (h < 0 || h >= w.ih || c < 0 || c >= w.iw)
              continue;
            ++inside;
            sum += x[p * w.ih * w.iw + h * w.iw + c];
          }
        y[p * w.oh * w.ow + oh * w.ow + ow] =
            sum / (includePad ? padded : inside);
      }
  return y;
}

/// The average pooling's gradient, column by column: dx[e] is dy against
/// the pooling of the unit vector e (each plane on its own).
inline std::vector<double> avgPoolBwd(const std::vector<float> &dy, int64_t nc,
                                      const gp_pool_window &w,
                                      bool includePad) {
  const int64_t in = w.ih * w.iw, out = w.oh * w.ow;
  std::vector<double> dx(nc * in, 0.0);
  for (int64_t e = 0; e < in; ++e) {
    std::vector<float> unit(in, 0.0f);
    unit[e] = 1.0f;
    std::vector<double> col = avgPool(unit, 1, w, includePad);
    for (int64_t p = 0; p < nc; ++p)
      for (int64_t o = 0; o < out; ++o)
        dx[p * in + e] += col[o] * dy[p * out + o];
  }
  return dx;
}

/// The windows the unit tests run: 2-D with pads before and after, strides,
/// dilations, ceil_mode on and off, and 1-D (a 1-high plane).
struct Case {
  const char *name;
  gp_pool_window w;
};

inline std::vector<Case> cases(bool dilated) {
  std::vector<Case> c = {
      {"2x2 stride 2", window(8, 8, 2, 2, 2, 2, 0, 0, 0, 0, 1, 1, false)},
      {"3x3 stride 2 pad 1 ceil",
       window(4, 4, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, true)},
      {"3x2 stride 2x1 pads 1,0,0,1",
       window(7, 9, 3, 2, 2, 1, 1, 0, 0, 1, 1, 1, false)},
      {"3x3 stride 2 ceil odd",
       window(9, 6, 3, 3, 2, 2, 0, 1, 0, 1, 1, 1, true)},
      {"overlapping 3x3 stride 1 pad 1",
       window(5, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, false)},
      {"1-D k3 s2 pad 1 ceil",
       window(1, 11, 1, 3, 1, 2, 0, 1, 0, 1, 1, 1, true)},
      {"global 5x5", window(5, 5, 5, 5, 1, 1, 0, 0, 0, 0, 1, 1, false)}};
  if (dilated) {
    c.push_back({"2x2 dilation 2 pad 1",
                 window(7, 7, 2, 2, 1, 1, 1, 1, 1, 1, 2, 2, false)});
    c.push_back({"1-D k2 dilation 2 stride 3 pad 1,0",
                 window(1, 8, 1, 2, 1, 3, 0, 1, 0, 0, 1, 2, false)});
  }
  return c;
}

} // namespace pool_ref

#endif
