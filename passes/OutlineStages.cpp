// gpipe-outline-stages: one training step -> forward/backward/update
// functions per stage, joined by pipe.send / pipe.recv.
#include "passes/Passes.h"
#include "passes/Utils.h"

#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"

#include <map>
#include <tuple>

namespace gpipe {
#define GEN_PASS_DEF_OUTLINESTAGES
#include "passes/Passes.h.inc"
} // namespace gpipe

using namespace mlir;
using namespace gpipe;

namespace {

enum class Phase { Free, Forward, Backward, Update };

const char *phaseName(Phase p) {
  switch (p) {
  case Phase::Forward:
    return "forward";
  case Phase::Backward:
    return "backward";
  case Phase::Update:
    return "update";
  case Phase::Free:
    break;
  }
  return "free";
}

/// A value that one stage sends to another in one phase; `perStep`: once
/// per step (a tied weight's value, in the first forward), not with every
/// micro-batch.
struct Edge {
  Value value;
  int64_t from, to;
  Phase phase;
  int64_t tag;
  bool perStep;
};

struct Placement {
  int64_t stage = -1;
  Phase phase = Phase::Free;
};

class Outliner {
public:
  Outliner(ModuleOp module, func::FuncOp step) : module(module), step(step) {}
  LogicalResult run();

private:
  LogicalResult classify();
  LogicalResult splitTiedGradients();
  Placement placementOf(Value v) const;
  LogicalResult require(Value v, int64_t stage, Phase phase, Operation *user);
  void addEdge(Value v, int64_t from, int64_t to, Phase phase,
               bool perStep = false);
  func::FuncOp buildForward(int64_t s);
  func::FuncOp buildBackward(int64_t s);
  func::FuncOp buildUpdate(int64_t s);

  /// Per function being built: maps step values to the function's values,
  /// cloning parameters and constants at its start and receiving values
  /// from other stages where first used.
  struct Builder {
    Outliner &o;
    int64_t stage;
    Phase phase;
    Block *body;
    OpBuilder b;
    OpBuilder freeB;
    IRMapping map;
    Builder(Outliner &o, int64_t stage, Phase phase, Block *body)
        : o(o), stage(stage), phase(phase), body(body),
          b(OpBuilder::atBlockEnd(body)), freeB(OpBuilder::atBlockBegin(body)) {
    }
    Value get(Value v);
    /// Receives every value sent to this function (at its start).
    void receiveAll();
    /// Sends every value this function owes other stages (at its end).
    void sendAll();
    Operation *cloneOp(Operation *op);
  };

  ModuleOp module;
  func::FuncOp step;
  int64_t numStages = 1;
  llvm::DenseMap<Operation *, Placement> placement;
  llvm::DenseMap<Value, int64_t> reader; // graph input -> reading stage
  std::vector<Edge> edges;
  std::map<std::tuple<void *, int64_t, Phase>, size_t> incoming;
  SmallVector<llvm::SetVector<Value>> stash, inputs;
  SmallVector<llvm::MapVector<Value, SmallVector<std::string>>> accumulate;
  /// Per owning stage and tied parameter: per using stage, the value (one of
  /// its gradient shares) whose edge carries that stage's summed share to
  /// the owner's update.
  SmallVector<llvm::StringMap<std::map<int64_t, Value>>> tiedShares;
  Value loss;
  int64_t lossStage = -1;
};

} // namespace

Placement Outliner::placementOf(Value v) const {
  if (Operation *def = v.getDefiningOp())
    return placement.lookup(def);
  return Placement{reader.lookup(v), Phase::Forward};
}

LogicalResult Outliner::classify() {
  Block &block = step.getBody().front();
  for (Operation &op : block.without_terminator()) {
    if (isa<nn::ParamOp, nn::ConstantOp>(op)) {
      placement[&op] = {};
      continue;
    }
    std::optional<int64_t> stage = pipeline::getStage(&op);
    if (!stage)
      return op.emitError("op has no 'pipe.stage': run gpipe-partition before "
                          "gpipe-autodiff");
    if (*stage < 0 || *stage >= numStages)
      return op.emitError("stage ")
             << *stage << " is outside [0, " << numStages << ")";
    Phase phase = isa<pipeline::SGDUpdateOp, pipeline::AdamUpdateOp>(op)
                      ? Phase::Update
                  : nn::isBackward(&op) ? Phase::Backward
                                        : Phase::Forward;
    placement[&op] = {*stage, phase};
  }
  // A graph input is read by the first stage that uses it.
  for (BlockArgument arg : block.getArguments())
    for (Operation *user : arg.getUsers()) {
      if (user == block.getTerminator())
        continue;
      int64_t s = placement.lookup(user).stage;
      auto [it, inserted] = reader.try_emplace(arg, s);
      if (!inserted)
        it->second = std::min(it->second, s);
    }
  return success();
}

