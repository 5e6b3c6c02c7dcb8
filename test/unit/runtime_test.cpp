// Unit tests of the CPU runtime: npy I/O, kernels, optimizers, gp_main and
// the pipeline.json manifest.
#include "conv_reference.h"
#include "gpipe/manifest.h"
#include "gpipe/runtime.h"
#include "internal.h"
#include "npy.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

namespace fs = std::filesystem;
using gpipe::NpyFile;

namespace {

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

/// A fresh directory under the system temp dir, removed with its contents.
class TempDir {
public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "gpipe_rt_XXXXXX").string();
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (!mkdtemp(buf.data()))
      std::abort();
    path_ = buf.data();
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string operator/(const std::string &name) const {
    return path_ + "/" + name;
  }
  const std::string &str() const { return path_; }

private:
  std::string path_;
};

void writeBytes(const std::string &path, const std::string &bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string readText(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

/// A .npy file image with an arbitrary header dict and payload.
std::string npyImage(const std::string &dict, const std::string &payload,
                     int major = 1) {
  std::string header = dict;
  size_t lenBytes = major == 1 ? 2 : 4;
  size_t unpadded = 8 + lenBytes + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  std::string img("\x93NUMPY", 6);
  img += static_cast<char>(major);
  img += '\0';
  for (size_t i = 0; i < lenBytes; ++i)
    img += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return img + header + payload;
}

std::string npyDict(const std::string &descr, const std::string &shape,
                    bool fortran = false) {
  return "{'descr': '" + descr +
         "', 'fortran_order': " + (fortran ? "True" : "False") +
         ", 'shape': " + shape + ", }";
}

template <typename T> std::string rawBytes(const std::vector<T> &v) {
  return std::string(reinterpret_cast<const char *>(v.data()),
                     v.size() * sizeof(T));
}

template <typename T> std::vector<T> contents(const NpyFile &f) {
  std::vector<T> v(static_cast<size_t>(f.numElements()));
  if (!v.empty())
    std::memcpy(v.data(), f.data(), v.size() * sizeof(T));
  return v;
}

void writeF32(const std::string &path, const std::vector<float> &data,
              const std::vector<int64_t> &shape) {
  std::string err;
  ASSERT_TRUE(
      gpipe::npyWriteF32(path, data.data(), shape.data(), shape.size(), err))
      << err;
}

void writeI64(const std::string &path, const std::vector<int64_t> &data,
              const std::string &shape) {
  writeBytes(path, npyImage(npyDict("<i8", shape), rawBytes(data)));
}

/// Opens `path` expecting failure; returns the error message.
std::string openError(const std::string &path, gp_dtype dtype = GP_F32) {
  NpyFile f;
  std::string err;
  EXPECT_FALSE(f.open(path, dtype, err)) << path << " unexpectedly opened";
  EXPECT_NE(err.find(path), std::string::npos) << "error lacks file: " << err;
  return err;
}

std::vector<float> randomVec(size_t n, unsigned seed, float lo = -1.f,
                             float hi = 1.f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float &x : v)
    x = dist(gen);
  return v;
}

//===----------------------------------------------------------------------===//
// npy
//===----------------------------------------------------------------------===//

TEST(Npy, RoundTripF32) {
  TempDir dir;
  std::vector<std::vector<int64_t>> shapes = {
      {2, 3}, {5}, {}, {0, 4}, {2, 1, 3}};
  for (const auto &shape : shapes) {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    std::vector<float> data = randomVec(static_cast<size_t>(n), 7);
    std::string path = dir / "a.npy";
    writeF32(path, data, shape);
    EXPECT_FALSE(fs::exists(path + ".tmp"));

    NpyFile f;
    std::string err;
    ASSERT_TRUE(f.open(path, GP_F32, err)) << err;
    EXPECT_EQ(f.shape(), shape);
    EXPECT_EQ(f.dtype(), GP_F32);
    EXPECT_EQ(contents<float>(f), data);
    // NumPy aligns the payload on 64 bytes.
    EXPECT_EQ((fs::file_size(path) - f.dataBytes()) % 64, 0u);
  }
}

TEST(Npy, HeaderMatchesNumpy) {
  TempDir dir;
  std::vector<float> data = {1, 2, 3, 4, 5, 6};
  writeF32(dir / "a.npy", data, {2, 3});
  std::string img = readText(dir / "a.npy");
  EXPECT_EQ(img, npyImage(npyDict("<f4", "(2, 3)"), rawBytes(data)));
  writeF32(dir / "b.npy", {1, 2}, {2});
  EXPECT_NE(readText(dir / "b.npy").find("'shape': (2,), }"),
            std::string::npos);
}

TEST(Npy, ReadsI64AndVersions2And3) {
  TempDir dir;
  std::vector<int64_t> labels = {3, -1, 7, 1LL << 40};
  for (int major : {1, 2, 3}) {
    std::string path = dir / ("l" + std::to_string(major) + ".npy");
    writeBytes(path,
               npyImage(npyDict("<i8", "(2, 2)"), rawBytes(labels), major));
    NpyFile f;
    std::string err;
    ASSERT_TRUE(f.open(path, GP_I64, err)) << err;
    EXPECT_EQ(f.shape(), (std::vector<int64_t>{2, 2}));
    EXPECT_EQ(contents<int64_t>(f), labels);
  }
  // Double quotes, no trailing comma, other key order.
  std::string path = dir / "q.npy";
  writeBytes(path, npyImage("{\"shape\": (4,), \"fortran_order\": False, "
                            "\"descr\": \"<i8\"}",
                            rawBytes(labels)));
  NpyFile f;
  std::string err;
  ASSERT_TRUE(f.open(path, GP_I64, err)) << err;
  EXPECT_EQ(contents<int64_t>(f), labels);
}

TEST(Npy, OverwriteIsAtomicAndFailedWriteLeavesNothing) {
  TempDir dir;
  std::string path = dir / "w.npy";
  writeF32(path, {1, 2, 3}, {3});
  writeF32(path, {4, 5}, {2});
  NpyFile f;
  std::string err;
  ASSERT_TRUE(f.open(path, GP_F32, err)) << err;
  EXPECT_EQ(contents<float>(f), (std::vector<float>{4, 5}));
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  float x = 1;
  int64_t shape = 1;
  EXPECT_FALSE(
      gpipe::npyWriteF32(dir / "no/such/dir/x.npy", &x, &shape, 1, err));
  EXPECT_NE(err.find("no/such/dir/x.npy.tmp"), std::string::npos) << err;
}

TEST(Npy, RejectsBadFiles) {
  TempDir dir;
  std::vector<float> six(6, 1.0f);
  std::string good = npyImage(npyDict("<f4", "(2, 3)"), rawBytes(six));
  auto check = [&](const std::string &name, const std::string &img,
                   const std::string &needle, gp_dtype dtype = GP_F32) {
    std::string path = dir / name;
    writeBytes(path, img);
    std::string err = openError(path, dtype);
    EXPECT_NE(err.find(needle), std::string::npos)
        << name << ": '" << err << "' lacks '" << needle << "'";
  };

  std::string badMagic = good;
  badMagic[1] = 'X';
  check("magic.npy", badMagic, "bad magic");
  check("text.npy", "hello world, this is not numpy", "bad magic");
  check("empty.npy", "", "empty");
  check("short.npy", good.substr(0, 9), "truncated");
  check("header.npy", good.substr(0, 40), "truncated");
  check("data.npy", good.substr(0, good.size() - 4), "truncated data");
  check("trailing.npy", good + "xxxx", "trailing");
  check("f8.npy", npyImage(npyDict("<f8", "(2, 3)"), std::string(48, '\0')),
        "dtype '<f8' does not match expected '<f4'");
  check("i8asf4.npy", npyImage(npyDict("<i8", "(6,)"), std::string(48, '\0')),
        "dtype '<i8' does not match expected '<f4'");
  check("f4asi8.npy", good, "dtype '<f4' does not match expected '<i8'",
        GP_I64);
  check("bigendian.npy", npyImage(npyDict(">f4", "(2, 3)"), rawBytes(six)),
        "big-endian dtype '>f4'");
  check("fortran.npy", npyImage(npyDict("<f4", "(2, 3)", true), rawBytes(six)),
        "fortran_order True");
  check("structured.npy",
        npyImage("{'descr': [('a', '<f4')], 'fortran_order': False, "
                 "'shape': (6,), }",
                 rawBytes(six)),
        "malformed");
  check("shape.npy", npyImage(npyDict("<f4", "(2, -3)"), rawBytes(six)),
        "malformed");
  check("nokey.npy",
        npyImage("{'descr': '<f4', 'shape': (6,), }", rawBytes(six)),
        "missing");
  std::string v9 = good;
  v9[6] = 9;
  check("version.npy", v9, "version 9.0");

  std::string err = openError(dir / "absent.npy");
  EXPECT_NE(err.find("cannot open"), std::string::npos) << err;
}

//===----------------------------------------------------------------------===//
// gemm, reduce_to, copy_blocks
//===----------------------------------------------------------------------===//

namespace {

struct GemmShape {
  int64_t M, N, K;
  float beta;
};

/// gp_gemm against a double reference for every transpose of `shape`, with
/// padded leading dimensions; beta 0 must ignore C, even NaN.
void checkGemmAllTransposes(GemmShape shape, const std::string &where) {
  for (int ta = 0; ta < 2; ++ta) {
    for (int tb = 0; tb < 2; ++tb) {
      const int64_t M = shape.M, N = shape.N, K = shape.K;
      // Stored shapes: A is [M,K] or [K,M], B is [K,N] or [N,K]; pad rows.
      int64_t aRows = ta ? K : M, aCols = ta ? M : K;
      int64_t bRows = tb ? N : K, bCols = tb ? K : N;
      int64_t lda = aCols + 3, ldb = bCols + 2, ldc = N + 4;
      std::vector<float> A = randomVec(aRows * lda, 1 + ta);
      std::vector<float> B = randomVec(bRows * ldb, 3 + tb);
      std::vector<float> C = randomVec(M * ldc, 5);
      if (shape.beta == 0.0f)
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < N; ++j)
            C[i * ldc + j] = NAN;
      std::vector<float> C0 = C;
      const float alpha = 1.5f, beta = shape.beta;
      gp_gemm(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta,
              C.data(), ldc);
      for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) {
          double s = 0;
          for (int64_t k = 0; k < K; ++k) {
            double a = ta ? A[k * lda + i] : A[i * lda + k];
            double b = tb ? B[j * ldb + k] : B[k * ldb + j];
            s += a * b;
          }
          double want =
              alpha * s + (beta == 0.0f ? 0.0 : beta * C0[i * ldc + j]);
          ASSERT_NEAR(C[i * ldc + j], want, 1e-4)
              << where << " M=" << M << " N=" << N << " K=" << K << " ta=" << ta
              << " tb=" << tb << " i=" << i << " j=" << j;
        }
        // Padding columns are untouched.
        for (int64_t j = N; j < ldc; ++j)
          ASSERT_EQ(C[i * ldc + j], C0[i * ldc + j]) << where;
      }
    }
  }
}

/// Sets GPIPE_CPU_GEMM (nullptr: unset) and applies it as deviceInit does.
void setGemmPolicy(const char *value) {
  if (value)
    setenv("GPIPE_CPU_GEMM", value, 1);
  else
    unsetenv("GPIPE_CPU_GEMM");
  std::string err;
  ASSERT_TRUE(gpipe::cpuGemmConfigure(err)) << err;
}

} // namespace

TEST(Kernels, GemmAllTransposes) {
  // The second shape (few rows, a wide transposed B) takes the transposed
  // product path.
  for (GemmShape shape :
       {GemmShape{3, 5, 4, -0.5f}, GemmShape{5, 40, 24, -0.5f},
        GemmShape{5, 40, 24, 1.0f}, GemmShape{6, 70, 33, 0.0f},
        GemmShape{20, 100, 90, 0.5f}, GemmShape{40, 170, 160, 0.0f}})
    checkGemmAllTransposes(shape, "default policy");
}

TEST(Kernels, GemmEveryLibraryAndThreadCount) {
  // Every GPIPE_CPU_GEMM policy gives the same products, on 1 and 3
  // threads: OpenBLAS splits C's rows into one slice per thread. The first
  // shape is large enough (2^24 multiply-adds, more than 64 rows) for auto
  // to send it to OpenBLAS on CPUs without AVX-512.
  const int saved = omp_get_max_threads();
  for (const char *policy : {"onednn", "openblas", "auto"})
    for (int threads : {1, 3}) {
      omp_set_num_threads(threads);
      setGemmPolicy(policy);
      std::string where =
          std::string(policy) + ", " + std::to_string(threads) + " threads";
      for (GemmShape shape :
           {GemmShape{1030, 160, 110, 0.0f}, GemmShape{1100, 300, 17, 0.5f},
            GemmShape{130, 50, 60, -1.0f}, GemmShape{7, 90, 40, 0.0f}})
        checkGemmAllTransposes(shape, where);
    }
  omp_set_num_threads(saved);
  setGemmPolicy(nullptr);
}

TEST(Kernels, GemmPolicyRejectsUnknownLibrary) {
  setenv("GPIPE_CPU_GEMM", "mkl", 1);
  std::string err;
  EXPECT_FALSE(gpipe::cpuGemmConfigure(err));
  EXPECT_NE(err.find("GPIPE_CPU_GEMM='mkl'"), std::string::npos) << err;
  setGemmPolicy(nullptr);
}

TEST(Kernels, GemmBetaZeroAndEmptyK) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> A = {1, 2, 3, 4}, B = {1, 0, 0, 1};
  std::vector<float> C(4, nan);
  gp_gemm(0, 0, 2, 2, 2, 1.0f, A.data(), 2, B.data(), 2, 0.0f, C.data(), 2);
  EXPECT_EQ(C, A);
  // K == 0: C = beta * C, with ld of the empty operands 0.
  std::vector<float> D = {1, 2, 3, 4};
  gp_gemm(0, 0, 2, 2, 0, 1.0f, nullptr, 0, nullptr, 2, 2.0f, D.data(), 2);
  EXPECT_EQ(D, (std::vector<float>{2, 4, 6, 8}));
  C.assign(4, nan);
  gp_gemm(0, 0, 2, 2, 0, 1.0f, nullptr, 0, nullptr, 2, 0.0f, C.data(), 2);
  EXPECT_EQ(C, (std::vector<float>(4, 0.0f)));
  // A single row with an arbitrary stride.
  std::vector<float> row = {1, 2}, out(3, 0.0f), mat = {1, 2, 3, 4, 5, 6};
  gp_gemm(0, 0, 1, 3, 2, 1.0f, row.data(), 0, mat.data(), 3, 0.0f, out.data(),
          0);
  EXPECT_EQ(out, (std::vector<float>{9, 12, 15}));
}

