// CPU batch normalization in training mode (gp_batch_norm, gp_batch_norm_bwd,
// gp_batch_norm_update) on x viewed as [n, c, s], row-major: channel k's
// n * s elements are n runs of s contiguous floats, c * s floats apart.
//
// Two layouts of the work, chosen by the shape only (never by the number of
// threads, so that results are the same on any number of them):
//  - runs (s >= kColumnS = 64): a channel per OpenMP iteration, its passes over
//    the n runs back to back (a channel of ResNet's [32, 64, 32x32] is 128 KB:
//    the second and third passes read it from cache). Sums in double over
//    four-wide vectors, lanes combined in a fixed order.
//  - columns (s < 64, [n, c] among them): the tensor as n rows of
//    c * s columns, blocks of columns per OpenMP iteration, each column summed
//    over the rows in order in double (vectorized across columns), then a
//    channel's s column sums in order. A column's sum does not depend on the
//    blocking, which may follow the thread count.
#include "gpipe/runtime.h"
#include "internal.h"

#include <omp.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstring>

using gpipe::kParallelMin;

namespace {

/// Below this spatial size the channel's runs are too short to vectorize
/// along efficiently (loop overhead per run): the columns layout vectorizes
/// across channels instead. Measured on the AVX2 EPYC, 1 thread, [32, 512,
/// 16] forward + backward: 0.98 ms as runs, 0.49 ms as columns; at s = 64 both
/// about equal.
constexpr int64_t kColumnS = 64;
/// Columns per block of the columns layout (their double accumulators stay
/// in L1).
constexpr int64_t kColumns = 256;
static_assert(kColumnS <= kColumns, "a block holds at least one channel");

typedef float v4f __attribute__((vector_size(16)));
typedef double v4d __attribute__((vector_size(32)));

inline v4f load4(const float *p) {
  v4f v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

/// The four floats widened to doubles.
#define GP_WIDEN(v) __builtin_convertvector((v), v4d)

/// The lanes of a and b plus the scalar tail t, in a fixed order.
inline double combine(const v4d &a, const v4d &b, double t) {
  const v4d v = a + b;
  return ((v[0] + v[1]) + (v[2] + v[3])) + t;
}

/// 1 / sqrt(var + eps) as both targets compute it (from the float variance).
inline float invStd(float var, float eps) {
  return static_cast<float>(
      1.0 / std::sqrt(static_cast<double>(var) + static_cast<double>(eps)));
}

//===----------------------------------------------------------------------===//
// Runs layout: one channel, its n runs of s floats `stride` apart.
//===----------------------------------------------------------------------===//

/// sum(x) in double.
double runsSumGeneric(const float *__restrict x, int64_t n, int64_t s,
                      int64_t stride) {
  v4d a = {0, 0, 0, 0}, b = {0, 0, 0, 0};
  double t = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const float *r = x + i * stride;
    int64_t j = 0;
    for (; j + 8 <= s; j += 8) {
      v4d w0, w1;
      w0 = GP_WIDEN(load4(r + j));
      w1 = GP_WIDEN(load4(r + j + 4));
      a += w0;
      b += w1;
    }
    for (; j < s; ++j)
      t += r[j];
  }
  return combine(a, b, t);
}

/// sum((x - m)^2) in double.
double runsSquaresGeneric(const float *__restrict x, int64_t n, int64_t s,
                          int64_t stride, double m) {
  const v4d mv = {m, m, m, m};
  v4d a = {0, 0, 0, 0}, b = {0, 0, 0, 0};
  double t = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const float *r = x + i * stride;
    int64_t j = 0;
    for (; j + 8 <= s; j += 8) {
      v4d d0, d1;
      d0 = GP_WIDEN(load4(r + j));
      d1 = GP_WIDEN(load4(r + j + 4));
      d0 -= mv;
      d1 -= mv;
      a += d0 * d0;
      b += d1 * d1;
    }
    for (; j < s; ++j) {
      const double d = r[j] - m;
      t += d * d;
    }
  }
  return combine(a, b, t);
}

#if defined(__x86_64__) && defined(__GNUC__)
// The reductions above, written with AVX2 intrinsics: GCC lowers generic
// vector code before target_clones copies a function, so the clones of the
// generic versions convert floats to doubles in SSE halves. Same lanes, same
// order of additions, no FMA: the same results as the generic versions.
#define GP_BN_AVX2 1

