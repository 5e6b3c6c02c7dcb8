// The CUDA runtime's device: binds the stage's GPU, owns the streams, the
// cuBLASLt handle, the arena (one cudaMalloc, before step 1) and the
// transfers between stages.
//
// Streams: every kernel runs on the compute stream; sends and receives run on
// the communication stream, so a send overlaps the compute that follows it.
// Order between the two is kept with events:
//  - a send first copies its tensor (on the compute stream) into a staging
//    slot of its own, double-buffered per boundary tensor, so the compute
//    that follows may reuse the tensor's memory at once; the communication
//    stream waits for the copy, then sends from the slot;
//  - a receive waits for the compute enqueued before it (earlier readers of
//    its destination), and the compute after it waits for the receive.
// One stream per direction keeps every stage's transfers in program order:
// the blocking-rendezvous model the compiler's deadlock check proves safe.
//
// Faults: NCCL communicators are non-blocking, so no NCCL call can hang the
// host; the host waits for a step's work by polling (streams, each
// communicator's asynchronous error, each transfer's completion event), and a
// transfer that makes no progress for --comm-timeout seconds once the work
// before it is done (waitForStep), or an NCCL error, aborts the
// communicators and ends the run naming the stage, its peer and the
// transfer.
//
// Transports: NCCL (ncclSend/ncclRecv) between stages on different GPUs, one
// two-rank communicator per pair that exchanges tensors. NCCL refuses two
// ranks on one GPU, so stages sharing a GPU (or all stages, with
// GPIPE_TRANSPORT=host, or with a schedule that needs buffered sends, such as
// 1F1B: one in-order NCCL stream per pair would deadlock on it) stage through
// pinned host memory and MPI. Each boundary tensor is then a channel with a
// worker thread of its own that makes every MPI call of it, in order, from a
// ring of pinned buffers:
//  - send: the compute stream copies the tensor into its device slot, the
//    communication stream copies the slot to the next pinned buffer, the
//    worker waits for that copy and sends; gp_send returns at once (it waits
//    only when all the channel's buffers are still being sent): buffered
//    sends;
//  - receive: the worker receives the channel's messages in order, as soon as
//    they arrive and a buffer is free (so a micro-batch arrives while the
//    stage computes the one before); gp_recv waits on the host until its
//    message is there, then enqueues the copy into the arena on the compute
//    stream (after every earlier reader of the destination).
// The GPU never waits for a host thread; the host waits are bounded by
// --comm-timeout.
#include "cuda_internal.h"
#include "internal.h"

#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

