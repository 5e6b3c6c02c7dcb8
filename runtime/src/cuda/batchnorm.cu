// CUDA batch normalization in training mode (gp_batch_norm,
// gp_batch_norm_bwd, gp_batch_norm_update) on device pointers, enqueued on
// the compute stream. x is viewed as [n, c, s] (row-major).
//
// A block per channel (grid-stride over the channels) sums the channel's
// n * s elements in double through a fixed-order block reduction
// (deterministic, no atomics), then writes the channel's y or dx itself: the
// backward pass's sums have nowhere else to live when dscale and dbias are
// null, and neither pass then needs a scratch buffer or a per-element square
// root. The float operations are those of the CPU kernels (batchnorm.cpp), one
// by one (__fmul_rn: no FMA contraction).
#include "cuda_internal.h"
#include "internal.h"

#include <algorithm>

namespace {

using gpipe::cuda::state;

constexpr int kBnThreads = 512;
constexpr int64_t kMaxBlocks = 8192;

cudaStream_t stream() { return state().compute; }

/// Threads of a channel's block: its n * s elements rounded up to whole
/// warps, at most kBnThreads.
int bnThreads(int64_t perChannel) {
  return static_cast<int>(
      std::min<int64_t>(kBnThreads, (perChannel + 31) / 32 * 32));
}

unsigned bnBlocks(int64_t c) {
  return static_cast<unsigned>(std::clamp<int64_t>(c, 1, kMaxBlocks));
}

__device__ __forceinline__ double warpSumD(double v) {
  for (int offset = 16; offset > 0; offset >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

/// Sum over the block (blockDim.x a multiple of 32) in a fixed order, the
/// result in every thread. Every thread of the block must call this.
__device__ double blockSumAllD(double v, double *shared, double *result) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5,
            warps = blockDim.x >> 5;
  v = warpSumD(v);
  if (lane == 0)
    shared[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = warpSumD(lane < warps ? shared[lane] : 0.0);
    if (lane == 0)
      *result = v;
  }
  __syncthreads();
  v = *result;
  __syncthreads();
  return v;
}

/// The offset of channel k's element e (< n * s) in [n, c, s].
__device__ __forceinline__ int64_t bnIndex(int64_t e, int64_t k, int64_t c,
                                           int64_t s) {
  const int64_t i = e / s;
  return (i * c + k) * s + (e - i * s);
}

__device__ __forceinline__ float bnInvStd(float var, float eps) {
  return static_cast<float>(
      1.0 / sqrt(static_cast<double>(var) + static_cast<double>(eps)));
}

// y may alias x: neither is __restrict__ (every element is read before the
// same thread writes it; the block's sums are done by then).
__global__ void batchNormKernel(const float *x, const float *__restrict__ scale,
                                const float *__restrict__ bias, float *y,
                                float *__restrict__ mean,
                                float *__restrict__ var, int64_t n, int64_t c,
                                int64_t s, float eps) {
  __shared__ double shared[32];
  __shared__ double result;
  const int64_t per = n * s;
  const double count = static_cast<double>(per);
  for (int64_t k = blockIdx.x; k < c; k += gridDim.x) {
    double t = 0.0;
    for (int64_t e = threadIdx.x; e < per; e += blockDim.x)
      t += x[bnIndex(e, k, c, s)];
    const double m = blockSumAllD(t, shared, &result) / count;
    double q = 0.0;
    for (int64_t e = threadIdx.x; e < per; e += blockDim.x) {
      const double d = x[bnIndex(e, k, c, s)] - m;
      q = __dadd_rn(q, __dmul_rn(d, d));
    }
    const float v =
        static_cast<float>(blockSumAllD(q, shared, &result) / count);
    const float mf = static_cast<float>(m);
    if (threadIdx.x == 0) {
      mean[k] = mf;
      var[k] = v;
    }
    const float a = __fmul_rn(bnInvStd(v, eps), scale[k]), b = bias[k];
    for (int64_t e = threadIdx.x; e < per; e += blockDim.x) {
      const int64_t o = bnIndex(e, k, c, s);
      y[o] = __fadd_rn(__fmul_rn(x[o] - mf, a), b);
    }
  }
}

// y may alias x.
__global__ void batchNormEvalKernel(const float *x,
                                    const float *__restrict__ runningMean,
                                    const float *__restrict__ runningVar,
                                    const float *__restrict__ scale,
                                    const float *__restrict__ bias, float *y,
                                    int64_t n, int64_t c, int64_t s,
                                    float eps) {
  const int64_t total = n * c * s;
  for (int64_t o = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       o < total; o += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t k = o / s % c;
    const float a = __fmul_rn(bnInvStd(runningVar[k], eps), scale[k]);
    y[o] = __fadd_rn(__fmul_rn(x[o] - runningMean[k], a), bias[k]);
  }
}

// dx may alias dy.
__global__ void batchNormBwdKernel(const float *__restrict__ x,
                                   const float *__restrict__ mean,
                                   const float *__restrict__ var,
                                   const float *__restrict__ scale,
                                   const float *dy, float *dx, float *dscale,
                                   float *dbias, int64_t n, int64_t c,
                                   int64_t s, float eps) {
  __shared__ double shared[32];
  __shared__ double result;
  const int64_t per = n * s;
  const double count = static_cast<double>(per);
  for (int64_t k = blockIdx.x; k < c; k += gridDim.x) {
    const float m = mean[k], rstd = bnInvStd(var[k], eps);
    double g = 0.0, h = 0.0;
    for (int64_t e = threadIdx.x; e < per; e += blockDim.x) {
      const int64_t o = bnIndex(e, k, c, s);
      const float xh = __fmul_rn(x[o] - m, rstd);
      g += dy[o];
      h = __dadd_rn(
          h, __dmul_rn(static_cast<double>(dy[o]), static_cast<double>(xh)));
    }
    g = blockSumAllD(g, shared, &result);
    h = blockSumAllD(h, shared, &result);
    if (threadIdx.x == 0) {
      if (dbias)
        dbias[k] = static_cast<float>(g);
      if (dscale)
        dscale[k] = static_cast<float>(h);
    }
    if (!dx)
      continue;
    const float a = __fmul_rn(scale[k], rstd);
    const float b = static_cast<float>(g / count);
    const float cc = static_cast<float>(h / count);
    for (int64_t e = threadIdx.x; e < per; e += blockDim.x) {
      const int64_t o = bnIndex(e, k, c, s);
      const float xh = __fmul_rn(x[o] - m, rstd);
      dx[o] = __fmul_rn(a, dy[o] - b - __fmul_rn(xh, cc));
    }
  }
}

/// Zeroes dscale and dbias (an empty batch).
__global__ void batchNormZeroKernel(float *dscale, float *dbias, int64_t c) {
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       k < c; k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (dscale)
      dscale[k] = 0.0f;
    if (dbias)
      dbias[k] = 0.0f;
  }
}

/// running = mom * running + (1 - mom) * stat, the variance unbiased over
/// `total` elements (double, as the CPU kernel).
__device__ void batchNormApply(float *runningMean, float *runningVar, int64_t k,
                               double m, double v, double total, double mom) {
  const double unbiased = total > 1.0 ? v * total / (total - 1.0) : v;
  runningMean[k] = static_cast<float>(
      __dadd_rn(__dmul_rn(mom, static_cast<double>(runningMean[k])),
                __dmul_rn(1.0 - mom, m)));
  runningVar[k] = static_cast<float>(
      __dadd_rn(__dmul_rn(mom, static_cast<double>(runningVar[k])),
                __dmul_rn(1.0 - mom, unbiased)));
}

/// A thread per channel: M == 1 applies the statistics; M > 1 saves them in
/// the state's slot, and the last micro-batch combines the M slots in order.
__global__ void batchNormUpdateKernel(float *runningMean, float *runningVar,
                                      const float *__restrict__ mean,
                                      const float *__restrict__ var,
                                      float *state, int64_t c, int64_t count,
                                      double mom, int64_t microbatches,
                                      int64_t microbatch) {
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       k < c; k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (microbatches <= 1) {
      batchNormApply(runningMean, runningVar, k, mean[k], var[k],
                     static_cast<double>(count), mom);
      continue;
    }
    state[microbatch * 2 * c + k] = mean[k];
    state[microbatch * 2 * c + c + k] = var[k];
    if (microbatch != microbatches - 1)
      continue;
    const double M = static_cast<double>(microbatches);
    double ms = 0.0, vs = 0.0;
    for (int64_t m = 0; m < microbatches; ++m) {
      ms += state[m * 2 * c + k];
      vs += state[m * 2 * c + c + k];
    }
    const double mAll = ms / M;
    double spread = 0.0;
    for (int64_t m = 0; m < microbatches; ++m) {
      const double d = state[m * 2 * c + k] - mAll;
      spread = __dadd_rn(spread, __dmul_rn(d, d));
    }
    batchNormApply(runningMean, runningVar, k, mAll, vs / M + spread / M,
                   M * static_cast<double>(count), mom);
  }
}

} // namespace