/// The sum (or, with `max`, the maximum) of `in` over the dims where
/// `outShape` has 1 and `inShape` not.
void naiveReduceTo(const std::vector<float> &in,
                   const std::vector<int64_t> &inShape,
                   std::vector<double> &out,
                   const std::vector<int64_t> &outShape, bool max = false) {
  size_t rank = inShape.size();
  int64_t outSize = 1;
  for (int64_t d : outShape)
    outSize *= d;
  out.assign(static_cast<size_t>(outSize), max ? -INFINITY : 0.0);
  std::vector<int64_t> idx(rank, 0);
  for (size_t flat = 0; flat < in.size(); ++flat) {
    int64_t rem = static_cast<int64_t>(flat), o = 0;
    for (size_t d = rank; d-- > 0;) {
      idx[d] = rem % inShape[d];
      rem /= inShape[d];
    }
    for (size_t d = 0; d < rank; ++d)
      o = o * outShape[d] + (outShape[d] == 1 ? 0 : idx[d]);
    out[o] = max ? std::max<double>(out[o], in[flat]) : out[o] + in[flat];
  }
}

// bf16 (the CPU's emulation of the CUDA target's --precision bf16): round to
// nearest even, keep NaN and infinities.
TEST(Kernels, CastBf16RoundsToNearestEven) {
  auto bits = [](float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
  };
  auto fromBits = [](uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  };
  const float in[] = {1.0f,
                      fromBits(0x3f808000u), // halfway, even below: down
                      fromBits(0x3f818000u), // halfway, odd below: up
                      fromBits(0x3f808001u), // above halfway: up
                      -2.5f,
                      std::numeric_limits<float>::infinity(),
                      std::numeric_limits<float>::quiet_NaN(),
                      fromBits(0x7f7fffffu)}; // FLT_MAX rounds to infinity
  uint16_t out[8];
  gp_cast_bf16(in, out, 8);
  EXPECT_EQ(out[0], 0x3f80);
  EXPECT_EQ(out[1], 0x3f80);
  EXPECT_EQ(out[2], 0x3f82);
  EXPECT_EQ(out[3], 0x3f81);
  EXPECT_EQ(out[4], bits(-2.5f) >> 16);
  EXPECT_EQ(out[5], 0x7f80);
  EXPECT_TRUE((out[6] & 0x7f80) == 0x7f80 && (out[6] & 0x7f) != 0);
  EXPECT_EQ(out[7], 0x7f80);
}

// gp_gemm_ex on the CPU: bias and relu epilogues, bf16 operands (rounded
// here, or the caller's copies) with fp32 products.
TEST(Kernels, GemmExEpiloguesAndBf16) {
  const int64_t M = 3, N = 4, K = 5;
  std::vector<float> A(M * K), B(N * K), bias(N);
  for (size_t i = 0; i < A.size(); ++i)
    A[i] = 0.1f * float(i) - 0.7f + 1e-3f * float(i % 3);
  for (size_t i = 0; i < B.size(); ++i)
    B[i] = 0.05f * float(i) - 0.4f + 1e-3f * float(i % 7);
  for (size_t i = 0; i < bias.size(); ++i)
    bias[i] = 0.2f * float(i) - 0.3f;
  auto round = [](float f) {
    uint16_t h;
    gp_cast_bf16(&f, &h, 1);
    uint32_t u = uint32_t(h) << 16;
    float r;
    std::memcpy(&r, &u, 4);
    return r;
  };
  for (int32_t math : {GP_MATH_F32, GP_MATH_BF16})
    for (int relu : {0, 1}) {
      std::vector<float> C(M * N, 7.0f);
      gp_gemm_ex(0, 1, M, N, K, 1.0f, A.data(), K, B.data(), K, 0.0f, C.data(),
                 N, bias.data(), relu, math, nullptr, nullptr);
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          double want = bias[j];
          for (int64_t k = 0; k < K; ++k) {
            float a = A[i * K + k], b = B[j * K + k];
            if (math == GP_MATH_BF16)
              a = round(a), b = round(b);
            want += double(a) * b;
          }
          if (relu && want < 0)
            want = 0;
          EXPECT_NEAR(C[i * N + j], want, 1e-5)
              << "math " << math << " relu " << relu << " at " << i << "," << j;
        }
    }
  // The caller's bf16 copy of B is used as is (here: all zeros).
  std::vector<uint16_t> zeros(N * K, 0);
  std::vector<float> C(M * N, 7.0f);
  gp_gemm_ex(0, 1, M, N, K, 1.0f, A.data(), K, B.data(), K, 0.0f, C.data(), N,
             nullptr, 0, GP_MATH_BF16, nullptr, zeros.data());
  for (float c : C)
    EXPECT_EQ(c, 0.0f);
}

// Batched GEMMs against a double reference: every transpose, broadcast batch
// dims (stride 0: A shared over the inner batch dim, B over the outer one),
// a batch that folds into one strided run and one that does not, small
// products (parallel over the batch) and a large one, and bf16 rounding.
TEST(Kernels, BatchGemmBroadcastMatchesReference) {
  struct Case {
    std::vector<int64_t> batch, aShape, bShape; // batch dims of A, B (1: bcast)
    int64_t M, N, K;
    int32_t math;
  };
  const Case cases[] = {
      {{3, 2}, {3, 2}, {3, 2}, 4, 5, 3, GP_MATH_F32},  // dense: one run
      {{3, 2}, {3, 1}, {1, 2}, 4, 5, 3, GP_MATH_F32},  // both broadcast
      {{2, 4}, {1, 4}, {2, 4}, 6, 7, 9, GP_MATH_TF32}, // A outer-broadcast
      {{5}, {5}, {1}, 2, 3, 1, GP_MATH_F32},           // B shared, K = 1
      {{2}, {2}, {2}, 70, 80, 90, GP_MATH_F32},        // large: serial loop
      {{2, 3}, {2, 3}, {1, 3}, 4, 4, 8, GP_MATH_BF16}, // bf16 operands
  };
  auto bf16 = [](float x) {
    uint16_t bits;
    gp_cast_bf16(&x, &bits, 1);
    uint32_t wide = uint32_t(bits) << 16;
    float out;
    std::memcpy(&out, &wide, sizeof out);
    return out;
  };
  unsigned seed = 11;
  for (const Case &c : cases)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        const int64_t rank = static_cast<int64_t>(c.batch.size());
        const int64_t M = c.M, N = c.N, K = c.K;
        auto strides = [&](const std::vector<int64_t> &shape, int64_t matrix) {
          std::vector<int64_t> st(rank, 0);
          int64_t s = matrix;
          for (int64_t d = rank - 1; d >= 0; --d) {
            if (shape[d] != 1)
              st[d] = s;
            s *= shape[d];
          }
          return std::make_pair(st, s);
        };
        auto [aStride, aSize] = strides(c.aShape, M * K);
        auto [bStride, bSize] = strides(c.bShape, K * N);
        int64_t total = 1;
        for (int64_t d : c.batch)
          total *= d;
        std::vector<float> A = randomVec(aSize, seed++),
                           B = randomVec(bSize, seed++);
        std::vector<float> C(total * M * N, NAN);
        gp_batch_gemm(ta, tb, M, N, K, A.data(), B.data(), C.data(),
                      static_cast<int32_t>(rank), c.batch.data(),
                      aStride.data(), bStride.data(), c.math);
        for (int64_t i = 0; i < total; ++i) {
          int64_t rest = i, aOff = 0, bOff = 0;
          for (int64_t d = rank - 1; d >= 0; --d) {
            int64_t idx = rest % c.batch[d];
            rest /= c.batch[d];
            aOff += idx * aStride[d];
            bOff += idx * bStride[d];
          }
          for (int64_t m = 0; m < M; ++m)
            for (int64_t n = 0; n < N; ++n) {
              double want = 0;
              for (int64_t k = 0; k < K; ++k) {
                float a = A[aOff + (ta ? k * M + m : m * K + k)];
                float b = B[bOff + (tb ? n * K + k : k * N + n)];
                if (c.math == GP_MATH_BF16) {
                  a = bf16(a);
                  b = bf16(b);
                }
                want += static_cast<double>(a) * b;
              }
              ASSERT_NEAR(C[(i * M + m) * N + n], want, 1e-4)
                  << "case M=" << M << " N=" << N << " K=" << K << " ta=" << ta
                  << " tb=" << tb << " batch " << i << " at " << m << "," << n;
            }
        }
      }
}

/// gp_softmax and gp_softmax_bwd (or, with `log`, gp_log_softmax and
/// gp_log_softmax_bwd) on [outer, n, inner] views against a double
/// reference, out of place and in place (y over x, dx over dy).
static void checkSoftmaxKernels(bool log) {
  struct Case {
    int64_t outer, n, inner;
  };
  for (Case c : {Case{4, 6, 1}, Case{3, 5, 4}, Case{1, 7, 2}, Case{2, 1, 3}}) {
    const int64_t size = c.outer * c.n * c.inner;
    std::vector<float> x = randomVec(static_cast<size_t>(size), 5);
    x[0] = 90.0f; // exp(90) overflows float without the max shift
    std::vector<float> dy = randomVec(static_cast<size_t>(size), 6);
    auto run = [&](const float *in, float *out, const float *grad, float *dx) {
      if (log) {
        gp_log_softmax(in, out, c.outer, c.n, c.inner);
        gp_log_softmax_bwd(out, grad, dx, c.outer, c.n, c.inner);
      } else {
        gp_softmax(in, out, c.outer, c.n, c.inner);
        gp_softmax_bwd(out, grad, dx, c.outer, c.n, c.inner);
      }
    };
    std::vector<float> y(size), dx(size);
    run(x.data(), y.data(), dy.data(), dx.data());
    for (int64_t o = 0; o < c.outer; ++o)
      for (int64_t j = 0; j < c.inner; ++j) {
        auto at = [&](int64_t k) { return (o * c.n + k) * c.inner + j; };
        double m = -1e300, s = 0.0, sum = 0.0, dot = 0.0, sumDy = 0.0;
        for (int64_t k = 0; k < c.n; ++k) {
          m = std::max(m, static_cast<double>(x[at(k)]));
          sumDy += dy[at(k)];
        }
        for (int64_t k = 0; k < c.n; ++k)
          s += std::exp(x[at(k)] - m);
        for (int64_t k = 0; k < c.n; ++k) {
          const double p = std::exp(x[at(k)] - m) / s;
          EXPECT_NEAR(y[at(k)], log ? std::log(p) : p, log ? 1e-5 : 1e-6)
              << "y at " << at(k);
          sum += p;
          dot += static_cast<double>(dy[at(k)]) * p;
        }
        EXPECT_NEAR(sum, 1.0, 1e-5);
        for (int64_t k = 0; k < c.n; ++k) {
          const double p = std::exp(x[at(k)] - m) / s;
          const double want =
              log ? dy[at(k)] - p * sumDy : p * (dy[at(k)] - dot);
          EXPECT_NEAR(dx[at(k)], want, 1e-5) << "dx at " << at(k);
        }
      }
    std::vector<float> xy = x, dydx = dy;
    run(xy.data(), xy.data(), dydx.data(), dydx.data());
    EXPECT_EQ(xy, y);
    EXPECT_EQ(dydx, dx);
  }
}

// Softmax: rows sum to 1, large inputs do not overflow (the max is
// subtracted), and dx = y * (dy - sum(dy * y)) along the axis.
TEST(Kernels, SoftmaxAndGradientMatchReference) { checkSoftmaxKernels(false); }

// Log-softmax: y = x - logsumexp(x) even where exp(x) overflows float, and
// dx = dy - exp(y) * sum(dy) along the axis.
TEST(Kernels, LogSoftmaxAndGradientMatchReference) {
  checkSoftmaxKernels(true);
}

/// Layer normalization of one row in double: y = xhat * scale + bias, and the
/// input gradient of sum(dy * y) by torch's formula.
struct LayerNormRef {
  double mean = 0, rstd = 0;
  std::vector<double> y, dx;
};
static LayerNormRef layerNormRow(const float *x, const float *scale,
                                 const float *bias, const float *dy, int64_t n,
                                 double eps) {
  LayerNormRef r;
  for (int64_t j = 0; j < n; ++j)
    r.mean += x[j];
  r.mean /= n;
  double var = 0;
  for (int64_t j = 0; j < n; ++j)
    var += (x[j] - r.mean) * (x[j] - r.mean);
  r.rstd = 1.0 / std::sqrt(var / n + eps);
  double sg = 0, sgx = 0;
  for (int64_t j = 0; j < n; ++j) {
    const double xhat = (x[j] - r.mean) * r.rstd;
    r.y.push_back(xhat * scale[j] + (bias ? bias[j] : 0.0));
    sg += static_cast<double>(dy[j]) * scale[j];
    sgx += static_cast<double>(dy[j]) * scale[j] * xhat;
  }
  for (int64_t j = 0; j < n; ++j) {
    const double xhat = (x[j] - r.mean) * r.rstd;
    r.dx.push_back(r.rstd * (static_cast<double>(dy[j]) * scale[j] - sg / n -
                             xhat * sgx / n));
  }
  return r;
}

// The reference's dx is the gradient of sum(dy * y): central differences in
// double agree with it.
TEST(Kernels, LayerNormReferenceGradientIsTheDerivative) {
  const int64_t n = 7;
  std::vector<float> x = randomVec(n, 11), s = randomVec(n, 12, 0.5f, 1.5f),
                     dy = randomVec(n, 13);
  const LayerNormRef ref =
      layerNormRow(x.data(), s.data(), nullptr, dy.data(), n, 1e-5);
  for (int64_t k = 0; k < n; ++k) {
    // x[k] +- h, with the row recomputed in double through a float copy
    // would lose the difference: perturb by an exactly representable step.
    const float h = 1.0f / 1024;
    auto loss = [&](float delta) {
      std::vector<float> xp = x;
      xp[k] += delta;
      const LayerNormRef r =
          layerNormRow(xp.data(), s.data(), nullptr, dy.data(), n, 1e-5);
      double l = 0;
      for (int64_t j = 0; j < n; ++j)
        l += dy[j] * r.y[j];
      return l;
    };
    const double fd = (loss(h) - loss(-h)) / (2.0 * h);
    EXPECT_NEAR(fd, ref.dx[k], 1e-3) << "dx at " << k;
  }
}

