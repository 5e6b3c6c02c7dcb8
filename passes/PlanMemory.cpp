// gpipe-bf16-shadows and gpipe-plan-memory: which parameters keep a bf16
// copy, and where every value of a stage lives in its arena (lowering).
#include "passes/Passes.h"
#include "passes/Utils.h"

#include "llvm/ADT/StringSet.h"

#include <algorithm>
#include <set>

namespace gpipe {
#define GEN_PASS_DEF_BF16SHADOWS
#define GEN_PASS_DEF_PLANMEMORY
#include "passes/Passes.h.inc"
} // namespace gpipe

using namespace mlir;
using namespace gpipe;
using pipeline::BufferAttr;
using pipeline::BufferSpace;
using pipeline::Phase;

namespace {

/// A stage's functions (forward, backward and update of each of its model
/// chunks) and its schedule, or a located error.
struct StageFuncs {
  SmallVector<func::FuncOp> forward, backward, update; // per chunk
  pipeline::ScheduleOp schedule;
  /// Every function, chunk by chunk: forward, backward, update.
  SmallVector<func::FuncOp> all() const {
    SmallVector<func::FuncOp> fns;
    for (size_t c = 0; c < forward.size(); ++c)
      fns.append({forward[c], backward[c], update[c]});
    return fns;
  }
};

FailureOr<StageFuncs> stageFuncs(pipeline::ScheduleOp sched) {
  auto chunks = sched.lookupChunkFunctions(
      "; run gpipe-outline-stages and gpipe-schedule first");
  if (failed(chunks))
    return failure();
  StageFuncs f;
  f.schedule = sched;
  for (auto &fns : *chunks) {
    f.forward.push_back(fns[0]);
    f.backward.push_back(fns[1]);
    f.update.push_back(fns[2]);
  }
  return f;
}

struct Bf16ShadowsPass : gpipe::impl::Bf16ShadowsBase<Bf16ShadowsPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (module.getOps<pipeline::ScheduleOp>().empty())
      return; // not scheduled yet: no stages
    for (auto sched : module.getOps<pipeline::ScheduleOp>()) {
      FailureOr<StageFuncs> f = stageFuncs(sched);
      if (failed(f))
        return signalPassFailure();
      llvm::StringSet<> readByGemm;
      for (func::FuncOp fn : f->all())
        fn.walk([&](nn::GemmOp g) {
          for (Value v : {g.getA(), g.getB()})
            if (nn::ParamOp p = paramOf(v))
              readByGemm.insert(p.getName());
        });
      for (func::FuncOp fn : f->all())
        fn.walk([&](nn::ParamOp p) {
          if (readByGemm.contains(p.getName()))
            pipeline::setBf16Shadow(p);
        });
    }
  }
};

/// First-fit allocator over arena offsets.
class SlotAllocator {
public:
  SlotAllocator(int64_t base, int64_t align)
      : base(base), top(base), align(align) {}
  /// The offset of a free slot of `size` bytes (rounded up to the alignment).
  int64_t allocate(int64_t size) {
    size = alignUp(std::max<int64_t>(size, 1), align);
    int64_t offset = base;
    for (auto [start, len] : live) {
      if (start - offset >= size)
        break;
      offset = std::max(offset, start + len);
    }
    live.emplace(offset, size);
    top = std::max(top, offset + size);
    return offset;
  }
  void release(int64_t offset) {
    for (auto it = live.begin(); it != live.end(); ++it)
      if (it->first == offset) {
        live.erase(it);
        return;
      }
  }
  int64_t peak() const { return top; }

private:
  int64_t base, top, align;
  std::set<std::pair<int64_t, int64_t>> live;
};

