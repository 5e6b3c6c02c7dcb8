#!/usr/bin/env python3
"""The GPU benchmark split across two machines: compile here, run on the GPU.

run_gpu_bench.sh needs gpipe-compile and the GPU on one machine. The GPU
machines this project borrows have CUDA, PyTorch and numpy but not the
toolchain gpipe-compile needs, so:

  # where gpipe-compile is (Debian's python3 with torch, onnx):
  /usr/bin/python3 bench/gpu/device_bench.py pack --bin build/bin --out DIR \\
      [--layers 16 --width 4096 --classes 1024 --batch 1024] [--precisions fp32,tf32,bf16]
  # anywhere, no GPU needed: check DIR and the inputs run would write
  python3 bench/gpu/device_bench.py run --programs DIR --dry-run
  # on the GPU machine, from the repository root (DIR carried there):
  python3 bench/gpu/device_bench.py run --programs DIR [--mpi BUNDLE/mpi]
      [--steps 50 --warmup 10 --repeat 3] [--timeout 120] [--deadline SECONDS]
      [--precisions fp32,tf32,bf16] [--out DIR] [--torch-device cuda]

  # the GPT-style model (gpt_model.py; bf16 by default; bench.json says which model):
  /usr/bin/python3 bench/gpu/device_bench.py pack --model gpt --bin build/bin --out DIR \\
      [--vocab 8192 --t 1024 --d 1024 --heads 16 --layers 12 --batch 8] [--precisions bf16]

pack exports the benchmark model (mlp_model.py; with --model gpt gpt_model.py,
whose pack also prints each precision's compile time, stage0 size and the GPU
memory pipeline.json's plan gives, and records them in bench.json; torch side
torch_gpt.py, table with tokens/s) and compiles it as 1 stage with
--target cuda for each precision (default fp32,tf32,bf16: fp32 is --precision
fp32 with TF32 off, tf32 is --precision fp32 --allow-tf32, bf16 is --precision
bf16); DIR keeps only each precision's stage0 and pipeline.json, and
bench.json (the model's configuration); the weights (~1 GB for the default
model) are not carried.

run writes the weights into --workdir from the same seed as PyTorch's module
(mlp_model.build_module; the GPT: gpt_model.build_module's state_dict, so a
buffer or tied name pipeline.json lists is found too), under the file names of
every precision's pipeline.json, and the data (mlp_model.make_data /
gpt_model.make_data: 4 mini-batches), then checks
them against each pipeline.json: every parameter's file exists, is float32 and
has the parameter's shape; every graph input's data file exists with its dtype,
its per-sample shape and at least one mini-batch of samples. A precision whose
check fails is not run (its problems are reported). Then it alternates rounds
of the gpipe program (its --log-json step times, warmup steps dropped, median)
and torch_mlp.py or torch_gpt.py (PyTorch eager with this same python, sys.executable; same
precision: fp32 with TF32 off, tf32 with TF32 on, bf16 with autocast), and
writes a table: ms/step, samples/s ratio gpipe/torch, TFLOP/s and MFU of each,
and the loss of the first steps of both (same weights and data: they must
agree).

Nothing ends the run but the deadline or a signal: each program runs in its own
process group with a time limit (--timeout, default 120 s; the process group is
killed when it runs over); a program that fails, times out, cannot start or
lacks a shared library is recorded as that round's failure with its reason, and
the rounds go on. The stage program runs with LD_LIBRARY_PATH led by every
site-packages/nvidia/*/lib folder of this python and the CUDA toolkit's
libraries, and the Open MPI settings for a single host without ssh (run.py's
MPI_ENV: OMPI_MCA_plm=isolated, ...); before each launch ldd must find every
library it needs ("missing libcudnn.so.9" is the failure otherwise). --mpi
installs the Open MPI files of a test/cuda/device/pack.py bundle (its mpi/
folder) where the machine has none: stage programs load libmpi even as 1
stage.

--deadline S: S seconds after device_bench.py starts it should be done. A
program is started only when the time left is at least as long as that
program (same precision, same side) took last time (3 s before its first
run), and its time limit is cut to the time left; what is not started is
listed as "not run (deadline)", a program killed at that cut limit as "stopped
at the deadline".

The table, the failures and the raw numbers go to OUT/bench.txt (OUT: --out,
else $OUT, else --workdir), rewritten after every program, so a run cut off
(by the deadline, SIGTERM, SIGINT) leaves a table of what was measured.

run --dry-run needs no GPU and no CUDA torch (torch's CPU build, numpy): it
writes the weights and data and checks them against pipeline.json as above,
checks that every stage0 is there and executable, prints the commands it would
run (and the libraries ldd does not find here, as a note), and, for a model of
at most 20M parameters, runs torch_mlp.py for 2 steps on the CPU. Exit status:
0 when everything is consistent, 1 otherwise (each problem printed). Without
--dry-run: 0 when no program failed and every precision was measured on both
sides at least once (rounds the deadline left out are no failure), 1
otherwise, 2 when nothing could be set up (no bench.json, a
--precisions that was not packed), 3 for an error of device_bench itself
(its traceback printed). --torch-device cpu (with stand-in stage
programs) tests the plumbing without a GPU, as ctest cuda_device_bench does.
"""
import argparse
import glob
import json
import os
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
DEVICE_DIR = os.path.join(REPO, "test", "cuda", "device")
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "test", "e2e"))
sys.path.insert(0, DEVICE_DIR)