// gp_layer_norm, gp_layer_norm_bwd and gp_layer_norm_scale_bwd on [rows, n]
// views against the double reference: rows whose mean (100) is large against
// their spread (the variance is taken around the mean, not as E[x^2] -
// mean^2), with and without bias, a length-1 row (y = bias, dx = 0), a case
// large enough for OpenMP with more than one column block; in place (y = x).
// dscale is summed in row order: exactly the serial sum.
TEST(Kernels, LayerNormAndGradientsMatchReference) {
  struct Case {
    int64_t rows, n;
    bool bias;
  };
  for (Case c : {Case{4, 6, true}, Case{3, 33, false}, Case{5, 1, true},
                 Case{128, 300, true}}) {
    const int64_t size = c.rows * c.n;
    std::vector<float> x = randomVec(size, 21, 99.f, 101.f);
    const std::vector<float> s = randomVec(c.n, 22, 0.5f, 1.5f),
                             b = randomVec(c.n, 23), dy = randomVec(size, 24);
    const float *bias = c.bias ? b.data() : nullptr;
    const float eps = 1e-5f;
    std::vector<float> y(size), mean(c.rows), rstd(c.rows), dx(size), ds(c.n);
    gp_layer_norm(x.data(), s.data(), bias, y.data(), mean.data(), rstd.data(),
                  c.rows, c.n, eps);
    gp_layer_norm_bwd(x.data(), mean.data(), rstd.data(), s.data(), dy.data(),
                      dx.data(), c.rows, c.n);
    gp_layer_norm_scale_bwd(x.data(), mean.data(), rstd.data(), dy.data(),
                            ds.data(), c.rows, c.n);
    std::vector<double> dsRef(c.n, 0.0);
    for (int64_t r = 0; r < c.rows; ++r) {
      const int64_t o = r * c.n;
      const LayerNormRef ref =
          layerNormRow(x.data() + o, s.data(), bias, dy.data() + o, c.n, eps);
      EXPECT_NEAR(mean[r], ref.mean, 1e-4) << "mean of row " << r;
      EXPECT_NEAR(rstd[r], ref.rstd, 1e-5 * ref.rstd) << "rstd of row " << r;
      for (int64_t j = 0; j < c.n; ++j) {
        EXPECT_NEAR(y[o + j], ref.y[j], 2e-4) << "y at " << o + j;
        EXPECT_NEAR(dx[o + j], ref.dx[j], 1e-4 * std::max(1.0, ref.rstd))
            << "dx at " << o + j;
        dsRef[j] +=
            static_cast<double>(dy[o + j]) * ((x[o + j] - mean[r]) * rstd[r]);
      }
      if (c.n == 1)
        EXPECT_EQ(dx[o], 0.0f);
    }
    for (int64_t j = 0; j < c.n; ++j)
      EXPECT_EQ(ds[j], static_cast<float>(dsRef[j])) << "dscale at " << j;
    // In place: y written over x gives the same values.
    std::vector<float> inPlace = x;
    gp_layer_norm(inPlace.data(), s.data(), bias, inPlace.data(), mean.data(),
                  rstd.data(), c.rows, c.n, eps);
    EXPECT_EQ(inPlace, y);
  }
}

/// Attention of one block in double, the textbook way: S = scale * q k^T
/// masked, P = softmax(S), out = P v; the gradient through softmax's own
/// formula dS = P * (dP - rowsum(P * dP)) (not the kernel's D = rowsum(dout *
/// out)).
struct AttentionRef {
  std::vector<double> out, lse, dq, dk, dv;
};
static AttentionRef attentionRef(const float *q, const float *k, const float *v,
                                 const float *mask, const float *dout,
                                 int64_t Tq, int64_t Tk, int64_t d, int64_t dv,
                                 double scale) {
  AttentionRef r;
  r.out.assign(Tq * dv, 0.0);
  r.lse.assign(Tq, 0.0);
  r.dq.assign(Tq * d, 0.0);
  r.dk.assign(Tk * d, 0.0);
  r.dv.assign(Tk * dv, 0.0);
  std::vector<double> p(Tq * Tk), dp(Tq * Tk);
  for (int64_t i = 0; i < Tq; ++i) {
    double m = -INFINITY;
    for (int64_t j = 0; j < Tk; ++j) {
      double s = 0.0;
      for (int64_t c = 0; c < d; ++c)
        s += static_cast<double>(q[i * d + c]) * k[j * d + c];
      s = mask && mask[i * Tk + j] != 0.0f ? -INFINITY : s * scale;
      p[i * Tk + j] = s;
      m = std::max(m, s);
    }
    double sum = 0.0;
    for (int64_t j = 0; j < Tk; ++j)
      sum += std::exp(p[i * Tk + j] - m);
    r.lse[i] = m + std::log(sum);
    for (int64_t j = 0; j < Tk; ++j)
      p[i * Tk + j] = std::exp(p[i * Tk + j] - m) / sum;
  }
  for (int64_t i = 0; i < Tq; ++i) {
    double pdp = 0.0;
    for (int64_t j = 0; j < Tk; ++j) {
      double g = 0.0;
      for (int64_t c = 0; c < dv; ++c) {
        r.out[i * dv + c] += p[i * Tk + j] * v[j * dv + c];
        g += static_cast<double>(dout[i * dv + c]) * v[j * dv + c];
        r.dv[j * dv + c] += p[i * Tk + j] * dout[i * dv + c];
      }
      dp[i * Tk + j] = g;
      pdp += p[i * Tk + j] * g;
    }
    for (int64_t j = 0; j < Tk; ++j) {
      const double ds = p[i * Tk + j] * (dp[i * Tk + j] - pdp) * scale;
      for (int64_t c = 0; c < d; ++c) {
        r.dq[i * d + c] += ds * k[j * d + c];
        r.dk[j * d + c] += ds * q[i * d + c];
      }
    }
  }
  return r;
}

// gp_attention_fwd / gp_attention_bwd against the double reference, per
// block: without a mask, with a causal one, Tq != Tk and d != dv, one block
// and enough blocks for every OpenMP thread.
TEST(Kernels, AttentionAndGradientMatchReference) {
  struct Case {
    int64_t batch, Tq, Tk, d, dv;
    bool causal;
  };
  for (Case c : {Case{1, 4, 4, 3, 3, false}, Case{6, 8, 8, 4, 4, true},
                 Case{3, 5, 7, 6, 2, false}, Case{16, 64, 64, 32, 32, true},
                 Case{2, 3, 9, 5, 8, true}}) {
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.d));
    const int64_t nq = c.batch * c.Tq * c.d, nk = c.batch * c.Tk * c.d,
                  nv = c.batch * c.Tk * c.dv, no = c.batch * c.Tq * c.dv;
    const std::vector<float> q = randomVec(nq, 31, -2.f, 2.f),
                             k = randomVec(nk, 32, -2.f, 2.f),
                             v = randomVec(nv, 33), dout = randomVec(no, 34);
    // Causal for Tq <= Tk: query i sees keys j <= i + Tk - Tq.
    std::vector<float> mask(c.Tq * c.Tk, 0.0f);
    for (int64_t i = 0; i < c.Tq; ++i)
      for (int64_t j = i + c.Tk - c.Tq + 1; j < c.Tk; ++j)
        mask[i * c.Tk + j] = 1.0f;
    const float *m = c.causal ? mask.data() : nullptr;
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> out(no, nan), lse(c.batch * c.Tq, nan), dq(nq, nan),
        dk(nk, nan), dv(nv, nan);
    gp_attention_fwd(q.data(), k.data(), v.data(), m, out.data(), lse.data(),
                     c.batch, c.Tq, c.Tk, c.d, c.dv, scale);
    gp_attention_bwd(q.data(), k.data(), v.data(), m, out.data(), lse.data(),
                     dout.data(), dq.data(), dk.data(), dv.data(), c.batch,
                     c.Tq, c.Tk, c.d, c.dv, scale);
    for (int64_t b = 0; b < c.batch; ++b) {
      const AttentionRef ref = attentionRef(
          q.data() + b * c.Tq * c.d, k.data() + b * c.Tk * c.d,
          v.data() + b * c.Tk * c.dv, m, dout.data() + b * c.Tq * c.dv, c.Tq,
          c.Tk, c.d, c.dv, scale);
      auto near = [&](const std::vector<float> &got, int64_t offset,
                      const std::vector<double> &want, const char *what) {
        for (size_t i = 0; i < want.size(); ++i)
          ASSERT_NEAR(got[offset + i], want[i],
                      2e-5 * std::max(1.0, std::fabs(want[i])))
              << what << " of block " << b << " at " << i << " (batch "
              << c.batch << ", Tq " << c.Tq << ", Tk " << c.Tk << ")";
      };
      near(out, b * c.Tq * c.dv, ref.out, "out");
      near(lse, b * c.Tq, ref.lse, "lse");
      near(dq, b * c.Tq * c.d, ref.dq, "dq");
      near(dk, b * c.Tk * c.d, ref.dk, "dk");
      near(dv, b * c.Tk * c.dv, ref.dv, "dv");
    }
  }
}

// A fully masked score row is NaN, as the unfused path's softmax of a row of
// -inf (gp_softmax): the row's output and log-sum-exp are NaN, the other
// rows are unaffected; in the gradient the row's dq is NaN and, since every
// key sums over it, so are dk and dv (as the unfused batched products).
TEST(Kernels, AttentionFullyMaskedRowIsNaNLikeTheSoftmax) {
  const int64_t Tq = 3, Tk = 4, d = 2;
  const std::vector<float> q = randomVec(Tq * d, 41), k = randomVec(Tk * d, 42),
                           v = randomVec(Tk * d, 43),
                           dout = randomVec(Tq * d, 44);
  std::vector<float> mask(Tq * Tk, 0.0f);
  std::fill(mask.begin() + Tk, mask.begin() + 2 * Tk, 1.0f); // row 1
  std::vector<float> out(Tq * d), lse(Tq), dq(Tq * d), dk(Tk * d), dv(Tk * d);
  gp_attention_fwd(q.data(), k.data(), v.data(), mask.data(), out.data(),
                   lse.data(), 1, Tq, Tk, d, d, 1.0f);
  gp_attention_bwd(q.data(), k.data(), v.data(), mask.data(), out.data(),
                   lse.data(), dout.data(), dq.data(), dk.data(), dv.data(), 1,
                   Tq, Tk, d, d, 1.0f);
  std::vector<float> ninf(Tk, -INFINITY), softmax(Tk);
  gp_softmax(ninf.data(), softmax.data(), 1, Tk, 1);
  EXPECT_TRUE(std::isnan(softmax[0])) << "the unfused softmax of -inf";
  for (int64_t i = 0; i < Tq; ++i) {
    EXPECT_EQ(std::isnan(lse[i]), i == 1) << "lse row " << i;
    for (int64_t c = 0; c < d; ++c) {
      EXPECT_EQ(std::isnan(out[i * d + c]), i == 1) << "out row " << i;
      EXPECT_EQ(std::isnan(dq[i * d + c]), i == 1) << "dq row " << i;
    }
  }
  for (int64_t i = 0; i < Tk * d; ++i) {
    EXPECT_TRUE(std::isnan(dk[i])) << "dk at " << i;
    EXPECT_TRUE(std::isnan(dv[i])) << "dv at " << i;
  }
}

// Gather (embedding rows) and its gradient, against a host reference:
// negative indices count from the end, repeated indices add up, an index out
// of range reads zeros and adds nothing; the gradient is bitwise the same
// with 1 and 4 OpenMP threads (sums run over the positions in order).
TEST(Kernels, GatherAndScatterAddMatchReference) {
  for (int64_t width : {int64_t(3), int64_t(40)}) {
    const int64_t rows = 7, n = 4000;
    std::vector<float> table = randomVec(static_cast<size_t>(rows * width), 8);
    std::vector<float> dout = randomVec(static_cast<size_t>(n * width), 9);
    std::vector<int64_t> idx(n);
    for (int64_t i = 0; i < n; ++i)
      idx[i] = (i * 5) % 15 - 7; // -7..7: 7 is out of range, the rest repeat
    std::vector<float> out(n * width, 42.0f), ref(n * width);
    std::vector<double> dref(rows * width, 0.0);
    for (int64_t i = 0; i < n; ++i) {
      int64_t r = idx[i] < 0 ? idx[i] + rows : idx[i];
      for (int64_t c = 0; c < width; ++c) {
        ref[i * width + c] = r < rows ? table[r * width + c] : 0.0f;
        if (r < rows)
          dref[r * width + c] += dout[i * width + c];
      }
    }
    gp_gather(table.data(), idx.data(), out.data(), n, rows, width);
    EXPECT_EQ(out, ref) << "width " << width;
    std::vector<float> d1(rows * width, 42.0f), d4(rows * width, -1.0f);
    omp_set_num_threads(1);
    gp_scatter_add(dout.data(), idx.data(), d1.data(), n, rows, width);
    omp_set_num_threads(4);
    gp_scatter_add(dout.data(), idx.data(), d4.data(), n, rows, width);
    omp_set_num_threads(1);
    EXPECT_EQ(d1, d4) << "width " << width;
    for (int64_t k = 0; k < rows * width; ++k)
      EXPECT_NEAR(d1[k], dref[k], 1e-3 * (1.0 + std::abs(dref[k])))
          << "dtable at " << k;
  }
}

struct ReduceCase {
  std::vector<int64_t> in, out;
};

/// Shapes for the reduction kernels: rows, columns, several dims, size-1
/// dims, nothing reduced.
static const std::vector<ReduceCase> &reduceCases() {
  static const std::vector<ReduceCase> cases = {
      {{4, 5}, {1, 5}},
      {{4, 5}, {4, 1}},
      {{4, 5}, {1, 1}},
      {{2, 3, 4}, {1, 3, 1}},
      {{2, 3, 4}, {2, 1, 4}},
      {{2, 3, 4}, {1, 1, 1}},
      {{2, 3, 4}, {2, 3, 1}},
      {{2, 1, 3, 4}, {1, 1, 3, 1}},
      {{3, 4, 5, 6}, {3, 1, 5, 1}},
      {{3, 4, 5, 6}, {1, 4, 1, 6}},
      {{2, 3, 2, 3, 2}, {2, 1, 1, 3, 1}},
      {{2, 3}, {2, 3}},
      {{7}, {1}},
      {{1, 6}, {1, 1}},
  };
  return cases;
}

