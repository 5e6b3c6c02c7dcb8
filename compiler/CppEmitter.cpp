// Lowers a training step (nn + pipe ops) to a C++ stage program on the runtime.
//
// Memory: one arena per stage, planned here. Graph inputs, parameters and
// optimizer state live for the whole run; every other tensor gets a slot that
// is reused once its last reader has run (first fit, 64-byte aligned).
// Reshapes are views and allocate nothing.
#include "compiler/CppEmitter.h"

#include "dialects/nn/NNOps.h"
#include "dialects/pipe/PipeOps.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
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

constexpr int64_t kAlign = 64;
// Loops with at least this many elements are split over the stage's threads
// (OpenMP); smaller ones cost more to wake a team for than they save.
constexpr int64_t kParallelMin = 1 << 15;

/// The scalar C++ expression an elementwise op computes from its operands'
/// scalar expressions `a` (in operand order); nullopt for other ops. With an
/// empty `a` it only answers whether `op` is elementwise.
std::optional<std::string> scalarExpr(Operation *op, ArrayRef<std::string> a) {
  if (!isa<nn::AddOp, nn::SubOp, nn::MulOp, nn::DivOp, nn::NegOp, nn::ReluOp,
           nn::TanhOp, nn::SigmoidOp, nn::ErfOp, nn::ReluGradOp, nn::TanhGradOp,
           nn::SigmoidGradOp, nn::ErfGradOp>(op))
    return std::nullopt;
  if (a.empty())
    return std::string();
  if (isa<nn::AddOp>(op))
    return a[0] + " + " + a[1];
  if (isa<nn::SubOp>(op))
    return a[0] + " - " + a[1];
  if (isa<nn::MulOp>(op))
    return a[0] + " * " + a[1];
  if (isa<nn::DivOp>(op))
    return a[0] + " / " + a[1];
  if (isa<nn::NegOp>(op))
    return "-" + a[0];
  if (isa<nn::ReluOp>(op))
    return a[0] + " > 0.f ? " + a[0] + " : 0.f";
  if (isa<nn::TanhOp>(op))
    return "std::tanh(" + a[0] + ")";
  if (isa<nn::SigmoidOp>(op))
    return "1.f / (1.f + std::exp(-" + a[0] + "))";
  if (isa<nn::ErfOp>(op))
    return "std::erf(" + a[0] + ")";
  if (isa<nn::ReluGradOp>(op))
    return a[0] + " > 0.f ? " + a[1] + " : 0.f";
  if (isa<nn::TanhGradOp>(op))
    return a[1] + " * (1.f - " + a[0] + " * " + a[0] + ")";
  if (isa<nn::SigmoidGradOp>(op))
    return a[1] + " * (" + a[0] + " * (1.f - " + a[0] + "))";
  // d/dx erf(x) = 2/sqrt(pi) * exp(-x^2)
  return a[1] + " * (1.12837916709551257f * std::exp(-" + a[0] + " * " + a[0] +
         "))";
}