# The GPU check's library path, ldd check, Open MPI install and settings, and
# process-group kill: one implementation for both.
import run as device_run  # noqa: E402

START = time.monotonic()
PEAKS = {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4}  # H100/H200 SXM dense TFLOP/s
PRECISION_FLAGS = {"fp32": ["--precision", "fp32"],
                   "tf32": ["--precision", "fp32", "--allow-tf32"],
                   "bf16": ["--precision", "bf16"]}
DRY_RUN_TORCH_MAX_PARAMS = 20_000_000


# --- the models ---------------------------------------------------------------------------------

class MlpBench:
    """mlp_model.py's deep ReLU MLP (the default; bench.json without "model" is this one)."""
    name = "mlp"
    keys = ("layers", "width", "classes", "batch")
    defaults = {"layers": 16, "width": 4096, "classes": 1024, "batch": 1024}
    precisions = "fp32,tf32,bf16"
    script = "torch_mlp.py"

    @staticmethod
    def export_cmd(cfg, out):
        return [sys.executable, os.path.join(HERE, "mlp_model.py"), "--layers",
                str(cfg["layers"]), "--width", str(cfg["width"]), "--classes",
                str(cfg["classes"]), "--batch", str(cfg["batch"]), "--out", out]

    @staticmethod
    def flops(cfg):
        import mlp_model
        return mlp_model.flops(cfg["layers"], cfg["width"], cfg["classes"], cfg["batch"])

    @staticmethod
    def weights(cfg):
        import mlp_model
        m = mlp_model.build_module(cfg["layers"], cfg["width"], cfg["classes"])
        return {n: t.detach().numpy() for n, t in m.named_parameters()}

    @staticmethod
    def data(cfg):
        import mlp_model
        return mlp_model.make_data(4 * cfg["batch"], cfg["width"], cfg["classes"], 0)

    @staticmethod
    def title(cfg):
        return "%d-layer MLP width %d, %d classes, batch %d" % (
            cfg["layers"], cfg["width"], cfg["classes"], cfg["batch"])

    @staticmethod
    def torch_args(cfg):
        return ["--layers", str(cfg["layers"]), "--width", str(cfg["width"]),
                "--classes", str(cfg["classes"]), "--batch", str(cfg["batch"])]


class GptBench:
    """gpt_model.py's GPT-style LM (test/e2e/models.py's GptTiny), bf16 by default."""
    name = "gpt"
    keys = ("vocab", "t", "d", "heads", "layers", "batch")
    defaults = {"vocab": 8192, "t": 1024, "d": 1024, "heads": 16, "layers": 12, "batch": 8}
    precisions = "bf16"
    script = "torch_gpt.py"

    @staticmethod
    def export_cmd(cfg, out):
        return [sys.executable, os.path.join(HERE, "gpt_model.py")] + \
            GptBench.torch_args(cfg) + ["--out", out]

    @staticmethod
    def flops(cfg):
        import gpt_model
        return gpt_model.flops(cfg)

    @staticmethod
    def weights(cfg):
        # state_dict: parameters, tied names and buffers (the causal mask), as pipeline.json
        # may list any of them.
        import gpt_model
        return gpt_model.weights_by_name(cfg)

    @staticmethod
    def data(cfg):
        import gpt_model
        return gpt_model.make_data(4 * cfg["batch"], cfg["t"], cfg["vocab"], 0)

    @staticmethod
    def title(cfg):
        import gpt_model
        return "%s (%d tokens/step)" % (gpt_model.describe(cfg), cfg["batch"] * cfg["t"])

    @staticmethod
    def torch_args(cfg):
        return [a for k in GptBench.keys for a in ("--" + k, str(cfg[k]))]


MODELS = {"mlp": MlpBench, "gpt": GptBench}


def model_of(cfg):
    """The model class of a bench.json (no "model": the MLP, as before there were two)."""
    name = cfg.get("model", "mlp")
    if name not in MODELS:
        raise ValueError("bench.json's model %r is not one of %s" % (name, ", ".join(MODELS)))
    return MODELS[name]


class Stop(Exception):
    """SIGTERM / SIGINT: write what was measured and end."""


def on_signal(sig, _frame):
    raise Stop("signal %d" % sig)


# --- the stage programs' environment: test/cuda/device/run.py's --------------------------------