namespace gpipe {
namespace cuda {
namespace {

DeviceState gState;
int32_t gStage = -1;
std::string gDeviceName;
double gCommTimeout = 300.0; // seconds; --comm-timeout

#define GP_NCCL_CHECK(call)                                                    \
  do {                                                                         \
    ncclResult_t gp_nr_ = (call);                                              \
    if (gp_nr_ != ncclSuccess)                                                 \
      ::gpipe::cuda::fail(#call, ncclGetErrorString(gp_nr_), __FILE__,         \
                          __LINE__);                                           \
  } while (0)

/// A boundary tensor this stage sends: two device slots used in turn.
struct SendSlots {
  int32_t peer = 0, tag = 0;
  int64_t bytes = 0;
  void *device[2] = {nullptr, nullptr};
  cudaEvent_t free[2] = {nullptr, nullptr}; // the slot's last send is done
  int next = 0;
};

/// A boundary tensor this stage receives.
struct RecvBuffer {
  int32_t peer = 0, tag = 0;
  int64_t bytes = 0;
};

/// A host-staged boundary tensor (see the top of this file): its messages in
/// order through a ring of pinned buffers, moved by `worker`. Message n uses
/// buffer n % size. The step loop's thread and the worker meet under `mu`.
struct HostChannel {
  bool send = false;
  int32_t peer = 0, tag = 0;
  int64_t bytes = 0;
  std::vector<void *> pinned;
  // Send: the copy into pinned[b] is done (the worker may send it).
  // Receive: the copy out of pinned[b] into the arena is done (the worker may
  // receive into it again).
  std::vector<cudaEvent_t> copied;
  std::mutex mu;
  std::condition_variable cv;
  // Send: messages handed to the worker; receive: messages gp_recv took.
  int64_t issued = 0;
  // Send: messages the worker sent; receive: messages the worker received.
  int64_t done = 0;
  std::atomic<bool> stop{false};
  gp_step_ctx ctx{}; // the worker's: the runtime, for checks and messages
  std::thread worker;
  bool started = false;
};

struct Peer {
  bool nccl = false;
  ncclComm_t comm = nullptr;
  int rankInComm = 0; // the peer's rank in the two-rank communicator
};

/// A transfer enqueued on the communication stream in the current step: its
/// events and what to call it in an error. `ready` is recorded on the
/// communication stream just before the transfer itself, after its wait for
/// the compute stream: it completes when the work the transfer waits for
/// (earlier compute, earlier transfers) is done and the transfer can start.
struct PendingTransfer {
  cudaEvent_t ready = nullptr;
  cudaEvent_t done = nullptr;
  int32_t peer = 0, tag = 0;
  int64_t bytes = 0, step = 0, microbatch = 0;
  bool send = false;
};

struct Transfers {
  std::map<int32_t, Peer> peers;
  // This step's transfers in issue order; events are reused across steps.
  std::vector<PendingTransfer> pending;
  size_t pendingUsed = 0;
  std::map<std::pair<int32_t, int32_t>, SendSlots> sends; // (peer, tag)
  std::map<std::pair<int32_t, int32_t>, RecvBuffer> recvs;
  // Host-staged channels by (peer, tag), sends and receives apart. Never
  // freed unless deviceShutdown joined their workers (a run that fails exits
  // with them running).
  std::map<std::pair<int32_t, int32_t>, HostChannel *> hostSends, hostRecvs;
  cudaEvent_t computeDone = nullptr; // compute -> communication order
  cudaEvent_t commDone = nullptr;    // communication -> compute order
} gTransfers;

/// The stages of this pipeline on this stage's GPU (itself included), from
/// setUpTransports; just this stage when it has no peers.
std::vector<int32_t> gGpuMates;

unsigned char *gArena = nullptr;
// Pinned staging of the graph inputs: one buffer per (input, micro-batch),
// for a mini-batch that was not prefetched.
std::vector<std::vector<void *>> gInputStaging;

/// The next step's mini-batch of every graph input, copied to the device
/// while the current step runs: two mini-batch buffers per input (device and
/// pinned), used in turn; `first` is the step whose mini-batch each one
/// holds (-1: none).
struct Prefetch {
  std::vector<void *> device[2], pinned[2]; // per input
  std::vector<int64_t> bytes;               // per input: one mini-batch
  int64_t first[2] = {-1, -1};
  cudaEvent_t ready[2] = {nullptr, nullptr};
  cudaStream_t stream = nullptr; // host-to-device copies
} gPrefetch;
// The loss of each micro-batch, copied back as the loss stage reports it.
float *gLossHost = nullptr;
std::vector<bool> gLossSeen;
int32_t gMicrobatches = 1;

std::string cudaMessage(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

std::string describe(const PendingTransfer &t);
std::string noProgress(const std::string &what, int32_t peer);

/// "the receive of tag T (B bytes) from stage P (step N, micro-batch M) made
/// no progress for S s (--comm-timeout): is stage P alive?"
std::string noProgressHost(const gp_step_ctx *ctx, const HostChannel &c) {
  PendingTransfer t;
  t.send = c.send;
  t.peer = c.peer;
  t.tag = c.tag;
  t.bytes = c.bytes;
  t.step = ctx ? ctx->step : 0;
  t.microbatch = ctx ? ctx->microbatch : 0;
  return noProgress(describe(t), c.peer);
}

/// Waits on the host, under `c.mu`, until `ready` holds: at most
/// --comm-timeout seconds, then ends the run naming the transfer.
template <typename Ready>
void waitForChannel(gp_step_ctx *ctx, HostChannel &c,
                    std::unique_lock<std::mutex> &lock, Ready ready) {
  if (ready())
    return;
  HeartbeatWait waiting(c.peer, !c.send);
  auto limit = std::chrono::duration<double>(gCommTimeout);
  if (!c.cv.wait_for(lock, limit, ready)) {
    lock.unlock();
    fatal(ctx, 1, noProgressHost(ctx, c));
  }
}

/// The worker of a host-staged send: sends the channel's messages in order,
/// each once its copy into the pinned buffer is done.
void sendWorker(HostChannel *c) {
  heartbeatIgnoreThisThread();
  cudaSetDevice(gState.device);
  const int64_t size = static_cast<int64_t>(c->pinned.size());
  for (int64_t n = 0;; ++n) {
    {
      std::unique_lock<std::mutex> lock(c->mu);
      c->cv.wait(lock, [&] { return c->stop || c->issued > n; });
      if (c->issued <= n)
        return; // stopped, everything sent
    }
    size_t b = static_cast<size_t>(n % size);
    cudaError_t e = cudaEventSynchronize(c->copied[b]);
    if (e != cudaSuccess)
      fatal(&c->ctx, 1,
            "CUDA error before the send of tag " + std::to_string(c->tag) +
                " to stage " + std::to_string(c->peer) + ": " + cudaMessage(e));
    mpiSend(&c->ctx, c->peer, c->tag, c->pinned[b], c->bytes);
    {
      std::lock_guard<std::mutex> lock(c->mu);
      c->done = n + 1;
    }
    c->cv.notify_all();
  }
}

/// The worker of a host-staged receive: receives the channel's messages in
/// order into its ring, each as soon as it arrives and its buffer's previous
/// message has been copied out.
void recvWorker(HostChannel *c) {
  heartbeatIgnoreThisThread();
  cudaSetDevice(gState.device);
  const int64_t size = static_cast<int64_t>(c->pinned.size());
  for (int64_t n = 0;; ++n) {
    size_t b = static_cast<size_t>(n % size);
    {
      std::unique_lock<std::mutex> lock(c->mu);
      c->cv.wait(lock, [&] { return c->stop || c->issued > n - size; });
      if (c->stop)
        return;
    }
    // gp_recv recorded the copy out of this buffer before it counted the
    // message as taken.
    cudaError_t e = cudaEventSynchronize(c->copied[b]);
    if (e != cudaSuccess)
      fatal(&c->ctx, 1,
            "CUDA error before the receive of tag " + std::to_string(c->tag) +
                " from stage " + std::to_string(c->peer) + ": " +
                cudaMessage(e));
    // Probe first, so that the end of the run (no more messages) can stop
    // the worker; then receive (mpiRecv checks the size). Sleeps of at most
    // 100 us, not transport.cpp's Backoff (1 ms of sched_yield, then up to
    // 256 us): with that, two stages on one H100 ran 1F1B at 0.80x and
    // ZB-H1 at 0.79x of one stage's throughput, with this 0.86x and 0.85x
    // (bench/gpu/README.md).
    int sleepUs = 1;
    while (!transportMessageWaiting(c->peer, c->tag)) {
      if (c->stop)
        return;
      std::this_thread::sleep_for(std::chrono::microseconds(sleepUs));
      sleepUs = std::min(sleepUs * 2, 100);
    }
    mpiRecv(&c->ctx, c->peer, c->tag, c->pinned[b], c->bytes);
    {
      std::lock_guard<std::mutex> lock(c->mu);
      c->done = n + 1;
    }
    c->cv.notify_all();
  }
}

/// Starts a channel's worker at its first use (the worker needs the
/// runtime, which the step context carries).
void startChannel(gp_step_ctx *ctx, HostChannel &c) {
  if (c.started)
    return;
  c.ctx.runtime = ctx->runtime;
  c.ctx.arena = ctx->arena;
  c.worker = std::thread(c.send ? sendWorker : recvWorker, &c);
  c.started = true;
}

/// The step loop's side of a host-staged channel's next message: waits on
/// the host until its pinned buffer is free (send: the buffer's previous
/// message is sent) or the message is in it (receive), calls
/// `copy(buffer)` to enqueue the copy into or out of that buffer on
/// `stream`, records the buffer's `copied` event after it, and hands the
/// message to the worker (send) or the buffer back to it (receive).
template <typename Copy>
void stageMessage(gp_step_ctx *ctx, HostChannel &c, cudaStream_t stream,
                  Copy copy) {
  startChannel(ctx, c);
  std::unique_lock<std::mutex> lock(c.mu);
  const int64_t n = c.issued, size = static_cast<int64_t>(c.pinned.size());
  waitForChannel(ctx, c, lock,
                 [&] { return c.send ? c.done > n - size : c.done > n; });
  size_t b = static_cast<size_t>(n % size);
  copy(c.pinned[b]);
  GP_CUDA_CHECK(cudaEventRecord(c.copied[b], stream));
  c.issued = n + 1;
  lock.unlock();
  c.cv.notify_all();
}

/// Ends the channels' workers once every send is delivered (at most
/// --comm-timeout seconds).
void stopChannels() {
  for (auto &entry : gTransfers.hostSends) {
    HostChannel &c = *entry.second;
    std::unique_lock<std::mutex> lock(c.mu);
    c.cv.wait_for(lock, std::chrono::duration<double>(gCommTimeout),
                  [&] { return c.done >= c.issued; });
  }
  for (auto *channels : {&gTransfers.hostSends, &gTransfers.hostRecvs})
    for (auto &entry : *channels) {
      HostChannel *c = entry.second;
      {
        std::lock_guard<std::mutex> lock(c->mu);
        c->stop = true;
      }
      c->cv.notify_all();
      if (c->started)
        c->worker.join();
      for (size_t b = 0; b < c->pinned.size(); ++b) {
        cudaFreeHost(c->pinned[b]);
        cudaEventDestroy(c->copied[b]);
      }
      delete c;
    }
  gTransfers.hostSends.clear();
  gTransfers.hostRecvs.clear();
}

/// The send slots / receive buffers of this stage's boundary tensors, and the
/// check that each peer describes the same tensors with the same sizes (NCCL
/// would not notice a mismatch).
bool setUpBuffers(const gp_program &p, std::string &err) {
  std::map<int32_t, std::vector<int64_t>> table; // peer -> (dir, phase, tag, B)
  for (int32_t i = 0; i < p.num_transfers; ++i) {
    const gp_transfer &t = p.transfers[i];
    std::vector<int64_t> &row = table[t.peer];
    row.insert(row.end(), {t.is_send, t.phase, t.tag, t.bytes});
    std::pair<int32_t, int32_t> key{t.peer, t.tag};
    bool host = !gTransfers.peers[t.peer].nccl;
    size_t n = static_cast<size_t>(std::max<int64_t>(t.bytes, 1));
    if (t.is_send) {
      SendSlots &s = gTransfers.sends[key];
      s.peer = t.peer;
      s.tag = t.tag;
      s.bytes = t.bytes;
      for (int k = 0; k < 2; ++k) {
        GP_CUDA_CHECK(cudaMalloc(&s.device[k], n));
        GP_CUDA_CHECK(
            cudaEventCreateWithFlags(&s.free[k], cudaEventDisableTiming));
        GP_CUDA_CHECK(cudaEventRecord(s.free[k], gState.comm));
      }
    } else {
      RecvBuffer &r = gTransfers.recvs[key];
      r.peer = t.peer;
      r.tag = t.tag;
      r.bytes = t.bytes;
    }
    if (host) {
      // A step has M messages per boundary tensor, and a sender cannot
      // start the next step's before its receiver took this step's (it
      // needs the receiver's answers first): M + 1 buffers leave a sender
      // never waiting for a buffer, and a receiver one spare.
      auto *c = new HostChannel;
      (t.is_send ? gTransfers.hostSends : gTransfers.hostRecvs)[key] = c;
      c->send = t.is_send;
      c->peer = t.peer;
      c->tag = t.tag;
      c->bytes = t.bytes;
      size_t count =
          static_cast<size_t>(std::max<int32_t>(p.microbatches, 1)) + 1;
      c->pinned.assign(count, nullptr);
      c->copied.assign(count, nullptr);
      for (size_t b = 0; b < count; ++b) {
        GP_CUDA_CHECK(cudaMallocHost(&c->pinned[b], n));
        // Blocking: the worker sleeps in cudaEventSynchronize.
        GP_CUDA_CHECK(cudaEventCreateWithFlags(
            &c->copied[b], cudaEventDisableTiming | cudaEventBlockingSync));
      }
    }
  }
  // Each side sends its table to the peer and checks the peer's against its
  // own, mirrored: in increasing peer order, lower stage first, so the
  // blocking exchanges pair up without a cycle.
  int32_t tag = transportSetupTag();
  for (auto &entry : table) {
    const int32_t peer = entry.first;
    const std::vector<int64_t> &mine = entry.second;
    int64_t n = static_cast<int64_t>(mine.size()), theirN = 0;
    std::vector<int64_t> theirs;
    auto sendMine = [&] {
      return transportSendBytes(peer, tag, &n, sizeof n, err) &&
             transportSendBytes(peer, tag, mine.data(), n * 8, err);
    };
    auto recvTheirs = [&] {
      if (!transportRecvBytes(peer, tag, &theirN, sizeof theirN, err))
        return false;
      theirs.resize(static_cast<size_t>(std::max<int64_t>(theirN, 0)));
      return transportRecvBytes(peer, tag, theirs.data(), theirN * 8, err);
    };
    bool ok =
        gStage < peer ? sendMine() && recvTheirs() : recvTheirs() && sendMine();
    if (!ok)
      return false;
    std::vector<std::vector<int64_t>> a, b;
    for (size_t i = 0; i + 3 < mine.size(); i += 4)
      a.push_back({1 - mine[i], mine[i + 1], mine[i + 2], mine[i + 3]});
    for (size_t i = 0; i + 3 < theirs.size(); i += 4)
      b.push_back({theirs[i], theirs[i + 1], theirs[i + 2], theirs[i + 3]});
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    if (a != b) {
      err = "stage " + std::to_string(peer) +
            " expects other tensors (tags or sizes) across their boundary "
            "than this stage: were they compiled together?";
      return false;
    }
  }
  return true;
}

bool settleNccl(ncclComm_t comm, ncclResult_t r, int32_t peer,
                const std::string &what, std::string &err);

/// Creates the transports: which peers share this GPU, and a two-rank NCCL
/// communicator with each peer on another GPU.
bool setUpTransports(const gp_program &p, std::string &err) {
  // (host, GPU) of every stage, to find the pairs that share a GPU.
  cudaDeviceProp prop;
  GP_CUDA_CHECK(cudaGetDeviceProperties(&prop, gState.device));
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  uint64_t hostHash = 1469598103934665603ull;
  for (const char *c = host; *c; ++c)
    hostHash = (hostHash ^ static_cast<unsigned char>(*c)) * 1099511628211ull;
  int64_t uuid[2];
  std::memcpy(uuid, prop.uuid.bytes, sizeof uuid);
  int64_t mine[3] = {static_cast<int64_t>(hostHash), uuid[0], uuid[1]};
  std::vector<int64_t> all;
  if (!transportAllGather(mine, 3, all, err))
    return false;
  const char *forced = std::getenv("GPIPE_TRANSPORT");
  bool forceHost = forced && std::string(forced) == "host";
  if (forced && !forceHost && std::string(forced) != "auto") {
    err = "GPIPE_TRANSPORT must be 'auto' or 'host', got '" +
          std::string(forced) + "'";
    return false;
  }
  gGpuMates.clear();
  for (int32_t s = 0; s < p.num_stages; ++s)
    if (std::equal(mine, mine + 3, &all[static_cast<size_t>(s) * 3]))
      gGpuMates.push_back(s);
  for (int32_t i = 0; i < p.num_transfers; ++i) {
    int32_t peer = p.transfers[i].peer;
    if (peer < 0 || peer >= p.num_stages || peer == gStage) {
      err = "invalid program: a transfer with stage " + std::to_string(peer);
      return false;
    }
    const int64_t *theirs = &all[static_cast<size_t>(peer) * 3];
    bool sameGpu =
        theirs[0] == mine[0] && theirs[1] == mine[1] && theirs[2] == mine[2];
    // NCCL's transfers run in order on one communication stream, which
    // deadlocks a schedule that needs buffered sends (1F1B: stage s sends
    // micro-batch i+1's activation while stage s+1 sends micro-batch i's
    // gradient): such a schedule stages every transfer through the host.
    gTransfers.peers[peer].nccl = !sameGpu && !forceHost && !p.buffered_sends;
  }
  // One communicator per pair, created in increasing peer order on both
  // sides (pairs in lexicographic order: no two stages wait on each other).
  int32_t tag = transportSetupTag();
  for (auto &[peer, info] : gTransfers.peers) {
    if (!info.nccl)
      continue;
    ncclUniqueId id;
    if (gStage < peer) {
      GP_NCCL_CHECK(ncclGetUniqueId(&id));
      if (!transportSendBytes(peer, tag, &id, sizeof id, err))
        return false;
    } else if (!transportRecvBytes(peer, tag, &id, sizeof id, err)) {
      return false;
    }
    int me = gStage < peer ? 0 : 1;
    // Non-blocking: every NCCL call returns at once and is polled, so a dead
    // or stuck peer cannot hang this stage (and the communicator can be
    // aborted).
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t r = ncclCommInitRankConfig(&info.comm, 2, id, me, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      err = "creating the NCCL communicator with stage " +
            std::to_string(peer) + " failed: " + ncclGetErrorString(r);
      info.comm = nullptr;
      return false;
    }
    if (!settleNccl(info.comm, r, peer, "creating the NCCL communicator", err))
      return false;
    info.rankInComm = 1 - me;
  }
  return true;
}

void checkTransferCall(gp_step_ctx *ctx, const char *what, int32_t peer,
                       int32_t tag, const void *buf, int64_t bytes,
                       int64_t expected, bool found) {
  if (!found || bytes != expected || (bytes > 0 && !buf))
    fatal(ctx, 1,
          std::string("invalid program: ") + what + " of " +
              std::to_string(bytes) + " bytes with stage " +
              std::to_string(peer) + " (tag " + std::to_string(tag) +
              ") is not one of the program's boundary tensors");
}

using Clock = std::chrono::steady_clock;

std::string describe(const PendingTransfer &t) {
  return std::string(t.send ? "the send of tag " : "the receive of tag ") +
         std::to_string(t.tag) + " (" + std::to_string(t.bytes) + " bytes) " +
         (t.send ? "to" : "from") + " stage " + std::to_string(t.peer) +
         " (step " + std::to_string(t.step) + ", micro-batch " +
         std::to_string(t.microbatch) + ")";
}

/// Remembers a transfer about to be enqueued on the communication stream:
/// called after the stream's wait for the compute stream and before the
/// transfer, it records the transfer's `ready` event. notePendingDone, after
/// the transfer, records its `done` event.
void notePending(const gp_step_ctx *ctx, bool send, int32_t peer, int32_t tag,
                 int64_t bytes) {
  std::vector<PendingTransfer> &v = gTransfers.pending;
  if (gTransfers.pendingUsed == v.size()) {
    v.emplace_back();
    GP_CUDA_CHECK(
        cudaEventCreateWithFlags(&v.back().ready, cudaEventDisableTiming));
    GP_CUDA_CHECK(
        cudaEventCreateWithFlags(&v.back().done, cudaEventDisableTiming));
  }
  PendingTransfer &t = v[gTransfers.pendingUsed++];
  t.send = send;
  t.peer = peer;
  t.tag = tag;
  t.bytes = bytes;
  t.step = ctx ? ctx->step : 0;
  t.microbatch = ctx ? ctx->microbatch : 0;
  GP_CUDA_CHECK(cudaEventRecord(t.ready, gState.comm));
}

/// The transfer noted last is enqueued: records its completion event.
void notePendingDone() {
  GP_CUDA_CHECK(cudaEventRecord(
      gTransfers.pending[gTransfers.pendingUsed - 1].done, gState.comm));
}

/// Aborts every NCCL communicator: their pending operations end (with an
/// error) instead of waiting for a peer that will not come.
void abortCommunicators() {
  for (auto &entry : gTransfers.peers)
    if (entry.second.comm) {
      ncclCommAbort(entry.second.comm);
      entry.second.comm = nullptr;
    }
}

/// "ncclRemoteError (the peer's last error text)": what went wrong on `comm`.
std::string ncclFailure(ncclComm_t comm, ncclResult_t r) {
  std::string last = ncclGetLastError(comm);
  return ncclGetErrorString(r) + (last.empty() ? "" : " (" + last + ")");
}

/// The message of a transfer or call that waited --comm-timeout seconds.
std::string noProgress(const std::string &what, int32_t peer) {
  return what + " made no progress for " + std::to_string(gCommTimeout) +
         " s (--comm-timeout): is stage " + std::to_string(peer) + " alive?";
}

/// Waits for a non-blocking NCCL call on `comm` to finish (ncclInProgress),
/// at most --comm-timeout seconds. On an error or a timeout aborts the
/// communicators and sets `err` naming the peer and `what`.
bool settleNccl(ncclComm_t comm, ncclResult_t r, int32_t peer,
                const std::string &what, std::string &err) {
  const Clock::time_point start = Clock::now();
  while (r == ncclInProgress) {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    if (ncclCommGetAsyncError(comm, &r) != ncclSuccess)
      r = ncclSystemError;
    if (r == ncclInProgress &&
        std::chrono::duration<double>(Clock::now() - start).count() >
            gCommTimeout) {
      abortCommunicators();
      err = noProgress(what + " with stage " + std::to_string(peer), peer);
      return false;
    }
  }
  if (r == ncclSuccess)
    return true;
  err = what + " with stage " + std::to_string(peer) +
        " failed: " + ncclFailure(comm, r);
  abortCommunicators();
  return false;
}

/// Waits for the compute and communication streams to finish the step's
/// work. With peers: polls, so that a peer that fails (an NCCL asynchronous
/// error) or stops (a transfer that could start, its earlier work done, does
/// not complete for --comm-timeout seconds) ends the run naming the
/// transfer, instead of a hang.
bool waitForStep(std::string &err) {
  if (gTransfers.peers.empty()) {
    cudaError_t e = cudaStreamSynchronize(gState.compute);
    if (e == cudaSuccess)
      e = cudaStreamSynchronize(gState.comm);
    if (e != cudaSuccess)
      err = "CUDA error: " + cudaMessage(e);
    return e == cudaSuccess;
  }
  // The no-progress clock times only the transfer itself. The first
  // pending transfer cannot start before the work it waits for is done: the
  // compute enqueued before it (for a send, up to the copy into its slot)
  // and the transfers before it. That compute is this stage's own and may
  // legitimately take long (a big model, compute-sanitizer), and it does not
  // depend on any peer (the compute stream waits only for transfers issued
  // before it, which are done). So the clock starts when the transfer's
  // `ready` event is seen complete, not when the host starts waiting or the
  // transfer before it completes; until then only a CUDA or NCCL error ends
  // the wait.
  size_t firstPending = 0;
  bool started = false; // the first pending transfer's `ready` completed
  Clock::time_point lastProgress = Clock::now();
  int sleepUs = 5;
  for (;;) {
    // The transfers complete in issue order (one communication stream).
    while (firstPending < gTransfers.pendingUsed) {
      cudaError_t q = cudaEventQuery(gTransfers.pending[firstPending].done);
      if (q == cudaErrorNotReady)
        break;
      if (q != cudaSuccess) {
        err = "CUDA error during " +
              describe(gTransfers.pending[firstPending]) + ": " +
              cudaMessage(q);
        return false;
      }
      ++firstPending;
      started = false;
      sleepUs = 5;
    }
    if (firstPending < gTransfers.pendingUsed && !started) {
      cudaError_t q = cudaEventQuery(gTransfers.pending[firstPending].ready);
      if (q == cudaSuccess) {
        started = true;
        lastProgress = Clock::now();
      } else if (q != cudaErrorNotReady) {
        err = "CUDA error before " +
              describe(gTransfers.pending[firstPending]) + ": " +
              cudaMessage(q);
        return false;
      }
    }
    cudaError_t c = cudaStreamQuery(gState.compute);
    cudaError_t m = cudaStreamQuery(gState.comm);
    if (c == cudaSuccess && m == cudaSuccess)
      break;
    for (cudaError_t e : {c, m})
      if (e != cudaSuccess && e != cudaErrorNotReady) {
        err = "CUDA error: " + cudaMessage(e);
        return false;
      }
    for (auto &[peer, info] : gTransfers.peers) {
      if (!info.comm)
        continue;
      ncclResult_t r = ncclSuccess;
      if (ncclCommGetAsyncError(info.comm, &r) != ncclSuccess)
        r = ncclSystemError;
      if (r != ncclSuccess && r != ncclInProgress) {
        std::string what = firstPending < gTransfers.pendingUsed
                               ? describe(gTransfers.pending[firstPending])
                               : std::string("a transfer");
        err = "NCCL error with stage " + std::to_string(peer) + " during " +
              what + ": " + ncclFailure(info.comm, r);
        abortCommunicators();
        return false;
      }
    }
    if (firstPending < gTransfers.pendingUsed && started &&
        std::chrono::duration<double>(Clock::now() - lastProgress).count() >
            gCommTimeout) {
      const PendingTransfer &t = gTransfers.pending[firstPending];
      err = noProgress(describe(t), t.peer);
      abortCommunicators();
      return false;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(sleepUs));
    sleepUs = std::min(sleepUs * 2, 200);
  }
  gTransfers.pendingUsed = 0;
  return true;
}

} // namespace

DeviceState &state() { return gState; }

int32_t currentStage() { return gStage; }

void fail(const char *what, const char *detail, const char *file, int line) {
  const char *base = std::strrchr(file, '/');
  fatalInStage(gStage, 1,
               std::string("CUDA error in ") + what + " (" +
                   (base ? base + 1 : file) + ":" + std::to_string(line) +
                   "): " + detail);
}

/// Sets up device 0 as deviceInit would for a stage program (unit tests).
void testInitDevice(size_t scratchBytes) {
  gState.device = 0;
  GP_CUDA_CHECK(cudaSetDevice(0));
  GP_CUDA_CHECK(
      cudaStreamCreateWithFlags(&gState.compute, cudaStreamNonBlocking));
  GP_CUDA_CHECK(cudaStreamCreateWithFlags(&gState.comm, cudaStreamNonBlocking));
  GP_CUBLAS_CHECK(cublasLtCreate(&gState.lt));
  gState.workspaceBytes = size_t(32) << 20;
  GP_CUDA_CHECK(cudaMalloc(&gState.workspace, gState.workspaceBytes));
  gState.scratchBytes = scratchBytes;
  if (scratchBytes)
    GP_CUDA_CHECK(cudaMalloc(&gState.scratch, scratchBytes));
  setAttentionWorkspace(kAttentionWorkspaceBytes);
}

void setAttentionWorkspace(size_t bytes) {
  if (gState.attention) {
    GP_CUDA_CHECK(cudaStreamSynchronize(gState.compute));
    GP_CUDA_CHECK(cudaFree(gState.attention));
    gState.attention = nullptr;
    gState.attentionBytes = 0;
  }
  GP_CUDA_CHECK(cudaMalloc(&gState.attention, bytes));
  gState.attentionBytes = bytes;
}

} // namespace cuda

using cuda::gState;
using cuda::gTransfers;

gp_target deviceTarget() { return GP_TARGET_CUDA; }

bool deviceInit(const gp_program &p, const DeviceOptions &options,
                std::string &err) {
  // Host threads (--threads) do not matter: the work is on the GPU.
  const int64_t device = options.device;
  cuda::gStage = p.stage;
  cuda::gCommTimeout = options.commTimeoutSeconds;
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    err = "no CUDA device (" +
          (e != cudaSuccess ? cuda::cudaMessage(e)
                            : std::string("cudaGetDeviceCount found none")) +
          "): this stage program was compiled with --target cuda";
    return false;
  }
  if (device >= count) {
    err = "--device " + std::to_string(device) + ": only " +
          std::to_string(count) + " CUDA device(s) are visible";
    return false;
  }
  // Each stage binds its node-local GPU; stages beyond the GPUs share them.
  gState.device =
      device >= 0 ? static_cast<int>(device) : transportLocalRank() % count;
  GP_CUDA_CHECK(cudaSetDevice(gState.device));
  cudaDeviceProp prop;
  GP_CUDA_CHECK(cudaGetDeviceProperties(&prop, gState.device));
  cuda::gDeviceName =
      "cuda:" + std::to_string(gState.device) + " (" + prop.name + ")";
  GP_CUDA_CHECK(
      cudaStreamCreateWithFlags(&gState.compute, cudaStreamNonBlocking));
  // Transfers get priority: a send that waits holds up the next stage.
  int least = 0, greatest = 0;
  GP_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  GP_CUDA_CHECK(cudaStreamCreateWithPriority(&gState.comm,
                                             cudaStreamNonBlocking, greatest));
  GP_CUBLAS_CHECK(cublasLtCreate(&gState.lt));
  // cuBLASLt's recommended workspace on Hopper; allocated once, here.
  gState.workspaceBytes = size_t(32) << 20;
  GP_CUDA_CHECK(cudaMalloc(&gState.workspace, gState.workspaceBytes));
  gState.scratchBytes = static_cast<size_t>(p.scratch_bytes);
  if (gState.scratchBytes)
    GP_CUDA_CHECK(cudaMalloc(&gState.scratch, gState.scratchBytes));
  // The fused attention's score tiles, whatever the program (it does not say
  // whether it calls gp_attention_*): a fixed size, the batch then runs in
  // chunks (kernels.cu).
  cuda::setAttentionWorkspace(cuda::kAttentionWorkspaceBytes);
  GP_CUDA_CHECK(cudaEventCreateWithFlags(&gTransfers.computeDone,
                                         cudaEventDisableTiming));
  GP_CUDA_CHECK(
      cudaEventCreateWithFlags(&gTransfers.commDone, cudaEventDisableTiming));

