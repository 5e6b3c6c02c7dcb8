#!/usr/bin/python3
"""PyTorch model zoo for gpipe-compile end-to-end tests.

Every model is an ``nn.Module`` whose forward takes ``(x, y)`` and returns the
scalar training loss ``F.cross_entropy(logits, y)``, so that exporting it with
``torch.onnx.export(..., training=TrainingMode.TRAINING)`` yields one ONNX
graph with inputs ``x`` (float32 [B, in]) and ``y`` (int64 [B]) and a single
output ``loss`` (a ``SoftmaxCrossEntropyLoss`` node, reduction "mean").

Parameters are exported as graph initializers named after their
``state_dict()`` key (``l1.weight``, ``W1`` ...), which is how the test
harness maps trained initializers back onto torch parameters.

Only the ops listed in ``ALLOWED_OPS`` may appear in an exported graph;
``export()`` enforces that (see ``check_ops``).

Run as a script to export every model and print its op types::

    /usr/bin/python3 test/e2e/models.py [--opset 17] [--outdir /tmp/gp_models]
"""

import argparse
import inspect
import math
import collections
import os
import sys
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# The torch-free half (model table, data, batch order, ONNX helpers), re-exported here.
from modelspec import (ALLOWED_OPS, DEFAULT_OPSET, DEFAULT_SEED, MODELS,  # noqa: E402,F401
                       TAG_POSITIONS, Spec, _M64, _mix64, batch_indices, batch_rows,
                       check_ops, epoch_order, load_initializers, make_data, op_types)


# ---------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------

class _Loss(nn.Module):
    """Base class: subclasses implement logits(x); forward adds the loss."""

    ignore_index = -100
    reduction = "mean"

    def logits(self, x):  # pragma: no cover - abstract
        raise NotImplementedError

    def forward(self, x, y):
        return F.cross_entropy(self.logits(x), y, ignore_index=self.ignore_index,
                               reduction=self.reduction)


class MlpTanh(_Loss):
    """Linear-Tanh-Linear-Tanh-Linear (16 -> 32 -> 32 -> 10)."""

    def __init__(self, d_in=16, hidden=32, classes=10, ignore_index=-100,
                 reduction="mean"):
        super().__init__()
        self.l1 = nn.Linear(d_in, hidden)
        self.l2 = nn.Linear(hidden, hidden)
        self.l3 = nn.Linear(hidden, classes)
        self.ignore_index = ignore_index
        self.reduction = reduction

    def logits(self, x):
        return self.l3(torch.tanh(self.l2(torch.tanh(self.l1(x)))))


class MlpExp(_Loss):
    """Exp (docs/contributing.md's worked example): Linear-Tanh-Exp-Linear-Tanh-Linear
    (16 -> 32 -> 32 -> 10). Exp of a tanh stays in [1/e, e]."""

    def __init__(self, d_in=16, hidden=32, classes=10):
        super().__init__()
        self.l1 = nn.Linear(d_in, hidden)
        self.l2 = nn.Linear(hidden, hidden)
        self.l3 = nn.Linear(hidden, classes)

    def logits(self, x):
        h = torch.exp(torch.tanh(self.l1(x)))
        return self.l3(torch.tanh(self.l2(h)))


class MlpUnary(_Loss):
    """Abs, Sqrt, Log, Reciprocal (issue 11's elementwise ops): Linear, then
    a = |h| + 0.5, then sqrt(a) + log(a) * (1 / a), then Tanh-Linear
    (16 -> 32 -> 10). a >= 0.5 keeps sqrt, log and 1/a finite."""

    def __init__(self, d_in=16, hidden=32, classes=10):
        super().__init__()
        self.l1 = nn.Linear(d_in, hidden)
        self.l2 = nn.Linear(hidden, classes)

    def logits(self, x):
        a = torch.abs(self.l1(x)) + 0.5
        h = torch.sqrt(a) + torch.log(a) * torch.reciprocal(a)
        return self.l2(torch.tanh(h))


class MlpSoftmax(_Loss):
    """Softmax on the last axis and on a middle one: Linear-Tanh, then
    softmax(Linear(h), -1) * h + softmax(h as [B, 4, 8] on axis 1), then Linear
    (16 -> 32 -> 10)."""

    def __init__(self, d_in=16, hidden=32, classes=10):
        super().__init__()
        self.l1 = nn.Linear(d_in, hidden)
        self.l2 = nn.Linear(hidden, hidden)
        self.l3 = nn.Linear(hidden, classes)

    def logits(self, x):
        h = torch.tanh(self.l1(x))
        p = torch.softmax(self.l2(h), dim=-1)
        q = torch.softmax(h.reshape(-1, 4, 8), dim=1).reshape(-1, 32)
        return self.l3(p * h + q)


class MlpNormOps(_Loss):
    """A hand-written layer norm as opsets below 17 export one (ReduceMean,
    Sub, Pow, Add, Sqrt, Div), a tanh-GELU (Pow 3, Tanh), Neg, an Expand of a
    per-row mean, and a ReduceSum: Linear 16 -> 32, the norm, GELU, Linear
    32 -> 10."""

    def __init__(self, d_in=16, hidden=32, classes=10):
        super().__init__()
        self.l1 = nn.Linear(d_in, hidden)
        self.gain = nn.Parameter(torch.linspace(0.5, 1.5, hidden))
        self.l2 = nn.Linear(hidden, classes)

    def logits(self, x):
        h = self.l1(x)
        mu = h.mean(-1, keepdim=True)
        var = ((h - mu) ** 2).mean(-1, keepdim=True)
        n = (h - mu) / torch.sqrt(var + 1e-5) * self.gain
        g = 0.5 * n * (1.0 + torch.tanh(0.7978845608 * (n + 0.044715 * n ** 3)))
        g = g - mu.expand_as(g) * 0.1 + (-h).sum(-1, keepdim=True) * 0.01
        return self.l2(g)


class MlpMse(nn.Module):
    """Regression with mean-squared errors built from ops: Linear-Tanh-Linear
    (16 -> 32 -> 10), loss = mean((p - y) ** 2) + 0.1 * mean_b(sum_j |p - y|)
    (torch 1.13 cannot export F.mse_loss): ReduceMean over the batch, a mean
    that micro-batches split, and a ReduceSum over the features first.)"""

    def __init__(self, d_in=16, hidden=32, out=10):
        super().__init__()
        self.l1 = nn.Linear(d_in, hidden)
        self.l2 = nn.Linear(hidden, out)

    def forward(self, x, y):
        p = self.l2(torch.tanh(self.l1(x)))
        return ((p - y) ** 2).mean() + 0.1 * (p - y).abs().sum(1).mean()


