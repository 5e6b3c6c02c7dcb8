#!/usr/bin/env python3
"""gpipe-run --eval-data / --eval-every against torch's eval mode.

usage: check_eval.py BIN_DIR WORK_DIR

For models with Dropout (mlp_dropout) and BatchNorm (bn1d_mlp, vgg_bn), as 2 stages x 2
micro-batches (also interleaved and ZB-V, two model chunks per stage) and as 1 stage: train 6 steps with --eval-every 3 and --checkpoint-every 3; the
eval loss logged after step 3 and after step 6 must equal, within 1e-5 (relative), torch's
module.eval() loss on the held-out data (the mean over its mini-batches) with the weights and
running statistics of the step-3 and step-6 checkpoints. Also: the evaluation leaves the
training alone (the trained weights equal those of the same run without --eval-data, bit for
bit), the eval loss differs from the training-mode loss on the same data (so dropout and
BatchNorm really switch), and bad --eval-data input gives one clear error.
Exit status 0 when every check passed.
"""
import json
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
B, TRAIN, EVAL, STEPS, EVERY, TOL = 16, 64, 40, 6, 3, 1e-5


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what, flush=True)
    if not cond:
        FAILURES.append(what)


def run(cmd, expect_ok=True):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=600)
    if expect_ok and r.returncode != 0:
        print("$ " + " ".join(cmd))
        print(r.stdout[-3000:] + r.stderr[-3000:])
    return r


def checkpoint_tensors(ckpt):
    with open(os.path.join(ckpt, "manifest.json")) as f:
        m = json.load(f)
    return {t["name"]: np.load(os.path.join(ckpt, t["file"])) for t in m["tensors"]
            if "slot" not in t}


