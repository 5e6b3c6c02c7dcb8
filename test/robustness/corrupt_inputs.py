#!/usr/bin/python3
"""Corrupted inputs never crash or hang the tools.

Feeds gpipe-compile randomly corrupted copies of the example model (bytes
flipped, truncated, spliced) and gpipe-run randomly corrupted data files
(headers mangled, truncated). Every run must end within the time limit with
exit 0 (the corruption was harmless) or exit 1 with a "...: error:" message;
a signal, another exit code, or a time-out fails the test. Fixed seed.

usage: corrupt_inputs.py BIN_DIR EXAMPLES_DIR WORK_DIR [--cases N]
"""
import argparse
import os
import random
import shutil
import subprocess
import sys


def mutate(data, rng, header_only=False):
    b = bytearray(data)
    kind = rng.randrange(3)
    limit = min(len(b), 160) if header_only else len(b)
    if kind == 0:
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(limit)] = rng.randrange(256)
    elif kind == 1:
        b = b[:rng.randrange(len(b))]
    else:
        a, c = rng.randrange(len(b)), rng.randrange(len(b))
        b = b[:a] + b[c:c + rng.randint(1, 200)] + b[a:]
    return bytes(b)


def check(cmd, tool, failures, label):
    try:
        r = subprocess.run(cmd, capture_output=True, timeout=60)
    except subprocess.TimeoutExpired:
        failures.append("%s: time-out" % label)
        return None
    err = r.stderr.decode(errors="replace")
    if r.returncode == 0:
        return 0
    if r.returncode != 1 or ("%s: error:" % tool) not in err and "gpipe: error:" not in err:
        failures.append("%s: exit %d: %s" % (label, r.returncode, err[-400:]))
    return r.returncode


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin")
    ap.add_argument("examples")
    ap.add_argument("work")
    ap.add_argument("--cases", type=int, default=60)
    a = ap.parse_args()
    rng = random.Random(20261121)
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    compile_ = os.path.join(a.bin, "gpipe-compile")
    run = os.path.join(a.bin, "gpipe-run")
    failures, codes = [], {}

    model = open(os.path.join(a.examples, "mlp.onnx"), "rb").read()
    for i in range(a.cases):
        path = os.path.join(a.work, "m%d.onnx" % i)
        open(path, "wb").write(mutate(model, rng))
        rc = check([compile_, path, "-o", os.path.join(a.work, "o%d" % i), "--emit", "cpp"],
                   "gpipe-compile", failures, "model %d" % i)
        codes[("compile", rc)] = codes.get(("compile", rc), 0) + 1

    pipe = os.path.join(a.work, "pipe")
    subprocess.run([compile_, os.path.join(a.examples, "mlp.onnx"), "-o", pipe],
                   check=True, capture_output=True)
    files = {n: open(os.path.join(a.examples, "data", n + ".npy"), "rb").read() for n in "xy"}
    for i in range(a.cases):
        d = os.path.join(a.work, "d%d" % i)
        os.makedirs(d)
        victim = rng.choice("xy")
        for n, data in files.items():
            open(os.path.join(d, n + ".npy"), "wb").write(
                mutate(data, rng, header_only=rng.random() < 0.5) if n == victim else data)
        rc = check([run, pipe, "--data", d, "--steps", "3", "--quiet",
                    "--weights-out", os.path.join(a.work, "w%d" % i)],
                   "gpipe-run", failures, "data %d (%s.npy)" % (i, victim))
        codes[("run", rc)] = codes.get(("run", rc), 0) + 1

    print("outcomes:", ", ".join("%s exit %s: %d" % (t, rc, n)
                                 for (t, rc), n in sorted(codes.items(), key=str)))
    for f in failures:
        print("FAIL", f)
    print("%d passed, %d failed" % (2 * a.cases - len(failures), len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
