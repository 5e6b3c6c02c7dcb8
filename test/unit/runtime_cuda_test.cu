// GPU unit test of the CUDA runtime's kernels (runtime/src/cuda/kernels.cu):
// each kernel against a naive host reference. A plain program rather than a
// gtest one: it prints one line per check with its max error, exits 77
// (ctest's SKIP_RETURN_CODE) when there is no CUDA device and 1 when a check
// fails. Links against the CUDA runtime library (device.cu provides
// testInitDevice).
#include "conv_reference.h"
#include "cuda_internal.h"
#include "gpipe/runtime_cuda.h"
#include "internal.h"
#include "pool_reference.h"
#include "random.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace gpipe {
namespace cuda {
/// Sets up device 0 (streams, cuBLASLt handle, workspace, bf16 scratch) as a
/// stage program's start does (device.cu).
void testInitDevice(size_t scratchBytes);
} // namespace cuda
} // namespace gpipe

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

int gFailures = 0;

/// Records one check: passes when err <= tol (a NaN error fails).
void check(const std::string &name, double err, double tol) {
  const bool ok = err <= tol;
  std::printf("%s  %-66s max err %.3e (tol %.0e)\n", ok ? "PASS" : "FAIL",
              name.c_str(), err, tol);
  if (!ok)
    ++gFailures;
}

#define CUDA_OK(call)                                                          \
  do {                                                                         \
    cudaError_t err_ = (call);                                                 \
    if (err_ != cudaSuccess) {                                                 \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,       \
                   cudaGetErrorString(err_));                                  \
      std::exit(1);                                                            \
    }                                                                          \
  } while (0)

void sync() { CUDA_OK(cudaStreamSynchronize(gp_cuda_stream())); }

/// A device array. Copies go through the compute stream: it does not
/// synchronise with the legacy default stream that plain cudaMemcpy uses.
template <typename T> class DeviceBuffer {
public:
  explicit DeviceBuffer(size_t n) : n_(n) {
    CUDA_OK(cudaMalloc(&ptr_, std::max<size_t>(n, 1) * sizeof(T)));
  }
  explicit DeviceBuffer(const std::vector<T> &host)
      : DeviceBuffer(host.size()) {
    upload(host);
  }
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  ~DeviceBuffer() { cudaFree(ptr_); }

  T *get() const { return ptr_; }
  void upload(const std::vector<T> &host) {
    CUDA_OK(cudaMemcpyAsync(ptr_, host.data(), host.size() * sizeof(T),
                            cudaMemcpyHostToDevice, gp_cuda_stream()));
  }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    CUDA_OK(cudaMemcpyAsync(host.data(), ptr_, n_ * sizeof(T),
                            cudaMemcpyDeviceToHost, gp_cuda_stream()));
    sync();
    return host;
  }

private:
  T *ptr_ = nullptr;
  size_t n_;
};

std::mt19937 gRng(20240607);

std::vector<float> randomVector(size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float &x : v)
    x = dist(gRng);
  return v;
}

/// |got - ref| / scale, where matching NaNs count as exact and a NaN on one
/// side only as an infinite error.
double relErr(double got, double ref, double scale) {
  if (std::isnan(got) || std::isnan(ref))
    return std::isnan(got) && std::isnan(ref)
               ? 0.0
               : std::numeric_limits<double>::infinity();
  if (got == ref)
    return 0.0;
  return std::fabs(got - ref) / std::max(scale, 1e-30);
}

/// fp32 -> bf16 -> fp32, round to nearest even (what __float2bfloat16_rn
/// does, NaNs aside).
float roundBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return f;
  u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

uint16_t bf16Bits(float f) {
  const float r = roundBf16(f);
  uint32_t u;
  std::memcpy(&u, &r, sizeof(u));
  return static_cast<uint16_t>(u >> 16);
}

//===----------------------------------------------------------------------===//
// gp_cast_bf16
//===----------------------------------------------------------------------===//

void testCast() {
  std::vector<float> in = randomVector(4096, -1000.0f, 1000.0f);
  // Exact ties (both parities), signed zeros, infinities, a subnormal, the
  // overflow of the largest float, NaN.
  const uint32_t specials[] = {0x3f808000u, 0x3f818000u, 0xbf808000u,
                               0x00000000u, 0x80000000u, 0x7f800000u,
                               0xff800000u, 0x00000123u, 0x7f7fffffu,
                               0x7fc00000u, 0x3f80ffffu, 0x3f807fffu};
  for (uint32_t bits : specials) {
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    in.push_back(f);
  }
  DeviceBuffer<float> dIn(in);
  DeviceBuffer<uint16_t> dOut(in.size());
  gp_cast_bf16(dIn.get(), dOut.get(), static_cast<int64_t>(in.size()));
  const std::vector<uint16_t> out = dOut.download();
  double wrong = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    if (std::isnan(in[i]))
      wrong += !((out[i] & 0x7f80u) == 0x7f80u && (out[i] & 0x7fu) != 0);
    else
      wrong += out[i] != bf16Bits(in[i]);
  }
  check("cast_bf16: 4108 values incl. ties, inf, NaN (count of mismatches)",
        wrong, 0);
}

//===----------------------------------------------------------------------===//
// GEMM
//===----------------------------------------------------------------------===//

struct GemmCase {
  std::string name;
  int transA, transB;
  int64_t M, N, K;
  int64_t padA = 0, padB = 0, padC = 0; // row stride beyond the stored columns
  float alpha = 1.0f, beta = 0.0f;
  bool bias = false;
  bool relu = false; // the relu epilogue
  int32_t math = GP_MATH_F32;
  bool plain = false;      // through gp_gemm (default math, f32)
  bool bf16Copies = false; // bf16: the caller passes A16 / B16
  int64_t offsetA = 0;     // A starts this many floats into its buffer
  int64_t offsetBias = 0;  // likewise the bias
};

/// Reference of one row-major product element, in double; also the sum of
/// the magnitudes of its terms, the scale of its rounding error.
struct GemmRef {
  std::vector<double> value, magnitude;
};

GemmRef gemmReference(const GemmCase &c, const std::vector<float> &A,
                      int64_t lda, const std::vector<float> &B, int64_t ldb,
                      const std::vector<float> &C0, int64_t ldc,
                      const std::vector<float> &bias, bool bf16Inputs) {
  GemmRef ref;
  ref.value.resize(c.M * c.N);
  ref.magnitude.resize(c.M * c.N);
  for (int64_t i = 0; i < c.M; ++i)
    for (int64_t j = 0; j < c.N; ++j) {
      double s = 0, mag = 0;
      for (int64_t k = 0; k < c.K; ++k) {
        float a =
            c.transA ? A[c.offsetA + k * lda + i] : A[c.offsetA + i * lda + k];
        float b = c.transB ? B[j * ldb + k] : B[k * ldb + j];
        if (bf16Inputs) {
          a = roundBf16(a);
          b = roundBf16(b);
        }
        s += double(a) * b;
        mag += std::fabs(double(a) * b);
      }
      double v = double(c.alpha) * s;
      mag *= std::fabs(c.alpha);
      if (c.beta != 0.0f) {
        v += double(c.beta) * C0[i * ldc + j];
        mag += std::fabs(double(c.beta) * C0[i * ldc + j]);
      }
      if (c.bias) {
        v += bias[j];
        mag += std::fabs(bias[j]);
      }
      if (c.relu && v < 0)
        v = 0;
      ref.value[i * c.N + j] = v;
      ref.magnitude[i * c.N + j] = mag;
    }
  return ref;
}

