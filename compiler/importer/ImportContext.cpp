// The import state op handlers share: values, constants, tensors, diagnostics.
#include "compiler/importer/ImportContext.h"

#include "compiler/ExternalData.h"

#include "dialects/nn/NNOps.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/Support/Path.h"

#include <cstring>

using namespace mlir;
using namespace gpipe::importer;

double gpipe::importer::elementAt(const ConstTensor &c, int64_t k) {
  return c.isFloat ? static_cast<double>(c.f[k]) : static_cast<double>(c.i[k]);
}

int64_t gpipe::importer::broadcastIndex(llvm::ArrayRef<int64_t> out, llvm::ArrayRef<int64_t> in,
                       int64_t flat) {
  int64_t index = 0, stride = 1;
  for (int64_t d = out.size() - 1, e = in.size() - 1; d >= 0; --d, --e) {
    int64_t coord = flat % out[d];
    flat /= out[d];
    if (e < 0)
      continue;
    if (in[e] != 1)
      index += coord * stride;
    stride *= in[e];
  }
  return index;
}

std::string gpipe::importer::shapeStr(llvm::ArrayRef<int64_t> shape) {
  std::string s = "[";
  for (size_t k = 0; k < shape.size(); ++k)
    s += (k ? ", " : "") + std::to_string(shape[k]);
  return s + "]";
}

const char *gpipe::importer::dtypeName(int32_t t) {
  return onnx::TensorProto_DataType_Name(
             static_cast<onnx::TensorProto_DataType>(t))
      .c_str();
}

std::string gpipe::importer::nodeName(const onnx::NodeProto &node) {
  if (!node.name().empty())
    return node.name();
  return node.output_size() ? node.output(0) : std::string("?");
}

const onnx::AttributeProto *
gpipe::importer::findAttr(const onnx::NodeProto &node, llvm::StringRef name) {
  for (const auto &a : node.attribute())
    if (a.name() == name)
      return &a;
  return nullptr;
}

int64_t gpipe::importer::intAttr(const onnx::NodeProto &node,
                                 llvm::StringRef name, int64_t dflt) {
  const auto *a = findAttr(node, name);
  return a ? a->i() : dflt;
}

float gpipe::importer::floatAttr(const onnx::NodeProto &node,
                                 llvm::StringRef name, float dflt) {
  const auto *a = findAttr(node, name);
  return a ? a->f() : dflt;
}

llvm::ArrayRef<int64_t> gpipe::importer::shapeOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getShape();
}

Value gpipe::importer::createReshape(OpBuilder &builder, Location loc, Value in,
                                     llvm::ArrayRef<int64_t> shape) {
  auto type = RankedTensorType::get(
      shape, cast<RankedTensorType>(in.getType()).getElementType());
  return nn::ReshapeOp::create(builder, loc, type, in);
}

Location ImportContext::nodeLoc(const onnx::NodeProto &node) {
  return NameLoc::get(StringAttr::get(&ctx, nodeName(node)), fileLoc);
}

InFlightDiagnostic ImportContext::nodeError(const onnx::NodeProto &node) {
  InFlightDiagnostic diag = emitError(fileLoc);
  if (node.name().empty())
    diag << "unnamed " << node.op_type() << " node producing '"
         << (node.output_size() ? node.output(0) : "") << "': ";
  else
    diag << "node '" << node.name() << "' (" << node.op_type() << "): ";
  return diag;
}

