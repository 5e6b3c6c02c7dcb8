// Normalization ONNX ops: Softmax and LogSoftmax (opset 13 semantics: one
// axis; models of older opsets arrive converted by the version converter),
// LayerNormalization (opset 17), RMSNormalization (opset 23) and
// GroupNormalization (opset 21), both op by op, BatchNormalization in training
// mode (opset 15) and Dropout.
#include "compiler/importer/OpTable.h"

#include "dialects/nn/NNOps.h"

using namespace mlir;
using namespace gpipe;
using namespace gpipe::importer;

/// Softmax or LogSoftmax along `axis` (default -1, the last) of a float32
/// tensor.
template <typename OpTy>
static LogicalResult importSoftmax(ImportContext &cx,
                                   const onnx::NodeProto &node) {
  FailureOr<Value> x = cx.floatValueOf(node, 0);
  if (failed(x))
    return failure();
  FailureOr<int64_t> axis = cx.axisAttr(node, -1, shapeOf(*x).size());
  if (failed(axis))
    return failure();
  cx.define(node, 0,
            OpTy::create(cx.getBuilder(), cx.nodeLoc(node), *x,
                         cx.getBuilder().getI64IntegerAttr(*axis)));
  return success();
}

/// A normalization's stash_type: 1 (float32 statistics) is the only one.
static LogicalResult checkStashType(ImportContext &cx,
                                    const onnx::NodeProto &node) {
  if (int64_t stash = intAttr(node, "stash_type", 1); stash != 1)
    return cx.nodeError(node)
           << "stash_type " << stash << " is not supported (only 1, float32)";
  return success();
}

/// The first normalized axis of a LayerNormalization or RMSNormalization (the
/// `axis` attribute, default -1, negative from the end), after checking that
/// stash_type is 1 and that each operand given (scale, bias) has exactly the
/// normalized shape, the input's axes from it.
static FailureOr<int64_t>
normalizedAxis(ImportContext &cx, const onnx::NodeProto &node,
               ArrayRef<int64_t> shape,
               ArrayRef<std::pair<const char *, Value>> operands) {
  FailureOr<int64_t> axis = cx.axisAttr(node, -1, shape.size());
  if (failed(axis) || failed(checkStashType(cx, node)))
    return failure();
  ArrayRef<int64_t> normalized = shape.drop_front(*axis);
  for (auto [what, v] : operands)
    if (v && shapeOf(v) != normalized)
      return cx.nodeError(node)
             << what << " must have the normalized shape "
             << shapeStr(normalized) << " (the input's axes from " << *axis
             << "), got " << shapeStr(shapeOf(v));
  return axis;
}

/// LayerNormalization over the axes [axis, rank) (axis default -1, negative
/// from the end) of a float32 tensor, with a scale and an optional bias of
/// exactly the normalized shape; stash_type 1 (float32) only. The optional
/// outputs Mean and InvStdDev are the op's statistics reshaped to ONNX's
/// [.., 1, 1].
static LogicalResult importLayerNormalization(ImportContext &cx,
                                              const onnx::NodeProto &node) {
  FailureOr<Value> x = cx.floatValueOf(node, 0),
                   scale = cx.floatValueOf(node, 1),
                   bias = cx.optionalFloatValueOf(node, 2);
  if (failed(x) || failed(scale) || failed(bias))
    return failure();
  ArrayRef<int64_t> shape = shapeOf(*x);
  int64_t rank = shape.size();
  FailureOr<int64_t> axisOrErr =
      normalizedAxis(cx, node, shape, {{"scale", *scale}, {"bias", *bias}});
  if (failed(axisOrErr))
    return failure();
  int64_t axis = *axisOrErr;
  OpBuilder &b = cx.getBuilder();
  Location loc = cx.nodeLoc(node);
  auto stats = cx.f32(shape.take_front(axis));
  auto ln = nn::LayerNormOp::create(
      b, loc, x->getType(), stats, stats, *x, *scale, *bias,
      b.getI64IntegerAttr(axis),
      b.getF32FloatAttr(floatAttr(node, "epsilon", 1e-5f)));
  cx.define(node, 0, ln.getOutput());
  SmallVector<int64_t> onnxStats(shape.take_front(axis));
  onnxStats.append(rank - axis, 1);
  for (int k : {1, 2})
    if (node.output_size() > k && !node.output(k).empty())
      cx.define(node, k, createReshape(b, loc, ln->getResult(k), onnxStats));
  return success();
}