void Outliner::addEdge(Value v, int64_t from, int64_t to, Phase phase,
                       bool perStep) {
  auto key = std::make_tuple(v.getAsOpaquePointer(), to, phase);
  if (incoming.count(key))
    return;
  incoming[key] = edges.size();
  edges.push_back(
      {v, from, to, phase, static_cast<int64_t>(edges.size()), perStep});
}

/// A tied parameter's gradient is a sum (nn.add on the owner's backward) of
/// shares, some computed on the stages that use it. Summing a share over the
/// micro-batches commutes with the sum of shares, so each using stage
/// accumulates its shares itself and its update sends the total to the
/// owner's update (once per step) instead of each backward sending its share:
/// the owner's adds of remote shares are dropped from the step.
LogicalResult Outliner::splitTiedGradients() {
  Block &block = step.getBody().front();
  for (Operation &op : block.without_terminator()) {
    Placement p = placement.lookup(&op);
    if (p.phase != Phase::Update)
      continue;
    auto paramOp = op.getOperand(0).getDefiningOp<nn::ParamOp>();
    if (!paramOp)
      continue;
    StringRef name = paramOp.getName();
    auto onOwnerBackward = [&](Operation *def) {
      Placement q = placement.lookup(def);
      return q.stage == p.stage && q.phase == Phase::Backward;
    };
    while (true) {
      // The sum's leaves, each with the add that reads it (null: the root).
      SmallVector<std::pair<Value, nn::AddOp>> leaves;
      SmallVector<std::pair<Value, nn::AddOp>> work{{op.getOperand(1), {}}};
      while (!work.empty()) {
        auto [v, parent] = work.pop_back_val();
        auto add = v.getDefiningOp<nn::AddOp>();
        if (add && v.hasOneUse() && onOwnerBackward(add)) {
          work.push_back({add.getLhs(), add});
          work.push_back({add.getRhs(), add});
        } else {
          leaves.push_back({v, parent});
        }
      }
      auto remote = llvm::find_if(leaves, [&](auto &leaf) {
        Placement q = placementOf(leaf.first);
        return q.phase == Phase::Backward && q.stage != p.stage;
      });
      if (remote == leaves.end())
        break;
      auto [share, parent] = *remote;
      if (!parent)
        return op.emitError("the gradient of parameter @")
               << name << " (updated on stage " << p.stage
               << ") has no share computed on that stage";
      int64_t user = placementOf(share).stage;
      accumulate[user][share].push_back(name.str());
      if (tiedShares[p.stage][name].try_emplace(user, share).second)
        addEdge(share, user, p.stage, Phase::Update);
      Value other =
          parent.getLhs() == share ? parent.getRhs() : parent.getLhs();
      parent.getResult().replaceAllUsesWith(other);
      placement.erase(parent);
      parent.erase();
    }
  }
  return success();
}

/// The owning stage of a parameter `v` used on stage `s` that another stage
/// owns (a weight tied across stages), or nullopt.
static std::optional<int64_t> foreignOwner(Value v, int64_t s) {
  auto param = v.getDefiningOp<nn::ParamOp>();
  if (!param)
    return std::nullopt;
  std::optional<int64_t> owner = pipeline::getStage(param);
  if (!owner || *owner == s)
    return std::nullopt;
  return owner;
}

/// Whether `v` is a view of a parameter or constant that stage `s` may
/// rebuild itself: nn.reshape ops down to an nn.param (owned by `s`, not a
/// weight tied from another stage) or nn.constant. Such a value is not
/// stashed for the backward (the stash would alias the parameter itself):
/// Builder::get clones the chain where it is used.
static bool isLocalParamView(Value v, int64_t s) {
  Operation *def = v.getDefiningOp();
  while (auto reshape = dyn_cast_or_null<nn::ReshapeOp>(def)) {
    v = reshape.getInput();
    def = v.getDefiningOp();
  }
  if (isa_and_nonnull<nn::ConstantOp>(def))
    return true;
  return isa_and_nonnull<nn::ParamOp>(def) && !foreignOwner(v, s);
}