__attribute__((target("avx2"))) inline double combineAvx2(__m256d a, __m256d b,
                                                          double t) {
  alignas(32) double v[4];
  _mm256_store_pd(v, _mm256_add_pd(a, b));
  return ((v[0] + v[1]) + (v[2] + v[3])) + t;
}

__attribute__((target("avx2"))) double
runsSumAvx2(const float *__restrict x, int64_t n, int64_t s, int64_t stride) {
  __m256d a = _mm256_setzero_pd(), b = _mm256_setzero_pd();
  double t = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const float *r = x + i * stride;
    int64_t j = 0;
    for (; j + 8 <= s; j += 8) {
      a = _mm256_add_pd(a, _mm256_cvtps_pd(_mm_loadu_ps(r + j)));
      b = _mm256_add_pd(b, _mm256_cvtps_pd(_mm_loadu_ps(r + j + 4)));
    }
    for (; j < s; ++j)
      t += r[j];
  }
  return combineAvx2(a, b, t);
}

__attribute__((target("avx2"))) double
runsSquaresAvx2(const float *__restrict x, int64_t n, int64_t s, int64_t stride,
                double m) {
  const __m256d mv = _mm256_set1_pd(m);
  __m256d a = _mm256_setzero_pd(), b = _mm256_setzero_pd();
  double t = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const float *r = x + i * stride;
    int64_t j = 0;
    for (; j + 8 <= s; j += 8) {
      const __m256d d0 =
          _mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(r + j)), mv);
      const __m256d d1 =
          _mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(r + j + 4)), mv);
      a = _mm256_add_pd(a, _mm256_mul_pd(d0, d0));
      b = _mm256_add_pd(b, _mm256_mul_pd(d1, d1));
    }
    for (; j < s; ++j) {
      const double d = r[j] - m;
      t += d * d;
    }
  }
  return combineAvx2(a, b, t);
}

__attribute__((target("avx2"))) void
runsGradSumsAvx2(const float *__restrict x, const float *__restrict dy,
                 int64_t n, int64_t s, int64_t stride, float m, float rstd,
                 double *sumDy, double *sumDyXhat) {
  const __m128 mv = _mm_set1_ps(m), rv = _mm_set1_ps(rstd);
  __m256d g0 = _mm256_setzero_pd(), g1 = _mm256_setzero_pd(),
          h0 = _mm256_setzero_pd(), h1 = _mm256_setzero_pd();
  double gt = 0.0, ht = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const float *xr = x + i * stride, *dr = dy + i * stride;
    int64_t j = 0;
    for (; j + 8 <= s; j += 8) {
      const __m256d d0 = _mm256_cvtps_pd(_mm_loadu_ps(dr + j));
      const __m256d d1 = _mm256_cvtps_pd(_mm_loadu_ps(dr + j + 4));
      const __m256d x0 =
          _mm256_cvtps_pd(_mm_mul_ps(_mm_sub_ps(_mm_loadu_ps(xr + j), mv), rv));
      const __m256d x1 = _mm256_cvtps_pd(
          _mm_mul_ps(_mm_sub_ps(_mm_loadu_ps(xr + j + 4), mv), rv));
      g0 = _mm256_add_pd(g0, d0);
      g1 = _mm256_add_pd(g1, d1);
      h0 = _mm256_add_pd(h0, _mm256_mul_pd(d0, x0));
      h1 = _mm256_add_pd(h1, _mm256_mul_pd(d1, x1));
    }
    for (; j < s; ++j) {
      const float xh = (xr[j] - m) * rstd;
      gt += dr[j];
      ht += static_cast<double>(dr[j]) * static_cast<double>(xh);
    }
  }
  *sumDy = combineAvx2(g0, g1, gt);
  *sumDyXhat = combineAvx2(h0, h1, ht);
}

bool haveAvx2() {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  return avx2;
}
#endif

double runsSum(const float *x, int64_t n, int64_t s, int64_t stride) {
#ifdef GP_BN_AVX2
  if (haveAvx2())
    return runsSumAvx2(x, n, s, stride);
#endif
  return runsSumGeneric(x, n, s, stride);
}

