// Step timing of a stage program: what each action and transfer wait took
// (always summed, for the end-of-run report), and with --trace every one of
// them as an event in a preallocated buffer, written at the end.
#include "internal.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

namespace gpipe {
namespace {

struct TimingEvent {
  int64_t t0 = 0, t1 = 0, step = 0, bytes = 0;
  TimedKind kind = TimedKind::Forward;
  int32_t microbatch = -1, peer = -1;
  int32_t chunk = 0; // the model chunk of an action (interleaved schedules)
  int64_t cpu = -1;  // the thread's CPU time in it (timingCpuNs), or -1
};

struct Timing {
  int32_t stage = 0;
  bool trace = false;
  size_t capacity = 0;             // kMaxEvents
  std::vector<TimingEvent> events; // reserved once: no allocation in steps
  int64_t dropped = 0;             // events past the capacity
  int64_t firstStep = 0, lastStep = 0, steps = 0;
  int64_t stepNs = 0, actionNs = 0, transferNs = 0, stepEndNs = 0;
} gTiming;

/// The resident memory before the arena (timingNoteStartRss; -1: unknown).
/// Apart from gTiming, which the step loop resets.
int64_t gStartRssBytes = -1;

const char *kindName(TimedKind k) {
  switch (k) {
  case TimedKind::Forward:
    return "forward";
  case TimedKind::Backward:
    return "backward";
  case TimedKind::Update:
    return "update";
  case TimedKind::Send:
    return "send wait";
  case TimedKind::Recv:
    return "recv wait";
  case TimedKind::StepEnd:
    return "step end";
  case TimedKind::Eval:
    return "eval forward";
  case TimedKind::Weight:
    return "weight";
  case TimedKind::Flush:
    return "send flush";
  case TimedKind::AllReduce:
    return "gradient all-reduce";
  }
  return "?";
}

void record(const TimingEvent &e) {
  if (!gTiming.trace)
    return;
  // Past the reserved estimate the buffer grows (rarely), up to the cap.
  if (gTiming.events.size() < gTiming.capacity)
    gTiming.events.push_back(e);
  else
    ++gTiming.dropped;
}

} // namespace

int64_t timingNowNs() {
  struct timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

int64_t threadCpuNs() {
  struct timespec ts;
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

int64_t timingCpuNs() { return gTiming.trace ? threadCpuNs() : -1; }

void timingInit(int32_t stage, bool trace, int64_t steps,
                int64_t eventsPerStep) {
  gTiming = Timing();
  gTiming.stage = stage;
  gTiming.trace = trace;
  if (!trace)
    return;
  // At most 4M events (~200 MB): a longer run keeps its first steps.
  const int64_t kMaxEvents = int64_t(1) << 22;
  int64_t want =
      std::max<int64_t>(steps, 1) * std::max<int64_t>(eventsPerStep, 1);
  gTiming.capacity = static_cast<size_t>(kMaxEvents);
  gTiming.events.reserve(static_cast<size_t>(std::min(want, kMaxEvents)));
}

void timingAction(TimedKind kind, int64_t step, int64_t microbatch, int64_t t0,
                  int64_t t1, int32_t chunk, int64_t cpuNs) {
  if (kind == TimedKind::StepEnd)
    gTiming.stepEndNs += t1 - t0;
  else
    gTiming.actionNs += t1 - t0;
  TimingEvent e;
  e.t0 = t0;
  e.t1 = t1;
  e.step = step;
  e.kind = kind;
  e.microbatch = static_cast<int32_t>(microbatch);
  e.chunk = chunk;
  e.cpu = cpuNs;
  record(e);
}

void timingTransfer(TimedKind kind, const gp_step_ctx *ctx, int32_t peer,
                    int64_t bytes, int64_t t0, int64_t t1, int64_t cpuNs) {
  gTiming.transferNs += t1 - t0;
  TimingEvent e;
  e.t0 = t0;
  e.t1 = t1;
  e.step = ctx ? ctx->step : 0;
  e.microbatch = ctx ? static_cast<int32_t>(ctx->microbatch) : -1;
  e.kind = kind;
  e.peer = peer;
  e.bytes = bytes;
  e.cpu = cpuNs;
  record(e);
}

void timingStep(int64_t step, int64_t t0, int64_t t1) {
  if (gTiming.steps == 0)
    gTiming.firstStep = step;
  gTiming.lastStep = step;
  ++gTiming.steps;
  gTiming.stepNs += t1 - t0;
}

bool timingWriteTrace(const std::string &path, std::string &err) {
  FILE *f = std::fopen(path.c_str(), "w");
  if (!f) {
    err = "cannot write trace file " + path + ": " + std::strerror(errno);
    return false;
  }
  // Recorded as they end (a transfer wait before the action around it):
  // written in start order.
  std::stable_sort(
      gTiming.events.begin(), gTiming.events.end(),
      [](const TimingEvent &a, const TimingEvent &b) { return a.t0 < b.t0; });
  const int32_t pid = gTiming.stage;
  // One Chrome trace event per line (gpipe-run joins the stages' files).
  std::fprintf(f,
               "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
               "\"args\":{\"name\":\"stage %d\"}}\n"
               "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,"
               "\"tid\":0,\"args\":{\"sort_index\":%d}}\n",
               pid, pid, pid, pid);
  for (const TimingEvent &e : gTiming.events) {
    std::fprintf(
        f,
        "{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,"
        "\"tid\":0,\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"step\":%lld",
        kindName(e.kind),
        e.kind == TimedKind::Send || e.kind == TimedKind::Recv ||
                e.kind == TimedKind::Flush || e.kind == TimedKind::AllReduce
            ? "transfer"
            : "action",
        pid, static_cast<double>(e.t0) / 1e3,
        static_cast<double>(e.t1 - e.t0) / 1e3, static_cast<long long>(e.step));
    if (e.kind != TimedKind::Update && e.kind != TimedKind::StepEnd &&
        e.kind != TimedKind::Flush && e.kind != TimedKind::AllReduce)
      std::fprintf(f, ",\"microbatch\":%d", e.microbatch);
    if (e.chunk > 0)
      std::fprintf(f, ",\"chunk\":%d", e.chunk);
    if (e.peer >= 0)
      std::fprintf(f, ",\"peer\":%d,\"bytes\":%lld", e.peer,
                   static_cast<long long>(e.bytes));
    else if (e.kind == TimedKind::AllReduce)
      std::fprintf(f, ",\"bytes\":%lld", static_cast<long long>(e.bytes));
    if (e.cpu >= 0)
      std::fprintf(f, ",\"cpu_us\":%.3f", static_cast<double>(e.cpu) / 1e3);
    std::fputs("}}\n", f);
  }
  if (gTiming.dropped)
    std::fprintf(f,
                 "{\"name\":\"events dropped\",\"ph\":\"i\",\"s\":\"p\","
                 "\"pid\":%d,\"tid\":0,\"ts\":%.3f,\"args\":{\"dropped\":%lld}}"
                 "\n",
                 pid,
                 gTiming.events.empty()
                     ? 0.0
                     : static_cast<double>(gTiming.events.back().t1) / 1e3,
                 static_cast<long long>(gTiming.dropped));
  bool ok = !std::ferror(f);
  ok = std::fclose(f) == 0 && ok;
  if (!ok)
    err = "cannot write trace file " + path + ": " + std::strerror(errno);
  return ok;
}

void timingNoteStartRss() { gStartRssBytes = residentBytesNow(); }

int64_t startRssBytes() { return gStartRssBytes; }

bool timingWriteReport(const std::string &path, int64_t deviceMemoryBytes,
                       std::string &err) {
  struct rusage ru;
  std::memset(&ru, 0, sizeof(ru));
  ::getrusage(RUSAGE_SELF, &ru);
  FILE *f = std::fopen(path.c_str(), "w");
  if (!f) {
    err = "cannot write report file " + path + ": " + std::strerror(errno);
    return false;
  }
  const Timing &t = gTiming;
  auto ms = [](int64_t ns) { return static_cast<double>(ns) / 1e6; };
  std::fprintf(
      f,
      "{\"stage\":%d,\"steps\":%lld,\"first_step\":%lld,\"last_step\":%lld,"
      "\"step_ms\":%.3f,\"compute_ms\":%.3f,\"transfer_wait_ms\":%.3f,"
      "\"step_end_ms\":%.3f,\"max_rss_bytes\":%lld,\"start_rss_bytes\":%lld,"
      "\"device_memory_bytes\":%lld,\"trace_events\":%lld,"
      "\"trace_dropped\":%lld,\"receives_ahead\":%lld}\n",
      t.stage, static_cast<long long>(t.steps),
      static_cast<long long>(t.firstStep), static_cast<long long>(t.lastStep),
      ms(t.stepNs), ms(t.actionNs - t.transferNs), ms(t.transferNs),
      ms(t.stepEndNs), static_cast<long long>(ru.ru_maxrss) * 1024,
      static_cast<long long>(gStartRssBytes),
      static_cast<long long>(deviceMemoryBytes),
      static_cast<long long>(t.events.size()),
      static_cast<long long>(t.dropped),
      static_cast<long long>(transportReceivesTakenAhead()));
  bool ok = !std::ferror(f);
  ok = std::fclose(f) == 0 && ok;
  if (!ok)
    err = "cannot write report file " + path + ": " + std::strerror(errno);
  return ok;
}

} // namespace gpipe
