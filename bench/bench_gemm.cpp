// Single GEMMs, oneDNN's dnnl_sgemm vs OpenBLAS's cblas_sgemm, on the shapes
// of a training step: the evidence behind gp_gemm's GPIPE_CPU_GEMM=auto rule
// (runtime/src/kernels.cpp, docs/architecture.md "GEMM"). A C++ program, not
// a Python script: in a Python process (numpy operands) oneDNN ran the NN
// products with N = 256 about 2x slower than here and than in the stage
// programs, cause not found.
//
// For each shape both libraries are called alternately on the same
// row-major operands and the fastest of REPEAT calls of each is kept.
//   gpt (default): every distinct gp_gemm of one step of bench_step.py's GPT
//     (1024 tokens, d 256, MLP 1024, vocab 2048), with its calls per step;
//     the weighted sums approximate the step's GEMM time per choice.
//   tn: more transposed-A products, incl. micro-batch sizes (K = 128).
//   mlp: the GEMMs of bench/run.sh's MLP step (8 x Linear(1024, 1024) + ReLU,
//     Linear(1024, 10), batch 256).
// First, OpenBLAS's "narrow first product" effect: TN 1024 x 256 x 1024 timed
// as its first products, then after one wide product (what deviceInit does;
// argument "cold" skips that, and the table then shows the cold state).
//
// Build and run (1 thread):
//   g++ -O2 bench/bench_gemm.cpp -o /tmp/bench_gemm \
//     -I/usr/include/x86_64-linux-gnu/openblas-pthread -ldnnl -lopenblas
//   OMP_NUM_THREADS=1 /tmp/bench_gemm [gpt|tn|mlp] [REPEAT] [cold]
#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

namespace {
struct Shape {
  int ta, tb;
  long m, n, k;
  int perStep;
};

const Shape kGpt[] = {{0, 1, 1024, 768, 256, 4},  {0, 1, 1024, 256, 256, 4},
                      {0, 1, 1024, 1024, 256, 4}, {0, 1, 1024, 256, 1024, 4},
                      {0, 1, 1024, 2048, 256, 1}, {0, 0, 1024, 256, 768, 4},
                      {0, 0, 1024, 256, 256, 4},  {0, 0, 1024, 256, 2048, 1},
                      {0, 0, 1024, 256, 1024, 4}, {0, 0, 1024, 1024, 256, 4},
                      {1, 0, 768, 256, 1024, 4},  {1, 0, 256, 256, 1024, 4},
                      {1, 0, 256, 1024, 1024, 4}, {1, 0, 2048, 256, 1024, 1},
                      {1, 0, 1024, 256, 1024, 4}};
const Shape kMlp[] = {{0, 1, 256, 1024, 1024, 8}, {0, 0, 256, 1024, 1024, 7},
                      {1, 0, 1024, 1024, 256, 8}, {0, 1, 256, 10, 1024, 1},
                      {0, 0, 256, 1024, 10, 1},   {1, 0, 10, 1024, 256, 1}};
const Shape kTn[] = {{1, 0, 1024, 1024, 1024, 1}, {1, 0, 2048, 2048, 256, 1},
                     {1, 0, 512, 512, 1024, 1},   {1, 0, 128, 1024, 1024, 1},
                     {1, 0, 1024, 512, 512, 1},   {1, 0, 1024, 256, 256, 1},
                     {1, 0, 1024, 64, 1024, 1},   {1, 0, 4096, 256, 128, 1},
                     {1, 0, 1024, 256, 128, 1},   {1, 0, 2048, 256, 128, 1},
                     {1, 0, 768, 256, 128, 1},    {1, 0, 256, 1024, 128, 1}};

/// gp_gemm's auto rule (kernels.cpp, gemmOnOpenBlas).
bool autoPicksOpenBlas(const Shape &s, bool avx2Only) {
  return avx2Only && s.m > 64 && s.m * s.n * s.k >= (1L << 24);
}

double msSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now() - t0)
      .count();
}
} // namespace

