#!/usr/bin/python3
"""End-to-end training check: gpipe-compile/gpipe-run vs a torch.optim reference.

Steps:
  1. export model NAME (test/e2e/models.py) to WORKDIR/model.onnx with batch B;
  2. write WORKDIR/data/x.npy (float32 [S, in]) and y.npy (int64 [S]);
  3. train a fresh torch copy of the model, initialised from the exported
     initializers (by name), with the matching torch.optim optimizer for N
     steps, mini-batch s = samples [((s-1) mod (S//B))*B, +B);
  4. run gpipe-compile and gpipe-run --save-onnx WORKDIR/trained.onnx
     --log-json WORKDIR/log.jsonl;
  5. compare every trained initializer with the torch parameter of the same
     name (||a-b||_2 / max(||b||_2, 1e-12) <= tol), the per-step losses
     (|l_gp - l_torch| <= tol * max(1, |l_torch|)), and check the weights
     actually moved away from their initial values.

Pipelining (--stages K, --microbatches M, --remat R are passed to gpipe-compile):
with K > 1 or M > 1 (or --compare-single), the same model.onnx and data are also
compiled with --stages 1 --microbatches 1 --remat none into WORKDIR/out_single and
run; the K/M run's trained initializers and per-step losses must then ALSO equal
that 1-stage program's, with the same formulas and tolerance (the 1-stage run
taking torch's place).  OUT/pipeline.json must describe K stages (each with its
executable), M micro-batches and remat R.  For a model with an ignore_index,
M > 1 additionally requires some mini-batch whose micro-batches hold different
numbers of non-ignored labels (else a mean of micro-batch means could pass).

BatchNorm (models holding nn.BatchNorm1d/2d, exported in training mode): gpipe normalizes
with each micro-batch's statistics, so the torch reference calls the module once per
micro-batch, in order, and sums the gradients of loss_m * B_m / B before one optimizer step
(the reported loss is the same weighted sum); models without BatchNorm are called once on
the whole mini-batch.  The running statistics (initializers that are BatchNorm buffers:
running_mean, running_var) are compared with torch's after training (relative L2 error <=
--stat-tol, default 1e-4) and must have moved from their initial values.  With --batchnorm
deferred (passed to gpipe-compile) the reference leaves the running statistics alone during
the micro-batch calls and updates them once per step with torch's batch_norm over the
concatenation of the step's micro-batch inputs to that layer (mean and unbiased variance of
all B samples; --stat-tol default 1e-5).  The 1-stage reference program of a BatchNorm model
keeps M micro-batches (--stages 1 --microbatches M --remat none, and the run's --batchnorm).

--prepared DIR (prepare.py writes DIR): steps 1-3 come from DIR/<prep_key>, whose key
hashes exactly the arguments that determine the export, the data and the torch reference
(prep_args); model.onnx and data/ are copied into WORKDIR, the reference's results loaded,
and this process does not import torch (the check fails if it did).  Without the entry
(or with a DIR written by other sources) steps 1-3 run here, as without --prepared.
--single-cache DIR: the reference program's (step 4b) out_single/, logs, log_single.jsonl
and trained_single.onnx are cached in DIR/<sha256 of model.onnx, the data, its command
lines and the identity of the tools and runtime> and reused; the checks are the same.

Exit status: 0 = pass, 1 = any failure (tool error or mismatch), 2 = bad usage.

Examples:
  /usr/bin/python3 test/e2e/check_training.py --model mlp_tanh --optimizer sgd \\
      --lr 0.1 --momentum 0.9 --steps 20 --batch-size 16 --bin build/bin
  /usr/bin/python3 test/e2e/check_training.py --model mlp_skip --optimizer sgd \\
      --lr 0.05 --momentum 0.9 --steps 10 --batch-size 32 \\
      --stages 4 --microbatches 8 --remat stage --bin build/bin
"""

import argparse
import decimal
import hashlib
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402

# torch is imported lazily (models.py, torch_reference, ...): a case whose model, data and
# torch reference come from --prepared (prepare.py) never imports it (~1 s per process).
# modelspec is models.py's torch-free half (model table, data, batch order).
import modelspec  # noqa: E402

# Optimizer defaults, matching torch.optim's.
DEFAULT_WD = {"sgd": 0.0, "adam": 0.0, "adamw": 0.01}
DEFAULT_LR = {"sgd": 0.1, "adam": 0.01, "adamw": 0.01}


class CheckFailed(Exception):
    pass


def log(msg=""):
    print(msg, flush=True)


# The tightest tolerance a --target cuda fp32 run is held to (see parse_args).
CUDA_FP32_TOL_FLOOR = 1e-4


