#!/usr/bin/python3
"""CI without a GPU: device/pack.py's bundle and device/run.py's failure handling.

  check_device_bundle.py --bin BIN_DIR --probe EXE --runtime-tests EXE --work DIR

Packs three e2e cases (CASES, priority.txt's tier 0: 1 stage fp32, 2 stages
fp32, 1 stage bf16) with the probe and the kernel unit test as an xz tar
(sm_90 only, stripped; its size printed), unpacks it, and checks:
  - every link in the bundle resolves inside it (under mpi/, an absolute target
    is read below mpi/) and mpirun, orterun, orted are real files;
  - each case.json carries check_training.py --target cuda's tolerances (bf16:
    1e-3 against the CPU target, 5e-2 against torch);
then runs the bundle's checks from the unpacked archive:
  D. gpu-check.sh (the GPU machine's one command) on the archive with no ssh
     or rsh on PATH and a probe stand-in that passes (so that everything after
     it runs here, with no GPU): the mpirun smoke job passes through the
     installed Open MPI (plm 'isolated': no ssh needed), the 2-stage case is
     launched by it and fails like the 1-stage ones, for want of a CUDA device,
     with the stage's message; the kernel test's output is OUT/kernels.log;
     every planned check is in results.json; OUT holds env.txt, results.json,
     kernels.log, logs.tgz and gpu-check.log and nothing else; no traceback;
  E. gpu-check.sh with a deadline 8 s after run.py's start and a probe that
     takes 5 s: the probe passes, every later check is "not run (deadline)",
     and it ends well before its --budget;
and run.py three times, never installing Open MPI (--no-install) and with no
mpirun (--mpirun names a missing file, then a dangling link like the one an
older bundle installed):
  A. as packed: every check (probe, mpirun, kernels, each case, memcheck k1
     and k2, bench) must be reported, without a GPU as failed with its reason
     (not run: the GPU probe failed);
  B. with a hanging probe (--timeout): killed, the rest not run; then with a
     probe that passes, a kernel test that cannot start, each 1-stage case's
     program replaced by a stand-in that writes the CPU target's results (so
     the comparison code runs: fp32 and bf16 must pass, which needs bf16's
     tolerance against torch), copies of them 3x their tolerance against the
     CPU target off (must fail: fp32 must not get bf16's), one that writes no
     log.jsonl, one without pipeline.json, one without expected.npz, a name
     the bundle lacks, and a missing library: each an outcome with its reason;
     the mpirun smoke job cannot start, so the 2-stage case is not run; the
     shuffled case's stage gets --shuffle --seed as packed;
  C. ended (SIGTERM, as by a time limit) during the hanging probe: the cases
     are listed as not run (interrupted), and the probe's process is gone.
Each run must end without a Python traceback, print one line per check and the
summary line, exit with the number of failures, and write a results.json that
lists every case. Exit status 0 = pass, 1 = any failure.
"""
import argparse
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tarfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))

import check_training as ct  # noqa: E402

sys.path.insert(0, os.path.join(HERE, "device"))
from pack import target_in_root  # noqa: E402

FP32, PIPE, BF16 = "tanh_sgd", "tanh_k2_m2", "relu_sgd_mom_bf16"
CASES = "^(%s|%s|%s)$" % (FP32, PIPE, BF16)
SUMMARY = re.compile(r"^(\d+) check\(s\), (\d+) failed: ", re.M)
FAILURES = []

# Stands in for a 1-stage CUDA program: writes the CPU target's trained weights
# (times SCALE) and losses from the case's expected.npz, as a GPU run that
# matches the CPU target would; with NOLOG no log.jsonl.
STAND_IN = """#!%(python)s
import json, os, sys
import numpy as np
SCALE, NOLOG, NEED = %(scale)r, %(nolog)r, %(need)r
if " ".join(NEED) not in " ".join(sys.argv):
    sys.exit("stand-in: %%s not among the arguments %%s" %% (NEED, sys.argv[1:]))
argv = [x for x in sys.argv[1:] if x not in ("--quiet", "--shuffle")]
args = dict(zip(argv[0::2], argv[1::2]))
case = os.path.dirname(os.path.dirname(os.path.abspath(args["--pipeline"])))
exp = np.load(os.path.join(case, "expected.npz"))
os.makedirs(args["--weights-out"], exist_ok=True)
for st in json.load(open(args["--pipeline"]))["stages"]:
    for p in st["params"]:
        w = (exp["cpu/" + p["name"]] * SCALE).astype(np.float32)
        np.save(os.path.join(args["--weights-out"], p["file"]), w)
if not NOLOG:
    with open(args["--log-json"], "w") as f:
        for s, l in enumerate(exp["cpu_losses"], 1):
            f.write(json.dumps({"step": s, "loss": float(l), "ms": 1.0}) + "\\n")
"""


