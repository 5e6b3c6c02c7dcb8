#!/usr/bin/python3
"""Pipeline efficiency: the same MLP trained as 1 stage and as K stages with M micro-batches.

Model (--model, bench/bench_models.py): test/e2e/models.py mlp_deep (as bench/bench_step.py):
8 x (Linear 1024 -> 1024 + ReLU) + Linear 1024 -> 10, cross-entropy, batch 256, SGD lr 0.01,
same weights and data; or `--model gpt`, the GPT-style LM of bench_step.py --model gpt (the
single-GEMM sweep is mlp_deep's and is skipped for it).
One export, five compiles of it (gpipe-compile --batch-size 256):

  a   --stages 1 --microbatches 1                   the reference (1 stage, 1 process)
  b   --stages K --microbatches M --remat none      pipelined, activations kept
  c   --stages K --microbatches M --remat stage     pipelined, the default remat for K > 1
  d   --stages 1 --microbatches M --remat none      1 stage, M micro-batches: what the
                                                    smaller forward and dX GEMMs and the
                                                    deferred weight gradients (operand
                                                    copies, one dW GEMM over all B rows
                                                    per step) cost, no pipeline
  e   --stages 1 --microbatches M --remat stage     as d plus the forward recompute

The stages' GEMMs are the runtime's gp_gemm, i.e. oneDNN's dnnl_sgemm (libdnnl.so.2, OpenMP
threading); a forward X*W^T on at most 64 rows runs as the transposed product W*X^T, and with
M > 1 each weight gradient dW = G^T X is one GEMM over all B rows in the update.
Every variant runs with gpipe-run --threads 1 (each stage process: OpenMP, hence oneDNN, pinned
to 1 thread; the environment also says OPENBLAS_NUM_THREADS=OMP_NUM_THREADS=1), so
with K = 2 processes on a 2-core machine the speedup b/a or c/a isolates pipeline
efficiency.  Beside them: a with --threads 2 (what the second core buys without a pipeline).

Timing.  Rounds alternate the variants (order rotated each round) so that load from the
shared host hits all of them; each run does WARMUP + STEPS steps.
  * primary: the median over the measured steps of the "ms" of --log-json (the last stage's
    wall time per step, which covers the whole pipelined step once every stage synchronizes
    through the transfers), then the median over rounds.  Speedups are medians of the
    per-round ratios (each ratio is between runs of the same round).
  * cross-check ("wall"): (wall(gpipe-run --steps WARMUP+STEPS) - wall(gpipe-run --steps
    WARMUP)) / STEPS, i.e. the whole invocation (mpirun start-up, loading, warm-up cancel).
Before each run the script waits (bounded) until the machine is quiet, and it records for
each run how many cores other processes used meanwhile (/proc/stat busy time minus the
CPU time of our own process tree).

Correctness: every variant must give the loss curve of a within 1e-5 relative (float32
sums in another order), and every variant must repeat its own curve exactly across rounds.

Breakdown (unless --no-trace): one more run of each variant with bench/pipeline_trace.c
preloaded (LD_PRELOAD), which times every dnnl_sgemm (and cblas_sgemm, for older builds) and
MPI_Send/Probe/Recv call of every stage process; per stage and step it reports GEMM time by
call shape (and GFLOP/s), time blocked in send and in probe+recv (pipeline bubbles and
transfer), and the rest (generated elementwise loops, the transpose-back of the transposed
forward path, the copies of the deferred dW operands, the update).

GEMM sweep (unless --no-sweep): bench/gemm_sweep.c, linked against the build's
libgpipe_runtime.a, times one-thread gp_gemm (the function the stages call) for one
1024 x 1024 Linear's GEMMs at R rows, plus the plain dnnl_sgemm forward.

Usage:
  /usr/bin/python3 bench/bench_pipeline.py --bin build/bin [--steps 20] [--warmup 3] [--repeat 5]
"""

import argparse
import json
import os
import platform
import resource
import shlex
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "test", "e2e"))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # importing bench_step must not leave bench/__pycache__

import numpy as np  # noqa: E402

import bench_models  # noqa: E402

from bench_step import cpu_model, env_for, sh  # noqa: E402

HZ = os.sysconf("SC_CLK_TCK")
LOSS_TOL = 1e-5