LogicalResult Outliner::require(Value v, int64_t s, Phase phase,
                                Operation *user) {
  Placement p = placementOf(v);
  // A tied weight: its owner sends its value once per step, in its first
  // forward, to the user's first forward.
  if (std::optional<int64_t> owner = foreignOwner(v, s)) {
    addEdge(v, *owner, s, Phase::Forward, /*perStep=*/true);
    return success();
  }
  if (p.phase == Phase::Free)
    return success();
  if (isa<BlockArgument>(v)) {
    inputs[p.stage].insert(v);
    if (p.stage != s)
      addEdge(v, p.stage, s, phase);
    return success();
  }
  if (p.phase != phase)
    return user->emitError("internal error: a ")
           << phaseName(phase) << " op uses a " << phaseName(p.phase)
           << " value";
  if (p.stage == s)
    return success();
  if (phase == Phase::Forward && p.stage > s)
    return user->emitError("uses a value computed on a later stage (")
           << p.stage << ") in the forward of stage " << s;
  addEdge(v, p.stage, s, phase);
  return success();
}

Value Outliner::Builder::get(Value v) {
  if (Value m = map.lookupOrNull(v))
    return m;
  Operation *def = v.getDefiningOp();
  if (def && isa<nn::ParamOp, nn::ConstantOp>(def)) {
    Operation *clone = freeB.clone(*def);
    pipeline::removeStage(clone);
    nn::removeBackward(clone);
    freeB.setInsertionPointAfter(clone);
    map.map(def->getResults(), clone->getResults());
    return map.lookup(v);
  }
  // A view of a parameter (isLocalParamView): rebuilt here, after its operand.
  if (auto reshape = dyn_cast_or_null<nn::ReshapeOp>(def)) {
    (void)get(reshape.getInput());
    Operation *clone = freeB.clone(*def, map);
    pipeline::removeStage(clone);
    nn::removeBackward(clone);
    freeB.setInsertionPointAfter(clone);
    return map.lookup(v);
  }
  llvm_unreachable("a value with no edge into this function");
}

/// The edges into (`stage`, `phase`) or out of it, in the order both sides
/// use: forward transfers by ascending peer, backward ones by descending
/// peer, then by tag. With all receives at the start of an action and all
/// sends at its end, that order cannot deadlock (gpipe-check-schedule
/// verifies it).
static SmallVector<const Edge *>
orderedEdges(ArrayRef<Edge> edges, int64_t stage, Phase phase, bool outgoing) {
  SmallVector<const Edge *> list;
  for (const Edge &e : edges)
    if (e.phase == phase && (outgoing ? e.from : e.to) == stage)
      list.push_back(&e);
  bool ascending = phase == Phase::Forward;
  llvm::sort(list, [&](const Edge *a, const Edge *b) {
    int64_t pa = outgoing ? a->to : a->from, pb = outgoing ? b->to : b->from;
    if (pa != pb)
      return ascending ? pa < pb : pa > pb;
    return a->tag < b->tag;
  });
  return list;
}

void Outliner::Builder::receiveAll() {
  for (const Edge *e : orderedEdges(o.edges, stage, phase, false))
    map.map(e->value,
            pipeline::RecvOp::create(b, e->value.getLoc(), e->value.getType(),
                                     e->from, e->tag, e->perStep));
}

void Outliner::Builder::sendAll() {
  for (const Edge *e : orderedEdges(o.edges, stage, phase, true))
    pipeline::SendOp::create(b, e->value.getLoc(), get(e->value), e->to, e->tag,
                             e->perStep);
}

Operation *Outliner::Builder::cloneOp(Operation *op) {
  for (Value v : op->getOperands())
    (void)get(v);
  Operation *clone = b.clone(*op, map);
  pipeline::removeStage(clone);
  nn::removeBackward(clone);
  return clone;
}

static func::FuncOp makeFunc(OpBuilder &b, Location loc, StringRef name,
                             TypeRange args, TypeRange results, int64_t stage,
                             pipeline::Phase phase) {
  // A name no other symbol (a parameter, say) has.
  Operation *module = b.getInsertionBlock()->getParentOp();
  std::string unique = name.str();
  for (int k = 1; SymbolTable::lookupSymbolIn(module, unique); ++k)
    unique = name.str() + "_" + std::to_string(k);
  auto func =
      func::FuncOp::create(b, loc, unique, b.getFunctionType(args, results));
  pipeline::setStage(func, stage);
  pipeline::setPhase(func, phase);
  Block *body = func.addEntryBlock();
  (void)body;
  return func;
}

