// Lowers one pipeline stage (forward, backward and update functions plus its
// schedule) to a C++ stage program on the runtime.
//
// A printer: it reads lowered IR (gpipe-lower) and decides nothing. Memory
// is gpipe-plan-memory's: every value's offset in the stage's one arena
// (pipe.buffer and friends) and the arena's layout (pipe.memory on the
// stage's pipe.schedule); fusion groups are gpipe-fuse-elementwise's, in-place
// and deferred accumulation gpipe-accumulate-in-place's and
// gpipe-split-weight-grad's, bf16 parameter copies gpipe-bf16-shadows'.
// Reshapes are views of their input's buffer.
#include "compiler/CppEmitter.h"

#include "dialects/nn/CostModel.h"
#include "dialects/nn/NNOps.h"
#include "dialects/pipe/PipeOps.h"
#include "passes/CostTable.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/IRMapping.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <set>

using namespace mlir;
using namespace gpipe;

std::string gpipe::weightFileName(const std::string &name,
                                  std::vector<std::string> &taken) {
  std::string base;
  for (char c : name)
    base += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' ||
             c == '-' || c == '_')
                ? c
                : '_';
  if (base.empty() || base[0] == '.')
    base = "p" + base;
  std::string file = base + ".npy";
  for (int k = 1; llvm::is_contained(taken, file); ++k)
    file = base + "." + std::to_string(k) + ".npy";
  taken.push_back(file);
  return file;
}

namespace {

/// The name a checkpoint gives optimizer state slot `k` of an update (torch's
/// keys): SGD's momentum_buffer, Adam's exp_avg and exp_avg_sq.
const char *stateSlotName(Operation *op, int64_t k) {
  static const char *const sgdSlots[] = {"momentum_buffer"};
  static const char *const adamSlots[] = {"exp_avg", "exp_avg_sq"};
  return (isa<pipeline::SGDUpdateOp>(op) ? sgdSlots : adamSlots)[k];
}

// Loops with at least this many elements are split over the stage's threads
// (OpenMP); smaller ones cost more to wake a team for than they save.
constexpr int64_t kParallelMin = 1 << 15;

/// A float literal of the C++ and CUDA code (infinities as INFINITY).
std::string floatLit(double v) {
  if (std::isinf(v))
    return v > 0 ? "INFINITY" : "(-INFINITY)";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  std::string s = buf;
  if (s.find_first_of(".en") == std::string::npos)
    s += ".0";
  return s + "f";
}

/// min(max(x, min), max) of clip's scalar `x` for the bounds that are set,
/// NaN staying NaN (torch's clamp); a min above the max gives the max.
std::string clipExpr(const std::string &x, std::optional<APFloat> min,
                     std::optional<APFloat> max) {
  std::string lo = min ? floatLit(min->convertToFloat()) : "",
              hi = max ? floatLit(max->convertToFloat()) : "";
  if (min && max && min->convertToFloat() > max->convertToFloat())
    return "(" + x + " != " + x + " ? " + x + " : " + hi + ")";
  std::string y = min ? "(" + x + " < " + lo + " ? " + lo + " : " + x + ")" : x;
  return max ? "(" + x + " > " + hi + " ? " + hi + " : " + y + ")" : y;
}

/// Clip's gradient passes dy where min <= x <= max (for the bounds set).
std::string clipGradExpr(const std::string &x, const std::string &dy,
                         std::optional<APFloat> min,
                         std::optional<APFloat> max) {
  std::string cond;
  if (min)
    cond = x + " >= " + floatLit(min->convertToFloat());
  if (max)
    cond += (cond.empty() ? "" : " && ") + x +
            " <= " + floatLit(max->convertToFloat());
  return "(" + cond + " ? " + dy + " : 0.f)";
}

/// The scalar expression an elementwise op computes from its operands'
/// scalar expressions `a` (in operand order), in C++ or (`cuda`) CUDA device
/// code; nullopt for other ops. With an empty `a` it only answers whether
/// `op` is elementwise.
std::optional<std::string> scalarExpr(Operation *op, ArrayRef<std::string> a,
                                      bool cuda) {
  auto x = [&](size_t k) { return k < a.size() ? a[k] : std::string(); };
  // CUDA device code calls the float math functions by their C names.
  auto call = [&](StringRef fn, const std::string &arg) {
    return (cuda ? fn.str() + "f(" : "std::" + fn.str() + "(") + arg + ")";
  };
  using Expr = std::optional<std::string>;
  return llvm::TypeSwitch<Operation *, Expr>(op)
      .Case([&](nn::AddOp) { return x(0) + " + " + x(1); })
      .Case([&](nn::SubOp) { return x(0) + " - " + x(1); })
      .Case([&](nn::MulOp) { return x(0) + " * " + x(1); })
      .Case([&](nn::DivOp) { return x(0) + " / " + x(1); })
      .Case([&](nn::PowOp o) {
        // torch's special cases of a constant exponent (x * x for x ** 2,
        // ...), which also keep the GELU's x ** 3 off the slow pow.
        if (std::optional<float> e = nn::splatValue(o.getRhs())) {
          if (*e == 2.0f)
            return "(" + x(0) + " * " + x(0) + ")";
          if (*e == 3.0f)
            return "(" + x(0) + " * " + x(0) + " * " + x(0) + ")";
          if (*e == 0.5f)
            return call("sqrt", x(0));
        }
        return (cuda ? "powf(" : "std::pow(") + x(0) + ", " + x(1) + ")";
      })
      // torch.maximum / minimum: NaN if either operand is.
      .Case([&](nn::MaxOp) {
        return "(" + x(0) + " > " + x(1) + " || " + x(0) + " != " + x(0) +
               " ? " + x(0) + " : " + x(1) + ")";
      })
      .Case([&](nn::MinOp) {
        return "(" + x(0) + " < " + x(1) + " || " + x(0) + " != " + x(0) +
               " ? " + x(0) + " : " + x(1) + ")";
      })
      // torch's: dy / 2 on ties, 0 where the other operand wins, else dy.
      .Case([&](nn::MaxGradOp) {
        return "(" + x(0) + " == " + x(1) + " ? " + x(2) + " * 0.5f : (" +
               x(0) + " < " + x(1) + " ? 0.f : " + x(2) + "))";
      })
      .Case([&](nn::MinGradOp) {
        return "(" + x(0) + " == " + x(1) + " ? " + x(2) + " * 0.5f : (" +
               x(0) + " > " + x(1) + " ? 0.f : " + x(2) + "))";
      })
      .Case(
          [&](nn::ClipOp o) { return clipExpr(x(0), o.getMin(), o.getMax()); })
      .Case([&](nn::ClipGradOp o) {
        return clipGradExpr(x(0), x(1), o.getMin(), o.getMax());
      })
      .Case([&](nn::BroadcastToOp) { return x(0); })
      // Masks are f32: 1.0 true, 0.0 false.
      .Case([&](nn::EqualOp) {
        return "(" + x(0) + " == " + x(1) + " ? 1.f : 0.f)";
      })
      .Case([&](nn::NotOp) { return "(" + x(0) + " == 0.f ? 1.f : 0.f)"; })
      .Case(
          [&](nn::IntToFloatOp) { return "static_cast<float>(" + x(0) + ")"; })
      .Case([&](nn::WhereOp) {
        return "(" + x(0) + " != 0.f ? " + x(1) + " : " + x(2) + ")";
      })
      .Case([&](nn::NegOp) { return "-" + x(0); })
      .Case([&](nn::ReluOp) { return x(0) + " > 0.f ? " + x(0) + " : 0.f"; })
      .Case([&](nn::TanhOp) { return call("tanh", x(0)); })
      .Case([&](nn::SigmoidOp) {
        return "1.f / (1.f + " + call("exp", "-" + x(0)) + ")";
      })
      .Case([&](nn::ErfOp) { return call("erf", x(0)); })
      .Case([&](nn::ExpOp) { return call("exp", x(0)); })
      .Case([&](nn::LogOp) { return call("log", x(0)); })
      .Case([&](nn::SqrtOp) { return call("sqrt", x(0)); })
      .Case([&](nn::ReciprocalOp) { return "1.f / " + x(0); })
      .Case([&](nn::AbsOp) { return call("fabs", x(0)); })
      .Case(
          [&](nn::ReluGradOp) { return x(0) + " > 0.f ? " + x(1) + " : 0.f"; })
      .Case([&](nn::TanhGradOp) {
        return x(1) + " * (1.f - " + x(0) + " * " + x(0) + ")";
      })
      .Case([&](nn::SigmoidGradOp) {
        return x(1) + " * (" + x(0) + " * (1.f - " + x(0) + "))";
      })
      // d/dx erf(x) = 2/sqrt(pi) * exp(-x^2)
      // torch's formulas: dy / (2 y), -dy * (y * y), dy * sign(x)
      .Case([&](nn::SqrtGradOp) { return x(1) + " / (2.f * " + x(0) + ")"; })
      .Case([&](nn::ReciprocalGradOp) {
        return "-" + x(1) + " * (" + x(0) + " * " + x(0) + ")";
      })
      .Case([&](nn::AbsGradOp) {
        return x(0) + " > 0.f ? " + x(1) + " : (" + x(0) + " < 0.f ? -" + x(1) +
               " : 0.f)";
      })
      .Case([&](nn::ErfGradOp) {
        return x(1) + " * (1.12837916709551257f * " +
               call("exp", "-" + x(0) + " * " + x(0)) + ")";
      })
      .Default([](Operation *) { return Expr(); });
}

RankedTensorType tensorType(Value v) {
  return cast<RankedTensorType>(v.getType());
}

int64_t bytesOf(Value v) {
  auto t = tensorType(v);
  return t.getNumElements() * (t.getElementType().isF32() ? 4 : 8);
}

/// What the functions of one stage share: the arena's long-lived parts, the
/// generated globals, and the stash layout.
struct StageState {
  EmitOptions options;
  std::string globals;
  llvm::raw_string_ostream gs{globals};
  int counter = 0;
  // --profile: the timed units' initializers (kProfileUnits), and the
  // function being emitted ("forward", ...) and its chunk.
  std::vector<std::string> profileUnits;
  std::string profileOps; // their ops' arrays (kProfileOps<i>)
  std::string profileFunction = "forward";
  int64_t profileChunk = 0;
  /// A new timed unit of `ops` in the current function; its index.
  int32_t addProfileUnit(ArrayRef<Operation *> ops);
  /// `body` between a timer's start and gp_profile_add for a new unit of
  /// `ops`, or `body` alone without --profile.
  std::string timed(ArrayRef<Operation *> ops, const std::string &body) {
    if (!options.profile)
      return body;
    int32_t id = addProfileUnit(ops);
    std::string t = "gp_t" + std::to_string(id);
    return "  const int64_t " + t + " = gp_profile_now();\n" + body +
           "  gp_profile_add(" + std::to_string(id) + ", " + t + ");\n";
  }
  // The memory plan's offsets (gpipe-plan-memory), by parameter name or op.
  llvm::StringMap<int64_t> paramOffset;
  std::vector<std::pair<std::string, RankedTensorType>> paramOrder;
  llvm::DenseMap<Operation *, llvm::SmallVector<int64_t>> optimizerState;
  // The optimizer state tensors, for the program description (checkpoints).
  struct StateDesc {
    std::string param;
    const char *slot;
    int64_t offset;
    int64_t elem = -1; // --shard-optimizer: gp_state_desc::elem
  };
  std::vector<StateDesc> stateDescs;
  // The update clears the accumulators in [clearedBegin, clearedEnd).
  int64_t clearedBegin = 0, clearedEnd = 0;
  // Every gradient accumulator lies in [accumulatorBegin, accumulatorEnd)
  // (plan-memory places them together), empty when there is none.
  int64_t accumulatorBegin = INT64_MAX, accumulatorEnd = 0;
  // --shard-optimizer: the replicas (1: not sharded), the state slots of
  // this replica's share (the schedule's pipe.state), and the parameters the
  // update gathers (gp_shard_param entries: {parameter offset, first float in
  // the accumulators, floats}).
  int64_t shard = 1;
  SmallVector<int64_t> shardState;
  /// The first float of `grad`'s accumulator among the accumulators.
  int64_t accumulatorElem(Value grad) const {
    return (pipeline::getBuffer(grad).getOffset() - accumulatorBegin) / 4;
  }
  std::string shardTable;
  int64_t shardEntries = 0;
  /// A weight gradient dW = G^T X whose GEMM waits for the update
  /// (gpipe-split-weight-grad): each micro-batch's backward copies G and X
  /// into row blocks of `gOffset` and `xOffset`, and the update runs one
  /// GEMM over all M micro-batches.
  struct DeferredGemm {
    int64_t chunk = 0; // the model chunk whose backward deferred it
    std::string param;
    int64_t rows = 0, gCols = 0, xCols = 0; // per micro-batch: G [rows, gCols]
    int64_t gOffset = 0, xOffset = 0;
    int64_t accOffset = 0; // the parameter's accumulator (its chunk's)
    int64_t accBytes = 0;
  };
  llvm::MapVector<Operation *, DeferredGemm> deferred;
  // The schedule has W actions: the deferred GEMMs run there, not in update.
  bool weightActions = false;
  // The stash slots: micro-batch mb uses slot mb % stashSlots, at
  // stashBase + slot * stashBytes.
  int64_t stashBase = 0, stashBytes = 0, stashSlots = 1;
  // The forward function of the chunk being emitted: its arguments are the
  // graph inputs the chunk reads (inputs inputBase.. of the program's), its
  // results the stash its backward's arguments receive.
  func::FuncOp forward;
  int64_t inputBase = 0;
  int64_t microbatches = 1;
  int64_t align = 64; // the memory plan's
  // The micro-batch of the chunk's first forward and first backward action:
  // a `per_step` transfer runs there only.
  int64_t firstForward = 0, firstBackward = 0;
  // The stage (MPI rank) that holds each virtual stage a pipe.send or
  // pipe.recv names.
  llvm::SmallVector<int64_t> stageOf;
  EmittedStage result;

