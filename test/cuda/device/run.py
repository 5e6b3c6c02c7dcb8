#!/usr/bin/env python3
"""Runs a bundle made by pack.py on a GPU machine (needs python3 + numpy).

  python3 run.py [--cases REGEX] [--no-install] [--skip-memcheck] [--out DIR]

From the bundle's directory:
  1. installs the bundle's Open MPI files where the machine has none (a file
     that exists is never replaced), so that multi-stage programs can launch;
  2. finds libcublasLt / libnccl if the loader does not (CUDA toolkit, or the
     nvidia-* Python packages) and adds them to LD_LIBRARY_PATH;
  3. runs the GPU probe and the CUDA kernel unit test;
  4. trains every case's CUDA stage programs (mpirun for K > 1: on one GPU the
     stages share it, host-staged) and compares the trained weights and the
     per-step losses with the CPU target's program and PyTorch, both trained
     on the packing machine: relative L2 error <= tol (1e-4) per weight,
     |loss - loss_ref| <= tol * max(1, |loss_ref|) per step;
  5. runs compute-sanitizer memcheck on one step of the example as 1 stage
     and as 2 stages x 2 micro-batches.
Prints one line per check and a summary; writes results.json to --out (default
$OUT when set). Exit status: the number of failures (at most 125).
"""
import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = []


def record(kind, name, ok, detail):
    RESULTS.append({"kind": kind, "name": name, "ok": bool(ok), "detail": detail})
    print("%s %s %s: %s" % ("PASS" if ok else "FAIL", kind, name, detail), flush=True)


def install_mpi(root=os.path.join(HERE, "mpi")):
    """Copies the files under ROOT to the same absolute paths, where none is."""
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
    subprocess.run(["ldconfig"], check=False)
    print("installed %d Open MPI file(s) the machine lacked" % added, flush=True)


def library_path(exe):
    """LD_LIBRARY_PATH entries for the libraries `exe` does not find."""
    out = subprocess.run(["ldd", exe], capture_output=True, text=True).stdout
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


def mpirun_prefix(env):
    cmd = ["mpirun", "--oversubscribe", "--bind-to", "none",
           # Containers often forbid cross-process memory access (CMA).
           "--mca", "btl_vader_single_copy_mechanism", "none"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    if "LD_LIBRARY_PATH" in env:
        cmd += ["-x", "LD_LIBRARY_PATH"]
    return cmd


def launch(stage_cmds, env, timeout, log):
    """One stage: run it; several: one mpirun, one rank each."""
    if len(stage_cmds) == 1:
        cmd = stage_cmds[0]
    else:
        cmd = mpirun_prefix(env)
        for i, sc in enumerate(stage_cmds):
            cmd += ([":"] if i else []) + ["-np", "1"] + sc
    t0 = time.time()
    with open(log, "w") as f:
        try:
            p = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env,
                               timeout=timeout)
            rc = p.returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    return rc, time.time() - t0


def rel_err(a, b):
    a = np.asarray(a, np.float64).ravel()
    b = np.asarray(b, np.float64).ravel()
    return float(np.linalg.norm(a - b)) / max(float(np.linalg.norm(b)), 1e-12)


