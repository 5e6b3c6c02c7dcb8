#!/usr/bin/env python3
"""Writes small ONNX models for the lit tests (named nodes, bad inputs).

usage: make_models.py KIND OUT.onnx [INPUT [ARG]]   (run with /usr/bin/python3: Debian onnx)
"""
import sys

import numpy as np
import onnx
import onnx.parser
from onnx import TensorProto, helper, numpy_helper


def linear_graph(nodes_extra=(), x_type=TensorProto.FLOAT, w_dtype=np.float32):
    w = numpy_helper.from_array(np.ones((3, 4), dtype=w_dtype), "fc.weight")
    b = numpy_helper.from_array(np.zeros((3,), dtype=np.float32), "fc.bias")
    nodes = [helper.make_node("Gemm", ["x", "fc.weight", "fc.bias"], ["h"],
                              name="/fc/Gemm", transB=1)]
    nodes += list(nodes_extra)
    last = nodes[-1].output[0]
    nodes.append(helper.make_node("SoftmaxCrossEntropyLoss", [last, "y"],
                                  ["loss"], name="/loss/SCE"))
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", x_type, [8, 4]),
         helper.make_tensor_value_info("y", TensorProto.INT64, [8])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
        [w, b])
    return graph


def model(graph, opsets=(("", 17),)):
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v)
                                                for d, v in opsets])
    m.ir_version = 8
    return m


def main():
    kind, out = sys.argv[1], sys.argv[2]
    if kind == "unsupported":
        # Three unsupported nodes: all must be reported in one message.
        extra = [helper.make_node("Softsign", ["h"], ["s"], name="/act/Softsign"),
                 helper.make_node("Mystery", ["s"], ["m"], name="/custom/Mystery",
                                  domain="com.example"),
                 helper.make_node("Floor", ["m"], ["a"], name="/act/Floor")]
        m = model(linear_graph(extra), (("", 17), ("com.example", 1)))
    elif kind == "double-input":
        m = model(linear_graph(x_type=TensorProto.DOUBLE))
    elif kind == "double-weight":
        m = model(linear_graph(w_dtype=np.float64))
    elif kind == "named-mismatch":
        # Gemm whose operands do not multiply: the error names the node.
        g = linear_graph()
        g.initializer[0].CopyFrom(
            numpy_helper.from_array(np.ones((3, 5), np.float32), "fc.weight"))
        m = model(g)
        onnx.save(m, out)
        return
    elif kind == "opset":
        # argv[3] declared as opset argv[4] (for models whose ops have the same form
        # at both opsets, such as the example MLP's Gemm, Relu and the loss).
        m = onnx.load(sys.argv[3])
        m.opset_import[0].version = int(sys.argv[4])
        onnx.checker.check_model(m)
    elif kind == "ir":
        # argv[3] with IR version argv[4] (the file's fields are the same in IR 8 to 10).
        m = onnx.load(sys.argv[3])
        m.ir_version = int(sys.argv[4])
        onnx.save(m, out)
        return
    elif kind == "relocate":
        # argv[3] (a model with external data) with every tensor's location set to
        # argv[4]; the data file is not touched.
        m = onnx.load(sys.argv[3], load_external_data=False)
        for t in m.graph.initializer:
            for kv in t.external_data:
                if kv.key == "location":
                    kv.value = sys.argv[4]
        onnx.save(m, out)
        return
    elif kind == "external":
        # The example model (at opset argv[4] if given) with every initializer in one
        # external file.
        m = onnx.load(sys.argv[3])
        if len(sys.argv) > 4:  # ops whose form is the same at both opsets only
            m.opset_import[0].version = int(sys.argv[4])
            onnx.checker.check_model(m)
        onnx.save_model(m, out, save_as_external_data=True,
                        all_tensors_to_one_file=True, location="weights.bin",
                        size_threshold=0)
        return
    elif kind == "ninf":
        # An ONNX text model (argv[3]) whose Constant producing 'ninf' becomes
        # -inf (torch's masked_fill value), which ONNX text cannot spell.
        m = onnx.parser.parse_model(open(sys.argv[3]).read())
        for node in m.graph.node:
            if node.op_type == "Constant" and list(node.output) == ["ninf"]:
                node.attribute[0].t.CopyFrom(numpy_helper.from_array(
                    np.array(-np.inf, dtype=np.float32)))
        onnx.save(m, out)
        return
    else:
        sys.exit("unknown kind " + kind)
    onnx.save(m, out)


if __name__ == "__main__":
    main()
