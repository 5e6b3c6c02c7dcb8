// gpipe-run's progress line, per-stage report and trace merge (Progress.h).
#include "tools/gpipe-run/Progress.h"

#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <poll.h>
#include <unistd.h>

namespace gpipe::run {
namespace {

/// Guards stdout and whether a progress line is shown on it (the pump's
/// thread writes it, the main thread's stderr messages end it).
std::mutex gOutMutex;
bool gLineShown = false;
ProgressPump *gPump = nullptr; // the one reading, if any

void writeOut(const std::string &s) {
  std::fwrite(s.data(), 1, s.size(), stdout);
  std::fflush(stdout);
}

std::string hms(double seconds) {
  if (!(seconds >= 0) || seconds > 1e8)
    return "-:--:--";
  auto t = static_cast<long long>(seconds + 0.5);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", t / 3600, t / 60 % 60,
                t % 60);
  return buf;
}

/// "step N loss X" (the stage program's line): N, and X as printed.
bool parseStepLine(const std::string &l, int64_t &step, std::string &loss) {
  char lossBuf[64];
  long long s = 0;
  int end = 0;
  if (std::sscanf(l.c_str(), "step %lld loss %63s%n", &s, lossBuf, &end) != 2 ||
      l.find_first_not_of(" \n", static_cast<size_t>(end)) != std::string::npos)
    return false;
  step = s;
  loss = lossBuf;
  return true;
}

} // namespace

void progressBreakLine() {
  std::lock_guard<std::mutex> lock(gOutMutex);
  // The stages print their step lines before what they say on stderr: the
  // lines already in the pipe are shown first.
  if (gPump)
    gPump->drain();
  if (gLineShown)
    writeOut("\n");
  gLineShown = false;
}

ProgressPump::ProgressPump(int64_t lastStep, int64_t samplesPerStep,
                           int64_t logEvery, bool terminal)
    : lastStep_(lastStep), samplesPerStep_(samplesPerStep),
      logEvery_(logEvery < 1 ? 1 : logEvery), terminal_(terminal) {}

ProgressPump::~ProgressPump() {
  finish();
  for (int &fd : fds_)
    if (fd >= 0)
      ::close(fd), fd = -1;
}

bool ProgressPump::open(std::string &err) {
  if (::pipe2(fds_, O_CLOEXEC) != 0 ||
      ::fcntl(fds_[0], F_SETFL, O_NONBLOCK) != 0) {
    err = std::string("pipe: ") + std::strerror(errno);
    return false;
  }
  return true;
}

void ProgressPump::start() {
  ::close(fds_[1]);
  fds_[1] = -1;
  started_ = Clock::now();
  {
    std::lock_guard<std::mutex> lock(gOutMutex);
    gPump = this;
  }
  thread_ = std::thread([this] { read(); });
}

void ProgressPump::finish() {
  if (!thread_.joinable())
    return;
  stop_ = true;
  thread_.join();
  std::lock_guard<std::mutex> lock(gOutMutex);
  gPump = nullptr;
  if (!partial_.empty())
    line(partial_ + "\n");
  partial_.clear();
  if (terminal_ && !rendered_)
    render(/*force=*/true);
  if (gLineShown)
    writeOut("\n");
  gLineShown = false;
}

void ProgressPump::read() {
  for (;;) {
    struct pollfd pfd = {fds_[0], POLLIN, 0};
    int ready = ::poll(&pfd, 1, 100);
    if (ready < 0 && errno == EINTR)
      continue;
    if (ready < 0 || (ready == 0 && stop_))
      break;
    std::lock_guard<std::mutex> lock(gOutMutex);
    if (ready > 0 && !drain())
      break;
    // Nothing new for a while: a throttled update is shown now.
    if (ready == 0 && terminal_ && !rendered_)
      render(/*force=*/false);
  }
}

// Called with gOutMutex held: shows the complete lines the pipe holds.
bool ProgressPump::drain() {
  if (eof_)
    return false;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fds_[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return true;
    if (n <= 0) {
      eof_ = true;
      return false;
    }
    partial_.append(buf, static_cast<size_t>(n));
    size_t nl;
    while ((nl = partial_.find('\n')) != std::string::npos) {
      line(partial_.substr(0, nl + 1));
      partial_.erase(0, nl + 1);
    }
  }
}

