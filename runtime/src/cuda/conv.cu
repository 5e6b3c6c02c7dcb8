// CUDA convolutions (gp_conv_*): cuDNN on the arena's plain NCHW tensors (1-D
// as H = 1), descriptors and algorithms chosen once per distinct shape.
#include "cuda_internal.h"

#include "gpipe/runtime.h"

#include <cudnn.h>

#include <cstdio>
#include <map>
#include <memory>
#include <vector>

using gpipe::cuda::state;

#define GP_CUDNN_CHECK(call)                                                   \
  do {                                                                         \
    cudnnStatus_t gp_st_ = (call);                                             \
    if (gp_st_ != CUDNN_STATUS_SUCCESS)                                        \
      ::gpipe::cuda::fail(#call, cudnnGetErrorString(gp_st_), __FILE__,        \
                          __LINE__);                                           \
  } while (0)

namespace {

/// One shape's descriptors and algorithms. Algorithms are the fastest
/// deterministic ones cuDNN's heuristics propose, in full FP32 (no TF32:
/// results match the CPU target's to about 1e-6). cuDNN pads both sides
/// equally: with asymmetric pads the input is padded explicitly into a
/// scratch tensor [N, C, Hp, Wp] (`padded`) that cuDNN sees without pads
/// (`x` then describes it), and the input gradient is cropped out of it.
struct ConvPlan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr, b = nullptr;
  bool padded = false;
  int64_t nc = 0;       // N * C
  int inH = 0, inW = 0; // the input's spatial dims (1-D: inH = 1)
  int hp = 0, wp = 0;   // padded, when `padded`
  int padTop = 0, padLeft = 0;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnConvolutionFwdAlgo_t fwdAlgo{};
  cudnnConvolutionBwdDataAlgo_t dataAlgo{};
  cudnnConvolutionBwdFilterAlgo_t filterAlgo{};
  size_t fwdBytes = 0, dataBytes = 0, filterBytes = 0;
};

struct ConvState {
  cudnnHandle_t handle = nullptr;
  void *workspace = nullptr; // shared by every plan: one compute stream
  size_t workspaceBytes = 0;
  float *padScratch = nullptr; // the padded input or its gradient
  size_t padScratchBytes = 0;
  std::map<std::vector<int64_t>, std::unique_ptr<ConvPlan>> plans;
};

ConvState &convState() {
  static ConvState s;
  if (!s.handle) {
    GP_CUDNN_CHECK(cudnnCreate(&s.handle));
    GP_CUDNN_CHECK(cudnnSetStream(s.handle, state().compute));
  }
  return s;
}

void *workspace(size_t bytes) {
  ConvState &cs = convState();
  if (bytes > cs.workspaceBytes) {
    // The stream may still read the old buffer: wait before freeing it.
    GP_CUDA_CHECK(cudaStreamSynchronize(state().compute));
    if (cs.workspace)
      GP_CUDA_CHECK(cudaFree(cs.workspace));
    GP_CUDA_CHECK(cudaMalloc(&cs.workspace, bytes));
    cs.workspaceBytes = bytes;
  }
  return cs.workspace;
}

/// Scratch for the padded input (or its gradient), grown as needed.
float *padScratch(size_t bytes) {
  ConvState &cs = convState();
  if (bytes > cs.padScratchBytes) {
    GP_CUDA_CHECK(cudaStreamSynchronize(state().compute));
    if (cs.padScratch)
      GP_CUDA_CHECK(cudaFree(cs.padScratch));
    GP_CUDA_CHECK(cudaMalloc(&cs.padScratch, bytes));
    cs.padScratchBytes = bytes;
  }
  return cs.padScratch;
}

/// xp[nc, i, j] = x[nc, i - top, j - left], zero outside x.
__global__ void padInput(const float *x, float *xp, int64_t total, int h, int w,
                         int hp, int wp, int top, int left) {
  int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= total)
    return;
  int j = int(i % wp);
  int64_t t = i / wp;
  int r = int(t % hp);
  int64_t nc = t / hp;
  int rs = r - top, js = j - left;
  xp[i] =
      rs >= 0 && rs < h && js >= 0 && js < w ? x[(nc * h + rs) * w + js] : 0.0f;
}