void runGemm(const GemmCase &c) {
  const int64_t rowsA = c.transA ? c.K : c.M, colsA = c.transA ? c.M : c.K;
  const int64_t rowsB = c.transB ? c.N : c.K, colsB = c.transB ? c.K : c.N;
  const int64_t lda = colsA + c.padA, ldb = colsB + c.padB;
  const int64_t ldc = c.N + c.padC;
  // Row padding holds NaN: a GEMM that read it would poison C.
  std::vector<float> A(c.offsetA + rowsA * lda, kNaN);
  std::vector<float> B(rowsB * ldb, kNaN);
  for (int64_t r = 0; r < rowsA; ++r)
    for (int64_t q = 0; q < colsA; ++q)
      A[c.offsetA + r * lda + q] = randomVector(1)[0];
  for (int64_t r = 0; r < rowsB; ++r)
    for (int64_t q = 0; q < colsB; ++q)
      B[r * ldb + q] = randomVector(1)[0];
  DeviceBuffer<float> dA(A), dB(B);
  const float *aPtr = dA.get() + c.offsetA;

  // bf16 copies in the operands' own layout, made by the runtime's cast.
  const int64_t spanA = c.K > 0 ? (rowsA - 1) * lda + colsA : 0;
  const int64_t spanB = c.K > 0 ? (rowsB - 1) * ldb + colsB : 0;
  DeviceBuffer<uint16_t> dA16(spanA), dB16(spanB);
  if (c.bf16Copies) {
    gp_cast_bf16(aPtr, dA16.get(), spanA);
    gp_cast_bf16(dB.get(), dB16.get(), spanB);
  }

  // Twice: the second call reuses the cached plan, with new C and bias.
  for (int rep = 0; rep < 2; ++rep) {
    std::vector<float> C0(c.M * ldc, 12345.0f); // padding sentinel
    for (int64_t i = 0; i < c.M; ++i)
      for (int64_t j = 0; j < c.N; ++j)
        // beta == 0 must overwrite C without reading it, NaNs included.
        C0[i * ldc + j] = c.beta != 0.0f ? randomVector(1)[0] : kNaN;
    const std::vector<float> bias = randomVector(c.N);
    std::vector<float> biasStorage(c.offsetBias, kNaN);
    biasStorage.insert(biasStorage.end(), bias.begin(), bias.end());
    DeviceBuffer<float> dC(C0), dBias(biasStorage);
    const float *biasPtr = c.bias ? dBias.get() + c.offsetBias : nullptr;
    const int64_t unalignedBefore = gpipe::cuda::gemmFallbacks().unalignedBias;
    if (c.plain)
      gp_gemm(c.transA, c.transB, c.M, c.N, c.K, c.alpha, aPtr, lda, dB.get(),
              ldb, c.beta, dC.get(), ldc);
    else
      gp_gemm_ex(c.transA, c.transB, c.M, c.N, c.K, c.alpha, aPtr, lda,
                 dB.get(), ldb, c.beta, dC.get(), ldc, biasPtr, c.relu ? 1 : 0,
                 c.math, c.bf16Copies ? dA16.get() : nullptr,
                 c.bf16Copies ? dB16.get() : nullptr);
    const std::vector<float> C = dC.download();

    const std::string name = "gemm " + c.name + (rep ? " (cached plan)" : "");
    // A bias under 16-byte alignment never reaches cuBLASLt's fused epilogue
    // (it may fault on sm_90): its plan, new on the first call, puts the
    // epilogue in a kernel; an aligned bias never does.
    if (c.bias && c.K > 0) {
      const bool unaligned = !gpipe::cuda::gemmBiasEpilogueOk(biasPtr);
      const int64_t planned =
          gpipe::cuda::gemmFallbacks().unalignedBias - unalignedBefore;
      check(name + ": under-aligned bias plans (count - expected)",
            std::fabs(double(planned) - (unaligned && rep == 0 ? 1 : 0)), 0);
    }
    auto compare = [&](const GemmRef &ref) {
      double err = 0;
      for (int64_t i = 0; i < c.M; ++i)
        for (int64_t j = 0; j < c.N; ++j)
          err = std::max(err, relErr(C[i * ldc + j], ref.value[i * c.N + j],
                                     ref.magnitude[i * c.N + j]));
      return err;
    };
    const GemmRef exact = gemmReference(c, A, lda, B, ldb, C0, ldc, bias,
                                        /*bf16Inputs=*/false);
    switch (c.math) {
    case GP_MATH_F32:
      // Also proves that f32 does not use TF32: that errs by ~1e-3.
      check(name, compare(exact), 1e-5);
      break;
    case GP_MATH_TF32:
      check(name + " vs f32", compare(exact), 1e-2);
      break;
    case GP_MATH_BF16:
      check(name + " vs f32", compare(exact), 2e-2);
      check(name + " vs bf16 inputs",
            compare(gemmReference(c, A, lda, B, ldb, C0, ldc, bias,
                                  /*bf16Inputs=*/true)),
            1e-5);
      break;
    }
    if (c.padC > 0) {
      double changed = 0;
      for (int64_t i = 0; i < c.M; ++i)
        for (int64_t j = c.N; j < ldc; ++j)
          changed += C[i * ldc + j] != 12345.0f;
      check(name + ": ldc padding untouched (count)", changed, 0);
    }
  }
}

void testGemm() {
  {
    // Host-only: which bias pointers may take the fused epilogue.
    double wrong = 0;
    for (uintptr_t address : {0, 16, 32, 256, 4096})
      wrong += !gpipe::cuda::gemmBiasEpilogueOk(
          reinterpret_cast<const void *>(address));
    for (uintptr_t address : {4, 8, 12, 20, 260})
      wrong += gpipe::cuda::gemmBiasEpilogueOk(
          reinterpret_cast<const void *>(address));
    check("gemm: fused bias epilogue only at 16-byte alignment (wrong count)",
          wrong, 0);
  }
  std::vector<GemmCase> cases;
  auto add = [&](std::string name, int tA, int tB, int64_t M, int64_t N,
                 int64_t K) -> GemmCase & {
    cases.push_back(GemmCase{std::move(name), tA, tB, M, N, K});
    return cases.back();
  };
  {
    GemmCase &c = add("NN 37x53x29 padded lda/ldb/ldc, beta=0 (gp_gemm)", 0, 0,
                      37, 53, 29);
    c.padA = 3, c.padB = 5, c.padC = 7, c.plain = true;
  }
  add("NT 64x48x80 beta=1", 0, 1, 64, 48, 80).beta = 1.0f;
  {
    GemmCase &c = add("TN 33x65x17 alpha=0.5 beta=1 padded", 1, 0, 33, 65, 17);
    c.alpha = 0.5f, c.beta = 1.0f, c.padA = 2, c.padC = 4;
  }
  {
    GemmCase &c = add("TT 20x31x45 beta=0 padded", 1, 1, 20, 31, 45);
    c.padA = 1, c.padB = 2, c.padC = 3;
  }
  add("NN 128x96x64 bias", 0, 0, 128, 96, 64).bias = true;
  {
    GemmCase &c = add("NT 50x70x40 bias beta=1", 0, 1, 50, 70, 40);
    c.bias = true, c.beta = 1.0f;
  }
  add("TN 40x24x36 A 4-byte aligned", 1, 0, 40, 24, 36).offsetA = 1;
  add("NT 1x70x40 one row", 0, 1, 1, 70, 40).bias = true;
  {
    // Under 16-byte alignment: never the fused epilogue, a kernel adds the
    // bias (cuBLASLt may fault on it on sm_90).
    GemmCase &c = add("NT 24x36x20 bias 4-byte aligned", 0, 1, 24, 36, 20);
    c.bias = true, c.offsetBias = 1;
  }
  {
    GemmCase &c = add("NN 5x6x0 K=0 beta=0.5 bias", 0, 0, 5, 6, 0);
    c.beta = 0.5f, c.bias = true;
  }
  add("NN 256x192x160 tf32", 0, 0, 256, 192, 160).math = GP_MATH_TF32;
  {
    GemmCase &c =
        add("NT 96x80x112 bf16 scratch copies bias beta=1", 0, 1, 96, 80, 112);
    c.math = GP_MATH_BF16, c.bias = true, c.beta = 1.0f;
  }
  {
    GemmCase &c =
        add("TN 64x72x48 bf16 caller copies padded", 1, 0, 64, 72, 48);
    c.math = GP_MATH_BF16, c.bf16Copies = true, c.padA = 8, c.padB = 3;
  }
  {
    GemmCase &c = add("TT 33x17x20 bf16 scratch copies", 1, 1, 33, 17, 20);
    c.math = GP_MATH_BF16;
  }
  add("NN 512x384x256 f32 (gp_gemm)", 0, 0, 512, 384, 256).plain = true;
  {
    GemmCase &c = add("NT 128x96x64 bias relu", 0, 1, 128, 96, 64);
    c.bias = true, c.relu = true;
  }
  {
    GemmCase &c = add("NN 64x48x32 relu beta=1", 0, 0, 64, 48, 32);
    c.relu = true, c.beta = 1.0f;
  }
  {
    // Likewise: the kernel applies bias and relu.
    GemmCase &c = add("NT 24x36x20 relu bias 4-byte aligned", 0, 1, 24, 36, 20);
    c.bias = true, c.relu = true, c.offsetBias = 1;
  }
  {
    GemmCase &c = add("NT 96x80x112 bf16 bias relu", 0, 1, 96, 80, 112);
    c.math = GP_MATH_BF16, c.bias = true, c.relu = true;
  }
  for (const GemmCase &c : cases)
    runGemm(c);
}

/// cublasLtMatmul may reject an algorithm the heuristic proposed: gp_gemm_ex
/// then tries the next one, and drops the fused epilogue for a kernel when
/// every fused one is rejected. The rejections are simulated (test hooks);
/// the results must still be right, and the fallback taken exactly once (the
/// second call of runGemm reuses what worked).
void testGemmFallback() {
  gpipe::cuda::GemmTestHooks &hooks = gpipe::cuda::gemmTestHooks();
  const gpipe::cuda::GemmFallbacks &counts = gpipe::cuda::gemmFallbacks();
  {
    const int64_t before = counts.algorithm + counts.epilogue;
    hooks.rejectNext = 1;
    GemmCase c{"NT 72x40x56 bias, first algorithm rejected", 0, 1, 72, 40, 56};
    c.bias = true;
    runGemm(c);
    check("gemm fallback: one fallback after one rejection (count - 1)",
          std::fabs(double(counts.algorithm + counts.epilogue - before) - 1),
          0);
  }
  {
    const int64_t before = counts.epilogue;
    hooks.rejectFused = true;
    GemmCase c{
        "NT 88x24x40 bias relu, fused epilogues rejected", 0, 1, 88, 24, 40};
    c.bias = true, c.relu = true;
    runGemm(c);
    hooks.rejectFused = false;
    check("gemm fallback: epilogue kernel after fused rejections (count - 1)",
          std::fabs(double(counts.epilogue - before) - 1), 0);
  }
}

//===----------------------------------------------------------------------===//
// gp_reduce_to
//===----------------------------------------------------------------------===//