  /// The gp_math of the GEMMs.
  const char *mathMode() const {
    return options.bf16        ? "GP_MATH_BF16"
           : options.allowTf32 ? "GP_MATH_TF32"
                               : "GP_MATH_F32";
  }
  // CUDA, bf16: the bf16 copy of each parameter a GEMM reads.
  llvm::StringMap<int64_t> shadowOffset;
  int64_t scratchBytes = 0; // the runtime's bf16 operand scratch
  std::string initBody;     // statements of init(ctx), null when empty
  std::string shapeArray(ArrayRef<int64_t> shape) {
    std::string name = "shape" + std::to_string(counter++);
    gs << "static const int64_t " << name << "[] = {";
    for (size_t i = 0; i < shape.size(); ++i)
      gs << (i ? ", " : "") << shape[i];
    if (shape.empty())
      gs << "1";
    gs << "};\n";
    return name;
  }
};

/// Where a tensor lives: the arena (A + offset), the current micro-batch's
/// stash slot (S + offset), or a global constant array.
struct Storage {
  enum Kind { Arena, Stash, Const } kind = Arena;
  int64_t offset = 0;
  std::string name;
};

/// Emits one function of a stage as a C++ function body.
class FuncEmitter {
public:
  FuncEmitter(StageState &stage, func::FuncOp func)
      : stage(stage), func(func), os(body) {}
  /// Emits the function's body into `body`.
  LogicalResult run();
  std::string body;
  /// The ONNX node(s) of the unit being emitted, as a C string literal: CUDA
  /// launch checks name them.
  std::string unitNodes = "\"\"";

private:
  /// Where each value lives, from the memory plan's buffers.
  LogicalResult bindStorage();
  LogicalResult emitOp(Operation *op);
  // The printers of single ops (emitOp's TypeSwitch).
  LogicalResult emit(nn::ReduceToOp o);
  LogicalResult emit(nn::ReduceMaxOp o);
  /// A reduction kernel call `fn(in, in_shape, out, out_shape, rank)`, the
  /// result's shape left-padded with 1s to the input's rank.
  void emitReduction(StringRef fn, Value input, Value output);
  LogicalResult emit(nn::BatchMatMulOp o);
  LogicalResult emit(nn::TransposeOp o);
  LogicalResult emit(nn::ConcatOp o);
  LogicalResult emit(nn::SliceOp o);
  LogicalResult emit(nn::GatherOp o);
  LogicalResult emit(nn::ScatterAddOp o);
  LogicalResult emit(nn::SoftmaxOp o);
  LogicalResult emit(nn::DropoutOp o);
  LogicalResult emit(nn::DropoutGradOp o);
  /// gp_dropout of `in` into `out`; the micro-batch's elements follow those
  /// of the micro-batches before it in the mini-batch's tensor.
  void emitDropout(Value in, Value out, APFloat ratio, uint64_t key);
  LogicalResult emit(nn::SoftmaxGradOp o);
  LogicalResult emit(nn::LogSoftmaxOp o);
  LogicalResult emit(nn::LogSoftmaxGradOp o);
  /// A runtime call `fn(ins..., out, outer, n, inner)` on tensors viewed as
  /// [outer, n, inner] around `axis` (the (log-)softmax kernels).
  void emitAlongAxis(StringRef fn, ArrayRef<Value> ins, Value out,
                     int64_t axis);
  LogicalResult emit(nn::LayerNormOp o);
  LogicalResult emit(nn::LayerNormGradOp o);
  LogicalResult emit(nn::LayerNormScaleGradOp o);
  LogicalResult emit(nn::BatchNormOp o);
  LogicalResult emit(nn::BatchNormGradOp o);
  LogicalResult emit(nn::UpdateRunningStatsOp o);
  LogicalResult emit(nn::AttentionOp o);
  LogicalResult emit(nn::AttentionGradOp o);
  LogicalResult emit(nn::MaxPoolOp o);
  LogicalResult emit(nn::MaxPoolGradOp o);
  LogicalResult emit(nn::AvgPoolOp o);
  LogicalResult emit(nn::AvgPoolGradOp o);
  LogicalResult emit(nn::PadOp o);
  LogicalResult emit(nn::ConvOp o);
  LogicalResult emit(nn::ConvInputGradOp o);
  LogicalResult emit(nn::ConvWeightGradOp o);
  std::string convShape(Value x, Value w, Value y, ArrayRef<int64_t> strides,
                        ArrayRef<int64_t> pads, ArrayRef<int64_t> dilations,
                        int64_t group);
  LogicalResult emit(nn::SoftmaxCrossEntropyOp o);
  LogicalResult emit(nn::SoftmaxCrossEntropyGradOp o);
  LogicalResult emit(nn::NllLossOp o);
  LogicalResult emit(nn::NllLossGradOp o);
  /// A loss's forward kernel call `fn(scores, labels, N, C, ignore, norm,
  /// loss extraArgs)`, after the check of labels read from a data file.
  template <typename LossOp>
  LogicalResult emitLoss(LossOp o, StringRef fn, StringRef extraArgs);
  /// Its gradient's `fn([scores,] labels, N, C, ignore, norm, dloss, out)`.
  template <typename GradOp>
  LogicalResult emitLossGrad(GradOp o, StringRef fn, bool readsScores);
  LogicalResult emit(pipeline::SGDUpdateOp o);
  LogicalResult emit(pipeline::AdamUpdateOp o);
  LogicalResult emit(pipeline::SendOp o);
  LogicalResult emit(pipeline::RecvOp o);
  /// "if (mb == F) ": a per-step transfer of a forward or backward runs in
  /// the stage's first such action only.
  std::string perStepGuard(bool perStep) const;
  std::string handoffCopy(Operation *op, Value v, bool perStep, bool toHandoff);
  LogicalResult emit(pipeline::ReportLossOp o);
  LogicalResult emit(pipeline::AccumulateGradOp o);
  /// A deferred weight-gradient GEMM: its operands are kept for the update.
  void emitDeferredGemm(nn::GemmOp o, const StageState::DeferredGemm &d);
  /// `outer` blocks of `count` elements from `src` to `dst`.
  void emitBlockCopy(Value dst, int64_t dstStride, int64_t dstOffset, Value src,
                     int64_t srcStride, int64_t srcOffset, int64_t outer,
                     int64_t count, int64_t elemBytes);
  /// Slot `k` of an update's optimizer state.
  std::string statePtr(Operation *op, int k);
  /// An optimizer update's arguments: the parameter, its gradient, its
  /// `slots` state buffers and the element count; with --shard-optimizer,
  /// those of this replica's share (elements [i0, i1), state from element s
  /// of the share's slots), computed by `prefix` (which opens a block that
  /// `suffix` closes) and recorded in the gather table.
  struct UpdateArgs {
    std::string prefix, suffix, param, grad, count;
    SmallVector<std::string, 2> state;
  };
  FailureOr<UpdateArgs> updateArgs(Operation *op, Value param, Value grad,
                                   int slots);
  std::string ptr(Value v, bool isConst = true);
  LogicalResult formUnits();
  /// A pointer a loop or kernel reads or writes, named `name` inside it.
  struct LoopArg {
    std::string name, elem;
    bool isConst;
    std::string ptr; // its value in the caller
  };
  /// Runs `body` (statements over the element index: `i`, or i0..i(r-1)
  /// when not `flat`) for every index of `shape`: loops (CPU, OpenMP when
  /// large) or a generated kernel launched on the compute stream (CUDA).
  void emitForAll(ArrayRef<int64_t> shape, ArrayRef<LoopArg> args, bool flat,
                  const std::string &body);
  void emitLoop(ArrayRef<int64_t> shape, ArrayRef<Value> ins,
                ArrayRef<Value> outs,
                const std::function<std::string(ArrayRef<std::string>,
                                                ArrayRef<std::string>)> &body);
  void emitElementwise(ArrayRef<Operation *> group);
  /// A GEMM, with `relu` (CUDA) applied in its epilogue.
  void emitGemm(nn::GemmOp gemm, nn::ReluOp relu);
  std::string emitConstant(nn::ConstantOp op);
  /// After an update: the parameter's bf16 copy follows its new value.
  void emitShadowUpdate(Value param) {
    std::string shadow = shadowOf(param);
    if (shadow != "nullptr")
      os << "  gp_cast_bf16(" << ptr(param) << ", (void *)" << shadow.substr(14)
         << ", " << tensorType(param).getNumElements() << ");\n";
  }
  /// The bf16 copy of a parameter (through views) a bf16 GEMM can read.
  std::string shadowOf(Value v) const {
    while (auto r = v.getDefiningOp<nn::ReshapeOp>())
      v = r.getInput();
    if (auto p = v.getDefiningOp<nn::ParamOp>())
      if (auto it = stage.shadowOffset.find(p.getName());
          it != stage.shadowOffset.end())
        return "(const void *)(A + " + std::to_string(it->second) + ")";
    return "nullptr";
  }
  /// init's upload of a host array to the arena.
  static std::string copyToDevice(int64_t offset, const std::string &src,
                                  int64_t bytes) {
    return "  gp_cuda_check(cudaMemcpyAsync(A + " + std::to_string(offset) +
           ", " + src + ", " + std::to_string(bytes) +
           ", cudaMemcpyHostToDevice, gp_cuda_stream()));\n";
  }
  /// A copy of `bytes` bytes inside the arena.
  std::string copyCall(const std::string &dst, const std::string &src,
                       int64_t bytes) const {
    if (stage.options.cuda)
      return "  gp_cuda_check(cudaMemcpyAsync(" + dst + ", " + src + ", " +
             std::to_string(bytes) +
             ", cudaMemcpyDeviceToDevice, gp_cuda_stream()));\n";
    return "  std::memcpy(" + dst + ", " + src + ", " + std::to_string(bytes) +
           ");\n";
  }
  std::string shapeArray(ArrayRef<int64_t> shape) {
    return stage.shapeArray(shape);
  }
  /// The divisor argument of a loss kernel.
  FailureOr<std::string> lossNorm(Operation *op, Value labels,
                                  std::optional<int64_t> ignore, bool sum,
                                  std::optional<uint64_t> microbatches);

  StageState &stage;
  func::FuncOp func;
  llvm::raw_string_ostream os;
  llvm::DenseMap<Value, Storage> storage;
  // GEMM results accumulated straight into their parameter's accumulator.
  llvm::DenseSet<Value> accumulateInPlace;
  // ... of which these are the accumulator's only value: written, not added.
  llvm::DenseSet<Value> overwriteInPlace;
  std::vector<llvm::SmallVector<Operation *>> units;
  llvm::DenseMap<Operation *, int64_t> unitOf;
  llvm::DenseSet<Value> fusedAway;
};

} // namespace

std::string FuncEmitter::emitConstant(nn::ConstantOp op) {
  std::string name = "const" + std::to_string(stage.counter++);
  auto attr = cast<DenseElementsAttr>(op.getValue());
  auto type = tensorType(op.getOutput());
  bool isFloat = type.getElementType().isF32();
  auto &gs = stage.gs;
  gs << "alignas(64) static const " << (isFloat ? "float " : "int64_t ") << name
     << "[" << std::max<int64_t>(type.getNumElements(), 1) << "] = {";
  int64_t i = 0;
  if (isFloat) {
    for (float f : attr.getValues<float>()) {
      char buf[64];
      // Hex floats: the exact bits of the ONNX constant, no decimal rounding.
      std::snprintf(buf, sizeof buf, "%af", static_cast<double>(f));
      gs << (i++ ? ", " : "")
         << (std::isfinite(f)
                 ? buf
                 : (f != f ? "NAN" : (f > 0 ? "INFINITY" : "-INFINITY")));
    }
  } else {
    for (int64_t v : attr.getValues<int64_t>())
      gs << (i++ ? ", " : "") << v << "LL";
  }
  gs << "};\n";
  stage.result.memory.constantBytes += bytesOf(op.getOutput());
  return name;
}

std::string FuncEmitter::ptr(Value v, bool isConst) {
  auto t = tensorType(v);
  std::string elem = t.getElementType().isF32() ? "float" : "int64_t";
  std::string cast =
      std::string("((") + (isConst ? "const " : "") + elem + " *)";
  const Storage &s = storage[v];
  switch (s.kind) {
  case Storage::Const:
    return "((const " + elem + " *)" + s.name + ")";
  case Storage::Stash:
    return cast + "(S + " + std::to_string(s.offset) + "))";
  case Storage::Arena:
    break;
  }
  return cast + "(A + " + std::to_string(s.offset) + "))";
}

/// The graph input (the index of an argument of the stage's `forward`) a
/// loss's `labels` in `func` are read from, through reshapes: in the
/// backward, whose arguments are the forward's results (the stash), through
/// the forward's returned value. Nullopt for computed labels.
static std::optional<int64_t> labelInputOf(func::FuncOp forward,
                                           func::FuncOp func, Value labels) {
  auto argumentOf = [](Value v) {
    while (auto r = v.getDefiningOp<nn::ReshapeOp>())
      v = r.getInput();
    return dyn_cast<BlockArgument>(v);
  };
  BlockArgument arg = argumentOf(labels);
  if (arg && func != forward) {
    Operation *ret = forward.getBody().front().getTerminator();
    arg = arg.getArgNumber() < ret->getNumOperands()
              ? argumentOf(ret->getOperand(arg.getArgNumber()))
              : BlockArgument();
  }
  if (!arg || !nn::getInputName(forward, arg.getArgNumber()))
    return std::nullopt;
  return arg.getArgNumber();
}

FailureOr<std::string>
FuncEmitter::lossNorm(Operation *op, Value labels,
                      std::optional<int64_t> ignore, bool sum,
                      std::optional<uint64_t> microbatches) {
  if (sum)
    return std::string("1.0"); // each micro-batch's share is its own sum
  if (!microbatches || *microbatches <= 1)
    return std::string("0.0"); // the mean over this call's labels
  int64_t n = tensorType(labels).getDimSize(0);
  if (!ignore)
    return std::to_string(n * static_cast<int64_t>(*microbatches)) + ".0";
  std::optional<int64_t> input = labelInputOf(stage.forward, func, labels);
  if (!input)
    return op->emitError("with micro-batches, the labels of a loss with "
                         "ignore_index must be a graph input read by the "
                         "loss's stage"),
           failure();
  return "static_cast<double>(gp_count_labels(ctx, " +
         std::to_string(stage.inputBase + *input) + ", 1, " +
         std::to_string(*ignore) + "LL))";
}

LogicalResult FuncEmitter::formUnits() {
  // The fusion groups gpipe-fuse-elementwise marked (pipe.fused = N).
  pipeline::FusionUnits fu = pipeline::getFusionUnits(func.getBody().front());
  units = std::move(fu.units);
  unitOf = std::move(fu.unitOf);
  fusedAway = std::move(fu.internal);
  // What the printers can emit as one unit: elementwise ops of one result
  // shape (a loop or kernel), or (CUDA) a GEMM and the relu of its
  // epilogue.
  for (auto &unit : units) {
    if (unit.size() < 2)
      continue;
    auto gemm = dyn_cast<nn::GemmOp>(unit.front());
    bool epilogue = stage.options.cuda && gemm && unit.size() == 2 &&
                    isa<nn::ReluOp>(unit[1]) &&
                    unit[1]->getOperand(0) == gemm.getOutput() &&
                    gemm.getOutput().hasOneUse();
    bool elementwise = llvm::all_of(unit, [&](Operation *op) {
      return op->hasTrait<nn::Fusible>() &&
             op->getResult(0).getType() == unit.front()->getResult(0).getType();
    });
    if (!epilogue && !elementwise)
      return unit.front()->emitError(
          "code generation cannot emit this fusion group (pipe.fused) as one "
          "unit: it needs elementwise ops of one result shape, or on CUDA a "
          "GEMM and the relu that is its only reader");
  }
  return success();
}

