// CUDA convolutions (gp_conv_*): cuDNN on the arena's plain NCHW tensors (1-D
// as H = 1), descriptors and algorithms chosen once per distinct shape.
#include "cuda_internal.h"

#include "gpipe/runtime.h"

#include <cudnn.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <tuple>
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

/// One direction's algorithms, best first (see `candidates`), and the one in
/// use: a call that cuDNN answers NOT_SUPPORTED moves on to the next for good.
template <typename Algo> struct Candidates {
  struct Entry {
    Algo algo;
    cudnnMathType_t math;
  };
  std::vector<Entry> list;
  size_t current = 0;
  size_t bytes = 0; // the workspace of list[current], once `sized`
  bool sized = false;
  int proposed = 0; // how many algorithms the heuristic returned
};

/// One shape's descriptors and algorithms. Algorithms are deterministic ones
/// cuDNN's heuristics propose, in full FP32 (no TF32: results match the CPU
/// target's to about 1e-6), the implicit-GEMM family first. cuDNN pads both
/// sides equally: with asymmetric pads the input is padded explicitly into a
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
  // Shared by the three directions: each call first sets the math type of
  // the algorithm it runs.
  cudnnConvolutionDescriptor_t conv = nullptr;
  Candidates<cudnnConvolutionFwdAlgo_t> fwd;
  Candidates<cudnnConvolutionBwdDataAlgo_t> data;
  Candidates<cudnnConvolutionBwdFilterAlgo_t> filter;
  std::string shape; // for messages: "N=.. C=.. F=.. ..."
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

bool notSupported(cudnnStatus_t st) {
#ifdef CUDNN_STATUS_CATEGORY
  return CUDNN_STATUS_CATEGORY(st) == CUDNN_STATUS_NOT_SUPPORTED;
#else
  return st == CUDNN_STATUS_NOT_SUPPORTED;
#endif
}

/// How much an algorithm family is preferred (lower first): the implicit
/// GEMMs (forward; backward _0 / _1) compute each output as an FP32 dot
/// product, as the CPU target does; FFT and Winograd transform the operands
/// and can miss the tests' tolerances.
int familyRank(cudnnConvolutionFwdAlgo_t a) {
  switch (a) {
  case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM:
  case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM:
    return 0;
  case CUDNN_CONVOLUTION_FWD_ALGO_GEMM:
  case CUDNN_CONVOLUTION_FWD_ALGO_DIRECT:
    return 1;
  default: // FFT, FFT_TILING, WINOGRAD, WINOGRAD_NONFUSED
    return 2;
  }
}
int familyRank(cudnnConvolutionBwdDataAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 ||
                 a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_1
             ? 0
             : 2;
}
int familyRank(cudnnConvolutionBwdFilterAlgo_t a) {
  switch (a) {
  case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0:
  case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1:
    return 0;
  case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3:
    return 1;
  default:
    return 2;
  }
}

/// The heuristic's proposals that may run: cuDNN proposed them as supported,
/// deterministic, with FMA or DEFAULT math (never a tensor-op-only choice:
/// the descriptor asks for FMA math). A DEFAULT-math proposal may use TF32
/// tensor cores on sm_80 and later, so the order is: the FMA proposals; the
/// DEFAULT ones run with FMA math; the DEFAULT ones as proposed. Within each
/// group by family (familyRank), then in the heuristic's order.
template <typename Perf>
auto candidates(const Perf *perf, int n) -> Candidates<decltype(Perf::algo)> {
  using Algo = decltype(Perf::algo);
  struct Ranked {
    int math, family, order;
    typename Candidates<Algo>::Entry entry;
  };
  std::vector<Ranked> ranked;
  for (int i = 0; i < n; ++i) {
    const Perf &p = perf[i];
    if (p.status != CUDNN_STATUS_SUCCESS ||
        p.determinism != CUDNN_DETERMINISTIC ||
        (p.mathType != CUDNN_FMA_MATH && p.mathType != CUDNN_DEFAULT_MATH))
      continue;
    const bool fma = p.mathType == CUDNN_FMA_MATH;
    ranked.push_back(
        {fma ? 0 : 1, familyRank(p.algo), i, {p.algo, CUDNN_FMA_MATH}});
    if (!fma)
      ranked.push_back(
          {2, familyRank(p.algo), i, {p.algo, CUDNN_DEFAULT_MATH}});
  }
  std::sort(ranked.begin(), ranked.end(), [](const Ranked &a, const Ranked &b) {
    return std::tie(a.math, a.family, a.order) <
           std::tie(b.math, b.family, b.order);
  });
  Candidates<Algo> c;
  c.proposed = n;
  for (const Ranked &r : ranked)
    c.list.push_back(r.entry);
  return c;
}

/// Ends the run (naming the stage, as every CUDA error does) when a
/// direction of `p` has no algorithm left.
[[noreturn]] void refuse(const ConvPlan &p, const char *direction, int proposed,
                         const char *why, const char *file, int line) {
  char detail[768];
  std::snprintf(detail, sizeof detail,
                "the %s convolution %s: %s (cuDNN proposed %d algorithms; "
                "usable: supported, deterministic, FMA or DEFAULT math)",
                direction, p.shape.c_str(), why, proposed);
  gpipe::cuda::fail("cuDNN algorithm choice", detail, file, line);
}