/// gp_reduce_to (or, with `max`, gp_reduce_max: exact, on values with ties)
/// against a host reference.
void runReduce(const std::vector<int64_t> &inShape,
               const std::vector<int64_t> &outShape, bool max = false) {
  const int rank = static_cast<int>(inShape.size());
  int64_t inSize = 1, outSize = 1;
  for (int d = 0; d < rank; ++d) {
    inSize *= inShape[d];
    outSize *= outShape[d];
  }
  std::vector<float> in = randomVector(inSize);
  if (max)
    for (float &v : in)
      v = std::round(v * 3.0f);
  std::vector<double> ref(outSize, max ? -INFINITY : 0.0), mag(outSize, 0.0);
  std::vector<int64_t> idx(rank, 0);
  for (int64_t e = 0; e < inSize; ++e) {
    int64_t o = 0;
    for (int d = 0; d < rank; ++d)
      o = o * outShape[d] + (outShape[d] == 1 ? 0 : idx[d]);
    ref[o] = max ? std::max<double>(ref[o], in[e]) : ref[o] + in[e];
    mag[o] += std::fabs(in[e]);
    for (int d = rank - 1; d >= 0 && ++idx[d] == inShape[d]; --d)
      idx[d] = 0;
  }
  DeviceBuffer<float> dIn(in);
  DeviceBuffer<float> dOut(std::vector<float>(outSize, kNaN));
  if (max)
    gp_reduce_max(dIn.get(), inShape.data(), dOut.get(), outShape.data(), rank);
  else
    gp_reduce_to(dIn.get(), inShape.data(), dOut.get(), outShape.data(), rank);
  const std::vector<float> out = dOut.download();
  double err = 0;
  for (int64_t o = 0; o < outSize; ++o)
    err = max ? std::max(err, std::abs(out[o] - ref[o]))
              : std::max(err, relErr(out[o], ref[o], mag[o]));

  auto shape = [](const std::vector<int64_t> &s) {
    std::string text = "[";
    for (size_t d = 0; d < s.size(); ++d)
      text += (d ? "," : "") + std::to_string(s[d]);
    return text + "]";
  };
  check(std::string(max ? "reduce_max " : "reduce_to ") + shape(inShape) +
            " -> " + shape(outShape),
        err, max ? 0.0 : 1e-5);
}

void testReduce() {
  runReduce({1000, 300}, {1, 300});   // bias gradient
  runReduce({4096, 7}, {1, 7});       // narrow columns
  runReduce({3000, 2048}, {1, 2048}); // wide bias gradient
  runReduce({6, 1, 8}, {1, 1, 8});    // a size-1 dim
  runReduce({5, 40, 33}, {5, 1, 33}); // columns of several matrices
  runReduce({500, 77}, {500, 1});     // short rows: a warp each
  runReduce({2000, 3000}, {2000, 1}); // long rows: a block each
  runReduce({3, 100000}, {3, 1});     // few long rows: split across blocks
  runReduce({37, 41}, {1, 1});        // to a scalar
  runReduce({8, 300, 500}, {1, 1, 1});
  runReduce({1 << 20}, {1});
  runReduce({6, 50, 9}, {1, 50, 1}); // the general kernel
  runReduce({2, 3, 4, 5}, {2, 1, 4, 1});
  runReduce({4, 5}, {4, 5}); // nothing to reduce: a copy
  runReduce({}, {});         // rank 0
  runReduce({0, 5}, {1, 5}); // empty input: zeros
  runReduce({500, 77}, {500, 1}, /*max=*/true);
  runReduce({37, 41}, {1, 1}, /*max=*/true);
  runReduce({6, 50, 9}, {1, 50, 1}, /*max=*/true);
  runReduce({2, 3, 4, 5}, {2, 1, 4, 1}, /*max=*/true);
  runReduce({3, 100000}, {3, 1}, /*max=*/true);
  runReduce({}, {}, /*max=*/true);
}

//===----------------------------------------------------------------------===//
// gp_copy_blocks
//===----------------------------------------------------------------------===//

template <typename T>
void runCopyBlocks(const char *name, int64_t dstStride, int64_t srcStride,
                   int64_t outer, int64_t count) {
  std::vector<T> src(std::max<int64_t>(outer - 1, 0) * srcStride + count);
  for (size_t i = 0; i < src.size(); ++i)
    src[i] = static_cast<T>(i * 7 + 1);
  const size_t dstSize = std::max<int64_t>(outer - 1, 0) * dstStride + count;
  std::vector<T> expect(dstSize + 3, static_cast<T>(-5)); // + a tail
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < count; ++j)
      expect[o * dstStride + j] = src[o * srcStride + j];
  DeviceBuffer<T> dSrc(src);
  DeviceBuffer<T> dDst(std::vector<T>(expect.size(), static_cast<T>(-5)));
  gp_copy_blocks(dDst.get(), dstStride, dSrc.get(), srcStride, outer, count,
                 sizeof(T));
  const std::vector<T> dst = dDst.download();
  double wrong = 0;
  for (size_t i = 0; i < dst.size(); ++i)
    wrong += dst[i] != expect[i];
  check(std::string("copy_blocks ") + name + " (count of mismatches)", wrong,
        0);
}

void testCopyBlocks() {
  runCopyBlocks<float>("f32 7 rows of 5, strides dst 12 src 9", 12, 9, 7, 5);
  runCopyBlocks<int64_t>("i64 contiguous 3 rows of 4", 4, 4, 3, 4);
  runCopyBlocks<float>("f32 one row, strides 0", 0, 0, 1, 11);
}

//===----------------------------------------------------------------------===//
// Softmax cross-entropy
//===----------------------------------------------------------------------===//

struct XentCase {
  std::string name;
  int64_t N, C;
  int32_t hasIgnore = 0;
  int64_t ignoreIndex = -100;
  double ignoreFraction = 0.0; // of the labels, when hasIgnore
  double norm = 0.0;
  int64_t badRow = -1; // this row gets the out-of-range label C
  bool logProb = true;
  bool nll = false; // gp_nll_fwd/_bwd on the logits as log-probabilities
};

bool ignored(int64_t y, const XentCase &c) {
  return c.hasIgnore && y == c.ignoreIndex;
}

/// The CPU kernels' row statistics (kernels.cpp).
void rowStats(const float *x, int64_t C, float &mx, double &sumExp) {
  mx = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < C; ++j)
    mx = std::max(mx, x[j]);
  sumExp = 0.0;
  for (int64_t j = 0; j < C; ++j)
    sumExp += std::exp(x[j] - mx);
}

void runXent(const XentCase &c) {
  const std::vector<float> logits = randomVector(c.N * c.C, -4.0f, 4.0f);
  std::vector<int64_t> labels(c.N);
  std::uniform_int_distribution<int64_t> cls(0, std::max<int64_t>(c.C - 1, 0));
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int64_t i = 0; i < c.N; ++i)
    labels[i] =
        c.hasIgnore && u(gRng) < c.ignoreFraction ? c.ignoreIndex : cls(gRng);
  if (c.badRow >= 0)
    labels[c.badRow] = c.C;

  // Host reference: the CPU kernels' computation.
  std::vector<float> refLogProb(c.N * c.C);
  double total = 0.0;
  int64_t count = 0;
  for (int64_t i = 0; i < c.N; ++i) {
    const float *x = &logits[i * c.C];
    float mx;
    double sumExp;
    rowStats(x, c.C, mx, sumExp);
    const double logSum = std::log(sumExp);
    const float lse = mx + static_cast<float>(logSum);
    for (int64_t j = 0; j < c.C; ++j)
      refLogProb[i * c.C + j] = x[j] - lse;
    const int64_t y = labels[i];
    if (ignored(y, c))
      continue;
    ++count;
    if (y < 0 || y >= c.C)
      total = std::numeric_limits<double>::quiet_NaN();
    else
      total += c.nll ? -static_cast<double>(x[y])
                     : (static_cast<double>(mx) - x[y]) + logSum;
  }
  const float refLoss =
      c.norm > 0.0 ? static_cast<float>(total / c.norm)
      : count      ? static_cast<float>(total / static_cast<double>(count))
                   : kNaN;

  const float dloss = 0.75f;
  const double divisor = c.norm > 0.0 ? c.norm : static_cast<double>(count);
  const float scale = static_cast<float>(dloss / divisor);
  std::vector<float> refGrad(c.N * c.C, 0.0f);
  for (int64_t i = 0; i < c.N && count > 0; ++i) {
    const float *x = &logits[i * c.C];
    float *dx = &refGrad[i * c.C];
    const int64_t y = labels[i];
    if (ignored(y, c))
      continue;
    if (y < 0 || y >= c.C) {
      std::fill(dx, dx + c.C, kNaN);
      continue;
    }
    if (c.nll) {
      dx[y] = -scale;
      continue;
    }
    float mx;
    double sumExp;
    rowStats(x, c.C, mx, sumExp);
    const float inv = static_cast<float>(1.0 / sumExp);
    for (int64_t j = 0; j < c.C; ++j)
      dx[j] = std::exp(x[j] - mx) * inv * scale;
    dx[y] = (std::exp(x[y] - mx) * inv - 1.0f) * scale;
  }

  DeviceBuffer<float> dLogits(logits);
  DeviceBuffer<int64_t> dLabels(labels);
  DeviceBuffer<float> dLoss(std::vector<float>{-12345.0f}); // not written?
  DeviceBuffer<float> dLogProb(std::vector<float>(c.N * c.C, kNaN));
  DeviceBuffer<float> dDloss(std::vector<float>{dloss});
  DeviceBuffer<float> dGrad(std::vector<float>(c.N * c.C, -7.0f));
  if (c.nll) {
    gp_nll_fwd(dLogits.get(), dLabels.get(), c.N, c.C, c.hasIgnore,
               c.ignoreIndex, c.norm, dLoss.get());
    gp_nll_bwd(dLabels.get(), c.N, c.C, c.hasIgnore, c.ignoreIndex, c.norm,
               dDloss.get(), dGrad.get());
  } else {
    gp_softmax_xent_fwd(dLogits.get(), dLabels.get(), c.N, c.C, c.hasIgnore,
                        c.ignoreIndex, c.norm, dLoss.get(),
                        c.logProb ? dLogProb.get() : nullptr);
    gp_softmax_xent_bwd(dLogits.get(), dLabels.get(), c.N, c.C, c.hasIgnore,
                        c.ignoreIndex, c.norm, dDloss.get(), dGrad.get());
  }

  const float loss = dLoss.download()[0];
  const std::string name = (c.nll ? "nll " : "xent ") + c.name;
  check(name + ": loss", relErr(loss, refLoss, std::fabs(refLoss)), 1e-5);
  if (c.logProb && !c.nll) {
    const std::vector<float> logProb = dLogProb.download();
    double err = 0;
    for (size_t e = 0; e < logProb.size(); ++e)
      err = std::max(err, relErr(logProb[e], refLogProb[e],
                                 std::max(1.0f, std::fabs(refLogProb[e]))));
    check(name + ": log_prob", err, 1e-5);
  }
  const std::vector<float> grad = dGrad.download();
  double err = 0;
  // Gradients are probabilities times `scale`; all ignored: exact zeros.
  const double gradScale = std::isfinite(scale) ? std::fabs(scale) : 1e-30;
  for (size_t e = 0; e < grad.size(); ++e)
    err = std::max(err, relErr(grad[e], refGrad[e], gradScale));
  check(name + ": dlogits", err, 1e-5);
}

