// Compute kernels called by generated step functions (GEMM, reductions, loss,
// optimizers).
#include "gpipe/runtime.h"
#include "internal.h"
#include "random.h"
#include "rows.h"

#include <cblas.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

using gpipe::pyDouble;

namespace {

/// C = beta * C with BLAS semantics (beta == 0 overwrites, even NaNs).
void scaleMatrix(float *C, int64_t M, int64_t N, int64_t ldc, float beta) {
  for (int64_t i = 0; i < M; ++i) {
    float *row = C + i * ldc;
    if (beta == 0.0f)
      std::fill(row, row + N, 0.0f);
    else
      for (int64_t j = 0; j < N; ++j)
        row[j] *= beta;
  }
}

/// The bits of bf16(x), rounded to nearest even (as __float2bfloat16_rn):
/// NaNs stay NaN (quiet), infinities and overflow to infinity as IEEE says.
uint16_t bf16Bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

bool isIgnored(int64_t label, int32_t hasIgnore, int64_t ignoreIndex) {
  return hasIgnore != 0 && label == ignoreIndex;
}

/// A loss over N samples of C classes: the sum of rowLoss(i, y) over the
/// samples whose label y is not ignored, divided by `norm` (> 0: a share of a
/// larger batch's loss; a share with every label ignored is 0) or by their
/// count (a plain mean: NaN when every label is ignored, as torch). rowLoss
/// runs for every sample (it may write per-sample outputs); its value for a
/// label outside [0, C) is not used: the loss is NaN (torch raises).
template <typename RowLoss>
float lossForward(const int64_t *labels, int64_t N, int64_t C,
                  int32_t hasIgnore, int64_t ignoreIndex, double norm,
                  const RowLoss &rowLoss) {
  double total = 0.0;
  int64_t count = 0;
  for (int64_t i = 0; i < N; ++i) {
    const int64_t y = labels[i];
    const double l = rowLoss(i, y);
    if (isIgnored(y, hasIgnore, ignoreIndex))
      continue;
    ++count;
    total += y < 0 || y >= C ? std::numeric_limits<double>::quiet_NaN() : l;
  }
  if (norm > 0.0)
    return static_cast<float>(total / norm);
  return count ? static_cast<float>(total / static_cast<double>(count))
               : std::numeric_limits<float>::quiet_NaN();
}

/// The gradient of lossForward's loss: rowGrad(i, y, scale, dx) writes the
/// C entries of sample i's row (scale = dloss / the divisor), ignored rows
/// are zero, rows with a label outside [0, C) NaN. Every label ignored: all
/// zeros, as torch's gradient of its NaN loss.
template <typename RowGrad>
void lossBackward(const int64_t *labels, int64_t N, int64_t C,
                  int32_t hasIgnore, int64_t ignoreIndex, double norm,
                  const float *dloss, float *dx, const RowGrad &rowGrad) {
  int64_t count = 0;
  for (int64_t i = 0; i < N; ++i)
    count += !isIgnored(labels[i], hasIgnore, ignoreIndex);
  if (count == 0) {
    std::fill(dx, dx + N * C, 0.0f);
    return;
  }
  const double divisor = norm > 0.0 ? norm : static_cast<double>(count);
  const float scale = static_cast<float>(static_cast<double>(*dloss) / divisor);
  // Rows are independent (rowGrad writes its own row only).
#pragma omp parallel for schedule(static) if (N * C >= gpipe::kParallelMin)
  for (int64_t i = 0; i < N; ++i) {
    float *row = dx + i * C;
    const int64_t y = labels[i];
    if (isIgnored(y, hasIgnore, ignoreIndex))
      std::fill(row, row + C, 0.0f);
    else if (y < 0 || y >= C)
      std::fill(row, row + C, std::numeric_limits<float>::quiet_NaN());
    else
      rowGrad(i, y, scale, row);
  }
}

} // namespace

// Elementwise loops shorter than kParallelMin (internal.h) run on one thread.
using gpipe::kParallelMin;

/// Runs `row(base)` for every row along the middle axis of a tensor viewed
/// as [outer, n, inner]: the row's elements are base + k * inner, k < n.
template <typename RowFn>
static void forEachAxisRow(int64_t outer, int64_t n, int64_t inner,
                           const RowFn &row) {
  const int64_t rows = outer * inner;
#pragma omp parallel for schedule(static) if (rows * n >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r)
    row((r / inner) * n * inner + r % inner);
}

/// The few-row cases, where M rows of A meet a large B: at most this many.
constexpr int64_t kFewRows = 64;