double runsSquares(const float *x, int64_t n, int64_t s, int64_t stride,
                   double m) {
#ifdef GP_BN_AVX2
  if (haveAvx2())
    return runsSquaresAvx2(x, n, s, stride, m);
#endif
  return runsSquaresGeneric(x, n, s, stride, m);
}

void runsGradSumsGeneric(const float *__restrict x, const float *__restrict dy,
                         int64_t n, int64_t s, int64_t stride, float m,
                         float rstd, double *sumDy, double *sumDyXhat);

void runsGradSums(const float *x, const float *dy, int64_t n, int64_t s,
                  int64_t stride, float m, float rstd, double *sumDy,
                  double *sumDyXhat) {
#ifdef GP_BN_AVX2
  if (haveAvx2()) {
    runsGradSumsAvx2(x, dy, n, s, stride, m, rstd, sumDy, sumDyXhat);
    return;
  }
#endif
  runsGradSumsGeneric(x, dy, n, s, stride, m, rstd, sumDy, sumDyXhat);
}

/// y = (x - m) * a + b.
GP_CPU_CLONES void runsAffine(const float *__restrict x, float *__restrict y,
                              int64_t n, int64_t s, int64_t stride, float m,
                              float a, float b) {
  for (int64_t i = 0; i < n; ++i) {
    const float *r = x + i * stride;
    float *o = y + i * stride;
    for (int64_t j = 0; j < s; ++j)
      o[j] = (r[j] - m) * a + b;
  }
}

/// The same in place (y == x).
GP_CPU_CLONES void runsAffineInPlace(float *__restrict y, int64_t n, int64_t s,
                                     int64_t stride, float m, float a,
                                     float b) {
  for (int64_t i = 0; i < n; ++i) {
    float *o = y + i * stride;
    for (int64_t j = 0; j < s; ++j)
      o[j] = (o[j] - m) * a + b;
  }
}

/// sum(dy) and sum(dy * xhat), xhat = (x - m) * rstd in float, in double.
void runsGradSumsGeneric(const float *__restrict x, const float *__restrict dy,
                         int64_t n, int64_t s, int64_t stride, float m,
                         float rstd, double *sumDy, double *sumDyXhat) {
  const v4f mv = {m, m, m, m}, rv = {rstd, rstd, rstd, rstd};
  v4d g0 = {0, 0, 0, 0}, g1 = {0, 0, 0, 0}, h0 = {0, 0, 0, 0},
      h1 = {0, 0, 0, 0};
  double gt = 0.0, ht = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const float *xr = x + i * stride, *dr = dy + i * stride;
    int64_t j = 0;
    for (; j + 8 <= s; j += 8) {
      v4d d0, d1, x0, x1;
      d0 = GP_WIDEN(load4(dr + j));
      d1 = GP_WIDEN(load4(dr + j + 4));
      x0 = GP_WIDEN((load4(xr + j) - mv) * rv);
      x1 = GP_WIDEN((load4(xr + j + 4) - mv) * rv);
      g0 += d0;
      g1 += d1;
      h0 += d0 * x0;
      h1 += d1 * x1;
    }
    for (; j < s; ++j) {
      const float xh = (xr[j] - m) * rstd;
      gt += dr[j];
      ht += static_cast<double>(dr[j]) * static_cast<double>(xh);
    }
  }
  *sumDy = combine(g0, g1, gt);
  *sumDyXhat = combine(h0, h1, ht);
}

/// dx = a * (dy - b - (x - m) * rstd * c).
GP_CPU_CLONES void runsDx(const float *__restrict x, const float *__restrict dy,
                          float *__restrict dx, int64_t n, int64_t s,
                          int64_t stride, float m, float rstd, float a, float b,
                          float c) {
  for (int64_t i = 0; i < n; ++i) {
    const float *xr = x + i * stride, *dr = dy + i * stride;
    float *o = dx + i * stride;
    for (int64_t j = 0; j < s; ++j)
      o[j] = a * (dr[j] - b - (xr[j] - m) * rstd * c);
  }
}

