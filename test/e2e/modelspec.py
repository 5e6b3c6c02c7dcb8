#!/usr/bin/python3
"""The torch-free half of the e2e model zoo (test/e2e/models.py re-exports all of it).

The model table (MODELS: name -> Spec, whose ctor imports models.py, and so torch, only
when called), the data generator, the mini-batch order, the allowed ONNX ops and the
ONNX helpers that need only onnx and numpy.  check_training.py --prepared imports this
module and not models.py, so that a case whose model, data and torch reference were
prepared (prepare.py) never imports torch.
"""

import collections
import importlib
import os

import numpy as np

ALLOWED_OPS = frozenset([
    "Gemm", "MatMul", "Add", "Sub", "Mul", "Div", "Relu", "Tanh", "Sigmoid",
    "Erf", "Exp", "Log", "Sqrt", "Reciprocal", "Abs", "Softmax", "LayerNormalization", "Dropout", "Pow", "Neg",
    "ReduceMean", "ReduceSum", "Expand", "Slice", "Split", "Equal", "ConstantOfShape", "Relu", "Cast", "Where", "Not", "Constant", "Identity", "Reshape", "Flatten", "Concat", "Unsqueeze",
    "Squeeze", "SoftmaxCrossEntropyLoss", "Transpose",
    "LogSoftmax", "NegativeLogLikelihoodLoss", "ReduceMax", "Clip", "Max", "Min",
    "Conv",
    # Gather: embeddings (float tables), and shape arithmetic on static
    # shapes (with Shape and Range), folded at import:
    "Shape", "Gather", "Range",
    # Pooling (models without convolutions: elementwise scale and shift per channel)
    "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "Pad",
    # BatchNorm1d/2d exported in training mode (training_mode=1: statistics of the
    # batch, running mean and variance updated; see BN_MODELS below)
    "BatchNormalization",
    # what torch >= 2.9's exporters also write (the fixtures), and torch.triu of a mask
    "CastLike", "SplitToSequence", "SequenceAt", "Trilu", "Attention", "Gelu",
])

DEFAULT_OPSET = 17
DEFAULT_SEED = 1234

def _m():
    """test/e2e/models.py (the torch modules), imported on first use."""
    return importlib.import_module("models")


# name -> (constructor, input features, classes, ignore_index or None)
# task "classify": int64 labels y [S]; "regress": float32 targets y [S, classes];
# "lm": int64 token ids x [S, d_in] (d_in = T positions) in [0, classes)
# (classes = the vocabulary), int64 next tokens y [S, T].
# "tag": float32 x [S, d_in], int64 labels y [S, TAG_POSITIONS] in
# [0, classes) (a class per position).
# With an ignore_index, "lm" and "tag" labels equal it at positions that vary
# from sample to sample (so micro-batches count different numbers).
# batchnorm: the model holds a BatchNorm layer (models.has_batchnorm of its module;
# models.build checks that they agree), known here without building it.
# ctor: builds the torch module (imports models, and so torch, when called).
# dropout: the model has Dropout, whose masks torch draws from its own generator:
# check_training compares gpipe's pipelined run with its 1-stage program only,
# and requires the run to differ from torch without dropout.
TAG_POSITIONS = 4  # the positions of a "tag" task's labels

Spec = collections.namedtuple("Spec",
                              "ctor d_in classes ignore_index doc task dropout batchnorm",
                              defaults=("classify", False, False))

