/* LD_PRELOAD tracer for bench/bench_pipeline.py (a benchmark aid, not part of
 * the runtime).
 *
 * Wraps the calls a gpipe stage program makes into shared libraries --
 * dnnl_sgemm (oneDNN, called by the runtime's gp_gemm), cblas_sgemm (OpenBLAS,
 * what gp_gemm called before; kept so that older builds can still be traced)
 * and MPI_Send / MPI_Probe / MPI_Recv (Open MPI, via the runtime's gp_send /
 * gp_recv) -- and records, per call, its CLOCK_MONOTONIC start and end plus
 * its shape (GEMM) or peer/tag/bytes (MPI).  Everything else a stage does
 * (generated elementwise loops, bias broadcast, the transpose-back of
 * gp_gemm's transposed-product path, the copies of the deferred weight
 * gradients' operands, the SGD update) is the time between the recorded
 * calls.  CLOCK_MONOTONIC is one clock for all processes on the machine, so
 * the traces of the stages of one run can be laid side by side.
 *
 * Only active when GPIPE_TRACE_DIR is set; then each process that made at
 * least one recorded call writes GPIPE_TRACE_DIR/trace.<pid>.tsv at exit:
 *   # rank <OMPI_COMM_WORLD_RANK or -1> exe <path>
 *   kind t0_ns t1_ns a b c d e
 * kind gemm: a..e = M N K transA transB of the call as made (row-major
 *   operands; for dnnl_sgemm the transa / transb characters 'T' -> 1),
 *   f = beta != 0, g = library (0 cblas_sgemm, 1 dnnl_sgemm);
 * kind send/probe/recv: a = peer, b = tag, c = bytes (probe: 0).
 * Overhead: two clock_gettime calls per wrapped call (~100 calls per step).
 * The dnnl_sgemm wrapper relies on the stage calling libdnnl.so.2 through its
 * PLT (the runtime is linked statically, oneDNN dynamically), so LD_PRELOAD
 * interposes it.
 *
 * Build: cc -O2 -shared -fPIC -o libpipeline_trace.so pipeline_trace.c \
 *          $(mpicc --showme:compile) -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { K_GEMM, K_SEND, K_PROBE, K_RECV };
static const char *kKindName[] = {"gemm", "send", "probe", "recv"};

typedef struct {
  int64_t t0, t1;
  int32_t kind, a, b, c, d, e, f, g;
} Event;

#define MAX_EVENTS (1 << 18)
static Event gEvents[MAX_EVENTS];
static int gCount = 0;
static int gOverflow = 0;
static int gEnabled = -1;

static int enabled(void) {
  if (gEnabled < 0)
    gEnabled = getenv("GPIPE_TRACE_DIR") != NULL;
  return gEnabled;
}

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void record(int kind, int64_t t0, int64_t t1, int a, int b, int c,
                   int d, int e, int f, int g) {
  if (gCount >= MAX_EVENTS) {
    gOverflow = 1;
    return;
  }
  Event *ev = &gEvents[gCount++];
  ev->t0 = t0;
  ev->t1 = t1;
  ev->kind = kind;
  ev->a = a;
  ev->b = b;
  ev->c = c;
  ev->d = d;
  ev->e = e;
  ev->f = f;
  ev->g = g;
}

static void *next_sym(const char *name) {
  void *p = dlsym(RTLD_NEXT, name);
  if (!p) {
    fprintf(stderr, "pipeline_trace: cannot find %s\n", name);
    abort();
  }
  return p;
}

/* OpenBLAS: enums are ints, blasint is int (LP64 build). */
typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *,
                         int, const float *, int, float, float *, int);

