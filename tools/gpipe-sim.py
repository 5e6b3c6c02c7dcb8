#!/usr/bin/env python3
"""Simulate a compiled pipeline's schedule: step time, bubble, per-stage peak activations,
and the timeline as an SVG (one row per stage, a colour per action kind).

    python3 tools/gpipe-sim.py OUT                          # costs from the compiler's FLOPs
    python3 tools/gpipe-sim.py OUT --trace run.json         # costs measured by gpipe-run --trace
    python3 tools/gpipe-sim.py OUT --svg schedule.svg
    python3 tools/gpipe-sim.py OUT --uniform 1,2,0.5        # every stage: F 1 ms, B 2 ms, U 0.5 ms
    python3 tools/gpipe-sim.py OUT --uniform 1,1,0.5,1      # ... and W 1 ms (B is then I only)

OUT is a gpipe-compile output directory: `pipeline.json` gives each stage's action list
(`schedule`: F<i>, B<i>, W<i>, U), its boundary tensors and its FLOPs per micro-batch. An action
starts when its stage is free and its input has arrived: F<i> on stage s > 0 needs stage
s-1's F<i> activation, B<i> on stage s < K-1 needs stage s+1's B<i> gradient; a transfer takes
`--latency-us` plus bytes / `--link-gbps` and never blocks its sender (an ideal runtime: what
a schedule can give, not what MPI's progress makes of it). Several steps are simulated, one
after the other (a stage starts step n+1 after its update of step n); the step time is the
last step's, between the loss stage's updates.

Costs, per stage and action kind (forward, backward, weight, update):
- default: the compiler's FLOPs at `--gflops` GFLOP/s: F `forward_flops_per_microbatch`; B
  `backward_flops_per_microbatch` less `weight_flops_per_microbatch` (the weight-gradient GEMMs
  gpipe-split-weight-grad deferred); W those GEMMs, when the schedule has W actions, else the
  update runs them for all M micro-batches (as the generated code does), plus the rest of
  `flops_per_step`;
- `--trace FILE`: the means of what gpipe-run measured (an action's span minus the transfer
  waits inside it), skipping the first `--skip-steps` steps;
- `--uniform F,B,U[,W]`: the same milliseconds on every stage (W 0 when not given).

Activation memory: the most micro-batches a stage holds at once (forwards done whose backward
has not run) times its `activation_bytes_per_microbatch`, as gpipe-plan-memory stashes them.
"""

import argparse
import json
import os
import statistics
import sys

KINDS = {"F": "forward", "B": "backward", "W": "weight", "U": "update"}
COLOURS = {"F": "#4e79a7", "B": "#59a14f", "W": "#f28e2b", "U": "#9c9c9c"}


class SimError(Exception):
    pass


def load_pipeline(out):
    path = os.path.join(out, "pipeline.json")
    try:
        with open(path) as f:
            p = json.load(f)
    except (OSError, ValueError) as e:
        raise SimError("cannot read %s: %s" % (path, e))
    stages = p.get("stages") or []
    if not stages or any("schedule" not in s for s in stages):
        raise SimError("%s has no per-stage schedule (compile with this gpipe-compile)" % path)
    return p


def parse_action(a, stage):
    kind, rest = a[:1], a[1:]
    if kind == "U" and not rest:
        return kind, None
    if kind in ("F", "B", "W") and rest.isdigit():
        return kind, int(rest)
    raise SimError("stage %d: unknown action %r in pipeline.json's schedule" % (stage, a))


def flop_costs(p, gflops):
    costs = []
    M = p["microbatches"]
    for s in p["stages"]:
        f = s["forward_flops_per_microbatch"]
        b = s["backward_flops_per_microbatch"]
        deferred = s.get("weight_flops_per_microbatch", 0)
        u = max(0, s["flops_per_step"] - M * (f + b))
        w = deferred
        if not any(a.startswith("W") for a in s["schedule"]):
            u, w = u + M * deferred, 0  # the update runs the deferred GEMMs
        costs.append({k: v / (gflops * 1e9) * 1e3
                      for k, v in (("F", f), ("B", b - deferred), ("W", w), ("U", u))})
    return costs