/// The same with dx == dy.
GP_CPU_CLONES void runsDxInPlace(const float *__restrict x,
                                 float *__restrict dy, int64_t n, int64_t s,
                                 int64_t stride, float m, float rstd, float a,
                                 float b, float c) {
  for (int64_t i = 0; i < n; ++i) {
    const float *xr = x + i * stride;
    float *o = dy + i * stride;
    for (int64_t j = 0; j < s; ++j)
      o[j] = a * (o[j] - b - (xr[j] - m) * rstd * c);
  }
}

//===----------------------------------------------------------------------===//
// Columns layout: channels [k0, k1), i.e. columns [k0 * s, k1 * s) of the n
// rows of `stride` (= c * s) floats. Per-column values in arrays of `cols`.
//===----------------------------------------------------------------------===//

/// acc[j] = sum over the rows of x[j] (x at column k0 * s).
GP_CPU_CLONES void columnsSum(const float *__restrict x, int64_t n,
                              int64_t cols, int64_t stride,
                              double *__restrict acc) {
  std::fill(acc, acc + cols, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    const float *r = x + i * stride;
    for (int64_t j = 0; j < cols; ++j)
      acc[j] += r[j];
  }
}

/// acc[j] = sum over the rows of (x[j] - m[j])^2.
GP_CPU_CLONES void columnsSquares(const float *__restrict x, int64_t n,
                                  int64_t cols, int64_t stride,
                                  const double *__restrict m,
                                  double *__restrict acc) {
  std::fill(acc, acc + cols, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    const float *r = x + i * stride;
    for (int64_t j = 0; j < cols; ++j) {
      const double d = r[j] - m[j];
      acc[j] += d * d;
    }
  }
}

/// y[j] = (x[j] - m[j]) * a[j] + b[j] on every row (y may be x).
GP_CPU_CLONES void columnsAffine(const float *x, float *y, int64_t n,
                                 int64_t cols, int64_t stride,
                                 const float *__restrict m,
                                 const float *__restrict a,
                                 const float *__restrict b) {
  for (int64_t i = 0; i < n; ++i) {
    const float *r = x + i * stride;
    float *o = y + i * stride;
#pragma omp simd
    for (int64_t j = 0; j < cols; ++j)
      o[j] = (r[j] - m[j]) * a[j] + b[j];
  }
}

/// g[j] = sum over the rows of dy[j], h[j] = of dy[j] * xhat[j], xhat =
/// (x - m[j]) * rstd[j] in float.
GP_CPU_CLONES void columnsGradSums(const float *__restrict x,
                                   const float *__restrict dy, int64_t n,
                                   int64_t cols, int64_t stride,
                                   const float *__restrict m,
                                   const float *__restrict rstd,
                                   double *__restrict g, double *__restrict h) {
  std::fill(g, g + cols, 0.0);
  std::fill(h, h + cols, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    const float *xr = x + i * stride, *dr = dy + i * stride;
    for (int64_t j = 0; j < cols; ++j) {
      const float xh = (xr[j] - m[j]) * rstd[j];
      g[j] += dr[j];
      h[j] += static_cast<double>(dr[j]) * static_cast<double>(xh);
    }
  }
}

/// dx[j] = a[j] * (dy[j] - b[j] - (x[j] - m[j]) * rstd[j] * c[j]) on every row
/// (dx may be dy).
GP_CPU_CLONES void
columnsDx(const float *__restrict x, const float *dy, float *dx, int64_t n,
          int64_t cols, int64_t stride, const float *__restrict m,
          const float *__restrict rstd, const float *__restrict a,
          const float *__restrict b, const float *__restrict c) {
  for (int64_t i = 0; i < n; ++i) {
    const float *xr = x + i * stride, *dr = dy + i * stride;
    float *o = dx + i * stride;
#pragma omp simd
    for (int64_t j = 0; j < cols; ++j)
      o[j] = a[j] * (dr[j] - b[j] - (xr[j] - m[j]) * rstd[j] * c[j]);
  }
}

/// Channels per block of the columns layout: about an equal share of the c
/// channels per thread, at most kColumns columns, at least one channel.
int64_t channelsPerBlock(int64_t c, int64_t s, bool parallel) {
  const int64_t threads = parallel ? std::max(1, omp_get_max_threads()) : 1;
  int64_t cols = (c * s + threads - 1) / threads;
  cols = std::min(kColumns, (cols + 15) / 16 * 16);
  return std::max<int64_t>(1, std::min(c, cols / s));
}