int64_t alignUp(int64_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

RankedTensorType tensorType(Value v) {
  return cast<RankedTensorType>(v.getType());
}

int64_t bytesOf(Value v) {
  auto t = tensorType(v);
  return t.getNumElements() * (t.getElementType().isF32() ? 4 : 8);
}

/// First-fit allocator over arena offsets.
class SlotAllocator {
public:
  explicit SlotAllocator(int64_t base) : base(base), top(base) {}
  int64_t allocate(int64_t size) {
    size = alignUp(std::max<int64_t>(size, 1));
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
  int64_t base, top;
  std::set<std::pair<int64_t, int64_t>> live;
};

class Emitter {
public:
  Emitter(func::FuncOp func, std::string name)
      : func(func), programName(std::move(name)), os(body), gs(globals) {}
  FailureOr<EmittedStage> run();

private:
  LogicalResult plan();
  LogicalResult emitOp(Operation *op);
  std::string ptr(Value v, bool isConst = true);
  /// Groups consecutive elementwise ops of one result shape into units
  /// emitted as one loop; every other op is a unit of its own.
  void formUnits();
  /// One loop over `shape` reading `ins` (broadcast) and writing `outs`;
  /// `body` gets the element references of each.
  void emitLoop(ArrayRef<int64_t> shape, ArrayRef<Value> ins,
                ArrayRef<Value> outs,
                const std::function<std::string(ArrayRef<std::string>,
                                                ArrayRef<std::string>)> &body);
  void emitElementwise(ArrayRef<Operation *> group);
  std::string emitConstant(nn::ConstantOp op);
  std::string shapeArray(ArrayRef<int64_t> shape);

  func::FuncOp func;
  std::string programName;
  std::string body, globals;
  llvm::raw_string_ostream os, gs;
  // Value -> arena offset (or, for constants, a global array name).
  llvm::DenseMap<Value, int64_t> offsets;
  llvm::DenseMap<Value, std::string> constNames;
  llvm::DenseMap<Operation *, llvm::SmallVector<int64_t>> optimizerState;
  // Execution units (a fused elementwise group or one op), in program order.
  std::vector<llvm::SmallVector<Operation *>> units;
  llvm::DenseMap<Operation *, int64_t> unitOf;
  // Values computed and consumed inside one fused group: no storage.
  llvm::DenseSet<Value> fusedAway;
  EmittedStage result;
  int counter = 0;
};

} // namespace

std::string Emitter::shapeArray(ArrayRef<int64_t> shape) {
  std::string name = "shape" + std::to_string(counter++);
  gs << "static const int64_t " << name << "[] = {";
  for (size_t i = 0; i < shape.size(); ++i)
    gs << (i ? ", " : "") << shape[i];
  if (shape.empty())
    gs << "1";
  gs << "};\n";
  return name;
}

std::string Emitter::emitConstant(nn::ConstantOp op) {
  std::string name = "const" + std::to_string(counter++);
  auto attr = cast<DenseElementsAttr>(op.getValue());
  auto type = tensorType(op.getOutput());
  bool isFloat = type.getElementType().isF32();
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
  result.memory.constantBytes += bytesOf(op.getOutput());
  return name;
}

std::string Emitter::ptr(Value v, bool isConst) {
  auto t = tensorType(v);
  const char *elem = t.getElementType().isF32() ? "float" : "int64_t";
  if (auto it = constNames.find(v); it != constNames.end())
    return it->second;
  return std::string("((") + (isConst ? "const " : "") + elem + " *)(A + " +
         std::to_string(offsets.lookup(v)) + "))";
}

void Emitter::formUnits() {
  Block &block = func.getBody().front();
  int64_t open = -1; // the elementwise group still accepting ops
  for (Operation &op : block) {
    bool elementwise = scalarExpr(&op, {}).has_value();
    if (elementwise && open >= 0 &&
        tensorType(op.getResult(0)).getShape() ==
            tensorType(units[open].front()->getResult(0)).getShape()) {
      units[open].push_back(&op);
      unitOf[&op] = open;
      continue;
    }
    units.push_back({&op});
    unitOf[&op] = units.size() - 1;
    // Parameters and constants emit no code: a group continues past them.
    if (isa<nn::ParamOp, nn::ConstantOp>(op))
      continue;
    open = elementwise ? int64_t(units.size()) - 1 : -1;
  }
  for (auto &unit : units) {
    if (unit.size() < 2)
      continue;
    for (Operation *op : unit) {
      Value r = op->getResult(0);
      if (!r.use_empty() && llvm::all_of(r.getUsers(), [&](Operation *user) {
            return unitOf.lookup(user) == unitOf.lookup(op);
          }))
        fusedAway.insert(r);
    }
  }
}

LogicalResult Emitter::plan() {
  Block &block = func.getBody().front();
  // Aliases: a reshape's result is a view of its input's storage.
  llvm::DenseMap<Value, Value> root;
  auto rootOf = [&](Value v) {
    while (root.count(v))
      v = root.lookup(v);
    return v;
  };
  std::vector<Operation *> order;
  for (Operation &op : block)
    order.push_back(&op);
  // Liveness is counted in units: a fused group is one step, so none of its
  // outputs can share storage with any of its (possibly broadcast) inputs.
  llvm::DenseMap<Operation *, int64_t> index = unitOf;
  for (Operation *op : order)
    if (auto r = dyn_cast<nn::ReshapeOp>(op))
      root[r.getOutput()] = r.getInput();

  // Permanent storage first: inputs, parameters, optimizer state.
  int64_t cursor = 0;
  auto permanent = [&](int64_t bytes) {
    int64_t at = cursor;
    cursor += alignUp(bytes);
    return at;
  };
  for (BlockArgument arg : block.getArguments()) {
    offsets[arg] = permanent(bytesOf(arg));
    result.memory.inputBytes += bytesOf(arg);
  }
  for (Operation *op : order) {
    if (auto p = dyn_cast<nn::ParamOp>(op)) {
      offsets[p.getOutput()] = permanent(bytesOf(p.getOutput()));
      result.memory.parameterBytes += bytesOf(p.getOutput());
    } else if (auto c = dyn_cast<nn::ConstantOp>(op)) {
      constNames[c.getOutput()] = emitConstant(c);
    }
  }
  for (Operation *op : order) {
    int buffers = 0;
    Value param;
    if (auto sgd = dyn_cast<pipeline::SGDUpdateOp>(op)) {
      buffers = sgd.getMomentum().convertToDouble() > 0 ? 1 : 0;
      param = sgd.getParam();
    } else if (auto adam = dyn_cast<pipeline::AdamUpdateOp>(op)) {
      buffers = 2;
      param = adam.getParam();
    }
    for (int k = 0; k < buffers; ++k) {
      optimizerState[op].push_back(permanent(bytesOf(param)));
      result.memory.optimizerBytes += bytesOf(param);
    }
  }

  // Temporaries: last use (through views) decides when a slot is free again.
  llvm::DenseMap<Value, int64_t> lastUse;
  for (Operation *op : order)
    for (Value operand : op->getOperands()) {
      Value r = rootOf(operand);
      lastUse[r] = std::max<int64_t>(lastUse.lookup(r), index[op]);
    }
  SlotAllocator slots(cursor);
  std::vector<std::pair<Value, int64_t>> temporaries; // (value, defining op)
  for (auto [u, unit] : llvm::enumerate(units)) {
    int64_t unitIndex = u;
    for (Operation *op : unit)
      for (Value res : op->getResults()) {
        if (offsets.count(res) || constNames.count(res) ||
            fusedAway.contains(res))
          continue;
        if (root.count(res)) {
          Value r = rootOf(res);
          if (constNames.count(r))
            constNames[res] =
                "((" +
                std::string(tensorType(res).getElementType().isF32()
                                ? "const float"
                                : "const int64_t") +
                " *)" + constNames.lookup(r) + ")";
          else
            offsets[res] = offsets.lookup(r);
          continue;
        }
        offsets[res] = slots.allocate(bytesOf(res));
        // A result nobody reads is still written: free it after this unit.
        if (!lastUse.count(res))
          lastUse[res] = unitIndex;
        temporaries.push_back({res, unitIndex});
      }
    // Free after allocating the whole unit's results, so results never
    // overlap the operands they are computed from.
    auto releasable = [&](Value r) {
      return offsets.count(r) && !isa<BlockArgument>(r) &&
             !r.getDefiningOp<nn::ParamOp>() && !constNames.count(r) &&
             !fusedAway.contains(r);
    };
    llvm::DenseSet<Value> released;
    for (Operation *op : unit) {
      for (Value operand : op->getOperands()) {
        Value r = rootOf(operand);
        if (lastUse.lookup(r) == unitIndex && releasable(r) &&
            released.insert(r).second)
          slots.release(offsets.lookup(r));
      }
      for (Value res : op->getResults())
        if (!root.count(res) && lastUse.lookup(res) == unitIndex &&
            releasable(res) && res.use_empty() && released.insert(res).second)
          slots.release(offsets.lookup(res));
    }
  }
  // The plan is checked, not trusted: two tensors alive at the same time must
  // not share a byte.
  for (size_t i = 0; i < temporaries.size(); ++i) {
    auto [a, aDef] = temporaries[i];
    int64_t aEnd = lastUse.lookup(a), aOff = offsets.lookup(a);
    for (size_t j = i + 1; j < temporaries.size(); ++j) {
      auto [b, bDef] = temporaries[j];
      int64_t bEnd = lastUse.lookup(b), bOff = offsets.lookup(b);
      bool liveTogether = aDef <= bEnd && bDef <= aEnd;
      bool shareBytes = aOff < bOff + bytesOf(b) && bOff < aOff + bytesOf(a);
      if (liveTogether && shareBytes)
        return b.getDefiningOp()->emitError(
                   "internal error: the memory plan overlaps this result "
                   "with one that is still alive (")
               << a.getDefiningOp()->getName() << ")";
    }
  }
  result.memory.activationBytes = slots.peak() - cursor;
  result.memory.arenaBytes = slots.peak();
  return success();
}

void Emitter::emitLoop(
    ArrayRef<int64_t> shape, ArrayRef<Value> ins, ArrayRef<Value> outs,
    const std::function<std::string(ArrayRef<std::string>,
                                    ArrayRef<std::string>)> &body) {
  int64_t rank = shape.size();
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  os << "  {\n";
  for (auto [k, v] : llvm::enumerate(outs))
    os << "    float *o" << k << " = " << ptr(v, false) << ";\n";
  for (auto [k, v] : llvm::enumerate(ins))
    os << "    const float *x" << k << " = " << ptr(v) << ";\n";
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
    if (n >= kParallelMin)
      os << "#pragma omp parallel for schedule(static)\n";
    os << "    for (int64_t i = 0; i < " << n << "; ++i) {\n"
       << body(inRefs, outRefs) << "    }\n  }\n";
    return;
  }
  // Broadcast: nested loops; each operand indexed with stride 0 on the
  // dimensions it broadcasts along.
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
  if (n >= kParallelMin && shape[0] > 1)
    os << "#pragma omp parallel for schedule(static)\n";
  for (int64_t d = 0; d < rank; ++d)
    os << std::string(4 + 2 * d, ' ') << "for (int64_t i" << d << " = 0; i" << d
       << " < " << shape[d] << "; ++i" << d << ")"
       << (d + 1 == rank ? " {" : "") << "\n";
  os << body(inRefs, outRefs) << "    }\n  }\n";
}

