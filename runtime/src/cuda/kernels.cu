// CUDA implementations of the runtime's kernels (gpipe/runtime.h, section
// "Kernels") and of gpipe/runtime_cuda.h: cuBLASLt GEMMs, broadcast
// reductions, block copies, the losses and the optimizers.
//
// Every pointer is a device pointer; everything is enqueued on the compute
// stream and returns at once: nothing here synchronises or allocates device
// memory (one exception: the attention workspace grows, once per larger
// shape, when a single block's score tiles exceed it; see attentionChunks).
// The semantics are those of the CPU reference (kernels.cpp); the optimizer
// updates repeat its float operations one by one (no FMA contraction), so
// that a CUDA stage trains like a CPU one.
#include "cuda_internal.h"
#include "internal.h"
#include "random.h"
#include "pool.h"
#include "rows.h"

#include <cuda_bf16.h>
#include <math_constants.h>

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <tuple>
#include <unordered_map>

namespace gpipe {
namespace cuda {
GemmTestHooks &gemmTestHooks() {
  static GemmTestHooks hooks;
  return hooks;
}
GemmFallbacks &gemmFallbacks() {
  static GemmFallbacks counts;
  return counts;
}
bool gemmBiasEpilogueOk(const void *bias) {
  return reinterpret_cast<uintptr_t>(bias) % 16 == 0;
}
} // namespace cuda
} // namespace gpipe

namespace {

using gpipe::pyDouble;
using gpipe::cuda::fail;
using gpipe::cuda::state;

//===----------------------------------------------------------------------===//
// Launch helpers
//===----------------------------------------------------------------------===//

/// Threads per block of the elementwise and reduction kernels.
constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / 32;

/// Grid-stride kernels never need more blocks than this to fill any current
/// GPU; more would only add block scheduling overhead.
constexpr int64_t kMaxBlocks = 8192;

/// Blocks for a grid-stride loop over `work` items handled `perBlock` at a
/// time (at least one block, so that kernels with a scalar result still run).
unsigned blocksFor(int64_t work, int64_t perBlock = kThreads) {
  int64_t blocks = (work + perBlock - 1) / perBlock;
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, kMaxBlocks));
}

cudaStream_t stream() { return state().compute; }

/// Threads of a column-sum block (sumColumnsKernel, layerNormScaleBwdKernel).
constexpr int kColumnThreads = 512;

/// The columns a column-sum block owns, for `outer` matrices of `cols`
/// columns: enough blocks to keep a large GPU busy (narrower column tiles make
/// more blocks); 8 floats (one 32-byte sector) per row and tile stay
/// efficient.
int columnTileWidth(int64_t outer, int64_t cols) {
  constexpr int64_t kTargetBlocks = 256;
  if (cols < 8)
    return static_cast<int>(cols);
  int width = 32;
  while (width > 8 && (cols + width - 1) / width * outer < kTargetBlocks)
    width /= 2;
  return width;
}

/// fail() with a printf-style detail: the errors here are code-generator
/// bugs, and the message must name the shapes involved.
[[noreturn]] __attribute__((format(printf, 4, 5))) void
failf(const char *what, const char *file, int line, const char *fmt, ...) {
  char detail[512];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(detail, sizeof(detail), fmt, args);
  va_end(args);
  fail(what, detail, file, line);
}

__device__ __forceinline__ int64_t globalThread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ int64_t gridThreads() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

//===----------------------------------------------------------------------===//
// Deterministic warp / block reductions
//===----------------------------------------------------------------------===//

/// Butterfly sum: every lane ends with the same, bitwise identical value
/// (each step adds the same two operands in every lane of a group), so lanes
/// may use it independently.
template <typename T> __device__ __forceinline__ T warpSum(T v) {
  for (int offset = 16; offset > 0; offset >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ float warpMax(float v) {
  for (int offset = 16; offset > 0; offset >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

/// Sum over the block (blockDim.x a multiple of 32), in a fixed order so that
/// a run is reproducible. The result is valid in warp 0. `shared` holds at
/// least 32 elements; every thread of the block must call this.
template <typename T> __device__ T blockSum(T v, T *shared) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int warps = blockDim.x >> 5;
  v = warpSum(v);
  if (lane == 0)
    shared[warp] = v;
  __syncthreads();
  if (warp == 0)
    v = warpSum(lane < warps ? shared[lane] : T(0));
  // `shared` may be reused as soon as this returns.
  __syncthreads();
  return v;
}

//===----------------------------------------------------------------------===//
// Elementwise kernels
//===----------------------------------------------------------------------===//

__global__ void castBf16Kernel(const float *__restrict__ in,
                               __nv_bfloat16 *__restrict__ out, int64_t n) {
  for (int64_t i = globalThread(); i < n; i += gridThreads())
    out[i] = __float2bfloat16_rn(in[i]);
}

/// C = beta * C (+ bias on every row) (then max(., 0) with relu): the GEMM
/// with K == 0 (BLAS semantics: beta == 0 overwrites C, NaNs included), and
/// with beta == 1 the epilogue of a GEMM whose epilogue cuBLASLt could not
/// take.
__global__ void scaleMatrixKernel(float *C, int64_t M, int64_t N, int64_t ldc,
                                  float beta, const float *__restrict__ bias,
                                  bool relu) {
  for (int64_t e = globalThread(); e < M * N; e += gridThreads()) {
    const int64_t i = e / N, j = e % N;
    float &c = C[i * ldc + j];
    float v = beta == 0.0f ? 0.0f : __fmul_rn(c, beta);
    if (bias)
      v = __fadd_rn(v, bias[j]);
    if (relu)
      v = v > 0.0f ? v : 0.0f;
    c = v;
  }
}

// The optimizer updates use the _rn intrinsics throughout: they pin the
// rounding of each operation of the CPU loops, which nvcc would otherwise
// fuse into FMAs.

__global__ void sgdKernel(float *__restrict__ p, const float *__restrict__ g,
                          float *__restrict__ buf, int64_t n, float lr,
                          float momentum, float weightDecay, bool useMomentum,
                          bool nesterov, bool firstStep) {
  for (int64_t i = globalThread(); i < n; i += gridThreads()) {
    const float pi = p[i];
    float d = g[i];
    if (weightDecay != 0.0f)
      d = __fadd_rn(d, __fmul_rn(weightDecay, pi));
    if (useMomentum) {
      // torch starts the buffer as a clone of the first gradient.
      const float b = firstStep ? d : __fadd_rn(__fmul_rn(buf[i], momentum), d);
      buf[i] = b;
      d = nesterov ? __fadd_rn(d, __fmul_rn(momentum, b)) : b;
    }
    p[i] = __fadd_rn(pi, __fmul_rn(-lr, d));
  }
}

/// The float scalars of one Adam step, derived on the host in double as the
/// CPU code (and torch) does.
struct AdamScalars {
  float beta1, beta2, eps, weightDecay;
  float negStepSize; // -(lr / (1 - beta1^step))
  float bc2Sqrt;     // sqrt(1 - beta2^step)
  float oneMinusB1, oneMinusB2;
  float decay; // AdamW: 1 - lr * weight_decay
  bool decoupled, coupledDecay;
};

__global__ void adamKernel(float *__restrict__ p, const float *__restrict__ g,
                           float *__restrict__ m, float *__restrict__ v,
                           int64_t n, AdamScalars s) {
  for (int64_t i = globalThread(); i < n; i += gridThreads()) {
    float pi = p[i];
    float gi = g[i];
    if (s.decoupled)
      pi = __fmul_rn(pi, s.decay);
    else if (s.coupledDecay)
      gi = __fadd_rn(gi, __fmul_rn(s.weightDecay, pi));
    const float mi =
        __fadd_rn(__fmul_rn(m[i], s.beta1), __fmul_rn(s.oneMinusB1, gi));
    const float vi = __fadd_rn(__fmul_rn(v[i], s.beta2),
                               __fmul_rn(__fmul_rn(s.oneMinusB2, gi), gi));
    m[i] = mi;
    v[i] = vi;
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), s.bc2Sqrt), s.eps);
    p[i] = __fadd_rn(pi, __fdiv_rn(__fmul_rn(s.negStepSize, mi), denom));
  }
}

//===----------------------------------------------------------------------===//
// Gather (gp_gather): one thread per output element. Its gradient
// (gp_scatter_add) is deterministic rather than atomic: one thread per table
// column runs over the positions in order (the same sums as the CPU's, in the
// same order), so its parallelism is the table's width, not the positions.
//===----------------------------------------------------------------------===//

__global__ void gatherKernel(const float *table, const int64_t *idx, float *out,
                             int64_t n, int64_t rows, int64_t width) {
  for (int64_t e = globalThread(); e < n * width; e += gridThreads()) {
    const int64_t i = e / width;
    const int64_t r = idx[i] < 0 ? idx[i] + rows : idx[i];
    out[e] = (r < 0 || r >= rows) ? 0.0f : table[r * width + e % width];
  }
}

__global__ void scatterAddKernel(const float *dout, const int64_t *idx,
                                 float *dtable, int64_t n, int64_t rows,
                                 int64_t width) {
  for (int64_t c = globalThread(); c < width; c += gridThreads())
    for (int64_t i = 0; i < n; ++i) {
      const int64_t r = idx[i] < 0 ? idx[i] + rows : idx[i];
      if (r >= 0 && r < rows)
        dtable[r * width + c] += dout[i * width + c];
    }
}

//===----------------------------------------------------------------------===//
// Softmax (gp_softmax, gp_softmax_bwd) and log-softmax (gp_log_softmax,
// gp_log_softmax_bwd, rows.h): one thread per row of the softmax axis
// (correct for any axis; a row-per-warp kernel is the faster form for long
// last-axis rows, left for the attention work)
//===----------------------------------------------------------------------===//

__global__ void dropoutKernel(uint64_t key, int64_t step, float ratio,
                              const float *x, float *y, int64_t n,
                              int64_t base) {
  for (int64_t i = globalThread(); i < n; i += gridThreads())
    y[i] = gpipe::dropoutApply(key, step, base + i, ratio, x[i]);
}

/// The first element of row r of a tensor viewed as [outer, n, inner] along
/// its middle axis (the row's elements are base + k * inner, k < n).
__device__ __forceinline__ int64_t axisRowBase(int64_t r, int64_t n,
                                               int64_t inner) {
  return (r / inner) * n * inner + r % inner;
}

__global__ void softmaxKernel(const float *x, float *y, int64_t outer,
                              int64_t n, int64_t inner) {
  for (int64_t r = globalThread(); r < outer * inner; r += gridThreads()) {
    const int64_t base = axisRowBase(r, n, inner);
    const float m = gpipe::rowMax(x + base, n, inner);
    double s = 0.0;
    for (int64_t k = 0; k < n; ++k) {
      const float e = expf(x[base + k * inner] - m);
      y[base + k * inner] = e;
      s += e;
    }
    const float inv = static_cast<float>(1.0 / s);
    for (int64_t k = 0; k < n; ++k)
      y[base + k * inner] *= inv;
  }
}