/// Runs one direction of `p` with its current algorithm: sets the
/// descriptor's math type to the algorithm's, sizes the workspace, calls
/// `run(algo, workspace, bytes)`. A NOT_SUPPORTED answer (to the size query
/// or the call) moves on to the next candidate; any other error ends the run.
template <typename Algo, typename Size, typename Run>
void runConv(ConvPlan &p, Candidates<Algo> &c, const char *direction, Size size,
             Run run) {
  cudnnStatus_t last = CUDNN_STATUS_SUCCESS;
  for (; c.current < c.list.size(); ++c.current, c.sized = false) {
    const typename Candidates<Algo>::Entry &e = c.list[c.current];
    GP_CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv, e.math));
    cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
    if (!c.sized) {
      st = size(e.algo, &c.bytes);
      c.sized = st == CUDNN_STATUS_SUCCESS;
    }
    if (st == CUDNN_STATUS_SUCCESS)
      st = run(e.algo, workspace(c.bytes), c.bytes);
    if (st == CUDNN_STATUS_SUCCESS) {
      if (e.math != CUDNN_FMA_MATH) {
        static bool warned = false;
        if (!warned)
          std::fprintf(stderr,
                       "gpipe: warning: stage %d: the %s convolution %s runs "
                       "cuDNN algorithm %d with DEFAULT math (no FMA-only one "
                       "is supported): it may use TF32\n",
                       static_cast<int>(gpipe::cuda::currentStage()), direction,
                       p.shape.c_str(), static_cast<int>(e.algo));
        warned = true;
      }
      return;
    }
    if (!notSupported(st)) {
      char what[96];
      std::snprintf(what, sizeof what,
                    "the %s convolution (cuDNN algorithm %d)", direction,
                    static_cast<int>(e.algo));
      gpipe::cuda::fail(what, cudnnGetErrorString(st), __FILE__, __LINE__);
    }
    last = st;
  }
  refuse(p, direction, c.proposed,
         c.list.empty() ? "no usable algorithm"
                        : (std::string("every usable algorithm was refused, "
                                       "the last with ") +
                           cudnnGetErrorString(last))
                              .c_str(),
         __FILE__, __LINE__);
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
  // The heuristics propose for the descriptor's math type: FMA (no TF32).
  GP_CUDNN_CHECK(cudnnSetConvolutionMathType(p->conv, CUDNN_FMA_MATH));
  char shape[256];
  std::snprintf(shape, sizeof shape,
                "N=%lld C=%lld F=%lld input %dx%d (padded: %s) output %dx%d "
                "kernel %dx%d groups %lld",
                static_cast<long long>(s.N), static_cast<long long>(s.C),
                static_cast<long long>(s.F), p->inH, p->inW,
                p->padded ? "yes" : "no", oh, ow, kh, kw,
                static_cast<long long>(s.groups));
  p->shape = shape;

  // Room for every algorithm, even proposed once per math type.
  constexpr int kMax = 32;
  int n = 0;
  cudnnConvolutionFwdAlgoPerf_t fwd[kMax];
  GP_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(
      cs.handle, p->x, p->w, p->conv, p->y, kMax, &n, fwd));
  p->fwd = candidates(fwd, n);
  cudnnConvolutionBwdDataAlgoPerf_t data[kMax];
  GP_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
      cs.handle, p->w, p->y, p->conv, p->x, kMax, &n, data));
  p->data = candidates(data, n);
  cudnnConvolutionBwdFilterAlgoPerf_t filter[kMax];
  GP_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
      cs.handle, p->x, p->y, p->conv, p->w, kMax, &n, filter));
  p->filter = candidates(filter, n);
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
  runConv(
      p, p.fwd, "forward",
      [&](cudnnConvolutionFwdAlgo_t algo, size_t *bytes) {
        return cudnnGetConvolutionForwardWorkspaceSize(
            cs.handle, p.x, p.w, p.conv, p.y, algo, bytes);
      },
      [&](cudnnConvolutionFwdAlgo_t algo, void *ws, size_t bytes) {
        return cudnnConvolutionForward(cs.handle, &one, p.x, xin, p.w, w,
                                       p.conv, algo, ws, bytes, &zero, p.y, y);
      });
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
  runConv(
      p, p.data, "backward-data",
      [&](cudnnConvolutionBwdDataAlgo_t algo, size_t *bytes) {
        return cudnnGetConvolutionBackwardDataWorkspaceSize(
            cs.handle, p.w, p.y, p.conv, p.x, algo, bytes);
      },
      [&](cudnnConvolutionBwdDataAlgo_t algo, void *ws, size_t bytes) {
        return cudnnConvolutionBackwardData(cs.handle, &one, p.w, w, p.y, dy,
                                            p.conv, algo, ws, bytes, &zero, p.x,
                                            dxp);
      });
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
  runConv(
      p, p.filter, "backward-filter",
      [&](cudnnConvolutionBwdFilterAlgo_t algo, size_t *bytes) {
        return cudnnGetConvolutionBackwardFilterWorkspaceSize(
            cs.handle, p.x, p.y, p.conv, p.w, algo, bytes);
      },
      [&](cudnnConvolutionBwdFilterAlgo_t algo, void *ws, size_t bytes) {
        return cudnnConvolutionBackwardFilter(cs.handle, &one, p.x, xin, p.y,
                                              dy, p.conv, algo, ws, bytes,
                                              &zero, p.w, dw);
      });
}

} // extern "C"
