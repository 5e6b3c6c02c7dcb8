// gpipe-run's launcher: a 1-stage pipeline runs directly, a K-stage one
// under mpirun (one rank per stage); the stages' status files say which
// stage failed.
#include "tools/gpipe-run/Launcher.h"
#include "tools/gpipe-run/Progress.h"
#include "tools/gpipe-run/Watchdog.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/Program.h"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <iostream>
#include <optional>
#include <poll.h>
#include <spawn.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

namespace gpipe::run {

int fail(const std::string &msg) {
  progressBreakLine();
  std::cerr << "gpipe-run: error: " << msg << "\n";
  return 1;
}

namespace {

/// The child being waited for (mpirun or the single stage), and the first
/// termination signal gpipe-run received meanwhile.
volatile sig_atomic_t gChild = 0;
volatile sig_atomic_t gInterrupt = 0;

extern "C" void onInterrupt(int sig, siginfo_t *info, void *) {
  if (!gInterrupt)
    gInterrupt = sig;
  // A signal sent to gpipe-run alone (kill, timeout) is passed on, so that
  // mpirun tears the stages down; one from the terminal already reached the
  // whole foreground process group.
  if (gChild > 0 && info && info->si_code <= 0)
    ::kill(static_cast<pid_t>(gChild), sig);
}

struct ChildResult {
  bool started = false;
  std::string startError;
  bool signaled = false;
  int code = 0; // exit code, or the signal number when signaled
};

/// Passes mpirun's stderr (its own messages and the stages' stderr) through,
/// line by line, but holds back Open MPI's job-teardown banners ("MPI_ABORT
/// was invoked on rank 1 ...", "mpirun noticed that process rank 1 ... exited
/// on signal 11"): when a stage's status file explains the failure they only
/// repeat it; otherwise they are printed at the end (release()).
class StderrFilter {
public:
  void feed(const char *data, size_t n) {
    partial_.append(data, n);
    size_t nl;
    while ((nl = partial_.find('\n')) != std::string::npos) {
      line(partial_.substr(0, nl + 1));
      partial_.erase(0, nl + 1);
    }
  }
  /// End of the stream: whatever is pending goes out.
  void finish() {
    if (!partial_.empty())
      line(partial_ + "\n");
    partial_.clear();
    for (const std::string &l : block_)
      emit(l);
    block_.clear();
    inBlock_ = false;
  }
  /// From a held-back "mpirun noticed that process rank N with PID P on node
  /// H exited on signal S" banner: the first rank killed by a signal.
  bool noticedSignal(int &rank, std::string &host, int &sig) const {
    for (const std::string &l : heldBack_) {
      size_t at = l.find("mpirun noticed that process rank ");
      char node[256] = {};
      long long pid = 0;
      if (at != std::string::npos &&
          std::sscanf(l.c_str() + at,
                      "mpirun noticed that process rank %d with PID %lld on "
                      "node %255s exited on signal %d",
                      &rank, &pid, node, &sig) == 4) {
        host = node;
        return true;
      }
    }
    return false;
  }
  /// Open MPI could not start its daemon on another host (its "ORTE was
  /// unable to reliably start one or more daemons" banner): the host and
  /// the launcher's own error line before it ("ssh: connect to host H port
  /// 22: Connection refused"), when there was one.
  bool daemonFailure(std::string &host, std::string &detail) const {
    if (!daemonBanner_)
      return false;
    host.clear();
    detail.clear();
    for (const std::string &l : launcherLines_) {
      std::string t = l.substr(0, l.find_last_not_of("\r\n") + 1);
      char name[256] = {};
      if (std::sscanf(t.c_str(), "ssh: connect to host %255s port", name) ==
              1 ||
          std::sscanf(t.c_str(), "ssh: Could not resolve hostname %255[^:]",
                      name) == 1)
        host = name;
      if (detail.empty())
        detail = t;
    }
    return true;
  }
  /// Prints the held-back banners (no stage explained the failure).
  void release() {
    for (const std::string &l : heldBack_)
      emit(l);
    heldBack_.clear();
  }

private:
  static bool isRule(const std::string &l) {
    return l.size() > 20 && l.find_first_not_of("-\n") == std::string::npos;
  }
  /// The remote launcher's (ssh's) own complaint, before Open MPI's banner.
  static bool isLauncherLine(const std::string &l) {
    return l.rfind("ssh: ", 0) == 0 ||
           l.find("Permission denied (") != std::string::npos ||
           l.find("Host key verification failed") != std::string::npos;
  }
  static bool isDaemonBanner(const std::string &text) {
    return text.find("ORTE was unable to reliably start one or more daemons") !=
           std::string::npos;
  }
  static bool isTeardownBanner(const std::string &text) {
    for (const char *phrase :
         {"MPI_ABORT was invoked on rank", "Primary job  terminated normally",
          "mpirun noticed that process rank",
          "mpirun detected that one or more processes exited",
          // Over TCP (several hosts), a peer's death seen from the others.
          "An MPI communication peer process has unexpectedly disconnected"})
      if (text.find(phrase) != std::string::npos)
        return true;
    return false;
  }
  /// One-line notes about the banners: aggregated repeats, and a teardown
  /// race inside Open MPI's own banner printing.
  static bool isBannerNote(const std::string &l) {
    // "[host:pid] Read -1, expected 65536, errno = 3": a shared-memory read
    // from a peer that died (its death is reported by name).
    bool deadPeerRead = l.rfind("[", 0) == 0 &&
                        l.find("] Read -1, expected ") != std::string::npos &&
                        l.find(", errno = ") != std::string::npos;
    return deadPeerRead ||
           l.find("has sent help message") != std::string::npos ||
           l.find("orte_base_help_aggregate") != std::string::npos ||
           (l.find("ORTE_ERROR_LOG") != std::string::npos &&
            l.find("show_help") != std::string::npos);
  }
  void emit(const std::string &l) {
    progressBreakLine();
    std::fwrite(l.data(), 1, l.size(), stderr);
    std::fflush(stderr);
  }
  void line(const std::string &l) {
    // A stage's own lines are never held back.
    bool stageLine = l.rfind("gpipe: ", 0) == 0 || l.rfind("step ", 0) == 0;
    if (!inBlock_) {
      if (isRule(l)) {
        inBlock_ = true;
        block_ = {l};
      } else if (!stageLine && isBannerNote(l)) {
        heldBack_.push_back(l);
      } else if (!stageLine && isLauncherLine(l)) {
        launcherLines_.push_back(l);
        heldBack_.push_back(l);
      } else {
        emit(l);
      }
      return;
    }
    if (stageLine) {
      emit(l);
      return;
    }
    block_.push_back(l);
    if (isRule(l) || block_.size() > 64) {
      std::string text;
      for (const std::string &b : block_)
        text += b;
      // Held back: replaced by one line (daemonFailure), or, like the
      // teardown banners, printed by release() when nothing explains them.
      daemonBanner_ |= isDaemonBanner(text);
      if (isDaemonBanner(text) || isTeardownBanner(text))
        heldBack_.insert(heldBack_.end(), block_.begin(), block_.end());
      else
        for (const std::string &b : block_)
          emit(b);
      block_.clear();
      inBlock_ = false;
    }
  }