MODELS = {
    # BatchNorm (training mode): statistics per micro-batch; check_training's torch
    # reference calls the module once per micro-batch and also compares the running
    # mean and variance (torch buffers, ONNX initializers of the same name).
    "resnet18": Spec(lambda: _m().ResNet18(10), 3072, 10, None,
                     "torchvision resnet18(num_classes=10) on [B, 3, 32, 32] (20 BatchNorm2d)",
                     batchnorm=True),
    "vgg_bn": Spec(lambda: _m().VggBn(10, 8, 16), 768, 10, None,
                   "[Conv3x3-BN-ReLU]x2-MaxPool-[Conv3x3-BN-ReLU]x2-MaxPool-Linear "
                   "on [B, 3, 16, 16], 8/16 channels",
                   batchnorm=True),
    "conv_branch": Spec(lambda: _m().ConvBranchNet(10), 192, 10, None,
                        "Conv-BN-ReLU6, 1x1 and depthwise+1x1 branches (BN, ReLU6) "
                        "concatenated on channels + residual, MaxPool, global average "
                        "pool, Linear on [B, 3, 8, 8]",
                        batchnorm=True),
    "bn1d_mlp": Spec(lambda: _m().Bn1dMlp(16, 32, 10), 16, 10, None,
                     "Linear-BatchNorm1d-ReLU-Linear 16->32->10 (BN on [B, 32])",
                     batchnorm=True),
    "conv1d_bn": Spec(lambda: _m().Conv1dBn(24, 10), 24, 10, None,
                      "[Conv1d-BatchNorm1d-ReLU] x 2 (the second strided), view, Linear "
                      "on [B, 2, 12]",
                      batchnorm=True),
    "conv1d": Spec(lambda: _m().Conv1dNet(24, 10), 24, 10, None,
                   "Conv1d-ReLU-Conv1d(stride 2)-ReLU-view-Linear on [B, 2, 12]"),
    "conv2d": Spec(lambda: _m().Conv2dNet(48, 10), 48, 10, None,
                   "Conv2d(pad)-strided-depthwise-dilated grouped Conv2d, ReLUs, "
                   "flatten, Linear on [B, 3, 4, 4]"),
    "resnet_tiny": Spec(lambda: _m().ResNetTiny(10), 192, 10, None,
                        "ResNet-style: stem Conv-BN-ReLU, 2 basic blocks (one with a "
                        "stride-2 1x1 Conv-BN downsample), global average pool, Linear",
                        batchnorm=True),
    "mlp_ln_gelu_drop": Spec(lambda: _m().MlpLnGeluDrop(16, 32, 10, 0.1), 16, 10, None,
                             "Linear-LayerNorm-GELU-Dropout 0.1-Linear-GELU-Linear "
                             "16->32->32->10", "classify", True),
    "mlp_buffer": Spec(lambda: _m().MlpBuffer(16, 32, 10), 16, 10, None,
                       "Linear-(x * a buffer)-Tanh-Linear 16->32->10"),
    "vit_tiny": Spec(lambda: _m().VitTiny(10), 192, 10, None,
                     "ViT on [B, 3, 8, 8]: 4x4 Conv2d patches, class token expanded to "
                     "the batch, position embedding, 2 pre-LN blocks, head on the class "
                     "token"),
    "sdpa_mask_lm": Spec(lambda: _m().SdpaLm(50, 8, 16, 2, 2, mask=True), 8, 50, None,
                         "sdpa_lm with a bool attn_mask buffer (a causal window of 4) "
                         "instead of is_causal", "lm"),
    "sdpa_lm": Spec(lambda: _m().SdpaLm(50, 8, 16, 2, 2), 8, 50, None,
                    "causal LM with F.scaled_dot_product_attention (ONNX Attention at "
                    "opset 23), tanh GELU, tied head", "lm"),
    "mlp_tanh": Spec(lambda: _m().MlpTanh(16, 32, 10), 16, 10, None,
                     "Linear-Tanh-Linear-Tanh-Linear 16->32->32->10"),
    "mlp_gelu_sigmoid": Spec(lambda: _m().MlpGeluSigmoid(20, 32, 10), 20, 10, None,
                             "Linear-GELU(erf)-Linear-Sigmoid-Linear 20->32->32->10"),
    "mlp_exp": Spec(lambda: _m().MlpExp(16, 32, 10), 16, 10, None,
                    "Linear-Tanh-Exp-Linear-Tanh-Linear 16->32->32->10"),
    "mlp_unary": Spec(lambda: _m().MlpUnary(16, 32, 10), 16, 10, None,
                      "Linear-Abs-Sqrt/Log/Reciprocal-Tanh-Linear 16->32->10"),
    "mlp_softmax": Spec(lambda: _m().MlpSoftmax(16, 32, 10), 16, 10, None,
                        "Linear-Tanh-Softmax(last, middle axis)-Linear 16->32->10"),
    "mlp_layernorm": Spec(lambda: _m().MlpLayerNorm(16, 32, 10), 16, 10, None,
                          "Linear-LayerNorm-Tanh, LayerNorm over [4, 8] (no bias), Linear 16->32->10"),
    "pool2d": Spec(lambda: _m().Pool2d(10), 128, 10, None,
                   "[B, 2, 8, 8]: scale/shift, MaxPool2d, AvgPool2d (ceil_mode, "
                   "padding counted and not), F.pad, MaxPool2d, global average, Linear"),
    "pool1d": Spec(lambda: _m().Pool1d(10), 48, 10, None,
                   "[B, 3, 16]: scale/shift, MaxPool1d (ceil_mode), AvgPool1d, F.pad, "
                   "dilated MaxPool1d, global max, Linear"),
    "mlp_dropout": Spec(lambda: _m().MlpDropout(16, 32, 10, 0.1), 16, 10, None,
                        "(Linear-Tanh-Dropout 0.1) x 2 + Linear 16->32->32->10",
                        "classify", True),
    "mlp_norm_ops": Spec(lambda: _m().MlpNormOps(16, 32, 10), 16, 10, None,
                         "Linear-hand-written LayerNorm-tanh GELU-Linear 16->32->10"),
    "mlp_mse": Spec(lambda: _m().MlpMse(16, 32, 10), 16, 10, None,
                    "Linear-Tanh-Linear 16->32->10, mean-squared error (regression)",
                    "regress"),
    "attn_causal": Spec(lambda: _m().AttnCausal(16, 4, 8, 2, 10), 16, 10, None,
                        "Linear-Tanh, 2-head causal self-attention (mask buffer, "
                        "masked_fill) on [B, 4, 8], last 3 positions, Linear 24->10"),
    "attn_tiny": Spec(lambda: _m().AttnTiny(16, 4, 8, 2, 10), 16, 10, None,
                      "Linear-Tanh, 2-head self-attention on [B, 4, 8] "
                      "(batched MatMul), Linear 32->10"),
    "gpt_tiny": Spec(lambda: _m().GptTiny(50, 8, 16, 2, 2), 8, 50, None,
                     "GPT-style causal LM: embeddings, 2 pre-LayerNorm blocks (2-head "
                     "causal attention, GELU MLP), LM head 16->50, per-position "
                     "cross-entropy", "lm"),
    "gpt_tied": Spec(lambda: _m().GptTiny(50, 8, 16, 2, 2, tied=True), 8, 50, None,
                     "gpt_tiny with the LM head tied to the token embedding", "lm"),
    "torch_encoder_lm": Spec(lambda: _m().TorchEncoderLm(50, 8, 16, 2), 8, 50, None,
                             "torch nn.TransformerEncoder (2 pre-LN layers) causal LM",
                             "lm"),
    "bert_tiny": Spec(lambda: _m().BertTiny(50, 8, 16, 2), 8, 50, None,
                      "BERT-style nn.TransformerEncoder with a padding mask, "
                      "per-position classifier reading the first token", "lm"),
    "mlp_logsoftmax": Spec(lambda: _m().MlpLogSoftmax(16, 32, 10), 16, 10, None,
                           "Linear-Tanh, LogSoftmax on a middle axis, Linear 16->32->10, "
                           "label smoothing by hand (LogSoftmax, ReduceMean)"),
    "mlp_minmax": Spec(lambda: _m().MlpMinMax(16, 32, 10), 16, 10, None,
                       "clamp, maximum/minimum (twin layers: ties), amax 16->32->10"),
    "tagger_nll": Spec(lambda: _m().TaggerNll(16, 32, 5, 4), 16, 5, 2,
                       "per-position classifier [B, 5, 4], two heads' averaged "
                       "probabilities, nll_loss(log p) + cross_entropy, ignore_index 2",
                       "tag"),
    "lm_nll": Spec(lambda: _m().LmNll(50, 8, 16), 8, 50, 0,
                   "emb_lm with nll_loss(log_softmax) over [B*8], ignore_index 0",
                   "lm"),
    "emb_lm": Spec(lambda: _m().EmbLm(50, 8, 16), 8, 50, None,
                   "token + position nn.Embedding (50 x 16, 8 x 16), Tanh, "
                   "Linear 16->50 per position, cross-entropy over [B*8]",
                   "lm"),
    "mlp_relu": Spec(lambda: _m().MlpRelu(16, 32, 10, 3), 16, 10, None,
                     "(Linear-ReLU)x3 + Linear 16->32->32->32->10"),
    "mlp_ignore": Spec(lambda: _m().MlpTanh(16, 32, 10, ignore_index=3), 16, 10, 3,
                       "mlp_tanh with cross_entropy(ignore_index=3)"),
    "mlp_sum": Spec(lambda: _m().MlpTanh(16, 32, 10, ignore_index=3, reduction="sum"), 16, 10, 3,
                    "mlp_tanh with cross_entropy(ignore_index=3, reduction='sum')"),
    "mlp_matmul": Spec(lambda: _m().MlpMatmul(16, 24, 12, 10), 16, 10, None,
                       "x@W+b (MatMul/Add), Concat of two branches"),
    "mlp_ops": Spec(lambda: _m().MlpOps(16, 24, 10), 16, 10, None,
                    "Sub/Mul/Div/Reshape/Flatten/Unsqueeze/Squeeze coverage"),
    "mlp_view": Spec(lambda: _m().MlpView(24, 16, 10), 24, 10, None,
                     "x.view(x.size(0), ...), transpose, Linear(bias=False)"),
    "mlp_deep": Spec(lambda: _m().mlp_deep(1024, 8, 10), 1024, 10, None,
                     "benchmark: 8 x (Linear 1024 + ReLU) + Linear 1024->10"),
    "mlp_skip": Spec(lambda: _m().MlpSkip(32, 64, 10), 32, 10, None,
                     "5 x Linear (ReLU) 32->64->64->64->64->10, skip fc1 -> fc5 input"),
    # small variant of mlp_deep, handy for quick correctness runs
    "mlp_deep_small": Spec(lambda: _m().mlp_deep(64, 4, 10), 64, 10, None,
                           "4 x (Linear 64 + ReLU) + Linear 64->10"),
}