__global__ void softmaxBwdKernel(const float *y, const float *dy, float *dx,
                                 int64_t outer, int64_t n, int64_t inner) {
  for (int64_t r = globalThread(); r < outer * inner; r += gridThreads()) {
    const int64_t base = axisRowBase(r, n, inner);
    double s = 0.0;
    for (int64_t k = 0; k < n; ++k)
      s += static_cast<double>(dy[base + k * inner]) * y[base + k * inner];
    const float sf = static_cast<float>(s);
    for (int64_t k = 0; k < n; ++k) {
      const int64_t i = base + k * inner;
      dx[i] = y[i] * (dy[i] - sf);
    }
  }
}

__global__ void logSoftmaxKernel(const float *x, float *y, int64_t outer,
                                 int64_t n, int64_t inner) {
  for (int64_t r = globalThread(); r < outer * inner; r += gridThreads()) {
    const int64_t base = axisRowBase(r, n, inner);
    gpipe::logSoftmaxRow(x + base, y + base, n, inner);
  }
}

__global__ void logSoftmaxBwdKernel(const float *y, const float *dy, float *dx,
                                    int64_t outer, int64_t n, int64_t inner) {
  for (int64_t r = globalThread(); r < outer * inner; r += gridThreads()) {
    const int64_t base = axisRowBase(r, n, inner);
    gpipe::logSoftmaxBwdRow(y + base, dy + base, dx + base, n, inner);
  }
}

/// Launches a kernel of one thread per row along the middle axis of
/// [outer, n, inner]: kernel(args..., outer, n, inner).
template <typename Kernel, typename... Args>
void launchAxisRows(Kernel kernel, int64_t outer, int64_t n, int64_t inner,
                    Args... args) {
  if (outer * inner <= 0 || n <= 0)
    return;
  kernel<<<blocksFor(outer * inner), kThreads, 0, stream()>>>(args..., outer, n,
                                                              inner);
  GP_CUDA_LAUNCHED();
}

//===----------------------------------------------------------------------===//
// Layer normalization (gp_layer_norm, gp_layer_norm_bwd,
// gp_layer_norm_scale_bwd): a row per block, its sums in double through the
// deterministic blockSum; the scale's gradient a block per tile of columns,
// its threads striding over the rows, combined by a fixed-order tree in
// double (no atomics)
//===----------------------------------------------------------------------===//

/// blockSum's result for every thread of the block.
__device__ double blockSumAll(double v, double *shared, double *result) {
  v = blockSum(v, shared);
  if (threadIdx.x == 0)
    *result = v;
  __syncthreads();
  v = *result;
  __syncthreads();
  return v;
}

// y may alias x: neither is __restrict__.
__global__ void layerNormKernel(const float *x, const float *__restrict__ scale,
                                const float *__restrict__ bias, float *y,
                                float *mean, float *invStd, int64_t rows,
                                int64_t n, float eps) {
  __shared__ double shared[32];
  __shared__ double result;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float *xr = x + r * n;
    double s = 0.0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
      s += xr[j];
    const double m = blockSumAll(s, shared, &result) / static_cast<double>(n);
    double v = 0.0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const double d = xr[j] - m;
      v += d * d;
    }
    v = blockSumAll(v, shared, &result);
    const float mf = static_cast<float>(m);
    const float rstd = static_cast<float>(
        1.0 / sqrt(v / static_cast<double>(n) + static_cast<double>(eps)));
    if (threadIdx.x == 0) {
      mean[r] = mf;
      invStd[r] = rstd;
    }
    float *yr = y + r * n;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const float h = __fmul_rn(__fmul_rn(xr[j] - mf, rstd), scale[j]);
      yr[j] = bias ? h + bias[j] : h;
    }
  }
}

__global__ void layerNormBwdKernel(const float *__restrict__ x,
                                   const float *__restrict__ mean,
                                   const float *__restrict__ invStd,
                                   const float *__restrict__ scale,
                                   const float *dy, float *dx, int64_t rows,
                                   int64_t n) {
  __shared__ double shared[32];
  __shared__ double result;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float *xr = x + r * n, *dyr = dy + r * n;
    const float m = mean[r], rstd = invStd[r];
    double sg = 0.0, sgx = 0.0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const float g = __fmul_rn(dyr[j], scale[j]);
      sg += g;
      sgx += static_cast<double>(g) * __fmul_rn(xr[j] - m, rstd);
    }
    const float a = static_cast<float>(blockSumAll(sg, shared, &result) /
                                       static_cast<double>(n));
    const float c = static_cast<float>(blockSumAll(sgx, shared, &result) /
                                       static_cast<double>(n));
    float *dxr = dx + r * n;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const float xhat = __fmul_rn(xr[j] - m, rstd);
      const float g = __fmul_rn(dyr[j], scale[j]);
      dxr[j] = __fmul_rn(rstd, g - a - __fmul_rn(xhat, c));
    }
  }
}

/// dscale[j] = sum over the rows r of dy[r, j] * xhat[r, j], as
/// sumColumnsKernel sums columns: a block owns `width` adjacent columns, its
/// threads form `height` groups of `width` that stride over the rows
/// (consecutive threads read consecutive floats), each summing in double; the
/// groups' partial sums are combined by a tree in a fixed order, so every run
/// gives the same bits (no atomics). Launched with kColumnThreads threads and
/// ceil(n / width) blocks.
__global__ void layerNormScaleBwdKernel(const float *__restrict__ x,
                                        const float *__restrict__ mean,
                                        const float *__restrict__ invStd,
                                        const float *__restrict__ dy,
                                        float *__restrict__ dscale,
                                        int64_t rows, int64_t n, int width) {
  __shared__ double partial[kColumnThreads];
  const int t = threadIdx.x;
  const int height = blockDim.x / width;
  const int c = t % width, g = t / width;
  const bool active = g < height; // blockDim.x need not divide by width
  const int64_t j = static_cast<int64_t>(blockIdx.x) * width + c;
  double s = 0.0;
  if (active && j < n)
    for (int64_t r = g; r < rows; r += height)
      s += static_cast<double>(dy[r * n + j]) *
           __fmul_rn(x[r * n + j] - mean[r], invStd[r]);
  partial[t] = s;
  __syncthreads();
  for (int m = height; m > 1;) {
    const int half = (m + 1) / 2;
    if (active && g < m - half)
      partial[t] += partial[t + half * width];
    __syncthreads();
    m = half;
  }
  if (g == 0 && j < n)
    dscale[j] = static_cast<float>(partial[c]);
}

/// Threads of a layer normalization row block: the row's length rounded up
/// to whole warps, at most kThreads.
int layerNormThreads(int64_t n) {
  return static_cast<int>(std::min<int64_t>(kThreads, (n + 31) / 32 * 32));
}

//===----------------------------------------------------------------------===//
// Attention (gp_attention_fwd, gp_attention_bwd): the blocks' products as
// strided-batched fp32 cuBLASLt GEMMs (CUBLAS_COMPUTE_32F whatever the
// program's math mode: the fused attention's products stay fp32), the scores
// of a chunk of blocks materialised in the attention workspace
// (state().attention), the softmax and its gradient by row kernels (a warp
// per row, sums in double in a fixed order: no atomics, reproducible bits).
// The GEMM launchers (attentionGemm) are below, after runGemm.
//===----------------------------------------------------------------------===//

/// Forward, on a chunk's scores S [rows, Tk] (rows = blocks * Tq, block-major;
/// S = scale q k^T): s = -inf where mask[i, j] != 0 (i = row % Tq), m = the
/// row's maximum, S replaced by P = exp(s - m) / sum, lse = m + log(sum) (the
/// sum in double). A fully masked row has m = -inf, so exp(-inf - -inf) = NaN:
/// P, lse (and out) NaN, as gp_softmax.
__global__ void attentionSoftmaxKernel(float *__restrict__ S,
                                       const float *__restrict__ mask,
                                       float *__restrict__ lse, int64_t rows,
                                       int64_t Tq, int64_t Tk) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = gridThreads() >> 5;
  for (int64_t r = globalThread() >> 5; r < rows; r += warps) {
    float *s = S + r * Tk;
    const float *mr = mask ? mask + (r % Tq) * Tk : nullptr;
    float m = -INFINITY;
    for (int64_t j = lane; j < Tk; j += 32)
      m = fmaxf(m, mr && mr[j] != 0.0f ? -INFINITY : s[j]);
    m = warpMax(m);
    double sum = 0.0;
    for (int64_t j = lane; j < Tk; j += 32) {
      const float e = expf((mr && mr[j] != 0.0f ? -INFINITY : s[j]) - m);
      s[j] = e;
      sum += e;
    }
    sum = warpSum(sum);
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t j = lane; j < Tk; j += 32)
      s[j] *= inv;
    if (lane == 0)
      lse[r] = m + static_cast<float>(log(sum));
  }
}

/// Backward, on a chunk's recomputed scores S and dP = dout v^T (both [rows,
/// Tk]): D = rowsum(dout * out) (in double), S replaced by P = exp(s - lse)
/// (s = -inf where masked: P = 0, or NaN on a fully masked row, whose lse is
/// NaN) and dP by dS = P * (dP - D) * scale.
__global__ void attentionGradRowKernel(
    float *__restrict__ S, float *__restrict__ dP,
    const float *__restrict__ mask, const float *__restrict__ lse,
    const float *__restrict__ out, const float *__restrict__ dout, int64_t rows,
    int64_t Tq, int64_t Tk, int64_t dv, float scale) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = gridThreads() >> 5;
  for (int64_t r = globalThread() >> 5; r < rows; r += warps) {
    const float *g = dout + r * dv, *o = out + r * dv;
    double acc = 0.0;
    for (int64_t c = lane; c < dv; c += 32)
      acc += static_cast<double>(g[c]) * o[c];
    const float D = static_cast<float>(warpSum(acc));
    const float l = lse[r];
    float *s = S + r * Tk, *dp = dP + r * Tk;
    const float *mr = mask ? mask + (r % Tq) * Tk : nullptr;
    for (int64_t j = lane; j < Tk; j += 32) {
      const float p = expf((mr && mr[j] != 0.0f ? -INFINITY : s[j]) - l);
      s[j] = p;
      dp[j] = p * (dp[j] - D) * scale;
    }
  }
}

//===----------------------------------------------------------------------===//
// Reductions (gp_reduce_to, gp_reduce_max)
//===----------------------------------------------------------------------===//

constexpr int32_t kMaxRank = 8;

/// Rows at least this long get a block (or several) each, shorter a warp.
constexpr int64_t kLongRow = 1024;
/// Elements a block sums at least when a row is split across blocks.
constexpr int64_t kMinChunk = 4096;
/// With fewer rows than this, long rows are split across blocks.
constexpr int64_t kFewRows = 512;
/// Partial sums of split rows: rows * split never exceeds this.
constexpr int64_t kMaxPartials = 1024;

