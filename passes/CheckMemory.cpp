// gpipe-check-memory: each stage's memory plan (gpipe-plan-memory's
// pipe.memory and buffers) checked against its IR and its schedule.
#include "passes/Passes.h"
#include "passes/Utils.h"

#include "llvm/ADT/SmallPtrSet.h"

#include <map>

namespace gpipe {
#define GEN_PASS_DEF_CHECKMEMORY
#include "passes/Passes.h.inc"
} // namespace gpipe

using namespace mlir;
using namespace gpipe;
using pipeline::ActionAttr;
using pipeline::BufferAttr;
using pipeline::BufferSpace;
using pipeline::MemoryPlanAttr;
using pipeline::Phase;

namespace {

std::string str(BufferAttr b) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << b;
  return s;
}

/// The checks of one stage.
class StageChecker {
public:
  /// `chunks`: each model chunk's forward, backward and update.
  StageChecker(int64_t stage, pipeline::ScheduleOp schedule,
               MemoryPlanAttr plan,
               SmallVector<std::array<func::FuncOp, 3>> chunks)
      : stage(stage), schedule(schedule), plan(plan), chunks(chunks) {
    for (auto &c : chunks) {
      fns.append(c.begin(), c.end());
      forwards.insert(c[0]);
      backwards.insert(c[1]);
    }
  }

  LogicalResult run() {
    for (func::FuncOp fn : fns)
      if (failed(collectLongLived(fn)))
        return failure();
    // --shard-optimizer: the state slots of the replica's share.
    for (auto [k, b] : llvm::enumerate(pipeline::getState(schedule)))
      if (failed(object("optimizer state share #" + std::to_string(k), b,
                        schedule)))
        return failure();
    if (failed(checkLongLived()))
      return failure();
    for (auto &c : chunks)
      if (failed(checkStash(c[0], c[1])))
        return failure();
    for (func::FuncOp fn : fns)
      if (failed(checkTemporaries(fn)))
        return failure();
    return checkSlots();
  }

private:
  /// A long-lived object (a parameter, its accumulator, ...) has one buffer.
  LogicalResult object(const std::string &what, BufferAttr b, Operation *op) {
    if (!b)
      return op->emitError("stage ")
             << stage << ": " << what << " has no buffer; run "
             << "gpipe-plan-memory";
    auto [it, inserted] = objects.try_emplace(what, b, op);
    if (!inserted && it->second.first != b)
      return op->emitError("stage ")
                 .append(stage, ": ", what, " is at ", str(b), " here but at ",
                         str(it->second.first), " elsewhere")
                 .attachNote(it->second.second->getLoc())
             << "there";
    return success();
  }