/// RMSNormalization (opset 23) over the axes [axis, rank) of a float32
/// tensor, with a scale of exactly the normalized shape; stash_type 1 only:
/// x / sqrt(mean(x^2) + epsilon) * scale, op by op (the gradient follows
/// from the ops').
static LogicalResult importRMSNormalization(ImportContext &cx,
                                            const onnx::NodeProto &node) {
  FailureOr<Value> x = cx.floatValueOf(node, 0),
                   scale = cx.floatValueOf(node, 1);
  if (failed(x) || failed(scale))
    return failure();
  ArrayRef<int64_t> shape = shapeOf(*x);
  int64_t rank = shape.size();
  FailureOr<int64_t> axisOrErr =
      normalizedAxis(cx, node, shape, {{"scale", *scale}});
  if (failed(axisOrErr))
    return failure();
  int64_t axis = *axisOrErr;
  ArrayRef<int64_t> normalized = shape.drop_front(axis);
  OpBuilder &b = cx.getBuilder();
  Location loc = cx.nodeLoc(node);
  auto type = cast<RankedTensorType>(x->getType());
  SmallVector<int64_t> kept(shape.take_front(axis));
  kept.append(rank - axis, 1);
  int64_t count = 1;
  for (int64_t d : normalized)
    count *= d;
  auto scalar = [&](float v) { return cx.f32Scalar(v, loc); };
  Value sq = nn::MulOp::create(b, loc, type, *x, *x);
  Value sum = llvm::ArrayRef<int64_t>(kept) == shape
                  ? sq
                  : Value(nn::ReduceToOp::create(b, loc, cx.f32(kept), sq));
  Value mean = nn::DivOp::create(b, loc, cx.f32(kept), sum,
                                 scalar(static_cast<float>(count)));
  Value var = nn::AddOp::create(b, loc, cx.f32(kept), mean,
                                scalar(floatAttr(node, "epsilon", 1e-5f)));
  Value rms = nn::SqrtOp::create(b, loc, var);
  Value normed = nn::DivOp::create(b, loc, type, *x, rms);
  cx.define(node, 0, nn::MulOp::create(b, loc, type, normed, *scale));
  return success();
}

