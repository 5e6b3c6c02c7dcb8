/* Single-GEMM sweep for bench/bench_pipeline.py (a benchmark aid, not part of
 * the runtime).
 *
 * Times, on one thread, the GEMMs a stage program makes for one 1024 -> 1024
 * Linear layer at R rows per micro-batch, through the very function the stage
 * programs call: gp_gemm from libgpipe_runtime.a (oneDNN dnnl_sgemm
 * underneath, with its transposed-product path for a few rows against a wide
 * transposed weight).  Also times the plain dnnl_sgemm('N','T') forward, i.e.
 * what the forward would cost without that path.
 *
 * Each pass cycles over LAYERS distinct WIDTH x WIDTH weights and gradient
 * accumulators (8 x 4 MiB: not cache-resident), as a stage does.
 *
 * Output, one line per R (times in ms per call, best of REPS passes):
 *   R fwd fwd_plain dX dW
 *   fwd        gp_gemm(0, 1, R, W, W)  beta 1  X * W^T (the Linear forward)
 *   fwd_plain  dnnl_sgemm('N','T', R, W, W) beta 1 (no transposed-product path)
 *   dX         gp_gemm(0, 0, R, W, W)  beta 0  G * W
 *   dW         gp_gemm(1, 0, W, W, R)  beta 1  G^T * X, K = R rows
 *
 * usage: gemm_sweep WIDTH LAYERS REPS R1 [R2 ...]
 * Build: cc -O2 -o gemm_sweep gemm_sweep.c .../libgpipe_runtime.a -ldnnl \
 *          -fopenmp -lstdc++ -lm
 */
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* runtime/include/gpipe/runtime.h */
void gp_gemm(int transA, int transB, int64_t M, int64_t N, int64_t K,
             float alpha, const float *A, int64_t lda, const float *B,
             int64_t ldb, float beta, float *C, int64_t ldc);

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static float *alloc_fill(int64_t n, unsigned *seed, float scale) {
  float *p = aligned_alloc(64, ((n * sizeof(float) + 63) / 64) * 64);
  if (!p) {
    perror("aligned_alloc");
    exit(1);
  }
  for (int64_t i = 0; i < n; ++i)
    p[i] = scale * ((float)rand_r(seed) / RAND_MAX - 0.5f);
  return p;
}

enum { FWD, FWD_PLAIN, DX, DW, NKINDS };

static void call(int kind, int64_t R, int64_t W, const float *X,
                 const float *G, const float *Wt, float *C, float *dW) {
  switch (kind) {
  case FWD:
    gp_gemm(0, 1, R, W, W, 1.f, X, W, Wt, W, 1.f, C, W);
    break;
  case FWD_PLAIN:
    if (dnnl_sgemm('N', 'T', R, W, W, 1.f, X, W, Wt, W, 1.f, C, W) !=
        dnnl_success)
      abort();
    break;
  case DX:
    gp_gemm(0, 0, R, W, W, 1.f, G, W, Wt, W, 0.f, C, W);
    break;
  case DW:
    gp_gemm(1, 0, W, W, R, 1.f, G, W, X, W, 1.f, dW, W);
    break;
  }
}

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: gemm_sweep WIDTH LAYERS REPS R1 [R2 ...]\n");
    return 2;
  }
  int64_t W = atoll(argv[1]);
  int layers = atoi(argv[2]), reps = atoi(argv[3]);
  omp_set_num_threads(1);
  unsigned seed = 1;
  float **Wt = malloc(layers * sizeof(float *));
  float **dW = malloc(layers * sizeof(float *));
  for (int l = 0; l < layers; ++l) {
    Wt[l] = alloc_fill(W * W, &seed, 0.06f);
    dW[l] = alloc_fill(W * W, &seed, 0.f);
  }
  printf("# R fwd fwd_plain dX dW (ms per call, 1 thread)\n");
  for (int a = 4; a < argc; ++a) {
    int64_t R = atoll(argv[a]);
    float *X = alloc_fill(R * W, &seed, 2.f);
    float *G = alloc_fill(R * W, &seed, 2.f);
    float *C = alloc_fill(R * W, &seed, 0.f);
    double flop = 2.0 * R * W * W;
    int n = (int)(2e9 / (flop * layers)); /* ~2 GFLOP per pass */
    if (n < 2)
      n = 2;
    printf("%lld", (long long)R);
    for (int k = 0; k < NKINDS; ++k) {
      for (int l = 0; l < layers; ++l) /* warm: JIT kernels, page faults */
        call(k, R, W, X, G, Wt[l], C, dW[l]);
      double best = 1e30;
      for (int r = 0; r < reps; ++r) {
        double t0 = now_s();
        for (int i = 0; i < n; ++i)
          for (int l = 0; l < layers; ++l)
            call(k, R, W, X, G, Wt[l], C, dW[l]);
        double t = (now_s() - t0) / ((double)n * layers);
        if (t < best)
          best = t;
      }
      printf(" %.5f", best * 1e3);
    }
    printf("\n");
    fflush(stdout);
    free(X);
    free(G);
    free(C);
  }
  return 0;
}