  // Pinned staging of the graph inputs and the loss.
  cuda::gMicrobatches = p.microbatches;
  int64_t rows = p.batch_size / p.microbatches;
  cuda::gInputStaging.assign(static_cast<size_t>(p.num_inputs), {});
  for (int32_t i = 0; i < p.num_inputs; ++i) {
    const gp_tensor_desc &d = p.inputs[i];
    int64_t bytes = rows * (d.dtype == GP_F32 ? 4 : 8);
    for (int32_t k = 1; k < d.rank; ++k)
      bytes *= d.shape[k];
    for (int32_t m = 0; m < p.microbatches; ++m) {
      void *buf = nullptr;
      GP_CUDA_CHECK(cudaMallocHost(
          &buf, static_cast<size_t>(std::max<int64_t>(bytes, 1))));
      cuda::gInputStaging[static_cast<size_t>(i)].push_back(buf);
    }
  }
  if (p.num_inputs > 0) {
    cuda::Prefetch &f = cuda::gPrefetch;
    GP_CUDA_CHECK(cudaStreamCreateWithFlags(&f.stream, cudaStreamNonBlocking));
    for (int32_t i = 0; i < p.num_inputs; ++i) {
      const gp_tensor_desc &d = p.inputs[i];
      int64_t bytes = p.batch_size * (d.dtype == GP_F32 ? 4 : 8);
      for (int32_t k = 1; k < d.rank; ++k)
        bytes *= d.shape[k];
      f.bytes.push_back(bytes);
      for (int k = 0; k < 2; ++k) {
        void *dev = nullptr, *host = nullptr;
        size_t n = static_cast<size_t>(std::max<int64_t>(bytes, 1));
        GP_CUDA_CHECK(cudaMalloc(&dev, n));
        GP_CUDA_CHECK(cudaMallocHost(&host, n));
        f.device[k].push_back(dev);
        f.pinned[k].push_back(host);
      }
    }
    for (int k = 0; k < 2; ++k)
      GP_CUDA_CHECK(
          cudaEventCreateWithFlags(&f.ready[k], cudaEventDisableTiming));
  }
  GP_CUDA_CHECK(cudaMallocHost(
      &cuda::gLossHost, sizeof(float) * static_cast<size_t>(p.microbatches)));
  cuda::gLossSeen.assign(static_cast<size_t>(p.microbatches), false);

