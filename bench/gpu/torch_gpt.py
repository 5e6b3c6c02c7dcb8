#!/usr/bin/env python3
"""PyTorch eager side of the GPT benchmark: trains gpt_model.py's module, prints ms/step.

The module is gpt_model.build_module(cfg, bench=True): test/e2e/models.py's GptTiny
(vocab, T, d, heads, layers) built after torch.manual_seed(models.DEFAULT_SEED), the
weights gpipe's program starts from (device_bench.py writes them from the same seed), with
the position index made on the input's device; trained with plain torch.optim.SGD (lr
--lr, no momentum, no weight decay: gpipe-compile's default optimizer) on
gpt_model.make_data's --batches mini-batches of --batch sequences, in gpipe-run's order
(step s takes mini-batch (s-1) mod batches).

Precisions as torch_mlp.py (its set_precision): fp32 (TF32 off), tf32 (TF32 on), bf16:
float32 master weights, gradients and SGD; the forward under torch.autocast(device_type,
torch.bfloat16) (matmuls in bf16 with float32 accumulation; LayerNorm, softmax and the loss
in float32, as autocast casts them), TF32 off for whatever stays float32.

Timing (CUDA) as torch_mlp.py: --warmup untimed steps, torch.cuda.synchronize(), then per
repeat --steps steps each between two torch.cuda.Events (zero_grad + forward + backward +
optimizer.step; the data already on the GPU), no host synchronisation inside the timed
steps, one synchronize at the end; ms/step = median over repeats of the median step.
--device cpu (smoke test) times with time.perf_counter.

Prints one JSON line on stdout (last line): ms_per_step, tokens_per_s, model_flops,
tflops, mfu, peak_tflops, loss (every step), max_memory_allocated_gb, ...
"""

import argparse
import json
import os
import platform
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "test", "e2e"))

import numpy as np  # noqa: E402

import gpt_model  # noqa: E402
from torch_mlp import (peak_of, set_precision, tf32_settings, timed_steps,  # noqa: E402
                       train_step)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__)
    for k in gpt_model.CONFIG_KEYS:
        ap.add_argument("--" + k, type=int, default=gpt_model.DEFAULTS[k],
                        help="default %d" % gpt_model.DEFAULTS[k])
    ap.add_argument("--batches", type=int, default=4, help="mini-batches of data (default 4)")
    ap.add_argument("--precision", choices=("fp32", "tf32", "bf16"), default="bf16")
    ap.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu (smoke test)")
    ap.add_argument("--lr", type=float, default=0.01, help="SGD learning rate (default 0.01)")
    ap.add_argument("--warmup", type=int, default=10, help="untimed steps first (default 10)")
    ap.add_argument("--steps", type=int, default=50, help="timed steps per repeat (default 50)")
    ap.add_argument("--repeat", type=int, default=3, help="timed repeats (default 3)")
    ap.add_argument("--peak-tflops", type=float, default=None,
                    help="peak for MFU, TFLOP/s (default: fp32 67, tf32 494.7, bf16 989.4: "
                    "H100 SXM dense)")
    a = ap.parse_args(argv)
    if a.warmup < 0 or a.steps < 1 or a.repeat < 1 or a.batches < 1:
        ap.error("--warmup must be >= 0, --steps, --repeat and --batches >= 1")
    try:
        gpt_model.check_config({k: getattr(a, k) for k in gpt_model.CONFIG_KEYS})
    except ValueError as e:
        ap.error(str(e))
    return a


def main(argv=None):
    a = parse_args(argv)
    import torch

    cfg = {k: getattr(a, k) for k in gpt_model.CONFIG_KEYS}
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    if cuda and not torch.cuda.is_available():
        sys.exit("torch_gpt.py: torch %s has no usable CUDA device (torch.cuda.is_available() is "
                 "False); use --device cpu for a smoke test" % torch.__version__)
    set_precision(torch, a.precision, cuda)
    if a.precision == "tf32" and not cuda:
        print("torch_gpt.py: note: tf32 has no meaning on the CPU; running fp32 math",
              file=sys.stderr)

    B = cfg["batch"]
    fl = gpt_model.flops(cfg)
    x, y = gpt_model.make_data(a.batches * B, cfg["t"], cfg["vocab"], 0)
    m = gpt_model.build_module(cfg, bench=True).to(dev)
    m.train()
    opt = torch.optim.SGD(m.parameters(), lr=a.lr, momentum=0.0, weight_decay=0.0)
    xt, yt = torch.from_numpy(x).to(dev), torch.from_numpy(y).to(dev)
    batches = [(xt[i * B:(i + 1) * B], yt[i * B:(i + 1) * B]) for i in range(a.batches)]
    use_autocast = a.precision == "bf16"

    def step(s):
        """Training step s (1-based); returns the loss tensor (not synchronised)."""
        xb, yb = batches[(s - 1) % a.batches]
        return train_step(m, opt, xb, yb, dev if use_autocast else None)

    losses, warm_s, rep_ms, rep_wall_ms, rep_min = timed_steps(step, a, cuda, dev)

    loss_vals = [float(l.item()) for l in losses]
    ms_step = statistics.median(rep_ms)
    peak, peak_src = peak_of(a)
    tflops = fl["model_flops"] / (ms_step * 1e-3) / 1e12
    out = {
        "side": "torch", "model": "gpt", "precision": a.precision, "device": str(dev),
        "device_name": torch.cuda.get_device_name(dev) if cuda else platform.processor() or "cpu",
        "ms_per_step": ms_step, "ms_per_step_repeats": rep_ms,
        "wall_ms_per_step_repeats": rep_wall_ms, "min_step_ms": min(rep_min),
        "tokens_per_step": fl["tokens_per_step"],
        "tokens_per_s": fl["tokens_per_step"] / (ms_step * 1e-3),
        "model_flops": fl["model_flops"], "tflops": tflops,
        "peak_tflops": peak, "peak_source": peak_src, "mfu": tflops / peak,
        "lr": a.lr, "warmup": a.warmup, "steps": a.steps, "repeat": a.repeat,
        "warmup_s": warm_s, "loss": loss_vals[:a.warmup + a.steps],
        "final_loss": loss_vals[-1],
        "torch": torch.__version__, "cuda": torch.version.cuda if cuda else None,
        "tf32_settings": tf32_settings(torch) if cuda else None,
        "bf16_reduced_precision_reduction": (
            bool(getattr(torch.backends.cuda.matmul, "allow_bf16_reduced_precision_reduction",
                         False)) if cuda else None),
        "autocast_bf16": use_autocast,
    }
    out.update(cfg)
    if cuda:
        out["max_memory_allocated_gb"] = torch.cuda.max_memory_allocated(dev) / 1e9
    if not all(np.isfinite(loss_vals)):
        print("torch_gpt.py: warning: non-finite loss", file=sys.stderr)
    print("torch %s eager on %s: %.3f ms/step (repeats %s), %.0f tokens/s, %.1f TFLOP/s, "
          "MFU %.1f%% of %.1f TFLOP/s (%s)"
          % (a.precision, out["device_name"], ms_step, ", ".join("%.3f" % v for v in rep_ms),
             out["tokens_per_s"], tflops, 100 * out["mfu"], peak, peak_src), file=sys.stderr)
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