def parse_args(argv):
    ap = argparse.ArgumentParser(
        description="gpipe-compile end-to-end training check against torch.optim",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--model", required=True, choices=sorted(modelspec.MODELS))
    ap.add_argument("--optimizer", default="sgd", choices=["sgd", "adam", "adamw"])
    ap.add_argument("--lr", type=float, default=None,
                    help="learning rate (default: sgd 0.1, adam/adamw 0.01)")
    ap.add_argument("--momentum", type=float, default=0.0, help="SGD momentum")
    ap.add_argument("--nesterov", action="store_true", help="SGD Nesterov momentum")
    ap.add_argument("--weight-decay", type=float, default=None,
                    help="default: torch's (0 for sgd/adam, 0.01 for adamw); always "
                         "passed explicitly to gpipe-compile")
    ap.add_argument("--betas", default="0.9,0.999", help="Adam/AdamW betas B1,B2")
    ap.add_argument("--eps", type=float, default=1e-8, help="Adam/AdamW eps")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--dynamic-batch", action="store_true",
                    help="export with a symbolic batch dimension (torch dynamic_axes)")
    ap.add_argument("--export-batch-size", type=int, default=None,
                    help="batch the model is exported with (default: --batch-size); "
                         "gpipe-compile is always given --batch-size")
    ap.add_argument("--samples", type=int, default=None,
                    help="number of samples S (default 4*batch-size); drop_last")
    ap.add_argument("--opset", type=int, default=modelspec.DEFAULT_OPSET)
    ap.add_argument("--freeze", default=None, metavar="REGEX",
                    help="gpipe-compile --freeze REGEX; torch: requires_grad = False on the "
                         "parameters whose whole name matches; their trained values must equal "
                         "the initial ones bit for bit")
    ap.add_argument("--gelu-opset20", action="store_true",
                    help="rewrite the export as torch >= 2.9 writes GELU: one opset-20 Gelu "
                         "node per exact-GELU pattern, opset 20, IR version 10")
    ap.add_argument("--fixture", default=None, metavar="NAME",
                    help="train test/e2e/fixtures/NAME.onnx (written by torch >= 2.9, see "
                         "fixtures.json) instead of exporting with this torch; the torch "
                         "reference loads its initial weights from it by name")
    ap.add_argument("--seed", type=int, default=modelspec.DEFAULT_SEED,
                    help="torch.manual_seed for the initial weights")
    ap.add_argument("--data-seed", type=int, default=0, help="numpy seed for the data")
    ap.add_argument("--shuffle", type=int, default=None, metavar="SEED",
                    help="gpipe-run --shuffle --seed SEED; the reference reads the same "
                         "permutations (models.epoch_order)")
    ap.add_argument("--bin", default=os.environ.get("GPIPE_BIN"),
                    help="directory holding gpipe-compile and gpipe-run (default $GPIPE_BIN, "
                         "else looked up on PATH)")
    ap.add_argument("--workdir", default=None,
                    help="work directory (default: a fresh temporary directory, kept)")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--min-change", type=float, default=None,
                    help="require the largest relative change of a parameter in the torch "
                         "reference to be >= this (default 10*tol), so that an untrained "
                         "result cannot pass the tolerance check")
    ap.add_argument("--threads", type=int, default=None, help="passed to gpipe-run --threads")
    ap.add_argument("--stages", type=int, default=None,
                    help="gpipe-compile --stages K (not passed when omitted: compiler default 1)")
    ap.add_argument("--microbatches", type=int, default=None,
                    help="gpipe-compile --microbatches M (not passed when omitted: default 1); "
                         "--batch-size must be divisible by M")
    ap.add_argument("--remat", choices=["stage", "none", "auto"], default=None,
                    help="gpipe-compile --remat (not passed when omitted: compiler default)")
    ap.add_argument("--remat-stages", dest="remat_stages", default=None, metavar="LIST",
                    help="gpipe-compile --remat-stages (with --remat stage: only these "
                         "stages rematerialize)")
    ap.add_argument("--memory-per-stage", dest="memory_per_stage", default=None,
                    metavar="BYTES",
                    help="gpipe-compile --memory-per-stage; with --remat auto pipeline.json "
                         "must say remat segments, and (--expect-segments) some stage must keep "
                         "part of its stash")
    ap.add_argument("--expect-segments", dest="expect_segments", action="store_true",
                    help="with --memory-per-stage: require pipeline.json's remat_stash_bytes to "
                         "limit some stage's stash and leave another's whole (-1)")
    ap.add_argument("--schedule", default=None,
                    help="gpipe-compile --schedule (not passed when omitted: gpipe); with a "
                         "schedule other than gpipe the reference program (--compare-single) "
                         "is the same pipeline with --schedule gpipe")
    cs = ap.add_mutually_exclusive_group()
    cs.add_argument("--compare-single", dest="compare_single", action="store_true",
                    default=None,
                    help="also compile and run the model with --stages 1 --microbatches 1 "
                         "(M for a model with BatchNorm) "
                         "--remat none and require the trained weights and losses to equal it "
                         "(default: on when --stages > 1 or --microbatches > 1)")
    cs.add_argument("--no-compare-single", dest="compare_single", action="store_false",
                    help="do not run the 1-stage comparison")
    ap.add_argument("--partition", default=None, metavar="NODES",
                    help="gpipe-compile --partition (split points by hand); the GPipe "
                         "reference of a schedule keeps them (with one chunk per stage)")
    ap.add_argument("--data-parallel", dest="data_parallel", type=int, default=None,
                    help="gpipe-compile --data-parallel D (D replicas, --batch-size the "
                         "global batch); the reference program (--compare-single) is the "
                         "same pipeline with one replica")
    ap.add_argument("--shard-optimizer", dest="shard_optimizer", action="store_true",
                    help="gpipe-compile --shard-optimizer (with --data-parallel): every "
                         "stage's optimizer_state_bytes in pipeline.json must be at most "
                         "half the reference program's, rounded up to the arena's alignment")
    ap.add_argument("--virtual-stages", type=int, default=None,
                    help="gpipe-compile --virtual-stages (model chunks per stage, "
                         "--schedule interleaved)")
    ap.add_argument("--target", choices=["cpu", "cuda"], default="cpu",
                    help="gpipe-compile --target of the run under test; with cuda the "
                    "reference program (--compare-single) is the same configuration "
                    "compiled for the CPU target")
    ap.add_argument("--cuda-arch", default=None, help="gpipe-compile --cuda-arch (cuda)")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                    help="gpipe-compile --precision (the reference program gets it too); "
                    "with bf16 the comparison with torch (fp32) uses --bf16-tol and the run "
                    "must differ from torch by more than 1e-6 (the rounding happens)")
    ap.add_argument("--ref-tol", dest="ref_tol_arg", type=float, default=None,
                    help="tolerance against the reference program (default --tol); e.g. "
                         "1e-6 for a schedule against the same pipeline under GPipe")
    ap.add_argument("--bf16-tol", type=float, default=5e-2,
                    help="bf16: tolerance against torch's fp32 training")
    ap.add_argument("--expect-ops", default=None, metavar="OP=N,...",
                    help="the forward functions of OUT/pipeline.mlir must hold exactly N ops "
                    "named OP in all, for each OP=N (e.g. nn.layer_norm=5,nn.sqrt=0: the "
                    "layer norms of an opset-13 export fused)")
    ap.add_argument("--expect-per-step", default=None, metavar="TYPE=N",
                    help="all stages of OUT/pipeline.mlir together must send exactly N tensors "
                    "of type TYPE per step (a send in a forward or backward counts M times, a "
                    "per_step one or one in an update once), and no backward may read one "
                    "from its stash (e.g. tensor<50x16xf32>=2: a tied weight's value and "
                    "gradient, once per step each)")
    ap.add_argument("--batchnorm", choices=["microbatch", "deferred"], default=None,
                    help="gpipe-compile --batchnorm (not passed when omitted: microbatch). "
                    "deferred: the torch reference updates each BatchNorm's running "
                    "statistics once per step from the whole mini-batch's BN input (mean, "
                    "unbiased variance), as torchgpipe's DeferredBatchNorm")
    ap.add_argument("--stat-tol", type=float, default=None,
                    help="relative tolerance of the BatchNorm running statistics (float "
                    "initializers that are torch buffers) against torch (default 1e-4, "
                    "1e-5 with --batchnorm deferred)")
    ap.add_argument("--timeout", type=float, default=900.0,
                    help="seconds allowed for each of gpipe-compile / gpipe-run")
    ap.add_argument("--prepared", default=None, metavar="DIR",
                    help="take model.onnx, data/ and the torch reference's results from "
                    "DIR/<key> (written by prepare.py; key: prep_key) instead of exporting "
                    "and training here, without importing torch; when DIR/<key> is missing "
                    "(or DIR is stale), export and train here as without it")
    ap.add_argument("--single-cache", default=None, metavar="DIR",
                    help="content-addressed cache of the reference program's results "
                    "(--compare-single): keyed by model.onnx, the data, the reference's "
                    "gpipe-compile/gpipe-run flags and the identity of the tools and the "
                    "runtime library; a hit reuses out_single/, its logs and "
                    "trained_single.onnx instead of compiling and running it again")
    a = ap.parse_args(argv)

    if a.lr is None:
        a.lr = DEFAULT_LR[a.optimizer]
    if a.weight_decay is None:
        a.weight_decay = DEFAULT_WD[a.optimizer]
    try:
        b = [float(v) for v in a.betas.split(",")]
        if len(b) != 2:
            raise ValueError
        a.betas_t = (b[0], b[1])
    except ValueError:
        ap.error("--betas must be two comma-separated floats, e.g. 0.9,0.999")
    if a.samples is None:
        a.samples = 4 * a.batch_size
    if a.batch_size <= 0 or a.steps <= 0:
        ap.error("--batch-size and --steps must be positive")
    if a.samples < a.batch_size:
        ap.error("--samples must be >= --batch-size")
    if a.optimizer != "sgd" and (a.momentum != 0.0 or a.nesterov):
        ap.error("--momentum/--nesterov only apply to --optimizer sgd")
    if a.nesterov and a.momentum <= 0.0:
        ap.error("--nesterov requires --momentum > 0 (as torch.optim.SGD)")
    if a.min_change is None:
        a.min_change = 10.0 * a.tol
    if a.stages is not None and a.stages < 1:
        ap.error("--stages must be >= 1")
    if a.microbatches is not None and a.microbatches < 1:
        ap.error("--microbatches must be >= 1")
    if a.microbatches is not None and a.batch_size % a.microbatches != 0:
        ap.error("--batch-size %d is not divisible by --microbatches %d"
                 % (a.batch_size, a.microbatches))
    if a.compare_single is None:
        a.compare_single = ((a.stages or 1) > 1 or (a.microbatches or 1) > 1
                            or (a.data_parallel or 1) > 1)
    a.expect_ops_d = {}
    for item in (a.expect_ops.split(",") if a.expect_ops else []):
        op, _, n = item.partition("=")
        if not re.fullmatch(r"[a-z_]+\.[a-z_0-9]+", op.strip()) or not n.strip().isdigit():
            ap.error("--expect-ops must be OP=N,... (e.g. nn.layer_norm=5), got %r"
                     % a.expect_ops)
        a.expect_ops_d[op.strip()] = int(n)
    if a.target == "cuda":
        a.compare_single = True
    # Tolerances against torch and against the reference program.
    a.torch_tol = a.bf16_tol if a.precision == "bf16" else a.tol
    # Dropout: torch draws other masks; the run is checked against its own
    # 1-stage program, and must differ from torch trained without dropout.
    a.dropout = modelspec.MODELS[a.model].dropout
    if a.dropout:
        a.torch_tol = float("inf")
        a.compare_single = True
    a.ref_tol = 1e-3 if a.precision == "bf16" and a.target == "cuda" else a.tol
    if a.ref_tol_arg is not None and a.target == "cpu":
        a.ref_tol = a.ref_tol_arg
    if a.target == "cuda" and a.precision != "bf16":
        # cuBLASLt's summation order and nvcc's FMA contraction (the CPU stages
        # build without contraction) differ from the CPU target's by more than
        # a tight --tol after a few Adam steps: fp32 on CUDA is checked at
        # CUDA_FP32_TOL_FLOOR at the tightest.
        a.ref_tol = max(a.ref_tol, CUDA_FP32_TOL_FLOOR)
        a.torch_tol = max(a.torch_tol, CUDA_FP32_TOL_FLOOR)
    # BatchNorm: statistics per micro-batch, so the torch reference calls the module once
    # per micro-batch and the 1-stage reference program keeps M micro-batches.
    # (models.build checks the flag against the module: models.has_batchnorm)
    a.batchnorm_model = modelspec.MODELS[a.model].batchnorm
    a.fixture_entry = None
    if a.fixture:
        try:
            a.fixture_entry = modelspec.fixture(a.fixture)
        except (KeyError, OSError, ValueError) as e:
            ap.error("--fixture %s: %s" % (a.fixture, e))
        fx = a.fixture_entry
        if fx["model"] != a.model or fx["seed"] != a.seed:
            ap.error("--fixture %s was exported from model %s with seed %d, not %s and %d"
                     % (a.fixture, fx["model"], fx["seed"], a.model, a.seed))
        if a.gelu_opset20 or a.dynamic_batch or a.export_batch_size not in (None, fx["batch"]):
            ap.error("--fixture %s: the export is the fixture's (batch %d); "
                     "--gelu-opset20, --dynamic-batch and another --export-batch-size do "
                     "not apply" % (a.fixture, fx["batch"]))
        a.export_batch_size = fx["batch"]
    if a.stat_tol is None:
        a.stat_tol = 1e-5 if a.batchnorm == "deferred" else 1e-4
    # (bf16 loosens them as it loosens the parameters')
    a.torch_stat_tol = max(a.stat_tol, a.torch_tol) if a.precision == "bf16" else a.stat_tol
    a.ref_stat_tol = max(a.stat_tol, a.ref_tol) if a.precision == "bf16" else a.stat_tol
    if a.batchnorm_model and modelspec.MODELS[a.model].ignore_index is not None:
        ap.error("models with BatchNorm and an ignore_index are not supported by the "
                 "per-micro-batch reference")
    return a