  if (p.num_stages > 1 && !cuda::setUpTransports(p, err))
    return false;
  return p.num_stages == 1 || cuda::setUpBuffers(p, err);
}

std::string deviceDescription() { return cuda::gDeviceName; }

int64_t deviceMemoryInUse() {
  size_t freeBytes = 0, total = 0;
  if (cudaMemGetInfo(&freeBytes, &total) != cudaSuccess)
    return -1;
  return static_cast<int64_t>(total - freeBytes);
}

unsigned char *deviceAllocArena(int64_t bytes, std::string &err) {
  size_t size = static_cast<size_t>(std::max<int64_t>(bytes, 256));
  cudaError_t e = cudaMalloc(&cuda::gArena, size);
  if (e != cudaSuccess) {
    size_t freeBytes = 0, total = 0;
    cudaMemGetInfo(&freeBytes, &total);
    err = "cannot allocate the " + std::to_string(size) + "-byte arena on " +
          cuda::gDeviceName + " (" + std::to_string(freeBytes) +
          " bytes free): " + cuda::cudaMessage(e);
    cuda::gArena = nullptr;
    return nullptr;
  }
  // On the compute stream, which every later use of the arena follows (the
  // legacy default stream does not order the non-blocking streams).
  GP_CUDA_CHECK(cudaMemsetAsync(cuda::gArena, 0, size, gState.compute));
  GP_CUDA_CHECK(cudaStreamSynchronize(gState.compute));
  return cuda::gArena;
}

bool deviceUpload(unsigned char *dst, const void *src, int64_t bytes,
                  std::string &err) {
  // On the compute stream, so that the generated init and the first step
  // (also on it) see the parameters; a pageable cudaMemcpy on the legacy
  // stream would not order them. Synchronised: `src` is a mapped file that
  // is closed next.
  cudaError_t e = cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes),
                                  cudaMemcpyHostToDevice, gState.compute);
  if (e == cudaSuccess)
    e = cudaStreamSynchronize(gState.compute);
  if (e != cudaSuccess)
    err = cuda::cudaMessage(e);
  return e == cudaSuccess;
}