/// x[nc, i, j] = xp[nc, i + top, j + left].
__global__ void cropInput(const float *xp, float *x, int64_t total, int h,
                          int w, int hp, int wp, int top, int left) {
  int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= total)
    return;
  int j = int(i % w);
  int64_t t = i / w;
  int r = int(t % h);
  int64_t nc = t / h;
  x[i] = xp[(nc * hp + r + top) * wp + j + left];
}

/// The tensor cuDNN reads as the input: x itself, or its padded copy.
const float *cudnnInput(const ConvPlan &p, const float *x) {
  if (!p.padded)
    return x;
  int64_t total = p.nc * p.hp * p.wp;
  float *xp = padScratch(size_t(total) * sizeof(float));
  padInput<<<unsigned((total + 255) / 256), 256, 0, state().compute>>>(
      x, xp, total, p.inH, p.inW, p.hp, p.wp, p.padTop, p.padLeft);
  GP_CUDA_LAUNCHED();
  return xp;
}

[[noreturn]] void refuse(const char *why) {
  std::fprintf(stderr, "gpipe: error: CUDA convolution: %s\n", why);
  std::exit(1);
}

template <typename Perf> int pick(const Perf *perf, int n) {
  for (int i = 0; i < n; ++i)
    if (perf[i].status == CUDNN_STATUS_SUCCESS &&
        perf[i].determinism == CUDNN_DETERMINISTIC)
      return i;
  refuse("cuDNN proposes no deterministic algorithm for this shape");
}

ConvPlan &planFor(const gp_conv_shape &s) {
  ConvState &cs = convState();
  std::vector<int64_t> key = {s.spatial, s.N, s.C, s.F, s.groups};
  for (int i = 0; i < s.spatial; ++i)
    key.insert(key.end(), {s.in[i], s.kernel[i], s.out[i], s.stride[i],
                           s.dilation[i], s.pad_begin[i], s.pad_end[i]});
  std::unique_ptr<ConvPlan> &slot = cs.plans[key];
  if (slot)
    return *slot;
  // 1-D as 2-D with H = 1 (the spatial dim is W).
  bool one = s.spatial == 1;
  int h = one ? 1 : int(s.in[0]), wi = int(one ? s.in[0] : s.in[1]);
  int oh = one ? 1 : int(s.out[0]), ow = int(one ? s.out[0] : s.out[1]);
  int kh = one ? 1 : int(s.kernel[0]),
      kw = int(one ? s.kernel[0] : s.kernel[1]);
  int d = s.spatial - 1; // index of W in the shape's arrays
  int padH = one ? 0 : int(s.pad_begin[0]), padW = int(s.pad_begin[d]);
  auto p = std::make_unique<ConvPlan>();
  p->nc = s.N * s.C;
  p->inH = h;
  p->inW = wi;
  if ((!one && s.pad_end[0] != s.pad_begin[0]) ||
      s.pad_end[d] != s.pad_begin[d]) {
    p->padded = true;
    p->padTop = padH;
    p->padLeft = padW;
    p->hp = h + padH + (one ? 0 : int(s.pad_end[0]));
    p->wp = wi + padW + int(s.pad_end[d]);
    h = p->hp;
    wi = p->wp;
    padH = padW = 0;
  }
  GP_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->x));
  GP_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->y));
  GP_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->b));
  GP_CUDNN_CHECK(cudnnCreateFilterDescriptor(&p->w));
  GP_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&p->conv));
  auto f32 = CUDNN_DATA_FLOAT;
  GP_CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->x, CUDNN_TENSOR_NCHW, f32,
                                            int(s.N), int(s.C), h, wi));
  GP_CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->y, CUDNN_TENSOR_NCHW, f32,
                                            int(s.N), int(s.F), oh, ow));
  GP_CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->b, CUDNN_TENSOR_NCHW, f32, 1,
                                            int(s.F), 1, 1));
  GP_CUDNN_CHECK(cudnnSetFilter4dDescriptor(
      p->w, f32, CUDNN_TENSOR_NCHW, int(s.F), int(s.C / s.groups), kh, kw));
  GP_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
      p->conv, padH, padW, one ? 1 : int(s.stride[0]), int(s.stride[d]),
      one ? 1 : int(s.dilation[0]), int(s.dilation[d]), CUDNN_CROSS_CORRELATION,
      f32));
  GP_CUDNN_CHECK(cudnnSetConvolutionGroupCount(p->conv, int(s.groups)));
  GP_CUDNN_CHECK(cudnnSetConvolutionMathType(p->conv, CUDNN_FMA_MATH));

  constexpr int kMax = 16;
  int n = 0;
  cudnnConvolutionFwdAlgoPerf_t fwd[kMax];
  GP_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(
      cs.handle, p->x, p->w, p->conv, p->y, kMax, &n, fwd));
  int i = pick(fwd, n);
  p->fwdAlgo = fwd[i].algo;
  GP_CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(
      cs.handle, p->x, p->w, p->conv, p->y, p->fwdAlgo, &p->fwdBytes));
  cudnnConvolutionBwdDataAlgoPerf_t data[kMax];
  GP_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
      cs.handle, p->w, p->y, p->conv, p->x, kMax, &n, data));
  i = pick(data, n);
  p->dataAlgo = data[i].algo;
  GP_CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(
      cs.handle, p->w, p->y, p->conv, p->x, p->dataAlgo, &p->dataBytes));
  cudnnConvolutionBwdFilterAlgoPerf_t filter[kMax];
  GP_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
      cs.handle, p->x, p->y, p->conv, p->w, kMax, &n, filter));
  i = pick(filter, n);
  p->filterAlgo = filter[i].algo;
  GP_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(
      cs.handle, p->x, p->y, p->conv, p->w, p->filterAlgo, &p->filterBytes));
  slot = std::move(p);
  return *slot;
}

} // namespace