  LogicalResult collectLongLived(func::FuncOp fn) {
    // Accumulators are per chunk (a weight tied between two chunks of the
    // stage has one in each).
    std::string ofChunk;
    if (chunks.size() > 1)
      for (auto [c, fns] : llvm::enumerate(chunks))
        if (llvm::is_contained(fns, fn))
          ofChunk = " of chunk " + std::to_string(c);
    WalkResult walk = fn.walk([&](Operation *op) -> WalkResult {
      LogicalResult ok = success();
      if (auto p = dyn_cast<nn::ParamOp>(op)) {
        std::string name = ("'" + p.getName() + "'").str();
        ok =
            object("parameter " + name, pipeline::getBuffer(p.getOutput()), op);
        if (succeeded(ok) && pipeline::hasBf16Shadow(op))
          ok = object("the bf16 copy of " + name, pipeline::getShadow(op), op);
      } else if (auto c = dyn_cast<nn::ConstantOp>(op)) {
        if (BufferAttr b = pipeline::getBuffer(c.getOutput()))
          ok = object("constant #" + std::to_string(constants++), b, op);
      } else if (auto acc = dyn_cast<pipeline::AccumulateGradOp>(op)) {
        std::string name = ("'" + acc.getParam() + "'").str();
        BufferAttr b = pipeline::getAccumulator(op);
        ok = object("the accumulator of " + name + ofChunk, b, op);
        if (succeeded(ok) && acc.getInPlace() &&
            pipeline::getBuffer(acc.getGrad()) != b)
          ok = acc.emitError("stage ")
               << stage << ": the in-place GEMM of " << name
               << " does not write its accumulator " << str(b);
        if (succeeded(ok) && acc.getDeferred()) {
          SmallVector<BufferAttr> d = pipeline::getDeferredOperands(op);
          if (d.size() != 2)
            ok = acc.emitError("stage ")
                 << stage << ": the deferred GEMM of " << name
                 << " has no pipe.deferred_operands";
          else if (failed(object("the deferred G of " + name, d[0], op)) ||
                   failed(object("the deferred X of " + name, d[1], op)))
            ok = failure();
        }
      } else if (auto acc = dyn_cast<pipeline::AccumulatedGradOp>(op)) {
        ok = object(("the accumulator of '" + acc.getParam() + "'").str() +
                        ofChunk,
                    pipeline::getBuffer(acc.getGrad()), op);
      } else if (auto recv = dyn_cast<pipeline::RecvOp>(op);
                 recv && recv.getPerStep()) {
        BufferAttr b = pipeline::getBuffer(recv.getValue());
        ok = object("the value received once per step from stage " +
                        std::to_string(recv.getPeer()) + " with tag " +
                        std::to_string(recv.getTag()),
                    b, op);
        if (b)
          perStep.insert(b);
      } else if (isa<pipeline::SGDUpdateOp, pipeline::AdamUpdateOp>(op)) {
        nn::ParamOp p = paramOf(op->getOperand(0));
        std::string of = p ? ("'" + p.getName() + "'").str()
                           : "update #" + std::to_string(updates);
        for (auto [k, b] : llvm::enumerate(pipeline::getState(op)))
          if (failed(
                  object("optimizer state #" + std::to_string(k) + " of " + of,
                         b, op)))
            ok = failure();
        ++updates;
      } else if (auto update = dyn_cast<nn::UpdateRunningStatsOp>(op)) {
        nn::ParamOp p = paramOf(update.getRunningMean());
        for (BufferAttr b : pipeline::getState(op))
          if (failed(object("the deferred statistics of '" +
                                (p ? p.getName().str() : std::string("?")) +
                                "'",
                            b, op)))
            ok = failure();
      }
      // A transfer between two chunks of this stage: its arena slots, one
      // per micro-batch (one for a value sent once per step or by the
      // update), shared by the pipe.send and the pipe.recv.
      if (succeeded(ok) && isa<pipeline::SendOp, pipeline::RecvOp>(op))
        if (BufferAttr h = pipeline::getHandoff(op)) {
          auto send = dyn_cast<pipeline::SendOp>(op);
          auto recv = dyn_cast<pipeline::RecvOp>(op);
          Value v = send ? send.getValue() : recv.getValue();
          int64_t tag = send ? send.getTag() : recv.getTag();
          bool once = (send ? send.getPerStep() : recv.getPerStep()) ||
                      pipeline::getPhase(fn) == Phase::Update;
          int64_t need = (once ? 1 : microbatchesOf(op)) *
                         alignUp(bytesOf(v), plan.getAlign());
          ok = object("the hand-off of tag " + std::to_string(tag), h, op);
          if (succeeded(ok) && h.getBytes() < need)
            ok = op->emitError("stage ")
                 << stage << ": the hand-off of tag " << tag << " at " << str(h)
                 << " is smaller than its " << need << " bytes";
        }
      return failed(ok) ? WalkResult::interrupt() : WalkResult::advance();
    });
    return failure(walk.wasInterrupted());
  }

  /// Long-lived objects lie before the stash, aligned, and apart.
  LogicalResult checkLongLived() {
    std::vector<std::pair<std::string, BufferAttr>> sorted;
    for (auto &[what, entry] : objects) {
      BufferAttr b = entry.first;
      if (b.getSpace() != BufferSpace::Arena ||
          b.getOffset() % plan.getAlign() || b.getEnd() > plan.getStashBase())
        return entry.second->emitError("stage ")
               << stage << ": " << what << " at " << str(b)
               << " is not an aligned arena buffer before the stash "
                  "(stash_base "
               << plan.getStashBase() << ", align " << plan.getAlign() << ")";
      sorted.push_back({what, b});
    }
    llvm::sort(sorted, [](auto &a, auto &b) {
      return a.second.getOffset() < b.second.getOffset();
    });
    for (size_t i = 1; i < sorted.size(); ++i)
      if (sorted[i - 1].second.overlaps(sorted[i].second))
        return objects[sorted[i].first].second->emitError("stage ")
               << stage << ": " << sorted[i].first << " at "
               << str(sorted[i].second) << " overlaps " << sorted[i - 1].first
               << " at " << str(sorted[i - 1].second);
    return success();
  }

