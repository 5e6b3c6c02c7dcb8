#!/usr/bin/env python3
"""Export the GPT-style GPU benchmark model: a nanoGPT-style causal LM with its loss.

Model: test/e2e/models.py's ``GptTiny(vocab, t, d, heads, layers)`` (untied LM head): token
and position embeddings (``tok``, ``pos``), LAYERS pre-LayerNorm blocks (``ln1``; one
q/k/v projection ``qkv`` Linear(d, 3d, no bias) split in three; hand-written causal
attention: q @ k^T / sqrt(d / heads), masked_fill of a tril buffer ``causal`` [1, 1, T, T]
with -inf, softmax, @ v; ``proj`` Linear(d, d); ``ln2``; ``fc`` Linear(d, 4d), exact GELU,
``out`` Linear(4d, d); residual adds), a final LayerNorm ``lnf``, the LM head ``head``
Linear(d, vocab, no bias), cross-entropy (mean) over every position.  Defaults: vocab 8192,
T = 1024, d = 1024, 16 heads, 12 layers, batch 8 sequences (8192 tokens per step):
159.4 M matmul parameters + 9.4 M embedding / LayerNorm / bias ones (0.68 GB float32).

Built after ``torch.manual_seed(models.DEFAULT_SEED)`` and exported with the e2e helper
``models.export`` (``torch.onnx.export(..., training=TrainingMode.TRAINING,
do_constant_folding=False, opset_version=17)``, inputs ``x``/``y`` int64 [B, T], output
``loss``, static batch, allowed-op check), as test/e2e exports gpt_tiny.  The ``causal``
buffer is an ONNX initializer that gpipe-compile keeps constant (compiled into the stage
program, not a parameter of pipeline.json).  The initial weights are PyTorch's seeded
initialisation; torch_gpt.py and device_bench.py rebuild the same module from the same seed
(build_module).  torch_gpt.py trains ``GptBench``: the same class with forward's position
index made on the input's device (GptTiny's ``torch.arange(t)`` is a CPU tensor, which a
CUDA embedding rejects); parameters, initialisation and arithmetic are GptTiny's.

Data (make_data, the e2e "lm" task of models.make_data): x = random tokens, int64
[SAMPLES, T] uniform in [0, vocab) (numpy default_rng(--data-seed)); the target
y[n, p] = (7 * x[n, p] + 3 * p + 1) mod vocab, int64 [SAMPLES, T]: a fixed function of the
token and its position, so the loss can fall (random next tokens would keep it at
ln(vocab)).  SAMPLES = --batches * --batch sequences.

Writes, under --out DIR:
    DIR/model.onnx        the training graph (batch fixed to --batch)
    DIR/data/x.npy        int64 [SAMPLES, T]
    DIR/data/y.npy        int64 [SAMPLES, T]
    DIR/meta.json         the configuration and the FLOP counts below

FLOPs per training step (flops(); printed, and in meta.json), B sequences of T tokens:
    model FLOPs = 6 * P_mm * B * T  +  12 * L * T^2 * d * B
    P_mm = L * 12 * d^2 + d * vocab: the weights of the matmuls (qkv 3d^2, proj d^2, fc 4d^2,
    out 4d^2 per block; the LM head d * vocab); 6 = 2 (forward) + 4 (backward dX and dW).
    Attention: q @ k^T and att @ v, each 2 * T^2 * d FLOPs per sequence and layer forward
    (all heads), times 3 for forward + backward: 12 * T^2 * d per layer and sequence, with
    the masked half counted (PaLM's convention; causal kernels could skip it).
    Embedding lookups, LayerNorm, GELU, softmax, biases, the loss and the SGD update are not
    counted (estimate printed).  Defaults: 6 * 159.38e6 * 8192 + 12 * 12 * 1024^2 * 1024 * 8
    = 7.834 + 1.237 = 9.071 TFLOP per step.
"""

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "test", "e2e"))

import numpy as np  # noqa: E402

# The 2 GiB protobuf limit of one ONNX file (as mlp_model.py).
MAX_PARAM_BYTES = int(1.9 * 2 ** 30)