TEST(Kernels, ReduceToMatchesNaive) {
  for (const ReduceCase &c : reduceCases()) {
    int64_t n = 1;
    for (int64_t d : c.in)
      n *= d;
    std::vector<float> in = randomVec(static_cast<size_t>(n), 11);
    std::vector<double> want;
    naiveReduceTo(in, c.in, want, c.out);
    std::vector<float> got(want.size(), 123.0f);
    gp_reduce_to(in.data(), c.in.data(), got.data(), c.out.data(),
                 static_cast<int32_t>(c.in.size()));
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_NEAR(got[i], want[i], 1e-5)
          << "in " << gpipe::shapeToString(c.in) << " out "
          << gpipe::shapeToString(c.out) << " at " << i;
  }
}

// The maximum over the broadcast dims, exact: ties (values drawn from a few
// levels), and a NaN reaches the maximum it is part of (torch's amax).
TEST(Kernels, ReduceMaxMatchesNaive) {
  for (const ReduceCase &c : reduceCases()) {
    int64_t n = 1;
    for (int64_t d : c.in)
      n *= d;
    std::vector<float> in = randomVec(static_cast<size_t>(n), 12);
    for (float &v : in)
      v = std::round(v * 3.0f); // -3..3: many ties
    std::vector<double> want;
    naiveReduceTo(in, c.in, want, c.out, /*max=*/true);
    std::vector<float> got(want.size(), 123.0f);
    gp_reduce_max(in.data(), c.in.data(), got.data(), c.out.data(),
                  static_cast<int32_t>(c.in.size()));
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_EQ(got[i], want[i])
          << "in " << gpipe::shapeToString(c.in) << " out "
          << gpipe::shapeToString(c.out) << " at " << i;
  }
  // [2, 3] -> [2, 1] with a NaN in row 1 (not the first element).
  std::vector<float> x = {1, 5, 2, 4, NAN, 3}, y(2);
  std::vector<int64_t> in = {2, 3}, out = {2, 1};
  gp_reduce_max(x.data(), in.data(), y.data(), out.data(), 2);
  EXPECT_EQ(y[0], 5.0f);
  EXPECT_TRUE(std::isnan(y[1]));
  // Rank 0 is a copy.
  float s = -2.5f, t = 0;
  gp_reduce_max(&s, nullptr, &t, nullptr, 0);
  EXPECT_EQ(t, -2.5f);
}

TEST(Kernels, ReduceToEdgeCases) {
  // Rank 0 is a copy.
  float x = 3.5f, y = 0;
  gp_reduce_to(&x, nullptr, &y, nullptr, 0);
  EXPECT_EQ(y, 3.5f);
  // Broadcasting 1 -> 0: the sum over an empty dim is zero.
  std::vector<int64_t> in = {0, 3}, out = {1, 3};
  std::vector<float> got(3, 9.0f);
  gp_reduce_to(nullptr, in.data(), got.data(), out.data(), 2);
  EXPECT_EQ(got, (std::vector<float>(3, 0.0f)));
}

TEST(Kernels, CopyBlocks) {
  // Concat of [2,2] and [2,3] along axis 1 into [2,5], then slice back.
  std::vector<float> a = {1, 2, 3, 4}, b = {5, 6, 7, 8, 9, 10}, cat(10, 0);
  gp_copy_blocks(cat.data(), 5, a.data(), 2, 2, 2, sizeof(float));
  gp_copy_blocks(cat.data() + 2, 5, b.data(), 3, 2, 3, sizeof(float));
  EXPECT_EQ(cat, (std::vector<float>{1, 2, 5, 6, 7, 3, 4, 8, 9, 10}));
  std::vector<float> back(6, 0);
  gp_copy_blocks(back.data(), 3, cat.data() + 2, 5, 2, 3, sizeof(float));
  EXPECT_EQ(back, b);
  // Contiguous fast path with 8-byte elements.
  std::vector<int64_t> src = {1, 2, 3, 4}, dst(4, 0);
  gp_copy_blocks(dst.data(), 2, src.data(), 2, 2, 2, sizeof(int64_t));
  EXPECT_EQ(dst, src);
}

//===----------------------------------------------------------------------===//
// Softmax cross-entropy
//===----------------------------------------------------------------------===//

double refXent(const std::vector<float> &logits,
               const std::vector<int64_t> &labels, int64_t C, bool hasIgnore,
               int64_t ignoreIndex, std::vector<double> *logProb = nullptr) {
  int64_t N = static_cast<int64_t>(labels.size());
  double total = 0;
  int64_t count = 0;
  if (logProb)
    logProb->resize(logits.size());
  for (int64_t i = 0; i < N; ++i) {
    double mx = -INFINITY, s = 0;
    for (int64_t j = 0; j < C; ++j)
      mx = std::max(mx, static_cast<double>(logits[i * C + j]));
    for (int64_t j = 0; j < C; ++j)
      s += std::exp(logits[i * C + j] - mx);
    double lse = mx + std::log(s);
    if (logProb)
      for (int64_t j = 0; j < C; ++j)
        (*logProb)[i * C + j] = logits[i * C + j] - lse;
    if (hasIgnore && labels[i] == ignoreIndex)
      continue;
    total += lse - logits[i * C + labels[i]];
    ++count;
  }
  return count ? total / static_cast<double>(count) : NAN;
}

TEST(SoftmaxXent, ForwardMatchesDoubleReference) {
  const int64_t N = 6, C = 7;
  std::vector<float> logits = randomVec(N * C, 21, -4.f, 4.f);
  // Large logits must not overflow.
  for (int64_t j = 0; j < C; ++j)
    logits[2 * C + j] += 500.f;
  std::vector<int64_t> labels = {0, 6, 3, 2, 5, 1};
  float loss = 0;
  std::vector<float> logProb(N * C);
  gp_softmax_xent_fwd(logits.data(), labels.data(), N, C, 0, -100, 0, &loss,
                      logProb.data());
  std::vector<double> refLogProb;
  double want = refXent(logits, labels, C, false, -100, &refLogProb);
  EXPECT_NEAR(loss, want, 1e-6 * std::max(1.0, std::abs(want)));
  for (size_t i = 0; i < logProb.size(); ++i)
    EXPECT_NEAR(logProb[i], refLogProb[i], 1e-4) << i;
  // log_prob is optional.
  float loss2 = 0;
  gp_softmax_xent_fwd(logits.data(), labels.data(), N, C, 0, -100, 0, &loss2,
                      nullptr);
  EXPECT_EQ(loss, loss2);
}

// Scores far below their row's maximum (a trained LM's vocabulary): exp()
// of them is flushed to 0 below -87 (under FLT_MIN), which changes neither
// the loss nor the gradient beyond rounding, even for a label there (its
// log-probability comes from the score, not from its exp); NaN stays NaN.
TEST(SoftmaxXent, ScoresFarBelowTheMaximum) {
  const int64_t N = 3, C = 40;
  std::vector<float> logits = randomVec(N * C, 55, -2.f, 2.f);
  for (int64_t j = 0; j < C; j += 2) // half of every row 86..200 below
    for (int64_t i = 0; i < N; ++i)
      logits[i * C + j] -= 86.f + 3.f * static_cast<float>(j);
  std::vector<int64_t> labels = {0, 1, 38}; // rows 0 and 2: a far label
  float loss = 0;
  std::vector<float> logProb(N * C);
  gp_softmax_xent_fwd(logits.data(), labels.data(), N, C, 0, -100, 0, &loss,
                      logProb.data());
  std::vector<double> refLogProb;
  double want = refXent(logits, labels, C, false, -100, &refLogProb);
  EXPECT_NEAR(loss, want, 1e-5 * std::max(1.0, std::abs(want)));
  for (size_t i = 0; i < logProb.size(); ++i)
    EXPECT_NEAR(logProb[i], refLogProb[i], 1e-4 * std::max(1.0, std::abs(refLogProb[i])))
        << i;
  const float dloss = 1.0f;
  std::vector<float> grad(N * C);
  gp_softmax_xent_bwd(logits.data(), labels.data(), N, C, 0, -100, 0, &dloss,
                      grad.data());
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < C; ++j) {
      double p = std::exp(refLogProb[i * C + j]);
      double g = (p - (labels[i] == j ? 1.0 : 0.0)) / static_cast<double>(N);
      EXPECT_NEAR(grad[i * C + j], g, 1e-6) << i << "," << j;
    }
  logits[C + 5] = NAN;
  gp_softmax_xent_fwd(logits.data(), labels.data(), N, C, 0, -100, 0, &loss,
                      nullptr);
  EXPECT_TRUE(std::isnan(loss));
}

TEST(SoftmaxXent, BackwardMatchesFiniteDifferences) {
  const int64_t N = 4, C = 5;
  std::vector<float> logits = randomVec(N * C, 33, -2.f, 2.f);
  for (int hasIgnore : {0, 1}) {
    std::vector<int64_t> labels = {1, hasIgnore ? -100 : 2, 4, 0};
    const float dloss = 1.7f;
    std::vector<float> grad(N * C);
    gp_softmax_xent_bwd(logits.data(), labels.data(), N, C, hasIgnore, -100, 0,
                        &dloss, grad.data());
    const float h = 1e-2f;
    for (int64_t k = 0; k < N * C; ++k) {
      std::vector<float> lp = logits, lm = logits;
      lp[k] += h;
      lm[k] -= h;
      float fp, fm;
      gp_softmax_xent_fwd(lp.data(), labels.data(), N, C, hasIgnore, -100, 0,
                          &fp, nullptr);
      gp_softmax_xent_fwd(lm.data(), labels.data(), N, C, hasIgnore, -100, 0,
                          &fm, nullptr);
      double fd = dloss * (static_cast<double>(fp) - fm) / (2.0 * h);
      EXPECT_NEAR(grad[k], fd, 2e-3) << "hasIgnore=" << hasIgnore << " k=" << k;
    }
  }
}

TEST(SoftmaxXent, IgnoreIndex) {
  const int64_t N = 4, C = 3;
  std::vector<float> logits = randomVec(N * C, 44);
  std::vector<int64_t> labels = {2, -100, 0, -100};
  float loss;
  gp_softmax_xent_fwd(logits.data(), labels.data(), N, C, 1, -100, 0, &loss,
                      nullptr);
  // The mean is over the two counted samples only.
  EXPECT_NEAR(loss, refXent(logits, labels, C, true, -100), 1e-6);
  std::vector<float> only = {logits[0], logits[1], logits[2],
                             logits[6], logits[7], logits[8]};
  EXPECT_NEAR(loss, refXent(only, {2, 0}, C, false, 0), 1e-6);

  float one = 1.0f;
  std::vector<float> grad(N * C, 5.0f);
  gp_softmax_xent_bwd(logits.data(), labels.data(), N, C, 1, -100, 0, &one,
                      grad.data());
  for (int64_t j = 0; j < C; ++j) {
    EXPECT_EQ(grad[1 * C + j], 0.0f);
    EXPECT_EQ(grad[3 * C + j], 0.0f);
  }
  // Counted rows are (softmax - onehot) / count, with count = 2.
  for (int64_t i : {0, 2}) {
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < C; ++j)
      mx = std::max(mx, static_cast<double>(logits[i * C + j]));
    for (int64_t j = 0; j < C; ++j)
      sum += std::exp(logits[i * C + j] - mx);
    for (int64_t j = 0; j < C; ++j) {
      double p = std::exp(logits[i * C + j] - mx) / sum;
      EXPECT_NEAR(grad[i * C + j], (p - (j == labels[i])) / 2, 1e-6)
          << "row " << i << " col " << j;
    }
  }

  // A label equal to ignore_index counts when has_ignore is 0.
  std::vector<int64_t> plain = {2, 1, 0, 1};
  gp_softmax_xent_fwd(logits.data(), plain.data(), N, C, 0, 1, 0, &loss,
                      nullptr);
  EXPECT_NEAR(loss, refXent(logits, plain, C, false, 0), 1e-6);

  // Everything ignored: NaN loss (as torch), zero gradient.
  std::vector<int64_t> none(N, 7);
  gp_softmax_xent_fwd(logits.data(), none.data(), N, C, 1, 7, 0, &loss,
                      nullptr);
  EXPECT_TRUE(std::isnan(loss));
  gp_softmax_xent_bwd(logits.data(), none.data(), N, C, 1, 7, 0, &one,
                      grad.data());
  EXPECT_EQ(grad, std::vector<float>(N * C, 0.0f));

  // An out-of-range label poisons the loss instead of reading out of bounds.
  std::vector<int64_t> bad = {0, 3, 1, 2};
  gp_softmax_xent_fwd(logits.data(), bad.data(), N, C, 0, -100, 0, &loss,
                      nullptr);
  EXPECT_TRUE(std::isnan(loss));
}

// Micro-batching: each part divides its sum by the whole batch's count
// (norm), so the parts' losses and gradients add up to the full batch's.
TEST(SoftmaxXent, NormSplitsTheBatch) {
  const int64_t N = 6, C = 5, H = N / 2;
  std::vector<float> logits = randomVec(N * C, 55, -3.f, 3.f);
  for (int hasIgnore : {0, 1}) {
    std::vector<int64_t> labels = {4, hasIgnore ? -100 : 0, 2,
                                   1, hasIgnore ? -100 : 3, 0};
    double count = hasIgnore ? 4 : 6;
    float whole = 0, first = 0, second = 0;
    gp_softmax_xent_fwd(logits.data(), labels.data(), N, C, hasIgnore, -100, 0,
                        &whole, nullptr);
    gp_softmax_xent_fwd(logits.data(), labels.data(), H, C, hasIgnore, -100,
                        count, &first, nullptr);
    gp_softmax_xent_fwd(logits.data() + H * C, labels.data() + H, H, C,
                        hasIgnore, -100, count, &second, nullptr);
    EXPECT_NEAR(static_cast<double>(first) + second, whole, 1e-6)
        << "hasIgnore=" << hasIgnore;
    EXPECT_NEAR(whole, refXent(logits, labels, C, hasIgnore, -100), 1e-6);

    const float dloss = 0.75f;
    std::vector<float> gWhole(N * C), gParts(N * C);
    gp_softmax_xent_bwd(logits.data(), labels.data(), N, C, hasIgnore, -100, 0,
                        &dloss, gWhole.data());
    gp_softmax_xent_bwd(logits.data(), labels.data(), H, C, hasIgnore, -100,
                        count, &dloss, gParts.data());
    gp_softmax_xent_bwd(logits.data() + H * C, labels.data() + H, H, C,
                        hasIgnore, -100, count, &dloss, gParts.data() + H * C);
    for (int64_t k = 0; k < N * C; ++k)
      EXPECT_NEAR(gParts[k], gWhole[k], 1e-7)
          << "hasIgnore=" << hasIgnore << " k=" << k;
  }
  // A part whose labels are all ignored adds 0 (not NaN) to the sum, and
  // its gradient is zero.
  std::vector<int64_t> ignored(H, -100);
  float share = -1;
  gp_softmax_xent_fwd(logits.data(), ignored.data(), H, C, 1, -100, 4.0, &share,
                      nullptr);
  EXPECT_EQ(share, 0.0f);
  const float one = 1.0f;
  std::vector<float> grad(H * C, 5.0f);
  gp_softmax_xent_bwd(logits.data(), ignored.data(), H, C, 1, -100, 4.0, &one,
                      grad.data());
  EXPECT_EQ(grad, std::vector<float>(H * C, 0.0f));
  // norm is the divisor: twice the norm, half the loss.
  std::vector<int64_t> labels = {1, 2, 3};
  float l1 = 0, l2 = 0;
  gp_softmax_xent_fwd(logits.data(), labels.data(), H, C, 0, -100, 3.0, &l1,
                      nullptr);
  gp_softmax_xent_fwd(logits.data(), labels.data(), H, C, 0, -100, 6.0, &l2,
                      nullptr);
  EXPECT_NEAR(l2, l1 / 2, 1e-7);
}

