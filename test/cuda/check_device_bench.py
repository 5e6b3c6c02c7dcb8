#!/usr/bin/env python3
"""ctest cuda_device_bench: bench/gpu/device_bench.py here, without a GPU.

  check_device_bench.py --bin BUILD/bin --work DIR

1. `pack` a tiny model (2 layers, width 64, 16 classes, batch 32) with the
   built gpipe-compile --target cuda, for fp32, tf32 and bf16;
2. `run --dry-run` on it: writes the weights and data, checks them against each
   pipeline.json, prints the commands, runs torch_mlp.py for 2 steps on the CPU:
   must exit 0 and say "consistent";
3. `run --dry-run` on a copy whose bf16 pipeline.json has a wrong parameter shape
   and a wrong input dtype: must exit 1 naming both;
4. `run` (not dry) on a copy whose stage programs are stand-ins (fp32 writes a
   --log-json as a stage does, tf32 hangs, bf16 exits 3) with torch on the CPU,
   --timeout 5: must exit 1 without a traceback, the hanging program killed,
   and OUT/bench.txt must hold the table (fp32 measured twice), each failure
   with its reason;
5. the same with --deadline 10 and the hanging program first: it is stopped at
   the deadline, the rest is listed as not run, and the run ends in time;
6. `pack --model gpt` a tiny GPT (2 layers, d 32, 2 heads, T 16, vocab 64, batch 4)
   for fp32 and bf16, and `run --dry-run` on it (weights by pipeline.json's names
   from gpt_model.build_module, torch_gpt.py for 2 steps on the CPU);
7. `run` (not dry) on a copy whose fp32 stage0 is the same model compiled with
   --target cpu (gpt_model.py's export), torch_gpt.py on the CPU: the gpipe and
   torch losses of every step must agree within 1e-4 (both start from the weights
   device_bench writes by name and read the same data), and the table must give
   tokens/s.
Uses this python (sys.executable) throughout: it needs torch (CPU), onnx, numpy.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
BENCH = os.path.join(REPO, "bench", "gpu", "device_bench.py")
FAILS = []


def check(ok, what, detail=""):
    print("%s %s" % ("ok  " if ok else "FAIL", what), flush=True)
    if not ok:
        FAILS.append(what)
        if detail:
            print(detail[-4000:], flush=True)


def bench(args, timeout=300, env=None):
    r = subprocess.run([sys.executable, BENCH] + args, capture_output=True, text=True,
                       timeout=timeout, env=env)
    return r.returncode, r.stdout + r.stderr


STAND_IN_OK = """#!%s
import json, sys
a = sys.argv[1:]
log, steps = a[a.index("--log-json") + 1], int(a[a.index("--steps") + 1])
with open(log, "w") as f:
    for i in range(1, steps + 1):
        f.write(json.dumps({"step": i, "loss": 2.5 - 0.01 * i, "ms": 2.0}) + "\\n")