def stage_env(notes):
    """The stage program's environment: every nvidia/*/lib first, and Open MPI's
    single-host settings (run.MPI_ENV, a value the caller set wins)."""
    env = device_run.env_with(device_run.nvidia_lib_dirs())
    notes.append("stage LD_LIBRARY_PATH=%s" % env.get("LD_LIBRARY_PATH", ""))
    notes.append("stage MPI env: %s" % " ".join("%s=%s" % (k, env[k])
                                                 for k in sorted(device_run.MPI_ENV)))
    return env


# --- processes --------------------------------------------------------------------------------

def must(cmd, **kw):
    """pack's runner: a failure ends pack (it runs here, where that is what is wanted)."""
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.exit("device_bench: %s failed (%d):\n%s%s" % (" ".join(cmd), r.returncode,
                                                          r.stdout[-2000:], r.stderr[-3000:]))
    return r.stdout


def run_prog(cmd, timeout, env=None):
    """(ok, stdout, reason, seconds): runs `cmd` in its own process group, killed
    (with everything it started) after `timeout` s or when this script is stopped."""
    t0 = time.monotonic()
    try:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=env, start_new_session=True)
    except OSError as e:
        return False, "", "cannot start %s: %s" % (cmd[0], e), 0.0
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        device_run.kill_group(p)
        secs = time.monotonic() - t0
        return False, "", "killed after %.0fs (time limit %.0fs)" % (secs, timeout), secs
    except BaseException:
        device_run.kill_group(p)
        raise
    secs = time.monotonic() - t0
    if p.returncode != 0:
        how = ("exit %d" % p.returncode if p.returncode > 0
               else "signal %d" % -p.returncode)
        tail = (out[-600:] + "\n" + err[-1500:]).strip().replace("\n", " | ")
        return False, out, "%s after %.1fs: %s" % (how, secs, tail), secs
    return True, out, "", secs


# --- pack -------------------------------------------------------------------------------------

def gb(n):
    if not isinstance(n, (int, float)):
        return "n/a"
    return "%.2f GB" % (n / 1e9) if n >= 1e8 else "%.1f MB" % (n / 1e6)


def memory_line(pj):
    """What pipeline.json's memory plan says the stage needs on the GPU (one line)."""
    try:
        mem = pj["stages"][0]["memory"]
    except (KeyError, IndexError, TypeError):
        return "pipeline.json has no memory plan"
    parts = ["%s %s" % (k.replace("_bytes", "").replace("_", " "), gb(mem.get(k)))
             for k in ("parameter_bytes", "gradient_bytes", "optimizer_state_bytes",
                       "activation_bytes", "transient_peak_bytes", "constant_bytes",
                       "bf16_copy_bytes", "scratch_bytes") if k in mem]
    return "arena %s (%s), plus what the runtime allocates outside the arena (CUDA context, " \
        "library workspaces)" \
        % (gb(mem.get("arena_bytes")), ", ".join(parts))


def pack(a):
    model = MODELS[a.model]
    out = os.path.abspath(a.out)
    os.makedirs(out, exist_ok=True)
    cfg = {}
    for k in model.keys:
        v = getattr(a, k, None)
        cfg[k] = model.defaults[k] if v is None else v
    unused = sorted(k for k in set(MlpBench.keys + GptBench.keys) - set(model.keys)
                    if getattr(a, k, None) is not None)
    if unused:
        sys.exit("device_bench: --model %s takes no %s" % (a.model, ", ".join("--" + k
                                                                        for k in unused)))
    precisions = [p for p in (a.precisions or model.precisions).split(",") if p]
    bad = [p for p in precisions if p not in PRECISION_FLAGS]
    if bad or not precisions:
        sys.exit("device_bench: --precisions takes fp32, tf32, bf16; got %s" % a.precisions)
    model_dir = os.path.join(out, "model")
    t0 = time.monotonic()
    text = must(model.export_cmd(cfg, model_dir))
    if a.model != "mlp":  # (the MLP's pack prints only its last line, as before)
        print(text.rstrip("\n"))
        print("device_bench: export %.0fs" % (time.monotonic() - t0), flush=True)
    compiled = {}
    for p in precisions:
        d = os.path.join(out, p)
        must(["rm", "-rf", d])
        flags = ["--target", "cuda", "--cuda-arch", a.cuda_arch, "--lr", repr(a.lr)]
        t0 = time.monotonic()
        must([os.path.join(a.bin, "gpipe-compile"), os.path.join(model_dir, "model.onnx"),
              "-o", d] + flags + PRECISION_FLAGS[p])
        secs = time.monotonic() - t0
        for f in os.listdir(d):
            if f not in ("stage0", "pipeline.json"):
                must(["rm", "-rf", os.path.join(d, f)])
        if a.model != "mlp":
            with open(os.path.join(d, "pipeline.json")) as f:
                pj = json.load(f)
            st = pj["stages"][0]
            compiled[p] = {"compile_s": round(secs, 1),
                           "stage0_bytes": os.path.getsize(os.path.join(d, "stage0")),
                           "flops_per_step": st.get("flops_per_step"),
                           "memory": st.get("memory")}
            print("device_bench: %s: gpipe-compile %.0fs, stage0 %.1f MB (unstripped), %d "
                  "parameters, executed FLOP/step %s; GPU memory: %s"
                  % (p, secs, compiled[p]["stage0_bytes"] / 1e6, len(st.get("params", [])),
                     "%.4g" % st["flops_per_step"] if "flops_per_step" in st else "n/a",
                     memory_line(pj)), flush=True)
    must(["rm", "-rf", model_dir])
    if a.model == "mlp":  # bench.json as before the GPT model, and its name
        bench = {"model": "mlp", "layers": cfg["layers"], "width": cfg["width"],
                 "classes": cfg["classes"], "batch": cfg["batch"], "lr": a.lr,
                 "precisions": precisions}
    else:
        fl = model.flops(cfg)
        bench = dict(cfg, model=a.model, lr=a.lr, optimizer="sgd", precisions=precisions,
                     cuda_arch=a.cuda_arch, params=fl["params"],
                     model_flops=fl["model_flops"], compiled=compiled)
    with open(os.path.join(out, "bench.json"), "w") as f:
        json.dump(bench, f)
    print("device_bench: packed %s into %s" % (",".join(precisions), out))
    return 0


