#!/usr/bin/env python3
"""Tables for run_gpu_bench.sh (no torch needed).

  summarize.py gpipe-ms LOG --warmup W
      one line: the median "ms" of gpipe-run --log-json LOG after the first W steps
  summarize.py table --logs DIR --meta META.json --precisions fp32,bf16 --rounds R
                     --warmup W --steps N [--peak fp32=67,...] [--header FILE] [--out FILE]
      reads DIR/gpipe_<p>_r<r>.jsonl (gpipe-run --log-json), DIR/gpipe_<p>_r<r>.wall (if
      present: "NS_W NS_WN", the wall times of gpipe-run --steps W and --steps W+N) and
      DIR/torch_<p>_r<r>.json (torch_mlp.py's JSON line) of every precision p and round r,
      prints the table and the raw numbers (and writes them, after the text of --header,
      to --out)

Per precision: gpipe ms/step = median over rounds of each round's median step time after
the warm-up steps; torch likewise (torch_mlp.py's median of CUDA-event step times);
throughput ratio gpipe/torch (samples/s) = median over rounds of torch_ms / gpipe_ms of
the same round (> 1: gpipe faster); gpipe wall-clock ms/step (cross-check) = median over
rounds of (wall(W+N steps) - wall(W steps)) / N, which cancels start-up; TFLOP/s = model FLOPs per step (meta.json,
6 * batch * sum(in * out)) / (ms/step); MFU = TFLOP/s / peak.
"""

import argparse
import json
import os
import statistics
import sys

DEFAULT_PEAKS = {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4}
# Loss curves of the two sides (same weights, data, order and lr) should agree to about
# this (relative to max(1, |loss|)); larger is flagged, not fatal.
LOSS_TOL = {"fp32": 1e-3, "tf32": 2e-2, "bf16": 5e-2}


def read_gpipe_log(path):
    recs = []
    with open(path) as f:
        for line in f:
            if line.strip():
                recs.append(json.loads(line))
    if not recs:
        raise SystemExit("summarize.py: %s: empty gpipe-run --log-json log" % path)
    ms = [float(r["ms"]) for r in recs]
    loss = [float("nan") if r.get("loss") is None else float(r["loss"]) for r in recs]
    return ms, loss


def measured(ms, warmup, path):
    xs = ms[warmup:]
    if not xs:
        raise SystemExit("summarize.py: %s: %d steps logged, none after %d warm-up steps"
                         % (path, len(ms), warmup))
    return xs


def parse_peaks(s):
    peaks = dict(DEFAULT_PEAKS)
    for item in filter(None, (s or "").split(",")):
        k, _, v = item.partition("=")
        if k not in peaks or not v:
            raise SystemExit("summarize.py: --peak wants P=TFLOPS,... with P in fp32/tf32/bf16, "
                             "got %r" % item)
        peaks[k] = float(v)
    return peaks


def cmd_gpipe_ms(a):
    ms, _ = read_gpipe_log(a.log)
    xs = measured(ms, a.warmup, a.log)
    print("%.4f ms/step (median of %d steps after %d warm-up; min %.4f, max %.4f)"
          % (statistics.median(xs), len(xs), a.warmup, min(xs), max(xs)))
    return 0