// Kernels that combine partial sums across blocks without a second launch
// keep them here: module memory, not an allocation. Only one such kernel runs
// at a time, as they are all ordered by the compute stream; the last block
// to finish resets the counter for the next launch.
__device__ double gRowPartials[kMaxPartials];
__device__ unsigned int gRowBlocksDone;

/// out[r] = sum of the `len` contiguous floats of row r: one warp per row.
__global__ void sumRowsWarpKernel(const float *__restrict__ in,
                                  float *__restrict__ out, int64_t rows,
                                  int64_t len) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = gridThreads() >> 5;
  for (int64_t r = globalThread() >> 5; r < rows; r += warps) {
    const float *src = in + r * len;
    double s = 0.0;
    for (int64_t j = lane; j < len; j += 32)
      s += src[j];
    s = warpSum(s);
    if (lane == 0)
      out[r] = static_cast<float>(s);
  }
}

/// Long rows, many of them: one block per row.
__global__ void sumRowsBlockKernel(const float *__restrict__ in,
                                   float *__restrict__ out, int64_t rows,
                                   int64_t len) {
  __shared__ double shared[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float *src = in + r * len;
    double s = 0.0;
    for (int64_t j = threadIdx.x; j < len; j += blockDim.x)
      s += src[j];
    s = blockSum(s, shared);
    if (threadIdx.x == 0)
      out[r] = static_cast<float>(s);
  }
}

/// Long rows, few of them (a full reduction to a scalar): `split` blocks per
/// row, block b summing chunk b % split of row b / split. The last block to
/// finish adds each row's partials in chunk order, so the result does not
/// depend on the order in which blocks ran. Launched with rows * split
/// blocks exactly (<= kMaxPartials).
__global__ void sumRowsSplitKernel(const float *__restrict__ in,
                                   float *__restrict__ out, int64_t rows,
                                   int64_t len, int64_t split) {
  __shared__ double shared[32];
  __shared__ bool isLast;
  const int64_t row = blockIdx.x / split, part = blockIdx.x % split;
  const int64_t chunk = (len + split - 1) / split;
  const int64_t begin = part * chunk;
  const int64_t end = begin + chunk < len ? begin + chunk : len;
  const float *src = in + row * len;
  double s = 0.0;
  for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x)
    s += src[j];
  s = blockSum(s, shared);
  if (threadIdx.x == 0) {
    gRowPartials[blockIdx.x] = s;
    // Publish the partial before counting this block as done.
    __threadfence();
    isLast = atomicAdd(&gRowBlocksDone, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!isLast)
    return;
  for (int64_t r = 0; r < rows; ++r) {
    double total = 0.0;
    // __ldcg: read the other blocks' partials from L2, never a stale L1.
    for (int64_t t = threadIdx.x; t < split; t += blockDim.x)
      total += __ldcg(&gRowPartials[r * split + t]);
    total = blockSum(total, shared);
    if (threadIdx.x == 0)
      out[r] = static_cast<float>(total);
  }
  if (threadIdx.x == 0)
    gRowBlocksDone = 0;
}

/// out[o, j] = sum over r of in[o, r, j] for an [outer, rows, cols] input:
/// the sum over the rows of row-major matrices, e.g. a bias gradient. A block
/// owns `width` adjacent columns of one matrix; its threads form `height`
/// groups of `width` that stride over the rows, so that consecutive threads
/// read consecutive floats. The groups' partial sums are combined by a tree
/// in a fixed order.
__global__ void sumColumnsKernel(const float *__restrict__ in,
                                 float *__restrict__ out, int64_t outer,
                                 int64_t rows, int64_t cols, int width) {
  __shared__ double partial[kColumnThreads];
  const int t = threadIdx.x;
  const int height = blockDim.x / width;
  const int c = t % width, g = t / width;
  const bool active = g < height; // blockDim.x need not divide by width
  const int64_t j = static_cast<int64_t>(blockIdx.x) * width + c;
  for (int64_t o = blockIdx.y; o < outer; o += gridDim.y) {
    double s = 0.0;
    if (active && j < cols) {
      const float *src = in + o * rows * cols + j;
      for (int64_t r = g; r < rows; r += height)
        s += src[r * cols];
    }
    partial[t] = s;
    __syncthreads();
    for (int n = height; n > 1;) {
      const int half = (n + 1) / 2;
      if (active && g < n - half)
        partial[t] += partial[t + half * width];
      __syncthreads();
      n = half;
    }
    if (g == 0 && j < cols)
      out[o * cols + j] = static_cast<float>(partial[c]);
    // `partial` is rewritten for the next matrix.
    __syncthreads();
  }
}

/// Any other reduction, as merged dims: the output enumerates the kept dims
/// (row-major), each output sums over all the reduced ones. Passed by value.
struct ReduceGeometry {
  int32_t numKept = 0, numReduced = 0;
  int64_t keptSize[kMaxRank], keptStride[kMaxRank];
  int64_t redSize[kMaxRank], redStride[kMaxRank];
  int64_t outSize = 1, redTotal = 1;

  /// The input offset of output element o's first reduced element.
  __device__ int64_t keptOffset(int64_t o) const {
    return offsetOf(o, numKept, keptSize, keptStride);
  }
  /// The offset of reduced element r from an output element's first.
  __device__ int64_t reducedOffset(int64_t r) const {
    return offsetOf(r, numReduced, redSize, redStride);
  }
  /// Element i of dims `size` (outermost first), at `stride`.
  __device__ static int64_t offsetOf(int64_t i, int32_t n, const int64_t *size,
                                     const int64_t *stride) {
    int64_t off = 0;
    for (int d = n - 1; d >= 0; --d) {
      off += i % size[d] * stride[d];
      i /= size[d];
    }
    return off;
  }
};