bool deviceDownload(void *dst, const unsigned char *src, int64_t bytes,
                    std::string &err) {
  cudaError_t e = cudaStreamSynchronize(gState.compute);
  if (e == cudaSuccess)
    e = cudaMemcpy(dst, src, static_cast<size_t>(bytes),
                   cudaMemcpyDeviceToHost);
  if (e != cudaSuccess)
    err = cuda::cudaMessage(e);
  return e == cudaSuccess;
}

void deviceLoadInput(gp_step_ctx *ctx, int32_t input, int64_t microbatch,
                     void *dst, const void *src, int64_t bytes) {
  const Runtime &rt = *static_cast<const Runtime *>(ctx->runtime);
  cuda::Prefetch &f = cuda::gPrefetch;
  for (int k = 0; k < 2; ++k)
    if (f.first[k] >= 0 && f.first[k] == rt.miniStep) {
      // Already on the device: a device-to-device copy once it arrived.
      auto *from =
          static_cast<unsigned char *>(f.device[k][static_cast<size_t>(input)]);
      GP_CUDA_CHECK(cudaStreamWaitEvent(gState.compute, f.ready[k], 0));
      GP_CUDA_CHECK(cudaMemcpyAsync(dst, from + microbatch * bytes,
                                    static_cast<size_t>(bytes),
                                    cudaMemcpyDeviceToDevice, gState.compute));
      return;
    }
  // Not prefetched. The previous step's copy out of this buffer finished at
  // its end (deviceStepEnd synchronises).
  void *staging = cuda::gInputStaging[static_cast<size_t>(input)]
                                     [static_cast<size_t>(microbatch)];
  std::memcpy(staging, src, static_cast<size_t>(bytes));
  GP_CUDA_CHECK(cudaMemcpyAsync(dst, staging, static_cast<size_t>(bytes),
                                cudaMemcpyHostToDevice, gState.compute));
}

