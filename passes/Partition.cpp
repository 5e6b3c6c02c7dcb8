// gpipe-partition: cuts the forward graph into K cost-balanced stages.
#include "passes/CostTable.h"
#include "passes/PartitionCuts.h"
#include "passes/Passes.h"
#include "passes/Utils.h"

#include "dialects/nn/CostModel.h"

#include "llvm/ADT/DenseMap.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace gpipe {
#define GEN_PASS_DEF_PARTITION
#include "passes/Passes.h.inc"
} // namespace gpipe

using namespace mlir;
using namespace gpipe;

namespace {


struct PartitionPass : gpipe::impl::PartitionBase<PartitionPass> {
  using PartitionBase::PartitionBase;
  void runOnOperation() override;

private:
  /// The balanced cut whose every stage's estimated memory fits
  /// `memoryPerStage`, or an error naming the budget.
  LogicalResult cutsWithinBudget(func::FuncOp func,
                                 ArrayRef<SmallVector<Operation *>> units,
                                 ArrayRef<double> cost,
                                 SmallVector<size_t> &starts);
  /// The first unit of each stage from `cuts` (split points by hand), or a
  /// located error naming the split point.
  LogicalResult handCuts(func::FuncOp func,
                         ArrayRef<SmallVector<Operation *>> units,
                         SmallVector<size_t> &starts);
  /// Each unit's seconds per step from the cost table `costs` (`cost`
  /// replaced), or a located error when the table cannot be read.
  LogicalResult measuredCosts(func::FuncOp func,
                              ArrayRef<SmallVector<Operation *>> units,
                              const llvm::DenseSet<Value> &active,
                              SmallVector<double> &cost);
};

/// The ONNX node an op was imported from (its NameLoc), or "".
StringRef nodeName(Operation *op) {
  if (auto name = dyn_cast<NameLoc>(op->getLoc()))
    return name.getName().getValue();
  return "";
}

} // namespace

/// Estimated seconds of one op's forward and backward by the analytic model
/// (nn::analyticSeconds for the forward), plus one forward per operand that
/// needs a gradient (depends on a parameter: a GEMM on the data input skips
/// its dX); `active` holds the values that depend on a parameter.
static double estimateCost(Operation *op, const llvm::DenseSet<Value> &active) {
  double t = nn::analyticSeconds(op);
  int64_t gradients = llvm::count_if(
      op->getOperands(), [&](Value v) { return active.contains(v); });
  return t * (1 + gradients);
}



LogicalResult
PartitionPass::measuredCosts(func::FuncOp func,
                             ArrayRef<SmallVector<Operation *>> units,
                             const llvm::DenseSet<Value> &active,
                             SmallVector<double> &cost) {
  std::string err;
  std::optional<CostTable> table = loadCostTable(costs, err);
  if (!table)
    return func.emitError("cost table: ") << err;
  const double m =
      double(std::max<int64_t>(1, pipeline::getNumMicrobatches(func)));
  llvm::DenseMap<Operation *, size_t> unitOf;
  for (auto [u, unit] : llvm::enumerate(units))
    for (Operation *op : unit)
      unitOf[op] = u;
  for (auto [u, unit] : llvm::enumerate(units)) {
    cost[u] = 0;
    for (Operation *op : unit) {
      if (std::optional<NodeCost> c =
              table->lookup(op, static_cast<int64_t>(m))) {
        cost[u] += c->total();
        continue;
      }
      // Not in the table: the analytic estimate, per step, on this
      // machine's scale.
      cost[u] += estimateCost(op, active) * m * table->scale;
    }
  }
  // A parameter's update (and whatever the table keys by its name) goes
  // with the unit of its first user.
  for (Operation &op : func.getBody().front()) {
    auto param = dyn_cast<nn::ParamOp>(op);
    auto name = param ? dyn_cast<NameLoc>(param->getLoc()) : NameLoc();
    if (!name)
      continue;
    std::optional<NodeCost> c = table->lookupName(name.getName().getValue());
    if (!c)
      continue;
    std::optional<size_t> first;
    for (Operation *user : param->getUsers())
      if (auto at = unitOf.find(user); at != unitOf.end())
        first = first ? std::min(*first, at->second) : at->second;
    if (first)
      cost[*first] += c->total();
  }
  return success();
}