/// The maximum over the lanes of a warp, NaN if any lane has one.
__device__ __forceinline__ float warpMaxPropagatingNaN(float v) {
  for (int offset = 16; offset > 0; offset >>= 1)
    v = gpipe::maxPropagatingNaN(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

/// gp_reduce_to's sum (in double) and gp_reduce_max's maximum (NaN if any
/// element is), for reduceGeneralKernel.
struct SumReduction {
  using Acc = double;
  static constexpr double kInit = 0.0;
  __device__ static double add(double a, float v) { return a + v; }
  __device__ static double warp(double a) { return warpSum(a); }
};
struct MaxReduction {
  using Acc = float;
  static constexpr float kInit = -INFINITY;
  __device__ static float add(float a, float v) {
    return gpipe::maxPropagatingNaN(a, v);
  }
  __device__ static float warp(float a) { return warpMaxPropagatingNaN(a); }
};

/// One warp per output element; the lanes split the reduced index space.
template <typename Reduction>
__global__ void reduceGeneralKernel(const float *__restrict__ in,
                                    float *__restrict__ out,
                                    ReduceGeometry geo) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = gridThreads() >> 5;
  for (int64_t o = globalThread() >> 5; o < geo.outSize; o += warps) {
    const int64_t base = geo.keptOffset(o);
    typename Reduction::Acc acc = Reduction::kInit;
    for (int64_t r = lane; r < geo.redTotal; r += 32)
      acc = Reduction::add(acc, in[base + geo.reducedOffset(r)]);
    acc = Reduction::warp(acc);
    if (lane == 0)
      out[o] = static_cast<float>(acc);
  }
}

/// A reduction's shapes (gp_reduce_to, gp_reduce_max): size-1 dims dropped
/// and neighbours of the same kind (kept or reduced) merged, leaving an
/// alternating list of at most rank dims (as kernels.cpp).
struct ReduceDims {
  struct Dim {
    int64_t size;
    bool reduced;
  };
  Dim dims[kMaxRank];
  int nd = 0;
  int64_t inSize = 1, outSize = 1;
};

/// The ReduceDims of in_shape -> out_shape (both `rank` entries); a rank
/// above kMaxRank or an output extent that is neither the input's nor 1 ends
/// the program with an error naming `caller`.
ReduceDims reduceDims(const char *caller, const int64_t *in_shape,
                      const int64_t *out_shape, int32_t rank) {
  if (rank < 0 || rank > kMaxRank)
    failf(caller, __FILE__, __LINE__,
          "rank %d is outside the CUDA runtime's [0, %d]",
          static_cast<int>(rank), static_cast<int>(kMaxRank));
  ReduceDims r;
  for (int32_t d = 0; d < rank; ++d) {
    if (out_shape[d] != in_shape[d] && out_shape[d] != 1)
      failf(caller, __FILE__, __LINE__,
            "dim %d: output extent %lld is neither the input's %lld nor 1",
            static_cast<int>(d), static_cast<long long>(out_shape[d]),
            static_cast<long long>(in_shape[d]));
    r.inSize *= in_shape[d];
    r.outSize *= out_shape[d];
    if (in_shape[d] == 1)
      continue;
    const bool reduced = out_shape[d] == 1;
    if (r.nd > 0 && r.dims[r.nd - 1].reduced == reduced)
      r.dims[r.nd - 1].size *= in_shape[d];
    else
      r.dims[r.nd++] = {in_shape[d], reduced};
  }
  return r;
}

/// The general kernels' view of merged dims: kept and reduced sizes and
/// strides, outermost first.
ReduceGeometry geometryOf(const ReduceDims &r) {
  ReduceGeometry geo;
  int64_t stride = 1;
  for (int d = r.nd - 1; d >= 0; --d) {
    if (r.dims[d].reduced) {
      geo.redSize[geo.numReduced] = r.dims[d].size;
      geo.redStride[geo.numReduced++] = stride;
      geo.redTotal *= r.dims[d].size;
    } else {
      geo.keptSize[geo.numKept] = r.dims[d].size;
      geo.keptStride[geo.numKept++] = stride;
      geo.outSize *= r.dims[d].size;
    }
    stride *= r.dims[d].size;
  }
  // Collected innermost first; the kernels want outermost first.
  std::reverse(geo.keptSize, geo.keptSize + geo.numKept);
  std::reverse(geo.keptStride, geo.keptStride + geo.numKept);
  std::reverse(geo.redSize, geo.redSize + geo.numReduced);
  std::reverse(geo.redStride, geo.redStride + geo.numReduced);
  return geo;
}

/// out[r] = sum of contiguous row r, picking the kernel for the row shape.
void launchSumRows(const float *in, float *out, int64_t rows, int64_t len) {
  if (len < kLongRow) {
    sumRowsWarpKernel<<<blocksFor(rows, kWarpsPerBlock), kThreads, 0,
                        stream()>>>(in, out, rows, len);
    GP_CUDA_LAUNCHED();
    return;
  }
  int64_t split = 1;
  if (rows < kFewRows)
    split = std::min((len + kMinChunk - 1) / kMinChunk, kMaxPartials / rows);
  if (split <= 1) {
    sumRowsBlockKernel<<<blocksFor(rows, 1), kThreads, 0, stream()>>>(
        in, out, rows, len);
    GP_CUDA_LAUNCHED();
    return;
  }
  sumRowsSplitKernel<<<static_cast<unsigned>(rows * split), kThreads, 0,
                       stream()>>>(in, out, rows, len, split);
  GP_CUDA_LAUNCHED();
}

/// out[o, j] = sum over r of in[o, r, j].
void launchSumColumns(const float *in, float *out, int64_t outer, int64_t rows,
                      int64_t cols) {
  const int width = columnTileWidth(outer, cols);
  dim3 grid(static_cast<unsigned>((cols + width - 1) / width),
            static_cast<unsigned>(std::min<int64_t>(outer, 65535)));
  sumColumnsKernel<<<grid, kColumnThreads, 0, stream()>>>(in, out, outer, rows,
                                                          cols, width);
  GP_CUDA_LAUNCHED();
}

//===----------------------------------------------------------------------===//
// Losses: softmax cross-entropy, negative log-likelihood
//===----------------------------------------------------------------------===//

/// Blocks of the forward kernel at most (its per-block partials live in
/// module memory).
constexpr int64_t kXentMaxBlocks = 1024;
__device__ double gXentTotal[kXentMaxBlocks];
__device__ long long gXentCount[kXentMaxBlocks];
__device__ unsigned int gXentBlocksDone;
/// Non-ignored labels, counted for the backward's divisor.
__device__ long long gXentLabelCount;

__device__ __forceinline__ bool isIgnored(int64_t label, int32_t hasIgnore,
                                          int64_t ignoreIndex) {
  return hasIgnore != 0 && label == ignoreIndex;
}

/// Row max and sum of exp(x - max) (in double, as the CPU), shared by the
/// forward and backward so that the gradient is that of exactly the computed
/// loss. Called by a whole warp; every lane gets the same values.
__device__ void rowStats(const float *__restrict__ x, int64_t C, int lane,
                         float &mx, double &sumExp) {
  float m = -CUDART_INF_F;
  for (int64_t j = lane; j < C; j += 32)
    m = fmaxf(m, x[j]);
  m = warpMax(m);
  double s = 0.0;
  for (int64_t j = lane; j < C; j += 32)
    s += static_cast<double>(expf(x[j] - m));
  sumExp = warpSum(s);
  mx = m;
}

/// The softmax cross-entropy of one row (called by a whole warp): writes the
/// row's log-probabilities when logProb is set; the loss at label y when y
/// is in [0, C) (else unused).
struct XentRowLoss {
  float *logProb;
  __device__ double operator()(const float *__restrict__ x, int64_t i,
                               int64_t C, int lane, int64_t y) const {
    float mx;
    double sumExp;
    rowStats(x, C, lane, mx, sumExp);
    const double logSum = log(sumExp);
    if (logProb) {
      const float lse = mx + static_cast<float>(logSum);
      for (int64_t j = lane; j < C; j += 32)
        logProb[i * C + j] = x[j] - lse;
    }
    return y >= 0 && y < C ? (static_cast<double>(mx) - x[y]) + logSum : 0.0;
  }
};

/// The negative log-likelihood of one row of log-probabilities.
struct NllRowLoss {
  __device__ double operator()(const float *__restrict__ x, int64_t, int64_t C,
                               int, int64_t y) const {
    return y >= 0 && y < C ? -static_cast<double>(x[y]) : 0.0;
  }
};

/// A loss (gp_softmax_xent_fwd, gp_nll_fwd): one warp per row, rowLoss its
/// loss. Each block leaves the sum and count of its rows' losses; the last
/// block to finish combines them in block order (reproducible) and writes
/// the loss.
template <typename RowLoss>
__global__ void lossFwdKernel(const float *__restrict__ logits,
                              const int64_t *__restrict__ labels, int64_t N,
                              int64_t C, int32_t hasIgnore, int64_t ignoreIndex,
                              double norm, float *__restrict__ loss,
                              RowLoss rowLoss) {
  __shared__ double sharedTotal[32];
  __shared__ long long sharedCount[32];
  __shared__ bool isLast;
  const int lane = threadIdx.x & 31;
  const int64_t warps = gridThreads() >> 5;
  double total = 0.0;
  long long count = 0;
  for (int64_t i = globalThread() >> 5; i < N; i += warps) {
    const int64_t y = labels[i];
    const double l = rowLoss(logits + i * C, i, C, lane, y);
    if (isIgnored(y, hasIgnore, ignoreIndex))
      continue;
    ++count;
    // An out-of-range label has no defined loss (torch raises); poison it.
    total += y < 0 || y >= C ? CUDART_NAN : l;
  }
  // Every lane holds its warp's sums: count each warp once.
  if (lane != 0) {
    total = 0.0;
    count = 0;
  }
  total = blockSum(total, sharedTotal);
  count = blockSum(count, sharedCount);
  if (threadIdx.x == 0) {
    gXentTotal[blockIdx.x] = total;
    gXentCount[blockIdx.x] = count;
    __threadfence();
    isLast = atomicAdd(&gXentBlocksDone, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!isLast)
    return;
  total = 0.0;
  count = 0;
  for (unsigned b = threadIdx.x; b < gridDim.x; b += blockDim.x) {
    total += __ldcg(&gXentTotal[b]);
    count += __ldcg(&gXentCount[b]);
  }
  total = blockSum(total, sharedTotal);
  count = blockSum(count, sharedCount);
  if (threadIdx.x == 0) {
    // norm > 0: this call's share of a loss normalised over a larger batch
    // (micro-batching); a share with every label ignored is 0.
    if (norm > 0.0)
      *loss = static_cast<float>(total / norm);
    else
      *loss = count ? static_cast<float>(total / static_cast<double>(count))
                    : CUDART_NAN_F;
    gXentBlocksDone = 0;
  }
}

__global__ void countLabelsKernel(const int64_t *__restrict__ labels, int64_t N,
                                  int32_t hasIgnore, int64_t ignoreIndex) {
  __shared__ long long shared[32];
  long long count = 0;
  for (int64_t i = threadIdx.x; i < N; i += blockDim.x)
    count += !isIgnored(labels[i], hasIgnore, ignoreIndex);
  count = blockSum(count, shared);
  if (threadIdx.x == 0)
    gXentLabelCount = count;
}

/// The softmax cross-entropy's gradient row (a whole warp): scale *
/// (softmax(x) - onehot(y)).
struct XentRowGrad {
  __device__ void operator()(const float *__restrict__ x,
                             float *__restrict__ dx, int64_t C, int lane,
                             int64_t y, float scale) const {
    float mx;
    double sumExp;
    rowStats(x, C, lane, mx, sumExp);
    const float inv = static_cast<float>(1.0 / sumExp);
    for (int64_t j = lane; j < C; j += 32) {
      const float prob = __fmul_rn(expf(x[j] - mx), inv);
      dx[j] = __fmul_rn(j == y ? __fsub_rn(prob, 1.0f) : prob, scale);
    }
  }
};

/// The negative log-likelihood's gradient row: -scale at the label, else 0
/// (the scores are not read).
struct NllRowGrad {
  __device__ void operator()(const float *, float *__restrict__ dx, int64_t C,
                             int lane, int64_t y, float scale) const {
    for (int64_t j = lane; j < C; j += 32)
      dx[j] = j == y ? -scale : 0.0f;
  }
};

/// A loss's gradient: one warp per row, rowGrad its row. The divisor is
/// `norm`, or (norm <= 0) the label count countLabelsKernel left. All labels
/// ignored: every row is zero, as torch's gradient of its NaN loss.
template <typename RowGrad>
__global__ void lossBwdKernel(const float *__restrict__ logits,
                              const int64_t *__restrict__ labels, int64_t N,
                              int64_t C, int32_t hasIgnore, int64_t ignoreIndex,
                              double norm, const float *__restrict__ dloss,
                              float *__restrict__ dlogits, RowGrad rowGrad) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = gridThreads() >> 5;
  const double divisor =
      norm > 0.0 ? norm : static_cast<double>(gXentLabelCount);
  const float scale = static_cast<float>(static_cast<double>(*dloss) / divisor);
  for (int64_t i = globalThread() >> 5; i < N; i += warps) {
    float *dx = dlogits + i * C;
    const int64_t y = labels[i];
    const bool ignored = isIgnored(y, hasIgnore, ignoreIndex);
    if (ignored || y < 0 || y >= C) {
      const float fill = ignored ? 0.0f : CUDART_NAN_F;
      for (int64_t j = lane; j < C; j += 32)
        dx[j] = fill;
      continue;
    }
    rowGrad(logits ? logits + i * C : nullptr, dx, C, lane, y, scale);
  }
}

/// Launches lossFwdKernel: always, even for N == 0, so that the loss is
/// written.
template <typename RowLoss>
void launchLossFwd(const float *scores, const int64_t *labels, int64_t N,
                   int64_t C, int32_t hasIgnore, int64_t ignoreIndex,
                   double norm, float *loss, RowLoss rowLoss) {
  const unsigned blocks = static_cast<unsigned>(std::clamp<int64_t>(
      (N + kWarpsPerBlock - 1) / kWarpsPerBlock, 1, kXentMaxBlocks));
  lossFwdKernel<<<blocks, kThreads, 0, stream()>>>(
      scores, labels, N, C, hasIgnore, ignoreIndex, norm, loss, rowLoss);
  GP_CUDA_LAUNCHED();
}

/// Launches lossBwdKernel, after countLabelsKernel when the divisor is the
/// label count.
template <typename RowGrad>
void launchLossBwd(const float *scores, const int64_t *labels, int64_t N,
                   int64_t C, int32_t hasIgnore, int64_t ignoreIndex,
                   double norm, const float *dloss, float *dscores,
                   RowGrad rowGrad) {
  if (N <= 0 || C <= 0)
    return;
  if (norm <= 0.0) {
    countLabelsKernel<<<1, 1024, 0, stream()>>>(labels, N, hasIgnore,
                                                ignoreIndex);
    GP_CUDA_LAUNCHED();
  }
  lossBwdKernel<<<blocksFor(N, kWarpsPerBlock), kThreads, 0, stream()>>>(
      scores, labels, N, C, hasIgnore, ignoreIndex, norm, dloss, dscores,
      rowGrad);
  GP_CUDA_LAUNCHED();
}

//===----------------------------------------------------------------------===//
// GEMM (cuBLASLt)
//===----------------------------------------------------------------------===//

/// The largest power of two (at most 256) dividing the address: what
/// cuBLASLt may assume of an operand.
uint32_t alignmentOf(const void *p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  if (a == 0)
    return 256;
  return static_cast<uint32_t>(std::min<uintptr_t>(a & (~a + 1), 256));
}

/// The alignment every matrix of a strided batch has: the first's and the
/// stride's (in bytes; 0: a single matrix).
uint32_t batchAlignmentOf(const void *p, int64_t strideBytes) {
  const uint32_t al = alignmentOf(p);
  return strideBytes == 0 ? al
                          : std::min(al, alignmentOf(reinterpret_cast<void *>(
                                             uintptr_t(strideBytes))));
}

/// Everything the descriptors and the heuristic's choice depend on.
struct GemmKey {
  int64_t M, N, K, lda, ldb, ldc;
  int32_t transA, transB, math, hasBias, relu;
  uint32_t alignA, alignB, alignC, alignBias;
  // Strided batches (gp_batch_gemm): `batch` products, the operands' strides
  // in elements; batch <= 1 is one product.
  int64_t batch, strideA, strideB, strideC;

  auto fields() const {
    return std::tie(M, N, K, lda, ldb, ldc, transA, transB, math, hasBias, relu,
                    alignA, alignB, alignC, alignBias, batch, strideA, strideB,
                    strideC);
  }
  bool operator==(const GemmKey &o) const { return fields() == o.fields(); }
};

struct GemmKeyHash {
  size_t operator()(const GemmKey &k) const {
    const uint64_t words[] = {uint64_t(k.M),
                              uint64_t(k.N),
                              uint64_t(k.K),
                              uint64_t(k.lda),
                              uint64_t(k.ldb),
                              uint64_t(k.ldc),
                              uint64_t(k.transA) << 32 | uint32_t(k.transB),
                              uint64_t(k.math) << 32 |
                                  uint32_t(k.hasBias) << 1 | uint32_t(k.relu),
                              uint64_t(k.alignA) << 32 | k.alignB,
                              uint64_t(k.alignC) << 32 | k.alignBias,
                              uint64_t(k.batch),
                              uint64_t(k.strideA),
                              uint64_t(k.strideB),
                              uint64_t(k.strideC)};
    size_t h = 0;
    for (uint64_t w : words)
      h ^= std::hash<uint64_t>()(w) + 0x9e3779b97f4a7c15ull + (h << 6) +
           (h >> 2);
    return h;
  }
};

/// The descriptors of one GEMM shape and the algorithms the heuristic
/// proposed, best first. Lives until exit; destroying descriptors only frees
/// host memory.
struct GemmPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  // cublasLtMatmul may still reject a proposed algorithm: the next one is
  // tried, and the first that runs is kept (`current`).
  std::vector<cublasLtMatmulAlgo_t> algos;
  size_t current = 0;
  // The epilogue (bias, relu) runs as scaleMatrixKernel after the GEMM.
  bool epilogueKernel = false;

  GemmPlan() = default;
  GemmPlan(const GemmPlan &) = delete;
  GemmPlan &operator=(const GemmPlan &) = delete;
  ~GemmPlan() {
    if (c)
      cublasLtMatrixLayoutDestroy(c);
    if (b)
      cublasLtMatrixLayoutDestroy(b);
    if (a)
      cublasLtMatrixLayoutDestroy(a);
    if (desc)
      cublasLtMatmulDescDestroy(desc);
  }
};