namespace {
/// --profile on CUDA: events recorded on the compute stream around each timed
/// unit (a pool reused every step, grown in the first steps), and the step's
/// (unit, start, end) spans, timed once the step is done.
struct ProfileEvents {
  std::vector<cudaEvent_t> pool;
  size_t next = 0;
  struct Span {
    int32_t unit;
    size_t start, end;
  };
  std::vector<Span> spans;
} gProfileEvents;

/// The step's spans into the unit sums; the pool is free again.
void collectProfileSpans() {
  ProfileEvents &p = gProfileEvents;
  for (const ProfileEvents::Span &s : p.spans) {
    float ms = 0;
    if (cudaEventElapsedTime(&ms, p.pool[s.start], p.pool[s.end]) ==
        cudaSuccess)
      profileAddNs(s.unit, static_cast<int64_t>(double(ms) * 1e6));
  }
  p.spans.clear();
  p.next = 0;
}
} // namespace

int64_t deviceProfileMark() {
  ProfileEvents &p = gProfileEvents;
  if (p.next == p.pool.size()) {
    cudaEvent_t e = nullptr;
    GP_CUDA_CHECK(cudaEventCreate(&e));
    p.pool.push_back(e);
  }
  GP_CUDA_CHECK(cudaEventRecord(p.pool[p.next], gState.compute));
  return static_cast<int64_t>(p.next++);
}

bool deviceMeasureLinks(const gp_program &p, std::vector<LinkSample> &out,
                        std::string &err) {
  // A host-staged link's message as the transfers move it: out of the GPU
  // into pinned memory, MPI, back into the GPU (after the steps: the compute
  // stream is idle). NCCL links are left out.
  void *device = nullptr, *pinned = nullptr;
  int64_t capacity = 0;
  LinkStaging staging;
  staging.measured = [](int32_t peer) {
    auto it = gTransfers.peers.find(peer);
    return it != gTransfers.peers.end() && !it->second.nccl;
  };
  staging.hostBuffer = [&](int64_t bytes) {
    if (bytes > capacity) {
      if (device)
        GP_CUDA_CHECK(cudaFree(device));
      if (pinned)
        GP_CUDA_CHECK(cudaFreeHost(pinned));
      GP_CUDA_CHECK(cudaMalloc(&device, static_cast<size_t>(bytes)));
      GP_CUDA_CHECK(cudaMallocHost(&pinned, static_cast<size_t>(bytes)));
      GP_CUDA_CHECK(cudaMemsetAsync(device, 0, static_cast<size_t>(bytes),
                                    gState.compute));
      capacity = bytes;
    }
    return pinned;
  };
  auto copy = [&](void *dst, const void *src, int64_t bytes,
                  cudaMemcpyKind kind) {
    GP_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), kind,
                                  gState.compute));
    GP_CUDA_CHECK(cudaStreamSynchronize(gState.compute));
  };
  staging.toHost = [&](void *host, int64_t bytes) {
    copy(host, device, bytes, cudaMemcpyDeviceToHost);
  };
  staging.fromHost = [&](void *host, int64_t bytes) {
    copy(device, host, bytes, cudaMemcpyHostToDevice);
  };
  bool ok = transportMeasureLinks(p, staging, out, err);
  if (device)
    GP_CUDA_CHECK(cudaFree(device));
  if (pinned)
    GP_CUDA_CHECK(cudaFreeHost(pinned));
  return ok;
}

bool deviceRuntimeBytes(const gp_program &p, int64_t &bytes, std::string &err) {
  // The GPU's memory in use (every process's) less the arenas of this
  // pipeline's stages on it, shared evenly among them: the CUDA context,
  // cuBLAS's and cuDNN's workspaces, the runtime's own buffers. Every stage
  // is past its steps and holds its arena (they measured their links
  // together, or there is one stage).
  bytes = -1;
  int64_t inUse = deviceMemoryInUse();
  std::vector<int64_t> arenas = {p.arena_bytes};
  std::vector<int32_t> mates = {p.stage};
  if (p.num_stages > 1) {
    if (!transportAllGather(&p.arena_bytes, 1, arenas, err))
      return false;
    mates = cuda::gGpuMates;
  }
  if (inUse < 0 || mates.empty())
    return true;
  int64_t held = inUse;
  for (int32_t s : mates)
    held -= arenas[static_cast<size_t>(p.num_stages > 1 ? s : 0)];
  bytes = std::max<int64_t>(0, held / static_cast<int64_t>(mates.size()));
  return true;
}

