"""Compares the initializers of two ONNX models with a reference model."""
import sys

import numpy as np
import onnx
from onnx import numpy_helper


def inits(path):
    m = onnx.load(path)
    return m, {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}


ref_model, ref = inits(sys.argv[1])
for label, path in (("zero", sys.argv[2]), ("three", sys.argv[3])):
    m, got = inits(path)
    assert set(got) == set(ref), (label, set(got) ^ set(ref))
    changed = sum(not np.array_equal(got[k], ref[k]) for k in ref)
    same_graph = m.graph.node == ref_model.graph.node
    if changed == 0:
        print(f"{label}: {len(ref)} initializers, all equal")
    else:
        print(f"{label}: {len(ref)} initializers, {changed} changed, "
              f"{'same graph' if same_graph else 'graph differs'}")
