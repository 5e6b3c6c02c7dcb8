#!/usr/bin/env python3
"""Runs a bundle made by pack.py on a GPU machine (needs python3 + numpy).

  python3 run.py [--cases REGEX] [--tiers 0,1,2] [--order FILE] [--jobs N]
                 [--no-install] [--mpirun PATH] [--skip-memcheck] [--skip-bench]
                 [--timeout S] [--comm-timeout S] [--deadline S] [--out DIR]

From the bundle's directory, in this order (most valuable first), each step a
check recorded in results.json:
  1. setup: installs the bundle's Open MPI files where the machine has none (a
     file that exists is never replaced); the launcher is then the bundle's
     orterun by absolute path (/usr/bin/orterun; --mpirun overrides), never
     whatever mpirun is first on PATH; its version is the check's detail;
  2. setup: the library path: every site-packages/nvidia/*/lib of the Python
     installations found (the pip wheels of cuBLAS, cuDNN, NCCL that PyTorch
     brings) and the CUDA toolkit's lib64, ahead of LD_LIBRARY_PATH; every
     program is checked with ldd before it starts, and a library it cannot find
     is that check's reason ("missing libcudnn.so.9");
  3. probe: the GPU probe; when it fails nothing else that needs a GPU runs
     (each is recorded as not run, with the probe's reason);
  4. mpirun: a 2-rank smoke job through the launcher (single host, Open MPI's
     plm 'isolated': no ssh or rsh needed); when it fails, the K > 1 cases are
     not run;
  5. kernels: the CUDA kernel unit test (its whole output: kernels.log);
  6. e2e, tier 0 one at a time, then tier 1 --jobs at a time (a K-stage case
     takes min(K, jobs) slots), then tier 2: trains each case's CUDA stage
     programs (K > 1: one mpirun, the stages share the GPU, host-staged) with
     the references' data order (--shuffle --seed as packed) and compares the
     trained weights and per-step losses with the CPU target's program and
     PyTorch, both trained on the packing machine, at the case's tolerances
     (case.json, those of check_training.py --target cuda: 1e-4 for fp32; for
     bf16 1e-3 against the CPU target's bf16 emulation and 5e-2 against
     torch's fp32 training, from which the weights must also differ by more
     than 1e-6): relative L2 error <= tol per weight, |loss - loss_ref| <= tol
     * max(1, |loss_ref|) per step; each case's line names the tolerances;
  7. memcheck: compute-sanitizer memcheck on one step of the example as 1 stage;
  8. bench: bench/gpu/device_bench.py run on the bundle's bench/ programs
     (fp32, TF32, bf16 against PyTorch eager; its table: OUT/bench.txt);
  9. memcheck: the example as 2 stages x 2 micro-batches.
Every program gets --timeout seconds (memcheck twice that), every stage
--comm-timeout, and none runs past --deadline (seconds from the start): a check
that would start with less than --min-left seconds to go is recorded as
"not run (deadline)". SIGTERM (an outer `timeout`) kills every process group
this script started, records what did not finish as "not run (interrupted)"
and still writes results.json and the logs.

Prints one line per check and a summary. Whatever goes wrong in a check (a
program that cannot start, such as a missing mpirun, a hang past --timeout, a
missing file or library, an unexpected error) is that check's failure, with
its reason; the run goes on, and never ends in a traceback. Written to --out
(default $OUT when set, else the bundle's directory): results.json (every
check: kind, name, ok, detail, seconds), rewritten after each check;
kernels.log (the kernel test's output); logs.tgz (every program's log).
Exit status: the number of failures (at most 125); 2 for bad arguments.
"""
import argparse
import glob
import io
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
import traceback

try:
    import numpy as np
except ImportError:  # each comparison then fails with the reason
    np = None

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = []
RESULTS_PATH = None
LOCK = threading.RLock()
LIVE = set()          # Popen objects running now (killed on SIGTERM)
STOPPING = threading.Event()
FINAL = threading.Event()   # results are final: late records are dropped
PLANNED = []          # (kind, name) of every check, in order
T0 = time.time()
DEADLINE = None       # absolute time.time() after which nothing starts
LOGS = []             # (path in logs.tgz, file) of every program's log

# Open MPI on one host with no ssh/rsh (plm 'isolated' starts local daemons
# only), as root, oversubscribed, and with no cross-memory attach (containers
# forbid it); the same for the benchmark (bench/gpu/device_bench.py).
MPI_ENV = {
    "OMPI_MCA_plm": "isolated",
    "OMPI_MCA_btl_vader_single_copy_mechanism": "none",
    "OMPI_MCA_rmaps_base_oversubscribe": "1",
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
}
DEFAULT_MPIRUN = "/usr/bin/orterun"
# A failure of the launcher itself (not of the stages it started: a stage's
# MPI_ABORT banner also names ORTE and mpirun): the program or its daemons
# could not start.
LAUNCHER_FAILED = re.compile(r"cannot start |plm_rsh_agent|ORTE was unable to reliably start|"
                             r"ORTE has lost communication")


