// The output size of a pooling window along one axis, shared by the nn
// pooling ops' verifiers and the ONNX importer.
#ifndef GPIPE_DIALECTS_NN_POOLSHAPE_H
#define GPIPE_DIALECTS_NN_POOLSHAPE_H

#include <cstdint>

namespace gpipe::nn {

/// Windows of `kernel` elements `dilation` apart, `stride` apart, over `in`
/// elements padded by `padBegin` and `padEnd`: floor((span - extent) /
/// stride) + 1 (ceil with `ceilMode`, dropping a last window that would
/// start past the input and its leading padding, as torch and ONNX do);
/// <= 0 when not even one window fits.
inline int64_t poolOutputSize(int64_t in, int64_t kernel, int64_t stride,
                              int64_t padBegin, int64_t padEnd,
                              int64_t dilation, bool ceilMode) {
  int64_t extent = dilation * (kernel - 1) + 1;
  int64_t span = in + padBegin + padEnd - extent;
  if (span < 0 || stride <= 0)
    return 0;
  int64_t out = (ceilMode ? (span + stride - 1) / stride : span / stride) + 1;
  if (ceilMode && (out - 1) * stride >= in + padBegin)
    --out;
  return out;
}

} // namespace gpipe::nn

#endif
