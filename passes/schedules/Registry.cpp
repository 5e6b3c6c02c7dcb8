// The table of registered pipeline schedules: a new schedule is one generator
// file and one row here.
#include "passes/schedules/Schedules.h"

namespace gpipe {
namespace schedules {

static const Schedule kSchedules[] = {
    {"gpipe",
     "GPipe: every micro-batch's forward, then their backwards in reverse "
     "order, then the update; every stage stashes all M micro-batches",
     Sends::Blocking, 1, 1, nullptr, generateGPipe},
    {"1f1b",
     "1F1B (PipeDream-flush): K-1-s warm-up forwards on stage s, then one "
     "forward and one backward in turn, then the remaining backwards; stage "
     "s stashes at most K-s micro-batches",
     Sends::Buffered, 1, 1, nullptr, generateOneFOneB},
    {"zbh1",
     "ZB-H1 (zero bubble, 1F1B's memory): backwards split into B (input "
     "gradient) and W (weight-gradient GEMMs, their own actions), the W's "
     "run where a stage would wait; stage s stashes at most K-s "
     "micro-batches",
     Sends::Buffered, 1, 1, nullptr, generateZBH1},
    {"zbh2",
     "ZB-H2 (zero bubble, twice 1F1B's memory): as zbh1, with up to 2(K-s)-1 "
     "warm-up forwards on stage s to fill the wait before its first B and "
     "the W's for the waits near the end; stage s stashes at most "
     "2(K-s)-1 micro-batches",
     Sends::Buffered, 1, 1, nullptr, generateZBH2},
    {"interleaved",
     "interleaved 1F1B (Megatron-LM): --virtual-stages V >= 2 model chunks "
     "per stage (stage s holds pieces s, s+K, ...), the bubble V times "
     "smaller for V times the transfers; M a multiple of K",
     Sends::Buffered, 2, 64, requireInterleaved, generateInterleaved},
    {"zbv",
     "ZB-V (zero bubble in a V): --virtual-stages 2, stage s holds pieces s "
     "and 2K-1-s (stage 0 the first and the loss), backwards split into B "
     "and W as zbh1, the W's where the stage would wait; at most 2K pieces' "
     "stashes per stage (1F1B's stage-0 memory)",
     Sends::Buffered, 2, 2, nullptr, generateZBV, placeV},
    {"bfpp",
     "breadth-first (looped BFS): --virtual-stages V >= 2 chunks per stage "
     "placed as interleaved's, GPipe's order chunk by chunk (every "
     "micro-batch's forward through chunk 0, then chunk 1, ..., backwards "
     "the last chunk first); GPipe's memory, interleaved's bubble, any M",
     Sends::Buffered, 2, 64, nullptr, generateBreadthFirst},
};

llvm::ArrayRef<Schedule> all() { return kSchedules; }

const Schedule *lookup(llvm::StringRef name) {
  for (const Schedule &s : kSchedules)
    if (s.name == name)
      return &s;
  return nullptr;
}

std::string Schedule::check(int64_t k, int64_t m, int64_t v) const {
  if (v < minChunks || v > maxChunks) {
    if (maxChunks == 1)
      return "--schedule " + name.str() +
             " runs one model chunk per stage: --virtual-stages must be 1, "
             "got " +
             std::to_string(v) + " (interleaved, zbv and bfpp run several)";
    if (minChunks == maxChunks)
      return "--schedule " + name.str() + " needs --virtual-stages " +
             std::to_string(minChunks) + ", got " + std::to_string(v);
    return "--schedule " + name.str() + " needs --virtual-stages in [" +
           std::to_string(minChunks) + ", " + std::to_string(maxChunks) +
           "], got " + std::to_string(v);
  }
  return requirements ? requirements(k, m, v) : std::string();
}

std::string names() {
  std::string out;
  for (const Schedule &s : kSchedules)
    out += (out.empty() ? "" : ", ") + s.name.str();
  return out;
}

} // namespace schedules
} // namespace gpipe