# ---------------------------------------------------------------------------
# machine load
# ---------------------------------------------------------------------------

def cpu_busy_s():
    """Busy CPU seconds of the whole machine so far (all CPUs, /proc/stat)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal guest guest_nice; steal (time the
    # hypervisor gave our vCPUs to others) counts as busy: it is lost to us as well.
    return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / HZ


def own_children_cpu_s():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


class Quiet:
    """Waits (bounded per run, in total, and by the deadline) until other processes
    use < threshold cores."""

    def __init__(self, threshold, per_run_s, budget_s, deadline):
        self.threshold, self.per_run_s, self.budget_s = threshold, per_run_s, budget_s
        self.deadline = deadline
        self.waited = 0.0

    def wait(self):
        t_start = time.time()
        while True:
            b0 = cpu_busy_s()
            time.sleep(0.5)
            load = (cpu_busy_s() - b0) / 0.5
            spent = time.time() - t_start
            if load < self.threshold or spent >= self.per_run_s or \
                    self.waited + spent >= self.budget_s or time.time() >= self.deadline:
                self.waited += spent
                return load


# ---------------------------------------------------------------------------
# running
# ---------------------------------------------------------------------------

def gpipe_run(a, out_dir, steps, threads, log, extra_env=None):
    if os.path.exists(log):
        os.remove(log)
    cmd = [os.path.join(a.bin, "gpipe-run"), out_dir, "--data", os.path.join(a.workdir, "data"),
           "--steps", str(steps), "--threads", str(threads), "--log-json", log, "--quiet"]
    env = env_for(threads)
    if extra_env:
        env.update(extra_env)
    b0, c0, t0 = cpu_busy_s(), own_children_cpu_s(), time.time()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    wall = time.time() - t0
    busy, own = cpu_busy_s() - b0, own_children_cpu_s() - c0
    if p.returncode != 0:
        sys.exit("gpipe-run failed (%d): %s\n%s" % (p.returncode, " ".join(map(shlex.quote, cmd)),
                                                  p.stdout.decode(errors="replace")))
    recs = [json.loads(l) for l in open(log) if l.strip()] if steps > 0 else []
    if len(recs) != steps:
        sys.exit("gpipe-run logged %d steps, expected %d" % (len(recs), steps))
    return {"ms": [float(r["ms"]) for r in recs], "loss": [float(r["loss"]) for r in recs],
            "wall_s": wall, "foreign_cores": max(0.0, (busy - own) / wall), "own_cores": own / wall,
            "cmd": cmd}


def compile_variant(a, model_path, out_dir, stages, micro, remat):
    cmd = [os.path.join(a.bin, "gpipe-compile"), model_path, "-o", out_dir,
           "--batch-size", str(a.batch_size), "--target", "cpu",
           "--stages", str(stages), "--microbatches", str(micro)] + bench_models.optimizer_flags(a)
    if remat:
        cmd += ["--remat", remat]
    print("$ " + " ".join(shlex.quote(c) for c in cmd), flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if p.returncode != 0:
        sys.exit("gpipe-compile failed (%d):\n%s" % (p.returncode, p.stdout.decode(errors="replace")))
    with open(os.path.join(out_dir, "pipeline.json")) as f:
        return json.load(f)


def deferred_dw_flops(out_dir, stage):
    """FLOPs of the weight-gradient GEMMs that stage `stage` runs in its update (the deferred
    dW = G^T X over all micro-batches, gp_gemm(1, 0, m, n, k, ...) in update()); 0 if none."""
    import re
    try:
        src = open(os.path.join(out_dir, "stage%d.cpp" % stage)).read()
    except OSError:
        return 0
    i = src.find("static void update(")
    if i < 0:
        return 0
    body = src[i:src.find("\n}\n", i)]
    return sum(2 * int(m) * int(n) * int(k) for m, n, k in
               re.findall(r"gp_gemm\(1, 0, (\d+), (\d+), (\d+),", body))


def ideal_speedup(pj, ref_flops, out_dir):
    """ref_flops / makespan of the stages' schedules when time = FLOPs (equal GEMM
    efficiency everywhere, free transfers): the best this partition, schedule and remat
    mode can do against the 1-stage program.  The deferred dW GEMMs (counted in
    backward_flops_per_microbatch) run in the update: moved there."""
    stages = pj["stages"]
    K = len(stages)
    M = pj["microbatches"]
    F = [s["forward_flops_per_microbatch"] for s in stages]
    U = [deferred_dw_flops(out_dir, i) for i in range(K)]
    B = [s["backward_flops_per_microbatch"] - U[i] / M for i, s in enumerate(stages)]
    done = {}  # (kind, stage, mb) -> finish time
    clock = [0.0] * K
    pos = [0] * K
    sched = [s["schedule"] for s in stages]
    progress = True
    while progress:
        progress = False
        for s in range(K):
            while pos[s] < len(sched[s]):
                act = sched[s][pos[s]]
                kind, mb = act[0], (int(act[1:]) if len(act) > 1 else -1)
                if kind == "F":
                    dep = done.get(("F", s - 1, mb)) if s > 0 else 0.0
                    dur = F[s]
                elif kind == "B":
                    dep = done.get(("B", s + 1, mb)) if s < K - 1 else 0.0
                    dur = B[s]
                else:
                    dep, dur = 0.0, U[s]
                if dep is None:
                    break
                clock[s] = max(clock[s], dep) + dur
                done[(kind, s, mb)] = clock[s]
                pos[s] += 1
                progress = True
    if any(pos[s] < len(sched[s]) for s in range(K)):
        return float("nan")
    return ref_flops / max(clock)


# ---------------------------------------------------------------------------
# trace analysis (bench/pipeline_trace.c)
# ---------------------------------------------------------------------------

def build_tracer(workdir):
    src = os.path.join(HERE, "pipeline_trace.c")
    lib = os.path.join(workdir, "libpipeline_trace.so")
    inc = sh("mpicc --showme:compile").split()
    cmd = ["cc", "-O2", "-shared", "-fPIC", "-o", lib, src] + inc + ["-ldl"]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if p.returncode != 0:
        print("(no breakdown: building the tracer failed: %s)" % p.stdout.decode(errors="replace"))
        return None
    return lib


def gemm_class(ev):
    """A GEMM call as recorded (M, N, K of the call; 'T' flags).  gp_gemm makes a Linear
    forward X[m, k] * W[n, k]^T either directly ('N','T', M=m rows, N=n) or, for m <= 64 rows
    against a wide weight (n, k >= 4m), as the transposed product W * X^T ('N','T', M=n,
    N=m, beta 0), recognized here by that shape; dX = G * W is 'N','N' (M = rows); dW = G^T X
    is 'T','N' with K = the rows (all B rows once per step when the dW is deferred)."""
    M, N, K, ta, tb, acc = ev[3:9]
    lib = "" if len(ev) > 9 and ev[9] else " (cblas)"
    if not ta and tb:
        if N <= 64 and M >= 4 * N and K >= 4 * N and not acc:
            name = "fwd W*x^T (transposed path, %d rows)" % N
        else:
            name = "fwd x*W^T"
    elif not ta and not tb:
        name = "dX g*W"
    elif ta and not tb:
        name = "dW g^T*x"
    else:
        name = "other"
    return "%s %dx%dx%d%s" % (name, M, N, K, lib)


OTHER = "other (elementwise, transpose-back, dW operand copies, update)"


def analyse_traces(trace_dir, steps, warmup):
    """Per stage: mean per measured step of each category (ms).  A step is a fixed
    number of recorded calls (the program is the same every step)."""
    per_stage = {}
    for fn in sorted(os.listdir(trace_dir)):
        with open(os.path.join(trace_dir, fn)) as f:
            head = f.readline().split()
            rank = int(head[2])
            evs = []
            for line in f:
                p = line.split("\t")
                evs.append((p[0], int(p[1]), int(p[2])) + tuple(int(x) for x in p[3:]))
        if rank < 0:
            rank = 0
        n = len(evs)
        if n % steps:
            return None, "stage %d: %d calls not divisible by %d steps" % (rank, n, steps)
        e = n // steps
        cats, flops, counts, spans = {}, {}, {}, []
        # step s = calls [s*e, (s+1)*e); its span runs to the first call of step s+1, so
        # the last step (no successor) is not used.
        used = list(range(warmup, steps - 1))
        for s in used:
            chunk = evs[s * e:(s + 1) * e]
            span = (evs[(s + 1) * e][1] - chunk[0][1]) / 1e6
            spans.append(span)
            accounted = 0.0
            for ev in chunk:
                d = (ev[2] - ev[1]) / 1e6
                if ev[0] == "gemm":
                    k = "gemm " + gemm_class(ev)
                    flops[k] = flops.get(k, 0) + 2.0 * ev[3] * ev[4] * ev[5]
                elif ev[0] == "send":
                    k = "MPI_Send (blocked)"
                else:
                    k = "MPI_Probe+Recv (waiting)"
                cats[k] = cats.get(k, 0.0) + d
                counts[k] = counts.get(k, 0) + 1
                accounted += d
            cats[OTHER] = cats.get(OTHER, 0.0) + span - accounted
        ns = len(used)
        per_stage[rank] = {
            "span_ms": float(np.mean(spans)) if spans else float("nan"),
            "cats": {k: v / ns for k, v in cats.items()},
            "counts": {k: v // ns for k, v in counts.items()},
            "gflops": {k: flops[k] / (cats[k] / 1e3) / 1e9 for k in flops if cats[k] > 0},
        }
    return per_stage, None


# ---------------------------------------------------------------------------
# single-GEMM sweep: the stage programs' GEMM shapes at several micro-batch sizes
# ---------------------------------------------------------------------------

def onednn_version():
    import ctypes

    class V(ctypes.Structure):
        _fields_ = [("major", ctypes.c_int), ("minor", ctypes.c_int), ("patch", ctypes.c_int),
                    ("hash", ctypes.c_char_p), ("cpu_runtime", ctypes.c_uint),
                    ("gpu_runtime", ctypes.c_uint)]
    try:
        lib = ctypes.CDLL("libdnnl.so.2")
    except OSError as e:
        return "oneDNN: (%s)" % e
    lib.dnnl_version.restype = ctypes.POINTER(V)
    v = lib.dnnl_version().contents
    return ("oneDNN %d.%d.%d (libdnnl.so.2, dnnl_sgemm), OpenBLAS for large products on CPUs "
            "without AVX-512 (GPIPE_CPU_GEMM=%s)" % (v.major, v.minor, v.patch,
                                             os.environ.get("GPIPE_CPU_GEMM", "auto")))


def build_sweep(a):
    """bench/gemm_sweep.c linked against the build's libgpipe_runtime.a (gp_gemm)."""
    cands = [os.path.join(a.bin, "..", "runtime", "libgpipe_runtime.a"),
             os.path.join(a.bin, "..", "lib", "gpipe", "libgpipe_runtime.a"),
             os.path.join(a.bin, "runtime", "libgpipe_runtime.a")]
    rt = next((os.path.normpath(c) for c in cands if os.path.exists(c)), None)
    if not rt:
        print("(no GEMM sweep: libgpipe_runtime.a not found next to %s)" % a.bin)
        return None, None
    exe = os.path.join(a.workdir, "gemm_sweep")
    cmd = (["cc", "-O2", "-o", exe, os.path.join(HERE, "gemm_sweep.c"), rt, "-ldnnl", "-fopenmp",
            "-lstdc++", "-lm"] + sh("mpicc --showme:link").split())
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if p.returncode != 0:
        print("(no GEMM sweep: building it failed: %s)" % p.stdout.decode(errors="replace"))
        return None, None
    return exe, rt


