#!/usr/bin/python3
"""CI without a GPU: device/pack.py's bundle and device/run.py's failure handling.

  check_device_bundle.py --bin BIN_DIR --probe EXE --runtime-tests EXE --work DIR

Packs three e2e cases (CASES: 1 stage fp32, 2 stages fp32, 1 stage bf16) with
the probe and the kernel unit test as a .tar.gz, unpacks it, and checks:
  - every link in the bundle resolves inside it (under mpi/, an absolute target
    is read below mpi/) and mpirun, orterun, orted are real files;
  - each case.json carries check_training.py --target cuda's tolerances (bf16:
    1e-3 against the CPU target, 5e-2 against torch);
then runs run.py three times from the unpacked bundle, never installing Open
MPI (--no-install) and with no mpirun (--mpirun names a missing file, then a
dangling link like the one an older bundle installed):
  A. as packed: every check (probe, kernels, each case, memcheck k1 and k2)
     must be reported, without a GPU as failed with its reason (with one, the
     1-stage checks may pass; the 2-stage ones fail for want of mpirun);
  B. with a hanging probe (--timeout), a kernel test that cannot start, each
     1-stage case's program replaced by a stand-in that writes the CPU target's
     results (so the comparison code runs: fp32 and bf16 must pass, which needs
     bf16's tolerance against torch), copies of them 3x their tolerance
     against the CPU target off (must fail: fp32 must not get bf16's), one
     that writes no log.jsonl, one without pipeline.json, one without
     expected.npz, and a name the bundle lacks: each an outcome with its reason;
  C. ended (SIGTERM, as by a time limit) during the hanging probe: the cases
     are listed as not run, and the probe's process is gone.
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
SCALE, NOLOG = %(scale)r, %(nolog)r
args = dict(zip(sys.argv[1::2], sys.argv[2::2]))  # --quiet, last, drops out
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


def stand_in(path, scale=1.0, nolog=False):
    with open(path, "w") as f:
        f.write(STAND_IN % {"python": sys.executable, "scale": scale, "nolog": nolog})
    os.chmod(path, 0o755)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--probe", required=True)
    ap.add_argument("--runtime-tests", required=True)
    ap.add_argument("--work", required=True)
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
    tar = os.path.join(work, "bundle.tar.gz")
    r = subprocess.run([sys.executable, os.path.join(HERE, "device", "pack.py"),
                        "--bin", a.bin, "--out", os.path.join(work, "packed"), "--cases", CASES,
                        "--probe", a.probe, "--runtime-tests", a.runtime_tests, "--tar", tar],
                       capture_output=True, text=True)
    print("pack.py: exit %d, %.1fs\n%s" % (r.returncode, time.time() - t0,
                                          "\n".join(r.stdout.splitlines()[-3:])), flush=True)
    if r.returncode != 0:
        print(r.stdout[-3000:] + r.stderr[-3000:])
        print("FAIL: pack.py")
        return 1
    # Run from the unpacked archive, as the GPU machine does.
    with tarfile.open(tar) as t:
        t.extractall(os.path.join(work, "unpacked"))
    bundle = os.path.join(work, "unpacked", "gpu-bundle")
    check_links(bundle)
    check_tolerances(bundle, cases_txt)
    with open(os.path.join(bundle, "bundle.json")) as f:
        expect(sorted(json.load(f)["cases"]) == sorted(cases_txt),
               "bundle.json: cases are not %s" % sorted(cases_txt))
    no_mpirun = os.path.join(work, "no-mpi", "mpirun")

    # A: as packed, no GPU, no mpirun.
    rc, text, res = run_bundle(bundle, "A", ["--mpirun", no_mpirun, "--timeout", "60"])
    expect(rc > 0, "run A: exit 0, but %s cannot launch" % PIPE)
    probe_failed = res is not None and not res.get(("probe", "gpipe_cuda_probe"), {}).get("ok")
    tol_fp32 = r"^fp32, tol vs CPU target 1e-04, vs torch 1e-04; "
    if probe_failed:  # no GPU: the 1-stage programs fail too (with a GPU they may pass)
        expect_result("A", text, res, "probe", "gpipe_cuda_probe", False)
        expect_result("A", text, res, "kernels", "gpipe_runtime_cuda_tests", False)
        expect_result("A", text, res, "memcheck", "example k1", False)
        expect_result("A", text, res, "e2e", FP32, False, tol_fp32 + "K=1; exit 1",
                      "no CUDA device")
        expect_result("A", text, res, "e2e", BF16, False,
                      r"^bf16, tol vs CPU target 1e-03, vs torch 5e-02; K=1; exit 1",
                      "no CUDA device")
    expect_result("A", text, res, "e2e", PIPE, False, tol_fp32 + "K=2; cannot start "
                  + re.escape(no_mpirun))
    expect_result("A", text, res, "memcheck", "example k2", False)
    if res is not None:
        want = {("probe", "gpipe_cuda_probe"), ("kernels", "gpipe_runtime_cuda_tests"),
                ("memcheck", "example k1")} | {("e2e", c) for c in cases_txt}
        expect(want <= set(res), "run A: results.json lacks %s" % sorted(want - set(res)))

    # B: every way a check can go wrong, and the comparison itself.
    tools = os.path.join(bundle, "tools")
    pidfile = os.path.join(work, "probe.pid")
    with open(os.path.join(tools, "gpipe_cuda_probe"), "w") as f:
        f.write("#!/bin/sh\necho $$ > %s\nexec sleep 120\n" % pidfile)
    os.chmod(os.path.join(tools, "gpipe_cuda_probe"), 0o755)
    os.chmod(os.path.join(tools, "gpipe_runtime_cuda_tests"), stat.S_IRUSR | stat.S_IWUSR)
    cases = os.path.join(bundle, "cases")
    extra = {"zz_fp32_off": (FP32, 1 + 3e-4), "zz_bf16_off": (BF16, 1 + 3e-3),
             "zz_no_log": (FP32, None), "zz_no_pipeline": (FP32, None),
             "zz_no_refs": (FP32, None)}
    for name, (src, _) in extra.items():
        shutil.copytree(os.path.join(cases, src), os.path.join(cases, name), symlinks=True)
    for name, scale in ((FP32, 1.0), (BF16, 1.0), ("zz_fp32_off", 1 + 3e-4),
                        ("zz_bf16_off", 1 + 3e-3)):
        stand_in(os.path.join(cases, name, "cuda", "stage0"), scale=scale)
    stand_in(os.path.join(cases, "zz_no_log", "cuda", "stage0"), nolog=True)
    os.remove(os.path.join(cases, "zz_no_pipeline", "cuda", "pipeline.json"))
    os.remove(os.path.join(cases, "zz_no_refs", "expected.npz"))
    with open(os.path.join(bundle, "bundle.json")) as f:
        bj = json.load(f)
    bj["cases"] += sorted(extra) + ["zz_not_packed"]
    with open(os.path.join(bundle, "bundle.json"), "w") as f:
        json.dump(bj, f)
    os.makedirs(os.path.dirname(no_mpirun))
    os.symlink("/etc/alternatives/gpipe-no-such-mpirun", no_mpirun)  # dangling
    rc, text, res = run_bundle(bundle, "B", ["--mpirun", no_mpirun, "--timeout", "10"])
    expect_result("B", text, res, "probe", "gpipe_cuda_probe", False,
                  r"^killed after 10s \(timeout\)")
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
    expect_result("B", text, res, "e2e", PIPE, False, "cannot start " + re.escape(no_mpirun))
    probe_gone(pidfile, "B")
    # The stand-in's weights are the CPU target's: the bf16 case passing above
    # means nothing if they were also within fp32's tolerance of torch's.
    if res and res.get(("e2e", BF16)):
        m = re.search(r"vs torch (\S+) \(", res[("e2e", BF16)]["detail"])
        expect(m and float(m.group(1)) > 1e-4, "test too weak: the bf16 CPU emulation is "
               "within 1e-4 of torch (%s)" % res[("e2e", BF16)]["detail"])

    # C: interrupted while the probe hangs.
    os.remove(pidfile)
    rc, text, res = run_bundle(bundle, "C", ["--mpirun", no_mpirun, "--timeout", "100"],
                               interrupt_at=pidfile)
    expect("interrupted" in text, "run C: no 'interrupted'")
    expect_result("C", text, res, "probe", "gpipe_cuda_probe", False, "^interrupted$")
    for name in bj["cases"]:
        if res is not None:
            r = res.get(("e2e", name))
            expect(r and not r["ok"] and r["detail"] == "not run",
                   "run C: results.json: e2e %s is not 'not run': %r" % (name, r))
    probe_gone(pidfile, "C")

    print("%.1fs" % (time.time() - t0))
    if FAILURES:
        print("\nFAIL: %d problem(s):\n  - %s" % (len(FAILURES), "\n  - ".join(FAILURES)))
        return 1
    print("device bundle: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