def cmd_table(a):
    with open(a.meta) as f:
        meta = json.load(f)
    flops = float(meta["model_flops"])
    batch = int(meta["batch"])
    peaks = parse_peaks(a.peak)
    precs = [p for p in a.precisions.split(",") if p]
    lines = []
    rows = []
    raw = []
    for p in precs:
        per_round = []
        for r in range(1, a.rounds + 1):
            gpath = os.path.join(a.logs, "gpipe_%s_r%d.jsonl" % (p, r))
            tpath = os.path.join(a.logs, "torch_%s_r%d.json" % (p, r))
            gms_all, gloss = read_gpipe_log(gpath)
            if len(gms_all) != a.warmup + a.steps:
                raise SystemExit("summarize.py: %s: %d steps logged, expected %d"
                                 % (gpath, len(gms_all), a.warmup + a.steps))
            gms = measured(gms_all, a.warmup, gpath)
            with open(tpath) as f:
                tj = json.loads([l for l in f.read().splitlines() if l.strip()][-1])
            g_med = statistics.median(gms)
            wpath = os.path.join(a.logs, "gpipe_%s_r%d.wall" % (p, r))
            g_wall = None
            if os.path.exists(wpath):
                with open(wpath) as f:
                    base_ns, full_ns = (int(v) for v in f.read().split())
                g_wall = (full_ns - base_ns) / 1e6 / a.steps
            t_med = float(tj["ms_per_step"])
            tloss = tj.get("loss", [])
            n = min(len(gloss), len(tloss))
            dl = max((abs(gloss[i] - tloss[i]) / max(1.0, abs(tloss[i])) for i in range(n)),
                     default=float("nan"))
            per_round.append({"round": r, "gpipe_ms": g_med, "gpipe_wall_ms": g_wall,
                              "gpipe_min_ms": min(gms),
                              "gpipe_max_ms": max(gms), "torch_ms": t_med,
                              "torch_min_ms": float(tj.get("min_step_ms", t_med)),
                              "ratio": t_med / g_med, "loss_diff": dl,
                              "gpipe_loss_first_last": (gloss[0], gloss[-1]),
                              "torch_loss_first_last": (tloss[0], tloss[n - 1]) if n else None})
            raw.append({"precision": p, "round": r, "gpipe_step_ms": gms,
                        "torch_ms_per_step": t_med, "torch": {k: tj[k] for k in tj
                                                              if k != "loss"}})
        g = statistics.median(x["gpipe_ms"] for x in per_round)
        t = statistics.median(x["torch_ms"] for x in per_round)
        ratio = statistics.median(x["ratio"] for x in per_round)
        gt = flops / (g * 1e-3) / 1e12
        tt = flops / (t * 1e-3) / 1e12
        dl = max(x["loss_diff"] for x in per_round)
        walls = [x["gpipe_wall_ms"] for x in per_round if x["gpipe_wall_ms"] is not None]
        gw = statistics.median(walls) if walls else None
        rows.append((p, g, t, ratio, gt, gt / peaks[p], tt, tt / peaks[p], per_round, dl, gw))

    lines.append("model: %d Linear layers, width %d, %d classes, batch %d; model FLOPs/step "
                 "6*B*sum(in*out) = %.4g TFLOP; %d warm-up + %d measured steps per run, "
                 "%d rounds" % (meta["layers"], meta["width"], meta["classes"], batch,
                                flops / 1e12, a.warmup, a.steps, a.rounds))
    lines.append("peaks (TFLOP/s, for MFU): %s"
                 % ", ".join("%s %g" % (p, peaks[p]) for p in precs))
    lines.append("")
    lines.append("| precision | gpipe ms/step | torch ms/step | throughput gpipe/torch (samples/s) "
                 "| gpipe TFLOP/s | gpipe MFU | torch TFLOP/s | torch MFU | per-round ratios "
                 "| max loss diff | gpipe wall-clock ms/step (cross-check) |")
    lines.append("|---|--:|--:|--:|--:|--:|--:|--:|---|--:|--:|")
    notes = []
    for p, g, t, ratio, gt, gm, tt, tm, per_round, dl, gw in rows:
        flag = "" if dl <= LOSS_TOL[p] else " (MISMATCH > %g)" % LOSS_TOL[p]
        wflag = ""
        if gw is not None and abs(gw - g) > 0.2 * g:
            wflag = " (!)"
            notes.append("%s: gpipe's wall-clock ms/step %.4g differs from its logged %.4g by more "
                         "than 20%%: start-up noise (too few --steps?) or a per-step 'ms' that "
                         "does not cover the GPU work" % (p, gw, g))
        lines.append("| %s | %.3f | %.3f | **%.3f** | %.4g | %.2f%% | %.4g | %.2f%% | %s | %.1e%s | %s%s |"
                     % (p, g, t, ratio, gt, 100 * gm, tt, 100 * tm,
                        ", ".join("%.3f" % x["ratio"] for x in per_round), dl, flag,
                        "-" if gw is None else "%.3f" % gw, wflag))
    for n in notes:
        lines.append("")
        lines.append("warning: " + n)
    lines.append("")
    lines.append("samples/s: " + "; ".join("%s gpipe %.0f, torch %.0f" % (r[0], batch / (r[1] * 1e-3),
                                                                        batch / (r[2] * 1e-3))
                                           for r in rows))
    lines.append("")
    lines.append("per round (ms/step: median [min-max of the measured steps]):")
    for p, g, t, ratio, gt, gm, tt, tm, per_round, dl, gw in rows:
        for x in per_round:
            lines.append("  %s round %d: gpipe %.3f [%.3f-%.3f] (wall-clock %s), torch %.3f [min %.3f], "
                         "torch/gpipe %.3f, loss diff %.1e, loss first/last gpipe %s torch %s"
                         % (p, x["round"], x["gpipe_ms"], x["gpipe_min_ms"], x["gpipe_max_ms"],
                            "-" if x["gpipe_wall_ms"] is None else "%.3f" % x["gpipe_wall_ms"],
                            x["torch_ms"], x["torch_min_ms"], x["ratio"], x["loss_diff"],
                            "%.6g/%.6g" % x["gpipe_loss_first_last"],
                            "%.6g/%.6g" % x["torch_loss_first_last"]
                            if x["torch_loss_first_last"] else "-"))
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if a.out:
        header = ""
        if a.header:
            with open(a.header) as f:
                header = f.read()
        with open(a.out, "w") as f:
            f.write(header)
            f.write(text)
            f.write("\nraw (one JSON object per precision and round; gpipe_step_ms = the "
                    "measured steps' ms from --log-json):\n")
            for r in raw:
                f.write(json.dumps(r) + "\n")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("gpipe-ms")
    g.add_argument("log")
    g.add_argument("--warmup", type=int, required=True)
    t = sub.add_parser("table")
    t.add_argument("--logs", required=True)
    t.add_argument("--meta", required=True)
    t.add_argument("--precisions", required=True)
    t.add_argument("--rounds", type=int, required=True)
    t.add_argument("--warmup", type=int, required=True)
    t.add_argument("--steps", type=int, required=True)
    t.add_argument("--peak", default="")
    t.add_argument("--header")
    t.add_argument("--out")
    a = ap.parse_args(argv)
    return cmd_gpipe_ms(a) if a.cmd == "gpipe-ms" else cmd_table(a)


if __name__ == "__main__":
    sys.exit(main())
