// Naive convolutions (forward, input and weight gradients, in double) and the
// cases the CPU and CUDA runtime tests check gp_conv_* against.
#ifndef GPIPE_TEST_UNIT_CONV_REFERENCE_H
#define GPIPE_TEST_UNIT_CONV_REFERENCE_H

#include "gpipe/runtime.h"

#include <cstdint>
#include <string>
#include <vector>

namespace convref {

struct Case {
  std::string name;
  gp_conv_shape s;
  bool bias;
};

/// Fills `out` from the other fields (the conv formula).
inline gp_conv_shape shape(int32_t spatial, int64_t N, int64_t C, int64_t F,
                           int64_t groups, std::vector<int64_t> in,
                           std::vector<int64_t> k, std::vector<int64_t> stride,
                           std::vector<int64_t> dil, std::vector<int64_t> pb,
                           std::vector<int64_t> pe) {
  gp_conv_shape s{};
  s.spatial = spatial;
  s.N = N;
  s.C = C;
  s.F = F;
  s.groups = groups;
  for (int i = 0; i < spatial; ++i) {
    s.in[i] = in[i];
    s.kernel[i] = k[i];
    s.stride[i] = stride[i];
    s.dilation[i] = dil[i];
    s.pad_begin[i] = pb[i];
    s.pad_end[i] = pe[i];
    s.out[i] =
        (in[i] + pb[i] + pe[i] - dil[i] * (k[i] - 1) - 1) / stride[i] + 1;
  }
  return s;
}

/// Strides, pads (symmetric and not), dilation, groups (depthwise
/// included), 1-D and 2-D, with and without bias, symmetric and asymmetric
/// pads.
inline std::vector<Case> cases() {
  std::vector<Case> c = {
      {"2d plain",
       shape(2, 2, 3, 4, 1, {5, 6}, {3, 3}, {1, 1}, {1, 1}, {0, 0}, {0, 0}),
       true},
      {"2d padded strided",
       shape(2, 3, 2, 5, 1, {7, 6}, {3, 2}, {2, 1}, {1, 1}, {1, 1}, {1, 1}),
       true},
      {"2d dilated",
       shape(2, 2, 3, 2, 1, {8, 8}, {3, 3}, {1, 1}, {2, 2}, {2, 2}, {2, 2}),
       false},
      {"2d grouped",
       shape(2, 2, 4, 6, 2, {5, 5}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}),
       true},
      {"2d depthwise strided",
       shape(2, 2, 4, 4, 4, {6, 6}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}),
       false},
      {"1d plain", shape(1, 3, 2, 4, 1, {9}, {3}, {1}, {1}, {0}, {0}), true},
      {"1d strided padded dilated",
       shape(1, 2, 3, 5, 1, {11}, {3}, {2}, {2}, {2}, {2}), true},
      {"1d depthwise", shape(1, 2, 3, 3, 3, {7}, {5}, {1}, {1}, {2}, {2}),
       false},
      {"2d asymmetric pads",
       shape(2, 2, 2, 3, 1, {5, 6}, {3, 3}, {2, 1}, {1, 1}, {0, 1}, {2, 0}),
       true},
      {"1d asymmetric pads", shape(1, 2, 2, 2, 1, {8}, {4}, {3}, {1}, {1}, {2}),
       false},
      // Output maps of at most 4 positions: the weight gradient is one GEMM
      // over the batch (conv.cpp's smallMapWeightGrad).
      {"2d 1x1 map padded",
       shape(2, 5, 6, 7, 1, {1, 1}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}),
       false},
      {"2d 2x2 map strided",
       shape(2, 3, 4, 5, 1, {4, 4}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}),
       true},
      {"1d small map dilated",
       shape(1, 3, 2, 3, 1, {6}, {3}, {2}, {2}, {1}, {0}), false},
  };
  return c;
}

