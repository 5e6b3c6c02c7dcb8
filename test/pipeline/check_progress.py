#!/usr/bin/env python3
"""gpipe-run's progress, report and trace on the toy pipelines
(toy_stage.cpp): --trace writes a Chrome trace with every stage's forward and
backward of every micro-batch of every step and its transfer waits, ordered
per stage; the stage report has a row of numbers per stage; --log-every N
prints every N-th step line (and the last) when stdout is not a terminal; on
a terminal (a pty) one progress line is updated in place; -q prints neither.

usage: check_progress.py --gpipe-run BIN --pipes DIR --work DIR
"""
import argparse
import json
import os
import pty
import re
import select
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_pipeline as cp  # noqa: E402  (the toy pipelines and data)

STEPS, M = 5, cp.M
# A report row: stage, step ms, compute ms, wait ms, wait %, RSS MiB,
# predicted peak MiB (or - when pipeline.json has none), arena MiB, start MiB
# (resident before the arena), rest MiB (peak - start - arena).
ROW_RE = re.compile(r"^\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)%"
                    r"\s+([\d.]+)\s+(?:[\d.]+|-)\s+([\d.]+)\s+([\d.]+)\s+(-?[\d.]+)$")


def report_rows(stderr):
    lines = stderr.splitlines()
    head = [i for i, l in enumerate(lines)
            if l.startswith("gpipe-run: stage report, steps ")]
    if len(head) != 1:
        return None
    rows = {}
    for l in lines[head[0] + 2:]:
        m = ROW_RE.match(l)
        if not m:
            break
        rows[int(m.group(1))] = [float(v) for v in m.groups()[1:]]
    return rows