/// GroupNormalization (opset 21 form: scale and bias per channel; opset 18's
/// per-group ones arrive converted) of a float32 [N, C, ...] tensor:
/// num_groups G dividing C, each sample's group normalized with its own mean
/// and (biased) variance, then scale and bias per channel; stash_type 1 only.
/// Op by op: the input viewed as [N, G, C/G * spatial], nn.reduce_to and the
/// division by the count for the mean and variance, nn.sqrt, then back to the
/// input's shape and the channels' scale and bias as [C, 1, ...].
static LogicalResult importGroupNormalization(ImportContext &cx,
                                              const onnx::NodeProto &node) {
  FailureOr<Value> x = cx.floatValueOf(node, 0),
                   scale = cx.floatValueOf(node, 1),
                   bias = cx.floatValueOf(node, 2);
  if (failed(x) || failed(scale) || failed(bias))
    return failure();
  ArrayRef<int64_t> shape = shapeOf(*x);
  if (shape.size() < 2)
    return cx.nodeError(node)
           << "the input must be [N, C, ...], got " << shapeStr(shape);
  int64_t channels = shape[1];
  int64_t groups = intAttr(node, "num_groups", 0);
  if (groups <= 0 || channels % groups != 0)
    return cx.nodeError(node) << "num_groups " << groups
                              << " must be positive and divide the "
                              << channels << " channels";
  if (failed(checkStashType(cx, node)))
    return failure();
  for (auto [what, v] : {std::pair<const char *, Value>{"scale", *scale},
                         std::pair<const char *, Value>{"bias", *bias}})
    if (shapeOf(v) != ArrayRef<int64_t>{channels})
      return cx.nodeError(node)
             << what << " must have one value per channel [" << channels
             << "], got " << shapeStr(shapeOf(v));
  OpBuilder &b = cx.getBuilder();
  Location loc = cx.nodeLoc(node);
  int64_t count = 1;
  for (int64_t d : shape.drop_front(1))
    count *= d;
  count /= groups;
  SmallVector<int64_t> grouped = {shape[0], groups, count};
  SmallVector<int64_t> stats = {shape[0], groups, 1};
  auto gType = cx.f32(grouped), sType = cx.f32(stats);
  Value n = cx.f32Scalar(static_cast<float>(count), loc);
  Value xg = createReshape(b, loc, *x, grouped);
  Value mean = nn::DivOp::create(
      b, loc, sType, nn::ReduceToOp::create(b, loc, sType, xg), n);
  Value centered = nn::SubOp::create(b, loc, gType, xg, mean);
  Value sq = nn::MulOp::create(b, loc, gType, centered, centered);
  Value var = nn::DivOp::create(
      b, loc, sType, nn::ReduceToOp::create(b, loc, sType, sq), n);
  Value deviation = nn::SqrtOp::create(
      b, loc,
      nn::AddOp::create(b, loc, sType, var,
                        cx.f32Scalar(floatAttr(node, "epsilon", 1e-5f), loc)));
  Value normed = createReshape(
      b, loc, nn::DivOp::create(b, loc, gType, centered, deviation), shape);
  SmallVector<int64_t> perChannel(shape.size() - 1, 1);
  perChannel[0] = channels;
  auto type = cast<RankedTensorType>(x->getType());
  Value scaled = nn::MulOp::create(b, loc, type, normed,
                                   createReshape(b, loc, *scale, perChannel));
  cx.define(node, 0,
            nn::AddOp::create(b, loc, type, scaled,
                              createReshape(b, loc, *bias, perChannel)));
  return success();
}

/// BatchNormalization in training mode (training_mode = 1, as torch exports a
/// BatchNorm module in train mode): nn.batch_norm over the batch and spatial
/// axes, and nn.update_running_stats on the running mean and variance, which
/// the importer declared `state` parameters (Importer::findRunningStatistics
/// checked that nothing else reads them). The outputs running_mean and
/// running_var are the updated statistics, which no node may read.
static LogicalResult importBatchNormalization(ImportContext &cx,
                                              const onnx::NodeProto &node) {
  if (intAttr(node, "training_mode", 0) != 1)
    return cx.nodeError(node)
           << "only training mode (training_mode = 1, a BatchNorm module in "
              "train mode) is supported; export the model with "
              "training=TrainingMode.TRAINING (and with torch >= 2.9, "
              "dynamo=False: its default exporter writes BatchNorm in eval "
              "form)";
  FailureOr<Value> x = cx.floatValueOf(node, 0),
                   scale = cx.floatValueOf(node, 1),
                   bias = cx.floatValueOf(node, 2),
                   runningMean = cx.floatValueOf(node, 3),
                   runningVar = cx.floatValueOf(node, 4);
  if (failed(x) || failed(scale) || failed(bias) || failed(runningMean) ||
      failed(runningVar))
    return failure();
  ArrayRef<int64_t> shape = shapeOf(*x);
  if (shape.size() < 2)
    return cx.nodeError(node) << "the input must have rank >= 2 ([N, C, ...]), "
                                 "got "
                              << shapeStr(shape);
  const int64_t channels = shape[1];
  for (auto [what, v] :
       {std::pair<const char *, Value>{"scale", *scale},
        std::pair<const char *, Value>{"B", *bias},
        std::pair<const char *, Value>{"input_mean", *runningMean},
        std::pair<const char *, Value>{"input_var", *runningVar}})
    if (shapeOf(v) != ArrayRef<int64_t>{channels})
      return cx.nodeError(node)
             << what << " must have shape [" << channels
             << "] (the input's channels), got " << shapeStr(shapeOf(v));
  int64_t count = 1;
  for (size_t k = 0; k < shape.size(); ++k)
    if (k != 1)
      count *= shape[k];
  if (count < 2)
    return cx.nodeError(node)
           << "normalizes over " << count << " value per channel (input "
           << shapeStr(shape)
           << "); training needs at least 2 (torch refuses it too)";
  float momentum = floatAttr(node, "momentum", 0.9f);
  if (!(momentum >= 0.0f && momentum <= 1.0f))
    return cx.nodeError(node) << "momentum must be in [0, 1], got " << momentum;
  float epsilon = floatAttr(node, "epsilon", 1e-5f);
  if (!(epsilon >= 0.0f))
    return cx.nodeError(node) << "epsilon must be >= 0, got " << epsilon;
  OpBuilder &b = cx.getBuilder();
  Location loc = cx.nodeLoc(node);
  auto bn = nn::BatchNormOp::create(b, loc, x->getType(), scale->getType(),
                                    scale->getType(), *x, *scale, *bias,
                                    b.getF32FloatAttr(epsilon));
  nn::UpdateRunningStatsOp::create(
      b, loc, *runningMean, *runningVar, bn.getMean(), bn.getVar(),
      b.getF32FloatAttr(momentum), b.getI64IntegerAttr(count),
      b.getI64IntegerAttr(1));
  cx.define(node, 0, bn.getOutput());
  return success();
}

