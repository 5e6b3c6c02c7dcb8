// The CPU runtime's device: the arena is host memory, copies are memcpy,
// transfers are blocking MPI, and the loss is read as soon as it is reported.
#include "internal.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <sys/resource.h>

namespace gpipe {
namespace {
unsigned char *gArena = nullptr;
bool gSharedArena = false; // transportSharedArena's
int64_t gThreads = 1;
} // namespace

gp_target deviceTarget() { return GP_TARGET_CPU; }

bool deviceInit(const gp_program &, const DeviceOptions &options,
                std::string &err) {
  const int64_t threads = options.threads;
  if (options.device >= 0) {
    err = "--device selects a GPU: this stage program was compiled for the "
          "CPU (--target cpu)";
    return false;
  }
  // Generated elementwise loops, oneDNN's GEMMs and the update kernels use
  // OpenMP.
  gThreads = threads;
  omp_set_num_threads(static_cast<int>(threads));
  return cpuGemmConfigure(err) && cpuConvConfigure(err);
}

int64_t deviceMemoryInUse() { return -1; }

bool deviceMeasureLinks(const gp_program &p, std::vector<LinkSample> &out,
                        std::string &err) {
  return transportMeasureLinks(p, LinkStaging{}, out, err);
}

bool deviceRuntimeBytes(const gp_program &p, int64_t &bytes, std::string &) {
  // The resident memory besides the arena at its peak so far (code,
  // libraries, MPI, data pages, the math libraries' buffers).
  struct rusage ru;
  bytes = -1;
  if (::getrusage(RUSAGE_SELF, &ru) == 0)
    bytes = std::max<int64_t>(0, static_cast<int64_t>(ru.ru_maxrss) * 1024 -
                                     p.arena_bytes);
  return true;
}

std::string deviceDescription() {
  return "cpu, " + std::to_string(gThreads) +
         (gThreads == 1 ? " thread" : " threads");
}

unsigned char *deviceAllocArena(int64_t bytes, std::string &err) {
  // Replicas on one node: in memory they share, averaged in place.
  if (unsigned char *shared = transportSharedArena(bytes)) {
    std::memset(shared, 0, static_cast<size_t>(bytes));
    gSharedArena = true;
    return shared;
  }
  // aligned_alloc needs a multiple of the alignment.
  size_t size = (static_cast<size_t>(bytes) + 255) / 256 * 256;
  if (size == 0)
    size = 256;
  gArena = static_cast<unsigned char *>(std::aligned_alloc(256, size));
  if (!gArena) {
    err = "cannot allocate the " + std::to_string(size) + "-byte arena";
    return nullptr;
  }
  std::memset(gArena, 0, size);
  return gArena;
}

bool deviceUpload(unsigned char *dst, const void *src, int64_t bytes,
                  std::string &) {
  std::memcpy(dst, src, static_cast<size_t>(bytes));
  return true;
}

bool deviceDownload(void *dst, const unsigned char *src, int64_t bytes,
                    std::string &) {
  std::memcpy(dst, src, static_cast<size_t>(bytes));
  return true;
}

void deviceLoadInput(gp_step_ctx *, int32_t, int64_t, void *dst,
                     const void *src, int64_t bytes) {
  std::memcpy(dst, src, static_cast<size_t>(bytes));
}

bool deviceStepEnd(gp_step_ctx &, std::string &) { return true; }

// A profile unit's time: with one thread, the stage thread's CPU time (a
// stage sharing its core with others is not charged for their turns); with
// more, wall time (the OpenMP team's work is not in this thread's).
int64_t deviceProfileMark() {
  return gThreads == 1 ? threadCpuNs() : timingNowNs();
}

void deviceProfileSpan(int32_t unit, int64_t mark) {
  profileAddNs(unit, deviceProfileMark() - mark);
}

void deviceShutdown() {
  if (gSharedArena)
    transportFreeSharedArena();
  else
    std::free(gArena);
  gArena = nullptr;
  gSharedArena = false;
}

} // namespace gpipe

extern "C" void gp_report_loss(gp_step_ctx *ctx, const float *loss) {
  ctx->loss += static_cast<double>(*loss);
}

namespace {
/// GPIPE_DP_OVERLAP=0: each gp_reduce_start completes its average at once
/// (for measuring what the overlap saves); default: started, and moved on
/// while the update computes.
bool dpOverlap() {
  static const bool on = [] {
    const char *v = std::getenv("GPIPE_DP_OVERLAP");
    return !(v && std::string(v) == "0");
  }();
  return on;
}

float *gradients(gp_step_ctx *ctx, int64_t offset, int64_t bytes,
                 const char *fn) {
  if (offset < 0 || bytes < 0 || bytes % 4 != 0)
    gpipe::fatal(ctx, 1,
                 std::string("invalid program: ") + fn + " of " +
                     std::to_string(bytes) + " bytes at " +
                     std::to_string(offset));
  return reinterpret_cast<float *>(ctx->arena + offset);
}

/// Traced (and counted in the report's transfer wait) as one event each.
void traceAllReduce(gp_step_ctx *ctx, int64_t bytes, int64_t t0, int64_t cpu0) {
  gpipe::timingTransfer(gpipe::TimedKind::AllReduce, ctx, -1, bytes, t0,
                        gpipe::timingNowNs(),
                        cpu0 < 0 ? -1 : gpipe::timingCpuNs() - cpu0);
}

/// `average` (a transport call on the gradients' floats at `offset`) for
/// runtime entry point `fn`, traced; a failure ends the stage.
template <typename F>
void tracedAverage(gp_step_ctx *ctx, int64_t offset, int64_t bytes,
                   const char *fn, F average) {
  std::string err;
  float *g = gradients(ctx, offset, bytes, fn);
  int64_t t0 = gpipe::timingNowNs(), cpu0 = gpipe::timingCpuNs();
  if (!average(g, bytes / 4, err))
    gpipe::fatal(ctx, 1, err);
  traceAllReduce(ctx, bytes, t0, cpu0);
}
} // namespace

