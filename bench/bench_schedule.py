#!/usr/bin/python3
"""GPipe vs 1F1B vs ZB-H1 vs ZB-H2 vs interleaved 1F1B vs ZB-V vs BFPP: step time and peak resident memory of each
stage process.

Model: test/e2e/models.py mlp_deep (as bench_step.py and bench_pipeline.py): 8 x (Linear
1024 -> 1024 + ReLU) + Linear 1024 -> 10, cross-entropy, batch 256, SGD lr 0.01; with --d-in
1536 the first Linear reads 1536 features (random inputs), which gives K = 2 stages equal work
(mlp_deep's stage 0 has one input-gradient GEMM less than stage 1, whose 10% more work any
order must wait for; see bench/README.md). One export,
compiled with the same --stages K --microbatches M --remat R, once per schedule of
--schedules (default gpipe,1f1b,zbh1,zbh2,interleaved,zbv,bfpp; interleaved and bfpp with
--virtual-stages V, default 2: the model cut into K*V pieces; zbv with 2). All must give GPipe's loss curve (1e-5
relative).

Each run starts the K stage programs itself, under Open MPI's mpirun (as gpipe-run does),
with every rank wrapped in /usr/bin/time so that each stage process reports its peak resident
set (ru_maxrss); step time is the median of the loss stage's --log-json "ms" after the
warm-up steps. Rounds run the schedules in turn, the order reversed every other round; the
ratios (GPipe's step time over each schedule's) are per round, then the median.
Beside the measurements, the compiler's own prediction of each stage's activation memory
(pipeline.json: in_flight_microbatches x activation_bytes_per_microbatch).

Usage:
  /usr/bin/python3 bench/bench_schedule.py --bin build/bin [--stages 2] [--microbatches 8]
      [--remat none] [--steps 20] [--warmup 3] [--repeat 3] [--workdir DIR]
      [--schedules gpipe,1f1b,zbh1,zbh2,interleaved,zbv,bfpp] [--virtual-stages 2] [--d-in 1024]
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "test", "e2e"))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True

import numpy as np  # noqa: E402

from bench_step import cpu_model, env_for, sh  # noqa: E402

SCHEDULES = ("gpipe", "1f1b", "zbh1", "zbh2", "interleaved", "zbv", "bfpp")


def run_once(a, out, steps, log_json):
    """Runs the pipeline in OUT for `steps` steps; returns (per-stage peak RSS in KiB, the
    loss stage's [(loss, ms)])."""
    pj = json.load(open(os.path.join(out, "pipeline.json")))
    mpirun = shutil.which("mpirun")
    cmd = [mpirun, "--oversubscribe", "--bind-to", "none",
           "--mca", "btl_vader_single_copy_mechanism", "none"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    cmd += ["-x", "OMP_NUM_THREADS", "-x", "OPENBLAS_NUM_THREADS"]
    for s, st in enumerate(pj["stages"]):
        cmd += ([":"] if s else []) + [
            "-np", "1", "/usr/bin/time", "-o", log_json + ".rss%d" % s, "-f",
            "gpipe-bench stage %d maxrss %%M" % s,
            os.path.join(out, st["executable"]), "--weights-in",
            os.path.join(out, st.get("weights", "weights")), "--steps", str(steps),
            "--threads", "1", "--data", os.path.join(a.workdir, "data"), "--pipeline",
            os.path.join(out, "pipeline.json"), "--log-json", log_json, "--quiet",
            "--report", log_json + ".report%d" % s]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       env=env_for(1), timeout=1800)
    if r.returncode != 0:
        raise SystemExit("bench_schedule: %s failed (%d):\n%s" % (out, r.returncode,
                                                                  r.stdout[-3000:]))
    # Each rank's /usr/bin/time writes its own file (stdout lines of the ranks
    # can interleave).
    rss = {}
    for s in range(len(pj["stages"])):
        text = open(log_json + ".rss%d" % s).read()
        for m in re.finditer(r"gpipe-bench stage (\d+) maxrss (\d+)", text):
            rss[int(m.group(1))] = int(m.group(2))
    rows = [json.loads(l) for l in open(log_json) if l.strip()]
    # The measured bubble: the share of the step each stage spent waiting for
    # transfers (its --report, over all steps).
    waits = []
    for s in range(len(pj["stages"])):
        rep = json.load(open(log_json + ".report%d" % s))
        waits.append(rep["transfer_wait_ms"] / rep["step_ms"] if rep["step_ms"] else 0.0)
    return [rss.get(s, -1) for s in range(len(pj["stages"]))], \
        [(row["loss"], row["ms"]) for row in rows], waits


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--stages", type=int, default=2)
    ap.add_argument("--microbatches", type=int, default=8)
    ap.add_argument("--remat", default="none")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workdir", default="/tmp/gpipe_bench_schedule")
    ap.add_argument("--schedules", default=",".join(SCHEDULES),
                    help="the schedules compared with gpipe (always included)")
    ap.add_argument("--virtual-stages", type=int, default=2,
                    help="model chunks per stage of --schedule interleaved")
    ap.add_argument("--d-in", type=int, default=1024,
                    help="input features of the MLP (1024: mlp_deep; 1536 makes the first "
                    "layer's forward and weight gradient cost what a 1024-wide layer's forward, "
                    "input and weight gradients cost, so that K = 2 stages get equal work)")
    a = ap.parse_args()
    schedules = ["gpipe"] + [s for s in a.schedules.split(",") if s and s != "gpipe"]
    import models  # noqa: E402
    import torch  # noqa: E402

    os.makedirs(os.path.join(a.workdir, "data"), exist_ok=True)
    print("# Schedules: %s (bench/bench_schedule.py)\n" % ", ".join(schedules))
    print("machine: %s, %d CPUs, AVX-512: %s" % (
        cpu_model(), os.cpu_count(),
        sh("grep -o 'avx512[a-z]*' /proc/cpuinfo | sort -u | tr '\\n' ' '") or "none"))
    print("command: %s\n" % " ".join(sys.argv))
    samples = a.batch_size * 4
    x, y = models.make_data("mlp_deep", samples, seed=0)
    if a.d_in != x.shape[1]:
        x = np.random.default_rng(1).standard_normal((samples, a.d_in)).astype(np.float32)
    np.save(os.path.join(a.workdir, "data", "x.npy"), x)
    np.save(os.path.join(a.workdir, "data", "y.npy"), y)
    model_path = os.path.join(a.workdir, "model.onnx")
    torch.manual_seed(models.DEFAULT_SEED)
    models.export(models.MlpDeep(d_in=a.d_in), x[:a.batch_size], y[:a.batch_size], model_path)

    predicted = {}
    for sched in schedules:
        out = os.path.join(a.workdir, "out_" + sched)
        shutil.rmtree(out, ignore_errors=True)
        subprocess.run([os.path.join(a.bin, "gpipe-compile"), model_path, "-o", out,
                        "--batch-size", str(a.batch_size), "--stages", str(a.stages),
                        "--microbatches", str(a.microbatches), "--remat", a.remat,
                        "--schedule", sched, "--optimizer", "sgd", "--lr", "0.01"]
                       + (["--virtual-stages", str(a.virtual_stages)]
                          if sched in ("interleaved", "bfpp") else [])
                       + (["--virtual-stages", "2"] if sched == "zbv" else []),
                       check=True, stdout=subprocess.DEVNULL)
        pj = json.load(open(os.path.join(out, "pipeline.json")))
        predicted[sched] = [(st["memory"]["in_flight_microbatches"],
                             st["memory"]["activation_bytes"], st["memory"]["arena_bytes"])
                            for st in pj["stages"]]

    ms = {s: [] for s in schedules}
    rss = {s: [] for s in schedules}
    waits = {s: [] for s in schedules}
    curves = {}
    for rnd in range(a.repeat):
        order = schedules if rnd % 2 == 0 else schedules[::-1]
        for sched in order:
            r, rows, w = run_once(a, os.path.join(a.workdir, "out_" + sched),
                                  a.warmup + a.steps,
                                  os.path.join(a.workdir, "log_%s.jsonl" % sched))
            rss[sched].append(r)
            waits[sched].append(w)
            ms[sched].append(statistics.median(m for _, m in rows[a.warmup:]))
            curves.setdefault(sched, [l for l, _ in rows])
            print("round %d %-11s: %.2f ms/step, peak RSS per stage %s KiB"
                  % (rnd + 1, sched, ms[sched][-1], ", ".join(map(str, r))), flush=True)

    worst = 0.0
    for sched in schedules[1:]:
        w = max(abs(p - q) / max(abs(q), 1e-12)
                for p, q in zip(curves[sched], curves["gpipe"]))
        worst = max(worst, w)
        print("\nloss curves: %s vs gpipe, worst relative difference %.2e (%s)"
              % (sched, w, "ok" if w <= 1e-5 else "DIFFER"))
    print("\nK = %d, M = %d, remat %s, batch %d, %d measured steps after %d warm-up, "
          "%d rounds%s\n" % (a.stages, a.microbatches, a.remat, a.batch_size, a.steps,
                             a.warmup, a.repeat,
                             ", interleaved/bfpp V = %d" % a.virtual_stages
                             if {"interleaved", "bfpp"} & set(schedules) else ""))
    print("| schedule | ms/step (median of rounds) | stage | measured bubble: transfer "
          "waits, % of the step (median) | peak RSS, median (MiB) "
          "| predicted activations (in flight x per micro-batch) | arena (MiB) |")
    print("|---|---:|---:|---:|---:|---|---:|")
    for sched in schedules:
        for s in range(a.stages):
            med = statistics.median(r[s] for r in rss[sched]) / 1024.0
            wait = statistics.median(w[s] for w in waits[sched])
            inflight, act, arena = predicted[sched][s]
            print("| %s | %s | %d | %.1f%% | %.1f | %d x = %.2f MiB | %.1f |"
                  % (sched, "%.2f" % statistics.median(ms[sched]) if s == 0 else "", s,
                     100 * wait, med, inflight, act / 2**20, arena / 2**20))
    for sched in schedules[1:]:
        ratios = [g / f for g, f in zip(ms["gpipe"], ms[sched])]
        print("\nstep time gpipe / %s per round: %s (median %.3f; > 1: %s faster)"
              % (sched, ", ".join("%.3f" % r for r in ratios), statistics.median(ratios),
                 sched))
        for s in range(a.stages):
            d = [(g[s] - f[s]) / 1024.0 for g, f in zip(rss["gpipe"], rss[sched])]
            print("stage %d peak RSS gpipe - %s per round: %s MiB" % (
                s, sched, ", ".join("%.1f" % v for v in d)))
    return 0 if worst <= 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
