// The per-unit timers of a --profile build (gpipe-compile --profile): every
// timed unit of the generated code adds its time to its sum here; --profile
// FILE writes the sums, with what each unit computes, as the cost table that
// gpipe-compile --costs reads (docs/formats.md#the-cost-table).
#include "internal.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sys/resource.h>
#include <time.h>
#include <vector>

namespace gpipe {
namespace {

struct UnitSum {
  int64_t ns = 0, calls = 0;
};

struct Profile {
  std::vector<UnitSum> sums; // sized once: no allocation in the steps
  bool counting = false;
  int64_t steps = 0; // steps whose units are in the sums
} gProfile;

/// `s` as a JSON string literal.
std::string quoted(const char *s) {
  std::string out = "\"";
  for (const char *c = s ? s : ""; *c; ++c) {
    unsigned char u = static_cast<unsigned char>(*c);
    if (*c == '"' || *c == '\\') {
      out += '\\';
      out += *c;
    } else if (u < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", u);
      out += buf;
    } else {
      out += *c;
    }
  }
  return out + "\"";
}

} // namespace

void profileInit(const gp_program &program) {
  gProfile.sums.assign(static_cast<size_t>(std::max(0, program.num_profile_units)),
                       UnitSum());
  gProfile.counting = false;
  gProfile.steps = 0;
}

void profileCount(bool on) { gProfile.counting = on && !gProfile.sums.empty(); }

void profileRestart() {
  for (UnitSum &s : gProfile.sums)
    s = UnitSum();
  gProfile.steps = 0;
}

void profileStepDone() {
  if (gProfile.counting)
    ++gProfile.steps;
}

bool profileWrite(const std::string &path, const gp_program &program,
                  int64_t threads, std::string &err) {
  std::FILE *f = std::fopen(path.c_str(), "w");
  if (!f) {
    err = "cannot write profile file " + path + ": " + std::strerror(errno);
    return false;
  }
  // The resident memory besides the arena at its peak so far (code,
  // libraries, MPI, data pages, the math libraries' buffers): what a plan's
  // arena is predicted with (gpipe-compile --auto).
  struct rusage ru;
  long long runtimeBytes = -1;
  if (::getrusage(RUSAGE_SELF, &ru) == 0)
    runtimeBytes = std::max<long long>(
        0, static_cast<long long>(ru.ru_maxrss) * 1024 - program.arena_bytes);
  std::fprintf(f,
               "{\"gpipe_profile\": 1, \"program\": %s, \"stage\": %d, "
               "\"build_id\": %s, \"target\": \"%s\", \"threads\": %lld, "
               "\"microbatches\": %d, \"batch_size\": %lld, \"steps\": %lld, "
               "\"arena_bytes\": %lld, \"runtime_bytes\": %lld}\n",
               quoted(program.name).c_str(), program.stage,
               quoted(program.build_id).c_str(),
               program.target == GP_TARGET_CUDA ? "cuda" : "cpu",
               static_cast<long long>(threads), program.microbatches,
               static_cast<long long>(program.batch_size),
               static_cast<long long>(gProfile.steps),
               static_cast<long long>(program.arena_bytes), runtimeBytes);
  for (int32_t u = 0; u < program.num_profile_units; ++u) {
    const gp_profile_unit &unit = program.profile_units[u];
    std::string ops;
    for (int32_t k = 0; k < unit.num_ops; ++k) {
      const gp_profile_op &op = unit.ops[k];
      char estimate[32];
      std::snprintf(estimate, sizeof estimate, "%.6g", op.estimate);
      ops += std::string(k ? ", " : "") + "{\"node\": " + quoted(op.node) +
             ", \"op\": " + quoted(op.op) +
             ", \"signature\": " + quoted(op.signature) +
             ", \"estimate\": " + estimate + "}";
    }
    const UnitSum &s = gProfile.sums[static_cast<size_t>(u)];
    std::fprintf(f,
                 "{\"stage\": %d, \"unit\": %d, \"function\": %s, \"chunk\": "
                 "%d, \"calls\": %lld, \"seconds\": %.9f, \"ops\": [%s]}\n",
                 program.stage, u, quoted(unit.function).c_str(), unit.chunk,
                 static_cast<long long>(s.calls), double(s.ns) * 1e-9,
                 ops.c_str());
  }
  if (std::fclose(f) != 0) {
    err = "cannot write profile file " + path + ": " + std::strerror(errno);
    return false;
  }
  return true;
}

} // namespace gpipe

extern "C" int64_t gp_profile_now(void) {
  struct timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

extern "C" void gp_profile_add(int32_t unit, int64_t t0) {
  gpipe::Profile &p = gpipe::gProfile;
  if (!p.counting || unit < 0 || static_cast<size_t>(unit) >= p.sums.size())
    return;
  gpipe::UnitSum &s = p.sums[static_cast<size_t>(unit)];
  s.ns += gp_profile_now() - t0;
  ++s.calls;
}