class Fail(Exception):
    """A check failed for the reason given (recorded, never a traceback)."""


class NotRun(Exception):
    """A check that was not started, for the reason given."""


def save_results():
    """Writes results.json (atomically), so that it exists whatever happens later."""
    if not RESULTS_PATH:
        return
    with LOCK:
        try:
            os.makedirs(os.path.dirname(RESULTS_PATH), exist_ok=True)
            with open(RESULTS_PATH + ".tmp", "w") as f:
                json.dump(RESULTS, f, indent=1)
            os.replace(RESULTS_PATH + ".tmp", RESULTS_PATH)
        except OSError as e:
            print("warning: cannot write %s: %s" % (RESULTS_PATH, e), flush=True)


def record(kind, name, ok, detail, secs=None):
    with LOCK:
        if FINAL.is_set():
            return
        RESULTS.append({"kind": kind, "name": name, "ok": bool(ok), "detail": detail,
                        "seconds": None if secs is None else round(secs, 1)})
        print("%s %s %s: %s" % ("PASS" if ok else "FAIL", kind, name, detail), flush=True)
        save_results()


def recorded(kind, name):
    with LOCK:
        return any(r["kind"] == kind and r["name"] == name for r in RESULTS)


def unexpected(e):
    """One line for an exception that no check expected: its type, message and
    where in run.py it was raised."""
    where = [f for f in traceback.extract_tb(e.__traceback__)
             if os.path.basename(f.filename) == "run.py"]
    return "unexpected %s: %s%s" % (type(e).__name__, e,
                                    " (run.py line %d)" % where[-1].lineno if where else "")


def left():
    """Seconds to the deadline (infinite without one)."""
    return float("inf") if DEADLINE is None else DEADLINE - time.time()


def guarded(kind, name, fn, *args, min_left=0.0):
    """Runs one check, fn(notes, *args) -> (ok, detail), or None for nothing to
    report, and records it; returns ok (None when not run). A Fail or any other
    exception is the check's failure; `notes` (what fn learnt of the check so
    far, e.g. its tolerances) lead the detail in every outcome. With less than
    `min_left` seconds to the deadline, or after SIGTERM, it is not started."""
    if STOPPING.is_set():
        record(kind, name, False, "not run (interrupted)")
        return None
    if left() < min_left:
        record(kind, name, False, "not run (deadline)")
        return None
    notes = []
    t0 = time.time()
    try:
        res = fn(notes, *args)
        if res is None:
            return None
        ok, detail = res
    except NotRun as e:
        record(kind, name, False, "not run (%s)" % e)
        return None
    except Fail as e:
        ok, detail = False, str(e)
    except Exception as e:  # noqa: BLE001 - one check's error must not end the run
        ok, detail = False, unexpected(e)
    except KeyboardInterrupt:
        record(kind, name, False, "interrupted", time.time() - t0)
        raise
    if STOPPING.is_set() and not ok:
        detail = "interrupted; " + detail
    record(kind, name, ok, "; ".join(notes + [detail]), time.time() - t0)
    return ok


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise Fail("cannot read %s: %s" % (os.path.relpath(path, HERE), e))


def tail(path, n=1500):
    try:
        with open(path, errors="replace") as f:
            return f.read()[-n:]
    except OSError as e:
        return "(no log: %s)" % e