def expect(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL: " + what, flush=True)
    return cond


def check_links(bundle):
    mpi = os.path.join(bundle, "mpi")
    links = 0
    for d, dirs, files in os.walk(bundle):
        for f in dirs + files:
            p = os.path.join(d, f)
            if os.path.islink(p):
                links += 1
                root = mpi if p.startswith(mpi + os.sep) else bundle
                expect(target_in_root(root, p), "bundle: %s -> %s does not resolve inside %s"
                       % (os.path.relpath(p, bundle), os.readlink(p), root))
    for prog in ("mpirun", "orterun", "orted"):
        p = os.path.join(mpi, "usr", "bin", prog)
        expect(os.path.isfile(p) and not os.path.islink(p) and os.access(p, os.X_OK),
               "bundle: mpi/usr/bin/%s is not a real executable file" % prog)
    print("bundle: %d link(s), all resolve inside it" % links, flush=True)


def check_tolerances(bundle, cases_txt):
    for name, args in cases_txt.items():
        with open(os.path.join(bundle, "cases", name, "case.json")) as f:
            meta = json.load(f)
        c = ct.parse_args(args + ["--target", "cuda"])
        want = {"cpu": {"weights": c.ref_tol, "losses": c.ref_tol},
                "torch": {"weights": c.torch_tol, "losses": c.torch_tol}}
        expect(meta.get("tol") == want, "%s: case.json tol %r, check_training.py has %r"
               % (name, meta.get("tol"), want))
    with open(os.path.join(bundle, "cases", BF16, "case.json")) as f:
        meta = json.load(f)
    expect(meta["tol"]["cpu"]["weights"] == 1e-3 and meta["tol"]["torch"]["weights"] == 5e-2
           and meta.get("min_torch_diff") == 1e-6,
           "%s: bf16 tolerances are not 1e-3 (CPU target), 5e-2 (torch), 1e-6 (must differ)"
           % BF16)


def run_bundle(bundle, label, args, interrupt_at=None):
    """run.py ARGS from the unpacked bundle, with SIGTERM once file
    `interrupt_at` exists; returns (exit status, output, results.json's checks
    by (kind, name), or None)."""
    out = os.path.join(os.path.dirname(bundle), "out-" + label)
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, os.path.join(bundle, "run.py"), "--no-install", "--out", out] + args
    print("run %s: %s" % (label, " ".join(cmd[1:])), flush=True)
    t0 = time.time()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         cwd=os.path.dirname(bundle))
    if interrupt_at is not None:
        while not os.path.exists(interrupt_at) and p.poll() is None \
                and time.time() < t0 + 120:
            time.sleep(0.1)
        time.sleep(0.5)
        p.send_signal(signal.SIGTERM)  # as a time limit ends it
    text = p.communicate(timeout=300)[0]
    print("".join("  | " + l + "\n" for l in text.splitlines()), end="")
    print("run %s: exit %d, %.1fs" % (label, p.returncode, time.time() - t0), flush=True)
    expect("Traceback" not in text, "run %s: a Python traceback" % label)
    m = SUMMARY.search(text)
    expect(m, "run %s: no summary line 'N check(s), M failed: ...'" % label)
    if m:
        expect(p.returncode == min(int(m.group(2)), 125),
               "run %s: exit status %d, the summary says %s failed"
               % (label, p.returncode, m.group(2)))
    try:
        with open(os.path.join(out, "results.json")) as f:
            results = json.load(f)
    except (OSError, ValueError) as e:
        expect(False, "run %s: no results.json: %s" % (label, e))
        return p.returncode, text, None
    if m:
        expect(len(results) == int(m.group(1)), "run %s: results.json has %d checks, the "
               "summary %s" % (label, len(results), m.group(1)))
    return p.returncode, text, {(r["kind"], r["name"]): r for r in results}


