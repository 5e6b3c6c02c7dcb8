"""The benchmarks' models (--model), shared by bench_step.py and bench_pipeline.py.

  mlp_deep (default): test/e2e/models.py MlpDeep -- DEPTH x (Linear(WIDTH, WIDTH) + ReLU)
    then Linear(WIDTH, CLASSES), cross-entropy; 8 x 1024, 10 classes, batch 256, SGD lr 0.01.
  gpt: test/e2e/models.py GptTiny -- a GPT-style causal LM (token + position embeddings,
    pre-LayerNorm blocks with hand-written causal multi-head attention and a GELU MLP, an
    LM head, cross-entropy over every position); vocab 2048, sequence 64, d 256, 4 blocks,
    8 heads, batch 16, Adam lr 0.001 (issue 11's benchmark model).
  nanogpt: the same LM as nanoGPT writes it (issue 25 point 8): tanh-approximate GELU
    (nn.GELU(approximate="tanh")) and the LM head tied to the token embedding; the same
    sizes, batch, optimizer.
  resnet18: torchvision.models.resnet18(num_classes=10) (torchvision's initialisation) on
    3 x 32 x 32 inputs (x flat [B, 3072], reshaped in the model: test/e2e/models.py
    ResNet18), BatchNorm in training mode, cross-entropy; batch 32, SGD lr 0.001 momentum 0.9
    (issue 12's CNN benchmark; at lr 0.01 the random-data training is chaotic: two fp32
    programs that sum convolutions in different orders differ by 0.05 in loss by step 4, and
    the losses of the two sides stop being comparable). Needs python3-torchvision. Random images with a random
    teacher's labels.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "test", "e2e"))

import numpy as np  # noqa: E402


def add_args(ap):
    ap.add_argument("--model", choices=("mlp_deep", "gpt", "nanogpt", "resnet18"),
                    default="mlp_deep")
    ap.add_argument("--width", type=int, default=None, help="mlp_deep 1024, gpt 256 (d_model)")
    ap.add_argument("--depth", type=int, default=None, help="mlp_deep 8 layers, gpt 4 blocks")
    ap.add_argument("--classes", type=int, default=10, help="mlp_deep only")
    ap.add_argument("--vocab", type=int, default=2048, help="gpt only")
    ap.add_argument("--seq", type=int, default=64, help="gpt only")
    ap.add_argument("--heads", type=int, default=8, help="gpt only")
    ap.add_argument("--batch-size", type=int, default=None,
                    help="mlp_deep 256, gpt 16, resnet18 32")
    ap.add_argument("--optimizer", choices=("sgd", "adam"), default=None,
                    help="mlp_deep sgd, gpt adam, resnet18 sgd")
    ap.add_argument("--lr", type=float, default=None,
                    help="sgd 0.01 (resnet18 0.001), adam 0.001")
    ap.add_argument("--momentum", type=float, default=None,
                    help="sgd only: mlp_deep 0, resnet18 0.9")


def finish_args(a):
    """Fills the model-dependent defaults."""
    gpt = a.model in ("gpt", "nanogpt")
    resnet = a.model == "resnet18"
    for k, v in (("width", 256 if gpt else 1024), ("depth", 4 if gpt else 8),
                 ("batch_size", 16 if gpt else 32 if resnet else 256),
                 ("optimizer", "adam" if gpt else "sgd"),
                 ("momentum", 0.9 if resnet else 0.0)):
        if getattr(a, k) is None:
            setattr(a, k, v)
    if a.lr is None:
        a.lr = 0.001 if a.optimizer == "adam" or resnet else 0.01


def model_argv(a):
    """The arguments that rebuild `a`'s model settings in a worker."""
    return ["--model", a.model, "--width", str(a.width), "--depth", str(a.depth),
            "--classes", str(a.classes), "--vocab", str(a.vocab), "--seq", str(a.seq),
            "--heads", str(a.heads), "--batch-size", str(a.batch_size),
            "--optimizer", a.optimizer, "--lr", repr(a.lr), "--momentum", repr(a.momentum)]


def describe(a, samples):
    if a.model in ("gpt", "nanogpt"):
        m = ("GPT-style LM%s, vocab %d, sequence %d, d %d, %d blocks, %d heads"
             % (" (nanoGPT: tanh GELU, tied head)" if a.model == "nanogpt" else "",
                a.vocab, a.seq, a.width, a.depth, a.heads))
    elif a.model == "resnet18":
        m = ("torchvision resnet18(num_classes=%d) on 3 x 32 x 32, BatchNorm (training), "
             "cross-entropy" % a.classes)
    else:
        m = ("%d x (Linear %d + ReLU) + Linear %d->%d, cross-entropy"
             % (a.depth, a.width, a.width, a.classes))
    opt = "%s lr %g" % (a.optimizer, a.lr) + (" momentum %g" % a.momentum
                                               if a.optimizer == "sgd" else "")
    return "%s; batch %d; %s; %d samples" % (m, a.batch_size, opt, samples)


def make_module(a):
    import models
    if a.model == "gpt":
        return models.GptTiny(a.vocab, a.seq, a.width, a.heads, a.depth)
    if a.model == "nanogpt":
        return models.GptTiny(a.vocab, a.seq, a.width, a.heads, a.depth, tied=True,
                              gelu="tanh")
    if a.model == "resnet18":
        return models.ResNet18(a.classes)
    return models.MlpDeep(width=a.width, depth=a.depth, classes=a.classes)


def make_optimizer(a, params):
    import torch
    if a.optimizer == "adam":
        return torch.optim.Adam(params, lr=a.lr)
    return torch.optim.SGD(params, lr=a.lr, momentum=a.momentum)


def optimizer_flags(a):
    """gpipe-compile's optimizer flags for `a`."""
    flags = ["--optimizer", a.optimizer, "--lr", repr(a.lr)]
    return flags + (["--momentum", repr(a.momentum)] if a.optimizer == "sgd" else [])


def make_data(a, samples):
    """(x, y) of `samples` rows: the e2e data for the default mlp_deep, a random
    teacher for other widths and for resnet18 (x [samples, 3072]: 3 x 32 x 32 images),
    random tokens with a fixed next-token rule for gpt."""
    import models
    rng = np.random.default_rng(0)
    if a.model in ("gpt", "nanogpt"):
        x = rng.integers(0, a.vocab, (samples, a.seq)).astype(np.int64)
        return x, ((7 * x + 3 * np.arange(a.seq) + 1) % a.vocab).astype(np.int64)
    if a.model == "mlp_deep" and (a.width, a.classes) == (1024, 10):
        return models.make_data("mlp_deep", samples, seed=0)
    d = 3 * 32 * 32 if a.model == "resnet18" else a.width
    x = rng.standard_normal((samples, d)).astype(np.float32)
    t = rng.standard_normal((d, a.classes)).astype(np.float32)
    return x, np.argmax(x @ t, axis=1).astype(np.int64)