extern "C" void gp_reduce_gradients(gp_step_ctx *ctx, int64_t offset,
                                    int64_t bytes) {
  tracedAverage(ctx, offset, bytes, "gp_reduce_gradients",
                [](float *g, int64_t n, std::string &err) {
                  return gpipe::transportAverageReplicas(g, n, err);
                });
}

extern "C" void gp_reduce_start(gp_step_ctx *ctx, int64_t offset,
                                int64_t bytes) {
  tracedAverage(ctx, offset, bytes, "gp_reduce_start",
                [](float *g, int64_t n, std::string &err) {
                  return gpipe::transportAverageStart(g, n, err) &&
                         (dpOverlap() || gpipe::transportAverageWait(err));
                });
}

extern "C" int64_t gp_shard_slice(gp_step_ctx *, int64_t total, int64_t elem,
                                  int64_t n, int64_t *i0, int64_t *i1) {
  int64_t lo = 0, hi = 0;
  gpipe::transportShare(total, lo, hi);
  const int64_t a = std::max(elem, lo), b = std::min(elem + n, hi);
  *i0 = a - elem;
  *i1 = std::max(a, b) - elem;
  return a - lo;
}

extern "C" void gp_shard_reduce(gp_step_ctx *ctx, int64_t offset,
                                int64_t bytes) {
  tracedAverage(ctx, offset, bytes, "gp_shard_reduce",
                gpipe::transportShardReduce);
}

extern "C" void gp_shard_gather(gp_step_ctx *ctx, int64_t offset, int64_t bytes,
                                const gp_shard_param *params, int32_t count) {
  std::string err;
  float *buf = gradients(ctx, offset, bytes, "gp_shard_gather");
  const int64_t total = bytes / 4;
  int64_t t0 = gpipe::timingNowNs(), cpu0 = gpipe::timingCpuNs();
  // This replica's share of each parameter into the buffer, every share
  // gathered, every parameter back out.
  for (int32_t k = 0; k < count; ++k) {
    const gp_shard_param &p = params[k];
    int64_t i0 = 0, i1 = 0;
    gp_shard_slice(ctx, total, p.elem, p.n, &i0, &i1);
    if (i1 > i0)
      std::memcpy(buf + p.elem + i0,
                  reinterpret_cast<float *>(ctx->arena + p.offset) + i0,
                  static_cast<size_t>(i1 - i0) * sizeof(float));
  }
  if (!gpipe::transportShardGather(buf, total, err))
    gpipe::fatal(ctx, 1, err);
  for (int32_t k = 0; k < count; ++k)
    std::memcpy(ctx->arena + params[k].offset, buf + params[k].elem,
                static_cast<size_t>(params[k].n) * sizeof(float));
  traceAllReduce(ctx, bytes, t0, cpu0);
}

extern "C" void gp_reduce_wait(gp_step_ctx *ctx) {
  std::string err;
  int64_t t0 = gpipe::timingNowNs(), cpu0 = gpipe::timingCpuNs();
  if (!gpipe::transportAverageWait(err))
    gpipe::fatal(ctx, 1, err);
  traceAllReduce(ctx, 0, t0, cpu0);
}

extern "C" void gp_send(gp_step_ctx *ctx, int32_t peer, int32_t tag,
                        const void *buf, int64_t bytes) {
  // The time blocked here is the stage's wait on its peer (the report's
  // transfer wait, the trace's "send wait").
  int64_t t0 = gpipe::timingNowNs(), cpu0 = gpipe::timingCpuNs();
  gpipe::mpiSend(ctx, peer, tag, buf, bytes);
  gpipe::timingTransfer(gpipe::TimedKind::Send, ctx, peer, bytes, t0,
                        gpipe::timingNowNs(),
                        cpu0 < 0 ? -1 : gpipe::timingCpuNs() - cpu0);
}

extern "C" void gp_recv(gp_step_ctx *ctx, int32_t peer, int32_t tag, void *buf,
                        int64_t bytes) {
  int64_t t0 = gpipe::timingNowNs(), cpu0 = gpipe::timingCpuNs();
  gpipe::mpiRecv(ctx, peer, tag, buf, bytes);
  gpipe::timingTransfer(gpipe::TimedKind::Recv, ctx, peer, bytes, t0,
                        gpipe::timingNowNs(),
                        cpu0 < 0 ? -1 : gpipe::timingCpuNs() - cpu0);
}