void Emitter::emitElementwise(ArrayRef<Operation *> group) {
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
                       *scalarExpr(op, args) + ";\n";
               names[op->getResult(0)] = var;
             }
             for (auto [k, v] : llvm::enumerate(outs))
               text += "      " + outRefs[k] + " = " + names.lookup(v) + ";\n";
             return text;
           });
}

static std::string floatLit(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  std::string s = buf;
  if (s.find_first_of(".en") == std::string::npos)
    s += ".0";
  return s + "f";
}

LogicalResult Emitter::emitOp(Operation *op) {
  // Ops that only name storage (views, values) emit nothing.
  if (isa<nn::ParamOp, nn::ConstantOp, nn::ReshapeOp, func::ReturnOp>(op))
    return success();
  // A comment naming the ONNX node keeps the generated code traceable.
  os << "  // " << op->getName();
  if (auto name = dyn_cast<NameLoc>(op->getLoc()))
    os << " (node '" << name.getName().getValue() << "')";
  os << "\n";
  if (scalarExpr(op, {}))
    return emitElementwise(ArrayRef<Operation *>(op)), success();
  if (auto o = dyn_cast<nn::GemmOp>(op)) {
    auto at = tensorType(o.getA()), bt = tensorType(o.getB());
    auto out = tensorType(o.getOutput());
    int64_t m = out.getDimSize(0), n = out.getDimSize(1);
    int64_t k = o.getTransA() ? at.getDimSize(0) : at.getDimSize(1);
    float beta = 0.f;
    if (o.getC()) {
      // out = beta * broadcast(C), then the GEMM accumulates into it.
      float cb = o.getBeta().convertToFloat();
      Value c = o.getC();
      emitLoop(tensorType(o.getOutput()).getShape(), {c}, {o.getOutput()},
               [cb](ArrayRef<std::string> in, ArrayRef<std::string> out) {
                 return "      " + out[0] + " = " +
                        (cb == 1.f ? in[0] : floatLit(cb) + " * " + in[0]) +
                        ";\n";
               });
      beta = 1.f;
    }
    os << "  gp_gemm(" << o.getTransA() << ", " << o.getTransB() << ", " << m
       << ", " << n << ", " << k << ", "
       << floatLit(o.getAlpha().convertToFloat()) << ", " << ptr(o.getA())
       << ", " << at.getDimSize(1) << ", " << ptr(o.getB()) << ", "
       << bt.getDimSize(1) << ", " << floatLit(beta) << ", "
       << ptr(o.getOutput(), false) << ", " << n << ");\n";
    return success();
  }
  if (auto o = dyn_cast<nn::ReduceToOp>(op)) {
    auto in = tensorType(o.getInput()), out = tensorType(o.getOutput());
    llvm::SmallVector<int64_t> padded(in.getRank() - out.getRank(), 1);
    padded.append(out.getShape().begin(), out.getShape().end());
    if (in.getRank() == 0) {
      os << "  " << ptr(o.getOutput(), false) << "[0] = " << ptr(o.getInput())
         << "[0];\n";
      return success();
    }
    os << "  gp_reduce_to(" << ptr(o.getInput()) << ", "
       << shapeArray(in.getShape()) << ", " << ptr(o.getOutput(), false) << ", "
       << shapeArray(padded) << ", " << in.getRank() << ");\n";
    return success();
  }
  auto blockCopy = [&](Value dst, int64_t dstStride, int64_t dstOffset,
                       Value src, int64_t srcStride, int64_t srcOffset,
                       int64_t outer, int64_t count, int64_t elemBytes) {
    os << "  gp_copy_blocks(" << ptr(dst, false) << " + " << dstOffset << ", "
       << dstStride << ", " << ptr(src) << " + " << srcOffset << ", "
       << srcStride << ", " << outer << ", " << count << ", " << elemBytes
       << ");\n";
  };
  auto outerInner = [](RankedTensorType t, int64_t axis) {
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < t.getRank(); ++d) {
      if (d < axis)
        outer *= t.getDimSize(d);
      if (d > axis)
        inner *= t.getDimSize(d);
    }
    return std::make_pair(outer, inner);
  };
  if (auto o = dyn_cast<nn::TransposeOp>(op)) {
    auto in = tensorType(o.getInput()), out = tensorType(o.getOutput());
    const char *elem = in.getElementType().isF32() ? "float" : "int64_t";
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
    os << "  {\n    " << elem << " *o = " << ptr(o.getOutput(), false)
       << ";\n    const " << elem << " *x0 = " << ptr(o.getInput()) << ";\n";
    for (int64_t d = 0; d < rank; ++d)
      os << std::string(4 + 2 * d, ' ') << "for (int64_t i" << d << " = 0; i"
         << d << " < " << out.getDimSize(d) << "; ++i" << d << ")\n";
    os << std::string(4 + 2 * rank, ' ') << "o[" << (rank ? outIdx : "0")
       << "] = x0[" << (rank ? inIdx : "0") << "];\n  }\n";
    return success();
  }
  if (auto o = dyn_cast<nn::ConcatOp>(op)) {
    auto out = tensorType(o.getOutput());
    int64_t axis = o.getAxis();
    auto [outer, inner] = outerInner(out, axis);
    int64_t elem = out.getElementType().isF32() ? 4 : 8;
    int64_t start = 0;
    for (Value in : o.getInputs()) {
      int64_t len = tensorType(in).getDimSize(axis);
      blockCopy(o.getOutput(), out.getDimSize(axis) * inner, start * inner, in,
                len * inner, 0, outer, len * inner, elem);
      start += len;
    }
    return success();
  }
  if (auto o = dyn_cast<nn::SliceOp>(op)) {
    auto in = tensorType(o.getInput()), out = tensorType(o.getOutput());
    int64_t axis = o.getAxis();
    auto [outer, inner] = outerInner(in, axis);
    int64_t len = out.getDimSize(axis);
    blockCopy(o.getOutput(), len * inner, 0, o.getInput(),
              in.getDimSize(axis) * inner, o.getStart() * inner, outer,
              len * inner, in.getElementType().isF32() ? 4 : 8);
    return success();
  }
  auto ignoreArgs = [](std::optional<int64_t> ignore) {
    return std::to_string(ignore ? 1 : 0) + ", " +
           std::to_string(ignore ? *ignore : 0) + "LL";
  };
  if (auto o = dyn_cast<nn::SoftmaxCrossEntropyOp>(op)) {
    auto lt = tensorType(o.getLogits());
    // Labels read from a data file are checked, so a bad label is an error
    // naming the input and sample (as torch raises), not a NaN loss.
    Value labels = o.getLabels();
    while (auto r = labels.getDefiningOp<nn::ReshapeOp>())
      labels = r.getInput();
    if (auto arg = dyn_cast<BlockArgument>(labels))
      if (auto name =
              func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "nn.input"))
        os << "  gp_check_labels(ctx, " << ptr(o.getLabels()) << ", "
           << lt.getDimSize(0) << ", " << lt.getDimSize(1) << ", "
           << ignoreArgs(o.getIgnoreIndex()) << ", \"" << name.getValue()
           << "\");\n";
    os << "  gp_softmax_xent_fwd(" << ptr(o.getLogits()) << ", "
       << ptr(o.getLabels()) << ", " << lt.getDimSize(0) << ", "
       << lt.getDimSize(1) << ", " << ignoreArgs(o.getIgnoreIndex()) << ", "
       << ptr(o.getLoss(), false) << ", nullptr);\n";
    return success();
  }
  if (auto o = dyn_cast<nn::SoftmaxCrossEntropyGradOp>(op)) {
    auto lt = tensorType(o.getLogits());
    os << "  gp_softmax_xent_bwd(" << ptr(o.getLogits()) << ", "
       << ptr(o.getLabels()) << ", " << lt.getDimSize(0) << ", "
       << lt.getDimSize(1) << ", " << ignoreArgs(o.getIgnoreIndex()) << ", "
       << ptr(o.getGrad()) << ", " << ptr(o.getOutput(), false) << ");\n";
    return success();
  }
  auto statePtr = [&](Operation *op, int k) {
    return "((float *)(A + " + std::to_string(optimizerState[op][k]) + "))";
  };
  if (auto o = dyn_cast<pipeline::SGDUpdateOp>(op)) {
    bool momentum = o.getMomentum().convertToDouble() > 0;
    os << "  gp_sgd_update(" << ptr(o.getParam(), false) << ", "
       << ptr(o.getGrad()) << ", " << (momentum ? statePtr(op, 0) : "nullptr")
       << ", " << tensorType(o.getParam()).getNumElements() << ", "
       << floatLit(o.getLr().convertToDouble()) << ", "
       << floatLit(o.getMomentum().convertToDouble()) << ", "
       << floatLit(o.getWeightDecay().convertToDouble()) << ", "
       << o.getNesterov() << ", ctx->step);\n";
    return success();
  }
  if (auto o = dyn_cast<pipeline::AdamUpdateOp>(op)) {
    os << "  gp_adam_update(" << ptr(o.getParam(), false) << ", "
       << ptr(o.getGrad()) << ", " << statePtr(op, 0) << ", " << statePtr(op, 1)
       << ", " << tensorType(o.getParam()).getNumElements() << ", "
       << floatLit(o.getLr().convertToDouble()) << ", "
       << floatLit(o.getBeta1().convertToDouble()) << ", "
       << floatLit(o.getBeta2().convertToDouble()) << ", "
       << floatLit(o.getEps().convertToDouble()) << ", "
       << floatLit(o.getWeightDecay().convertToDouble()) << ", "
       << o.getDecoupled() << ", ctx->step);\n";
    return success();
  }
  return op->emitError("code generation does not support '")
         << op->getName() << "' yet";
}