def torch_eval_loss(name, inits, x, y):
    module = models.build(name)
    models.load_into_module(module, inits)
    module.eval()
    losses = []
    with torch.no_grad():
        for b in range(len(x) // B):
            xb = torch.from_numpy(x[b * B:(b + 1) * B])
            yb = torch.from_numpy(y[b * B:(b + 1) * B])
            losses.append(float(module(xb, yb)))
    return float(np.mean(losses))


def main():
    bindir, work = sys.argv[1], os.path.abspath(sys.argv[2])
    compile_bin = os.path.join(bindir, "gpipe-compile")
    run_bin = os.path.join(bindir, "gpipe-run")
    if os.path.isdir(work):
        shutil.rmtree(work)
    os.makedirs(work)
    cases = [("mlp_dropout", 2, 2, ["--optimizer", "sgd", "--lr", "0.1", "--momentum", "0.9"]),
             ("bn1d_mlp", 2, 2, ["--optimizer", "adam", "--lr", "0.01"]),
             ("bn1d_mlp", 1, 1, ["--optimizer", "sgd", "--lr", "0.1"]),
             ("vgg_bn", 2, 2, ["--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9"]),
             # Two model chunks per stage: the evaluation runs the schedule's forwards in its
             # order, the checkpoints hold every chunk's tensors.
             ("mlp_dropout", 2, 2, ["--optimizer", "sgd", "--lr", "0.1", "--momentum", "0.9",
                                    "--schedule", "interleaved", "--virtual-stages", "2"]),
             ("bn1d_mlp", 2, 2, ["--optimizer", "adam", "--lr", "0.01",
                                 "--schedule", "zbv", "--virtual-stages", "2"])]
    for name, k, m, opt in cases:
        tag = "%s_k%d_m%d" % (name, k, m)
        if "--schedule" in opt:
            tag += "_" + opt[opt.index("--schedule") + 1]
        wd = os.path.join(work, tag)
        train_dir, eval_dir = os.path.join(wd, "train"), os.path.join(wd, "eval")
        os.makedirs(train_dir)
        os.makedirs(eval_dir)
        x, y = models.make_data(name, TRAIN + EVAL, seed=1)
        xt, yt, xe, ye = x[:TRAIN], y[:TRAIN], x[TRAIN:], y[TRAIN:]
        np.save(os.path.join(train_dir, "x.npy"), xt)
        np.save(os.path.join(train_dir, "y.npy"), yt)
        np.save(os.path.join(eval_dir, "x.npy"), xe)
        np.save(os.path.join(eval_dir, "y.npy"), ye)
        model = os.path.join(wd, "model.onnx")
        models.export(models.build(name), xt[:B], yt[:B], model)
        out = os.path.join(wd, "out")
        r = run([compile_bin, model, "-o", out, "--batch-size", str(B), "--stages", str(k),
                 "--microbatches", str(m)] + opt)
        if r.returncode != 0:
            check(False, "%s: gpipe-compile" % tag)
            continue
        log = os.path.join(wd, "log.jsonl")
        ck = os.path.join(wd, "ck")
        r = run([run_bin, out, "--data", train_dir, "--steps", str(STEPS), "--eval-data",
                 eval_dir, "--eval-every", str(EVERY), "--checkpoint-dir", ck,
                 "--checkpoint-every", str(EVERY), "--log-json", log,
                 "--weights-out", os.path.join(wd, "w_eval")])
        with open(log) as f:
            lines = [json.loads(l) for l in f if l.strip()]
        evals = {l["step"]: l["eval_loss"] for l in lines if "eval_loss" in l}
        printed = [l for l in r.stdout.splitlines() if l.startswith("eval step ")]
        check(r.returncode == 0 and sorted(evals) == [EVERY, STEPS] and len(printed) == 2
              and len([l for l in lines if "loss" in l]) == STEPS,
              "%s: %d training steps, eval lines after steps %s (%s)"
              % (tag, STEPS, sorted(evals), "; ".join(printed)))
        for s in sorted(evals):
            inits = checkpoint_tensors(os.path.join(ck, "step-%08d" % s))
            ref = torch_eval_loss(name, inits, xe, ye)
            err = abs(evals[s] - ref) / max(abs(ref), 1e-30)
            check(err <= TOL, "%s: eval loss after step %d %.7f, torch eval %.7f "
                  "(relative error %.2e)" % (tag, s, evals[s], ref, err))
            # The check can fail: torch in training mode gives another loss.
            module = models.build(name)
            models.load_into_module(module, inits)
            module.train()
            with torch.no_grad():
                train_mode = float(np.mean([float(module(
                    torch.from_numpy(xe[b * B:(b + 1) * B]),
                    torch.from_numpy(ye[b * B:(b + 1) * B]))) for b in range(EVAL // B)]))
            check(abs(train_mode - ref) > 100 * TOL * abs(ref),
                  "%s: ... torch's training-mode loss there differs (%.7f)" % (tag, train_mode))
        # Evaluation does not touch the training.
        r = run([run_bin, out, "--data", train_dir, "--steps", str(STEPS), "-q",
                 "--weights-out", os.path.join(wd, "w_plain")])
        same = r.returncode == 0 and all(
            np.load(os.path.join(wd, "w_eval", f)).tobytes() ==
            np.load(os.path.join(wd, "w_plain", f)).tobytes()
            for f in os.listdir(os.path.join(wd, "w_plain")))
        check(same, "%s: weights with --eval-data equal those without, bit for bit" % tag)

    # Errors.
    wd = os.path.join(work, "bn1d_mlp_k2_m2")
    out = os.path.join(wd, "out")
    small = os.path.join(work, "small_eval")
    os.makedirs(small)
    x, y = models.make_data("bn1d_mlp", 8, seed=2)
    np.save(os.path.join(small, "x.npy"), x)
    np.save(os.path.join(small, "y.npy"), y)
    for args, needle, what, rc in (
            (["--eval-data", os.path.join(work, "nowhere")], "no such directory",
             "--eval-data missing", 2),
            (["--eval-every", "2"], "--eval-every needs --eval-data", "--eval-every alone", 2),
            (["--eval-data", small], "fewer than the mini-batch size",
             "--eval-data with fewer samples than a mini-batch", 1)):
        r = run([run_bin, out, "--data", os.path.join(wd, "train"), "--steps", "2"] + args,
                expect_ok=False)
        check(r.returncode == rc and needle in r.stderr,
              "%s: exit %d, %r" % (what, r.returncode,
                                   (r.stderr.strip().splitlines() or [""])[0]))
    print("%d check(s) failed" % len(FAILURES) if FAILURES else "all eval checks passed")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
