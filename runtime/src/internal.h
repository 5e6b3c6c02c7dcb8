// Internal state and helpers shared by the runtime's sources (gp_main, the
// data and transport entry points, the kernels' error path). Not installed;
// keeps <mpi.h> out of every header: only transport.cpp includes it.
#ifndef GPIPE_RUNTIME_INTERNAL_H
#define GPIPE_RUNTIME_INTERNAL_H

#include "gpipe/runtime.h"
#include "npy.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

namespace gpipe {

/// The functions an action of model chunk `chunk` runs: chunks[chunk]'s of
/// a program holding several, else the program's own.
struct ChunkFns {
  void (*forward)(gp_step_ctx *, int64_t) = nullptr;
  void (*backward)(gp_step_ctx *, int64_t) = nullptr;
  void (*weight)(gp_step_ctx *, int64_t, int64_t) = nullptr;
};
inline ChunkFns chunkFns(const gp_program &p, int32_t chunk) {
  if (p.num_chunks > 1 && p.chunks)
    return {p.chunks[chunk].forward, p.chunks[chunk].backward,
            p.chunks[chunk].weight};
  return {p.forward, p.backward, p.weight};
}

/// One graph input of this stage: its mapped data file and row geometry.
struct InputData {
  std::string path;
  NpyFile file;
  int64_t rowBytes = 0; // bytes per sample (row of the first axis)
  // The current mini-batch's B rows, contiguous: in the mapped file, or
  // (shuffled) gathered into `gathered`.
  const unsigned char *cur = nullptr;
  std::vector<unsigned char> gathered;
};

/// The order of the data rows in an epoch (data.cpp): file order, or with
/// --shuffle a Fisher-Yates permutation drawn from (seed, epoch)
/// (docs/semantics.md#data-order).
struct EpochOrder {
  int64_t epoch = -1;
  std::vector<int64_t> rows; // empty: file order
};

/// What gp_main owns for the duration of a run; ctx->runtime points here.
struct Runtime {
  const gp_program *program = nullptr;
  int32_t stage = 0;
  int64_t batchSize = 0; // B: this replica's rows of a step
  int64_t microRows = 0; // B / M
  // --data-parallel D: a step's mini-batch is D * B rows (globalBatch), of
  // which replica r reads [r * B, (r + 1) * B) (replicaOffset); one
  // pipeline: B and 0.
  int64_t globalBatch = 0;
  int64_t replicaOffset = 0;
  // Step s reads positions [miniFirst, miniFirst + B) of its epoch's order:
  // miniFirst = ((s - 1) mod numBatches) * globalBatch + replicaOffset.
  int64_t miniFirst = 0;
  int64_t miniStep = 0;      // the step whose mini-batch is current
  int64_t nextMiniStep = -1; // the next step to run (-1: none)
  int64_t numBatches = 0; // samples / globalBatch (0: the stage reads no data)
  bool shuffle = false;   // --shuffle
  uint64_t seed = 0;      // --seed
  EpochOrder order;       // the current step's epoch
  std::vector<InputData> inputs; // parallel to program->inputs
};

/// Makes step `step`'s mini-batch current (data.cpp): miniFirst, miniStep,
/// the epoch's order, each input's `cur` rows.
void selectMiniBatch(Runtime &rt, int64_t step);

/// Copies the B rows of input `input` of step `step`'s mini-batch to `dst`
/// (B * rowBytes bytes), in the step's order: for prefetching the next step.
void copyMiniBatch(const Runtime &rt, int64_t step, int32_t input, void *dst);

/// The data file row at position `position` of the current epoch's order.
int64_t fileRow(const Runtime &rt, int64_t position);

/// CPU loops over fewer elements than this run on one thread: below it,
/// waking the OpenMP team costs more than the loop (kernels.cpp, pool.cpp,
/// batchnorm.cpp).
constexpr int64_t kParallelMin = 1 << 15;

/// The runtime library is built for generic x86-64; its hottest loops also
/// get an AVX2 clone (GCC's target_clones), chosen when the program loads.
/// No FMA contraction either way (-std=c++17 turns it off), so both clones
/// round alike.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) &&         \
    defined(__GLIBC__)
#define GP_CPU_CLONES                                                          \
  __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define GP_CPU_CLONES
#endif

/// Python hands torch its hyper-parameters as doubles, but the generated code
/// passes floats. Recovers the shortest decimal that rounds to the float
/// (0.9f -> 0.9) so that the optimizers' double scalar math (both targets)
/// matches torch bit for bit.
inline double pyDouble(float f) {
  if (!std::isfinite(f))
    return f;
  char buf[32];
  for (int prec = 1; prec <= 9; ++prec) {
    std::snprintf(buf, sizeof(buf), "%.*g", prec, static_cast<double>(f));
    if (std::strtof(buf, nullptr) == f)
      return std::strtod(buf, nullptr);
  }
  return f;
}

/// Prints "gpipe: error: stage S: MSG" (or "gpipe: error: MSG" when stage < 0)
/// on stderr and flushes it.
void printError(int32_t stage, const std::string &msg);

/// Ends the process after an error: prints MSG as above, writes
/// "exit CODE" to the status file, then MPI_Abort (other stages are running)
/// or exit(CODE). `ctx` may be null or carry no runtime (unit tests).
[[noreturn]] void fatal(const gp_step_ctx *ctx, int code,
                        const std::string &msg);
/// The same, for code that has no step context (stage < 0: none named).
[[noreturn]] void fatalInStage(int32_t stage, int code, const std::string &msg);

/// Maps and checks this stage's data files (data.cpp): one <name>.npy per
/// program input under DIR, row shape and dtype as declared, at least B rows,
/// equal row counts. Sets the number of whole mini-batches; on failure sets
/// `err` (a message naming the file, without the "gpipe: error:" prefix).
bool openInputs(Runtime &rt, const std::string &dataDir, int64_t &numBatches,
                std::string &err);

/// The range check of gp_check_labels / gp_check_input_labels (`what` =
/// "label", [0, classes)) and gp_check_input_indices ("index", [-rows,
/// rows)) (data.cpp): values[k] is element k % perSample of sample
/// ctx->first_sample + rowOffset + k / perSample; a value outside [lo, hi)
/// (and not ignoreIndex when hasIgnore) ends the run naming them.
void checkRange(const gp_step_ctx *ctx, const int64_t *values, int64_t n,
                int64_t lo, int64_t hi, int32_t hasIgnore, int64_t ignoreIndex,
                const char *input, int64_t rowOffset, int64_t perSample,
                const char *what);

/// Checks that the pipeline.json at PATH describes `p` (describe.cpp):
/// format, build id, stages, batch and micro-batches, and this stage's entry
/// (index, rank, schedule, boundaries). On failure sets `err`.
bool checkPipelineFile(const gp_program &p, const std::string &path,
                       std::string &err);

//===----------------------------------------------------------------------===//
// Status file (status.cpp): "exit <code>" at the end, "signal <n>" on a crash.
//===----------------------------------------------------------------------===//

/// Remembers PATH in a static buffer; false if it is too long.
bool statusSetPath(const std::string &path);
/// Installs the crash handlers (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT) that
/// write "signal <n>" and re-raise; no-op without a status path. Called after
/// MPI_Init, so they replace Open MPI's own.
void statusInstallHandlers();
/// Writes "exit <code>\n" (no-op without a status file). Async-signal-safe.
void statusWriteExit(int code);
/// Restores the signal handlers statusInstallHandlers replaced and forgets
/// the path.
void statusReset();

//===----------------------------------------------------------------------===//
// Step timing (trace.cpp): the end-of-run report (--report) and the trace
// (--trace). Timestamps are CLOCK_MONOTONIC nanoseconds, comparable between
// the stages of one host. Called from the step loop's thread only.
//===----------------------------------------------------------------------===//

enum class TimedKind {
  Forward,
  Backward,
  Update,
  Send,
  Recv,
  StepEnd,
  Eval,
  Weight,
  Flush,    // a flush action: waits until the stage's sends are received
  AllReduce // --data-parallel: the update's average of the replicas' gradients
};

/// CLOCK_MONOTONIC in nanoseconds.
int64_t timingNowNs();
/// With --trace, the calling thread's CPU time in nanoseconds
/// (CLOCK_THREAD_CPUTIME_ID: what it computed, not the time other processes
/// had its core); -1 without --trace (not sampled).
int64_t timingCpuNs();
/// The calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID), in ns.
int64_t threadCpuNs();
/// Starts the sums; with `trace`, reserves room for `steps` *
/// `eventsPerStep` events (capped; later ones are counted as dropped).
void timingInit(int32_t stage, bool trace, int64_t steps,
                int64_t eventsPerStep);
/// A schedule action (or the step's end: deviceStepEnd) of micro-batch
/// `microbatch` (-1: none) in step `step`, from t0 to t1.
void timingAction(TimedKind kind, int64_t step, int64_t microbatch, int64_t t0,
                  int64_t t1, int32_t chunk = 0, int64_t cpuNs = -1);
/// Time blocked in a send or receive (Send / Recv) with stage `peer`,
/// inside the action ctx describes.
void timingTransfer(TimedKind kind, const gp_step_ctx *ctx, int32_t peer,
                    int64_t bytes, int64_t t0, int64_t t1, int64_t cpuNs = -1);
/// One whole step, from its first action to the end of deviceStepEnd.
void timingStep(int64_t step, int64_t t0, int64_t t1);
/// The recorded events, one Chrome trace event (JSON object) per line, pid =
/// stage. On failure sets `err`.
bool timingWriteTrace(const std::string &path, std::string &err);
/// One JSON object: steps, summed step / compute / transfer-wait / step-end
/// milliseconds, peak resident memory (getrusage), `deviceMemoryBytes` (-1:
/// unknown). On failure sets `err`.
/// Notes the process's resident memory now (before the arena is allocated):
/// the report's start_rss_bytes.
void timingNoteStartRss();
bool timingWriteReport(const std::string &path, int64_t deviceMemoryBytes,
                       std::string &err);

//===----------------------------------------------------------------------===//
// Per-unit timers of a --profile build (profile.cpp): gp_profile_add sums
// each unit's time while counting is on.
//===----------------------------------------------------------------------===//

/// Sizes the sums for `program`'s profile units; counting off.
void profileInit(const gp_program &program);
/// The process's resident memory now (/proc/self/statm), or -1.
int64_t residentBytesNow();
/// The resident memory noted before the arena (timingNoteStartRss), or -1.
int64_t startRssBytes();
/// The runtime's own memory as --profile measures it on the CPU target
/// (the cost table header's memory fields, docs/formats.md): the process
/// before its arena (`start`), the largest piece of a weight file mapped at
/// once while loading (`load`), what the math libraries' calls first
/// touched in the warm-up step (`library`: code, JIT kernels, scratch),
/// and the memory besides the arena and `start` after the steps
/// (`steady`; it includes `library`). -1: not measured.
struct RuntimeMemory {
  int64_t start = -1, load = 0, library = -1, steady = -1;
};
/// A piece of `bytes` of a weight file mapped while loading.
void profileNoteLoadPiece(int64_t bytes);
/// Measures the math libraries' first touches (LibraryTouch) while on: the
/// warm-up step of a --profile run.
void profileMeasureLibrary(bool on);
/// The split measured so far (`arenaBytes` subtracted from steady).
RuntimeMemory profileRuntimeMemory(int64_t arenaBytes);
/// Around a call into oneDNN or OpenBLAS (gp_gemm, the convolutions): while
/// profileMeasureLibrary is on, adds what the outermost such call on the
/// stage's thread made resident to RuntimeMemory::library.
extern bool gMeasureLibrary;
class LibraryTouch {
public:
  LibraryTouch() {
    if (gMeasureLibrary)
      begin();
  }
  ~LibraryTouch() {
    if (before_ >= 0)
      end();
  }
  LibraryTouch(const LibraryTouch &) = delete;
  LibraryTouch &operator=(const LibraryTouch &) = delete;

private:
  void begin();
  void end();
  int64_t before_ = -1;
};
/// Turns counting on or off (off during evaluation and the warm-up step).
void profileCount(bool on);
/// Forgets the sums so far (after the warm-up step).
void profileRestart();
/// One more step in the sums (while counting).
void profileStepDone();
/// Adds `ns` and one call to unit `unit`'s sum (while counting).
void profileAddNs(int32_t unit, int64_t ns);
/// One measured transfer: a message of `bytes` to or from stage `peer`,
/// one way, took `seconds` (the mean of `repeats` round trips, halved).
struct LinkSample {
  int32_t peer = 0;
  int64_t bytes = 0;
  double seconds = 0;
  int32_t repeats = 0;
};
/// The cost table: one JSON line of the program and the counted steps, then
/// one per unit (its ops, calls, summed seconds), then one per measured
/// transfer (`links`). On failure sets `err`.
bool profileWrite(const std::string &path, const gp_program &program,
                  int64_t threads, const std::vector<LinkSample> &links,
                  int64_t runtimeBytes, const RuntimeMemory &memory,
                  std::string &err);

//===----------------------------------------------------------------------===//
// Heartbeat file (heartbeat.cpp), for gpipe-run's watchdog: pid, host, a
// liveness counter, a progress counter and what the stage is doing.
//===----------------------------------------------------------------------===//

/// Writes PATH once, then starts a thread that rewrites it every 0.5 s; also
/// makes the stage die (SIGKILL) with its parent process. On failure sets
/// `err`.
bool heartbeatStart(const std::string &path, int32_t stage, std::string &err);
/// The stage is outside the steps, doing PHASE (a static string).
void heartbeatPhase(const char *phase);
/// The step loop starts action `a` of step `step`.
void heartbeatAction(int64_t step, const gp_action &a);
/// While alive, the stage waits on a transfer with stage `peer`.
/// The calling thread's transfer waits are not the stage's (a CUDA
/// host-staged channel's worker, which waits for messages ahead of the step
/// loop): its HeartbeatWaits change nothing.
void heartbeatIgnoreThisThread();
struct HeartbeatWait {
  HeartbeatWait(int32_t peer, bool recv);
  ~HeartbeatWait();
};
/// Stops the thread (the file stays).
void heartbeatStop();

//===----------------------------------------------------------------------===//
// Transport (transport.cpp): MPI between the stages.
//===----------------------------------------------------------------------===//

/// MPI_Init (thread level FUNNELED, or MULTIPLE when `multiThreaded`: the
/// CUDA runtime calls MPI from stream callbacks), errors returned rather than
/// fatal on MPI_COMM_WORLD. Sets `rank` and `size`. On failure sets `err`.
bool transportInit(int *argc, char ***argv, int &rank, int &size,
                   bool multiThreaded, std::string &err);
/// This rank's index among the ranks on its node (MPI shared-memory split);
/// 0 without MPI.
int transportLocalRank();
/// How mpiSend and mpiRecv wait, for `threadsPerStage` threads per rank:
/// polling with a bounded backoff that sleeps (the default), or in MPI's
/// blocking calls (GPIPE_MPI_WAIT=block). Fails on a bad GPIPE_MPI_WAIT.
bool transportConfigureWaits(int64_t threadsPerStage, std::string &err);
/// MPI transfers of `bytes` bytes with stage `peer` that return when done,
/// checked (sizes agree, peer and tag valid); errors end the run naming both
/// stages.
void mpiSend(gp_step_ctx *ctx, int32_t peer, int32_t tag, const void *buf,
             int64_t bytes);
void mpiRecv(gp_step_ctx *ctx, int32_t peer, int32_t tag, void *buf,
             int64_t bytes);
/// Whether a message from `peer` with `tag` is waiting to be received
/// (MPI_Iprobe; also true on an error, which the receive then reports).
/// Thread-safe under MPI_THREAD_MULTIPLE.
bool transportMessageWaiting(int32_t peer, int32_t tag);
/// Plain MPI transfers for set-up messages (no checks of a running program).
bool transportSendBytes(int32_t peer, int32_t tag, const void *buf,
                        int64_t bytes, std::string &err);
bool transportRecvBytes(int32_t peer, int32_t tag, void *buf, int64_t bytes,
                        std::string &err);
/// A tag above every boundary tensor's, for the runtime's own messages.
int32_t transportSetupTag();
/// Whether MPI is initialised and not yet finalised.
bool transportActive();
/// Gathers `n` int64 values from every rank (rank-major into `all`).
bool transportAllGather(const int64_t *mine, int n, std::vector<int64_t> &all,
                        std::string &err);
/// Blocks forever in a barrier that the failing rank never joins (it aborts).
void transportWaitForAbort();
/// Makes mpiSend buffered (MPI_Bsend: it returns once the data is copied),
/// with a buffer for two steps of the program's sends. On failure sets `err`.
bool transportUseBufferedSends(const gp_program &p, std::string &err);
/// Lets MPI move this stage's pending buffered sends (for a while after
/// each send; nothing otherwise, and nothing off the stage's main thread).
/// Cheap: compute kernels call it.
void transportProgress();
/// Blocks until this stage's buffered sends have been delivered (nothing
/// without buffered sends): before a long computation without a receive.
void transportFlushSends();
/// Lists, with buffered sends on the CPU (else nothing), one receive of
/// every tensor the stage receives in each micro-batch's action of `phase`
/// (0 forward, 1 backward; not the per-step ones): transportProgress takes
/// each listed receive's message as soon as it finds it arrived, into a
/// buffer of its own, and mpiRecv copies it out (or receives as usual when
/// it has not arrived). So a stage computing between two receives still
/// completes its senders' rendezvous. GPIPE_PREPOST=0 turns it off.
void transportExpectReceives(const gp_program &p, int32_t phase);
/// How many receives found their message taken ahead (the stage report's
/// receives_ahead).
int64_t transportReceivesTakenAhead();
/// How a link's round trips move the tensor besides MPI (the CUDA target's
/// host-staged transfers: the GPU to a pinned buffer before the send, back
/// after the receive); empty on the CPU, whose tensors MPI sends as they are.
struct LinkStaging {
  /// Whether the link to `peer` is measured (both ends must agree).
  std::function<bool(int32_t peer)> measured;
  /// Before a send: the tensor from the device into `host`; after a
  /// receive: from `host` into the device.
  std::function<void(void *host, int64_t bytes)> toHost, fromHost;
  /// The host buffer of at least `bytes` the messages go through (CUDA:
  /// pinned, as the transfers' own); unset: an ordinary one.
  std::function<void *(int64_t bytes)> hostBuffer;
};
/// --profile (several stages), after the steps: with every stage this one
/// exchanges boundary tensors with (those `staging.measured` accepts), round
/// trips of each boundary size and of 8 bytes, the pairs of stages in one
/// order on every rank (so that they cannot deadlock), each message staged
/// as `staging` says. Appends one sample per (peer, size). Every stage must
/// call it. On failure sets `err`.
bool transportMeasureLinks(const gp_program &p, const LinkStaging &staging,
                           std::vector<LinkSample> &out, std::string &err);
/// --data-parallel D > 1, after transportInit: rank r is stage r % K of
/// replica r / K; the pipeline's transfers and exchanges stay within its
/// replica, and the stage's D replicas form the group the averages below
/// run in. Nothing with D = 1. On failure sets `err`.
bool transportSetReplicas(int stages, int replicas, std::string &err);
/// This rank's replica (0 without --data-parallel).
int transportReplica();
/// Every replica of this stage calls it with the same `n`: `data` becomes
/// the mean of their copies, summed in replica order (the same bits on
/// every replica and every run). On failure sets `err`.
bool transportAverageReplicas(float *data, int64_t n, std::string &err);
/// --data-parallel on the CPU with every replica of this stage on this node:
/// the arena of `bytes` in a window of memory shared with them
/// (MPI_Win_allocate_shared), which the averages then read from directly.
/// nullptr otherwise (one replica, replicas on other nodes, too little room
/// in the window's backing file system, GPIPE_DP_SHARED=0, or a failed
/// allocation): the caller allocates its own, averaged with MPI's
/// collectives.
unsigned char *transportSharedArena(int64_t bytes);
/// Frees that window (every replica together, before MPI_Finalize).
void transportFreeSharedArena();
/// The same in two halves: start averaging `data` (nonblocking; moved on by
/// transportProgress, which gp_gemm calls), and wait until everything
/// started is averaged, in the order started. `data` must stay untouched
/// in between.
bool transportAverageStart(float *data, int64_t n, std::string &err);
bool transportAverageWait(std::string &err);
/// --shard-optimizer: this replica's share [lo, hi) of n floats (n * r / D
/// to n * (r + 1) / D).
void transportShare(int64_t n, int64_t &lo, int64_t &hi);
/// Every replica calls it with the same n: this replica's share of `data`
/// becomes the mean of the replicas' (summed in replica order, as
/// transportAverageReplicas); the rest is left as it was.
bool transportShardReduce(float *data, int64_t n, std::string &err);
/// Every replica's share of `data` copied into every replica's (in place).
bool transportShardGather(float *data, int64_t n, std::string &err);
/// The same for one number (the loss).
bool transportAverageReplicas(double &value, std::string &err);
/// MPI_Finalize (after delivering buffered sends).
void transportFinalize();
/// MPI_Abort(MPI_COMM_WORLD, code) when other ranks exist, else MPI_Finalize
/// and exit(code).
[[noreturn]] void transportAbort(int code);

//===----------------------------------------------------------------------===//
// Device (device_cpu.cpp, or cuda/device.cu): where the arena lives and how
// the host reaches it. gp_main calls these in this order: deviceInit (after
// the transport joined, when K > 1), deviceAllocArena, deviceUpload (the
// parameters), init, the steps (each ends with deviceStepEnd),
// deviceDownload (the trained parameters), deviceShutdown.
//===----------------------------------------------------------------------===//

/// The target this runtime library runs (GP_TARGET_CPU or GP_TARGET_CUDA).
gp_target deviceTarget();
/// What the stage program's flags ask of the device.
struct DeviceOptions {
  int64_t threads = 1; // --threads (CPU target)
  int64_t device = -1; // --device (CUDA target; -1: automatic)
  // --comm-timeout (CUDA target): how long a step may wait on transfers that
  // make no progress before the run ends naming the transfer.
  double commTimeoutSeconds = 300.0;
};
/// Binds the device and creates what the kernels and transfers need.
/// Collective over the stages when K > 1 (CUDA: NCCL communicators). On
/// failure sets `err`.
/// CPU target: reads GPIPE_CPU_GEMM (auto, onednn, openblas), which picks the
/// library of gp_gemm's products; false with `err` on another value.
bool cpuGemmConfigure(std::string &err);
/// CPU target: reads GPIPE_CPU_CONV_LAYOUT (blocked, plain), the memory
/// layouts of the oneDNN convolutions; false with `err` on another value.
bool cpuConvConfigure(std::string &err);
bool deviceInit(const gp_program &p, const DeviceOptions &options,
                std::string &err);
/// One line for the log: "cpu, 1 thread", "cuda:0 (NVIDIA H100 80GB HBM3)".
std::string deviceDescription();
/// The zeroed arena of `bytes` bytes (256-byte aligned), or null with `err`.
unsigned char *deviceAllocArena(int64_t bytes, std::string &err);
/// Synchronous copies between host memory and the arena.
bool deviceUpload(unsigned char *dst, const void *src, int64_t bytes,
                  std::string &err);
bool deviceDownload(void *dst, const unsigned char *src, int64_t bytes,
                    std::string &err);
/// gp_load_input's copy of one micro-batch of graph input `input` from the
/// mapped data file (`src`) to `dst` in the arena.
void deviceLoadInput(gp_step_ctx *ctx, int32_t input, int64_t microbatch,
                     void *dst, const void *src, int64_t bytes);
/// Ends a step (or, before step 1, the set-up): waits for its work, then
/// sets ctx->loss from what gp_report_loss saw. May first start copying the
/// next step's mini-batch (step rt.nextMiniStep, copyMiniBatch) to the device,
/// so that it overlaps this step's work. On a device error sets `err`.
bool deviceStepEnd(gp_step_ctx &ctx, std::string &err);
/// --profile's timers (gp_profile_now / gp_profile_add): a mark where a timed
/// unit starts (CPU: CLOCK_MONOTONIC ns; CUDA: an event recorded on the
/// compute stream, by its index), and the unit's end, whose time goes to
/// profileAddNs (CPU: at once; CUDA: when deviceStepEnd has waited for the
/// step, from the events' elapsed time).
int64_t deviceProfileMark();
void deviceProfileSpan(int32_t unit, int64_t mark);
/// --profile, after the steps (every stage calls them, in this order): the
/// stage's links to its peers, measured the way its transfers move a tensor
/// (CPU: MPI; CUDA: the host-staged ones through pinned memory, GPU to GPU;
/// links over NCCL are not measured), then the memory the stage holds
/// besides its arena (`bytes`; CPU: peak resident memory; CUDA: the GPU's
/// memory in use, shared evenly among the pipeline's stages on that GPU
/// after their arenas, or -1 when unknown). On failure set `err`.
bool deviceMeasureLinks(const gp_program &p, std::vector<LinkSample> &out,
                        std::string &err);
bool deviceRuntimeBytes(const gp_program &p, int64_t &bytes, std::string &err);
/// Device memory in use (CUDA: the device's total minus free, all
/// processes on it), or -1 where there is none (CPU).
int64_t deviceMemoryInUse();
/// Frees the arena and everything deviceInit created (before MPI_Finalize).
/// Only after a run that succeeded: after an error with other stages running,
/// gp_main aborts the job instead (pending transfers may never complete).
void deviceShutdown();

/// The batch of gp_batch_gemm as runs of uniformly strided matrices: the
/// longest suffix of batch dims whose A and B strides (and C's, dense) fold
/// into one stride is `count` matrices `aStride` / `bStride` / `cStride`
/// elements apart; the other dims are enumerated as run starts (aFirst[r],
/// bFirst[r], cFirst[r]), row-major.
struct BatchRuns {
  int64_t count = 1, aStride = 0, bStride = 0, cStride = 0;
  std::vector<int64_t> aFirst, bFirst, cFirst;
};

inline BatchRuns batchRuns(int32_t rank, const int64_t *shape,
                           const int64_t *aStride, const int64_t *bStride,
                           int64_t cMatrix) {
  BatchRuns runs;
  runs.cStride = cMatrix;
  // Fold dims from the innermost while each continues the run's strides
  // (dims of size 1 fold whatever their strides).
  int32_t d = rank - 1;
  bool started = false;
  for (; d >= 0; --d) {
    if (shape[d] == 1)
      continue;
    if (!started) {
      runs.count = shape[d];
      runs.aStride = aStride[d];
      runs.bStride = bStride[d];
      started = true;
      continue;
    }
    if (aStride[d] != runs.aStride * runs.count ||
        bStride[d] != runs.bStride * runs.count)
      break;
    runs.count *= shape[d];
  }
  // Dims 0..d are enumerated.
  int64_t outer = 1;
  for (int32_t e = 0; e <= d; ++e)
    outer *= shape[e];
  for (int64_t o = 0; o < outer; ++o) {
    int64_t rest = o, a = 0, b = 0;
    for (int32_t e = d; e >= 0; --e) {
      int64_t i = rest % shape[e];
      rest /= shape[e];
      a += i * aStride[e];
      b += i * bStride[e];
    }
    runs.aFirst.push_back(a);
    runs.bFirst.push_back(b);
    runs.cFirst.push_back(o * runs.count * cMatrix);
  }
  return runs;
}

} // namespace gpipe

#endif // GPIPE_RUNTIME_INTERNAL_H