/// The lowest stage among `op`'s users, or nullopt when none has one.
static std::optional<int64_t> firstUserStage(Operation *op) {
  std::optional<int64_t> first;
  for (Operation *user : op->getUsers())
    if (std::optional<int64_t> s = pipeline::getStage(user))
      first = first ? std::min(*first, *s) : *s;
  return first;
}

LogicalResult
PartitionPass::cutsWithinBudget(func::FuncOp func,
                                ArrayRef<SmallVector<Operation *>> units,
                                ArrayRef<double> cost,
                                SmallVector<size_t> &starts) {
  const size_t n = units.size();
  llvm::DenseMap<Operation *, size_t> unitOf;
  for (auto [u, unit] : llvm::enumerate(units))
    for (Operation *op : unit)
      unitOf[op] = u;
  // Per unit: the parameters it uses first (with gradient and states), what
  // its ops compute, and the values it reads from earlier units or the
  // graph's inputs (parameters, constants and their views excluded).
  const double perParam = 2.0 + double(optimizerStates);
  std::vector<double> params(n, 0.0), computed(n, 0.0);
  std::vector<SmallVector<std::pair<Value, size_t>>> reads(n);
  llvm::DenseSet<Operation *> counted;
  const int64_t m = std::max<int64_t>(1, pipeline::getNumMicrobatches(func));
  for (auto [u, unit] : llvm::enumerate(units))
    for (Operation *op : unit) {
      if (!isa<nn::ReshapeOp>(op))
        for (Value r : op->getResults())
          computed[u] += double(bytesOf(r));
      // A weight's gradient GEMM deferred over the micro-batches
      // (gpipe-split-weight-grad, with M > 1) keeps every micro-batch's
      // input and output gradient until the update.
      if (auto gemm = dyn_cast<nn::GemmOp>(op); gemm && m > 1 &&
                                                  paramOf(gemm.getB()))
        params[u] += double(m) * double(bytesOf(gemm.getA()) +
                                        bytesOf(gemm.getResult()));
      for (Value v : op->getOperands()) {
        Value root = viewRoot(v);
        Operation *def = root.getDefiningOp();
        if (auto p = dyn_cast_or_null<nn::ParamOp>(def)) {
          if (counted.insert(def).second)
            params[u] += perParam * double(bytesOf(root));
          continue;
        }
        if (isa_and_nonnull<nn::ConstantOp>(def))
          continue;
        size_t from = def ? unitOf.lookup(def) : 0;
        if (!def || from < u)
          reads[u].push_back({root, def ? from : size_t(0)});
      }
    }
  // stash[b][e]: one micro-batch's stash of units [b, e).
  std::vector<std::vector<double>> stash(n, std::vector<double>(n + 1, 0.0));
  std::vector<double> paramSum(n + 1, 0.0);
  for (size_t i = 0; i < n; ++i)
    paramSum[i + 1] = paramSum[i] + params[i];
  for (size_t b = 0; b < n; ++b) {
    llvm::DenseSet<Value> seen;
    double bytes = 0;
    for (size_t e = b; e < n; ++e) {
      for (auto [v, from] : reads[e])
        if ((!v.getDefiningOp() || from < b) && seen.insert(v).second)
          bytes += double(bytesOf(v));
      if (remat == "none")
        bytes += computed[e];
      stash[b][e + 1] = bytes;
    }
  }
  auto inflight = [&](int64_t group) {
    return group < static_cast<int64_t>(inFlight.size()) ? inFlight[group] : m;
  };
  auto estimate = [&](int64_t group, size_t b, size_t e) {
    return paramSum[e] - paramSum[b] + double(inflight(group)) * stash[b][e];
  };
  const double budget = double(memoryPerStage);
  std::optional<SmallVector<size_t>> found = balancedCuts(
      cost, stages, [&](int64_t group, size_t b, size_t e) {
        return estimate(group, b, e) <= budget;
      });
  if (!found) {
    // The smallest budget some cut fits (its fullest stage's estimate), by
    // bisection, for the message.
    auto fitsUnder = [&](double limit) {
      return balancedCuts(cost, stages,
                          [&](int64_t g, size_t b, size_t e) {
                            return estimate(g, b, e) <= limit;
                          })
          .has_value();
    };
    double lo = budget, hi = std::max(budget, 1.0);
    while (!fitsUnder(hi))
      hi *= 2;
    for (int k = 0; k < 60 && hi - lo > 1; ++k) {
      double mid = (lo + hi) / 2;
      (fitsUnder(mid) ? hi : lo) = mid;
    }
    // The fullest stage of the cut that fits there, exactly.
    SmallVector<size_t> best = *balancedCuts(
        cost, stages,
        [&](int64_t g, size_t b, size_t e) { return estimate(g, b, e) <= hi; });
    double fullest = 0;
    for (int64_t g = 0; g < stages; ++g)
      fullest = std::max(fullest, estimate(g, best[g],
                                           g + 1 < stages ? best[g + 1] : n));
    hi = fullest;
    return func.emitError("no partition into ")
           << static_cast<int64_t>(stages) << " stages fits --memory-per-stage "
           << static_cast<int64_t>(memoryPerStage)
           << " bytes: the smallest estimate of a partition's fullest stage is "
           << static_cast<int64_t>(std::ceil(hi))
           << " bytes (raise the budget, add stages"
           << (remat == "none" ? ", or use --remat stage)" : ")");
  }
  starts = *found;
  return success();
}

