#!/usr/bin/env python3
"""Export a benchmark model (bench_models.py) with today's torch (>= 2.9), as a user would:
torch.onnx.export(..., training=TRAINING, do_constant_folding=False, optimize=False), the
default (torch.export-based) exporter; `bench_step.py --onnx FILE` then times that file.

    python3 bench/export_torch2.py --model nanogpt -o /tmp/nanogpt_torch2.onnx
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "test", "e2e"))

import torch  # noqa: E402

import bench_models  # noqa: E402
import models  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    bench_models.add_args(ap)
    ap.add_argument("-o", "--output", required=True)
    a = ap.parse_args()
    bench_models.finish_args(a)
    x, y = bench_models.make_data(a, a.batch_size)
    torch.manual_seed(models.DEFAULT_SEED)
    m = bench_models.make_module(a).train()
    torch.onnx.export(m, (torch.from_numpy(x), torch.from_numpy(y)), a.output,
                      input_names=["x", "y"], output_names=["loss"],
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                      optimize=False, external_data=False)
    print("torch %s wrote %s" % (torch.__version__, a.output))


if __name__ == "__main__":
    main()