namespace {

/// [begin, end) of the calling OpenMP thread's contiguous share of [0, n)
/// (all of it outside a parallel region).
std::pair<int64_t, int64_t> threadShare(int64_t n) {
  int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
  int64_t chunk = (n + threads - 1) / threads;
  int64_t lo = std::min(n, t * chunk);
  return {lo, std::min(n, lo + chunk)};
}

struct SgdScalars {
  float lr, momentum, weightDecay;
  bool useMomentum, nesterov, firstStep;
};

// torch's SGD, elementwise; the conditions are loop-invariant (GCC unswitches
// them), the pointers distinct buffers of the arena.
GP_CPU_CLONES void sgdRange(float *__restrict p, const float *__restrict g,
                            float *__restrict buf, int64_t lo, int64_t hi,
                            const SgdScalars s) {
  for (int64_t i = lo; i < hi; ++i) {
    float d = g[i];
    if (s.weightDecay != 0.0f)
      d = d + s.weightDecay * p[i];
    if (s.useMomentum) {
      // torch starts the buffer as a clone of the first gradient.
      float b = s.firstStep ? d : buf[i] * s.momentum + d;
      buf[i] = b;
      d = s.nesterov ? d + s.momentum * b : b;
    }
    p[i] = p[i] + -s.lr * d;
  }
}

struct AdamScalars {
  float negStepSize, bc2Sqrt, beta1, beta2, oneMinusB1, oneMinusB2, eps,
      weightDecay, decay;
  bool decoupled, coupledDecay;
};

// torch 1.13's _single_tensor_adam(w), elementwise.
GP_CPU_CLONES void adamRange(float *__restrict p, const float *__restrict g,
                             float *__restrict m, float *__restrict v,
                             int64_t lo, int64_t hi, const AdamScalars s) {
  for (int64_t i = lo; i < hi; ++i) {
    float gi = g[i];
    float pi = p[i];
    if (s.decoupled)
      pi = pi * s.decay;
    else if (s.coupledDecay)
      gi = gi + s.weightDecay * pi;
    float mi = m[i] * s.beta1 + s.oneMinusB1 * gi;
    float vi = v[i] * s.beta2 + s.oneMinusB2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    float denom = std::sqrt(vi) / s.bc2Sqrt + s.eps;
    p[i] = pi + s.negStepSize * mi / denom;
  }
}

/// Lanes of the partial maxima and sums of a score row: independent chains
/// that the compiler can keep in vector registers.
constexpr int kRowLanes = 8;

/// -inf where the mask row is non-zero.
GP_CPU_CLONES void maskRow(float *__restrict s, const float *__restrict mask,
                           int64_t n) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j)
    s[j] = mask[j] != 0.0f ? kNegInf : s[j];
}

/// The row's maximum, NaNs skipped (as gpipe::rowMax, without a libm call
/// per element).
GP_CPU_CLONES float maxOfRow(const float *__restrict s, int64_t n) {
  float lane[kRowLanes];
  std::fill(lane, lane + kRowLanes, -std::numeric_limits<float>::infinity());
  int64_t j = 0;
  for (; j + kRowLanes <= n; j += kRowLanes)
    for (int l = 0; l < kRowLanes; ++l)
      lane[l] = s[j + l] > lane[l] ? s[j + l] : lane[l];
  float m = lane[0];
  for (int l = 1; l < kRowLanes; ++l)
    m = lane[l] > m ? lane[l] : m;
  for (; j < n; ++j)
    m = s[j] > m ? s[j] : m;
  return m;
}

/// `x` with its bits and-ed with `keep` (all ones: x; zero: 0.0f).
inline float keepBits(float x, uint32_t keep) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  bits &= keep;
  std::memcpy(&x, &bits, sizeof bits);
  return x;
}

/// exp(t) in a lane that `keep` (all ones) keeps, else 0. A dropped lane's
/// argument is 0, not t: one lane out of the vector expf's range sends the
/// whole vector to its scalar fallback. Both the argument and the result are
/// selected by and-ing their bits with the lane's keep bits: a float select
/// would be control flow to GCC (the subtraction could trap), and the loop
/// would not vectorize.
inline float expKept(float t, uint32_t keep) {
  return keepBits(expf(keepBits(t, keep)), keep);
}

/// s = exp(s - shift) in place, 0 where the mask row (if any) is non-zero.
GP_CPU_CLONES void expRow(float *__restrict s, const float *__restrict mask,
                          float shift, int64_t n) {
  if (!mask) {
    for (int64_t j = 0; j < n; ++j)
      s[j] = expf(s[j] - shift);
    return;
  }
  for (int64_t j = 0; j < n; ++j)
    s[j] = expKept(s[j] - shift, mask[j] != 0.0f ? 0u : ~0u);
}

/// The row's sum in double (as gp_softmax), in kRowLanes partial sums.
GP_CPU_CLONES double sumOfRow(const float *__restrict s, int64_t n) {
  double lane[kRowLanes] = {};
  int64_t j = 0;
  for (; j + kRowLanes <= n; j += kRowLanes)
    for (int l = 0; l < kRowLanes; ++l)
      lane[l] += s[j + l];
  double sum = 0.0;
  for (int l = 0; l < kRowLanes; ++l)
    sum += lane[l];
  for (; j < n; ++j)
    sum += s[j];
  return sum;
}

/// Softmax of one score row in place, -inf where the mask row is non-zero;
/// returns the row's log-sum-exp. A fully masked row is NaN (as gp_softmax
/// of a row of -inf).
float attentionRow(float *s, const float *mask, int64_t n) {
  constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
  if (mask)
    maskRow(s, mask, n);
  const float m = maxOfRow(s, n);
  if (mask && m == -std::numeric_limits<float>::infinity()) {
    std::fill(s, s + n, kNaN);
    return kNaN;
  }
  expRow(s, mask, m, n);
  const double sum = sumOfRow(s, n);
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t j = 0; j < n; ++j)
    s[j] *= inv;
  return m + static_cast<float>(std::log(sum));
}

/// P = exp(s - lse) of one score row in place (0 where masked; NaN for a
/// fully masked row, whose lse is NaN).
void attentionProbRow(float *s, const float *mask, float lse, int64_t n) {
  if (std::isnan(lse))
    std::fill(s, s + n, lse);
  else
    expRow(s, mask, lse, n);
}

/// dS = P * (dP - D) of one row, into dP.
GP_CPU_CLONES void attentionDsRow(const float *__restrict p,
                                  float *__restrict dp, float D, int64_t n) {
  for (int64_t j = 0; j < n; ++j)
    dp[j] = p[j] * (dp[j] - D);
}

