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
  /// The actions of stages 0..k-1 for m micro-batches (k, m >= 1).
  Table (*generate)(mlir::MLIRContext *ctx, int64_t k, int64_t m);
};

/// Every registered schedule, in registration order.
llvm::ArrayRef<Schedule> all();
/// The schedule named `name`, or null.
const Schedule *lookup(llvm::StringRef name);
/// "gpipe, 1f1b, zbh1": the registered names, for messages.
std::string names();

// The generators (one file each).
Table generateGPipe(mlir::MLIRContext *ctx, int64_t k, int64_t m);
Table generateOneFOneB(mlir::MLIRContext *ctx, int64_t k, int64_t m);
Table generateZBH1(mlir::MLIRContext *ctx, int64_t k, int64_t m);

} // namespace schedules
} // namespace gpipe

#endif // GPIPE_PASSES_SCHEDULES_H