def run_case(name, env, timeout):
    d = os.path.join(HERE, "cases", name)
    meta = json.load(open(os.path.join(d, "case.json")))
    pj = json.load(open(os.path.join(d, "cuda", "pipeline.json")))
    exp = np.load(os.path.join(d, "expected.npz"))
    tol = meta["tol"]
    trained = os.path.join(d, "trained")
    shutil.rmtree(trained, ignore_errors=True)
    log_json = os.path.join(d, "log.jsonl")
    cmds = []
    for st in pj["stages"]:
        cmds.append([os.path.join(d, "cuda", st["executable"]),
                     "--data", os.path.join(d, "data"), "--steps", str(meta["steps"]),
                     "--weights-in", os.path.join(d, "cuda", "weights"),
                     "--weights-out", trained, "--log-json", log_json,
                     "--pipeline", os.path.join(d, "cuda", "pipeline.json"), "--quiet"])
    rc, secs = launch(cmds, env, timeout, os.path.join(d, "run.log"))
    if rc != 0:
        tail = open(os.path.join(d, "run.log")).read()[-1500:]
        record("e2e", name, False, "exit %s after %.1fs:\n%s" % (rc, secs, tail))
        return
    worst_cpu = worst_torch = (0.0, None)
    problems = []
    for st in pj["stages"]:
        for p in st["params"]:
            got = np.load(os.path.join(trained, p["file"]))
            for key, worst_name in (("cpu/", "cpu"), ("torch/", "torch")):
                ref = exp[key + p["name"]]
                e = rel_err(got, ref) if ref.shape == got.shape else float("inf")
                if e > tol or not np.isfinite(e):
                    problems.append("%s vs %s: %.3e" % (p["name"], worst_name, e))
                if worst_name == "cpu" and e >= worst_cpu[0]:
                    worst_cpu = (e, p["name"])
                if worst_name == "torch" and e >= worst_torch[0]:
                    worst_torch = (e, p["name"])
    losses = [json.loads(l)["loss"] for l in open(log_json) if l.strip()]
    worst_loss = 0.0
    for ref_key in ("cpu_losses", "torch_losses"):
        ref = exp[ref_key]
        if len(losses) != len(ref):
            problems.append("%d losses logged, %d expected" % (len(losses), len(ref)))
            continue
        for s, (a, b) in enumerate(zip(losses, ref)):
            err = abs(a - b) if a is not None else float("inf")
            worst_loss = max(worst_loss, err)
            if not err <= tol * max(1.0, abs(b)):
                problems.append("step %d loss %r vs %s %r" % (s + 1, a, ref_key[:-7], b))
                break
    detail = ("K=%d, %.1fs; worst rel_err vs CPU target %.2e (%s), vs torch %.2e (%s); "
              "worst loss err %.2e" % (len(pj["stages"]), secs, worst_cpu[0], worst_cpu[1],
                                        worst_torch[0], worst_torch[1], worst_loss))
    if problems:
        detail += "; " + "; ".join(problems[:5])
    record("e2e", name, not problems, detail)


def memcheck(env, timeout):
    san = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
    if not os.path.exists(san):
        record("memcheck", "example", False, "compute-sanitizer not found")
        return
    ex = os.path.join(HERE, "example")
    for sub in ("k1", "k2"):
        pj = json.load(open(os.path.join(ex, sub, "pipeline.json")))
        cmds = [[san, "--tool", "memcheck", "--error-exitcode", "3",
                 os.path.join(ex, sub, st["executable"]), "--data",
                 os.path.join(ex, "data"), "--steps", "1", "--weights-in",
                 os.path.join(ex, sub, "weights"), "--quiet"] for st in pj["stages"]]
        log = os.path.join(ex, sub + "-memcheck.log")
        rc, secs = launch(cmds, env, timeout, log)
        text = open(log).read()
        summary = re.findall(r"ERROR SUMMARY: \d+ errors?", text)
        record("memcheck", "example " + sub, rc == 0 and summary and
               all(s.startswith("ERROR SUMMARY: 0 ") for s in summary),
               "exit %s, %s%s" % (rc, ", ".join(summary) or "no summary",
                                  "" if rc == 0 else "\n" + text[-1500:]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="")
    ap.add_argument("--no-install", action="store_true")
    ap.add_argument("--skip-memcheck", action="store_true")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--out", default=os.environ.get("OUT"))
    a = ap.parse_args()
    if not a.no_install:
        install_mpi()
    bundle = json.load(open(os.path.join(HERE, "bundle.json")))
    cases = [c for c in bundle["cases"] if re.search(a.cases, c)]
    any_exe = os.path.join(HERE, "example", "k1", "stage0")
    env = env_with(library_path(any_exe))
    tools = os.path.join(HERE, "tools")
    for exe, kind in (("gpipe_cuda_probe", "probe"), ("gpipe_runtime_cuda_tests", "kernels")):
        p = os.path.join(tools, exe)
        if os.path.exists(p):
            r = subprocess.run([p], capture_output=True, text=True, env=env, timeout=a.timeout)
            out = (r.stdout + r.stderr).strip()
            fails = [l for l in out.splitlines() if l.startswith("FAIL")]
            record(kind, exe, r.returncode == 0,
                   out.splitlines()[-1] if r.returncode == 0 and out else
                   "exit %d; %s" % (r.returncode, "\n".join(fails[:20]) or out[-1500:]))
    for c in cases:
        run_case(c, env, a.timeout)
    if not a.skip_memcheck:
        memcheck(env, a.timeout * 4)
    failed = [r for r in RESULTS if not r["ok"]]
    print("\n%d check(s), %d failed: %s" % (len(RESULTS), len(failed),
                                           ", ".join(r["kind"] + " " + r["name"]
                                                     for r in failed) or "none"))
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "results.json"), "w") as f:
            json.dump(RESULTS, f, indent=1)
    return min(len(failed), 125)


if __name__ == "__main__":
    sys.exit(main())
