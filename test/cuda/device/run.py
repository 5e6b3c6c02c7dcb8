#!/usr/bin/env python3
"""Runs a bundle made by pack.py on a GPU machine (needs python3 + numpy).

  python3 run.py [--cases REGEX] [--no-install] [--mpirun PATH] [--skip-memcheck]
                 [--timeout SECONDS] [--out DIR]

From the bundle's directory:
  1. installs the bundle's Open MPI files where the machine has none (a file
     that exists is never replaced), so that multi-stage programs can launch;
  2. finds libcublasLt / libnccl if the loader does not (CUDA toolkit, or the
     nvidia-* Python packages) and adds them to LD_LIBRARY_PATH;
  3. runs the GPU probe and the CUDA kernel unit test;
  4. trains every case's CUDA stage programs (--mpirun, default mpirun on PATH,
     for K > 1: on one GPU the stages share it, host-staged) and compares the
     trained weights and the per-step losses with the CPU target's program and
     PyTorch, both trained on the packing machine, at the case's tolerances
     (case.json, those of check_training.py --target cuda: 1e-4 for fp32; for
     bf16 1e-3 against the CPU target's bf16 emulation and 5e-2 against torch's
     fp32 training, from which the weights must also differ by more than 1e-6):
     relative L2 error <= tol per weight, |loss - loss_ref| <= tol *
     max(1, |loss_ref|) per step; each case's line names the tolerances;
  5. runs compute-sanitizer memcheck on one step of the example as 1 stage
     and as 2 stages x 2 micro-batches.
Prints one line per check and a summary. Whatever goes wrong in a check (a
program that cannot start, such as a missing mpirun, a hang past --timeout, a
missing file, an unexpected error) is that check's failure, with its reason;
the run goes on, and never ends in a traceback. results.json (every check:
kind, name, ok, detail) is written to --out (default $OUT when set, else the
bundle's directory) after each check and at the end; a case that was not run
(interrupted) is listed as failed. Exit status: the number of failures (at
most 125); 2 for bad arguments.
"""
import argparse
import glob
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import traceback

try:
    import numpy as np
except ImportError:  # each comparison then fails with the reason
    np = None

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = []
RESULTS_PATH = None


class Fail(Exception):
    """A check failed for the reason given (recorded, never a traceback)."""


def save_results():
    """Writes results.json (atomically), so that it exists whatever happens later."""
    if not RESULTS_PATH:
        return
    try:
        os.makedirs(os.path.dirname(RESULTS_PATH), exist_ok=True)
        with open(RESULTS_PATH + ".tmp", "w") as f:
            json.dump(RESULTS, f, indent=1)
        os.replace(RESULTS_PATH + ".tmp", RESULTS_PATH)
    except OSError as e:
        print("warning: cannot write %s: %s" % (RESULTS_PATH, e), flush=True)


def record(kind, name, ok, detail):
    RESULTS.append({"kind": kind, "name": name, "ok": bool(ok), "detail": detail})
    print("%s %s %s: %s" % ("PASS" if ok else "FAIL", kind, name, detail), flush=True)
    save_results()


def unexpected(e):
    """One line for an exception that no check expected: its type, message and
    where in run.py it was raised."""
    where = [f for f in traceback.extract_tb(e.__traceback__)
             if os.path.basename(f.filename) == "run.py"]
    return "unexpected %s: %s%s" % (type(e).__name__, e,
                                    " (run.py line %d)" % where[-1].lineno if where else "")


def guarded(kind, name, fn, *args):
    """Runs one check, fn(notes, *args) -> (ok, detail), or None for nothing to
    report, and records it. A Fail or any other exception is the check's failure;
    `notes` (what fn learnt of the check so far, e.g. its tolerances) lead the
    detail in every outcome."""
    notes = []
    try:
        res = fn(notes, *args)
        if res is None:
            return
        ok, detail = res
    except Fail as e:
        ok, detail = False, str(e)
    except Exception as e:  # noqa: BLE001 - one check's error must not end the run
        ok, detail = False, unexpected(e)
    except KeyboardInterrupt:
        record(kind, name, False, "interrupted")
        raise
    record(kind, name, ok, "; ".join(notes + [detail]))


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
        raise Fail("the bundle has no mpi/ tree")
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
    try:
        subprocess.run(["ldconfig"], check=False, timeout=120)
    except (OSError, subprocess.SubprocessError) as e:
        print("warning: ldconfig: %s" % e, flush=True)
    print("installed %d Open MPI file(s) the machine lacked" % added, flush=True)