void testXent() {
  std::vector<XentCase> cases;
  auto add = [&](std::string name, int64_t N, int64_t C) -> XentCase & {
    cases.push_back(XentCase{std::move(name), N, C});
    return cases.back();
  };
  add("N=67 C=129", 67, 129);
  {
    XentCase &c = add("N=67 C=129 ignore_index, no log_prob", 67, 129);
    c.hasIgnore = 1, c.ignoreFraction = 0.2, c.logProb = false;
  }
  {
    XentCase &c = add("N=67 C=129 ignore_index norm=200", 67, 129);
    c.hasIgnore = 1, c.ignoreFraction = 0.2, c.norm = 200.0;
  }
  {
    XentCase &c = add("N=20000 C=12 ignore_index (many blocks)", 20000, 12);
    c.hasIgnore = 1, c.ignoreIndex = 3, c.ignoreFraction = 0.1;
  }
  add("N=5 C=5000", 5, 5000);
  {
    XentCase &c = add("N=16 C=10 all ignored (NaN loss)", 16, 10);
    c.hasIgnore = 1, c.ignoreIndex = -1, c.ignoreFraction = 2.0;
  }
  {
    XentCase &c = add("N=16 C=10 all ignored norm=32 (zero loss)", 16, 10);
    c.hasIgnore = 1, c.ignoreIndex = -1, c.ignoreFraction = 2.0;
    c.norm = 32.0;
  }
  add("N=10 C=10 label out of range (NaN)", 10, 10).badRow = 4;
  add("N=0 (NaN loss)", 0, 10);
  // The negative log-likelihood shares the loss kernels' reduction.
  const size_t xentCases = cases.size();
  for (size_t k = 0; k < xentCases; ++k) {
    XentCase c = cases[k];
    c.nll = true;
    cases.push_back(c);
  }
  {
    XentCase &c = add("N=67 C=129 sum (norm 1)", 67, 129);
    c.hasIgnore = 1, c.ignoreFraction = 0.2, c.norm = 1.0, c.nll = true;
  }
  for (const XentCase &c : cases)
    runXent(c);
}

//===----------------------------------------------------------------------===//
// Optimizers
//===----------------------------------------------------------------------===//

double maxRelErr(const std::vector<float> &got, const std::vector<float> &ref) {
  double err = 0;
  for (size_t i = 0; i < got.size(); ++i)
    err = std::max(err, relErr(got[i], ref[i], std::fabs(ref[i])));
  return err;
}

/// The CPU gp_sgd_update loop.
void sgdReference(std::vector<float> &p, const std::vector<float> &g,
                  std::vector<float> &buf, float lr, float momentum,
                  float weightDecay, bool nesterov, int64_t step) {
  for (size_t i = 0; i < p.size(); ++i) {
    float d = g[i];
    if (weightDecay != 0.0f)
      d = d + weightDecay * p[i];
    if (momentum != 0.0f) {
      float b = step <= 1 ? d : buf[i] * momentum + d;
      buf[i] = b;
      d = nesterov ? d + momentum * b : b;
    }
    p[i] = p[i] + -lr * d;
  }
}

void runSgd(const std::string &name, float lr, float momentum,
            float weightDecay, bool nesterov) {
  const size_t n = 1000;
  std::vector<float> p = randomVector(n), buf(n, 0.0f);
  DeviceBuffer<float> dP(p), dBuf(buf);
  for (int64_t step = 1; step <= 2; ++step) {
    const std::vector<float> g = randomVector(n);
    DeviceBuffer<float> dG(g);
    sgdReference(p, g, buf, lr, momentum, weightDecay, nesterov, step);
    gp_sgd_update(dP.get(), dG.get(), momentum != 0.0f ? dBuf.get() : nullptr,
                  n, lr, momentum, weightDecay, nesterov, step);
    const std::string what = "sgd " + name + " step " + std::to_string(step);
    check(what + ": p", maxRelErr(dP.download(), p), 1e-6);
    if (momentum != 0.0f)
      check(what + ": momentum buffer", maxRelErr(dBuf.download(), buf), 1e-6);
  }
}

/// The CPU gp_adam_update.
void adamReference(std::vector<float> &p, const std::vector<float> &g,
                   std::vector<float> &m, std::vector<float> &v, float lr,
                   float beta1, float beta2, float eps, float weightDecay,
                   bool decoupled, int64_t step) {
  const double lrD = gpipe::pyDouble(lr), b1 = gpipe::pyDouble(beta1),
               b2 = gpipe::pyDouble(beta2);
  const double wdD = gpipe::pyDouble(weightDecay);
  const double stepD = static_cast<double>(step);
  const double biasCorrection1 = 1.0 - std::pow(b1, stepD);
  const double biasCorrection2Sqrt = std::sqrt(1.0 - std::pow(b2, stepD));
  const float negStepSize = static_cast<float>(-(lrD / biasCorrection1));
  const float bc2Sqrt = static_cast<float>(biasCorrection2Sqrt);
  const float oneMinusB1 = static_cast<float>(1.0 - b1);
  const float oneMinusB2 = static_cast<float>(1.0 - b2);
  const float decay = static_cast<float>(1.0 - lrD * wdD);
  const bool coupledDecay = !decoupled && weightDecay != 0.0f;
  for (size_t i = 0; i < p.size(); ++i) {
    float gi = g[i];
    if (decoupled)
      p[i] = p[i] * decay;
    else if (coupledDecay)
      gi = gi + weightDecay * p[i];
    m[i] = m[i] * beta1 + oneMinusB1 * gi;
    v[i] = v[i] * beta2 + oneMinusB2 * gi * gi;
    float denom = std::sqrt(v[i]) / bc2Sqrt + eps;
    p[i] = p[i] + negStepSize * m[i] / denom;
  }
}

void runAdam(const std::string &name, bool decoupled) {
  const size_t n = 1000;
  const float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  const float weightDecay = 0.01f;
  std::vector<float> p = randomVector(n), m(n, 0.0f), v(n, 0.0f);
  DeviceBuffer<float> dP(p), dM(m), dV(v);
  for (int64_t step = 1; step <= 2; ++step) {
    const std::vector<float> g = randomVector(n);
    DeviceBuffer<float> dG(g);
    adamReference(p, g, m, v, lr, beta1, beta2, eps, weightDecay, decoupled,
                  step);
    gp_adam_update(dP.get(), dG.get(), dM.get(), dV.get(), n, lr, beta1, beta2,
                   eps, weightDecay, decoupled, step);
    const std::string what = name + " step " + std::to_string(step);
    check(what + ": p", maxRelErr(dP.download(), p), 1e-6);
    check(what + ": m", maxRelErr(dM.download(), m), 1e-6);
    check(what + ": v", maxRelErr(dV.download(), v), 1e-6);
  }
}

void testOptimizers() {
  runSgd("momentum=0.9 nesterov wd=1e-4", 0.1f, 0.9f, 1e-4f, true);
  runSgd("momentum=0.8 wd=0.01", 0.05f, 0.8f, 0.01f, false);
  runSgd("plain", 0.1f, 0.0f, 0.0f, false);
  runAdam("adam wd=0.01", false);
  runAdam("adamw wd=0.01", true);
}

/// gp_softmax and gp_softmax_bwd (or, with `log`, gp_log_softmax and
/// gp_log_softmax_bwd) on [outer, n, inner] views against a double reference
/// (the max shift included: one input of 80 would overflow expf).
void runSoftmax(int64_t outer, int64_t n, int64_t inner, bool log = false) {
  const int64_t size = outer * n * inner;
  std::vector<float> x = randomVector(size, -3.0f, 3.0f);
  x[0] = 80.0f;
  const std::vector<float> dy = randomVector(size);
  std::vector<double> y(size), dx(size);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < inner; ++j) {
      auto at = [&](int64_t k) { return (o * n + k) * inner + j; };
      double m = -1e300, s = 0.0, dot = 0.0, sum = 0.0;
      for (int64_t k = 0; k < n; ++k)
        m = std::max(m, static_cast<double>(x[at(k)]));
      for (int64_t k = 0; k < n; ++k)
        s += std::exp(x[at(k)] - m);
      for (int64_t k = 0; k < n; ++k) {
        y[at(k)] =
            log ? x[at(k)] - m - std::log(s) : std::exp(x[at(k)] - m) / s;
        dot += dy[at(k)] * y[at(k)];
        sum += dy[at(k)];
      }
      for (int64_t k = 0; k < n; ++k)
        dx[at(k)] = log ? dy[at(k)] - std::exp(y[at(k)]) * sum
                        : y[at(k)] * (dy[at(k)] - dot);
    }
  DeviceBuffer<float> dX(x), dDy(dy);
  DeviceBuffer<float> dY(std::vector<float>(size, kNaN));
  DeviceBuffer<float> dDx(std::vector<float>(size, kNaN));
  if (log) {
    gp_log_softmax(dX.get(), dY.get(), outer, n, inner);
    gp_log_softmax_bwd(dY.get(), dDy.get(), dDx.get(), outer, n, inner);
  } else {
    gp_softmax(dX.get(), dY.get(), outer, n, inner);
    gp_softmax_bwd(dY.get(), dDy.get(), dDx.get(), outer, n, inner);
  }
  const std::vector<float> gotY = dY.download(), gotDx = dDx.download();
  double errY = 0, errDx = 0;
  for (int64_t i = 0; i < size; ++i) {
    errY = std::max(errY, relErr(gotY[i], y[i], 1.0));
    errDx = std::max(errDx, relErr(gotDx[i], dx[i], 1.0));
  }
  const std::string name = std::string(log ? "log_softmax [" : "softmax [") +
                           std::to_string(outer) + "," + std::to_string(n) +
                           "," + std::to_string(inner) + "]";
  check(name + ": y", errY, log ? 1e-5 : 1e-6);
  check(name + ": dx", errDx, 1e-5);
}

