#!/usr/bin/env python3
"""Faults end the run, named, never hang: gpipe-run over a 4-stage toy
pipeline (toy_stage.cpp) whose stages are killed (SIGKILL, each in turn, and
mpirun), stopped (SIGSTOP), hung, or see a NaN loss. Each must end gpipe-run
non-zero within seconds, naming the stage (and its host and pid), with no
stage process left behind.

usage: check_faults.py --gpipe-run BIN --pipe DIR --work DIR
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np

K, D, B, SAMPLES = 4, 4, 8, 20
LONG = "100000000"  # steps: runs until killed
failures = []


def check(cond, what, detail=""):
    if not cond:
        failures.append(what)
        print("FAIL: %s\n%s" % (what, detail), flush=True)


def make_pipeline(pipe, work):
    out = os.path.join(work, "out4")
    os.makedirs(os.path.join(out, "weights"))
    rng = np.random.default_rng(3)
    stages = []
    for s in range(K):
        os.symlink(os.path.join(pipe, "stage%d" % s),
                   os.path.join(out, "stage%d" % s))
        np.save(os.path.join(out, "weights", "layer%d.w.npy" % s),
                rng.uniform(0.5, 1.5, D).astype(np.float32))
        stages.append({"index": s, "rank": s, "executable": "stage%d" % s,
                       "weights": "weights",
                       "params": [{"name": "layer%d.w" % s,
                                   "file": "layer%d.w.npy" % s,
                                   "shape": [D]}],
                       "schedule": ["F0", "F1", "B1", "B0", "U"]})
    desc = {"format": "gpipe-pipeline", "version": 2, "model": "model.onnx",
            "source_model": os.path.join(out, "src.onnx"), "target": "cpu",
            "batch_size": B, "microbatches": 2, "loss_stage": K - 1,
            "stages": stages}
    with open(os.path.join(out, "pipeline.json"), "w") as f:
        json.dump(desc, f)
    for name, nan_sample in (("data", None), ("data_nan", 13)):
        d = os.path.join(work, name)
        os.makedirs(d)
        x = rng.uniform(-2, 2, (SAMPLES, D)).astype(np.float32)
        if nan_sample is not None:
            x[nan_sample, 1] = np.nan  # mini-batch 1: step 2
        np.save(os.path.join(d, "x.npy"), x)
        np.save(os.path.join(d, "y.npy"),
                rng.integers(0, D, SAMPLES).astype(np.int64))
    return out


def argv0(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().split(b"\0")[0].decode()
    except OSError:
        return ""


def children(pid):
    r = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True,
                       text=True)
    return [int(p) for p in r.stdout.split()]


def stages_left(out):
    r = subprocess.run(["pgrep", "-f", out + "/stage"], capture_output=True,
                       text=True)
    return [int(p) for p in r.stdout.split()]


def start(gr, out, data, *extra, env=None):
    """gpipe-run mid-run: returns (process, mpirun pid, {stage: pid})."""
    p = subprocess.Popen([gr, out, "--data", data, "--quiet"] + list(extra),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=dict(os.environ, **(env or {})))
    deadline = time.time() + 20
    mpirun, stages = None, {}
    while time.time() < deadline and len(stages) < K:
        time.sleep(0.1)
        kids = children(p.pid)
        if not kids:
            continue
        mpirun = kids[0]
        stages = {}
        for c in children(mpirun):
            a = argv0(c)
            for s in range(K):
                if a == os.path.join(out, "stage%d" % s):
                    stages[s] = c
    time.sleep(1.0)  # well into the steps
    return p, mpirun, stages


def finish(p, what, t0, limit):
    try:
        so, se = p.communicate(timeout=limit + 20)
    except subprocess.TimeoutExpired:
        # Kill the whole tree (mpirun holds the pipes), then report.
        tree = [p.pid]
        for pid in tree:
            tree += children(pid)
        for pid in tree:
            os.kill(pid, signal.SIGKILL)
        so, se = p.communicate(timeout=20)
        check(False, "%s: gpipe-run did not end" % what, se)
        return None, se
    took = time.time() - t0
    print("-- %s: rc %d in %.1f s" % (what, p.returncode, took), flush=True)
    check(took < limit, "%s: took %.1f s, limit %d s" % (what, took, limit),
          se)
    return p.returncode, se


def expect(rc, se, what, needles):
    check(rc == 1, "%s: exit %s, expected 1" % (what, rc), se)
    for n in needles:
        check(n in se, "%s: stderr lacks %r" % (what, n), se)


def no_stage_left(out, what):
    left = stages_left(out)
    check(not left, "%s: stage processes left: %s" % (what, left))
    for pid in left:
        os.kill(pid, signal.SIGKILL)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpipe-run", required=True)
    ap.add_argument("--pipe", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    work = os.path.abspath(a.work)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    gr = a.gpipe_run
    out = make_pipeline(os.path.abspath(a.pipe), work)
    data = os.path.join(work, "data")

    # 1. SIGKILL to each stage in turn: mpirun's banner names it; gpipe-run
    #    adds its host and pid; every other stage is gone.
    for s in range(K):
        what = "SIGKILL stage %d" % s
        p, mpirun, stages = start(gr, out, data, "--steps", LONG)
        check(len(stages) == K, "%s: found stages %s" % (what, stages))
        if s not in stages:
            p.kill()
            continue
        t0 = time.time()
        os.kill(stages[s], signal.SIGKILL)
        rc, se = finish(p, what, t0, 10)
        expect(rc, se, what, [
            "gpipe-run: error: stage %d (%s/stage%d) was killed by signal 9 "
            "(Killed); host %s, pid %d" % (s, out, s, os.uname().nodename,
                                           stages[s])])
        no_stage_left(out, what)

    # 2. SIGKILL to mpirun: the stages die with it (and gpipe-run kills any
    #    it still sees); gpipe-run says so.
    what = "SIGKILL mpirun"
    p, mpirun, stages = start(gr, out, data, "--steps", LONG)
    t0 = time.time()
    if mpirun:
        os.kill(mpirun, signal.SIGKILL)
    rc, se = finish(p, what, t0, 10)
    expect(rc, se, what, ["was killed by signal 9 (Killed) before the stages "
                          "finished"])
    no_stage_left(out, what)

    # 3. SIGSTOP to stage 2: its heartbeat stops; named within --timeout.
    what = "SIGSTOP stage 2"
    p, mpirun, stages = start(gr, out, data, "--steps", LONG, "--timeout", "3")
    t0 = time.time()
    if 2 in stages:
        os.kill(stages[2], signal.SIGSTOP)
    rc, se = finish(p, what, t0, 3 + 5)
    expect(rc, se, what, [
        "gpipe-run: error: stage 2 (host %s, pid %d) stopped responding: no "
        "heartbeat for more than 3 s" % (os.uname().nodename,
                                         stages.get(2, -1)),
        "gpipe-run: the stages were stopped"])
    no_stage_left(out, what)

    # 4. Stage 2 hangs in step 3 (its heartbeat goes on): no stage makes
    #    progress; each is named with what it does.
    what = "hang in stage 2"
    p, mpirun, stages = start(gr, out, data, "--steps", LONG, "--timeout", "3",
                              env={"GPIPE_TOY_HANG": "2:3"})
    rc, se = finish(p, what, time.time(), 3 + 5)
    expect(rc, se, what, [
        "gpipe-run: error: no stage made progress for 3 s (a deadlock, a hung "
        "stage or a lost peer):",
        "  stage 2 (host %s, pid %d): step 3, forward of micro-batch 0, not "
        "waiting on a transfer" % (os.uname().nodename, stages.get(2, -1)),
        "): step 3, forward of micro-batch 0, waiting to receive from stage 2"])
    no_stage_left(out, what)

    # 4b. One stage (run directly, no mpirun): killed, or stopped.
    out1 = os.path.join(work, "out1")
    os.makedirs(os.path.join(out1, "weights"))
    os.symlink(os.path.join(os.path.dirname(os.path.abspath(a.pipe)), "pipe1",
                            "stage0"), os.path.join(out1, "stage0"))
    for l in range(3):
        shutil.copy(os.path.join(out, "weights", "layer%d.w.npy" % l),
                    os.path.join(out1, "weights"))
    with open(os.path.join(out, "pipeline.json")) as f:
        desc = json.load(f)
    desc["stages"] = [dict(desc["stages"][0], params=[
        {"name": "layer%d.w" % l, "file": "layer%d.w.npy" % l, "shape": [D]}
        for l in range(3)])]
    desc["loss_stage"] = 0
    with open(os.path.join(out1, "pipeline.json"), "w") as f:
        json.dump(desc, f)
    host = os.uname().nodename
    for sig, limit, needle in (
            (signal.SIGKILL, 10, "gpipe-run: error: stage 0 (%s/stage0) was "
             "killed by signal 9 (Killed); host %s, pid %%d" % (out1, host)),
            (signal.SIGSTOP, 3 + 5, "gpipe-run: error: stage 0 (host %s, pid "
             "%%d) stopped responding: no heartbeat for more than 3 s" % host)):
        what = "one stage, %s" % signal.Signals(sig).name
        p = subprocess.Popen([gr, out1, "--data", data, "--quiet", "--steps",
                              LONG, "--timeout", "3"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        pid = None
        for _ in range(100):
            time.sleep(0.1)
            kids = children(p.pid)
            if kids and argv0(kids[0]) == os.path.join(out1, "stage0"):
                pid = kids[0]
                break
        time.sleep(1.0)
        t0 = time.time()
        if pid:
            os.kill(pid, sig)
        rc, se = finish(p, what, t0, limit)
        expect(rc, se, what, [needle % (pid or -1)])
        no_stage_left(out1, what)

    # 5. A NaN in sample 13 (mini-batch 1): the loss stage stops the run at
    #    step 2; no trained weights are written. --on-nan continue trains on.
    what = "NaN loss"
    trained = os.path.join(work, "trained")
    t0 = time.time()
    p = subprocess.Popen([gr, out, "--data", os.path.join(work, "data_nan"),
                          "--steps", "5", "--weights-out", trained],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    rc, se = finish(p, what, t0, 20)
    so = p.stdout.read() if p.stdout and not p.stdout.closed else ""
    expect(rc, se, what, [
        "gpipe: error: stage 3: step 2: the loss is nan; the run stops here "
        "without writing the trained weights (--on-nan stop)",
        "gpipe-run: error: stage 3 (%s/stage3) exited with code 1" % out])
    check(not os.path.exists(trained), "%s: trained weights written" % what)
    r = subprocess.run([gr, out, "--data", os.path.join(work, "data_nan"),
                        "--steps", "3", "--on-nan", "continue",
                        "--weights-out", trained], capture_output=True,
                       text=True, timeout=60)
    check(r.returncode == 0 and "step 2 loss nan" in r.stdout and
          "step 3 loss nan" in r.stdout and os.path.isdir(trained),
          "--on-nan continue: trains on", r.stdout + r.stderr)

    # 6. A run longer than --timeout is not stopped; bad flag values are
    #    named.
    t0 = time.time()
    r = subprocess.run([gr, out, "--data", data, "--steps", "1500", "--quiet",
                        "--timeout", "3"], capture_output=True, text=True,
                       timeout=120)
    print("-- long run: rc %d in %.1f s" % (r.returncode, time.time() - t0))
    check(r.returncode == 0 and "error" not in r.stderr,
          "long run under --timeout 3", r.stderr)
    for flags, msg in (
            (["--on-nan", "maybe"], "gpipe-run: error: --on-nan must be "
             "'stop', 'skip' or 'continue', got 'maybe'"),
            (["--timeout", "1"], "gpipe-run: error: --timeout must be 0 "
             "(off) or in [2, 1e6] seconds"),
            (["--timeout", "nan"], "gpipe-run: error: --timeout must be 0 "
             "(off) or in [2, 1e6] seconds")):
        r = subprocess.run([gr, out, "--data", data] + flags,
                           capture_output=True, text=True, timeout=60)
        check(r.returncode == 2 and msg in r.stderr, "%s: %s" % (flags, msg),
              r.stderr)

    if failures:
        print("\n%d check(s) failed:\n  %s" % (len(failures),
                                               "\n  ".join(failures)))
        return 1
    print("all fault checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
