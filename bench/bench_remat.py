#!/usr/bin/python3
"""Rematerialization under a memory budget: --remat none, stage, and auto with
--memory-per-stage (per stage, part of the stash: gpipe-remat mode=segments).

Model: test/e2e/models.py mlp_deep (8 x Linear 1024 -> 1024 + ReLU, then Linear 1024 -> 10,
cross-entropy, SGD lr 0.01) at --batch-size (default 1024), compiled with --stages K
--microbatches M (GPipe). The budget, unless --budget gives it, is halfway between the fuller
stage's planned arena under --remat stage and under --remat none, so that remat none does not
fit and whole-stage remat recomputes more than it needs to. Each configuration runs the K stage
programs under mpirun as bench_schedule.py does (--threads 1, every rank under /usr/bin/time for
its peak RSS); rounds alternate the configurations (order reversed every other round); step
time is the median of the loss stage's --log-json ms after the warm-up. All must give the same
loss curve (remat recomputes the same values).

Usage:
  /usr/bin/python3 bench/bench_remat.py --bin build/bin [--stages 2] [--microbatches 4]
      [--batch-size 1024] [--budget BYTES] [--steps 10] [--warmup 3] [--repeat 3]
      [--workdir DIR]
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "test", "e2e"))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True

import numpy as np  # noqa: E402

from bench_schedule import run_once  # noqa: E402
from bench_step import cpu_model  # noqa: E402


def compile_(a, model, out, flags):
    shutil.rmtree(out, ignore_errors=True)
    subprocess.run([os.path.join(a.bin, "gpipe-compile"), model, "-o", out,
                    "--batch-size", str(a.batch_size), "--stages", str(a.stages),
                    "--microbatches", str(a.microbatches), "--optimizer", "sgd",
                    "--lr", "0.01"] + flags, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return json.load(open(os.path.join(out, "pipeline.json")))


def setup_mlp_deep(a, title, batches):
    """Prints the header; writes `batches` mini-batches of mlp_deep's data under
    a.workdir/data and its export (batch a.batch_size); returns the model's path."""
    import models  # noqa: E402
    import torch  # noqa: E402

    os.makedirs(os.path.join(a.workdir, "data"), exist_ok=True)
    print("# %s\n" % title)
    print("machine: %s, %d CPUs" % (cpu_model(), os.cpu_count()))
    print("command: %s\n" % " ".join(sys.argv))
    x, y = models.make_data("mlp_deep", a.batch_size * batches, seed=0)
    np.save(os.path.join(a.workdir, "data", "x.npy"), x)
    np.save(os.path.join(a.workdir, "data", "y.npy"), y)
    model = os.path.join(a.workdir, "model.onnx")
    torch.manual_seed(models.DEFAULT_SEED)
    models.export(models.MlpDeep(), x[:a.batch_size], y[:a.batch_size], model)
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--stages", type=int, default=2)
    ap.add_argument("--microbatches", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--budget", type=int, default=None)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workdir", default="/tmp/gpipe_bench_remat")
    a = ap.parse_args()
    model = setup_mlp_deep(a, "Remat under a budget (bench/bench_remat.py)", 2)

    plans = {}
    plans["none"] = compile_(a, model, os.path.join(a.workdir, "out_none"), ["--remat", "none"])
    plans["stage"] = compile_(a, model, os.path.join(a.workdir, "out_stage"),
                              ["--remat", "stage"])
    arena = lambda p: [s["memory"]["arena_bytes"] for s in p["stages"]]  # noqa: E731
    budget = a.budget or (max(arena(plans["none"])) + max(arena(plans["stage"]))) // 2
    plans["auto"] = compile_(a, model, os.path.join(a.workdir, "out_auto"),
                             ["--remat", "auto", "--memory-per-stage", str(budget)])
    configs = ["none", "stage", "auto"]
    print("budget (--memory-per-stage): %d bytes (%.1f MiB)" % (budget, budget / 2**20))
    print("auto: remat %s, stash limits %s\n" % (plans["auto"]["remat"],
                                                  plans["auto"].get("remat_stash_bytes")))

    ms = {c: [] for c in configs}
    rss = {c: [] for c in configs}
    curves = {}
    for rnd in range(a.repeat):
        for c in (configs if rnd % 2 == 0 else configs[::-1]):
            r, rows, _ = run_once(a, os.path.join(a.workdir, "out_" + c), a.warmup + a.steps,
                                  os.path.join(a.workdir, "log_%s.jsonl" % c))
            rss[c].append(r)
            ms[c].append(statistics.median(m for _, m in rows[a.warmup:]))
            curves.setdefault(c, [l for l, _ in rows])
            print("round %d %-5s: %.2f ms/step, peak RSS per stage %s KiB"
                  % (rnd + 1, c, ms[c][-1], ", ".join(map(str, r))), flush=True)
    worst = max(abs(p - q) / max(abs(q), 1e-12)
                for c in configs[1:] for p, q in zip(curves[c], curves["none"]))
    print("\nloss curves vs remat none: worst relative difference %.2e (%s)"
          % (worst, "ok" if worst <= 1e-5 else "DIFFER"))
    print("\nK = %d, M = %d, batch %d, %d measured steps after %d warm-up, %d rounds\n"
          % (a.stages, a.microbatches, a.batch_size, a.steps, a.warmup, a.repeat))
    print("| remat | ms/step (median of rounds) | stage | arena (MiB) | fits the budget | stash per "
          "micro-batch (MiB) | backward MFLOP per micro-batch | peak RSS, median (MiB) |")
    print("|---|--:|--:|--:|---|--:|--:|--:|")
    for c in configs:
        for s, st in enumerate(plans[c]["stages"]):
            mem = st["memory"]
            print("| %s | %s | %d | %.2f | %s | %.2f | %.0f | %.1f |" % (
                c if c != "auto" else "auto (%s)" % plans[c]["remat"],
                "%.2f" % statistics.median(ms[c]) if s == 0 else "", s,
                mem["arena_bytes"] / 2**20, "yes" if mem["arena_bytes"] <= budget else "no",
                mem["activation_bytes_per_microbatch"] / 2**20,
                st["backward_flops_per_microbatch"] / 1e6,
                statistics.median(r[s] for r in rss[c]) / 1024.0))
    for c in ("stage", "auto"):
        ratios = [n / x for n, x in zip(ms["none"], ms[c])]
        print("\nthroughput %s / none per round: %s (median %.3f)"
              % (c, ", ".join("%.3f" % r for r in ratios), statistics.median(ratios)))
    ratios = [s / x for s, x in zip(ms["stage"], ms["auto"])]
    print("throughput auto / stage per round: %s (median %.3f)"
          % (", ".join("%.3f" % r for r in ratios), statistics.median(ratios)))
    return 0 if worst <= 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