/// gp_gather / gp_scatter_add against a host reference (negative indices,
/// repeats, one out of range); the scatter-add sums over the positions in
/// order, so the CUDA gradient equals the CPU kernel's float sums exactly.
/// gp_dropout on the GPU draws exactly the host's counter-based mask (the
/// CPU target's): same kept elements, same scale, also when the tensor is
/// done in two runs with base offsets (micro-batches).
void testDropout() {
  const int64_t n = 100003;
  const float ratio = 0.1f;
  const std::vector<float> x = randomVector(n);
  gp_step_ctx ctx{};
  ctx.step = 5;
  std::vector<float> want(n);
  for (int64_t i = 0; i < n; ++i)
    want[i] = gpipe::dropoutApply(1234, ctx.step, i, ratio, x[i]);
  DeviceBuffer<float> dX(x), dY(std::vector<float>(n, kNaN)),
      dHalves(std::vector<float>(n, kNaN));
  gp_dropout(&ctx, 1234, ratio, dX.get(), dY.get(), n, 0);
  gp_dropout(&ctx, 1234, ratio, dX.get(), dHalves.get(), n / 2, 0);
  gp_dropout(&ctx, 1234, ratio, dX.get() + n / 2, dHalves.get() + n / 2,
             n - n / 2, n / 2);
  const std::vector<float> got = dY.download(), halves = dHalves.download();
  double err = 0, errHalves = 0;
  for (int64_t i = 0; i < n; ++i) {
    err = std::max(err, std::abs(double(got[i]) - want[i]));
    errHalves = std::max(errHalves, std::abs(double(halves[i]) - want[i]));
  }
  check("dropout: the host's counter-based mask", err, 0.0);
  check("dropout: two runs with base offsets", errHalves, 0.0);
  // An evaluation forward (--eval-data) passes the input through.
  ctx.eval = 1;
  DeviceBuffer<float> dE(std::vector<float>(n, kNaN));
  gp_dropout(&ctx, 1234, ratio, dX.get(), dE.get(), n, 0);
  const std::vector<float> gotEval = dE.download();
  double errEval = 0;
  for (int64_t i = 0; i < n; ++i)
    errEval = std::max(errEval, std::abs(double(gotEval[i]) - x[i]));
  check("dropout: ctx->eval passes the input through", errEval, 0.0);
}

void testGather() {
  const int64_t rows = 11, width = 37, n = 3000;
  const std::vector<float> table = randomVector(rows * width);
  const std::vector<float> dout = randomVector(n * width);
  std::vector<int64_t> idx(n);
  for (int64_t i = 0; i < n; ++i)
    idx[i] = (i * 7) % 23 - 11; // -11..11: 11 is out of range
  std::vector<float> out(n * width), dtable(rows * width, 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = idx[i] < 0 ? idx[i] + rows : idx[i];
    for (int64_t c = 0; c < width; ++c) {
      out[i * width + c] = r < rows ? table[r * width + c] : 0.0f;
      if (r < rows)
        dtable[r * width + c] += dout[i * width + c];
    }
  }
  DeviceBuffer<float> dT(table), dDout(dout);
  DeviceBuffer<int64_t> dIdx(idx);
  DeviceBuffer<float> dOut(std::vector<float>(n * width, kNaN));
  DeviceBuffer<float> dDt(std::vector<float>(rows * width, kNaN));
  gp_gather(dT.get(), dIdx.get(), dOut.get(), n, rows, width);
  gp_scatter_add(dDout.get(), dIdx.get(), dDt.get(), n, rows, width);
  const std::vector<float> gotOut = dOut.download(), gotDt = dDt.download();
  double errOut = 0, errDt = 0;
  for (int64_t i = 0; i < n * width; ++i)
    errOut = std::max(errOut, std::abs(double(gotOut[i]) - out[i]));
  for (int64_t i = 0; i < rows * width; ++i)
    errDt = std::max(errDt, std::abs(double(gotDt[i]) - dtable[i]));
  check("gather", errOut, 0.0);
  check("scatter_add (exact, in position order)", errDt, 0.0);
}

void testSoftmax() {
  runSoftmax(64, 10, 1);  // last axis
  runSoftmax(8, 16, 32);  // a middle axis
  runSoftmax(1, 2048, 1); // one long row
  runSoftmax(300, 1, 7);  // a size-1 axis: all ones, zero gradient
  runSoftmax(64, 10, 1, /*log=*/true);
  runSoftmax(8, 16, 32, /*log=*/true);
  runSoftmax(1, 2048, 1, /*log=*/true);
  runSoftmax(300, 1, 7, /*log=*/true); // all zeros, zero gradient
}

/// gp_batch_gemm against a double host reference: batch dims broadcast
/// (stride 0), one strided run or several, fp32 / TF32 / bf16 (the bf16
/// operands rounded into the scratch), every transpose.
void runBatchGemm(const std::string &name, std::vector<int64_t> batch,
                  std::vector<int64_t> aShape, std::vector<int64_t> bShape,
                  int64_t M, int64_t N, int64_t K, int32_t math, double tol) {
  const int64_t rank = static_cast<int64_t>(batch.size());
  auto strides = [&](const std::vector<int64_t> &shape, int64_t matrix,
                     int64_t &size) {
    std::vector<int64_t> st(rank, 0);
    size = matrix;
    for (int64_t d = rank - 1; d >= 0; --d) {
      if (shape[d] != 1)
        st[d] = size;
      size *= shape[d];
    }
    return st;
  };
  int64_t aSize = 0, bSize = 0, total = 1;
  const std::vector<int64_t> aStride = strides(aShape, M * K, aSize);
  const std::vector<int64_t> bStride = strides(bShape, K * N, bSize);
  for (int64_t d : batch)
    total *= d;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      const std::vector<float> A = randomVector(aSize), B = randomVector(bSize);
      DeviceBuffer<float> dA(A), dB(B);
      DeviceBuffer<float> dC(std::vector<float>(total * M * N, kNaN));
      gp_batch_gemm(ta, tb, M, N, K, dA.get(), dB.get(), dC.get(),
                    static_cast<int32_t>(rank), batch.data(), aStride.data(),
                    bStride.data(), math);
      const std::vector<float> C = dC.download();
      double err = 0;
      for (int64_t i = 0; i < total; ++i) {
        int64_t rest = i, aOff = 0, bOff = 0;
        for (int64_t d = rank - 1; d >= 0; --d) {
          const int64_t idx = rest % batch[d];
          rest /= batch[d];
          aOff += idx * aStride[d];
          bOff += idx * bStride[d];
        }
        for (int64_t m = 0; m < M; ++m)
          for (int64_t n = 0; n < N; ++n) {
            double want = 0;
            for (int64_t k = 0; k < K; ++k) {
              float a = A[aOff + (ta ? k * M + m : m * K + k)];
              float b = B[bOff + (tb ? n * K + k : k * N + n)];
              if (math == GP_MATH_BF16) {
                a = roundBf16(a);
                b = roundBf16(b);
              }
              want += static_cast<double>(a) * b;
            }
            err = std::max(err, relErr(C[(i * M + m) * N + n], want,
                                       std::sqrt(static_cast<double>(K))));
          }
      }
      check("batch gemm " + name + (ta ? " T" : " N") + (tb ? "T" : "N"), err,
            tol);
    }
}

void testBatchGemm() {
  runBatchGemm("dense 3x2 of 4x5x3 f32", {3, 2}, {3, 2}, {3, 2}, 4, 5, 3,
               GP_MATH_F32, 1e-5);
  runBatchGemm("[3,1]x[1,2] of 16x8x32 f32", {3, 2}, {3, 1}, {1, 2}, 16, 8, 32,
               GP_MATH_F32, 1e-5);
  runBatchGemm("[1,4]x[2,4] of 33x17x20 tf32", {2, 4}, {1, 4}, {2, 4}, 33, 17,
               20, GP_MATH_TF32, 1e-2);
  runBatchGemm("attention 64x8 of 16x16x8 f32", {64, 8}, {64, 8}, {64, 8}, 16,
               16, 8, GP_MATH_F32, 1e-5);
  runBatchGemm("[2,3]x[1,3] of 24x40x16 bf16", {2, 3}, {2, 3}, {1, 3}, 24, 40,
               16, GP_MATH_BF16, 1e-5);
}