/// Plans one stage.
class StagePlanner {
public:
  /// `stageOf`: the stage holding each virtual stage (a transfer's peer).
  StagePlanner(StageFuncs f, int64_t align, bool cuda, bool bf16,
               int64_t microbatches, ArrayRef<int64_t> stageOf,
               int64_t shard = 1)
      : f(f), ctx(f.schedule.getContext()), align(align), cuda(cuda),
        bf16(bf16), microbatches(microbatches), stageOf(stageOf), shard(shard) {
  }
  LogicalResult run(StringRef target, StringRef precision);

private:
  int64_t aligned(int64_t bytes) const { return alignUp(bytes, align); }
  BufferAttr arena(int64_t offset, int64_t bytes) const {
    return BufferAttr::get(ctx, BufferSpace::Arena, offset, aligned(bytes));
  }
  /// The next `bytes` of the long-lived part.
  BufferAttr permanent(int64_t bytes) {
    BufferAttr b = arena(cursor, bytes);
    cursor += aligned(bytes);
    return b;
  }
  void planLongLived();
  LogicalResult planHandoffs();
  LogicalResult planStash();
  LogicalResult planStash(func::FuncOp forward, func::FuncOp backward);
  /// The temporaries of one function; returns their peak bytes.
  FailureOr<int64_t> planTemporaries(func::FuncOp func);

  StageFuncs f;
  MLIRContext *ctx;
  int64_t align;
  bool cuda, bf16;
  int64_t microbatches;
  ArrayRef<int64_t> stageOf;
  // --shard-optimizer: the replicas the optimizer state is split across.
  int64_t shard = 1;
  int64_t cursor = 0;
  llvm::StringMap<BufferAttr> params, shadows, accumulators;
  int64_t parameterBytes = 0, optimizerBytes = 0, gradientBytes = 0,
          constantBytes = 0, shadowBytes = 0, scratchBytes = 0;
  int64_t clearedBegin = 0, clearedEnd = 0;
  // The bytes of a stash slot (every chunk's results of one micro-batch).
  int64_t stashSlot = 0, transientBase = 0;
};