template <typename T>
void setDescAttr(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                 const T &value) {
  GP_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)));
}

/// Owns a heuristic preference for the duration of one query.
struct Preference {
  cublasLtMatmulPreference_t pref = nullptr;
  Preference() { GP_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref)); }
  Preference(const Preference &) = delete;
  Preference &operator=(const Preference &) = delete;
  ~Preference() { cublasLtMatmulPreferenceDestroy(pref); }
};

template <typename T>
void setPrefAttr(cublasLtMatmulPreference_t pref,
                 cublasLtMatmulPreferenceAttributes_t attr, const T &value) {
  GP_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value)));
}

/// How many algorithms the heuristic is asked for.
constexpr int kGemmCandidates = 8;

gpipe::cuda::GemmTestHooks &gGemmHooks = gpipe::cuda::gemmTestHooks();
gpipe::cuda::GemmFallbacks &gGemmFallbacks = gpipe::cuda::gemmFallbacks();

const char *mathName(int32_t math) {
  switch (math) {
  case GP_MATH_F32:
    return "f32";
  case GP_MATH_TF32:
    return "tf32";
  default:
    return "bf16";
  }
}

[[noreturn]] void failGemm(const char *call, const char *what, const GemmKey &k,
                           cublasStatus_t st) {
  failf(call, __FILE__, __LINE__,
        "%s for the %s GEMM M=%lld N=%lld K=%lld transA=%d transB=%d "
        "lda=%lld ldb=%lld ldc=%lld bias=%d relu=%d (alignments A=%u B=%u "
        "C=%u bias=%u, workspace %llu bytes): %s",
        what, mathName(k.math), static_cast<long long>(k.M),
        static_cast<long long>(k.N), static_cast<long long>(k.K), k.transA,
        k.transB, static_cast<long long>(k.lda), static_cast<long long>(k.ldb),
        static_cast<long long>(k.ldc), k.hasBias, k.relu, k.alignA, k.alignB,
        k.alignC, k.alignBias,
        static_cast<unsigned long long>(state().workspaceBytes),
        cublasLtGetStatusString(st));
}

/// Asks the heuristic for up to kGemmCandidates algorithms for the plan's
/// descriptors (as they are now), best first, into plan.algos.
cublasStatus_t queryGemmAlgos(GemmPlan &plan, const GemmKey &k) {
  Preference holder;
  const cublasLtMatmulPreference_t pref = holder.pref;
  const uint64_t workspace = state().workspaceBytes;
  setPrefAttr(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, workspace);
  // Lt A is the row-major B and vice versa.
  setPrefAttr(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, k.alignB);
  setPrefAttr(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, k.alignA);
  setPrefAttr(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, k.alignC);
  setPrefAttr(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, k.alignC);
  cublasLtMatmulHeuristicResult_t results[kGemmCandidates] = {};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(
      state().lt, plan.desc, plan.a, plan.b, plan.c, plan.c, pref,
      kGemmCandidates, results, &found);
  plan.algos.clear();
  plan.current = 0;
  if (st != CUBLAS_STATUS_SUCCESS)
    return st;
  cublasStatus_t firstProblem = CUBLAS_STATUS_NOT_SUPPORTED;
  for (int i = 0; i < found; ++i) {
    if (results[i].state == CUBLAS_STATUS_SUCCESS)
      plan.algos.push_back(results[i].algo);
    else if (firstProblem == CUBLAS_STATUS_NOT_SUPPORTED)
      firstProblem = results[i].state;
  }
  return plan.algos.empty() ? firstProblem : CUBLAS_STATUS_SUCCESS;
}

/// Drops the fused epilogue: the GEMM computes alpha op(A) op(B) + beta C and
/// scaleMatrixKernel adds the bias and applies the relu.
void useEpilogueKernel(GemmPlan &plan) {
  setDescAttr(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
              CUBLASLT_EPILOGUE_DEFAULT);
  setDescAttr(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
              static_cast<const float *>(nullptr));
  plan.epilogueKernel = true;
}

// The row-major product C[M,N] = op(A) op(B) is computed as the column-major
// C^T[N,M] = op(B)^T op(A)^T: a row-major matrix with row stride ld is the
// column-major transpose with leading dimension ld, so no data moves. The Lt
// "A" operand is the row-major B (op = transB), the Lt "B" operand the
// row-major A (op = transA), m = N, n = M, and the bias, which the epilogue
// broadcasts along the columns of the column-major D (length m), is the
// per-column bias[N] of the row-major C.
std::unique_ptr<GemmPlan> makeGemmPlan(const GemmKey &k, const float *bias) {
  auto plan = std::make_unique<GemmPlan>();
  const cublasComputeType_t compute = k.math == GP_MATH_TF32
                                          ? CUBLAS_COMPUTE_32F_FAST_TF32
                                          : CUBLAS_COMPUTE_32F;
  const cudaDataType_t abType =
      k.math == GP_MATH_BF16 ? CUDA_R_16BF : CUDA_R_32F;
  GP_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc, compute, CUDA_R_32F));
  const cublasOperation_t opA = k.transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t opB = k.transA ? CUBLAS_OP_T : CUBLAS_OP_N;
  setDescAttr(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, opA);
  setDescAttr(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, opB);
  const cublasLtEpilogue_t epilogue =
      k.relu
          ? (k.hasBias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU)
          : (k.hasBias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT);
  setDescAttr(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue);
  // The heuristic reads the bias pointer's alignment (part of the key); the
  // bias type defaults to D's, fp32.
  if (k.hasBias)
    setDescAttr(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  // cuBLASLt's alignment preferences cover A, B, C and D, not the bias: on
  // sm_90 the heuristic may pick a kernel that assumes a 16-byte-aligned
  // bias, which launches without error and then faults
  // (cudaErrorMisalignedAddress, sticky: the process's context is lost). So
  // an under-aligned bias never reaches the fused epilogue: the GEMM runs
  // without it and scaleMatrixKernel adds the bias (and applies the relu).
  // The bias alignment is part of the key, so every call of this plan has a
  // bias as aligned as this one.
  if (k.hasBias && !gpipe::cuda::gemmBiasEpilogueOk(bias)) {
    useEpilogueKernel(*plan);
    ++gGemmFallbacks.unalignedBias;
  }

  // Layouts describe the stored matrices, before op.
  const uint64_t M = k.M, N = k.N, K = k.K;
  GP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->a, abType, k.transB ? K : N,
                                             k.transB ? N : K, k.ldb));
  GP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->b, abType, k.transA ? M : K,
                                             k.transA ? K : M, k.lda));
  GP_CUBLAS_CHECK(
      cublasLtMatrixLayoutCreate(&plan->c, CUDA_R_32F, N, M, k.ldc));
  if (k.batch > 1) {
    const int32_t count = static_cast<int32_t>(k.batch);
    const std::pair<cublasLtMatrixLayout_t, int64_t> strided[] = {
        {plan->a, k.strideB}, {plan->b, k.strideA}, {plan->c, k.strideC}};
    for (auto [layout, stride] : strided) {
      GP_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
          layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
      GP_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
          layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
          sizeof(stride)));
    }
  }

  cublasStatus_t st = queryGemmAlgos(*plan, k);
  // The bias epilogue wants an aligned bias (16 bytes on some GPUs); the
  // arena need not give one. Then a kernel applies the epilogue instead.
  if (st != CUBLAS_STATUS_SUCCESS && (k.hasBias || k.relu)) {
    useEpilogueKernel(*plan);
    st = queryGemmAlgos(*plan, k);
  }
  if (st != CUBLAS_STATUS_SUCCESS)
    failGemm("cublasLtMatmulAlgoGetHeuristic", "no cuBLASLt algorithm", k, st);
  return plan;
}

/// Rounds a stored fp32 operand (rows x cols, row stride ld) to bf16 in the
/// scratch at byte offset `used` (rounded up to 256), keeping its layout: the
/// span from the first to the last element is converted, gaps included.
const void *bf16Copy(const float *src, int64_t rows, int64_t cols, int64_t ld,
                     size_t &used, const char *operand) {
  const auto &st = state();
  const int64_t span = (rows - 1) * ld + cols;
  const size_t bytes = static_cast<size_t>(span) * sizeof(__nv_bfloat16);
  const size_t at = (used + 255) & ~size_t(255);
  if (st.scratch == nullptr || at + bytes > st.scratchBytes)
    failf("gp_gemm_ex", __FILE__, __LINE__,
          "the bf16 copy of operand %s (%lld x %lld, row stride %lld) needs "
          "%zu bytes of scratch at offset %zu, but the scratch has %zu bytes "
          "(a code generator bug: program scratch_bytes is too small)",
          operand, static_cast<long long>(rows), static_cast<long long>(cols),
          static_cast<long long>(ld), bytes, at, st.scratchBytes);
  void *dst = static_cast<unsigned char *>(st.scratch) + at;
  gp_cast_bf16(src, dst, span);
  used = at + bytes;
  return dst;
}

