// gpipe-run's launcher: starts the stage executables of a compiled pipeline
// (one directly, K under mpirun) and blames the stage that failed.
#ifndef GPIPE_TOOLS_GPIPE_RUN_LAUNCHER_H
#define GPIPE_TOOLS_GPIPE_RUN_LAUNCHER_H

#include "gpipe/manifest.h"

#include <cstdint>
#include <string>
#include <vector>

namespace gpipe::run {

/// Prints "gpipe-run: error: MSG" and returns 1.
int fail(const std::string &msg);

/// What the stages are run with (gpipe-run's options).
struct LaunchOptions {
  std::string out;        // the pipeline directory
  std::string data;       // --data, may be empty
  std::string logJson;    // --log-json, may be empty
  std::string weightsOut; // where the trained weights go
  std::string hostfile;   // --hostfile: run under mpirun on those hosts
  std::string trace;      // --trace: the merged Chrome trace, may be empty
  std::string profile;    // --profile: the stages' cost tables, joined
  std::vector<std::string> mpirunArgs;
  std::string checkpointDir; // --checkpoint-dir
  std::string resumeFrom;    // the checkpoint --resume starts from
  std::string evalData;      // --eval-data
  int64_t evalEvery = 0;
  int64_t checkpointEvery = 0, keep = 0;
  bool shuffle = false;
  int64_t seed = 0;
  int64_t steps = 1, threads = 1;
  int64_t logEvery = 1; // --log-every: step lines when stdout is no terminal
  double commTimeout = 300.0; // CUDA stage programs' transfer watchdog
  double timeout = 300.0;     // heartbeat watchdog (0: off)
  std::string onNan = "stop"; // --on-nan: stop, skip or continue
  bool quiet = false;
};

/// Runs the stages of `m` (read from OUT/pipeline.json) to the end: a
/// 1-stage pipeline directly, a K-stage one (or any with a hostfile) under
/// mpirun, one rank per stage. Forwards SIGINT, SIGTERM and SIGHUP to them;
/// interrupted, ends gpipe-run by the same signal. Returns 0 when every stage
/// succeeded, else prints which failed and returns 1.
int launchStages(const manifest::Manifest &m, const LaunchOptions &o);

} // namespace gpipe::run

#endif
