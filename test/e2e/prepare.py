#!/usr/bin/python3
"""Prepare the e2e cases' models, data and torch references once, for check_training.py
--prepared DIR.

Reads cases.txt (the lines `NAME|arguments of check_training.py`, as CMakeLists.txt and
run_e2e.sh do), parses each case's arguments with check_training.parse_args and groups the
cases by check_training.prep_key: the arguments that determine the exported model, the data
and the torch reference (model, seeds, samples, batch sizes, opset, dynamic batch, optimizer
and its hyper-parameters, steps, shuffle, dropout, and for a BatchNorm model the
micro-batches and --batchnorm deferred).  For each distinct key it writes DIR/<key>/:

  model.onnx, data/x.npy, data/y.npy   as check_training.py writes them into its workdir
  reference.json, reference.npz        torch_reference's results: losses, trained parameters,
                                       last-step changes, extra initializers, BatchNorm buffers

each into a temporary directory renamed into place when complete.  torch is imported once per
worker process (--jobs N processes, forked before torch is imported; torch.set_num_threads(1)).

DIR/STAMP.json records a hash of modelspec.py, models.py, check_training.py and prepare.py
and the torch / onnx / numpy / Python versions: an existing DIR with another stamp is wiped;
with the same stamp its entries are kept and only the missing keys are computed (entries of
keys no longer in cases.txt are removed).  check_training.py uses an entry only when the
stamp's source hash matches its own files, and otherwise exports and trains by itself.

A key that fails to prepare (export error, ...) gets no entry: its cases fall back to
exporting and training by themselves and report the error there.  Exit status: 0, or 2 on
bad usage / an unreadable cases file.

With --single-cache DIR --bin BIN, also removes the entries of check_training.py's
--single-cache DIR that were made with other tools (tools_identity: gpipe-compile,
gpipe-run, the runtime library, ...); they could never be hit again.

usage: prepare.py --out DIR [--cases FILE] [--jobs N] [--only REGEX]
                  [--single-cache DIR --bin BIN]
"""

import argparse
import importlib.util
import json
import os
import re
import shlex
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import check_training as ct  # noqa: E402  (imports numpy, not torch)

CASE_RE = re.compile(r"^([a-z0-9_]+)\|(.*)$")
# Keys whose preparation takes longest first (with --jobs > 1, a better balance).
SLOW_MODELS = ("resnet18", "vgg_bn", "conv_branch", "bert_tiny", "torch_encoder_lm",
               "gpt_tied", "gpt_tiny")


def log(msg=""):
    print(msg, flush=True)


def read_cases(path, only=None):
    """[(name, argv)] of the case lines (CMakeLists.txt's regex ^[a-z0-9_]+\\|)."""
    out = []
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            m = CASE_RE.match(line)
            if not m:
                continue
            if only and not re.search(only, m.group(1)):
                continue
            out.append((m.group(1), shlex.split(m.group(2))))
    return out


