#!/usr/bin/python3
"""Packs the CUDA target's GPU checks for a GPU machine that lacks the toolchain.

The GPU machines this project borrows have CUDA, Python and numpy but no MLIR,
ONNX or Open MPI, so gpipe-compile cannot run there. Everything that needs
the toolchain happens here instead; the GPU machine only runs programs:

  pack.py --bin build/bin --out DIR [--cases REGEX] [--runtime-tests EXE
          --probe EXE] [--tar FILE.tar.gz]

For each e2e case of test/e2e/cases.txt matching REGEX (default: all):
  - exports the model and writes its data, as check_training.py does;
  - trains the PyTorch reference and the CPU target's program here (the same
    --stages/--microbatches/--remat), keeping their per-step losses and trained
    weights (expected.npz);
  - compiles the same pipeline with --target cuda (the executables, weights and
    pipeline.json go to DIR/cases/NAME/cuda).
Each case's case.json carries the tolerances check_training.py --target cuda
applies to it: against the CPU target's program (ref_tol: 1e-3 for bf16, else
tol) and against torch (torch_tol: --bf16-tol 5e-2 for bf16, else tol), for the
weights and for the losses, and for bf16 the 1e-6 by which the weights must
differ from torch's fp32 ones.
Also copied: the example model compiled for CUDA as 1 stage and as 2 stages x
2 micro-batches (for compute-sanitizer), the kernel unit test and the GPU
probe, and the Open MPI runtime (binaries, plug-ins, help files and the shared
libraries they need, outside glibc) that multi-stage programs launch with.
Every program and library in the bundle is a real file or a link that resolves
inside the bundle (under mpi/, an absolute target is read below mpi/): a link
that would leave it (such as /usr/bin/mpirun -> /etc/alternatives/mpirun ->
mpirun.openmpi -> orterun) is replaced by a copy of the file it names.

device/run.py, run on the GPU machine from DIR, runs it all and compares.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(REPO, "test", "e2e"))

import numpy as np  # noqa: E402

import check_training as ct  # noqa: E402
import models  # noqa: E402

# Shared libraries every Linux has: never carried.
SYSTEM_LIBS = re.compile(r"^(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|"
                         r"ld-linux[-\w]*)\.so")
MPI_TREES = ["/usr/lib/x86_64-linux-gnu/openmpi", "/usr/lib/x86_64-linux-gnu/pmix2",
             "/usr/share/openmpi", "/usr/share/pmix", "/etc/openmpi", "/etc/pmix"]
# mpirun is a link into Debian's alternatives (/etc/alternatives/mpirun): packed
# as the file it names, like every program.
MPI_PROGRAMS = ["/usr/bin/orterun", "/usr/bin/orted", "/usr/bin/mpirun"]
# check_training.py: with --precision bf16 the weights must differ from torch's
# fp32 ones by more than this (the bf16 rounding happened).
BF16_MIN_TORCH_DIFF = 1e-6


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise SystemExit("pack: %s failed (%d):\n%s%s" % (" ".join(cmd), r.returncode,
                                                          r.stdout, r.stderr[-3000:]))
    return r.stdout


def copy_into_root(src, root, follow=False):
    """Copies file `src` to ROOT/<its absolute path>: links as links (see
    fix_links), or with `follow` the file that `src` names."""
    dst = os.path.join(root, src.lstrip("/"))
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    if os.path.islink(src) and not follow:
        if not os.path.lexists(dst):
            os.symlink(os.readlink(src), dst)
    elif not os.path.lexists(dst):
        shutil.copy2(os.path.realpath(src), dst)


def target_in_root(root, link):
    """The file that `link` (under ROOT) names when ROOT is the file system
    root: None if the chain leaves ROOT, loops or ends at nothing."""
    root = os.path.abspath(root)
    p = os.path.abspath(link)
    for _ in range(40):
        if not os.path.islink(p):
            return p if os.path.exists(p) else None
        t = os.readlink(p)
        p = os.path.normpath(os.path.join(root, t.lstrip("/")) if os.path.isabs(t)
                             else os.path.join(os.path.dirname(p), t))
        if not p.startswith(root + os.sep):
            return None
    return None


def fix_links(root):
    """Replaces every link under ROOT that does not resolve inside ROOT with a
    copy of the file it names on this machine (run.py installs the tree on a
    machine where the link's target may be missing or something else)."""
    fixed = 0
    for d, dirs, files in os.walk(root):
        for f in dirs + files:
            p = os.path.join(d, f)
            if not os.path.islink(p) or target_in_root(root, p):
                continue
            host = os.path.realpath("/" + os.path.relpath(p, root))
            os.remove(p)
            if os.path.isfile(host):
                shutil.copy2(host, p)
                fixed += 1
            else:
                print("pack: dropped %s (names nothing here)" % p)
    return fixed


def pack_mpi(root):
    """The Open MPI runtime under ROOT, by absolute path (run.py installs it
    without replacing anything the machine has)."""
    elves = []
    for tree in MPI_TREES:
        if not os.path.isdir(tree):
            continue
        for d, _, files in os.walk(tree):
            for f in files:
                p = os.path.join(d, f)
                copy_into_root(p, root)
                if f.endswith(".so") or ".so." in f:
                    elves.append(p)
    for p in MPI_PROGRAMS:
        copy_into_root(p, root, follow=True)
        elves.append(p)
    # The shared libraries of all of them (and of libmpi, which the stage
    # programs need), by soname under /usr/lib/x86_64-linux-gnu.
    libs = {}
    out = subprocess.run(["ldd"] + elves + ["/usr/lib/x86_64-linux-gnu/libmpi.so.40"],
                         capture_output=True, text=True).stdout
    for line in out.splitlines():
        m = re.match(r"\s*(\S+) => (/\S+)", line)
        if m and not SYSTEM_LIBS.match(m.group(1)):
            libs[m.group(1)] = os.path.realpath(m.group(2))
    libdir = os.path.join(root, "usr/lib/x86_64-linux-gnu")
    os.makedirs(libdir, exist_ok=True)
    for soname, path in sorted(libs.items()):
        dst = os.path.join(libdir, soname)
        if not os.path.exists(dst):
            shutil.copy2(path, dst)
    # Links that would dangle there: mpirun's alternatives chain is done above;
    # left are development links to libraries no program here loads (so not
    # packed), such as openmpi/lib/libmpi_java.so -> ../../libmpi_java.so.40.
    fix_links(root)
    return sorted(libs)


def pack_case(a, name, args, out):
    """One e2e case: references here, the CUDA program compiled for there."""
    wd = os.path.join(out, "work", name)
    case_dir = os.path.join(out, "cases", name)
    os.makedirs(case_dir, exist_ok=True)
    c = ct.parse_args(args + ["--bin", a.bin, "--workdir", wd, "--target", "cuda"])
    compile_bin = ct.find_tool(c.bin, "gpipe-compile")
    run_bin = ct.find_tool(c.bin, "gpipe-run")
    os.makedirs(wd, exist_ok=True)
    data_dir = os.path.join(case_dir, "data")
    os.makedirs(data_dir, exist_ok=True)
    x, y = models.make_data(c.model, c.samples, seed=c.data_seed)
    np.save(os.path.join(data_dir, "x.npy"), x)
    np.save(os.path.join(data_dir, "y.npy"), y)
    model_path = os.path.join(wd, "model.onnx")
    eb = c.export_batch_size or c.batch_size
    models.export(models.build(c.model, c.seed), x[:eb], y[:eb], model_path,
                  opset=c.opset, dynamic_batch=c.dynamic_batch)
    init = models.load_initializers(model_path)
    ref_losses, ref_params, _, _, ref_buffers = ct.torch_reference(c, init, x, y)
    # BatchNorm's running statistics are initializers the run updates too.
    ref_params = dict(ref_params, **ref_buffers)
    _, cpu_losses, _, _, cpu_trained = ct.compile_and_run(
        c, compile_bin, run_bin, model_path, data_dir, wd, "_cpu",
        ct.pipeline_flags(c) + ct.target_flags(c, "cpu"))
    cpu_params = models.load_initializers(cpu_trained)
    cuda_dir = os.path.join(case_dir, "cuda")
    shutil.rmtree(cuda_dir, ignore_errors=True)
    run([compile_bin, model_path, "-o", cuda_dir, "--batch-size", str(c.batch_size)]
        + ct.pipeline_flags(c) + ct.target_flags(c, "cuda") + ct.optimizer_flags(c))
    for junk in ("model.onnx", "pipeline.mlir"):
        if os.path.exists(os.path.join(cuda_dir, junk)):
            os.remove(os.path.join(cuda_dir, junk))
    for f in os.listdir(cuda_dir):
        if f.endswith(".cu"):
            os.remove(os.path.join(cuda_dir, f))
    arrays = {"torch_losses": np.array(ref_losses), "cpu_losses": np.array(cpu_losses)}
    for n, v in ref_params.items():
        arrays["torch/" + n] = v
    for n, v in cpu_params.items():
        arrays["cpu/" + n] = v
    np.savez_compressed(os.path.join(case_dir, "expected.npz"), **arrays)
    with open(os.path.join(case_dir, "case.json"), "w") as f:
        # The tolerances check_training.py applies with --target cuda (its
        # parse_args computes them): run.py uses these, not one number.
        json.dump({"name": name, "args": args, "steps": c.steps, "precision": c.precision,
                   "stages": c.stages or 1,
                   "tol": {"cpu": {"weights": c.ref_tol, "losses": c.ref_tol},
                           "torch": {"weights": c.torch_tol, "losses": c.torch_tol}},
                   "min_torch_diff": BF16_MIN_TORCH_DIFF if c.precision == "bf16" else None},
                  f, indent=1)
    shutil.rmtree(wd, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True, help="directory of gpipe-compile, gpipe-run")
    ap.add_argument("--out", required=True, help="the bundle directory (recreated)")
    ap.add_argument("--cases", default="", help="regex over e2e case names")
    ap.add_argument("--runtime-tests", help="gpipe_runtime_cuda_tests executable")
    ap.add_argument("--probe", help="gpipe_cuda_probe executable")
    ap.add_argument("--tar", help="also write the bundle as this .tar.gz")
    a = ap.parse_args()
    a.bin = os.path.abspath(a.bin)
    out = os.path.abspath(a.out)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    cases = []
    with open(os.path.join(REPO, "test", "e2e", "cases.txt")) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#") or "|" not in line:
                continue
            name, args = line.split("|", 1)
            # As test/e2e/CMakeLists.txt: 1F1B needs buffered sends, which the
            # CUDA runtime does not have yet (gpipe-compile refuses it).
            if re.search(r"--schedule[ =]1f1b", args):
                continue
            if re.search(a.cases, name):
                cases.append((name, args.split()))
    for name, args in cases:
        print("case %s" % name, flush=True)
        pack_case(a, name, args, out)
    shutil.rmtree(os.path.join(out, "work"), ignore_errors=True)
    # compute-sanitizer's programs: the example as 1 stage and 2 x 2.
    example = os.path.join(REPO, "examples")
    shutil.copytree(os.path.join(example, "data"), os.path.join(out, "example", "data"))
    for sub, flags in (("k1", []), ("k2", ["--stages", "2", "--microbatches", "2"])):
        d = os.path.join(out, "example", sub)
        run([os.path.join(a.bin, "gpipe-compile"), os.path.join(example, "mlp.onnx"),
             "-o", d, "--target", "cuda"] + flags)
    tools = os.path.join(out, "tools")
    os.makedirs(tools)
    for exe in (a.runtime_tests, a.probe):
        if exe:
            shutil.copy2(exe, tools)
    libs = pack_mpi(os.path.join(out, "mpi"))
    shutil.copy2(os.path.join(HERE, "run.py"), out)
    # Outside mpi/ nothing is a link today; one that leaves the bundle would
    # break there.
    for d, dirs, files in os.walk(out):
        for f in dirs + files:
            p = os.path.join(d, f)
            root = os.path.join(out, "mpi") if p.startswith(os.path.join(out, "mpi", "")) \
                else out
            if os.path.islink(p) and not target_in_root(root, p):
                raise SystemExit("pack: %s -> %s does not resolve inside the bundle"
                                 % (p, os.readlink(p)))
    with open(os.path.join(out, "bundle.json"), "w") as f:
        json.dump({"cases": [n for n, _ in cases], "mpi_libs": libs}, f, indent=1)
    print("pack: %d case(s), Open MPI with %d libraries -> %s" % (len(cases), len(libs), out))
    if a.tar:
        with tarfile.open(a.tar, "w:gz") as t:
            t.add(out, arcname="gpu-bundle")
        print("pack: %s (%.1f MB)" % (a.tar, os.path.getsize(a.tar) / 1e6))
    return 0


if __name__ == "__main__":
    sys.exit(main())
