#!/usr/bin/python3
"""tools/gpipe-export.py under Debian's torch 1.13 (the legacy exporter path), and its
checks on exports written by torch 2.15 (test/e2e/fixtures):

1. export() of mlp_ln_gelu_drop (LayerNorm, GELU, dropout): exported at opset 17, accepted,
   and its loss on the batch equals the module's (dropout off on both);
2. check() of resnet_tiny_dynamo_folded.onnx and resnet_tiny_dynamo.onnx (torch 2.15's
   default exporter on a BatchNorm model, optimize True and False: eval form) against the
   module with the fixture's weights: refused, naming the BatchNorm layers in eval form and
   gpipe-compile's refusal;
3. check() of resnet_tiny_legacy.onnx (the legacy exporter: training mode) passes: its loss
   equals the module's training-mode loss;
4. an export of a BatchNorm model in eval mode (TrainingMode.EVAL, torch 1.13) is refused;
5. the command line: --check of a good export passes, a --module that is no module fails.

    /usr/bin/python3 test/e2e/check_export_helper.py BIN_DIR WORKDIR
"""
import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402

import models  # noqa: E402
import modelspec  # noqa: E402

spec = importlib.util.spec_from_file_location(
    "gpipe_export", os.path.join(os.path.dirname(os.path.dirname(HERE)), "tools",
                                 "gpipe-export.py"))
gx = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gx)

bin_dir, work = sys.argv[1], sys.argv[2]
os.makedirs(work, exist_ok=True)
torch.set_num_threads(1)
failures = []


def batch(name, n=16):
    x, y = modelspec.make_data(name, n, seed=0)
    return [torch.from_numpy(x), torch.from_numpy(y)]


def expect_ok(what, fn):
    try:
        for line in fn():
            print("%s: ok: %s" % (what, line))
    except gx.ExportError as e:
        failures.append("%s: unexpected error: %s" % (what, e))


def expect_error(what, fn, *needles):
    try:
        fn()
        failures.append("%s: no error" % what)
    except gx.ExportError as e:
        msg = str(e)
        print("%s: refused as expected:\n  %s" % (what, msg.replace("\n", "\n  ")))
        for n in needles:
            if n not in msg:
                failures.append("%s: the error lacks %r" % (what, n))


# 1. export() with this torch (1.13: the legacy exporter at opset 17), dropout model
m = models.build("mlp_ln_gelu_drop")
kw, why = gx.export_call(m)
print("export_call: %s" % why)
if kw.get("opset_version") != 17 or kw.get("do_constant_folding") is not False:
    failures.append("export_call under torch %s: %r" % (torch.__version__, kw))
expect_ok("export mlp_ln_gelu_drop", lambda: gx.export(
    m, batch("mlp_ln_gelu_drop"), os.path.join(work, "mlp.onnx"), bin_dir=bin_dir))


def fixture_module(name, model):
    m = models.build(model)
    models.load_into_module(m, modelspec.load_initializers(
        os.path.join(modelspec.FIXTURE_DIR, name + ".onnx")))
    return m


# 2. torch 2.15's default exporter on a BatchNorm model: refused
expect_error("check resnet_tiny_dynamo_folded", lambda: gx.check(
    fixture_module("resnet_tiny_legacy", "resnet_tiny"), batch("resnet_tiny"),
    os.path.join(modelspec.FIXTURE_DIR, "resnet_tiny_dynamo_folded.onnx"),
    bin_dir=bin_dir),
    "the module has 6 BatchNorm layers",
    "the export has 0 BatchNormalization nodes in training mode", "as in eval mode", "dynamo=False", "gpipe-compile/gpipe-run refuse")

# ... and with optimize=False: BatchNormalization nodes in eval form, refused too
expect_error("check resnet_tiny_dynamo", lambda: gx.check(
    fixture_module("resnet_tiny_legacy", "resnet_tiny"), batch("resnet_tiny"),
    os.path.join(modelspec.FIXTURE_DIR, "resnet_tiny_dynamo.onnx"), bin_dir=bin_dir),
    "the export has 0 BatchNormalization nodes in training mode", "dynamo=False")

# 3. the legacy exporter's file of the same model passes
expect_ok("check resnet_tiny_legacy", lambda: gx.check(
    fixture_module("resnet_tiny_legacy", "resnet_tiny"), batch("resnet_tiny"),
    os.path.join(modelspec.FIXTURE_DIR, "resnet_tiny_legacy.onnx"), bin_dir=bin_dir))

# 4. a BatchNorm model exported in eval mode (torch 1.13): refused
m = models.build("bn1d_mlp")
args = batch("bn1d_mlp")
path = os.path.join(work, "bn_eval.onnx")
torch.onnx.export(m.eval(), tuple(args), path, input_names=["x", "y"],
                  output_names=["loss"], training=torch.onnx.TrainingMode.EVAL,
                  do_constant_folding=False, opset_version=17)
expect_error("check bn1d_mlp exported in eval mode",
             lambda: gx.check(m.train(), args, path, bin_dir=bin_dir),
             "the module has 1 BatchNorm layers (bn) but the export has 0",
             "gpipe-compile/gpipe-run refuse", "training mode")

# 5. the command line: --check the export of step 1 (module from a factory, batch from an
# .npz), and a factory that is not one
import numpy as np  # noqa: E402
with open(os.path.join(work, "fxmod.py"), "w") as f:
    f.write("import models\n\ndef make():\n    return models.build('mlp_ln_gelu_drop')\n"
            "\nnot_a_module = 3\n")
sys.path.insert(0, work)
x, y = modelspec.make_data("mlp_ln_gelu_drop", 16, seed=0)
np.savez(os.path.join(work, "batch.npz"), x=x, y=y)
cli = ["--module", "fxmod:make", "--inputs", os.path.join(work, "batch.npz"), "--bin", bin_dir]
rc = gx.main(cli + ["--check", os.path.join(work, "mlp.onnx")])
if rc != 0:
    failures.append("gpipe-export.py --check on a good export: exit %d" % rc)
rc = gx.main(["--module", "fxmod:not_a_module"] + cli[2:] + ["--check",
                                                             os.path.join(work, "mlp.onnx")])
if rc != 1:
    failures.append("gpipe-export.py --module fxmod:not_a_module: exit %d, expected 1" % rc)

if failures:
    print("FAIL:\n  " + "\n  ".join(failures))
    sys.exit(1)
print("PASS")
