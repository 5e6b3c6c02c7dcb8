#!/usr/bin/python3
"""How waiting stages wait: MPI's blocking calls vs polling with a backoff that sleeps.

Model: the shipped example, examples/gpt/gpt.onnx (character-level GPT, d 64, 4 layers,
sequence 64, batch 32) on examples/gpt/data, Adam lr 0.003, compiled once per stage count
K (--stages K --microbatches M, default remat). Every variant runs the same executables
through gpipe-run (--threads 1); only the environment or mpirun's arguments differ:

  block        GPIPE_MPI_WAIT=block: MPI_Probe/MPI_Recv/MPI_Send, which busy-poll (the
               runtime's behaviour before polling). Open MPI turns mpi_yield_when_idle on
               by itself on a node with more ranks than cores (K=4 on 2 cores): then they
               call sched_yield between polls
  block+yield  block, plus --mca mpi_yield_when_idle 1 (also for K <= cores)
  poll         the default: MPI_Iprobe/MPI_Test with sched_yield between polls for 1 ms
               (20 us when K x threads > cores), then sleeps of 1, 2, ... up to 256 us
  extra variants: --variant NAME:VAR=VALUE,VAR=VALUE (environment settings on top of poll)

Before each measurement the script waits (at most a minute) for a quiet machine, and it
repeats (at most twice) a measurement during which other processes used more than 0.25 cores
(/proc/stat busy time minus the CPU time of our process tree).

Step time: the wall clock of the whole gpipe-run invocation for W + N steps minus the one
for W steps, divided by N (start-up, compilation-free loading and warm-up cancel), and the
median of the loss stage's --log-json "ms" over the last N steps of the longer run. Rounds
alternate the variants (order rotated each round); ratios are per round, then the median.
Every variant must give exactly the same loss curve (the transport changes no numbers).

Usage:
  /usr/bin/python3 bench/bench_wait.py --bin build/bin [--stages 4,2] [--microbatches 8]
      [--steps 40] [--warmup 5] [--repeat 3] [--workdir DIR] [--variant NAME:VAR=V,...]
"""

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
EXAMPLE = os.path.join(REPO, "examples", "gpt")


def sh(cmd):
    return subprocess.run(cmd, shell=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True).stdout.strip()


def busy_jiffies():
    """(busy, total) jiffies of the whole machine from /proc/stat."""
    f = [int(v) for v in open("/proc/stat").readline().split()[1:]]
    idle = f[3] + f[4]
    return sum(f) - idle, sum(f)


def wait_quiet(limit_s=60, threshold=0.2):
    """Waits (at most limit_s) until other processes use less than `threshold` cores over a
    second; returns the cores they used in the last second."""
    t_end = time.time() + limit_s
    while True:
        b0, _ = busy_jiffies()
        time.sleep(1.0)
        b1, _ = busy_jiffies()
        used = (b1 - b0) / os.sysconf("SC_CLK_TCK")
        if used < threshold or time.time() > t_end:
            return used