def pipeline_flags(a):
    """gpipe-compile flags of the run under test (only the ones given)."""
    f = []
    if a.stages is not None:
        f += ["--stages", str(a.stages)]
    if a.microbatches is not None:
        f += ["--microbatches", str(a.microbatches)]
    if a.remat is not None:
        f += ["--remat", a.remat]
    if a.remat_stages is not None:
        f += ["--remat-stages", a.remat_stages]
    if a.memory_per_stage is not None:
        f += ["--memory-per-stage", a.memory_per_stage]
    if a.schedule is not None:
        f += ["--schedule", a.schedule]
    if a.virtual_stages is not None:
        f += ["--virtual-stages", str(a.virtual_stages)]
    if a.partition is not None:
        f += ["--partition", a.partition]
    if a.batchnorm is not None:
        f += ["--batchnorm", a.batchnorm]
    if a.data_parallel is not None:
        f += ["--data-parallel", str(a.data_parallel)]
    if a.shard_optimizer:
        f += ["--shard-optimizer"]
    return f


# The reference program of --compare-single: one stage, no micro-batching, no recomputation.
SINGLE_FLAGS = ["--stages", "1", "--microbatches", "1", "--remat", "none"]
REF = "1-stage program"  # what --compare-single compares against (run_check sets it)


def find_tool(bindir, name):
    if bindir:
        p = os.path.join(bindir, name)
        if not (os.path.isfile(p) and os.access(p, os.X_OK)):
            raise CheckFailed("%s not found or not executable in --bin %s" % (name, bindir))
        return os.path.abspath(p)
    p = shutil.which(name)
    if not p:
        raise CheckFailed("%s not found: pass --bin DIR or set GPIPE_BIN" % name)
    return p


def make_optimizer(a, params):
    import torch
    if a.optimizer == "sgd":
        return torch.optim.SGD(params, lr=a.lr, momentum=a.momentum, dampening=0.0,
                               weight_decay=a.weight_decay, nesterov=a.nesterov)
    kw = dict(lr=a.lr, betas=a.betas_t, eps=a.eps, weight_decay=a.weight_decay,
              amsgrad=False, foreach=False)
    if a.optimizer == "adam":
        return torch.optim.Adam(params, **kw)
    return torch.optim.AdamW(params, **kw)


def optimizer_flags(a):
    f = ["--optimizer", a.optimizer, "--lr", repr(a.lr)]
    if a.optimizer == "sgd":
        f += ["--momentum", repr(a.momentum)]
        if a.nesterov:
            f += ["--nesterov"]
        f += ["--weight-decay", repr(a.weight_decay)]
    else:
        f += ["--weight-decay", repr(a.weight_decay),
              "--betas", "%r,%r" % a.betas_t, "--eps", repr(a.eps)]
    if a.freeze:
        f += ["--freeze", a.freeze]
    return f


def batchnorm_modules(module):
    import torch
    return [(n, m) for n, m in module.named_modules()
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]


def bn_step(a, module, xb, yb):
    """One mini-batch's forward and backward for a model with BatchNorm: the module is
    called once per micro-batch, in order (GPipe's statistics per micro-batch), the
    gradients of loss_m * B_m / B are summed (no ignored labels: the mini-batch's mean
    loss is the average of the micro-batch means weighted so). Returns the mini-batch
    loss. With --batchnorm deferred the modules' running statistics are left as they
    were during the micro-batch calls and then updated once from the concatenation of
    every micro-batch's BN input (torch's own batch_norm over the whole mini-batch)."""
    import torch
    m = a.microbatches or 1
    bsz = xb.shape[0]
    mb = bsz // m
    bns = batchnorm_modules(module)
    deferred = a.batchnorm == "deferred"
    inputs = {n: [] for n, _ in bns}
    saved = {}
    hooks = []
    if deferred:
        for n, bn in bns:
            saved[n] = (bn.running_mean.clone(), bn.running_var.clone())
            hooks.append(bn.register_forward_pre_hook(
                lambda mod, inp, n=n: inputs[n].append(inp[0].detach().clone())))
    total = 0.0
    try:
        for i in range(m):
            lo, hi = i * mb, (i + 1) * mb
            loss = module(xb[lo:hi], yb[lo:hi])
            (loss * ((hi - lo) / bsz)).backward()
            total += float(loss.item()) * (hi - lo) / bsz
    finally:
        for h in hooks:
            h.remove()
    if deferred:
        with torch.no_grad():
            for n, bn in bns:
                rm, rv = saved[n]
                bn.running_mean.copy_(rm)
                bn.running_var.copy_(rv)
                if len(inputs[n]) != m:
                    raise CheckFailed("deferred reference: BatchNorm %s ran %d times in a "
                                      "step, expected %d" % (n, len(inputs[n]), m))
                torch.nn.functional.batch_norm(
                    torch.cat(inputs[n], 0), bn.running_mean, bn.running_var, None, None,
                    training=True, momentum=bn.momentum, eps=bn.eps)
    return total


def torch_reference(a, init, x, y):
    """Train a fresh module from the initializers `init`; return (losses, params, last_delta,
    extra, buffers): buffers are the BatchNorm running statistics (running_mean, running_var,
    torch buffers with an initializer of the same name) after training."""
    import torch
    import models
    module = models.build(a.model, a.seed)
    loaded, extra = models.load_into_module(module, init)
    module.train()
    if a.dropout:
        module.eval()  # the models' only train/eval difference is dropout
    if a.freeze:  # torch's requires_grad = False on the parameters --freeze names
        for n, p in module.named_parameters():
            if re.fullmatch(a.freeze, n):
                p.requires_grad_(False)
    opt = make_optimizer(a, list(module.parameters()))
    xt = torch.from_numpy(x)
    yt = torch.from_numpy(y)
    losses = []
    before_last = None
    for s in range(1, a.steps + 1):
        rows = torch.from_numpy(modelspec.batch_rows(s, a.batch_size, a.samples, a.shuffle))
        if s == a.steps:
            before_last = {n: p.detach().clone() for n, p in module.named_parameters()}
        opt.zero_grad(set_to_none=True)
        if a.batchnorm_model:
            lv = bn_step(a, module, xt[rows], yt[rows])
        else:
            loss = module(xt[rows], yt[rows])
            loss.backward()
            lv = float(loss.item())
        opt.step()
        losses.append(lv)
    params = {n: p.detach().numpy().copy() for n, p in module.named_parameters()}
    # a tied parameter's other names, as the model may name it (models.param_aliases)
    for n, names in models.param_aliases(module).items():
        for alias in names:
            if alias in init and alias not in params:
                params[alias] = params[n]
                before_last[alias] = before_last[n]
    # BatchNorm running statistics (other buffers, e.g. attn_causal's mask, are constants)
    buffers = {}
    for bn_name, bn in batchnorm_modules(module):
        for k in ("running_mean", "running_var"):
            n = bn_name + "." + k if bn_name else k
            b = getattr(bn, k)
            if n in init and b is not None:
                buffers[n] = b.detach().numpy().copy()
    last_delta = {}
    for n, p in params.items():
        b = before_last[n].numpy()
        last_delta[n] = float(np.linalg.norm((p - b).ravel())) / max(
            float(np.linalg.norm(b.ravel())), 1e-12)
    return losses, params, last_delta, extra, buffers


def run_tool(cmd, logfile, timeout, env=None):
    log("$ " + " ".join(shlex.quote(c) for c in cmd))
    t0 = time.time()
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=timeout, env=env)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace")
        with open(logfile, "w") as f:
            f.write(out)
        raise CheckFailed("%s timed out after %.0fs (output in %s)" % (cmd[0], timeout, logfile))
    out = p.stdout.decode(errors="replace")
    with open(logfile, "w") as f:
        f.write(out)
    dt = time.time() - t0
    if p.returncode != 0:
        tail = "\n".join(out.splitlines()[-30:])
        raise CheckFailed("%s exited with status %d after %.1fs; output (last lines, full log "
                          "in %s):\n%s" % (os.path.basename(cmd[0]), p.returncode, dt, logfile,
                                           tail))
    log("  (ok, %.1fs)" % dt)
    return out


