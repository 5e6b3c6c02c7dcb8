// The stage status file gpipe-run reads after a run: "exit <code>" when
// gp_main ends (or fails), "signal <n>" when the stage crashes. The crash
// handlers use async-signal-safe calls only (open/write/close, sigaction,
// raise) on a path copied into a static buffer beforehand.
#include "internal.h"

#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

namespace gpipe {
namespace {

char gStatusPath[4096];
bool gHandlersInstalled = false;
const int kCrashSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
struct sigaction gOldActions[sizeof(kCrashSignals) / sizeof(int)];

/// Writes "<word> <value>\n" to the status file. Async-signal-safe.
void writeStatus(const char *word, long value) {
  if (gStatusPath[0] == '\0')
    return;
  char buf[64];
  size_t n = 0;
  for (const char *w = word; *w && n < 32; ++w)
    buf[n++] = *w;
  buf[n++] = ' ';
  unsigned long v = value < 0 ? 0UL - static_cast<unsigned long>(value)
                              : static_cast<unsigned long>(value);
  if (value < 0)
    buf[n++] = '-';
  char digits[24];
  size_t d = 0;
  do {
    digits[d++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  while (d > 0)
    buf[n++] = digits[--d];
  buf[n++] = '\n';
  int fd = ::open(gStatusPath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return;
  const char *p = buf;
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w <= 0)
      break;
    p += w;
    n -= static_cast<size_t>(w);
  }
  ::close(fd);
}

extern "C" void onCrashSignal(int sig) {
  writeStatus("signal", sig);
  // Die of the same signal, so the parent (mpirun / gpipe-run) sees it too.
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(sig, &dfl, nullptr);
  ::raise(sig);
}

} // namespace

bool statusSetPath(const std::string &path) {
  if (path.size() + 1 > sizeof(gStatusPath))
    return false;
  std::memcpy(gStatusPath, path.c_str(), path.size() + 1);
  return true;
}

void statusInstallHandlers() {
  if (gHandlersInstalled || gStatusPath[0] == '\0')
    return;
  for (size_t i = 0; i < sizeof(kCrashSignals) / sizeof(int); ++i) {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof(sa));
    sa.sa_handler = onCrashSignal;
    sigemptyset(&sa.sa_mask);
    // SA_NODEFER: the raise() inside the handler is delivered at once.
    sa.sa_flags = SA_NODEFER;
    ::sigaction(kCrashSignals[i], &sa, &gOldActions[i]);
  }
  gHandlersInstalled = true;
}

void statusWriteExit(int code) { writeStatus("exit", code); }

void statusReset() {
  if (gHandlersInstalled) {
    for (size_t i = 0; i < sizeof(kCrashSignals) / sizeof(int); ++i)
      ::sigaction(kCrashSignals[i], &gOldActions[i], nullptr);
    gHandlersInstalled = false;
  }
  gStatusPath[0] = '\0';
}

} // namespace gpipe
