#!/usr/bin/env python3
"""Export a PyTorch model with its loss for gpipe-compile, the right way for the torch
version at hand, and check the export before anyone trains it.

The model's forward takes the mini-batch (data and labels) and returns the scalar loss.
As a module:

    import importlib.util, sys
    spec = importlib.util.spec_from_file_location("gpipe_export", "tools/gpipe-export.py")
    gpipe_export = importlib.util.module_from_spec(spec); spec.loader.exec_module(gpipe_export)
    gpipe_export.export(model, (x, y), "model.onnx", bin_dir="build/bin")

or on an existing export (what the checks say about it):

    python3 tools/gpipe-export.py --check model.onnx --module mypkg.models:make_model \\
        --inputs batch.npz --bin build/bin

What export() calls (docs/user-guide.md, "Exporting a model from PyTorch"):
- torch >= 2.9, no BatchNorm: torch.onnx.export(..., dynamo=True, optimize=False) (the
  default exporter; optimize=True would fold parameters away);
- torch >= 2.9 with BatchNorm: dynamo=False (the legacy exporter keeps BatchNormalization
  in training mode; the default one writes it in eval form);
- older torch: the legacy exporter at opset 17;
always with training=TrainingMode.TRAINING, do_constant_folding=False, input names x, y...
(data files NAME.npy) and the output name "loss".

What check() does, on the ONNX file and the module:
1. gpipe-compile --emit import must accept it (a folded export is refused there, naming the
   parameters it lost);
2. the module's BatchNorm layers must be BatchNormalization nodes in training mode (the
   default exporter of torch >= 2.9 folds them as in eval mode);
3. the ONNX graph's loss on the example batch, as gpipe computes it (gpipe-compile, then
   gpipe-run for one step at learning rate 0), must equal the module's training-mode loss on
   it, dropout off (with dropout, the ONNX side runs the same export of a copy whose dropout
   probabilities are 0), within 1e-4 relative.
Each failure is one line naming the problem; check() raises ExportError with all of them.
"""

import argparse
import copy
import importlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import warnings


class ExportError(RuntimeError):
    pass


def _torch_version():
    import torch
    return tuple(int(v) for v in re.findall(r"\d+", torch.__version__)[:2])


def _batchnorms(module):
    import torch.nn as nn
    return [n for n, m in module.named_modules()
            if isinstance(m, nn.modules.batchnorm._BatchNorm)]


def export_call(module):
    """The keyword arguments of torch.onnx.export this module needs, and a one-line why."""
    import torch
    kw = dict(training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    if _torch_version() >= (2, 9):
        if _batchnorms(module):
            kw["dynamo"] = False
            return kw, "torch >= 2.9 with BatchNorm: the legacy exporter (dynamo=False)"
        kw.update(dynamo=True, optimize=False)
        return kw, "torch >= 2.9: the default exporter with optimize=False"
    kw["opset_version"] = 17
    return kw, "torch < 2.9: the exporter at opset 17"


def _names(args, input_names):
    if input_names:
        return list(input_names)
    return ["x", "y"] if len(args) == 2 else ["x%d" % k for k in range(len(args))]


def _raw_export(module, args, path, input_names):
    import torch
    kw, _ = export_call(module)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, tuple(args), path, input_names=input_names,
                          output_names=["loss"], **kw)


def export(module, args, path, input_names=None, bin_dir=None, check_export=True):
    """Export `module` (forward(*args) -> loss) to `path` as export_call() says, then
    check() it when a gpipe-compile is found (bin_dir, $GPIPE_BIN or PATH). Returns
    the list of check results (empty without a check)."""
    names = _names(args, input_names)
    module.train()
    _raw_export(module, args, path, names)
    if not check_export:
        return []
    return check(module, args, path, names, bin_dir)


def _tool(bin_dir, name):
    for d in ([bin_dir] if bin_dir else []) + ([os.environ["GPIPE_BIN"]]
                                               if os.environ.get("GPIPE_BIN") else []):
        p = os.path.join(d, name)
        if os.access(p, os.X_OK):
            return p
    p = shutil.which(name)
    if not p:
        raise ExportError("%s not found: pass bin_dir (--bin) or set GPIPE_BIN" % name)
    return p


