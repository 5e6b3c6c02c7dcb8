#!/usr/bin/python3
"""Packs the CUDA target's GPU checks for a GPU machine that lacks the toolchain.

The GPU machines this project borrows have CUDA, Python and numpy but no MLIR,
ONNX or Open MPI, so gpipe-compile cannot run there. Everything that needs
the toolchain happens here instead; the GPU machine only runs programs:

  pack.py --bin build/bin --out DIR [--tiers 0,1] [--cases REGEX]
          [--runtime-tests EXE --probe EXE] [--bench] [--cuda-arch 90]
          [--jobs N] [--tar FILE.tar.xz] [--max-mb 55] [--xz-preset 9e]

The cases are those of test/e2e/cases.txt in the tiers of priority.txt
(--tiers; tier 2 is every case priority.txt does not list; default 0,1),
narrowed by --cases REGEX, packed --jobs at a time. For each:
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
Every CUDA program is compiled for --cuda-arch (default 90: the H100 and H200
the GPU checks run on), with --runtime-dir linked to a runtime built for it
alone (the build's runtime-sm90, target gpipe_runtime_cuda_sm90), and stripped
(the device code in .nv_fatbin stays).
Also copied: the example model compiled for CUDA as 1 stage and as 2 stages x
2 micro-batches (for compute-sanitizer), the kernel unit test and the GPU
probe, with --bench the GPU benchmark's programs (bench/gpu/device_bench.py
pack: the 16 x 4096 MLP at batch 1024 in fp32, TF32 and bf16) under bench/,
run.py, gpu-check.sh and priority.txt, and the Open MPI runtime (binaries, plug-ins, help files and the shared
libraries they need, outside glibc) that multi-stage programs launch with.
Every program and library in the bundle is a real file or a link that resolves
inside the bundle (under mpi/, an absolute target is read below mpi/): a link
that would leave it (such as /usr/bin/mpirun -> /etc/alternatives/mpirun ->
mpirun.openmpi -> orterun) is replaced by a copy of the file it names.

--tar writes the bundle as an xz-compressed tar (a 64 MiB dictionary: the
runtime that every stage executable repeats is stored about once), prints its
size and refuses (exit 1, no archive left) one over --max-mb MiB: what a GPU
machine is sent is at most 64 MiB with the repository. --xz-preset (default
9e, the smallest archive) trades size for time: 0 packs the same files 7x
faster into an archive about 20% larger (the CI check uses it).

device/gpu-check.sh (or device/run.py), run on the GPU machine from DIR, runs it
all and compares.
"""
import argparse
import concurrent.futures
import json
import lzma
import multiprocessing
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


def all_cases(path):
    """(name, args) of every case line of cases.txt."""
    with open(path) as f:
        lines = [l.strip() for l in f]
    return [(l.split("|", 1)[0], l.split("|", 1)[1].split()) for l in lines
            if l and not l.startswith("#") and "|" in l]


def pack_case(a, name, args, out):
    """One e2e case: references here, the CUDA program compiled for there."""
    wd = os.path.join(out, "work", name)
    case_dir = os.path.join(out, "cases", name)
    os.makedirs(case_dir, exist_ok=True)
    c = ct.parse_args(args + ["--bin", a.bin, "--workdir", wd, "--target", "cuda",
                              "--cuda-arch", a.cuda_arch])
    compile_bin = ct.find_tool(c.bin, "gpipe-compile")
    run_bin = ct.find_tool(c.bin, "gpipe-run")
    os.makedirs(wd, exist_ok=True)
    data_dir = os.path.join(case_dir, "data")
    os.makedirs(data_dir, exist_ok=True)
    model_path = os.path.join(wd, "model.onnx")
    # the same export and data as check_training.py (--gelu-opset20 included)
    x, y = ct.export_model_and_data(c, model_path, data_dir)
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
    strip_programs(cuda_dir)
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
                   # the data order of the references: run.py passes it on
                   "shuffle": c.shuffle,
                   "tol": {"cpu": {"weights": c.ref_tol, "losses": c.ref_tol},
                           "torch": {"weights": c.torch_tol, "losses": c.torch_tol}},
                   "min_torch_diff": BF16_MIN_TORCH_DIFF if c.precision == "bf16" else None},
                  f, indent=1)
    shutil.rmtree(wd, ignore_errors=True)