LogicalResult FuncEmitter::bindStorage() {
  Block &block = func.getBody().front();
  auto bind = [&](Value v, Operation *where) -> LogicalResult {
    pipeline::BufferAttr b = pipeline::getBuffer(v);
    if (!b)
      return where->emitError("code generation needs the memory plan: this "
                              "value has no pipe.buffer (run gpipe-lower, "
                              "which runs gpipe-plan-memory)");
    storage[v] = {b.getSpace() == pipeline::BufferSpace::Stash ? Storage::Stash
                                                               : Storage::Arena,
                  b.getOffset(), ""};
    return success();
  };
  for (BlockArgument arg : block.getArguments())
    if (failed(bind(arg, func)))
      return failure();
  for (Operation &op : block) {
    if (auto c = dyn_cast<nn::ConstantOp>(op)) {
      std::string name = emitConstant(c);
      if (!stage.options.cuda) {
        storage[c.getOutput()] = {Storage::Const, 0, name};
        continue;
      }
      // Kernels cannot read host arrays: init copies it into the arena.
      if (failed(bind(c.getOutput(), c)))
        return failure();
      stage.initBody += copyToDevice(storage[c.getOutput()].offset, name,
                                     bytesOf(c.getOutput()));
    } else if (auto r = dyn_cast<nn::ReshapeOp>(op)) {
      // A view. Copied first: inserting the output may grow the map and
      // free the input's entry under a reference to it.
      Storage input = storage[r.getInput()];
      storage[r.getOutput()] = input;
    } else {
      for (Value res : op.getResults())
        if (!fusedAway.contains(res) && failed(bind(res, &op)))
          return failure();
    }
  }
  // A GEMM whose only reader is an accumulation adds into (or writes) the
  // accumulator (gpipe-accumulate-in-place).
  for (Operation &op : block)
    if (auto acc = dyn_cast<pipeline::AccumulateGradOp>(op);
        acc && acc.getInPlace()) {
      accumulateInPlace.insert(acc.getGrad());
      if (acc.getOverwrite())
        overwriteInPlace.insert(acc.getGrad());
    }
  return success();
}

void FuncEmitter::emitElementwise(ArrayRef<Operation *> group) {
  // Operands from outside the group are loaded, values used only inside it
  // stay in registers, values read after it are stored.
  llvm::DenseSet<Operation *> members(group.begin(), group.end());
  llvm::SmallVector<Value> ins, outs;
  for (Operation *op : group)
    for (Value v : op->getOperands())
      if (!members.contains(v.getDefiningOp()) && !llvm::is_contained(ins, v))
        ins.push_back(v);
  for (Operation *op : group)
    if (!fusedAway.contains(op->getResult(0)))
      outs.push_back(op->getResult(0));
  auto shape = tensorType(group.front()->getResult(0)).getShape();
  emitLoop(shape, ins, outs,
           [&](ArrayRef<std::string> inRefs, ArrayRef<std::string> outRefs) {
             llvm::DenseMap<Value, std::string> names;
             for (auto [k, v] : llvm::enumerate(ins))
               names[v] = inRefs[k];
             std::string text;
             for (auto [k, op] : llvm::enumerate(group)) {
               llvm::SmallVector<std::string> args;
               for (Value v : op->getOperands())
                 args.push_back(names.lookup(v));
               std::string var = "v" + std::to_string(k);
               text += "      const float " + var + " = " +
                       *scalarExpr(op, args, stage.options.cuda) + ";\n";
               names[op->getResult(0)] = var;
             }
             for (auto [k, v] : llvm::enumerate(outs))
               text += "      " + outRefs[k] + " = " + names.lookup(v) + ";\n";
             return text;
           });
}

void FuncEmitter::emitForAll(ArrayRef<int64_t> shape, ArrayRef<LoopArg> args,
                             bool flat, const std::string &body) {
  int64_t rank = shape.size();
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  if (n == 0)
    return;
  if (stage.options.cuda) {
    // A kernel of its own: one thread per element, grid-stride.
    std::string name = "kernel" + std::to_string(stage.counter++);
    auto &gs = stage.gs;
    gs << "__global__ void __launch_bounds__(256) " << name << "(";
    for (auto [k, a] : llvm::enumerate(args))
      gs << (k ? ", " : "") << (a.isConst ? "const " : "") << a.elem
         << " *__restrict__ " << a.name;
    gs << ") {\n  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + "
          "threadIdx.x; i < "
       << n << "LL; i += (int64_t)gridDim.x * blockDim.x) {\n";
    if (!flat && rank > 0) {
      gs << "    int64_t r = i;\n";
      for (int64_t d = rank - 1; d >= 0; --d) {
        if (d == 0) {
          gs << "    const int64_t i0 = r;\n";
          break;
        }
        gs << "    const int64_t i" << d << " = r % " << shape[d] << "LL;\n"
           << "    r /= " << shape[d] << "LL;\n";
      }
    }
    gs << body << "  }\n}\n";
    int64_t blocks = std::min<int64_t>((n + 255) / 256, 65535);
    os << "  " << name << "<<<" << blocks << ", 256, 0, gp_cuda_stream()>>>(";
    for (auto [k, a] : llvm::enumerate(args))
      os << (k ? ", " : "") << a.ptr;
    os << ");\n  gp_cuda_check_launch(\"" << name << "\", " << unitNodes
       << ");\n";
    return;
  }
  os << "  {\n";
  for (const LoopArg &a : args)
    os << "    " << (a.isConst ? "const " : "") << a.elem << " *" << a.name
       << " = " << a.ptr << ";\n";
  if (flat || rank == 0) {
    if (n >= kParallelMin)
      os << "#pragma omp parallel for schedule(static)\n";
    os << "    for (int64_t i = 0; i < " << n << "; ++i) {\n"
       << body << "    }\n  }\n";
    return;
  }
  if (n >= kParallelMin && shape[0] > 1)
    os << "#pragma omp parallel for schedule(static)\n";
  for (int64_t d = 0; d < rank; ++d)
    os << std::string(4 + 2 * d, ' ') << "for (int64_t i" << d << " = 0; i" << d
       << " < " << shape[d] << "; ++i" << d << ")"
       << (d + 1 == rank ? " {" : "") << "\n";
  os << body << "    }\n  }\n";
}

void FuncEmitter::emitLoop(
    ArrayRef<int64_t> shape, ArrayRef<Value> ins, ArrayRef<Value> outs,
    const std::function<std::string(ArrayRef<std::string>,
                                    ArrayRef<std::string>)> &body) {
  int64_t rank = shape.size();
  llvm::SmallVector<LoopArg> args;
  for (auto [k, v] : llvm::enumerate(outs))
    args.push_back({"o" + std::to_string(k), "float", false, ptr(v, false)});
  for (auto [k, v] : llvm::enumerate(ins))
    args.push_back(
        {"x" + std::to_string(k),
         tensorType(v).getElementType().isF32() ? "float" : "int64_t", true,
         ptr(v)});
  // One flat loop unless an operand broadcasts along some (not all) dims.
  auto isScalar = [](Value v) { return tensorType(v).getNumElements() == 1; };
  bool flat = llvm::all_of(ins, [&](Value v) {
    return tensorType(v).getShape() == shape || isScalar(v);
  });
  llvm::SmallVector<std::string> inRefs, outRefs;
  if (flat || rank == 0) {
    for (auto [k, v] : llvm::enumerate(ins))
      inRefs.push_back(
          "x" + std::to_string(k) +
          (isScalar(v) && tensorType(v).getShape() != shape ? "[0]" : "[i]"));
    for (size_t k = 0; k < outs.size(); ++k)
      outRefs.push_back("o" + std::to_string(k) + "[i]");
    emitForAll(shape, args, /*flat=*/true, body(inRefs, outRefs));
    return;
  }
  // Broadcast: each operand indexed with stride 0 on the dimensions it
  // broadcasts along.
  for (auto [k, v] : llvm::enumerate(ins)) {
    auto vs = tensorType(v).getShape();
    int64_t lead = rank - vs.size();
    std::string idx;
    int64_t stride = 1;
    for (int64_t d = rank - 1; d >= lead; --d) {
      int64_t size = vs[d - lead];
      if (size != 1)
        idx += (idx.empty() ? "" : " + ") + std::string("i") +
               std::to_string(d) + " * " + std::to_string(stride);
      stride *= size;
    }
    inRefs.push_back("x" + std::to_string(k) + "[" + (idx.empty() ? "0" : idx) +
                     "]");
  }
  std::string outIdx;
  int64_t stride = 1;
  for (int64_t d = rank - 1; d >= 0; --d) {
    outIdx += (outIdx.empty() ? "" : " + ") + std::string("i") +
              std::to_string(d) + " * " + std::to_string(stride);
    stride *= shape[d];
  }
  for (size_t k = 0; k < outs.size(); ++k)
    outRefs.push_back("o" + std::to_string(k) + "[" + outIdx + "]");
  emitForAll(shape, args, /*flat=*/false, body(inRefs, outRefs));
}

void FuncEmitter::emitGemm(nn::GemmOp o, nn::ReluOp relu) {
  // With a fused relu the GEMM writes the relu's result (its own is never
  // stored).
  Value result = relu ? relu.getOutput() : o.getOutput();
  auto at = tensorType(o.getA()), bt = tensorType(o.getB());
  auto out = tensorType(o.getOutput());
  int64_t m = out.getDimSize(0), n = out.getDimSize(1);
  int64_t k = o.getTransA() ? at.getDimSize(0) : at.getDimSize(1);
  float beta = accumulateInPlace.contains(o.getOutput()) &&
                       !overwriteInPlace.contains(o.getOutput())
                   ? 1.f
                   : 0.f;
  std::string bias = "nullptr";
  if (stage.options.cuda && o.getC() && o.getBeta().convertToFloat() == 1.f) {
    // A bias row added to every output row: cuBLASLt's bias epilogue.
    auto ct = tensorType(o.getC());
    if ((ct.getRank() == 1 && ct.getDimSize(0) == n) ||
        (ct.getRank() == 2 && ct.getDimSize(0) == 1 && ct.getDimSize(1) == n))
      bias = ptr(o.getC());
  }
  if (o.getC() && bias == "nullptr") {
    // out = beta * broadcast(C), then the GEMM accumulates into it.
    float cb = o.getBeta().convertToFloat();
    Value c = o.getC();
    emitLoop(out.getShape(), {c}, {result},
             [cb](ArrayRef<std::string> in, ArrayRef<std::string> out) {
               return "      " + out[0] + " = " +
                      (cb == 1.f ? in[0] : floatLit(cb) + " * " + in[0]) +
                      ";\n";
             });
    beta = 1.f;
  }
  bool ex = stage.options.cuda || stage.options.bf16;
  os << (ex ? "  gp_gemm_ex(" : "  gp_gemm(") << o.getTransA() << ", "
     << o.getTransB() << ", " << m << ", " << n << ", " << k << ", "
     << floatLit(o.getAlpha().convertToFloat()) << ", " << ptr(o.getA()) << ", "
     << at.getDimSize(1) << ", " << ptr(o.getB()) << ", " << bt.getDimSize(1)
     << ", " << floatLit(beta) << ", " << ptr(result, false) << ", " << n;
  if (ex)
    os << ", " << bias << ", " << (relu ? 1 : 0) << ", " << stage.mathMode()
       << ", " << shadowOf(o.getA()) << ", " << shadowOf(o.getB());
  os << ");\n";
}

// The batch dims broadcast: an operand's stride along a result batch dim it
// lacks or has as 1 is 0, so each of its matrices serves every index there.
LogicalResult FuncEmitter::emit(nn::BatchMatMulOp o) {
  auto at = tensorType(o.getA()), bt = tensorType(o.getB());
  auto out = tensorType(o.getOutput());
  int64_t rank = out.getRank();
  ArrayRef<int64_t> batch = out.getShape().drop_back(2);
  auto batchStrides = [&](RankedTensorType t) {
    SmallVector<int64_t> strides(batch.size(), 0);
    int64_t lead = rank - t.getRank(), stride = 1;
    for (int64_t d = t.getRank() - 1; d >= 0; --d) {
      if (d < t.getRank() - 2 && t.getDimSize(d) != 1)
        strides[d + lead] = stride;
      stride *= t.getDimSize(d);
    }
    return strides;
  };
  int64_t k = o.getTransA() ? at.getDimSize(at.getRank() - 2)
                            : at.getDimSize(at.getRank() - 1);
  os << "  gp_batch_gemm(" << o.getTransA() << ", " << o.getTransB() << ", "
     << out.getDimSize(rank - 2) << ", " << out.getDimSize(rank - 1) << ", "
     << k << ", " << ptr(o.getA()) << ", " << ptr(o.getB()) << ", "
     << ptr(o.getOutput(), false) << ", " << batch.size() << ", "
     << shapeArray(batch) << ", " << shapeArray(batchStrides(at)) << ", "
     << shapeArray(batchStrides(bt)) << ", " << stage.mathMode() << ");\n";
  return success();
}

// One printer per op: emitOp dispatches with a TypeSwitch.
LogicalResult FuncEmitter::emitOp(Operation *op) {
  // Ops that only name storage (views, values) emit nothing.
  if (isa<nn::ParamOp, nn::ConstantOp, nn::ReshapeOp, func::ReturnOp,
          pipeline::AccumulatedGradOp>(op))
    return success();
  // A comment naming the ONNX node keeps the generated code traceable.
  os << "  // " << op->getName();
  if (auto name = dyn_cast<NameLoc>(op->getLoc()))
    os << " (node '" << name.getName().getValue() << "')";
  os << "\n";
  if (scalarExpr(op, {}, false))
    return emitElementwise(ArrayRef<Operation *>(op)), success();
  if (auto it = stage.deferred.find(op); it != stage.deferred.end())
    return emitDeferredGemm(cast<nn::GemmOp>(op), it->second), success();
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](nn::GemmOp o) { return emitGemm(o, nullptr), success(); })
      .Case<nn::ReduceToOp, nn::ReduceMaxOp, nn::BatchMatMulOp, nn::TransposeOp,
            nn::ConcatOp, nn::SliceOp, nn::GatherOp, nn::ScatterAddOp,
            nn::SoftmaxOp, nn::SoftmaxGradOp, nn::LogSoftmaxOp,
            nn::LogSoftmaxGradOp, nn::DropoutOp, nn::DropoutGradOp,
            nn::LayerNormOp, nn::LayerNormGradOp, nn::LayerNormScaleGradOp,
            nn::BatchNormOp, nn::BatchNormGradOp, nn::UpdateRunningStatsOp,
            nn::AttentionOp, nn::AttentionGradOp, nn::MaxPoolOp,
            nn::MaxPoolGradOp, nn::AvgPoolOp, nn::AvgPoolGradOp, nn::PadOp,
            nn::ConvOp, nn::ConvInputGradOp, nn::ConvWeightGradOp,
            nn::SoftmaxCrossEntropyOp, nn::SoftmaxCrossEntropyGradOp,
            nn::NllLossOp, nn::NllLossGradOp, pipeline::SGDUpdateOp,
            pipeline::AdamUpdateOp, pipeline::SendOp, pipeline::RecvOp,
            pipeline::ReportLossOp, pipeline::AccumulateGradOp>(
          [&](auto o) { return emit(o); })
      .Default([&](Operation *) {
        return op->emitError("code generation does not support '")
               << op->getName() << "' yet";
      });
}