/// Dropout (opset 12+: ratio and training_mode as optional constant inputs).
/// In training mode with ratio > 0, nn.dropout keyed by the seed and the
/// node's name (FNV-1a: the same on every stage and build); otherwise the
/// identity, as in inference. The mask output is not supported.
static LogicalResult importDropout(ImportContext &cx,
                                   const onnx::NodeProto &node) {
  FailureOr<Value> x = cx.floatValueOf(node, 0);
  if (failed(x))
    return failure();
  float ratio = 0.5f;
  if (node.input_size() > 1 && !node.input(1).empty()) {
    const ConstTensor *r = cx.constOf(node.input(1));
    if (!r || r->numElements() != 1)
      return cx.nodeError(node) << "the ratio must be a constant scalar";
    ratio = r->isFloat ? r->f[0] : static_cast<float>(r->i[0]);
  }
  bool training = false;
  if (node.input_size() > 2 && !node.input(2).empty()) {
    const ConstTensor *t = cx.constOf(node.input(2));
    if (!t || t->isFloat || t->numElements() != 1)
      return cx.nodeError(node)
             << "training_mode must be a constant boolean scalar";
    training = t->i[0] != 0;
  }
  if (!(ratio >= 0.0f && ratio < 1.0f))
    return cx.nodeError(node) << "ratio " << ratio << " is outside [0, 1)";
  if (!training || ratio == 0.0f) {
    cx.define(node, 0, *x);
    return success();
  }
  uint64_t key = 0xCBF29CE484222325ULL;
  for (char c : nodeName(node))
    key = (key ^ static_cast<unsigned char>(c)) * 0x100000001B3ULL;
  key ^= cx.getSeed() * 0x9E3779B97F4A7C15ULL;
  OpBuilder &b = cx.getBuilder();
  cx.define(
      node, 0,
      nn::DropoutOp::create(b, cx.nodeLoc(node), *x, b.getF32FloatAttr(ratio),
                            b.getI64IntegerAttr(static_cast<int64_t>(key))));
  return success();
}

void gpipe::importer::registerNormalizationOps(OpTable &table) {
  table.add("LayerNormalization", importLayerNormalization);
  table.add("RMSNormalization", importRMSNormalization);
  table.add("GroupNormalization", importGroupNormalization);
  table.add("BatchNormalization", importBatchNormalization);
  table.add("Softmax", importSoftmax<nn::SoftmaxOp>);
  table.add("LogSoftmax", importSoftmax<nn::LogSoftmaxOp>);
  table.add("Dropout", importDropout);
}