/// Sums the s consecutive column values of each channel of a block.
inline double channelOf(const double *acc, int64_t k, int64_t s) {
  double t = 0.0;
  for (int64_t j = k * s; j < (k + 1) * s; ++j)
    t += acc[j];
  return t;
}

} // namespace

void gp_batch_norm_eval(const float *x, const float *running_mean,
                        const float *running_var, const float *scale,
                        const float *bias, float *y, int64_t n, int64_t c,
                        int64_t s, float eps) {
  if (n <= 0 || c <= 0 || s <= 0)
    return;
#pragma omp parallel for collapse(2)                                           \
    schedule(static) if (n * c * s >= kParallelMin)
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < c; ++k) {
      const float m = running_mean[k], b = bias[k];
      const float a = invStd(running_var[k], eps) * scale[k];
      const float *xk = x + (i * c + k) * s;
      float *yk = y + (i * c + k) * s;
      for (int64_t j = 0; j < s; ++j)
        yk[j] = (xk[j] - m) * a + b;
    }
}

void gp_batch_norm(const float *x, const float *scale, const float *bias,
                   float *y, float *mean, float *var, int64_t n, int64_t c,
                   int64_t s, float eps) {
  if (n <= 0 || c <= 0 || s <= 0)
    return;
  const int64_t stride = c * s;
  const double count = static_cast<double>(n) * static_cast<double>(s);
  const bool parallel = n * c * s >= kParallelMin;
  if (s >= kColumnS) {
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t k = 0; k < c; ++k) {
      const float *xk = x + k * s;
      float *yk = y + k * s;
      const double m = runsSum(xk, n, s, stride) / count;
      const float v =
          static_cast<float>(runsSquares(xk, n, s, stride, m) / count);
      const float mf = static_cast<float>(m);
      mean[k] = mf;
      var[k] = v;
      const float a = invStd(v, eps) * scale[k];
      if (yk == xk)
        runsAffineInPlace(yk, n, s, stride, mf, a, bias[k]);
      else
        runsAffine(xk, yk, n, s, stride, mf, a, bias[k]);
    }
    return;
  }
  const int64_t per = channelsPerBlock(c, s, parallel);
  const int64_t blocks = (c + per - 1) / per;
#pragma omp parallel for schedule(static) if (parallel && blocks > 1)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t k0 = blk * per, k1 = std::min(c, k0 + per);
    const int64_t cols = (k1 - k0) * s;
    double acc[kColumns], md[kColumns];
    float mf[kColumns], af[kColumns], bf[kColumns];
    const float *xb = x + k0 * s;
    columnsSum(xb, n, cols, stride, acc);
    for (int64_t k = k0; k < k1; ++k) {
      const double m = channelOf(acc, k - k0, s) / count;
      for (int64_t j = (k - k0) * s; j < (k - k0 + 1) * s; ++j)
        md[j] = m;
    }
    columnsSquares(xb, n, cols, stride, md, acc);
    for (int64_t k = k0; k < k1; ++k) {
      const int64_t j0 = (k - k0) * s;
      const float mk = static_cast<float>(md[j0]);
      const float v = static_cast<float>(channelOf(acc, k - k0, s) / count);
      mean[k] = mk;
      var[k] = v;
      const float a = invStd(v, eps) * scale[k];
      for (int64_t j = j0; j < j0 + s; ++j) {
        mf[j] = mk;
        af[j] = a;
        bf[j] = bias[k];
      }
    }
    columnsAffine(xb, y + k0 * s, n, cols, stride, mf, af, bf);
  }
}