FailureOr<EmittedStage> Emitter::run() {
  if (!func.getBody().hasOneBlock())
    return func.emitError("code generation needs a single-block function");
  Block &block = func.getBody().front();
  for (Operation &op : block)
    if (auto cost = dyn_cast<nn::CostOpInterface>(op))
      result.flops += cost.getFlops();
  formUnits();
  if (failed(plan()))
    return failure();

  std::optional<unsigned> lossIndex;
  for (unsigned i = 0; i < func.getNumResults(); ++i)
    if (func.getResultAttr(i, "nn.loss"))
      lossIndex = i;
  for (auto &unit : units) {
    if (unit.size() == 1) {
      if (failed(emitOp(unit.front())))
        return failure();
      continue;
    }
    os << "  // fused:";
    for (Operation *op : unit) {
      os << " " << op->getName().stripDialect();
      if (auto name = dyn_cast<NameLoc>(op->getLoc()))
        os << " ('" << name.getName().getValue() << "')";
    }
    os << "\n";
    emitElementwise(unit);
  }

  // Program description.
  std::string desc;
  llvm::raw_string_ostream ds(desc);
  ds << "static const gp_tensor_desc kInputs[] = {\n";
  for (BlockArgument arg : block.getArguments()) {
    auto name =
        func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "nn.input");
    auto t = tensorType(arg);
    ds << "  {\"" << (name ? name.getValue() : "") << "\", nullptr, "
       << (t.getElementType().isF32() ? "GP_F32" : "GP_I64") << ", "
       << t.getRank() << ", " << shapeArray(t.getShape()) << ", "
       << offsets.lookup(arg) << "},\n";
  }
  ds << "  {nullptr, nullptr, GP_F32, 0, nullptr, 0}\n};\n";
  ds << "static const gp_tensor_desc kParams[] = {\n";
  std::vector<std::string> taken;
  for (Operation &op : block) {
    auto p = dyn_cast<nn::ParamOp>(op);
    if (!p)
      continue;
    auto t = tensorType(p.getOutput());
    EmittedParam ep{
        p.getName().str(), weightFileName(p.getName().str(), taken),
        std::vector<int64_t>(t.getShape().begin(), t.getShape().end())};
    ds << "  {\"" << llvm::StringRef(ep.name) << "\", \"" << ep.file
       << "\", GP_F32, " << t.getRank() << ", " << shapeArray(t.getShape())
       << ", " << offsets.lookup(p.getOutput()) << "},\n";
    result.params.push_back(std::move(ep));
  }
  ds << "  {nullptr, nullptr, GP_F32, 0, nullptr, 0}\n};\n";

  auto &src = result.source;
  llvm::raw_string_ostream ss(src);
  ss << "// Generated by gpipe-compile: stage program '" << programName
     << "'. Do not edit.\n"
     << "#include \"gpipe/runtime.h\"\n\n#include <cmath>\n#include "
        "<cstdint>\n\n";
  ss << globals << "\n" << desc << "\n";
  ss << "static float step(gp_step_ctx *ctx) {\n"
     << "  unsigned char *A = ctx->arena;\n"
     << body;
  if (lossIndex)
    ss << "  return " << ptr(block.getTerminator()->getOperand(*lossIndex))
       << "[0];\n";
  else
    ss << "  return NAN;\n";
  ss << "}\n\n";
  ss << "static const gp_program kProgram = {\"" << programName << "\", "
     << block.getNumArguments() << ", kInputs, " << result.params.size()
     << ", kParams, " << result.memory.arenaBytes << "LL, step};\n\n"
     << "int main(int argc, char **argv) { return gp_main(argc, argv, "
        "&kProgram); }\n";
  return std::move(result);
}

FailureOr<EmittedStage> gpipe::emitStageCpp(func::FuncOp func,
                                            const std::string &programName) {
  Emitter emitter(func, programName);
  return emitter.run();
}
