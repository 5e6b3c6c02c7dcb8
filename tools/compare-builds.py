#!/usr/bin/env python3
"""Trains every e2e case with two builds of gpipe and compares the results byte for byte.

A restructuring of the compiler must not change what it computes. For each case of
test/e2e/cases.txt (the same arguments check_training.py gets), this exports the model and
data once, then compiles and runs it with the OLD and the NEW build's gpipe-compile and
gpipe-run (same flags, same model.onnx, same data), and compares:
  - trained.onnx byte for byte (every trained weight, plus the graph), and
  - the loss of every step (log.jsonl), as the exact float32 values the runs printed.
Cases that compare a pipeline against a reference program (--compare-single) compare the
reference program's outputs too. A case the OLD build cannot compile (a flag it does not
know) is reported as "new" and not counted as a difference.

Usage (CPU target; the e2e Python, /usr/bin/python3 with torch and onnx):
  /usr/bin/python3 tools/compare-builds.py --old-bin OLD/build/bin --new-bin build/bin \
      --workdir /tmp/compare [-j 2] [--cases REGEX]
Exit status 0 only when every case that both builds ran is identical.
"""
import argparse
import concurrent.futures
import filecmp
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "test", "e2e"))

import numpy as np  # noqa: E402

import check_training as ct  # noqa: E402
import models  # noqa: E402


# torch.onnx.export is not thread-safe: one export at a time.
EXPORT_LOCK = threading.Lock()


def read_cases(path):
    cases = []
    with open(path) as f:
        for line in f:
            m = re.match(r"^([a-z0-9_]+)\|(.*)$", line.strip())
            if m:
                cases.append((m.group(1), m.group(2).split()))
    return cases


def losses(path):
    with open(path) as f:
        return [json.loads(line)["loss"] for line in f if line.strip()]


def run_build(a, bin_dir, wd, suffix, flags):
    """Compiles and runs with one build; returns an error text or None."""
    try:
        ct.compile_and_run(a, os.path.join(bin_dir, "gpipe-compile"),
                           os.path.join(bin_dir, "gpipe-run"),
                           os.path.join(wd, "model.onnx"), os.path.join(wd, "data"), wd,
                           suffix, flags)
    except (ct.CheckFailed, subprocess.SubprocessError, OSError) as e:
        return str(e).strip().splitlines()[0] if str(e).strip() else repr(e)
    return None


def compare(wd, suffix_old, suffix_new):
    """Differences between two runs' outputs in WD (an empty list when identical)."""
    diffs = []
    t_old = os.path.join(wd, "trained%s.onnx" % suffix_old)
    t_new = os.path.join(wd, "trained%s.onnx" % suffix_new)
    if not filecmp.cmp(t_old, t_new, shallow=False):
        import onnx
        old = models.load_initializers(onnx.load(t_old))
        new = models.load_initializers(onnx.load(t_new))
        for name in sorted(set(old) | set(new)):
            if name not in old or name not in new:
                diffs.append("%s: only in one build" % name)
            elif old[name].tobytes() != new[name].tobytes():
                d = np.max(np.abs(old[name].astype(np.float64) - new[name]))
                diffs.append("%s: max abs difference %.3e" % (name, d))
        if not diffs:
            diffs.append("trained.onnx differs outside the initializers")
    l_old = losses(os.path.join(wd, "log%s.jsonl" % suffix_old))
    l_new = losses(os.path.join(wd, "log%s.jsonl" % suffix_new))
    if l_old != l_new:
        worst = max((abs(x - y) for x, y in zip(l_old, l_new)), default=float("inf"))
        diffs.append("losses differ (%d vs %d steps, max abs difference %.3e)"
                     % (len(l_old), len(l_new), worst))
    return diffs


def run_case(name, args, opts):
    a = ct.parse_args(args)
    wd = os.path.join(opts.workdir, name)
    if os.path.isdir(wd):
        shutil.rmtree(wd)
    os.makedirs(os.path.join(wd, "data"))
    x, y = models.make_data(a.model, a.samples, seed=a.data_seed)
    np.save(os.path.join(wd, "data", "x.npy"), x)
    np.save(os.path.join(wd, "data", "y.npy"), y)
    eb = a.export_batch_size or a.batch_size
    with EXPORT_LOCK:
        models.export(models.build(a.model, a.seed), x[:eb], y[:eb],
                      os.path.join(wd, "model.onnx"), opset=a.opset,
                      dynamic_batch=a.dynamic_batch)
    programs = [("", ct.pipeline_flags(a) + ct.target_flags(a, a.target))]
    if a.compare_single:
        programs.append(("_single", ct.reference_flags(a)))
    lines, status = [], "same"
    for suffix, flags in programs:
        label = "reference program" if suffix else "program"
        err_new = run_build(a, opts.new_bin, wd, suffix + "_new", flags)
        if err_new:
            return "fail", ["%s: the new build failed: %s" % (label, err_new)]
        err_old = run_build(a, opts.old_bin, wd, suffix + "_old", flags)
        if err_old:
            lines.append("%s: the old build cannot run it (%s)" % (label, err_old))
            status = "new" if status == "same" else status
            continue
        diffs = compare(wd, suffix + "_old", suffix + "_new")
        if diffs:
            status = "differ"
            lines += ["%s: %s" % (label, d) for d in diffs]
    return status, lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old-bin", required=True, help="the old build's bin directory")
    ap.add_argument("--new-bin", required=True, help="the new build's bin directory")
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--cases-file", default=os.path.join(ROOT, "test", "e2e", "cases.txt"))
    ap.add_argument("--cases", default=None, help="only cases whose name matches REGEX")
    ap.add_argument("-j", "--jobs", type=int, default=1)
    opts = ap.parse_args()
    opts.workdir = os.path.abspath(opts.workdir)
    for b in (opts.old_bin, opts.new_bin):
        for tool in ("gpipe-compile", "gpipe-run"):
            if not os.access(os.path.join(b, tool), os.X_OK):
                sys.exit("compare-builds: %s has no executable %s" % (b, tool))
    cases = [(n, c) for n, c in read_cases(opts.cases_file)
             if opts.cases is None or re.search(opts.cases, n)]
    if not cases:
        sys.exit("compare-builds: no case matches")
    ct.log = lambda msg="": None  # compile_and_run's progress lines
    counts = {"same": 0, "differ": 0, "new": 0, "fail": 0}
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, opts.jobs)) as pool:
        futures = {pool.submit(run_case, n, c, opts): n for n, c in cases}
        for fut in concurrent.futures.as_completed(futures):
            name = futures[fut]
            try:
                status, lines = fut.result()
            except Exception as e:  # noqa: BLE001 -- one broken case must not hide the rest
                status, lines = "fail", traceback.format_exc().splitlines()
            counts[status] += 1
            word = {"same": "identical", "differ": "DIFFERENT", "new": "new (old build "
                    "cannot run it)", "fail": "FAILED"}[status]
            print("%-28s %s" % (name, word), flush=True)
            for line in lines:
                print("    " + line, flush=True)
    print("%d cases: %d identical, %d different, %d new, %d failed"
          % (len(cases), counts["same"], counts["differ"], counts["new"], counts["fail"]))
    return 0 if counts["differ"] == 0 and counts["fail"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