/// The MLIR value of a node input: graph inputs and computed values directly;
/// float initializers become parameters, other constants nn.constant, on
/// first use.
FailureOr<Value> ImportContext::valueOf(const onnx::NodeProto &node,
                                        int index) {
  if (index >= node.input_size() || node.input(index).empty())
    return nodeError(node) << "missing input #" << index, failure();
  const std::string &name = node.input(index);
  if (auto it = values.find(name); it != values.end())
    return it->second;
  const ConstTensor *c =
      isParameter(name) ? declaredOf(name) : constOf(name);
  if (!c)
    return nodeError(node) << "input '" << name << "' is never defined",
           failure();
  Value v;
  Location loc = NameLoc::get(StringAttr::get(&ctx, name), fileLoc);
  if (isParameter(name)) {
    // The parameter's symbol, declared before the training step (in order
    // of first use), then its value.
    auto func = builder.getBlock()->getParentOp();
    OpBuilder declare(func);
    bool state = runningStats.contains(name);
    bool frozen = !state && frozenParams.contains(name);
    nn::ParameterOp::create(declare, loc, declare.getStringAttr(name),
                            TypeAttr::get(f32(c->shape)),
                            state ? declare.getUnitAttr() : UnitAttr(),
                            frozen ? declare.getUnitAttr() : UnitAttr());
    v = nn::ParamOp::create(builder, loc, f32(c->shape), name);
    params.push_back({name, c->shape, c->f, c->externalFile,
                      c->externalOffset, state, frozen});
  } else if (c->isFloat) {
    auto type = f32(c->shape);
    v = nn::ConstantOp::create(
        builder, loc,
        DenseElementsAttr::get(type, llvm::ArrayRef<float>(c->f)));
  } else {
    auto type = RankedTensorType::get(c->shape, builder.getI64Type());
    v = nn::ConstantOp::create(
        builder, loc,
        DenseElementsAttr::get(type, llvm::ArrayRef<int64_t>(c->i)));
  }
  values[name] = v;
  return v;
}

FailureOr<Value> ImportContext::floatValueOf(const onnx::NodeProto &node,
                                             int index) {
  FailureOr<Value> v = valueOf(node, index);
  if (failed(v))
    return failure();
  Type elementType = cast<RankedTensorType>(v->getType()).getElementType();
  if (!elementType.isF32())
    return nodeError(node) << "input #" << index << " ('" << node.input(index)
                           << "') must be float32, got " << elementType,
           failure();
  return *v;
}

FailureOr<Value>
ImportContext::optionalFloatValueOf(const onnx::NodeProto &node, int index) {
  if (node.input_size() <= index || node.input(index).empty())
    return Value();
  return floatValueOf(node, index);
}

FailureOr<std::vector<int64_t>>
ImportContext::intsOperand(const onnx::NodeProto &node, int index,
                           const char *what) {
  if (index >= node.input_size() || node.input(index).empty())
    return nodeError(node) << "missing " << what, failure();
  const ConstTensor *c = constOf(node.input(index));
  if (!c || c->isFloat)
    return nodeError(node) << what << " ('" << node.input(index)
                           << "') must be a constant int64 tensor (an "
                              "initializer or Constant); computed shapes are "
                              "not supported",
           failure();
  return c->i;
}

FailureOr<int64_t> ImportContext::axisAttr(const onnx::NodeProto &node,
                                           int64_t dflt, int64_t rank) {
  int64_t axis = intAttr(node, "axis", dflt);
  if (axis < 0)
    axis += rank;
  if (axis < 0 || axis >= rank)
    return nodeError(node) << "axis " << intAttr(node, "axis", dflt)
                           << " is out of range for rank " << rank,
           failure();
  return axis;
}

FailureOr<llvm::SmallVector<bool>>
ImportContext::markAxes(const onnx::NodeProto &node,
                        llvm::ArrayRef<int64_t> axes, int64_t rank) {
  llvm::SmallVector<bool> marked(rank, false);
  for (int64_t a : axes) {
    int64_t norm = a < 0 ? a + rank : a;
    if (norm < 0 || norm >= rank || marked[norm])
      return nodeError(node) << "axis " << a << " is out of range or "
                             << "repeated (rank " << rank << ")",
             failure();
    marked[norm] = true;
  }
  return marked;
}

Value ImportContext::f32Scalar(float value, Location loc) {
  return nn::ConstantOp::create(
      builder, loc,
      DenseElementsAttr::get(f32({}), llvm::ArrayRef<float>(value)));
}

const ConstTensor *ImportContext::constOf(const std::string &name) const {
  auto it = consts.find(name);
  if (it == consts.end())
    return nullptr;
  ConstTensor &c = it->second;
  if (c.external) {
    // Checked when the initializer was declared (location, length); a
    // failure now is an I/O error, reported where the value is missing.
    std::string raw, err;
    if (!readExternalData(*c.external,
                          llvm::sys::path::parent_path(path).str(), raw, err) ||
        static_cast<int64_t>(raw.size()) != c.numElements() * 4) {
      mlir::emitError(fileLoc) << (err.empty() ? "tensor '" + name +
                                                     "': short external data"
                                               : err);
      return nullptr;
    }
    c.f.resize(static_cast<size_t>(c.numElements()));
    std::memcpy(c.f.data(), raw.data(), raw.size());
    c.external = nullptr;
    c.externalFile.clear();
  }
  return &c;
}