/// Below this, exp() is under FLT_MIN (subnormal, or 0 below -103.9):
/// expShifted gives 0 there. glibc's vector expf sends a lane beyond +-88 to
/// its scalar slow path one by one, and the cross-entropy over a large
/// vocabulary has many such scores once trained (4-5% of a 1-thread GPT
/// step in `perf`: __expf_fma, xflowf). The sum they are added to is at
/// least 1 (the maximum's own term), in which 2048 terms of 1.7e-38 vanish.
constexpr float kExpFloor = -87.0f;

/// e = exp(x - shift), 8 wide (libmvec's expf); 0 below kExpFloor (a NaN
/// stays NaN).
GP_CPU_CLONES void expShifted(const float *__restrict x, float *__restrict e,
                              float shift, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    const float t = x[j] - shift;
    e[j] = expKept(t, t < kExpFloor ? 0u : ~0u);
  }
}

/// Row max (NaNs skipped) and the sum (in double) of e = exp(x - max),
/// shared by the cross-entropy forward and backward so that the gradient is
/// that of exactly the computed loss.
void rowStats(const float *x, int64_t C, float &mx, double &sumExp, float *e) {
  mx = maxOfRow(x, C);
  expShifted(x, e, mx, C);
  sumExp = sumOfRow(e, C);
}

/// A thread's scratch buffer of at least `n` floats, kept across calls (the
/// attention's score tiles, the cross-entropy's row of exponentials).
float *threadScratch(std::vector<float> &tile, int64_t n) {
  if (tile.size() < static_cast<size_t>(n))
    tile.resize(static_cast<size_t>(n));
  return tile.data();
}

} // namespace

namespace {

/// Which library runs a gp_gemm (GPIPE_CPU_GEMM, read by deviceInit).
enum class GemmPolicy { Auto, OneDnn, OpenBlas };
GemmPolicy gGemmPolicy = GemmPolicy::Auto;
/// Auto only: this CPU has no AVX-512 (where the rule below was measured).
bool gAvx2Only = false;

/// Whether C = op(A) op(B) goes to OpenBLAS instead of oneDNN. Auto, on a
/// CPU without AVX-512: every large product (at least 2^24 multiply-adds)
/// with more than kFewRows rows. Measured in the stage programs on an
/// AVX2-only AMD EPYC (bench/README.md): the 8 x 1024 MLP step ran 5% faster
/// than with oneDNN alone (0.90x torch before, 1.01x after), the GPT step
/// as fast (single-GEMM timings had favoured oneDNN on most shapes: they did
/// not predict the stages). Few rows against a wide weight (a micro-batch's
/// forward) and small products stay on oneDNN, which runs them faster; so
/// does every product on CPUs with AVX-512 (not measured).
bool gemmOnOpenBlas(int transA, int transB, int64_t M, int64_t N, int64_t K) {
  switch (gGemmPolicy) {
  case GemmPolicy::OneDnn:
    return false;
  case GemmPolicy::OpenBlas:
    return true;
  case GemmPolicy::Auto:
    break;
  }
  return gAvx2Only && M > kFewRows && M * N * K >= (int64_t(1) << 24);
}

/// OpenBLAS runs single-threaded (its own pthread pool would spin against
/// the OpenMP team); with T threads the rows of C are split into T slices,
/// one OpenBLAS call per OpenMP thread.
void openBlasGemm(int transA, int transB, int64_t M, int64_t N, int64_t K,
                  float alpha, const float *A, int64_t lda, const float *B,
                  int64_t ldb, float beta, float *C, int64_t ldc) {
  auto slice = [&](int64_t lo, int64_t hi) {
    if (lo >= hi)
      return;
    // Row i of op(A) starts at A + i * lda (not transposed) or A + i.
    const float *a = A + (transA ? lo : lo * lda);
    cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
                transB ? CblasTrans : CblasNoTrans, static_cast<int>(hi - lo),
                static_cast<int>(N), static_cast<int>(K), alpha, a,
                static_cast<int>(lda), B, static_cast<int>(ldb), beta,
                C + lo * ldc, static_cast<int>(ldc));
  };
  if (omp_get_max_threads() == 1 || M < 2 * kFewRows) {
    slice(0, M);
    return;
  }
#pragma omp parallel
  {
    // Slices of whole 16-row panels, so each thread's product is a GEMM of
    // its own (no false sharing on C's rows).
    int64_t panels = (M + 15) / 16;
    auto [lo, hi] = threadShare(panels);
    slice(lo * 16, std::min(M, hi * 16));
  }
}

} // namespace

namespace gpipe {

bool cpuGemmConfigure(std::string &err) {
  gGemmPolicy = GemmPolicy::Auto;
  if (const char *v = std::getenv("GPIPE_CPU_GEMM")) {
    std::string s = v;
    if (s == "onednn")
      gGemmPolicy = GemmPolicy::OneDnn;
    else if (s == "openblas")
      gGemmPolicy = GemmPolicy::OpenBlas;
    else if (s != "auto" && !s.empty()) {
      err = "GPIPE_CPU_GEMM='" + s +
            "' is not a GEMM library (expected auto, onednn or openblas)";
      return false;
    }
  }
  gAvx2Only = !__builtin_cpu_supports("avx512f");
  openblas_set_num_threads(1);
  if (gGemmPolicy != GemmPolicy::OneDnn) {
    // Measured with OpenBLAS 0.3.21 (its Zen kernels) on an AMD EPYC: when
    // the first product that uses one of its work buffers is narrow
    // (N < 512), every later product on that buffer runs ~3x slower (same
    // kernel; the cause was not found). One wide product per OpenMP thread
    // first, concurrently, so that each buffer the team's calls take starts
    // with it (bench/README.md, "GEMM library per shape").
#pragma omp parallel
    {
      std::vector<float> a(64 * 256, 0.f), b(64 * 2048, 0.f), c(256 * 2048);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, 256, 2048, 64, 1.f,
                  a.data(), 256, b.data(), 2048, 0.f, c.data(), 2048);
    }
  }
  return true;
}

} // namespace gpipe