# --- inputs -----------------------------------------------------------------------------------

def write_inputs(cfg, pjs, work):
    """The weights (torch's seeded init, under every pipeline.json's file names) and the
    data. Returns (weights dir, data dir, problems)."""
    import numpy as np
    model = model_of(cfg)
    wdir, ddir = os.path.join(work, "weights"), os.path.join(work, "data")
    os.makedirs(wdir, exist_ok=True)
    os.makedirs(ddir, exist_ok=True)
    for d in (wdir, ddir):
        for f in glob.glob(os.path.join(d, "*.npy")):
            os.remove(f)
    params = model.weights(cfg)
    problems, written = [], {}
    for prec, pj in pjs.items():
        for st in pj.get("stages", []):
            for p in st.get("params", []):
                name, fname = p.get("name"), p.get("file")
                if name not in params:
                    problems.append("%s: pipeline.json's parameter %r is not one of the torch "
                                    "module's (%s)" % (prec, name, ", ".join(sorted(params))))
                    continue
                if not fname or os.path.basename(fname) != fname:
                    problems.append("%s: parameter %r has no plain file name (%r)"
                                    % (prec, name, fname))
                    continue
                if written.get(fname, name) != name:
                    problems.append("%s: file %s is parameter %r here, %r in another "
                                    "precision" % (prec, fname, name, written[fname]))
                    continue
                if fname not in written:
                    np.save(os.path.join(wdir, fname), params[name].astype(np.float32))
                    written[fname] = name
    del params
    x, y = model.data(cfg)
    np.save(os.path.join(ddir, "x.npy"), x)
    np.save(os.path.join(ddir, "y.npy"), y)
    return wdir, ddir, problems


def check_inputs(pj, wdir, ddir, multi_stage=False):
    """Problems of the weights and data against one pipeline.json (empty: consistent);
    one of several stages is a problem unless `multi_stage` (pipeline_bench.py)."""
    import numpy as np
    probs = []
    stages = pj.get("stages")
    if not isinstance(stages, list) or not stages:
        return ["pipeline.json has no stages"]
    if len(stages) != 1 and not multi_stage:
        probs.append("pipeline.json has %d stages; device_bench runs 1-stage programs"
                     % len(stages))
    for st in stages:
        for p in st.get("params", []):
            name, fname = p.get("name"), p.get("file")
            path = os.path.join(wdir, fname or "?")
            if not os.path.isfile(path):
                probs.append("parameter %r: weight file %s missing" % (name, fname))
                continue
            try:
                arr = np.load(path, mmap_mode="r")
            except Exception as e:  # noqa: BLE001
                probs.append("parameter %r: cannot read %s: %s" % (name, fname, e))
                continue
            if arr.dtype != np.float32:
                probs.append("parameter %r: %s is %s, not float32" % (name, fname, arr.dtype))
            if "shape" in p and list(arr.shape) != list(p["shape"]):
                probs.append("parameter %r: %s has shape %s, pipeline.json says %s"
                             % (name, fname, list(arr.shape), list(p["shape"])))
    inputs = pj.get("inputs")
    if not isinstance(inputs, list) or not inputs:
        probs.append("pipeline.json lists no graph inputs")
        inputs = []
    for inp in inputs:
        name = inp.get("name")
        if inp.get("stage", 0) < 0:
            continue
        path = os.path.join(ddir, "%s.npy" % name)
        if not os.path.isfile(path):
            probs.append("graph input %r: data file %s.npy missing" % (name, name))
            continue
        arr = np.load(path, mmap_mode="r")
        want = inp.get("dtype")
        if want and arr.dtype != np.dtype(want):
            probs.append("graph input %r: %s.npy is %s, pipeline.json says %s"
                         % (name, name, arr.dtype, want))
        shape = inp.get("shape")
        if isinstance(shape, list) and shape:
            if list(arr.shape[1:]) != list(shape[1:]):
                probs.append("graph input %r: %s.npy has samples of shape %s, pipeline.json "
                             "says %s" % (name, name, list(arr.shape[1:]), list(shape[1:])))
            if arr.ndim == 0 or arr.shape[0] < shape[0]:
                probs.append("graph input %r: %s.npy has %s samples, fewer than the "
                             "mini-batch %d" % (name, name, arr.shape[:1], shape[0]))
    return probs