void FuncEmitter::emitDeferredGemm(nn::GemmOp o,
                                   const StageState::DeferredGemm &d) {
  os << "  // weight gradient of '" << d.param << "': operands kept for "
     << (stage.weightActions ? "its W action's GEMM\n" : "the update's GEMM\n");
  os << copyCall("A + " + std::to_string(d.gOffset) + " + mb * " +
                     std::to_string(d.rows * d.gCols * 4) + "LL",
                 ptr(o.getA()), d.rows * d.gCols * 4);
  os << copyCall("A + " + std::to_string(d.xOffset) + " + mb * " +
                     std::to_string(d.rows * d.xCols * 4) + "LL",
                 ptr(o.getB()), d.rows * d.xCols * 4);
}

void FuncEmitter::emitReduction(StringRef fn, Value input, Value output) {
  auto in = tensorType(input), out = tensorType(output);
  llvm::SmallVector<int64_t> padded(in.getRank() - out.getRank(), 1);
  padded.append(out.getShape().begin(), out.getShape().end());
  if (in.getRank() == 0) {
    os << copyCall(ptr(output, false), ptr(input), 4);
    return;
  }
  os << "  " << fn << "(" << ptr(input) << ", " << shapeArray(in.getShape())
     << ", " << ptr(output, false) << ", " << shapeArray(padded) << ", "
     << in.getRank() << ");\n";
}

LogicalResult FuncEmitter::emit(nn::ReduceToOp o) {
  emitReduction("gp_reduce_to", o.getInput(), o.getOutput());
  return success();
}

LogicalResult FuncEmitter::emit(nn::ReduceMaxOp o) {
  emitReduction("gp_reduce_max", o.getInput(), o.getOutput());
  return success();
}

void FuncEmitter::emitBlockCopy(Value dst, int64_t dstStride, int64_t dstOffset,
                                Value src, int64_t srcStride, int64_t srcOffset,
                                int64_t outer, int64_t count,
                                int64_t elemBytes) {
  os << "  gp_copy_blocks(" << ptr(dst, false) << " + " << dstOffset << ", "
     << dstStride << ", " << ptr(src) << " + " << srcOffset << ", " << srcStride
     << ", " << outer << ", " << count << ", " << elemBytes << ");\n";
}

/// The product of the dimensions before and after `axis`.
static std::pair<int64_t, int64_t> outerInner(RankedTensorType t,
                                              int64_t axis) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < t.getRank(); ++d) {
    if (d < axis)
      outer *= t.getDimSize(d);
    if (d > axis)
      inner *= t.getDimSize(d);
  }
  return {outer, inner};
}

void FuncEmitter::emitDropout(Value in, Value out, APFloat ratio,
                              uint64_t key) {
  int64_t n = tensorType(out).getNumElements();
  os << "  gp_dropout(ctx, " << key << "ULL, "
     << floatLit(ratio.convertToFloat()) << ", " << ptr(in) << ", "
     << ptr(out, false) << ", " << n << ", mb * " << n << "LL);\n";
}

LogicalResult FuncEmitter::emit(nn::DropoutOp o) {
  emitDropout(o.getInput(), o.getOutput(), o.getRatio(),
              static_cast<uint64_t>(o.getKey()));
  return success();
}

LogicalResult FuncEmitter::emit(nn::DropoutGradOp o) {
  emitDropout(o.getGrad(), o.getOutput(), o.getRatio(),
              static_cast<uint64_t>(o.getKey()));
  return success();
}

/// The graph input `v` is read from, through reshapes (labels, token ids),
/// or null.
static BlockArgument dataInputOf(func::FuncOp func, Value v) {
  while (auto r = v.getDefiningOp<nn::ReshapeOp>())
    v = r.getInput();
  auto arg = dyn_cast<BlockArgument>(v);
  return arg && nn::getInputName(func, arg.getArgNumber()) ? arg
                                                           : BlockArgument();
}

/// The kernels' view of a gather: positions, table rows, row width.
static std::array<int64_t, 3> gatherDims(Value table, Value indices) {
  auto t = tensorType(table);
  return {tensorType(indices).getNumElements(), t.getDimSize(0),
          t.getNumElements() / std::max<int64_t>(t.getDimSize(0), 1)};
}

LogicalResult FuncEmitter::emit(nn::GatherOp o) {
  auto [n, rows, width] = gatherDims(o.getTable(), o.getIndices());
  // Indices read from a data file (token ids) are checked on the host, so
  // a bad one is an error naming the input and sample, not a zero row.
  if (BlockArgument arg = dataInputOf(func, o.getIndices()))
    os << "  gp_check_input_indices(ctx, "
       << stage.inputBase + arg.getArgNumber() << ", mb, " << rows << ");\n";
  os << "  gp_gather(" << ptr(o.getTable()) << ", " << ptr(o.getIndices())
     << ", " << ptr(o.getOutput(), false) << ", " << n << ", " << rows << ", "
     << width << ");\n";
  return success();
}

LogicalResult FuncEmitter::emit(nn::ScatterAddOp o) {
  auto [n, rows, width] = gatherDims(o.getOutput(), o.getIndices());
  os << "  gp_scatter_add(" << ptr(o.getGrad()) << ", " << ptr(o.getIndices())
     << ", " << ptr(o.getOutput(), false) << ", " << n << ", " << rows << ", "
     << width << ");\n";
  return success();
}

void FuncEmitter::emitAlongAxis(StringRef fn, ArrayRef<Value> ins, Value out,
                                int64_t axis) {
  auto t = tensorType(out);
  auto [outer, inner] = outerInner(t, axis);
  os << "  " << fn << "(";
  for (Value in : ins)
    os << ptr(in) << ", ";
  os << ptr(out, false) << ", " << outer << ", " << t.getDimSize(axis) << ", "
     << inner << ");\n";
}

LogicalResult FuncEmitter::emit(nn::SoftmaxOp o) {
  emitAlongAxis("gp_softmax", {o.getInput()}, o.getOutput(), o.getAxis());
  return success();
}

LogicalResult FuncEmitter::emit(nn::SoftmaxGradOp o) {
  emitAlongAxis("gp_softmax_bwd", {o.getValue(), o.getGrad()}, o.getOutput(),
                o.getAxis());
  return success();
}

LogicalResult FuncEmitter::emit(nn::LogSoftmaxOp o) {
  emitAlongAxis("gp_log_softmax", {o.getInput()}, o.getOutput(), o.getAxis());
  return success();
}

LogicalResult FuncEmitter::emit(nn::LogSoftmaxGradOp o) {
  emitAlongAxis("gp_log_softmax_bwd", {o.getValue(), o.getGrad()},
                o.getOutput(), o.getAxis());
  return success();
}

/// A layer normalization's view of `x` as [rows, n]: the rows are its
/// leading axes [0, axis), n the product of the normalized ones.
static std::string rowsAndLength(Value x, int64_t axis) {
  auto t = tensorType(x);
  auto [rows, inner] = outerInner(t, axis);
  return std::to_string(rows) + ", " +
         std::to_string(t.getDimSize(axis) * inner);
}

LogicalResult FuncEmitter::emit(nn::LayerNormOp o) {
  os << "  gp_layer_norm(" << ptr(o.getInput()) << ", " << ptr(o.getScale())
     << ", " << (o.getBias() ? ptr(o.getBias()) : "nullptr") << ", "
     << ptr(o.getOutput(), false) << ", " << ptr(o.getMean(), false) << ", "
     << ptr(o.getInvStdDev(), false) << ", "
     << rowsAndLength(o.getInput(), o.getAxis()) << ", "
     << floatLit(o.getEpsilon().convertToDouble()) << ");\n";
  return success();
}

LogicalResult FuncEmitter::emit(nn::LayerNormGradOp o) {
  os << "  gp_layer_norm_bwd(" << ptr(o.getInput()) << ", " << ptr(o.getMean())
     << ", " << ptr(o.getInvStdDev()) << ", " << ptr(o.getScale()) << ", "
     << ptr(o.getGrad()) << ", " << ptr(o.getOutput(), false) << ", "
     << rowsAndLength(o.getInput(), o.getAxis()) << ");\n";
  return success();
}

LogicalResult FuncEmitter::emit(nn::LayerNormScaleGradOp o) {
  os << "  gp_layer_norm_scale_bwd(" << ptr(o.getInput()) << ", "
     << ptr(o.getMean()) << ", " << ptr(o.getInvStdDev()) << ", "
     << ptr(o.getGrad()) << ", " << ptr(o.getOutput(), false) << ", "
     << rowsAndLength(o.getInput(), o.getAxis()) << ");\n";
  return success();
}

/// A batch normalization's view of `x` as [n, c, s]: "n, c, s".
static std::string batchNormDims(Value x) {
  auto t = tensorType(x);
  int64_t spatial = 1;
  for (int64_t k = 2; k < t.getRank(); ++k)
    spatial *= t.getDimSize(k);
  return std::to_string(t.getDimSize(0)) + ", " +
         std::to_string(t.getDimSize(1)) + ", " + std::to_string(spatial);
}

LogicalResult FuncEmitter::emit(nn::BatchNormOp o) {
  // An evaluation forward (ctx->eval) normalizes with the running statistics
  // its nn.update_running_stats updates in training.
  nn::UpdateRunningStatsOp update;
  for (Operation *user : o.getMean().getUsers())
    if (auto u = dyn_cast<nn::UpdateRunningStatsOp>(user))
      update = u;
  if (update)
    os << "  if (ctx->eval)\n    gp_batch_norm_eval(" << ptr(o.getInput())
       << ", " << ptr(update.getRunningMean()) << ", "
       << ptr(update.getRunningVar()) << ", " << ptr(o.getScale()) << ", "
       << ptr(o.getBias()) << ", " << ptr(o.getOutput(), false) << ", "
       << batchNormDims(o.getInput()) << ", "
       << floatLit(o.getEpsilon().convertToDouble()) << ");\n  else\n  ";
  os << "  gp_batch_norm(" << ptr(o.getInput()) << ", " << ptr(o.getScale())
     << ", " << ptr(o.getBias()) << ", " << ptr(o.getOutput(), false) << ", "
     << ptr(o.getMean(), false) << ", " << ptr(o.getVar(), false) << ", "
     << batchNormDims(o.getInput()) << ", "
     << floatLit(o.getEpsilon().convertToDouble()) << ");\n";
  return success();
}

LogicalResult FuncEmitter::emit(nn::BatchNormGradOp o) {
  // A result nobody reads (the input gradient of a first layer) is not
  // computed.
  auto out = [&](Value v) {
    return v.use_empty() ? std::string("nullptr") : ptr(v, false);
  };
  os << "  gp_batch_norm_bwd(" << ptr(o.getInput()) << ", " << ptr(o.getMean())
     << ", " << ptr(o.getVar()) << ", " << ptr(o.getScale()) << ", "
     << ptr(o.getGrad()) << ", " << out(o.getInputGrad()) << ", "
     << out(o.getScaleGrad()) << ", " << out(o.getBiasGrad()) << ", "
     << batchNormDims(o.getInput()) << ", "
     << floatLit(o.getEpsilon().convertToDouble()) << ");\n";
  return success();
}

LogicalResult FuncEmitter::emit(nn::UpdateRunningStatsOp o) {
  int64_t m = o.getMicrobatches();
  os << "  if (!ctx->eval)\n    gp_batch_norm_update("
     << ptr(o.getRunningMean(), false) << ", " << ptr(o.getRunningVar(), false)
     << ", " << ptr(o.getMean()) << ", " << ptr(o.getVar()) << ", "
     << (m > 1 ? statePtr(o, 0) : "nullptr") << ", "
     << tensorType(o.getMean()).getDimSize(0) << ", " << o.getCount() << ", "
     << floatLit(o.getMomentum().convertToDouble()) << ", " << m << ", mb);\n";
  return success();
}

/// An attention's shape arguments: batch (the leading axes' product), Tq,
/// Tk, d, dv, then the scale.
static std::string attentionDims(Value q, Value k, Value v, APFloat scale) {
  auto tq = tensorType(q);
  int64_t rank = tq.getRank();
  int64_t tQ = tq.getDimSize(rank - 2), d = tq.getDimSize(rank - 1);
  int64_t tK = tensorType(k).getDimSize(rank - 2);
  int64_t dv = tensorType(v).getDimSize(rank - 1);
  return std::to_string(tq.getNumElements() / (tQ * d)) + ", " +
         std::to_string(tQ) + ", " + std::to_string(tK) + ", " +
         std::to_string(d) + ", " + std::to_string(dv) + ", " +
         floatLit(scale.convertToDouble());
}

LogicalResult FuncEmitter::emit(nn::AttentionOp o) {
  os << "  gp_attention_fwd(" << ptr(o.getQ()) << ", " << ptr(o.getK()) << ", "
     << ptr(o.getV()) << ", " << (o.getMask() ? ptr(o.getMask()) : "nullptr")
     << ", " << ptr(o.getOutput(), false) << ", " << ptr(o.getLse(), false)
     << ", " << attentionDims(o.getQ(), o.getK(), o.getV(), o.getScale())
     << ");\n";
  return success();
}

LogicalResult FuncEmitter::emit(nn::AttentionGradOp o) {
  os << "  gp_attention_bwd(" << ptr(o.getQ()) << ", " << ptr(o.getK()) << ", "
     << ptr(o.getV()) << ", " << (o.getMask() ? ptr(o.getMask()) : "nullptr")
     << ", " << ptr(o.getOutput()) << ", " << ptr(o.getLse()) << ", "
     << ptr(o.getDout()) << ", " << ptr(o.getDq(), false) << ", "
     << ptr(o.getDk(), false) << ", " << ptr(o.getDv(), false) << ", "
     << attentionDims(o.getQ(), o.getK(), o.getV(), o.getScale()) << ");\n";
  return success();
}

/// The gp_pool_window of a pool from `in` to `out` (1-D: a 1-high plane).
static std::string poolWindow(RankedTensorType in, RankedTensorType out,
                              ArrayRef<int64_t> kernel,
                              ArrayRef<int64_t> strides, ArrayRef<int64_t> pads,
                              ArrayRef<int64_t> dilations) {
  bool is1d = in.getRank() == 3;
  size_t s = kernel.size(), w = s - 1;
  auto h = [&](int64_t v, int64_t dflt) {
    return std::to_string(is1d ? dflt : v);
  };
  return "gp_pool_window{" + h(in.getDimSize(2), 1) + ", " +
         std::to_string(in.getDimSize(in.getRank() - 1)) + ", " +
         h(out.getDimSize(2), 1) + ", " +
         std::to_string(out.getDimSize(out.getRank() - 1)) + ", " +
         h(kernel[0], 1) + ", " + std::to_string(kernel[w]) + ", " +
         h(strides[0], 1) + ", " + std::to_string(strides[w]) + ", " +
         h(pads[0], 0) + ", " + std::to_string(pads[w]) + ", " + h(pads[s], 0) +
         ", " + std::to_string(pads[s + w]) + ", " + h(dilations[0], 1) + ", " +
         std::to_string(dilations[w]) + "}";
}

