#!/usr/bin/env python3
"""Trains importer/rms-normalization.onnxtext (RMSNormalization, opset 23) with
gpipe-compile + gpipe-run (SGD, 4 steps, batch 4) and the same model in torch
(x / sqrt(mean(x^2) + eps) * g), from the same weights on the same data, and
prints the largest per-step loss difference and the gradient-carrying weights'
largest difference ('ok' when both are within 1e-5).

usage: train_rms_normalization.py MODEL.onnxtext WORKDIR
"""
import os
import re
import subprocess
import sys

import numpy as np
import torch


def main():
    model, work = sys.argv[1], sys.argv[2]
    os.makedirs(os.path.join(work, "data"), exist_ok=True)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 3)).astype(np.float32)
    y = rng.integers(0, 6, 16).astype(np.int64)
    np.save(os.path.join(work, "data", "x.npy"), x)
    np.save(os.path.join(work, "data", "y.npy"), y)
    out = os.path.join(work, "out")
    subprocess.run(["gpipe-compile", model, "-o", out, "--batch-size", "4",
                    "--optimizer", "sgd", "--lr", "0.5"], check=True, capture_output=True)
    r = subprocess.run(["gpipe-run", out, "--data", os.path.join(work, "data"), "--steps", "4"],
                       check=True, capture_output=True, text=True)
    gp = [float(v) for v in re.findall(r"step \d+ loss ([0-9.e+-]+)", r.stdout)]
    trained_g = np.load(os.path.join(out, "trained", "g.npy"))
    w = torch.tensor(np.arange(1, 19, dtype=np.float32).reshape(6, 3) * 0.1, requires_grad=True)
    g = torch.tensor(np.array([1.0, 1.1, 1.2, 1.3, 1.4, 1.5], np.float32).reshape(2, 3),
                     requires_grad=True)
    opt = torch.optim.SGD([w, g], lr=0.5)
    ref = []
    for s in range(4):
        xb, yb = torch.from_numpy(x[4 * s:4 * s + 4]), torch.from_numpy(y[4 * s:4 * s + 4])
        h = (xb @ w.T).reshape(-1, 2, 3)
        n = h / torch.sqrt((h * h).mean(dim=(1, 2), keepdim=True) + 1e-3) * g
        loss = torch.nn.functional.cross_entropy(n.reshape(-1, 6), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        ref.append(loss.item())
    dl = max(abs(a - b) for a, b in zip(gp, ref)) if len(gp) == 4 else float("inf")
    dg = float(np.abs(trained_g - g.detach().numpy()).max())
    moved = float(np.abs(trained_g - np.array([1.0, 1.1, 1.2, 1.3, 1.4, 1.5],
                                              np.float32).reshape(2, 3)).max())
    print("steps %d, max loss diff %.3e, max scale diff %.3e, scale moved %.3e"
          % (len(gp), dl, dg, moved))
    print("ok" if dl <= 1e-5 and dg <= 1e-5 and moved > 1e-3 else "MISMATCH")


if __name__ == "__main__":
    main()