//===----------------------------------------------------------------------===//
// Negative log-likelihood
//===----------------------------------------------------------------------===//

// The mean (norm 0) or sum (norm 1) of -log_prob[i, y_i] over the
// non-ignored samples; the gradient is -dloss / divisor at each counted
// sample's label and 0 elsewhere (torch's nll_loss); split into parts with
// the mini-batch's count as norm, the shares add up to the whole.
TEST(Nll, ForwardAndBackwardMatchReference) {
  const int64_t N = 6, C = 4;
  const std::vector<float> logp = randomVec(N * C, 66, -5.f, 0.f);
  const std::vector<int64_t> labels = {3, 1, 0, 1, 2, 1};
  for (int hasIgnore : {0, 1}) {
    double sum = 0;
    int64_t count = 0;
    for (int64_t i = 0; i < N; ++i)
      if (!(hasIgnore && labels[i] == 1)) {
        sum -= logp[i * C + labels[i]];
        ++count;
      }
    float mean = 0, total = 0;
    gp_nll_fwd(logp.data(), labels.data(), N, C, hasIgnore, 1, 0, &mean);
    gp_nll_fwd(logp.data(), labels.data(), N, C, hasIgnore, 1, 1.0, &total);
    EXPECT_NEAR(mean, sum / count, 1e-6) << "hasIgnore=" << hasIgnore;
    EXPECT_NEAR(total, sum, 1e-5) << "hasIgnore=" << hasIgnore;

    const float dloss = 1.5f;
    std::vector<float> grad(N * C, 42.0f);
    gp_nll_bwd(labels.data(), N, C, hasIgnore, 1, 0, &dloss, grad.data());
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = 0; j < C; ++j) {
        bool counted = !(hasIgnore && labels[i] == 1) && j == labels[i];
        EXPECT_FLOAT_EQ(grad[i * C + j], counted ? -1.5f / count : 0.0f)
            << "hasIgnore=" << hasIgnore << " at " << i << "," << j;
      }

    // Two halves with the whole batch's count: the same loss and gradient.
    const int64_t H = N / 2;
    float first = 0, second = 0;
    std::vector<float> parts(N * C);
    for (int64_t part : {0, 1}) {
      const int64_t *y = labels.data() + part * H;
      gp_nll_fwd(logp.data() + part * H * C, y, H, C, hasIgnore, 1,
                 static_cast<double>(count), part ? &second : &first);
      gp_nll_bwd(y, H, C, hasIgnore, 1, static_cast<double>(count), &dloss,
                 parts.data() + part * H * C);
    }
    EXPECT_NEAR(static_cast<double>(first) + second, mean, 1e-6);
    EXPECT_EQ(parts, grad);
  }
  // Every label ignored: NaN mean (torch), 0 sum, zero gradient.
  const std::vector<int64_t> none(N, 2);
  float loss = 0;
  gp_nll_fwd(logp.data(), none.data(), N, C, 1, 2, 0, &loss);
  EXPECT_TRUE(std::isnan(loss));
  gp_nll_fwd(logp.data(), none.data(), N, C, 1, 2, 1.0, &loss);
  EXPECT_EQ(loss, 0.0f);
  const float one = 1.0f;
  std::vector<float> grad(N * C, 5.0f);
  gp_nll_bwd(none.data(), N, C, 1, 2, 0, &one, grad.data());
  EXPECT_EQ(grad, std::vector<float>(N * C, 0.0f));
  // An out-of-range label poisons the loss and its row of the gradient.
  const std::vector<int64_t> bad = {0, 4, 1, 2, 3, 0};
  gp_nll_fwd(logp.data(), bad.data(), N, C, 0, -100, 0, &loss);
  EXPECT_TRUE(std::isnan(loss));
  gp_nll_bwd(bad.data(), N, C, 0, -100, 0, &one, grad.data());
  EXPECT_TRUE(std::isnan(grad[1 * C]));
  EXPECT_EQ(grad[0], -1.0f / N);
}

//===----------------------------------------------------------------------===//
// Optimizers
//===----------------------------------------------------------------------===//

const std::vector<std::vector<double>> kGrads = {
    {0.5, -1.0, 0.25, 2.0}, {0.1, 0.3, -0.7, 1.5}, {-0.4, 0.2, 0.05, -1.0}};
const std::vector<double> kP0 = {1.0, -0.5, 0.3, 2.0};

std::vector<float> toF(const std::vector<double> &v) {
  return std::vector<float>(v.begin(), v.end());
}

void expectNear(const std::vector<float> &got, const std::vector<double> &want,
                double rel, const std::string &what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], rel * std::max(1.0, std::abs(want[i])))
        << what << " [" << i << "]";
}

TEST(Optimizers, SgdPlainHandComputed) {
  // p = 1, g = 0.5, 1.0, -2.0, lr 0.1: 0.95, 0.85, 1.05.
  float p = 1.0f;
  const float gs[] = {0.5f, 1.0f, -2.0f};
  const double want[] = {0.95, 0.85, 1.05};
  for (int s = 0; s < 3; ++s) {
    gp_sgd_update(&p, &gs[s], nullptr, 1, 0.1f, 0.0f, 0.0f, 0, s + 1);
    EXPECT_NEAR(p, want[s], 1e-6);
  }
}

TEST(Optimizers, SgdVariants) {
  struct Cfg {
    double lr, momentum, wd;
    int nesterov;
  };
  for (Cfg c : {Cfg{0.1, 0.0, 0.0, 0}, Cfg{0.1, 0.9, 0.0, 0},
                Cfg{0.05, 0.9, 0.0, 1}, Cfg{0.1, 0.8, 0.01, 0},
                Cfg{0.1, 0.0, 0.1, 0}, Cfg{0.2, 0.5, 0.05, 1}}) {
    std::vector<double> p = kP0, buf(p.size(), 0.0);
    // Step 1 must start the buffer from the gradient, whatever it held.
    std::vector<float> pf = toF(kP0), buff(p.size(), 123.0f);
    for (int s = 1; s <= 3; ++s) {
      const std::vector<double> &g = kGrads[s - 1];
      for (size_t i = 0; i < p.size(); ++i) {
        double d = g[i] + c.wd * p[i];
        if (c.momentum != 0) {
          buf[i] = s == 1 ? d : c.momentum * buf[i] + d;
          d = c.nesterov ? d + c.momentum * buf[i] : buf[i];
        }
        p[i] -= c.lr * d;
      }
      std::vector<float> gf = toF(g);
      gp_sgd_update(pf.data(), gf.data(),
                    c.momentum != 0 ? buff.data() : nullptr,
                    static_cast<int64_t>(pf.size()), static_cast<float>(c.lr),
                    static_cast<float>(c.momentum), static_cast<float>(c.wd),
                    c.nesterov, s);
      std::string what = "sgd lr=" + std::to_string(c.lr) +
                         " m=" + std::to_string(c.momentum) +
                         " wd=" + std::to_string(c.wd) +
                         " nesterov=" + std::to_string(c.nesterov) +
                         " step=" + std::to_string(s);
      expectNear(pf, p, 1e-6, what);
    }
  }
}

TEST(Optimizers, AdamFirstStepHandComputed) {
  // Step 1: m_hat = g and v_hat = g^2, so p moves by lr * g / (|g| + eps).
  float p = 1.0f, g = 0.5f, m = 0, v = 0;
  gp_adam_update(&p, &g, &m, &v, 1, 0.01f, 0.9f, 0.999f, 1e-8f, 0.0f, 0, 1);
  EXPECT_NEAR(p, 1.0 - 0.01 * 0.5 / (0.5 + 1e-8), 1e-7);
  EXPECT_NEAR(m, 0.05, 1e-8);
  EXPECT_NEAR(v, 0.00025, 1e-10);
}

TEST(Optimizers, AdamAndAdamW) {
  struct Cfg {
    double lr, b1, b2, eps, wd;
    int decoupled;
  };
  for (Cfg c :
       {Cfg{1e-3, 0.9, 0.999, 1e-8, 0.0, 0},
        Cfg{1e-2, 0.9, 0.999, 1e-8, 0.1, 0}, Cfg{1e-2, 0.8, 0.99, 1e-6, 0.0, 1},
        Cfg{1e-2, 0.9, 0.999, 1e-8, 0.01, 1},
        Cfg{0.1, 0.5, 0.9, 1e-3, 0.2, 1}}) {
    std::vector<double> p = kP0, m(p.size(), 0.0), v(p.size(), 0.0);
    std::vector<float> pf = toF(kP0), mf(p.size(), 0.f), vf(p.size(), 0.f);
    for (int s = 1; s <= 3; ++s) {
      const std::vector<double> &gs = kGrads[s - 1];
      double bc1 = 1 - std::pow(c.b1, s), bc2 = 1 - std::pow(c.b2, s);
      for (size_t i = 0; i < p.size(); ++i) {
        double g = gs[i];
        if (c.decoupled)
          p[i] *= 1 - c.lr * c.wd;
        else
          g += c.wd * p[i];
        m[i] = c.b1 * m[i] + (1 - c.b1) * g;
        v[i] = c.b2 * v[i] + (1 - c.b2) * g * g;
        p[i] -=
            (c.lr / bc1) * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + c.eps);
      }
      std::vector<float> gf = toF(gs);
      gp_adam_update(pf.data(), gf.data(), mf.data(), vf.data(),
                     static_cast<int64_t>(pf.size()), static_cast<float>(c.lr),
                     static_cast<float>(c.b1), static_cast<float>(c.b2),
                     static_cast<float>(c.eps), static_cast<float>(c.wd),
                     c.decoupled, s);
      std::string what = std::string(c.decoupled ? "adamw" : "adam") +
                         " lr=" + std::to_string(c.lr) +
                         " wd=" + std::to_string(c.wd) +
                         " step=" + std::to_string(s);
      expectNear(pf, p, 2e-6, what + " p");
      expectNear(mf, m, 1e-6, what + " m");
      expectNear(vf, v, 1e-6, what + " v");
    }
  }
}

//===----------------------------------------------------------------------===//
// gp_main end to end (one stage: no MPI)
//===----------------------------------------------------------------------===//

// The toy program: param w[3]; inputs x[B/M=1, 3] (f32) and y[1] (i64),
// batch B = 2 in M = 2 micro-batches, schedule F0 F1 B1 B0 U. Each forward
// loads its micro-batch, records what it saw and adds mean(x)/M to the loss;
// the update does w -= 0.1 * loss (the mini-batch mean of x).
const int64_t kWShape[] = {3};
const int64_t kXShape[] = {1, 3};
const int64_t kYShape[] = {1};
const gp_tensor_desc kParams[] = {{"w", "w.npy", GP_F32, 1, kWShape, 0}};
const gp_tensor_desc kInputs[] = {{"x", nullptr, GP_F32, 2, kXShape, 0},
                                  {"y", nullptr, GP_I64, 1, kYShape, 0}};
const gp_action kGpipe[] = {{GP_FORWARD, 0},
                            {GP_FORWARD, 1},
                            {GP_BACKWARD, 1},
                            {GP_BACKWARD, 0},
                            {GP_UPDATE, -1}};
std::vector<int64_t> gSeenY;
std::vector<int64_t> gSeenFirst;  // ctx->first_sample in each forward
std::vector<int64_t> gSeenCounts; // gp_count_labels (all, ignoring 12)
std::vector<std::string> gTrace;  // "s1 F0", ..., "s1 U"
std::string gLogPath;             // when set, record the log's line count
std::vector<int64_t> gLogLines;   // ... as seen from inside each step

void toyForward(gp_step_ctx *ctx, int64_t mb) {
  EXPECT_EQ(reinterpret_cast<uintptr_t>(ctx->arena) % 64, 0u);
  EXPECT_EQ(ctx->microbatch, mb);
  float *x = reinterpret_cast<float *>(ctx->arena + 64);
  int64_t *y = reinterpret_cast<int64_t *>(ctx->arena + 128);
  gp_load_input(ctx, 0, mb, x);
  gp_load_input(ctx, 1, mb, y);
  gTrace.push_back("s" + std::to_string(ctx->step) + " F" + std::to_string(mb));
  gSeenY.push_back(y[0]);
  gSeenFirst.push_back(ctx->first_sample);
  if (mb == 0) {
    gSeenCounts.push_back(gp_count_labels(ctx, 1, 0, 12));
    gSeenCounts.push_back(gp_count_labels(ctx, 1, 1, 12));
    if (!gLogPath.empty()) {
      std::string log = readText(gLogPath);
      gLogLines.push_back(std::count(log.begin(), log.end(), '\n'));
    }
  }
  ctx->loss += (x[0] + x[1] + x[2]) / 3.0 / 2.0;
}

void toyBackward(gp_step_ctx *ctx, int64_t mb) {
  EXPECT_EQ(ctx->microbatch, mb);
  gTrace.push_back("s" + std::to_string(ctx->step) + " B" + std::to_string(mb));
}

void toyUpdate(gp_step_ctx *ctx) {
  gTrace.push_back("s" + std::to_string(ctx->step) + " U");
  float *w = reinterpret_cast<float *>(ctx->arena);
  for (int i = 0; i < 3; ++i)
    w[i] -= 0.1f * static_cast<float>(ctx->loss);
}