void cblas_sgemm(int order, int transA, int transB, int M, int N, int K,
                 float alpha, const float *A, int lda, const float *B, int ldb,
                 float beta, float *C, int ldc) {
  static sgemm_fn real = NULL;
  if (!real)
    real = (sgemm_fn)next_sym("cblas_sgemm");
  if (!enabled()) {
    real(order, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  int64_t t0 = now_ns();
  real(order, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  int64_t t1 = now_ns();
  /* CblasTrans = 112, CblasNoTrans = 111 */
  record(K_GEMM, t0, t1, M, N, K, transA == 112, transB == 112, beta != 0.0f,
         0);
}

/* oneDNN: dnnl_status_t dnnl_sgemm(char transa, char transb, dnnl_dim_t M,
 * dnnl_dim_t N, dnnl_dim_t K, float alpha, const float *A, dnnl_dim_t lda,
 * const float *B, dnnl_dim_t ldb, float beta, float *C, dnnl_dim_t ldc),
 * row-major; dnnl_dim_t is int64_t, dnnl_status_t an int-sized enum. */
typedef int (*dnnl_sgemm_fn)(char, char, int64_t, int64_t, int64_t, float,
                             const float *, int64_t, const float *, int64_t,
                             float, float *, int64_t);

int dnnl_sgemm(char transa, char transb, int64_t M, int64_t N, int64_t K,
               float alpha, const float *A, int64_t lda, const float *B,
               int64_t ldb, float beta, float *C, int64_t ldc) {
  static dnnl_sgemm_fn real = NULL;
  if (!real)
    real = (dnnl_sgemm_fn)next_sym("dnnl_sgemm");
  if (!enabled())
    return real(transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  int64_t t0 = now_ns();
  int rc = real(transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  int64_t t1 = now_ns();
  record(K_GEMM, t0, t1, (int)M, (int)N, (int)K, transa == 'T' || transa == 't',
         transb == 'T' || transb == 't', beta != 0.0f, 1);
  return rc;
}

typedef int (*send_fn)(const void *, int, MPI_Datatype, int, int, MPI_Comm);
typedef int (*probe_fn)(int, int, MPI_Comm, MPI_Status *);
typedef int (*recv_fn)(void *, int, MPI_Datatype, int, int, MPI_Comm,
                       MPI_Status *);

int MPI_Send(const void *buf, int count, MPI_Datatype dt, int dest, int tag,
             MPI_Comm comm) {
  static send_fn real = NULL;
  if (!real)
    real = (send_fn)next_sym("MPI_Send");
  if (!enabled())
    return real(buf, count, dt, dest, tag, comm);
  int64_t t0 = now_ns();
  int rc = real(buf, count, dt, dest, tag, comm);
  int64_t t1 = now_ns();
  int size = 1;
  MPI_Type_size(dt, &size);
  record(K_SEND, t0, t1, dest, tag, count * size, 0, 0, 0, 0);
  return rc;
}

int MPI_Probe(int source, int tag, MPI_Comm comm, MPI_Status *st) {
  static probe_fn real = NULL;
  if (!real)
    real = (probe_fn)next_sym("MPI_Probe");
  if (!enabled())
    return real(source, tag, comm, st);
  int64_t t0 = now_ns();
  int rc = real(source, tag, comm, st);
  int64_t t1 = now_ns();
  record(K_PROBE, t0, t1, source, tag, 0, 0, 0, 0, 0);
  return rc;
}

int MPI_Recv(void *buf, int count, MPI_Datatype dt, int source, int tag,
             MPI_Comm comm, MPI_Status *st) {
  static recv_fn real = NULL;
  if (!real)
    real = (recv_fn)next_sym("MPI_Recv");
  if (!enabled())
    return real(buf, count, dt, source, tag, comm, st);
  int64_t t0 = now_ns();
  int rc = real(buf, count, dt, source, tag, comm, st);
  int64_t t1 = now_ns();
  int size = 1;
  MPI_Type_size(dt, &size);
  record(K_RECV, t0, t1, source, tag, count * size, 0, 0, 0, 0);
  return rc;
}

__attribute__((destructor)) static void dump(void) {
  if (!enabled() || gCount == 0)
    return;
  const char *dir = getenv("GPIPE_TRACE_DIR");
  char path[4096];
  snprintf(path, sizeof(path), "%s/trace.%d.tsv", dir, (int)getpid());
  FILE *f = fopen(path, "w");
  if (!f)
    return;
  char exe[4096] = "?";
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0)
    exe[n] = 0;
  const char *rank = getenv("OMPI_COMM_WORLD_RANK");
  fprintf(f, "# rank %s exe %s overflow %d\n", rank ? rank : "-1", exe,
          gOverflow);
  for (int i = 0; i < gCount; ++i) {
    const Event *e = &gEvents[i];
    fprintf(f, "%s\t%lld\t%lld\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n",
            kKindName[e->kind], (long long)e->t0, (long long)e->t1, e->a, e->b,
            e->c, e->d, e->e, e->f, e->g);
  }
  fclose(f);
}
