"""external-large.test: writes a one-layer classifier (Gemm 64 -> 128 and
cross-entropy) twice, its weight W [128, 64] as external data and inline, and
its data; with `check NPY`, compares a weight file with the external bytes."""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

out = sys.argv[1]
rng = np.random.default_rng(0)
w = rng.standard_normal((128, 64)).astype(np.float32)
if len(sys.argv) > 2 and sys.argv[2] == "check":
    got = np.load(sys.argv[3])
    raw = np.fromfile(os.path.join(out, "ext", "model.onnx.data"), dtype=np.float32)
    assert got.shape == (128, 64) and np.array_equal(got.ravel(), raw), "differs"
    assert np.array_equal(got, w)
    print("W.npy: [128, 64] equal to the external data bit for bit")
    sys.exit(0)
b = np.zeros(128, np.float32)
graph = helper.make_graph(
    [helper.make_node("Gemm", ["x", "W", "B"], ["logits"], transB=1, name="/fc/Gemm"),
     helper.make_node("SoftmaxCrossEntropyLoss", ["logits", "y"], ["loss"],
                      reduction="mean", name="/Loss")],
    "classifier",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 64]),
     helper.make_tensor_value_info("y", TensorProto.INT64, [8])],
    [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
    [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
onnx.save(model, os.path.join(out, "inline", "model.onnx"))
ext = onnx.load_from_string(model.SerializeToString())
init = ext.graph.initializer[0]
init.ClearField("raw_data")
init.ClearField("float_data")
init.data_location = TensorProto.EXTERNAL
for k, v in (("location", "model.onnx.data"), ("offset", "0"), ("length", str(w.nbytes))):
    e = init.external_data.add()
    e.key, e.value = k, v
w.tofile(os.path.join(out, "ext", "model.onnx.data"))
onnx.save(ext, os.path.join(out, "ext", "model.onnx"))
x = rng.standard_normal((32, 64)).astype(np.float32)
np.save(os.path.join(out, "data", "x.npy"), x)
np.save(os.path.join(out, "data", "y.npy"), rng.integers(0, 128, 32).astype(np.int64))