inline int64_t elems(const gp_conv_shape &s, int64_t a, int64_t b,
                     const int64_t *dims) {
  int64_t n = a * b;
  for (int i = 0; i < s.spatial; ++i)
    n *= dims[i];
  return n;
}
inline int64_t xSize(const gp_conv_shape &s) {
  return elems(s, s.N, s.C, s.in);
}
inline int64_t wSize(const gp_conv_shape &s) {
  return elems(s, s.F, s.C / s.groups, s.kernel);
}
inline int64_t ySize(const gp_conv_shape &s) {
  return elems(s, s.N, s.F, s.out);
}

/// Calls `f(xIndex, wIndex, yIndex)` for every multiply-add of the conv.
template <typename F> void forEachTap(const gp_conv_shape &s, F f) {
  int64_t cg = s.C / s.groups, fg = s.F / s.groups;
  int64_t H = s.spatial == 2 ? s.in[0] : 1, W = s.in[s.spatial - 1];
  int64_t OH = s.spatial == 2 ? s.out[0] : 1, OW = s.out[s.spatial - 1];
  int64_t KH = s.spatial == 2 ? s.kernel[0] : 1, KW = s.kernel[s.spatial - 1];
  int d = s.spatial - 1;
  int64_t sh = s.spatial == 2 ? s.stride[0] : 1, sw = s.stride[d];
  int64_t dh = s.spatial == 2 ? s.dilation[0] : 1, dw = s.dilation[d];
  int64_t ph = s.spatial == 2 ? s.pad_begin[0] : 0, pw = s.pad_begin[d];
  for (int64_t n = 0; n < s.N; ++n)
    for (int64_t o = 0; o < s.F; ++o) {
      int64_t g = o / fg;
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow)
          for (int64_t c = 0; c < cg; ++c)
            for (int64_t kh = 0; kh < KH; ++kh)
              for (int64_t kw = 0; kw < KW; ++kw) {
                int64_t h = oh * sh - ph + kh * dh, w = ow * sw - pw + kw * dw;
                if (h < 0 || h >= H || w < 0 || w >= W)
                  continue;
                int64_t xi = ((n * s.C + g * cg + c) * H + h) * W + w;
                int64_t wi = ((o * cg + c) * KH + kh) * KW + kw;
                int64_t yi = ((n * s.F + o) * OH + oh) * OW + ow;
                f(xi, wi, yi);
              }
    }
}

inline std::vector<double> forward(const gp_conv_shape &s,
                                   const std::vector<float> &x,
                                   const std::vector<float> &w,
                                   const float *bias) {
  std::vector<double> y(ySize(s), 0.0);
  if (bias)
    for (size_t i = 0; i < y.size(); ++i)
      y[i] = bias[(i / (y.size() / s.N / s.F)) % s.F];
  forEachTap(s, [&](int64_t xi, int64_t wi, int64_t yi) {
    y[yi] += double(x[xi]) * w[wi];
  });
  return y;
}

inline std::vector<double> inputGrad(const gp_conv_shape &s,
                                     const std::vector<float> &dy,
                                     const std::vector<float> &w) {
  std::vector<double> dx(xSize(s), 0.0);
  forEachTap(s, [&](int64_t xi, int64_t wi, int64_t yi) {
    dx[xi] += double(dy[yi]) * w[wi];
  });
  return dx;
}

inline std::vector<double> weightGrad(const gp_conv_shape &s,
                                      const std::vector<float> &x,
                                      const std::vector<float> &dy) {
  std::vector<double> dw(wSize(s), 0.0);
  forEachTap(s, [&](int64_t xi, int64_t wi, int64_t yi) {
    dw[wi] += double(x[xi]) * dy[yi];
  });
  return dw;
}

/// max |got - ref| / max(1, max |ref|).
inline double maxErr(const std::vector<float> &got,
                     const std::vector<double> &ref) {
  double scale = 1.0, err = 0.0;
  for (double r : ref)
    scale = r > scale ? r : (-r > scale ? -r : scale);
  for (size_t i = 0; i < ref.size(); ++i) {
    double e = got[i] - ref[i];
    e = e < 0 ? -e : e;
    if (!(e <= err)) // NaN counts as an error
      err = e != e ? 1e30 : e;
  }
  return err / scale;
}

} // namespace convref

#endif