extern "C" {

/// oneDNN reports bad arguments as a status: a code generator bug.
static void checkDnnl(dnnl_status_t status, int64_t m, int64_t n, int64_t k) {
  if (status == dnnl_success)
    return;
  std::fprintf(stderr,
               "gpipe: error: internal: oneDNN sgemm (%lld x %lld x %lld) "
               "failed with status %d\n",
               static_cast<long long>(m), static_cast<long long>(n),
               static_cast<long long>(k), static_cast<int>(status));
  std::abort();
}

void gp_gemm(int transA, int transB, int64_t M, int64_t N, int64_t K,
             float alpha, const float *A, int64_t lda, const float *B,
             int64_t ldb, float beta, float *C, int64_t ldc) {
  // Buffered sends move while the stage computes: before and after each
  // product (gpipe::transportProgress).
  gpipe::transportProgress();
  gpipe::LibraryTouch touch; // --profile's memory split
  struct ProgressAfter {
    ~ProgressAfter() { gpipe::transportProgress(); }
  } progressAfter;
  if (M <= 0 || N <= 0)
    return;
  // BLAS rejects ld < 1 (e.g. K == 0), so the degenerate product is done here.
  if (K <= 0) {
    scaleMatrix(C, M, N, ldc, beta);
    return;
  }
  // BLAS checks ld >= stored columns even for a single stored row, where the
  // stride is irrelevant and callers may pass anything.
  int64_t rowsA = transA ? K : M, colsA = transA ? M : K;
  int64_t rowsB = transB ? N : K, colsB = transB ? K : N;
  if (rowsA == 1)
    lda = std::max(lda, colsA);
  if (rowsB == 1)
    ldb = std::max(ldb, colsB);
  if (M == 1)
    ldc = std::max(ldc, N);
  // A few rows times a wide transposed weight (a Linear layer's forward on a
  // micro-batch): oneDNN, like every BLAS, re-packs the weight on each call
  // and runs at about half speed. The transposed product T = B * A^T [N, M]
  // streams the weight once and is small; then C = T^T + beta * C.
  if (M <= kFewRows && N >= 4 * M && K >= 4 * M && !transA && transB) {
    thread_local std::vector<float> scratch;
    if (scratch.size() < static_cast<size_t>(M * N))
      scratch.resize(static_cast<size_t>(M * N));
    float *t = scratch.data();
    checkDnnl(dnnl_sgemm('N', 'T', N, M, K, alpha, B, ldb, A, lda, 0.f, t, M),
              N, M, K);
    // C = T^T + beta * C, in tiles that stay in cache.
    constexpr int64_t kTile = 32;
    for (int64_t jb = 0; jb < N; jb += kTile)
      for (int64_t i = 0; i < M; ++i) {
        float *c = C + i * ldc;
        int64_t jEnd = std::min(N, jb + kTile);
        for (int64_t j = jb; j < jEnd; ++j)
          c[j] = t[j * M + i] + (beta == 0.f ? 0.f : beta * c[j]);
      }
    return;
  }
  if (gemmOnOpenBlas(transA, transB, M, N, K)) {
    openBlasGemm(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  checkDnnl(dnnl_sgemm(transA ? 'T' : 'N', transB ? 'T' : 'N', M, N, K, alpha,
                       A, lda, B, ldb, beta, C, ldc),
            M, N, K);
}

void gp_gemm_ex(int transA, int transB, int64_t M, int64_t N, int64_t K,
                float alpha, const float *A, int64_t lda, const float *B,
                int64_t ldb, float beta, float *C, int64_t ldc,
                const float *bias, int32_t relu, int32_t math, const void *A16,
                const void *B16) {
  gpipe::LibraryTouch touch; // --profile's memory split (with its widening)
  if (math != GP_MATH_F32 && math != GP_MATH_TF32 && math != GP_MATH_BF16) {
    std::fprintf(stderr, "gpipe: error: internal: gp_gemm_ex math mode %d\n",
                 static_cast<int>(math));
    std::abort();
  }
  // bf16 emulation: the operands as the GPU's tensor cores see them (rounded
  // to bf16, or the caller's bf16 copies), products and sums in fp32.
  thread_local std::vector<float> wideA, wideB;
  auto widen = [](const float *x, const void *x16, int64_t rows, int64_t cols,
                  int64_t ld, std::vector<float> &out) {
    int64_t span = rows > 0 ? (rows - 1) * ld + cols : 0;
    out.resize(static_cast<size_t>(std::max<int64_t>(span, 1)));
    const auto *h = static_cast<const uint16_t *>(x16);
    for (int64_t i = 0; i < span; ++i) {
      uint32_t bits = h ? uint32_t(h[i]) << 16 : uint32_t(bf16Bits(x[i])) << 16;
      std::memcpy(&out[static_cast<size_t>(i)], &bits, sizeof bits);
    }
    return out.data();
  };
  if (math == GP_MATH_BF16 && M > 0 && N > 0 && K > 0) {
    A = widen(A, A16, transA ? K : M, transA ? M : K, lda, wideA);
    B = widen(B, B16, transB ? N : K, transB ? K : N, ldb, wideB);
  }
  gp_gemm(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  if (!bias && !relu)
    return;
  for (int64_t i = 0; i < M; ++i) {
    float *row = C + i * ldc;
    for (int64_t j = 0; j < N; ++j) {
      float v = bias ? row[j] + bias[j] : row[j];
      row[j] = relu && !(v > 0.0f) ? 0.0f : v;
    }
  }
}

/// Batched GEMMs at most this big (M*N*K) run one per OpenMP thread (each
/// single-threaded): attention's many small products. Larger ones run in
/// turn, each on oneDNN's threads.
constexpr int64_t kSmallGemm = 64 * 64 * 64;

void gp_batch_gemm(int transA, int transB, int64_t M, int64_t N, int64_t K,
                   const float *A, const float *B, float *C, int32_t batch_rank,
                   const int64_t *batch_shape, const int64_t *a_stride,
                   const int64_t *b_stride, int32_t math) {
  if (M <= 0 || N <= 0)
    return;
  gpipe::BatchRuns runs =
      gpipe::batchRuns(batch_rank, batch_shape, a_stride, b_stride, M * N);
  const int64_t lda = transA ? M : K, ldb = transB ? K : N;
  const int64_t total = static_cast<int64_t>(runs.aFirst.size()) * runs.count;
  auto one = [&](int64_t i) {
    int64_t r = i / runs.count, j = i % runs.count;
    gp_gemm_ex(transA, transB, M, N, K, 1.0f,
               A + runs.aFirst[r] + j * runs.aStride, lda,
               B + runs.bFirst[r] + j * runs.bStride, ldb, 0.0f,
               C + runs.cFirst[r] + j * runs.cStride, N, nullptr, 0, math,
               nullptr, nullptr);
  };
  if (M * N * K <= kSmallGemm && total > 1) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < total; ++i)
      one(i);
  } else {
    for (int64_t i = 0; i < total; ++i)
      one(i);
  }
}

void gp_cast_bf16(const float *in, void *out, int64_t n) {
  auto *o = static_cast<uint16_t *>(out);
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i)
    o[i] = bf16Bits(in[i]);
}

void gp_dropout(const gp_step_ctx *ctx, uint64_t key, float ratio,
                const float *x, float *y, int64_t n, int64_t base) {
  const int64_t step = ctx->step;
  if (ctx->eval)
    ratio = 0.0f; // keeps every element, scaled by exactly 1
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i)
    y[i] = gpipe::dropoutApply(key, step, base + i, ratio, x[i]);
}