extern "C" {

void gp_conv_fwd(const gp_conv_shape *s, const float *x, const float *w,
                 const float *bias, float *y) {
  ConvPlan &p = planFor(*s);
  ConvState &cs = convState();
  const float one = 1.f, zero = 0.f;
  const float *xin = cudnnInput(p, x);
  void *ws = workspace(p.fwdBytes);
  GP_CUDNN_CHECK(cudnnConvolutionForward(cs.handle, &one, p.x, xin, p.w, w,
                                         p.conv, p.fwdAlgo, ws, p.fwdBytes,
                                         &zero, p.y, y));
  if (bias)
    GP_CUDNN_CHECK(cudnnAddTensor(cs.handle, &one, p.b, bias, &one, p.y, y));
}

void gp_conv_bwd_data(const gp_conv_shape *s, const float *dy, const float *w,
                      float *dx) {
  ConvPlan &p = planFor(*s);
  ConvState &cs = convState();
  const float one = 1.f, zero = 0.f;
  float *dxp =
      p.padded ? padScratch(size_t(p.nc) * p.hp * p.wp * sizeof(float)) : dx;
  void *ws = workspace(p.dataBytes);
  GP_CUDNN_CHECK(cudnnConvolutionBackwardData(cs.handle, &one, p.w, w, p.y, dy,
                                              p.conv, p.dataAlgo, ws,
                                              p.dataBytes, &zero, p.x, dxp));
  if (p.padded) {
    int64_t total = p.nc * p.inH * p.inW;
    cropInput<<<unsigned((total + 255) / 256), 256, 0, state().compute>>>(
        dxp, dx, total, p.inH, p.inW, p.hp, p.wp, p.padTop, p.padLeft);
    GP_CUDA_LAUNCHED();
  }
}

void gp_conv_bwd_weights(const gp_conv_shape *s, const float *x,
                         const float *dy, float *dw) {
  ConvPlan &p = planFor(*s);
  ConvState &cs = convState();
  const float one = 1.f, zero = 0.f;
  const float *xin = cudnnInput(p, x);
  void *ws = workspace(p.filterBytes);
  GP_CUDNN_CHECK(cudnnConvolutionBackwardFilter(cs.handle, &one, p.x, xin, p.y,
                                                dy, p.conv, p.filterAlgo, ws,
                                                p.filterBytes, &zero, p.w, dw));
}

} // extern "C"
