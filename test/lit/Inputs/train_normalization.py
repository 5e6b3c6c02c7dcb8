#!/usr/bin/env python3
"""Trains a normalization lit model with gpipe-compile + gpipe-run (SGD lr 0.5,
4 steps, batch 4) and the same model in torch, from the same weights on the
same data, and prints the largest per-step loss difference and the largest
difference of the trained normalization weights; then 'ok' when both are
within 1e-5 and those weights moved.

usage: train_normalization.py KIND MODEL.onnxtext WORKDIR
  rms    importer/rms-normalization.onnxtext: x [16, 3] -> Gemm 6 -> [.., 2, 3]
         -> x / sqrt(mean(x^2) + 1e-3) * g -> 6 classes
  group  importer/group-normalization.onnxtext: x [16, 4] -> Gemm 8 -> [.., 4, 2]
         -> F.group_norm(2 groups, eps 1e-3, s, b) -> 8 classes
  view   Inputs/param-view.onnxtext: x [16, 4] -> Gemm 8 -> [.., 4, 2]
         -> * s.view(4, 1) -> 8 classes (a parameter read through a Reshape)
"""
import os
import re
import subprocess
import sys

import numpy as np
import torch
import torch.nn.functional as F

# The Gemm weight of group-normalization.onnxtext and param-view.onnxtext.
W_8X4 = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6,
                  -0.1, -0.2, -0.3, -0.4, -0.5, -0.6, -0.7, -0.8, 0.15, 0.25, -0.35, 0.45,
                  -0.55, 0.65, 0.75, -0.85], np.float32).reshape(8, 4)
# kind: (input width, classes, the Gemm's weight, {normalization weights}, forward)
MODELS = {
    "rms": (3, 6, np.arange(1, 19, dtype=np.float32).reshape(6, 3) * 0.1,
            {"g": np.array([1.0, 1.1, 1.2, 1.3, 1.4, 1.5], np.float32).reshape(2, 3)},
            lambda h, p: (lambda r: r / torch.sqrt((r * r).mean(dim=(1, 2), keepdim=True)
                                                  + 1e-3) * p["g"])(h.reshape(-1, 2, 3))),
    "group": (4, 8, W_8X4,
              {"s": np.array([1.0, 1.1, 1.2, 1.3], np.float32),
               "b": np.array([0.0, 0.1, 0.2, 0.3], np.float32)},
              lambda h, p: F.group_norm(h.reshape(-1, 4, 2), 2, p["s"], p["b"], eps=1e-3)),
    "view": (4, 8, W_8X4,
             {"s": np.array([1.0, 1.1, 1.2, 1.3], np.float32)},
             lambda h, p: h.reshape(-1, 4, 2) * p["s"].view(4, 1)),
}


def main():
    kind, model, work = sys.argv[1], sys.argv[2], sys.argv[3]
    width, classes, w0, norm0, forward = MODELS[kind]
    os.makedirs(os.path.join(work, "data"), exist_ok=True)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, width)).astype(np.float32)
    y = rng.integers(0, classes, 16).astype(np.int64)
    np.save(os.path.join(work, "data", "x.npy"), x)
    np.save(os.path.join(work, "data", "y.npy"), y)
    out = os.path.join(work, "out")
    subprocess.run(["gpipe-compile", model, "-o", out, "--batch-size", "4",
                    "--optimizer", "sgd", "--lr", "0.5"], check=True, capture_output=True)
    r = subprocess.run(["gpipe-run", out, "--data", os.path.join(work, "data"), "--steps", "4"],
                       check=True, capture_output=True, text=True)
    gp = [float(v) for v in re.findall(r"step \d+ loss ([0-9.e+-]+)", r.stdout)]
    w = torch.tensor(w0, requires_grad=True)
    params = {n: torch.tensor(v, requires_grad=True) for n, v in norm0.items()}
    opt = torch.optim.SGD([w] + list(params.values()), lr=0.5)
    ref = []
    for s in range(4):
        xb, yb = torch.from_numpy(x[4 * s:4 * s + 4]), torch.from_numpy(y[4 * s:4 * s + 4])
        loss = F.cross_entropy(forward(xb @ w.T, params).reshape(-1, classes), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        ref.append(loss.item())
    dl = max(abs(a - b) for a, b in zip(gp, ref)) if len(gp) == 4 else float("inf")
    dw, moved = 0.0, 0.0
    for n, v in params.items():
        trained = np.load(os.path.join(out, "trained", n + ".npy"))
        dw = max(dw, float(np.abs(trained - v.detach().numpy()).max()))
        moved = max(moved, float(np.abs(trained - norm0[n]).max()))
    print("steps %d, max loss diff %.3e, max weight diff %.3e, weights moved %.3e"
          % (len(gp), dl, dw, moved))
    print("ok" if dl <= 1e-5 and dw <= 1e-5 and moved > 1e-3 else "MISMATCH")


if __name__ == "__main__":
    main()
