#!/usr/bin/env python3
"""gpipe-run --on-nan skip against torch skipping optimizer.step() on a non-finite loss.

usage: check_nan_skip.py BIN_DIR WORK_DIR

A Tanh MLP (test/e2e/models.py mlp_tanh; tanh keeps a NaN a NaN), 64 samples in mini-batches
of 16, one sample of mini-batch 2 holding a NaN: steps 3 and 7 of 8 have a NaN loss. As 2
stages x 2 micro-batches, for SGD with momentum and for Adam, with --on-nan skip:
  - the run goes on, warns at steps 3 and 7, logs their losses as null;
  - the trained weights equal, within 1e-5 (relative), torch trained on the same data where a
    step whose loss is not finite skips optimizer.step() (momentum buffers and Adam's step
    count untouched, as torch's GradScaler does), and the finite losses agree within 1e-5;
  - 4 steps + --resume for 4 more equal the 8-step run bit for bit (the checkpoint keeps the
    number of skipped updates);
  - without skipping (torch stepping on the NaN) the weights would be NaN: the check can fail.
Exit status 0 when every check passed.
"""
import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
import models  # noqa: E402

FAILURES = []
B, SAMPLES, STEPS, TOL = 16, 64, 8, 1e-5


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what, flush=True)
    if not cond:
        FAILURES.append(what)


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=300)
    if r.returncode != 0:
        print("$ " + " ".join(cmd))
        print(r.stdout[-2000:] + r.stderr[-2000:])
    return r


def torch_run(init, x, y, optimizer):
    module = models.build("mlp_tanh")
    models.load_into_module(module, init)
    if optimizer == "sgd":
        opt = torch.optim.SGD(module.parameters(), lr=0.05, momentum=0.9)
    else:
        opt = torch.optim.Adam(module.parameters(), lr=0.01, foreach=False)
    losses = []
    for s in range(1, STEPS + 1):
        lo, hi = models.batch_indices(s, B, SAMPLES)
        opt.zero_grad(set_to_none=True)
        loss = module(torch.from_numpy(x[lo:hi]), torch.from_numpy(y[lo:hi]))
        losses.append(float(loss))
        if not math.isfinite(float(loss)):
            continue  # skip optimizer.step()
        loss.backward()
        opt.step()
    return {n: p.detach().numpy().copy() for n, p in module.named_parameters()}, losses


def main():
    bindir, work = sys.argv[1], os.path.abspath(sys.argv[2])
    if os.path.isdir(work):
        shutil.rmtree(work)
    data = os.path.join(work, "data")
    os.makedirs(data)
    x, y = models.make_data("mlp_tanh", SAMPLES, seed=3)
    x[2 * B + 5, 7] = np.nan  # mini-batch 2: steps 3 and 7
    np.save(os.path.join(data, "x.npy"), x)
    np.save(os.path.join(data, "y.npy"), y)
    model = os.path.join(work, "model.onnx")
    xc = np.nan_to_num(x)
    models.export(models.build("mlp_tanh"), xc[:B], y[:B], model)
    init = models.load_initializers(model)
    for name, flags in (("sgd", ["--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9"]),
                        ("adam", ["--optimizer", "adam", "--lr", "0.01"])):
        out = os.path.join(work, "out_" + name)
        r = run([os.path.join(bindir, "gpipe-compile"), model, "-o", out, "--batch-size",
                 str(B), "--stages", "2", "--microbatches", "2"] + flags)
        check(r.returncode == 0, "%s: gpipe-compile" % name)
        gr = os.path.join(bindir, "gpipe-run")
        log = os.path.join(work, name + ".jsonl")
        w_full = os.path.join(work, "w_full_" + name)
        r = run([gr, out, "--data", data, "--steps", str(STEPS), "--on-nan", "skip",
                 "--log-json", log, "--weights-out", w_full,
                 "--save-onnx", os.path.join(work, name + ".onnx")])
        warned = [l for l in r.stderr.splitlines() if "update is skipped" in l]
        check(r.returncode == 0 and len(warned) == 2 and "step 3:" in warned[0]
              and "step 7:" in warned[1], "%s: --on-nan skip runs on, warning at steps 3 "
              "and 7: %r" % (name, warned[:1]))
        with open(log) as f:
            gl = [json.loads(l)["loss"] for l in f if l.strip()]
        ref, rl = torch_run(init, x, y, name)
        trained = models.load_initializers(os.path.join(work, name + ".onnx"))
        worst = max(float(np.abs(trained[n] - a).max() / max(np.abs(a).max(), 1e-30))
                    for n, a in ref.items())
        check(worst <= TOL, "%s: weights equal torch skipping optimizer.step() on a NaN loss "
              "(worst relative error %.2e)" % (name, worst))
        same_nan = all((g is None) == (not math.isfinite(t)) for g, t in zip(gl, rl))
        loss_err = max(abs(g - t) for g, t in zip(gl, rl) if g is not None)
        check(len(gl) == STEPS and same_nan and loss_err <= TOL,
              "%s: losses null at steps 3 and 7 on both, the others within %.1e" %
              (name, loss_err))
        check(all(np.isfinite(a).all() for a in trained.values()),
              "%s: trained weights are finite (a NaN update would make them NaN)" % name)
        # Resume across the skipped steps.
        ck = os.path.join(work, "ck_" + name)
        r1 = run([gr, out, "--data", data, "--steps", "4", "--on-nan", "skip",
                  "--checkpoint-dir", ck, "-q"])
        with open(os.path.join(ck, "step-00000004", "manifest.json")) as f:
            skipped = json.load(f).get("skipped_updates")
        r2 = run([gr, out, "--data", data, "--steps", str(STEPS), "--on-nan", "skip",
                  "--checkpoint-dir", ck, "--resume", "-q", "--weights-out",
                  os.path.join(work, "w_resumed_" + name)])
        w_res = os.path.join(work, "w_resumed_" + name)
        same = r1.returncode == 0 and r2.returncode == 0 and all(
            np.load(os.path.join(w_full, f)).tobytes() ==
            np.load(os.path.join(w_res, f)).tobytes() for f in os.listdir(w_full))
        check(same and skipped == 1, "%s: 4 steps (1 skipped, the checkpoint says %s) + "
              "--resume to 8 equal the 8-step run bit for bit" % (name, skipped))
    print("%d check(s) failed" % len(FAILURES) if FAILURES else "all --on-nan skip checks passed")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