gp_program toyProgram() {
  gp_program p{};
  p.name = "toy";
  p.stage = 0;
  p.num_stages = 1;
  p.microbatches = 2;
  p.batch_size = 2;
  p.num_inputs = 2;
  p.inputs = kInputs;
  p.num_params = 1;
  p.params = kParams;
  p.arena_bytes = 144;
  p.num_actions = 5;
  p.actions = kGpipe;
  p.forward = toyForward;
  p.backward = toyBackward;
  p.update = toyUpdate;
  p.has_loss = 1;
  return p;
}
const gp_program kToy = toyProgram();

void noop(gp_step_ctx *, int64_t) {}
const gp_action kForwardOnly[] = {{GP_FORWARD, 0}};
gp_program noLossProgram() {
  gp_program p{};
  p.name = "noloss";
  p.num_stages = 1;
  p.microbatches = 1;
  p.batch_size = 1;
  p.num_actions = 1;
  p.actions = kForwardOnly;
  p.forward = noop;
  return p;
}
const gp_program kNoLoss = noLossProgram();

struct RunResult {
  int rc;
  std::string out, err;
};

RunResult runMain(const gp_program &program, std::vector<std::string> args) {
  args.insert(args.begin(), "stage0");
  std::vector<char *> argv;
  for (std::string &a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  int rc = gp_main(static_cast<int>(args.size()), argv.data(), &program);
  RunResult r;
  r.rc = rc;
  r.err = testing::internal::GetCapturedStderr();
  r.out = testing::internal::GetCapturedStdout();
  return r;
}

/// Weights w = [1, 2, 3]; 5 samples: x row k = [k, k, k], y = 10 + k.
void writeToyFiles(const TempDir &dir) {
  fs::create_directories(dir / "weights");
  fs::create_directories(dir / "data");
  writeF32(dir / "weights/w.npy", {1, 2, 3}, {3});
  std::vector<float> x;
  for (int k = 0; k < 5; ++k)
    x.insert(x.end(), 3, static_cast<float>(k));
  writeF32(dir / "data/x.npy", x, {5, 3});
  writeI64(dir / "data/y.npy", {10, 11, 12, 13, 14}, "(5,)");
}

TEST(GpMain, TrainsLogsAndWritesWeights) {
  TempDir dir;
  writeToyFiles(dir);
  gSeenY.clear();
  gSeenFirst.clear();
  gSeenCounts.clear();
  gTrace.clear();
  gLogPath = dir / "log.jsonl";
  gLogLines.clear();
  RunResult r = runMain(
      kToy, {"--data", dir / "data", "--steps", "3", "--weights-in",
             dir / "weights", "--weights-out", dir / "out/nested", "--log-json",
             dir / "log.jsonl", "--status-file", dir / "status"});
  gLogPath.clear();
  ASSERT_EQ(r.rc, 0) << r.err;
  // Each line is flushed before the next step runs.
  EXPECT_EQ(gLogLines, (std::vector<int64_t>{0, 1, 2}));
  // nb = 5 / 2 = 2 batches; sample 4 is dropped and step 3 wraps around.
  // Micro-batch m of a mini-batch starting at row f is row f + m.
  EXPECT_EQ(gSeenY, (std::vector<int64_t>{10, 11, 12, 13, 10, 11}));
  EXPECT_EQ(gSeenFirst, (std::vector<int64_t>{0, 1, 2, 3, 0, 1}));
  // Labels of the whole mini-batch: all of them, then those != 12.
  EXPECT_EQ(gSeenCounts, (std::vector<int64_t>{2, 2, 2, 1, 2, 2}));
  // The schedule runs in order, once per step.
  std::vector<std::string> trace;
  for (int s = 1; s <= 3; ++s)
    for (const char *a : {" F0", " F1", " B1", " B0", " U"})
      trace.push_back("s" + std::to_string(s) + a);
  EXPECT_EQ(gTrace, trace);
  EXPECT_EQ(r.out, "step 1 loss 0.500000\nstep 2 loss 2.500000\n"
                   "step 3 loss 0.500000\n");
  EXPECT_NE(r.err.find("gpipe: 3 steps, mean "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(" ms/step (cpu, 1 thread)\n"), std::string::npos)
      << r.err;
  EXPECT_EQ(readText(dir / "status"), "exit 0\n");

  std::istringstream log(readText(dir / "log.jsonl"));
  std::string line;
  const double wantLoss[] = {0.5, 2.5, 0.5};
  int n = 0;
  while (std::getline(log, line)) {
    long long step = 0;
    double loss = 0, ms = -1;
    ASSERT_EQ(std::sscanf(line.c_str(),
                          "{\"step\":%lld,\"loss\":%lf,\"ms\":%lf}", &step,
                          &loss, &ms),
              3)
        << line;
    EXPECT_EQ(step, n + 1);
    EXPECT_DOUBLE_EQ(loss, wantLoss[n]);
    EXPECT_GE(ms, 0.0);
    ++n;
  }
  EXPECT_EQ(n, 3);

  NpyFile w;
  std::string err;
  ASSERT_TRUE(w.open(dir / "out/nested/w.npy", GP_F32, err)) << err;
  EXPECT_EQ(w.shape(), (std::vector<int64_t>{3}));
  std::vector<float> got = contents<float>(w);
  for (int i = 0; i < 3; ++i)
    EXPECT_NEAR(got[i], i + 1 - 0.35, 1e-6);
  // Inputs are untouched.
  EXPECT_EQ(
      readText(dir / "weights/w.npy"),
      npyImage(npyDict("<f4", "(3,)"), rawBytes(std::vector<float>{1, 2, 3})));
}

// W actions (zero-bubble schedules): the program's weight function, for
// consecutive micro-batches in a row one call over all of them.
void toyWeight(gp_step_ctx *ctx, int64_t first, int64_t count) {
  gTrace.push_back("s" + std::to_string(ctx->step) + " W" +
                   std::to_string(first) + "x" + std::to_string(count));
}

TEST(GpMain, WeightActionsRunConsecutiveMicrobatchesAsOneCall) {
  TempDir dir;
  writeToyFiles(dir);
  // W0 W1 in a row: one call (0, 2); W1 then W0: two calls.
  const gp_action inRow[] = {{GP_FORWARD, 0},  {GP_FORWARD, 1},
                             {GP_BACKWARD, 1}, {GP_BACKWARD, 0},
                             {GP_WEIGHT, 0},   {GP_WEIGHT, 1},
                             {GP_UPDATE, -1}};
  const gp_action apart[] = {{GP_FORWARD, 0},  {GP_FORWARD, 1},
                             {GP_BACKWARD, 1}, {GP_WEIGHT, 1},
                             {GP_BACKWARD, 0}, {GP_WEIGHT, 0},
                             {GP_UPDATE, -1}};
  std::vector<std::string> args = {"--data", dir / "data", "--steps", "1",
                                   "--weights-in", dir / "weights", "--trace",
                                   dir / "trace.json"};
  gp_program p = kToy;
  p.weight = toyWeight;
  p.actions = inRow;
  p.num_actions = 7;
  gTrace.clear();
  RunResult r = runMain(p, args);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(gTrace, (std::vector<std::string>{"s1 F0", "s1 F1", "s1 B1",
                                              "s1 B0", "s1 W0x2", "s1 U"}));
  // The trace shows one "weight" span per micro-batch.
  std::string trace = readText(dir / "trace.json");
  size_t weights = 0;
  for (size_t at = trace.find("\"name\":\"weight\""); at != std::string::npos;
       at = trace.find("\"name\":\"weight\"", at + 1))
    ++weights;
  EXPECT_EQ(weights, 2u) << trace;
  p.actions = apart;
  gTrace.clear();
  r = runMain(p, args);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(gTrace, (std::vector<std::string>{"s1 F0", "s1 F1", "s1 B1",
                                              "s1 W1x1", "s1 B0", "s1 W0x1",
                                              "s1 U"}));
}

TEST(GpMain, QuietDefaultsAndNanLoss) {
  TempDir dir;
  writeToyFiles(dir);
  // Default weights-in is ./weights; run from the temp dir.
  fs::path cwd = fs::current_path();
  fs::current_path(dir.str());
  RunResult r = runMain(kToy, {"--data=data", "--quiet"});
  fs::current_path(cwd);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("gpipe: 1 steps"), std::string::npos) << r.err;

  // No stage computes a loss: stage 0 logs NaN.
  r = runMain(kNoLoss, {"--steps", "2", "--log-json", dir / "nan.jsonl",
                        "--threads", "2", "--weights-out", dir / "empty"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "step 1 loss nan\nstep 2 loss nan\n");
  std::string log = readText(dir / "nan.jsonl");
  EXPECT_EQ(log.find("{\"step\":1,\"loss\":null,\"ms\":"), 0u) << log;
  EXPECT_NE(log.find("{\"step\":2,\"loss\":null,\"ms\":"), std::string::npos);
  EXPECT_TRUE(fs::is_directory(dir / "empty"));
}

// --report writes the stage's numbers, --trace its events: every action of
// every step, in start order, with the step and micro-batch.
TEST(GpMain, ReportAndTrace) {
  TempDir dir;
  writeToyFiles(dir);
  RunResult r =
      runMain(kToy, {"--data", dir / "data", "--steps", "3", "--weights-in",
                     dir / "weights", "--report=" + (dir / "report"), "--trace",
                     dir / "trace", "--quiet"});
  ASSERT_EQ(r.rc, 0) << r.err;
  std::string report = readText(dir / "report");
  long long stage = -1, steps = -1, first = -1, last = -1, rss = -1,
            startRss = -1, device = 0, events = -1, dropped = -1,
            ahead = -1;
  double stepMs = -1, computeMs = -1, waitMs = -1, endMs = -1;
  ASSERT_EQ(std::sscanf(report.c_str(),
                        "{\"stage\":%lld,\"steps\":%lld,\"first_step\":%lld,"
                        "\"last_step\":%lld,\"step_ms\":%lf,\"compute_ms\":%lf,"
                        "\"transfer_wait_ms\":%lf,\"step_end_ms\":%lf,"
                        "\"max_rss_bytes\":%lld,\"start_rss_bytes\":%lld,"
                        "\"device_memory_bytes\":%lld,"
                        "\"trace_events\":%lld,\"trace_dropped\":%lld,"
                        "\"receives_ahead\":%lld}",
                        &stage, &steps, &first, &last, &stepMs, &computeMs,
                        &waitMs, &endMs, &rss, &startRss, &device, &events,
                        &dropped, &ahead),
            14)
      << report;
  EXPECT_EQ(ahead, 0); // one stage: no receives
  // Resident before the arena: some, and no more than the peak.
  EXPECT_GT(startRss, 1 << 20);
  EXPECT_LE(startRss, rss);
  EXPECT_EQ(stage, 0);
  EXPECT_EQ(steps, 3);
  EXPECT_EQ(first, 1);
  EXPECT_EQ(last, 3);
  EXPECT_GE(computeMs, 0.0);
  EXPECT_EQ(waitMs, 0.0); // one stage: no transfers
  EXPECT_LE(computeMs + endMs, stepMs + 1e-3);
  EXPECT_GT(rss, 1 << 20);
  EXPECT_EQ(device, -1); // CPU
  EXPECT_EQ(events, 3 * 6);
  EXPECT_EQ(dropped, 0);

  std::istringstream trace(readText(dir / "trace"));
  std::string line;
  std::vector<std::string> got;
  double lastTs = -1;
  while (std::getline(trace, line)) {
    if (line.find("\"ph\":\"M\"") != std::string::npos) {
      EXPECT_NE(line.find("\"pid\":0"), std::string::npos) << line;
      continue;
    }
    char name[32] = {};
    long long step = 0;
    int pid = -1;
    double ts = 0, dur = -1;
    ASSERT_EQ(std::sscanf(line.c_str(),
                          "{\"name\":\"%31[^\"]\",\"cat\":\"action\",\"ph\":"
                          "\"X\",\"pid\":%d,\"tid\":0,\"ts\":%lf,\"dur\":%lf,"
                          "\"args\":{\"step\":%lld",
                          name, &pid, &ts, &dur, &step),
              5)
        << line;
    EXPECT_EQ(pid, 0);
    EXPECT_GE(dur, 0.0);
    EXPECT_GE(ts, lastTs) << line;
    lastTs = ts;
    std::string event = "s" + std::to_string(step) + " " + name;
    size_t mb = line.find("\"microbatch\":");
    if (mb != std::string::npos)
      event += " " + line.substr(mb + 13, 1);
    got.push_back(event);
  }
  std::vector<std::string> want;
  for (int s = 1; s <= 3; ++s)
    for (const char *a : {" forward 0", " forward 1", " backward 1",
                          " backward 0", " update", " step end"})
      want.push_back("s" + std::to_string(s) + a);
  EXPECT_EQ(got, want);
}

TEST(GpMain, Help) {
  RunResult r = runMain(kToy, {"--help"});
  EXPECT_EQ(r.rc, 0);
  EXPECT_NE(r.out.find("--weights-out DIR"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--status-file FILE"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--report FILE"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--trace FILE"), std::string::npos) << r.out;
}

/// Runs and expects exit code `rc` (1: bad input, 2: usage error) with
/// exactly one "gpipe: error: stage 0: " line.
std::string expectError(const gp_program &program,
                        const std::vector<std::string> &args, int rc = 1) {
  RunResult r = runMain(program, args);
  EXPECT_EQ(r.rc, rc) << r.err;
  EXPECT_EQ(r.err.rfind("gpipe: error: stage 0: ", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  return r.err;
}

TEST(GpMain, FlagErrors) {
  EXPECT_EQ(expectError(kToy, {"--bogus"}, 2),
            "gpipe: error: stage 0: unknown flag '--bogus' (see --help)\n");
  EXPECT_EQ(expectError(kToy, {"--data", "d", "--steps"}, 2),
            "gpipe: error: stage 0: flag '--steps' requires a value\n");
  EXPECT_NE(
      expectError(kToy, {"--data", "d", "--steps", "x"}, 2).find("--steps"),
      std::string::npos);
  EXPECT_NE(
      expectError(kToy, {"--data", "d", "--threads", "0"}, 2).find("--threads"),
      std::string::npos);
  for (const char *bad : {"0", "-1", "nan", "5s", "1e7"})
    EXPECT_EQ(expectError(kToy, {"--data", "d", "--comm-timeout", bad}, 2),
              std::string("gpipe: error: stage 0: invalid value '") + bad +
                  "' for --comm-timeout (expected seconds in (0, 1e6])\n");
  EXPECT_NE(expectError(kToy, {"stray"}, 2).find("'stray'"), std::string::npos);
  EXPECT_NE(expectError(kToy, {"--steps", "2"}, 2).find("--data"),
            std::string::npos);
  EXPECT_NE(expectError(kToy, {"--status-file"}, 2).find("--status-file"),
            std::string::npos);
  EXPECT_EQ(expectError(kToy, {"--report"}, 2),
            "gpipe: error: stage 0: flag '--report' requires a value\n");
  EXPECT_EQ(expectError(kToy, {"--trace="}, 2),
            "gpipe: error: stage 0: flag '--trace' requires a non-empty "
            "value\n");
  EXPECT_EQ(expectError(kToy, {"--data", "d", "--on-nan", "maybe"}, 2),
            "gpipe: error: stage 0: invalid value 'maybe' for --on-nan "
            "(expected 'stop', 'skip' or 'continue')\n");
  EXPECT_NE(expectError(kToy, {"--heartbeat", "/nonexistent/dir/hb"}, 2)
                .find("cannot write the heartbeat file /nonexistent/dir/hb"),
            std::string::npos);
}

// --heartbeat: the file names the process and its host, and carries the
// counters gpipe-run's watchdog compares.
TEST(GpMain, HeartbeatFile) {
  TempDir dir;
  writeToyFiles(dir);
  RunResult r = runMain(kToy, {"--data", dir / "data", "--weights-in",
                               dir / "weights", "--heartbeat", dir / "hb"});
  ASSERT_EQ(r.rc, 0) << r.err;
  std::string hb = readText(dir / "hb");
  EXPECT_EQ(hb.rfind("pid " + std::to_string(::getpid()) + "\nhost ", 0), 0u)
      << hb;
  for (const char *key :
       {"\nstage 0\n", "\nbeat ", "\nprogress ", "\nwait none\n", "\ndoing "})
    EXPECT_NE(hb.find(key), std::string::npos) << key << " in " << hb;
}

TEST(GpMain, DataAndWeightErrors) {
  TempDir dir;
  writeToyFiles(dir);
  std::vector<std::string> base = {"--data", dir / "data", "--weights-in",
                                   dir / "weights"};

  fs::remove(dir / "data/y.npy");
  EXPECT_EQ(expectError(kToy, base),
            "gpipe: error: stage 0: missing data file " + (dir / "data") +
                "/y.npy for graph input 'y'\n");

  // y as float32: wrong dtype, naming the file.
  writeF32(dir / "data/y.npy", {1, 2, 3, 4, 5}, {5});
  std::string err = expectError(kToy, base);
  EXPECT_NE(err.find(dir / "data/y.npy"), std::string::npos) << err;
  EXPECT_NE(err.find("'<f4' does not match expected '<i8'"), std::string::npos)
      << err;

  // Different sample counts name both files.
  writeI64(dir / "data/y.npy", {1, 2, 3, 4}, "(4,)");
  err = expectError(kToy, base);
  EXPECT_NE(err.find(dir / "data/y.npy"), std::string::npos) << err;
  EXPECT_NE(err.find(dir / "data/x.npy"), std::string::npos) << err;

  // Wrong trailing dims.
  writeI64(dir / "data/y.npy", {1, 2, 3, 4, 5}, "(5,)");
  writeF32(dir / "data/x.npy", std::vector<float>(10, 0.f), {5, 2});
  err = expectError(kToy, base);
  EXPECT_NE(err.find("expected shape (S, 3) for graph input 'x', found (5, 2)"),
            std::string::npos)
      << err;

  // Fewer samples than one mini-batch (B = 2, even though a micro-batch is 1).
  writeF32(dir / "data/x.npy", {1, 2, 3}, {1, 3});
  writeI64(dir / "data/y.npy", {1}, "(1,)");
  err = expectError(kToy, base);
  EXPECT_NE(err.find("fewer than the mini-batch size 2"), std::string::npos)
      << err;

  // Weight file with the wrong shape.
  writeToyFiles(dir);
  writeF32(dir / "weights/w.npy", {1, 2, 3, 4}, {4});
  EXPECT_EQ(expectError(kToy, base),
            "gpipe: error: stage 0: " + (dir / "weights") +
                "/w.npy: expected shape (3,) for parameter 'w', found (4,)\n");

  // Missing weight file.
  fs::remove(dir / "weights/w.npy");
  EXPECT_EQ(expectError(kToy, base),
            "gpipe: error: stage 0: missing weight file " + (dir / "weights") +
                "/w.npy for parameter 'w'\n");

  // Corrupt weight file.
  writeBytes(dir / "weights/w.npy", "garbage");
  err = expectError(kToy, base);
  EXPECT_NE(err.find("bad magic"), std::string::npos) << err;
}

TEST(GpMain, StatusFileOnErrors) {
  TempDir dir;
  writeToyFiles(dir);
  fs::remove(dir / "data/x.npy");
  expectError(kToy, {"--data", dir / "data", "--weights-in", dir / "weights",
                     "--status-file", dir / "status"});
  EXPECT_EQ(readText(dir / "status"), "exit 1\n");
  // A usage error after --status-file still reports there.
  expectError(kToy, {"--status-file", dir / "status", "--bogus"}, 2);
  EXPECT_EQ(readText(dir / "status"), "exit 2\n");
}

TEST(GpMain, InvalidPrograms) {
  TempDir dir;
  writeToyFiles(dir);
  std::vector<std::string> base = {"--data", dir / "data", "--weights-in",
                                   dir / "weights"};
  gp_program p = kToy;
  p.batch_size = 3; // not a multiple of M = 2
  EXPECT_NE(expectError(p, base).find("invalid program: batch size 3"),
            std::string::npos);
  p = kToy;
  p.microbatches = 1; // inputs declare 1 row, B/M = 2
  p.actions = kForwardOnly;
  p.num_actions = 1;
  EXPECT_NE(expectError(p, base).find("input 'x' needs a micro-batch "
                                      "dimension of 2"),
            std::string::npos);
  const gp_action bad[] = {{GP_FORWARD, 2}};
  p = kToy;
  p.actions = bad;
  p.num_actions = 1;
  EXPECT_NE(expectError(p, base).find("schedule entry 0"), std::string::npos);
  p = kToy;
  p.update = nullptr;
  EXPECT_NE(expectError(p, base).find("schedule entry 4"), std::string::npos);
  // A W action needs the program's weight function.
  const gp_action weightless[] = {{GP_FORWARD, 0},  {GP_FORWARD, 1},
                                  {GP_BACKWARD, 1}, {GP_BACKWARD, 0},
                                  {GP_WEIGHT, 0},   {GP_UPDATE, -1}};
  p = kToy;
  p.actions = weightless;
  p.num_actions = 6;
  EXPECT_NE(expectError(p, base).find("schedule entry 4"), std::string::npos);
  p = kToy;
  p.stage = 1; // a 1-stage pipeline has only stage 0
  RunResult r = runMain(p, base);
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("invalid program: stage 1 of 1"), std::string::npos)
      << r.err;
}

// Errors inside a step end the process (exit 1) after writing the status;
// crashes write "signal N" and die of the signal.
const gp_action kOneForward[] = {{GP_FORWARD, 0}};
std::string gDeathStatus;

void badLabelForward(gp_step_ctx *ctx, int64_t) {
  const int64_t labels[] = {1, 5};
  gp_check_labels(ctx, labels, 2, 3, 0, -100, "y");
}
void segvForward(gp_step_ctx *, int64_t) { std::raise(SIGSEGV); }
void sendForward(gp_step_ctx *ctx, int64_t) {
  float v = 1;
  gp_send(ctx, 1, 0, &v, sizeof(v));
}
void badInputForward(gp_step_ctx *ctx, int64_t) {
  float v[3];
  gp_load_input(ctx, 7, 0, v);
}

gp_program deathProgram(void (*forward)(gp_step_ctx *, int64_t)) {
  gp_program p{};
  p.name = "death";
  p.num_stages = 1;
  p.microbatches = 1;
  p.batch_size = 1;
  p.num_actions = 1;
  p.actions = kOneForward;
  p.forward = forward;
  p.has_loss = 1;
  return p;
}

/// The directory of a death test's status file: made by the parent and
/// handed to the re-executed child ("threadsafe" death tests run the test body
/// again in a fresh process) through the environment.
class DeathDir {
public:
  DeathDir() {
    if (const char *d = std::getenv("GPIPE_RT_DEATH_DIR")) {
      path_ = d;
      return;
    }
    owned_ = std::make_unique<TempDir>();
    path_ = owned_->str();
    setenv("GPIPE_RT_DEATH_DIR", path_.c_str(), 1);
  }
  ~DeathDir() {
    if (owned_)
      unsetenv("GPIPE_RT_DEATH_DIR");
  }
  std::string operator/(const std::string &name) const {
    return path_ + "/" + name;
  }

private:
  std::unique_ptr<TempDir> owned_;
  std::string path_;
};

void runToDeath(void (*forward)(gp_step_ctx *, int64_t),
                const std::string &status) {
  gp_program p = deathProgram(forward);
  std::string arg0 = "stage0", arg1 = "--status-file", arg2 = status,
              arg3 = "--steps", arg4 = "3";
  char *argv[] = {arg0.data(), arg1.data(), arg2.data(),
                  arg3.data(), arg4.data(), nullptr};
  std::exit(gp_main(5, argv, &p) + 100); // not reached
}

TEST(GpMainDeath, LabelErrorNamesStageAndWritesStatus) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  DeathDir dir;
  EXPECT_EXIT(runToDeath(badLabelForward, dir / "status"),
              testing::ExitedWithCode(1),
              "^gpipe: error: stage 0: graph input 'y', sample 1 \\(step 1\\): "
              "label 5 is outside \\[0, 3\\)\n$");
  EXPECT_EQ(readText(dir / "status"), "exit 1\n");
}

TEST(GpMainDeath, CrashWritesSignalStatus) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  DeathDir dir;
  EXPECT_EXIT(runToDeath(segvForward, dir / "status"),
              testing::KilledBySignal(SIGSEGV), "");
  EXPECT_EQ(readText(dir / "status"),
            "signal " + std::to_string(SIGSEGV) + "\n");
}

TEST(GpMainDeath, TransportAndInputMisuse) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  DeathDir dir;
  EXPECT_EXIT(runToDeath(sendForward, dir / "status"),
              testing::ExitedWithCode(1),
              "stage 0: invalid program: gp_send called outside a multi-stage");
  EXPECT_EQ(readText(dir / "status"), "exit 1\n");
  EXPECT_EXIT(runToDeath(badInputForward, dir / "status"),
              testing::ExitedWithCode(1),
              "stage 0: invalid program: gp_load_input of input 7; the stage "
              "has 0 graph input\\(s\\)");
}

//===----------------------------------------------------------------------===//
// The pipeline.json manifest (gpipe/manifest.h)
//===----------------------------------------------------------------------===//

namespace mf = gpipe::manifest;

/// A 2-stage CUDA manifest with every field set.
mf::Manifest fullManifest() {
  mf::Manifest m;
  m.buildId = "0123456789abcdef";
  m.sourceModel = "/models/mlp.onnx";
  m.target = "cuda";
  m.precision = "bf16";
  m.allowTf32 = false;
  m.cudaArch = {80, 90};
  m.batchSize = 32;
  m.microbatches = 4;
  m.microbatchSize = 8;
  m.remat = "stage";
  m.schedule = "1f1b";
  m.loss = "loss";
  m.lossStage = 1;
  m.optimizer.kind = "adamw";
  m.optimizer.lr = 0.01;
  m.optimizer.betas = {0.8, 0.99};
  m.optimizer.eps = 1e-6;
  m.optimizer.weightDecay = 0.1;
  m.inputs = {{"x", "float32", {32, 20}, 0}, {"y", "int64", {32}, 1}};
  for (int64_t s = 0; s < 2; ++s) {
    mf::Stage st;
    st.index = st.rank = s;
    st.executable = "stage" + std::to_string(s);
    st.flopsPerStep = 1000 + s;
    st.forwardFlopsPerMicrobatch = 100 + s;
    st.backwardFlopsPerMicrobatch = 200 + s;
    st.inputs = {s == 0 ? "x" : "y"};
    st.params = {{"fc" + std::to_string(s) + ".weight",
                  "fc" + std::to_string(s) + ".weight.npy",
                  {32, 20}}};
    int64_t v = 1;
    for (int64_t *field :
         {&st.memory.arenaBytes, &st.memory.parameterBytes,
          &st.memory.optimizerStateBytes, &st.memory.gradientBytes,
          &st.memory.activationBytesPerMicrobatch,
          &st.memory.inFlightMicrobatches, &st.memory.activationBytes,
          &st.memory.transientPeakBytes, &st.memory.inputBytesPerMicrobatch,
          &st.memory.constantBytes, &st.memory.bf16CopyBytes,
          &st.memory.arenaConstantBytes, &st.memory.scratchBytes,
          &st.memory.sendStagingBytes})
      *field = 64 * v++ + s;
    st.boundaries = {{s == 0 ? "send" : "recv", "forward", 1 - s, 0,
                      "tensor<8x32xf32>", 1024},
                     {s == 0 ? "recv" : "send", "backward", 1 - s, 1,
                      "tensor<8x32xf32>", 1024}};
    st.schedule = {"F0", "F1", "B0", "B1", "U"};
    m.stages.push_back(st);
  }
  return m;
}

bool sameMemory(const mf::Memory &a, const mf::Memory &b) {
  return a.arenaBytes == b.arenaBytes && a.parameterBytes == b.parameterBytes &&
         a.optimizerStateBytes == b.optimizerStateBytes &&
         a.gradientBytes == b.gradientBytes &&
         a.activationBytesPerMicrobatch == b.activationBytesPerMicrobatch &&
         a.inFlightMicrobatches == b.inFlightMicrobatches &&
         a.activationBytes == b.activationBytes &&
         a.transientPeakBytes == b.transientPeakBytes &&
         a.inputBytesPerMicrobatch == b.inputBytesPerMicrobatch &&
         a.constantBytes == b.constantBytes &&
         a.bf16CopyBytes == b.bf16CopyBytes &&
         a.arenaConstantBytes == b.arenaConstantBytes &&
         a.scratchBytes == b.scratchBytes &&
         a.sendStagingBytes == b.sendStagingBytes;
}

/// Reads `text` as DIR/pipeline.json; returns the error ("" if it read).
std::string readManifestText(const TempDir &dir, const std::string &text,
                             mf::Manifest &m) {
  writeBytes(dir / "pipeline.json", text);
  std::string err;
  if (mf::readManifest(dir / "pipeline.json", m, err))
    return "";
  EXPECT_FALSE(err.empty());
  return err;
}

TEST(Manifest, WrittenManifestReadsBackTheSame) {
  TempDir dir;
  mf::Manifest w = fullManifest(), r;
  ASSERT_EQ(readManifestText(dir, mf::writeManifest(w), r), "");
  EXPECT_EQ(r.version, 2);
  EXPECT_EQ(r.buildId, w.buildId);
  EXPECT_EQ(r.model, "model.onnx");
  EXPECT_EQ(r.sourceModel, w.sourceModel);
  EXPECT_EQ(r.target, "cuda");
  EXPECT_EQ(r.precision, "bf16");
  EXPECT_EQ(r.cudaArch, w.cudaArch);
  EXPECT_EQ(r.batchSize, 32);
  EXPECT_EQ(r.microbatches, 4);
  EXPECT_EQ(r.microbatchSize, 8);
  EXPECT_EQ(r.remat, "stage");
  EXPECT_EQ(r.schedule, "1f1b");
  EXPECT_EQ(r.loss, "loss");
  EXPECT_EQ(r.lossStage, 1);
  EXPECT_EQ(r.optimizer.kind, "adamw");
  EXPECT_EQ(r.optimizer.lr, 0.01);
  EXPECT_EQ(r.optimizer.betas, (std::array<double, 2>{0.8, 0.99}));
  EXPECT_EQ(r.optimizer.eps, 1e-6);
  EXPECT_EQ(r.optimizer.weightDecay, 0.1);
  ASSERT_EQ(r.inputs.size(), 2u);
  EXPECT_EQ(r.inputs[1].name, "y");
  EXPECT_EQ(r.inputs[1].dtype, "int64");
  EXPECT_EQ(r.inputs[1].shape, std::vector<int64_t>{32});
  EXPECT_EQ(r.inputs[1].stage, 1);
  ASSERT_EQ(r.stages.size(), 2u);
  for (size_t s = 0; s < 2; ++s) {
    const mf::Stage &a = r.stages[s], &b = w.stages[s];
    EXPECT_EQ(a.index, b.index);
    EXPECT_EQ(a.rank, b.rank);
    EXPECT_EQ(a.executable, b.executable);
    EXPECT_EQ(a.weights, "weights");
    EXPECT_EQ(a.flopsPerStep, b.flopsPerStep);
    EXPECT_EQ(a.forwardFlopsPerMicrobatch, b.forwardFlopsPerMicrobatch);
    EXPECT_EQ(a.backwardFlopsPerMicrobatch, b.backwardFlopsPerMicrobatch);
    EXPECT_EQ(a.inputs, b.inputs);
    ASSERT_EQ(a.params.size(), 1u);
    EXPECT_EQ(a.params[0].name, b.params[0].name);
    EXPECT_EQ(a.params[0].file, b.params[0].file);
    EXPECT_EQ(a.params[0].shape, b.params[0].shape);
    EXPECT_TRUE(sameMemory(a.memory, b.memory));
    ASSERT_EQ(a.boundaries.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(a.boundaries[i].direction, b.boundaries[i].direction);
      EXPECT_EQ(a.boundaries[i].phase, b.boundaries[i].phase);
      EXPECT_EQ(a.boundaries[i].peer, b.boundaries[i].peer);
      EXPECT_EQ(a.boundaries[i].tag, b.boundaries[i].tag);
      EXPECT_EQ(a.boundaries[i].type, b.boundaries[i].type);
      EXPECT_EQ(a.boundaries[i].bytes, b.boundaries[i].bytes);
    }
    EXPECT_EQ(a.schedule, b.schedule);
  }
  // Written again, it is the same text.
  EXPECT_EQ(mf::writeManifest(r), mf::writeManifest(w));
}

TEST(Manifest, WritesTargetAndOptimizerFieldsOnlyWhereTheyApply) {
  mf::Manifest m = fullManifest();
  m.target = "cpu";
  m.precision = "fp32";
  m.optimizer.kind = "sgd";
  m.optimizer.momentum = 0.9;
  std::string text = mf::writeManifest(m);
  for (const char *absent :
       {"allow_tf32", "cuda_arch", "bf16_copy_bytes", "arena_constant_bytes",
        "scratch_bytes", "send_staging_bytes", "betas", "\"eps\""})
    EXPECT_EQ(text.find(absent), std::string::npos) << absent;
  EXPECT_NE(text.find("\"momentum\": 0.9,\n"), std::string::npos);
  EXPECT_NE(text.find("\"nesterov\": false"), std::string::npos);
  // The fields in the order of docs/formats.md, two-space indented.
  EXPECT_EQ(text.rfind("{\n  \"format\": \"gpipe-pipeline\",\n  \"version\": "
                       "2,\n  \"build_id\": ",
                       0),
            0u);
  EXPECT_LT(text.find("\"precision\""), text.find("\"batch_size\""));
  EXPECT_LT(text.find("\"loss_stage\""), text.find("\"optimizer\""));
  EXPECT_EQ(text.back(), '\n');
  // CPU with bf16 (emulated) reports the bf16 copies, not the CUDA sizes.
  m.precision = "bf16";
  text = mf::writeManifest(m);
  EXPECT_NE(text.find("bf16_copy_bytes"), std::string::npos);
  EXPECT_EQ(text.find("scratch_bytes"), std::string::npos);
}

TEST(Manifest, ReadsAMinimalDescriptionWithDefaults) {
  // What hand-written pipelines (test/pipeline) and version 1 carry.
  TempDir dir;
  mf::Manifest m;
  ASSERT_EQ(readManifestText(dir,
                             R"({"format": "gpipe-pipeline", "stages": [
                                 {"executable": "stage0", "params": []}]})",
                             m),
            "");
  EXPECT_EQ(m.version, 1);
  EXPECT_EQ(m.target, "cpu");
  ASSERT_EQ(m.stages.size(), 1u);
  EXPECT_EQ(m.stages[0].index, 0);
  EXPECT_EQ(m.stages[0].rank, 0);
  EXPECT_EQ(m.stages[0].weights, "weights");
  EXPECT_TRUE(m.stages[0].schedule.empty());
}