def strip_programs(d):
    """Strips the stage executables in D (symbols only: .nv_fatbin stays)."""
    for f in sorted(os.listdir(d)):
        p = os.path.join(d, f)
        if re.fullmatch(r"stage\d+", f) and os.path.isfile(p):
            run(["strip", "--strip-unneeded", p])


def read_priority(path=os.path.join(HERE, "priority.txt")):
    """{case: tier} of priority.txt, in its order."""
    tiers = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            m = re.fullmatch(r"([01])\s+(\S+)", line)
            if not m:
                raise SystemExit("pack: %s:%d: expected 'TIER CASE' (tier 0 or 1): %r"
                                 % (path, n, line))
            tiers[m.group(2)] = int(m.group(1))
    return tiers


def pack_one(a, name, args, out):
    """pack_case in a worker process: the error's text instead of an exception
    that would lose which case it was."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    try:
        import torch
        torch.set_num_threads(1)
        pack_case(a, name, args, out)
        return None
    except BaseException as e:  # noqa: BLE001 - reported with the case's name
        return "%s: %s" % (type(e).__name__, e)


def xz_preset(text):
    """--xz-preset: 0-9, 'e' after it for the extreme variant ("9e")."""
    m = re.fullmatch(r"([0-9])(e?)", text)
    if not m:
        raise argparse.ArgumentTypeError("--xz-preset takes 0 to 9, optionally followed by "
                                         "e (e.g. 9e), not %r" % text)
    return int(m.group(1)) | (lzma.PRESET_EXTREME if m.group(2) else 0)


def write_tar(out, tar, max_mb, preset):
    """OUT as TAR (xz, 64 MiB dictionary), refused above MAX_MB MiB."""
    filters = [{"id": lzma.FILTER_LZMA2, "preset": preset, "dict_size": 64 << 20}]
    tmp = tar + ".tmp"
    with lzma.LZMAFile(tmp, "w", format=lzma.FORMAT_XZ, filters=filters) as xz:
        with tarfile.open(fileobj=xz, mode="w") as t:
            t.add(out, arcname="gpu-bundle")
    size = os.path.getsize(tmp)
    raw = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(out) for f in fs
              if not os.path.islink(os.path.join(d, f)))
    print("pack: %s: %.1f MiB (%.1f MiB unpacked)" % (tar, size / 2 ** 20, raw / 2 ** 20))
    if size > max_mb * 2 ** 20:
        os.remove(tmp)
        raise SystemExit("pack: the bundle is %.1f MiB, over --max-mb %g: it cannot be "
                         "carried to a GPU machine with the repository (pack fewer cases)"
                         % (size / 2 ** 20, max_mb))
    os.replace(tmp, tar)


def pack_bench(a, out):
    """The GPU benchmark's programs (device_bench.py pack), stripped."""
    d = os.path.join(out, "bench")
    run([sys.executable, os.path.join(REPO, "bench", "gpu", "device_bench.py"), "pack",
         "--bin", a.bin, "--out", d, "--cuda-arch", a.cuda_arch])
    for sub in sorted(os.listdir(d)):
        if os.path.isdir(os.path.join(d, sub)):
            strip_programs(os.path.join(d, sub))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True, help="directory of gpipe-compile, gpipe-run")
    ap.add_argument("--out", required=True, help="the bundle directory (recreated)")
    ap.add_argument("--cases", default="", help="regex over e2e case names")
    ap.add_argument("--tiers", default="0,1",
                    help="priority.txt tiers to pack (0, 1; 2 = every other case)")
    ap.add_argument("--cuda-arch", default="90", help="gpipe-compile --cuda-arch")
    ap.add_argument("--runtime-dir", default=None,
                    help="GPIPE_RUNTIME_DIR for the CUDA programs (the build's runtime-sm90: "
                         "cmake --build build --target gpipe_runtime_cuda_sm90)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                    help="cases packed at a time")
    ap.add_argument("--bench", action="store_true",
                    help="also the GPU benchmark's programs (bench/gpu/device_bench.py)")
    ap.add_argument("--max-mb", type=float, default=55.0,
                    help="refuse a --tar archive larger than this many MiB")
    ap.add_argument("--runtime-tests", help="gpipe_runtime_cuda_tests executable")
    ap.add_argument("--probe", help="gpipe_cuda_probe executable")
    ap.add_argument("--tar", help="also write the bundle as this .tar.xz")
    ap.add_argument("--xz-preset", type=xz_preset, default="9e",
                    help="xz preset of --tar (default 9e, the smallest; the CI check "
                         "cuda_device_bundle uses 0, which is 7x faster)")
    a = ap.parse_args()
    try:
        tiers = {int(t) for t in a.tiers.split(",")}
        if not tiers <= {0, 1, 2}:
            raise ValueError
        re.compile(a.cases)
    except (ValueError, re.error):
        ap.error("--tiers takes 0, 1, 2 (comma-separated); --cases a regex")
    priority = read_priority()
    if a.runtime_dir:
        lib = os.path.join(a.runtime_dir, "lib", "gpipe", "libgpipe_runtime_cuda.a")
        if not os.path.isfile(lib):
            ap.error("--runtime-dir: no %s" % lib)
        # every gpipe-compile below (and in the workers) links that runtime;
        # the CPU references keep the build's (they find theirs the same way)
        os.environ["GPIPE_RUNTIME_DIR"] = os.path.abspath(a.runtime_dir)
    a.bin = os.path.abspath(a.bin)
    out = os.path.abspath(a.out)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    every = all_cases(os.path.join(REPO, "test", "e2e", "cases.txt"))
    # --shard-optimizer runs on the CPU target only (no CUDA program).
    cases = [(name, args) for name, args in every
             if priority.get(name, 2) in tiers and re.search(a.cases, name)
             and "--shard-optimizer" not in args]
    unknown = set(priority) - {n for n, _ in every}
    if unknown:
        raise SystemExit("pack: priority.txt names cases cases.txt lacks: %s"
                         % ", ".join(sorted(unknown)))
    order = {n: i for i, n in enumerate(priority)}
    cases.sort(key=lambda c: (priority.get(c[0], 2), order.get(c[0], len(order))))
    errors = []
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max(1, a.jobs), mp_context=ctx) as pool:
        futs = {pool.submit(pack_one, a, name, args, out): name for name, args in cases}
        for f in concurrent.futures.as_completed(futs):
            err = f.result()
            print("case %s: %s" % (futs[f], err or "packed"), flush=True)
            if err:
                errors.append("%s: %s" % (futs[f], err))
    if errors:
        raise SystemExit("pack: %d case(s) failed:\n%s" % (len(errors), "\n".join(errors)))
    shutil.rmtree(os.path.join(out, "work"), ignore_errors=True)
    # compute-sanitizer's programs: the example as 1 stage and 2 x 2.
    example = os.path.join(REPO, "examples")
    shutil.copytree(os.path.join(example, "data"), os.path.join(out, "example", "data"))
    for sub, flags in (("k1", []), ("k2", ["--stages", "2", "--microbatches", "2"])):
        d = os.path.join(out, "example", sub)
        run([os.path.join(a.bin, "gpipe-compile"), os.path.join(example, "mlp.onnx"),
             "-o", d, "--target", "cuda", "--cuda-arch", a.cuda_arch] + flags)
        for f in os.listdir(d):
            if f.endswith(".cu") or f in ("model.onnx", "pipeline.mlir"):
                os.remove(os.path.join(d, f))
        strip_programs(d)
    if a.bench:
        pack_bench(a, out)
    tools = os.path.join(out, "tools")
    os.makedirs(tools)
    for exe in (a.runtime_tests, a.probe):
        if exe:
            shutil.copy2(exe, tools)
    libs = pack_mpi(os.path.join(out, "mpi"))
    for f in ("run.py", "gpu-check.sh", "priority.txt"):
        shutil.copy2(os.path.join(HERE, f), out)
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
        json.dump({"cases": [n for n, _ in cases], "mpi_libs": libs,
                   "tiers": {n: priority.get(n, 2) for n, _ in cases},
                   "cuda_arch": a.cuda_arch, "bench": bool(a.bench)}, f, indent=1)
    print("pack: %d case(s), Open MPI with %d libraries -> %s" % (len(cases), len(libs), out))
    if a.tar:
        write_tar(out, os.path.abspath(a.tar), a.max_mb, a.xz_preset)
    return 0


if __name__ == "__main__":
    sys.exit(main())