FailureOr<ConstTensor> ImportContext::readTensor(const onnx::TensorProto &t,
                                                 bool doubleAsFloat) {
  ConstTensor c;
  for (int64_t d : t.dims())
    c.shape.push_back(d);
  int64_t n = c.numElements();
  std::string raw;
  bool haveRaw = false;
  if (t.data_location() == onnx::TensorProto::EXTERNAL) {
    std::string err;
    if (!readExternalData(t, llvm::sys::path::parent_path(path).str(), raw,
                          err))
      return fileError() << err;
    haveRaw = true;
  } else if (t.has_raw_data()) {
    raw = t.raw_data();
    haveRaw = true;
  }
  auto sizeError = [&](int64_t have) {
    return fileError() << "tensor '" << t.name() << "' has " << have
                       << " values for its shape " << shapeStr(c.shape);
  };
  switch (t.data_type()) {
  case onnx::TensorProto::FLOAT:
    c.isFloat = true;
    if (haveRaw) {
      if (static_cast<int64_t>(raw.size()) != n * 4)
        return sizeError(raw.size() / 4);
      c.f.resize(n);
      std::memcpy(c.f.data(), raw.data(), n * 4);
    } else {
      c.f.assign(t.float_data().begin(), t.float_data().end());
    }
    if (static_cast<int64_t>(c.f.size()) != n)
      return sizeError(c.f.size());
    return c;
  case onnx::TensorProto::DOUBLE:
    if (!doubleAsFloat)
      break;
    c.isFloat = true;
    if (haveRaw) {
      if (static_cast<int64_t>(raw.size()) != n * 8)
        return sizeError(raw.size() / 8);
      for (int64_t k = 0; k < n; ++k) {
        double v;
        std::memcpy(&v, raw.data() + 8 * k, 8);
        c.f.push_back(static_cast<float>(v));
      }
    } else {
      c.f.assign(t.double_data().begin(), t.double_data().end());
    }
    if (static_cast<int64_t>(c.f.size()) != n)
      return sizeError(c.f.size());
    return c;
  case onnx::TensorProto::INT64:
  case onnx::TensorProto::INT32:
    if (haveRaw) {
      int width = t.data_type() == onnx::TensorProto::INT64 ? 8 : 4;
      if (static_cast<int64_t>(raw.size()) != n * width)
        return sizeError(raw.size() / width);
      c.i.resize(n);
      for (int64_t k = 0; k < n; ++k) {
        if (width == 8) {
          std::memcpy(&c.i[k], raw.data() + 8 * k, 8);
        } else {
          int32_t v;
          std::memcpy(&v, raw.data() + 4 * k, 4);
          c.i[k] = v;
        }
      }
    } else if (t.data_type() == onnx::TensorProto::INT64) {
      c.i.assign(t.int64_data().begin(), t.int64_data().end());
    } else {
      c.i.assign(t.int32_data().begin(), t.int32_data().end());
    }
    if (static_cast<int64_t>(c.i.size()) != n)
      return sizeError(c.i.size());
    return c;
  case onnx::TensorProto::BOOL: // as 0/1 integers (masks, Dropout's mode)
    if (haveRaw) {
      if (static_cast<int64_t>(raw.size()) != n)
        return sizeError(raw.size());
      for (int64_t k = 0; k < n; ++k)
        c.i.push_back(raw[k] != 0);
    } else {
      for (int32_t v : t.int32_data())
        c.i.push_back(v != 0);
    }
    if (static_cast<int64_t>(c.i.size()) != n)
      return sizeError(c.i.size());
    return c;
  default:
    break;
  }
  return fileError() << "tensor '" << t.name() << "' has element type "
                     << dtypeName(t.data_type())
                     << "; supported: FLOAT (float32), INT64, INT32, BOOL";
}