def trace_costs(p, path, skip):
    try:
        with open(path) as f:
            d = json.load(f)
    except (OSError, ValueError) as e:
        raise SimError("cannot read the trace %s: %s" % (path, e))
    events = d["traceEvents"] if isinstance(d, dict) else d
    spans = [e for e in events if e.get("ph") == "X"]
    durs = [{"F": [], "B": [], "W": [], "U": []} for _ in p["stages"]]
    for e in spans:
        if e.get("cat") != "action" or e["name"] not in ("forward", "backward", "weight",
                                                          "update"):
            continue
        stage, step = e["pid"], e.get("args", {}).get("step", 0)
        if stage >= len(durs) or step <= skip:
            continue
        t0, t1 = e["ts"], e["ts"] + e["dur"]
        # the transfer waits inside the action are not its compute
        waited = sum(w["dur"] for w in spans
                     if w["pid"] == stage and w.get("cat") == "transfer"
                     and w["ts"] >= t0 and w["ts"] + w["dur"] <= t1)
        kind = {"forward": "F", "backward": "B", "weight": "W", "update": "U"}[e["name"]]
        durs[stage][kind].append((e["dur"] - waited) / 1e3)
    costs = []
    for s, d in enumerate(durs):
        if not d["F"] or not d["U"]:
            raise SimError("the trace %s has no forward or update of stage %d after step %d"
                           % (path, s, skip))
        # the mean: a step is a sum of actions, and a few slow ones count
        costs.append({k: statistics.mean(v) if v else 0.0 for k, v in d.items()})
    return costs


def simulate(p, costs, steps=3, latency_ms=0.02, gbps=10.0):
    """Returns (spans, step_ms): spans[stage] = [(kind, mb, step, start, end)]."""
    K = len(p["stages"])
    acts = [[parse_action(a, s) for a in st["schedule"]] for s, st in enumerate(p["stages"])]

    def transfer_ms(stage, phase):
        b = sum(x["bytes"] for x in p["stages"][stage].get("boundaries", [])
                if x["direction"] == "send" and x["phase"] == phase)
        return latency_ms + b / (gbps * 1e9) * 1e3

    spans = [[] for _ in range(K)]
    free = [0.0] * K
    update_end = []
    for step in range(steps):
        arrive = {}  # (kind, stage, mb) -> time its input is at `stage`
        pos = [0] * K
        done = 0
        total = sum(len(a) for a in acts)
        while done < total:
            moved = False
            for s in range(K):
                while pos[s] < len(acts[s]):
                    kind, mb = acts[s][pos[s]]
                    need = None
                    if kind == "F" and s > 0:
                        need = ("F", s, mb)
                    elif kind == "B" and s < K - 1:
                        need = ("B", s, mb)
                    if need is not None and need not in arrive:
                        break
                    start = max(free[s], arrive.get(need, 0.0))
                    end = start + costs[s][kind]
                    spans[s].append((kind, mb, step, start, end))
                    free[s] = end
                    if kind == "F" and s < K - 1:
                        arrive[("F", s + 1, mb)] = end + transfer_ms(s, "forward")
                    if kind == "B" and s > 0:
                        arrive[("B", s - 1, mb)] = end + transfer_ms(s, "backward")
                    if kind == "U" and s == p.get("loss_stage", K - 1):
                        update_end.append(end)
                    pos[s] += 1
                    done += 1
                    moved = True
            if not moved:
                blocked = ["stage %d at %s%s" % (s, acts[s][pos[s]][0],
                                                 acts[s][pos[s]][1] if acts[s][pos[s]][1]
                                                 is not None else "")
                           for s in range(K) if pos[s] < len(acts[s])]
                raise SimError("the schedule deadlocks: " + ", ".join(blocked))
    step_ms = update_end[-1] - update_end[-2] if len(update_end) > 1 else update_end[-1]
    return spans, step_ms


def peak_activations(p):
    peaks = []
    for st in p["stages"]:
        live = peak = 0
        for a in st["schedule"]:
            if a.startswith("F"):
                live += 1
                peak = max(peak, live)
            elif a.startswith("B"):
                live -= 1
        peaks.append((peak, peak * st["memory"]["activation_bytes_per_microbatch"]))
    return peaks