def gemm_sweep(a, quiet, width=1024, layers=8, reps=3):
    """ms per call of one-thread gp_gemm (the runtime function the stages call: oneDNN
    dnnl_sgemm, with the transposed-product forward for <= 64 rows) for the three GEMMs of a
    Linear layer at R rows, cycling over `layers` distinct weight and gradient matrices as a
    stage does (8 x 4 MiB: not cache-resident); then what one layer costs per step when the
    batch is cut into B/R micro-batches."""
    exe, rt = build_sweep(a)
    if not exe:
        return
    B = a.batch_size
    rows_list = sorted({32, 64, 128, 256, B // a.microbatches, B})
    quiet.wait()
    p = subprocess.run([exe, str(width), str(layers), str(reps)] + [str(r) for r in rows_list],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env_for(1))
    if p.returncode != 0:
        print("(no GEMM sweep: gemm_sweep failed: %s)" % p.stdout.decode(errors="replace"))
        return
    t = {}
    for line in p.stdout.decode().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        v = line.split()
        t[int(v[0])] = dict(zip(("fwd", "fwd_plain", "dX", "dW"), (float(x) for x in v[1:])))
    gf = lambda R, ms: 2.0 * R * width * width / (ms * 1e-3) / 1e9
    print()
    print("### Single GEMM speed by rows R (1 thread; bench/gemm_sweep.c calling gp_gemm from %s, "
          "i.e. oneDNN dnnl_sgemm; %d distinct %dx%d weights cycled; GFLOP/s, best of %d passes)"
          % (os.path.relpath(rt, REPO) if rt.startswith(REPO) else rt, layers, width, width, reps))
    print()
    print("| R | fwd X*W^T via gp_gemm [R x %d] (beta 1; transposed product W*X^T for R <= 64) | "
          "fwd, plain dnnl_sgemm('N','T') | dX G*W (beta 0) | dW G^T*X, K=R (beta 1) | "
          "one layer per step, B=%d as B/R micro-batches, dW deferred: ms (rate vs R=B) | "
          "same, dW per micro-batch |" % (width, B))
    print("|--:|--:|--:|--:|--:|--:|--:|")
    ref = t[B]["fwd"] + t[B]["dX"] + t[B]["dW"] if B in t else None
    for R in rows_list:
        x = t[R]
        n = B // R
        step = n * (x["fwd"] + x["dX"]) + (t[B]["dW"] if B in t else float("nan"))
        step_nd = n * (x["fwd"] + x["dX"] + x["dW"])
        print("| %d | %.0f | %.0f | %.0f | %.0f | %.2f (%.2f) | %.2f (%.2f) |"
              % (R, gf(R, x["fwd"]), gf(R, x["fwd_plain"]), gf(R, x["dX"]), gf(R, x["dW"]),
                 step, ref / step if ref else float("nan"), step_nd,
                 ref / step_nd if ref else float("nan")))
    # time per call = fixed + R * per_row (least squares): the fixed part is what every call
    # pays whatever its rows (packing / streaming the 1024 x 1024 operand, reading and
    # writing the 1024 x 1024 accumulator), the per-row part is the arithmetic.
    print()
    fits = []
    for k in ("fwd_plain", "dX", "dW"):  # not fwd: two code paths (R <= 64 or not)
        slope, icpt = np.polyfit(rows_list, [t[R][k] for R in rows_list], 1)
        fits.append("%s %.3f ms + R x %.5f ms (= %.0f GFLOP/s marginal)"
                    % (k, icpt, slope, 2.0 * width * width / (slope * 1e-3) / 1e9))
    print("Least-squares fit of ms per call = fixed + R x per-row over R = %s: %s"
          % (", ".join(map(str, rows_list)), "; ".join(fits)))


# ---------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__)
    ap.add_argument("--bin", default=os.environ.get("GPIPE_BIN"),
                    help="directory with gpipe-compile and gpipe-run (default $GPIPE_BIN)")
    ap.add_argument("--workdir", default="/tmp/gpipe_bench_pipeline")
    ap.add_argument("--stages", type=int, default=2)
    ap.add_argument("--microbatches", type=int, default=8)
    bench_models.add_args(ap)
    ap.add_argument("--samples", type=int, default=None, help="default 4 * batch size")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20, help="measured steps (after warmup)")
    ap.add_argument("--repeat", type=int, default=5, help="rounds")
    ap.add_argument("--opset", type=int, default=17)
    ap.add_argument("--no-t2", action="store_true", help="skip the 1-stage 2-thread run")
    ap.add_argument("--no-wall", action="store_true",
                    help="skip the WARMUP-step runs of the wall-clock cross-check")
    ap.add_argument("--no-trace", action="store_true", help="skip the traced breakdown runs")
    ap.add_argument("--quiet-threshold", type=float, default=0.15,
                    help="cores other processes may use before a run starts (default 0.15)")
    ap.add_argument("--quiet-wait", type=float, default=15.0,
                    help="longest wait for a quiet machine before one run (s)")
    ap.add_argument("--quiet-budget", type=float, default=120.0,
                    help="longest total wait for a quiet machine (s)")
    ap.add_argument("--max-foreign", type=float, default=0.25,
                    help="a run during which other processes used more cores than this is "
                         "repeated (at most --retries times per run; default 0.25)")
    ap.add_argument("--retries", type=int, default=2)
    ap.add_argument("--time-budget", type=float, default=540.0,
                    help="after this many seconds no more waiting or repeating (s)")
    ap.add_argument("--no-sweep", action="store_true",
                    help="skip the single-GEMM sweep over micro-batch rows")
    a = ap.parse_args()
    bench_models.finish_args(a)

    if not a.bin:
        sys.exit("pass --bin DIR (directory with gpipe-compile and gpipe-run)")
    for t in ("gpipe-compile", "gpipe-run"):
        if not os.access(os.path.join(a.bin, t), os.X_OK):
            sys.exit("%s not found in %s" % (t, a.bin))
    if a.batch_size % a.microbatches:
        sys.exit("--batch-size must be divisible by --microbatches")

    import torch
    import models

    K, M = a.stages, a.microbatches
    S = a.samples or 4 * a.batch_size
    os.makedirs(os.path.join(a.workdir, "data"), exist_ok=True)
    t_begin = time.time()

    print("## gpipe-compile pipeline-efficiency benchmark")
    print()
    print("- model: %s" % bench_models.describe(a, S))
    print("- pipeline: K=%d stages, M=%d micro-batches (micro-batch %d rows); ideal "
          "2M/(M+K-1) = %.3f" % (K, M, a.batch_size // M, K * M / (M + K - 1)))
    print("- steps: %d warmup (excluded) + %d measured; %d rounds" % (a.warmup, a.steps, a.repeat))
    print("- CPU: %s, nproc %s (sched_getaffinity %d); %s"
          % (cpu_model(), os.cpu_count(), len(os.sched_getaffinity(0)),
             "; ".join(" ".join(l.split()) for l in sh("lscpu").splitlines()
                       if l.startswith(("L2 cache", "L3 cache", "Hypervisor vendor")))))
    print("- GEMM: %s; %s; %s" % (onednn_version(), sh("mpirun --version | head -1"),
                                   sh("c++ --version | head -1")))
    print("- date: %s, kernel %s" % (time.strftime("%Y-%m-%d %H:%M:%S"), platform.release()))
    print("- source: %s (git describe --always --dirty); %s built %s"
          % (sh("git -C %s describe --always --dirty" % shlex.quote(REPO)), a.bin,
             time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(
                 os.path.getmtime(os.path.join(a.bin, "gpipe-compile"))))))
    print(flush=True)

    # export + data (as bench_step.py)
    x, y = bench_models.make_data(a, S)
    np.save(os.path.join(a.workdir, "data", "x.npy"), x)
    np.save(os.path.join(a.workdir, "data", "y.npy"), y)
    model_path = os.path.join(a.workdir, "model.onnx")
    torch.manual_seed(models.DEFAULT_SEED)
    m = bench_models.make_module(a)
    models.export(m, x[:a.batch_size], y[:a.batch_size], model_path, opset=a.opset)

    # name -> (description, stages, microbatches, remat, threads, out dir key)
    variants = [
        ("a", "1 stage, M=1", 1, 1, None, 1, "a"),
        ("b", "%d stages, M=%d, remat none" % (K, M), K, M, "none", 1, "b"),
        ("c", "%d stages, M=%d, remat stage" % (K, M), K, M, "stage", 1, "c"),
        ("d", "1 stage, M=%d, remat none" % M, 1, M, "none", 1, "d"),
        ("e", "1 stage, M=%d, remat stage" % M, 1, M, "stage", 1, "e"),
    ]
    if not a.no_t2:
        variants.append(("a2", "1 stage, M=1, 2 threads", 1, 1, None, 2, "a"))
    pj, compiled = {}, {}
    for name, _, st, mb, remat, _, key in variants:
        if key in compiled:
            continue
        compiled[key] = compile_variant(a, model_path, os.path.join(a.workdir, "out_" + key),
                                        st, mb, remat)
    ref_flops = compiled["a"]["stages"][0]["flops_per_step"]
    for name, _, st, mb, remat, _, key in variants:
        pj[name] = compiled[key]
    print()

    deadline = t_begin + a.time_budget
    quiet = Quiet(a.quiet_threshold, a.quiet_wait, a.quiet_budget, deadline)
    results = {v[0]: [] for v in variants}
    order = [v for v in variants]
    repeated = 0
    for r in range(a.repeat):
        rot = order[r % len(order):] + order[:r % len(order)]
        for name, desc, st, mb, remat, thr, key in rot:
            out_dir = os.path.join(a.workdir, "out_" + key)
            log = os.path.join(a.workdir, "log_%s.jsonl" % name)
            for attempt in range(a.retries + 1):
                pre = quiet.wait()
                res = gpipe_run(a, out_dir, a.warmup + a.steps, thr, log)
                res["pre_load"] = pre
                res["med"] = float(np.median(res["ms"][a.warmup:]))
                if not a.no_wall:
                    quiet.wait()
                    short = gpipe_run(a, out_dir, a.warmup, thr, log + ".short")
                    res["wall_ms"] = (res["wall_s"] - short["wall_s"]) * 1e3 / a.steps
                    res["foreign_cores"] = max(res["foreign_cores"], short["foreign_cores"])
                line = ("round %d %-3s %-28s T=%d: median %7.2f ms/step (min %7.2f)%s; wall %.1fs; "
                        "other processes %.2f cores (before: %.2f)"
                        % (r + 1, name, desc, thr, res["med"], min(res["ms"][a.warmup:]),
                           "" if a.no_wall else ", wall-clock %7.2f ms/step" % res["wall_ms"],
                           res["wall_s"], res["foreign_cores"], pre))
                if res["foreign_cores"] > a.max_foreign and attempt < a.retries and \
                        time.time() < deadline:
                    repeated += 1
                    print(line + "  -> discarded (machine busy), repeating", flush=True)
                    continue
                break
            results[name].append(res)
            print(line, flush=True)

    # ---- correctness: the loss curves
    print()
    print("### Loss curves (%d steps): max |loss - loss_a| / |loss_a| over all steps and rounds"
          % (a.warmup + a.steps))
    ref = results["a"][0]["loss"]
    ok = True
    for name, desc, *_ in variants:
        dev = max(abs(l - q) / abs(q) for res in results[name] for l, q in zip(res["loss"], ref))
        same = all(res["loss"] == results[name][0]["loss"] for res in results[name])
        good = dev <= LOSS_TOL and same
        ok &= good
        print("- %-3s %-30s max rel. diff %.2e; identical across rounds: %s  %s"
              % (name, desc, dev, "yes" if same else "NO", "ok" if good else "FAIL"))
    print("- first/last loss (a): %.7f / %.7f" % (ref[0], ref[-1]))
    print("- loss check: %s (tolerance %.0e)" % ("PASS" if ok else "FAIL", LOSS_TOL))

    # ---- table
    med = lambda v: float(np.median(v))
    rows = {}
    for name, desc, st, mb, remat, thr, key in variants:
        rs = results[name]
        rows[name] = {
            "ms": med([x["med"] for x in rs]),
            "per_round": [x["med"] for x in rs],
            "wall": None if a.no_wall else med([x["wall_ms"] for x in rs]),
            "best": min(min(x["ms"][a.warmup:]) for x in rs),
            "foreign": [x["foreign_cores"] for x in rs],
            "ratio": [ra["med"] / x["med"] for ra, x in zip(results["a"], rs)],
            "wall_ratio": None if a.no_wall else
            [ra["wall_ms"] / x["wall_ms"] for ra, x in zip(results["a"], rs)],
        }
    print()
    print("### Step time, %d rounds x (%d warmup + %d measured steps), --threads per stage as "
          "listed; ideal 2M/(M+K-1) = **%.2f**; target >= 1.6" % (a.repeat, a.warmup, a.steps,
                                                                  K * M / (M + K - 1)))
    print()
    print("| variant | threads/stage | ms/step (median of rounds) | per-round medians | "
          "wall-clock ms/step | fastest step | speedup vs a (median of per-round ratios) | "
          "per-round ratios | wall-clock speedup | FLOP-model bound | other processes (cores, per round) |")
    print("|---|--:|--:|---|--:|--:|--:|---|--:|--:|---|")
    for name, desc, st, mb, remat, thr, key in variants:
        rw = rows[name]
        bound = ideal_speedup(pj[name], ref_flops, os.path.join(a.workdir, "out_" + key)) * \
            (thr if name == "a2" else 1)
        print("| %s: %s | %d | %.1f | %s | %s | %.1f | **%.2f** | %s | %s | %.2f | %s |"
              % (name, desc, thr, rw["ms"], ", ".join("%.0f" % v for v in rw["per_round"]),
                 "-" if rw["wall"] is None else "%.1f" % rw["wall"], rw["best"],
                 med(rw["ratio"]), ", ".join("%.2f" % v for v in rw["ratio"]),
                 "-" if rw["wall_ratio"] is None else "%.2f" % med(rw["wall_ratio"]),
                 bound, ", ".join("%.2f" % v for v in rw["foreign"])))
    print()
    print("FLOP-model bound: 1-stage FLOPs / makespan of the stages' schedules with time = FLOPs "
          "(partition balance, schedule, remat recompute; equal GEMM speed at every size, free "
          "transfers); a2: 2 x.")
    print("Fastest-step speedups: b %.2f, c %.2f (fastest step of a / fastest step of b, c)."
          % (rows["a"]["best"] / rows["b"]["best"], rows["a"]["best"] / rows["c"]["best"]))
    bd = [x["med"] / y["med"] for x, y in zip(results["d"], results["b"])]
    ce = [x["med"] / y["med"] for x, y in zip(results["e"], results["c"])]
    print("Pipeline efficiency against the 1-stage micro-batched program (same micro-batches, same "
          "GEMM sizes): b vs d **%.2f** (per round %s), c vs e **%.2f** (per round %s); median of "
          "per-round ratios; the ideal of both is %.2f"
          % (med(bd), ", ".join("%.2f" % v for v in bd), med(ce),
             ", ".join("%.2f" % v for v in ce), K * M / (M + K - 1)))
    print("Quiet-machine waits: %.0f s in all; %d run(s) repeated because other processes used "
          "more than %.2f cores during them; runs kept with more than that: %d."
          % (quiet.waited, repeated, a.max_foreign,
             sum(x["foreign_cores"] > a.max_foreign for v in results.values() for x in v)))

    if not a.no_sweep and a.model == "mlp_deep":
        gemm_sweep(a, quiet)

    # ---- breakdown
    if not a.no_trace:
        lib = build_tracer(a.workdir)
        if lib:
            print()
            print("### Breakdown (one traced run per variant; ms per measured step, mean; "
                  "GFLOP/s per GEMM shape)")
            for name, desc, st, mb, remat, thr, key in variants:
                if name == "a2":
                    continue  # GEMM calls on 2 threads: same calls, nothing new
                tdir = os.path.join(a.workdir, "trace_" + name)
                if os.path.isdir(tdir):
                    for f in os.listdir(tdir):
                        os.remove(os.path.join(tdir, f))
                os.makedirs(tdir, exist_ok=True)
                quiet.wait()
                steps = a.warmup + a.steps
                res = gpipe_run(a, os.path.join(a.workdir, "out_" + key), steps, thr,
                                os.path.join(a.workdir, "log_trace_%s.jsonl" % name),
                                {"LD_PRELOAD": lib, "GPIPE_TRACE_DIR": tdir})
                per, err = analyse_traces(tdir, steps, a.warmup)
                print()
                print("%s (%s): traced run %.1f ms/step (median), other processes %.2f cores"
                      % (name, desc, float(np.median(res["ms"][a.warmup:])), res["foreign_cores"]))
                if err:
                    print("  (no breakdown: %s)" % err)
                    continue
                cats = sorted({k for s in per.values() for k in s["cats"]})
                print()
                print("| | " + " | ".join("stage %d" % s for s in sorted(per)) + " |")
                print("|---|" + "--:|" * len(per))
                print("| step span | " + " | ".join("%.1f" % per[s]["span_ms"] for s in sorted(per))
                      + " |")
                for k in cats:
                    cells = []
                    for s in sorted(per):
                        v = per[s]["cats"].get(k)
                        if v is None:
                            cells.append("-")
                            continue
                        c = "%.1f" % v
                        if k in per[s]["gflops"]:
                            c += " (%dx, %.0f GF/s)" % (per[s]["counts"][k], per[s]["gflops"][k])
                        elif k in per[s]["counts"]:
                            c += " (%dx)" % per[s]["counts"][k]
                        cells.append(c)
                    print("| %s | %s |" % (k, " | ".join(cells)))
    print()
    print("total benchmark time %.0f s" % (time.time() - t_begin))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