def _gpipe_loss(path, args, names, bin_dir, work):
    """The loss of the ONNX graph at `path` on `args` as gpipe computes it: step 1 of
    SGD at lr 0 (the loss is printed before the update)."""
    import numpy as np
    data = os.path.join(work, "data")
    os.makedirs(data, exist_ok=True)
    for n, a in zip(names, args):
        np.save(os.path.join(data, n + ".npy"), a.detach().cpu().numpy())
    out = os.path.join(work, "out")
    r = subprocess.run([_tool(bin_dir, "gpipe-compile"), path, "-o", out, "--optimizer",
                        "sgd", "--lr", "0"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        raise ExportError(r.stdout.decode(errors="replace").strip())
    r = subprocess.run([_tool(bin_dir, "gpipe-run"), out, "--data", data, "--steps", "1"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    m = re.search(r"step 1 loss (\S+)", r.stdout.decode(errors="replace"))
    if r.returncode != 0 or not m:
        raise ExportError("gpipe-run failed on the export: "
                          + r.stderr.decode(errors="replace").strip())
    return float(m.group(1))


def check(module, args, path, input_names=None, bin_dir=None, tol=1e-4):
    """Check the export at `path` of `module` (see the module docstring). Returns the
    lines of what was checked; raises ExportError listing every problem."""
    import onnx
    import torch
    names = _names(args, input_names)
    problems, done = [], []
    model = onnx.load(path, load_external_data=False)
    def training_mode(node):
        # opset 14+: an attribute; before, the running statistics outputs said it
        for a in node.attribute:
            if a.name == "training_mode":
                return a.i == 1
        return len(node.output) > 1
    bn_nodes = [n for n in model.graph.node
                if n.op_type == "BatchNormalization" and training_mode(n)]
    bns = _batchnorms(module)
    if bns and len(bn_nodes) < len(bns):
        problems.append(
            "the module has %d BatchNorm layers (%s) but the export has %d "
            "BatchNormalization nodes in training mode: the exporter wrote them as in eval "
            "mode (torch >= 2.9's default exporter does); export with dynamo=False, "
            "training=TrainingMode.TRAINING, do_constant_folding=False"
            % (len(bns), ", ".join(bns[:3]), len(bn_nodes)))
    with tempfile.TemporaryDirectory(prefix="gpipe_export_") as work:
        try:
            got = _gpipe_loss(path, args, names, bin_dir, os.path.join(work, "a"))
        except ExportError as e:
            problems.append("gpipe-compile/gpipe-run refuse the export: %s" % e)
            got = None
        if got is not None:
            ref_module = module
            has_dropout = any(isinstance(m, torch.nn.Dropout) for m in module.modules())
            if has_dropout:
                # the same export of a copy without dropout, for the comparison only
                ref_module = copy.deepcopy(module)
                for m in ref_module.modules():
                    if isinstance(m, torch.nn.Dropout):
                        m.p = 0.0
                nodrop = os.path.join(work, "nodropout.onnx")
                _raw_export(ref_module, args, nodrop, names)
                got = _gpipe_loss(nodrop, args, names, bin_dir, os.path.join(work, "b"))
            state = copy.deepcopy(ref_module.state_dict())
            ref_module.train()
            with torch.no_grad():
                want = float(ref_module(*args))
            ref_module.load_state_dict(state)  # BatchNorm's running statistics moved
            if not abs(got - want) <= tol * max(1.0, abs(want)):
                problems.append(
                    "the ONNX graph's loss on the example batch is %.6g, the module's "
                    "training-mode loss %.6g%s: the export is not the training graph"
                    % (got, want, " (dropout off on both)" if has_dropout else ""))
            else:
                done.append("loss on the example batch: ONNX (gpipe) %.6g, module %.6g%s"
                            % (got, want, " (dropout off)" if has_dropout else ""))
    if problems:
        raise ExportError("%s: %s" % (path, "\n  ".join([""] + problems)))
    return done


def _load_module(spec):
    """PKG.MOD:NAME: an nn.Module object, or a callable (a function, a class) returning one."""
    import torch
    mod, _, name = spec.partition(":")
    try:
        obj = getattr(importlib.import_module(mod), name)
    except (ImportError, AttributeError) as e:
        raise ExportError("--module %s: %s" % (spec, e))
    module = obj if isinstance(obj, torch.nn.Module) or not callable(obj) else obj()
    if not isinstance(module, torch.nn.Module):
        raise ExportError("--module %s gave a %s, not an nn.Module"
                          % (spec, type(module).__name__))
    return module


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--module", required=True, metavar="PKG.MOD:FACTORY",
                    help="a function (or module object) that returns the nn.Module")
    ap.add_argument("--inputs", required=True, metavar="NPZ",
                    help="the example batch: an .npz whose arrays (in order) are the "
                         "forward's arguments")
    ap.add_argument("--names", default=None, help="input names, comma-separated (x,y)")
    ap.add_argument("--bin", default=None, help="directory of gpipe-compile and gpipe-run")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("-o", "--output", help="export the module here, then check it")
    g.add_argument("--check", metavar="ONNX", help="only check this export of the module")
    a = ap.parse_args(argv)
    import numpy as np
    import torch
    names = a.names.split(",") if a.names else None
    try:
        module = _load_module(a.module)
        with np.load(a.inputs) as z:
            args = [torch.from_numpy(z[k]) for k in z.files]
        if a.output:
            kw, why = export_call(module)
            print("exporting with %s" % why)
            lines = export(module, args, a.output, names, a.bin)
        else:
            lines = check(module, args, a.check, names, a.bin)
    except ExportError as e:
        print("gpipe-export: error: %s" % e, file=sys.stderr)
        return 1
    for line in lines:
        print("ok: " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