/// gp_layer_norm, gp_layer_norm_bwd and gp_layer_norm_scale_bwd on [rows, n]
/// against a double reference (rows centred at 100: the variance is taken
/// around the mean); the scale's gradient twice, bitwise equal (no atomics).
void runLayerNorm(int64_t rows, int64_t n, bool hasBias) {
  const int64_t size = rows * n;
  const std::vector<float> x = randomVector(size, 99.0f, 101.0f),
                           s = randomVector(n, 0.5f, 1.5f), b = randomVector(n),
                           dy = randomVector(size);
  const double eps = 1e-5;
  std::vector<double> y(size), dx(size), ds(n, 0.0), mean(rows), rstd(rows);
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = x.data() + r * n, *dyr = dy.data() + r * n;
    double m = 0, v = 0, sg = 0, sgx = 0;
    for (int64_t j = 0; j < n; ++j)
      m += xr[j];
    m /= n;
    for (int64_t j = 0; j < n; ++j)
      v += (xr[j] - m) * (xr[j] - m);
    const double rs = 1.0 / std::sqrt(v / n + eps);
    mean[r] = m;
    rstd[r] = rs;
    for (int64_t j = 0; j < n; ++j) {
      const double xhat = (xr[j] - m) * rs;
      y[r * n + j] = xhat * s[j] + (hasBias ? b[j] : 0.0);
      sg += static_cast<double>(dyr[j]) * s[j];
      sgx += static_cast<double>(dyr[j]) * s[j] * xhat;
      ds[j] += dyr[j] * xhat;
    }
    for (int64_t j = 0; j < n; ++j) {
      const double xhat = (xr[j] - m) * rs;
      dx[r * n + j] =
          rs * (static_cast<double>(dyr[j]) * s[j] - sg / n - xhat * sgx / n);
    }
  }
  DeviceBuffer<float> dX(x), dS(s), dB(b), dDy(dy);
  DeviceBuffer<float> dY(std::vector<float>(size, kNaN));
  DeviceBuffer<float> dMean(std::vector<float>(rows, kNaN));
  DeviceBuffer<float> dRstd(std::vector<float>(rows, kNaN));
  DeviceBuffer<float> dDx(std::vector<float>(size, kNaN));
  DeviceBuffer<float> dDs(std::vector<float>(n, kNaN));
  gp_layer_norm(dX.get(), dS.get(), hasBias ? dB.get() : nullptr, dY.get(),
                dMean.get(), dRstd.get(), rows, n, static_cast<float>(eps));
  gp_layer_norm_bwd(dX.get(), dMean.get(), dRstd.get(), dS.get(), dDy.get(),
                    dDx.get(), rows, n);
  gp_layer_norm_scale_bwd(dX.get(), dMean.get(), dRstd.get(), dDy.get(),
                          dDs.get(), rows, n);
  const std::vector<float> gotY = dY.download(), gotDx = dDx.download(),
                           gotDs = dDs.download(), gotMean = dMean.download(),
                           gotRstd = dRstd.download();
  gp_layer_norm_scale_bwd(dX.get(), dMean.get(), dRstd.get(), dDy.get(),
                          dDs.get(), rows, n);
  const std::vector<float> again = dDs.download();
  double errY = 0, errDx = 0, errDs = 0, errStats = 0, diff = 0;
  for (int64_t r = 0; r < rows; ++r)
    errStats = std::max({errStats, relErr(gotMean[r], mean[r], 100.0),
                         relErr(gotRstd[r], rstd[r], rstd[r])});
  for (int64_t i = 0; i < size; ++i) {
    errY = std::max(errY, relErr(gotY[i], y[i], 1.0));
    errDx = std::max(errDx, relErr(gotDx[i], dx[i], rstd[i / n]));
  }
  for (int64_t j = 0; j < n; ++j) {
    errDs = std::max(errDs, relErr(gotDs[j], ds[j], std::sqrt(rows)));
    diff = std::max(diff, std::fabs(static_cast<double>(again[j]) - gotDs[j]));
  }
  const std::string name = "layer_norm [" + std::to_string(rows) + "," +
                           std::to_string(n) + "]" +
                           (hasBias ? "" : " no bias");
  check(name + ": mean, inv_std", errStats, 1e-6);
  check(name + ": y", errY, 2e-4);
  check(name + ": dx", errDx, 1e-4);
  check(name + ": dscale", errDs, 1e-4);
  check(name + ": dscale twice, bitwise", diff, 0.0);
}

void testLayerNorm() {
  runLayerNorm(64, 32, true);    // short rows: one warp per row
  runLayerNorm(8, 1000, false);  // long rows: a full block, strided
  runLayerNorm(3, 1, true);      // one element: y = bias, dx = 0
  runLayerNorm(2000, 300, true); // many rows, the column sum is long
  runLayerNorm(5000, 5, false);  // fewer columns than a tile's 8
  runLayerNorm(8192, 1024, true); // the GPT shape (batch 8, T 1024)
}

/// Attention of every block in double (textbook softmax gradient), against
/// gp_attention_fwd / gp_attention_bwd; with a causal mask, row 0 of the
/// first case fully masked: NaN there, as the CPU kernel and the softmax.
///
/// `workspace` (bytes; 0: the start-up one) replaces the attention workspace
/// for this case, so that the batch runs in several chunks or, below one
/// block's two [Tq, Tk] tiles, the workspace grows to exactly that; the
/// forward and backward run twice and must give the same bits.
void runAttention(int64_t batch, int64_t Tq, int64_t Tk, int64_t d,
                  int64_t dvDim, bool causal, bool maskRow0,
                  size_t workspace = 0) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const int64_t nq = batch * Tq * d, nk = batch * Tk * d,
                nv = batch * Tk * dvDim, no = batch * Tq * dvDim;
  const std::vector<float> q = randomVector(nq, -2.f, 2.f),
                           k = randomVector(nk, -2.f, 2.f),
                           v = randomVector(nv), dout = randomVector(no);
  std::vector<float> mask(Tq * Tk, 0.0f);
  for (int64_t i = 0; i < Tq; ++i)
    for (int64_t j = 0; j < Tk; ++j)
      mask[i * Tk + j] =
          (causal && j > i + Tk - Tq) || (maskRow0 && i == 0) ? 1.0f : 0.0f;
  const bool hasMask = causal || maskRow0;
  std::vector<double> out(no, 0.0), lse(batch * Tq), dq(nq, 0.0), dk(nk, 0.0),
      dv(nv, 0.0);
  for (int64_t b = 0; b < batch; ++b) {
    const float *qb = q.data() + b * Tq * d, *kb = k.data() + b * Tk * d,
                *vb = v.data() + b * Tk * dvDim,
                *gb = dout.data() + b * Tq * dvDim;
    std::vector<double> p(Tk), dp(Tk);
    for (int64_t i = 0; i < Tq; ++i) {
      double m = -INFINITY, sum = 0.0, pdp = 0.0;
      for (int64_t j = 0; j < Tk; ++j) {
        double s = 0.0;
        for (int64_t c = 0; c < d; ++c)
          s += static_cast<double>(qb[i * d + c]) * kb[j * d + c];
        p[j] = hasMask && mask[i * Tk + j] != 0.0f ? -INFINITY : s * scale;
        m = std::max(m, p[j]);
      }
      for (int64_t j = 0; j < Tk; ++j)
        sum += std::exp(p[j] - m);
      lse[b * Tq + i] = m + std::log(sum);
      for (int64_t j = 0; j < Tk; ++j) {
        p[j] = std::exp(p[j] - m) / sum;
        dp[j] = 0.0;
        for (int64_t c = 0; c < dvDim; ++c) {
          out[(b * Tq + i) * dvDim + c] += p[j] * vb[j * dvDim + c];
          dp[j] += static_cast<double>(gb[i * dvDim + c]) * vb[j * dvDim + c];
          dv[(b * Tk + j) * dvDim + c] += p[j] * gb[i * dvDim + c];
        }
        pdp += p[j] * dp[j];
      }
      for (int64_t j = 0; j < Tk; ++j) {
        const double ds = p[j] * (dp[j] - pdp) * scale;
        for (int64_t c = 0; c < d; ++c) {
          dq[(b * Tq + i) * d + c] += ds * kb[j * d + c];
          dk[(b * Tk + j) * d + c] += ds * qb[i * d + c];
        }
      }
    }
  }
  DeviceBuffer<float> dQ(q), dK(k), dV(v), dDout(dout), dMask(mask);
  DeviceBuffer<float> dOut(std::vector<float>(no, kNaN));
  DeviceBuffer<float> dLse(std::vector<float>(batch * Tq, kNaN));
  DeviceBuffer<float> dDq(std::vector<float>(nq, kNaN));
  DeviceBuffer<float> dDk(std::vector<float>(nk, kNaN));
  DeviceBuffer<float> dDv(std::vector<float>(nv, kNaN));
  const float *maskPtr = hasMask ? dMask.get() : nullptr;
  if (workspace)
    gpipe::cuda::setAttentionWorkspace(workspace);
  auto run = [&] {
    gp_attention_fwd(dQ.get(), dK.get(), dV.get(), maskPtr, dOut.get(),
                     dLse.get(), batch, Tq, Tk, d, dvDim,
                     static_cast<float>(scale));
    gp_attention_bwd(dQ.get(), dK.get(), dV.get(), maskPtr, dOut.get(),
                     dLse.get(), dDout.get(), dDq.get(), dDk.get(), dDv.get(),
                     batch, Tq, Tk, d, dvDim, static_cast<float>(scale));
    return std::vector<std::vector<float>>{dOut.download(), dLse.download(),
                                           dDq.download(), dDk.download(),
                                           dDv.download()};
  };
  const std::vector<std::vector<float>> got = run();
  // Poisoned again: the second run must write every output itself.
  dOut.upload(std::vector<float>(no, kNaN));
  dLse.upload(std::vector<float>(batch * Tq, kNaN));
  dDq.upload(std::vector<float>(nq, kNaN));
  dDk.upload(std::vector<float>(nk, kNaN));
  dDv.upload(std::vector<float>(nv, kNaN));
  const std::vector<std::vector<float>> again = run();
  const size_t grownTo = gpipe::cuda::state().attentionBytes;
  if (workspace)
    gpipe::cuda::setAttentionWorkspace(gpipe::cuda::kAttentionWorkspaceBytes);
  double bitDiff = 0.0;
  for (size_t t = 0; t < got.size(); ++t)
    if (std::memcmp(got[t].data(), again[t].data(),
                    got[t].size() * sizeof(float)) != 0)
      bitDiff = 1.0;
  auto maxErr = [](const std::vector<float> &got,
                   const std::vector<double> &want) {
    double e = 0.0;
    for (size_t i = 0; i < want.size(); ++i)
      e = std::max(e,
                   relErr(got[i], want[i], std::max(1.0, std::fabs(want[i]))));
    return e;
  };
  const std::string name =
      "attention [" + std::to_string(batch) + "x" + std::to_string(Tq) + "x" +
      std::to_string(Tk) + ", d " + std::to_string(d) + ", dv " +
      std::to_string(dvDim) + "]" + (causal ? " causal" : "") +
      (maskRow0 ? " row 0 masked" : "") +
      (workspace ? " ws " + std::to_string(workspace) : "");
  check(name + ": out", maxErr(got[0], out), 2e-5);
  check(name + ": lse", maxErr(got[1], lse), 2e-5);
  check(name + ": dq", maxErr(got[2], dq), 2e-5);
  check(name + ": dk", maxErr(got[3], dk), 2e-5);
  check(name + ": dv", maxErr(got[4], dv), 2e-5);
  check(name + ": twice, bitwise", bitDiff, 0.0);
  // Below one block's two tiles the workspace grows to exactly them (plus
  // the rounding of the first to 256 bytes).
  if (workspace) {
    const size_t tile = sizeof(float) * static_cast<size_t>(Tq * Tk);
    const size_t one = ((tile + 255) & ~size_t(255)) + tile;
    check(name + ": workspace bytes",
          workspace < one ? (grownTo == one ? 0.0 : 1.0)
                          : (grownTo == workspace ? 0.0 : 1.0),
          0.0);
  }
}