  /// The forward's stashed results and the backward's arguments agree.
  LogicalResult checkStash(func::FuncOp forward, func::FuncOp backward) {
    Block &fwd = forward.getBody().front(), &bwd = backward.getBody().front();
    Operation *ret = fwd.getTerminator();
    if (ret->getNumOperands() != bwd.getNumArguments())
      return backward.emitError("stage ")
             << stage << ": the backward takes " << bwd.getNumArguments()
             << " arguments but the forward stashes " << ret->getNumOperands();
    for (auto [k, v] : llvm::enumerate(ret->getOperands())) {
      BufferAttr kept = pipeline::getBuffer(viewRoot(v));
      BufferAttr read = pipeline::getBuffer(bwd.getArgument(k));
      // A per-step value: the backward reads its long-lived buffer.
      if (auto recv = viewRoot(v).getDefiningOp<pipeline::RecvOp>();
          recv && recv.getPerStep()) {
        if (kept != read)
          return backward.emitError("stage ")
                 << stage << ": the per-step value #" << k << " is kept at "
                 << (kept ? str(kept) : "no buffer") << " but read at "
                 << (read ? str(read) : "no buffer");
        continue;
      }
      auto inSlot = [&](BufferAttr b) {
        return b && b.getSpace() == BufferSpace::Stash &&
               b.getOffset() % plan.getAlign() == 0 &&
               b.getEnd() <= plan.getStashSlot();
      };
      if (!inSlot(kept) || !inSlot(read) ||
          kept.getOffset() != read.getOffset())
        return backward.emitError("stage ")
               << stage << ": stashed value #" << k << " is kept at "
               << (kept ? str(kept) : "no buffer") << " but read at "
               << (read ? str(read) : "no buffer") << " (a slot has "
               << plan.getStashSlot() << " bytes)";
    }
    return success();
  }

  /// Temporaries: inside the transient part, and apart while alive.
  LogicalResult checkTemporaries(func::FuncOp fn) {
    Block &block = fn.getBody().front();
    pipeline::FusionUnits fu = pipeline::getFusionUnits(block);
    llvm::DenseMap<Value, int64_t> lastUse;
    for (Operation &op : block)
      for (Value operand : op.getOperands()) {
        Value r = viewRoot(operand);
        lastUse[r] = std::max<int64_t>(lastUse.lookup(r), fu.unitOf[&op]);
      }
    struct Temp {
      Value value;
      BufferAttr buffer;
      int64_t def, end;
    };
    std::vector<Temp> temps;
    // What may live in the stash: the forward's stashed results (their
    // storage roots), the backward's arguments.
    llvm::DenseSet<Value> stashed, inPlace;
    for (Operation &op : block)
      if (auto acc = dyn_cast<pipeline::AccumulateGradOp>(op);
          acc && acc.getInPlace())
        inPlace.insert(acc.getGrad());
    if (forwards.contains(fn))
      for (Value v : block.getTerminator()->getOperands())
        stashed.insert(viewRoot(v));
    else if (backwards.contains(fn))
      for (BlockArgument arg : block.getArguments())
        stashed.insert(arg);
    const int64_t lo = plan.getTransientBase(),
                  hi = plan.getTransientBase() + plan.getTransient();
    auto visit = [&](Value v, int64_t def, Operation *where) -> LogicalResult {
      BufferAttr b = pipeline::getBuffer(v);
      if (!b)
        return where->emitError("stage ")
               << stage << ": this value has no buffer; run gpipe-plan-memory";
      if (b.getSpace() == BufferSpace::Stash) {
        if (!stashed.contains(v))
          return where->emitError("stage ")
                 << stage << ": this value is in the stash at " << str(b)
                 << " but is not a stashed value";
        return success(); // checked by checkStash
      }
      if (b.getOffset() < lo) {
        // Only long-lived objects live there (checked by collectLongLived).
        Operation *def = v.getDefiningOp();
        if (perStep.contains(b) &&
            (def ? isa<pipeline::RecvOp>(def) : backwards.contains(fn)))
          return success();
        if (!inPlace.contains(v) &&
            !(def &&
              isa<nn::ParamOp, nn::ConstantOp, pipeline::AccumulatedGradOp>(
                  def)))
          return where->emitError("stage ")
                 << stage << ": this value's buffer " << str(b)
                 << " lies in the long-lived part of the arena [0, "
                 << plan.getStashBase() << "), but the value is a temporary";
        return success();
      }
      if (b.getOffset() % plan.getAlign() || b.getEnd() > hi ||
          b.getBytes() < bytesOf(v))
        return where->emitError("stage ")
               << stage << ": temporary at " << str(b)
               << " is not an aligned buffer of its size inside the "
                  "temporaries ["
               << lo << ", " << hi << ")";
      temps.push_back({v, b, def, lastUse.count(v) ? lastUse[v] : def});
      return success();
    };
    for (BlockArgument arg : block.getArguments())
      if (failed(visit(arg, -1, fn)))
        return failure();
    for (auto [u, unit] : llvm::enumerate(fu.units))
      for (Operation *op : unit)
        for (Value res : op->getResults()) {
          if (isa<nn::ReshapeOp>(op) || fu.internal.contains(res) ||
              (isa<nn::ConstantOp>(op) && !pipeline::getBuffer(res)))
            continue;
          if (failed(visit(res, u, op)))
            return failure();
        }
    for (size_t i = 0; i < temps.size(); ++i)
      for (size_t j = i + 1; j < temps.size(); ++j) {
        const Temp &a = temps[i], &b = temps[j];
        if (a.def <= b.end && b.def <= a.end && a.buffer.overlaps(b.buffer)) {
          Operation *where = b.value.getDefiningOp();
          InFlightDiagnostic d =
              (where ? where : fn.getOperation())->emitError("stage ");
          d << stage << ": this value's buffer " << str(b.buffer)
            << " overlaps " << str(a.buffer)
            << ", which holds a value still alive";
          if (Operation *other = a.value.getDefiningOp())
            d.attachNote(other->getLoc()) << "that value";
          return d;
        }
      }
    return success();
  }