# ---------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------

def make_data(name, samples, seed=0, noise=0.1):
    """Deterministic learnable classification data for model `name`.

    x ~ N(0, 1) float32 [samples, d_in]; y = argmax(x @ T + noise) with a fixed
    random teacher matrix T, int64 [samples].  For models with an
    ignore_index, every 4th sample is forced to that label (so every
    mini-batch has some ignored and some non-ignored samples).
    """
    spec = MODELS[name]
    rng = np.random.default_rng(seed)

    def ignore_some(y):
        if spec.ignore_index is not None:
            s, t = np.meshgrid(np.arange(y.shape[0]), np.arange(y.shape[1]),
                               indexing="ij")
            y[(3 * s + t) % 5 == 0] = spec.ignore_index
        return y

    if spec.task == "lm":
        # Random tokens (with repeats within every batch: 8 * B draws from
        # 50); the target is a fixed function of the token and its position.
        x = rng.integers(0, spec.classes, (samples, spec.d_in)).astype(np.int64)
        pos = np.arange(spec.d_in, dtype=np.int64)
        return x, ignore_some(((7 * x + 3 * pos + 1) % spec.classes).astype(np.int64))
    x = rng.standard_normal((samples, spec.d_in)).astype(np.float32)
    if spec.task == "tag":
        t = TAG_POSITIONS
        teacher = rng.standard_normal((spec.d_in, spec.classes * t)).astype(np.float32)
        scores = (x @ teacher).reshape(samples, spec.classes, t)
        return x, ignore_some(np.argmax(scores, axis=1).astype(np.int64))
    teacher = rng.standard_normal((spec.d_in, spec.classes)).astype(np.float32)
    scores = x @ teacher + noise * rng.standard_normal((samples, spec.classes)).astype(np.float32)
    if spec.task == "regress":
        return x, np.tanh(scores).astype(np.float32)
    y = np.argmax(scores, axis=1).astype(np.int64)
    if spec.ignore_index is not None:
        y[::4] = spec.ignore_index
        # make sure ignore_index also occurs "naturally" mixed with others
        assert 0 <= spec.ignore_index < spec.classes
    return x, y


