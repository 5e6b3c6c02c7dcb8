#!/usr/bin/env python3
"""PyTorch eager reference for the GPU benchmark: the mlp_model.py model, SGD, ms/step.

The module is test/e2e/models.py's MlpDeep built from the same seed as mlp_model.py's
export (so it starts from the ONNX initializers gpipe-compile uses; --init onnx loads them
from WORKDIR/model.onnx instead, which needs the onnx package), trained with plain
torch.optim.SGD (lr --lr, no momentum, no weight decay) on WORKDIR/data/{x,y}.npy in
gpipe-run's order (step s takes mini-batch (s-1) mod (samples // batch)).

Precisions:
  fp32  torch.backends.cuda.matmul.allow_tf32 = False, torch.backends.cudnn.allow_tf32 = False
        (torch 2.9+: torch.backends.cuda.matmul.fp32_precision = "ieee", and
        torch.backends.cudnn.conv's) (float32 GEMMs on the CUDA cores; gpipe-compile
        --precision fp32)
  tf32  both True (torch 2.9+: "tf32") (TF32 tensor-core GEMMs; gpipe-compile --precision
        fp32 --allow-tf32)
  bf16  float32 master weights, gradients and SGD; forward (and hence backward) GEMMs in
        bfloat16 with float32 accumulation under torch.autocast(device_type, torch.bfloat16)
        (gpipe-compile --precision bf16); TF32 off for whatever stays float32.

Timing (CUDA): --warmup steps, torch.cuda.synchronize(), then per repeat --steps steps with a
torch.cuda.Event recorded before and after each step (zero_grad + forward + backward +
optimizer.step, the mini-batch already on the GPU unless --data-on host), one synchronize at
the end of the repeat; no host synchronisation inside the timed steps (the losses are read
after it).  ms/step of a repeat = median of its per-step event times; reported ms/step =
median over repeats.  Also reported: the repeat's wall time / steps (first start event to
last end event).  --device cpu (smoke test) times with time.perf_counter.

Prints one JSON line on stdout (last line), e.g.
  {"side": "torch", "precision": "bf16", "ms_per_step": 3.1, "tflops": 507, "mfu": 0.51,
   "peak_tflops": 989.4, "peak_source": "default bf16 (H100 SXM dense)", ...}
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "test", "e2e"))

import numpy as np  # noqa: E402

import mlp_model  # noqa: E402

# Dense (no sparsity) peaks of the H100 SXM5, TFLOP/s; the H200 has the same compute.
DEFAULT_PEAKS = {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__)
    ap.add_argument("--workdir", help="mlp_model.py --out directory (meta.json, data/, model.onnx); "
                    "without it the model and data are generated in memory from the flags below")
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--width", type=int, default=4096)
    ap.add_argument("--classes", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--batches", type=int, default=4, help="mini-batches of data without --workdir")
    ap.add_argument("--precision", choices=("fp32", "tf32", "bf16"), default="fp32")
    ap.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu (smoke test)")
    ap.add_argument("--lr", type=float, default=0.01, help="SGD learning rate (default 0.01)")
    ap.add_argument("--warmup", type=int, default=10, help="untimed steps first (default 10)")
    ap.add_argument("--steps", type=int, default=50, help="timed steps per repeat (default 50)")
    ap.add_argument("--repeat", type=int, default=3, help="timed repeats (default 3)")
    ap.add_argument("--peak-tflops", type=float, default=None,
                    help="peak for MFU, TFLOP/s (default: fp32 67, tf32 494.7, bf16 989.4: "
                    "H100 SXM dense)")
    ap.add_argument("--init", choices=("seed", "onnx"), default="seed",
                    help="initial weights: rebuild from the export seed (default) or load the "
                    "initializers of WORKDIR/model.onnx (needs onnx)")
    ap.add_argument("--data-on", choices=("device", "host"), default="device",
                    help="device: the whole data set is on the GPU before timing (default); "
                    "host: pinned host memory, each mini-batch copied in the timed step")
    ap.add_argument("--check-init", action="store_true",
                    help="also compare the seed-built weights with WORKDIR/model.onnx's "
                    "initializers (needs onnx) and report the largest difference")
    a = ap.parse_args(argv)
    if a.warmup < 0 or a.steps < 1 or a.repeat < 1:
        ap.error("--warmup must be >= 0, --steps and --repeat >= 1")
    return a


def load_problem(a):
    """(config dict, x, y) from --workdir or generated from the flags."""
    if a.workdir:
        with open(os.path.join(a.workdir, "meta.json")) as f:
            meta = json.load(f)
        x = np.load(os.path.join(a.workdir, "data", "x.npy"))
        y = np.load(os.path.join(a.workdir, "data", "y.npy"))
        cfg = {k: meta[k] for k in ("layers", "width", "classes", "batch")}
    else:
        cfg = {"layers": a.layers, "width": a.width, "classes": a.classes, "batch": a.batch}
        x, y = mlp_model.make_data(a.batches * a.batch, a.width, a.classes, 0)
    if x.dtype != np.float32 or y.dtype != np.int64 or x.shape != (len(y), cfg["width"]):
        sys.exit("torch_mlp.py: data x %s %s, y %s %s do not fit width %d"
                 % (x.dtype, x.shape, y.dtype, y.shape, cfg["width"]))
    if len(y) < cfg["batch"]:
        sys.exit("torch_mlp.py: %d samples < batch %d" % (len(y), cfg["batch"]))
    return cfg, x, y


def has_attr(obj, name):
    """hasattr that survives torch 1.13's torch.backends.cuda.matmul, whose __getattr__
    raises AssertionError (not AttributeError) for a name it does not know."""
    try:
        getattr(obj, name)
        return True
    except Exception:  # noqa: BLE001
        return False


def set_precision(torch, precision, cuda):
    """TF32 on for tf32 only (fp32 and the float32 parts of bf16 keep full float32 GEMMs).

    torch 2.9+ has fp32_precision settings ("tf32" / "ieee") and deprecates allow_tf32 (it
    warns; mixing the two kinds of setting is not supported): those are used where they
    exist, else set_float32_matmul_precision and allow_tf32 (torch 1.13 ... 2.8).
    """
    tf32 = precision == "tf32"
    mode = "tf32" if tf32 else "ieee"
    matmul = torch.backends.cuda.matmul
    conv = getattr(torch.backends.cudnn, "conv", None)
    if has_attr(matmul, "fp32_precision") and has_attr(conv, "fp32_precision"):
        try:
            matmul.fp32_precision = mode
            conv.fp32_precision = mode
            return
        except Exception as e:  # noqa: BLE001 - fall back to the older settings
            print("torch_mlp.py: note: fp32_precision = %r failed (%s); using allow_tf32"
                  % (mode, e), file=sys.stderr)
    if hasattr(torch, "set_float32_matmul_precision"):
        # "highest" is allow_tf32 = False, "high" True; set first, the flags below win.
        torch.set_float32_matmul_precision("high" if tf32 else "highest")
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32


def tf32_settings(torch):
    """What the GEMMs and convolutions were told ({"matmul": ..., "cudnn": ...}): "tf32" or
    "ieee" from fp32_precision where it exists, else True/False from allow_tf32."""
    try:
        if has_attr(torch.backends.cuda.matmul, "fp32_precision") and \
                has_attr(getattr(torch.backends.cudnn, "conv", None), "fp32_precision"):
            return {"matmul": torch.backends.cuda.matmul.fp32_precision,
                    "cudnn": torch.backends.cudnn.conv.fp32_precision}
        return {"matmul": bool(torch.backends.cuda.matmul.allow_tf32),
                "cudnn": bool(torch.backends.cudnn.allow_tf32)}
    except Exception as e:  # noqa: BLE001 - a report field must not end the run
        return {"error": str(e)}



def train_step(m, opt, xb, yb, autocast_dev=None):
    """One optimizer step of module m (its forward returns the loss) on (xb,
    yb), under bf16 autocast on autocast_dev's device type when given; returns
    the loss tensor (not synchronised)."""
    import torch
    opt.zero_grad(set_to_none=True)
    if autocast_dev is not None:
        with torch.autocast(device_type=autocast_dev.type, dtype=torch.bfloat16):
            loss = m(xb, yb)
    else:
        loss = m(xb, yb)
    loss.backward()
    opt.step()
    return loss.detach()


def timed_steps(step, a, cuda, dev):
    """a.warmup untimed steps, then a.repeat runs of a.steps timed ones (CUDA
    events around each step on a GPU, perf_counter on the CPU); step(s) runs
    training step s (1-based) and returns its loss tensor. Returns (losses,
    warm-up seconds, per-run median ms, per-run wall ms/step, per-run min ms)."""
    import torch
    losses = []
    s = 0
    t_start = time.time()
    for _ in range(a.warmup):
        s += 1
        losses.append(step(s))
    if cuda:
        torch.cuda.synchronize(dev)
    warm_s = time.time() - t_start
    rep_ms, rep_wall_ms, rep_min = [], [], []
    for _ in range(a.repeat):
        if cuda:
            ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(a.steps)]
            for i in range(a.steps):
                s += 1
                ev[i][0].record()
                losses.append(step(s))
                ev[i][1].record()
            torch.cuda.synchronize(dev)
            ms = [e0.elapsed_time(e1) for e0, e1 in ev]
            wall = ev[0][0].elapsed_time(ev[-1][1]) / a.steps
        else:
            ms = []
            t0 = time.perf_counter()
            for i in range(a.steps):
                s += 1
                t1 = time.perf_counter()
                losses.append(step(s))
                ms.append((time.perf_counter() - t1) * 1e3)
            wall = (time.perf_counter() - t0) * 1e3 / a.steps
        rep_ms.append(statistics.median(ms))
        rep_wall_ms.append(wall)
        rep_min.append(min(ms))
    return losses, warm_s, rep_ms, rep_wall_ms, rep_min


def peak_of(a):
    """(peak TFLOP/s for the MFU, where it comes from): --peak-tflops or the
    precision's default."""
    if a.peak_tflops is not None:
        return a.peak_tflops, "--peak-tflops"
    return (DEFAULT_PEAKS[a.precision],
            "default %s (H100 SXM dense; H200 has the same compute peaks)" % a.precision)


