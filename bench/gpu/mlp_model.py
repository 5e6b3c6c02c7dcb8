#!/usr/bin/env python3
"""Export the GPU benchmark model: a deep ReLU MLP with its cross-entropy loss.

Model: LAYERS Linear layers, ReLU between them (not after the last):
    Linear(WIDTH, WIDTH) + ReLU, repeated LAYERS-1 times, then Linear(WIDTH, CLASSES),
    F.cross_entropy (mean).  Input width = WIDTH.  Defaults: 16 layers, width 4096,
    1024 classes, batch 1024.

It is test/e2e/models.py's ``MlpDeep(width=WIDTH, depth=LAYERS-1, classes=CLASSES)``
(parameters ``body.{0,2,...}.weight/bias``, ``head.weight/bias``), built after
``torch.manual_seed(models.DEFAULT_SEED)`` and exported with the e2e helper
``models.export`` (``torch.onnx.export(..., training=TrainingMode.TRAINING,
do_constant_folding=False, opset_version=17)``, inputs ``x``/``y``, output ``loss``,
static batch, allowed-op check), exactly as bench/bench_step.py does.  The initial
weights are the ONNX initializers (gpipe-compile writes them to OUT/weights/);
torch_mlp.py rebuilds the same module from the same seed.

Writes, under --out DIR:
    DIR/model.onnx           the training graph (batch fixed to --batch)
    DIR/data/x.npy           float32 [SAMPLES, WIDTH], N(0, 1)
    DIR/data/y.npy           int64 [SAMPLES], argmax(x @ T) for a random teacher T
                             (numpy default_rng(--data-seed)); SAMPLES = --batches * --batch
    DIR/meta.json            the configuration and the FLOP counts below

FLOPs per training step (printed, and in meta.json):
    model FLOPs  = 6 * B * sum(in * out) over the Linear layers (2 for the forward GEMM,
                   4 for the two backward GEMMs dX and dW): the figure used for TFLOP/s and
                   MFU.  Bias, ReLU, loss and the SGD update are counted as negligible;
                   their estimate is printed alongside, as is the GEMM work actually done
                   (no dX for the first layer: the input needs no gradient).
"""

import argparse
import contextlib
import functools
import inspect
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "test", "e2e"))

import numpy as np  # noqa: E402

# A single ONNX protobuf cannot exceed 2 GiB; the e2e export helper loads and checks the
# model in memory, so stay below that (the default model is ~1.02 GB).
MAX_PARAM_BYTES = int(1.9 * 2 ** 30)


def layer_dims(layers, width, classes):
    """[(in, out)] of every Linear layer, first to last."""
    if layers < 1:
        raise ValueError("--layers must be >= 1")
    return [(width, width)] * (layers - 1) + [(width, classes)]


def flops(layers, width, classes, batch):
    """FLOP counts of one training step (dict; see the module docstring)."""
    dims = layer_dims(layers, width, classes)
    s = sum(i * o for i, o in dims)
    params = sum(i * o + o for i, o in dims)
    model = 6 * batch * s
    gemm_done = model - 2 * batch * dims[0][0] * dims[0][1]  # no dX for the input layer
    outs = sum(o for _, o in dims)
    relu_outs = outs - classes
    other = (batch * outs * 2            # bias add forward, bias gradient (column sums)
             + batch * relu_outs * 2     # ReLU forward, ReLU backward (mask)
             + batch * classes * 8       # softmax cross-entropy forward + backward (rough)
             + params * 2)               # SGD update w -= lr * g
    return {"sum_in_out": s, "params": params, "model_flops": model,
            "gemm_flops_executed": gemm_done, "other_flops_estimate": other}