# --- the table --------------------------------------------------------------------------------

def median(v):
    return statistics.median(v) if v else None


def fmt(v, f="%.3f"):
    return f % v if v is not None else "n/a"


def table(cfg, a, res, precisions, model_flops, notes, state):
    dev = next((res[p].get("device_name") for p in precisions if res[p].get("device_name")),
               None)
    model = model_of(cfg)
    gpt = model is GptBench
    tokens = cfg["batch"] * cfg["t"] if gpt else None
    lines = ["# gpipe (1 stage, --target cuda) vs PyTorch eager, %s, %s; model FLOP/step %.4g; "
             "%d warmup + %d steps, %d alternating rounds (%s)"
             % (dev or "GPU unknown", model.title(cfg), model_flops, a.warmup, a.steps,
                a.repeat, state),
             "| precision | gpipe ms/step | torch ms/step | throughput gpipe/torch%s | "
             "gpipe TFLOP/s (MFU) | torch TFLOP/s (MFU) | %srounds gpipe / torch | "
             "first losses gpipe / torch |"
             % ((" (tokens/s)", "gpipe / torch tokens/s | ") if gpt else ("", "")),
             "|---|---|---|---|---|---|---|---|" + ("---|" if gpt else "")]
    for p in precisions:
        r = res[p]
        g, t = median(r["gpipe"]), median(r["torch"])
        peak = PEAKS[p]

        def tf(ms):
            if ms is None:
                return "n/a"
            return "%.1f (%.1f%%)" % (model_flops / ms / 1e9, 100 * model_flops / ms / 1e9 / peak)
        losses = "%s / %s" % (["%.5f" % v for v in (r["gpipe_loss"] or [])[:3]] or "n/a",
                              ["%.5f" % v for v in (r["torch_loss"] or [])[:3]] or "n/a")
        toks = ("%s / %s | " % (fmt(tokens / g * 1e3 if g else None, "%.0f"),
                                fmt(tokens / t * 1e3 if t else None, "%.0f"))
                if gpt else "")
        lines.append("| %s | %s | %s | **%s** | %s | %s | %s%d / %d | %s |"
                     % (p, fmt(g), fmt(t), fmt(t / g if g and t else None), tf(g), tf(t),
                        toks, len(r["gpipe"]), len(r["torch"]), losses))
        if gpt and (r.get("gpipe_device_memory_gb") or r.get("torch_max_memory_allocated_gb")):
            notes_mem = "%s: GPU memory: gpipe %s in use at its end (cudaMemGetInfo, all " \
                "processes), torch max_memory_allocated %s" % (
                    p, fmt(r.get("gpipe_device_memory_gb"), "%.2f GB"),
                    fmt(r.get("torch_max_memory_allocated_gb"), "%.2f GB"))
            if notes_mem not in notes:
                notes = notes + [notes_mem]
    fails = [f for p in precisions for f in res[p]["failures"]]
    if fails:
        lines += ["", "Failures and programs not run:"] + ["- " + f for f in fails]
    if notes:
        lines += ["", "Notes:"] + ["- " + n for n in notes]
    return "\n".join(lines)


def write_table(path, text, res):
    tmp = path + ".tmp"
    try:
        with open(tmp, "w") as f:
            f.write(text + "\n\n" + json.dumps(res, indent=1) + "\n")
        os.replace(tmp, path)
    except OSError as e:
        print("device_bench: cannot write %s: %s" % (path, e), flush=True)


# --- run --------------------------------------------------------------------------------------

def left():
    return None if DEADLINE is None else DEADLINE - (time.monotonic() - START)


DEADLINE = None


def run(a):
    try:
        return run_bench(a)
    except Stop as e:
        print("device_bench: stopped by %s while setting up; nothing measured" % e, flush=True)
        return 1
    except Exception:  # noqa: BLE001 - a bug here: say where, as the last lines
        import traceback
        traceback.print_exc()
        print("device_bench: unexpected error (above); exit 3", flush=True)
        return 3


