// The transport between stages: MPI point-to-point on MPI_COMM_WORLD (with
// --data-parallel, on the replica's share of it), one
// rank per stage. The only source that includes <mpi.h>.
#include "internal.h"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <map>
#include <pthread.h>
#include <sched.h>
#include <set>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <tuple>
#include <unistd.h>
#include <utility>

namespace gpipe {
namespace {

bool gInitialized = false;
/// The ranks of this stage's pipeline (MPI_COMM_WORLD unless there are
/// several replicas): every transfer and exchange of the pipeline is on it.
MPI_Comm gPipe = MPI_COMM_WORLD;
int gWorldSize = 1; // the pipeline's ranks (its stages)
/// --data-parallel: this stage's D replicas (rank r is replica r), in which
/// the gradients are averaged; this rank's replica.
MPI_Comm gReplicas = MPI_COMM_SELF;
/// A copy of it for the averages' all-gathers, which start as their
/// reduce-scatters finish: each communicator sees its collectives in the
/// same order on every replica (MPI's rule), whatever the timing.
MPI_Comm gReplicasGather = MPI_COMM_SELF;
int gReplicaCount = 1, gReplica = 0;
int gTagUb = 32767; // the MPI standard's guaranteed minimum

/// Messages larger than this are sent as several (MPI counts are int).
/// GPIPE_MPI_CHUNK_BYTES lowers it, for testing the chunked path with small
/// tensors; both sides of a transfer must use the same value.
int64_t kChunk = int64_t(1) << 30;

/// Buffered sends (transportUseBufferedSends): MPI_Bsend into this buffer.
bool gBuffered = false;
std::vector<char> gSendBuffer;

/// Open MPI moves a buffered message larger than its eager limit (4 KiB in
/// shared memory; boundary tensors are far larger) a fragment at a time, and
/// only while the sender is inside an MPI call: a stage that sends and then
/// computes for milliseconds held its receiver up for that long (1F1B's
/// stages waited 44-50% of the step). So after each buffered send the next
/// kProgressCalls calls of transportProgress (gp_gemm calls it: a few per
/// millisecond of compute) make MPI progress, on the stage's own thread: a
/// progress thread would take cores the stages compute on (measured: its
/// wake-ups slowed 1F1B's compute by a third on 2 cores).
constexpr int kProgressCalls = 256;
constexpr int kProgressPolls = 8;
std::atomic<int> gProgressCalls{0};
pthread_t gMainThread;

/// Receives taken ahead (transportExpectReceives). A stage that computes
/// for a while without a receive (a run of W's, or a GEMM between two
/// receives) leaves a large message's rendezvous half done: its sender,
/// flushing its sends before its own W's, waits until the receiver reaches
/// its receive. So the receives the stage's next actions make are listed
/// ahead, per (peer, tag) in order; whenever transportProgress finds one's
/// message arrived (MPI_Iprobe), it posts that receive into a buffer of its
/// own and completes it while the sender is still in MPI, and mpiRecv then
/// copies it out. MPI matches a (peer, tag)'s messages in order, so the
/// oldest entry of a (peer, tag) is always its next message.
struct Expected {
  int64_t bytes = 0;
  bool posted = false; // MPI_Irecv done (into buf)
  int done = 0;        // ... and completed (st)
  MPI_Request req = MPI_REQUEST_NULL;
  MPI_Status st{};
  std::vector<char> buf;
};
std::map<std::pair<int32_t, int32_t>, std::deque<Expected>> gExpected;
/// Buffers of taken receives, for the next ones.
std::vector<std::vector<char>> gExpectedFree;
int gExpectedCount = 0;  // listed and not yet taken by mpiRecv (main thread)
int64_t gTakenAhead = 0; // receives mpiRecv found taken ahead (the report)
bool gTakeAhead = true;  // GPIPE_PREPOST=0: off
/// How long transportProgress waits for a message it found to complete: its
/// sender answers the rendezvous in microseconds when it is in MPI (a
/// flush, a receive); when it computes, the receive completes later.
constexpr int64_t kTakeSpinNs = 50 * 1000;

/// How a stage waits for a transfer. Open MPI's blocking calls busy-poll (or,
/// on a node with more ranks than cores, call sched_yield between polls), so
/// a waiting stage keeps competing for a core, and with more stages than
/// cores the stages that have work crawl. The transfers instead poll
/// (MPI_Iprobe, MPI_Test) with sched_yield between polls for up to `spinNs`,
/// then sleep between polls for 1, 2, 4, ... microseconds up to `maxSleepNs`:
/// a short wait costs no sleep, a long one gives the core away and ends at
/// most `maxSleepNs` late.
struct WaitPolicy {
  bool block = false; // GPIPE_MPI_WAIT=block: MPI's blocking calls
  int64_t spinNs = 0;
  int64_t maxSleepNs = 0;
};

/// The spin when every stage thread has a core of its own (the short waits
/// between micro-batches end without a sleep), and when the node has fewer
/// cores than stage threads (a few polls: a waiting stage should leave the
/// core to one that computes); the longest sleep.
constexpr int64_t kSpinNsEnoughCores = 1000000;
constexpr int64_t kSpinNsOversubscribed = 20000;
constexpr int64_t kMaxSleepNs = 256000;

WaitPolicy gWait{false, kSpinNsEnoughCores, kMaxSleepNs};

int64_t monotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

/// Paces one wait's polls (see WaitPolicy).
class Backoff {
public:
  /// Called after each poll that found nothing to do.
  void pause() {
    if (sleepNs_ == 0) {
      int64_t now = monotonicNs();
      if (start_ < 0)
        start_ = now;
      if (now - start_ < gWait.spinNs) {
        sched_yield(); // lets another process on this core go first
        return;
      }
      sleepNs_ = 1000;
    }
    timespec ts{0, static_cast<long>(sleepNs_)};
    nanosleep(&ts, nullptr);
    sleepNs_ = std::min(2 * sleepNs_, gWait.maxSleepNs);
  }

private:
  int64_t start_ = -1;
  int64_t sleepNs_ = 0;
};

/// The CPUs this process may run on.
int64_t availableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0)
    return CPU_COUNT(&set);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? n : 1;
}