  std::string partial_;
  bool inBlock_ = false, daemonBanner_ = false;
  std::vector<std::string> block_, heldBack_, launcherLines_;
};

/// Runs `args` (args[0] is the program path) with `env`; forwards SIGINT,
/// SIGTERM and SIGHUP sent to gpipe-run while it waits. With `filter`, the
/// child's stderr goes through it; with `progress`, its stdout; `watchdog`
/// watches the stages meanwhile.
ChildResult runChild(const std::vector<std::string> &args,
                     const std::vector<std::string> &env, StderrFilter *filter,
                     ProgressPump *progress, Watchdog &watchdog) {
  ChildResult r;
  std::vector<char *> argv, envp;
  for (const std::string &a : args)
    argv.push_back(const_cast<char *>(a.c_str()));
  argv.push_back(nullptr);
  for (const std::string &e : env)
    envp.push_back(const_cast<char *>(e.c_str()));
  envp.push_back(nullptr);

  int fds[2] = {-1, -1};
  if (filter && ::pipe2(fds, O_CLOEXEC) != 0) {
    r.startError = std::string("pipe: ") + std::strerror(errno);
    return r;
  }
  const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
  struct sigaction old[3];
  for (int i = 0; i < 3; ++i) {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = onInterrupt;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    ::sigaction(sigs[i], &sa, &old[i]);
  }
  // The child starts with the default dispositions.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t dfl, none;
  sigemptyset(&dfl);
  for (int sig : sigs)
    sigaddset(&dfl, sig);
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(&attr, &dfl);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (filter)
    posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
  if (progress)
    posix_spawn_file_actions_adddup2(&fa, progress->writeFd(), 1);
  pid_t pid = 0;
  int err = ::posix_spawn(&pid, argv[0], &fa, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (filter)
    ::close(fds[1]);
  if (progress)
    progress->start();
  if (err != 0) {
    r.startError = std::strerror(err);
  } else {
    r.started = true;
    gChild = pid;
    if (int sig = gInterrupt) // arrived while starting the child
      ::kill(pid, sig);
    int status = 0;
    bool exited = false;
    {
      // Read until the child has exited and the pipe is drained; a
      // descendant that keeps the pipe open cannot make gpipe-run wait.
      char buf[4096];
      bool open = filter != nullptr;
      while (open || !exited) {
        if (!exited) {
          pid_t w = ::waitpid(pid, &status, WNOHANG);
          exited = w == pid;
        }
        if (!exited)
          watchdog.tick(pid);
        // Without a filter, poll only waits (a negative fd is ignored).
        struct pollfd pfd = {open ? fds[0] : -1, POLLIN, 0};
        int ready = ::poll(&pfd, 1, exited ? 0 : 100);
        if (ready < 0 && errno == EINTR)
          continue;
        if (ready <= 0) {
          if (exited)
            break;
          continue;
        }
        ssize_t n = ::read(fds[0], buf, sizeof(buf));
        if (n > 0)
          filter->feed(buf, static_cast<size_t>(n));
        else if (n == 0 || errno != EINTR)
          open = false;
      }
      if (filter) {
        ::close(fds[0]);
        filter->finish();
      }
    }
    if (!exited)
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
    if (progress)
      progress->finish();
    gChild = 0;
    if (WIFSIGNALED(status)) {
      r.signaled = true;
      r.code = WTERMSIG(status);
    } else {
      r.code = WEXITSTATUS(status);
    }
  }
  for (int i = 0; i < 3; ++i)
    ::sigaction(sigs[i], &old[i], nullptr);
  return r;
}

std::string signalName(int sig) {
  const char *name = ::strsignal(sig);
  return "signal " + std::to_string(sig) +
         (name ? " (" + std::string(name) + ")" : "");
}

/// The signals a stage's crash handlers report (runtime/src/status.cpp);
/// others (SIGKILL, SIGTERM) come from outside.
bool isCrashSignal(int sig) {
  return sig == SIGSEGV || sig == SIGBUS || sig == SIGFPE || sig == SIGILL ||
         sig == SIGABRT;
}

/// What a stage wrote to its --status-file: "exit <code>" / "signal <n>".
struct StageStatus {
  bool present = false;
  bool signaled = false;
  int value = 0;
};

StageStatus readStatus(const std::string &path) {
  StageStatus st;
  std::ifstream in(path);
  std::string word;
  long long value = 0;
  if (!(in >> word >> value))
    return st;
  if (word != "exit" && word != "signal")
    return st;
  st.present = true;
  st.signaled = word == "signal";
  st.value = static_cast<int>(value);
  return st;
}

/// Whether Open MPI's shared-memory transport can use cross-memory attach
/// (process_vm_readv): container seccomp profiles often forbid it, and
/// Open MPI then fails at the first large message instead of falling back.
bool crossMemoryAttachWorks() {
  std::ifstream yama("/proc/sys/kernel/yama/ptrace_scope");
  int scope = 0;
  if (yama >> scope && scope >= 2)
    return false;
  char src[16] = "gpipe", dst[16] = {};
  struct iovec local = {dst, sizeof(dst)}, remote = {src, sizeof(src)};
  return ::process_vm_readv(::getpid(), &local, 1, &remote, 1, 0) ==
             static_cast<ssize_t>(sizeof(src)) &&
         std::strcmp(dst, "gpipe") == 0;
}

/// Open MPI's major version as `MPIRUN --version` prints it ("mpirun (Open
/// MPI) 4.1.4"); 0 when it prints no such line (another launcher, a wrapper)
/// or does not answer within 10 s.
int openMpiMajor(const std::string &mpirun) {
  llvm::SmallString<128> out;
  if (llvm::sys::fs::createTemporaryFile("gpipe-run-mpirun-version", "txt",
                                         out))
    return 0;
  std::optional<llvm::StringRef> redirects[] = {
      llvm::StringRef(""), llvm::StringRef(out), llvm::StringRef("")};
  llvm::StringRef args[] = {mpirun, "--version"};
  int rc = llvm::sys::ExecuteAndWait(mpirun, args, std::nullopt, redirects,
                                     /*SecondsToWait=*/10);
  int major = 0;
  std::ifstream in(out.c_str());
  std::string line;
  while (rc == 0 && std::getline(in, line)) {
    size_t at = line.find("(Open MPI) ");
    if (at != std::string::npos) {
      major = std::atoi(line.c_str() + at + 11);
      break;
    }
  }
  llvm::sys::fs::remove(out);
  return major;
}

/// Inside a Slurm allocation (salloc, sbatch): its hosts are the job's.
bool insideSlurm() {
  return llvm::sys::Process::GetEnv("SLURM_JOB_ID").has_value();
}

/// Whether mpirun should get `--mca plm isolated`: Open MPI 4's default
/// launcher (plm rsh) refuses to start even a job on this host alone when
/// no ssh or rsh is on PATH ("plm_rsh_agent: ssh : rsh ... not found", exit
/// 243); the isolated launcher starts local processes only and needs
/// neither. Not with --hostfile, nor when the user chose a launcher or hosts
/// (OMPI_MCA_plm, --mpirun-arg=--mca plm ..., --host, --hostfile,
/// --machinefile), nor inside a Slurm allocation (SLURM_JOB_ID: mpirun takes
/// the allocation's hosts and starts its daemons with srun), nor with an
/// mpirun other than Open MPI 1 to 4 (Open MPI 5's PRRTE has no isolated
/// launcher and starts local jobs without ssh).
bool wantIsolatedLauncher(const LaunchOptions &o, const std::string &mpirun) {
  if (!o.hostfile.empty() || llvm::sys::Process::GetEnv("OMPI_MCA_plm") ||
      insideSlurm())
    return false;
  const std::vector<std::string> &a = o.mpirunArgs;
  for (size_t i = 0; i < a.size(); ++i) {
    llvm::StringRef arg(a[i]);
    llvm::StringRef opt = arg.ltrim('-');
    if (arg.starts_with("-") && (opt == "mca" || opt == "gmca") &&
        i + 1 < a.size() && a[i + 1] == "plm")
      return false;
    if (arg.starts_with("-") &&
        (arg == "-H" || opt == "host" || opt.starts_with("host=") ||
         opt == "hostfile" || opt.starts_with("hostfile=") ||
         opt == "machinefile" || opt.starts_with("machinefile=") ||
         opt == "default-hostfile" || opt.starts_with("default-hostfile=")))
      return false;
  }
  int major = openMpiMajor(mpirun);
  return major >= 1 && major <= 4;
}

/// A fresh directory for the stages' status files: under OUT when the
/// stages may run on other hosts (OUT is then on a shared file system, as
/// the executables are), else in the system temp directory.
std::string makeStatusDir(const std::string &out, bool remote,
                          std::string &err) {
  // Inside a Slurm allocation the stages may run on its other nodes.
  remote = remote || insideSlurm();
  llvm::SmallString<256> dir;
  std::error_code ec;
  if (remote) {
    llvm::SmallString<256> model(out);
    llvm::sys::fs::make_absolute(model);
    llvm::sys::path::append(model, ".gpipe-status"); // + "-XXXXXX"
    ec = llvm::sys::fs::createUniqueDirectory(model, dir);
    if (!ec)
      return dir.str().str();
  }
  ec = llvm::sys::fs::createUniqueDirectory("gpipe-run-status", dir);
  if (ec) {
    err =
        "cannot create a directory for the stage status files: " + ec.message();
    return "";
  }
  return dir.str().str();
}

/// Seconds as the shortest decimal that reads back the same.
std::string formatSeconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", s);
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, s);
    if (std::strtod(buf, nullptr) == s)
      break;
  }
  return buf;
}

} // namespace