int main(int argc, char **argv) {
  bool tn = argc > 1 && !std::strcmp(argv[1], "tn");
  bool mlp = argc > 1 && !std::strcmp(argv[1], "mlp");
  int repeat = argc > 2 ? std::atoi(argv[2]) : 9;
  bool cold = argc > 3 && !std::strcmp(argv[3], "cold");
  const char *omp = std::getenv("OMP_NUM_THREADS");
  openblas_set_num_threads(omp ? std::atoi(omp) : 1);
  bool avx2Only = !__builtin_cpu_supports("avx512f");
  std::vector<float> A(4096 * 2048), B(4096 * 2048), C(4096 * 2048);
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (float &x : A)
    x = u(gen);
  for (float &x : B)
    x = u(gen);
  // OpenBLAS's first products here are narrow (N = 256): timed before and
  // after one wide product (what deviceInit does), unless "cold".
  auto narrow = [&] {
    double t = 1e30;
    for (int r = 0; r < 5; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, 1024, 256, 1024, 1.f,
                  A.data(), 1024, B.data(), 256, 0.f, C.data(), 256);
      t = std::min(t, msSince(t0));
    }
    return t;
  };
  double before = narrow();
  if (!cold) {
    std::vector<float> w(256 * 2048);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, 256, 2048, 64, 1.f,
                w.data(), 256, w.data(), 2048, 0.f, C.data(), 2048);
  }
  double after = narrow();
  std::printf("CPU: %s; OMP_NUM_THREADS=%s\n",
              avx2Only ? "AVX2, no AVX-512" : "AVX-512", omp ? omp : "(unset)");
  std::printf("OpenBLAS TN 1024 x 256 x 1024 as its first products: %.2f ms; "
              "then %s: %.2f ms\n\n",
              before,
              cold ? "still without a wide product" : "after one wide product",
              after);
  std::printf(
      "| op | M | N | K | per step | oneDNN ms | OpenBLAS ms | "
      "OpenBLAS/oneDNN | auto |\n|---|--:|--:|--:|--:|--:|--:|--:|---|\n");
  double onednn = 0, openblas = 0, best = 0, chosen = 0;
  const Shape *begin = tn ? kTn : mlp ? kMlp : kGpt;
  const Shape *end = tn    ? kTn + sizeof kTn / sizeof *kTn
                     : mlp ? kMlp + sizeof kMlp / sizeof *kMlp
                           : kGpt + sizeof kGpt / sizeof *kGpt;
  for (const Shape *s = begin; s != end; ++s) {
    long lda = s->ta ? s->m : s->k, ldb = s->tb ? s->k : s->n;
    double d = 1e30, o = 1e30;
    for (int r = 0; r < repeat; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      dnnl_sgemm(s->ta ? 'T' : 'N', s->tb ? 'T' : 'N', s->m, s->n, s->k, 1.f,
                 A.data(), lda, B.data(), ldb, 0.f, C.data(), s->n);
      d = std::min(d, msSince(t0));
      t0 = std::chrono::steady_clock::now();
      cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans,
                  s->tb ? CblasTrans : CblasNoTrans, s->m, s->n, s->k, 1.f,
                  A.data(), lda, B.data(), ldb, 0.f, C.data(), s->n);
      o = std::min(o, msSince(t0));
    }
    bool pick = autoPicksOpenBlas(*s, avx2Only);
    onednn += d * s->perStep;
    openblas += o * s->perStep;
    best += std::min(d, o) * s->perStep;
    chosen += (pick ? o : d) * s->perStep;
    std::printf("| %c%c | %ld | %ld | %ld | %d | %.2f | %.2f | %.2f | %s |\n",
                s->ta ? 'T' : 'N', s->tb ? 'T' : 'N', s->m, s->n, s->k,
                s->perStep, d, o, o / d, pick ? "OpenBLAS" : "oneDNN");
  }
  std::printf(
      "\nWeighted by calls per step: oneDNN only %.1f ms, OpenBLAS only "
      "%.1f ms, auto %.1f ms, per-shape best %.1f ms\n",
      onednn, openblas, chosen, best);
  return 0;
}