/// The [n, c] planes of a pool's input.
static int64_t poolPlanes(Value v) {
  auto t = tensorType(v);
  return t.getDimSize(0) * t.getDimSize(1);
}

LogicalResult FuncEmitter::emit(nn::MaxPoolOp o) {
  os << "  gp_max_pool(" << ptr(o.getInput()) << ", "
     << ptr(o.getOutput(), false) << ", " << ptr(o.getIndices(), false) << ", "
     << poolPlanes(o.getInput()) << ", "
     << poolWindow(tensorType(o.getInput()), tensorType(o.getOutput()),
                   o.getKernelShape(), o.getStrides(), o.getPads(),
                   o.getDilations())
     << ");\n";
  return success();
}

LogicalResult FuncEmitter::emit(nn::MaxPoolGradOp o) {
  int64_t planes = poolPlanes(o.getOutput());
  os << "  gp_max_pool_bwd(" << ptr(o.getIndices()) << ", " << ptr(o.getGrad())
     << ", " << ptr(o.getOutput(), false) << ", " << planes << ", "
     << tensorType(o.getOutput()).getNumElements() / planes << ", "
     << tensorType(o.getGrad()).getNumElements() / planes << ");\n";
  return success();
}

LogicalResult FuncEmitter::emit(nn::AvgPoolOp o) {
  os << "  gp_avg_pool(" << ptr(o.getInput()) << ", "
     << ptr(o.getOutput(), false) << ", " << poolPlanes(o.getInput()) << ", "
     << poolWindow(tensorType(o.getInput()), tensorType(o.getOutput()),
                   o.getKernelShape(), o.getStrides(), o.getPads(),
                   o.getDilations())
     << ", " << (o.getCountIncludePad() ? 1 : 0) << ");\n";
  return success();
}

LogicalResult FuncEmitter::emit(nn::AvgPoolGradOp o) {
  os << "  gp_avg_pool_bwd(" << ptr(o.getGrad()) << ", "
     << ptr(o.getOutput(), false) << ", " << poolPlanes(o.getOutput()) << ", "
     << poolWindow(tensorType(o.getOutput()), tensorType(o.getGrad()),
                   o.getKernelShape(), o.getStrides(), o.getPads(),
                   o.getDilations())
     << ", " << (o.getCountIncludePad() ? 1 : 0) << ");\n";
  return success();
}

// Every output element: the input's where it lies inside, else the value.
LogicalResult FuncEmitter::emit(nn::PadOp o) {
  auto in = tensorType(o.getInput()), out = tensorType(o.getOutput());
  int64_t rank = in.getRank();
  std::string inside = "true", inIdx = "0", outIdx = "0";
  int64_t inStride = 1, outStride = 1;
  std::string body;
  for (int64_t d = rank - 1; d >= 0; --d) {
    std::string i = "i" + std::to_string(d), j = "j" + std::to_string(d);
    body += "      const int64_t " + j + " = " + i + " - " +
            std::to_string(o.getPads()[d]) + ";\n";
    inside +=
        " && " + j + " >= 0 && " + j + " < " + std::to_string(in.getDimSize(d));
    inIdx += " + " + j + " * " + std::to_string(inStride);
    outIdx += " + " + i + " * " + std::to_string(outStride);
    inStride *= in.getDimSize(d);
    outStride *= out.getDimSize(d);
  }
  body += "      o[" + outIdx + "] = (" + inside + ") ? x0[" + inIdx +
          "] : " + floatLit(o.getValue().convertToDouble()) + ";\n";
  emitForAll(out.getShape(),
             {{"o", "float", false, ptr(o.getOutput(), false)},
              {"x0", "float", true, ptr(o.getInput())}},
             /*flat=*/false, body);
  return success();
}

/// A convolution's `static const gp_conv_shape` initializer (declared in a
/// block of its own at the call: the runtime keys its primitives on it).
std::string FuncEmitter::convShape(Value x, Value w, Value y,
                                   ArrayRef<int64_t> strides,
                                   ArrayRef<int64_t> pads,
                                   ArrayRef<int64_t> dilations, int64_t group) {
  auto xt = tensorType(x), wt = tensorType(w), yt = tensorType(y);
  int64_t sp = xt.getRank() - 2;
  auto two = [&](auto at) {
    return "{" + std::to_string(at(0)) + ", " +
           std::to_string(sp > 1 ? at(1) : 0) + "}";
  };
  std::string s =
      "{" + std::to_string(sp) + ", " + std::to_string(xt.getDimSize(0)) +
      ", " + std::to_string(xt.getDimSize(1)) + ", " +
      std::to_string(wt.getDimSize(0)) + ", " + std::to_string(group) + ", ";
  s += two([&](int64_t i) { return xt.getDimSize(2 + i); }) + ", ";
  s += two([&](int64_t i) { return wt.getDimSize(2 + i); }) + ", ";
  s += two([&](int64_t i) { return yt.getDimSize(2 + i); }) + ", ";
  s += two([&](int64_t i) { return strides[i]; }) + ", ";
  s += two([&](int64_t i) { return dilations[i]; }) + ", ";
  s += two([&](int64_t i) { return pads[i]; }) + ", ";
  s += two([&](int64_t i) { return pads[sp + i]; }) + "}";
  return "  {\n    static const gp_conv_shape conv = " + s + ";\n    ";
}

LogicalResult FuncEmitter::emit(nn::ConvOp o) {
  os << convShape(o.getInput(), o.getWeight(), o.getOutput(), o.getStrides(),
                  o.getPads(), o.getDilations(), o.getGroup())
     << "gp_conv_fwd(&conv, " << ptr(o.getInput()) << ", " << ptr(o.getWeight())
     << ", " << (o.getBias() ? ptr(o.getBias()) : "nullptr") << ", "
     << ptr(o.getOutput(), false) << ");\n  }\n";
  return success();
}

LogicalResult FuncEmitter::emit(nn::ConvInputGradOp o) {
  os << convShape(o.getOutput(), o.getWeight(), o.getGrad(), o.getStrides(),
                  o.getPads(), o.getDilations(), o.getGroup())
     << "gp_conv_bwd_data(&conv, " << ptr(o.getGrad()) << ", "
     << ptr(o.getWeight()) << ", " << ptr(o.getOutput(), false) << ");\n  }\n";
  return success();
}

LogicalResult FuncEmitter::emit(nn::ConvWeightGradOp o) {
  os << convShape(o.getInput(), o.getOutput(), o.getGrad(), o.getStrides(),
                  o.getPads(), o.getDilations(), o.getGroup())
     << "gp_conv_bwd_weights(&conv, " << ptr(o.getInput()) << ", "
     << ptr(o.getGrad()) << ", " << ptr(o.getOutput(), false) << ");\n  }\n";
  return success();
}

LogicalResult FuncEmitter::emit(nn::TransposeOp o) {
  auto in = tensorType(o.getInput()), out = tensorType(o.getOutput());
  std::string elem = in.getElementType().isF32() ? "float" : "int64_t";
  int64_t rank = in.getRank();
  llvm::SmallVector<int64_t> inStride(rank, 1);
  for (int64_t d = rank - 2; d >= 0; --d)
    inStride[d] = inStride[d + 1] * in.getDimSize(d + 1);
  std::string outIdx, inIdx;
  int64_t stride = 1;
  for (int64_t d = rank - 1; d >= 0; --d) {
    std::string i = "i" + std::to_string(d);
    outIdx +=
        (outIdx.empty() ? "" : " + ") + i + " * " + std::to_string(stride);
    inIdx += (inIdx.empty() ? "" : " + ") + i + " * " +
             std::to_string(inStride[o.getPermutation()[d]]);
    stride *= out.getDimSize(d);
  }
  emitForAll(out.getShape(),
             {{"o", elem, false, ptr(o.getOutput(), false)},
              {"x0", elem, true, ptr(o.getInput())}},
             /*flat=*/rank == 0,
             "      o[" + (rank ? outIdx : std::string("i")) + "] = x0[" +
                 (rank ? inIdx : std::string("i")) + "];\n");
  return success();
}

LogicalResult FuncEmitter::emit(nn::ConcatOp o) {
  auto out = tensorType(o.getOutput());
  int64_t axis = o.getAxis();
  auto [outer, inner] = outerInner(out, axis);
  int64_t elem = out.getElementType().isF32() ? 4 : 8;
  int64_t start = 0;
  for (Value in : o.getInputs()) {
    int64_t len = tensorType(in).getDimSize(axis);
    emitBlockCopy(o.getOutput(), out.getDimSize(axis) * inner, start * inner,
                  in, len * inner, 0, outer, len * inner, elem);
    start += len;
  }
  return success();
}

LogicalResult FuncEmitter::emit(nn::SliceOp o) {
  auto in = tensorType(o.getInput()), out = tensorType(o.getOutput());
  int64_t axis = o.getAxis();
  auto [outer, inner] = outerInner(in, axis);
  int64_t len = out.getDimSize(axis);
  emitBlockCopy(o.getOutput(), len * inner, 0, o.getInput(),
                in.getDimSize(axis) * inner, o.getStart() * inner, outer,
                len * inner, in.getElementType().isF32() ? 4 : 8);
  return success();
}

/// The ignore_index arguments of the loss kernels.
static std::string ignoreArgs(std::optional<int64_t> ignore) {
  return std::to_string(ignore ? 1 : 0) + ", " +
         std::to_string(ignore ? *ignore : 0) + "LL";
}

template <typename LossOp>
LogicalResult FuncEmitter::emitLoss(LossOp o, StringRef fn,
                                    StringRef extraArgs) {
  auto lt = tensorType(o.getLogits());
  // Labels read from a data file are checked, so a bad label is an error
  // naming the input and sample (as torch raises), not a NaN loss.
  // Checked on the host, in the data file's rows (a device arena is not
  // readable from the host).
  if (BlockArgument arg = dataInputOf(func, o.getLabels()))
    os << "  gp_check_input_labels(ctx, "
       << stage.inputBase + arg.getArgNumber() << ", mb, " << lt.getDimSize(1)
       << ", " << ignoreArgs(o.getIgnoreIndex()) << ");\n";
  FailureOr<std::string> norm = lossNorm(o, o.getLabels(), o.getIgnoreIndex(),
                                         o.getSum(), o.getMicrobatches());
  if (failed(norm))
    return failure();
  os << "  " << fn << "(" << ptr(o.getLogits()) << ", " << ptr(o.getLabels())
     << ", " << lt.getDimSize(0) << ", " << lt.getDimSize(1) << ", "
     << ignoreArgs(o.getIgnoreIndex()) << ", " << *norm << ", "
     << ptr(o.getLoss(), false) << extraArgs << ");\n";
  return success();
}

template <typename GradOp>
LogicalResult FuncEmitter::emitLossGrad(GradOp o, StringRef fn,
                                        bool readsScores) {
  auto lt = tensorType(o.getLogits());
  FailureOr<std::string> norm = lossNorm(o, o.getLabels(), o.getIgnoreIndex(),
                                         o.getSum(), o.getMicrobatches());
  if (failed(norm))
    return failure();
  os << "  " << fn << "(";
  if (readsScores)
    os << ptr(o.getLogits()) << ", ";
  os << ptr(o.getLabels()) << ", " << lt.getDimSize(0) << ", "
     << lt.getDimSize(1) << ", " << ignoreArgs(o.getIgnoreIndex()) << ", "
     << *norm << ", " << ptr(o.getGrad()) << ", " << ptr(o.getOutput(), false)
     << ");\n";
  return success();
}

LogicalResult FuncEmitter::emit(nn::SoftmaxCrossEntropyOp o) {
  return emitLoss(o, "gp_softmax_xent_fwd", ", nullptr");
}

LogicalResult FuncEmitter::emit(nn::SoftmaxCrossEntropyGradOp o) {
  return emitLossGrad(o, "gp_softmax_xent_bwd", /*readsScores=*/true);
}

LogicalResult FuncEmitter::emit(nn::NllLossOp o) {
  return emitLoss(o, "gp_nll_fwd", "");
}

LogicalResult FuncEmitter::emit(nn::NllLossGradOp o) {
  return emitLossGrad(o, "gp_nll_bwd", /*readsScores=*/false);
}

std::string FuncEmitter::statePtr(Operation *op, int k) {
  return "((float *)(A + " + std::to_string(stage.optimizerState[op][k]) + "))";
}

FailureOr<FuncEmitter::UpdateArgs>
FuncEmitter::updateArgs(Operation *op, Value param, Value grad, int slots) {
  UpdateArgs a;
  a.param = ptr(param, false);
  a.grad = ptr(grad);
  a.count = std::to_string(tensorType(param).getNumElements());
  if (stage.shard <= 1) {
    for (int k = 0; k < slots; ++k)
      a.state.push_back(statePtr(op, k));
    return a;
  }
  if (static_cast<int>(stage.shardState.size()) < slots)
    return op->emitError("--shard-optimizer: the pipe.schedule has no "
                         "pipe.state (run gpipe-plan-memory with "
                         "shard-optimizer)");
  // This replica's share of the parameter: elements [i0, i1), whose state
  // starts at element s of the share's slots.
  const int64_t elem = stage.accumulatorElem(grad);
  const int64_t total = (stage.accumulatorEnd - stage.accumulatorBegin) / 4;
  stage.shardTable +=
      "  {" + std::to_string(pipeline::getBuffer(param).getOffset()) + "LL, " +
      std::to_string(elem) + "LL, " + a.count + "LL},\n";
  ++stage.shardEntries;
  a.prefix = "  { // this replica's share (--shard-optimizer)\n"
             "  int64_t i0 = 0, i1 = 0;\n"
             "  const int64_t s = gp_shard_slice(ctx, " +
             std::to_string(total) + "LL, " + std::to_string(elem) + "LL, " +
             a.count + "LL, &i0, &i1);\n  (void)s;\n  if (i1 > i0)\n";
  a.suffix = "  }\n";
  a.param += " + i0";
  a.grad += " + i0";
  a.count = "i1 - i0";
  for (int k = 0; k < slots; ++k)
    a.state.push_back("((float *)(A + " + std::to_string(stage.shardState[k]) +
                      ") + s)");
  return a;
}

