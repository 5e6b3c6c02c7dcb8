// gpipe-run's view of a run: the loss stage's step lines shown as progress
// while it trains, the stages' end-of-run report and their merged trace.
#ifndef GPIPE_TOOLS_GPIPE_RUN_PROGRESS_H
#define GPIPE_TOOLS_GPIPE_RUN_PROGRESS_H

#include "gpipe/manifest.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

namespace gpipe::run {

/// Ends the progress line shown in place on the terminal, if one is, so that
/// what follows (an error on stderr) starts a line of its own. Thread-safe.
void progressBreakLine();

/// Reads the stages' stdout from a pipe, on a thread of its own, and shows
/// the loss stage's "step N loss X" lines: on a terminal as one line updated
/// in place ("step s/N  loss L  R samples/s  elapsed h:mm:ss  ETA h:mm:ss"),
/// else as they are, every `logEvery`-th step and the last. Other lines pass
/// through unchanged.
class ProgressPump {
public:
  /// `lastStep`: --steps; `samplesPerStep`: the mini-batch size B.
  ProgressPump(int64_t lastStep, int64_t samplesPerStep, int64_t logEvery,
               bool terminal);
  ~ProgressPump();
  /// Creates the pipe (close-on-exec; the child gets writeFd() as its
  /// stdout). On failure sets `err`.
  bool open(std::string &err);
  int writeFd() const { return fds_[1]; }
  /// Starts reading; closes the parent's write end.
  void start();
  /// After the child exited: reads what is left (not waiting for a
  /// descendant that keeps the pipe open), then ends the progress line.
  void finish();
  bool terminal() const { return terminal_; }
  /// Shows the complete lines waiting in the pipe (progressBreakLine calls
  /// it, with the output lock held); false at its end.
  bool drain();

private:
  void read();
  void line(const std::string &l);
  void render(bool force);

  int64_t lastStep_, samplesPerStep_, logEvery_;
  bool terminal_;
  int fds_[2] = {-1, -1};
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::string partial_;
  // The run so far, for the rates: the first step seen and when it ended.
  using Clock = std::chrono::steady_clock;
  Clock::time_point started_, firstAt_, lastRender_;
  int64_t firstStep_ = -1, step_ = -1;
  std::string loss_;
  bool rendered_ = true; // the latest step is on the screen
  bool eof_ = false;
};

/// Reads the stages' --report files and prints one row per stage on `os`:
/// summed step, compute and transfer-wait times, peak memory next to the
/// compiler's prediction from pipeline.json. A missing or unreadable file
/// is reported as such.
void printStageReport(const manifest::Manifest &m,
                      const std::vector<std::string> &reportFiles,
                      std::ostream &os);

/// Joins the stages' --profile files (JSON lines) into one at `path`, stage
/// by stage. On failure sets `err`.
bool joinProfiles(const std::vector<std::string> &stageFiles,
                  const std::string &path, std::string &err);

/// Joins the stages' --trace files (one Chrome trace event per line) into
/// one Chrome trace JSON ({"traceEvents": [...]}) at `path`. On failure sets
/// `err`.
bool mergeTraces(const std::vector<std::string> &stageFiles,
                 const std::string &path, std::string &err);

} // namespace gpipe::run

#endif