def parse_log_json(path, steps):
    if not os.path.isfile(path):
        raise CheckFailed("gpipe-run did not write --log-json file %s" % path)
    recs = []
    with open(path) as f:
        for i, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                r = json.loads(line)
            except ValueError as e:
                raise CheckFailed("%s:%d: not valid JSON (%s): %r" % (path, i, e, line[:200]))
            for k in ("step", "loss", "ms"):
                if k not in r:
                    raise CheckFailed("%s:%d: missing key %r: %r" % (path, i, k, line[:200]))
            recs.append(r)
    got = [r["step"] for r in recs]
    if got != list(range(1, steps + 1)):
        raise CheckFailed("%s: expected steps 1..%d in order, got %s"
                          % (path, steps, got if len(got) <= 20 else got[:10] + ["..."]
                             + got[-5:]))
    losses = []
    for r in recs:
        l = r["loss"]
        if not isinstance(l, (int, float)) or isinstance(l, bool):
            raise CheckFailed("%s: step %s: loss is not a number: %r" % (path, r["step"], l))
        if not isinstance(r["ms"], (int, float)) or r["ms"] < 0:
            raise CheckFailed("%s: step %s: bad ms %r" % (path, r["step"], r["ms"]))
        losses.append(float(l))
    return losses, [float(r["ms"]) for r in recs]


STEP_RE = re.compile(r"^\s*step\s+(\d+)\s+loss\s+(\S+)\s*$")


def check_stdout_steps(out, json_losses, tol):
    """gpipe-run must print 'step <s> loss <l>' for s = 1..N, consistent with the JSON log
    (up to the printed precision)."""
    seen = []
    for line in out.splitlines():
        m = STEP_RE.match(line)
        if m:
            seen.append((int(m.group(1)), m.group(2)))
    n = len(json_losses)
    if [s for s, _ in seen] != list(range(1, n + 1)):
        raise CheckFailed("gpipe-run stdout: expected lines 'step <s> loss <l>' for s=1..%d, "
                          "found steps %s" % (n, [s for s, _ in seen][:20]))
    for (s, txt), lj in zip(seen, json_losses):
        try:
            d = decimal.Decimal(txt)
            v = float(d)
        except (decimal.InvalidOperation, ValueError):
            raise CheckFailed("gpipe-run stdout: step %d: unparsable loss %r" % (s, txt))
        exp = d.as_tuple().exponent
        half_ulp = 0.5 * 10.0 ** exp if isinstance(exp, int) else 0.0
        allow = max(half_ulp * 1.0001, tol * max(1.0, abs(lj)))
        if not (abs(v - lj) <= allow):
            raise CheckFailed("gpipe-run stdout: step %d prints loss %s but --log-json has %r"
                              % (s, txt, lj))


def check_segments(out_dir, budget):
    """remat segments: some stage's stash is limited (remat_stash_bytes >= 0), and every
    stage's planned arena fits the budget."""
    path = os.path.join(out_dir, "pipeline.json")
    pj = json.load(open(path))
    limits = pj.get("remat_stash_bytes") or []
    fails = []
    if not any(b >= 0 for b in limits):
        fails.append("%s: remat_stash_bytes %r limits no stage" % (path, limits))
    for s, st in enumerate(pj["stages"]):
        arena = st["memory"]["arena_bytes"]
        if not 0 < arena <= budget:
            fails.append("%s: stage %d's arena %d bytes, budget %d" % (path, s, arena, budget))
    if not fails:
        log("remat segments: stash limits %s; stashes per micro-batch %s" % (
            limits, [st["memory"]["activation_bytes_per_microbatch"] for st in pj["stages"]]))
    return fails


def check_pipeline_json(out_dir, stages, microbatches, remat):
    """Return a list of failures: OUT/pipeline.json must describe `stages` stages (each with
    an existing executable), `microbatches` micro-batches and `remat` (None: not checked)."""
    path = os.path.join(out_dir, "pipeline.json")
    try:
        with open(path) as f:
            pj = json.load(f)
    except (OSError, ValueError) as e:
        return ["%s: cannot read: %s" % (path, e)]
    fails = []
    st = pj.get("stages")
    if not isinstance(st, list):
        return ["%s: no 'stages' list" % path]
    if stages is not None and len(st) != stages:
        fails.append("%s: %d stage(s), expected %d" % (path, len(st), stages))
    for i, s in enumerate(st):
        exe = s.get("executable") if isinstance(s, dict) else None
        p = os.path.join(out_dir, exe) if isinstance(exe, str) else None
        if not p or not (os.path.isfile(p) and os.access(p, os.X_OK)):
            fails.append("%s: stage %d executable %r missing or not executable" % (path, i, exe))
    if microbatches is not None and pj.get("microbatches") != microbatches:
        fails.append("%s: microbatches %r, expected %d"
                     % (path, pj.get("microbatches"), microbatches))
    if remat is not None and pj.get("remat") != remat:
        fails.append("%s: remat %r, expected %r" % (path, pj.get("remat"), remat))
    return fails


def check_sharded_state(out_dir, ref_dir, replicas):
    """--shard-optimizer: the stages' optimizer_state_bytes (pipeline.json), summed, are at
    most the reference's / replicas plus the 64-byte alignment of each state slot (the
    reference's partition may cut elsewhere: its micro-batches are D times larger, so the
    stages are compared together), and the reference has state to split."""
    try:
        got = json.load(open(os.path.join(out_dir, "pipeline.json")))["stages"]
        ref = json.load(open(os.path.join(ref_dir, "pipeline.json")))["stages"]
        gb = sum(st["memory"]["optimizer_state_bytes"] for st in got)
        rb = sum(st["memory"]["optimizer_state_bytes"] for st in ref)
    except (OSError, ValueError, KeyError) as e:
        return ["--shard-optimizer: cannot read the pipeline.json files: %s" % e]
    if rb <= 0:
        return ["--shard-optimizer: the reference has no optimizer state to split"]
    if gb > rb // replicas + 128 * len(got):
        return ["--shard-optimizer: the stages hold %d bytes of optimizer state per rank, "
                "more than 1/%d of the reference's %d" % (gb, replicas, rb)]
    log("optimizer state per rank: %d bytes over %d stage(s) (one replica: %d)"
        % (gb, len(got), rb))
    return []


def read_lines(path):
    """The lines of the text file `path`, or None if it cannot be read."""
    try:
        with open(path) as f:
            return f.read().splitlines()
    except OSError as e:
        log("%s: %s" % (path, e))
        return None


def check_per_step(out_dir, expected, microbatches):
    """Return a list of failures: --expect-per-step TYPE=N (see its help) on
    OUT/pipeline.mlir."""
    if not expected:
        return []
    ty, _, n = expected.rpartition("=")
    path = os.path.join(out_dir, "pipeline.mlir")
    lines = read_lines(path)
    if lines is None:
        return ["%s: cannot read" % path]
    sends = stashed = 0
    phase = None
    for line in lines:
        if line.startswith("  func.func "):
            m = re.search(r'pipe\.phase = "(\w+)"', line)
            phase = m.group(1) if m else None
            if phase == "backward":
                stashed += line.count("%s {pipe.buffer = #pipe.buffer<stash" % ty)
        elif line == "  }":
            phase = None
        elif phase and re.search(r"\bpipe\.send\b.*: %s$" % re.escape(ty), line):
            once = phase == "update" or " per_step " in line
            sends += 1 if once else microbatches
    log("%s: %d send(s) of %s per step, %d stashed" % (path, sends, ty, stashed))
    fails = []
    if sends != int(n):
        fails.append("%s: %d send(s) of %s per step, expected %s" % (path, sends, ty, n))
    if stashed:
        fails.append("%s: %d backward argument(s) of %s in the stash, expected none"
                     % (path, stashed, ty))
    return fails


def check_forward_ops(out_dir, expected):
    """Return a list of failures: the forward functions of OUT/pipeline.mlir must hold
    `expected[op]` ops named `op` in all (a remat region's recomputation, in the backward,
    is not counted)."""
    if not expected:
        return []
    path = os.path.join(out_dir, "pipeline.mlir")
    lines = read_lines(path)
    if lines is None:
        return ["%s: cannot read" % path]
    counts = dict.fromkeys(expected, 0)
    forward = False
    for line in lines:
        if line.startswith("  func.func "):
            forward = 'pipe.phase = "forward"' in line
        elif line == "  }":
            forward = False
        elif forward:
            for op in counts:
                counts[op] += len(re.findall(r"(?:^|\s)%s(?:\s|$)" % re.escape(op), line))
    log("forward ops in %s: %s" % (path, ", ".join("%s=%d" % kv for kv in counts.items())))
    return ["%s: %d %s op(s) in the forward functions, expected %d"
            % (path, counts[op], op, n) for op, n in expected.items() if counts[op] != n]


def target_flags(a, target):
    f = ["--target", target, "--precision", a.precision]
    if target == "cuda" and a.cuda_arch:
        f += ["--cuda-arch", a.cuda_arch]
    return f


def reference_flags(a):
    """The reference program: the 1-stage CPU program, or for --target cuda the same
    pipeline compiled for the CPU."""
    if a.target == "cuda":
        return pipeline_flags(a) + target_flags(a, "cpu")
    if (a.data_parallel or 1) > 1:
        # The same pipeline as one replica, at the same global batch.
        g = argparse.Namespace(**vars(a))
        g.data_parallel, g.shard_optimizer = None, False
        return pipeline_flags(g) + target_flags(a, "cpu")
    if a.schedule not in (None, "gpipe"):
        # The same K stages and M micro-batches under GPipe (one chunk each).
        g = argparse.Namespace(**vars(a))
        g.schedule, g.virtual_stages = "gpipe", None
        if (a.virtual_stages or 1) > 1:
            g.partition = None  # K*V-1 split points, not K stages' cuts
        return pipeline_flags(g) + target_flags(a, "cpu")
    return single_flags(a) + target_flags(a, "cpu")