void gp_batch_norm_bwd(const float *x, const float *mean, const float *var,
                       const float *scale, const float *dy, float *dx,
                       float *dscale, float *dbias, int64_t n, int64_t c,
                       int64_t s, float eps) {
  if (c <= 0)
    return;
  if (n <= 0 || s <= 0) {
    for (int64_t k = 0; k < c; ++k) {
      if (dscale)
        dscale[k] = 0.0f;
      if (dbias)
        dbias[k] = 0.0f;
    }
    return;
  }
  const int64_t stride = c * s;
  const double count = static_cast<double>(n) * static_cast<double>(s);
  const bool parallel = n * c * s >= kParallelMin;
  if (s >= kColumnS) {
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t k = 0; k < c; ++k) {
      const float *xk = x + k * s, *dyk = dy + k * s;
      const float m = mean[k], rstd = invStd(var[k], eps);
      double g = 0.0, h = 0.0;
      runsGradSums(xk, dyk, n, s, stride, m, rstd, &g, &h);
      if (dbias)
        dbias[k] = static_cast<float>(g);
      if (dscale)
        dscale[k] = static_cast<float>(h);
      if (!dx)
        continue;
      const float a = scale[k] * rstd;
      const float b = static_cast<float>(g / count);
      const float cc = static_cast<float>(h / count);
      float *dxk = dx + k * s;
      if (dxk == dyk)
        runsDxInPlace(xk, dxk, n, s, stride, m, rstd, a, b, cc);
      else
        runsDx(xk, dyk, dxk, n, s, stride, m, rstd, a, b, cc);
    }
    return;
  }
  const int64_t per = channelsPerBlock(c, s, parallel);
  const int64_t blocks = (c + per - 1) / per;
#pragma omp parallel for schedule(static) if (parallel && blocks > 1)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t k0 = blk * per, k1 = std::min(c, k0 + per);
    const int64_t cols = (k1 - k0) * s;
    double g[kColumns], h[kColumns];
    float mf[kColumns], rf[kColumns], af[kColumns], bf[kColumns], cf[kColumns];
    for (int64_t k = k0; k < k1; ++k) {
      const float rstd = invStd(var[k], eps);
      for (int64_t j = (k - k0) * s; j < (k - k0 + 1) * s; ++j) {
        mf[j] = mean[k];
        rf[j] = rstd;
      }
    }
    columnsGradSums(x + k0 * s, dy + k0 * s, n, cols, stride, mf, rf, g, h);
    for (int64_t k = k0; k < k1; ++k) {
      const int64_t j0 = (k - k0) * s;
      const double gk = channelOf(g, k - k0, s), hk = channelOf(h, k - k0, s);
      if (dbias)
        dbias[k] = static_cast<float>(gk);
      if (dscale)
        dscale[k] = static_cast<float>(hk);
      const float a = scale[k] * rf[j0];
      const float b = static_cast<float>(gk / count);
      const float cc = static_cast<float>(hk / count);
      for (int64_t j = j0; j < j0 + s; ++j) {
        af[j] = a;
        bf[j] = b;
        cf[j] = cc;
      }
    }
    if (dx)
      columnsDx(x + k0 * s, dy + k0 * s, dx + k0 * s, n, cols, stride, mf, rf,
                af, bf, cf);
  }
}

void gp_batch_norm_update(float *running_mean, float *running_var,
                          const float *mean, const float *var, float *state,
                          int64_t c, int64_t count, float momentum,
                          int64_t microbatches, int64_t microbatch) {
  const double mom = gpipe::pyDouble(momentum);
  auto apply = [&](int64_t k, double m, double v, double total) {
    const double unbiased = total > 1.0 ? v * total / (total - 1.0) : v;
    running_mean[k] = static_cast<float>(
        mom * static_cast<double>(running_mean[k]) + (1.0 - mom) * m);
    running_var[k] = static_cast<float>(
        mom * static_cast<double>(running_var[k]) + (1.0 - mom) * unbiased);
  };
  if (microbatches <= 1) {
    for (int64_t k = 0; k < c; ++k)
      apply(k, mean[k], var[k], static_cast<double>(count));
    return;
  }
  float *slot = state + microbatch * 2 * c;
  std::copy(mean, mean + c, slot);
  std::copy(var, var + c, slot + c);
  if (microbatch != microbatches - 1)
    return;
  const double M = static_cast<double>(microbatches);
  for (int64_t k = 0; k < c; ++k) {
    double ms = 0.0, vs = 0.0;
    for (int64_t m = 0; m < microbatches; ++m) {
      ms += state[m * 2 * c + k];
      vs += state[m * 2 * c + c + k];
    }
    const double mAll = ms / M;
    double spread = 0.0;
    for (int64_t m = 0; m < microbatches; ++m) {
      const double d = state[m * 2 * c + k] - mAll;
      spread += d * d;
    }
    apply(k, mAll, vs / M + spread / M, M * static_cast<double>(count));
  }
}
