#!/usr/bin/env python3
"""Multi-stage runtime checks: gpipe-run launching 1-, 2- and 3-stage toy
pipelines (toy_stage.cpp) under mpirun, numerics against NumPy, and failures
(crash, bad data, bad message size, bad label, wrong launch, a killed
gpipe-run) that must be reported by stage and never hang.

usage: check_pipeline.py --gpipe-run BIN --pipes DIR --work DIR
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

D, B, M, LAYERS, LR, SAMPLES, STEPS = 4, 8, 2, 3, 0.5, 20, 5
TIMEOUT = 60  # seconds per gpipe-run: a hang fails the test, never blocks CI
STAGE_LAYERS = {1: [[0, 1, 2]], 2: [[0, 1], [2]], 3: [[0], [1], [2]]}

failures = []


def check(cond, what, detail=""):
    if not cond:
        failures.append(what)
        print("FAIL: %s\n%s" % (what, detail), flush=True)


def make_data(work):
    rng = np.random.default_rng(7)
    x = rng.uniform(-2, 2, (SAMPLES, D)).astype(np.float32)
    y = rng.integers(0, D, SAMPLES).astype(np.int64)
    y[[1, 5, 14]] = -100
    y[8:12] = -100  # micro-batch 0 of mini-batch 1: every label ignored
    w = [rng.uniform(0.5, 1.5, D).astype(np.float32) for _ in range(LAYERS)]
    data = os.path.join(work, "data")
    os.makedirs(data, exist_ok=True)
    np.save(os.path.join(data, "x.npy"), x)
    np.save(os.path.join(data, "y.npy"), y)
    return x, y, w


def reference(x, y, w):
    """Full-batch float64 training: the losses and the trained weights."""
    w = [v.astype(np.float64) for v in w]
    losses = []
    nb = SAMPLES // B
    for s in range(STEPS):
        rows = slice((s % nb) * B, (s % nb) * B + B)
        xb, yb = x[rows].astype(np.float64), y[rows]
        acts = [xb]
        for v in w:
            acts.append(acts[-1] * v)
        z = acts[-1]
        keep = yb != -100
        lse = np.log(np.exp(z - z.max(1, keepdims=True)).sum(1)) + z.max(1)
        yk = np.where(keep, yb, 0)
        n = keep.sum()
        losses.append(((lse - z[np.arange(B), yk]) * keep).sum() / n)
        p = np.exp(z - lse[:, None])
        p[np.arange(B), yk] -= 1
        g = p * keep[:, None] / n
        grads = []
        for l in reversed(range(LAYERS)):
            grads.insert(0, (g * acts[l]).sum(0))
            g = g * w[l]
        w = [v - LR * gv for v, gv in zip(w, grads)]
    return losses, w


def make_pipeline(pipes, work, k, name=None, exe_dir=None, version=2,
                  num_stages=None, exe_dirs=None):
    """OUT directory for the k-stage toy: pipeline.json, weights, executables
    (symlinked from the build; exe_dir, or exe_dirs per stage, overrides which
    pipeline's)."""
    out = os.path.join(work, name or "out%d" % k)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(os.path.join(out, "weights"))
    stages = []
    n = num_stages or k
    for s in range(n):
        src = os.path.join((exe_dirs or {}).get(s) or exe_dir or
                           os.path.join(pipes, "pipe%d" % k), "stage%d" % s)
        os.symlink(src, os.path.join(out, "stage%d" % s))
        params = [{"name": "layer%d.w" % l, "file": "layer%d.w.npy" % l,
                   "shape": [D]} for l in STAGE_LAYERS[k][s]]
        stages.append({"index": s, "rank": s, "executable": "stage%d" % s,
                       "weights": "weights", "params": params,
                       "schedule": ["F0", "F1", "B1", "B0", "U"]})
    for l in range(LAYERS):
        np.save(os.path.join(out, "weights", "layer%d.w.npy" % l), W0[l])
    desc = {"format": "gpipe-pipeline", "version": version,
            "model": "model.onnx", "source_model": os.path.join(out, "src.onnx"),
            "target": "cpu", "batch_size": B, "microbatches": M,
            "loss_stage": n - 1, "stages": stages}
    with open(os.path.join(out, "pipeline.json"), "w") as f:
        json.dump(desc, f, indent=2)
    return out


def run(args, env=None, what=""):
    t0 = time.time()
    full_env = dict(os.environ)
    full_env.update(env or {})
    try:
        r = subprocess.run(args, capture_output=True, text=True,
                           timeout=TIMEOUT, env=full_env)
    except subprocess.TimeoutExpired as e:
        check(False, what + ": gpipe-run hung (> %d s)" % TIMEOUT,
              str(e.stdout) + str(e.stderr))
        return None
    r.elapsed = time.time() - t0
    print("-- %s: rc %d in %.1f s" % (what, r.returncode, r.elapsed),
          flush=True)
    return r


def expect_fail(r, what, needles, rc=1):
    if r is None:
        return
    detail = "stdout:\n%s\nstderr:\n%s" % (r.stdout, r.stderr)
    if rc is None:  # any failure (mpirun's own exit code)
        check(r.returncode != 0, "%s: exit 0, expected a failure" % what,
              detail)
    else:
        check(r.returncode == rc, "%s: exit %d, expected %d" %
              (what, r.returncode, rc), detail)
    for n in needles:
        check(n in r.stderr, "%s: stderr lacks %r" % (what, n), detail)


def main():
    global W0
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpipe-run", required=True)
    ap.add_argument("--pipes", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    a.pipes, a.work = os.path.abspath(a.pipes), os.path.abspath(a.work)
    gr = a.gpipe_run
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    x, y, W0 = make_data(a.work)
    data = os.path.join(a.work, "data")
    want_losses, want_w = reference(x, y, W0)

    # 1. The same model on 1, 2 and 3 stages: identical losses and weights,
    #    matching NumPy; only the loss stage prints and logs.
    logs, trained = {}, {}
    for k in (1, 2, 3):
        out = make_pipeline(a.pipes, a.work, k)
        log = os.path.join(a.work, "log%d.jsonl" % k)
        r = run([gr, out, "--data", data, "--steps", str(STEPS),
                 "--log-json", log], what="train %d stages" % k)
        if r is None:
            continue
        detail = "stdout:\n%s\nstderr:\n%s" % (r.stdout, r.stderr)
        check(r.returncode == 0, "train %d stages: exit %d" %
              (k, r.returncode), detail)
        if r.returncode != 0:
            continue
        lines = [l for l in r.stdout.splitlines() if l.startswith("step ")]
        check([l.split()[1] for l in lines] ==
              [str(s) for s in range(1, STEPS + 1)],
              "train %d stages: one line per step" % k, detail)
        check(r.stderr.count("gpipe: %d steps, mean" % STEPS) == 1,
              "train %d stages: one timing line" % k, detail)
        check("error" not in r.stderr, "train %d stages: errors" % k, detail)
        got = [float(l.split()[3]) for l in lines]
        check(np.allclose(got, want_losses, rtol=1e-5, atol=2e-6),
              "train %d stages: losses vs NumPy" % k,
              "got %s\nwant %s" % (got, want_losses))
        with open(log) as f:
            logs[k] = [json.loads(l)["loss"] for l in f]
        trained[k] = [np.load(os.path.join(out, "trained",
                                           "layer%d.w.npy" % l))
                      for l in range(LAYERS)]
        check(all(np.allclose(t, w, rtol=1e-5, atol=1e-6)
                  for t, w in zip(trained[k], want_w)),
              "train %d stages: weights vs NumPy" % k,
              "got %s\nwant %s" % (trained[k], want_w))
        check(not any(n.startswith(".gpipe-status") for n in os.listdir(out)),
              "train %d stages: status files left in OUT" % k)
    if len(logs) == 3:
        check(logs[1] == logs[2] == logs[3], "same losses on 1, 2, 3 stages",
              str(logs))
        check(all(np.array_equal(trained[1][l], trained[k][l])
                  for k in (2, 3) for l in range(LAYERS)),
              "same trained weights on 1, 2, 3 stages")

    out2 = os.path.join(a.work, "out2")
    out3 = os.path.join(a.work, "out3")

    # 2. A stage that crashes mid-run: named, exit 1, the others torn down.
    r = run([gr, out3, "--data", data, "--steps", "4"],
            env={"GPIPE_TOY_CRASH": "1:2"}, what="crash")
    expect_fail(r, "crash", ["gpipe-run: error: stage 1 (%s/stage1) crashed: "
                             "signal 11 (Segmentation fault)" % out3])
    if r:
        check("step 1 loss" in r.stdout and "step 2 loss" not in r.stdout,
              "crash: step 1 printed, step 2 not", r.stdout)
        check("stage 0 (" not in r.stderr and "stage 2 (" not in r.stderr,
              "crash: only stage 1 blamed", r.stderr)

    # 3. Stage 0's data file is missing while stage 1 waits for it.
    bad = os.path.join(a.work, "data_noX")
    os.makedirs(bad)
    shutil.copy(os.path.join(data, "y.npy"), bad)
    r = run([gr, out2, "--data", bad], what="missing data")
    expect_fail(r, "missing data", [
        "gpipe: error: stage 0: missing data file %s/x.npy for graph input "
        "'x'" % bad,
        "gpipe-run: error: stage 0 (%s/stage0) exited with code 1" % out2])
    if r:
        check("stage 1 (" not in r.stderr, "missing data: stage 1 not blamed",
              r.stderr)

    # 4. Message sizes that do not agree.
    r = run([gr, out2, "--data", data], env={"GPIPE_TOY_SHORT_SEND": "0"},
            what="short send")
    expect_fail(r, "short send", [
        "gpipe: error: stage 1: received 60 bytes from stage 0 (tag 0), "
        "expected 64",
        "gpipe-run: error: stage 1 (%s/stage1) exited with code 1" % out2])

    # 5. A bad label on the last stage, in the second mini-batch.
    badlab = os.path.join(a.work, "data_badlabel")
    os.makedirs(badlab)
    shutil.copy(os.path.join(data, "x.npy"), badlab)
    yb = y.copy()
    yb[13] = 7
    np.save(os.path.join(badlab, "y.npy"), yb)
    r = run([gr, out3, "--data", badlab, "--steps", "3"], what="bad label")
    expect_fail(r, "bad label", [
        "gpipe: error: stage 2: graph input 'y', sample 13 (step 2): label 7 "
        "is outside [0, 4) and is not the ignore_index",
        "gpipe-run: error: stage 2 (%s/stage2) exited with code 1" % out3])

    # Stage 0's x.npy and stage 2's y.npy must have the same number of rows.
    short = os.path.join(a.work, "data_short")
    os.makedirs(short)
    np.save(os.path.join(short, "x.npy"), x)
    np.save(os.path.join(short, "y.npy"), y[:-1])
    r = run([gr, out3, "--data", short], what="sample counts")
    expect_fail(r, "sample counts", [
        "gpipe: error: stage 2: %s/y.npy has 19 samples but stage 0's data "
        "files have 20" % short,
        "gpipe-run: error: stage 2 (%s/stage2) exited with code 1" % out3])

    # 6. A stage executable run on its own, or in a pipeline of another size.
    r = run([os.path.join(out2, "stage1"), "--data", data], what="standalone")
    expect_fail(r, "standalone", [
        "gpipe: error: stage 1: stage 1 executable was launched as rank 0 of "
        "1 ranks"])
    wrong = make_pipeline(a.pipes, a.work, 2, name="wrong",
                          exe_dir=os.path.join(a.pipes, "pipe3"))
    r = run([gr, wrong, "--data", data], what="wrong pipeline")
    # Both stages find it; the first to report ends the job, and under load
    # mpirun may stop the other before it prints (CI saw only stage 1's).
    expect_fail(r, "wrong pipeline", [])
    if r is not None:
        for s in (0, 1):
            if "executable was launched as rank %d of 2 ranks" % s in r.stderr:
                expect_fail(r, "wrong pipeline", [
                    "gpipe-run: error: stage %d (%s/stage%d) exited with code 1"
                    % (s, wrong, s)])
                break
        else:
            check(False, "wrong pipeline: no stage says it was launched as "
                  "rank 0 or 1 of 2 ranks", r.stderr)

    mixed = make_pipeline(a.pipes, a.work, 2, name="mixed",
                          exe_dirs={1: os.path.join(a.pipes, "pipe2_b16")})
    # The stage whose program differs from pipeline.json says so first.
    r = run([gr, mixed, "--data", data], what="mixed batch sizes")
    expect_fail(r, "mixed batch sizes", [
        "gpipe: error: stage 1: %s/pipeline.json does not describe this "
        "executable: batch 8 in 2 micro-batches, this executable runs batch "
        "16 in 2" % mixed,
        "gpipe-run: error: stage 1 (%s/stage1) exited with code 1" % mixed])
    # Launched without the description (plain mpirun), the stages still find
    # out from each other at start-up; stage 0 reports it.
    mpirun = shutil.which("mpirun")
    if mpirun:
        args = ["--data", data, "--weights-in", os.path.join(mixed, "weights")]
        cmd = [mpirun, "--oversubscribe", "-np", "1",
               os.path.join(mixed, "stage0")] + args + [
               ":", "-np", "1", os.path.join(mixed, "stage1")] + args
        if os.geteuid() == 0:
            cmd.insert(1, "--allow-run-as-root")
        r = run(cmd, what="mixed batch sizes, plain mpirun")
        expect_fail(r, "mixed batch sizes, plain mpirun", [
            "gpipe: error: stage 0: stage 1 (of a 2-stage pipeline, batch 16 "
            "in 2 micro-batches) and stage 0 (of a 2-stage pipeline, batch 8 "
            "in 2 micro-batches) were not compiled together"], rc=None)

    # 7. Messages split into several MPI messages (as above 1 GiB; here the
    #    chunk size is lowered to 24 bytes): same results, same size checks.
    log = os.path.join(a.work, "log_chunked.jsonl")
    r = run([gr, out3, "--data", data, "--steps", str(STEPS), "--quiet",
             "--log-json", log], env={"GPIPE_MPI_CHUNK_BYTES": "24"},
            what="chunked")
    if r:
        check(r.returncode == 0, "chunked: exit %d" % r.returncode, r.stderr)
        if r.returncode == 0 and 3 in logs:
            with open(log) as f:
                check([json.loads(l)["loss"] for l in f] == logs[3],
                      "chunked: same losses")
    r = run([gr, out2, "--data", data],
            env={"GPIPE_MPI_CHUNK_BYTES": "24", "GPIPE_TOY_SHORT_SEND": "0"},
            what="chunked short send")
    expect_fail(r, "chunked short send", [
        "gpipe: error: stage 1: received 60 bytes from stage 0 (tag 0), "
        "expected 64"])

    # 7b. How stages wait: MPI's blocking calls (GPIPE_MPI_WAIT=block), and
    #     polling that sleeps from the first miss on (no spin, 1 us cap):
    #     the same results; another mode is an error naming the variable.
    for what, env in (("blocking waits", {"GPIPE_MPI_WAIT": "block"}),
                      ("sleeping waits", {"GPIPE_MPI_SPIN_US": "0",
                                          "GPIPE_MPI_MAX_SLEEP_US": "1"})):
        log = os.path.join(a.work, "log_%s.jsonl" % what.split()[0])
        r = run([gr, out3, "--data", data, "--steps", str(STEPS), "--quiet",
                 "--log-json", log], env=env, what=what)
        if r:
            check(r.returncode == 0, "%s: exit %d" % (what, r.returncode),
                  r.stderr)
            if r.returncode == 0 and 3 in logs:
                with open(log) as f:
                    check([json.loads(l)["loss"] for l in f] == logs[3],
                          "%s: same losses" % what)
    r = run([gr, out2, "--data", data], env={"GPIPE_MPI_WAIT": "block",
                                             "GPIPE_TOY_SHORT_SEND": "0"},
            what="blocking waits, short send")
    expect_fail(r, "blocking waits, short send", [
        "gpipe: error: stage 1: received 60 bytes from stage 0 (tag 0), "
        "expected 64"])
    r = run([gr, out2, "--data", data], env={"GPIPE_MPI_WAIT": "spin"},
            what="bad GPIPE_MPI_WAIT")
    # (Every stage finds it; whichever aborts first is the one reported.)
    expect_fail(r, "bad GPIPE_MPI_WAIT", [
        ": GPIPE_MPI_WAIT must be 'poll' or 'block', got 'spin'"])

    # 8. gpipe-run's own flags and environment.
    r = run([gr, out2, "--data", data, "--hostfile", "/nonexistent/hosts"],
            what="no hostfile")
    expect_fail(r, "no hostfile", ["gpipe-run: error: --hostfile "
                                   "/nonexistent/hosts: no such file"], rc=2)
    r = run([gr, out2, "--data", data], env={"GPIPE_MPIRUN": "/nonexistent"},
            what="bad GPIPE_MPIRUN")
    expect_fail(r, "bad GPIPE_MPIRUN", ["GPIPE_MPIRUN=/nonexistent is not an "
                                        "executable"])
    hosts = os.path.join(a.work, "hosts")
    with open(hosts, "w") as f:
        f.write("localhost slots=8\n")
    # A hostfile (status files under OUT) and no shared-memory single copy.
    r = run([gr, out2, "--data", data, "--steps", "2", "--hostfile", hosts,
             "--mpirun-arg=--mca", "--mpirun-arg=btl_vader_single_copy_mechanism",
             "--mpirun-arg=none"], env={"GPIPE_RUN_VERBOSE": "1"},
            what="hostfile")
    if r:
        check(r.returncode == 0 and "step 2 loss" in r.stdout,
              "hostfile: trains", r.stdout + r.stderr)
        check("--hostfile %s" % hosts in r.stderr and
              "btl_vader_single_copy_mechanism none" in r.stderr,
              "hostfile: mpirun command line", r.stderr)
        check(not any(n.startswith(".gpipe-status") for n in os.listdir(out2)),
              "hostfile: status directory removed", str(os.listdir(out2)))
    # A 1-stage pipeline runs without mpirun, also from a version 1 file.
    out1 = make_pipeline(a.pipes, a.work, 1, name="v1", version=1)
    r = run([gr, out1, "--data", data, "--steps", "2"],
            env={"GPIPE_MPIRUN": "/nonexistent"}, what="version 1")
    if r:
        check(r.returncode == 0 and "step 2 loss" in r.stdout,
              "version 1: trains without mpirun", r.stdout + r.stderr)

    # 9. --save-onnx gathers the parameters of every stage.
    try:
        import onnx
        from onnx import helper, numpy_helper, TensorProto
        inits = [numpy_helper.from_array(W0[l], "layer%d.w" % l)
                 for l in range(LAYERS)]
        graph = helper.make_graph(
            [helper.make_node("Mul", ["x", "layer0.w"], ["loss"])], "toy",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, D])],
            [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [B, D])],
            inits)
        onnx.save(helper.make_model(graph), os.path.join(out3, "model.onnx"))
        saved = os.path.join(a.work, "trained3.onnx")
        r = run([gr, out3, "--data", data, "--steps", str(STEPS), "--quiet",
                 "--save-onnx", saved], what="save-onnx")
        if r and r.returncode == 0:
            m = onnx.load(saved)
            got = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
            check(all(np.array_equal(got["layer%d.w" % l], trained[3][l])
                      for l in range(LAYERS)) if 3 in trained else False,
                  "save-onnx: every stage's trained weights")
        else:
            check(False, "save-onnx: exit", r and (r.stdout + r.stderr))
    except ImportError:
        print("-- save-onnx skipped: no onnx module")

    # 10. gpipe-run killed from outside (timeout, kill) while a stage hangs:
    #     it stops mpirun and every stage.
    p = subprocess.Popen([gr, out3, "--data", data, "--steps", "4"],
                         env=dict(os.environ, GPIPE_TOY_HANG="2:2"),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    time.sleep(3)
    t0 = time.time()
    p.send_signal(signal.SIGTERM)
    try:
        so, se = p.communicate(timeout=TIMEOUT)
        print("-- kill: gpipe-run ended in %.1f s" % (time.time() - t0))
        check(p.returncode == -signal.SIGTERM, "kill: gpipe-run dies of "
              "SIGTERM (%s)" % p.returncode, se)
        check("interrupted by signal 15" in se, "kill: message", se)
    except subprocess.TimeoutExpired:
        p.kill()
        check(False, "kill: gpipe-run did not stop")
    time.sleep(1)
    left = subprocess.run(["pgrep", "-f", out3 + "/stage"],
                          capture_output=True, text=True).stdout.split()
    check(not left, "kill: stages left running: %s" % left)
    for pid in left:
        os.kill(int(pid), signal.SIGKILL)

    if failures:
        print("\n%d check(s) failed:\n  %s" % (len(failures),
                                               "\n  ".join(failures)))
        return 1
    print("all pipeline checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
