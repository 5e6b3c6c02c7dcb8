// The per-unit timers of a --profile build (gpipe-compile --profile): every
// timed unit of the generated code adds its time to its sum here; --profile
// FILE writes the sums, with what each unit computes, as the cost table that
// gpipe-compile --costs reads (docs/formats.md#the-cost-table).
#include "internal.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <thread>
#include <time.h>
#include <unistd.h>
#include <vector>

namespace gpipe {
namespace {

using Json = nlohmann::ordered_json;

struct UnitSum {
  int64_t ns = 0, calls = 0;
};

struct Profile {
  std::vector<UnitSum> sums; // sized once: no allocation in the steps
  bool counting = false;
  int64_t steps = 0; // steps whose units are in the sums
} gProfile;

// The runtime memory split (RuntimeMemory), measured on the stage's thread.
struct MemorySplit {
  int64_t loadPiece = 0;
  int64_t library = 0;
  bool libraryMeasured = false;
  int depth = 0; // LibraryTouch calls open on the stage's thread
  std::thread::id stageThread;
  // Per unit: `library` after the unit's library calls in the warm-up step
  // (-1: it made none), for the compiler's estimate by op shape.
  std::vector<int64_t> unitLibrary;
  int64_t callsSinceUnit = 0; // library calls since the last unit ended
} gMemory;

} // namespace

bool gMeasureLibrary = false;

int64_t residentBytesNow() {
  // /proc/self/statm: size resident shared ... in pages. read(2), not stdio:
  // LibraryTouch calls this around the warm-up step's GEMMs.
  int fd = ::open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return -1;
  char buf[128];
  ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0)
    return -1;
  buf[n] = '\0';
  long long size = 0, resident = 0;
  if (std::sscanf(buf, "%lld %lld", &size, &resident) != 2)
    return -1;
  return resident * static_cast<int64_t>(::sysconf(_SC_PAGESIZE));
}

void profileNoteLoadPiece(int64_t bytes) {
  gMemory.loadPiece = std::max(gMemory.loadPiece, bytes);
}

void profileMeasureLibrary(bool on) {
  gMeasureLibrary = on;
  if (on) {
    gMemory.libraryMeasured = true;
    gMemory.stageThread = std::this_thread::get_id();
  }
}

void LibraryTouch::begin() {
  // The outermost call on the stage's thread (attention calls gp_gemm; an
  // OpenMP team's other threads are inside the stage thread's window).
  if (std::this_thread::get_id() != gMemory.stageThread || gMemory.depth++ > 0)
    return;
  before_ = residentBytesNow();
  if (before_ < 0)
    --gMemory.depth;
}

void LibraryTouch::end() {
  --gMemory.depth;
  ++gMemory.callsSinceUnit;
  int64_t after = residentBytesNow();
  if (after > before_)
    gMemory.library += after - before_;
}

RuntimeMemory profileRuntimeMemory(int64_t arenaBytes) {
  RuntimeMemory m;
  m.start = startRssBytes();
  m.load = gMemory.loadPiece;
  m.library = gMemory.libraryMeasured ? gMemory.library : -1;
  const int64_t now = residentBytesNow();
  if (m.start >= 0 && now >= 0)
    m.steady = std::max<int64_t>(0, now - m.start - arenaBytes);
  return m;
}

void profileInit(const gp_program &program) {
  gProfile.sums.assign(
      static_cast<size_t>(std::max(0, program.num_profile_units)), UnitSum());
  gMemory.unitLibrary.assign(gProfile.sums.size(), -1);
  gProfile.counting = false;
  gProfile.steps = 0;
}

void profileCount(bool on) { gProfile.counting = on && !gProfile.sums.empty(); }

void profileRestart() {
  for (UnitSum &s : gProfile.sums)
    s = UnitSum();
  gProfile.steps = 0;
}

void profileAddNs(int32_t unit, int64_t ns) {
  if (!gProfile.counting || unit < 0 ||
      static_cast<size_t>(unit) >= gProfile.sums.size())
    return;
  if (gMeasureLibrary && gMemory.callsSinceUnit > 0) {
    int64_t &u = gMemory.unitLibrary[static_cast<size_t>(unit)];
    u = std::max(u, gMemory.library);
  }
  gMemory.callsSinceUnit = 0;
  UnitSum &s = gProfile.sums[static_cast<size_t>(unit)];
  s.ns += ns;
  ++s.calls;
}