def main(argv=None):
    a = parse_args(argv)
    import torch
    import models

    cfg, x, y = load_problem(a)
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    if cuda and not torch.cuda.is_available():
        sys.exit("torch_mlp.py: torch %s has no usable CUDA device (torch.cuda.is_available() is "
                 "False); use --device cpu for a smoke test" % torch.__version__)
    set_precision(torch, a.precision, cuda)
    if a.precision == "tf32" and not cuda:
        print("torch_mlp.py: note: tf32 has no meaning on the CPU; running fp32 math",
              file=sys.stderr)

    B = cfg["batch"]
    nb = len(y) // B
    fl = mlp_model.flops(cfg["layers"], cfg["width"], cfg["classes"], B)

    m = mlp_model.build_module(cfg["layers"], cfg["width"], cfg["classes"])
    init_diff = None
    if a.init == "onnx" or a.check_init:
        if not a.workdir:
            sys.exit("torch_mlp.py: --init onnx / --check-init need --workdir")
        inits = models.load_initializers(os.path.join(a.workdir, "model.onnx"))
        params = dict(m.named_parameters())
        init_diff = max(float(np.max(np.abs(params[n].detach().numpy() - inits[n])))
                        for n in params)
        if a.init == "onnx":
            models.load_into_module(m, inits)
        del inits
    m = m.to(dev)
    m.train()
    opt = torch.optim.SGD(m.parameters(), lr=a.lr, momentum=0.0, weight_decay=0.0)

    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    if a.data_on == "device" or not cuda:
        xt, yt = xt.to(dev), yt.to(dev)
    else:
        xt, yt = xt.pin_memory(), yt.pin_memory()
    batches = [(xt[i * B:(i + 1) * B], yt[i * B:(i + 1) * B]) for i in range(nb)]
    use_autocast = a.precision == "bf16"

    def step(s):
        """Training step s (1-based); returns the loss tensor (not synchronised)."""
        xb, yb = batches[(s - 1) % nb]
        if cuda and a.data_on == "host":
            xb = xb.to(dev, non_blocking=True)
            yb = yb.to(dev, non_blocking=True)
        return train_step(m, opt, xb, yb, dev if use_autocast else None)

    losses, warm_s, rep_ms, rep_wall_ms, rep_min = timed_steps(step, a, cuda, dev)

    loss_vals = [float(l.item()) for l in losses]
    ms_step = statistics.median(rep_ms)
    peak, peak_src = peak_of(a)
    tflops = fl["model_flops"] / (ms_step * 1e-3) / 1e12
    out = {
        "side": "torch", "precision": a.precision, "device": str(dev),
        "device_name": torch.cuda.get_device_name(dev) if cuda else platform.processor() or "cpu",
        "ms_per_step": ms_step, "ms_per_step_repeats": rep_ms,
        "wall_ms_per_step_repeats": rep_wall_ms, "min_step_ms": min(rep_min),
        "samples_per_s": B / (ms_step * 1e-3),
        "model_flops": fl["model_flops"], "tflops": tflops,
        "peak_tflops": peak, "peak_source": peak_src, "mfu": tflops / peak,
        "layers": cfg["layers"], "width": cfg["width"], "classes": cfg["classes"], "batch": B,
        "lr": a.lr, "warmup": a.warmup, "steps": a.steps, "repeat": a.repeat,
        "data_on": a.data_on, "init": a.init, "warmup_s": warm_s,
        "loss": loss_vals[:a.warmup + a.steps],
        "final_loss": loss_vals[-1],
        "torch": torch.__version__, "cuda": torch.version.cuda if cuda else None,
        "tf32_settings": tf32_settings(torch) if cuda else None,
        "bf16_reduced_precision_reduction": (
            bool(getattr(torch.backends.cuda.matmul, "allow_bf16_reduced_precision_reduction",
                         False)) if cuda else None),
        "autocast_bf16": use_autocast,
    }
    if init_diff is not None:
        out["init_max_abs_diff_vs_onnx"] = init_diff
    if cuda:
        out["max_memory_allocated_gb"] = torch.cuda.max_memory_allocated(dev) / 1e9
    if not all(np.isfinite(loss_vals)):
        print("torch_mlp.py: warning: non-finite loss", file=sys.stderr)
    print("torch %s %s on %s: %.3f ms/step (repeats %s), %.1f TFLOP/s, MFU %.1f%% of %.1f "
          "TFLOP/s (%s)" % (a.precision, "eager", out["device_name"], ms_step,
                            ", ".join("%.3f" % v for v in rep_ms), tflops, 100 * out["mfu"],
                            peak, peak_src), file=sys.stderr)
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
