"""torch.nn.functional.batch_norm(training=True) forward + backward on the
shapes of bench_batchnorm.cpp, median of REPEAT runs (ms).

Run: python3 bench/bench_batchnorm.py THREADS [REPEAT]
"""
import sys
import time

import torch

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
repeat = int(sys.argv[2]) if len(sys.argv) > 2 else 50
torch.set_num_threads(threads)
shapes = [(32, 64, 1024), (32, 128, 256), (32, 256, 64), (32, 512, 16),
          (256, 1024, 1), (32, 512, 1)]
for n, c, s in shapes:
    x = torch.rand(n, c, s) * 2 - 1
    x = x.reshape(n, c, 32, 32) if s == 1024 else x.reshape(n, c) if s == 1 else x
    x.requires_grad_(True)
    w = torch.ones(c, requires_grad=True)
    b = torch.zeros(c, requires_grad=True)
    rm, rv = torch.zeros(c), torch.ones(c)
    dy = torch.rand_like(x) * 2 - 1
    fwd, bwd = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        y = torch.nn.functional.batch_norm(x, rm, rv, w, b, training=True)
        t1 = time.perf_counter()
        y.backward(dy)
        t2 = time.perf_counter()
        x.grad = w.grad = b.grad = None
        fwd.append((t1 - t0) * 1e3)
        bwd.append((t2 - t1) * 1e3)
    fwd.sort()
    bwd.sort()
    f, g = fwd[repeat // 2], bwd[repeat // 2]
    print(f"[{n}, {c}, {s}]  fwd {f:.3f} ms  bwd {g:.3f} ms  total {f + g:.3f} ms")
