#!/usr/bin/python3
"""Generate the example training graph and data set.

Writes (next to this script):
  mlp.onnx      Linear(20,32)-GELU-Linear(32,32)-Sigmoid-Linear(32,4) + cross-entropy loss,
                exported in training mode, opset 17, batch size 32
                (inputs x: float32[32,20], y: int64[32]; output: loss)
  data/x.npy    float32 [256, 20]
  data/y.npy    int64   [256]  (labels 0..3 of a learnable synthetic task)

The task: y = argmax(x @ T) for a fixed random teacher T (20 x 4), so a
small MLP can fit it and the loss decreases visibly within a few epochs.

Usage:
  /usr/bin/python3 examples/make_example.py [--check]
  gpipe-compile examples/mlp.onnx -o /tmp/mlp_out --batch-size 32 --target cpu \\
      --optimizer adam --lr 0.01
  gpipe-run /tmp/mlp_out --data examples/data --steps 80

--check additionally trains the model in torch with the same settings
(Adam, lr 0.01, 80 steps) and prints the loss every 8 steps (one epoch).
"""

import argparse
import os
import sys
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
D_IN, HIDDEN, CLASSES = 20, 32, 4
BATCH, SAMPLES = 32, 256
SEED = 0


class ExampleMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(D_IN, HIDDEN)
        self.act1 = nn.GELU()  # exact GELU: exported with Erf
        self.fc2 = nn.Linear(HIDDEN, HIDDEN)
        self.fc3 = nn.Linear(HIDDEN, CLASSES)

    def forward(self, x, y):
        logits = self.fc3(torch.sigmoid(self.fc2(self.act1(self.fc1(x)))))
        return F.cross_entropy(logits, y)


def make_data():
    rng = np.random.default_rng(SEED)
    x = rng.standard_normal((SAMPLES, D_IN)).astype(np.float32)
    teacher = rng.standard_normal((D_IN, CLASSES)).astype(np.float32)
    y = np.argmax(x @ teacher, axis=1).astype(np.int64)
    return x, y


def torch_check(x, y, steps=80, lr=0.01):
    torch.manual_seed(SEED)
    m = ExampleMLP()
    opt = torch.optim.Adam(m.parameters(), lr=lr)
    nb = SAMPLES // BATCH
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    for s in range(1, steps + 1):
        k = ((s - 1) % nb) * BATCH
        opt.zero_grad()
        loss = m(xt[k:k + BATCH], yt[k:k + BATCH])
        loss.backward()
        opt.step()
        if s == 1 or s % nb == 0:
            print("torch step %d loss %.6f" % (s, loss.item()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="also train in torch and print losses")
    ap.add_argument("--outdir", default=HERE)
    a = ap.parse_args()
    torch.set_num_threads(1)

    x, y = make_data()
    os.makedirs(os.path.join(a.outdir, "data"), exist_ok=True)
    np.save(os.path.join(a.outdir, "data", "x.npy"), x)
    np.save(os.path.join(a.outdir, "data", "y.npy"), y)

    torch.manual_seed(SEED)
    model = ExampleMLP()
    path = os.path.join(a.outdir, "mlp.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.from_numpy(x[:BATCH]), torch.from_numpy(y[:BATCH])), path,
                          input_names=["x", "y"], output_names=["loss"],
                          training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False, opset_version=17)
    import onnx
    m = onnx.load(path)
    onnx.checker.check_model(m)
    print("wrote %s: ops %s" % (path, " ".join(sorted({n.op_type for n in m.graph.node}))))
    print("  initializers: %s" % ", ".join("%s%s" % (t.name, list(t.dims))
                                           for t in m.graph.initializer))
    print("wrote %s/data/x.npy %s %s, y.npy %s %s (class counts %s)"
          % (a.outdir, x.shape, x.dtype, y.shape, y.dtype, np.bincount(y, minlength=CLASSES)))
    if a.check:
        torch_check(x, y)
    return 0


if __name__ == "__main__":
    sys.exit(main())