def install_mpi(notes, root=os.path.join(HERE, "mpi")):
    """Copies the files under ROOT to the same absolute paths, where none is."""
    if not os.path.isdir(root):
        raise Fail("the bundle has no mpi/ tree (%s)" % root)
    added = 0
    for d, _, files in os.walk(root):
        for f in files:
            src = os.path.join(d, f)
            dst = "/" + os.path.relpath(src, root)
            if os.path.lexists(dst):
                continue
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            if os.path.islink(src):
                os.symlink(os.readlink(src), dst)
            else:
                shutil.copy2(src, dst)
            added += 1
    ldconfig = shutil.which("ldconfig") or next(
        (p for p in ("/sbin/ldconfig", "/usr/sbin/ldconfig") if os.path.isfile(p)), None)
    try:
        if added and ldconfig:
            subprocess.run([ldconfig], check=False, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        notes.append("ldconfig: %s" % e)
    return True, "installed %d Open MPI file(s) the machine lacked" % added


def site_dirs():
    """site-packages folders of this interpreter and of the Python
    installations a GPU machine usually has (a venv under /opt)."""
    dirs = []
    try:
        import site
        dirs += site.getsitepackages() + [site.getusersitepackages()]
    except (ImportError, AttributeError):
        pass
    dirs += glob.glob("/opt/*/.venv/lib/python3*/site-packages") + \
        glob.glob("/opt/*/lib/python3*/site-packages") + \
        glob.glob("/usr/local/lib/python3*/dist-packages") + \
        glob.glob("/usr/local/lib/python3*/site-packages")
    out = []
    for d in dirs:
        d = os.path.realpath(d)
        if os.path.isdir(d) and d not in out:
            out.append(d)
    return out


def nvidia_lib_dirs():
    """Every nvidia/*/lib of the pip wheels (cuBLAS, cuDNN, NCCL, ...) and the
    CUDA toolkit's library folders that exist, in that order."""
    dirs = []
    for sp in site_dirs():
        dirs += sorted(glob.glob(os.path.join(sp, "nvidia", "*", "lib"))) + \
            sorted(glob.glob(os.path.join(sp, "nvidia", "*", "lib64")))
    dirs += [d for d in ("/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib")
             if os.path.isdir(d)]
    out = []
    for d in dirs:
        if d not in out:
            out.append(d)
    return out


def env_with(dirs):
    """os.environ with DIRS ahead of LD_LIBRARY_PATH and MPI_ENV where unset."""
    env = dict(os.environ)
    if dirs:
        env["LD_LIBRARY_PATH"] = ":".join(dirs + [env.get("LD_LIBRARY_PATH", "")]).rstrip(":")
    for k, v in MPI_ENV.items():
        env.setdefault(k, v)
    return env


def missing_libs(exe, env):
    """Sonames `ldd EXE` cannot find under ENV (empty when ldd cannot run)."""
    try:
        out = subprocess.run(["ldd", exe], capture_output=True, text=True, timeout=30,
                             env=env).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return sorted(set(re.findall(r"^\s*(\S+) => not found", out, re.M)))


def check_libs(exe, env):
    if not os.path.isfile(exe):
        raise Fail("%s: no such file" % os.path.relpath(exe, HERE))
    miss = missing_libs(exe, env)
    if miss:
        raise Fail("missing %s (ldd %s; LD_LIBRARY_PATH=%s)"
                   % (", ".join(miss), os.path.relpath(exe, HERE),
                      env.get("LD_LIBRARY_PATH", "")))


def mpirun_prefix(mpirun, env, single_copy="none"):
    cmd = [mpirun, "--oversubscribe", "--bind-to", "none",
           # single host, no ssh/rsh needed (Open MPI 4.1's rsh launcher
           # refuses to start even a local job without one)
           "--mca", "plm", "isolated",
           # Containers often forbid cross-process memory access (CMA):
           # none unless the caller knows better (pipeline_bench.py
           # --single-copy cma).
           "--mca", "btl_vader_single_copy_mechanism", single_copy]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    for k in ["LD_LIBRARY_PATH"] + [k for k in env if k.startswith("GPIPE_")]:
        if k in env:
            cmd += ["-x", k]
    return cmd


def kill_group(p):
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except OSError:
        pass
    try:
        p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass


def run_program(cmd, env, timeout, log):
    """Runs `cmd`, output to file `log`; returns (exit status, None for a
    timeout or SIGTERM, seconds). Raises Fail when it cannot start. The
    timeout is cut to the deadline."""
    t0 = time.time()
    timeout = max(1.0, min(timeout, left()))
    with LOCK:
        LOGS.append(log)
    try:
        with open(log, "w") as f:
            # Its own process group: a hang is ended with everything it started
            # (mpirun's ranks), and no child keeps run.py waiting.
            with LOCK:
                if STOPPING.is_set():
                    raise NotRun("interrupted")
                p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
                LIVE.add(p)
            try:
                rc = p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                kill_group(p)
                rc = None
            finally:
                with LOCK:
                    LIVE.discard(p)
            if STOPPING.is_set() and rc is not None and rc < 0:
                rc = None
    except OSError as e:
        raise Fail("cannot start %s: %s" % (cmd[0], e))
    return rc, time.time() - t0


def outcome(rc, secs):
    """'exit 1 after 0.2s', 'signal 11 after 0.2s' or 'killed after 300s (timeout)'."""
    if rc is None:
        return "killed after %.0fs (%s)" % (secs, "interrupted" if STOPPING.is_set()
                                            else "timeout")
    return "%s %d after %.1fs" % ("exit" if rc >= 0 else "signal", abs(rc), secs)


def launch(stage_cmds, env, timeout, log, mpirun, exes=None, single_copy="none"):
    """One stage: run it; several: one mpirun, one rank each. EXES (default
    each command's first word) are checked with ldd first."""
    for exe in exes or [sc[0] for sc in stage_cmds]:
        check_libs(exe, env)
    if len(stage_cmds) == 1:
        cmd = stage_cmds[0]
    else:
        cmd = mpirun_prefix(mpirun, env, single_copy)
        for i, sc in enumerate(stage_cmds):
            cmd += ([":"] if i else []) + ["-np", "1"] + sc
    return run_program(cmd, env, timeout, log)


def rel_err(a, b):
    a = np.asarray(a, np.float64).ravel()
    b = np.asarray(b, np.float64).ravel()
    return float(np.linalg.norm(a - b)) / max(float(np.linalg.norm(b)), 1e-12)


REFS = (("cpu", "CPU target"), ("torch", "torch"))


def tolerances(meta):
    """{ref: {"weights": tol, "losses": tol}} from case.json; a bundle of an
    older pack.py has one number for all."""
    tol = meta.get("tol")
    if isinstance(tol, (int, float)):
        return {r: {"weights": float(tol), "losses": float(tol)} for r, _ in REFS}
    try:
        return {r: {k: float(tol[r][k]) for k in ("weights", "losses")} for r, _ in REFS}
    except (KeyError, TypeError, ValueError):
        raise Fail("case.json: no tolerances (tol) for cpu and torch, weights and losses")


def describe_tol(tol):
    """'tol vs CPU target 1e-03, vs torch 5e-02' (weights and losses apart
    when they differ)."""
    parts = []
    for r, label in REFS:
        w, l = tol[r]["weights"], tol[r]["losses"]
        parts.append("vs %s %.0e" % (label, w) if w == l else
                     "vs %s %.0e (weights), %.0e (losses)" % (label, w, l))
    return "tol " + ", ".join(parts)


def read_losses(path, steps):
    """The per-step losses of a --log-json file: steps 1..N in order, numbers."""
    if not os.path.isfile(path):
        raise Fail("the run exited 0 but wrote no %s" % os.path.basename(path))
    losses = []
    with open(path) as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
                step, loss = r["step"], r["loss"]
            except (ValueError, KeyError, TypeError) as e:
                raise Fail("log.jsonl:%d: not a step record (%s): %r" % (i, e, line[:200]))
            if step != len(losses) + 1:
                raise Fail("log.jsonl:%d: step %r, expected %d" % (i, step, len(losses) + 1))
            losses.append(float(loss) if isinstance(loss, (int, float)) else float("nan"))
    if len(losses) != steps:
        raise Fail("log.jsonl: %d step(s) logged, %d expected" % (len(losses), steps))
    return losses


def case_meta(name):
    d = os.path.join(HERE, "cases", name)
    if not os.path.isdir(d):
        raise Fail("not in the bundle (no cases/%s)" % name)
    meta = read_json(os.path.join(d, "case.json"))
    pj = read_json(os.path.join(d, "cuda", "pipeline.json"))
    stages = pj.get("stages")
    if not isinstance(stages, list) or not stages:
        raise Fail("cuda/pipeline.json: no stages")
    return d, meta, stages


def stage_count(name):
    try:
        return len(case_meta(name)[2])
    except Fail:
        return 1


def run_case(notes, name, ctx):
    d, meta, stages = case_meta(name)
    tol = tolerances(meta)
    if not isinstance(meta.get("steps"), int):
        raise Fail("case.json: no steps")
    min_diff = meta.get("min_torch_diff")
    notes.append("%s, %s" % (meta.get("precision", "fp32"), describe_tol(tol)))
    # --data-parallel D: D x K ranks, rank r = stage r % K of replica r / K.
    replicas = int(read_json(os.path.join(d, "cuda", "pipeline.json")).get("data_parallel", 1))
    notes.append("K=%d" % len(stages) + (" D=%d" % replicas if replicas > 1 else ""))
    if len(stages) * replicas > 1 and ctx.get("no_mpi"):
        raise NotRun(ctx["no_mpi"])
    exp_path = os.path.join(d, "expected.npz")
    if not os.path.isfile(exp_path):
        raise Fail("expected.npz missing (the references)")
    if np is None:
        raise Fail("numpy is not installed: cannot compare")
    trained = os.path.join(d, "trained")
    shutil.rmtree(trained, ignore_errors=True)
    log_json = os.path.join(d, "log.jsonl")
    if os.path.exists(log_json):
        os.remove(log_json)  # not an earlier run's
    a = ctx["args"]
    cmds = []
    for st in stages:
        cmd = [os.path.join(d, "cuda", st["executable"]),
               "--data", os.path.join(d, "data"), "--steps", str(meta["steps"]),
               "--weights-in", os.path.join(d, "cuda", st.get("weights", "weights")),
               "--weights-out", trained, "--log-json", log_json,
               "--pipeline", os.path.join(d, "cuda", "pipeline.json"), "--quiet",
               "--comm-timeout", "%g" % a.comm_timeout]
        # the references' data order (check_training.py --shuffle SEED)
        if meta.get("shuffle") is not None:
            cmd += ["--shuffle", "--seed", str(int(meta["shuffle"]))]
        cmds.append(cmd)
    cmds = cmds * replicas
    rc, secs = launch(cmds, ctx["env"], a.timeout, os.path.join(d, "run.log"), ctx["mpirun"])
    if rc != 0:
        raise Fail("%s:\n%s" % (outcome(rc, secs), tail(os.path.join(d, "run.log"))))
    notes.append("%.1fs" % secs)
    exp = np.load(exp_path)
    problems = []
    worst = {r: (0.0, None) for r, _ in REFS}
    moved = False
    for st in stages:
        for p in st["params"]:
            f = os.path.join(trained, p["file"])
            if not os.path.isfile(f):
                problems.append("%s: not written (trained/%s)" % (p["name"], p["file"]))
                continue
            got = np.load(f)
            w0 = os.path.join(d, "cuda", st.get("weights", "weights"), p["file"])
            if os.path.isfile(w0):
                moved = moved or not np.array_equal(got, np.load(w0))
            for r, label in REFS:
                key = r + "/" + p["name"]
                if key not in exp.files:
                    problems.append("%s: no %s reference in expected.npz" % (p["name"], label))
                    continue
                ref = exp[key]
                e = rel_err(got, ref) if ref.shape == got.shape else float("inf")
                if not e <= tol[r]["weights"]:  # also NaN
                    problems.append("%s vs %s: rel_err %.3e > %.0e"
                                    % (p["name"], label, e, tol[r]["weights"]))
                if not e < worst[r][0] or worst[r][1] is None:
                    worst[r] = (e, p["name"])
    if not moved:
        problems.append("no trained weight differs from its initial value: it did not train")
    if min_diff is not None and worst["torch"][1] is not None and \
            worst["torch"][0] <= min_diff:
        problems.append("%s trained the same weights as torch's fp32 (worst rel_err %.3e <= "
                        "%.0e): the rounding did not happen"
                        % (meta.get("precision"), worst["torch"][0], min_diff))
    try:
        losses = read_losses(log_json, meta["steps"])
    except Fail as e:  # with the weights' problems
        problems.append(str(e))
        losses = None
    worst_loss = {}
    for r, label in REFS if losses is not None else ():
        ref = exp[r + "_losses"] if r + "_losses" in exp.files else None
        if ref is None or len(ref) != len(losses):
            problems.append("%s losses: %s" % (label, "not in expected.npz" if ref is None else
                                                "%d in expected.npz, %d logged"
                                                % (len(ref), len(losses))))
            continue
        worst_loss[r] = 0.0
        for s, (l, b) in enumerate(zip(losses, ref)):
            err = abs(l - b) if math.isfinite(l) else float("inf")
            worst_loss[r] = max(worst_loss[r], err)
            if not err <= tol[r]["losses"] * max(1.0, abs(b)):
                problems.append("step %d loss %r vs %s %r (tol %.0e)"
                                % (s + 1, l, label, float(b), tol[r]["losses"]))
                break
    detail = "worst rel_err %s; worst loss err %s" % (
        ", ".join("vs %s %.2e (%s)" % ((label,) + worst[r]) for r, label in REFS),
        ", ".join("vs %s %.2e" % (label, worst_loss[r]) for r, label in REFS
                  if r in worst_loss) or "-")
    if problems:
        detail += "; " + "; ".join(problems[:5])
        if len(problems) > 5:
            detail += " (%d more)" % (len(problems) - 5)
    return not problems, detail


def run_tool(notes, exe, flag, ctx, keep=None):
    """The probe or the kernel unit test: exit 0 passes. KEEP: also copy its
    whole output there."""
    p = os.path.join(HERE, "tools", exe)
    if not os.path.lexists(p):
        raise Fail("not in the bundle (pack.py without %s)" % flag)
    check_libs(p, ctx["env"])
    log = os.path.join(ctx["logdir"], exe + ".log")
    rc, secs = run_program([p], ctx["env"], ctx["args"].timeout, log)
    if keep:
        try:
            shutil.copy(log, keep)
        except OSError as e:
            notes.append("cannot copy the log to %s: %s" % (keep, e))
    out = tail(log, 10 ** 6).strip()
    if rc == 0:
        fails = [l for l in out.splitlines() if l.startswith("FAIL")]
        if fails:  # exit 0 with failures printed is a failure too
            return False, "exit 0 but %d FAIL line(s):\n%s" % (len(fails), "\n".join(fails[:20]))
        return True, out.splitlines()[-1] if out else "exit 0"
    fails = [l for l in out.splitlines() if l.startswith("FAIL")]
    return False, "%s; %s" % (outcome(rc, secs),
                              "\n".join(fails[:20]) or out[-1500:] or "no output")


def mpirun_check(notes, ctx):
    """The launcher's version, then a 2-rank job through it."""
    mpirun = ctx["mpirun"]
    try:
        v = subprocess.run([mpirun, "--version"], capture_output=True, text=True,
                           timeout=30, env=ctx["env"])
        notes.append(((v.stdout or v.stderr).strip().splitlines() or ["?"])[0])
    except (OSError, subprocess.SubprocessError) as e:
        raise Fail("cannot start %s: %s" % (mpirun, e))
    log = os.path.join(ctx["logdir"], "mpirun-smoke.log")
    cmd = mpirun_prefix(mpirun, ctx["env"]) + ["-np", "1", "/bin/echo", "rank-a", ":",
                                              "-np", "1", "/bin/echo", "rank-b"]
    rc, secs = run_program(cmd, ctx["env"], 60, log)
    text = tail(log, 20000)
    ok = rc == 0 and "rank-a" in text and "rank-b" in text
    return ok, "%s%s" % (outcome(rc, secs), "" if ok else ":\n" + text[-1500:])


def memcheck(notes, sub, ctx):
    san = ctx["sanitizer"]
    if not san:
        raise Fail("compute-sanitizer not found (PATH, /usr/local/cuda*/bin)")
    ex = os.path.join(HERE, "example")
    pj = read_json(os.path.join(ex, sub, "pipeline.json"))
    if len(pj["stages"]) > 1 and ctx.get("no_mpi"):
        raise NotRun(ctx["no_mpi"])
    exes = [os.path.join(ex, sub, st["executable"]) for st in pj["stages"]]
    cmds = [[san, "--tool", "memcheck", "--error-exitcode", "3",
             os.path.join(ex, sub, st["executable"]), "--data",
             os.path.join(ex, "data"), "--steps", "1", "--weights-in",
             os.path.join(ex, sub, "weights"), "--quiet",
             "--comm-timeout", "%g" % (2 * ctx["args"].comm_timeout)] for st in pj["stages"]]
    log = os.path.join(ctx["logdir"], "memcheck-%s.log" % sub)
    rc, secs = launch(cmds, ctx["env"], ctx["args"].timeout * 2, log, ctx["mpirun"], exes)
    text = tail(log, 10 ** 7)
    summary = re.findall(r"ERROR SUMMARY: \d+ errors?", text)
    ok = rc == 0 and bool(summary) and all(s.startswith("ERROR SUMMARY: 0 ") for s in summary)
    return ok, "%s, %s%s" % (outcome(rc, secs), ", ".join(summary) or "no summary",
                             "" if ok else "\n" + text[-1500:])


def bench(notes, ctx):
    """bench/gpu/device_bench.py run on the bundle's bench/ programs."""
    progs = os.path.join(HERE, "bench")
    if not os.path.isdir(progs):
        raise Fail("not in the bundle (pack.py without --bench)")
    a = ctx["args"]
    script = a.bench_script
    if not script or not os.path.isfile(script):
        raise Fail("no benchmark script (--bench-script: the repository's "
                   "bench/gpu/device_bench.py): %s" % script)
    budget = max(10.0, min(a.bench_time, left() - 5))
    log = os.path.join(ctx["logdir"], "bench.log")
    cmd = [sys.executable, script, "run", "--programs", progs, "--out", a.out, "--repeat", "2",
           "--timeout", "%g" % min(a.timeout, budget), "--deadline", "%g" % budget]
    rc, secs = run_program(cmd, ctx["env"], budget + 15, log)
    text = tail(log, 4000)
    table = [l for l in text.splitlines() if l.startswith("|")]
    return rc == 0, "%s%s" % (outcome(rc, secs), "\n" + "\n".join(table) if rc == 0 and table
                              else ":\n" + text[-1500:])


def run_cases(names, ctx, jobs):
    """Cases, `jobs` slots at a time (a K-stage case takes min(K, jobs))."""
    if jobs <= 1 or len(names) <= 1:
        for c in names:
            guarded("e2e", c, run_case, c, ctx, min_left=ctx["args"].min_left)
        return
    cond = threading.Condition()
    free = [jobs]
    threads = []

    def one(c, w):
        try:
            guarded("e2e", c, run_case, c, ctx, min_left=ctx["args"].min_left)
        finally:
            with cond:
                free[0] += w
                cond.notify_all()
    for c in names:
        w = min(stage_count(c), jobs)
        with cond:
            while free[0] < w and not STOPPING.is_set():
                cond.wait(0.5)
            if STOPPING.is_set():
                break
            free[0] -= w
        t = threading.Thread(target=one, args=(c, w), daemon=True)
        t.start()
        threads.append(t)
    for t in threads:
        while t.is_alive():
            t.join(0.5)


def read_order(path):
    """[(tier, case)] of a priority list ('TIER CASE' lines, # comments)."""
    out = []
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            m = re.fullmatch(r"(\d)\s+(\S+)", line)
            if m:
                out.append((int(m.group(1)), m.group(2)))
    return out


def run_all(a, cases):
    """Every check, in order; `cases` (a list) is filled in first."""
    ctx = {"args": a, "logdir": os.path.join(a.work, "logs"), "sanitizer": find_sanitizer()}
    os.makedirs(ctx["logdir"], exist_ok=True)
    if not a.no_install:
        guarded("setup", "Open MPI install", install_mpi)
    bundle = {}

    def read_bundle(notes):
        bundle.update(read_json(os.path.join(HERE, "bundle.json")))
    guarded("setup", "bundle.json", read_bundle)
    if "cases" not in bundle:  # still report every case there is
        cases_dir = os.path.join(HERE, "cases")
        bundle["cases"] = sorted(os.listdir(cases_dir)) if os.path.isdir(cases_dir) else []
    tiers = dict(bundle.get("tiers") or {})
    order = a.order or os.path.join(HERE, "priority.txt")
    if os.path.isfile(order):
        for t, c in read_order(order):
            tiers.setdefault(c, t)
        rank = {c: i for i, (_, c) in enumerate(read_order(order))}
    else:
        rank = {}
    want = {int(t) for t in a.tiers.split(",")}
    sel = [c for c in bundle["cases"] if re.search(a.cases, c) and tiers.get(c, 2) in want]
    sel.sort(key=lambda c: (tiers.get(c, 2), rank.get(c, len(rank))))
    cases.extend(sel)

    PLANNED.extend([("setup", "library path"), ("probe", "gpipe_cuda_probe"),
                    ("mpirun", "2-rank smoke"), ("kernels", "gpipe_runtime_cuda_tests")]
                   + [("e2e", c) for c in cases]
                   + ([] if a.skip_memcheck else [("memcheck", "example k1")])
                   + ([] if a.skip_bench else [("bench", "device_bench")])
                   + ([] if a.skip_memcheck else [("memcheck", "example k2")]))
    dirs = nvidia_lib_dirs()
    ctx["env"] = env_with(dirs)
    record("setup", "library path", True, "%d folder(s) ahead of LD_LIBRARY_PATH: %s"
           % (len(dirs), ":".join(dirs) or "-"))
    ctx["mpirun"] = a.mpirun or (DEFAULT_MPIRUN if os.path.exists(DEFAULT_MPIRUN) else
                                 shutil.which("orterun") or shutil.which("mpirun") or
                                 DEFAULT_MPIRUN)
    probe = guarded("probe", "gpipe_cuda_probe", run_tool, "gpipe_cuda_probe", "--probe", ctx)
    if not probe:
        # Nothing that needs a GPU can pass: say so once per check, quickly.
        why = "the GPU probe failed" if probe is False else "the probe was not run"
        for kind, name in PLANNED[2:]:
            record(kind, name, False, "not run (%s)" % why)
        return
    if not guarded("mpirun", "2-rank smoke", mpirun_check, ctx):
        ctx["no_mpi"] = "the 2-rank mpirun smoke job failed"
    guarded("kernels", "gpipe_runtime_cuda_tests", run_tool, "gpipe_runtime_cuda_tests",
            "--runtime-tests", ctx, os.path.join(a.out, "kernels.log"), min_left=a.min_left)
    for t in (0, 1, 2):
        names = [c for c in cases if tiers.get(c, 2) == t]
        run_cases(names, ctx, 1 if t == 0 else a.jobs)
        if t == 0 and not ctx.get("no_mpi"):
            # The tier-0 pipeline could not launch: the launcher is broken.
            for r in RESULTS:
                if r["kind"] == "e2e" and r["name"] in names and \
                        LAUNCHER_FAILED.search(r["detail"]) and \
                        stage_count(r["name"]) > 1 and not r["ok"]:
                    ctx["no_mpi"] = "the tier-0 pipeline %s did not launch" % r["name"]
        if t == 1:
            if not a.skip_memcheck:
                guarded("memcheck", "example k1", memcheck, "k1", ctx, min_left=a.min_left)
            if not a.skip_bench:
                guarded("bench", "device_bench", bench, ctx, min_left=a.min_left)
            if not a.skip_memcheck:
                guarded("memcheck", "example k2", memcheck, "k2", ctx, min_left=a.min_left)


def find_sanitizer():
    for c in [shutil.which("compute-sanitizer")] + \
            sorted(glob.glob("/usr/local/cuda*/bin/compute-sanitizer"), reverse=True) + \
            sorted(glob.glob("/opt/nvidia/*/compute-sanitizer/compute-sanitizer")):
        if c and os.path.isfile(c):
            return c
    return None


def write_logs(out, work):
    """OUT/logs.tgz: every program's log and the cases' run logs (at most 4 MiB
    each, their ends)."""
    try:
        with tarfile.open(os.path.join(out, "logs.tgz.tmp"), "w:gz") as t:
            seen = set()
            for p in list(LOGS):
                if p in seen or not os.path.isfile(p):
                    continue
                seen.add(p)
                rel = os.path.relpath(p, HERE) if p.startswith(HERE + os.sep) \
                    else os.path.relpath(p, work)
                size = os.path.getsize(p)
                with open(p, "rb") as f:
                    if size > 4 << 20:
                        f.seek(size - (4 << 20))
                    data = f.read()
                info = tarfile.TarInfo(rel)
                info.size = len(data)
                info.mtime = int(time.time())
                t.addfile(info, io.BytesIO(data))
        os.replace(os.path.join(out, "logs.tgz.tmp"), os.path.join(out, "logs.tgz"))
    except OSError as e:
        print("warning: cannot write logs.tgz: %s" % e, flush=True)


def main():
    global RESULTS_PATH, DEADLINE
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", default="", help="regex over the bundle's case names")
    ap.add_argument("--tiers", default="0,1,2", help="priority tiers to run (default all)")
    ap.add_argument("--order", default=None,
                    help="priority list ('TIER CASE' lines; default the bundle's priority.txt)")
    ap.add_argument("--jobs", type=int, default=4, help="tier 1 and 2 cases at a time")
    ap.add_argument("--no-install", action="store_true",
                    help="do not install the bundle's Open MPI")
    ap.add_argument("--mpirun", default=None,
                    help="the launcher of K > 1 stages (default /usr/bin/orterun, installed "
                         "from the bundle)")
    ap.add_argument("--skip-memcheck", action="store_true")
    ap.add_argument("--skip-bench", action="store_true")
    ap.add_argument("--bench-script", default=None,
                    help="bench/gpu/device_bench.py of the repository (the bench check)")
    ap.add_argument("--bench-time", type=float, default=150,
                    help="seconds the benchmark may take at most")
    ap.add_argument("--timeout", type=float, default=90,
                    help="seconds per program (memcheck: 2x)")
    ap.add_argument("--comm-timeout", type=float, default=30,
                    help="the stages' --comm-timeout (seconds without transfer progress)")
    ap.add_argument("--deadline", type=float, default=None,
                    help="seconds from the start after which nothing runs")
    ap.add_argument("--min-left", type=float, default=15,
                    help="a check starts only with this many seconds left before --deadline")
    ap.add_argument("--out", default=os.environ.get("OUT") or HERE,
                    help="directory of results.json, kernels.log, logs.tgz, bench.txt "
                         "(default $OUT, else the bundle's)")
    ap.add_argument("--work", default=None,
                    help="directory of the logs while running (default BUNDLE/work)")
    a = ap.parse_args()
    try:
        re.compile(a.cases)
        if not {int(t) for t in a.tiers.split(",")} <= {0, 1, 2}:
            raise ValueError
    except (re.error, ValueError) as e:
        ap.error("--cases must be a regex, --tiers digits 0-2: %s" % e)
    if a.jobs < 1 or a.timeout <= 0 or a.comm_timeout <= 0:
        ap.error("--jobs, --timeout and --comm-timeout must be positive")
    a.out = os.path.abspath(a.out)
    a.work = os.path.abspath(a.work or os.path.join(HERE, "work"))
    os.makedirs(a.out, exist_ok=True)
    RESULTS_PATH = os.path.join(a.out, "results.json")
    if a.deadline is not None:
        DEADLINE = T0 + a.deadline

    def terminated(signum, frame):  # e.g. a time limit: kill, record, end
        STOPPING.set()
        with LOCK:
            for p in list(LIVE):
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except OSError:
                    pass
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, terminated)
    cases = []
    failed = []
    try:
        run_all(a, cases)
    except KeyboardInterrupt:
        STOPPING.set()
        print("interrupted", flush=True)
    except Exception as e:  # noqa: BLE001 - the summary and results.json still come
        record("run", "run.py", False, unexpected(e))
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        STOPPING.set()
        with LOCK:
            for p in list(LIVE):
                kill_group(p)
            done = {(r["kind"], r["name"]) for r in RESULTS}
            why = "deadline" if DEADLINE is not None and left() <= a.min_left else "interrupted"
            for k, n in PLANNED + [("e2e", c) for c in cases]:
                if (k, n) not in done:
                    done.add((k, n))
                    RESULTS.append({"kind": k, "name": n, "ok": False,
                                    "detail": "not run (%s)" % why, "seconds": None})
            FINAL.set()
        save_results()
        write_logs(a.out, a.work)
        failed = [r for r in RESULTS if not r["ok"]]
        print("\n%d check(s), %d failed: %s" % (len(RESULTS), len(failed),
                                               ", ".join(r["kind"] + " " + r["name"]
                                                         for r in failed) or "none"),
              flush=True)
        print("results: %s" % RESULTS_PATH, flush=True)
    return min(len(failed), 125)


if __name__ == "__main__":
    sys.exit(main())