LogicalResult FuncEmitter::emit(pipeline::SGDUpdateOp o) {
  bool momentum = o.getMomentum().convertToDouble() > 0;
  FailureOr<UpdateArgs> a =
      updateArgs(o, o.getParam(), o.getGrad(), momentum ? 1 : 0);
  if (failed(a))
    return failure();
  os << a->prefix << "  gp_sgd_update(" << a->param << ", " << a->grad << ", "
     << (momentum ? a->state[0] : "nullptr") << ", " << a->count << ", "
     << floatLit(o.getLr().convertToDouble()) << ", "
     << floatLit(o.getMomentum().convertToDouble()) << ", "
     << floatLit(o.getWeightDecay().convertToDouble()) << ", "
     << o.getNesterov() << ", ctx->step);\n"
     << a->suffix;
  if (stage.shard <= 1)
    emitShadowUpdate(o.getParam());
  return success();
}

LogicalResult FuncEmitter::emit(pipeline::AdamUpdateOp o) {
  FailureOr<UpdateArgs> a = updateArgs(o, o.getParam(), o.getGrad(), 2);
  if (failed(a))
    return failure();
  os << a->prefix << "  gp_adam_update(" << a->param << ", " << a->grad << ", "
     << a->state[0] << ", " << a->state[1] << ", " << a->count << ", "
     << floatLit(o.getLr().convertToDouble()) << ", "
     << floatLit(o.getBeta1().convertToDouble()) << ", "
     << floatLit(o.getBeta2().convertToDouble()) << ", "
     << floatLit(o.getEps().convertToDouble()) << ", "
     << floatLit(o.getWeightDecay().convertToDouble()) << ", "
     << o.getDecoupled() << ", ctx->step);\n"
     << a->suffix;
  if (stage.shard <= 1)
    emitShadowUpdate(o.getParam());
  return success();
}

std::string FuncEmitter::perStepGuard(bool perStep) const {
  std::optional<pipeline::Phase> phase = pipeline::getPhase(func);
  if (!perStep || phase == pipeline::Phase::Update)
    return "";
  return "if (mb == " +
         std::to_string(phase == pipeline::Phase::Forward
                            ? stage.firstForward
                            : stage.firstBackward) +
         ") ";
}

/// A transfer between two chunks of the stage goes through its hand-off
/// buffer in the arena (gpipe-plan-memory): the micro-batch's slot, or the
/// only one for a value sent once per step or by the update.
std::string FuncEmitter::handoffCopy(Operation *op, Value v, bool perStep,
                                     bool toHandoff) {
  pipeline::BufferAttr h = pipeline::getHandoff(op);
  bool once = perStep || pipeline::getPhase(func) == pipeline::Phase::Update;
  std::string slot =
      "A + " + std::to_string(h.getOffset()) + "LL" +
      (once
           ? std::string()
           : " + mb * " +
                 std::to_string(llvm::alignTo(bytesOf(v), stage.align)) + "LL");
  std::string value = ptr(v, toHandoff);
  std::string dst = toHandoff ? slot : value, src = toHandoff ? value : slot;
  std::string bytes = std::to_string(bytesOf(v));
  return stage.options.cuda
             ? "gp_cuda_check(cudaMemcpyAsync(" + dst + ", " + src + ", " +
                   bytes + ", cudaMemcpyDeviceToDevice, gp_cuda_stream()));"
             : "std::memcpy(" + dst + ", " + src + ", " + bytes + ");";
}

LogicalResult FuncEmitter::emit(pipeline::SendOp o) {
  if (pipeline::getHandoff(o)) {
    os << "  // to chunk (virtual stage " << o.getPeer() << "), tag "
       << o.getTag() << "\n  " << perStepGuard(o.getPerStep())
       << handoffCopy(o, o.getValue(), o.getPerStep(), true) << "\n";
    return success();
  }
  os << "  " << perStepGuard(o.getPerStep()) << "gp_send(ctx, "
     << stage.stageOf[o.getPeer()] << ", " << o.getTag() << ", "
     << ptr(o.getValue()) << ", " << bytesOf(o.getValue()) << ");\n";
  return success();
}

LogicalResult FuncEmitter::emit(pipeline::RecvOp o) {
  if (pipeline::getHandoff(o)) {
    os << "  // from chunk (virtual stage " << o.getPeer() << "), tag "
       << o.getTag() << "\n  " << perStepGuard(o.getPerStep())
       << handoffCopy(o, o.getValue(), o.getPerStep(), false) << "\n";
    return success();
  }
  // A per-step receive's buffer is long-lived: later actions read it.
  os << "  " << perStepGuard(o.getPerStep()) << "gp_recv(ctx, "
     << stage.stageOf[o.getPeer()] << ", " << o.getTag() << ", "
     << ptr(o.getValue(), false) << ", " << bytesOf(o.getValue()) << ");\n";
  return success();
}

LogicalResult FuncEmitter::emit(pipeline::ReportLossOp o) {
  os << "  gp_report_loss(ctx, " << ptr(o.getLoss()) << ");\n";
  return success();
}

LogicalResult FuncEmitter::emit(pipeline::AccumulateGradOp o) {
  if (accumulateInPlace.contains(o.getGrad()))
    return success(); // the GEMM accumulated into it
  emitForAll(
      tensorType(o.getGrad()).getShape(),
      {{"acc", "float", false,
        "((float *)(A + " +
            std::to_string(pipeline::getAccumulator(o).getOffset()) + "))"},
       {"g", "float", true, ptr(o.getGrad())}},
      /*flat=*/true, "      acc[i] += g[i];\n");
  return success();
}

/// `text` as a C string literal.
static std::string cLiteral(StringRef text) {
  std::string literal = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\')
      literal += '\\';
    literal += static_cast<unsigned char>(c) < 0x20 ? ' ' : c;
  }
  return literal + "\"";
}

/// "node 'fc1' (nn.gemm)" or "nodes 'a' (nn.add), 'b' (nn.relu)" as a C
/// string literal.
static std::string describeNodes(ArrayRef<Operation *> unit) {
  std::string text = unit.size() == 1 ? "node " : "nodes ";
  for (auto [k, op] : llvm::enumerate(unit)) {
    if (k)
      text += ", ";
    auto name = dyn_cast<NameLoc>(op->getLoc());
    text += "'" + (name ? name.getName().getValue().str() : std::string("?")) +
            "' (" + op->getName().getStringRef().str() + ")";
  }
  return cLiteral(text);
}

int32_t StageState::addProfileUnit(ArrayRef<Operation *> ops) {
  const int32_t id = static_cast<int32_t>(profileUnits.size());
  const std::string name = "kProfileOps" + std::to_string(id);
  llvm::raw_string_ostream gs(profileOps);
  gs << "static const gp_profile_op " << name << "[] = {\n";
  for (Operation *op : ops) {
    auto loc = dyn_cast<NameLoc>(op->getLoc());
    char estimate[32];
    std::snprintf(estimate, sizeof estimate, "%.6g", nn::analyticSeconds(op));
    // In a backward, a deferred weight-gradient GEMM only copies its
    // operands (the GEMM itself is a "weight" unit).
    const bool copies =
        profileFunction == "backward" && deferred.count(op) != 0;
    gs << "  {" << cLiteral(loc ? loc.getName().getValue() : StringRef())
       << ", " << cLiteral(op->getName().getStringRef()) << ", "
       << cLiteral(copies ? deferredCopySignature(op) : opSignature(op)) << ", "
       << estimate << "},\n";
  }
  gs << "};\n";
  profileUnits.push_back("  {" + cLiteral(profileFunction) + ", " +
                         std::to_string(profileChunk) + ", " +
                         std::to_string(ops.size()) + ", " + name + "},\n");
  return id;
}

LogicalResult FuncEmitter::run() {
  if (!func.getBody().hasOneBlock())
    return func.emitError("code generation needs a single-block function");
  Block &block = func.getBody().front();
  if (failed(formUnits()) || failed(bindStorage()))
    return failure();
  bool isForward = pipeline::getPhase(func) == pipeline::Phase::Forward;
  if (isForward)
    for (BlockArgument arg : block.getArguments())
      os << "  gp_load_input(ctx, " << stage.inputBase + arg.getArgNumber()
         << ", mb, " << ptr(arg, false) << ");\n";
  for (auto &unit : units) {
    unitNodes = describeNodes(unit);
    // --profile: a timer around each unit that computes (transfers and
    // hand-offs, which wait for other stages or copy, are not timed).
    std::optional<int32_t> timer;
    size_t bodyMark = 0, opsMark = 0, codeMark = 0;
    if (stage.options.profile && !llvm::all_of(unit, [](Operation *op) {
          return isa<pipeline::SendOp, pipeline::RecvOp>(op);
        })) {
      bodyMark = body.size();
      opsMark = stage.profileOps.size();
      timer = stage.addProfileUnit(unit);
      os << "  const int64_t gp_t" << *timer << " = gp_profile_now();\n";
      codeMark = body.size();
    }
    // A unit that emitted no code (a parameter, a view) is not timed.
    auto timerEnd = [&] {
      if (!timer)
        return;
      if (body.size() == codeMark) {
        body.resize(bodyMark);
        stage.profileUnits.pop_back();
        stage.profileOps.resize(opsMark);
        return;
      }
      os << "  gp_profile_add(" << *timer << ", gp_t" << *timer << ");\n";
    };
    if (unit.size() == 1) {
      if (failed(emitOp(unit.front())))
        return failure();
      timerEnd();
      continue;
    }
    os << "  // fused:";
    for (Operation *op : unit) {
      os << " " << op->getName().stripDialect();
      if (auto name = dyn_cast<NameLoc>(op->getLoc()))
        os << " ('" << name.getName().getValue() << "')";
    }
    os << "\n";
    if (auto gemm = dyn_cast<nn::GemmOp>(unit.front()))
      emitGemm(gemm, cast<nn::ReluOp>(unit.back()));
    else
      emitElementwise(unit);
    timerEnd();
  }
  return success();
}

static int64_t costOf(func::FuncOp func) {
  int64_t flops = 0;
  func.walk([&](nn::CostOpInterface op) { flops += op.getFlops(); });
  return flops;
}

/// The stage's seconds per step by the cost table: per op of each of its
/// functions, what one op like it (its node, its signature) took in the
/// table's function of that name, and the analytic model on the table's
/// scale for ops the table lacks.
static void predictStepSeconds(
    const CostTable &table, ArrayRef<std::array<func::FuncOp, 3>> chunkFns,
    const llvm::MapVector<Operation *, StageState::DeferredGemm> &deferred,
    int64_t microbatches, int64_t rows, EmittedStage &result) {
  static constexpr const char *kFunction[] = {"forward", "backward", "weight",
                                              "update"};
  std::vector<std::array<double, 4>> chunks(chunkFns.size(), {0, 0, 0, 0});
  int64_t chunk = 0;
  double analytic = 0;
  auto fallback = [&](int phase, double t) {
    chunks[chunk][phase] += t;
    analytic += t;
  };
  // A weight-gradient GEMM is deferred (a "weight" unit) or not (in the
  // backward) by how its parameter is used, which may differ between the
  // profiled compile and this one: either entry predicts the other.
  auto add = [&](Operation *op, int phase, double calls) {
    if (isa<pipeline::SendOp, pipeline::RecvOp>(op))
      return;
    if (std::optional<double> t = table.lookupOp(op, kFunction[phase], rows)) {
      chunks[chunk][phase] += *t;
      return;
    }
    if (isa<nn::GemmOp>(op) && (phase == 1 || phase == 2))
      if (std::optional<double> t =
              table.lookupOp(op, kFunction[phase == 1 ? 2 : 1], rows)) {
        chunks[chunk][phase] += *t;
        return;
      }
    // The same node's ops of that kind at other shapes (another M).
    if (std::optional<double> t =
            table.lookupScaled(op, kFunction[phase], calls)) {
      chunks[chunk][phase] += *t;
      return;
    }
    fallback(phase, nn::analyticSeconds(op) * calls * table.scale);
  };
  for (size_t c = 0; c < chunkFns.size(); ++c) {
    chunk = static_cast<int64_t>(c);
    std::array<func::FuncOp, 3> fns = chunkFns[c];
    for (int k = 0; k < 3; ++k)
      fns[k].walk([&](Operation *op) {
        if (op == fns[k])
          return;
        if (k != 1 || !deferred.count(op))
          return add(op, k == 2 ? 3 : k, k == 2 ? 1.0 : double(microbatches));
        // A deferred GEMM's backward copies its operands (a copy's bytes,
        // read and written, when the table has no such copies).
        auto name = dyn_cast<NameLoc>(op->getLoc());
        if (std::optional<double> t =
                name ? table.lookupOp(name.getName().getValue(), "backward",
                                      deferredCopySignature(op), rows)
                     : std::nullopt) {
          chunks[c][1] += *t;
          return;
        }
        const StageState::DeferredGemm &d = deferred.lookup(op);
        fallback(1, 2.0 * 4.0 * double(d.rows * (d.gCols + d.xCols)) /
                        nn::kAnalyticBytesPerSecond * double(microbatches) *
                        table.scale);
      });
  }
  // The deferred GEMMs themselves: the W actions or the update.
  for (auto &entry : deferred) {
    chunk = entry.second.chunk;
    add(entry.first, 2, double(microbatches));
  }
  std::array<double, 4> seconds = {0, 0, 0, 0};
  for (const std::array<double, 4> &c : chunks)
    for (int k = 0; k < 4; ++k)
      seconds[k] += c[k];
  result.predictedChunkSeconds = chunks;
  result.predictedSeconds.assign(seconds.begin(), seconds.end());
  double total = seconds[0] + seconds[1] + seconds[2] + seconds[3];
  result.predictedAnalyticShare = total > 0 ? analytic / total : 0;
}

static std::string typeString(Type t) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << t;
  return s;
}

