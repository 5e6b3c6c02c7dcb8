// gpipe-flush-sends: a flush action (wait until the stage's buffered sends
// are received) before each run of W actions that follows a send, kept
// where gpipe-check-schedule proves it cannot deadlock.
#include "passes/Passes.h"
#include "passes/Utils.h"

#include "mlir/IR/Diagnostics.h"

namespace gpipe {
#define GEN_PASS_DEF_FLUSHSENDS
#include "passes/Passes.h.inc"
} // namespace gpipe

using namespace mlir;
using namespace gpipe;
using pipeline::ActionAttr;
using pipeline::Phase;
using pipeline::ScheduleOp;

namespace {

struct FlushSendsPass : gpipe::impl::FlushSendsBase<FlushSendsPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (pipeline::getSends(module) != pipeline::Sends::Buffered)
      return;
    MLIRContext *ctx = module.getContext();
    // Whether a function sends anything (its pipe.send ops).
    llvm::DenseMap<Operation *, bool> sends;
    auto actionSends = [&](ScheduleOp sched, ActionAttr a) {
      for (FlatSymbolRefAttr ref : sched.getActionFunctions(a)) {
        auto f = SymbolTable::lookupNearestSymbolFrom<func::FuncOp>(sched, ref);
        if (!f)
          continue;
        auto [it, fresh] = sends.try_emplace(f.getOperation(), false);
        if (fresh)
          it->second = f.walk([](pipeline::SendOp) {
                          return WalkResult::interrupt();
                        }).wasInterrupted();
        if (it->second)
          return true;
      }
      return false;
    };
    const ActionAttr flush = ActionAttr::get(ctx, Phase::Flush);
    for (ScheduleOp sched : module.getOps<ScheduleOp>()) {
      SmallVector<ActionAttr> actions(sched.getActionList());
      bool pending = false; // sent since the last flush
      for (size_t i = 0; i < actions.size(); ++i) {
        ActionAttr a = actions[i];
        if (a.getPhase() == Phase::Weight && pending && i > 0 &&
            actions[i - 1].getPhase() != Phase::Weight) {
          // Try the flush; keep it only if the schedules still cannot
          // deadlock (the trial's diagnostics are dropped).
          SmallVector<ActionAttr> trial(actions);
          trial.insert(trial.begin() + i, flush);
          sched.setActionsAttr(ArrayAttr::get(
              ctx, SmallVector<Attribute>(trial.begin(), trial.end())));
          LogicalResult ok = success();
          {
            ScopedDiagnosticHandler quiet(
                ctx, [](Diagnostic &) { return success(); });
            ok = checkSchedules(module);
          }
          if (succeeded(ok)) {
            actions = std::move(trial);
            pending = false;
            ++i; // past the flush, at the W again
            continue;
          }
          sched.setActionsAttr(ArrayAttr::get(
              ctx, SmallVector<Attribute>(actions.begin(), actions.end())));
        }
        pending |= actionSends(sched, a);
      }
    }
  }
};

} // namespace
