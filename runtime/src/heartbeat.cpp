// The stage's heartbeat file, read by gpipe-run's watchdog: a thread rewrites
// it every half second (temporary file + rename, so a reader never sees half
// a file) with the stage's pid and host, a liveness counter, and a progress
// counter with what the step loop is doing. A stopped process (SIGSTOP)
// stops its heartbeat; a deadlocked one keeps beating but makes no progress.
#include "internal.h"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <thread>
#include <unistd.h>

namespace gpipe {
namespace {

// What the step loop is doing (-1: not in a step).
constexpr int32_t kNotInStep = -1;
std::atomic<uint64_t> gProgress{0};
std::atomic<int64_t> gStep{0};
std::atomic<int32_t> gKind{kNotInStep};
std::atomic<int32_t> gMicrobatch{0};
std::atomic<int32_t> gChunk{0}; // the action's model chunk
std::atomic<const char *> gPhase{"starting"};
// The transfer being waited for: peer stage (-1: none), receive or send.
std::atomic<int32_t> gWaitPeer{-1};
std::atomic<bool> gWaitRecv{false};
std::atomic<bool> gStop{false};
std::atomic<bool> gRunning{false};

// Plain buffers (no destructors): the thread may outlive exit()'s cleanup.
char gPath[4096], gTempPath[4112], gHost[256];
int32_t gStage = 0;
uint64_t gBeat = 0;
constexpr auto kInterval = std::chrono::milliseconds(500);

bool writeHeartbeat() {
  char doing[160];
  char chunk[32] = "";
  if (int32_t c = gChunk.load(); c > 0)
    std::snprintf(chunk, sizeof chunk, " of chunk %d", c);
  int32_t kind = gKind.load();
  long long step = static_cast<long long>(gStep.load());
  if (kind == GP_FORWARD || kind == GP_BACKWARD || kind == GP_WEIGHT)
    std::snprintf(doing, sizeof doing, "step %lld, %s of micro-batch %d%s",
                  step,
                  kind == GP_FORWARD    ? "forward"
                  : kind == GP_BACKWARD ? "backward"
                                        : "weight gradients",
                  gMicrobatch.load(), chunk);
  else if (kind == GP_UPDATE)
    std::snprintf(doing, sizeof doing, "step %lld, optimizer update", step);
  else if (kind == GP_FLUSH)
    std::snprintf(doing, sizeof doing,
                  "step %lld, waiting until its sends are received", step);
  else
    std::snprintf(doing, sizeof doing, "%s", gPhase.load());
  char wait[64] = "none";
  int32_t peer = gWaitPeer.load();
  if (peer >= 0)
    std::snprintf(wait, sizeof wait, "%s %d", gWaitRecv ? "recv" : "send",
                  peer);
  char buf[1024];
  int n = std::snprintf(buf, sizeof buf,
                        "pid %ld\nhost %s\nstage %d\nbeat %llu\nprogress "
                        "%llu\nwait %s\ndoing %s\n",
                        static_cast<long>(::getpid()), gHost, gStage,
                        static_cast<unsigned long long>(++gBeat),
                        static_cast<unsigned long long>(gProgress.load()), wait,
                        doing);
  int fd = ::open(gTempPath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return false;
  bool ok = n > 0 && ::write(fd, buf, static_cast<size_t>(n)) == n;
  ::close(fd);
  return ok && ::rename(gTempPath, gPath) == 0;
}

void *heartbeatLoop(void *) {
  while (!gStop.load()) {
    std::this_thread::sleep_for(kInterval);
    if (!gStop.load())
      writeHeartbeat();
  }
  return nullptr;
}

} // namespace

bool heartbeatStart(const std::string &path, int32_t stage, std::string &err) {
  if (path.size() + 1 > sizeof(gPath)) {
    err = "--heartbeat path is too long";
    return false;
  }
  std::memcpy(gPath, path.c_str(), path.size() + 1);
  std::snprintf(gTempPath, sizeof gTempPath, "%s.tmp", gPath);
  if (::gethostname(gHost, sizeof gHost - 1) != 0)
    std::snprintf(gHost, sizeof gHost, "?");
  gStage = stage;
  // Launched by gpipe-run: die with the parent (mpirun, or gpipe-run for one
  // stage) instead of running on alone when it is killed.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (!writeHeartbeat()) {
    err =
        "cannot write the heartbeat file " + path + ": " + std::strerror(errno);
    return false;
  }
  pthread_t thread;
  if (pthread_create(&thread, nullptr, heartbeatLoop, nullptr) != 0) {
    err = "cannot start the heartbeat thread";
    return false;
  }
  pthread_detach(thread);
  gRunning = true;
  return true;
}

void heartbeatPhase(const char *phase) {
  gPhase = phase;
  gKind = kNotInStep;
  ++gProgress;
}

void heartbeatAction(int64_t step, const gp_action &a) {
  gStep = step;
  gMicrobatch = a.microbatch;
  gChunk = a.chunk;
  gKind = static_cast<int32_t>(a.kind);
  ++gProgress;
}

static thread_local bool tIgnored = false;

void heartbeatIgnoreThisThread() { tIgnored = true; }

HeartbeatWait::HeartbeatWait(int32_t peer, bool recv) {
  if (tIgnored)
    return;
  gWaitRecv = recv;
  gWaitPeer = peer;
}

HeartbeatWait::~HeartbeatWait() {
  if (tIgnored)
    return;
  gWaitPeer = -1;
  ++gProgress;
}

void heartbeatStop() {
  if (gRunning.exchange(false))
    gStop = true;
}

} // namespace gpipe