/// Environment override of an integer setting (microseconds), for tuning.
int64_t envMicroseconds(const char *name, int64_t defaultNs) {
  const char *v = std::getenv(name);
  if (!v || !*v)
    return defaultNs;
  char *end = nullptr;
  long long us = std::strtoll(v, &end, 10);
  if (*end != '\0' || us < 0 || us > 1000000)
    return defaultNs;
  return us * 1000;
}

std::string mpiError(int rc) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, buf, &len) != MPI_SUCCESS)
    return "MPI error " + std::to_string(rc);
  return std::string(buf, static_cast<size_t>(len));
}

/// The checks shared by gp_send and gp_recv; ends the run on a bad call
/// (a code generator bug).
void checkTransfer(gp_step_ctx *ctx, const char *what, int32_t peer,
                   int32_t tag, const void *buf, int64_t bytes) {
  const Runtime *rt =
      ctx ? static_cast<const Runtime *>(ctx->runtime) : nullptr;
  if (!rt || !gInitialized)
    fatal(ctx, 1,
          std::string("invalid program: ") + what +
              " called outside a multi-stage pipeline run");
  int32_t k = rt->program->num_stages;
  if (peer < 0 || peer >= k || peer == rt->stage)
    fatal(ctx, 1,
          std::string("invalid program: ") + what + " with stage " +
              std::to_string(peer) + " (tag " + std::to_string(tag) +
              "); the pipeline has stages 0.." + std::to_string(k - 1));
  if (tag < 0 || tag >= gTagUb)
    fatal(ctx, 1,
          std::string("invalid program: ") + what + " tag " +
              std::to_string(tag) + " is outside [0, " +
              std::to_string(gTagUb) + ")");
  if (bytes < 0 || (bytes > 0 && !buf))
    fatal(ctx, 1,
          std::string("invalid program: ") + what + " of " +
              std::to_string(bytes) + " bytes (tag " + std::to_string(tag) +
              ") with stage " + std::to_string(peer));
}

/// This rank's index among the ranks on its node, and their number (MPI
/// shared-memory split; collective); 0 and 1 without MPI.
void nodeRanks(int &rank, int &size) {
  rank = 0;
  size = 1;
  MPI_Comm node;
  if (!gInitialized ||
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0,
                          MPI_INFO_NULL, &node) != MPI_SUCCESS)
    return;
  MPI_Comm_rank(node, &rank);
  MPI_Comm_size(node, &size);
  MPI_Comm_free(&node);
}

/// Completes `req` polling with MPI_Test and backing off (see WaitPolicy);
/// returns MPI_Test's error code.
int waitFor(MPI_Request &req, MPI_Status *st = MPI_STATUS_IGNORE) {
  Backoff backoff;
  int done = 0;
  int rc;
  while ((rc = MPI_Test(&req, &done, st)) == MPI_SUCCESS && !done)
    backoff.pause();
  return rc;
}

} // namespace

bool transportInit(int *argc, char ***argv, int &rank, int &size,
                   bool multiThreaded, std::string &err) {
  int provided = 0;
  int wanted = multiThreaded ? MPI_THREAD_MULTIPLE : MPI_THREAD_FUNNELED;
  int rc = MPI_Init_thread(argc, argv, wanted, &provided);
  if (rc != MPI_SUCCESS) {
    err = "MPI_Init failed: " + mpiError(rc);
    return false;
  }
  if (provided < wanted) {
    MPI_Finalize();
    err = "the MPI library does not support MPI_THREAD_MULTIPLE, which the "
          "CUDA runtime's host-staged transfers need";
    return false;
  }
  gInitialized = true;
  gMainThread = pthread_self();
  if (const char *chunk = std::getenv("GPIPE_MPI_CHUNK_BYTES")) {
    long long v = std::atoll(chunk);
    if (v > 0 && v <= kChunk)
      kChunk = v;
  }
  // Failed calls return their error code (checked below), instead of the
  // default handler aborting without saying which stage or tensor it was.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  gWorldSize = size;
  int *tagUb = nullptr;
  int flag = 0;
  if (MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tagUb, &flag) ==
          MPI_SUCCESS &&
      flag && tagUb)
    gTagUb = *tagUb;
  return true;
}