func::FuncOp Outliner::buildForward(int64_t s) {
  OpBuilder mb(step);
  SmallVector<Value> args(inputs[s].begin(), inputs[s].end());
  llvm::sort(args, [](Value a, Value b) {
    return cast<BlockArgument>(a).getArgNumber() <
           cast<BlockArgument>(b).getArgNumber();
  });
  SmallVector<Type> argTypes, resultTypes;
  for (Value v : args)
    argTypes.push_back(v.getType());
  for (Value v : stash[s])
    resultTypes.push_back(v.getType());
  func::FuncOp func =
      makeFunc(mb, step.getLoc(), "stage" + std::to_string(s) + "_forward",
               argTypes, resultTypes, s, pipeline::Phase::Forward);
  Builder fb(*this, s, Phase::Forward, &func.getBody().front());
  for (auto [i, v] : llvm::enumerate(args)) {
    unsigned n = cast<BlockArgument>(v).getArgNumber();
    if (StringAttr name = nn::getInputName(step, n))
      nn::setInputName(func, i, name);
    fb.map.map(v, func.getArgument(i));
  }
  fb.receiveAll();
  for (Operation &op : step.getBody().front().without_terminator()) {
    Placement p = placement.lookup(&op);
    if (p.stage != s || p.phase != Phase::Forward)
      continue;
    fb.cloneOp(&op);
  }
  if (s == lossStage)
    pipeline::ReportLossOp::create(fb.b, loss.getLoc(), fb.get(loss));
  fb.sendAll();
  SmallVector<Value> results;
  for (Value v : stash[s])
    results.push_back(fb.get(v));
  func::ReturnOp::create(fb.b, step.getLoc(), results);
  return func;
}

func::FuncOp Outliner::buildBackward(int64_t s) {
  OpBuilder mb(step);
  SmallVector<Type> argTypes;
  for (Value v : stash[s])
    argTypes.push_back(v.getType());
  func::FuncOp func =
      makeFunc(mb, step.getLoc(), "stage" + std::to_string(s) + "_backward",
               argTypes, {}, s, pipeline::Phase::Backward);
  Builder bb(*this, s, Phase::Backward, &func.getBody().front());
  for (auto [i, v] : llvm::enumerate(stash[s]))
    bb.map.map(v, func.getArgument(i));
  bb.receiveAll();
  for (Operation &op : step.getBody().front().without_terminator()) {
    Placement p = placement.lookup(&op);
    if (p.stage != s || p.phase != Phase::Backward)
      continue;
    bb.cloneOp(&op);
    for (Value r : op.getResults()) {
      auto it = accumulate[s].find(r);
      if (it != accumulate[s].end())
        for (const std::string &name : it->second)
          pipeline::AccumulateGradOp::create(bb.b, op.getLoc(), bb.get(r),
                                             name);
    }
  }
  for (auto &[grad, names] : accumulate[s])
    if (placementOf(grad).phase == Phase::Free)
      for (const std::string &name : names)
        pipeline::AccumulateGradOp::create(bb.b, grad.getLoc(), bb.get(grad),
                                           name);
  bb.sendAll();
  func::ReturnOp::create(bb.b, step.getLoc());
  return func;
}

func::FuncOp Outliner::buildUpdate(int64_t s) {
  OpBuilder mb(step);
  func::FuncOp func =
      makeFunc(mb, step.getLoc(), "stage" + std::to_string(s) + "_update", {},
               {}, s, pipeline::Phase::Update);
  Builder ub(*this, s, Phase::Update, &func.getBody().front());
  // The using stages' summed shares of the tied parameters this stage owns.
  ub.receiveAll();
  for (Operation &op : step.getBody().front().without_terminator()) {
    Placement p = placement.lookup(&op);
    if (p.stage != s || p.phase != Phase::Update)
      continue;
    Value param = op.getOperand(0), grad = op.getOperand(1);
    auto name = param.getDefiningOp<nn::ParamOp>().getName();
    Value sum = pipeline::AccumulatedGradOp::create(ub.b, op.getLoc(),
                                                    grad.getType(), name);
    auto shares = tiedShares[s].find(name);
    if (shares != tiedShares[s].end())
      for (auto &[user, share] : shares->second)
        sum = nn::AddOp::create(ub.b, op.getLoc(), grad.getType(), sum,
                                ub.get(share));
    ub.map.map(grad, sum);
    ub.cloneOp(&op);
  }
  // This stage's shares of tied parameters other stages own: their sums.
  for (int64_t owner = 0; owner < numStages; ++owner)
    for (auto &entry : tiedShares[owner])
      if (auto it = entry.second.find(s); it != entry.second.end())
        ub.map.map(it->second, pipeline::AccumulatedGradOp::create(
                                   ub.b, it->second.getLoc(),
                                   it->second.getType(), entry.first()));
  ub.sendAll();
  func::ReturnOp::create(ub.b, step.getLoc());
  return func;
}