def check_trace(path, k, what):
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        cp.check(False, what + ": trace is not JSON", str(e))
        return
    events = doc.get("traceEvents")
    cp.check(isinstance(events, list) and events, what + ": no traceEvents")
    if not events:
        return
    names = {(e["pid"], e["args"]["name"]) for e in events
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    cp.check(names == {(s, "stage %d" % s) for s in range(k)},
             what + ": process names", str(names))
    for s in range(k):
        mine = [e for e in events if e.get("pid") == s and e.get("ph") == "X"]
        ts = [e["ts"] for e in mine]
        cp.check(ts == sorted(ts), what + ": stage %d events out of order" % s)
        cp.check(all(e["dur"] >= 0 and e["tid"] == 0 for e in mine),
                 what + ": stage %d durations / tids" % s)
        actions = [(e["name"], e["args"]["step"], e["args"].get("microbatch"))
                   for e in mine if e.get("cat") == "action"
                   and e["name"] != "step end"]
        # The toy's GPipe schedule: F0 F1 B1 B0 U each step.
        want = []
        for step in range(1, STEPS + 1):
            want += [("forward", step, 0), ("forward", step, 1),
                     ("backward", step, 1), ("backward", step, 0),
                     ("update", step, None)]
        cp.check(actions == want, what + ": stage %d actions" % s,
                 "got %s\nwant %s" % (actions, want))
        ends = [e["args"]["step"] for e in mine if e["name"] == "step end"]
        cp.check(ends == list(range(1, STEPS + 1)),
                 what + ": stage %d step ends" % s, str(ends))
        # Every stage receives and sends once per micro-batch and direction:
        # activations forward, gradients back.
        waits = [e for e in mine if e.get("cat") == "transfer"]
        peers = {s - 1, s + 1} & set(range(k))
        want_waits = 2 * M * STEPS * len(peers)
        cp.check(len(waits) == want_waits and
                 {e["args"]["peer"] for e in waits} == peers and
                 all(e["name"] in ("send wait", "recv wait") and
                     e["args"]["bytes"] > 0 and
                     e["args"]["microbatch"] in range(M) for e in waits),
                 what + ": stage %d transfer waits" % s,
                 "%d waits, want %d with peers %s: %s" %
                 (len(waits), want_waits, peers, waits[:4]))
        # Each wait lies inside an action of the same step and micro-batch.
        spans = [e for e in mine if e.get("cat") == "action"]
        cp.check(all(any(a["ts"] <= w["ts"] and
                         w["ts"] + w["dur"] <= a["ts"] + a["dur"] + 1e-3 and
                         a["args"]["step"] == w["args"]["step"] and
                         a["args"].get("microbatch") == w["args"]["microbatch"]
                         for a in spans) for w in waits),
                 what + ": stage %d waits outside their action" % s)


def run_pty(args, merge=False):
    """Runs args with stdout (and with merge, stderr) on a pseudo-terminal:
    (rc, terminal bytes, stderr text)."""
    master, slave = pty.openpty()
    p = subprocess.Popen(args, stdout=slave,
                         stderr=slave if merge else subprocess.PIPE)
    os.close(slave)
    out = b""
    deadline = time.time() + cp.TIMEOUT
    while time.time() < deadline:
        r, _, _ = select.select([master], [], [], 0.5)
        if r:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the terminal's last writer closed it
                break
            if not chunk:
                break
            out += chunk
        elif p.poll() is not None:
            break
    os.close(master)
    try:
        err = p.communicate(timeout=max(1, deadline - time.time()))[1]
    except subprocess.TimeoutExpired:
        p.kill()
        err = p.communicate()[1]
        cp.check(False, "pty: gpipe-run hung")
    return p.returncode, out, (err or b"").decode()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpipe-run", required=True)
    ap.add_argument("--pipes", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    a.pipes, a.work = os.path.abspath(a.pipes), os.path.abspath(a.work)
    gr = a.gpipe_run
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    _, _, cp.W0 = cp.make_data(a.work)
    data = os.path.join(a.work, "data")

    # 1. --trace on 1 and 3 stages (stdout a pipe): the trace, one loss line
    #    per step, the report's rows.
    for k in (1, 3):
        out = cp.make_pipeline(a.pipes, a.work, k)
        trace = os.path.join(a.work, "trace%d.json" % k)
        r = cp.run([gr, out, "--data", data, "--steps", str(STEPS),
                    "--trace", trace], what="trace %d stages" % k)
        if r is None:
            continue
        detail = "stdout:\n%s\nstderr:\n%s" % (r.stdout, r.stderr)
        cp.check(r.returncode == 0, "trace %d: exit %d" % (k, r.returncode),
                 detail)
        steps = [l.split()[1] for l in r.stdout.splitlines()]
        cp.check(steps == [str(s) for s in range(1, STEPS + 1)] and
                 all(re.match(r"^step \d+ loss \S+$", l)
                     for l in r.stdout.splitlines()),
                 "trace %d: one plain loss line per step" % k, detail)
        rows = report_rows(r.stderr)
        cp.check(rows is not None and sorted(rows) == list(range(k)),
                 "trace %d: a report row per stage" % k, detail)
        for s, v in (rows or {}).items():
            step_ms, compute_ms, wait_ms, _, rss, predicted, start, rest = v
            cp.check(step_ms > 0 and rss > 0 and
                     compute_ms + wait_ms <= step_ms * 1.01 + 0.1 and
                     0 < start <= rss and abs(rss - start - predicted - rest) < 0.2,
                     "trace %d: stage %d report numbers (peak = start + predicted + rest)"
                     % (k, s), str(v))
        check_trace(trace, k, "trace %d" % k)
        cp.check(not os.path.exists(out + "/trained") or
                 not any(n.endswith(".trace") for n in os.listdir(out)),
                 "trace %d: stage trace files left in OUT" % k)

    # 2. --log-every 2 when stdout is not a terminal: steps 2, 4 and the last.
    out2 = cp.make_pipeline(a.pipes, a.work, 2)
    r = cp.run([gr, out2, "--data", data, "--steps", str(STEPS),
                "--log-every", "2"], what="log-every 2")
    if r is not None:
        cp.check(r.returncode == 0 and
                 [l.split()[1] for l in r.stdout.splitlines()] ==
                 ["2", "4", "5"], "log-every 2: steps 2, 4, 5",
                 "stdout:\n%s\nstderr:\n%s" % (r.stdout, r.stderr))

    # 3. -q: no loss lines, no report.
    r = cp.run([gr, out2, "--data", data, "--steps", "3", "-q"], what="quiet")
    if r is not None:
        cp.check(r.returncode == 0 and r.stdout == "" and
                 "stage report" not in r.stderr, "quiet: no lines",
                 "stdout:\n%s\nstderr:\n%s" % (r.stdout, r.stderr))

    # 4. On a terminal: one line updated in place (carriage return, clear to
    #    the end of the line), ended by a newline before the report.
    for k in (1, 2):
        out = cp.make_pipeline(a.pipes, a.work, k)
        rc, tty, err = run_pty([gr, out, "--data", data, "--steps",
                                str(STEPS)])
        text = tty.decode(errors="replace")
        detail = "tty: %r\nstderr:\n%s" % (text, err)
        updates = re.findall(r"\r\x1b\[Kstep (\d+)/%d  loss \S+  "
                             r"(?:[\d.]+|-) samples/s  elapsed \d+:\d\d:\d\d"
                             r"  ETA (?:\d+:\d\d:\d\d|-:--:--)" % STEPS, text)
        cp.check(rc == 0, "pty %d: exit %d" % (k, rc), detail)
        cp.check(len(updates) >= 2 and updates[0] == "1" and
                 updates[-1] == str(STEPS),
                 "pty %d: progress updates from step 1 to %d" % (k, STEPS),
                 detail)
        # Every line on the terminal is progress, and the last one ended;
        # without mpirun (whose stdout and stderr race) just one line.
        lines = text.split("\r\n")
        cp.check(lines[-1] == "" and
                 all(l.startswith("\r\x1b[Kstep ") for l in lines[:-1]) and
                 (k > 1 or len(lines) == 2),
                 "pty %d: progress lines, ended" % k, detail)
        cp.check(report_rows(err) is not None, "pty %d: report" % k, detail)

    # 5. On a terminal, an error starts a line of its own.
    out3 = cp.make_pipeline(a.pipes, a.work, 3)
    os.environ["GPIPE_TOY_CRASH"] = "1:3"
    rc, tty, err = run_pty([gr, out3, "--data", data, "--steps", "4"])
    del os.environ["GPIPE_TOY_CRASH"]
    text = tty.decode(errors="replace")
    cp.check(rc == 1 and "crashed" in err and
             (text == "" or text.endswith("\n")),
             "pty crash: progress line ended before the error",
             "tty: %r\nstderr:\n%s" % (text, err))

    # 6. On a terminal, a stage's error (a bad label in step 2) comes after
    #    the progress line of step 1, on a line of its own.
    import numpy as np
    badlab = os.path.join(a.work, "data_badlabel")
    os.makedirs(badlab)
    shutil.copy(os.path.join(data, "x.npy"), badlab)
    y = np.load(os.path.join(data, "y.npy"))
    y[13] = 7
    np.save(os.path.join(badlab, "y.npy"), y)
    for k in (1, 3):
        out = cp.make_pipeline(a.pipes, a.work, k)
        rc, tty, _ = run_pty([gr, out, "--data", badlab, "--steps", "3"],
                             merge=True)
        text = tty.decode(errors="replace")
        error = "gpipe: error: stage %d: graph input 'y', sample 13" % (k - 1)
        # Without mpirun the order is exact; through it, the error line
        # still starts a line.
        want = (r"^\r\x1b\[Kstep 1/3 [^\r\n]*\r\n" + re.escape(error)
                if k == 1 else r"(^|\n)" + re.escape(error))
        cp.check(rc == 1 and re.search(want, text) is not None,
                 "pty bad label %d: the error starts a line" % k, repr(text))

    if cp.failures:
        print("\n%d check(s) failed:\n  %s" % (len(cp.failures),
                                               "\n  ".join(cp.failures)))
        return 1
    print("all progress checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