void testAttention() {
  runAttention(1, 4, 4, 3, 3, false, false);
  runAttention(128, 64, 64, 32, 32, true, false); // the GPT shape
  runAttention(3, 5, 7, 6, 2, false, false);      // Tq != Tk, d != dv
  runAttention(2, 3, 4, 2, 2, false, true);       // NaN like the softmax
  // Several chunks: 512 KiB per block, 6 blocks per 3 MiB (6, 6, 4).
  runAttention(16, 256, 256, 64, 64, true, false, size_t(3) << 20);
  // Tq != Tk, d != dv, the workspace below one block: grown, a block a chunk.
  runAttention(3, 60, 100, 16, 8, true, false, 1024);
  // Fully masked rows in every chunk (2, 2, 1): NaN stays in its block.
  runAttention(5, 24, 40, 12, 20, false, true, 16384);
  // Odd strides (35 floats a tile: 4-byte aligned matrices), chunks 3, 1.
  runAttention(4, 5, 7, 3, 5, false, false, 1100);
}

} // namespace

/// gp_max_pool / gp_avg_pool and their gradients against pool_reference.h:
/// indices exact (ties: the first maximum), values and gradients to 1e-6.
void testPool() {
  for (bool ties : {false, true})
    for (const pool_ref::Case &c : pool_ref::cases(/*dilated=*/true)) {
      const gp_pool_window &w = c.w;
      const int64_t nc = 6, in = nc * w.ih * w.iw, out = nc * w.oh * w.ow;
      std::vector<float> x = randomVector(in), dy = randomVector(out);
      if (ties)
        for (float &v : x)
          v = v > 0 ? 1.0f : 0.0f;
      std::vector<float> refY;
      std::vector<int64_t> refIdx;
      pool_ref::maxPool(x, nc, w, refY, refIdx);
      std::vector<float> refDx = pool_ref::maxPoolBwd(refIdx, dy, nc, w);
      DeviceBuffer<float> dX(x), dDy(dy), dY(std::vector<float>(out, kNaN));
      DeviceBuffer<float> dDx(std::vector<float>(in, kNaN));
      DeviceBuffer<int64_t> dIdx(std::vector<int64_t>(out, -7));
      gp_max_pool(dX.get(), dY.get(), dIdx.get(), nc, w);
      gp_max_pool_bwd(dIdx.get(), dDy.get(), dDx.get(), nc, w.ih * w.iw,
                      w.oh * w.ow);
      const std::vector<float> y = dY.download(), dx = dDx.download();
      const std::vector<int64_t> idx = dIdx.download();
      double errY = 0, errIdx = 0, errDx = 0;
      for (int64_t o = 0; o < out; ++o) {
        errY = std::max(errY, relErr(y[o], refY[o], 1.0));
        errIdx = std::max(errIdx, idx[o] == refIdx[o] ? 0.0 : 1.0);
      }
      for (int64_t e = 0; e < in; ++e)
        errDx = std::max(errDx, relErr(dx[e], refDx[e], 1.0));
      const std::string name =
          std::string("max_pool ") + c.name + (ties ? " ties" : "");
      check(name + ": y", errY, 0.0);
      check(name + ": indices", errIdx, 0.0);
      check(name + ": dx", errDx, 1e-6);
    }
  for (int includePad : {0, 1})
    for (const pool_ref::Case &c : pool_ref::cases(/*dilated=*/false)) {
      const gp_pool_window &w = c.w;
      const int64_t nc = 5, in = nc * w.ih * w.iw, out = nc * w.oh * w.ow;
      const std::vector<float> x = randomVector(in), dy = randomVector(out);
      const std::vector<double> refY = pool_ref::avgPool(x, nc, w, includePad),
                                refDx =
                                    pool_ref::avgPoolBwd(dy, nc, w, includePad);
      DeviceBuffer<float> dX(x), dDy(dy), dY(std::vector<float>(out, kNaN));
      DeviceBuffer<float> dDx(std::vector<float>(in, kNaN));
      gp_avg_pool(dX.get(), dY.get(), nc, w, includePad);
      gp_avg_pool_bwd(dDy.get(), dDx.get(), nc, w, includePad);
      const std::vector<float> y = dY.download(), dx = dDx.download();
      double errY = 0, errDx = 0;
      for (int64_t o = 0; o < out; ++o)
        errY = std::max(errY, relErr(y[o], refY[o], 1.0));
      for (int64_t e = 0; e < in; ++e)
        errDx = std::max(errDx, relErr(dx[e], refDx[e], 1.0));
      const std::string name = std::string("avg_pool ") + c.name +
                               (includePad ? " count_include_pad" : "");
      check(name + ": y", errY, 1e-6);
      check(name + ": dx", errDx, 1e-6);
    }
}