def expect_result(label, text, results, kind, name, ok, *needles):
    """Check (kind, name) is in results.json and printed, with outcome `ok` and
    every needle in its detail."""
    if results is None:
        return
    r = results.get((kind, name))
    if not expect(r, "run %s: results.json lacks %s %s" % (label, kind, name)):
        return
    verdict = "PASS" if ok else "FAIL"
    expect(r["ok"] == ok, "run %s: %s %s is %s, expected %s: %s"
           % (label, kind, name, "PASS" if r["ok"] else "FAIL", verdict, r["detail"]))
    expect(re.search(r"^%s %s %s: " % (verdict, kind, re.escape(name)), text, re.M),
           "run %s: no line '%s %s %s: ...'" % (label, verdict, kind, name))
    for n in needles:
        expect(re.search(n, r["detail"]), "run %s: %s %s: %r not in its detail: %s"
               % (label, kind, name, n, r["detail"]))


def probe_gone(pidfile, label):
    """The hanging probe stand-in (its pid in `pidfile`) was ended."""
    try:
        with open(pidfile) as f:
            pid = int(f.read())
    except (OSError, ValueError) as e:
        expect(False, "run %s: the probe stand-in did not start: %s" % (label, e))
        return
    expect(not os.path.exists("/proc/%d" % pid),
           "run %s: the hanging probe (pid %d) still runs" % (label, pid))


def hang_probe(tools, pidfile):
    """The probe replaced by one that writes its pid to PIDFILE and hangs."""
    if os.path.exists(pidfile):
        os.remove(pidfile)
    with open(os.path.join(tools, "gpipe_cuda_probe"), "w") as f:
        f.write("#!/bin/sh\necho $$ > %s\nexec sleep 120\n" % pidfile)
    os.chmod(os.path.join(tools, "gpipe_cuda_probe"), 0o755)


def missing_lib_program(work, path):
    """PATH: a real program that needs libgpipe_gone.so.1, which is gone."""
    d = os.path.join(work, "gone")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "gone.c"), "w") as f:
        f.write("int gpipe_gone(void) { return 0; }\n")
    with open(os.path.join(d, "main.c"), "w") as f:
        f.write("int gpipe_gone(void);\nint main(void) { return gpipe_gone(); }\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-Wl,-soname,libgpipe_gone.so.1", "-o",
                    os.path.join(d, "libgpipe_gone.so.1"), os.path.join(d, "gone.c")],
                   check=True)
    subprocess.run(["cc", "-o", path, os.path.join(d, "main.c"),
                    os.path.join(d, "libgpipe_gone.so.1")], check=True)
    os.remove(os.path.join(d, "libgpipe_gone.so.1"))


def check_arch(bundle, only):
    """Every CUDA program of the bundle holds sm_90 code (ONLY: and no other),
    and is stripped."""
    progs = [os.path.join(d, f) for d, _, fs in os.walk(os.path.join(bundle, "cases"))
             for f in fs if re.fullmatch(r"stage\d+", f)]
    progs += [os.path.join(bundle, "example", k, "stage%d" % i)
              for k, n in (("k1", 1), ("k2", 2)) for i in range(n)]
    expect(progs, "bundle: no stage programs")
    r = subprocess.run([sys.executable, os.path.join(HERE, "check_cuda_binaries.py")] + progs
                       + ["--arch", "90"] + (["--only"] if only else []),
                       capture_output=True, text=True)
    expect(r.returncode == 0, "bundle: stage programs without sm_90 code%s: %s%s"
           % (" or with other code" if only else "",
           r.stdout[-1500:], r.stderr[-1500:]))
    for p in progs:
        out = subprocess.run(["file", "-L", p], capture_output=True, text=True).stdout \
            if shutil.which("file") else "stripped"
        expect("not stripped" not in out, "bundle: %s is not stripped" % p)
    print("bundle: %d stage program(s), sm_90%s, stripped"
          % (len(progs), " only" if only else ""), flush=True)