class AttnTiny(_Loss):
    """Batched MatMul (3-D and 4-D, numpy broadcasting): Linear-Tanh, viewed
    as [B, T=4, d=8]; q, k, v Linear projections on the 3-D tensor (x @ W^T);
    two heads ([B, T, 2, 4] transposed to [B, 2, T, 4]); softmax(q @ k^T / 2)
    @ v; heads merged, flattened, Linear to 10 classes."""

    def __init__(self, d_in=16, t=4, d=8, heads=2, classes=10):
        super().__init__()
        self.t, self.d, self.heads = t, d, heads
        self.inp = nn.Linear(d_in, t * d)
        self.q = nn.Linear(d, d)
        # No key bias: softmax is invariant to it (q . b_k is the same for
        # every key), so its gradient is rounding noise that Adam would
        # amplify into arbitrary steps.
        self.k = nn.Linear(d, d, bias=False)
        self.v = nn.Linear(d, d)
        self.out = nn.Linear(t * d, classes)

    def mask(self, scores):
        return scores

    def attend(self, x):
        """The attention's output [B, t, d]."""
        t, d, nh = self.t, self.d, self.heads
        h = torch.tanh(self.inp(x)).reshape(-1, t, d)

        def split(z):
            return z.reshape(-1, t, nh, d // nh).transpose(1, 2)

        q, k, v = split(self.q(h)), split(self.k(h)), split(self.v(h))
        scores = self.mask(q @ k.transpose(-2, -1) / math.sqrt(d // nh))
        att = torch.softmax(scores, dim=-1)
        return (att @ v).transpose(1, 2).reshape(-1, t, d)

    def logits(self, x):
        return self.out(self.attend(x).reshape(-1, self.t * self.d))


class AttnCausal(AttnTiny):
    """Causal self-attention as GPT code writes it: a lower-triangular mask
    buffer (an initializer that is not trained: a constant), sliced to T and
    compared with 0 (Slice, Equal, Cast folded at import), masked_fill with
    -inf (Where); otherwise AttnTiny, but only the last 3 positions kept
    (Slice of activations) for the Linear to 10 classes."""

    def __init__(self, d_in=16, t=4, d=8, heads=2, classes=10, block=8):
        super().__init__(d_in, t, d, heads, classes)
        self.out = nn.Linear((t - 1) * d, classes)
        self.register_buffer("causal", torch.tril(torch.ones(block, block))
                             .view(1, 1, block, block))

    def mask(self, scores):
        t = self.t
        return scores.masked_fill(self.causal[:, :, :t, :t] == 0, float("-inf"))

    def logits(self, x):
        o = self.attend(x)[:, 1:, :]
        return self.out(o.reshape(-1, (self.t - 1) * self.d))


class MlpLayerNorm(_Loss):
    """LayerNorm (opset 17 LayerNormalization): Linear-LayerNorm(32)-Tanh,
    then h + layer_norm(h as [B, 4, 8] over its last two axes, a scale and no
    bias, eps 1e-3), then Linear (16 -> 32 -> 10). The affine parameters start
    away from 1 and 0 so that their gradients matter from the first step.
    (torch 1.13 cannot export elementwise_affine=False at opset 17: it leaves
    the required scale input empty.)"""

    def __init__(self, d_in=16, hidden=32, classes=10):
        super().__init__()
        self.l1 = nn.Linear(d_in, hidden)
        self.ln1 = nn.LayerNorm(hidden)
        self.w2 = nn.Parameter(torch.empty(4, hidden // 4))
        self.l2 = nn.Linear(hidden, classes)
        with torch.no_grad():
            self.ln1.weight.uniform_(0.5, 1.5)
            self.ln1.bias.uniform_(-0.2, 0.2)
            self.w2.uniform_(0.5, 1.5)

    def logits(self, x):
        h = torch.tanh(self.ln1(self.l1(x)))
        q = F.layer_norm(h.reshape(-1, 4, 8), (4, 8), weight=self.w2, eps=1e-3)
        return self.l2(h + q.reshape(-1, 32))


class Pool2d(_Loss):
    """Pooling on [B, 2, 8, 8] (the input viewed so) without convolutions: a
    per-channel scale and shift (x * w + b, w and b of shape [2, 1, 1]), Tanh,
    MaxPool2d(2), then AvgPool2d(3, stride 2, padding 1) excluding the padding
    with ceil_mode and, beside it, counting it; F.pad (1 left, 1 bottom, value
    0.5), an overlapping MaxPool2d(3, stride 1, padding 1) and a global
    average (AdaptiveAvgPool2d(1)); flattened, concatenated, Linear 42->10."""

    def __init__(self, classes=10):
        super().__init__()
        self.w = nn.Parameter(torch.empty(2, 1, 1).uniform_(0.5, 1.5))
        self.b = nn.Parameter(torch.empty(2, 1, 1).uniform_(-0.2, 0.2))
        self.fc = nn.Linear(42, classes)

    def logits(self, x):
        h = torch.tanh(x.view(-1, 2, 8, 8) * self.w + self.b)
        h = F.max_pool2d(h, 2)
        a = F.avg_pool2d(h, 3, stride=2, padding=1, count_include_pad=False,
                         ceil_mode=True)
        c = F.avg_pool2d(h, 3, stride=2, padding=1, count_include_pad=True)
        p = F.max_pool2d(F.pad(a, (1, 0, 0, 1), value=0.5), 3, stride=1,
                         padding=1)
        g = F.adaptive_avg_pool2d(p, 1)
        return self.fc(torch.cat([p.flatten(1), g.flatten(1), c.flatten(1)], 1))


class Pool1d(_Loss):
    """Pooling on [B, 3, 16]: per-channel scale and shift, Tanh,
    MaxPool1d(3, stride 2, padding 1, ceil_mode), AvgPool1d(2, stride 2,
    ceil_mode), F.pad (2 left, 1 right), MaxPool1d(2, dilation 2, stride 1)
    and a global maximum (AdaptiveMaxPool1d(1)); flattened, concatenated,
    Linear 21->10."""

    def __init__(self, classes=10):
        super().__init__()
        self.w = nn.Parameter(torch.empty(3, 1).uniform_(0.5, 1.5))
        self.b = nn.Parameter(torch.empty(3, 1).uniform_(-0.2, 0.2))
        self.fc = nn.Linear(21, classes)

    def logits(self, x):
        h = torch.tanh(x.view(-1, 3, 16) * self.w + self.b)
        h = F.max_pool1d(h, 3, stride=2, padding=1, ceil_mode=True)
        h = F.avg_pool1d(h, 2, stride=2, ceil_mode=True)
        h = F.max_pool1d(F.pad(h, (2, 1)), 2, stride=1, dilation=2)
        g = F.adaptive_max_pool1d(h, 1)
        return self.fc(torch.cat([h.flatten(1), g.flatten(1)], 1))


class MlpDropout(_Loss):
    """Linear-Tanh-Dropout(0.1)-Linear-Tanh-Dropout(0.1)-Linear
    (16 -> 32 -> 32 -> 10)."""

    def __init__(self, d_in=16, hidden=32, classes=10, p=0.1):
        super().__init__()
        self.l1 = nn.Linear(d_in, hidden)
        self.l2 = nn.Linear(hidden, hidden)
        self.l3 = nn.Linear(hidden, classes)
        self.drop = nn.Dropout(p)

    def logits(self, x):
        h = self.drop(torch.tanh(self.l1(x)))
        return self.l3(self.drop(torch.tanh(self.l2(h))))


class MlpLogSoftmax(nn.Module):
    """LogSoftmax on a middle axis inside the network and on the classes,
    and label smoothing written by hand: Linear-Tanh, h + 0.1 *
    log_softmax(h as [B, 4, 8], dim 1), Linear (16 -> 32 -> 10), loss =
    0.9 * nll_loss(log_softmax(logits)) - 0.1 * mean(log_softmax(logits))
    (torch exports the nll_loss of a log_softmax as a SoftmaxCrossEntropyLoss
    of the logits, the smoothing term as LogSoftmax + ReduceMean)."""

    def __init__(self, d_in=16, hidden=32, classes=10):
        super().__init__()
        self.l1 = nn.Linear(d_in, hidden)
        self.l2 = nn.Linear(hidden, classes)

    def forward(self, x, y):
        h = torch.tanh(self.l1(x))
        q = F.log_softmax(h.reshape(-1, 4, 8), dim=1).reshape(-1, 32)
        lp = F.log_softmax(self.l2(h + 0.1 * q), dim=1)
        return 0.9 * F.nll_loss(lp, y) - 0.1 * lp.mean()


class MlpMinMax(_Loss):
    """Clip, Max, Min and ReduceMax (torch's clamp, maximum, minimum, amax)
    with their ties and boundaries: twin Linear layers a and b with equal
    initial weights make maximum(a(x), b(x)) and amax over stack([a(x),
    b(x)]) tie everywhere at the first step (each twin gets half the gradient,
    torch's rule), and clamp(a(x) - b(x), min=0) sit exactly on its bound
    (where torch passes the gradient); minimum with a broadcast parameter, a
    two-sided clamp, amax over one and two axes with and without keepdim:
    16 -> 32 -> 10."""

    def __init__(self, d_in=16, hidden=32, classes=10):
        super().__init__()
        self.l1 = nn.Linear(d_in, hidden)
        self.a = nn.Linear(d_in, hidden)
        self.b = nn.Linear(d_in, hidden)
        with torch.no_grad():
            self.b.weight.copy_(self.a.weight)
            self.b.bias.copy_(self.a.bias)
        self.cap = nn.Parameter(torch.linspace(0.2, 0.8, hidden))
        self.l2 = nn.Linear(hidden + 4, classes)

    def logits(self, x):
        h = torch.tanh(self.l1(x))
        a, b = self.a(x), self.b(x)
        u = torch.maximum(a, b) + torch.stack([a, b], 1).amax(1)
        v = torch.minimum(h, self.cap) + torch.clamp(a - b, min=0.0)
        c = torch.clamp(u, -0.5, 0.5) + torch.clamp(v, max=0.3) + h
        g = c.reshape(-1, 4, 8)
        z = (g - g.amax(dim=2, keepdim=True)).reshape(-1, 32)
        m = g.amax(dim=2) + g.amax(dim=(1, 2), keepdim=True).reshape(-1, 1)
        return self.l2(torch.cat([z, m], 1))


class TaggerNll(nn.Module):
    """A per-position classifier (C = 5 classes at T = 4 positions) whose
    probabilities average two heads: h = tanh(Linear(x)), p = (softmax(a,
    1) + softmax(b, 1)) / 2 for a, b = Linear(h) as [B, 5, 4], loss =
    nll_loss(log(p), y, ignore_index=2) (NegativeLogLikelihoodLoss on
    [N, C, d]) + 0.1 * cross_entropy(a, y, ignore_index=2)
    (SoftmaxCrossEntropyLoss on [N, C, d])."""

    ignore_index = 2

    def __init__(self, d_in=16, hidden=32, classes=5, positions=4):
        super().__init__()
        self.classes, self.positions = classes, positions
        self.l1 = nn.Linear(d_in, hidden)
        self.ha = nn.Linear(hidden, classes * positions)
        self.hb = nn.Linear(hidden, classes * positions)

    def forward(self, x, y):
        h = torch.tanh(self.l1(x))
        a = self.ha(h).reshape(-1, self.classes, self.positions)
        b = self.hb(h).reshape(-1, self.classes, self.positions)
        p = 0.5 * (torch.softmax(a, 1) + torch.softmax(b, 1))
        ii = self.ignore_index
        return (F.nll_loss(torch.log(p), y, ignore_index=ii)
                + 0.1 * F.cross_entropy(a, y, ignore_index=ii))


class EmbLm(nn.Module):
    """A tiny language model on int64 token ids x [B, T]: token embedding
    (Gather on a computed index) + position embedding (Gather at
    torch.arange(T)), Tanh, Linear(d, vocab) on every position, and the
    cross-entropy over every position (logits [B*T, V], targets [B*T])."""

    def __init__(self, vocab=50, t=8, d=16):
        super().__init__()
        self.vocab, self.t = vocab, t
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(t, d)
        self.out = nn.Linear(d, vocab)

    def forward(self, x, y):
        h = torch.tanh(self.tok(x) + self.pos(torch.arange(self.t)))
        logits = self.out(h)
        return F.cross_entropy(logits.reshape(-1, self.vocab), y.reshape(-1))


class LmNll(EmbLm):
    """EmbLm with its loss as nll_loss(log_softmax(logits, -1) as [B*T, V],
    targets [B*T], ignore_index=0) (torch exports LogSoftmax, Reshape,
    NegativeLogLikelihoodLoss on [N, C])."""

    ignore_index = 0

    def forward(self, x, y):
        h = torch.tanh(self.tok(x) + self.pos(torch.arange(self.t)))
        lp = F.log_softmax(self.out(h), dim=-1)
        return F.nll_loss(lp.reshape(-1, self.vocab), y.reshape(-1),
                          ignore_index=self.ignore_index)


def _pre_ln_block(d, hidden):
    """A pre-LayerNorm transformer block's layers, created in this order (which fixes the
    initial weights for a seed): ln1; qkv, one q, k, v projection split in three (Split), as
    nanoGPT's c_attn, without bias: softmax is invariant to the keys' (see AttnTiny), whose
    gradient is rounding noise that Adam would amplify into arbitrary steps; proj; ln2; the
    MLP's fc (d -> hidden) and out (hidden -> d)."""
    blk = nn.Module()
    blk.ln1 = nn.LayerNorm(d)
    blk.qkv = nn.Linear(d, 3 * d, bias=False)
    blk.proj = nn.Linear(d, d)
    blk.ln2 = nn.LayerNorm(d)
    blk.fc = nn.Linear(d, hidden)
    blk.out = nn.Linear(hidden, d)
    return blk


class GptTiny(nn.Module):
    """A GPT-style causal LM as nanoGPT writes it, small: token + position
    embeddings, `layers` pre-LayerNorm blocks (hand-written multi-head causal
    attention: one q/k/v projection split in three, a tril mask buffer and
    masked_fill; exact GELU MLP,
    residual adds), a final LayerNorm and an LM head (with `tied`, the token
    embedding's weight: on another stage than the embedding when pipelined),
    cross-entropy over every position."""

    def __init__(self, vocab=50, t=8, d=16, heads=2, layers=2, tied=False, gelu="none"):
        super().__init__()
        self.vocab, self.t, self.d, self.heads = vocab, t, d, heads
        self.gelu = gelu  # "tanh": nanoGPT's nn.GELU(approximate="tanh")
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(t, d)
        self.blocks = nn.ModuleList(_pre_ln_block(d, 4 * d) for _ in range(layers))
        self.lnf = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        if tied:  # the LM head reuses the token embedding (GPT-2)
            self.head.weight = self.tok.weight
        self.register_buffer("causal", torch.tril(torch.ones(t, t)).view(1, 1, t, t))

    def attention(self, blk, h):
        t, d, nh = self.t, self.d, self.heads
        q, k, v = (z.reshape(-1, t, nh, d // nh).transpose(1, 2)
                   for z in blk.qkv(h).split(d, dim=2))
        return blk.proj(self.attend(q, k, v).transpose(1, 2).reshape(-1, t, d))

    def attend(self, q, k, v):
        """The heads' causal attention [B, nh, T, dh] -> [B, nh, T, dh]."""
        t = self.t
        att = q @ k.transpose(-2, -1) / math.sqrt(self.d // self.heads)
        att = att.masked_fill(self.causal[:, :, :t, :t] == 0, float("-inf"))
        return torch.softmax(att, dim=-1) @ v

    def forward(self, x, y):
        h = self.tok(x) + self.pos(torch.arange(self.t))
        for blk in self.blocks:
            h = h + self.attention(blk, blk.ln1(h))
            fc = blk.fc(blk.ln2(h))
            h = h + blk.out(F.gelu(fc) if self.gelu == "none" else
                            F.gelu(fc, approximate=self.gelu))
        logits = self.head(self.lnf(h))
        return F.cross_entropy(logits.reshape(-1, self.vocab), y.reshape(-1))


class TorchEncoderLm(nn.Module):
    """torch's own nn.TransformerEncoder (pre-LayerNorm layers, 2 heads, ReLU
    feed-forward, dropout 0) as a causal LM: token + position embeddings, a
    float causal mask (triu of -inf), a Linear head, per-position
    cross-entropy."""

    def __init__(self, vocab=50, t=8, d=16, layers=2, **layer_kw):
        super().__init__()
        self.vocab, self.t = vocab, t
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(t, d)
        layer = nn.TransformerEncoderLayer(d, 2, 2 * d, dropout=0.0, batch_first=True,
                                           **(layer_kw or {"norm_first": True}))
        self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, vocab)

    def forward(self, x, y):
        h = self.tok(x) + self.pos(torch.arange(self.t))
        mask = torch.triu(torch.full((self.t, self.t), float("-inf")), 1)
        # torch >= 2.0 asks whether the mask is causal, which torch.export (the ONNX
        # exporter since torch 2.9) cannot trace unless told; torch 1.13 has no is_causal.
        kw = {"is_causal": True} if "is_causal" in inspect.signature(
            self.enc.forward).parameters else {}
        h = self.enc(h, mask=mask, **kw)
        return F.cross_entropy(self.head(h).reshape(-1, self.vocab), y.reshape(-1))


class BertTiny(TorchEncoderLm):
    """A BERT-style encoder: token + position embeddings, torch's
    nn.TransformerEncoder (post-LayerNorm, GELU, dropout 0) with a padding
    mask from the token ids (id 0 is padding; the first token is never masked:
    a mask of `(x + [1, 0, ...]) == 0`), and a per-position classifier that
    also reads the first token (h[:, 0], a Gather with a constant index on a
    non-batch axis)."""

    def __init__(self, vocab=50, t=8, d=16, layers=2):
        super().__init__(vocab, t, d, layers, activation="gelu")
        first = torch.zeros(t)
        first[0] = 1.0
        self.register_buffer("first", first)

    def forward(self, x, y):
        h = self.tok(x) + self.pos(torch.arange(self.t))
        pad = (x.float() + self.first) == 0
        h = self.enc(h, src_key_padding_mask=pad)
        logits = self.head(h + h[:, 0].unsqueeze(1))
        return F.cross_entropy(logits.reshape(-1, self.vocab), y.reshape(-1))


class MlpGeluSigmoid(_Loss):
    """Linear-GELU(exact)-Linear-Sigmoid-Linear (20 -> 32 -> 32 -> 10).

    Exact GELU exports as x * 0.5 * (1 + Erf(x / sqrt(2))) built from
    Div/Erf/Add/Mul with scalar Constant nodes.
    """

    def __init__(self, d_in=20, hidden=32, classes=10):
        super().__init__()
        self.l1 = nn.Linear(d_in, hidden)
        self.act1 = nn.GELU()  # approximate="none" -> Erf
        self.l2 = nn.Linear(hidden, hidden)
        self.l3 = nn.Linear(hidden, classes)

    def logits(self, x):
        return self.l3(torch.sigmoid(self.l2(self.act1(self.l1(x)))))


class MlpRelu(_Loss):
    """(Linear-ReLU) x 3 then a Linear classifier head (16 -> 32 -> 32 -> 32 -> 10)."""

    def __init__(self, d_in=16, hidden=32, classes=10, depth=3):
        super().__init__()
        layers = []
        d = d_in
        for _ in range(depth):
            layers += [nn.Linear(d, hidden), nn.ReLU()]
            d = hidden
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(d, classes)

    def logits(self, x):
        return self.head(self.body(x))


class MlpMatmul(_Loss):
    """Explicit parameters: x @ W + b (MatMul + Add) and a Concat of two branches.

        h = tanh(x @ W1 + b1)                         [B, 24]
        a = relu(h @ Wa + ba); c = sigmoid(h @ Wc + bc) [B, 12] each
        logits = cat([a, c], 1) @ W2 + b2             [B, 10]

    Weights are stored [in, out] (no transpose in the graph).
    """

    def __init__(self, d_in=16, hidden=24, branch=12, classes=10):
        super().__init__()

        def w(i, o):
            return nn.Parameter(torch.empty(i, o).uniform_(-1.0, 1.0) / (i ** 0.5))

        def b(o, fan_in):
            return nn.Parameter(torch.empty(o).uniform_(-1.0, 1.0) / (fan_in ** 0.5))

        self.W1 = w(d_in, hidden)
        self.b1 = b(hidden, d_in)
        self.Wa = w(hidden, branch)
        self.ba = b(branch, hidden)
        self.Wc = w(hidden, branch)
        self.bc = b(branch, hidden)
        self.W2 = w(2 * branch, classes)
        self.b2 = b(classes, 2 * branch)

    def logits(self, x):
        h = torch.tanh(x @ self.W1 + self.b1)
        a = torch.relu(h @ self.Wa + self.ba)
        c = torch.sigmoid(h @ self.Wc + self.bc)
        z = torch.cat([a, c], dim=1)
        return z @ self.W2 + self.b2


class MlpOps(_Loss):
    """Extra coverage: Sub, Mul, Div, Reshape, Flatten, Unsqueeze, Squeeze.

        h = tanh(l1(x)); g = sigmoid(l2(x))           [B, 24]
        z = (h * g - 0.5 * h) / (1 + g * g)
        z = flatten(unsqueeze(z, 1))   (Unsqueeze + Flatten)
        z = reshape(z, (-1, 4, 6)); z = reshape(z, (-1, 24))
        z = squeeze(unsqueeze(z, 2), 2)
        logits = l3(z)
    """

    def __init__(self, d_in=16, hidden=24, classes=10):
        super().__init__()
        assert hidden == 24
        self.l1 = nn.Linear(d_in, hidden)
        self.l2 = nn.Linear(d_in, hidden)
        self.l3 = nn.Linear(hidden, classes)

    def logits(self, x):
        h = torch.tanh(self.l1(x))
        g = torch.sigmoid(self.l2(x))
        z = (h * g - 0.5 * h) / (g * g + 1.0)
        z = torch.flatten(z.unsqueeze(1), 1)
        z = z.reshape(-1, 4, 6).reshape(-1, 24)
        z = z.unsqueeze(2).squeeze(2)
        return self.l3(z)


class MlpView(_Loss):
    """What real PyTorch code does with shapes and bias-free layers.

        z = x.view(x.size(0), 4, 6).transpose(1, 2)      (Shape/Gather/Concat, Transpose)
        z = z.reshape(z.size(0), -1)                       [B, 24]
        logits = l2(tanh(l1(z)))   with l1 = Linear(24, 16, bias=False)  (MatMul + Transpose)
    """

    def __init__(self, d_in=24, hidden=16, classes=10):
        super().__init__()
        assert d_in == 24
        self.l1 = nn.Linear(d_in, hidden, bias=False)
        self.l2 = nn.Linear(hidden, classes)

    def logits(self, x):
        z = x.view(x.size(0), 4, 6).transpose(1, 2)
        z = z.reshape(z.size(0), -1)
        return self.l2(torch.tanh(self.l1(z)))


class MlpDeep(_Loss):
    """Benchmark model: depth x (Linear(width, width) + ReLU), then Linear(width, classes).

    Input features = width."""

    def __init__(self, width=1024, depth=8, classes=10, d_in=None):
        super().__init__()
        d = width if d_in is None else d_in
        layers = []
        for _ in range(depth):
            layers += [nn.Linear(d, width), nn.ReLU()]
            d = width
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(width, classes)

    def logits(self, x):
        return self.head(self.body(x))


class MlpSkip(_Loss):
    """Five Linear layers with a skip connection from the first layer to the last.

        h1 = relu(fc1(x)); h2 = relu(fc2(h1)); h3 = relu(fc3(h2)); h4 = relu(fc4(h3))
        logits = fc5(h4 + h1)

    (32 -> 64 -> 64 -> 64 -> 64 -> 10.)  Enough layers for 4 pipeline stages, each with real
    work; whatever the split, h1 crosses every stage boundary on the way to fc5 (forward) and
    its gradient comes back from the last stage to the first (backward), on top of the chain
    through fc2..fc4.
    """

    def __init__(self, d_in=32, hidden=64, classes=10):
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, hidden)
        self.fc4 = nn.Linear(hidden, hidden)
        self.fc5 = nn.Linear(hidden, classes)

    def logits(self, x):
        h1 = torch.relu(self.fc1(x))
        h2 = torch.relu(self.fc2(h1))
        h3 = torch.relu(self.fc3(h2))
        h4 = torch.relu(self.fc4(h3))
        return self.fc5(h4 + h1)


def mlp_deep(width=1024, depth=8, classes=10):
    return MlpDeep(width=width, depth=depth, classes=classes)


class Conv1dNet(_Loss):
    """x [B, 24] seen as [B, 2, 12]: Conv1d 2->4 (k 3, pad 1), ReLU, Conv1d
    4->6 (k 3, stride 2, pad 1), flattened by view, Linear 36->10."""

    def __init__(self, d_in=24, classes=10):
        super().__init__()
        assert d_in == 24
        self.c1 = nn.Conv1d(2, 4, 3, padding=1)
        self.c2 = nn.Conv1d(4, 6, 3, stride=2, padding=1)
        self.fc = nn.Linear(36, classes)

    def logits(self, x):
        h = torch.relu(self.c1(x.view(x.size(0), 2, 12)))
        h = torch.relu(self.c2(h))
        return self.fc(h.view(h.size(0), -1))


class Conv2dNet(_Loss):
    """x [B, 48] seen as [B, 3, 4, 4]: Conv2d 3->8 (k 3, pad 1), ReLU, a
    strided Conv2d 8->8 (k 3, stride 2, pad 1), ReLU, a depthwise Conv2d
    (groups 8, k 3, pad 1, no bias), ReLU, a grouped dilated Conv2d 8->4
    (groups 2, k 3, dilation 2, pad 2), ReLU, flatten, Linear 16->10."""

    def __init__(self, d_in=48, classes=10):
        super().__init__()
        assert d_in == 48
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = nn.Conv2d(8, 8, 3, stride=2, padding=1)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False)
        self.c3 = nn.Conv2d(8, 4, 3, padding=2, dilation=2, groups=2)
        self.fc = nn.Linear(16, classes)

    def logits(self, x):
        h = torch.relu(self.c1(x.reshape(x.size(0), 3, 4, 4)))
        h = torch.relu(self.c2(h))
        h = torch.relu(self.dw(h))
        h = torch.relu(self.c3(h))
        return self.fc(torch.flatten(h, 1))


def _perturb_bn(module, seed_stats=True):
    """Move every BatchNorm's affine parameters away from 1 and 0 (so their gradients
    matter from the first step) and, with seed_stats, its running mean and variance
    away from 0 and 1 (so a program that ignores the initial running statistics,
    or does not write them back, differs from torch)."""
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
                if seed_stats:
                    m.running_mean.uniform_(-0.2, 0.2)
                    m.running_var.uniform_(0.5, 1.5)


def has_batchnorm(module):
    """True if `module` holds a BatchNorm layer (nn.BatchNorm1d/2d/3d)."""
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in module.modules())


class ResNet18(_Loss):
    """torchvision.models.resnet18(num_classes=10) on x [B, 3072] seen as
    [B, 3, 32, 32]: Conv 7x7/2, BatchNorm2d, ReLU, MaxPool 3x3/2, 4 stages of 2
    basic blocks (Conv-BN-ReLU-Conv-BN, identity or 1x1-Conv-BN downsample, Add,
    ReLU), global average pooling, flatten, Linear 512->10. 20 BatchNorm2d layers
    (torchvision's initialisation: weight 1, bias 0, running mean 0, var 1).

    Training it is chaotic on this random data: at 32 x 32 the last stage's maps are
    1 x 1, so its BatchNorms see only the micro-batch's samples, and an fp32 run drifts
    from an fp64 one by 1e-3 and more within 4 SGD steps at lr 0.01 or 3 Adam steps
    (the amplification also hits gpipe against torch). Its e2e cases keep lr and steps
    where fp32 and fp64 torch agree to about 1e-5."""

    def __init__(self, classes=10):
        super().__init__()
        import torchvision  # Debian python3-torchvision
        self.net = torchvision.models.resnet18(num_classes=classes)

    def logits(self, x):
        return self.net(x.reshape(x.size(0), 3, 32, 32))


class VggBn(_Loss):
    """A small VGG with batch norm on x [B, 768] seen as [B, 3, 16, 16]:
    [Conv3x3(pad 1, no bias)-BatchNorm2d-ReLU] x 2 (3->8->8), MaxPool 2,
    [Conv3x3-BatchNorm2d-ReLU] x 2 (8->16->16), MaxPool 2, flatten, Linear
    256->10. BN affine parameters and running statistics start perturbed."""

    def __init__(self, classes=10, c1=8, c2=16):
        super().__init__()

        def block(cin, cout):
            return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
                    nn.ReLU()]

        self.features = nn.Sequential(*block(3, c1), *block(c1, c1), nn.MaxPool2d(2),
                                      *block(c1, c2), *block(c2, c2), nn.MaxPool2d(2))
        self.fc = nn.Linear(c2 * 4 * 4, classes)
        _perturb_bn(self)

    def logits(self, x):
        h = self.features(x.reshape(x.size(0), 3, 16, 16))
        return self.fc(torch.flatten(h, 1))


class ConvBranchNet(_Loss):
    """MobileNet/Inception-style blocks on x [B, 192] seen as [B, 3, 8, 8]:
    Conv3x3 3->8 (no bias), BatchNorm2d, ReLU6; two branches (a 1x1 conv 8->4
    and a depthwise 3x3 then 1x1 8->4, each BN + ReLU6) concatenated on the
    channel axis (torch.cat(dim=1)) and added to the block input (residual);
    MaxPool 2, global average pool, flatten, Linear 8->10."""

    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn0 = nn.BatchNorm2d(8)
        self.a = nn.Conv2d(8, 4, 1, bias=False)
        self.bna = nn.BatchNorm2d(4)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False)
        self.pw = nn.Conv2d(8, 4, 1, bias=False)
        self.bnb = nn.BatchNorm2d(4)
        self.fc = nn.Linear(8, classes)
        _perturb_bn(self)

    def logits(self, x):
        h = F.relu6(self.bn0(self.stem(x.reshape(x.size(0), 3, 8, 8))))
        a = F.relu6(self.bna(self.a(h)))
        b = F.relu6(self.bnb(self.pw(self.dw(h))))
        h = torch.cat([a, b], dim=1) + h
        h = F.max_pool2d(h, 2)
        h = F.adaptive_avg_pool2d(h, 1)
        return self.fc(torch.flatten(h, 1))


class Bn1dMlp(_Loss):
    """Linear 16->32, BatchNorm1d(32) on the rank-2 [B, 32], ReLU, Linear 32->10.
    BN affine parameters and running statistics start perturbed."""

    def __init__(self, d_in=16, hidden=32, classes=10):
        super().__init__()
        self.l1 = nn.Linear(d_in, hidden)
        self.bn = nn.BatchNorm1d(hidden)
        self.l2 = nn.Linear(hidden, classes)
        _perturb_bn(self)

    def logits(self, x):
        return self.l2(torch.relu(self.bn(self.l1(x))))


class Conv1dBn(_Loss):
    """x [B, 24] seen as [B, 2, 12]: Conv1d 2->8 (k 3, pad 1, no bias),
    BatchNorm1d(8) on [B, 8, 12], ReLU, Conv1d 8->8 (k 3, stride 2, pad 1, no
    bias), BatchNorm1d(8) (momentum 0.3) on [B, 8, 6], ReLU, view, Linear 48->10.
    BN affine parameters and running statistics start perturbed."""

    def __init__(self, d_in=24, classes=10):
        super().__init__()
        assert d_in == 24
        self.c1 = nn.Conv1d(2, 8, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm1d(8)
        self.c2 = nn.Conv1d(8, 8, 3, stride=2, padding=1, bias=False)
        self.bn2 = nn.BatchNorm1d(8, momentum=0.3)
        self.fc = nn.Linear(48, classes)
        _perturb_bn(self)

    def logits(self, x):
        h = torch.relu(self.bn1(self.c1(x.view(x.size(0), 2, 12))))
        h = torch.relu(self.bn2(self.c2(h)))
        return self.fc(h.view(h.size(0), -1))


class MlpLnGeluDrop(_Loss):
    """The MLP a user writes: Linear-LayerNorm-GELU-Dropout(0.1)-Linear-GELU-Linear
    (16 -> 32 -> 32 -> 10)."""

    def __init__(self, d_in=16, hidden=32, classes=10, p=0.1):
        super().__init__()
        self.l1 = nn.Linear(d_in, hidden)
        self.ln = nn.LayerNorm(hidden)
        self.drop = nn.Dropout(p)
        self.l2 = nn.Linear(hidden, hidden)
        self.l3 = nn.Linear(hidden, classes)

    def logits(self, x):
        h = self.drop(F.gelu(self.ln(self.l1(x))))
        return self.l3(F.gelu(self.l2(h)))


class MlpBuffer(_Loss):
    """Linear-Tanh-Linear (16 -> 32 -> 10) whose hidden layer is scaled by a buffer (a
    fixed per-feature scale that the loss depends on but torch does not train)."""

    def __init__(self, d_in=16, hidden=32, classes=10):
        super().__init__()
        self.l1 = nn.Linear(d_in, hidden)
        self.l2 = nn.Linear(hidden, classes)
        self.register_buffer("scale", torch.linspace(0.5, 1.5, hidden))

    def logits(self, x):
        return self.l2(torch.tanh(self.l1(x) * self.scale))


class VitTiny(_Loss):
    """A ViT as people write it, small: x [B, 192] seen as an image [B, 3, 8, 8];
    4 x 4 patches by a strided Conv2d (3 -> d), flattened and transposed to [B, 4, d]; a
    learned class token expanded to the batch and concatenated in front; a learned
    position embedding added; `layers` pre-LayerNorm blocks (multi-head attention with
    one qkv Linear, GELU MLP); LayerNorm and a Linear head on the class token."""

    def __init__(self, classes=10, d=16, heads=2, layers=2, patch=4, side=8):
        super().__init__()
        self.d, self.heads, self.side = d, heads, side
        self.n = (side // patch) ** 2
        self.patch = nn.Conv2d(3, d, patch, stride=patch)
        self.cls = nn.Parameter(torch.randn(1, 1, d) * 0.5)
        self.pos = nn.Parameter(torch.randn(1, self.n + 1, d) * 0.5)
        self.blocks = nn.ModuleList(_pre_ln_block(d, 2 * d) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)

    def attention(self, blk, h):
        b, t, d = h.shape
        nh = self.heads
        q, k, v = blk.qkv(h).reshape(b, t, 3, nh, d // nh).permute(2, 0, 3, 1, 4)
        att = torch.softmax(q @ k.transpose(-2, -1) * (d // nh) ** -0.5, dim=-1)
        return blk.proj((att @ v).transpose(1, 2).reshape(b, t, d))

    def logits(self, x):
        b = x.shape[0]
        h = self.patch(x.reshape(b, 3, self.side, self.side)).flatten(2).transpose(1, 2)
        h = torch.cat([self.cls.expand(b, -1, -1), h], dim=1) + self.pos
        for blk in self.blocks:
            h = h + self.attention(blk, blk.ln1(h))
            h = h + blk.out(F.gelu(blk.fc(blk.ln2(h))))
        return self.head(self.ln(h)[:, 0])


def _sdpa(q, k, v, causal, keep=None):
    """F.scaled_dot_product_attention (torch >= 2.0, which exports it at opset 23 as ONNX
    Attention), or the same computation by hand on torch 1.13 (the reference). `keep`: a
    bool attn_mask (True takes part)."""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=keep, is_causal=causal)
    t = q.shape[-2]
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    if keep is not None:
        s = s.masked_fill(~keep, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


class SdpaLm(GptTiny):
    """gpt_tied as nanoGPT writes it with F.scaled_dot_product_attention(is_causal=True) (ONNX
    Attention at opset 23) and the tanh-approximate GELU; with `mask`, a bool attn_mask
    buffer (a causal window of 4 positions) instead of is_causal."""

    def __init__(self, vocab=50, t=8, d=16, heads=2, layers=2, mask=False):
        super().__init__(vocab, t, d, heads, layers, tied=True, gelu="tanh")
        i = torch.arange(t)
        self.register_buffer("keep", ((i[None, :] <= i[:, None]) &
                                      (i[None, :] > i[:, None] - 4)) if mask else None)

    def attend(self, q, k, v):
        return _sdpa(q, k, v, self.keep is None, self.keep)


class ResNetTiny(_Loss):
    """A ResNet as torchvision writes its blocks, small: x [B, 192] seen as [B, 3, 8, 8];
    stem Conv3x3 3->8 (no bias)-BatchNorm2d-ReLU; a basic block (Conv-BN-ReLU-Conv-BN,
    identity, Add, ReLU); a basic block with stride 2 and a 1x1 Conv-BN downsample
    (8 -> 16); global average pool, flatten, Linear 16->10. BN affine parameters and
    running statistics start perturbed."""

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.b1 = nn.BatchNorm2d(cout)
            self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.b2 = nn.BatchNorm2d(cout)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                          nn.BatchNorm2d(cout))

        def forward(self, x):
            h = F.relu(self.b1(self.c1(x)))
            h = self.b2(self.c2(h))
            return F.relu(h + (x if self.down is None else self.down(x)))

    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.layer1 = ResNetTiny.Block(8, 8, 1)
        self.layer2 = ResNetTiny.Block(8, 16, 2)
        self.fc = nn.Linear(16, classes)
        _perturb_bn(self)

    def logits(self, x):
        h = F.relu(self.bn(self.stem(x.reshape(x.size(0), 3, 8, 8))))
        h = self.layer2(self.layer1(h))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(h, 1), 1))


# The model table (MODELS: name -> Spec(ctor, d_in, classes, ignore_index, doc, task,
# dropout, batchnorm)), the data generator and the batch order are in modelspec.py.

def build(name, seed=DEFAULT_SEED):
    """Deterministically construct model `name` (weights depend only on seed)."""
    if name not in MODELS:
        raise KeyError("unknown model %r (known: %s)" % (name, ", ".join(sorted(MODELS))))
    torch.manual_seed(seed)
    m = MODELS[name].ctor()
    if has_batchnorm(m) != MODELS[name].batchnorm:
        raise RuntimeError("modelspec.MODELS[%r].batchnorm is %s, but the module %s BatchNorm"
                           % (name, MODELS[name].batchnorm,
                              "holds" if has_batchnorm(m) else "holds no"))
    return m.float()


def export(module, x, y, path, opset=DEFAULT_OPSET, check=True, dynamic_batch=False):
    """Export `module` (forward(x, y) -> loss) to ONNX at `path`.

    x, y: torch tensors (or numpy arrays) of one mini-batch; their shapes fix
    the graph's input shapes (with dynamic_batch, the first dimension is the
    symbolic "N" instead, as torch's dynamic_axes makes it).  Raises RuntimeError if the graph contains ops
    outside ALLOWED_OPS (when check=True).
    """
    import onnx
    if isinstance(x, np.ndarray):
        x = torch.from_numpy(x)
    if isinstance(y, np.ndarray):
        y = torch.from_numpy(y)
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module, (x, y), path,
            input_names=["x", "y"], output_names=["loss"],
            training=torch.onnx.TrainingMode.TRAINING,
            do_constant_folding=False,
            opset_version=opset,
            dynamic_axes={"x": {0: "N"}, "y": {0: "N"}} if dynamic_batch else None)
    model = onnx.load(path)
    onnx.checker.check_model(model)
    if check:
        bad = check_ops(model)
        if bad:
            raise RuntimeError("%s: exported graph contains unsupported ops: %s"
                               % (path, ", ".join(bad)))
    return model


def export_named(name, path, batch_size, opset=DEFAULT_OPSET, seed=DEFAULT_SEED,
                 data_seed=0):
    """Build model `name` with `seed`, export it with a [batch_size] example batch."""
    m = build(name, seed)
    x, y = make_data(name, batch_size, seed=data_seed)
    return export(m, x, y, path, opset=opset)


def param_aliases(module):
    """name -> every name of the same parameter (named_parameters' first name first),
    for parameters registered under several names (tied weights)."""
    by_id = collections.OrderedDict()
    for mname, m in module.named_modules(remove_duplicate=False):
        for pname, p in m._parameters.items():
            if p is not None:
                names = by_id.setdefault(id(p), [])
                full = mname + "." + pname if mname else pname
                if full not in names:
                    names.append(full)
    return {names[0]: names for names in by_id.values() if len(names) > 1}


def load_into_module(module, inits):
    """Copy initializers into the module's parameters by name, and into its float
    buffers that have an initializer of the same name (BatchNorm's running_mean and
    running_var; its int64 num_batches_tracked is not exported).

    Returns (names loaded, initializer names that are not parameters: buffers
    included). Raises if a parameter has no initializer or shapes differ.
    """
    with torch.no_grad():
        for n, b in module.named_buffers():
            if n in inits and b.is_floating_point():
                a = inits[n]
                if tuple(a.shape) != tuple(b.shape):
                    raise RuntimeError("shape mismatch for buffer %s: onnx %s torch %s"
                                       % (n, a.shape, tuple(b.shape)))
                b.copy_(torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)))
    # A tied parameter (an LM head sharing the token embedding) has several names; the
    # exporter writes it under one of them (torch 1.13: the first, torch >= 2.9's
    # dynamo exporter: the last). Load it from whichever the model has.
    params = {}
    for n, p in module.named_parameters():
        names = [n] + [a for a in param_aliases(module).get(n, []) if a != n]
        params[next((a for a in names if a in inits), n)] = p
    missing = [n for n in params if n not in inits]
    if missing:
        raise RuntimeError("torch parameters without an ONNX initializer of the same name: %s "
                           "(initializers: %s)" % (missing, list(inits)))
    loaded = []
    with torch.no_grad():
        for n, p in params.items():
            a = inits[n]
            if tuple(a.shape) != tuple(p.shape):
                raise RuntimeError("shape mismatch for %s: onnx %s torch %s"
                                   % (n, a.shape, tuple(p.shape)))
            p.copy_(torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)))
            loaded.append(n)
    extra = [n for n in inits if n not in params]
    return loaded, extra


