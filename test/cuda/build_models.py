#!/usr/bin/python3
"""CI without a GPU: every e2e model compiles and links for the CUDA target.

For each model of test/e2e/models.py (except mlp_deep, which only adds size),
exports it to ONNX and runs gpipe-compile --target cuda --cuda-arch 90 as one
stage and as 2 stages x 2 micro-batches (1 for models that cannot be split);
resnet18 (the largest: 20 convolutions and BatchNorms, slow to compile) only as
one stage, and with batch 8 (its 2 x 2 form adds no op that vgg_bn's does not);
the 2-stage forms in turn with --schedule gpipe, 1f1b (whose programs ask the
runtime for buffered sends), zbh1 (W actions: a weight function), zbh2 and
interleaved --virtual-stages 2 (two model chunks per stage: a chunk table, and
hand-off copies where a skip connection joins two chunks of one stage) and zbv
--virtual-stages 2 (chunks in a V: hand-offs on the last stage, W actions per
chunk) and bfpp --virtual-stages 2,
then checks the stage executables
(sm_90 SASS, NCCL and cuBLASLt linked) with check_cuda_binaries.py. Every op the
CPU target supports thus goes through nvcc: generated kernels, cuBLASLt GEMMs,
runtime kernels.

usage: build_models.py BIN_DIR WORK_DIR [--shard I/N]

--shard I/N builds only every N-th model from the I-th (0-based) of the sorted
list, so that N ctest tests share the models and run side by side.
"""
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
import models  # noqa: E402


# Built once (1 stage, fp32): large models whose second build would only add time.
ONE_STAGE_ONLY = ("resnet18",)


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        print("FAIL: %s\n%s%s" % (" ".join(cmd), r.stdout, r.stderr[-4000:]))
        sys.exit(1)
    return r.stdout


def main():
    if len(sys.argv) not in (3, 5) or (len(sys.argv) == 5 and sys.argv[3] != "--shard"):
        sys.exit("usage: build_models.py BIN_DIR WORK_DIR [--shard I/N]")
    bindir, work = sys.argv[1], sys.argv[2]
    shard, shards = 0, 1
    if len(sys.argv) == 5:
        try:
            shard, shards = (int(v) for v in sys.argv[4].split("/"))
            if not 0 <= shard < shards:
                raise ValueError
        except ValueError:
            sys.exit("build_models.py: --shard takes I/N with 0 <= I < N, not %r" % sys.argv[4])
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    names = [n for n in sorted(models.MODELS) if n != "mlp_deep"]
    mine = names[shard::shards]
    print("models %d/%d: %s" % (shard, shards, " ".join(mine)), flush=True)
    for name in mine:
        schedule = (["gpipe"], ["1f1b"], ["zbh1"], ["zbh2"],
                    ["interleaved", "--virtual-stages", "2"],
                    ["zbv", "--virtual-stages", "2"],
                    ["bfpp", "--virtual-stages", "2"])[names.index(name) % 7]
        onnx_path = os.path.join(work, name + ".onnx")
        models.export_named(name, onnx_path, batch_size=8 if name in ONE_STAGE_ONLY else 16)
        for flags in (["--precision", "fp32"],
                      ["--stages", "2", "--microbatches", "2", "--precision", "bf16",
                       "--schedule"] + schedule):
            if name in ONE_STAGE_ONLY and "--stages" in flags:
                continue
            out = os.path.join(work, name + ("_k1" if "--stages" not in flags else "_k2"))
            run([os.path.join(bindir, "gpipe-compile"), onnx_path, "-o", out,
                 "--target", "cuda", "--cuda-arch", "90", "--optimizer", "adam"] + flags)
            stages = sorted(f for f in os.listdir(out)
                            if f.startswith("stage") and "." not in f)
            print(run([sys.executable, os.path.join(HERE, "check_cuda_binaries.py"),
                       "--arch", "90", "--needs", "nccl", "--needs", "cublasLt"]
                      + [os.path.join(out, s) for s in stages]).strip())
    print("cuda build of %d e2e model(s): ok" % len(mine))
    return 0


if __name__ == "__main__":
    sys.exit(main())
