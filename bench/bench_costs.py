#!/usr/bin/python3
"""The calibrated cost model against measured runs (issue 27): per model, the compiler's
predicted per-stage compute time (gpipe-compile --costs, from a cost table measured on this
machine) against the measured one, and the partition the table gives against the FLOP
partition.

Per model (five, below), one export (torch, test/e2e/models.py's modules at bench sizes),
then:
  1. profile: gpipe-compile --stages S --microbatches M --remat R --profile (S:
     --profile-stages, 1 by default; 2: the FLOP partition's pipeline), then
     gpipe-run --steps P --profile costs.jsonl --threads 1 (the first step is not counted);
  2. compile the 2-stage pipeline twice, with the FLOP partition (no --costs) and with
     --costs costs.jsonl (same M, R, schedule gpipe);
  3. rounds (--repeat, order alternating): each program runs warm-up + measured steps
     under gpipe-run --threads 1 --trace --log-json; per stage and measured step its compute
     is the sum of its actions (forward, backward, weight, update) less the transfer waits
     inside them; the stage's measured compute is the median over steps and rounds; the
     step time the median of the loss stage's per-step ms.
Table per model: per stage of the --costs build the predicted compute (pipeline.json's
predicted_seconds_per_step, summed) and the measured one and their error; per partition
(FLOP, --costs) the measured bottleneck/mean of the stages' compute and the step time.

Usage:
  /usr/bin/python3 bench/bench_costs.py --bin build/bin [--models mlp_uneven,gpt_vocab,...]
      [--microbatches 4] [--remat none] [--profile-steps 6] [--profile-repeat 1]
      [--steps 8] [--warmup 2]
      [--repeat 2] [--workdir DIR] [--out FILE]
"""

import argparse
import json
import os
import re
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

from bench_step import cpu_model, env_for  # noqa: E402


def build_model(name):
    """(module, x, y) of one mini-batch's shapes, and the data's (x, y) generator."""
    import torch
    import torch.nn as nn
    import models
    torch.manual_seed(0)
    if name == "mlp_uneven":
        # 16 x Linear(1024, 1024): the first 8 with exact GELU (erf per element), the
        # last 8 with ReLU. FLOPs and bytes see the two halves alike; GELU is not.
        class UnevenMlp(models._Loss):
            def __init__(self):
                super().__init__()
                self.layers = nn.ModuleList(nn.Linear(1024, 1024) for _ in range(16))
                self.head = nn.Linear(1024, 10)

            def logits(self, x):
                for i, layer in enumerate(self.layers):
                    x = layer(x)
                    x = torch.nn.functional.gelu(x) if i < 8 else torch.relu(x)
                return self.head(x)
        return UnevenMlp(), ("float", 1024, 10), 128
    if name == "gpt_vocab":
        # Embedding and head heavy: a 32768-token vocabulary (the head tied to the
        # embedding, as GPT-2) on 6 small blocks; trained with Adam, whose update of the
        # 4M-parameter embedding FLOPs do not count.
        return (models.GptTiny(vocab=32768, t=32, d=128, heads=4, layers=6, tied=True),
                ("tokens", 32, 32768), 8)
    if name == "bert":
        return models.BertTiny(vocab=2048, t=64, d=128, layers=4), ("tokens", 64, 2048), 16
    if name == "resnet18":
        return models.ResNet18(), ("float", 3072, 10), 16
    if name == "vit":
        return (models.VitTiny(classes=10, d=128, heads=4, layers=6, patch=4, side=32),
                ("float", 3 * 32 * 32, 10), 32)
    raise SystemExit("unknown model %r" % name)


MODELS = ("mlp_uneven", "gpt_vocab", "bert", "resnet18", "vit")
# SGD (lr 0.01) but where named.
OPTIMIZER = {"gpt_vocab": ["--optimizer", "adam", "--lr", "0.001"]}


def make_data(kind, samples, seed=0):
    rng = np.random.default_rng(seed)
    what, width, classes = kind
    if what == "tokens":
        x = rng.integers(1, classes, (samples, width)).astype(np.int64)
        return x, rng.integers(0, classes, (samples, width)).astype(np.int64)
    x = rng.standard_normal((samples, width)).astype(np.float32)
    return x, rng.integers(0, classes, (samples,)).astype(np.int64)


def run(cmd, env=None, log=None):
    """Runs `cmd`; returns its combined output."""
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    text = p.stdout.decode(errors="replace")
    if log:
        with open(log, "a") as f:
            f.write("$ %s\n%s\n" % (" ".join(cmd), text))
    if p.returncode != 0:
        raise SystemExit("failed (%d): %s\n%s" % (p.returncode, " ".join(cmd), text[-3000:]))
    return text


