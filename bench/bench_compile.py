#!/usr/bin/python3
"""gpipe-compile's own time (import, passes, code generation; no C++ compiler) on a deep
GPT-style model.

Exports test/e2e/models.py GptTiny with --layers blocks (default 48; vocab 2048, sequence 64,
d 256, 8 heads, batch 16: the step-time benchmark's GPT, 12x deeper) and times
`gpipe-compile MODEL -o OUT --emit cpp` (everything but building the stage executables:
ONNX checking and shape inference, import, autodiff, the optimizer, partition, micro-batching,
remat, outlining, schedule checks, memory planning, C++ emission, weights) for each
--configs entry "K,M" (stages, micro-batches), --repeat times, reporting the median.

Usage:
  /usr/bin/python3 bench/bench_compile.py --bin BUILD/bin [--layers 48] [--configs 1,1 4,8]
"""

import argparse
import os
import platform
import shlex
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "test", "e2e"))

import numpy as np  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True, help="directory with gpipe-compile")
    ap.add_argument("--workdir", default="/tmp/gpipe_bench_compile")
    ap.add_argument("--layers", type=int, default=48)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=2048)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--configs", nargs="+", default=["1,1", "4,8"],
                    help="K,M pairs (stages, micro-batches)")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()

    import torch
    import models

    os.makedirs(a.workdir, exist_ok=True)
    path = os.path.join(a.workdir, "gpt%d.onnx" % a.layers)
    torch.manual_seed(models.DEFAULT_SEED)
    m = models.GptTiny(a.vocab, a.seq, a.width, a.heads, a.layers)
    rng = np.random.default_rng(0)
    x = rng.integers(0, a.vocab, (a.batch_size, a.seq)).astype(np.int64)
    t0 = time.time()
    models.export(m, x, x, path)
    nodes = len(models.op_types(path))
    params = sum(p.numel() for p in m.parameters())
    print("## gpipe-compile time")
    print()
    print("- model: GPT-style LM, %d blocks, d %d, %d heads, vocab %d, sequence %d, batch %d: "
          "%d ONNX nodes, %.1fM parameters (%.0f MB); exported in %.1fs"
          % (a.layers, a.width, a.heads, a.vocab, a.seq, a.batch_size, nodes, params / 1e6,
             os.path.getsize(path) / 1e6, time.time() - t0))
    cpu = [l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")]
    print("- CPU: %s, %d logical CPUs; %s" % (cpu[0] if cpu else "?", os.cpu_count(),
                                            time.strftime("%Y-%m-%d %H:%M")))
    print()
    print("| K | M | gpipe-compile --emit cpp, s (median of %d) | runs |" % a.repeat)
    print("|--:|--:|--:|--|")
    for cfg in a.configs:
        k, mb = (int(v) for v in cfg.split(","))
        out = os.path.join(a.workdir, "out_k%d_m%d" % (k, mb))
        cmd = [os.path.join(a.bin, "gpipe-compile"), path, "-o", out, "--emit", "cpp",
               "--stages", str(k), "--microbatches", str(mb), "--optimizer", "adam",
               "--lr", "0.001"]
        runs = []
        for _ in range(a.repeat):
            t0 = time.time()
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            runs.append(time.time() - t0)
            if p.returncode != 0:
                sys.exit("$ %s\nfailed (%d):\n%s" % (" ".join(shlex.quote(c) for c in cmd),
                                                     p.returncode, p.stdout.decode()))
        print("| %d | %d | %.2f | %s |" % (k, mb, float(np.median(runs)),
                                         ", ".join("%.2f" % r for r in runs)), flush=True)
    print()
    print("Command per row: `gpipe-compile gpt%d.onnx -o OUT --emit cpp --stages K "
          "--microbatches M --optimizer adam --lr 0.001`; python %s"
          % (a.layers, platform.python_version()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