void StagePlanner::planLongLived() {
  // Parameters, by first appearance in forward, backward, update.
  for (func::FuncOp fn : f.all())
    fn.walk([&](nn::ParamOp p) {
      auto [it, inserted] = params.try_emplace(p.getName());
      if (inserted) {
        it->second = permanent(bytesOf(p.getOutput()));
        parameterBytes += it->second.getBytes();
      }
      pipeline::setBuffer(p.getOutput(), it->second);
    });
  // A value received once per step (a tied weight's copy, `per_step`): every
  // action of the step reads it, so it is long-lived, counted with the
  // parameters.
  for (func::FuncOp fn : f.all())
    fn.walk([&](pipeline::RecvOp r) {
      if (!r.getPerStep())
        return;
      BufferAttr b = permanent(bytesOf(r.getValue()));
      parameterBytes += b.getBytes();
      pipeline::setBuffer(r.getValue(), b);
    });
  // Optimizer state: SGD with momentum one buffer, Adam two (split across
  // the replicas with --shard-optimizer: after the accumulators, below).
  int64_t stateSlots = 0;
  for (func::FuncOp update : f.update)
    update.walk([&](Operation *op) {
      int buffers = 0;
      Value param;
      if (auto sgd = dyn_cast<pipeline::SGDUpdateOp>(op)) {
        buffers = sgd.getMomentum().convertToDouble() > 0 ? 1 : 0;
        param = sgd.getParam();
      } else if (auto adam = dyn_cast<pipeline::AdamUpdateOp>(op)) {
        buffers = 2;
        param = adam.getParam();
      } else {
        return;
      }
      stateSlots = std::max<int64_t>(stateSlots, buffers);
      if (shard > 1)
        return;
      SmallVector<BufferAttr> state;
      for (int k = 0; k < buffers; ++k) {
        state.push_back(permanent(bytesOf(param)));
        optimizerBytes += state.back().getBytes();
      }
      if (buffers)
        pipeline::setState(op, state);
    });
  // Deferred running statistics: each micro-batch's mean and variance, kept
  // until the step's last micro-batch combines them (counted with the
  // parameters, the model state they update).
  for (func::FuncOp forward : f.forward)
    forward.walk([&](nn::UpdateRunningStatsOp update) {
      int64_t m = update.getMicrobatches();
      if (m <= 1)
        return;
      BufferAttr b = permanent(2 * m * bytesOf(update.getMean()));
      parameterBytes += b.getBytes();
      pipeline::setState(update, {b});
    });
  // Accumulators: first those a GEMM overwrites (gpipe-accumulate-in-place's
  // `overwrite`), then those the update clears. One per parameter and chunk:
  // the chunk that uses a weight tied to another chunk of the stage sums its
  // own share, which its update hands to the owner's.
  auto key = [](func::FuncOp fn, StringRef name) {
    return (Twine(pipeline::getStage(fn).value_or(-1)) + "/" + name).str();
  };
  const int64_t accumulatorBegin = cursor;
  for (func::FuncOp backward : f.backward)
    backward.walk([&](pipeline::AccumulateGradOp acc) {
      std::string k = key(backward, acc.getParam());
      if (acc.getOverwrite() && !accumulators.count(k))
        accumulators[k] = permanent(bytesOf(acc.getGrad()));
    });
  clearedBegin = cursor;
  for (func::FuncOp fn : f.all())
    fn.walk([&](Operation *op) {
      StringRef name;
      Value v;
      if (auto a = dyn_cast<pipeline::AccumulateGradOp>(op)) {
        name = a.getParam();
        v = a.getGrad();
      } else if (auto a = dyn_cast<pipeline::AccumulatedGradOp>(op)) {
        name = a.getParam();
        v = a.getGrad();
      } else {
        return;
      }
      std::string k = key(fn, name);
      if (!accumulators.count(k))
        accumulators[k] = permanent(bytesOf(v));
    });
  clearedEnd = cursor;
  gradientBytes = cursor - accumulatorBegin;
  // --shard-optimizer: replica r updates the r-th of D equal shares of the
  // accumulators' floats (the runtime's split: [n*r/D, n*(r+1)/D)), so each
  // state slot needs room for the largest share.
  if (shard > 1 && stateSlots > 0) {
    const int64_t floats = (clearedEnd - accumulatorBegin) / 4;
    const int64_t share = (floats + shard - 1) / shard * 4;
    SmallVector<BufferAttr> slots;
    for (int64_t k = 0; k < stateSlots; ++k) {
      slots.push_back(permanent(share));
      optimizerBytes += slots.back().getBytes();
    }
    pipeline::setState(f.schedule, slots);
  }
  for (func::FuncOp fn : f.all())
    fn.walk([&](Operation *op) {
      if (auto a = dyn_cast<pipeline::AccumulateGradOp>(op))
        pipeline::setAccumulator(a, accumulators.lookup(key(fn, a.getParam())));
      else if (auto a = dyn_cast<pipeline::AccumulatedGradOp>(op))
        pipeline::setBuffer(a.getGrad(),
                            accumulators.lookup(key(fn, a.getParam())));
    });
  // Deferred weight-gradient GEMMs (gpipe-split-weight-grad): G and X of
  // every micro-batch, in row blocks.
  for (func::FuncOp backward : f.backward)
    backward.walk([&](pipeline::AccumulateGradOp acc) {
      if (!acc.getDeferred())
        return;
      auto gemm = acc.getGrad().getDefiningOp<nn::GemmOp>();
      BufferAttr g = permanent(microbatches * bytesOf(gemm.getA()));
      BufferAttr x = permanent(microbatches * bytesOf(gemm.getB()));
      gradientBytes += g.getBytes() + x.getBytes();
      pipeline::setDeferredOperands(acc, {g, x});
    });
  // CUDA: kernels read constants from the arena (init uploads them).
  if (cuda)
    for (func::FuncOp fn : f.all())
      fn.walk([&](nn::ConstantOp c) {
        BufferAttr b = permanent(bytesOf(c.getOutput()));
        constantBytes += b.getBytes();
        pipeline::setBuffer(c.getOutput(), b);
      });
  // bf16 copies of the parameters gpipe-bf16-shadows marked, in the order
  // the GEMMs read them.
  for (func::FuncOp fn : f.all())
    fn.walk([&](nn::GemmOp g) {
      for (Value v : {g.getA(), g.getB()}) {
        nn::ParamOp p = paramOf(v);
        if (!p || !pipeline::hasBf16Shadow(p) || shadows.count(p.getName()))
          continue;
        auto t = cast<RankedTensorType>(p.getOutput().getType());
        shadows[p.getName()] = permanent(t.getNumElements() * 2);
        shadowBytes += shadows[p.getName()].getBytes();
      }
    });
  for (func::FuncOp fn : f.all())
    fn.walk([&](nn::ParamOp p) {
      if (BufferAttr b = shadows.lookup(p.getName()))
        pipeline::setShadow(p, b);
    });
  // bf16: the runtime's scratch takes the largest GEMM's operands that have
  // no copy, rounded to bf16.
  if (bf16) {
    auto bf16Bytes = [&](Value v) {
      return aligned(cast<RankedTensorType>(v.getType()).getNumElements() * 2);
    };
    for (func::FuncOp fn : f.all())
      fn.walk([&](nn::GemmOp g) {
        int64_t need = 0;
        for (Value v : {g.getA(), g.getB()}) {
          nn::ParamOp p = paramOf(v);
          if (!p || !pipeline::hasBf16Shadow(p))
            need += bf16Bytes(v);
        }
        scratchBytes = std::max(scratchBytes, need);
      });
    // A batched product rounds both operands' spans (no shadows).
    for (func::FuncOp fn : f.all())
      fn.walk([&](nn::BatchMatMulOp g) {
        scratchBytes =
            std::max(scratchBytes, bf16Bytes(g.getA()) + bf16Bytes(g.getB()));
      });
    for (func::FuncOp backward : f.backward)
      backward.walk([&](pipeline::AccumulateGradOp acc) {
        if (!acc.getDeferred())
          return;
        auto gemm = acc.getGrad().getDefiningOp<nn::GemmOp>();
        auto rowBlocks = [&](Value v) {
          return aligned(microbatches *
                         cast<RankedTensorType>(v.getType()).getNumElements() *
                         2);
        };
        scratchBytes = std::max(scratchBytes, rowBlocks(gemm.getA()) +
                                                  rowBlocks(gemm.getB()));
      });
  }
}