void deviceProfileSpan(int32_t unit, int64_t mark) {
  if (mark < 0)
    return;
  size_t end = static_cast<size_t>(deviceProfileMark());
  gProfileEvents.spans.push_back({unit, static_cast<size_t>(mark), end});
}

bool deviceStepEnd(gp_step_ctx &ctx, std::string &err) {
  // While the GPU runs this step: the next mini-batch into the buffer the
  // current one is not in (its last reader, the step before, is done).
  const Runtime *rt = static_cast<const Runtime *>(ctx.runtime);
  cuda::Prefetch &f = cuda::gPrefetch;
  if (rt && rt->nextMiniStep >= 0 && rt->numBatches > 0 && !f.bytes.empty()) {
    int k = f.first[0] >= 0 && f.first[0] == rt->miniStep ? 1 : 0;
    f.first[k] = -1;
    // Its previous copy was waited for by the step that read it; this only
    // guards a prefetch that no step read.
    GP_CUDA_CHECK(cudaEventSynchronize(f.ready[k]));
    for (size_t i = 0; i < f.bytes.size(); ++i) {
      copyMiniBatch(*rt, rt->nextMiniStep, static_cast<int32_t>(i),
                    f.pinned[k][i]);
      GP_CUDA_CHECK(cudaMemcpyAsync(f.device[k][i], f.pinned[k][i],
                                    static_cast<size_t>(f.bytes[i]),
                                    cudaMemcpyHostToDevice, f.stream));
    }
    GP_CUDA_CHECK(cudaEventRecord(f.ready[k], f.stream));
    f.first[k] = rt->nextMiniStep;
  }
  // A bad launch is not sticky: it is only reported by the next check.
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    err = "CUDA error: " + cuda::cudaMessage(e);
    return false;
  }
  if (!cuda::waitForStep(err))
    return false;
  // The step is done: its timed units' events have all completed.
  if (!gProfileEvents.spans.empty() || gProfileEvents.next > 0)
    collectProfileSpans();
  // Summed in micro-batch order, in double, as the CPU target does.
  double loss = 0.0;
  bool any = false;
  for (int32_t m = 0; m < cuda::gMicrobatches; ++m)
    if (cuda::gLossSeen[static_cast<size_t>(m)]) {
      loss += static_cast<double>(cuda::gLossHost[m]);
      cuda::gLossSeen[static_cast<size_t>(m)] = false;
      any = true;
    }
  if (any)
    ctx.loss = loss;
  return true;
}

void deviceShutdown() {
  if (gState.device < 0)
    return;
  cudaStreamSynchronize(gState.compute);
  cudaStreamSynchronize(gState.comm);
  // Only after a run that succeeded (gp_main aborts the job on an error), so
  // no transfer is pending. Finalizing is polled like every NCCL call: on an
  // error or timeout settleNccl aborts (and forgets) every communicator.
  for (auto &entry : gTransfers.peers) {
    ncclComm_t comm = entry.second.comm;
    std::string ignored;
    if (comm && cuda::settleNccl(comm, ncclCommFinalize(comm), entry.first,
                                 "finalizing the NCCL communicator", ignored))
      ncclCommDestroy(comm);
  }
  gTransfers.peers.clear();
  for (cuda::PendingTransfer &t : gTransfers.pending) {
    cudaEventDestroy(t.ready);
    cudaEventDestroy(t.done);
  }
  gTransfers.pending.clear();
  gTransfers.pendingUsed = 0;
  cuda::stopChannels();
  for (auto &entry : gTransfers.sends)
    for (int k = 0; k < 2; ++k) {
      cudaFree(entry.second.device[k]);
      cudaEventDestroy(entry.second.free[k]);
    }
  gTransfers.sends.clear();
  gTransfers.recvs.clear();
  for (auto &buffers : cuda::gInputStaging)
    for (void *b : buffers)
      cudaFreeHost(b);
  cuda::gInputStaging.clear();
  cuda::Prefetch &f = cuda::gPrefetch;
  if (f.stream)
    cudaStreamSynchronize(f.stream);
  for (int k = 0; k < 2; ++k) {
    for (void *b : f.device[k])
      cudaFree(b);
    for (void *b : f.pinned[k])
      cudaFreeHost(b);
    if (f.ready[k])
      cudaEventDestroy(f.ready[k]);
  }
  if (f.stream)
    cudaStreamDestroy(f.stream);
  f = cuda::Prefetch();
  cudaFreeHost(cuda::gLossHost);
  cuda::gLossHost = nullptr;
  cudaFree(cuda::gArena);
  cuda::gArena = nullptr;
  cudaFree(gState.scratch);
  cudaFree(gState.attention);
  cudaFree(gState.workspace);
  cublasLtDestroy(gState.lt);
  cudaEventDestroy(gTransfers.computeDone);
  cudaEventDestroy(gTransfers.commDone);
  cudaStreamDestroy(gState.comm);
  cudaStreamDestroy(gState.compute);
  gState = cuda::DeviceState();
}

} // namespace gpipe

using gpipe::fatal;
using gpipe::cuda::gState;
using gpipe::cuda::gTransfers;

extern "C" cudaStream_t gp_cuda_stream(void) { return gState.compute; }

extern "C" void gp_cuda_check(cudaError_t err) {
  if (err != cudaSuccess)
    gpipe::cuda::fail("generated code", cudaGetErrorString(err), "stage", 0);
}

extern "C" void gp_cuda_check_launch(const char *kernel, const char *node) {
  // Launch errors (a bad configuration, a missing kernel image for this GPU)
  // are reported by the next runtime call: check at once, naming the node.
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    gpipe::fatalInStage(gpipe::cuda::gStage, 1,
                        std::string("CUDA error launching ") +
                            (kernel ? kernel : "a kernel") + " for " +
                            (node ? node : "an unnamed node") + ": " +
                            gpipe::cuda::cudaMessage(err));
}

namespace {
/// --data-parallel on CUDA, host-staged: each started range is copied into
/// a pinned buffer of its own on the compute stream (after the kernels that
/// computed it); the wait synchronises the stream, averages the ranges over
/// MPI in the order started (transportAverageReplicas: the CPU target's
/// reduce-scatter, sum in replica order, all-gather) and copies them back
/// on the stream, before the update's kernels. The buffers are kept from
/// step to step.
struct StagedAverage {
  int64_t offset = 0, bytes = 0;
  float *host = nullptr;
  int64_t capacity = 0;
};
std::vector<StagedAverage> gAverages;
size_t gAveragesUsed = 0;

void traceAverage(gp_step_ctx *ctx, int64_t bytes, int64_t t0) {
  gpipe::timingTransfer(gpipe::TimedKind::AllReduce, ctx, -1, bytes, t0,
                        gpipe::timingNowNs());
}
} // namespace