void gp_softmax(const float *x, float *y, int64_t outer, int64_t n,
                int64_t inner) {
  forEachAxisRow(outer, n, inner, [&](int64_t base) {
    const float m = gpipe::rowMax(x + base, n, inner);
    double s = 0.0;
    for (int64_t k = 0; k < n; ++k) {
      const float e = std::exp(x[base + k * inner] - m);
      y[base + k * inner] = e;
      s += e;
    }
    const float inv = static_cast<float>(1.0 / s);
    for (int64_t k = 0; k < n; ++k)
      y[base + k * inner] *= inv;
  });
}

void gp_softmax_bwd(const float *y, const float *dy, float *dx, int64_t outer,
                    int64_t n, int64_t inner) {
  forEachAxisRow(outer, n, inner, [&](int64_t base) {
    double s = 0.0;
    for (int64_t k = 0; k < n; ++k)
      s += static_cast<double>(dy[base + k * inner]) * y[base + k * inner];
    const float sf = static_cast<float>(s);
    for (int64_t k = 0; k < n; ++k) {
      const int64_t i = base + k * inner;
      dx[i] = y[i] * (dy[i] - sf);
    }
  });
}

void gp_log_softmax(const float *x, float *y, int64_t outer, int64_t n,
                    int64_t inner) {
  forEachAxisRow(outer, n, inner, [&](int64_t base) {
    gpipe::logSoftmaxRow(x + base, y + base, n, inner);
  });
}

void gp_log_softmax_bwd(const float *y, const float *dy, float *dx,
                        int64_t outer, int64_t n, int64_t inner) {
  forEachAxisRow(outer, n, inner, [&](int64_t base) {
    gpipe::logSoftmaxBwdRow(y + base, dy + base, dx + base, n, inner);
  });
}

void gp_layer_norm(const float *x, const float *scale, const float *bias,
                   float *y, float *mean, float *inv_std, int64_t rows,
                   int64_t n, float eps) {
#pragma omp parallel for schedule(static) if (rows * n >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = x + r * n;
    float *yr = y + r * n;
    double s = 0.0;
    for (int64_t j = 0; j < n; ++j)
      s += xr[j];
    const double m = s / static_cast<double>(n);
    double v = 0.0;
    for (int64_t j = 0; j < n; ++j) {
      const double d = xr[j] - m;
      v += d * d;
    }
    const float mf = static_cast<float>(m);
    const float rstd = static_cast<float>(
        1.0 / std::sqrt(v / static_cast<double>(n) + static_cast<double>(eps)));
    mean[r] = mf;
    inv_std[r] = rstd;
    for (int64_t j = 0; j < n; ++j) {
      const float h = (xr[j] - mf) * rstd * scale[j];
      yr[j] = bias ? h + bias[j] : h;
    }
  }
}