def write_svg(path, spans, step, title):
    rows = [[x for x in r if x[2] == step] for r in spans]
    t0 = min(x[3] for r in rows for x in r)
    t1 = max(x[4] for r in rows for x in r)
    width, left, row_h = 1000.0, 70.0, 28.0
    scale = (width - left - 10) / max(t1 - t0, 1e-9)
    h = 40 + row_h * len(rows) + 30
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
           'font-family="sans-serif" font-size="11">' % (width, h),
           '<text x="5" y="16" font-size="13">%s</text>' % title]
    for s, r in enumerate(rows):
        y = 30 + s * row_h
        out.append('<text x="5" y="%.1f">stage %d</text>' % (y + 17, s))
        for kind, mb, _, a, b in r:
            x = left + (a - t0) * scale
            w = max((b - a) * scale, 0.5)
            out.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" '
                       'stroke="white" stroke-width="0.5"><title>%s%s %.3f-%.3f ms</title></rect>'
                       % (x, y, w, row_h - 4, COLOURS[kind], kind,
                          "" if mb is None else mb, a - t0, b - t0))
            if w > 14:
                out.append('<text x="%.1f" y="%.1f" fill="white" text-anchor="middle">%s%s</text>'
                           % (x + w / 2, y + 16, kind, "" if mb is None else mb))
    y = 30 + len(rows) * row_h + 15
    for i, (k, c) in enumerate(COLOURS.items()):
        out.append('<rect x="%d" y="%.1f" width="10" height="10" fill="%s"/>'
                   '<text x="%d" y="%.1f">%s</text>' % (left + 90 * i, y - 9, c,
                                                        left + 90 * i + 14, y, KINDS[k]))
    out.append('<text x="%.1f" y="%.1f" text-anchor="end">%.2f ms</text>'
               % (width - 10, y, t1 - t0))
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", help="a gpipe-compile output directory (pipeline.json)")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--trace", help="per-action costs (means) from this gpipe-run --trace file")
    g.add_argument("--uniform", metavar="F,B,U[,W]",
                   help="the same costs (ms) on every stage")
    ap.add_argument("--gflops", type=float, default=50.0,
                    help="FLOP rate of the compiler's costs (default 50 GFLOP/s)")
    ap.add_argument("--skip-steps", type=int, default=3,
                    help="--trace: steps left out as warm-up (default 3)")
    ap.add_argument("--latency-us", type=float, default=20.0)
    ap.add_argument("--link-gbps", type=float, default=10.0, help="GB/s between stages")
    ap.add_argument("--steps", type=int, default=3, help="steps simulated (>= 2)")
    ap.add_argument("--svg", help="write the last step's timeline here")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args(argv)
    try:
        p = load_pipeline(a.out)
        if a.trace:
            costs, source = trace_costs(p, a.trace, a.skip_steps), "measured (%s)" % a.trace
        elif a.uniform:
            try:
                v = [float(x) for x in a.uniform.split(",")]
                if len(v) not in (3, 4):
                    raise ValueError
            except ValueError:
                raise SimError("--uniform must be F,B,U or F,B,U,W in milliseconds, got %r"
                               % a.uniform)
            costs = [{"F": v[0], "B": v[1], "U": v[2], "W": v[3] if len(v) > 3 else 0.0}
                     for _ in p["stages"]]
            source = "uniform"
        else:
            if a.gflops <= 0:
                raise SimError("--gflops must be positive")
            costs, source = flop_costs(p, a.gflops), "FLOPs at %g GFLOP/s" % a.gflops
        if a.steps < 2:
            raise SimError("--steps must be at least 2")
        spans, step_ms = simulate(p, costs, a.steps, a.latency_us / 1e3, a.link_gbps)
    except SimError as e:
        print("gpipe-sim: error: %s" % e, file=sys.stderr)
        return 1
    K = len(p["stages"])
    last = a.steps - 1
    busy = [sum(x[4] - x[3] for x in r if x[2] == last) for r in spans]
    bubble = 1.0 - sum(busy) / (K * step_ms)
    peaks = peak_activations(p)
    print("schedule %s, K %d, M %d, costs %s" % (p["schedule"], K, p["microbatches"], source))
    print("step %.3f ms, bubble %.1f%%" % (step_ms, 100 * bubble))
    for s in range(K):
        c = costs[s]
        print("  stage %d: F %.3f B %.3f W %.3f U %.3f ms; busy %.3f ms (%.1f%%); peak "
              "activations %d micro-batches, %.2f MiB" % (s, c["F"], c["B"], c["W"], c["U"],
                                                         busy[s],
                                               100 * busy[s] / step_ms, peaks[s][0],
                                               peaks[s][1] / 2**20))
    if a.svg:
        write_svg(a.svg, spans, last, "%s, K %d, M %d: %.2f ms per step, bubble %.1f%%"
                  % (p["schedule"], K, p["microbatches"], step_ms, 100 * bubble))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"schedule": p["schedule"], "stages": K, "microbatches": p["microbatches"],
                       "costs": source, "step_ms": step_ms, "bubble": bubble,
                       "busy_ms": busy, "peak_activation_microbatches": [x[0] for x in peaks],
                       "peak_activation_bytes": [x[1] for x in peaks]}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