DEFAULTS = {"vocab": 8192, "t": 1024, "d": 1024, "heads": 16, "layers": 12, "batch": 8}
CONFIG_KEYS = ("vocab", "t", "d", "heads", "layers", "batch")


def check_config(cfg):
    """Raises ValueError for a configuration GptTiny cannot build."""
    for k in CONFIG_KEYS:
        if int(cfg[k]) < 1:
            raise ValueError("--%s must be >= 1" % k)
    if cfg["d"] % cfg["heads"]:
        raise ValueError("--d (%d) must be a multiple of --heads (%d)" % (cfg["d"], cfg["heads"]))


def flops(cfg):
    """FLOP counts of one training step (dict; see the module docstring)."""
    v, t, d, L, B = cfg["vocab"], cfg["t"], cfg["d"], cfg["layers"], cfg["batch"]
    p_mm = L * 12 * d * d + d * v
    # tok, pos; per block ln1, ln2 (2d each), proj, fc, out biases (d + 4d + d); lnf
    p_other = v * d + t * d + L * (4 * d + 6 * d) + 2 * d
    tokens = B * t
    dense = 6 * p_mm * tokens
    attn = 12 * L * t * t * d * B
    other = (tokens * L * (8 * 4 * d            # GELU forward + backward (rough)
                           + 2 * 2 * 8 * d)      # two LayerNorms forward + backward (rough)
             + B * L * cfg["heads"] * t * t * 8  # scale, mask, softmax forward + backward
             + tokens * v * 8                    # softmax cross-entropy forward + backward
             + 2 * (p_mm + p_other))             # SGD update
    return {"params_matmul": p_mm, "params": p_mm + p_other, "tokens_per_step": tokens,
            "dense_flops": dense, "attention_flops": attn, "model_flops": dense + attn,
            "other_flops_estimate": other}