def single_micro(a):
    """Micro-batches of the 1-stage reference program: 1, but M for a model with
    BatchNorm (its statistics are those of each micro-batch)."""
    return (a.microbatches or 1) if a.batchnorm_model else 1


def single_flags(a):
    """The 1-stage reference program's flags: SINGLE_FLAGS, with M micro-batches for a
    model with BatchNorm, and the run's --batchnorm."""
    f = list(SINGLE_FLAGS)
    f[f.index("--microbatches") + 1] = str(single_micro(a))
    if a.batchnorm is not None:
        f += ["--batchnorm", a.batchnorm]
    return f


def tool_commands(a, compile_bin, run_bin, model_path, data_dir, out_dir, log_path,
                  trained_path, extra_flags):
    """The gpipe-compile and gpipe-run command lines of compile_and_run."""
    compile_cmd = ([compile_bin, model_path, "-o", out_dir, "--batch-size", str(a.batch_size)]
                   + extra_flags + optimizer_flags(a))
    run_cmd = [run_bin, out_dir, "--data", data_dir, "--steps", str(a.steps),
               "--log-json", log_path, "--save-onnx", trained_path]
    if a.threads is not None:
        run_cmd += ["--threads", str(a.threads)]
    if a.shuffle is not None:
        run_cmd += ["--shuffle", "--seed", str(a.shuffle)]
    return compile_cmd, run_cmd


def compile_and_run(a, compile_bin, run_bin, model_path, data_dir, wd, suffix, extra_flags):
    """gpipe-compile (+ extra_flags) into WORKDIR/out<suffix>, then gpipe-run it.

    Files: out<suffix>/, compile<suffix>.log, run<suffix>.log, log<suffix>.jsonl,
    trained<suffix>.onnx.  Returns (out_dir, losses, ms, run stdout, trained_path)."""
    out_dir = os.path.join(wd, "out" + suffix)
    trained_path = os.path.join(wd, "trained%s.onnx" % suffix)
    log_path = os.path.join(wd, "log%s.jsonl" % suffix)
    for p in (trained_path, log_path):
        if os.path.exists(p):
            os.remove(p)
    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    compile_cmd, run_cmd = tool_commands(a, compile_bin, run_bin, model_path, data_dir,
                                         out_dir, log_path, trained_path, extra_flags)
    run_tool(compile_cmd, os.path.join(wd, "compile%s.log" % suffix), a.timeout)
    run_out = run_tool(run_cmd, os.path.join(wd, "run%s.log" % suffix), a.timeout)
    losses, ms = parse_log_json(log_path, a.steps)
    if not os.path.isfile(trained_path):
        raise CheckFailed("gpipe-run did not write --save-onnx file %s" % trained_path)
    return out_dir, losses, ms, run_out, trained_path


# ---------------------------------------------------------------------------
# Steps 1-3 (export, data, torch reference), here or from --prepared DIR (prepare.py)
# ---------------------------------------------------------------------------

# The files whose contents the prepared entries depend on (prepare.py writes their hash to
# DIR/STAMP.json; an entry of another version is not used).
PREP_SOURCES = ("modelspec.py", "models.py", "check_training.py", "prepare.py")
PREP_STAMP = "STAMP.json"
PREP_REF_JSON = "reference.json"
PREP_REF_NPZ = "reference.npz"


def source_fingerprint():
    """sha256 of PREP_SOURCES (names and contents)."""
    h = hashlib.sha256()
    for n in PREP_SOURCES:
        try:
            with open(os.path.join(HERE, n), "rb") as f:
                data = f.read()
        except OSError:
            data = b"(missing)"
        h.update(b"%s\0%d\0" % (n.encode(), len(data)) + data)
    return h.hexdigest()


def prep_args(a):
    """Exactly the arguments that determine model.onnx, data/ and torch_reference's results
    (canonical: defaults resolved, every field present)."""
    d = {
        # export: models.build(model, seed), an example batch of export_batch_size rows of
        # the data, opset, a symbolic batch dimension
        "model": a.model, "seed": a.seed, "opset": a.opset,
        "gelu_opset20": bool(a.gelu_opset20),
        # a fixture replaces the export (its file's sha256, checked when copied)
        "fixture": a.fixture_entry["sha256"] if a.fixture_entry else None,
        "export_batch_size": a.export_batch_size or a.batch_size,
        "dynamic_batch": bool(a.dynamic_batch),
        # data: models.make_data(model, samples, data_seed)
        "samples": a.samples, "data_seed": a.data_seed,
        # torch_reference: make_optimizer, the mini-batch order, steps; module.eval() for
        # a model with dropout
        "optimizer": a.optimizer, "lr": a.lr, "momentum": a.momentum,
        "nesterov": bool(a.nesterov), "weight_decay": a.weight_decay,
        "betas": list(a.betas_t), "eps": a.eps,
        "steps": a.steps, "batch_size": a.batch_size, "shuffle": a.shuffle,
        "dropout": bool(a.dropout), "batchnorm_model": bool(a.batchnorm_model),
        "freeze": a.freeze,
    }
    if a.batchnorm_model:
        # bn_step: the module is called once per micro-batch; deferred running statistics
        d["bn_microbatches"] = a.microbatches or 1
        d["bn_deferred"] = a.batchnorm == "deferred"
    return d


def prep_key(a):
    """DIR/<key> of --prepared: a readable prefix and a hash of prep_args."""
    canon = json.dumps(prep_args(a), sort_keys=True, separators=(",", ":"))
    return "%s_%s_b%d_s%d_%s" % (a.model, a.optimizer, a.batch_size, a.steps,
                                 hashlib.sha256(canon.encode()).hexdigest()[:12])


def export_model_and_data(a, model_path, data_dir):
    """Steps 1-2: write data_dir/x.npy and y.npy, export the model to model_path (torch).
    Returns (x, y)."""
    import torch
    import models
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float32)
    x, y = modelspec.make_data(a.model, a.samples, seed=a.data_seed)
    os.makedirs(data_dir, exist_ok=True)
    np.save(os.path.join(data_dir, "x.npy"), x)
    np.save(os.path.join(data_dir, "y.npy"), y)
    if a.fixture_entry:
        modelspec.copy_fixture(a.fixture, model_path)
        return x, y
    module = models.build(a.model, a.seed)
    try:
        eb = a.export_batch_size or a.batch_size
        models.export(module, x[:eb], y[:eb], model_path, opset=a.opset,
                      dynamic_batch=a.dynamic_batch)
    except RuntimeError as e:
        raise CheckFailed("export: %s" % e)
    if a.gelu_opset20 and modelspec.gelu_to_opset20(model_path) == 0:
        raise CheckFailed("--gelu-opset20: the export has no exact-GELU pattern to rewrite")
    return x, y


def save_reference(d, a, ref, seconds):
    """Write torch_reference's results `ref` to d/reference.{json,npz} (exact: float32
    arrays in the npz, Python floats in the JSON)."""
    losses, params, last_delta, extra, buffers = ref
    pnames, bnames = list(params), list(buffers)
    arrays = {"param%d" % i: params[n] for i, n in enumerate(pnames)}
    arrays.update({"buffer%d" % i: buffers[n] for i, n in enumerate(bnames)})
    np.savez(os.path.join(d, PREP_REF_NPZ), **arrays)
    with open(os.path.join(d, PREP_REF_JSON), "w") as f:
        json.dump({"key": prep_key(a), "args": prep_args(a), "seconds": seconds,
                   "losses": [float(v) for v in losses], "last_delta": last_delta,
                   "extra": list(extra), "params": pnames, "buffers": bnames}, f, indent=1)


def load_reference(d):
    """(losses, params, last_delta, extra, buffers, seconds) from save_reference's files."""
    with open(os.path.join(d, PREP_REF_JSON)) as f:
        r = json.load(f)
    with np.load(os.path.join(d, PREP_REF_NPZ)) as z:
        params = {n: z["param%d" % i] for i, n in enumerate(r["params"])}
        buffers = {n: z["buffer%d" % i] for i, n in enumerate(r["buffers"])}
    return ((r["losses"], params, r["last_delta"], r["extra"], buffers), r["seconds"])


def find_prepared(a):
    """(DIR/<key>, None) if --prepared DIR has this case's entry, else (None, why)."""
    if not a.prepared:
        return None, None
    try:
        with open(os.path.join(a.prepared, PREP_STAMP)) as f:
            stamp = json.load(f)
    except (OSError, ValueError) as e:
        return None, "no usable %s (%s)" % (os.path.join(a.prepared, PREP_STAMP), e)
    if stamp.get("sources") != source_fingerprint():
        return None, ("%s is stale: %s changed since prepare.py wrote it"
                      % (a.prepared, "/".join(PREP_SOURCES)))
    key = prep_key(a)
    d = os.path.join(a.prepared, key)
    try:
        with open(os.path.join(d, PREP_REF_JSON)) as f:
            got = json.load(f).get("args")
    except (OSError, ValueError) as e:
        return None, "no entry %s (%s)" % (key, e.__class__.__name__)
    if got != json.loads(json.dumps(prep_args(a))):
        return None, "entry %s was prepared for other arguments: %s" % (key, got)
    return d, None