TEST(Manifest, ErrorsNameTheFileAndTheField) {
  TempDir dir;
  std::string path = dir / "pipeline.json";
  mf::Manifest m;
  std::string err;
  EXPECT_FALSE(mf::readManifest(dir / "none.json", m, err));
  EXPECT_EQ(err,
            dir / "none.json" + ": cannot read (No such file or directory)");
  EXPECT_FALSE(mf::readManifest(dir.str(), m, err));
  EXPECT_EQ(err, dir.str() + ": cannot read (Is a directory)");

  std::string head = R"({"format": "gpipe-pipeline", "version": 2, )";
  std::string stage = R"({"executable": "stage0", "params": []})";
  struct Case {
    std::string text, error;
  } cases[] = {
      {"", "invalid JSON: parse error at line 1, column 1: "},
      {head + R"("stages": [)",
       "invalid JSON: parse error at line 1, column 55: syntax error while "
       "parsing value - unexpected end of input"},
      {"[1, 2]", "not a gpipe pipeline description"},
      {R"({"format": "onnx"})", "not a gpipe pipeline description"},
      {R"({"format": "gpipe-pipeline", "version": 3, "stages": []})",
       "version 3 is not supported (versions 1 and 2)"},
      {R"({"format": "gpipe-pipeline", "version": "2"})",
       "'version' must be an integer"},
      {head + R"("stages": []})", "no stages"},
      {head + R"("stages": {}})", "'stages' must be an array"},
      {head + R"("stages": [7]})", "'stages[0]' must be an object"},
      {R"({"format": "gpipe-pipeline", "stages": [)" + stage + ", " + stage +
           "]}",
       "2 stages in a version 1 pipeline description (one stage)"},
      {head + R"("stages": [{"params": []}]})",
       "'stages[0].executable' is missing"},
      {head + R"("stages": [{"executable": "stage0"}]})",
       "'stages[0].params' is missing"},
      {head + R"("stages": [{"index": 1, "executable": "s", "params": []}]})",
       "stage 0 has index 1"},
      {head + R"("stages": [{"executable": "s", "params": [{"name": "w",
          "file": "w.npy", "shape": [2, 2.5]}]}]})",
       "'stages[0].params[0].shape' must be an array of integers"},
      {head + R"("stages": [{"executable": "s", "params": [{"name": "w",
          "shape": [2]}]}]})",
       "'stages[0].params[0].file' is missing"},
      {head + R"("stages": [{"executable": "s", "params": [],
          "memory": {"arena_bytes": "big"}}]})",
       "'stages[0].memory.arena_bytes' must be an integer"},
      {head + R"("stages": [{"executable": "s", "params": [],
          "boundaries": [{"tag": -1.5}]}]})",
       "'stages[0].boundaries[0].tag' must be an integer"},
      {head + R"("stages": [{"executable": "s", "params": [],
          "schedule": ["F0", 1]}]})",
       "'stages[0].schedule' must be an array of strings"},
      {head + R"("optimizer": {"betas": [0.9]}, "stages": [)" + stage + "]}",
       "'optimizer.betas' must be an array of two numbers"},
      {head + R"("optimizer": {"lr": null}, "stages": [)" + stage + "]}",
       "'optimizer.lr' must be a number"},
      {head + R"("batch_size": 18446744073709551615, "stages": [)" + stage +
           "]}",
       "'batch_size' must be an integer"},
  };
  for (const Case &c : cases) {
    std::string got = readManifestText(dir, c.text, m);
    EXPECT_EQ(got.rfind(path + ": " + c.error, 0), 0u)
        << "input: " << c.text << "\nerror: " << got;
  }
}

} // namespace