# gpipe-run's stage report row: stage, step ms, compute ms, wait ms, wait %, peak RSS MiB, ...
REPORT_ROW = re.compile(r"^\s+(\d+)\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+[\d.]+%\s+([\d.]+)\s")


def peak_rss(output):
    """{stage: peak RSS MiB} from gpipe-run's stage report."""
    return {int(m.group(1)): float(m.group(2))
            for m in (REPORT_ROW.match(l) for l in output.splitlines()) if m}


def stage_compute(trace_path, warmup, cpu=False):
    """{stage: [compute ms of each step after the warm-up]} from a gpipe-run --trace: the
    actions less the transfer waits inside them, in wall time, or with `cpu` in the
    stage thread's CPU time (the trace's cpu_us: what it computed while stages share cores)."""
    events = json.load(open(trace_path))["traceEvents"]
    per = {}
    for e in events:
        if e.get("ph") != "X" or e["args"].get("step", 0) <= warmup:
            continue
        key = (e["pid"], e["args"]["step"])
        sign = (1 if e["cat"] == "action" and e["name"] in
                ("forward", "backward", "weight", "update") else
                -1 if e["cat"] == "transfer" else 0)
        if sign:
            t = (e["args"]["cpu_us"] if cpu else e["dur"]) / 1e3
            per[key] = per.get(key, 0.0) + sign * t
    out = {}
    for (s, _), ms in sorted(per.items()):
        out.setdefault(s, []).append(ms)
    return out


def step_ms(log_path, warmup):
    rows = [json.loads(l) for l in open(log_path) if l.strip()]
    ms = [r["ms"] for r in rows if "loss" in r and "ms" in r and r.get("step", 0) > warmup]
    return statistics.median(ms)