def module_version(name):
    """A package's version without importing it (torch takes a second to import): its
    version file, else the path, size and mtime of its __init__.py."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.origin:
        return None
    d = os.path.dirname(spec.origin)
    for vf in ("version.py", "_version.py"):
        p = os.path.join(d, vf)
        if os.path.isfile(p):
            with open(p) as f:
                m = re.search(r"""^__version__\s*=\s*['"]([^'"]+)['"]""", f.read(), re.M)
            if m:
                return m.group(1)
    st = os.stat(spec.origin)
    return [spec.origin, st.st_size, st.st_mtime_ns]


def stamp():
    return {"sources": ct.source_fingerprint(),
            "versions": {"python": sys.version, "torch": module_version("torch"),
                         "torchvision": module_version("torchvision"),
                         "onnx": module_version("onnx"), "numpy": module_version("numpy")}}


def prepare_one(job):
    """Worker: write DIR/<key> for one key. Returns (key, seconds, error or None)."""
    out, key, argv = job
    t0 = time.time()
    a = ct.parse_args(argv)
    tmp = os.path.join(out, ".tmp-%s-%d" % (key, os.getpid()))
    try:
        if os.path.isdir(tmp):
            shutil.rmtree(tmp)
        os.makedirs(os.path.join(tmp, "data"))
        model_path = os.path.join(tmp, "model.onnx")
        x, y = ct.export_model_and_data(a, model_path, os.path.join(tmp, "data"))
        init = ct.modelspec.load_initializers(model_path)
        t1 = time.time()
        ref = ct.torch_reference(a, init, x, y)
        ct.save_reference(tmp, a, ref, time.time() - t1)
        dst = os.path.join(out, key)
        if os.path.isdir(dst):
            shutil.rmtree(dst)
        os.rename(tmp, dst)
        return key, time.time() - t0, None
    except Exception as e:  # noqa: BLE001  (the cases fall back and report it themselves)
        return key, time.time() - t0, "%s: %s" % (e.__class__.__name__, e)
    finally:
        if os.path.isdir(tmp):
            shutil.rmtree(tmp, ignore_errors=True)


def prune_single_cache(cache, bindir):
    """Remove the --single-cache entries made with other tools than BIN's."""
    if not os.path.isdir(cache):
        return
    try:
        cur = ct.tools_identity(ct.find_tool(bindir, "gpipe-compile"),
                                ct.find_tool(bindir, "gpipe-run"))
    except ct.CheckFailed as e:
        log("prepare: single-cache not pruned: %s" % e)
        return
    cur = json.loads(json.dumps(cur))
    kept = removed = 0
    for n in sorted(os.listdir(cache)):
        p = os.path.join(cache, n)
        if not os.path.isdir(p):
            continue
        meta = None
        try:
            with open(os.path.join(p, "meta.json")) as f:
                meta = json.load(f)
        except (OSError, ValueError):
            pass
        if n.startswith(".tmp-") or meta is None or meta.get("tools") != cur:
            shutil.rmtree(p, ignore_errors=True)
            removed += 1
        else:
            kept += 1
    log("prepare: single-cache %s: kept %d entries, removed %d (other tools or incomplete)"
        % (cache, kept, removed))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__)
    ap.add_argument("--out", required=True, metavar="DIR",
                    help="the prepared directory (check_training.py --prepared DIR)")
    ap.add_argument("--cases", default=os.path.join(HERE, "cases.txt"))
    ap.add_argument("--jobs", type=int, default=2,
                    help="worker processes (each imports torch once); default 2")
    ap.add_argument("--only", default=None, metavar="REGEX",
                    help="only the cases whose name matches (re.search)")
    ap.add_argument("--single-cache", default=None, metavar="DIR",
                    help="prune check_training.py's --single-cache DIR of entries made "
                    "with other tools than --bin's")
    ap.add_argument("--bin", default=None, help="gpipe-compile/gpipe-run directory "
                    "(for --single-cache)")
    a = ap.parse_args(argv)
    t0 = time.time()
    try:
        cases = read_cases(a.cases, a.only)
    except OSError as e:
        log("prepare: cannot read %s: %s" % (a.cases, e))
        return 2

    keys = {}  # key -> (argv, [case names])
    for name, args in cases:
        try:
            ca = ct.parse_args(args)
        except SystemExit:
            log("prepare: %s: bad arguments (the case will report it): %s"
                % (name, " ".join(args)))
            continue
        k = ct.prep_key(ca)
        if k in keys:
            keys[k][1].append(name)
        else:
            keys[k] = (args, [name], ca.model)

    out = os.path.abspath(a.out)
    os.makedirs(out, exist_ok=True)
    want = stamp()
    stamp_path = os.path.join(out, ct.PREP_STAMP)
    try:
        with open(stamp_path) as f:
            old = json.load(f)
    except (OSError, ValueError):
        old = None
    if old != want:
        if old is not None or os.listdir(out):
            log("prepare: %s: %s, wiping it" % (out, "other sources or versions"
                                                if old is not None else "no stamp"))
        if os.path.exists(stamp_path):
            os.remove(stamp_path)
        for n in os.listdir(out):
            p = os.path.join(out, n)
            shutil.rmtree(p) if os.path.isdir(p) and not os.path.islink(p) else os.remove(p)
    else:
        for n in os.listdir(out):  # leftovers; entries no case needs (all cases selected)
            if n != ct.PREP_STAMP and (n.startswith(".tmp-") or (n not in keys and not a.only)):
                p = os.path.join(out, n)
                shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)

    todo = [k for k in keys if not os.path.isfile(os.path.join(out, k, ct.PREP_REF_JSON))]
    todo.sort(key=lambda k: (keys[k][2] not in SLOW_MODELS,
                             SLOW_MODELS.index(keys[k][2]) if keys[k][2] in SLOW_MODELS else 0))
    log("prepare: %d cases, %d distinct keys (model, data, torch reference); %d to compute, "
        "%d kept, %d job(s)" % (len(cases), len(keys), len(todo), len(keys) - len(todo),
                                max(1, a.jobs)))
    jobs = [(out, k, keys[k][0]) for k in todo]
    failed = []
    if a.jobs > 1 and len(jobs) > 1:
        import multiprocessing
        # fork: this process has not imported torch; each worker imports it once
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(min(a.jobs, len(jobs))) as pool:
            results = pool.imap_unordered(prepare_one, jobs, chunksize=1)
            for key, dt, err in results:
                log("  %-60s %6.2fs %s  (%s)" % (key, dt, "FAILED: " + err if err else "ok",
                                                 " ".join(keys[key][1])))
                if err:
                    failed.append(key)
    else:
        for job in jobs:
            key, dt, err = prepare_one(job)
            log("  %-60s %6.2fs %s  (%s)" % (key, dt, "FAILED: " + err if err else "ok",
                                             " ".join(keys[key][1])))
            if err:
                failed.append(key)
    tmp = stamp_path + ".tmp-%d" % os.getpid()
    with open(tmp, "w") as f:
        json.dump(want, f, indent=1)
    os.rename(tmp, stamp_path)
    if a.single_cache:
        prune_single_cache(os.path.abspath(a.single_cache), a.bin)
    log("prepare: %d keys ready, %d failed (their cases export and train by themselves)%s; "
        "%.1fs" % (len(keys) - len(failed), len(failed),
                   (": " + " ".join(failed)) if failed else "", time.time() - t0))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:  # noqa: BLE001
        # Not fatal for the cases (ctest would not run them after a failed fixture): a case
        # without its entry exports and trains by itself, with the same checks.
        import traceback
        traceback.print_exc()
        log("prepare: FAILED (above); the cases will export and train by themselves")
        sys.exit(0)