def batch_indices(step, batch_size, samples):
    """Sample range for 1-based `step` (gpipe-run contract, drop_last)."""
    nb = samples // batch_size
    if nb == 0:
        raise ValueError("samples (%d) < batch size (%d)" % (samples, batch_size))
    start = ((step - 1) % nb) * batch_size
    return start, start + batch_size


_M64 = (1 << 64) - 1


def _mix64(z):
    """splitmix64's finalizer (runtime/src/random.h mix64)."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def epoch_order(samples, seed, epoch):
    """gpipe-run --shuffle --seed SEED: the order of the data rows in `epoch` (0-based),
    written from docs/semantics.md ("Data order"), independently of the runtime."""
    rows = list(range(samples))
    key = _mix64(_mix64(seed) ^ epoch)
    for i in range(samples - 1, 0, -1):
        j = _mix64(key ^ i) % (i + 1)
        rows[i], rows[j] = rows[j], rows[i]
    return rows


def batch_rows(step, batch_size, samples, shuffle_seed=None):
    """Data rows of 1-based `step`'s mini-batch: batch_indices' range of the epoch's order
    (file order, or with a shuffle seed epoch_order)."""
    lo, hi = batch_indices(step, batch_size, samples)
    if shuffle_seed is None:
        return np.arange(lo, hi)
    epoch = (step - 1) // (samples // batch_size)
    return np.array(epoch_order(samples, shuffle_seed, epoch)[lo:hi], dtype=np.int64)


# ---------------------------------------------------------------------------
# Export / checking
# ---------------------------------------------------------------------------

def op_types(onnx_path_or_model):
    import onnx
    m = onnx_path_or_model
    if isinstance(m, (str, os.PathLike)):
        m = onnx.load(str(m))
    return [n.op_type for n in m.graph.node]


def check_ops(onnx_path_or_model):
    """Return the sorted list of op types not in ALLOWED_OPS (empty = OK)."""
    return sorted(set(op_types(onnx_path_or_model)) - ALLOWED_OPS)



def load_initializers(onnx_path_or_model):
    """OrderedDict name -> numpy array of the graph initializers."""
    import onnx
    from onnx import numpy_helper
    m = onnx_path_or_model
    if isinstance(m, (str, os.PathLike)):
        m = onnx.load(str(m))
    out = collections.OrderedDict()
    for t in m.graph.initializer:
        out[t.name] = numpy_helper.to_array(t).copy()
    return out



def gelu_to_opset20(path):
    """Rewrite the exported model at `path` as torch >= 2.9's exporter writes GELU: each
    exact-GELU pattern that torch 1.13 exports (Div(X, sqrt 2), Erf, Add 1, Mul X, Mul 0.5)
    becomes one opset-20 `Gelu` node, the model's opset 20 and IR version 10. Returns the
    number of patterns replaced (ONNX 1.12's checker does not know opset 20: not checked
    here; gpipe-compile's ONNX 1.19 checks it)."""
    import onnx
    from onnx import helper, numpy_helper
    m = onnx.load(path)
    g = m.graph
    consts = {}
    for n in g.node:
        if n.op_type == "Constant" and n.attribute and n.attribute[0].HasField("t"):
            consts[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
    for t in g.initializer:
        consts[t.name] = numpy_helper.to_array(t)
    users = collections.defaultdict(list)
    for n in g.node:
        for i in n.input:
            users[i].append(n)

    def only_user(value, op):
        u = users.get(value, [])
        return u[0] if len(u) == 1 and u[0].op_type == op else None

    def scalar(name, value):
        return name in consts and consts[name].size == 1 and \
            abs(float(consts[name].reshape(-1)[0]) - value) < 1e-5

    drop, new_nodes, replaced = set(), {}, 0
    for n in g.node:
        if n.op_type != "Div" or not scalar(n.input[1], 2 ** 0.5):
            continue
        x = n.input[0]
        erf = only_user(n.output[0], "Erf")
        add = erf and only_user(erf.output[0], "Add")
        mul = add and only_user(add.output[0], "Mul")
        half = mul and only_user(mul.output[0], "Mul")
        if not (half and scalar([i for i in add.input if i != erf.output[0]][0], 1.0)
                and x in mul.input and scalar(
                    [i for i in half.input if i != mul.output[0]][0], 0.5)):
            continue
        name = n.name.rsplit("/", 1)[0] + "/Gelu" if "/" in n.name else n.name + "_gelu"
        new_nodes[id(n)] = helper.make_node("Gelu", [x], [half.output[0]], name=name)
        drop.update(id(k) for k in (erf, add, mul, half))
        replaced += 1
    nodes = []
    for n in g.node:
        if id(n) in new_nodes:
            nodes.append(new_nodes[id(n)])
        elif id(n) not in drop:
            nodes.append(n)
    used = {i for n in nodes for i in n.input} | {o.name for o in g.output}
    nodes = [n for n in nodes if n.op_type != "Constant" or n.output[0] in used]
    del g.node[:]
    g.node.extend(nodes)
    for imp in m.opset_import:
        if imp.domain in ("", "ai.onnx"):
            imp.version = 20
    m.ir_version = 10
    onnx.save(m, path)
    return replaced


# ---------------------------------------------------------------------------
# Fixtures: models exported by torch >= 2.9 (test/e2e/fixtures, export_fixtures.py)
# ---------------------------------------------------------------------------

FIXTURE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")


def fixture(name):
    """fixtures.json's entry for fixture `name` (KeyError if there is none)."""
    import json
    with open(os.path.join(FIXTURE_DIR, "fixtures.json")) as f:
        entries = json.load(f)["fixtures"]
    if name not in entries:
        raise KeyError("no fixture %r in %s (known: %s)"
                       % (name, FIXTURE_DIR, ", ".join(sorted(entries))))
    return entries[name]


def copy_fixture(name, dst):
    """Copy fixtures/<name>.onnx to `dst`, checking its sha256 against fixtures.json."""
    import hashlib
    with open(os.path.join(FIXTURE_DIR, name + ".onnx"), "rb") as f:
        data = f.read()
    want = fixture(name)["sha256"]
    got = hashlib.sha256(data).hexdigest()
    if got != want:
        raise ValueError("fixture %s.onnx has sha256 %s, fixtures.json says %s: re-run "
                         "export_fixtures.py" % (name, got, want))
    with open(dst, "wb") as f:
        f.write(data)