int launchStages(const manifest::Manifest &m, const LaunchOptions &o) {
  const size_t numStages = m.stages.size();
  std::vector<std::string> exes;
  for (size_t s = 0; s < numStages; ++s) {
    std::string exe = o.out + "/" + m.stages[s].executable;
    if (!llvm::sys::fs::can_execute(exe))
      return fail(exe + ": stage " + std::to_string(s) +
                  " executable is missing or not executable "
                  "(was the pipeline compiled with --emit exe?)");
    exes.push_back(exe);
  }
  // --data-parallel D: D x K ranks, rank r = stage r % K of replica r / K.
  const size_t replicas =
      m.dataParallel > 1 ? static_cast<size_t>(m.dataParallel) : 1;
  const size_t numRanks = numStages * replicas;
  const bool useMpi = numRanks > 1 || !o.hostfile.empty();

  std::string mpirun;
  if (useMpi) {
    std::string name = "mpirun";
    if (auto env = llvm::sys::Process::GetEnv("GPIPE_MPIRUN"))
      name = *env;
    if (name.find('/') != std::string::npos) {
      if (!llvm::sys::fs::can_execute(name))
        return fail("GPIPE_MPIRUN=" + name + " is not an executable");
      mpirun = name;
    } else if (auto found = llvm::sys::findProgramByName(name)) {
      mpirun = *found;
    } else {
      return fail("cannot find '" + name + "' in PATH: " +
                  (numRanks > 1
                       ? "a " + std::to_string(numStages) + "-stage pipeline" +
                             (replicas > 1 ? " x " + std::to_string(replicas) +
                                                 " replicas"
                                           : std::string())
                       : std::string("--hostfile")) +
                  " runs under Open MPI's mpirun (apt-get install "
                  "openmpi-bin, or set GPIPE_MPIRUN)");
    }
  }

  std::string err;
  std::string statusDir = makeStatusDir(o.out, !o.hostfile.empty(), err);
  if (statusDir.empty())
    return fail(err);
  // Each rank's files: stageS.*, or stageS.rR.* with several replicas.
  auto rankFile = [&](size_t r, const char *ext) {
    return statusDir + "/stage" + std::to_string(r % numStages) +
           (replicas > 1 ? ".r" + std::to_string(r / numStages) : "") + ext;
  };
  auto statusPath = [&](size_t r) { return rankFile(r, ".status"); };
  // Each rank's end-of-run numbers, and its events with --trace (replica
  // 0's are shown and merged).
  std::vector<std::string> reportFiles, traceFiles, profileFiles;
  for (size_t r = 0; r < numRanks; ++r) {
    reportFiles.push_back(rankFile(r, ".report"));
    traceFiles.push_back(rankFile(r, ".trace"));
    profileFiles.push_back(rankFile(r, ".profile"));
  }
  auto heartbeatPath = [&](size_t r) { return rankFile(r, ".hb"); };
  struct RemoveDir {
    std::string dir;
    ~RemoveDir() { llvm::sys::fs::remove_directories(dir); }
  } removeStatusDir{statusDir};

  // Every stage gets the same flags: each reads the inputs, weights and
  // parameters it owns; only the loss stage prints and writes the log.
  auto stageArgs = [&](size_t r) {
    const size_t s = r % numStages;
    std::vector<std::string> a = {exes[s],
                                  "--weights-in",
                                  o.out + "/" + m.stages[s].weights,
                                  "--weights-out",
                                  o.weightsOut,
                                  "--steps",
                                  std::to_string(o.steps),
                                  "--threads",
                                  std::to_string(o.threads),
                                  "--status-file",
                                  statusPath(r),
                                  "--report",
                                  reportFiles[r],
                                  "--heartbeat",
                                  heartbeatPath(r),
                                  "--on-nan",
                                  o.onNan};
    if (!o.data.empty())
      a.insert(a.end(), {"--data", o.data});
    // Only CUDA stage programs know the flag (older CPU ones reject it).
    if (m.target == "cuda")
      a.insert(a.end(), {"--comm-timeout", formatSeconds(o.commTimeout)});
    // Each stage checks that the description matches what it was compiled
    // with (version 1 predates the check).
    if (m.version >= 2)
      a.insert(a.end(), {"--pipeline", o.out + "/pipeline.json"});
    if (!o.logJson.empty())
      a.insert(a.end(), {"--log-json", o.logJson});
    if (!o.checkpointDir.empty()) {
      a.insert(a.end(), {"--checkpoint-dir", o.checkpointDir, "--keep",
                         std::to_string(o.keep)});
      if (o.checkpointEvery > 0)
        a.insert(a.end(),
                 {"--checkpoint-every", std::to_string(o.checkpointEvery)});
    }
    if (!o.resumeFrom.empty())
      a.insert(a.end(), {"--resume-from", o.resumeFrom});
    if (o.shuffle)
      a.insert(a.end(), {"--shuffle", "--seed", std::to_string(o.seed)});
    if (!o.evalData.empty()) {
      a.insert(a.end(), {"--eval-data", o.evalData});
      if (o.evalEvery > 0)
        a.insert(a.end(), {"--eval-every", std::to_string(o.evalEvery)});
    }
    if (!o.trace.empty())
      a.insert(a.end(), {"--trace", traceFiles[r]});
    if (!o.profile.empty())
      a.insert(a.end(), {"--profile", profileFiles[r]});
    if (o.quiet)
      a.push_back("--quiet");
    return a;
  };

  // OpenMP's threads (oneDNN's GEMMs run on them too) are pinned before the
  // stage starts its pool. OMP_WAIT_POLICY is left to libgomp's default
  // (spin briefly, then sleep) unless the user sets it: forcing PASSIVE
  // costs ~5% at 2 threads, every GEMM waking its team.
  std::vector<std::string> env;
  bool waitPolicySet = false, singleCopySet = false;
  for (char **e = environ; *e; ++e) {
    llvm::StringRef var(*e);
    if (var.starts_with("OMP_NUM_THREADS="))
      continue;
    waitPolicySet |= var.starts_with("OMP_WAIT_POLICY=");
    singleCopySet |=
        var.starts_with("OMPI_MCA_btl_vader_single_copy_mechanism=");
    env.push_back(*e);
  }
  env.push_back("OMP_NUM_THREADS=" + std::to_string(o.threads));

  std::vector<std::string> cmd;
  if (!useMpi) {
    cmd = stageArgs(0);
  } else {
    // MPMD: one rank per stage, rank s = stage s.
    cmd = {mpirun};
    if (::geteuid() == 0)
      cmd.push_back("--allow-run-as-root");
    cmd.insert(cmd.end(), {"--oversubscribe", "--bind-to", "none"});
    if (!o.hostfile.empty())
      cmd.insert(cmd.end(), {"--hostfile", o.hostfile});
    if (wantIsolatedLauncher(o, mpirun))
      cmd.insert(cmd.end(), {"--mca", "plm", "isolated"});
    if (!singleCopySet && !crossMemoryAttachWorks())
      cmd.insert(cmd.end(),
                 {"--mca", "btl_vader_single_copy_mechanism", "none"});
    cmd.insert(cmd.end(), {"-x", "OMP_NUM_THREADS"});
    if (waitPolicySet)
      cmd.insert(cmd.end(), {"-x", "OMP_WAIT_POLICY"});
    // The runtime's settings reach stages on other hosts too.
    for (const char *var :
         {"GPIPE_TRANSPORT", "CUDA_VISIBLE_DEVICES", "GPIPE_MPI_WAIT",
          "GPIPE_MPI_SPIN_US", "GPIPE_MPI_MAX_SLEEP_US", "GPIPE_CPU_GEMM",
          "GPIPE_CPU_CONV_LAYOUT", "GPIPE_DP_SHARED", "GPIPE_DP_OVERLAP",
          "GPIPE_PREPOST"})
      if (llvm::sys::Process::GetEnv(var))
        cmd.insert(cmd.end(), {"-x", var});
    cmd.insert(cmd.end(), o.mpirunArgs.begin(), o.mpirunArgs.end());
    for (size_t r = 0; r < numRanks; ++r) {
      if (r > 0)
        cmd.push_back(":");
      cmd.insert(cmd.end(), {"-np", "1"});
      std::vector<std::string> a = stageArgs(r);
      cmd.insert(cmd.end(), a.begin(), a.end());
    }
  }
  if (llvm::sys::Process::GetEnv("GPIPE_RUN_VERBOSE")) {
    std::cerr << "gpipe-run:";
    for (const std::string &a : cmd)
      std::cerr << " " << a;
    std::cerr << "\n";
  }

  std::vector<std::string> heartbeats, statuses, names;
  for (size_t r = 0; r < numRanks; ++r) {
    heartbeats.push_back(heartbeatPath(r));
    statuses.push_back(statusPath(r));
    names.push_back("stage " + std::to_string(r % numStages) +
                    (replicas > 1
                         ? " of replica " + std::to_string(r / numStages)
                         : std::string()));
  }
  Watchdog watchdog(heartbeats, statuses, o.timeout, names);
  // The loss stage's step lines go through gpipe-run when it shows them
  // (a progress line on a terminal, every --log-every-th otherwise), and
  // then its stderr too: a stderr line first shows the step lines already
  // written, and starts a line of its own. By default, off a terminal,
  // stdout passes straight through as it always did.
  ProgressPump progress(o.steps, m.batchSize, o.logEvery,
                        ::isatty(STDOUT_FILENO) == 1);
  bool pumped = !o.quiet && (progress.terminal() || o.logEvery > 1);
  if (pumped && !progress.open(err))
    return fail(err);
  StderrFilter filter;
  ChildResult r = runChild(cmd, env, useMpi || pumped ? &filter : nullptr,
                           pumped ? &progress : nullptr, watchdog);
  // Stages mpirun left behind (it was killed): none may run on.
  std::vector<std::string> leftovers = watchdog.killLeftovers();
  if (!r.started)
    return useMpi ? fail("cannot start " + mpirun + ": " + r.startError)
                  : fail("cannot start stage 0 (" + exes[0] +
                         "): " + r.startError);
  if (int sig = gInterrupt) {
    fail("interrupted by " + signalName(sig) + "; the stages were stopped");
    llvm::sys::fs::remove_directories(statusDir);
    ::signal(sig, SIG_DFL);
    ::raise(sig);
    return 128 + sig;
  }
  if (!watchdog.verdict().empty())
    return fail(watchdog.verdict() + "\ngpipe-run: the stages were stopped");

  // Blame: a crashed stage, else a stage that failed (its own error line is
  // printed above), else whatever mpirun / the stage process reported.
  std::vector<StageStatus> status;
  for (size_t r = 0; r < numRanks; ++r)
    status.push_back(readStatus(statusPath(r)));
  auto stageName = [&](size_t r) {
    const size_t s = r % numStages;
    return "stage " + std::to_string(s) +
           (replicas > 1 ? " of replica " + std::to_string(r / numStages)
                         : std::string()) +
           " (" + exes[s] + ")";
  };
  // "; host H, pid P" when the stage's heartbeat said.
  auto where = [&](size_t s) {
    std::string w = watchdog.where(s);
    return w.empty() ? w : "; " + w;
  };
  bool blamed = false;
  for (size_t s = 0; s < numRanks; ++s)
    if (status[s].present && status[s].signaled) {
      fail(stageName(s) + " crashed: " + signalName(status[s].value) +
           where(s));
      blamed = true;
    }
  if (blamed)
    return 1;
  for (size_t s = 0; s < numRanks; ++s)
    if (status[s].present && status[s].value != 0) {
      fail(stageName(s) + " exited with code " +
           std::to_string(status[s].value));
      blamed = true;
    }
  if (blamed)
    return 1;
  // A stage killed by a signal it cannot catch (SIGKILL) writes no status;
  // mpirun's banner names it.
  int rank = -1, sig = 0;
  std::string host;
  if (useMpi && filter.noticedSignal(rank, host, sig) && rank >= 0 &&
      static_cast<size_t>(rank) < numRanks && !status[rank].present) {
    std::string w = watchdog.where(rank);
    return fail(stageName(rank) + " was killed by " + signalName(sig) +
                (w.empty() ? "; host " + host : "; " + w));
  }
  // Open MPI could not start its daemon on a host: one line instead of its
  // banner (GPIPE_RUN_VERBOSE=1 prints the banner too).
  std::string unreachable, launcherSaid;
  if (useMpi && (r.signaled || r.code != 0) &&
      filter.daemonFailure(unreachable, launcherSaid)) {
    if (llvm::sys::Process::GetEnv("GPIPE_RUN_VERBOSE"))
      filter.release();
    return fail(
        "Open MPI could not start its daemon on " +
        (unreachable.empty() ? std::string("another host")
                             : "host " + unreachable) +
        (launcherSaid.empty() ? std::string() : " (" + launcherSaid + ")") +
        ": check that ssh to it logs in without a password the way Open MPI "
        "runs it (OMPI_MCA_plm_rsh_agent: the command, its port and key), "
        "that Open MPI and OUT are at the same paths there, and that the "
        "hosts reach each other on the interfaces Open MPI uses "
        "(OMPI_MCA_oob_tcp_if_include, OMPI_MCA_btl_tcp_if_include)");
  }
  filter.release();
  if (r.signaled || r.code != 0) {
    if (!useMpi)
      return r.signaled ? fail(stageName(0) +
                               (isCrashSignal(r.code) ? " crashed: "
                                                      : " was killed by ") +
                               signalName(r.code) + where(0))
                        : fail(stageName(0) + " exited with code " +
                               std::to_string(r.code));
    std::string silent;
    for (size_t s = 0; s < numRanks; ++s)
      if (!status[s].present)
        silent += (silent.empty() ? "" : ", ") + stageName(s);
    std::string how = r.signaled ? "was killed by " + signalName(r.code)
                                 : "exited with code " + std::to_string(r.code);
    if (r.signaled && !silent.empty()) {
      // The stages die with mpirun (PR_SET_PDEATHSIG); those still seen
      // running here were killed above.
      std::string list;
      for (const std::string &l : leftovers)
        list += (list.empty() ? "" : ", ") + l;
      return fail(mpirun + " " + how + " before the stages finished; " +
                  (list.empty() ? "they were stopped with it"
                                : "gpipe-run stopped " + list));
    }
    if (silent.empty())
      return fail(mpirun + " " + how + " after every stage finished");
    return fail(mpirun + " " + how + "; no status from " + silent +
                " (see mpirun's messages above)");
  }
  // Replica 0's ranks (the first K) speak for the pipeline.
  reportFiles.resize(numStages);
  traceFiles.resize(numStages);
  profileFiles.resize(numStages);
  if (!o.quiet)
    printStageReport(m, reportFiles, std::cerr);
  if (!o.trace.empty() && !mergeTraces(traceFiles, o.trace, err))
    return fail(err);
  if (!o.profile.empty() && !joinProfiles(profileFiles, o.profile, err))
    return fail(err);
  return 0;
}

} // namespace gpipe::run