  /// Reads the schedule: a forward never takes a slot still in use.
  LogicalResult checkSlots() {
    const int64_t slots = plan.getStashSlots();
    // The micro-batch in each chunk's part of each slot.
    std::vector<int64_t> holders(slots * chunks.size(), -1);
    for (ActionAttr a : schedule.getActionList()) {
      // W reads the deferred operands (their own buffers), not the stash.
      if (a.getPhase() == Phase::Update || a.getPhase() == Phase::Weight ||
          a.getPhase() == Phase::Flush)
        continue;
      int64_t mb = *a.getMicrobatch(), slot = mb % slots;
      int64_t *holder = &holders[a.getChunk() * slots];
      if (a.getPhase() == Phase::Forward) {
        if (holder[slot] >= 0)
          return schedule.emitError("stage ")
                 << stage << ": action " << a.getShortName()
                 << " stashes micro-batch " << mb << " in slot " << slot
                 << ", which still holds micro-batch " << holder[slot]
                 << " (its backward has not run); the plan has " << slots
                 << " stash slot(s)";
        holder[slot] = mb;
      } else if (holder[slot] == mb) {
        holder[slot] = -1;
      } else {
        return schedule.emitError("stage ")
               << stage << ": action " << a.getShortName()
               << " reads micro-batch " << mb << "'s stash from slot " << slot
               << ", which holds "
               << (holder[slot] < 0
                       ? std::string("nothing")
                       : "micro-batch " + std::to_string(holder[slot]));
      }
    }
    return success();
  }

  int64_t stage;
  pipeline::ScheduleOp schedule;
  MemoryPlanAttr plan;
  SmallVector<std::array<func::FuncOp, 3>> chunks;
  SmallVector<func::FuncOp> fns; // every chunk's
  llvm::SmallPtrSet<Operation *, 4> forwards, backwards;
  std::map<std::string, std::pair<BufferAttr, Operation *>> objects;
  // The buffers of values received once per step (pipe.recv per_step).
  llvm::DenseSet<BufferAttr> perStep;
  int constants = 0, updates = 0;
};

struct CheckMemoryPass : gpipe::impl::CheckMemoryBase<CheckMemoryPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (module.getOps<pipeline::ScheduleOp>().empty())
      return; // not scheduled yet: no stages, no plan
    for (auto schedule : module.getOps<pipeline::ScheduleOp>()) {
      const int64_t s = static_cast<int64_t>(schedule.getStage());
      auto chunks = schedule.lookupChunkFunctions();
      if (failed(chunks))
        return signalPassFailure();
      MemoryPlanAttr plan = pipeline::getMemoryPlan(schedule);
      if (!plan) {
        schedule.emitError("stage ")
            << s << " has no memory plan (pipe.memory): run gpipe-plan-memory";
        return signalPassFailure();
      }
      if (failed(StageChecker(s, schedule, plan, *chunks).run()))
        return signalPassFailure();
    }
  }
};

} // namespace
