// gpipe-run's watchdog over the stages' heartbeat files (see
// runtime/src/heartbeat.cpp). Staleness is judged by gpipe-run's own clock:
// when it last saw a file's counters change, never by clocks of other hosts.
#include "tools/gpipe-run/Watchdog.h"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>
#include <unistd.h>

namespace gpipe::run {

namespace {

/// A heartbeat older than this while others are fresh: the stage is not
/// running (stopped, or frozen), whatever the progress says.
constexpr double kBeatGraceSeconds = 2.0;
/// Stages not heard from yet get at least this long to start.
constexpr double kStartSeconds = 30.0;

double seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

std::string fmt(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

bool exists(const std::string &path) {
  return ::access(path.c_str(), F_OK) == 0;
}

} // namespace

Watchdog::Watchdog(std::vector<std::string> heartbeats,
                   std::vector<std::string> statuses, double timeoutSeconds,
                   std::vector<std::string> names)
    : heartbeats_(std::move(heartbeats)), statuses_(std::move(statuses)),
      names_(std::move(names)), timeout_(timeoutSeconds),
      stages_(heartbeats_.size()) {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) == 0)
    myHost_ = host;
  start_ = progressAt_ = Clock::now();
}

void Watchdog::read(size_t s, Clock::time_point now) {
  std::ifstream in(heartbeats_[s]);
  std::string key, value;
  Stage next;
  while (in >> key && std::getline(in >> std::ws, value)) {
    if (key == "pid")
      next.pid = value;
    else if (key == "host")
      next.host = value;
    else if (key == "beat")
      next.beat = value;
    else if (key == "progress")
      next.progress = value;
    else if (key == "wait")
      next.wait = value;
    else if (key == "doing")
      next.doing = value;
  }
  if (next.pid.empty() || next.beat.empty())
    return; // not written yet
  Stage &st = stages_[s];
  if (!st.seen || next.beat != st.beat)
    st.beatAt = now;
  if (!st.seen || next.progress != st.progress)
    progressAt_ = now;
  next.beatAt = st.beatAt;
  next.seen = true;
  st = next;
}

std::string Watchdog::where(size_t s) {
  if (!stages_[s].seen)
    read(s, Clock::now());
  const Stage &st = stages_[s];
  return st.seen ? "host " + st.host + ", pid " + st.pid : "";
}

std::string Watchdog::describe(size_t s) const {
  const Stage &st = stages_[s];
  std::string d =
      name(s) + " (host " + st.host + ", pid " + st.pid + "): " + st.doing;
  std::istringstream w(st.wait);
  std::string dir;
  int peer = -1;
  if (w >> dir >> peer)
    d += dir == "recv"
             ? ", waiting to receive from stage " + std::to_string(peer)
             : ", waiting to send to stage " + std::to_string(peer);
  else
    d += ", not waiting on a transfer";
  return d;
}

std::string Watchdog::judge(Clock::time_point now) {
  size_t stalest = stages_.size();
  double stalestAge = 0;
  bool allSeen = true;
  for (size_t s = 0; s < stages_.size(); ++s) {
    const Stage &st = stages_[s];
    if (exists(statuses_[s]))
      continue; // ended; mpirun deals with it
    if (!st.seen) {
      allSeen = false;
      double waited = seconds(now - start_);
      if (waited > std::max(timeout_, kStartSeconds))
        return name(s) +
               " did not start: no heartbeat "
               "after " +
               fmt(waited) + " s";
      continue;
    }
    double age = seconds(now - st.beatAt);
    if (age > stalestAge) {
      stalest = s;
      stalestAge = age;
    }
  }
  auto stopped = [&] {
    const Stage &st = stages_[stalest];
    return name(stalest) + " (host " + st.host + ", pid " + st.pid +
           ") stopped responding: no heartbeat for more than " + fmt(timeout_) +
           " s (a stopped or frozen process; last seen: " + st.doing + ")";
  };
  if (stalest < stages_.size() && stalestAge > timeout_)
    return stopped();
  if (!allSeen || seconds(now - progressAt_) <= timeout_)
    return "";
  if (stalest < stages_.size() && stalestAge > kBeatGraceSeconds)
    return stopped();
  std::string msg = "no stage made progress for " + fmt(timeout_) +
                    " s (a deadlock, a hung stage or a lost peer):";
  for (size_t s = 0; s < stages_.size(); ++s)
    if (stages_[s].seen && !exists(statuses_[s]))
      msg += "\n  " + describe(s);
  return msg;
}

void Watchdog::tick(pid_t child) {
  Clock::time_point now = Clock::now();
  if (!verdict_.empty()) {
    if (seconds(now - stopAt_) > 3.0)
      ::kill(child, SIGKILL);
    return;
  }
  if (seconds(now - lastRead_) < 0.25)
    return;
  lastRead_ = now;
  for (size_t s = 0; s < stages_.size(); ++s)
    read(s, now);
  if (timeout_ <= 0)
    return;
  verdict_ = judge(now);
  if (verdict_.empty())
    return;
  stopAt_ = now;
  killLocalStages(nullptr);
  ::kill(child, SIGTERM);
}

bool Watchdog::isOurStage(size_t s, pid_t &pid) const {
  const Stage &st = stages_[s];
  if (!st.seen || st.host != myHost_)
    return false;
  pid = static_cast<pid_t>(std::atol(st.pid.c_str()));
  if (pid <= 1)
    return false;
  // The pid may have been reused: only a process whose command line names
  // this run's heartbeat file is the stage.
  std::ifstream cmd("/proc/" + st.pid + "/cmdline");
  std::string args((std::istreambuf_iterator<char>(cmd)),
                   std::istreambuf_iterator<char>());
  return args.find(heartbeats_[s]) != std::string::npos;
}

void Watchdog::killLocalStages(std::vector<std::string> *killed) {
  for (size_t s = 0; s < stages_.size(); ++s) {
    pid_t pid = 0;
    if (isOurStage(s, pid) && ::kill(pid, SIGKILL) == 0 && killed)
      killed->push_back(name(s) + " (pid " + std::to_string(pid) + ")");
  }
}

std::vector<std::string> Watchdog::killLeftovers() {
  for (size_t s = 0; s < stages_.size(); ++s)
    read(s, Clock::now());
  std::vector<std::string> killed;
  killLocalStages(&killed);
  return killed;
}

} // namespace gpipe::run