def hidden_ssh_path(work):
    """A PATH with every program of this one's folders except ssh and rsh."""
    d = os.path.join(work, "path-without-ssh")
    os.makedirs(d, exist_ok=True)
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        if not os.path.isdir(folder):
            continue
        for f in os.listdir(folder):
            if f in ("ssh", "rsh") or os.path.lexists(os.path.join(d, f)):
                continue
            os.symlink(os.path.join(folder, f), os.path.join(d, f))
    return d


def gpu_check(work, tar, bundle):
    """D and E: test/cuda/device/gpu-check.sh as the GPU machine runs it."""
    script = os.path.join(HERE, "device", "gpu-check.sh")
    # The archive's probe passes, so everything after it runs here.
    patched = os.path.join(work, "patched")
    shutil.rmtree(patched, ignore_errors=True)
    with tarfile.open(tar) as t:
        t.extractall(patched)
    probe = os.path.join(patched, "gpu-bundle", "tools", "gpipe_cuda_probe")

    def repack(probe_text, name):
        with open(probe, "w") as f:
            f.write(probe_text)
        os.chmod(probe, 0o755)
        out = os.path.join(work, name + ".tar.xz")
        # xz's fastest preset: the archive's format is what is checked here
        subprocess.run(["tar", "-cJf", out, "-C", patched, "gpu-bundle"], check=True,
                       env=dict(os.environ, XZ_OPT="-0"))
        return out
    env = dict(os.environ, PATH=hidden_ssh_path(work), GPU_CHECK_WORK=os.path.join(work, "gc"))
    env.pop("OMPI_MCA_plm", None)
    for label, probe_text, args, budget in (
            ("D", "#!/bin/sh\necho 'stand-in probe'\n", ["--timeout", "60"], 300),
            ("E", "#!/bin/sh\nsleep 5\necho 'slow stand-in probe'\n", ["--deadline", "8"], 120)):
        archive = repack(probe_text, label)
        out = os.path.join(work, "out-" + label)
        shutil.rmtree(out, ignore_errors=True)
        t0 = time.time()
        p = subprocess.run(["bash", script, archive, "--budget", str(budget)] + args,
                           env=dict(env, OUT=out), capture_output=True, text=True, timeout=600)
        secs = time.time() - t0
        text = p.stdout + p.stderr
        print("".join("  | " + l + "\n" for l in text.splitlines()), end="")
        print("gpu-check %s: exit %d, %.1fs" % (label, p.returncode, secs), flush=True)
        expect("Traceback" not in text, "gpu-check %s: a Python traceback" % label)
        try:
            with open(os.path.join(out, "results.json")) as f:
                res = {(r["kind"], r["name"]): r for r in json.load(f)}
        except (OSError, ValueError) as e:
            expect(False, "gpu-check %s: no results.json: %s" % (label, e))
            continue
        failed = sum(not r["ok"] for r in res.values())
        expect(p.returncode == min(failed, 125), "gpu-check %s: exit %d, %d check(s) failed"
               % (label, p.returncode, failed))
        planned = [("setup", "Open MPI install"), ("setup", "library path"),
                   ("probe", "gpipe_cuda_probe"), ("mpirun", "2-rank smoke"),
                   ("kernels", "gpipe_runtime_cuda_tests"), ("memcheck", "example k1"),
                   ("bench", "device_bench"), ("memcheck", "example k2")] + \
            [("e2e", c) for c in (FP32, PIPE, BF16)]
        expect(set(planned) <= set(res), "gpu-check %s: results.json lacks %s"
               % (label, sorted(set(planned) - set(res))))
        for k, r in res.items():
            expect(r["ok"] or r["detail"], "gpu-check %s: %s failed with no reason" % (label, k))
        files = set(os.listdir(out))
        promised = {"env.txt", "results.json", "logs.tgz", "gpu-check.log"}
        if label == "D":
            promised.add("kernels.log")
        expect(promised <= files and files <= promised | {"bench.txt", "kernels.log"},
               "gpu-check %s: OUT holds %s, expected %s" % (label, sorted(files),
                                                             sorted(promised)))
        if os.path.isfile(os.path.join(out, "env.txt")):
            with open(os.path.join(out, "env.txt")) as f:
                envtxt = f.read()
            expect("## GPU" in envtxt and "ssh: \n" in envtxt,
                   "gpu-check %s: env.txt lacks the GPU section or shows ssh" % label)
        ok = lambda k: res.get(k, {}).get("ok")  # noqa: E731
        detail = lambda k: res.get(k, {}).get("detail", "")  # noqa: E731
        if label == "D":
            expect(ok(("probe", "gpipe_cuda_probe")), "gpu-check D: the probe stand-in failed")
            expect(ok(("mpirun", "2-rank smoke")), "gpu-check D: the mpirun smoke job "
                   "failed with no ssh on PATH: %s" % detail(("mpirun", "2-rank smoke")))
            for c in (FP32, PIPE, BF16):
                expect(not ok(("e2e", c)) and "no CUDA device" in detail(("e2e", c)),
                       "gpu-check D: e2e %s did not fail for want of a CUDA device: %s"
                       % (c, detail(("e2e", c))))
            expect("K=2; exit" in detail(("e2e", PIPE)), "gpu-check D: the 2-stage case was "
                   "not launched: %s" % detail(("e2e", PIPE)))
            with open(os.path.join(out, "kernels.log")) if os.path.isfile(
                    os.path.join(out, "kernels.log")) else open(os.devnull) as f:
                expect("no CUDA device" in f.read(), "gpu-check D: kernels.log lacks the "
                       "kernel test's output")
            with tarfile.open(os.path.join(out, "logs.tgz")) as t:
                names = t.getnames()
            expect(any(n.endswith("cases/%s/run.log" % PIPE) for n in names)
                   and any(n.endswith("mpirun-smoke.log") for n in names),
                   "gpu-check D: logs.tgz lacks the run logs: %s" % names)
        else:
            expect(ok(("probe", "gpipe_cuda_probe")), "gpu-check E: the slow probe failed")
            after = [k for k in planned if k[0] not in ("setup", "probe", "mpirun")]
            for k in after:
                expect(detail(k) == "not run (deadline)", "gpu-check E: %s %s is not 'not run "
                       "(deadline)': %s" % (k + (detail(k),)))
            expect(secs < 60, "gpu-check E: %.0fs, past its deadline" % secs)