def bench_model(a, name, out_lines):
    import models
    wd = os.path.join(a.workdir, name)
    os.makedirs(wd, exist_ok=True)
    log = os.path.join(wd, "commands.log")
    module, kind, batch = build_model(name)
    onnx_path = os.path.join(wd, "model.onnx")
    x, y = make_data(kind, batch * 4)
    ddir = os.path.join(wd, "data")
    os.makedirs(ddir, exist_ok=True)
    np.save(os.path.join(ddir, "x.npy"), x)
    np.save(os.path.join(ddir, "y.npy"), y)
    if not os.path.exists(onnx_path):
        import torch
        models.export(module, torch.from_numpy(x[:batch]), torch.from_numpy(y[:batch]),
                      onnx_path, check=False)
    params = sum(p.numel() for p in module.parameters())
    gc = os.path.join(a.bin, "gpipe-compile")
    gr = os.path.join(a.bin, "gpipe-run")
    common = ["--batch-size", str(batch), "--microbatches", str(a.microbatches),
              "--remat", a.remat] + OPTIMIZER.get(name, [])
    env = env_for(1)
    run([gc, onnx_path, "-o", os.path.join(wd, "prof"), "--stages",
                  str(a.profile_stages), "--profile"] + common, log=log)
    # --profile-repeat N: N profile runs in one table (the table averages a
    # unit's runs: one slow stretch of a shared machine weighs 1/N).
    costs = os.path.join(wd, "costs.jsonl")
    with open(costs, "w") as joined:
        for r in range(a.profile_repeat):
            one = os.path.join(wd, "costs_%d.jsonl" % r)
            run([gr, os.path.join(wd, "prof"), "--data", ddir, "--steps",
                 str(a.profile_steps), "--threads", "1", "--profile", one, "-q"],
                env=env, log=log)
            joined.write(open(one).read())
    k = str(a.stages)
    progs = {"flop": os.path.join(wd, "k%s_flop" % k),
             "costs": os.path.join(wd, "k%s_costs" % k)}
    run([gc, onnx_path, "-o", progs["flop"], "--stages", k] + common, log=log)
    run([gc, onnx_path, "-o", progs["costs"], "--stages", k, "--costs", costs] + common,
        log=log)
    cpu = a.stages > (os.cpu_count() or 1)
    pj = {k: json.load(open(os.path.join(p, "pipeline.json"))) for k, p in progs.items()}
    measured = {k: {} for k in progs}
    steps = {k: [] for k in progs}
    peaks = {k: {} for k in progs}
    order = list(progs)
    for r in range(a.repeat):
        for k in (order if r % 2 == 0 else order[::-1]):
            trace = os.path.join(wd, "trace_%s_%d.json" % (k, r))
            lj = os.path.join(wd, "log_%s_%d.jsonl" % (k, r))
            if os.path.exists(lj):
                os.remove(lj)
            output = run([gr, progs[k], "--data", ddir, "--steps", str(a.warmup + a.steps),
                          "--threads", "1", "--trace", trace, "--log-json", lj,
                          "--log-every", "1000000"], env=env, log=log)
            for s, mib in peak_rss(output).items():
                peaks[k][s] = max(peaks[k].get(s, 0.0), mib)
            for s, ms in stage_compute(trace, a.warmup, cpu).items():
                measured[k].setdefault(s, []).extend(ms)
            steps[k].append(step_ms(lj, a.warmup))
    res = {"model": name, "params": params, "batch": batch}
    lines = ["", "### %s (%d parameters, batch %d, M %d, remat %s, K %d; stage compute in %s)" % (
        name, params, batch, a.microbatches, a.remat, a.stages,
        "CPU time" if cpu else "wall time"), "",
        "| stage (--costs partition) | predicted ms | measured ms | error |",
        "|---|---|---|---|"]
    errs = []
    for st in pj["costs"]["stages"]:
        s = st["index"]
        pred = 1e3 * sum(st["predicted_seconds_per_step"])
        meas = statistics.median(measured["costs"][s])
        err = (pred - meas) / meas
        errs.append(err)
        lines.append("| %d | %.2f | %.2f | %+.1f%% |" % (s, pred, meas, 100 * err))
    lines += ["", "| partition | stage compute ms (measured) | bottleneck/mean | step ms |",
              "|---|---|---|---|"]
    for k in progs:
        comp = [statistics.median(measured[k][s]) for s in sorted(measured[k])]
        lines.append("| %s | %s | %.3f | %.2f |" % (
            "FLOP (analytic)" if k == "flop" else "--costs (measured)",
            ", ".join("%.2f" % c for c in comp), max(comp) / statistics.mean(comp),
            statistics.median(steps[k])))
        res[k] = {"stage_ms": comp, "bottleneck_over_mean": max(comp) / statistics.mean(comp),
                  "step_ms": statistics.median(steps[k]), "step_ms_rounds": steps[k]}
    res["prediction_errors"] = errs
    # Memory: the compiler's prediction of each stage's peak (pipeline.json's
    # predicted_peak_bytes: the arena, the runtime's own memory as the table
    # measured it for a stage in that place of a pipeline, MPI's send
    # buffer), against the peak RSS.
    lines += ["", "| stage (--costs partition) | arena MiB | + runtime MiB | predicted peak MiB "
              "| measured peak MiB | error |", "|---|---|---|---|---|---|"]
    res["memory"] = []
    for st in pj["costs"]["stages"]:
        s = st["index"]
        arena = st["memory"]["arena_bytes"] / 2**20
        pred = st["memory"]["predicted_peak_bytes"] / 2**20
        runtime = (pred - arena) * 2**20
        meas = peaks["costs"].get(s)
        lines.append("| %d | %.1f | %.1f | %.1f | %s | %s |" % (
            s, arena, runtime / 2**20, pred, "%.1f" % meas if meas else "n/a",
            "%+.1f%%" % (100 * (pred - meas) / meas) if meas else "n/a"))
        res["memory"].append({"stage": s, "predicted_mib": pred, "measured_mib": meas})
    out_lines += lines
    print("\n".join(lines), flush=True)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--stages", type=int, default=2,
                    help="K of the compared pipelines; more stages than cores: each stage's "
                         "compute in its thread's CPU time (the trace's cpu_us)")
    ap.add_argument("--microbatches", type=int, default=4)
    ap.add_argument("--remat", default="none")
    ap.add_argument("--profile-steps", type=int, default=6)
    ap.add_argument("--profile-repeat", type=int, default=1,
                    help="profile runs joined into the cost table")
    ap.add_argument("--profile-stages", type=int, default=1,
                    help="stages of the profiled program (2: its FLOP partition, each stage "
                         "timed while the other computes too)")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--workdir", default="/tmp/gpipe_bench_costs")
    ap.add_argument("--out", default=None, help="also write the table (and JSON) here")
    a = ap.parse_args()
    a.bin = os.path.abspath(a.bin)
    os.makedirs(a.workdir, exist_ok=True)
    lines = ["# bench_costs: %s, %d cores; %s" % (cpu_model(), os.cpu_count(),
                                                   " ".join(sys.argv[1:]))]
    results = [bench_model(a, m, lines) for m in a.models.split(",") if m]
    if a.out:
        with open(a.out, "w") as f:
            f.write("\n".join(lines) + "\n\n```json\n" + json.dumps(results, indent=1)
                    + "\n```\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