void gp_layer_norm_bwd(const float *x, const float *mean, const float *inv_std,
                       const float *scale, const float *dy, float *dx,
                       int64_t rows, int64_t n) {
#pragma omp parallel for schedule(static) if (rows * n >= kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = x + r * n, *dyr = dy + r * n;
    const float m = mean[r], rstd = inv_std[r];
    double sg = 0.0, sgx = 0.0;
    for (int64_t j = 0; j < n; ++j) {
      const float g = dyr[j] * scale[j];
      sg += g;
      sgx += static_cast<double>(g) * ((xr[j] - m) * rstd);
    }
    const float a = static_cast<float>(sg / static_cast<double>(n));
    const float c = static_cast<float>(sgx / static_cast<double>(n));
    float *dxr = dx + r * n;
    for (int64_t j = 0; j < n; ++j) {
      const float xhat = (xr[j] - m) * rstd;
      dxr[j] = rstd * (dyr[j] * scale[j] - a - xhat * c);
    }
  }
}

void gp_layer_norm_scale_bwd(const float *x, const float *mean,
                             const float *inv_std, const float *dy,
                             float *dscale, int64_t rows, int64_t n) {
  // Columns in blocks, each summed over every row in order by one thread.
  constexpr int64_t kCols = 256;
  const int64_t blocks = (n + kCols - 1) / kCols;
#pragma omp parallel for schedule(static) if (rows * n >= kParallelMin)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t j0 = b * kCols, j1 = std::min(n, j0 + kCols);
    double acc[kCols] = {};
    for (int64_t r = 0; r < rows; ++r) {
      const float *xr = x + r * n, *dyr = dy + r * n;
      const float m = mean[r], rstd = inv_std[r];
      for (int64_t j = j0; j < j1; ++j)
        acc[j - j0] += static_cast<double>(dyr[j]) * ((xr[j] - m) * rstd);
    }
    for (int64_t j = j0; j < j1; ++j)
      dscale[j] = static_cast<float>(acc[j - j0]);
  }
}

// One (batch, head) block per OpenMP iteration; its [Tq, Tk] scores stay in
// a thread-local tile, the products are single-threaded oneDNN GEMMs (inside
// the parallel region), faster than plain loops at T = 64, d = 32.
void gp_attention_fwd(const float *q, const float *k, const float *v,
                      const float *mask, float *out, float *lse, int64_t batch,
                      int64_t Tq, int64_t Tk, int64_t d, int64_t dv,
                      float scale) {
  if (batch <= 0 || Tq <= 0 || dv <= 0)
    return;
#pragma omp parallel for schedule(static) if (batch > 1)
  for (int64_t b = 0; b < batch; ++b) {
    thread_local std::vector<float> tile;
    float *s = threadScratch(tile, Tq * Tk);
    gp_gemm(0, 1, Tq, Tk, d, scale, q + b * Tq * d, d, k + b * Tk * d, d, 0.0f,
            s, Tk);
    for (int64_t i = 0; i < Tq; ++i)
      lse[b * Tq + i] =
          attentionRow(s + i * Tk, mask ? mask + i * Tk : nullptr, Tk);
    gp_gemm(0, 0, Tq, dv, Tk, 1.0f, s, Tk, v + b * Tk * dv, dv, 0.0f,
            out + b * Tq * dv, dv);
  }
}

void gp_attention_bwd(const float *q, const float *k, const float *v,
                      const float *mask, const float *out, const float *lse,
                      const float *dout, float *dq, float *dk, float *dv,
                      int64_t batch, int64_t Tq, int64_t Tk, int64_t d,
                      int64_t dv_dim, float scale) {
  if (batch <= 0)
    return;
#pragma omp parallel for schedule(static) if (batch > 1)
  for (int64_t b = 0; b < batch; ++b) {
    thread_local std::vector<float> tiles;
    float *p = threadScratch(tiles, 2 * Tq * Tk), *dp = p + Tq * Tk;
    const float *qb = q + b * Tq * d, *kb = k + b * Tk * d;
    const float *vb = v + b * Tk * dv_dim, *ob = out + b * Tq * dv_dim;
    const float *gb = dout + b * Tq * dv_dim;
    // P, recomputed from the log-sum-exp.
    gp_gemm(0, 1, Tq, Tk, d, scale, qb, d, kb, d, 0.0f, p, Tk);
    for (int64_t i = 0; i < Tq; ++i)
      attentionProbRow(p + i * Tk, mask ? mask + i * Tk : nullptr,
                       lse[b * Tq + i], Tk);
    // dV = P^T dout, dP = dout V^T.
    gp_gemm(1, 0, Tk, dv_dim, Tq, 1.0f, p, Tk, gb, dv_dim, 0.0f,
            dv + b * Tk * dv_dim, dv_dim);
    gp_gemm(0, 1, Tq, Tk, dv_dim, 1.0f, gb, dv_dim, vb, dv_dim, 0.0f, dp, Tk);
    // dS = P * (dP - D), D = rowsum(dout * out).
    for (int64_t i = 0; i < Tq; ++i) {
      double D = 0.0;
      for (int64_t c = 0; c < dv_dim; ++c)
        D += static_cast<double>(gb[i * dv_dim + c]) * ob[i * dv_dim + c];
      attentionDsRow(p + i * Tk, dp + i * Tk, static_cast<float>(D), Tk);
    }
    // dQ = scale * dS K, dK = scale * dS^T Q.
    gp_gemm(0, 0, Tq, d, Tk, scale, dp, Tk, kb, d, 0.0f, dq + b * Tq * d, d);
    gp_gemm(1, 0, Tk, d, Tq, scale, dp, Tk, qb, d, 0.0f, dk + b * Tk * d, d);
  }
}

