#!/usr/bin/env python3
"""The GPU benchmark split across two machines: compile here, run on the GPU.

run_gpu_bench.sh needs gpipe-compile and the GPU on one machine. The GPU
machines this project borrows have CUDA, PyTorch and numpy but not the
toolchain gpipe-compile needs, so:

  # where gpipe-compile is (Debian's python3 with torch, onnx):
  /usr/bin/python3 bench/gpu/device_bench.py pack --bin build/bin --out DIR \\
      [--layers 16 --width 4096 --classes 1024 --batch 1024] [--precisions fp32,bf16]
  # on the GPU machine, from the repository root (DIR carried there):
  python3 bench/gpu/device_bench.py run --programs DIR [--mpi BUNDLE/mpi]
      [--steps 50 --warmup 10 --repeat 3]

pack exports the benchmark model (mlp_model.py) and compiles it as 1 stage with
--target cuda for each precision; DIR keeps only the stage executables and
pipeline.json (the weights, ~1 GB for the default model, are not carried).
run writes the weights there from the same seed as PyTorch's module
(mlp_model.build_module) under the file names of pipeline.json, and the data
(mlp_model.make_data), then alternates rounds of the gpipe program (its
--log-json step times, warmup steps dropped, median) and torch_mlp.py (PyTorch
eager, same precision: fp32 with TF32 off, bf16 with autocast), and prints a
table: ms/step, samples/s ratio gpipe/torch, TFLOP/s and MFU of each, and the
loss of the first steps of both (same weights and data: they must agree).
The table and raw numbers go to OUT/bench.txt (OUT: --out or $OUT).
Stage programs load libmpi even as 1 stage: --mpi installs the Open MPI files of
a test/cuda/device/pack.py bundle where the machine has none.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "test", "e2e"))

PEAKS = {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4}  # H100/H200 SXM dense TFLOP/s


def sh(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.exit("device_bench: %s failed (%d):\n%s%s" % (" ".join(cmd), r.returncode,
                                                          r.stdout[-2000:], r.stderr[-3000:]))
    return r.stdout


def pack(a):
    out = os.path.abspath(a.out)
    os.makedirs(out, exist_ok=True)
    model_dir = os.path.join(out, "model")
    sh([sys.executable, os.path.join(HERE, "mlp_model.py"), "--layers", str(a.layers),
        "--width", str(a.width), "--classes", str(a.classes), "--batch", str(a.batch),
        "--out", model_dir])
    for p in a.precisions.split(","):
        d = os.path.join(out, p)
        flags = ["--target", "cuda", "--cuda-arch", a.cuda_arch, "--lr", repr(a.lr)]
        flags += ["--allow-tf32"] if p == "tf32" else ["--precision", p]
        sh([os.path.join(a.bin, "gpipe-compile"), os.path.join(model_dir, "model.onnx"),
            "-o", d] + flags)
        for f in os.listdir(d):
            if f not in ("stage0", "pipeline.json"):
                path = os.path.join(d, f)
                sh(["rm", "-rf", path])
    sh(["rm", "-rf", model_dir])
    with open(os.path.join(out, "bench.json"), "w") as f:
        json.dump({"layers": a.layers, "width": a.width, "classes": a.classes,
                   "batch": a.batch, "lr": a.lr, "precisions": a.precisions.split(",")}, f)
    print("device_bench: packed %s into %s" % (a.precisions, out))


def write_inputs(cfg, pj, work):
    """The weights (torch's seeded init, by pipeline.json file name) and data."""
    import numpy as np
    import mlp_model
    wdir, ddir = os.path.join(work, "weights"), os.path.join(work, "data")
    os.makedirs(wdir, exist_ok=True)
    os.makedirs(ddir, exist_ok=True)
    m = mlp_model.build_module(cfg["layers"], cfg["width"], cfg["classes"])
    params = dict(m.named_parameters())
    for p in pj["stages"][0]["params"]:
        np.save(os.path.join(wdir, p["file"]), params[p["name"]].detach().numpy())
    x, y = mlp_model.make_data(4 * cfg["batch"], cfg["width"], cfg["classes"], 0)
    np.save(os.path.join(ddir, "x.npy"), x)
    np.save(os.path.join(ddir, "y.npy"), y)
    return wdir, ddir


def run(a):
    import mlp_model
    sys.path.insert(0, os.path.join(REPO, "test", "cuda", "device"))
    import run as device_run
    if a.mpi:
        device_run.install_mpi(os.path.abspath(a.mpi))
    progs = os.path.abspath(a.programs)
    cfg = json.load(open(os.path.join(progs, "bench.json")))
    work = os.path.abspath(a.workdir)
    os.makedirs(work, exist_ok=True)
    first = cfg["precisions"][0]
    env = device_run.env_with(device_run.library_path(os.path.join(progs, first, "stage0")))
    pj = json.load(open(os.path.join(progs, first, "pipeline.json")))
    t0 = time.time()
    wdir, ddir = write_inputs(cfg, pj, work)
    print("weights and data written in %.1fs" % (time.time() - t0), flush=True)
    fl = mlp_model.flops(cfg["layers"], cfg["width"], cfg["classes"], cfg["batch"])
    model_flops = fl["model_flops"]
    total = a.warmup + a.steps
    res = {p: {"gpipe": [], "torch": [], "gpipe_loss": None, "torch_loss": None}
           for p in cfg["precisions"]}
    for r in range(a.repeat):
        for p in cfg["precisions"]:
            order = ("gpipe", "torch") if r % 2 == 0 else ("torch", "gpipe")
            for who in order:
                if who == "gpipe":
                    log = os.path.join(work, "log_%s_%d.jsonl" % (p, r))
                    sh([os.path.join(progs, p, "stage0"), "--data", ddir, "--steps", str(total),
                        "--weights-in", wdir, "--log-json", log, "--quiet"], env=env)
                    rows = [json.loads(l) for l in open(log) if l.strip()]
                    res[p]["gpipe"].append(statistics.median(x["ms"] for x in rows[a.warmup:]))
                    res[p]["gpipe_loss"] = [x["loss"] for x in rows[:5]]
                else:
                    out = sh([sys.executable, os.path.join(HERE, "torch_mlp.py"),
                              "--layers", str(cfg["layers"]), "--width", str(cfg["width"]),
                              "--classes", str(cfg["classes"]), "--batch", str(cfg["batch"]),
                              "--precision", p, "--lr", repr(cfg["lr"]),
                              "--warmup", str(a.warmup), "--steps", str(a.steps),
                              "--repeat", "1"])
                    j = json.loads(out.strip().splitlines()[-1])
                    res[p]["torch"].append(j["ms_per_step"])
                    res[p]["torch_loss"] = j["loss"][:5]
                    res[p]["device_name"] = j.get("device_name")
                print("round %d %s %s: %.3f ms/step" % (r, p, who, res[p][who][-1]), flush=True)
    lines = ["# gpipe (1 stage, --target cuda) vs PyTorch eager, %s, %d-layer MLP width %d, "
             "batch %d; model FLOP/step %.4g; %d warmup + %d steps, %d alternating rounds"
             % (res[first].get("device_name"), cfg["layers"], cfg["width"], cfg["batch"],
                model_flops, a.warmup, a.steps, a.repeat),
             "| precision | gpipe ms/step | torch ms/step | throughput gpipe/torch | "
             "gpipe TFLOP/s (MFU) | torch TFLOP/s (MFU) | first losses gpipe / torch |",
             "|---|---|---|---|---|---|---|"]
    for p in cfg["precisions"]:
        g, t = statistics.median(res[p]["gpipe"]), statistics.median(res[p]["torch"])
        peak = PEAKS[p]
        lines.append("| %s | %.3f | %.3f | **%.3f** | %.1f (%.1f%%) | %.1f (%.1f%%) | %s / %s |"
                     % (p, g, t, t / g, model_flops / g / 1e9, 100 * model_flops / g / 1e9 / peak,
                        model_flops / t / 1e9, 100 * model_flops / t / 1e9 / peak,
                        ["%.5f" % v for v in res[p]["gpipe_loss"][:3]],
                        ["%.5f" % v for v in res[p]["torch_loss"][:3]]))
    text = "\n".join(lines)
    print(text)
    out = a.out or os.environ.get("OUT")
    if out:
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "bench.txt"), "w") as f:
            f.write(text + "\n\n" + json.dumps(res, indent=1) + "\n")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack")
    p.add_argument("--bin", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--width", type=int, default=4096)
    p.add_argument("--classes", type=int, default=1024)
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--cuda-arch", default="90")
    p.add_argument("--precisions", default="fp32,bf16")
    r = sub.add_parser("run")
    r.add_argument("--programs", required=True)
    r.add_argument("--workdir", default="/tmp/gpipe_device_bench")
    r.add_argument("--steps", type=int, default=50)
    r.add_argument("--warmup", type=int, default=10)
    r.add_argument("--repeat", type=int, default=3)
    r.add_argument("--out", default=None)
    r.add_argument("--mpi", help="a pack.py bundle's mpi/ folder, installed first")
    a = ap.parse_args()
    return pack(a) if a.cmd == "pack" else run(a)


if __name__ == "__main__":
    sys.exit(main())