def run_bench(a):
    global DEADLINE
    DEADLINE = a.deadline
    notes = []
    progs = os.path.abspath(a.programs)
    try:
        with open(os.path.join(progs, "bench.json")) as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        print("device_bench: %s/bench.json: %s (was DIR made by device_bench.py pack?)"
              % (progs, e), flush=True)
        return 2
    precisions = list(cfg["precisions"])
    if a.precisions:
        want = [p for p in a.precisions.split(",") if p]
        absent = [p for p in want if p not in precisions]
        if absent:
            print("device_bench: %s not packed in %s (packed: %s)"
                  % (",".join(absent), progs, ",".join(precisions)), flush=True)
            return 2
        precisions = want
    work = os.path.abspath(a.workdir)
    os.makedirs(work, exist_ok=True)
    out = a.out or os.environ.get("OUT") or work
    os.makedirs(out, exist_ok=True)
    bench_txt = os.path.join(out, "bench.txt")

    if a.mpi and not a.dry_run:
        try:
            device_run.install_mpi(notes, os.path.abspath(a.mpi))
        except Exception as e:  # noqa: BLE001 - the launch then says what is missing
            notes.append("installing Open MPI from %s failed: %s" % (a.mpi, e))
    env = stage_env(notes)

    try:
        model = model_of(cfg)
    except ValueError as e:
        print("device_bench: %s/bench.json: %s" % (progs, e), flush=True)
        return 2
    fl = model.flops(cfg)
    model_flops = fl["model_flops"]
    res = {p: {"gpipe": [], "torch": [], "gpipe_loss": None, "torch_loss": None,
               "failures": []} for p in cfg["precisions"]}
    problems = []
    pjs = {}
    for p in precisions:
        try:
            with open(os.path.join(progs, p, "pipeline.json")) as f:
                pjs[p] = json.load(f)
        except (OSError, ValueError) as e:
            problems.append("%s: cannot read pipeline.json: %s" % (p, e))
        exe = os.path.join(progs, p, "stage0")
        if not os.access(exe, os.X_OK):
            problems.append("%s: %s is missing or not executable" % (p, exe))
    if not a.dry_run:
        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
    t0 = time.monotonic()
    wdir, ddir = os.path.join(work, "weights"), os.path.join(work, "data")
    try:
        wdir, ddir, wprobs = write_inputs(cfg, pjs, work)
        problems += wprobs
        for p, pj in pjs.items():
            problems += ["%s: %s" % (p, s) for s in check_inputs(pj, wdir, ddir)]
    except Stop:
        raise
    except Exception as e:  # noqa: BLE001 - reported as every precision's problem
        problems += ["%s: cannot write or check the weights and data: %s: %s"
                     % (p, type(e).__name__, e) for p in precisions]
    print("device_bench: weights and data written to %s in %.1fs; checked against %d "
          "pipeline.json: %s" % (work, time.monotonic() - t0, len(pjs),
                                 "consistent" if not problems else "%d problem(s)"
                                 % len(problems)), flush=True)
    for s in problems:
        print("device_bench: problem: " + s, flush=True)
    broken = {p for p in precisions if any(s.startswith(p + ":") for s in problems)}

    total = a.warmup + a.steps

    def gpipe_cmd(p, r):
        log = os.path.join(work, "log_%s_%d.jsonl" % (p, r))
        # the GPT's also writes a --report (the GPU memory in use at its end)
        report = ["--report", log[:-len(".jsonl")] + ".report"] if model is GptBench else []
        return [os.path.join(progs, p, "stage0"), "--data", ddir, "--steps", str(total),
                "--weights-in", wdir, "--log-json", log, "--quiet"] + report, log

    def torch_cmd(p, device=None, warmup=None, steps=None):
        device = device or a.torch_device
        return [sys.executable, os.path.join(HERE, model.script)] + model.torch_args(cfg) + [
                "--precision", p, "--lr", repr(cfg["lr"]), "--device", device,
                "--warmup", str(a.warmup if warmup is None else warmup),
                "--steps", str(a.steps if steps is None else steps), "--repeat", "1"]

    if a.dry_run:
        return dry_run(a, cfg, precisions, problems, env, gpipe_cmd, torch_cmd,
                       notes, fl)

    for p in sorted(broken):
        res[p]["failures"].append("%s: not run: the inputs do not fit its pipeline.json "
                                  "(see the problems printed above)" % p)
        notes += [s for s in problems if s.startswith(p + ":")]
    runnable = [p for p in precisions if p not in broken]
    last_secs = {}
    state = "running"
    cut = False
    deadline_skips = [0]

    def save(state):
        text = table(cfg, a, res, precisions, model_flops, notes, state)
        write_table(bench_txt, text, res)
        return text

    save("started")
    try:
        for r in range(a.repeat):
            for p in runnable:
                order = ("gpipe", "torch") if r % 2 == 0 else ("torch", "gpipe")
                for who in order:
                    tag = "round %d %s %s" % (r, p, who)
                    rem = left()
                    need = last_secs.get((p, who), 3.0)
                    if rem is not None and rem < need:
                        why = ("it took %.0fs last time" % need if (p, who) in last_secs
                               else "under %.0fs" % need)
                        res[p]["failures"].append("%s: not run (deadline: %.0fs left, %s)"
                                                  % (tag, max(rem, 0), why))
                        print("device_bench: %s: not run (deadline)" % tag, flush=True)
                        cut = True
                        deadline_skips[0] += 1
                        continue
                    limit = a.timeout if rem is None else min(a.timeout, rem)
                    try:
                        ok, reason = measure(a, p, r, who, res, env, gpipe_cmd,
                                             torch_cmd, limit, last_secs)
                    except Stop as e:
                        res[p]["failures"].append("%s: interrupted by %s (its process group "
                                                  "killed)" % (tag, e))
                        raise
                    except Exception as e:  # noqa: BLE001 - one program's error is its own
                        ok, reason = False, "device_bench error: %s: %s" % (type(e).__name__, e)
                    if ok:
                        print("device_bench: %s: %.3f ms/step" % (tag, res[p][who][-1]),
                              flush=True)
                    elif limit < a.timeout and reason.startswith("killed after"):
                        res[p]["failures"].append("%s: stopped at the deadline (%s)"
                                                  % (tag, reason))
                        print("device_bench: %s: stopped at the deadline" % tag, flush=True)
                        cut = True
                        deadline_skips[0] += 1
                    else:
                        res[p]["failures"].append("%s: %s" % (tag, reason))
                        print("device_bench: %s: FAILED: %s" % (tag, reason), flush=True)
                    save("round %d of %d" % (r + 1, a.repeat))
        state = "deadline reached" if cut else "complete"
    except Stop as e:
        state = "stopped by %s" % e
        notes.append("stopped by %s before the end" % e)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the table is written whatever comes
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    text = save(state)
    nfail = sum(len(res[p]["failures"]) for p in precisions)
    print(text.split("\n\n")[0], flush=True)  # the table; failures and notes: above, bench.txt
    print("device_bench: %d failure(s) or program(s) not run; table, failures and raw numbers "
          "in %s" % (nfail, bench_txt), flush=True)
    # Rounds the deadline left out are no failure, as long as every precision has both sides.
    failed = nfail - deadline_skips[0]
    measured = all(res[p]["gpipe"] and res[p]["torch"] for p in precisions)
    return 0 if measured and failed == 0 and state in ("complete", "deadline reached") else 1