/// Runs the plan of `key` (made on first use): the cuBLASLt call of
/// gp_gemm_ex and gp_batch_gemm. With strided batches, the epilogue kernel
/// (bias, relu) is never needed: gp_batch_gemm has neither.
void runGemm(const GemmKey &key, float alpha, const void *a, const void *b,
             float beta, float *C, const float *bias, int32_t relu) {
  const int64_t M = key.M, N = key.N, ldc = key.ldc;
  // Stage programs call kernels from one thread; the lock only keeps the
  // cache (and the per-call bias attribute of a shared descriptor) sound if
  // that ever changes. Uncontended, it costs nanoseconds.
  static std::mutex mutex;
  static std::unordered_map<GemmKey, std::unique_ptr<GemmPlan>, GemmKeyHash>
      plans;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = plans.find(key);
  if (it == plans.end())
    it = plans.emplace(key, makeGemmPlan(key, bias)).first;
  GemmPlan &plan = *it->second;
  const auto &st = state();
  // The heuristic's algorithms in order until one runs (the first that does
  // is kept for later calls); when every fused-epilogue one is rejected, the
  // same with the epilogue in a kernel.
  for (;;) {
    // The descriptor is read when the call is enqueued, so the bias pointer
    // of this call can be set on the cached descriptor. (An epilogue plan
    // only exists for a 16-byte-aligned bias: makeGemmPlan.)
    if (bias && !plan.epilogueKernel)
      setDescAttr(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
    cublasStatus_t status = CUBLAS_STATUS_NOT_SUPPORTED;
    if (gGemmHooks.rejectNext > 0)
      --gGemmHooks.rejectNext;
    else if (!(gGemmHooks.rejectFused && !plan.epilogueKernel &&
               (bias || relu)))
      status =
          cublasLtMatmul(st.lt, plan.desc, &alpha, b, plan.a, a, plan.b, &beta,
                         C, plan.c, C, plan.c, &plan.algos[plan.current],
                         st.workspace, st.workspaceBytes, st.compute);
    if (status == CUBLAS_STATUS_SUCCESS)
      break;
    if (plan.current + 1 < plan.algos.size()) {
      ++plan.current;
      ++gGemmFallbacks.algorithm;
      continue;
    }
    if (!plan.epilogueKernel && (bias || relu)) {
      useEpilogueKernel(plan);
      ++gGemmFallbacks.epilogue;
      if (queryGemmAlgos(plan, key) == CUBLAS_STATUS_SUCCESS)
        continue;
    }
    failGemm("cublasLtMatmul", "every algorithm was rejected", key, status);
  }
  if (plan.epilogueKernel) {
    scaleMatrixKernel<<<blocksFor(M * N), kThreads, 0, st.compute>>>(
        C, M, N, ldc, 1.0f, bias, relu != 0);
    GP_CUDA_LAUNCHED();
  }
}

/// The attention's products: C[b] = alpha op(A[b]) op(B[b]) for b < count,
/// row-major and dense (A [M, K] or with transA [K, M], B [K, N] or with
/// transB [N, K], C [M, N]), the b-th matrices at b times the strides (in
/// floats; C's is M * N). fp32 products (CUBLAS_COMPUTE_32F) whatever the
/// program's math mode, beta = 0: every element of C is written.
void attentionGemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K,
                   float alpha, const float *A, int64_t strideA, const float *B,
                   int64_t strideB, float *C, int64_t count) {
  if (M <= 0 || N <= 0 || count <= 0)
    return;
  if (K <= 0) { // an empty sum (BLAS rejects ld < 1)
    GP_CUDA_CHECK(cudaMemsetAsync(
        C, 0, sizeof(float) * static_cast<size_t>(count * M * N), stream()));
    return;
  }
  const int64_t strideC = M * N;
  const GemmKey key{M,
                    N,
                    K,
                    transA ? M : K,
                    transB ? K : N,
                    N,
                    transA ? 1 : 0,
                    transB ? 1 : 0,
                    GP_MATH_F32,
                    0,
                    0,
                    batchAlignmentOf(A, count > 1 ? strideA * 4 : 0),
                    batchAlignmentOf(B, count > 1 ? strideB * 4 : 0),
                    batchAlignmentOf(C, count > 1 ? strideC * 4 : 0),
                    256u,
                    count,
                    count > 1 ? strideA : 0,
                    count > 1 ? strideB : 0,
                    count > 1 ? strideC : 0};
  runGemm(key, alpha, A, B, 0.0f, C, nullptr, 0);
}

/// A chunk of `blocks` blocks and where its two score tiles live in the
/// attention workspace: S ([blocks, Tq, Tk] fp32) at its start, dP (the
/// backward's, same shape) after it, at a 256-byte boundary.
struct AttentionChunks {
  int64_t blocks = 1; // per chunk
  float *S = nullptr, *dP = nullptr;
};

/// The most blocks whose two [Tq, Tk] tiles fit the attention workspace (at
/// most `batch`); the forward uses the same chunks as the backward (which
/// needs both tiles), so that the backward's recomputed scores are the
/// forward's GEMMs, bit for bit. When a single block does not fit (Tq * Tk
/// above 32M at the start-up 256 MiB, e.g. T > 5792), the workspace is
/// replaced by one of exactly that block's two tiles (plus the 256-byte
/// rounding): the one device allocation outside the start-up, made at most
/// once per larger shape and kept for the rest of the run.
AttentionChunks attentionChunks(int64_t batch, int64_t Tq, int64_t Tk) {
  const size_t tile = static_cast<size_t>(Tq) * static_cast<size_t>(Tk);
  auto bytesFor = [&](size_t blocks) {
    return ((blocks * tile * sizeof(float) + 255) & ~size_t(255)) +
           blocks * tile * sizeof(float);
  };
  if (bytesFor(1) > state().attentionBytes)
    gpipe::cuda::setAttentionWorkspace(bytesFor(1));
  const size_t have = state().attentionBytes;
  size_t blocks = std::min<size_t>(static_cast<size_t>(batch),
                                   std::max<size_t>(have / (2 * tile * 4), 1));
  while (blocks > 1 && bytesFor(blocks) > have)
    --blocks;
  AttentionChunks c;
  c.blocks = static_cast<int64_t>(blocks);
  c.S = static_cast<float *>(state().attention);
  c.dP = c.S +
         ((blocks * tile * sizeof(float) + 255) & ~size_t(255)) / sizeof(float);
  return c;
}

/// Launches an attention row kernel (a warp per row) over `rows` rows.
template <typename Kernel, typename... Args>
void launchAttentionRows(Kernel kernel, int64_t rows, Args... args) {
  if (rows <= 0)
    return;
  kernel<<<blocksFor(rows, kWarpsPerBlock), kThreads, 0, stream()>>>(args...);
  GP_CUDA_LAUNCHED();
}

__global__ void fillKernel(float *p, int64_t n, float value) {
  for (int64_t i = globalThread(); i < n; i += gridThreads())
    p[i] = value;
}

void fill(float *p, int64_t n, float value) {
  if (n <= 0)
    return;
  fillKernel<<<blocksFor(n), kThreads, 0, stream()>>>(p, n, value);
  GP_CUDA_LAUNCHED();
}

} // namespace