// gp_dropout: about `ratio` of the elements dropped, the rest scaled by
// 1 / (1 - ratio) exactly; the same (key, step, index) always draws the same
// bit, so a tensor done in two runs (micro-batches, base offsets) equals it
// done in one; another step or key draws another mask; in place is allowed.
TEST(Kernels, DropoutIsCounterBased) {
  const int64_t n = 1 << 20;
  const float ratio = 0.1f;
  std::vector<float> x(n), whole(n), halves(n);
  for (int64_t i = 0; i < n; ++i)
    x[i] = 1.0f + static_cast<float>(i % 7);
  gp_step_ctx ctx{};
  ctx.step = 3;
  gp_dropout(&ctx, 42, ratio, x.data(), whole.data(), n, 0);
  int64_t dropped = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (whole[i] == 0.0f)
      ++dropped;
    else
      ASSERT_EQ(whole[i], x[i] / (1.0f - ratio)) << i;
  }
  EXPECT_NEAR(static_cast<double>(dropped) / n, ratio, 0.002);
  gp_dropout(&ctx, 42, ratio, x.data(), halves.data(), n / 2, 0);
  gp_dropout(&ctx, 42, ratio, x.data() + n / 2, halves.data() + n / 2, n / 2,
             n / 2);
  EXPECT_EQ(0, std::memcmp(whole.data(), halves.data(), n * sizeof(float)));
  std::vector<float> inPlace(x);
  gp_dropout(&ctx, 42, ratio, inPlace.data(), inPlace.data(), n, 0);
  EXPECT_EQ(0, std::memcmp(whole.data(), inPlace.data(), n * sizeof(float)));
  auto differing = [&](uint64_t key, int64_t step) {
    gp_step_ctx other{};
    other.step = step;
    std::vector<float> y(n);
    gp_dropout(&other, key, ratio, x.data(), y.data(), n, 0);
    int64_t d = 0;
    for (int64_t i = 0; i < n; ++i)
      d += (y[i] == 0.0f) != (whole[i] == 0.0f);
    return d;
  };
  // Independent masks disagree on about 2 p (1 - p) of the elements.
  EXPECT_GT(differing(42, 4), n / 10);
  EXPECT_GT(differing(43, 3), n / 10);
  EXPECT_EQ(differing(42, 3), 0);
}

//===----------------------------------------------------------------------===//
// Convolutions (oneDNN)
//===----------------------------------------------------------------------===//

namespace {
std::vector<float> uniform(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float &x : v)
    x = dist(rng);
  return v;
}
} // namespace

// Forward (with and without bias), input and weight gradients against the
// naive reference, for every case; each call twice, the second reusing the
// cached primitives (and overwriting, not accumulating into, its output).
/// Sets GPIPE_CPU_CONV_LAYOUT (nullptr: unset) and applies it as deviceInit
/// does.
static void setConvLayout(const char *value) {
  if (value)
    setenv("GPIPE_CPU_CONV_LAYOUT", value, 1);
  else
    unsetenv("GPIPE_CPU_CONV_LAYOUT");
  std::string err;
  ASSERT_TRUE(gpipe::cpuConvConfigure(err)) << err;
}

TEST(Conv, MatchesNaiveReference) {
  // oneDNN's own (blocked) layouts with reorders, the default, and the
  // arena's plain ones.
  for (const char *layout : {"blocked", "plain"}) {
    setConvLayout(layout);
    for (const convref::Case &c : convref::cases()) {
      SCOPED_TRACE(std::string(c.name) + ", " + layout);
      const gp_conv_shape &s = c.s;
      std::vector<float> x = uniform(convref::xSize(s), 1);
      std::vector<float> w = uniform(convref::wSize(s), 2);
      std::vector<float> dy = uniform(convref::ySize(s), 3);
      std::vector<float> b = uniform(s.F, 4);
      const float *bias = c.bias ? b.data() : nullptr;
      for (int rep = 0; rep < 2; ++rep) {
        std::vector<float> y(convref::ySize(s), rep ? 7.0f : NAN);
        std::vector<float> dx(convref::xSize(s), rep ? 7.0f : NAN);
        std::vector<float> dw(convref::wSize(s), rep ? 7.0f : NAN);
        gp_conv_fwd(&s, x.data(), w.data(), bias, y.data());
        gp_conv_bwd_data(&s, dy.data(), w.data(), dx.data());
        gp_conv_bwd_weights(&s, x.data(), dy.data(), dw.data());
        EXPECT_LT(convref::maxErr(y, convref::forward(s, x, w, bias)), 1e-5);
        EXPECT_LT(convref::maxErr(dx, convref::inputGrad(s, dy, w)), 1e-5);
        EXPECT_LT(convref::maxErr(dw, convref::weightGrad(s, x, dy)), 1e-5);
      }
    }
  }
  setConvLayout(nullptr);
}

TEST(Conv, LayoutRejectsUnknownValue) {
  setenv("GPIPE_CPU_CONV_LAYOUT", "nhwc", 1);
  std::string err;
  EXPECT_FALSE(gpipe::cpuConvConfigure(err));
  EXPECT_NE(
      err.find("GPIPE_CPU_CONV_LAYOUT='nhwc' is not a convolution layout"),
      std::string::npos)
      << err;
  setConvLayout(nullptr);
}