// Called with gOutMutex held.
void ProgressPump::line(const std::string &l) {
  int64_t step = 0;
  std::string loss;
  if (!parseStepLine(l, step, loss)) {
    if (gLineShown)
      writeOut("\n");
    gLineShown = false;
    writeOut(l);
    return;
  }
  if (!terminal_) {
    if (step % logEvery_ == 0 || step == lastStep_)
      writeOut(l);
    return;
  }
  if (firstStep_ < 0) {
    firstStep_ = step;
    firstAt_ = Clock::now();
  }
  step_ = step;
  loss_ = loss;
  rendered_ = false;
  render(/*force=*/step == firstStep_ || step == lastStep_);
}

// Called with gOutMutex held. At most ten updates a second.
void ProgressPump::render(bool force) {
  Clock::time_point now = Clock::now();
  if (!force && now - lastRender_ < std::chrono::milliseconds(100))
    return;
  lastRender_ = now;
  rendered_ = true;
  double elapsed = std::chrono::duration<double>(now - started_).count();
  // Rates over the steps this run did, from the end of its first one.
  double since = std::chrono::duration<double>(now - firstAt_).count();
  int64_t done = step_ - firstStep_;
  char rate[48] = "- samples/s";
  std::string eta = "-:--:--";
  if (done > 0 && since > 0) {
    double perSecond = static_cast<double>(done) / since;
    double samples = perSecond * static_cast<double>(samplesPerStep_);
    std::snprintf(rate, sizeof rate,
                  samples >= 100 ? "%.0f samples/s" : "%.3g samples/s",
                  samples);
    eta = hms(static_cast<double>(lastStep_ - step_) / perSecond);
  }
  if (step_ >= lastStep_)
    eta = hms(0);
  char text[256];
  std::snprintf(
      text, sizeof text,
      "\r\033[Kstep %" PRId64 "/%" PRId64 "  loss %s  %s  elapsed %s  ETA %s",
      step_, lastStep_, loss_.c_str(), rate, hms(elapsed).c_str(), eta.c_str());
  writeOut(text);
  gLineShown = true;
}

