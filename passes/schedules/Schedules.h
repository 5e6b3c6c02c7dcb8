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

namespace gpipe {
namespace schedules {

/// Every stage's actions (pipe.schedule's), stage-major.
using Table = llvm::SmallVector<llvm::SmallVector<pipeline::ActionAttr>>;

/// How the runtime must run a schedule's sends (the module's pipe.sends).
using Sends = pipeline::Sends;

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
  /// virtual stage virtualStage(k, v, s, c).
  Table (*generate)(mlir::MLIRContext *ctx, int64_t k, int64_t m,
                    int64_t v) = nullptr;
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

/// Every registered schedule, in registration order.
llvm::ArrayRef<Schedule> all();
/// The schedule named `name`, or null.
const Schedule *lookup(llvm::StringRef name);
/// "gpipe, 1f1b, zbh1": the registered names, for messages.
std::string names();

// The generators (one file each).
Table generateGPipe(mlir::MLIRContext *ctx, int64_t k, int64_t m, int64_t v);
Table generateOneFOneB(mlir::MLIRContext *ctx, int64_t k, int64_t m, int64_t v);
Table generateZBH1(mlir::MLIRContext *ctx, int64_t k, int64_t m, int64_t v);
Table generateZBH2(mlir::MLIRContext *ctx, int64_t k, int64_t m, int64_t v);
Table generateInterleaved(mlir::MLIRContext *ctx, int64_t k, int64_t m,
                          int64_t v);
std::string requireInterleaved(int64_t k, int64_t m, int64_t v);
Table generateZBV(mlir::MLIRContext *ctx, int64_t k, int64_t m, int64_t v);
Table generateBreadthFirst(mlir::MLIRContext *ctx, int64_t k, int64_t m,
                           int64_t v);
int64_t placeV(int64_t k, int64_t v, int64_t s, int64_t c);

} // namespace schedules
} // namespace gpipe

#endif // GPIPE_PASSES_SCHEDULES_H
