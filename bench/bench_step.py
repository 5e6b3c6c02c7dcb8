#!/usr/bin/python3
"""Per-training-step time: gpipe-compile'd executable vs PyTorch (eager, CPU).

Models (--model):
  mlp_deep (default): test/e2e/models.py MlpDeep -- DEPTH x (Linear(WIDTH, WIDTH) + ReLU)
    then Linear(WIDTH, CLASSES), cross-entropy loss; default 8 x 1024, 10 classes, batch
    256, SGD (lr 0.01, no momentum).
  gpt: test/e2e/models.py GptTiny -- a GPT-style causal LM (token + position embeddings,
    pre-LayerNorm blocks with hand-written causal multi-head attention and a GELU MLP, an
    LM head, cross-entropy over every position); --vocab 2048, --seq 64, --width 256,
    --depth 4 (blocks), --heads 8, batch 16, Adam (--optimizer adam --lr 0.001).
  resnet18: torchvision.models.resnet18(num_classes=10) (test/e2e/models.py ResNet18) on
    3 x 32 x 32 inputs, BatchNorm in training mode (statistics of the whole batch: one
    stage, one micro-batch), cross-entropy; batch 32, SGD (lr 0.01, momentum 0.9). Needs
    python3-torchvision.
Both sides start from the same weights (the torch side loads the exported initializers)
and train on the same data (WORKDIR/data/*.npy) in the same order.

For each thread count T (default 1 and 2) both run with OPENBLAS_NUM_THREADS=T and
OMP_NUM_THREADS=T; torch additionally uses torch.set_num_threads(T) (in a fresh
subprocess, so the BLAS picks the env up), gpipe-run gets --threads T.  Each runs
WARMUP + STEPS steps; the first WARMUP steps are excluded and the median ms/step of the
rest is reported (gpipe: the "ms" field of gpipe-run --log-json; torch: perf_counter
around zero_grad + forward + backward + optimizer.step).

torch is timed twice per T: with the inherited environment, and with
OMP_WAIT_POLICY=PASSIVE.  Debian's torch runs its own elementwise kernels on libgomp
threads, which by default spin after each parallel region and then compete with
OpenBLAS's (pthread) worker threads for the same cores; on a 2-core machine that made
torch at T=2 up to ~2x slower than at T=1.  The ratio column uses the faster of the two
torch timings, so gpipe is compared against torch at its best.

Usage:
  /usr/bin/python3 bench/bench_step.py --bin BUILD/bin [--threads 1,2] [--steps 30]
  /usr/bin/python3 bench/bench_step.py --skip-gpipe       # torch column only
  /usr/bin/python3 bench/bench_step.py --model resnet18 --bin BUILD/bin
"""

import argparse
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "test", "e2e"))

import numpy as np  # noqa: E402

import bench_models  # noqa: E402


def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              timeout=30).stdout.decode(errors="replace").strip()
    except Exception as e:  # noqa: BLE001
        return "(%s: %s)" % (cmd, e)


def blas_choice():
    q = sh("update-alternatives --query libblas.so.3-x86_64-linux-gnu")
    val = [l.split(":", 1)[1].strip() for l in q.splitlines() if l.startswith("Value:")]
    return (val[0] if val else "(unknown)"), q


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "(unknown)"


def env_for(threads, omp_wait_policy=None):
    env = dict(os.environ)
    if omp_wait_policy:
        env["OMP_WAIT_POLICY"] = omp_wait_policy
    env["OPENBLAS_NUM_THREADS"] = str(threads)
    env["OMP_NUM_THREADS"] = str(threads)
    env["MKL_NUM_THREADS"] = str(threads)
    return env


# ---------------------------------------------------------------------------
# torch worker (runs in a subprocess so OPENBLAS_NUM_THREADS takes effect)
# ---------------------------------------------------------------------------