void printStageReport(const manifest::Manifest &m,
                      const std::vector<std::string> &reportFiles,
                      std::ostream &os) {
  const bool cuda = m.target == "cuda";
  // Small arenas (KiB) keep 3 significant digits.
  auto mib = [](double bytes) {
    char buf[32];
    double v = bytes / (1024.0 * 1024.0);
    std::snprintf(buf, sizeof buf, v >= 10 ? "%.1f" : "%.3g", v);
    return std::string(buf);
  };
  std::vector<std::string> rows;
  int64_t first = 0, last = 0;
  for (size_t s = 0; s < reportFiles.size(); ++s) {
    auto buf = llvm::MemoryBuffer::getFile(reportFiles[s]);
    llvm::Expected<llvm::json::Value> v =
        buf ? llvm::json::parse((*buf)->getBuffer())
            : llvm::Expected<llvm::json::Value>(llvm::json::Value(nullptr));
    const llvm::json::Object *o = v ? v->getAsObject() : nullptr;
    if (!v)
      llvm::consumeError(v.takeError());
    auto num = [&](const char *key) {
      std::optional<double> d = o ? o->getNumber(key) : std::nullopt;
      return d ? *d : -1.0;
    };
    char row[256];
    if (!o || num("steps") < 0) {
      std::snprintf(row, sizeof row, "  %5zu  (no report)", s);
      rows.push_back(row);
      continue;
    }
    first = static_cast<int64_t>(num("first_step"));
    last = static_cast<int64_t>(num("last_step"));
    double stepMs = num("step_ms"), waitMs = num("transfer_wait_ms");
    const manifest::Memory &mem = m.stages[s].memory;
    double predicted = static_cast<double>(mem.arenaBytes) +
                       (cuda ? static_cast<double>(mem.scratchBytes) : 0.0);
    // The whole process's predicted peak (CPU; pipeline.json's
    // predicted_peak_bytes: arena, runtime, MPI send buffer).
    std::string peakText =
        mem.predictedPeakBytes > 0
            ? mib(static_cast<double>(mem.predictedPeakBytes))
            : std::string("-");
    // Times under 10 ms keep 3 decimals: a fast stage's sum is not 0.0.
    auto ms = [](double v) {
      char buf[32];
      std::snprintf(buf, sizeof buf, v >= 10 ? "%.1f" : "%.3f", v);
      return std::string(buf);
    };
    // The peak split: the process before its arena (code, libraries, MPI,
    // measured at start-up), the arena (planned), and the rest (data
    // pages, the math libraries' buffers, message buffers).
    const double start = num("start_rss_bytes");
    std::string startText = start >= 0 ? mib(start) : "-",
                restText = start >= 0 && num("max_rss_bytes") >= 0
                               ? mib(num("max_rss_bytes") - start - predicted)
                               : "-";
    int n = std::snprintf(
        row, sizeof row,
        "  %5zu  %10s  %10s  %10s  %5.1f%%  %12s  %18s  %9s  %9s  %8s", s,
        ms(stepMs).c_str(), ms(num("compute_ms")).c_str(), ms(waitMs).c_str(),
        stepMs > 0 ? 100.0 * waitMs / stepMs : 0.0,
        mib(num("max_rss_bytes")).c_str(), peakText.c_str(),
        mib(predicted).c_str(), startText.c_str(), restText.c_str());
    // CUDA: the GPU's memory in use at the end (every process's), and the
    // compiler's prediction from a CUDA cost table.
    if (cuda && n > 0 && static_cast<size_t>(n) < sizeof row)
      std::snprintf(
          row + n, sizeof row - static_cast<size_t>(n), "  %12s  %17s",
          num("device_memory_bytes") >= 0
              ? mib(num("device_memory_bytes")).c_str()
              : "-",
          mem.predictedDeviceBytes > 0
              ? mib(static_cast<double>(mem.predictedDeviceBytes)).c_str()
              : "-");
    rows.push_back(row);
  }
  os << "gpipe-run: stage report, steps " << first << ".." << last
     << " (ms summed over the steps; wait = blocked in transfers)\n"
     << "  stage     step ms  compute ms     wait ms  wait %  peak RSS MiB  "
        "predicted peak MiB  arena MiB  start MiB  rest MiB"
     << (cuda ? "  GPU used MiB  predicted GPU MiB" : "") << "\n";
  for (const std::string &r : rows)
    os << r << "\n";
  os.flush();
}

bool joinProfiles(const std::vector<std::string> &stageFiles,
                  const std::string &path, std::string &err) {
  std::ofstream out(path, std::ios::trunc);
  if (!out) {
    err = "cannot write profile file " + path + ": " + std::strerror(errno);
    return false;
  }
  for (const std::string &file : stageFiles) {
    std::ifstream in(file);
    if (!in) {
      err = "no profile from a stage (" + file + ")";
      return false;
    }
    out << in.rdbuf();
  }
  out.close();
  if (!out) {
    err = "cannot write profile file " + path;
    return false;
  }
  return true;
}

bool mergeTraces(const std::vector<std::string> &stageFiles,
                 const std::string &path, std::string &err) {
  std::ofstream out(path, std::ios::trunc);
  if (!out) {
    err = "cannot write trace file " + path + ": " + std::strerror(errno);
    return false;
  }
  out << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  bool firstEvent = true;
  for (const std::string &file : stageFiles) {
    std::ifstream in(file);
    if (!in) {
      err = "no trace from a stage (" + file + ")";
      return false;
    }
    std::string l;
    while (std::getline(in, l)) {
      if (l.empty())
        continue;
      out << (firstEvent ? "" : ",\n") << l;
      firstEvent = false;
    }
  }
  out << "\n]}\n";
  out.close();
  if (!out) {
    err = "cannot write trace file " + path;
    return false;
  }
  return true;
}

} // namespace gpipe::run