def measure(a, p, r, who, res, env, gpipe_cmd, torch_cmd, limit, last_secs):
    """One program of one round; (ok, reason)."""
    if who == "gpipe":
        cmd, log = gpipe_cmd(p, r)
        lost = device_run.missing_libs(cmd[0], env)
        if lost:
            return False, "missing %s (ldd %s under the stage LD_LIBRARY_PATH)" % (
                ", ".join(lost), cmd[0])
        if os.path.exists(log):
            os.remove(log)
        ok, _, reason, secs = run_prog(cmd, limit, env)
        last_secs[(p, who)] = secs
        if not ok:
            return False, reason
        try:
            with open(log) as f:
                rows = [json.loads(l) for l in f if l.strip()]
        except (OSError, ValueError) as e:
            return False, "cannot read its --log-json %s: %s" % (log, e)
        rows = [x for x in rows if "ms" in x and "loss" in x and "eval_loss" not in x]
        if len(rows) <= a.warmup:
            return False, "its log has %d step(s), expected %d" % (len(rows), a.warmup + a.steps)
        res[p]["gpipe"].append(statistics.median(x["ms"] for x in rows[a.warmup:]))
        res[p]["gpipe_loss"] = [x["loss"] for x in rows[:5]]
        if "--report" in cmd:  # the GPT's: a missing or odd report is no failure
            try:
                with open(cmd[cmd.index("--report") + 1]) as f:
                    mem = json.load(f).get("device_memory_bytes")
                if isinstance(mem, (int, float)) and mem >= 0:
                    res[p]["gpipe_device_memory_gb"] = mem / 1e9
            except (OSError, ValueError, AttributeError):
                pass
        return True, ""
    ok, out, reason, secs = run_prog(torch_cmd(p), limit)
    last_secs[(p, who)] = secs
    if not ok:
        return False, reason
    try:
        j = json.loads(out.strip().splitlines()[-1])
        res[p]["torch"].append(float(j["ms_per_step"]))
    except (ValueError, IndexError, KeyError, TypeError) as e:
        return False, "no JSON result line from %s (%s): %s" % (
            os.path.basename(torch_cmd(p)[1]), e, out[-300:])
    res[p]["torch_loss"] = list(j.get("loss", []))[:5]
    res[p]["device_name"] = j.get("device_name")
    if "max_memory_allocated_gb" in j and j.get("model") == "gpt":
        res[p]["torch_max_memory_allocated_gb"] = j["max_memory_allocated_gb"]
    return True, ""


