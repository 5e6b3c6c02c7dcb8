// The table of registered pipeline schedules: a new schedule is one generator
// file and one row here.
#include "passes/schedules/Schedules.h"

namespace gpipe {
namespace schedules {

static const Schedule kSchedules[] = {
    {"gpipe",
     "GPipe: every micro-batch's forward, then their backwards in reverse "
     "order, then the update; every stage stashes all M micro-batches",
     Sends::Blocking, generateGPipe},
    {"1f1b",
     "1F1B (PipeDream-flush): K-1-s warm-up forwards on stage s, then one "
     "forward and one backward in turn, then the remaining backwards; stage "
     "s stashes at most K-s micro-batches",
     Sends::Buffered, generateOneFOneB},
    {"zbh1",
     "ZB-H1 (zero bubble, 1F1B's memory): backwards split into B (input "
     "gradient) and W (weight-gradient GEMMs, their own actions), the W's "
     "run where a stage would wait; stage s stashes at most K-s "
     "micro-batches",
     Sends::Buffered, generateZBH1},
};

llvm::ArrayRef<Schedule> all() { return kSchedules; }

const Schedule *lookup(llvm::StringRef name) {
  for (const Schedule &s : kSchedules)
    if (s.name == name)
      return &s;
  return nullptr;
}

std::string names() {
  std::string out;
  for (const Schedule &s : kSchedules)
    out += (out.empty() ? "" : ", ") + s.name.str();
  return out;
}

} // namespace schedules
} // namespace gpipe