/// gp_batch_norm and gp_batch_norm_bwd (runtime/src/cuda/batchnorm.cu) on
/// [n, c, s] against a double reference; y aliasing x and dx aliasing dy,
/// null gradients, and a second backward run bitwise equal (no atomics).
void runBatchNorm(int64_t n, int64_t c, int64_t s) {
  const int64_t size = n * c * s, cnt = n * s;
  const std::vector<float> x = randomVector(size, 2.0f, 4.0f),
                           sc = randomVector(c, 0.5f, 1.5f),
                           b = randomVector(c), dy = randomVector(size);
  const double eps = 1e-5;
  auto idx = [&](int64_t k, int64_t e) {
    return (e / s) * c * s + k * s + e % s;
  };
  std::vector<double> y(size), dx(size), mean(c), var(c), ds(c), db(c);
  for (int64_t k = 0; k < c; ++k) {
    double m = 0, v = 0;
    for (int64_t e = 0; e < cnt; ++e)
      m += x[idx(k, e)];
    m /= cnt;
    for (int64_t e = 0; e < cnt; ++e)
      v += (x[idx(k, e)] - m) * (x[idx(k, e)] - m);
    v /= cnt;
    mean[k] = m;
    var[k] = v;
    const double rs = 1.0 / std::sqrt(v + eps);
    double g = 0, h = 0;
    for (int64_t e = 0; e < cnt; ++e) {
      const int64_t o = idx(k, e);
      y[o] = (x[o] - m) * rs * sc[k] + b[k];
      g += dy[o];
      h += dy[o] * (x[o] - m) * rs;
    }
    ds[k] = h;
    db[k] = g;
    for (int64_t e = 0; e < cnt; ++e) {
      const int64_t o = idx(k, e);
      dx[o] = sc[k] * rs * (dy[o] - g / cnt - (x[o] - m) * rs * h / cnt);
    }
  }
  DeviceBuffer<float> dX(x), dS(sc), dB(b), dDy(dy);
  DeviceBuffer<float> dY(std::vector<float>(size, kNaN));
  DeviceBuffer<float> dMean(std::vector<float>(c, kNaN));
  DeviceBuffer<float> dVar(std::vector<float>(c, kNaN));
  DeviceBuffer<float> dDx(std::vector<float>(size, kNaN));
  DeviceBuffer<float> dDs(std::vector<float>(c, kNaN));
  DeviceBuffer<float> dDb(std::vector<float>(c, kNaN));
  gp_batch_norm(dX.get(), dS.get(), dB.get(), dY.get(), dMean.get(), dVar.get(),
                n, c, s, static_cast<float>(eps));
  gp_batch_norm_bwd(dX.get(), dMean.get(), dVar.get(), dS.get(), dDy.get(),
                    dDx.get(), dDs.get(), dDb.get(), n, c, s,
                    static_cast<float>(eps));
  const std::vector<float> gotY = dY.download(), gotMean = dMean.download(),
                           gotVar = dVar.download(), gotDx = dDx.download(),
                           gotDs = dDs.download(), gotDb = dDb.download();
  // Again: dx into dy (aliased), dscale only; y into x (aliased).
  DeviceBuffer<float> dG(dy), dX2(x);
  DeviceBuffer<float> dDs2(std::vector<float>(c, kNaN));
  gp_batch_norm_bwd(dX.get(), dMean.get(), dVar.get(), dS.get(), dG.get(),
                    dG.get(), dDs2.get(), nullptr, n, c, s,
                    static_cast<float>(eps));
  gp_batch_norm(dX2.get(), dS.get(), dB.get(), dX2.get(), dMean.get(),
                dVar.get(), n, c, s, static_cast<float>(eps));
  const std::vector<float> gotG = dG.download(), gotDs2 = dDs2.download(),
                           gotX2 = dX2.download();
  double errY = 0, errStats = 0, errDx = 0, errDs = 0, diff = 0;
  for (int64_t k = 0; k < c; ++k) {
    errStats = std::max({errStats, relErr(gotMean[k], mean[k], 3.0),
                         relErr(gotVar[k], var[k], 1.0)});
    errDs = std::max({errDs, relErr(gotDs[k], ds[k], std::sqrt(cnt)),
                      relErr(gotDb[k], db[k], std::sqrt(cnt))});
    diff = std::max(diff, std::fabs(double(gotDs2[k]) - gotDs[k]));
  }
  for (int64_t i = 0; i < size; ++i) {
    errY = std::max(errY, relErr(gotY[i], y[i], 1.0));
    errDx = std::max(errDx, relErr(gotDx[i], dx[i], 1.0));
    diff = std::max({diff, std::fabs(double(gotG[i]) - gotDx[i]),
                     std::fabs(double(gotX2[i]) - gotY[i])});
  }
  // Evaluation (gp_batch_norm_eval): the running statistics instead of the
  // batch's, against the same double formula; in place too.
  const std::vector<float> rm = randomVector(c, 2.0f, 4.0f),
                           rv = randomVector(c, 0.5f, 2.0f);
  DeviceBuffer<float> dRm(rm), dRv(rv), dX3(x);
  DeviceBuffer<float> dYe(std::vector<float>(size, kNaN));
  gp_batch_norm_eval(dX.get(), dRm.get(), dRv.get(), dS.get(), dB.get(),
                     dYe.get(), n, c, s, static_cast<float>(eps));
  gp_batch_norm_eval(dX3.get(), dRm.get(), dRv.get(), dS.get(), dB.get(),
                     dX3.get(), n, c, s, static_cast<float>(eps));
  const std::vector<float> gotYe = dYe.download(), gotX3 = dX3.download();
  double errEval = 0, diffEval = 0;
  for (int64_t i = 0; i < size; ++i) {
    const int64_t k = i / s % c;
    const double want =
        (x[i] - rm[k]) / std::sqrt(double(rv[k]) + eps) * sc[k] + b[k];
    errEval = std::max(errEval, relErr(gotYe[i], want, 1.0));
    diffEval = std::max(diffEval, std::fabs(double(gotX3[i]) - gotYe[i]));
  }
  const std::string name = "batch_norm [" + std::to_string(n) + "," +
                           std::to_string(c) + "," + std::to_string(s) + "]";
  check(name + ": eval (running statistics)", errEval, 2e-5);
  check(name + ": eval in place: bitwise", diffEval, 0.0);
  check(name + ": mean, var", errStats, 1e-6);
  check(name + ": y", errY, 2e-5);
  check(name + ": dscale, dbias", errDs, 1e-5);
  check(name + ": dx", errDx, 2e-5);
  check(name + ": aliased, null, again: bitwise", diff, 0.0);
}

/// gp_batch_norm_update: M == 1 by the formula; M == 3 through the state,
/// running statistics unchanged until the last micro-batch, then those of
/// the three micro-batches' statistics combined (host double reference).
void testBatchNormUpdate() {
  const int64_t c = 37, count = 20, M = 3;
  const double mom = 0.9;
  const std::vector<float> rm0 = randomVector(c),
                           rv0 = randomVector(c, 0.5f, 1.5f);
  std::vector<std::vector<float>> means, vars;
  for (int64_t m = 0; m < M; ++m) {
    means.push_back(randomVector(c));
    vars.push_back(randomVector(c, 0.1f, 2.0f));
  }
  DeviceBuffer<float> rm(rm0), rv(rv0);
  DeviceBuffer<float> mean(means[0]), var(vars[0]);
  gp_batch_norm_update(rm.get(), rv.get(), mean.get(), var.get(), nullptr, c,
                       count, 0.9f, 1, 0);
  std::vector<float> got = rm.download(), gotV = rv.download();
  double err = 0;
  for (int64_t k = 0; k < c; ++k)
    err = std::max(
        {err, relErr(got[k], mom * rm0[k] + (1 - mom) * means[0][k], 1.0),
         relErr(gotV[k],
                mom * rv0[k] + (1 - mom) * vars[0][k] * count / (count - 1.0),
                1.0)});
  check("batch_norm_update M=1", err, 1e-6);

  DeviceBuffer<float> rm3(rm0), rv3(rv0);
  DeviceBuffer<float> st(std::vector<float>(M * 2 * c, kNaN));
  double unchanged = 0;
  for (int64_t m = 0; m < M; ++m) {
    mean.upload(means[m]);
    var.upload(vars[m]);
    gp_batch_norm_update(rm3.get(), rv3.get(), mean.get(), var.get(), st.get(),
                         c, count, 0.9f, M, m);
    if (m < M - 1) {
      const std::vector<float> a = rm3.download(), b = rv3.download();
      for (int64_t k = 0; k < c; ++k)
        unchanged = std::max({unchanged, std::fabs(double(a[k]) - rm0[k]),
                              std::fabs(double(b[k]) - rv0[k])});
    }
  }
  got = rm3.download();
  gotV = rv3.download();
  err = 0;
  for (int64_t k = 0; k < c; ++k) {
    double mAll = 0, vAll = 0;
    for (int64_t m = 0; m < M; ++m)
      mAll += means[m][k] / double(M);
    for (int64_t m = 0; m < M; ++m)
      vAll += (vars[m][k] + (means[m][k] - mAll) * (means[m][k] - mAll)) /
              double(M);
    const double total = double(M * count);
    err = std::max(
        {err, relErr(got[k], mom * rm0[k] + (1 - mom) * mAll, 1.0),
         relErr(gotV[k], mom * rv0[k] + (1 - mom) * vAll * total / (total - 1),
                1.0)});
  }
  check("batch_norm_update M=3: unchanged before the last", unchanged, 0.0);
  check("batch_norm_update M=3: combined", err, 1e-6);
}

void testBatchNorm() {
  runBatchNorm(4, 3, 5);      // tiny
  runBatchNorm(64, 300, 1);   // [n, c]
  runBatchNorm(1, 4, 1000);   // n == 1
  runBatchNorm(32, 16, 1024); // a full block per channel, strided runs
  runBatchNorm(32, 64, 16);   // 4 x 4
  testBatchNormUpdate();
}

/// cuDNN convolutions (runtime/src/cuda/conv.cu) against the naive
/// reference: forward (with and without bias), input and weight gradients;
/// each twice, the second run reusing the cached plan (asymmetric pads
/// through the padded copy of the input).
void testConv() {
  for (const convref::Case &c : convref::cases()) {
    const gp_conv_shape &s = c.s;
    std::vector<float> x = randomVector(convref::xSize(s));
    std::vector<float> w = randomVector(convref::wSize(s));
    std::vector<float> dy = randomVector(convref::ySize(s));
    std::vector<float> b = randomVector(s.F);
    DeviceBuffer<float> dX(x), dW(w), dDy(dy), dB(b);
    for (int rep = 0; rep < 2; ++rep) {
      DeviceBuffer<float> dY(std::vector<float>(convref::ySize(s), kNaN));
      DeviceBuffer<float> dDx(std::vector<float>(convref::xSize(s), kNaN));
      DeviceBuffer<float> dDw(std::vector<float>(convref::wSize(s), kNaN));
      gp_conv_fwd(&s, dX.get(), dW.get(), c.bias ? dB.get() : nullptr,
                  dY.get());
      gp_conv_bwd_data(&s, dDy.get(), dW.get(), dDx.get());
      gp_conv_bwd_weights(&s, dX.get(), dDy.get(), dDw.get());
      std::string what = "conv " + c.name + (rep ? " (cached)" : "");
      check(what + ": y",
            convref::maxErr(
                dY.download(),
                convref::forward(s, x, w, c.bias ? b.data() : nullptr)),
            1e-5);
      check(what + ": dx",
            convref::maxErr(dDx.download(), convref::inputGrad(s, dy, w)),
            1e-5);
      check(what + ": dw",
            convref::maxErr(dDw.download(), convref::weightGrad(s, x, dy)),
            1e-5);
    }
  }
}

int main() {
  int devices = 0;
  const cudaError_t err = cudaGetDeviceCount(&devices);
  if (err != cudaSuccess || devices == 0) {
    std::printf(
        "SKIPPED: no CUDA device (%s)\n",
        cudaGetErrorString(err != cudaSuccess ? err : cudaErrorNoDevice));
    return 77;
  }
  gpipe::cuda::testInitDevice(size_t(16) << 20);

  testCast();
  testGemm();
  testGemmFallback();
  testBatchGemm();
  testReduce();
  testSoftmax();
  testLayerNorm();
  testPool();
  testBatchNorm();
  testAttention();
  testGather();
  testDropout();
  testCopyBlocks();
  testXent();
  testOptimizers();
  testConv();
  CUDA_OK(cudaDeviceSynchronize());

  if (gFailures) {
    std::printf("%d check(s) FAILED\n", gFailures);
    return 1;
  }
  std::printf("all checks passed\n");
  return 0;
}