def dry_run(a, cfg, precisions, problems, env, gpipe_cmd, torch_cmd, notes, fl):
    for n in notes:
        print("device_bench: note: " + n, flush=True)
    print("device_bench: --dry-run: would run %d alternating round(s) of %s, each program "
          "limited to %gs%s:" % (a.repeat, ",".join(precisions), a.timeout,
                                 ", deadline %gs after the start" % a.deadline
                                 if a.deadline is not None else ""), flush=True)
    for p in precisions:
        cmd, _ = gpipe_cmd(p, 0)
        print("  gpipe %s: %s" % (p, " ".join(cmd)), flush=True)
        if os.access(cmd[0], os.X_OK):
            lost = device_run.missing_libs(cmd[0], env)
            if lost:
                print("    note: here ldd does not find %s (on the GPU machine that round "
                      "would fail unless they are there)" % ", ".join(lost), flush=True)
        print("  torch %s: %s" % (p, " ".join(torch_cmd(p))), flush=True)
    script = model_of(cfg).script
    params = fl["params"]
    if params <= DRY_RUN_TORCH_MAX_PARAMS:
        for p in precisions:
            cmd = torch_cmd(p, device="cpu", warmup=1, steps=2)
            ok, out, reason, secs = run_prog(cmd, a.timeout)
            if ok:
                try:
                    j = json.loads(out.strip().splitlines()[-1])
                    print("  %s %s on the CPU: 2 steps, losses %s (%.1fs)"
                          % (script, p, ["%.5f" % v for v in j["loss"][:3]], secs), flush=True)
                except (ValueError, IndexError, KeyError, TypeError) as e:
                    problems.append("%s: %s printed no JSON result line (%s)" % (p, script, e))
            else:
                problems.append("%s: %s --device cpu failed: %s" % (p, script, reason))
    else:
        print("  (%s not tried on the CPU: %d parameters)" % (script, params), flush=True)
    if problems:
        print("device_bench: --dry-run: %d problem(s):" % len(problems), flush=True)
        for s in problems:
            print("  " + s, flush=True)
        return 1
    print("device_bench: --dry-run: consistent", flush=True)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack")
    p.add_argument("--bin", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--model", choices=sorted(MODELS), default="mlp",
                   help="mlp (default: mlp_model.py) or gpt (gpt_model.py)")
    p.add_argument("--layers", type=int, default=None, help="mlp 16, gpt 12")
    p.add_argument("--batch", type=int, default=None, help="mlp 1024 samples, gpt 8 sequences")
    p.add_argument("--width", type=int, default=None, help="mlp: 4096")
    p.add_argument("--classes", type=int, default=None, help="mlp: 1024")
    p.add_argument("--vocab", type=int, default=None, help="gpt: 8192")
    p.add_argument("--t", type=int, default=None, help="gpt: sequence length 1024")
    p.add_argument("--d", type=int, default=None, help="gpt: model width 1024")
    p.add_argument("--heads", type=int, default=None, help="gpt: 16")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--cuda-arch", default="90")
    p.add_argument("--precisions", default=None,
                   help="default: mlp fp32,tf32,bf16; gpt bf16")
    r = sub.add_parser("run")
    r.add_argument("--programs", required=True)
    r.add_argument("--workdir", default="/tmp/gpipe_device_bench")
    r.add_argument("--steps", type=int, default=50)
    r.add_argument("--warmup", type=int, default=10)
    r.add_argument("--repeat", type=int, default=3)
    r.add_argument("--precisions", default=None,
                   help="a subset of the packed precisions (default: all packed)")
    r.add_argument("--timeout", type=float, default=120.0,
                   help="seconds each program may run (default 120)")
    r.add_argument("--deadline", type=float, default=None,
                   help="seconds after the start by which to be done (default: none)")
    r.add_argument("--out", default=None, help="where bench.txt goes (default $OUT, else "
                   "--workdir)")
    r.add_argument("--mpi", help="a pack.py bundle's mpi/ folder, installed first")
    r.add_argument("--torch-device", default="cuda",
                   help="torch_mlp.py/torch_gpt.py --device (default cuda; cpu: a plumbing "
                   "test)")
    r.add_argument("--dry-run", action="store_true",
                   help="write and check the inputs, print the commands; needs no GPU")
    a = ap.parse_args()
    if a.cmd == "run" and (a.warmup < 0 or a.steps < 1 or a.repeat < 1 or a.timeout <= 0):
        ap.error("--warmup must be >= 0, --steps, --repeat and --timeout > 0")
    return pack(a) if a.cmd == "pack" else run(a)


if __name__ == "__main__":
    sys.exit(main())