extern "C" void gp_reduce_start(gp_step_ctx *ctx, int64_t offset,
                                int64_t bytes) {
  if (offset < 0 || bytes < 0 || bytes % 4 != 0)
    fatal(ctx, 1,
          "invalid program: gp_reduce_start of " + std::to_string(bytes) +
              " bytes at " + std::to_string(offset));
  int64_t t0 = gpipe::timingNowNs();
  if (gAveragesUsed == gAverages.size())
    gAverages.emplace_back();
  StagedAverage &a = gAverages[gAveragesUsed++];
  if (a.capacity < bytes) {
    if (a.host)
      GP_CUDA_CHECK(cudaFreeHost(a.host));
    GP_CUDA_CHECK(cudaMallocHost(&a.host, static_cast<size_t>(bytes)));
    a.capacity = bytes;
  }
  a.offset = offset;
  a.bytes = bytes;
  GP_CUDA_CHECK(cudaMemcpyAsync(a.host, ctx->arena + offset,
                                static_cast<size_t>(bytes),
                                cudaMemcpyDeviceToHost, gState.compute));
  traceAverage(ctx, bytes, t0);
}

extern "C" void gp_reduce_wait(gp_step_ctx *ctx) {
  int64_t t0 = gpipe::timingNowNs();
  GP_CUDA_CHECK(cudaStreamSynchronize(gState.compute));
  std::string err;
  for (size_t k = 0; k < gAveragesUsed; ++k) {
    StagedAverage &a = gAverages[k];
    if (!gpipe::transportAverageReplicas(a.host, a.bytes / 4, err))
      fatal(ctx, 1, err);
    GP_CUDA_CHECK(cudaMemcpyAsync(ctx->arena + a.offset, a.host,
                                  static_cast<size_t>(a.bytes),
                                  cudaMemcpyHostToDevice, gState.compute));
  }
  gAveragesUsed = 0;
  traceAverage(ctx, 0, t0);
}

extern "C" void gp_reduce_gradients(gp_step_ctx *ctx, int64_t offset,
                                    int64_t bytes) {
  gp_reduce_start(ctx, offset, bytes);
  gp_reduce_wait(ctx);
}

// gpipe-compile refuses --shard-optimizer with --target cuda.
extern "C" int64_t gp_shard_slice(gp_step_ctx *ctx, int64_t, int64_t, int64_t,
                                  int64_t *, int64_t *) {
  fatal(ctx, 1,
        "invalid program: --shard-optimizer is not supported by the CUDA "
        "runtime yet");
  return 0;
}
extern "C" void gp_shard_reduce(gp_step_ctx *ctx, int64_t, int64_t) {
  gp_shard_slice(ctx, 0, 0, 0, nullptr, nullptr);
}
extern "C" void gp_shard_gather(gp_step_ctx *ctx, int64_t, int64_t,
                                const gp_shard_param *, int32_t) {
  gp_shard_slice(ctx, 0, 0, 0, nullptr, nullptr);
}

extern "C" void gp_report_loss(gp_step_ctx *ctx, const float *loss) {
  int64_t m = ctx->microbatch;
  if (m < 0 || m >= gpipe::cuda::gMicrobatches)
    fatal(ctx, 1,
          "invalid program: gp_report_loss of micro-batch " +
              std::to_string(m));
  GP_CUDA_CHECK(cudaMemcpyAsync(gpipe::cuda::gLossHost + m, loss, sizeof(float),
                                cudaMemcpyDeviceToHost, gState.compute));
  gpipe::cuda::gLossSeen[static_cast<size_t>(m)] = true;
}

extern "C" void gp_send(gp_step_ctx *ctx, int32_t peer, int32_t tag,
                        const void *buf, int64_t bytes) {
  auto it = gTransfers.sends.find({peer, tag});
  bool found = it != gTransfers.sends.end();
  gpipe::cuda::checkTransferCall(ctx, "gp_send", peer, tag, buf, bytes,
                                 found ? it->second.bytes : -1, found);
  gpipe::cuda::SendSlots &s = it->second;
  int k = s.next;
  s.next ^= 1;
  // The slot's previous send must be done before the copy overwrites it.
  GP_CUDA_CHECK(cudaStreamWaitEvent(gState.compute, s.free[k], 0));
  GP_CUDA_CHECK(cudaMemcpyAsync(s.device[k], buf, static_cast<size_t>(bytes),
                                cudaMemcpyDeviceToDevice, gState.compute));
  GP_CUDA_CHECK(cudaEventRecord(gTransfers.computeDone, gState.compute));
  auto host = gTransfers.hostSends.find({peer, tag});
  if (host != gTransfers.hostSends.end()) {
    // Host-staged: the next pinned buffer once its last message is sent,
    // the copy into it on the communication stream, then the worker sends.
    gpipe::cuda::stageMessage(
        ctx, *host->second, gState.comm, [&](void *pinned) {
          GP_CUDA_CHECK(
              cudaStreamWaitEvent(gState.comm, gTransfers.computeDone, 0));
          GP_CUDA_CHECK(cudaMemcpyAsync(pinned, s.device[k],
                                        static_cast<size_t>(bytes),
                                        cudaMemcpyDeviceToHost, gState.comm));
          GP_CUDA_CHECK(cudaEventRecord(s.free[k], gState.comm));
        });
    return;
  }
  GP_CUDA_CHECK(cudaStreamWaitEvent(gState.comm, gTransfers.computeDone, 0));
  gpipe::cuda::notePending(ctx, true, peer, tag, bytes);
  const gpipe::cuda::Peer &p = gTransfers.peers[peer];
  std::string err;
  if (!gpipe::cuda::settleNccl(
          p.comm,
          ncclSend(s.device[k], static_cast<size_t>(bytes), ncclInt8,
                   p.rankInComm, p.comm, gState.comm),
          peer, "ncclSend of tag " + std::to_string(tag), err))
    fatal(ctx, 1, err);
  GP_CUDA_CHECK(cudaEventRecord(s.free[k], gState.comm));
  gpipe::cuda::notePendingDone();
}

extern "C" void gp_recv(gp_step_ctx *ctx, int32_t peer, int32_t tag, void *buf,
                        int64_t bytes) {
  auto it = gTransfers.recvs.find({peer, tag});
  bool found = it != gTransfers.recvs.end();
  gpipe::cuda::checkTransferCall(ctx, "gp_recv", peer, tag, buf, bytes,
                                 found ? it->second.bytes : -1, found);
  auto host = gTransfers.hostRecvs.find({peer, tag});
  if (host != gTransfers.hostRecvs.end()) {
    // Host-staged: wait (here, on the host) until the worker has received
    // the message, then copy it into the arena on the compute stream, after
    // every earlier reader of the destination.
    gpipe::cuda::stageMessage(
        ctx, *host->second, gState.compute, [&](void *pinned) {
          GP_CUDA_CHECK(cudaMemcpyAsync(buf, pinned, static_cast<size_t>(bytes),
                                        cudaMemcpyHostToDevice,
                                        gState.compute));
        });
    return;
  }
  // Compute enqueued so far may still read the destination.
  GP_CUDA_CHECK(cudaEventRecord(gTransfers.computeDone, gState.compute));
  GP_CUDA_CHECK(cudaStreamWaitEvent(gState.comm, gTransfers.computeDone, 0));
  gpipe::cuda::notePending(ctx, false, peer, tag, bytes);
  const gpipe::cuda::Peer &p = gTransfers.peers[peer];
  std::string err;
  if (!gpipe::cuda::settleNccl(
          p.comm,
          ncclRecv(buf, static_cast<size_t>(bytes), ncclInt8, p.rankInComm,
                   p.comm, gState.comm),
          peer, "ncclRecv of tag " + std::to_string(tag), err))
    fatal(ctx, 1, err);
  gpipe::cuda::notePendingDone();
  GP_CUDA_CHECK(cudaEventRecord(gTransfers.commDone, gState.comm));
  GP_CUDA_CHECK(cudaStreamWaitEvent(gState.compute, gTransfers.commDone, 0));
}