void gp_reduce_to(const float *in, const int64_t *in_shape, float *out,
                  const int64_t *out_shape, int32_t rank) {
  int64_t inSize = 1, outSize = 1;
  for (int32_t d = 0; d < rank; ++d) {
    inSize *= in_shape[d];
    outSize *= out_shape[d];
  }
  std::fill(out, out + outSize, 0.0f);
  if (inSize == 0)
    return;
  if (inSize == outSize) {
    std::memcpy(out, in, static_cast<size_t>(inSize) * sizeof(float));
    return;
  }

  // Drop size-1 dims and merge neighbours of the same kind (kept or summed),
  // leaving an alternating list of at most rank dims.
  struct Dim {
    int64_t size;
    bool reduced;
  };
  std::vector<Dim> dims;
  for (int32_t d = 0; d < rank; ++d) {
    if (in_shape[d] == 1)
      continue;
    bool reduced = out_shape[d] == 1;
    if (!dims.empty() && dims.back().reduced == reduced)
      dims.back().size *= in_shape[d];
    else
      dims.push_back({in_shape[d], reduced});
  }

  // Input is contiguous; the output stride of a summed dim is 0.
  size_t nd = dims.size();
  std::vector<int64_t> inStride(nd), outStride(nd);
  int64_t inAcc = 1, outAcc = 1;
  for (size_t i = nd; i-- > 0;) {
    inStride[i] = inAcc;
    inAcc *= dims[i].size;
    outStride[i] = dims[i].reduced ? 0 : outAcc;
    if (!dims[i].reduced)
      outAcc *= dims[i].size;
  }

  // Odometer over all but the innermost merged dim.
  const Dim inner = dims.back();
  std::vector<int64_t> idx(nd, 0);
  int64_t inOff = 0, outOff = 0;
  for (;;) {
    const float *src = in + inOff;
    float *dst = out + outOff;
    if (inner.reduced) {
      double s = 0.0;
      for (int64_t j = 0; j < inner.size; ++j)
        s += src[j];
      *dst += static_cast<float>(s);
    } else {
      for (int64_t j = 0; j < inner.size; ++j)
        dst[j] += src[j];
    }
    size_t d = nd - 1;
    for (;;) {
      if (d == 0)
        return;
      --d;
      ++idx[d];
      inOff += inStride[d];
      outOff += outStride[d];
      if (idx[d] < dims[d].size)
        break;
      inOff -= idx[d] * inStride[d];
      outOff -= idx[d] * outStride[d];
      idx[d] = 0;
    }
  }
}

void gp_reduce_max(const float *in, const int64_t *in_shape, float *out,
                   const int64_t *out_shape, int32_t rank) {
  // The output's strides along the input's dims: 0 where it is reduced.
  std::vector<int64_t> outStride(static_cast<size_t>(rank), 0);
  int64_t inSize = 1, outSize = 1;
  for (int32_t d = rank - 1; d >= 0; --d) {
    if (out_shape[d] != 1)
      outStride[d] = outSize;
    outSize *= out_shape[d];
    inSize *= in_shape[d];
  }
  std::fill(out, out + outSize, -std::numeric_limits<float>::infinity());
  // One pass over the input in order, an odometer following the output.
  std::vector<int64_t> idx(static_cast<size_t>(rank), 0);
  int64_t o = 0;
  for (int64_t i = 0; i < inSize; ++i) {
    out[o] = gpipe::maxPropagatingNaN(out[o], in[i]);
    for (int32_t d = rank - 1; d >= 0; --d) {
      o += outStride[d];
      if (++idx[d] < in_shape[d])
        break;
      o -= idx[d] * outStride[d];
      idx[d] = 0;
    }
  }
}

void gp_copy_blocks(void *dst, int64_t dst_stride, const void *src,
                    int64_t src_stride, int64_t outer, int64_t count,
                    int64_t elem_bytes) {
  if (outer <= 0 || count <= 0)
    return;
  auto *d = static_cast<unsigned char *>(dst);
  const auto *s = static_cast<const unsigned char *>(src);
  size_t rowBytes = static_cast<size_t>(count * elem_bytes);
  if (dst_stride == count && src_stride == count) {
    std::memcpy(d, s, rowBytes * static_cast<size_t>(outer));
    return;
  }
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(d + o * dst_stride * elem_bytes,
                s + o * src_stride * elem_bytes, rowBytes);
}

void gp_gather(const float *table, const int64_t *idx, float *out, int64_t n,
               int64_t rows, int64_t width) {
#pragma omp parallel for schedule(static) if (n * width >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = idx[i] < 0 ? idx[i] + rows : idx[i];
    float *dst = out + i * width;
    if (r < 0 || r >= rows)
      std::memset(dst, 0, static_cast<size_t>(width) * sizeof(float));
    else
      std::memcpy(dst, table + r * width,
                  static_cast<size_t>(width) * sizeof(float));
  }
}

void gp_scatter_add(const float *dout, const int64_t *idx, float *dtable,
                    int64_t n, int64_t rows, int64_t width) {
  std::memset(dtable, 0, static_cast<size_t>(rows * width) * sizeof(float));
  // Threads own column blocks; each runs over the positions in order, so
  // the sums are the same with any thread count.
  constexpr int64_t kBlock = 16;
  const int64_t blocks = (width + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (n * width >= kParallelMin)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t c0 = b * kBlock, c1 = std::min(width, c0 + kBlock);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t r = idx[i] < 0 ? idx[i] + rows : idx[i];
      if (r < 0 || r >= rows)
        continue;
      const float *src = dout + i * width;
      float *dst = dtable + r * width;
      for (int64_t c = c0; c < c1; ++c)
        dst[c] += src[c];
    }
  }
}