def make_data(samples, t, vocab, seed=0):
    """x: random tokens int64 [samples, t]; y = (7x + 3 * position + 1) mod vocab, int64."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, vocab, (samples, t)).astype(np.int64)
    pos = np.arange(t, dtype=np.int64)
    return x, ((7 * x + 3 * pos + 1) % vocab).astype(np.int64)


def _classes():
    import torch
    import torch.nn.functional as F
    import models

    class GptBench(models.GptTiny):
        """GptTiny with the position index made on the input's device (see the docstring);
        the same parameters, initialisation and forward arithmetic otherwise."""

        def forward(self, x, y):
            h = self.tok(x) + self.pos(torch.arange(self.t, device=x.device))
            for blk in self.blocks:
                h = h + self.attention(blk, blk.ln1(h))
                h = h + blk.out(F.gelu(blk.fc(blk.ln2(h))))
            logits = self.head(self.lnf(h))
            return F.cross_entropy(logits.reshape(-1, self.vocab), y.reshape(-1))

    return models.GptTiny, GptBench


def build_module(cfg, seed=None, bench=False):
    """The benchmark module (CPU, float32), weights from torch.manual_seed(seed).
    bench=False: models.GptTiny itself (what is exported); True: GptBench (torch_gpt.py)."""
    import torch
    import models
    check_config(cfg)
    tiny, gpt_bench = _classes()
    torch.manual_seed(models.DEFAULT_SEED if seed is None else seed)
    cls = gpt_bench if bench else tiny
    return cls(cfg["vocab"], cfg["t"], cfg["d"], cfg["heads"], cfg["layers"]).float()


def weights_by_name(cfg, seed=None):
    """{state_dict name: float32 numpy array}: parameters and buffers (the causal mask),
    tied names included, as pipeline.json may name any of them."""
    m = build_module(cfg, seed)
    return {n: t.detach().numpy().astype(np.float32, copy=False)
            for n, t in m.state_dict().items() if t.is_floating_point()}


def describe(cfg):
    return ("GPT (GptTiny): vocab %d, T %d, d %d, %d heads, %d layers, batch %d"
            % (cfg["vocab"], cfg["t"], cfg["d"], cfg["heads"], cfg["layers"], cfg["batch"]))


def fmt_flops(f):
    return "%.4g GFLOP" % (f / 1e9) if f < 1e12 else "%.4g TFLOP" % (f / 1e12)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__)
    for k in CONFIG_KEYS:
        ap.add_argument("--" + k, type=int, default=DEFAULTS[k],
                        help="default %d%s" % (DEFAULTS[k], " (sequence length)" if k == "t"
                                               else " (sequences per step)" if k == "batch"
                                               else ""))
    ap.add_argument("--batches", type=int, default=4, help="mini-batches of data to write (default 4)")
    ap.add_argument("--data-seed", type=int, default=0, help="numpy seed of the data (default 0)")
    ap.add_argument("--opset", type=int, default=17)
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--flops-only", action="store_true",
                    help="print the FLOP counts and exit (no export, no torch needed)")
    a = ap.parse_args(argv)
    cfg = {k: getattr(a, k) for k in CONFIG_KEYS}
    try:
        check_config(cfg)
    except ValueError as e:
        ap.error(str(e))
    if a.batches < 1:
        ap.error("--batches must be >= 1")

    f = flops(cfg)
    print("model: %s; %d tokens per step" % (describe(cfg), f["tokens_per_step"]))
    print("parameters: %d (%.3f GB float32), of them %d in matmuls"
          % (f["params"], f["params"] * 4 / 1e9, f["params_matmul"]))
    print("FLOPs per training step: model 6*P_mm*B*T + 12*L*T^2*d*B = %s + %s = %s "
          "(used for TFLOP/s and MFU)" % (fmt_flops(f["dense_flops"]),
                                         fmt_flops(f["attention_flops"]),
                                         fmt_flops(f["model_flops"])))
    print("  not counted (LayerNorm/GELU/softmax/loss/SGD) ~ %s = %.2f%% of the model FLOPs"
          % (fmt_flops(f["other_flops_estimate"]),
             100.0 * f["other_flops_estimate"] / f["model_flops"]))
    if a.flops_only:
        return 0
    if (f["params"] + cfg["t"] ** 2) * 4 > MAX_PARAM_BYTES:
        sys.exit("gpt_model.py: %.2f GB of initializers: the ONNX model would exceed the 2 GiB "
                 "protobuf limit of the e2e export helper" % (f["params"] * 4 / 1e9))

    import torch
    import models
    import mlp_model

    os.makedirs(os.path.join(a.out, "data"), exist_ok=True)
    t0 = time.time()
    samples = a.batches * a.batch
    x, y = make_data(samples, a.t, a.vocab, a.data_seed)
    np.save(os.path.join(a.out, "data", "x.npy"), x)
    np.save(os.path.join(a.out, "data", "y.npy"), y)
    print("data: %s x.npy int64 %s, y.npy int64 %s, seed %d (%.1fs)"
          % (os.path.join(a.out, "data"), list(x.shape), list(y.shape), a.data_seed,
             time.time() - t0))

    t0 = time.time()
    m = build_module(cfg)
    path = os.path.join(a.out, "model.onnx")
    with mlp_model.torchscript_exporter() as pinned:
        models.export(m, x[:a.batch], y[:a.batch], path, opset=a.opset)
    ops = sorted(set(models.op_types(path)))
    print("exported %s (%.1f MB, %.1fs; torch %s%s; onnx.checker OK; ops: %s)"
          % (path, os.path.getsize(path) / 1e6, time.time() - t0, torch.__version__,
             ", exporter pinned with dynamo=False" if pinned else "", " ".join(ops)))

    meta = dict(cfg, model="gpt", samples=samples, data_seed=a.data_seed,
                init_seed=models.DEFAULT_SEED, opset=a.opset,
                torch_export_version=torch.__version__)
    meta.update(f)
    with open(os.path.join(a.out, "meta.json"), "w") as fh:
        json.dump(meta, fh, indent=1)
        fh.write("\n")
    print("wrote %s" % os.path.join(a.out, "meta.json"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