extern "C" {

void gp_gemm(int transA, int transB, int64_t M, int64_t N, int64_t K,
             float alpha, const float *A, int64_t lda, const float *B,
             int64_t ldb, float beta, float *C, int64_t ldc) {
  gp_gemm_ex(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc,
             nullptr, 0, state().defaultMath, nullptr, nullptr);
}

void gp_gemm_ex(int transA, int transB, int64_t M, int64_t N, int64_t K,
                float alpha, const float *A, int64_t lda, const float *B,
                int64_t ldb, float beta, float *C, int64_t ldc,
                const float *bias, int32_t relu, int32_t math, const void *A16,
                const void *B16) {
  if (math != GP_MATH_F32 && math != GP_MATH_TF32 && math != GP_MATH_BF16)
    failf("gp_gemm_ex", __FILE__, __LINE__, "unknown math mode %d",
          static_cast<int>(math));
  if (M <= 0 || N <= 0)
    return;
  // BLAS rejects ld < 1 (e.g. K == 0), so the degenerate product is done
  // here.
  if (K <= 0) {
    scaleMatrixKernel<<<blocksFor(M * N), kThreads, 0, stream()>>>(
        C, M, N, ldc, beta, bias, relu != 0);
    GP_CUDA_LAUNCHED();
    return;
  }
  transA = transA != 0;
  transB = transB != 0;
  // As the CPU gp_gemm: the stride of a single stored row is irrelevant and
  // callers may pass anything, but cuBLASLt checks ld >= stored columns.
  const int64_t rowsA = transA ? K : M, colsA = transA ? M : K;
  const int64_t rowsB = transB ? N : K, colsB = transB ? K : N;
  if (rowsA == 1)
    lda = std::max(lda, colsA);
  if (rowsB == 1)
    ldb = std::max(ldb, colsB);
  if (M == 1)
    ldc = std::max(ldc, N);

  const void *a = A, *b = B;
  if (math == GP_MATH_BF16) {
    size_t used = 0;
    a = A16 ? A16 : bf16Copy(A, rowsA, colsA, lda, used, "A");
    b = B16 ? B16 : bf16Copy(B, rowsB, colsB, ldb, used, "B");
  }

  const GemmKey key{M,
                    N,
                    K,
                    lda,
                    ldb,
                    ldc,
                    transA,
                    transB,
                    math,
                    bias != nullptr,
                    relu != 0,
                    alignmentOf(a),
                    alignmentOf(b),
                    alignmentOf(C),
                    bias ? alignmentOf(bias) : 256u,
                    1,
                    0,
                    0,
                    0};
  runGemm(key, alpha, a, b, beta, C, bias, relu);
}

void gp_batch_gemm(int transA, int transB, int64_t M, int64_t N, int64_t K,
                   const float *A, const float *B, float *C, int32_t batch_rank,
                   const int64_t *batch_shape, const int64_t *a_stride,
                   const int64_t *b_stride, int32_t math) {
  if (math != GP_MATH_F32 && math != GP_MATH_TF32 && math != GP_MATH_BF16)
    failf("gp_batch_gemm", __FILE__, __LINE__, "unknown math mode %d",
          static_cast<int>(math));
  if (M <= 0 || N <= 0)
    return;
  const gpipe::BatchRuns runs =
      gpipe::batchRuns(batch_rank, batch_shape, a_stride, b_stride, M * N);
  const int64_t total = static_cast<int64_t>(runs.aFirst.size()) * runs.count;
  if (K <= 0) {
    GP_CUDA_CHECK(
        cudaMemsetAsync(C, 0, sizeof(float) * total * M * N, stream()));
    return;
  }
  transA = transA != 0;
  transB = transB != 0;
  const int64_t lda = transA ? M : K, ldb = transB ? K : N;
  // bf16: each operand's whole span (every batch's matrix) rounded once.
  const void *a = A, *b = B;
  const size_t elem = math == GP_MATH_BF16 ? 2 : 4;
  if (math == GP_MATH_BF16) {
    auto span = [&](const int64_t *stride, int64_t matrix) {
      int64_t last = 0;
      for (int32_t d = 0; d < batch_rank; ++d)
        last += (batch_shape[d] - 1) * stride[d];
      return last + matrix;
    };
    size_t used = 0;
    const int64_t sa = span(a_stride, M * K), sb = span(b_stride, K * N);
    a = bf16Copy(A, 1, sa, sa, used, "A");
    b = bf16Copy(B, 1, sb, sb, used, "B");
  }
  // Every matrix of a run must have the alignment the plan was chosen for.
  const auto align = batchAlignmentOf;
  for (size_t r = 0; r < runs.aFirst.size(); ++r) {
    const void *ar = static_cast<const unsigned char *>(a) +
                     runs.aFirst[r] * static_cast<int64_t>(elem);
    const void *br = static_cast<const unsigned char *>(b) +
                     runs.bFirst[r] * static_cast<int64_t>(elem);
    float *cr = C + runs.cFirst[r];
    const GemmKey key{M,
                      N,
                      K,
                      lda,
                      ldb,
                      N,
                      transA,
                      transB,
                      math,
                      0,
                      0,
                      align(ar, runs.aStride * int64_t(elem)),
                      align(br, runs.bStride * int64_t(elem)),
                      align(cr, runs.cStride * 4),
                      256u,
                      runs.count,
                      runs.aStride,
                      runs.bStride,
                      runs.cStride};
    runGemm(key, 1.0f, ar, br, 0.0f, cr, nullptr, 0);
  }
}

void gp_cast_bf16(const float *in, void *out, int64_t n) {
  if (n <= 0)
    return;
  castBf16Kernel<<<blocksFor(n), kThreads, 0, stream()>>>(
      in, static_cast<__nv_bfloat16 *>(out), n);
  GP_CUDA_LAUNCHED();
}

void gp_dropout(const gp_step_ctx *ctx, uint64_t key, float ratio,
                const float *x, float *y, int64_t n, int64_t base) {
  if (n <= 0)
    return;
  if (ctx->eval)
    ratio = 0.0f; // keeps every element, scaled by exactly 1
  dropoutKernel<<<blocksFor(n), kThreads, 0, stream()>>>(key, ctx->step, ratio,
                                                         x, y, n, base);
  GP_CUDA_LAUNCHED();
}

void gp_softmax(const float *x, float *y, int64_t outer, int64_t n,
                int64_t inner) {
  launchAxisRows(softmaxKernel, outer, n, inner, x, y);
}

void gp_log_softmax(const float *x, float *y, int64_t outer, int64_t n,
                    int64_t inner) {
  launchAxisRows(logSoftmaxKernel, outer, n, inner, x, y);
}

void gp_log_softmax_bwd(const float *y, const float *dy, float *dx,
                        int64_t outer, int64_t n, int64_t inner) {
  launchAxisRows(logSoftmaxBwdKernel, outer, n, inner, y, dy, dx);
}

void gp_gather(const float *table, const int64_t *idx, float *out, int64_t n,
               int64_t rows, int64_t width) {
  if (n * width <= 0)
    return;
  gatherKernel<<<blocksFor(n * width), kThreads, 0, stream()>>>(table, idx, out,
                                                                n, rows, width);
  GP_CUDA_LAUNCHED();
}

void gp_scatter_add(const float *dout, const int64_t *idx, float *dtable,
                    int64_t n, int64_t rows, int64_t width) {
  if (rows * width <= 0)
    return;
  GP_CUDA_CHECK(cudaMemsetAsync(
      dtable, 0, static_cast<size_t>(rows * width) * sizeof(float), stream()));
  if (n <= 0)
    return;
  scatterAddKernel<<<blocksFor(width), kThreads, 0, stream()>>>(
      dout, idx, dtable, n, rows, width);
  GP_CUDA_LAUNCHED();
}

void gp_softmax_bwd(const float *y, const float *dy, float *dx, int64_t outer,
                    int64_t n, int64_t inner) {
  launchAxisRows(softmaxBwdKernel, outer, n, inner, y, dy, dx);
}

void gp_layer_norm(const float *x, const float *scale, const float *bias,
                   float *y, float *mean, float *inv_std, int64_t rows,
                   int64_t n, float eps) {
  if (rows <= 0 || n <= 0)
    return;
  layerNormKernel<<<blocksFor(rows, 1), layerNormThreads(n), 0, stream()>>>(
      x, scale, bias, y, mean, inv_std, rows, n, eps);
  GP_CUDA_LAUNCHED();
}

void gp_layer_norm_bwd(const float *x, const float *mean, const float *inv_std,
                       const float *scale, const float *dy, float *dx,
                       int64_t rows, int64_t n) {
  if (rows <= 0 || n <= 0)
    return;
  layerNormBwdKernel<<<blocksFor(rows, 1), layerNormThreads(n), 0, stream()>>>(
      x, mean, inv_std, scale, dy, dx, rows, n);
  GP_CUDA_LAUNCHED();
}

void gp_layer_norm_scale_bwd(const float *x, const float *mean,
                             const float *inv_std, const float *dy,
                             float *dscale, int64_t rows, int64_t n) {
  if (n <= 0)
    return;
  const int width = columnTileWidth(1, n);
  const unsigned blocks = static_cast<unsigned>((n + width - 1) / width);
  layerNormScaleBwdKernel<<<blocks, kColumnThreads, 0, stream()>>>(
      x, mean, inv_std, dy, dscale, rows, n, width);
  GP_CUDA_LAUNCHED();
}

void gp_attention_fwd(const float *q, const float *k, const float *v,
                      const float *mask, float *out, float *lse, int64_t batch,
                      int64_t Tq, int64_t Tk, int64_t d, int64_t dv,
                      float scale) {
  if (batch <= 0 || Tq <= 0)
    return;
  if (Tk <= 0) { // no keys: an empty softmax, 0 / 0 and log(0)
    fill(out, batch * Tq * dv, std::numeric_limits<float>::quiet_NaN());
    fill(lse, batch * Tq, -INFINITY);
    return;
  }
  const AttentionChunks ch = attentionChunks(batch, Tq, Tk);
  for (int64_t b0 = 0; b0 < batch; b0 += ch.blocks) {
    const int64_t nb = std::min(ch.blocks, batch - b0);
    // S = scale q k^T, then P in place, then out = P v.
    attentionGemm(false, true, Tq, Tk, d, scale, q + b0 * Tq * d, Tq * d,
                  k + b0 * Tk * d, Tk * d, ch.S, nb);
    launchAttentionRows(attentionSoftmaxKernel, nb * Tq, ch.S, mask,
                        lse + b0 * Tq, nb * Tq, Tq, Tk);
    attentionGemm(false, false, Tq, dv, Tk, 1.0f, ch.S, Tq * Tk,
                  v + b0 * Tk * dv, Tk * dv, out + b0 * Tq * dv, nb);
  }
}

void gp_attention_bwd(const float *q, const float *k, const float *v,
                      const float *mask, const float *out, const float *lse,
                      const float *dout, float *dq, float *dk, float *dv,
                      int64_t batch, int64_t Tq, int64_t Tk, int64_t d,
                      int64_t dv_dim, float scale) {
  if (batch <= 0)
    return;
  if (Tq <= 0 || Tk <= 0) { // empty sums: the gradients that exist are zero
    const int64_t sizes[] = {batch * Tq * d, batch * Tk * d,
                             batch * Tk * dv_dim};
    float *grads[] = {dq, dk, dv};
    for (int i = 0; i < 3; ++i)
      if (sizes[i] > 0)
        GP_CUDA_CHECK(cudaMemsetAsync(
            grads[i], 0, sizeof(float) * static_cast<size_t>(sizes[i]),
            stream()));
    return;
  }
  const AttentionChunks ch = attentionChunks(batch, Tq, Tk);
  for (int64_t b0 = 0; b0 < batch; b0 += ch.blocks) {
    const int64_t nb = std::min(ch.blocks, batch - b0);
    const float *qc = q + b0 * Tq * d, *kc = k + b0 * Tk * d,
                *vc = v + b0 * Tk * dv_dim, *gc = dout + b0 * Tq * dv_dim;
    // S = scale q k^T (the forward's GEMM), dP = dout v^T.
    attentionGemm(false, true, Tq, Tk, d, scale, qc, Tq * d, kc, Tk * d, ch.S,
                  nb);
    attentionGemm(false, true, Tq, Tk, dv_dim, 1.0f, gc, Tq * dv_dim, vc,
                  Tk * dv_dim, ch.dP, nb);
    // S -> P = exp(s - lse), dP -> dS = P (dP - D) scale.
    launchAttentionRows(attentionGradRowKernel, nb * Tq, ch.S, ch.dP, mask,
                        lse + b0 * Tq, out + b0 * Tq * dv_dim, gc, nb * Tq, Tq,
                        Tk, dv_dim, scale);
    // dv = P^T dout, dq = dS k, dk = dS^T q.
    attentionGemm(true, false, Tk, dv_dim, Tq, 1.0f, ch.S, Tq * Tk, gc,
                  Tq * dv_dim, dv + b0 * Tk * dv_dim, nb);
    attentionGemm(false, false, Tq, d, Tk, 1.0f, ch.dP, Tq * Tk, kc, Tk * d,
                  dq + b0 * Tq * d, nb);
    attentionGemm(true, false, Tk, d, Tq, 1.0f, ch.dP, Tq * Tk, qc, Tq * d,
                  dk + b0 * Tk * d, nb);
  }
}

void gp_reduce_to(const float *in, const int64_t *in_shape, float *out,
                  const int64_t *out_shape, int32_t rank) {
  ReduceDims r = reduceDims("gp_reduce_to", in_shape, out_shape, rank);
  if (r.outSize == 0)
    return;
  if (r.inSize == 0) {
    GP_CUDA_CHECK(cudaMemsetAsync(
        out, 0, static_cast<size_t>(r.outSize) * sizeof(float), stream()));
    return;
  }
  if (r.inSize == r.outSize) {
    if (in != out)
      GP_CUDA_CHECK(cudaMemcpyAsync(
          out, in, static_cast<size_t>(r.inSize) * sizeof(float),
          cudaMemcpyDeviceToDevice, stream()));
    return;
  }
  const ReduceDims::Dim *dims = r.dims;
  const int nd = r.nd;

  // The common shapes: [K, R] -> [K] (rows, incl. a full reduction), and
  // [O, R, N] -> [O, N] (bias gradients: O == 1).
  if (nd == 1) { // inSize != outSize: the one dim is reduced
    launchSumRows(in, out, 1, dims[0].size);
    return;
  }
  if (nd == 2 && !dims[0].reduced) {
    launchSumRows(in, out, dims[0].size, dims[1].size);
    return;
  }
  if (nd == 2) {
    launchSumColumns(in, out, 1, dims[0].size, dims[1].size);
    return;
  }
  if (nd == 3 && !dims[0].reduced) {
    launchSumColumns(in, out, dims[0].size, dims[1].size, dims[2].size);
    return;
  }
  const ReduceGeometry geo = geometryOf(r);
  reduceGeneralKernel<SumReduction>
      <<<blocksFor(geo.outSize, kWarpsPerBlock), kThreads, 0, stream()>>>(
          in, out, geo);
  GP_CUDA_LAUNCHED();
}

void gp_reduce_max(const float *in, const int64_t *in_shape, float *out,
                   const int64_t *out_shape, int32_t rank) {
  ReduceDims r = reduceDims("gp_reduce_max", in_shape, out_shape, rank);
  if (r.outSize == 0 || r.inSize == 0)
    return;
  const ReduceGeometry geo = geometryOf(r);
  reduceGeneralKernel<MaxReduction>
      <<<blocksFor(geo.outSize, kWarpsPerBlock), kThreads, 0, stream()>>>(
          in, out, geo);
  GP_CUDA_LAUNCHED();
}

void gp_copy_blocks(void *dst, int64_t dst_stride, const void *src,
                    int64_t src_stride, int64_t outer, int64_t count,
                    int64_t elem_bytes) {
  if (outer <= 0 || count <= 0)
    return;
  const size_t rowBytes = static_cast<size_t>(count * elem_bytes);
  if (outer == 1 || (dst_stride == count && src_stride == count)) {
    GP_CUDA_CHECK(cudaMemcpyAsync(dst, src,
                                  rowBytes * static_cast<size_t>(outer),
                                  cudaMemcpyDeviceToDevice, stream()));
    return;
  }
  GP_CUDA_CHECK(cudaMemcpy2DAsync(
      dst, static_cast<size_t>(dst_stride * elem_bytes), src,
      static_cast<size_t>(src_stride * elem_bytes), rowBytes,
      static_cast<size_t>(outer), cudaMemcpyDeviceToDevice, stream()));
}

void gp_softmax_xent_fwd(const float *logits, const int64_t *labels, int64_t N,
                         int64_t C, int32_t has_ignore, int64_t ignore_index,
                         double norm, float *loss, float *log_prob) {
  launchLossFwd(logits, labels, N, C, has_ignore, ignore_index, norm, loss,
                XentRowLoss{log_prob});
}

void gp_softmax_xent_bwd(const float *logits, const int64_t *labels, int64_t N,
                         int64_t C, int32_t has_ignore, int64_t ignore_index,
                         double norm, const float *dloss, float *dlogits) {
  launchLossBwd(logits, labels, N, C, has_ignore, ignore_index, norm, dloss,
                dlogits, XentRowGrad{});
}

void gp_nll_fwd(const float *log_prob, const int64_t *labels, int64_t N,
                int64_t C, int32_t has_ignore, int64_t ignore_index,
                double norm, float *loss) {
  launchLossFwd(log_prob, labels, N, C, has_ignore, ignore_index, norm, loss,
                NllRowLoss{});
}

void gp_nll_bwd(const int64_t *labels, int64_t N, int64_t C, int32_t has_ignore,
                int64_t ignore_index, double norm, const float *dloss,
                float *dlog_prob) {
  launchLossBwd(nullptr, labels, N, C, has_ignore, ignore_index, norm, dloss,
                dlog_prob, NllRowGrad{});
}

void gp_sgd_update(float *p, const float *g, float *buf, int64_t n, float lr,
                   float momentum, float weight_decay, int32_t nesterov,
                   int64_t step) {
  if (n <= 0)
    return;
  const bool useMomentum = momentum != 0.0f && buf != nullptr;
  sgdKernel<<<blocksFor(n), kThreads, 0, stream()>>>(p, g, buf, n, lr, momentum,
                                                     weight_decay, useMomentum,
                                                     nesterov != 0, step <= 1);
  GP_CUDA_LAUNCHED();
}

void gp_adam_update(float *p, const float *g, float *m, float *v, int64_t n,
                    float lr, float beta1, float beta2, float eps,
                    float weight_decay, int32_t decoupled, int64_t step) {
  if (n <= 0)
    return;
  // Scalars follow torch 1.13 _single_tensor_adam(w): Python double math,
  // rounded to float when applied to the float tensors (as kernels.cpp).
  const double lrD = pyDouble(lr), b1 = pyDouble(beta1), b2 = pyDouble(beta2);
  const double wdD = pyDouble(weight_decay);
  const double stepD = static_cast<double>(step);
  const double biasCorrection1 = 1.0 - std::pow(b1, stepD);
  const double biasCorrection2Sqrt = std::sqrt(1.0 - std::pow(b2, stepD));
  AdamScalars s;
  s.beta1 = beta1;
  s.beta2 = beta2;
  s.eps = eps;
  s.weightDecay = weight_decay;
  s.negStepSize = static_cast<float>(-(lrD / biasCorrection1));
  s.bc2Sqrt = static_cast<float>(biasCorrection2Sqrt);
  s.oneMinusB1 = static_cast<float>(1.0 - b1);
  s.oneMinusB2 = static_cast<float>(1.0 - b2);
  s.decay = static_cast<float>(1.0 - lrD * wdD);
  s.decoupled = decoupled != 0;
  s.coupledDecay = !decoupled && weight_decay != 0.0f;
  adamKernel<<<blocksFor(n), kThreads, 0, stream()>>>(p, g, m, v, n, s);
  GP_CUDA_LAUNCHED();
}

} // extern "C"