def stand_in(path, scale=1.0, nolog=False, need=()):
    with open(path, "w") as f:
        f.write(STAND_IN % {"python": sys.executable, "scale": scale, "nolog": nolog,
                            "need": list(need)})
    os.chmod(path, 0o755)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--probe", required=True)
    ap.add_argument("--runtime-tests", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--runtime-dir", default=None,
                    help="pack.py --runtime-dir (the build's runtime-sm90): the stage "
                         "programs must then hold sm_90 code only")
    a = ap.parse_args()
    work = os.path.abspath(a.work)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    cases_txt = {}
    with open(os.path.join(HERE, "..", "e2e", "cases.txt")) as f:
        for line in f:
            if re.match(CASES, line.split("|")[0]):
                cases_txt[line.split("|")[0]] = line.split("|", 1)[1].split()
    assert len(cases_txt) == 3, "cases.txt lacks one of %s" % CASES

    t0 = time.time()
    tar = os.path.join(work, "bundle.tar.xz")
    r = subprocess.run([sys.executable, os.path.join(HERE, "device", "pack.py"),
                        "--bin", a.bin, "--out", os.path.join(work, "packed"), "--cases", CASES,
                        "--tiers", "0", "--probe", a.probe, "--runtime-tests", a.runtime_tests,
                        "--tar", tar, "--xz-preset", "0"]
                       + (["--runtime-dir", a.runtime_dir] if a.runtime_dir else []),
                       capture_output=True, text=True)
    print("pack.py: exit %d, %.1fs\n%s" % (r.returncode, time.time() - t0,
                                          "\n".join(r.stdout.splitlines()[-3:])), flush=True)
    if r.returncode != 0:
        print(r.stdout[-3000:] + r.stderr[-3000:])
        print("FAIL: pack.py")
        return 1
    expect(re.search(r"^pack: .*bundle\.tar\.xz: [\d.]+ MiB \([\d.]+ MiB unpacked\)$",
                     r.stdout, re.M), "pack.py printed no bundle size")
    # Run from the unpacked archive, as the GPU machine does.
    with tarfile.open(tar) as t:
        t.extractall(os.path.join(work, "unpacked"))
    bundle = os.path.join(work, "unpacked", "gpu-bundle")
    check_links(bundle)
    check_tolerances(bundle, cases_txt)
    check_arch(bundle, only=bool(a.runtime_dir))
    with open(os.path.join(bundle, "bundle.json")) as f:
        expect(sorted(json.load(f)["cases"]) == sorted(cases_txt),
               "bundle.json: cases are not %s" % sorted(cases_txt))
    no_mpirun = os.path.join(work, "no-mpi", "mpirun")

    # D and E: gpu-check.sh on the archive, a probe that passes, no ssh.
    gpu_check(work, tar, bundle)

    # A: as packed, no GPU, no mpirun.
    rc, text, res = run_bundle(bundle, "A", ["--mpirun", no_mpirun, "--timeout", "60"])
    expect(rc > 0, "run A: exit 0, but %s cannot launch" % PIPE)
    probe_failed = res is not None and not res.get(("probe", "gpipe_cuda_probe"), {}).get("ok")
    tol_fp32 = r"^fp32, tol vs CPU target 1e-04, vs torch 1e-04; "
    planned = [("probe", "gpipe_cuda_probe"), ("mpirun", "2-rank smoke"),
               ("kernels", "gpipe_runtime_cuda_tests"), ("memcheck", "example k1"),
               ("memcheck", "example k2"), ("bench", "device_bench")] + \
        [("e2e", c) for c in cases_txt]
    if probe_failed:  # no GPU: nothing else runs (with one, the 1-stage checks may pass)
        for kind, name in planned[1:]:
            expect_result("A", text, res, kind, name, False,
                          r"^not run \(the GPU probe failed\)$")
    if res is not None:
        expect(set(planned) <= set(res), "run A: results.json lacks %s"
               % sorted(set(planned) - set(res)))

    # B1: a hanging probe: killed at --timeout, the rest not run.
    tools = os.path.join(bundle, "tools")
    pidfile = os.path.join(work, "probe.pid")
    hang_probe(tools, pidfile)
    rc, text, res = run_bundle(bundle, "B1", ["--mpirun", no_mpirun, "--timeout", "10"])
    expect_result("B1", text, res, "probe", "gpipe_cuda_probe", False,
                  r"^killed after 10s \(timeout\)")
    expect_result("B1", text, res, "e2e", FP32, False, r"^not run \(the GPU probe failed\)$")
    probe_gone(pidfile, "B1")

    # B: every way a check can go wrong, and the comparison itself.
    with open(os.path.join(tools, "gpipe_cuda_probe"), "w") as f:
        f.write("#!/bin/sh\necho 'stand-in probe'\n")
    os.chmod(os.path.join(tools, "gpipe_cuda_probe"), 0o755)
    os.chmod(os.path.join(tools, "gpipe_runtime_cuda_tests"), stat.S_IRUSR | stat.S_IWUSR)
    cases = os.path.join(bundle, "cases")
    extra = {"zz_fp32_off": (FP32, 1 + 3e-4), "zz_bf16_off": (BF16, 1 + 3e-3),
             "zz_no_log": (FP32, None), "zz_no_pipeline": (FP32, None),
             "zz_no_refs": (FP32, None), "zz_shuffled": (FP32, None),
             "zz_no_lib": (FP32, None)}
    for name, (src, _) in extra.items():
        shutil.copytree(os.path.join(cases, src), os.path.join(cases, name), symlinks=True)
    for name, scale in ((FP32, 1.0), (BF16, 1.0), ("zz_fp32_off", 1 + 3e-4),
                        ("zz_bf16_off", 1 + 3e-3)):
        stand_in(os.path.join(cases, name, "cuda", "stage0"), scale=scale)
    stand_in(os.path.join(cases, "zz_no_log", "cuda", "stage0"), nolog=True)
    # shuffled references: the stage must get --shuffle --seed 7
    stand_in(os.path.join(cases, "zz_shuffled", "cuda", "stage0"),
             need=["--shuffle", "--seed", "7"])
    with open(os.path.join(cases, "zz_shuffled", "case.json")) as f:
        meta = json.load(f)
    meta["shuffle"] = 7
    with open(os.path.join(cases, "zz_shuffled", "case.json"), "w") as f:
        json.dump(meta, f)
    missing_lib_program(work, os.path.join(cases, "zz_no_lib", "cuda", "stage0"))
    os.remove(os.path.join(cases, "zz_no_pipeline", "cuda", "pipeline.json"))
    os.remove(os.path.join(cases, "zz_no_refs", "expected.npz"))
    with open(os.path.join(bundle, "bundle.json")) as f:
        bj = json.load(f)
    bj["cases"] += sorted(extra) + ["zz_not_packed"]
    with open(os.path.join(bundle, "bundle.json"), "w") as f:
        json.dump(bj, f)
    os.makedirs(os.path.dirname(no_mpirun))
    os.symlink("/etc/alternatives/gpipe-no-such-mpirun", no_mpirun)  # dangling
    rc, text, res = run_bundle(bundle, "B", ["--mpirun", no_mpirun, "--timeout", "10",
                                             "--jobs", "3"])
    expect_result("B", text, res, "probe", "gpipe_cuda_probe", True, "stand-in probe")
    expect_result("B", text, res, "mpirun", "2-rank smoke", False,
                  "cannot start " + re.escape(no_mpirun))
    expect_result("B", text, res, "kernels", "gpipe_runtime_cuda_tests", False,
                  "cannot start .*Permission denied")
    # bf16 passes only with its own tolerance against torch (fp32's 1e-4 fails).
    expect_result("B", text, res, "e2e", FP32, True, tol_fp32 + "K=1; ")
    expect_result("B", text, res, "e2e", BF16, True,
                  r"^bf16, tol vs CPU target 1e-03, vs torch 5e-02; K=1; ")
    expect_result("B", text, res, "e2e", "zz_fp32_off", False,
                  r"vs CPU target: rel_err 3\.00\de-04 > 1e-04")
    expect_result("B", text, res, "e2e", "zz_bf16_off", False,
                  r"vs CPU target: rel_err 3\.00\de-03 > 1e-03")
    expect_result("B", text, res, "e2e", "zz_no_log", False, "wrote no log.jsonl")
    expect_result("B", text, res, "e2e", "zz_no_pipeline", False,
                  "cannot read cases/zz_no_pipeline/cuda/pipeline.json")
    expect_result("B", text, res, "e2e", "zz_no_refs", False, "expected.npz missing")
    expect_result("B", text, res, "e2e", "zz_not_packed", False, "not in the bundle")
    expect_result("B", text, res, "e2e", "zz_shuffled", True, tol_fp32 + "K=1; ")
    expect_result("B", text, res, "e2e", "zz_no_lib", False,
                  r"missing libgpipe_gone\.so\.1 \(ldd cases/zz_no_lib/cuda/stage0")
    expect_result("B", text, res, "e2e", PIPE, False,
                  r"^not run \(the 2-rank mpirun smoke job failed\)$")
    # The stand-in's weights are the CPU target's: the bf16 case passing above
    # means nothing if they were also within fp32's tolerance of torch's.
    if res and res.get(("e2e", BF16)):
        m = re.search(r"vs torch (\S+) \(", res[("e2e", BF16)]["detail"])
        expect(m and float(m.group(1)) > 1e-4, "test too weak: the bf16 CPU emulation is "
               "within 1e-4 of torch (%s)" % res[("e2e", BF16)]["detail"])

    # C: interrupted while the probe hangs.
    hang_probe(tools, pidfile)
    rc, text, res = run_bundle(bundle, "C", ["--mpirun", no_mpirun, "--timeout", "100"],
                               interrupt_at=pidfile)
    expect("interrupted" in text, "run C: no 'interrupted'")
    expect_result("C", text, res, "probe", "gpipe_cuda_probe", False, "^interrupted$")
    for name in bj["cases"]:
        if res is not None:
            r = res.get(("e2e", name))
            expect(r and not r["ok"] and r["detail"] == "not run (interrupted)",
                   "run C: results.json: e2e %s is not 'not run (interrupted)': %r" % (name, r))
    probe_gone(pidfile, "C")

    print("%.1fs" % (time.time() - t0))
    if FAILURES:
        print("\nFAIL: %d problem(s):\n  - %s" % (len(FAILURES), "\n  - ".join(FAILURES)))
        return 1
    print("device bundle: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