void profileStepDone() {
  if (gProfile.counting)
    ++gProfile.steps;
}

bool profileWrite(const std::string &path, const gp_program &program,
                  int64_t threads, const std::vector<LinkSample> &links,
                  int64_t runtimeBytes, const RuntimeMemory &memory,
                  std::string &err) {
  std::FILE *f = std::fopen(path.c_str(), "w");
  if (!f) {
    err = "cannot write profile file " + path + ": " + std::strerror(errno);
    return false;
  }
  // One JSON object per line: the header, then the units (names that are
  // not UTF-8 written with replacement characters, not refused).
  auto writeLine = [&](const Json &line) {
    std::string text =
        line.dump(-1, ' ', false, Json::error_handler_t::replace);
    std::fprintf(f, "%s\n", text.c_str());
  };
  Json header = {{"gpipe_profile", 1},
                 {"program", program.name ? program.name : ""},
                 {"stage", program.stage},
                 {"stages", program.num_stages},
                 {"build_id", program.build_id ? program.build_id : ""},
                 {"target", program.target == GP_TARGET_CUDA ? "cuda" : "cpu"},
                 {"threads", threads},
                 {"microbatches", program.microbatches},
                 {"batch_size", program.batch_size},
                 {"steps", gProfile.steps},
                 {"arena_bytes", program.arena_bytes},
                 {"runtime_bytes", runtimeBytes}};
  // The CPU runtime's memory by part (the compiler predicts other stages'
  // from it); CUDA's runtime_bytes are GPU memory, these would be the host's.
  if (program.target == GP_TARGET_CPU && memory.start >= 0 &&
      memory.steady >= 0 && memory.library >= 0) {
    header["start_bytes"] = memory.start;
    header["load_bytes"] = memory.load;
    header["library_bytes"] = std::min(memory.library, memory.steady);
    header["steady_bytes"] = memory.steady;
  }
  writeLine(header);
  for (int32_t u = 0; u < program.num_profile_units; ++u) {
    const gp_profile_unit &unit = program.profile_units[u];
    Json ops = Json::array();
    for (int32_t k = 0; k < unit.num_ops; ++k) {
      const gp_profile_op &op = unit.ops[k];
      ops.push_back({{"node", op.node ? op.node : ""},
                     {"op", op.op ? op.op : ""},
                     {"signature", op.signature ? op.signature : ""},
                     {"estimate", op.estimate}});
    }
    const UnitSum &s = gProfile.sums[static_cast<size_t>(u)];
    Json line = {{"stage", program.stage},
                 {"unit", u},
                 {"function", unit.function ? unit.function : ""},
                 {"chunk", unit.chunk},
                 {"calls", s.calls},
                 {"seconds", double(s.ns) * 1e-9},
                 {"ops", std::move(ops)}};
    // A unit that called the math libraries (CPU, with the header's split):
    // what they held once it had run in the warm-up step, counted from the
    // stage's first call (the header's library_bytes when it was the last).
    if (header.contains("library_bytes") &&
        gMemory.unitLibrary[static_cast<size_t>(u)] >= 0)
      line["library_bytes"] = gMemory.unitLibrary[static_cast<size_t>(u)];
    writeLine(line);
  }
  for (const LinkSample &l : links)
    writeLine({{"stage", program.stage},
               {"link", l.peer},
               {"bytes", l.bytes},
               {"seconds", l.seconds},
               {"repeats", l.repeats}});
  if (std::fclose(f) != 0) {
    err = "cannot write profile file " + path + ": " + std::strerror(errno);
    return false;
  }
  return true;
}

} // namespace gpipe

extern "C" int64_t gp_profile_now(void) { return gpipe::deviceProfileMark(); }

extern "C" void gp_profile_add(int32_t unit, int64_t t0) {
  if (gpipe::gProfile.counting)
    gpipe::deviceProfileSpan(unit, t0);
}
