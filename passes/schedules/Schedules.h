// Pipeline schedules as data: each schedule is a generator, registered by
// name, that lists every stage's actions for one mini-batch.
#ifndef GPIPE_PASSES_SCHEDULES_H
#define GPIPE_PASSES_SCHEDULES_H

#include "dialects/pipe/PipeOps.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <string>
#include <vector>

namespace gpipe {
namespace schedules {

/// Every stage's actions (pipe.schedule's), stage-major.
using Table = llvm::SmallVector<llvm::SmallVector<pipeline::ActionAttr>>;

/// How the runtime must run a schedule's sends (the module's pipe.sends).
using Sends = pipeline::Sends;

/// The estimated time of each piece's (virtual stage's) forward, backward
/// (B: the input gradient and whatever else is not W) and weight-gradient
/// GEMMs (W), in any one unit, indexed by piece. Empty: every action costs
/// the same (the zero-bubble papers' assumption).
struct Costs {
  std::vector<double> forward, backward, weight;
  /// The piece's costs, or 1, 1, 1 when unknown; never 0 (an action takes
  /// some time).
  double f(int64_t piece) const { return at(forward, piece); }
  double b(int64_t piece) const { return at(backward, piece); }
  double w(int64_t piece) const { return at(weight, piece); }

private:
  static double at(const std::vector<double> &v, int64_t piece) {
    if (piece < 0 || piece >= static_cast<int64_t>(v.size()))
      return 1.0;
    return v[piece] > 1e-9 ? v[piece] : 1e-9;
  }
};

/// A registered schedule.
struct Schedule {
  llvm::StringRef name;        // the --schedule value
  llvm::StringRef description; // one line, for --help and errors
  Sends sends;                 // what the schedule needs of the runtime
  /// The model chunks per stage it runs (--virtual-stages V): V in
  /// [minChunks, maxChunks].
  int64_t minChunks = 1, maxChunks = 1;
  /// What else it needs of K, M and V: an error message naming them, or
  /// empty. Null: nothing else.
  std::string (*requirements)(int64_t k, int64_t m, int64_t v) = nullptr;
  /// The actions of stages 0..k-1 for m micro-batches and v chunks per
  /// stage (k, m, v >= 1, the requirements met); chunk c of stage s is the
  /// virtual stage virtualStage(k, v, s, c). Schedules built by simulation
  /// (zbh1, zbv) use `costs`; the others have a fixed order.
  Table (*generate)(mlir::MLIRContext *ctx, int64_t k, int64_t m, int64_t v,
                    const Costs &costs) = nullptr;
  /// Which virtual stage (a piece of the model, in order) chunk c of stage s
  /// is. Null: the interleaved placement c*k + s (stage s holds pieces s,
  /// s + k, s + 2k, ...).
  int64_t (*place)(int64_t k, int64_t v, int64_t s, int64_t c) = nullptr;

  int64_t virtualStage(int64_t k, int64_t v, int64_t s, int64_t c) const {
    return place ? place(k, v, s, c) : c * k + s;
  }
  /// Empty when the schedule can run K stages, M micro-batches and V chunks
  /// per stage; else why not, naming --schedule, --stages, --microbatches or
  /// --virtual-stages.
  std::string check(int64_t k, int64_t m, int64_t v) const;
};

/// The step time of `table` (K stages, v chunks each, placed as `schedule`
/// places them) when every action takes its piece's cost and transfers take
/// no time; infinity when the table cannot run to its end.
double replayStepTime(const Table &table, int64_t v, const Costs &costs,
                      const Schedule &schedule);

/// Every registered schedule, in registration order.
llvm::ArrayRef<Schedule> all();
/// The schedule named `name`, or null.
const Schedule *lookup(llvm::StringRef name);
/// "gpipe, 1f1b, zbh1": the registered names, for messages.
std::string names();

// The generators (one file each).
Table generateGPipe(mlir::MLIRContext *ctx, int64_t k, int64_t m, int64_t v,
                    const Costs &costs);
Table generateOneFOneB(mlir::MLIRContext *ctx, int64_t k, int64_t m, int64_t v,
                       const Costs &costs);
Table generateZBH1(mlir::MLIRContext *ctx, int64_t k, int64_t m, int64_t v,
                   const Costs &costs);
Table generateInterleaved(mlir::MLIRContext *ctx, int64_t k, int64_t m, int64_t v,
                          const Costs &costs);
std::string requireInterleaved(int64_t k, int64_t m, int64_t v);
Table generateZBV(mlir::MLIRContext *ctx, int64_t k, int64_t m, int64_t v,
                  const Costs &costs);
Table generateBreadthFirst(mlir::MLIRContext *ctx, int64_t k, int64_t m, int64_t v,
                           const Costs &costs);
int64_t placeV(int64_t k, int64_t v, int64_t s, int64_t c);

} // namespace schedules
} // namespace gpipe

#endif // GPIPE_PASSES_SCHEDULES_H