def run(a, out, steps, env_extra, mpirun_args, log):
    env = dict(os.environ)
    env.update({"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"})
    env.pop("GPIPE_MPI_WAIT", None)
    env.update(env_extra)
    cmd = [os.path.join(a.bin, "gpipe-run"), out, "--data", os.path.join(EXAMPLE, "data"),
           "--steps", str(steps), "--threads", "1", "--quiet", "--log-json", log]
    cmd += ["--mpirun-arg=" + x for x in mpirun_args]
    b0, _ = busy_jiffies()
    u0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       env=env, timeout=3600)
    wall = time.perf_counter() - t0
    b1, _ = busy_jiffies()
    u1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    ours = (u1.ru_utime - u0.ru_utime) + (u1.ru_stime - u0.ru_stime)
    if r.returncode != 0:
        raise SystemExit("bench_wait: %s failed (%d):\n%s" % (" ".join(cmd), r.returncode,
                                                              r.stdout[-3000:]))
    rows = [json.loads(l) for l in open(log) if l.strip()]
    hz = os.sysconf("SC_CLK_TCK")
    # Cores used during the run: by our processes, and by everything else.
    return wall, rows, ours / wall, max(0.0, (b1 - b0) / hz - ours) / wall


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--stages", default="4,2")
    ap.add_argument("--microbatches", type=int, default=8)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workdir", default="/tmp/gpipe_bench_wait")
    ap.add_argument("--variant", action="append", default=[],
                    help="NAME:VAR=VALUE,... an extra polling variant")
    ap.add_argument("--no-yield", action="store_true", help="leave out block+yield")
    a = ap.parse_args()
    a.bin = os.path.abspath(a.bin)

    variants = [("block", {"GPIPE_MPI_WAIT": "block"}, [])]
    if not a.no_yield:
        variants.append(("block+yield", {"GPIPE_MPI_WAIT": "block"},
                         ["--mca", "mpi_yield_when_idle", "1"]))
    variants.append(("poll", {}, []))
    for v in a.variant:
        name, _, settings = v.partition(":")
        env = dict(kv.split("=", 1) for kv in settings.split(",") if kv)
        variants.append((name, env, []))

    print("machine: %s, %s CPUs (nproc %s), kernel %s; %s" % (
        sh("lscpu | sed -n 's/^Model name: *//p'"), sh("lscpu | sed -n 's/^CPU(s): *//p'"),
        sh("nproc"), platform.release(), sh("mpirun --version | head -1")))
    print("command: %s" % " ".join(sys.argv), flush=True)
    os.makedirs(a.workdir, exist_ok=True)
    t_start = time.time()
    for k in [int(s) for s in a.stages.split(",")]:
        out = os.path.join(a.workdir, "k%d" % k)
        shutil.rmtree(out, ignore_errors=True)
        subprocess.run([os.path.join(a.bin, "gpipe-compile"), os.path.join(EXAMPLE, "gpt.onnx"),
                        "-o", out, "--stages", str(k), "--microbatches", str(a.microbatches),
                        "--optimizer", "adam", "--lr", "0.003"], check=True,
                       stdout=subprocess.DEVNULL)
        res = {name: [] for name, _, _ in variants}
        losses = {}
        for r in range(a.repeat):
            order = variants[r % len(variants):] + variants[:r % len(variants)]
            for name, env, margs in order:
                log = os.path.join(a.workdir, "k%d_%s.jsonl" % (k, name))
                # A run during which other processes used more than 0.25 cores is
                # repeated (at most twice), after waiting for a quiet machine.
                for attempt in range(3):
                    wait_quiet()
                    w_short, _, _, others_short = run(a, out, a.warmup, env, margs, log)
                    w_long, rows, ours, others = run(a, out, a.warmup + a.steps, env, margs,
                                                     log)
                    if max(others, others_short) <= 0.25:
                        break
                    if attempt < 2:
                        print("K=%d round %d %s: other processes used %.2f cores, repeating"
                              % (k, r + 1, name, max(others, others_short)), flush=True)
                per_step = (w_long - w_short) / a.steps * 1000
                logged = statistics.median(row["ms"] for row in rows[a.warmup:])
                res[name].append((per_step, logged, ours, others))
                curve = [row["loss"] for row in rows]
                losses.setdefault(name, curve)
                if curve != losses[name] or curve != losses[variants[0][0]]:
                    raise SystemExit("bench_wait: %s gives another loss curve" % name)
                print("K=%d round %d %-12s wall %.1f ms/step, logged median %.1f ms; cores "
                      "used by the run %.2f, by other processes %.2f"
                      % (k, r + 1, name, per_step, logged, ours, others), flush=True)
        print("\nK=%d stages x M=%d micro-batches on %s cores (loss curves identical, "
              "loss %.4f -> %.4f):" % (k, a.microbatches, sh("nproc"),
                                       losses["block"][0], losses["block"][-1]))
        print("| variant | wall ms/step (median of rounds) | logged ms/step | cores used "
              "by the run | by others (max) | block / variant, per round | median |")
        print("|---|--:|--:|--:|--:|---|--:|")
        base = res["block"]
        for name, _, _ in variants:
            ratios = [b[0] / v[0] for b, v in zip(base, res[name])]
            print("| %s | %.1f | %.1f | %.2f | %.2f | %s | **%.2f** |" % (
                name, statistics.median(v[0] for v in res[name]),
                statistics.median(v[1] for v in res[name]),
                statistics.median(v[2] for v in res[name]), max(v[3] for v in res[name]),
                ", ".join("%.2f" % x for x in ratios), statistics.median(ratios)))
        print(flush=True)
    print("total %.0f s" % (time.time() - t_start))
    return 0


if __name__ == "__main__":
    sys.exit(main())