LogicalResult PartitionPass::handCuts(func::FuncOp func,
                                      ArrayRef<SmallVector<Operation *>> units,
                                      SmallVector<size_t> &starts) {
  const size_t want = static_cast<size_t>(stages) - 1;
  if (cuts.size() != want)
    return func.emitError("the split points name ")
           << cuts.size() << " node(s), but " << static_cast<int64_t>(stages)
           << " stages need " << want;
  starts.assign(1, 0);
  std::string previous;
  for (const std::string &cut : cuts) {
    // The node itself, else the first node under the module path.
    std::string under = (cut.front() == '/' ? "" : "/") + cut + "/";
    std::optional<size_t> at;
    Operation *found = nullptr;
    for (int exact = 1; exact >= 0 && !at; --exact)
      for (auto [u, unit] : llvm::enumerate(units)) {
        for (Operation *op : unit) {
          StringRef name = nodeName(op);
          if (exact ? name == cut : name.starts_with(under)) {
            at = u;
            found = op;
            break;
          }
        }
        if (at)
          break;
      }
    if (!at)
      return func.emitError("split point '")
             << cut << "': no node of that name, and none under '" << under
             << "'";
    if (found != units[*at].front())
      return found->emitError("split point '")
             << cut
             << "' computes nothing (a view goes with the op before it): "
                "split at a node that computes";
    if (*at <= starts.back())
      return found->emitError("split point '")
             << cut << "' is not after "
             << (previous.empty() ? std::string("the first op of the graph")
                                  : "split point '" + previous + "'")
             << ": split points go in program order, and every stage needs "
                "at least one op";
    starts.push_back(*at);
    previous = cut;
  }
  return success();
}