bool transportSetReplicas(int stages, int replicas, std::string &err) {
  if (replicas <= 1)
    return true;
  // World rank r = replica * K + stage (docs/multi-host.md's rank layout).
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int rc = MPI_Comm_split(MPI_COMM_WORLD, rank / stages, rank % stages, &gPipe);
  if (rc == MPI_SUCCESS)
    rc = MPI_Comm_split(MPI_COMM_WORLD, rank % stages, rank / stages,
                        &gReplicas);
  if (rc != MPI_SUCCESS) {
    err = "splitting the " + std::to_string(replicas) +
          " replicas' ranks failed: " + mpiError(rc);
    return false;
  }
  if (rc == MPI_SUCCESS)
    rc = MPI_Comm_dup(gReplicas, &gReplicasGather);
  if (rc != MPI_SUCCESS) {
    err = "splitting the " + std::to_string(replicas) +
          " replicas' ranks failed: " + mpiError(rc);
    return false;
  }
  MPI_Comm_set_errhandler(gPipe, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(gReplicas, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(gReplicasGather, MPI_ERRORS_RETURN);
  MPI_Comm_size(gPipe, &gWorldSize);
  MPI_Comm_rank(gReplicas, &gReplica);
  MPI_Comm_size(gReplicas, &gReplicaCount);
  return true;
}

int transportReplica() { return gReplica; }

namespace {
/// Replica j's share [lo, hi) of n floats: [n * j / D, n * (j + 1) / D). Every
/// path splits this way (MPI's collectives, the shared arenas,
/// transportShare), so replicas agree on who sums and sends what.
std::pair<int64_t, int64_t> shareOf(int64_t n, int j) {
  return {n * j / gReplicaCount, n * (j + 1) / gReplicaCount};
}

/// The replicas' shares of n floats as MPI counts and displacements (shareOf).
/// n must fit int.
void splitShares(int64_t n, std::vector<int> &counts,
                 std::vector<int> &displs) {
  const int d = gReplicaCount;
  counts.resize(static_cast<size_t>(d));
  displs.resize(static_cast<size_t>(d));
  for (int j = 0; j < d; ++j) {
    auto [lo, hi] = shareOf(n, j);
    displs[static_cast<size_t>(j)] = static_cast<int>(lo);
    counts[static_cast<size_t>(j)] = static_cast<int>(hi - lo);
  }
}

/// A piece of the gradients being averaged across the replicas: a
/// reduce-scatter (MPI_Ialltoallv: replica j receives every replica's copy
/// of piece j's part j), the sum of those copies in replica order 0..D-1
/// scaled by 1/D (a fixed order: the same bits on every replica and run),
/// then an all-gather (MPI_Iallgatherv) of the sums back into `data`.
struct ReplicaBucket {
  float *data = nullptr;
  std::vector<int> counts, displs, recvCounts, recvDispls;
  std::vector<float> all, mine;
  MPI_Request req = MPI_REQUEST_NULL;
  bool gathering = false; // phase 2 posted
};
// The first gBucketsUsed are started, not yet waited for, in order (a
// deque: MPI keeps pointers into them until each completes). Kept from step
// to step: their buffers are allocated (and first touched) once.
std::deque<ReplicaBucket> gBuckets;
size_t gBucketsUsed = 0;
std::atomic<int> gPendingBuckets{0};
std::string gBucketError;

/// Phase 1 of bucket `b` over `data`'s n floats: every replica's copy of
/// this replica's share into b.all, replica by replica (MPI's error code).
int startScatter(ReplicaBucket &b, float *data, int64_t n) {
  const int d = gReplicaCount;
  b.data = data;
  b.gathering = false;
  splitShares(n, b.counts, b.displs);
  const int own = b.counts[static_cast<size_t>(gReplica)];
  b.all.resize(static_cast<size_t>(own) * static_cast<size_t>(d));
  b.recvCounts.assign(static_cast<size_t>(d), own);
  b.recvDispls.resize(static_cast<size_t>(d));
  for (int j = 0; j < d; ++j)
    b.recvDispls[static_cast<size_t>(j)] = j * own;
  return MPI_Ialltoallv(b.data, b.counts.data(), b.displs.data(), MPI_FLOAT,
                        b.all.data(), b.recvCounts.data(), b.recvDispls.data(),
                        MPI_FLOAT, gReplicas, &b.req);
}

/// Phase 1 done: the replicas' copies of this replica's share summed in
/// replica order and scaled by 1/D, into `out` (its share's floats).
void sumShare(const ReplicaBucket &b, float *out) {
  const int d = gReplicaCount;
  const int own = b.counts[static_cast<size_t>(gReplica)];
  const float scale = 1.0f / static_cast<float>(d);
  for (int i = 0; i < own; ++i) {
    float v = b.all[static_cast<size_t>(i)];
    for (int j = 1; j < d; ++j)
      v += b.all[static_cast<size_t>(j) * static_cast<size_t>(own) +
                 static_cast<size_t>(i)];
    out[i] = v * scale;
  }
}

/// Phase 1 done: sums this replica's part and posts the all-gather.
int gatherBucket(ReplicaBucket &b) {
  const int own = b.counts[static_cast<size_t>(gReplica)];
  b.mine.resize(static_cast<size_t>(own));
  sumShare(b, b.mine.data());
  b.gathering = true;
  return MPI_Iallgatherv(b.mine.data(), own, MPI_FLOAT, b.data, b.counts.data(),
                         b.displs.data(), MPI_FLOAT, gReplicasGather, &b.req);
}

/// Moves the started buckets on (MPI_Test; a finished reduce-scatter posts
/// its all-gather, in bucket order: a bucket's all-gather waits for the
/// earlier buckets'). The first error is kept for transportAverageWait.
void progressBuckets() {
  bool inOrder = true; // every earlier bucket's all-gather is posted
  for (size_t k = 0; k < gBucketsUsed; ++k) {
    ReplicaBucket &b = gBuckets[k];
    int rc = MPI_SUCCESS, done = 1;
    if (b.req != MPI_REQUEST_NULL)
      rc = MPI_Test(&b.req, &done, MPI_STATUS_IGNORE);
    if (rc == MPI_SUCCESS && done && !b.gathering && inOrder)
      rc = gatherBucket(b);
    if (rc != MPI_SUCCESS) {
      if (gBucketError.empty())
        gBucketError = mpiError(rc);
      b.req = MPI_REQUEST_NULL;
      b.gathering = true; // not tried again; the wait reports it
    }
    inOrder = inOrder && b.gathering;
  }
}

/// --shard-optimizer's n floats must fit MPI's int counts (one piece: the
/// planner sized the state for it).
bool shareFitsInt(int64_t n, std::string &err) {
  if (n <= int64_t(INT_MAX))
    return true;
  err = "--shard-optimizer: " + std::to_string(n) +
        " gradient floats in one stage are more than MPI's counts hold";
  return false;
}
} // namespace

namespace {
/// Replicas on one node average through shared memory (transportSharedArena):
/// every replica's arena is an MPI-3 shared window segment, mapped by all,
/// so each replica sums its share of every gradient straight from the
/// others' arenas and copies theirs in, with no messages or staging copies.
struct SharedArenas {
  MPI_Win win = MPI_WIN_NULL;
  std::vector<unsigned char *> base; // every replica's arena, by replica
  int64_t bytes = 0;                 // each arena's size
  // Started averages (offset in the arena, floats), done at the wait.
  std::vector<std::pair<int64_t, int64_t>> pending;
} gShared;

/// Between the phases of a shared average: every replica's writes so far
/// visible to every replica (MPI-3's unified model: sync, barrier, sync).
int sharedFence() {
  MPI_Win_sync(gShared.win);
  int rc = MPI_Barrier(gReplicas);
  MPI_Win_sync(gShared.win);
  return rc;
}

/// `body` (reading other replicas' arenas) after every replica's writes so
/// far, and before any replica writes again (MPI's error code).
template <typename F> int betweenFences(F body) {
  int rc = sharedFence();
  body();
  int after = sharedFence();
  return rc != MPI_SUCCESS ? rc : after;
}

/// This replica's share [n * r / D, n * (r + 1) / D) of the n floats at
/// `offset` in every replica's arena, summed over the replicas in replica
/// order and scaled by 1/D (sumShare's operations: the same bits), in place
/// in its own arena.
void sharedSumShare(int64_t offset, int64_t n) {
  const int d = gReplicaCount, me = gReplica;
  const float scale = 1.0f / static_cast<float>(d);
  const auto [lo, hi] = shareOf(n, me);
  auto at = [&](int j) {
    return reinterpret_cast<float *>(gShared.base[static_cast<size_t>(j)] +
                                     offset);
  };
  constexpr int64_t kBlock = 1024;
  float sum[kBlock];
  for (int64_t b = lo; b < hi; b += kBlock) {
    const int64_t len = std::min(kBlock, hi - b);
    const float *p0 = at(0) + b;
    for (int64_t i = 0; i < len; ++i)
      sum[i] = p0[i];
    for (int j = 1; j < d; ++j) {
      const float *pj = at(j) + b;
      for (int64_t i = 0; i < len; ++i)
        sum[i] += pj[i];
    }
    float *out = at(me) + b;
    for (int64_t i = 0; i < len; ++i)
      out[i] = sum[i] * scale;
  }
}

/// Every other replica's share of the n floats at `offset` copied from its
/// arena into this replica's.
void sharedCopyShares(int64_t offset, int64_t n) {
  const int d = gReplicaCount;
  for (int j = 0; j < d; ++j) {
    if (j == gReplica)
      continue;
    const auto [lo, hi] = shareOf(n, j);
    std::memcpy(gShared.base[static_cast<size_t>(gReplica)] + offset + lo * 4,
                gShared.base[static_cast<size_t>(j)] + offset + lo * 4,
                static_cast<size_t>(hi - lo) * 4);
  }
}

/// The shared average of the pending pieces: each replica sums its share of
/// every piece, then copies the others' sums, then waits until every
/// replica has copied (the update then clears the gradients that others
/// were reading).
int sharedAverage() {
  int rc = betweenFences([] {
    for (auto [offset, n] : gShared.pending)
      sharedSumShare(offset, n);
  });
  for (auto [offset, n] : gShared.pending)
    sharedCopyShares(offset, n);
  if (int after = sharedFence(); rc == MPI_SUCCESS)
    rc = after;
  gShared.pending.clear();
  return rc;
}

/// The offset of `data` in this replica's shared arena.
int64_t sharedOffset(const float *data) {
  return reinterpret_cast<const unsigned char *>(data) -
         gShared.base[static_cast<size_t>(gReplica)];
}

/// Whether the n floats at `data` lie in this replica's shared arena (the
/// gradients and parameters do; a checkpoint's gathered state does not, and
/// takes MPI's path).
bool inSharedArena(const float *data, int64_t n) {
  if (gShared.win == MPI_WIN_NULL)
    return false;
  const unsigned char *p = reinterpret_cast<const unsigned char *>(data),
                      *base = gShared.base[static_cast<size_t>(gReplica)];
  return p >= base && p + n * 4 <= base + gShared.bytes;
}

/// The error of an average (or gather) across the stage's replicas.
std::string replicasFailed(const char *what, const std::string &why) {
  return std::string(what) + " the " + std::to_string(gReplicaCount) +
         " replicas failed: " + why;
}
constexpr const char *kAveraging = "averaging the gradients across";
constexpr const char *kGathering = "gathering the parameters from";
} // namespace

unsigned char *transportSharedArena(int64_t bytes) {
  if (gReplicaCount <= 1 || gShared.win != MPI_WIN_NULL)
    return nullptr;
  if (const char *v = std::getenv("GPIPE_DP_SHARED");
      v && std::string(v) == "0")
    return nullptr;
  // Only when every replica of this stage is on this node.
  MPI_Comm node = MPI_COMM_NULL;
  int nodeSize = 0, all = 0;
  if (MPI_Comm_split_type(gReplicas, MPI_COMM_TYPE_SHARED, gReplica,
                          MPI_INFO_NULL, &node) == MPI_SUCCESS) {
    MPI_Comm_size(node, &nodeSize);
    MPI_Comm_free(&node);
  }
  // Open MPI backs the window with a file in /dev/shm (or its session
  // directory): a file system too small for it (a container's 64 MiB
  // /dev/shm) would end the stage with SIGBUS when the arena is touched.
  // Room for this stage's replicas twice over (other stages' windows take
  // their share too), else MPI's collectives.
  const char *dir = std::getenv("OMPI_MCA_shmem_mmap_backing_file_base_dir");
  struct stat st;
  if (!dir)
    dir = ::stat("/dev/shm", &st) == 0 ? "/dev/shm"
          : std::getenv("TMPDIR")      ? std::getenv("TMPDIR")
                                       : "/tmp";
  struct statvfs fs;
  const bool room =
      ::statvfs(dir, &fs) == 0 &&
      static_cast<double>(fs.f_bavail) * static_cast<double>(fs.f_frsize) >=
          2.0 * gReplicaCount * static_cast<double>(bytes) + (64 << 20);
  // Every replica decides alike (one may share a node with fewer peers).
  int here = nodeSize == gReplicaCount && room ? 1 : 0;
  if (MPI_Allreduce(&here, &all, 1, MPI_INT, MPI_MIN, gReplicas) !=
          MPI_SUCCESS ||
      !all)
    return nullptr;
  MPI_Info info;
  MPI_Info_create(&info);
  // Each replica's segment page-aligned on its own (not one contiguous run).
  MPI_Info_set(info, "alloc_shared_noncontig", "true");
  void *mine = nullptr;
  const MPI_Aint size = static_cast<MPI_Aint>(std::max<int64_t>(bytes, 256));
  int rc =
      MPI_Win_allocate_shared(size, 1, info, gReplicas, &mine, &gShared.win);
  MPI_Info_free(&info);
  // Every replica's window, or none (then MPI's collectives).
  int ok = rc == MPI_SUCCESS ? 1 : 0, allOk = 0;
  if (MPI_Allreduce(&ok, &allOk, 1, MPI_INT, MPI_MIN, gReplicas) !=
          MPI_SUCCESS ||
      !allOk) {
    if (rc == MPI_SUCCESS)
      MPI_Win_free(&gShared.win);
    gShared.win = MPI_WIN_NULL;
    return nullptr;
  }
  gShared.bytes = bytes;
  gShared.base.assign(static_cast<size_t>(gReplicaCount), nullptr);
  for (int j = 0; j < gReplicaCount; ++j) {
    MPI_Aint sz = 0;
    int unit = 0;
    void *ptr = nullptr;
    MPI_Win_shared_query(gShared.win, j, &sz, &unit, &ptr);
    gShared.base[static_cast<size_t>(j)] = static_cast<unsigned char *>(ptr);
  }
  MPI_Win_lock_all(MPI_MODE_NOCHECK, gShared.win);
  return static_cast<unsigned char *>(mine);
}

void transportFreeSharedArena() {
  if (gShared.win == MPI_WIN_NULL)
    return;
  MPI_Win_unlock_all(gShared.win);
  MPI_Win_free(&gShared.win);
  gShared = SharedArenas();
}

bool transportAverageStart(float *data, int64_t n, std::string &err) {
  const int d = gReplicaCount;
  if (d <= 1 || n <= 0)
    return true;
  if (inSharedArena(data, n)) {
    // Done at the wait, every started piece at once.
    gShared.pending.push_back({sharedOffset(data), n});
    return true;
  }
  // MPI counts are int: pieces of at most kMaxPiece floats per replica.
  const int64_t kMaxPiece = int64_t(1) << 28;
  const int64_t step = kMaxPiece * d;
  for (int64_t base = 0; base < n; base += step) {
    if (gBucketsUsed == gBuckets.size())
      gBuckets.emplace_back();
    if (int rc = startScatter(gBuckets[gBucketsUsed++], data + base,
                              std::min(step, n - base));
        rc != MPI_SUCCESS) {
      err = replicasFailed(kAveraging, mpiError(rc));
      return false;
    }
  }
  gPendingBuckets.store(static_cast<int>(gBucketsUsed),
                        std::memory_order_relaxed);
  return true;
}

bool transportAverageWait(std::string &err) {
  // The pieces in the shared arenas, then MPI's buckets (the others).
  if (!gShared.pending.empty())
    if (int rc = sharedAverage(); rc != MPI_SUCCESS && gBucketError.empty())
      gBucketError = mpiError(rc);
  // MPI_Wait, not waitFor's backoff: a nonblocking collective moves only
  // inside MPI calls, a piece per call, and sleeping between them made a
  // 32 MiB average take 30 ms instead of a few.
  for (size_t k = 0; k < gBucketsUsed; ++k) {
    ReplicaBucket &b = gBuckets[k];
    int rc = MPI_SUCCESS;
    if (b.req != MPI_REQUEST_NULL)
      rc = MPI_Wait(&b.req, MPI_STATUS_IGNORE);
    if (rc == MPI_SUCCESS && !b.gathering) {
      rc = gatherBucket(b);
      if (rc == MPI_SUCCESS)
        rc = MPI_Wait(&b.req, MPI_STATUS_IGNORE);
    }
    if (rc != MPI_SUCCESS && gBucketError.empty())
      gBucketError = mpiError(rc);
  }
  gBucketsUsed = 0;
  gPendingBuckets.store(0, std::memory_order_relaxed);
  if (!gBucketError.empty()) {
    err = replicasFailed(kAveraging, gBucketError);
    gBucketError.clear();
    return false;
  }
  return true;
}

bool transportAverageReplicas(float *data, int64_t n, std::string &err) {
  return transportAverageStart(data, n, err) && transportAverageWait(err);
}

void transportShare(int64_t n, int64_t &lo, int64_t &hi) {
  std::tie(lo, hi) = shareOf(n, gReplica);
}

bool transportShardReduce(float *data, int64_t n, std::string &err) {
  if (gReplicaCount <= 1 || n <= 0)
    return true;
  int rc = MPI_SUCCESS;
  if (inSharedArena(data, n)) {
    // Summed from the replicas' arenas; nobody clears a gradient before
    // every replica has summed its share.
    rc = betweenFences([&] { sharedSumShare(sharedOffset(data), n); });
  } else {
    if (!shareFitsInt(n, err))
      return false;
    // A bucket's reduce-scatter and sum (the same bits as an average's), the
    // sum written over this replica's share in place; its own bucket, kept.
    static ReplicaBucket b;
    rc = startScatter(b, data, n);
    if (rc == MPI_SUCCESS)
      rc = MPI_Wait(&b.req, MPI_STATUS_IGNORE);
    if (rc == MPI_SUCCESS)
      sumShare(b, data + b.displs[static_cast<size_t>(gReplica)]);
  }
  if (rc != MPI_SUCCESS) {
    err = replicasFailed(kAveraging, mpiError(rc));
    return false;
  }
  return true;
}

bool transportShardGather(float *data, int64_t n, std::string &err) {
  if (gReplicaCount <= 1 || n <= 0)
    return true;
  int rc = MPI_SUCCESS;
  if (inSharedArena(data, n)) {
    rc = betweenFences([&] { sharedCopyShares(sharedOffset(data), n); });
  } else {
    if (!shareFitsInt(n, err))
      return false;
    static std::vector<int> counts, displs;
    splitShares(n, counts, displs);
    rc = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, counts.data(),
                        displs.data(), MPI_FLOAT, gReplicas);
  }
  if (rc != MPI_SUCCESS) {
    err = replicasFailed(kGathering, mpiError(rc));
    return false;
  }
  return true;
}

bool transportAverageReplicas(double &value, std::string &err) {
  if (gReplicaCount <= 1)
    return true;
  std::vector<double> all(static_cast<size_t>(gReplicaCount));
  int rc = MPI_Allgather(&value, 1, MPI_DOUBLE, all.data(), 1, MPI_DOUBLE,
                         gReplicas);
  if (rc != MPI_SUCCESS) {
    err = "averaging the loss across the replicas failed: " + mpiError(rc);
    return false;
  }
  double sum = 0;
  for (double v : all)
    sum += v;
  value = sum / gReplicaCount;
  return true;
}

bool transportActive() { return gInitialized; }

int transportLocalRank() {
  int rank = 0, size = 1;
  nodeRanks(rank, size);
  return rank;
}

int32_t transportSetupTag() { return gTagUb; }

bool transportConfigureWaits(int64_t threadsPerStage, std::string &err) {
  const char *mode = std::getenv("GPIPE_MPI_WAIT");
  std::string m = mode ? mode : "";
  if (!m.empty() && m != "poll" && m != "block") {
    err = "GPIPE_MPI_WAIT must be 'poll' or 'block', got '" + m + "'";
    return false;
  }
  gWait.block = m == "block";
  const char *post = std::getenv("GPIPE_PREPOST");
  std::string pa = post ? post : "";
  if (!pa.empty() && pa != "0" && pa != "1") {
    err = "GPIPE_PREPOST must be 0 or 1, got '" + pa + "'";
    return false;
  }
  gTakeAhead = pa != "0";
  // Ranks on this node, each running `threadsPerStage` threads.
  int rank = 0, local = 1;
  nodeRanks(rank, local);
  bool oversubscribed = int64_t(local) * threadsPerStage > availableCpus();
  gWait.spinNs = envMicroseconds("GPIPE_MPI_SPIN_US",
                                 oversubscribed ? kSpinNsOversubscribed
                                                : kSpinNsEnoughCores);
  gWait.maxSleepNs = std::max<int64_t>(
      1000, envMicroseconds("GPIPE_MPI_MAX_SLEEP_US", kMaxSleepNs));
  return true;
}

bool transportSendBytes(int32_t peer, int32_t tag, const void *buf,
                        int64_t bytes, std::string &err) {
  int rc = MPI_Send(buf, static_cast<int>(bytes), MPI_BYTE, peer, tag, gPipe);
  if (rc != MPI_SUCCESS)
    err = "sending set-up data to stage " + std::to_string(peer) +
          " failed: " + mpiError(rc);
  return rc == MPI_SUCCESS;
}

bool transportRecvBytes(int32_t peer, int32_t tag, void *buf, int64_t bytes,
                        std::string &err) {
  MPI_Status st;
  int rc =
      MPI_Recv(buf, static_cast<int>(bytes), MPI_BYTE, peer, tag, gPipe, &st);
  if (rc != MPI_SUCCESS)
    err = "receiving set-up data from stage " + std::to_string(peer) +
          " failed: " + mpiError(rc);
  return rc == MPI_SUCCESS;
}

bool transportAllGather(const int64_t *mine, int n, std::vector<int64_t> &all,
                        std::string &err) {
  all.assign(static_cast<size_t>(n) * static_cast<size_t>(gWorldSize), 0);
  int rc =
      MPI_Allgather(mine, n, MPI_INT64_T, all.data(), n, MPI_INT64_T, gPipe);
  if (rc != MPI_SUCCESS) {
    err = "exchanging the pipeline configuration with the other stages "
          "failed: " +
          mpiError(rc);
    return false;
  }
  return true;
}

void transportWaitForAbort() {
  MPI_Barrier(MPI_COMM_WORLD);
  // Not reached unless the failing rank could not abort; do not hang.
  transportAbort(1);
}

bool transportUseBufferedSends(const gp_program &p, std::string &err) {
  // Each send of a step is one message per chunk; a sender can run at most
  // about one step ahead of its receiver (it needs the receiver's answers
  // to finish a step), so two steps' worth is always enough.
  int64_t perStep = 0;
  for (int32_t i = 0; i < p.num_transfers; ++i) {
    const gp_transfer &t = p.transfers[i];
    if (!t.is_send)
      continue;
    int64_t chunks = std::max<int64_t>(1, (t.bytes + kChunk - 1) / kChunk);
    perStep += t.bytes + chunks * static_cast<int64_t>(MPI_BSEND_OVERHEAD);
  }
  int64_t bytes = 2 * perStep * std::max<int32_t>(p.microbatches, 1);
  if (bytes > INT_MAX) {
    err = "this schedule's buffered sends need " + std::to_string(bytes) +
          " bytes of MPI send buffer, more than MPI allows (" +
          std::to_string(INT_MAX) + "); use --schedule gpipe";
    return false;
  }
  gSendBuffer.assign(static_cast<size_t>(std::max<int64_t>(bytes, 1)), 0);
  int rc = MPI_Buffer_attach(gSendBuffer.data(),
                             static_cast<int>(gSendBuffer.size()));
  if (rc != MPI_SUCCESS) {
    err = "attaching the MPI send buffer failed: " + mpiError(rc);
    return false;
  }
  gBuffered = true;
  return true;
}

namespace {

/// Posts the oldest listed receive of each (peer, tag) whose message has
/// arrived, and gives it kTakeSpinNs to complete; tests the posted ones.
void takeArrivedReceives() {
  for (auto &[key, queue] : gExpected) {
    for (Expected &e : queue) {
      if (e.posted) {
        if (!e.done && MPI_Test(&e.req, &e.done, &e.st) != MPI_SUCCESS)
          e.done = 0; // mpiRecv's wait reports it
        continue;
      }
      int arrived = 0;
      if (MPI_Iprobe(key.first, key.second, gPipe, &arrived,
                     MPI_STATUS_IGNORE) != MPI_SUCCESS ||
          !arrived)
        break;
      if (!gExpectedFree.empty()) {
        e.buf = std::move(gExpectedFree.back());
        gExpectedFree.pop_back();
      }
      e.buf.resize(static_cast<size_t>(e.bytes));
      // On an error the entry stays unposted: mpiRecv receives as usual,
      // and reports it.
      if (MPI_Irecv(e.buf.data(), static_cast<int>(e.bytes), MPI_BYTE,
                    key.first, key.second, gPipe, &e.req) != MPI_SUCCESS) {
        e.req = MPI_REQUEST_NULL;
        break;
      }
      e.posted = true;
      const int64_t until = monotonicNs() + kTakeSpinNs;
      while (MPI_Test(&e.req, &e.done, &e.st) == MPI_SUCCESS && !e.done &&
             monotonicNs() < until) {
      }
      break;
    }
  }
}

} // namespace

void transportProgress() {
  // MPI is initialised FUNNELED: only the thread that called MPI_Init may
  // call it (gp_gemm also runs on OpenMP's threads).
  if (gPendingBuckets.load(std::memory_order_relaxed) > 0 &&
      pthread_equal(pthread_self(), gMainThread))
    progressBuckets();
  if (!pthread_equal(pthread_self(), gMainThread))
    return;
  if (gExpectedCount > 0)
    takeArrivedReceives();
  if (gProgressCalls.load(std::memory_order_relaxed) <= 0)
    return;
  gProgressCalls.fetch_sub(1, std::memory_order_relaxed);
  // Each call moves a transfer one protocol step (a fragment, a handshake):
  // a few per call finish a message of a few fragments in one go.
  for (int k = 0; k < kProgressPolls; ++k) {
    int flag = 0;
    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, gPipe, &flag, MPI_STATUS_IGNORE);
  }
}