"""


GPT_TINY = ["--layers", "2", "--d", "32", "--heads", "2", "--t", "16", "--vocab", "64",
            "--batch", "4"]


def raw_results(txt):
    """The raw numbers (JSON) after the table in bench.txt, or {}."""
    i = txt.find("\n{\n")
    try:
        return json.loads(txt[i + 1:]) if i >= 0 else {}
    except ValueError:
        return {}


def check_gpt(a, work, env):
    """6. and 7. of the docstring: the GPT model's pack and run."""
    progs = os.path.join(work, "gpt")
    rc, out = bench(["pack", "--model", "gpt", "--bin", a.bin, "--out", progs,
                     "--precisions", "fp32,bf16"] + GPT_TINY, timeout=600)
    check(rc == 0 and "GPU memory: arena" in out, "pack --model gpt: tiny GPT for fp32, bf16",
          out)
    if rc != 0:
        return
    with open(os.path.join(progs, "bench.json")) as f:
        cfg = json.load(f)
    check(cfg.get("model") == "gpt" and cfg.get("precisions") == ["fp32", "bf16"] and
          [cfg.get(k) for k in ("layers", "d", "heads", "t", "vocab", "batch")] ==
          [2, 32, 2, 16, 64, 4] and cfg.get("compiled", {}).get("bf16", {}).get("memory"),
          "pack --model gpt: bench.json has the model, its configuration, the memory plan",
          json.dumps(cfg))
    rc, out = bench(["pack", "--model", "gpt", "--bin", a.bin, "--out",
                     os.path.join(work, "gpt-bad"), "--width", "64"] + GPT_TINY)
    check(rc != 0 and "--model gpt takes no --width" in out,
          "pack --model gpt --width: refused", out)

    rc, out = bench(["run", "--programs", progs, "--workdir", os.path.join(work, "wgpt"),
                     "--dry-run"])
    check(rc == 0 and "--dry-run: consistent" in out and "Traceback" not in out and
          "torch_gpt.py bf16 on the CPU: 2 steps" in out and
          "torch_gpt.py fp32 on the CPU: 2 steps" in out and
          "torch_gpt.py --vocab 64 --t 16 --d 32 --heads 2 --layers 2 --batch 4 " in out,
          "run --dry-run, gpt: consistent, torch_gpt.py on the CPU", out)
    wdir = os.path.join(work, "wgpt", "weights")
    check(all(os.path.isfile(os.path.join(wdir, f)) for f in
              ("tok.weight.npy", "pos.weight.npy", "blocks.1.qkv.weight.npy",
               "lnf.bias.npy", "head.weight.npy")),
          "run --dry-run, gpt: wrote the weights by pipeline.json's names",
          " ".join(sorted(os.listdir(wdir))) if os.path.isdir(wdir) else wdir)

    # 7. the same model compiled for the CPU target stands in for the fp32 CUDA program.
    model = os.path.join(work, "gpt-model")
    r = subprocess.run([sys.executable, os.path.join(REPO, "bench", "gpu", "gpt_model.py"),
                        "--out", model] + GPT_TINY, capture_output=True, text=True, timeout=300)
    cpu = os.path.join(work, "gpt-cpu-out")
    if r.returncode == 0:
        r = subprocess.run([os.path.join(a.bin, "gpipe-compile"),
                            os.path.join(model, "model.onnx"), "-o", cpu, "--target", "cpu",
                            "--lr", "0.01"], capture_output=True, text=True, timeout=600)
    check(r.returncode == 0, "gpt_model.py export and gpipe-compile --target cpu",
          r.stdout + r.stderr)
    if r.returncode != 0:
        return
    fake = os.path.join(work, "gpt-cpu")
    shutil.copytree(progs, fake)
    shutil.copy2(os.path.join(cpu, "stage0"), os.path.join(fake, "fp32", "stage0"))
    outdir = os.path.join(work, "out-gpt")
    rc, out = bench(["run", "--programs", fake, "--workdir", os.path.join(work, "wgpt-cpu"),
                     "--out", outdir, "--precisions", "fp32", "--repeat", "1", "--warmup", "1",
                     "--steps", "3", "--timeout", "120", "--torch-device", "cpu"], env=env)
    try:
        with open(os.path.join(outdir, "bench.txt")) as f:
            txt = f.read()
    except OSError as e:
        txt = str(e)
    res = raw_results(txt).get("fp32", {})
    g, t = res.get("gpipe_loss") or [], res.get("torch_loss") or []
    diff = max((abs(x - y) / max(1.0, abs(y)) for x, y in zip(g, t)), default=None)
    check(rc == 0 and "Traceback" not in out and len(g) == 4 and len(t) == 4 and
          diff is not None and diff < 1e-4,
          "run, gpt: the CPU-target program and torch_gpt.py (CPU, fp32) agree step by step "
          "(max rel. diff %s)" % diff, out + txt)
    check("throughput gpipe/torch (tokens/s)" in txt and "gpipe / torch tokens/s" in txt and
          "GPT (GptTiny): vocab 64, T 16, d 32, 2 heads, 2 layers, batch 4 (64 tokens/step)"
          in txt, "run, gpt: the table names the model and gives tokens/s", txt)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    work = os.path.abspath(a.work)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    progs = os.path.join(work, "programs")

    rc, out = bench(["pack", "--bin", a.bin, "--out", progs, "--layers", "2", "--width", "64",
                     "--classes", "16", "--batch", "32"], timeout=600)
    check(rc == 0, "pack: tiny model for fp32, tf32, bf16", out)
    if rc != 0:
        return 1
    with open(os.path.join(progs, "bench.json")) as f:
        check(json.load(f)["precisions"] == ["fp32", "tf32", "bf16"],
              "pack: fp32,tf32,bf16 by default")
    for p, tf32, prec in (("fp32", False, "fp32"), ("tf32", True, "fp32"),
                          ("bf16", False, "bf16")):
        with open(os.path.join(progs, p, "pipeline.json")) as f:
            pj = json.load(f)
        check(pj.get("target") == "cuda" and pj.get("precision") == prec and
              bool(pj.get("allow_tf32")) == tf32,
              "pack: %s compiled --target cuda --precision %s%s" % (p, prec,
                                                                   " --allow-tf32" if tf32 else ""),
              json.dumps({k: pj.get(k) for k in ("target", "precision", "allow_tf32")}))
        check(sorted(os.listdir(os.path.join(progs, p))) == ["pipeline.json", "stage0"],
              "pack: %s keeps stage0 and pipeline.json only" % p)

    rc, out = bench(["run", "--programs", progs, "--workdir", os.path.join(work, "w"),
                     "--dry-run"])
    check(rc == 0 and "--dry-run: consistent" in out and "Traceback" not in out,
          "run --dry-run: consistent, exit 0", out)
    for p in ("fp32", "tf32", "bf16"):
        check(("gpipe %s: %s" % (p, os.path.join(progs, p, "stage0"))) in out and
              ("--precision %s" % p) in out and
              ("torch_mlp.py %s on the CPU: 2 steps" % p) in out,
              "run --dry-run: prints the %s commands and runs torch_mlp.py on the CPU" % p, out)
    for f in ("body.0.weight.npy", "body.0.bias.npy", "head.weight.npy", "head.bias.npy"):
        check(os.path.isfile(os.path.join(work, "w", "weights", f)),
              "run --dry-run: wrote weights/%s" % f)

    bad = os.path.join(work, "bad")
    shutil.copytree(progs, bad)
    pjp = os.path.join(bad, "bf16", "pipeline.json")
    with open(pjp) as f:
        pj = json.load(f)
    pj["stages"][0]["params"][0]["shape"] = [64, 63]
    pj["inputs"][1]["dtype"] = "float32"
    with open(pjp, "w") as f:
        json.dump(pj, f)
    rc, out = bench(["run", "--programs", bad, "--workdir", os.path.join(work, "wbad"),
                     "--dry-run"])
    check(rc == 1 and "Traceback" not in out and
          "bf16: parameter 'body.0.weight': body.0.weight.npy has shape [64, 64], "
          "pipeline.json says [64, 63]" in out and
          "bf16: graph input 'y': y.npy is int64, pipeline.json says float32" in out,
          "run --dry-run: a wrong shape and dtype in pipeline.json: exit 1, both named", out)

    fake = os.path.join(work, "fake")
    shutil.copytree(progs, fake)
    stand_ins = {"fp32": STAND_IN_OK % sys.executable,
                 "tf32": "#!/bin/sh\nsleep 300\n",
                 "bf16": "#!/bin/sh\necho 'stand-in: no GPU here' >&2\nexit 3\n"}
    for p, text in stand_ins.items():
        exe = os.path.join(fake, p, "stage0")
        with open(exe, "w") as f:
            f.write(text)
        os.chmod(exe, 0o755)
    outdir = os.path.join(work, "out")
    env = dict(os.environ)
    env.pop("OUT", None)
    rc, out = bench(["run", "--programs", fake, "--workdir", os.path.join(work, "wfake"),
                     "--out", outdir, "--repeat", "2", "--warmup", "1", "--steps", "3",
                     "--timeout", "5", "--torch-device", "cpu"], env=env)
    check(rc == 1 and "Traceback" not in out, "run: failing stand-ins: exit 1, no traceback",
          out)
    try:
        with open(os.path.join(outdir, "bench.txt")) as f:
            txt = f.read()
    except OSError as e:
        txt = ""
        check(False, "run: OUT/bench.txt written", str(e))
    check("| fp32 | 2.000 |" in txt and "| 2 / 2 |" in txt,
          "run: bench.txt has fp32 measured in both rounds", txt)
    check("round 0 tf32 gpipe: killed after" in txt and "(time limit 5s)" in txt,
          "run: the hanging tf32 program killed at --timeout and reported", txt)
    check("round 0 bf16 gpipe: exit 3 after" in txt and "stand-in: no GPU here" in txt,
          "run: the failing bf16 program reported with its exit status and stderr", txt)

    # 5. --deadline: the hanging program is stopped at it, nothing is started after it.
    outdir = os.path.join(work, "out-deadline")
    t0 = time.monotonic()
    rc, out = bench(["run", "--programs", fake, "--workdir", os.path.join(work, "wfake"),
                     "--out", outdir, "--precisions", "tf32,fp32", "--repeat", "1",
                     "--warmup", "1", "--steps", "3", "--timeout", "60", "--deadline", "10",
                     "--torch-device", "cpu"], env=env)
    secs = time.monotonic() - t0
    try:
        with open(os.path.join(outdir, "bench.txt")) as f:
            txt = f.read()
    except OSError as e:
        txt = str(e)
    check(rc == 1 and secs < 20 and "Traceback" not in out and
          "round 0 tf32 gpipe: stopped at the deadline" in txt and
          "round 0 fp32 gpipe: not run (deadline" in txt and "(deadline reached)" in txt,
          "run --deadline 10: the hang stopped at the deadline, the rest not run (%.1fs)" % secs,
          out + txt)
    check_gpt(a, work, env)
    print("%d check(s) failed" % len(FAILS) if FAILS else "all checks passed", flush=True)
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