void gp_check_labels(const gp_step_ctx *ctx, const int64_t *labels, int64_t n,
                     int64_t classes, int32_t has_ignore, int64_t ignore_index,
                     const char *input) {
  gpipe::checkRange(ctx, labels, n, 0, classes, has_ignore, ignore_index, input,
                    0, 1, "label");
}

void gp_softmax_xent_fwd(const float *logits, const int64_t *labels, int64_t N,
                         int64_t C, int32_t has_ignore, int64_t ignore_index,
                         double norm, float *loss, float *log_prob) {
  // Each row's loss term, rows in parallel; summed in order below.
  std::vector<double> rowLoss(static_cast<size_t>(std::max<int64_t>(N, 0)));
#pragma omp parallel for schedule(static) if (N * C >= kParallelMin)
  for (int64_t i = 0; i < N; ++i) {
    thread_local std::vector<float> exps;
    float *e = threadScratch(exps, C);
    const float *x = logits + i * C;
    const int64_t y = labels[i];
    float mx;
    double sumExp;
    rowStats(x, C, mx, sumExp, e);
    double logSum = std::log(sumExp);
    if (log_prob) {
      float lse = mx + static_cast<float>(logSum);
      for (int64_t j = 0; j < C; ++j)
        log_prob[i * C + j] = x[j] - lse;
    }
    rowLoss[static_cast<size_t>(i)] =
        y >= 0 && y < C ? (static_cast<double>(mx) - x[y]) + logSum : 0.0;
  }
  *loss = lossForward(
      labels, N, C, has_ignore, ignore_index, norm,
      [&](int64_t i, int64_t) { return rowLoss[static_cast<size_t>(i)]; });
}

void gp_softmax_xent_bwd(const float *logits, const int64_t *labels, int64_t N,
                         int64_t C, int32_t has_ignore, int64_t ignore_index,
                         double norm, const float *dloss, float *dlogits) {
  lossBackward(labels, N, C, has_ignore, ignore_index, norm, dloss, dlogits,
               [&](int64_t i, int64_t y, float scale, float *dx) {
                 const float *x = logits + i * C;
                 float mx;
                 double sumExp;
                 rowStats(x, C, mx, sumExp, dx);
                 float inv = static_cast<float>(1.0 / sumExp);
                 const float ey = dx[y];
                 for (int64_t j = 0; j < C; ++j)
                   dx[j] = dx[j] * inv * scale;
                 dx[y] = (ey * inv - 1.0f) * scale;
               });
}

void gp_nll_fwd(const float *log_prob, const int64_t *labels, int64_t N,
                int64_t C, int32_t has_ignore, int64_t ignore_index,
                double norm, float *loss) {
  *loss = lossForward(
      labels, N, C, has_ignore, ignore_index, norm, [&](int64_t i, int64_t y) {
        return y >= 0 && y < C ? -static_cast<double>(log_prob[i * C + y])
                               : 0.0;
      });
}

void gp_nll_bwd(const int64_t *labels, int64_t N, int64_t C, int32_t has_ignore,
                int64_t ignore_index, double norm, const float *dloss,
                float *dlog_prob) {
  lossBackward(labels, N, C, has_ignore, ignore_index, norm, dloss, dlog_prob,
               [&](int64_t, int64_t y, float scale, float *dx) {
                 std::fill(dx, dx + C, 0.0f);
                 dx[y] = -scale;
               });
}

void gp_sgd_update(float *p, const float *g, float *buf, int64_t n, float lr,
                   float momentum, float weight_decay, int32_t nesterov,
                   int64_t step) {
  SgdScalars s{lr,
               momentum,
               weight_decay,
               momentum != 0.0f && buf != nullptr,
               nesterov != 0,
               step <= 1};
#pragma omp parallel if (n >= kParallelMin)
  {
    auto [lo, hi] = threadShare(n);
    sgdRange(p, g, buf, lo, hi, s);
  }
}

void gp_adam_update(float *p, const float *g, float *m, float *v, int64_t n,
                    float lr, float beta1, float beta2, float eps,
                    float weight_decay, int32_t decoupled, int64_t step) {
  // Scalars follow torch 1.13 _single_tensor_adam(w): Python double math,
  // rounded to float when applied to the float tensors.
  double lrD = pyDouble(lr), b1 = pyDouble(beta1), b2 = pyDouble(beta2);
  double wdD = pyDouble(weight_decay);
  double stepD = static_cast<double>(step);
  double biasCorrection1 = 1.0 - std::pow(b1, stepD);
  double biasCorrection2Sqrt = std::sqrt(1.0 - std::pow(b2, stepD));
  AdamScalars s;
  s.negStepSize = static_cast<float>(-(lrD / biasCorrection1));
  s.bc2Sqrt = static_cast<float>(biasCorrection2Sqrt);
  s.beta1 = beta1;
  s.beta2 = beta2;
  s.oneMinusB1 = static_cast<float>(1.0 - b1);
  s.oneMinusB2 = static_cast<float>(1.0 - b2);
  s.eps = eps;
  s.weightDecay = weight_decay;
  s.decay = static_cast<float>(1.0 - lrD * wdD);
  s.decoupled = decoupled != 0;
  s.coupledDecay = !decoupled && weight_decay != 0.0f;
#pragma omp parallel if (n >= kParallelMin)
  {
    auto [lo, hi] = threadShare(n);
    adamRange(p, g, m, v, lo, hi, s);
  }
}

} // extern "C"