def describe(onnx_path_or_model):
    """Human-readable summary: op counts, node attributes of interest, initializers."""
    import onnx
    from onnx import helper
    m = onnx_path_or_model
    if isinstance(m, (str, os.PathLike)):
        m = onnx.load(str(m))
    lines = []
    counts = collections.Counter(n.op_type for n in m.graph.node)
    lines.append("opset: %s" % ", ".join("%s=%d" % (o.domain or "ai.onnx", o.version)
                                         for o in m.opset_import))
    lines.append("ops: " + ", ".join("%s x%d" % (k, v) for k, v in sorted(counts.items())))
    lines.append("inputs: " + ", ".join(
        "%s:%s%s" % (i.name, onnx.TensorProto.DataType.Name(i.type.tensor_type.elem_type),
                     [d.dim_value for d in i.type.tensor_type.shape.dim])
        for i in m.graph.input))
    lines.append("outputs: " + ", ".join(o.name for o in m.graph.output))
    lines.append("initializers: " + ", ".join(
        "%s%s" % (t.name, list(t.dims)) for t in m.graph.initializer))
    for n in m.graph.node:
        if n.op_type in ("Gemm", "SoftmaxCrossEntropyLoss", "Concat", "Flatten",
                         "Constant", "Squeeze", "Unsqueeze", "Reshape"):
            attrs = []
            for a in n.attribute:
                v = helper.get_attribute_value(a)
                if isinstance(v, onnx.TensorProto):
                    from onnx import numpy_helper
                    arr = numpy_helper.to_array(v)
                    v = arr.tolist() if arr.size <= 8 else "tensor%s" % list(arr.shape)
                elif isinstance(v, bytes):
                    v = v.decode()
                attrs.append("%s=%s" % (a.name, v))
            lines.append("  %s(%s) -> %s  %s" % (n.op_type, ", ".join(n.input),
                                                 ", ".join(n.output), " ".join(attrs)))
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--opset", type=int, default=DEFAULT_OPSET)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--outdir", default="/tmp/gpipe_models")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("-v", "--verbose", action="store_true", help="print node attributes too")
    a = ap.parse_args(argv)
    ok = True
    for name in a.models.split(","):
        path = os.path.join(a.outdir, name + ".onnx")
        try:
            m = export_named(name, path, a.batch_size, opset=a.opset)
        except RuntimeError as e:
            print("FAIL %s: %s" % (name, e))
            ok = False
            continue
        ops = sorted(set(op_types(m)))
        print("%-18s %s" % (name, " ".join(ops)))
        if a.verbose:
            print("   " + describe(m).replace("\n", "\n   "))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
