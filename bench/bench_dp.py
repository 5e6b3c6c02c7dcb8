#!/usr/bin/python3
"""Data parallel x pipeline: --data-parallel D against one replica at the same global batch.

Model: test/e2e/models.py mlp_deep (8 x Linear 1024 -> 1024 + ReLU, then Linear 1024 -> 10,
cross-entropy, SGD lr 0.01) at --batch-size B (default 256), --stages K (default 1),
--microbatches M (default 1). Configurations (gpipe-run, --threads T each rank):

  d1_t1: one replica, 1 thread (one core: the single device)
  d1_tD: one replica, D threads (the same cores as D replicas)
  dD_t1: D replicas of the pipeline, 1 thread each, B/D rows each; the replicas of a stage
    share a node, so their gradients are averaged through shared memory
  dD_t1_mpi: the same averaged with MPI collectives (GPIPE_DP_SHARED=0; what replicas on
    different nodes use): a reduce-scatter, the sum, an all-gather, each bucket started as
    its gradient is final
  dD_t1_mpi_no_overlap: that with GPIPE_DP_OVERLAP=0 (each gradient's average waited for
    when it starts, instead of moving while the update's weight-gradient GEMMs run)
  dD_t1_shard: D replicas with --shard-optimizer (ZeRO-1: each replica updates its 1/D share
    of every parameter, then the parameters are gathered)

Rounds alternate the configurations (the order reversed every other round); step time is the
median of the loss stage's --log-json ms after the warm-up (replica 0's loss stage: it
includes the wait for the gradients' average). All must give the same loss curve (within
1e-5 relative). The D-replica program also runs once more each way with --trace: the
"gradient all-reduce" events of replica 0's stages give the exposed all-reduce time per step.

Usage:
  /usr/bin/python3 bench/bench_dp.py --bin build/bin [--data-parallel 2] [--stages 1]
      [--microbatches 1] [--batch-size 256] [--steps 20] [--warmup 3] [--repeat 5]
      [--workdir DIR]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "test", "e2e"))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True


from bench_remat import compile_, setup_mlp_deep  # noqa: E402


def run(a, out, threads, log, trace=None, overlap=True, shared=True):
    if os.path.exists(log):
        os.remove(log)
    cmd = [os.path.join(a.bin, "gpipe-run"), out, "--data", os.path.join(a.workdir, "data"),
           "--steps", str(a.warmup + a.steps), "--threads", str(threads), "--log-json", log,
           "-q"]
    if trace:
        cmd += ["--trace", trace]
    env = dict(os.environ, GPIPE_DP_OVERLAP="1" if overlap else "0",
               GPIPE_DP_SHARED="1" if shared else "0")
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env=env)
    rows = [json.loads(x) for x in open(log) if x.strip()]
    rows = [r for r in rows if "loss" in r and "step" in r]
    return statistics.median(r["ms"] for r in rows[a.warmup:]), [r["loss"] for r in rows]


def allreduce_ms(trace, steps):
    """Per stage of replica 0: the gradient all-reduce's milliseconds per step (the last
    `steps` steps)."""
    with open(trace) as f:
        events = json.load(f)["traceEvents"]
    per = {}
    for e in events:
        if e.get("name") == "gradient all-reduce":
            per.setdefault(e["pid"], {}).setdefault(e["args"]["step"], 0.0)
            per[e["pid"]][e["args"]["step"]] += e["dur"] / 1e3
    return {s: sum(sorted(v.items())[-steps:][i][1] for i in range(min(steps, len(v)))) /
            min(steps, len(v)) for s, v in sorted(per.items())}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--data-parallel", dest="d", type=int, default=2)
    ap.add_argument("--stages", type=int, default=1)
    ap.add_argument("--microbatches", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--workdir", default="/tmp/gpipe_bench_dp")
    a = ap.parse_args()
    model = setup_mlp_deep(a, "Data parallel x pipeline (bench/bench_dp.py)", 4)

    one, many = os.path.join(a.workdir, "out_d1"), os.path.join(a.workdir, "out_d%d" % a.d)
    compile_(a, model, one, ["--remat", "none"])
    compile_(a, model, many, ["--remat", "none", "--data-parallel", str(a.d)])
    shard = os.path.join(a.workdir, "out_d%d_shard" % a.d)
    compile_(a, model, shard, ["--remat", "none", "--data-parallel", str(a.d),
                               "--shard-optimizer"])
    # (name, program, threads per rank, overlap, shared-memory average)
    configs = [("d1_t1", one, 1, True, True), ("d1_t%d" % a.d, one, a.d, True, True),
               ("d%d_t1" % a.d, many, 1, True, True),
               ("d%d_t1_mpi" % a.d, many, 1, True, False),
               ("d%d_t1_mpi_no_overlap" % a.d, many, 1, False, False),
               ("d%d_t1_shard" % a.d, shard, 1, True, True)]
    ms = {c[0]: [] for c in configs}
    curves = {}
    for r in range(a.repeat):
        for c, out, t, overlap, shared in (configs if r % 2 == 0 else configs[::-1]):
            m, losses = run(a, out, t, os.path.join(a.workdir, "log_%s.jsonl" % c),
                            overlap=overlap, shared=shared)
            ms[c].append(m)
            curves.setdefault(c, losses)
            print("round %d %s: %.3f ms/step" % (r, c, m), flush=True)
    ar = {}
    for key, overlap, shared in (("shared memory", True, True),
                                 ("MPI, overlapped", True, False),
                                 ("MPI, no overlap", False, False)):
        trace = os.path.join(a.workdir, "trace_%d%d.json" % (overlap, shared))
        run(a, many, 1, os.path.join(a.workdir, "log_trace.jsonl"), trace, overlap, shared)
        ar[key] = allreduce_ms(trace, a.steps)

    base = curves["d1_t1"]
    print("\n| config | replicas | threads per rank | ms/step (median of %d rounds) | "
          "throughput vs d1_t1 (median of per-round ratios) | rounds (ms) | max loss diff vs "
          "d1_t1 |" % a.repeat)
    print("|---|---|---|---|---|---|---|")
    for c, out, t, _, _ in configs:
        ratios = [b / m for b, m in zip(ms["d1_t1"], ms[c])]
        diff = max(abs(p - q) / max(1.0, abs(q)) for p, q in zip(curves[c], base))
        print("| %s | %d | %d | %.3f | %.3fx | %s | %.2g |"
              % (c, 1 if out == one else a.d, t, statistics.median(ms[c]),
                 statistics.median(ratios), ", ".join("%.2f" % v for v in ms[c]), diff))
    for key, per in ar.items():
        print("\nexposed gradient all-reduce per step (replica 0's trace: the update's time "
              "in gp_reduce_start/wait), %s: " % key +
              ", ".join("stage %d %.3f ms" % (s, v) for s, v in per.items()))
    bad = [c for c in curves if max(abs(p - q) / max(1.0, abs(q))
                                    for p, q in zip(curves[c], base)) > 1e-5]
    if bad:
        print("LOSS CURVES DIFFER: %s" % ", ".join(bad))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