def model_data_reference(a, model_path, data_dir):
    """Steps 1-3: model.onnx, data/x.npy, data/y.npy and the torch reference's results, from
    --prepared DIR/<key> when there (torch is not imported), else exported and trained here.
    Returns (x, y, init, (losses, params, last_delta, extra, buffers), prepared)."""
    entry, why = find_prepared(a)
    if entry is not None:
        log("prepared: using %s (export, data and torch reference from prepare.py)" % entry)
        shutil.copyfile(os.path.join(entry, "model.onnx"), model_path)
        for n in ("x.npy", "y.npy"):
            shutil.copyfile(os.path.join(entry, "data", n), os.path.join(data_dir, n))
        x = np.load(os.path.join(data_dir, "x.npy"))
        y = np.load(os.path.join(data_dir, "y.npy"))
        ops = sorted(set(modelspec.op_types(model_path)))
        log("exported %s (%s) (prepared)" % (model_path, " ".join(ops)))
        init = modelspec.load_initializers(model_path)
        ref, seconds = load_reference(entry)
        log("torch reference: %d steps in %.2fs (prepared), loss %.6f -> %.6f"
            % (a.steps, seconds, ref[0][0], ref[0][-1]))
        return x, y, init, ref, True
    if a.prepared:
        log("prepared: %s; exporting and training the torch reference here" % why)
    x, y = export_model_and_data(a, model_path, data_dir)
    ops = sorted(set(modelspec.op_types(model_path)))
    log("exported %s (%s)" % (model_path, " ".join(ops)))
    init = modelspec.load_initializers(model_path)
    t0 = time.time()
    ref = torch_reference(a, init, x, y)
    log("torch reference: %d steps in %.2fs, loss %.6f -> %.6f"
        % (a.steps, time.time() - t0, ref[0][0], ref[0][-1]))
    return x, y, init, ref, False


# ---------------------------------------------------------------------------
# The reference program (--compare-single), optionally from --single-cache DIR
# ---------------------------------------------------------------------------

# What a cache entry holds besides out_single/: everything run_check reads of the reference.
SINGLE_FILES = ("compile_single.log", "run_single.log", "log_single.jsonl",
                "trained_single.onnx")
_TOOLS_ID = {}


def _file_id(p):
    st = os.stat(p)
    return [os.path.realpath(p), st.st_size, st.st_mtime_ns]


def _runtime_prefixes(compile_bin):
    """Where gpipe-compile may take the runtime from (compiler/driver/Toolchain.cpp
    findRuntime): $GPIPE_RUNTIME_DIR, <bin>/.., and the build tree's paths compiled into
    it (found in the binary; those that exist)."""
    env = os.environ.get("GPIPE_RUNTIME_DIR")
    if env:
        return [("env", env)]
    out = [("prefix", os.path.dirname(os.path.dirname(os.path.abspath(compile_bin))))]
    with open(compile_bin, "rb") as f:
        blob = f.read()
    for m in sorted(set(re.findall(rb"/[\x21-\x7e]*?(?:libgpipe_runtime[a-z_]*\.a|/include)"
                                   rb"(?=\x00)", blob))):
        p = m.decode(errors="replace")
        if p.endswith(".a") and os.path.isfile(p):
            out.append(("lib", p))
        elif os.path.isfile(os.path.join(p, "gpipe", "runtime.h")):
            out.append(("include", p))
    return out


def tools_identity(compile_bin, run_bin):
    """The identity (path, size, mtime) of gpipe-compile, gpipe-run, the runtime library and
    headers they may use, the host C++ compiler, and the environment that may steer them."""
    k = (compile_bin, run_bin)
    if k in _TOOLS_ID:
        return _TOOLS_ID[k]
    ident = {"gpipe-compile": _file_id(compile_bin), "gpipe-run": _file_id(run_bin)}
    files = []
    for kind, p in _runtime_prefixes(compile_bin):
        if kind in ("env", "prefix"):
            cands = [os.path.join(p, "lib", "gpipe"), os.path.join(p, "include", "gpipe")]
        elif kind == "include":
            cands = [os.path.join(p, "gpipe")]
        else:
            cands = [p]
        for c in cands:
            if os.path.isfile(c):
                files.append([kind] + _file_id(c))
            elif os.path.isdir(c):
                for root, _, names in sorted(os.walk(c)):
                    for n in sorted(names):
                        files.append([kind] + _file_id(os.path.join(root, n)))
    ident["runtime"] = files
    cxx = [os.environ.get("CXX") or "", "c++", "g++", "clang++"]
    ident["cxx"] = [[c] + _file_id(shutil.which(c)) for c in cxx if c and shutil.which(c)]
    ident["env"] = sorted((n, v) for n, v in os.environ.items()
                          if n.startswith(("GPIPE_", "OMP_", "OPENBLAS_", "MKL_", "DNNL_",
                                           "ONEDNN_", "OMPI_")) or n in ("CXX", "NVCC"))
    ident["cpus"] = [os.cpu_count(), len(os.sched_getaffinity(0))
                     if hasattr(os, "sched_getaffinity") else None]
    _TOOLS_ID[k] = ident
    return ident


def single_cache_key(a, compile_bin, run_bin, model_path, data_dir, flags):
    """sha256 of model.onnx, the data files, the reference's command lines (paths in the
    work directory replaced by placeholders) and tools_identity."""
    h = hashlib.sha256()

    def add(tag, data):
        h.update(b"%s\0%d\0" % (tag.encode(), len(data)) + data)

    with open(model_path, "rb") as f:
        add("model.onnx", f.read())
    for n in sorted(os.listdir(data_dir)):
        with open(os.path.join(data_dir, n), "rb") as f:
            add("data/" + n, f.read())
    cmds = tool_commands(a, "<gpipe-compile>", "<gpipe-run>", "<model.onnx>", "<data>",
                         "<out>", "<log.jsonl>", "<trained.onnx>", flags)
    add("commands", json.dumps(cmds).encode())
    add("tools", json.dumps(tools_identity(compile_bin, run_bin), sort_keys=True).encode())
    return h.hexdigest()[:40]


def _copy_tree(src, dst):
    """Copy directory src to dst (hard links where possible: nothing writes these files)."""
    def link_or_copy(s, d):
        try:
            os.link(s, d)
        except OSError:
            shutil.copy2(s, d)
    shutil.copytree(src, dst, copy_function=link_or_copy)


def reference_run(a, compile_bin, run_bin, model_path, data_dir, wd):
    """compile_and_run of the reference program (suffix _single, reference_flags), or its
    files from --single-cache DIR/<key> (the same checks follow either way)."""
    flags = reference_flags(a)
    if not a.single_cache:
        return compile_and_run(a, compile_bin, run_bin, model_path, data_dir, wd, "_single",
                               flags)
    key = single_cache_key(a, compile_bin, run_bin, model_path, data_dir, flags)
    entry = os.path.join(a.single_cache, key)
    out_dir = os.path.join(wd, "out_single")
    if os.path.isfile(os.path.join(entry, "meta.json")):
        with open(os.path.join(entry, "meta.json")) as f:
            meta = json.load(f)
        log("single-cache: hit %s (compiled and run by %s)" % (entry, meta.get("workdir")))
        for c in meta.get("commands", []):
            log("  (cached) $ " + " ".join(shlex.quote(x) for x in c))
        if os.path.isdir(out_dir):
            shutil.rmtree(out_dir)
        _copy_tree(os.path.join(entry, "out_single"), out_dir)
        for n in SINGLE_FILES:
            p = os.path.join(wd, n)
            if os.path.exists(p):
                os.remove(p)
            shutil.copyfile(os.path.join(entry, n), p)
        with open(os.path.join(wd, "run_single.log")) as f:
            run_out = f.read()
        trained_path = os.path.join(wd, "trained_single.onnx")
        losses, ms = parse_log_json(os.path.join(wd, "log_single.jsonl"), a.steps)
        return out_dir, losses, ms, run_out, trained_path
    log("single-cache: miss %s: compiling and running the reference here" % key)
    res = compile_and_run(a, compile_bin, run_bin, model_path, data_dir, wd, "_single", flags)
    # Store it: into a temporary directory, renamed to DIR/<key> at once (a case racing on
    # the same key keeps its own results; the first rename wins).
    try:
        os.makedirs(a.single_cache, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=".tmp-%s-" % key[:12], dir=a.single_cache)
        try:
            _copy_tree(out_dir, os.path.join(tmp, "out_single"))
            for n in SINGLE_FILES:
                shutil.copyfile(os.path.join(wd, n), os.path.join(tmp, n))
            cmds = tool_commands(a, compile_bin, run_bin, model_path, data_dir, out_dir,
                                 os.path.join(wd, "log_single.jsonl"),
                                 os.path.join(wd, "trained_single.onnx"), flags)
            with open(os.path.join(tmp, "meta.json"), "w") as f:
                json.dump({"key": key, "workdir": wd, "commands": list(cmds),
                           "tools": tools_identity(compile_bin, run_bin)}, f, indent=1)
            os.rename(tmp, entry)
            log("single-cache: stored %s" % entry)
        finally:
            if os.path.isdir(tmp):
                shutil.rmtree(tmp, ignore_errors=True)
    except OSError as e:
        log("single-cache: not stored (%s)" % e)
    return res