LogicalResult StagePlanner::planHandoffs() {
  // A transfer between two of this stage's chunks (a skip connection over
  // the chunks between them) goes through the arena: a slot per micro-batch,
  // or one for a value sent once per step or by the update.
  const int64_t self = static_cast<int64_t>(f.schedule.getStage());
  auto local = [&](int64_t peer) {
    return peer >= 0 && peer < static_cast<int64_t>(stageOf.size()) &&
           stageOf[peer] == self;
  };
  llvm::DenseMap<int64_t, BufferAttr> byTag;
  for (func::FuncOp fn : f.all())
    fn.walk([&](pipeline::SendOp send) {
      if (!local(send.getPeer()))
        return;
      bool once = send.getPerStep() ||
                  pipeline::getPhase(fn) == pipeline::Phase::Update;
      BufferAttr b = permanent((once ? 1 : microbatches) *
                               aligned(bytesOf(send.getValue())));
      byTag[send.getTag()] = b;
      pipeline::setHandoff(send, b);
    });
  for (func::FuncOp fn : f.all()) {
    WalkResult walk = fn.walk([&](pipeline::RecvOp recv) {
      if (!local(recv.getPeer()))
        return WalkResult::advance();
      BufferAttr b = byTag.lookup(recv.getTag());
      if (!b) {
        recv.emitError("stage ")
            << self << " receives tag " << recv.getTag()
            << " from its own chunk (virtual stage " << recv.getPeer()
            << "), which sends no such tag";
        return WalkResult::interrupt();
      }
      pipeline::setHandoff(recv, b);
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return failure();
  }
  return success();
}

LogicalResult StagePlanner::planStash() {
  // One slot holds every chunk's forward results for one micro-batch, chunk
  // after chunk, by storage root.
  for (auto [forward, backward] : llvm::zip(f.forward, f.backward))
    if (failed(planStash(forward, backward)))
      return failure();
  return success();
}

LogicalResult StagePlanner::planStash(func::FuncOp forward,
                                      func::FuncOp backward) {
  // The forward's results: each one's offset in the slot, or, for a per-step
  // value, its long-lived buffer.
  llvm::SmallVector<int64_t> stashOffsetOfResult;
  llvm::DenseMap<unsigned, BufferAttr> longLivedOfResult;
  llvm::DenseMap<Value, int64_t> rootOffset;
  for (Value v : forward.getBody().front().getTerminator()->getOperands()) {
    Value r = viewRoot(v);
    if (Operation *def = r.getDefiningOp();
        def && isa<nn::ParamOp, nn::ConstantOp>(def))
      return def->emitError("a parameter or constant is stashed (the forward "
                            "returns it): it is in the arena already");
    // A per-step value is the same for every micro-batch: the backward reads
    // its long-lived buffer, and the stash keeps no copy.
    if (auto recv = r.getDefiningOp<pipeline::RecvOp>();
        recv && recv.getPerStep()) {
      longLivedOfResult[stashOffsetOfResult.size()] = pipeline::getBuffer(r);
      stashOffsetOfResult.push_back(-1);
      continue;
    }
    auto [it, inserted] = rootOffset.try_emplace(r, stashSlot);
    if (inserted) {
      stashSlot += aligned(bytesOf(r));
      pipeline::setBuffer(r, BufferAttr::get(ctx, BufferSpace::Stash,
                                             it->second, aligned(bytesOf(r))));
    }
    stashOffsetOfResult.push_back(it->second);
  }
  Block &bwd = backward.getBody().front();
  if (bwd.getNumArguments() != stashOffsetOfResult.size())
    return backward.emitError("the backward takes ")
           << bwd.getNumArguments() << " arguments but the forward stashes "
           << stashOffsetOfResult.size() << " values";
  for (BlockArgument arg : bwd.getArguments())
    if (BufferAttr b = longLivedOfResult.lookup(arg.getArgNumber()))
      pipeline::setBuffer(arg, b);
    else
      pipeline::setBuffer(
          arg, BufferAttr::get(ctx, BufferSpace::Stash,
                               stashOffsetOfResult[arg.getArgNumber()],
                               aligned(bytesOf(arg))));
  return success();
}

FailureOr<int64_t> StagePlanner::planTemporaries(func::FuncOp func) {
  Block &block = func.getBody().front();
  pipeline::FusionUnits fu = pipeline::getFusionUnits(block);
  // Values placed already: long-lived ones, the stash. An in-place GEMM's
  // result is its accumulator.
  llvm::DenseSet<Value> placed;
  for (Operation &op : block)
    if (auto acc = dyn_cast<pipeline::AccumulateGradOp>(op);
        acc && acc.getInPlace())
      pipeline::setBuffer(acc.getGrad(), pipeline::getAccumulator(acc));
  auto isPlaced = [&](Value v) {
    return pipeline::getBuffer(v) || placed.contains(v);
  };
  // Last use (in units, through views) decides when a slot is free again.
  llvm::DenseMap<Value, int64_t> lastUse;
  for (Operation &op : block)
    for (Value operand : op.getOperands()) {
      Value r = viewRoot(operand);
      lastUse[r] = std::max<int64_t>(lastUse.lookup(r), fu.unitOf[&op]);
    }
  SlotAllocator slots(transientBase, align);
  llvm::DenseMap<Value, int64_t> offsetOf;
  auto place = [&](Value v) {
    int64_t at = slots.allocate(bytesOf(v));
    offsetOf[v] = at;
    pipeline::setBuffer(
        v, BufferAttr::get(ctx, BufferSpace::Arena, at,
                           alignUp(std::max<int64_t>(bytesOf(v), 1), align)));
  };
  // Graph inputs that are not stashed are loaded into temporaries first.
  for (BlockArgument arg : block.getArguments())
    if (!isPlaced(arg)) {
      place(arg);
      if (!lastUse.count(arg))
        lastUse[arg] = -1;
    }
  for (auto [u, unit] : llvm::enumerate(fu.units)) {
    const int64_t unitIndex = u;
    for (Operation *op : unit)
      for (Value res : op->getResults()) {
        if (isPlaced(res) || fu.internal.contains(res) ||
            isa<nn::ReshapeOp>(op) || (!cuda && isa<nn::ConstantOp>(op)))
          continue;
        place(res);
        // A result nobody reads is still written: free it after this unit.
        if (!lastUse.count(res))
          lastUse[res] = unitIndex;
      }
    // Free after placing the whole unit's results, so results never
    // overlap the operands they are computed from.
    llvm::DenseSet<Value> released;
    auto release = [&](Value r) {
      if (lastUse.lookup(r) == unitIndex && offsetOf.count(r) &&
          released.insert(r).second)
        slots.release(offsetOf[r]);
    };
    for (Operation *op : unit) {
      for (Value operand : op->getOperands())
        release(viewRoot(operand));
      for (Value res : op->getResults())
        if (!isa<nn::ReshapeOp>(op) && res.use_empty())
          release(res);
    }
  }
  return slots.peak() - transientBase;
}

LogicalResult StagePlanner::run(StringRef target, StringRef precision) {
  planLongLived();
  if (failed(planHandoffs()) || failed(planStash()))
    return failure();
  const int64_t stashBase = cursor;
  const int64_t stashSlots = f.schedule.getNumStashSlots();
  transientBase = stashBase + stashSlot * stashSlots;
  int64_t transient = 0;
  for (func::FuncOp fn : f.all()) {
    FailureOr<int64_t> peak = planTemporaries(fn);
    if (failed(peak))
      return failure();
    transient = std::max(transient, *peak);
  }
  pipeline::setMemoryPlan(
      f.schedule,
      pipeline::MemoryPlanAttr::get(
          ctx, target, precision, align, transientBase + transient,
          parameterBytes, optimizerBytes, gradientBytes, constantBytes,
          shadowBytes, clearedBegin, clearedEnd, stashBase, stashSlot,
          stashSlots, transientBase, transient, scratchBytes));
  return success();
}

struct PlanMemoryPass : gpipe::impl::PlanMemoryBase<PlanMemoryPass> {
  using PlanMemoryBase::PlanMemoryBase;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (target != "cpu" && target != "cuda") {
      module.emitError("gpipe-plan-memory: target must be cpu or cuda, got '")
          << target << "'";
      return signalPassFailure();
    }
    if (precision != "fp32" && precision != "bf16") {
      module.emitError(
          "gpipe-plan-memory: precision must be fp32 or bf16, got '")
          << precision << "'";
      return signalPassFailure();
    }
    // Nothing to plan before the stages are scheduled.
    if (module.getOps<pipeline::ScheduleOp>().empty())
      return;
    const bool cuda = target == "cuda";
    // CPU: a cache line; CUDA: what cuBLASLt's fastest kernels assume.
    const int64_t align = cuda ? 256 : 64;
    const int64_t m = pipeline::getNumMicrobatches(module);
    SmallVector<StageFuncs> stages;
    for (auto sched : module.getOps<pipeline::ScheduleOp>()) {
      FailureOr<StageFuncs> f = stageFuncs(sched);
      if (failed(f))
        return signalPassFailure();
      stages.push_back(*f);
    }
    // The stage holding each virtual stage (a transfer's peer).
    SmallVector<int64_t> stageOf = pipeline::stagesOfPieces(module);
    for (auto [v, s] : llvm::enumerate(stageOf))
      if (s < 0) {
        module.emitError("stage ")
            << v
            << " lacks its functions or its pipe.schedule; run "
               "gpipe-outline-stages and gpipe-schedule first";
        return signalPassFailure();
      }
    for (StageFuncs &f : stages) {
      for (func::FuncOp backward : f.backward) {
        WalkResult remat = backward.walk([](pipeline::RematOp op) {
          op.emitError("gpipe-plan-memory needs the recomputation inlined: "
                       "run gpipe-inline-remat first");
          return WalkResult::interrupt();
        });
        if (remat.wasInterrupted())
          return signalPassFailure();
      }
      StagePlanner planner(f, align, cuda, precision == "bf16", m, stageOf,
                           shardOptimizer);
      if (failed(planner.run(target, precision)))
        return signalPassFailure();
    }
  }
};

} // namespace