def torch_worker(a):
    import torch
    import models
    torch.set_num_threads(a.threads)
    x = np.load(os.path.join(a.workdir, "data", "x.npy"))
    y = np.load(os.path.join(a.workdir, "data", "y.npy"))
    m = bench_models.make_module(a)
    models.load_into_module(m, models.load_initializers(os.path.join(a.workdir, "model.onnx")))
    m.train()
    opt = bench_models.make_optimizer(a, m.parameters())
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    S, B = len(x), a.batch_size
    ms, losses = [], []
    for s in range(1, a.warmup + a.steps + 1):
        lo = ((s - 1) % (S // B)) * B
        xb, yb = xt[lo:lo + B], yt[lo:lo + B]
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = m(xb, yb)
        loss.backward()
        opt.step()
        lv = loss.item()  # forces completion (CPU is synchronous anyway)
        ms.append((time.perf_counter() - t0) * 1e3)
        losses.append(lv)
    print(json.dumps({"ms": ms, "loss": losses, "torch_threads": torch.get_num_threads()}))
    return 0


def run_torch(a, threads, omp_wait_policy=None):
    cmd = [a.torch_python or sys.executable, os.path.abspath(__file__), "--torch-worker",
           "--threads", str(threads), "--workdir", a.workdir,
           *bench_models.model_argv(a),
           "--warmup", str(a.warmup), "--steps", str(a.steps)]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       env=env_for(threads, omp_wait_policy))
    if p.returncode != 0:
        sys.exit("torch worker failed:\n" + p.stderr.decode(errors="replace"))
    return json.loads(p.stdout.decode().strip().splitlines()[-1])


def run_gpipe(a, threads, out_dir, gemm=None):
    log = os.path.join(a.workdir, "gpipe_t%d%s.jsonl" % (threads, "_" + gemm if gemm else ""))
    if os.path.exists(log):
        os.remove(log)
    cmd = [os.path.join(a.bin, "gpipe-run"), out_dir, "--data", os.path.join(a.workdir, "data"),
           "--steps", str(a.warmup + a.steps), "--threads", str(threads), "--log-json", log]
    env = env_for(threads)
    if gemm:
        env["GPIPE_CPU_GEMM"] = gemm
    print("$ %sOPENBLAS_NUM_THREADS=%d OMP_NUM_THREADS=%d %s"
          % ("GPIPE_CPU_GEMM=%s " % gemm if gemm else "", threads, threads,
             " ".join(shlex.quote(c) for c in cmd)), flush=True)
    t0 = time.time()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    wall = time.time() - t0
    if p.returncode != 0:
        sys.exit("gpipe-run failed (%d):\n%s" % (p.returncode, p.stdout.decode(errors="replace")))
    recs = [json.loads(l) for l in open(log) if l.strip()]
    return {"ms": [float(r["ms"]) for r in recs], "loss": [float(r["loss"]) for r in recs],
            "wall_s": wall}


def median_after_warmup(ms, warmup):
    xs = ms[warmup:]
    if not xs:
        raise SystemExit("no measured steps (steps <= warmup?)")
    return float(np.median(xs))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__)
    ap.add_argument("--bin", default=os.environ.get("GPIPE_BIN"),
                    help="directory with gpipe-compile and gpipe-run (default $GPIPE_BIN)")
    ap.add_argument("--workdir", default="/tmp/gpipe_bench")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    bench_models.add_args(ap)
    ap.add_argument("--samples", type=int, default=None, help="default 4 * batch size")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=30, help="measured steps (after warmup)")
    ap.add_argument("--opset", type=int, default=17)
    ap.add_argument("--compile-flags", default="", metavar="FLAGS",
                    help="more gpipe-compile flags (e.g. '--march x86-64-v3' with "
                         "ONEDNN_MAX_CPU_ISA=AVX2 OPENBLAS_CORETYPE=Haswell "
                         "ATEN_CPU_CAPABILITY=avx2 in the environment: an AVX2-only CPU)")
    ap.add_argument("--torch-python", default=None, metavar="PYTHON",
                    help="run the torch side under this interpreter (another torch, e.g. a "
                         "venv with torch >= 2.9) instead of this one")
    ap.add_argument("--onnx", default=None, metavar="FILE",
                    help="time this export of the model instead of exporting it with this "
                         "torch (e.g. one written by torch >= 2.9: bench/export_torch2.py); it "
                         "must hold the weights make_module builds (same seed)")
    ap.add_argument("--repeat", type=int, default=3,
                    help="rounds of (torch, torch passive, gpipe) per thread count")
    ap.add_argument("--skip-gpipe", action="store_true", help="only time torch")
    ap.add_argument("--gemm-compare", default=None, metavar="LIB",
                    help="also run gpipe with GPIPE_CPU_GEMM=LIB (e.g. onednn) in every round "
                         "and report the default's speed relative to it")
    ap.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    bench_models.finish_args(a)

    if a.torch_worker:
        a.threads = int(a.threads)
        return torch_worker(a)

    import torch
    import models

    threads = [int(t) for t in a.threads.split(",") if t]
    S = a.samples or 4 * a.batch_size
    os.makedirs(os.path.join(a.workdir, "data"), exist_ok=True)
    if not a.skip_gpipe:
        if not a.bin:
            sys.exit("pass --bin DIR (directory with gpipe-compile and gpipe-run) or --skip-gpipe")
        for t in ("gpipe-compile", "gpipe-run"):
            if not os.access(os.path.join(a.bin, t), os.X_OK):
                sys.exit("%s not found in %s" % (t, a.bin))

    blas, blas_query = blas_choice()
    print("## gpipe-compile step-time benchmark")
    print()
    print("- model: %s" % bench_models.describe(a, S))
    print("- steps: %d warmup (excluded) + %d measured; median ms/step" % (a.warmup, a.steps))
    print("- CPU: %s, %s logical CPUs (os.sched_getaffinity: %d)"
          % (cpu_model(), os.cpu_count(), len(os.sched_getaffinity(0))))
    print("- torch %s (%s), numpy %s, python %s"
          % (torch.__version__, torch.__file__, np.__version__, platform.python_version()))
    if a.torch_python:
        v = subprocess.run([a.torch_python, "-c", "import torch; print(torch.__version__, "
                            "torch.__file__, torch.backends.cpu.get_cpu_capability())"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL).stdout.decode()
        print("- torch side: %s: torch %s" % (a.torch_python, v.strip()))
    print("- libblas.so.3 alternative (update-alternatives --query "
          "libblas.so.3-x86_64-linux-gnu): Value: %s" % blas)
    keys = ("OMP_WAIT_POLICY", "OMP_PROC_BIND", "GOMP_SPINCOUNT", "OPENBLAS_CORETYPE",
            "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY")
    inherited = ["%s=%s" % (k, os.environ[k]) for k in keys if k in os.environ]
    print("- inherited env: %s" % (", ".join(inherited) or "none of " + "/".join(keys) + " set"))
    print("- date: %s, host kernel %s" % (time.strftime("%Y-%m-%d %H:%M:%S"), platform.release()))
    print(flush=True)

    # export + data (same as the e2e tests)
    x, y = bench_models.make_data(a, S)
    np.save(os.path.join(a.workdir, "data", "x.npy"), x)
    np.save(os.path.join(a.workdir, "data", "y.npy"), y)
    model_path = os.path.join(a.workdir, "model.onnx")
    torch.manual_seed(models.DEFAULT_SEED)
    m = bench_models.make_module(a)
    if a.onnx:
        shutil.copyfile(a.onnx, model_path)  # the torch worker loads its weights by name
        print("using %s (%s)" % (a.onnx, " ".join(sorted(set(models.op_types(model_path))))))
    else:
        models.export(m, x[:a.batch_size], y[:a.batch_size], model_path, opset=a.opset)
        print("exported %s (%s)" % (model_path, " ".join(sorted(set(models.op_types(model_path))))))

    out_dir = os.path.join(a.workdir, "out")
    if not a.skip_gpipe:
        cmd = [os.path.join(a.bin, "gpipe-compile"), model_path, "-o", out_dir,
               "--batch-size", str(a.batch_size), "--target", "cpu"] + bench_models.optimizer_flags(a) \
            + shlex.split(a.compile_flags)
        print("$ " + " ".join(shlex.quote(c) for c in cmd), flush=True)
        t0 = time.time()
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if p.returncode != 0:
            sys.exit("gpipe-compile failed (%d):\n%s"
                     % (p.returncode, p.stdout.decode(errors="replace")))
        print("  compiled in %.1fs" % (time.time() - t0))

    rows = []
    for t in threads:
        # Alternate torch and gpipe over several rounds, so a burst of load from
        # a neighbour on the shared host hits both; report per-round medians
        # and the median over rounds of each round's ratio.
        rounds = []
        for r in range(a.repeat):
            tr = run_torch(a, t)
            tp = run_torch(a, t, "PASSIVE")
            t_ms = median_after_warmup(tr["ms"], a.warmup)
            tp_ms = median_after_warmup(tp["ms"], a.warmup)
            print("round %d torch T=%d: median %.2f ms/step (min %.2f, max %.2f; torch threads %d)"
                  % (r + 1, t, t_ms, min(tr["ms"][a.warmup:]), max(tr["ms"][a.warmup:]),
                     tr["torch_threads"]), flush=True)
            print("round %d torch T=%d OMP_WAIT_POLICY=PASSIVE: median %.2f ms/step (min %.2f, max %.2f)"
                  % (r + 1, t, tp_ms, min(tp["ms"][a.warmup:]), max(tp["ms"][a.warmup:])), flush=True)
            g_ms, d = None, 0.0
            if not a.skip_gpipe:
                gr = run_gpipe(a, t, out_dir)
                if len(gr["ms"]) != a.warmup + a.steps:
                    sys.exit("gpipe-run logged %d steps, expected %d"
                             % (len(gr["ms"]), a.warmup + a.steps))
                g_ms = median_after_warmup(gr["ms"], a.warmup)
                print("round %d gpipe T=%d: median %.2f ms/step (min %.2f, max %.2f; wall %.1fs)"
                      % (r + 1, t, g_ms, min(gr["ms"][a.warmup:]), max(gr["ms"][a.warmup:]),
                         gr["wall_s"]), flush=True)
                # sanity: same training trajectory (loose: float32, different GEMM order)
                for ref in (tr, tp):
                    d = max(d, max(abs(p - q) / max(1.0, abs(q))
                                   for p, q in zip(gr["loss"], ref["loss"])))
            c_ms = None
            if a.gemm_compare and not a.skip_gpipe:
                cr = run_gpipe(a, t, out_dir, a.gemm_compare)
                c_ms = median_after_warmup(cr["ms"], a.warmup)
                print("round %d gpipe T=%d GPIPE_CPU_GEMM=%s: median %.2f ms/step (min %.2f, "
                      "max %.2f)" % (r + 1, t, a.gemm_compare, c_ms, min(cr["ms"][a.warmup:]),
                                     max(cr["ms"][a.warmup:])), flush=True)
            mins = (min(tr["ms"][a.warmup:]), min(tp["ms"][a.warmup:]),
                    None if a.skip_gpipe else min(gr["ms"][a.warmup:]))
            rounds.append((t_ms, tp_ms, g_ms, d, mins, c_ms))
        med = lambda v: float(np.median(v))
        t_ms = med([x[0] for x in rounds])
        tp_ms = med([x[1] for x in rounds])
        g_ms = None if a.skip_gpipe else med([x[2] for x in rounds])
        note = ""
        if not a.skip_gpipe:
            ratios = [min(x[0], x[1]) / x[2] for x in rounds]
            # Fastest step over all rounds: what each side does when the
            # shared host leaves it alone.
            best_t = min(min(x[4][0], x[4][1]) for x in rounds)
            best_g = min(x[4][2] for x in rounds)
            d = max(x[3] for x in rounds)
            note = "ratio per round %s; fastest step torch %.2f / gpipe %.2f ms = %.2f; max loss diff %.1e" % (
                ", ".join("%.2f" % q for q in ratios), best_t, best_g, best_t / best_g, d)
            if d > 1e-2:
                note += " (MISMATCH: results not comparable)"
            if a.gemm_compare:
                cmp = [x[5] / x[2] for x in rounds]
                note += "; GPIPE_CPU_GEMM=%s %.2f ms/step, it/default per round %s (median %.2f)" % (
                    a.gemm_compare, med([x[5] for x in rounds]),
                    ", ".join("%.2f" % q for q in cmp), med(cmp))
            rows.append((t, t_ms, tp_ms, g_ms, note, med(ratios)))
        else:
            rows.append((t, t_ms, tp_ms, g_ms, note, None))

    print()
    print("BLAS: %s" % blas)
    print()
    print("| threads | torch ms/step | torch ms/step (OMP_WAIT_POLICY=PASSIVE) | gpipe ms/step "
          "| torch/gpipe (faster torch, median of rounds) | notes |")
    print("|--------:|--------------:|--------------:|--------------:|------------:|-------|")
    for t, t_ms, tp_ms, g_ms, note, ratio in rows:
        if g_ms is None:
            print("| %d | %.2f | %.2f | - | - | %s |" % (t, t_ms, tp_ms, note))
        else:
            print("| %d | %.2f | %.2f | %.2f | %.2f | %s |"
                  % (t, t_ms, tp_ms, g_ms, ratio, note))
    print()
    print("<details><summary>update-alternatives --query libblas.so.3-x86_64-linux-gnu</summary>")
    print()
    print("```")
    print(blas_query)
    print("```")
    print("</details>")
    return 0


if __name__ == "__main__":
    sys.exit(main())