def ignore_split_check(a, y):
    """For a model with an ignore_index and M > 1 micro-batches: True if some mini-batch of
    the run has micro-batches with different numbers of non-ignored labels (so that a mean
    of per-micro-batch means differs from the mini-batch mean)."""
    ii = modelspec.MODELS[a.model].ignore_index
    m = a.microbatches or 1
    if ii is None or m <= 1:
        return True
    mb = a.batch_size // m
    for s in range(1, a.steps + 1):
        yb = y[modelspec.batch_rows(s, a.batch_size, a.samples, a.shuffle)]
        counts = [int(np.sum(yb[i * mb:(i + 1) * mb] != ii)) for i in range(m)]
        if len(set(counts)) > 1:
            return True
    return False


def rel_err(a, b):
    a = np.asarray(a, dtype=np.float64).ravel()
    b = np.asarray(b, dtype=np.float64).ravel()
    return float(np.linalg.norm(a - b)) / max(float(np.linalg.norm(b)), 1e-12)


def main(argv=None):
    a = parse_args(argv)
    try:
        return run_check(a)
    except CheckFailed as e:
        log("")
        log("FAIL: %s" % e)
        return 1


def run_check(a):
    """Run the whole check; return 0/1, or raise CheckFailed on a fatal error."""
    global REF
    REF = ("CPU-target program" if a.target == "cuda" else
           "1-replica program" if (a.data_parallel or 1) > 1 else
           "GPipe program" if a.schedule not in (None, "gpipe") else "1-stage program")
    import onnx
    failures = []
    compile_bin = find_tool(a.bin, "gpipe-compile")
    run_bin = find_tool(a.bin, "gpipe-run")

    wd = a.workdir or tempfile.mkdtemp(prefix="gpipe_e2e_%s_" % a.model)
    wd = os.path.abspath(wd)
    os.makedirs(wd, exist_ok=True)
    data_dir = os.path.join(wd, "data")
    model_path = os.path.join(wd, "model.onnx")
    single_dir = os.path.join(wd, "out_single")
    if not a.compare_single:  # no stale reference from an earlier run of this workdir
        if os.path.isdir(single_dir):
            shutil.rmtree(single_dir)
        for p in ("trained_single.onnx", "log_single.jsonl", "compile_single.log",
                  "run_single.log"):
            if os.path.exists(os.path.join(wd, p)):
                os.remove(os.path.join(wd, p))
    os.makedirs(data_dir, exist_ok=True)

    cfg = ("model=%s optimizer=%s lr=%r momentum=%r nesterov=%s weight_decay=%r betas=%r "
           "eps=%r steps=%d B=%d S=%d opset=%d tol=%g"
           % (a.model, a.optimizer, a.lr, a.momentum, a.nesterov, a.weight_decay, a.betas_t,
              a.eps, a.steps, a.batch_size, a.samples, a.opset, a.tol))
    if a.stages is not None or a.microbatches is not None or a.remat is not None:
        cfg += " K=%s M=%s remat=%s" % (a.stages or 1, a.microbatches or 1, a.remat or "default")
    if a.gelu_opset20:
        cfg += " gelu-opset20"
    if a.fixture:
        fx = a.fixture_entry
        cfg += " fixture=%s (%s exporter, opset %d, torch %s)" % (
            a.fixture, fx["exporter"], fx["opset"], fx["versions"]["torch"])
    if a.freeze:
        cfg += " freeze=%s" % a.freeze
    if a.schedule is not None:
        cfg += " schedule=%s" % a.schedule
    if a.virtual_stages is not None:
        cfg += " virtual-stages=%d" % a.virtual_stages
    if a.partition is not None:
        cfg += " partition=%s" % a.partition
    if a.batchnorm is not None:
        cfg += " batchnorm=%s" % a.batchnorm
    if a.data_parallel is not None:
        cfg += " data-parallel=%d" % a.data_parallel
    if a.shard_optimizer:
        cfg += " shard-optimizer"
    if a.batchnorm_model:
        cfg += " stat_tol=%g" % a.stat_tol
    if a.compare_single:
        cfg += " vs-1-stage" + ("-M%d" % single_micro(a) if single_micro(a) > 1 else "")
    log("check_training: " + cfg)
    log("workdir: " + wd)

    # 1-3. export + data + torch reference (or all three from --prepared DIR)
    x, y, init, ref, prepared = model_data_reference(a, model_path, data_dir)
    ref_losses, ref_params, last_delta, extra, ref_buffers = ref
    if not all(math.isfinite(l) for l in ref_losses):
        raise CheckFailed("torch reference produced non-finite losses: %s" % ref_losses)

    if not ignore_split_check(a, y):
        failures.append("test too weak: with %d micro-batches every micro-batch of every "
                        "mini-batch has the same number of non-ignored labels; change the "
                        "data, --batch-size or --microbatches" % a.microbatches)

    # 4. gpipe-compile + gpipe-run (the configuration under test)
    out_dir, gp_losses, ms, run_out, trained_path = compile_and_run(
        a, compile_bin, run_bin, model_path, data_dir, wd, "",
        pipeline_flags(a) + target_flags(a, a.target))
    # --remat auto resolves: under --memory-per-stage to segments (per-stage
    # stash budgets), else to stage or none (not checked).
    want_remat = a.remat
    if a.remat == "auto":
        want_remat = "segments" if a.memory_per_stage is not None else None
    failures += check_pipeline_json(out_dir, a.stages, a.microbatches, want_remat)
    if a.expect_segments:
        failures += check_segments(out_dir, int(a.memory_per_stage))
    if (a.data_parallel or 1) > 1:
        with open(os.path.join(out_dir, "pipeline.json")) as f:
            pj = json.load(f)
        if pj.get("data_parallel") != a.data_parallel or pj.get("batch_size") != a.batch_size:
            failures.append("pipeline.json: data_parallel %r, batch_size %r; expected %d, %d"
                            % (pj.get("data_parallel"), pj.get("batch_size"),
                               a.data_parallel, a.batch_size))
    failures += check_forward_ops(out_dir, a.expect_ops_d)
    failures += check_per_step(out_dir, a.expect_per_step, a.microbatches or 1)

    # 4b. the 1-stage reference program on the same model.onnx and data
    single = None
    if a.compare_single:
        log("%s (reference):" % REF)
        s_out, s_losses, _, s_run_out, s_trained_path = reference_run(
            a, compile_bin, run_bin, model_path, data_dir, wd)
        if (a.target == "cuda" or a.schedule not in (None, "gpipe")
                or (a.data_parallel or 1) > 1):
            failures += ["%s: " % REF + f for f in
                         check_pipeline_json(s_out, a.stages, a.microbatches, a.remat)]
        else:
            failures += ["1-stage reference: " + f
                         for f in check_pipeline_json(s_out, 1, single_micro(a), None)]
        try:
            check_stdout_steps(s_run_out, s_losses, a.tol)
        except CheckFailed as e:
            failures.append("1-stage reference: " + str(e))
        if a.shard_optimizer:
            failures += check_sharded_state(out_dir, s_out, a.data_parallel or 1)
        try:
            single = modelspec.load_initializers(onnx.load(s_trained_path))
        except Exception as e:  # noqa: BLE001
            raise CheckFailed("cannot load %s: %s" % (s_trained_path, e))

    # 5. compare
    try:
        check_stdout_steps(run_out, gp_losses, a.tol)
    except CheckFailed as e:
        failures.append(str(e))

    try:
        trained_model = onnx.load(trained_path)
    except Exception as e:  # noqa: BLE001
        raise CheckFailed("cannot load %s: %s" % (trained_path, e))
    src_model = onnx.load(model_path)
    src_ops = [n.op_type for n in src_model.graph.node]
    if [n.op_type for n in trained_model.graph.node] != src_ops:
        failures.append("trained.onnx graph nodes differ from model.onnx (expected the input "
                        "model with only initializers replaced)")
    trained = modelspec.load_initializers(trained_model)
    missing = [n for n in init if n not in trained]
    added = [n for n in trained if n not in init]
    if missing:
        failures.append("trained.onnx lacks initializers: %s" % missing)
    if added:
        failures.append("trained.onnx has unexpected initializers: %s" % added)

    # per-initializer table (with --compare-single: also against the 1-stage program's
    # trained value, column vs_1stage)
    if single is not None:
        missing1 = [n for n in init if n not in single]
        if missing1:
            failures.append("1-stage reference: trained_single.onnx lacks initializers: %s"
                            % missing1)
    log("")
    hdr = "%-24s %-14s %12s %12s %12s %12s" % (
        "initializer", "shape", "rel_err", "torch_chg", "gpipe_chg", "last_step")
    if single is not None:
        hdr += " %12s" % "vs_1stage"
    hdr += "  "
    log(hdr)
    log("-" * len(hdr))
    worst_param = (0.0, None)
    worst_stat = (0.0, None)
    max_stat_chg = 0.0
    worst_single = (0.0, None)
    worst_single_torch = (0.0, None)
    max_torch_chg = 0.0
    any_gp_changed = False
    for name, w0 in init.items():
        if name not in trained:
            continue
        g = trained[name]
        shape = "x".join(str(d) for d in w0.shape) or "scalar"
        status = ""
        if g.shape != w0.shape or g.dtype != w0.dtype:
            failures.append("%s: trained shape/dtype %s %s != initial %s %s"
                            % (name, g.shape, g.dtype, w0.shape, w0.dtype))
            log("%-24s %-14s %s" % (name, shape, "SHAPE/DTYPE MISMATCH"))
            continue
        if not np.all(np.isfinite(g)):
            failures.append("%s: trained value has non-finite entries" % name)
            status = "NONFINITE"
        col1 = ""
        if single is not None:
            if name in single and single[name].shape == g.shape:
                e1 = rel_err(g, single[name])
                col1 = " %12.3e" % e1
                rtol = a.ref_stat_tol if name in ref_buffers else a.ref_tol
                if not (e1 <= rtol):
                    failures.append("%s: relative error %.3e vs the %s > tol %.1e"
                                    % (name, e1, REF, rtol))
                    status = status or "FAIL(1stage)"
                if e1 > worst_single[0] or worst_single[1] is None:
                    worst_single = (e1, name)
                if name in ref_params or name in ref_buffers:
                    e1t = rel_err(single[name], ref_params.get(name, ref_buffers.get(name)))
                    if e1t > worst_single_torch[0] or worst_single_torch[1] is None:
                        worst_single_torch = (e1t, name)
            else:
                col1 = " %12s" % "MISSING"
                if name in single:
                    failures.append("%s: shape %s in the %s, %s here"
                                    % (name, single[name].shape, REF, g.shape))
                status = status or "FAIL(1stage)"
        if name in ref_params:
            t = ref_params[name]
            err = rel_err(g, t)
            tchg = rel_err(t, w0)
            gchg = rel_err(g, w0)
            max_torch_chg = max(max_torch_chg, tchg)
            if np.any(g != w0):
                any_gp_changed = True
            if not (err <= a.torch_tol):
                failures.append("%s: relative error %.3e > tol %.1e" % (name, err, a.torch_tol))
                status = status or "FAIL"
            if tchg > 0 and np.array_equal(g, w0):
                failures.append("%s: unchanged by gpipe-run but changed by torch (rel %.3e)"
                                % (name, tchg))
                status = status or "UNCHANGED"
            if err > worst_param[0] or worst_param[1] is None:
                worst_param = (err, name)
            log("%-24s %-14s %12.3e %12.3e %12.3e %12.3e%s  %s"
                % (name, shape, err, tchg, gchg, last_delta[name], col1, status or "ok"))
        elif name in ref_buffers:
            # a BatchNorm running statistic: not trained, updated by the forward passes
            t = ref_buffers[name]
            err = rel_err(g, t)
            tchg = rel_err(t, w0)
            gchg = rel_err(g, w0)
            max_stat_chg = max(max_stat_chg, tchg)
            if not (err <= a.torch_stat_tol):
                failures.append("%s: running statistic relative error %.3e > --stat-tol %.1e"
                                % (name, err, a.torch_stat_tol))
                status = status or "FAIL"
            if tchg > 0 and np.array_equal(g, w0):
                failures.append("%s: running statistic unchanged by gpipe-run but changed "
                                "by torch (rel %.3e)" % (name, tchg))
                status = status or "UNCHANGED"
            if err > worst_stat[0] or worst_stat[1] is None:
                worst_stat = (err, name)
            log("%-24s %-14s %12.3e %12.3e %12.3e %12s%s  %s"
                % (name, shape, err, tchg, gchg, "-", col1,
                   (status or "ok") + " (running stat)"))
        else:
            # not a torch parameter (e.g. a constant folded into an initializer): must be kept
            err = rel_err(g, w0)
            if not (err <= a.tol):
                failures.append("%s: non-parameter initializer changed (rel %.3e)" % (name, err))
                status = status or "FAIL"
            log("%-24s %-14s %12.3e %12s %12s %12s%s  %s"
                % (name, shape, err, "-", "-", "-", col1,
                   (status or "ok") + " (not a parameter)"))

    if a.freeze:
        frozen = [n for n in init if re.fullmatch(a.freeze, n) and n in trained]
        if not frozen:
            failures.append("--freeze %r matches no initializer" % a.freeze)
        for n in frozen:
            if not np.array_equal(trained[n], init[n]):
                failures.append("%s: frozen (--freeze) but trained.onnx differs from the "
                                "initial value (rel %.3e)" % (n, rel_err(trained[n], init[n])))
        log("frozen (--freeze %s): %d initializer(s), bit-identical to the input: %s"
            % (a.freeze, len(frozen), "yes" if all(np.array_equal(trained[n], init[n])
                                                 for n in frozen) else "NO"))
    if not any_gp_changed:
        failures.append("no trained initializer differs from its initial value: "
                        "gpipe-run did not train")
    if ref_buffers and max_stat_chg < a.min_change:
        failures.append("test too weak: the torch reference changes no running statistic by "
                        "more than %.3e (relative) < --min-change %.1e" % (max_stat_chg,
                                                                         a.min_change))
    if max_torch_chg < a.min_change:
        failures.append("test too weak: the torch reference changes no parameter by more than "
                        "%.3e (relative) < --min-change %.1e; raise --lr or --steps"
                        % (max_torch_chg, a.min_change))

    # losses (with --compare-single: also against the 1-stage program's, column 1stage)
    log("")
    if single is not None:
        log("%6s %14s %14s %12s %14s %12s"
            % ("step", "torch", "gpipe", "abs_err", "1stage", "abs_err_1st"))
    else:
        log("%6s %14s %14s %12s" % ("step", "torch", "gpipe", "abs_err"))
    worst_loss = (0.0, 0)
    worst_loss1 = (0.0, 0)
    bad_steps = []
    bad_steps1 = []
    for s, (lt, lg) in enumerate(zip(ref_losses, gp_losses), 1):
        err = abs(lg - lt) if math.isfinite(lg) else float("inf")
        lim = a.torch_tol * max(1.0, abs(lt))
        ok = err <= lim
        if not ok:
            bad_steps.append(s)
        if err >= worst_loss[0]:
            worst_loss = (err, s)
        col1 = ""
        if single is not None:
            ls = s_losses[s - 1]
            e1 = abs(lg - ls) if math.isfinite(lg) and math.isfinite(ls) else float("inf")
            ok1 = e1 <= a.ref_tol * max(1.0, abs(ls))
            if not ok1:
                bad_steps1.append(s)
                ok = False
            if e1 >= worst_loss1[0]:
                worst_loss1 = (e1, s)
            col1 = " %14.7f %12.3e" % (ls, e1)
        if a.steps <= 30 or s <= 5 or s > a.steps - 5 or not ok:
            log("%6d %14.7f %14.7f %12.3e%s%s" % (s, lt, lg, err, col1, "" if ok else "  FAIL"))
    if bad_steps:
        failures.append("loss mismatch at %d step(s) %s (tol %.1e * max(1,|l|))"
                        % (len(bad_steps), bad_steps[:10], a.torch_tol))
    if bad_steps1:
        failures.append("loss differs from the %s at %d step(s) %s "
                        "(tol %.1e * max(1,|l|))" % (REF, len(bad_steps1), bad_steps1[:10], a.ref_tol))

    med_ms = float(np.median(ms[1:] if len(ms) > 1 else ms))
    log("")
    log("worst initializer rel_err: %.3e (%s)" % worst_param)
    if a.precision == "bf16" and worst_param[0] <= 1e-6:
        failures.append("--precision bf16 trained the same weights as torch's fp32 (worst "
                        "rel_err %.3e): the bf16 rounding did not happen" % worst_param[0])
    if a.dropout and worst_param[0] <= 1e-3:
        failures.append("the model's dropout changed nothing: the run is within %.3e of "
                        "torch trained without dropout" % worst_param[0])
    if ref_buffers:
        log("worst running-stat rel_err: %.3e (%s) (--stat-tol %.1e)"
            % (worst_stat + (a.torch_stat_tol,)))
    log("worst loss abs_err:        %.3e (step %d)" % worst_loss)
    if single is not None:
        log("worst rel_err vs %s:  %.3e (%s)" % ((REF,) + worst_single))
        log("worst loss err vs %s: %.3e (step %d)" % ((REF,) + worst_loss1))
        s_worst_loss = max(abs(x - y) if math.isfinite(x) else float("inf")
                           for x, y in zip(s_losses, ref_losses))
        log("(%s vs torch: rel_err" % REF + " %.3e (%s), loss abs_err %.3e)"
            % (worst_single_torch + (s_worst_loss,)))
    log("largest torch rel change:  %.3e" % max_torch_chg)
    log("gpipe-run median ms/step:  %.3f" % med_ms)
    if prepared:
        # the point of --prepared: this process never imports torch
        if "torch" in sys.modules:
            failures.append("prepared: the torch reference came from --prepared, yet this "
                            "process imported torch")
        else:
            log("prepared: torch not imported")
    if failures:
        log("")
        log("FAIL (%s):" % cfg)
        for f in failures:
            log("  - " + f)
        return 1
    log("PASS (%s)" % cfg)
    return 0

if __name__ == "__main__":
    sys.exit(main())