FailureOr<EmittedStage>
gpipe::emitStageCpp(ModuleOp module, int64_t stageIndex,
                    const std::string &programName,
                    std::vector<std::string> &takenWeightFiles,
                    const std::string &buildId, const EmitOptions &options) {
  pipeline::ScheduleOp schedule;
  int64_t numStages = 0;
  for (auto s : module.getOps<pipeline::ScheduleOp>()) {
    ++numStages;
    if (static_cast<int64_t>(s.getStage()) == stageIndex)
      schedule = s;
  }
  if (!schedule)
    return module.emitError("stage ") << stageIndex << " has no schedule",
           failure();
  // Each chunk's forward, backward and update.
  const int64_t numChunks = schedule.getNumChunks();
  FailureOr<SmallVector<std::array<func::FuncOp, 3>>> found =
      schedule.lookupChunkFunctions();
  if (failed(found))
    return failure();
  SmallVector<std::array<func::FuncOp, 3>> chunkFns = std::move(*found);
  SmallVector<func::FuncOp> allFns;
  for (auto &fns : chunkFns)
    allFns.append(fns.begin(), fns.end());
  SmallVector<pipeline::ActionAttr> actions(schedule.getActionList());
  auto firstOf = [&](pipeline::Phase phase, int64_t chunk) {
    for (pipeline::ActionAttr a : actions)
      if (a.getPhase() == phase && a.getChunk() == chunk)
        return a.getMicrobatch().value_or(0);
    return int64_t(0);
  };
  // Recomputation is ordinary ops by now (gpipe-inline-remat).
  for (auto &fns : chunkFns) {
    WalkResult remat = fns[1].walk([](pipeline::RematOp op) {
      op.emitError("code generation needs lowered IR: run gpipe-lower "
                   "(gpipe-inline-remat) first");
      return WalkResult::interrupt();
    });
    if (remat.wasInterrupted())
      return failure();
  }

  // The memory plan (gpipe-plan-memory), for this target and precision.
  pipeline::MemoryPlanAttr plan = pipeline::getMemoryPlan(schedule);
  if (!plan)
    return schedule.emitError("code generation needs the memory plan "
                              "(pipe.memory): run gpipe-lower, which runs "
                              "gpipe-plan-memory"),
           failure();
  {
    StringRef target = options.cuda ? "cuda" : "cpu";
    StringRef precision = options.bf16 ? "bf16" : "fp32";
    if (plan.getTarget() != target || plan.getPrecision() != precision)
      return schedule.emitError("the memory plan is for target ")
                 << plan.getTarget() << ", precision " << plan.getPrecision()
                 << ", but code generation is for " << target << ", "
                 << precision << ": lower with gpipe-lower=\"target=" << target
                 << " precision=" << precision << "\"",
             failure();
  }

  StageState st;
  st.options = options;
  // A schedule with W actions runs each micro-batch's weight-gradient GEMMs
  // as their own action; otherwise the update runs them over all M.
  st.weightActions = llvm::any_of(actions, [](pipeline::ActionAttr a) {
    return a.getPhase() == pipeline::Phase::Weight;
  });
  // Where every virtual stage runs: the stage whose schedule names it.
  st.stageOf = pipeline::stagesOfPieces(module);
  EmittedStage &result = st.result;
  st.microbatches = pipeline::getNumMicrobatches(module);
  result.bufferedSends =
      pipeline::getSends(module) == pipeline::Sends::Buffered;
  // The ops whose runtime kernels call oneDNN or OpenBLAS (gp_gemm,
  // gp_batch_gemm, attention, the convolutions); with a cost table, their
  // memory: the largest the table measured for one of these ops (by
  // signature).
  for (func::FuncOp f : allFns)
    if (f)
      f.walk([&](Operation *op) {
        if (!isa<nn::GemmOp, nn::BatchMatMulOp, nn::AttentionOp,
                 nn::AttentionGradOp, nn::ConvOp, nn::ConvInputGradOp,
                 nn::ConvWeightGradOp>(op))
          return;
        result.callsMathLibrary = true;
        if (!options.costs)
          return;
        const std::string sig = opSignature(op);
        for (llvm::StringRef key :
             {llvm::StringRef(sig), libraryOperandsKey(sig)}) {
          auto it = options.costs->libraryBySignature.find(key);
          if (it != options.costs->libraryBySignature.end())
            result.predictedLibraryBytes =
                std::max(result.predictedLibraryBytes, it->second);
        }
      });
  Block &fwd = chunkFns[0][0].getBody().front();
  int64_t batch = 0;
  if (fwd.getNumArguments() && tensorType(fwd.getArgument(0)).getRank())
    batch = tensorType(fwd.getArgument(0)).getDimSize(0) * st.microbatches;
  batch = pipeline::getBatchSize(module).value_or(batch);

  // The long-lived buffers' offsets, from the plan.
  auto missing = [&](Operation *op, StringRef what) {
    op->emitError("code generation needs the memory plan: no ")
        << what << " (run gpipe-lower, which runs gpipe-plan-memory)";
    return WalkResult::interrupt();
  };
  for (auto [chunk, fns] : llvm::enumerate(chunkFns))
    for (func::FuncOp f : fns) {
      WalkResult walk = f.walk([&](Operation *op) -> WalkResult {
        if (auto p = dyn_cast<nn::ParamOp>(op)) {
          pipeline::BufferAttr b = pipeline::getBuffer(p.getOutput());
          if (!b)
            return missing(op, "pipe.buffer");
          if (st.paramOffset.try_emplace(p.getName(), b.getOffset()).second)
            st.paramOrder.push_back(
                {p.getName().str(), tensorType(p.getOutput())});
          if (pipeline::BufferAttr shadow = pipeline::getShadow(p))
            st.shadowOffset[p.getName()] = shadow.getOffset();
        } else if (auto acc = dyn_cast<pipeline::AccumulateGradOp>(op)) {
          pipeline::BufferAttr b = pipeline::getAccumulator(op);
          if (!b)
            return missing(op, "pipe.accumulator");
          st.accumulatorBegin = std::min(st.accumulatorBegin, b.getOffset());
          st.accumulatorEnd =
              std::max(st.accumulatorEnd, b.getOffset() + b.getBytes());
          if (!acc.getDeferred())
            return WalkResult::advance();
          SmallVector<pipeline::BufferAttr> ops =
              pipeline::getDeferredOperands(op);
          if (ops.size() != 2)
            return missing(op, "pipe.deferred_operands");
          auto gemm = acc.getGrad().getDefiningOp<nn::GemmOp>();
          StageState::DeferredGemm d;
          d.chunk = static_cast<int64_t>(chunk);
          d.param = acc.getParam().str();
          d.accOffset = b.getOffset();
          d.accBytes = b.getBytes();
          d.rows = tensorType(gemm.getA()).getDimSize(0);
          d.gCols = tensorType(gemm.getA()).getDimSize(1);
          d.xCols = tensorType(gemm.getB()).getDimSize(1);
          d.gOffset = ops[0].getOffset();
          d.xOffset = ops[1].getOffset();
          st.deferred[gemm] = d;
        } else if (auto acc = dyn_cast<pipeline::AccumulatedGradOp>(op)) {
          pipeline::BufferAttr b = pipeline::getBuffer(acc.getGrad());
          if (!b)
            return missing(op, "pipe.buffer");
          st.accumulatorBegin = std::min(st.accumulatorBegin, b.getOffset());
          st.accumulatorEnd =
              std::max(st.accumulatorEnd, b.getOffset() + b.getBytes());
        } else if (isa<pipeline::SGDUpdateOp, pipeline::AdamUpdateOp,
                       nn::UpdateRunningStatsOp>(op)) {
          for (pipeline::BufferAttr b : pipeline::getState(op))
            st.optimizerState[op].push_back(b.getOffset());
          // The optimizer's state is saved in checkpoints under torch's keys
          // (a deferred BatchNorm's buffer lives within one step only).
          if (isa<nn::UpdateRunningStatsOp>(op) ||
              st.optimizerState[op].empty())
            return WalkResult::advance();
          auto param = op->getOperand(0).getDefiningOp<nn::ParamOp>();
          if (!param)
            return op->emitError("the updated value is not an nn.param"),
                   WalkResult::interrupt();
          for (auto [k, offset] : llvm::enumerate(st.optimizerState[op]))
            st.stateDescs.push_back(
                {param.getName().str(), stateSlotName(op, k), offset});
        }
        return WalkResult::advance();
      });
      if (walk.wasInterrupted())
        return failure();
    }
  st.clearedBegin = plan.getClearedBegin();
  st.clearedEnd = plan.getClearedEnd();
  if (options.shardOptimizer && options.dataParallel > 1) {
    st.shard = options.dataParallel;
    for (pipeline::BufferAttr b : pipeline::getState(schedule))
      st.shardState.push_back(b.getOffset());
    // Checkpoints save each parameter's state by name: gathered from the
    // replicas' shares (gp_state_desc::elem).
    for (auto &fns : chunkFns)
      fns[2].walk([&](Operation *op) {
        if (!isa<pipeline::SGDUpdateOp, pipeline::AdamUpdateOp>(op))
          return;
        auto param = op->getOperand(0).getDefiningOp<nn::ParamOp>();
        if (!param || !pipeline::getBuffer(op->getOperand(1)))
          return;
        auto sgd = dyn_cast<pipeline::SGDUpdateOp>(op);
        const int64_t slots =
            sgd ? (sgd.getMomentum().convertToDouble() > 0 ? 1 : 0) : 2;
        for (int64_t k = 0;
             k < slots && k < static_cast<int64_t>(st.shardState.size()); ++k)
          st.stateDescs.push_back({param.getName().str(), stateSlotName(op, k),
                                   st.shardState[k],
                                   st.accumulatorElem(op->getOperand(1))});
      });
    // Each replica updates its share of every accumulator in place: an
    // update that also moves gradients (a weight tied across stages or
    // chunks) is not supported yet.
    for (auto &fns : chunkFns) {
      WalkResult tied = fns[2].walk([&](Operation *op) {
        if (isa<nn::ParamOp, nn::ConstantOp, pipeline::AccumulatedGradOp,
                pipeline::SGDUpdateOp, pipeline::AdamUpdateOp, func::ReturnOp,
                func::FuncOp>(op))
          return WalkResult::advance();
        op->emitError("--shard-optimizer: stage ")
            << stageIndex << "'s update runs '" << op->getName()
            << "' (a weight tied across stages or chunks): not supported yet";
        return WalkResult::interrupt();
      });
      if (tied.wasInterrupted())
        return failure();
    }
  }
  st.scratchBytes = plan.getScratch();
  st.stashBase = plan.getStashBase();
  st.stashBytes = plan.getStashSlot();
  st.stashSlots = plan.getStashSlots();
  st.align = plan.getAlign();

  for (auto &fns : chunkFns) {
    result.virtualStages.push_back(pipeline::getStage(fns[0]).value_or(-1));
    result.chunkForwardFlops.push_back(costOf(fns[0]));
    result.chunkBackwardFlops.push_back(costOf(fns[1]));
    result.chunkWeightFlops.push_back(0);
    result.forwardFlops += costOf(fns[0]);
    result.backwardFlops += costOf(fns[1]);
    result.updateFlops += costOf(fns[2]);
  }
  for (auto &entry : st.deferred) {
    int64_t flops = cast<nn::GemmOp>(entry.first).getFlops();
    result.weightFlops += flops;
    result.chunkWeightFlops[entry.second.chunk] += flops;
  }
  result.flops =
      (result.forwardFlops + result.backwardFlops) * st.microbatches +
      result.updateFlops;
  if (options.costs)
    predictStepSeconds(*options.costs, chunkFns, st.deferred, st.microbatches,
                       batch / std::max<int64_t>(1, st.microbatches), result);
  std::set<int64_t> handoffs; // the hand-off buffers' offsets
  for (func::FuncOp f : allFns)
    f.walk([&](Operation *op) {
      // Between two chunks of this stage: through the arena, not the runtime.
      if (pipeline::BufferAttr h = pipeline::getHandoff(op)) {
        if (handoffs.insert(h.getOffset()).second)
          result.memory.handoffBytes += h.getBytes();
        return;
      }
      EmittedTransfer t;
      t.phase = pipeline::stringifyPhase(*pipeline::getPhase(f)).str();
      if (auto s = dyn_cast<pipeline::SendOp>(op)) {
        t = {true,
             t.phase,
             st.stageOf[s.getPeer()],
             static_cast<int64_t>(s.getTag()),
             bytesOf(s.getValue()),
             typeString(s.getValue().getType()),
             s.getPerStep()};
      } else if (auto r = dyn_cast<pipeline::RecvOp>(op)) {
        t = {false,
             t.phase,
             st.stageOf[r.getPeer()],
             static_cast<int64_t>(r.getTag()),
             bytesOf(r.getValue()),
             typeString(r.getValue().getType()),
             r.getPerStep()};
      } else {
        return;
      }
      result.transfers.push_back(t);
    });
  result.hasLoss = false;
  for (auto &fns : chunkFns)
    fns[0].walk([&](pipeline::ReportLossOp) { result.hasLoss = true; });

  // The program's inputs: each chunk's forward arguments, chunk after chunk.
  SmallVector<int64_t> inputBase;
  for (auto &fns : chunkFns) {
    inputBase.push_back(static_cast<int64_t>(result.inputs.size()));
    for (BlockArgument arg : fns[0].getBody().front().getArguments()) {
      auto name = nn::getInputName(fns[0], arg.getArgNumber());
      auto t = tensorType(arg);
      result.inputs.push_back(
          {name ? name.getValue().str() : "", t.getElementType().isF32(),
           std::vector<int64_t>(t.getShape().begin(), t.getShape().end())});
    }
  }

  // Each chunk's forward, backward and update bodies.
  SmallVector<std::array<std::string, 3>> bodies(numChunks);
  for (int64_t c = 0; c < numChunks; ++c) {
    st.forward = chunkFns[c][0];
    st.inputBase = inputBase[c];
    st.firstForward = firstOf(pipeline::Phase::Forward, c);
    st.firstBackward = firstOf(pipeline::Phase::Backward, c);
    for (int k = 0; k < 3; ++k) {
      st.profileFunction = k == 0 ? "forward" : k == 1 ? "backward" : "update";
      st.profileChunk = c;
      FuncEmitter fe(st, chunkFns[c][k]);
      if (failed(fe.run()))
        return failure();
      bodies[c][k] = std::move(fe.body);
    }
  }

  MemoryPlan &m = result.memory;
  m.parameterBytes = plan.getParameters();
  m.optimizerBytes = plan.getOptimizer();
  m.gradientBytes = plan.getGradients();
  m.arenaConstantBytes = plan.getConstants();
  m.shadowBytes = plan.getShadows();
  m.stashBytesPerMicrobatch = plan.getStashSlot();
  m.stashBytes = plan.getStashSlot() * plan.getStashSlots();
  m.stashSlots = plan.getStashSlots();
  m.transientBytes = plan.getTransient();
  m.arenaBytes = plan.getArena();
  m.scratchBytes = plan.getScratch();
  if (options.cuda) {
    // The runtime double-buffers every tensor it sends (gp_send).
    std::set<std::pair<int64_t, int64_t>> sent;
    for (const EmittedTransfer &t : result.transfers)
      if (t.isSend && sent.insert({t.peer, t.tag}).second)
        m.sendStagingBytes += 2 * t.bytes;
  }
  for (const EmittedInput &in : result.inputs) {
    int64_t elements = 1;
    for (int64_t d : in.shape)
      elements *= d;
    m.inputBytes += elements * (in.isFloat ? 4 : 8);
  }

  // Program description.
  std::string desc;
  llvm::raw_string_ostream ds(desc);
  ds << "static const gp_tensor_desc kInputs[] = {\n";
  for (const EmittedInput &in : result.inputs)
    ds << "  {\"" << in.name << "\", nullptr, "
       << (in.isFloat ? "GP_F32" : "GP_I64") << ", " << in.shape.size() << ", "
       << st.shapeArray(in.shape) << ", 0},\n";
  ds << "  {nullptr, nullptr, GP_F32, 0, nullptr, 0}\n};\n";
  ds << "static const gp_tensor_desc kParams[] = {\n";
  for (auto &[name, t] : st.paramOrder) {
    EmittedParam ep{
        name, weightFileName(name, takenWeightFiles),
        std::vector<int64_t>(t.getShape().begin(), t.getShape().end())};
    ds << "  {\"" << llvm::StringRef(ep.name) << "\", \"" << ep.file
       << "\", GP_F32, " << t.getRank() << ", " << st.shapeArray(t.getShape())
       << ", " << st.paramOffset.lookup(name) << "},\n";
    result.params.push_back(std::move(ep));
  }
  ds << "  {nullptr, nullptr, GP_F32, 0, nullptr, 0}\n};\n";
  ds << "static const gp_state_desc kStates[] = {\n";
  for (const StageState::StateDesc &sd : st.stateDescs)
    ds << "  {\"" << llvm::StringRef(sd.param) << "\", \"" << sd.slot << "\", "
       << sd.offset << "LL, " << sd.elem << "LL},\n";
  ds << "  {nullptr, nullptr, 0, 0}\n};\n";
  ds << "static const gp_action kActions[] = {\n";
  for (pipeline::ActionAttr a : actions) {
    using pipeline::Phase;
    ds << "  {"
       << (a.getPhase() == Phase::Forward    ? "GP_FORWARD"
           : a.getPhase() == Phase::Backward ? "GP_BACKWARD"
           : a.getPhase() == Phase::Weight   ? "GP_WEIGHT"
           : a.getPhase() == Phase::Flush    ? "GP_FLUSH"
                                             : "GP_UPDATE")
       << ", " << a.getMicrobatch().value_or(-1) << ", " << a.getChunk()
       << "},\n";
    result.schedule.push_back(a.getShortName());
  }
  ds << "};\n";
  ds << "static const gp_transfer kTransfers[] = {\n";
  for (const EmittedTransfer &t : result.transfers)
    ds << "  {" << (t.isSend ? 1 : 0) << ", "
       << (t.phase == "backward" ? 1
           : t.phase == "update" ? 2
                                 : 0)
       << ", " << t.peer << ", " << t.tag << ", " << t.bytes << "LL, "
       << (t.perStep ? 1 : 0) << "},\n";
  ds << "  {0, 0, 0, 0, 0, 0}\n};\n";

  auto &src = result.source;
  llvm::raw_string_ostream ss(src);
  ss << "// Generated by gpipe-compile: stage program '" << programName
     << "' (stage " << stageIndex << " of " << numStages << ", "
     << st.microbatches << " micro-batch(es)"
     << (numChunks > 1 ? ", " + std::to_string(numChunks) + " model chunks"
                       : std::string())
     << "). Do not edit.\n"
     << (options.cuda ? "#include \"gpipe/runtime_cuda.h\"\n"
                      : "#include \"gpipe/runtime.h\"\n")
     << "\n#include <cmath>\n#include <cstdint>\n#include <cstring>\n\n";
  ss << st.globals << "\n" << desc << "\n";
  // Micro-batch mb's stash slot: mb itself when every micro-batch has one.
  const bool slotPerMicrobatch = st.stashSlots == st.microbatches;
  const std::string slots = std::to_string(st.stashSlots);
  const std::string stashPtr =
      "  unsigned char *S = A + " + std::to_string(st.stashBase) + "LL + " +
      (slotPerMicrobatch ? std::string("mb") : "(mb % " + slots + "LL)") +
      " * " + std::to_string(st.stashBytes) + "LL;\n";
  // One chunk: forward, backward, weight; several: forward_c0, ...
  auto fnName = [&](StringRef base, int64_t c) {
    return numChunks == 1 ? base.str() : (base + "_c" + Twine(c)).str();
  };
  auto ofChunk = [&](int64_t c) {
    return numChunks == 1
               ? std::string()
               : " of model chunk " + std::to_string(c) + " (virtual stage " +
                     std::to_string(*pipeline::getStage(chunkFns[c][0])) + ")";
  };
  for (int64_t c = 0; c < numChunks; ++c) {
    ss << "// Forward" << ofChunk(c)
       << " of micro-batch mb: keeps its stash in slot mb"
       << (slotPerMicrobatch ? std::string() : " mod " + slots) << ".\n"
       << "static void " << fnName("forward", c)
       << "(gp_step_ctx *ctx, int64_t mb) {\n"
       << "  unsigned char *A = ctx->arena;\n"
       << stashPtr << "  (void)A;\n  (void)S;\n"
       << bodies[c][0] << "}\n\n";
    ss << "// Backward" << ofChunk(c) << " of micro-batch mb, from its stash.\n"
       << "static void " << fnName("backward", c)
       << "(gp_step_ctx *ctx, int64_t mb) {\n"
       << "  unsigned char *A = ctx->arena;\n"
       << stashPtr << "  (void)A;\n  (void)S;\n"
       << bodies[c][1] << "}\n\n";
  }
  const bool sharded = st.shard > 1 && st.accumulatorEnd > st.accumulatorBegin;
  if (sharded)
    ss << "// --shard-optimizer: the parameters the update gathers from the\n"
       << "// replicas' shares: {offset, first float in the accumulators, "
          "floats}.\n"
       << "static const gp_shard_param kShardParams[] = {\n"
       << st.shardTable << "};\n\n";
  ss << "// The optimizer update, once per mini-batch; then the gradient\n"
     << "// accumulators start again from zero.\n"
     << "static void update(gp_step_ctx *ctx) {\n"
     << "  unsigned char *A = ctx->arena;\n  (void)A;\n";
  // Zeroes the accumulators the next step adds into.
  std::string clearAccumulators;
  if (st.clearedEnd > st.clearedBegin)
    clearAccumulators = (options.cuda ? "  gp_cuda_check(cudaMemsetAsync(A + "
                                      : "  std::memset(A + ") +
                        std::to_string(st.clearedBegin) + ", 0, " +
                        std::to_string(st.clearedEnd - st.clearedBegin) +
                        (options.cuda ? ", gp_cuda_stream()));\n" : ");\n");
  // --on-nan skip: every stage skips the step's update together (no
  // transfers either), keeping only the clearing.
  ss << "  if (ctx->skip_update) {\n"
     << clearAccumulators << "  return;\n  }\n";
  const bool ex = options.cuda || options.bf16; // gp_gemm_ex, not gp_gemm
  // dW += G^T X over the deferred operands' rows: all M micro-batches', or
  // (`someBlocks`) the row blocks of micro-batches first..first+count-1.
  auto deferredGemm = [&](Operation *gemm, const StageState::DeferredGemm &d,
                          bool someBlocks) {
    auto at = [&](int64_t offset, int64_t cols) {
      return std::to_string(offset) +
             (someBlocks
                  ? "LL + first * " + std::to_string(d.rows * cols * 4) + "LL"
                  : std::string());
    };
    std::string rows = someBlocks ? "count * " + std::to_string(d.rows)
                                  : std::to_string(d.rows * st.microbatches);
    std::string s;
    llvm::raw_string_ostream os(s);
    os << (ex ? "  gp_gemm_ex(1, 0, " : "  gp_gemm(1, 0, ") << d.gCols << ", "
       << d.xCols << ", " << rows << ", 1.0f, (const float *)(A + "
       << at(d.gOffset, d.gCols) << "), " << d.gCols << ", (const float *)(A + "
       << at(d.xOffset, d.xCols) << "), " << d.xCols << ", 1.0f, (float *)(A + "
       << d.accOffset << "), " << d.xCols
       << (ex ? std::string(", nullptr, 0, ") + st.mathMode() +
                    ", nullptr, nullptr"
              : std::string())
       << ");\n";
    // Timed as "weight" also when the update runs it: the cost table keeps
    // a node's deferred GEMMs apart from the optimizer's update.
    st.profileFunction = "weight";
    st.profileChunk = d.chunk;
    return st.timed({gemm}, s);
  };
  // --data-parallel: the replicas average each gradient once it is final.
  const bool average = options.dataParallel > 1 && !sharded &&
                       st.accumulatorEnd > st.accumulatorBegin;
  if (average)
    result.allReduceBytes = st.accumulatorEnd - st.accumulatorBegin;
  auto startAverage = [&](int64_t offset, int64_t bytes) {
    ss << "  gp_reduce_start(ctx, " << offset << "LL, " << bytes << "LL);\n";
  };
  if (!st.weightActions) {
    // Those no GEMM below writes are final now: started first, they move
    // while the weight-gradient GEMMs run, each of whose results starts as
    // soon as it is computed.
    if (average) {
      ss << "  // the " << options.dataParallel
         << " replicas' gradients, averaged as each is final "
            "(--data-parallel)\n";
      std::vector<std::pair<int64_t, int64_t>> later;
      for (auto &entry : st.deferred)
        later.push_back({entry.second.accOffset,
                         entry.second.accOffset + entry.second.accBytes});
      llvm::sort(later);
      int64_t at = st.accumulatorBegin;
      for (auto [lo, hi] : later) {
        if (lo > at)
          startAverage(at, lo - at);
        at = std::max(at, hi);
      }
      if (st.accumulatorEnd > at)
        startAverage(at, st.accumulatorEnd - at);
    }
    // An accumulator several GEMMs write (a weight used twice) starts
    // after the last of them.
    llvm::DenseMap<int64_t, Operation *> lastWriter;
    for (auto &entry : st.deferred)
      lastWriter[entry.second.accOffset] = entry.first;
    for (auto &entry : st.deferred) {
      ss << "  // weight gradient of '" << entry.second.param << "' over all "
         << st.microbatches << " micro-batches\n"
         << deferredGemm(entry.first, entry.second, false);
      if (average && lastWriter.lookup(entry.second.accOffset) == entry.first)
        startAverage(entry.second.accOffset, entry.second.accBytes);
    }
    if (average)
      ss << "  gp_reduce_wait(ctx);\n";
  } else if (average) {
    // Every gradient is final (the W actions ran before the update).
    ss << "  // the " << options.dataParallel
       << " replicas' gradients, averaged (--data-parallel)\n"
       << "  gp_reduce_gradients(ctx, " << st.accumulatorBegin << "LL, "
       << st.accumulatorEnd - st.accumulatorBegin << "LL);\n";
  }
  // --shard-optimizer: this replica's share of the gradients, averaged
  // (reduce-scatter); each update below changes its share of a parameter;
  // then the parameters are gathered from all shares.
  const std::string accRange =
      std::to_string(st.accumulatorBegin) + "LL, " +
      std::to_string(st.accumulatorEnd - st.accumulatorBegin) + "LL";
  if (sharded) {
    result.allReduceBytes = st.accumulatorEnd - st.accumulatorBegin;
    ss << "  // this replica's share of the " << options.dataParallel
       << " replicas' gradients, averaged (--shard-optimizer)\n"
       << "  gp_shard_reduce(ctx, " << accRange << ");\n";
  }
  // Every chunk's update, the last chunk first (gpipe-check-schedule checks
  // the transfers in that order).
  for (int64_t c = numChunks - 1; c >= 0; --c)
    ss << (numChunks == 1
               ? bodies[c][2]
               : "  { // update" + ofChunk(c) + "\n" + bodies[c][2] + "  }\n");
  if (sharded)
    ss << "  // every replica's share of the parameters (--shard-optimizer)\n"
       << "  gp_shard_gather(ctx, " << accRange << ", kShardParams, "
       << st.shardEntries << ");\n";
  ss << clearAccumulators << "}\n\n";
  if (st.weightActions) {
    for (int64_t c = 0; c < numChunks; ++c) {
      ss << "// W" << ofChunk(c)
         << " of micro-batches first..first+count-1: their\n"
         << "// weight-gradient GEMMs, from the operands their backwards kept\n"
         << "// (gpipe-split-weight-grad), in consecutive row blocks.\n"
         << "static void " << fnName("weight", c)
         << "(gp_step_ctx *ctx, int64_t first, int64_t count) {\n"
         << "  unsigned char *A = ctx->arena;\n  (void)A;\n  (void)first;\n"
         << "  (void)count;\n";
      for (auto &entry : st.deferred)
        if (entry.second.chunk == c)
          ss << "  // weight gradient of '" << entry.second.param << "'\n"
             << deferredGemm(entry.first, entry.second, true);
      ss << "}\n\n";
    }
  }
  // bf16: the parameters' bf16 copies start from the loaded weights.
  for (auto &[name, t] : st.paramOrder)
    if (auto it = st.shadowOffset.find(name); it != st.shadowOffset.end())
      st.initBody += "  gp_cast_bf16((const float *)(A + " +
                     std::to_string(st.paramOffset.lookup(name)) +
                     "), (void *)(A + " + std::to_string(it->second) + "), " +
                     std::to_string(t.getNumElements()) + ");\n";
  if (!st.initBody.empty())
    ss << "// Once, after the parameters are loaded: constants and bf16 "
          "copies.\nstatic void init(gp_step_ctx *ctx) {\n"
       << "  unsigned char *A = ctx->arena;\n"
       << st.initBody << "}\n\n";
  if (numChunks > 1) {
    ss << "static const gp_chunk kChunks[] = {\n";
    for (int64_t c = 0; c < numChunks; ++c)
      ss << "  {" << fnName("forward", c) << ", " << fnName("backward", c)
         << ", " << (st.weightActions ? fnName("weight", c) : "nullptr")
         << "},\n";
    ss << "};\n\n";
  }
  if (!st.profileUnits.empty()) {
    ss << "// --profile: the timed units.\n"
       << st.profileOps << "static const gp_profile_unit kProfileUnits[] = {\n";
    for (const std::string &u : st.profileUnits)
      ss << u;
    ss << "};\n\n";
  }
  ss << "static const gp_program kProgram = {\"" << programName << "\", "
     << stageIndex << ", " << numStages << ", " << st.microbatches << ", "
     << batch << "LL, " << result.inputs.size() << ", kInputs, "
     << result.params.size() << ", kParams, " << m.arenaBytes << "LL, "
     << actions.size() << ", kActions, " << fnName("forward", 0) << ", "
     << fnName("backward", 0) << ", update, " << (result.hasLoss ? 1 : 0)
     << ", \"" << buildId << "\", " << result.transfers.size()
     << ", kTransfers, " << (options.cuda ? "GP_TARGET_CUDA" : "GP_TARGET_CPU")
     << ", " << st.scratchBytes << "LL, "
     << (st.initBody.empty() ? "nullptr" : "init") << ", "
     << (result.bufferedSends ? 1 : 0) << ", " << st.stateDescs.size()
     << ", kStates, "
     << (st.weightActions ? fnName("weight", 0) : std::string("nullptr"))
     << ", " << numChunks << ", " << (numChunks > 1 ? "kChunks" : "nullptr")
     << (st.profileUnits.empty()
             ? std::string(", 0, nullptr")
             : ", " + std::to_string(st.profileUnits.size()) +
                   ", kProfileUnits")
     << ", " << options.dataParallel << ", " << (st.shard > 1 ? st.shard : 0)
     << ", "
     << (st.shard > 1 ? (st.accumulatorEnd - st.accumulatorBegin) / 4 : 0)
     << "LL};\n\n"
     << "int main(int argc, char **argv) { return gp_main(argc, argv, "
        "&kProgram); }\n";
  return std::move(result);
}