void gp_batch_norm(const float *x, const float *scale, const float *bias,
                   float *y, float *mean, float *var, int64_t n, int64_t c,
                   int64_t s, float eps) {
  if (n <= 0 || c <= 0 || s <= 0)
    return;
  batchNormKernel<<<bnBlocks(c), bnThreads(n * s), 0, stream()>>>(
      x, scale, bias, y, mean, var, n, c, s, eps);
  GP_CUDA_LAUNCHED();
}

void gp_batch_norm_eval(const float *x, const float *running_mean,
                        const float *running_var, const float *scale,
                        const float *bias, float *y, int64_t n, int64_t c,
                        int64_t s, float eps) {
  const int64_t total = n * c * s;
  if (n <= 0 || c <= 0 || s <= 0)
    return;
  const int64_t blocks = std::min<int64_t>((total + 255) / 256, 65535);
  batchNormEvalKernel<<<static_cast<unsigned>(blocks), 256, 0, stream()>>>(
      x, running_mean, running_var, scale, bias, y, n, c, s, eps);
  GP_CUDA_LAUNCHED();
}

void gp_batch_norm_bwd(const float *x, const float *mean, const float *var,
                       const float *scale, const float *dy, float *dx,
                       float *dscale, float *dbias, int64_t n, int64_t c,
                       int64_t s, float eps) {
  if (c <= 0)
    return;
  if (n <= 0 || s <= 0) {
    if (dscale || dbias) {
      batchNormZeroKernel<<<bnBlocks((c + 255) / 256), 256, 0, stream()>>>(
          dscale, dbias, c);
      GP_CUDA_LAUNCHED();
    }
    return;
  }
  batchNormBwdKernel<<<bnBlocks(c), bnThreads(n * s), 0, stream()>>>(
      x, mean, var, scale, dy, dx, dscale, dbias, n, c, s, eps);
  GP_CUDA_LAUNCHED();
}

void gp_batch_norm_update(float *running_mean, float *running_var,
                          const float *mean, const float *var, float *state,
                          int64_t c, int64_t count, float momentum,
                          int64_t microbatches, int64_t microbatch) {
  if (c <= 0)
    return;
  batchNormUpdateKernel<<<bnBlocks((c + 255) / 256), 256, 0, stream()>>>(
      running_mean, running_var, mean, var, state, c, count,
      gpipe::pyDouble(momentum), microbatches, microbatch);
  GP_CUDA_LAUNCHED();
}