LogicalResult Outliner::run() {
  numStages = pipeline::getNumStages(step);
  if (failed(classify()))
    return failure();
  Block &block = step.getBody().front();
  Operation *ret = block.getTerminator();
  for (unsigned i = 0, e = step.getNumResults(); i < e; ++i)
    if (nn::isLoss(step, i))
      loss = ret->getOperand(i);
  if (!loss || !loss.getDefiningOp())
    return step.emitError("no computed result is marked 'nn.loss'");
  lossStage = placementOf(loss).stage;

  stash.resize(numStages);
  inputs.resize(numStages);
  accumulate.resize(numStages);
  tiedShares.resize(numStages);
  if (failed(splitTiedGradients()))
    return failure();
  for (Operation &op : block.without_terminator()) {
    Placement p = placement.lookup(&op);
    switch (p.phase) {
    case Phase::Free:
      break;
    case Phase::Forward:
      for (Value v : op.getOperands())
        if (failed(require(v, p.stage, Phase::Forward, &op)))
          return failure();
      break;
    case Phase::Backward:
      for (Value v : op.getOperands()) {
        Placement q = placementOf(v);
        // A view of the stage's own parameter is rebuilt in the backward
        // (Builder::get), not stashed.
        if (q.phase == Phase::Forward && q.stage == p.stage &&
            isa_and_nonnull<nn::ReshapeOp>(v.getDefiningOp()) &&
            isLocalParamView(v, p.stage))
          continue;
        if (q.phase == Phase::Forward || foreignOwner(v, p.stage)) {
          // Forward values the backward reads are kept from the forward.
          stash[p.stage].insert(v);
          if (failed(require(v, p.stage, Phase::Forward, &op)))
            return failure();
        } else if (failed(require(v, p.stage, Phase::Backward, &op))) {
          return failure();
        }
      }
      break;
    case Phase::Update: {
      Value param = op.getOperand(0), grad = op.getOperand(1);
      auto paramOp = param.getDefiningOp<nn::ParamOp>();
      Placement g = placementOf(grad);
      // A constant gradient (a parameter added to the loss) is accumulated
      // by the parameter's stage's backward too.
      bool constant = g.phase == Phase::Free && !isa<BlockArgument>(grad);
      if (!paramOp ||
          (!constant && (g.phase != Phase::Backward || g.stage != p.stage)))
        return op.emitError("the gradient of a parameter updated on stage ")
               << p.stage << " must be computed by that stage's backward";
      accumulate[p.stage][grad].push_back(paramOp.getName().str());
      break;
    }
    }
  }
  if (failed(require(loss, lossStage, Phase::Forward, ret)))
    return failure();

  SmallVector<func::FuncOp> created;
  for (int64_t s = 0; s < numStages; ++s) {
    created.push_back(buildForward(s));
    created.push_back(buildBackward(s));
    created.push_back(buildUpdate(s));
  }
  for (func::FuncOp f : created)
    eraseDeadOps(f);

  pipeline::setNumStages(module, numStages);
  pipeline::setNumMicrobatches(module, pipeline::getNumMicrobatches(step));
  if (std::optional<int64_t> batch = pipeline::getBatchSize(step))
    pipeline::setBatchSize(module, *batch);
  step.erase();
  return success();
}

namespace {
struct OutlineStagesPass : gpipe::impl::OutlineStagesBase<OutlineStagesPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<func::FuncOp> steps;
    for (auto f : module.getOps<func::FuncOp>())
      if (!f.isExternal() && !pipeline::getPhase(f))
        steps.push_back(f);
    if (steps.size() != 1) {
      module.emitError("expected one training-step function to outline, found ")
          << steps.size();
      return signalPassFailure();
    }
    Outliner outliner(module, steps.front());
    if (failed(outliner.run()))
      signalPassFailure();
  }
};
} // namespace
