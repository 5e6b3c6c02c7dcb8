// gpipe-run's watchdog: reads the stages' heartbeat files while they run,
// ends a run in which a stage stopped responding or no stage makes progress,
// and stops the stage processes that mpirun leaves behind.
#ifndef GPIPE_TOOLS_GPIPE_RUN_WATCHDOG_H
#define GPIPE_TOOLS_GPIPE_RUN_WATCHDOG_H

#include <chrono>
#include <string>
#include <sys/types.h>
#include <vector>

namespace gpipe::run {

class Watchdog {
public:
  /// Stage s writes heartbeats[s] and, when it ends, statuses[s]. With
  /// `timeoutSeconds` 0 the watchdog only records who the stages are.
  /// `names`: what to call each process in messages (default "stage s";
  /// with --data-parallel, "stage S of replica R").
  Watchdog(std::vector<std::string> heartbeats,
           std::vector<std::string> statuses, double timeoutSeconds,
           std::vector<std::string> names = {});

  /// Called about every 100 ms while `child` (mpirun, or the one stage)
  /// runs. Reads the heartbeats; on a verdict, kills the stages on this host
  /// and stops `child` (SIGTERM, then SIGKILL after 3 s).
  void tick(pid_t child);
  /// Why the watchdog ended the run ("" if it did not).
  const std::string &verdict() const { return verdict_; }
  /// After the child ended: SIGKILLs the stage processes of this run still
  /// alive on this host; returns "stage S (pid P)" for each.
  std::vector<std::string> killLeftovers();
  /// "host H, pid P" of stage s from its last heartbeat, or "".
  std::string where(size_t s);

private:
  using Clock = std::chrono::steady_clock;
  struct Stage {
    bool seen = false;
    std::string pid, host, beat, progress, wait, doing;
    Clock::time_point beatAt;
  };
  void read(size_t s, Clock::time_point now);
  std::string describe(size_t s) const;
  std::string judge(Clock::time_point now);
  bool isOurStage(size_t s, pid_t &pid) const;
  void killLocalStages(std::vector<std::string> *killed);

  std::string name(size_t s) const {
    return s < names_.size() ? names_[s] : "stage " + std::to_string(s);
  }

  std::vector<std::string> heartbeats_, statuses_, names_;
  double timeout_;
  std::vector<Stage> stages_;
  std::string myHost_, verdict_;
  Clock::time_point start_, progressAt_, lastRead_, stopAt_;
};

} // namespace gpipe::run

#endif