//===----------------------------------------------------------------------===//
// Pooling (gp_max_pool, gp_avg_pool and their gradients, pool.h's windows):
// one thread per output element, the max gradient scattered with atomics,
// the average gradient gathered per input element (no atomics)
//===----------------------------------------------------------------------===//

namespace {

__global__ void maxPoolKernel(const float *x, float *y, int64_t *idx,
                              int64_t nc, gp_pool_window w) {
  int64_t out = w.oh * w.ow;
  for (int64_t o = globalThread(); o < nc * out; o += gridThreads()) {
    int64_t p = o / out, r = o % out;
    gpipe::maxPoolWindow(x + p * w.ih * w.iw, w, r / w.ow, r % w.ow, &y[o],
                         &idx[o]);
  }
}

__global__ void maxPoolBwdKernel(const int64_t *idx, const float *dy,
                                 float *dx, int64_t nc, int64_t inPlane,
                                 int64_t outPlane) {
  for (int64_t o = globalThread(); o < nc * outPlane; o += gridThreads())
    atomicAdd(&dx[(o / outPlane) * inPlane + idx[o]], dy[o]);
}

__global__ void avgPoolKernel(const float *x, float *y, int64_t nc,
                              gp_pool_window w, int32_t countIncludePad) {
  int64_t out = w.oh * w.ow;
  for (int64_t o = globalThread(); o < nc * out; o += gridThreads()) {
    int64_t p = o / out, r = o % out;
    int64_t hb, he, wb, we;
    float div = gpipe::avgPoolWindow(w, r / w.ow, r % w.ow, countIncludePad,
                                     &hb, &he, &wb, &we);
    const float *plane = x + p * w.ih * w.iw;
    float sum = 0.0f;
    for (int64_t h = hb; h < he; ++h)
      for (int64_t c = wb; c < we; ++c)
        sum += plane[h * w.iw + c];
    y[o] = sum / div;
  }
}

/// The outputs whose windows (stride s, size k, padding p before) hold input
/// position i: [*lo, *hi).
__device__ __forceinline__ void windowsOver(int64_t i, int64_t k, int64_t s,
                                            int64_t p, int64_t n, int64_t *lo,
                                            int64_t *hi) {
  int64_t first = i + p - k + 1; // the earliest window start holding i
  *lo = first <= 0 ? 0 : (first + s - 1) / s;
  *hi = (i + p) / s + 1;
  if (*hi > n)
    *hi = n;
}

__global__ void avgPoolBwdKernel(const float *dy, float *dx, int64_t nc,
                                 gp_pool_window w, int32_t countIncludePad) {
  int64_t in = w.ih * w.iw;
  for (int64_t e = globalThread(); e < nc * in; e += gridThreads()) {
    int64_t p = e / in, h = (e % in) / w.iw, c = e % w.iw;
    int64_t ohLo, ohHi, owLo, owHi;
    windowsOver(h, w.kh, w.sh, w.ph, w.oh, &ohLo, &ohHi);
    windowsOver(c, w.kw, w.sw, w.pw, w.ow, &owLo, &owHi);
    float g = 0.0f;
    for (int64_t oh = ohLo; oh < ohHi; ++oh)
      for (int64_t ow = owLo; ow < owHi; ++ow) {
        int64_t hb, he, wb, we;
        float div = gpipe::avgPoolWindow(w, oh, ow, countIncludePad, &hb, &he,
                                         &wb, &we);
        g += dy[p * w.oh * w.ow + oh * w.ow + ow] / div;
      }
    dx[e] = g;
  }
}

} // namespace

void gp_max_pool(const float *x, float *y, int64_t *idx, int64_t nc,
                 gp_pool_window w) {
  int64_t n = nc * w.oh * w.ow;
  if (n <= 0)
    return;
  maxPoolKernel<<<blocksFor(n), kThreads, 0, stream()>>>(x, y, idx, nc, w);
  GP_CUDA_LAUNCHED();
}

void gp_max_pool_bwd(const int64_t *idx, const float *dy, float *dx,
                     int64_t nc, int64_t in_plane, int64_t out_plane) {
  if (nc * in_plane <= 0)
    return;
  GP_CUDA_CHECK(cudaMemsetAsync(dx, 0, nc * in_plane * sizeof(float), stream()));
  if (nc * out_plane <= 0)
    return;
  maxPoolBwdKernel<<<blocksFor(nc * out_plane), kThreads, 0, stream()>>>(
      idx, dy, dx, nc, in_plane, out_plane);
  GP_CUDA_LAUNCHED();
}

void gp_avg_pool(const float *x, float *y, int64_t nc, gp_pool_window w,
                 int32_t count_include_pad) {
  int64_t n = nc * w.oh * w.ow;
  if (n <= 0)
    return;
  avgPoolKernel<<<blocksFor(n), kThreads, 0, stream()>>>(x, y, nc, w,
                                                         count_include_pad);
  GP_CUDA_LAUNCHED();
}

void gp_avg_pool_bwd(const float *dy, float *dx, int64_t nc, gp_pool_window w,
                     int32_t count_include_pad) {
  int64_t n = nc * w.ih * w.iw;
  if (n <= 0)
    return;
  avgPoolBwdKernel<<<blocksFor(n), kThreads, 0, stream()>>>(dy, dx, nc, w,
                                                            count_include_pad);
  GP_CUDA_LAUNCHED();
}