void PartitionPass::runOnOperation() {
  func::FuncOp func = getOperation();
  if (func.isExternal())
    return;
  if (stages < 1) {
    func.emitError("stages must be >= 1, got ") << static_cast<int64_t>(stages);
    return signalPassFailure();
  }
  Block &block = func.getBody().front();
  SmallVector<Operation *> compute;
  for (Operation &op : block.without_terminator())
    if (!isa<nn::ParamOp, nn::ConstantOp>(op))
      compute.push_back(&op);
  // The loss goes last, so it lands on the last stage (nothing reads it: any
  // op after it in the block is independent of it).
  Operation *ret = block.getTerminator();
  for (unsigned i = 0, e = func.getNumResults(); i < e; ++i)
    if (nn::isLoss(func, i))
      if (Operation *loss = ret->getOperand(i).getDefiningOp()) {
        auto it = llvm::find(compute, loss);
        if (it != compute.end() && loss->hasOneUse()) {
          compute.erase(it);
          compute.push_back(loss);
        }
      }
  // Reshapes are views that compute nothing: each rides with the op before
  // it (or after it, at the start), so every stage does real work.
  SmallVector<SmallVector<Operation *>> units;
  bool onlyViews = false;
  for (Operation *op : compute) {
    bool view = isa<nn::ReshapeOp, nn::UpdateRunningStatsOp>(op);
    if (units.empty() || (!view && !onlyViews)) {
      units.push_back({op});
      onlyViews = view;
      continue;
    }
    units.back().push_back(op);
    onlyViews &= view;
  }
  if (static_cast<int64_t>(units.size()) < stages) {
    func.emitError("cannot split ")
        << units.size() << " compute ops into " << static_cast<int64_t>(stages)
        << " stages: every stage needs at least one op (reshapes do not count)";
    return signalPassFailure();
  }
  llvm::DenseSet<Value> active;
  for (Operation &op : block.without_terminator())
    if (isa<nn::ParamOp>(op) || llvm::any_of(op.getOperands(), [&](Value v) {
          return active.contains(v);
        }))
      active.insert(op.getResults().begin(), op.getResults().end());
  SmallVector<double> cost;
  for (auto &unit : units) {
    cost.push_back(0.0);
    for (Operation *op : unit)
      cost.back() += estimateCost(op, active);
  }
  if (!costs.empty() && failed(measuredCosts(func, units, active, cost)))
    return signalPassFailure();
  SmallVector<size_t> starts;
  if (cuts.empty() && memoryPerStage > 0) {
    if (failed(cutsWithinBudget(func, units, cost, starts)))
      return signalPassFailure();
  } else if (cuts.empty()) {
    // Enough units for `stages` groups was checked above: a cut exists.
    starts = *balancedCuts(cost, stages);
  } else if (failed(handCuts(func, units, starts))) {
    return signalPassFailure();
  }

  int64_t stage = 0;
  for (auto [i, unit] : llvm::enumerate(units)) {
    while (stage + 1 < stages && i >= starts[stage + 1])
      ++stage;
    for (Operation *op : unit)
      pipeline::setStage(op, stage);
  }
  // A view of a graph input computes nothing and reads nothing another stage
  // computed: it goes with its first user (a loss's labels then stay a graph
  // input of the loss's stage, which counts them for an ignore_index), not
  // with the op before it. Users first: walk backwards.
  for (Operation &op : llvm::reverse(block)) {
    auto view = dyn_cast<nn::ReshapeOp>(op);
    if (!view || !isa<BlockArgument>(viewRoot(view.getInput())))
      continue;
    if (std::optional<int64_t> first = firstUserStage(view))
      pipeline::setStage(view, *first);
  }
  // Parameters live on the stage of their users; a parameter used on
  // several stages (tied weights) is owned by the first, which sends its
  // value to the others and receives their gradients (gpipe-outline-stages).
  for (Operation &op : block) {
    auto param = dyn_cast<nn::ParamOp>(op);
    if (!param)
      continue;
    if (std::optional<int64_t> at = firstUserStage(param))
      pipeline::setStage(param, *at);
  }
  pipeline::setNumStages(func, stages);
}