def make_data(samples, width, classes, seed=0):
    """x ~ N(0, 1) float32 [samples, width]; y = argmax(x @ T), T a random teacher (int64)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((samples, width), dtype=np.float32)
    teacher = rng.standard_normal((width, classes), dtype=np.float32)
    y = np.argmax(x @ teacher, axis=1).astype(np.int64)
    return x, y


def build_module(layers, width, classes, seed=None):
    """The benchmark module (CPU, float32), weights from torch.manual_seed(seed)."""
    import torch
    import models
    torch.manual_seed(models.DEFAULT_SEED if seed is None else seed)
    return models.MlpDeep(width=width, depth=layers - 1, classes=classes).float()


@contextlib.contextmanager
def torchscript_exporter():
    """Pin torch.onnx.export to the TorchScript exporter that test/e2e gets with torch 1.13.

    Newer torch releases (2.9+) default to dynamo=True, a different exporter; when the
    installed torch.onnx.export takes `dynamo`, pass dynamo=False while exporting.
    """
    import torch
    orig = torch.onnx.export
    try:
        takes_dynamo = "dynamo" in inspect.signature(orig).parameters
    except (TypeError, ValueError):
        takes_dynamo = False
    if takes_dynamo:
        torch.onnx.export = functools.partial(orig, dynamo=False)
    try:
        yield takes_dynamo
    finally:
        torch.onnx.export = orig


def fmt_flops(f):
    return "%.4g GFLOP" % (f / 1e9) if f < 1e12 else "%.4g TFLOP" % (f / 1e12)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__)
    ap.add_argument("--layers", type=int, default=16, help="Linear layers in all (default 16)")
    ap.add_argument("--width", type=int, default=4096, help="input and hidden width (default 4096)")
    ap.add_argument("--classes", type=int, default=1024, help="outputs of the last layer (default 1024)")
    ap.add_argument("--batch", type=int, default=1024, help="mini-batch size, fixed in the graph (default 1024)")
    ap.add_argument("--batches", type=int, default=4, help="mini-batches of data to write (default 4)")
    ap.add_argument("--data-seed", type=int, default=0, help="numpy seed of the data (default 0)")
    ap.add_argument("--opset", type=int, default=17)
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--flops-only", action="store_true",
                    help="print the FLOP counts and exit (no export, no torch needed)")
    a = ap.parse_args(argv)
    for k in ("layers", "width", "classes", "batch", "batches"):
        if getattr(a, k) < 1:
            ap.error("--%s must be >= 1" % k)

    f = flops(a.layers, a.width, a.classes, a.batch)
    dims = layer_dims(a.layers, a.width, a.classes)
    print("model: %d Linear layers (in x out: %s), ReLU between them, cross-entropy; batch %d"
          % (a.layers, describe_dims(dims), a.batch))
    print("parameters: %d (%.3f GB float32)" % (f["params"], f["params"] * 4 / 1e9))
    print("FLOPs per training step: model 6*B*sum(in*out) = 6*%d*%d = %s (used for TFLOP/s and MFU)"
          % (a.batch, f["sum_in_out"], fmt_flops(f["model_flops"])))
    print("  GEMMs executed (no dX for the first layer) = %s; bias/ReLU/loss/SGD update "
          "(counted as negligible) ~ %s = %.3f%% of the model FLOPs"
          % (fmt_flops(f["gemm_flops_executed"]), fmt_flops(f["other_flops_estimate"]),
             100.0 * f["other_flops_estimate"] / f["model_flops"]))
    if a.flops_only:
        return 0

    if f["params"] * 4 > MAX_PARAM_BYTES:
        sys.exit("mlp_model.py: %.2f GB of parameters: the ONNX model would exceed the 2 GiB "
                 "protobuf limit of the e2e export helper; use fewer --layers or a smaller --width"
                 % (f["params"] * 4 / 1e9))

    import torch
    import models

    os.makedirs(os.path.join(a.out, "data"), exist_ok=True)
    t0 = time.time()
    samples = a.batches * a.batch
    x, y = make_data(samples, a.width, a.classes, a.data_seed)
    np.save(os.path.join(a.out, "data", "x.npy"), x)
    np.save(os.path.join(a.out, "data", "y.npy"), y)
    print("data: %s x.npy float32 %s, y.npy int64 %s (%d distinct labels), seed %d (%.1fs)"
          % (os.path.join(a.out, "data"), list(x.shape), list(y.shape), len(np.unique(y)),
             a.data_seed, time.time() - t0))

    t0 = time.time()
    m = build_module(a.layers, a.width, a.classes)
    path = os.path.join(a.out, "model.onnx")
    with torchscript_exporter() as pinned:
        models.export(m, x[:a.batch], y[:a.batch], path, opset=a.opset)
    ops = sorted(set(models.op_types(path)))
    print("exported %s (%.1f MB, %.1fs; torch %s%s; onnx.checker OK; ops: %s)"
          % (path, os.path.getsize(path) / 1e6, time.time() - t0, torch.__version__,
             ", exporter pinned with dynamo=False" if pinned else "", " ".join(ops)))

    meta = {"layers": a.layers, "width": a.width, "classes": a.classes, "batch": a.batch,
            "samples": samples, "data_seed": a.data_seed, "init_seed": models.DEFAULT_SEED,
            "opset": a.opset, "layer_dims": dims, "torch_export_version": torch.__version__}
    meta.update(f)
    with open(os.path.join(a.out, "meta.json"), "w") as fh:
        json.dump(meta, fh, indent=1)
        fh.write("\n")
    print("wrote %s" % os.path.join(a.out, "meta.json"))
    return 0


def describe_dims(dims):
    """[(4096, 4096)] * 15 + [(4096, 1024)] -> '15 x 4096x4096, 4096x1024'."""
    runs = []
    for d in dims:
        if runs and runs[-1][1] == d:
            runs[-1][0] += 1
        else:
            runs.append([1, d])
    return ", ".join(("%dx%d" % d) if n == 1 else ("%d x %dx%d" % ((n,) + tuple(d)))
                     for n, d in runs)


if __name__ == "__main__":
    sys.exit(main())
