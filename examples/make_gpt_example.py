#!/usr/bin/python3
"""Generate the shipped GPT example: a character-level language model of
Shakespeare's Coriolanus.

Reads (next to this script):
  gpt/coriolanus.txt  the opening of Coriolanus (public domain; see README.md)
Writes:
  gpt/gpt.onnx        a GPT-style causal LM with its loss, exported in training
                      mode (opset 17, batch 32; inputs x, y: int64[32, 64]; output: loss)
  gpt/data/x.npy      int64 [N, 64]  windows of character ids
  gpt/data/y.npy      int64 [N, 64]  the same windows shifted by one character
  gpt/vocab.txt       the vocabulary: character i of the file is token id i

The model (nanoGPT's without dropout, small: test/e2e/models.py GptTiny):
token + position embeddings (d = 64), 4 pre-LayerNorm blocks (4-head causal
self-attention with one q/k/v projection and a tril mask buffer, exact-GELU MLP
64 -> 256 -> 64, residuals), a final LayerNorm and an untied LM head over the
text's characters; the loss is the mean cross-entropy of every position's next
character. The windows start every STRIDE characters and are shuffled
once, so that consecutive mini-batches come from different scenes.

Usage:
  /usr/bin/python3 examples/make_gpt_example.py [--check [STEPS]]
  bash tools/run-example.sh      # gpipe-compile examples/gpt/gpt.onnx --stages 4
                                 # --microbatches 8 --optimizer adam --lr 0.003, then
                                 # gpipe-run --data examples/gpt/data --steps 300

--check additionally trains the model in torch with the same settings (Adam,
lr 0.003, mini-batches in order) and prints the loss every 10 steps.
"""

import argparse
import os
import sys
import warnings

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
# The model is the end-to-end tests' GPT (test/e2e/models.py GptTiny), bigger.
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "test", "e2e"))
sys.dont_write_bytecode = True
from models import GptTiny  # noqa: E402

OUT = os.path.join(HERE, "gpt")
TEXT = os.path.join(OUT, "coriolanus.txt")
SEQ, D, HEADS, LAYERS = 64, 64, 4, 4
BATCH, STRIDE = 32, 24
LR = 0.003
SEED = 0


def make_data(text):
    """The vocabulary (sorted characters) and the shuffled windows."""
    vocab = sorted(set(text))
    ids = np.array([vocab.index(c) for c in text], dtype=np.int64)
    starts = np.arange(0, len(ids) - SEQ, STRIDE)
    np.random.default_rng(SEED).shuffle(starts)
    x = np.stack([ids[s:s + SEQ] for s in starts])
    y = np.stack([ids[s + 1:s + SEQ + 1] for s in starts])
    return vocab, x, y


def torch_check(model, x, y, steps):
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    nb = len(x) // BATCH
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    for s in range(1, steps + 1):
        k = ((s - 1) % nb) * BATCH
        opt.zero_grad()
        loss = model(xt[k:k + BATCH], yt[k:k + BATCH])
        loss.backward()
        opt.step()
        if s == 1 or s % 10 == 0:
            print("torch step %d loss %.6f" % (s, loss.item()), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", type=int, nargs="?", const=150, default=0, metavar="STEPS",
                    help="also train in torch for STEPS steps (default 150), printing losses")
    a = ap.parse_args()
    torch.set_num_threads(1)

    with open(TEXT, encoding="ascii") as f:
        text = f.read()
    vocab, x, y = make_data(text)
    os.makedirs(os.path.join(OUT, "data"), exist_ok=True)
    np.save(os.path.join(OUT, "data", "x.npy"), x)
    np.save(os.path.join(OUT, "data", "y.npy"), y)
    with open(os.path.join(OUT, "vocab.txt"), "w", encoding="ascii") as f:
        f.write("".join(vocab))

    torch.manual_seed(SEED)
    model = GptTiny(len(vocab), SEQ, D, HEADS, LAYERS)
    path = os.path.join(OUT, "gpt.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.from_numpy(x[:BATCH]), torch.from_numpy(y[:BATCH])),
                          path, input_names=["x", "y"], output_names=["loss"],
                          training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False, opset_version=17)
    import onnx
    m = onnx.load(path)
    onnx.checker.check_model(m)
    params = sum(p.numel() for p in model.parameters())
    print("wrote %s: %d parameters, ops %s"
          % (path, params, " ".join(sorted({n.op_type for n in m.graph.node}))))
    print("wrote %s/data/x.npy, y.npy: %d windows of %d characters from %d characters of "
          "text, vocabulary of %d" % (OUT, len(x), SEQ, len(text), len(vocab)))
    if a.check:
        torch_check(model, x, y, a.check)
    return 0


if __name__ == "__main__":
    sys.exit(main())