def library_path(exe):
    """LD_LIBRARY_PATH entries for the libraries `exe` does not find."""
    try:
        out = subprocess.run(["ldd", exe], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as e:
        print("warning: ldd %s: %s" % (exe, e), flush=True)
        return []
    missing = re.findall(r"(\S+) => not found", out)
    dirs = []
    for lib in missing:
        cands = glob.glob("/usr/local/cuda*/lib*/" + lib) + \
            glob.glob("/usr/local/cuda*/targets/*/lib/" + lib) + \
            glob.glob("/opt/**/nvidia/*/lib/" + lib, recursive=True) + \
            glob.glob("/usr/**/nvidia/*/lib/" + lib, recursive=True)
        if cands:
            d = os.path.dirname(cands[0])
            if d not in dirs:
                dirs.append(d)
        else:
            print("warning: %s needs %s, found nowhere" % (exe, lib), flush=True)
    return dirs


def env_with(dirs):
    env = dict(os.environ)
    if dirs:
        env["LD_LIBRARY_PATH"] = ":".join(dirs + [env.get("LD_LIBRARY_PATH", "")]).rstrip(":")
    return env


def mpirun_prefix(mpirun, env):
    cmd = [mpirun, "--oversubscribe", "--bind-to", "none",
           # Containers often forbid cross-process memory access (CMA).
           "--mca", "btl_vader_single_copy_mechanism", "none"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    if "LD_LIBRARY_PATH" in env:
        cmd += ["-x", "LD_LIBRARY_PATH"]
    return cmd


def kill_group(p):
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except OSError:
        pass
    p.wait()


def run_program(cmd, env, timeout, log):
    """Runs `cmd`, output to file `log`; returns (exit status, None for a
    timeout, seconds). Raises Fail when it cannot start."""
    t0 = time.time()
    try:
        with open(log, "w") as f:
            # Its own process group: a hang is ended with everything it started
            # (mpirun's ranks), and no child keeps run.py waiting.
            p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env,
                                 start_new_session=True)
            try:
                rc = p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                kill_group(p)
                rc = None
            except BaseException:  # interrupted: leave nothing running
                kill_group(p)
                raise
    except OSError as e:
        raise Fail("cannot start %s: %s" % (cmd[0], e))
    return rc, time.time() - t0


def outcome(rc, secs):
    """'exit 1 after 0.2s', 'signal 11 after 0.2s' or 'killed after 300s (timeout)'."""
    if rc is None:
        return "killed after %.0fs (timeout)" % secs
    return "%s %d after %.1fs" % ("exit" if rc >= 0 else "signal", abs(rc), secs)


def launch(stage_cmds, env, timeout, log, mpirun):
    """One stage: run it; several: one mpirun, one rank each."""
    if len(stage_cmds) == 1:
        cmd = stage_cmds[0]
    else:
        cmd = mpirun_prefix(mpirun, env)
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


def run_case(notes, name, env, a):
    d = os.path.join(HERE, "cases", name)
    if not os.path.isdir(d):
        raise Fail("not in the bundle (no cases/%s)" % name)
    meta = read_json(os.path.join(d, "case.json"))
    tol = tolerances(meta)
    if not isinstance(meta.get("steps"), int):
        raise Fail("case.json: no steps")
    min_diff = meta.get("min_torch_diff")
    notes.append("%s, %s" % (meta.get("precision", "fp32"), describe_tol(tol)))
    pj = read_json(os.path.join(d, "cuda", "pipeline.json"))
    stages = pj.get("stages")
    if not isinstance(stages, list) or not stages:
        raise Fail("cuda/pipeline.json: no stages")
    notes.append("K=%d" % len(stages))
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
    cmds = []
    for st in stages:
        cmds.append([os.path.join(d, "cuda", st["executable"]),
                     "--data", os.path.join(d, "data"), "--steps", str(meta["steps"]),
                     "--weights-in", os.path.join(d, "cuda", st.get("weights", "weights")),
                     "--weights-out", trained, "--log-json", log_json,
                     "--pipeline", os.path.join(d, "cuda", "pipeline.json"), "--quiet"])
    rc, secs = launch(cmds, env, a.timeout, os.path.join(d, "run.log"), a.mpirun)
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


def run_tool(notes, exe, flag, env, timeout):
    """The probe or the kernel unit test: exit 0 passes."""
    p = os.path.join(HERE, "tools", exe)
    if not os.path.exists(p):
        raise Fail("not in the bundle (pack.py without %s)" % flag)
    log = p + ".log"
    rc, secs = run_program([p], env, timeout, log)
    out = tail(log, 200000).strip()
    if rc == 0:
        return True, out.splitlines()[-1] if out else "exit 0"
    fails = [l for l in out.splitlines() if l.startswith("FAIL")]
    return False, "%s; %s" % (outcome(rc, secs),
                              "\n".join(fails[:20]) or out[-1500:] or "no output")


def memcheck(notes, sub, san, env, a):
    if not san:
        raise Fail("compute-sanitizer not found (PATH, /usr/local/cuda/bin)")
    ex = os.path.join(HERE, "example")
    pj = read_json(os.path.join(ex, sub, "pipeline.json"))
    cmds = [[san, "--tool", "memcheck", "--error-exitcode", "3",
             os.path.join(ex, sub, st["executable"]), "--data",
             os.path.join(ex, "data"), "--steps", "1", "--weights-in",
             os.path.join(ex, sub, "weights"), "--quiet"] for st in pj["stages"]]
    log = os.path.join(ex, sub + "-memcheck.log")
    rc, secs = launch(cmds, env, a.timeout * 4, log, a.mpirun)
    text = tail(log, 10 ** 7)
    summary = re.findall(r"ERROR SUMMARY: \d+ errors?", text)
    ok = rc == 0 and bool(summary) and all(s.startswith("ERROR SUMMARY: 0 ") for s in summary)
    return ok, "%s, %s%s" % (outcome(rc, secs), ", ".join(summary) or "no summary",
                             "" if ok else "\n" + text[-1500:])


def run_all(a, cases):
    """Every check, in order; `cases` (a list) is filled in first."""
    if not a.no_install:
        guarded("setup", "Open MPI install", install_mpi)
    bundle = {}

    def read_bundle(notes):
        bundle.update(read_json(os.path.join(HERE, "bundle.json")))
    guarded("setup", "bundle.json", read_bundle)
    if "cases" not in bundle:  # still report every case there is
        cases_dir = os.path.join(HERE, "cases")
        bundle["cases"] = sorted(os.listdir(cases_dir)) if os.path.isdir(cases_dir) else []
    cases.extend(c for c in bundle["cases"] if re.search(a.cases, c))
    env = env_with(library_path(os.path.join(HERE, "example", "k1", "stage0")))
    guarded("probe", "gpipe_cuda_probe", run_tool, "gpipe_cuda_probe", "--probe", env,
            a.timeout)
    guarded("kernels", "gpipe_runtime_cuda_tests", run_tool, "gpipe_runtime_cuda_tests",
            "--runtime-tests", env, a.timeout)
    for c in cases:
        guarded("e2e", c, run_case, c, env, a)
    if not a.skip_memcheck:
        san = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
        for sub in ("k1", "k2"):
            guarded("memcheck", "example " + sub, memcheck, sub,
                    san if os.path.exists(san) else None, env, a)


def main():
    global RESULTS_PATH
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", default="", help="regex over the bundle's case names")
    ap.add_argument("--no-install", action="store_true",
                    help="do not install the bundle's Open MPI")
    ap.add_argument("--mpirun", default="mpirun",
                    help="the mpirun that launches K > 1 stages (default: mpirun on PATH)")
    ap.add_argument("--skip-memcheck", action="store_true")
    ap.add_argument("--timeout", type=float, default=300,
                    help="seconds per program (memcheck: 4x)")
    ap.add_argument("--out", default=os.environ.get("OUT") or HERE,
                    help="directory of results.json (default $OUT, else the bundle's)")
    a = ap.parse_args()
    try:
        re.compile(a.cases)
    except re.error as e:
        ap.error("--cases: %s" % e)
    RESULTS_PATH = os.path.join(os.path.abspath(a.out), "results.json")

    def terminated(signum, frame):  # e.g. a time limit: end as interrupted
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, terminated)
    cases = []
    try:
        run_all(a, cases)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    except Exception as e:  # noqa: BLE001 - the summary and results.json still come
        record("run", "run.py", False, unexpected(e))
    finally:
        done = {r["name"] for r in RESULTS if r["kind"] == "e2e"}
        for c in cases:
            if c not in done:
                RESULTS.append({"kind": "e2e", "name": c, "ok": False, "detail": "not run"})
        save_results()
        failed = [r for r in RESULTS if not r["ok"]]
        print("\n%d check(s), %d failed: %s" % (len(RESULTS), len(failed),
                                               ", ".join(r["kind"] + " " + r["name"]
                                                         for r in failed) or "none"),
              flush=True)
        print("results: %s" % RESULTS_PATH, flush=True)
    return min(len(failed), 125)


if __name__ == "__main__":
    sys.exit(main())