bool transportMessageWaiting(int32_t peer, int32_t tag) {
  int flag = 0;
  // An error is reported by the receive that follows.
  if (MPI_Iprobe(peer, tag, gPipe, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS)
    return true;
  return flag != 0;
}

void transportExpectReceives(const gp_program &p, int32_t phase) {
  if (!gBuffered || !gTakeAhead || p.target != GP_TARGET_CPU)
    return;
  for (int32_t i = 0; i < p.num_transfers; ++i) {
    const gp_transfer &t = p.transfers[i];
    if (t.is_send || t.per_step || t.phase != phase || t.bytes <= 0 ||
        t.bytes > kChunk || t.peer == p.stage)
      continue;
    Expected e;
    e.bytes = t.bytes;
    gExpected[{t.peer, t.tag}].push_back(std::move(e));
    ++gExpectedCount;
  }
}

int64_t transportReceivesTakenAhead() { return gTakenAhead; }

void transportFlushSends() {
  if (!gBuffered)
    return;
  // MPI_Buffer_detach returns once every message in the buffer has been
  // delivered; the same buffer is attached again.
  void *buf = nullptr;
  int size = 0;
  if (MPI_Buffer_detach(&buf, &size) == MPI_SUCCESS)
    MPI_Buffer_attach(buf, size);
}

bool transportMeasureLinks(const gp_program &p, const LinkStaging &staging,
                           std::vector<LinkSample> &out, std::string &err) {
  const int me = p.stage;
  // Per peer, the sizes of the tensors exchanged with it (both sides list
  // the same: one's sends are the other's receives), and 8 bytes.
  std::map<int, std::set<int64_t>> sizes;
  for (int32_t i = 0; i < p.num_transfers; ++i) {
    const gp_transfer &t = p.transfers[i];
    if (t.peer == me || t.peer < 0 || t.peer >= gWorldSize ||
        (staging.measured && !staging.measured(t.peer)))
      continue;
    std::set<int64_t> &s = sizes[t.peer];
    s.insert(8);
    s.insert(std::min<int64_t>(std::max<int64_t>(t.bytes, 1), kChunk));
  }
  // The pairs (lower, higher) in increasing order: every rank meets its
  // pairs in the one global order.
  std::vector<std::pair<int, int>> pairs;
  for (auto &entry : sizes)
    pairs.push_back({std::min(me, entry.first), std::max(me, entry.first)});
  std::sort(pairs.begin(), pairs.end());
  const int kTag = 32001; // no boundary tensor's (the steps are over)
  std::vector<char> own;
  for (auto [lo, hi] : pairs) {
    const int peer = lo == me ? hi : lo;
    for (int64_t bytes : sizes[peer]) {
      // The staging's buffer (CUDA: pinned, as the transfers' own), else
      // one of ours.
      char *buf = nullptr;
      if (staging.hostBuffer) {
        buf = static_cast<char *>(staging.hostBuffer(bytes));
      } else {
        own.resize(static_cast<size_t>(bytes));
        buf = own.data();
      }
      // About 64 MiB a size, 4 to 50 round trips, after 2 unmeasured ones,
      // three times: the fastest of the three (another process taking the
      // core only slows a round).
      const int repeats = static_cast<int>(
          std::clamp<int64_t>((int64_t(64) << 20) / bytes, 4, 50));
      double t0 = 0, best = -1;
      for (int r = -2; r < 3 * repeats; ++r) {
        if (r >= 0 && r % repeats == 0) {
          if (r > 0) {
            double t = (MPI_Wtime() - t0) / (2.0 * repeats);
            best = best < 0 ? t : std::min(best, t);
          }
          t0 = MPI_Wtime();
        }
        int rc = MPI_SUCCESS;
        const int n = static_cast<int>(bytes);
        // One way: staged out of the device (if it is staged), sent,
        // received, staged into the device.
        auto send = [&] {
          if (staging.toHost)
            staging.toHost(buf, bytes);
          return MPI_Send(buf, n, MPI_BYTE, peer, kTag, gPipe);
        };
        auto recv = [&] {
          int r =
              MPI_Recv(buf, n, MPI_BYTE, peer, kTag, gPipe, MPI_STATUS_IGNORE);
          if (r == MPI_SUCCESS && staging.fromHost)
            staging.fromHost(buf, bytes);
          return r;
        };
        if (me == lo) {
          rc = send();
          if (rc == MPI_SUCCESS)
            rc = recv();
        } else {
          rc = recv();
          if (rc == MPI_SUCCESS)
            rc = send();
        }
        if (rc != MPI_SUCCESS) {
          err = "measuring the link to stage " + std::to_string(peer) +
                " failed: " + mpiError(rc);
          return false;
        }
      }
      double t = (MPI_Wtime() - t0) / (2.0 * repeats);
      out.push_back({peer, bytes, best < 0 ? t : std::min(best, t), repeats});
    }
  }
  return true;
}

void transportFinalize() {
  if (!gInitialized)
    return;
  if (gBuffered) {
    // Waits until every buffered message has been delivered.
    void *buf = nullptr;
    int size = 0;
    MPI_Buffer_detach(&buf, &size);
    gBuffered = false;
  }
  MPI_Finalize();
  gInitialized = false;
}

void transportAbort(int code) {
  // MPI_Abort does not flush stdio.
  std::fflush(stdout);
  std::fflush(stderr);
  if (gInitialized && (gWorldSize > 1 || gReplicaCount > 1)) {
    MPI_Abort(MPI_COMM_WORLD, code);
    ::_exit(code); // not reached
  }
  // Alone (launched without mpirun): nobody to tear down.
  transportFinalize();
  std::exit(code);
}

void mpiSend(gp_step_ctx *ctx, int32_t peer, int32_t tag, const void *buf,
             int64_t bytes) {
  checkTransfer(ctx, "gp_send", peer, tag, buf, bytes);
  HeartbeatWait waiting(peer, /*recv=*/false);
  const char *p = static_cast<const char *>(buf);
  int64_t off = 0;
  // One message per chunk (at least one, also for 0 bytes); messages between
  // two ranks with one tag arrive in order.
  do {
    int n = static_cast<int>(std::min(bytes - off, kChunk));
    const void *chunk = p ? p + off : nullptr;
    int rc;
    if (gBuffered || gWait.block) {
      rc = (gBuffered ? MPI_Bsend : MPI_Send)(chunk, n, MPI_BYTE, peer, tag,
                                              gPipe);
      if (gBuffered)
        gProgressCalls.store(kProgressCalls, std::memory_order_relaxed);
    } else {
      MPI_Request req;
      rc = MPI_Isend(chunk, n, MPI_BYTE, peer, tag, gPipe, &req);
      if (rc == MPI_SUCCESS)
        rc = waitFor(req);
    }
    if (rc != MPI_SUCCESS)
      fatal(ctx, 1,
            "sending " + std::to_string(bytes) + " bytes to stage " +
                std::to_string(peer) + " (tag " + std::to_string(tag) +
                ") failed: " + mpiError(rc));
    off += n;
  } while (off < bytes);
}

void mpiRecv(gp_step_ctx *ctx, int32_t peer, int32_t tag, void *buf,
             int64_t bytes) {
  checkTransfer(ctx, "gp_recv", peer, tag, buf, bytes);
  HeartbeatWait waiting(peer, /*recv=*/true);
  char *p = static_cast<char *>(buf);
  int64_t off = 0;
  auto mismatch = [&](int64_t got) {
    fatal(ctx, 1,
          "received " + std::to_string(got) + " bytes from stage " +
              std::to_string(peer) + " (tag " + std::to_string(tag) +
              "), expected " + std::to_string(bytes));
  };
  auto failed = [&](const char *call, int rc) {
    fatal(ctx, 1,
          std::string(call) + " of " + std::to_string(bytes) +
              " bytes from stage " + std::to_string(peer) + " (tag " +
              std::to_string(tag) + ") failed: " + mpiError(rc));
  };
  // A failed receive: a message longer than `bytes` named as such.
  auto receiveFailed = [&](const char *call, int rc) {
    int cls = rc;
    MPI_Error_class(rc, &cls);
    if (cls == MPI_ERR_TRUNCATE)
      fatal(ctx, 1,
            "received more than the expected " + std::to_string(bytes) +
                " bytes from stage " + std::to_string(peer) + " (tag " +
                std::to_string(tag) + ")");
    failed(call, rc);
  };
  auto expected = gExpected.find({peer, tag});
  if (expected != gExpected.end() && !expected->second.empty()) {
    Expected e = std::move(expected->second.front());
    expected->second.pop_front();
    --gExpectedCount;
    if (e.posted) { // (MPI_Test set a completed request to null)
      if (!e.done)
        if (int rc =
                gWait.block ? MPI_Wait(&e.req, &e.st) : waitFor(e.req, &e.st);
            rc != MPI_SUCCESS)
          receiveFailed("MPI_Irecv/MPI_Test", rc);
      int count = 0;
      if (int rc = MPI_Get_count(&e.st, MPI_BYTE, &count); rc != MPI_SUCCESS)
        failed("MPI_Get_count", rc);
      if (count != bytes || e.bytes != bytes)
        mismatch(count);
      std::memcpy(p, e.buf.data(), static_cast<size_t>(bytes));
      gExpectedFree.push_back(std::move(e.buf));
      ++gTakenAhead;
      return;
    }
    if (!e.buf.empty())
      gExpectedFree.push_back(std::move(e.buf));
  }
  do {
    int want = static_cast<int>(std::min(bytes - off, kChunk));
    // Probe first: a message of the wrong size is reported with both sizes
    // instead of being truncated into the buffer.
    MPI_Status st;
    int rc;
    if (gWait.block) {
      rc = MPI_Probe(peer, tag, gPipe, &st);
    } else {
      Backoff backoff;
      int found = 0;
      while ((rc = MPI_Iprobe(peer, tag, gPipe, &found, &st)) == MPI_SUCCESS &&
             !found)
        backoff.pause();
    }
    if (rc != MPI_SUCCESS)
      failed(gWait.block ? "MPI_Probe" : "MPI_Iprobe", rc);
    int count = 0;
    rc = MPI_Get_count(&st, MPI_BYTE, &count);
    if (rc != MPI_SUCCESS || count == MPI_UNDEFINED)
      failed("MPI_Get_count", rc != MPI_SUCCESS ? rc : MPI_ERR_COUNT);
    if (count != want)
      mismatch(off + count);
    void *chunk = p ? p + off : nullptr;
    if (gWait.block) {
      rc = MPI_Recv(chunk, want, MPI_BYTE, peer, tag, gPipe, &st);
    } else {
      MPI_Request req;
      rc = MPI_Irecv(chunk, want, MPI_BYTE, peer, tag, gPipe, &req);
      if (rc == MPI_SUCCESS)
        rc = waitFor(req, &st);
    }
    if (rc != MPI_SUCCESS)
      receiveFailed(gWait.block ? "MPI_Recv" : "MPI_Irecv/MPI_Test", rc);
    if (MPI_Get_count(&st, MPI_BYTE, &count) != MPI_SUCCESS || count != want)
      mismatch(off + count);
    off += want;
  } while (off < bytes);
}

} // namespace gpipe
