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

Interleaved pipelines (`--schedule interleaved --virtual-stages V`): the model is cut into
N = K*V virtual stages and stage s runs V of them, its chunks 0..V-1 (`virtual_stages` in
pipeline.json; chunk c of stage s is virtual stage c*K+s). Actions then carry a chunk suffix
(F3c1: micro-batch 3's forward of chunk 1; no suffix: chunk 0; U updates every chunk) and the
dependencies above hold between virtual stages: F<i> of virtual stage p > 0 needs p-1's F<i>,
B<i> of p < N-1 needs p+1's B<i>. Between two chunks of one stage the input is there when its
producer ends (an in-arena copy); across stages it takes a transfer, whose bytes are
approximated as the producing stage's send boundaries of that phase divided by the number of
its chunks that send across stages in that phase (pipeline.json does not say which chunk
sends which boundary). Without `virtual_stages` a stage is the one virtual stage s (V 1).

Costs, per stage, chunk and action kind (forward, backward, weight; update per stage):
- default: the compiler's FLOPs at `--gflops` GFLOP/s: F `forward_flops_per_microbatch`; B
  `backward_flops_per_microbatch` less `weight_flops_per_microbatch` (the weight-gradient GEMMs
  gpipe-split-weight-grad deferred); W those GEMMs, when the schedule has W actions, else the
  update runs them for all M micro-batches (as the generated code does), plus the rest of
  `flops_per_step`. Per chunk from the `chunk_*_flops_per_microbatch` arrays when V > 1;
- `--trace FILE`: the means of what gpipe-run measured (an action's span minus the transfer
  waits inside it), per chunk from the spans' `args.chunk` (absent: 0), skipping the first
  `--skip-steps` steps;
- `--uniform F,B,U[,W]`: the same milliseconds on every stage (W 0 when not given). F, B and W
  are a whole stage's per micro-batch, so each of V chunks costs F/V, B/V and W/V: pipelines
  with different V then compare at equal work per stage.

Activation memory: the most micro-batches a stage holds at once (forwards done whose backward
has not run) times its `activation_bytes_per_microbatch`, as gpipe-plan-memory stashes them.
With V > 1 a forward of (chunk, micro-batch) adds one and its backward removes it, so the peak
is the most sum over chunks of the live micro-batches at once, and the bytes that peak times
`activation_bytes_per_microbatch` / V (that field is one micro-batch of all V chunks; the
chunks are taken as equal, an approximation).
"""

import argparse
import json
import os
import statistics
import sys

KINDS = {"F": "forward", "B": "backward", "W": "weight", "U": "update"}
COLOURS = {"F": "#4e79a7", "B": "#59a14f", "W": "#f28e2b", "U": "#9c9c9c"}
CHUNK_SUFFIX = "c"


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
    vs = [virtual_stages(s, i) for i, s in enumerate(stages)]
    flat = sorted(v for x in vs for v in x)
    if flat != list(range(len(flat))) or any(not x for x in vs):
        raise SimError("%s: the stages' virtual_stages %s are not a partition of 0..%d"
                       % (path, vs, len(flat) - 1))
    for i, s in enumerate(stages):
        for key in ("chunk_forward_flops_per_microbatch", "chunk_backward_flops_per_microbatch",
                    "chunk_weight_flops_per_microbatch"):
            if key in s and len(s[key]) != len(vs[i]):
                raise SimError("%s: stage %d has %d chunks but %d %s"
                               % (path, i, len(vs[i]), len(s[key]), key))
    return p


def virtual_stages(st, s):
    """The virtual stage of each of stage s's chunks ([s] without interleaving)."""
    return list(st.get("virtual_stages", [s]))


def action_name(kind, mb, chunk):
    return "%s%s%s" % (kind, "" if mb is None else mb,
                       "%s%d" % (CHUNK_SUFFIX, chunk) if chunk else "")


def parse_action(a, stage):
    """F<i>, B<i>, W<i> with an optional chunk suffix c<j> (F3c1), U, or S (a flush: waits
    until the stage's sends are received; free here, where a transfer never waits for its
    sender): (kind, mb, chunk)."""
    kind, rest = a[:1], a[1:]
    if kind in ("U", "S") and not rest:
        return kind, None, 0
    mb, sep, chunk = rest.partition(CHUNK_SUFFIX)
    if (kind in ("F", "B", "W") and mb.isascii() and mb.isdigit()
            and (not sep or (chunk.isascii() and chunk.isdigit()))):
        return kind, int(mb), int(chunk) if sep else 0
    raise SimError("stage %d: unknown action %r in pipeline.json's schedule" % (stage, a))


def flop_costs(p, gflops):
    """costs[stage] = {"U": ms, "chunks": [{"F": ms, "B": ms, "W": ms} per chunk]}."""
    costs = []
    M = p["microbatches"]
    ms = lambda flops: flops / (gflops * 1e9) * 1e3
    for i, s in enumerate(p["stages"]):
        V = len(virtual_stages(s, i))
        f = s.get("chunk_forward_flops_per_microbatch", [s["forward_flops_per_microbatch"]])
        b = s.get("chunk_backward_flops_per_microbatch", [s["backward_flops_per_microbatch"]])
        deferred = s.get("chunk_weight_flops_per_microbatch",
                         [s.get("weight_flops_per_microbatch", 0)])
        if not len(f) == len(b) == len(deferred) == V:
            raise SimError("stage %d has %d chunks but no chunk_*_flops_per_microbatch for them"
                           % (i, V))
        u = max(0, s["flops_per_step"] - M * (sum(f) + sum(b)))
        has_w = any(a.startswith("W") for a in s["schedule"])
        if not has_w:
            u += M * sum(deferred)  # the update runs the deferred GEMMs
        costs.append({"U": ms(u),
                      "chunks": [{"F": ms(f[c]), "B": ms(b[c] - deferred[c]),
                                  "W": ms(deferred[c]) if has_w else 0.0} for c in range(V)]})
    return costs


def uniform_costs(p, f, b, u, w):
    """Every stage: F, B, W per micro-batch split evenly over its chunks, U per step."""
    costs = []
    for i, s in enumerate(p["stages"]):
        V = len(virtual_stages(s, i))
        costs.append({"U": u, "chunks": [{"F": f / V, "B": b / V, "W": w / V}
                                         for _ in range(V)]})
    return costs


def stage_totals(c):
    """A stage's F, B, W per micro-batch (summed over its chunks) and U."""
    t = {k: sum(x[k] for x in c["chunks"]) for k in ("F", "B", "W")}
    t["U"] = c["U"]
    return t


def trace_costs(p, path, skip):
    try:
        with open(path) as f:
            d = json.load(f)
    except (OSError, ValueError) as e:
        raise SimError("cannot read the trace %s: %s" % (path, e))
    events = d["traceEvents"] if isinstance(d, dict) else d
    spans = [e for e in events if e.get("ph") == "X"]
    nchunks = [len(virtual_stages(s, i)) for i, s in enumerate(p["stages"])]
    # durs[stage] = {"U": [...], "chunks": [{"F": [...], "B": [...], "W": [...]}, ...]}
    durs = [{"U": [], "chunks": [{"F": [], "B": [], "W": []} for _ in range(V)]}
            for V in nchunks]
    for e in spans:
        if e.get("cat") != "action" or e["name"] not in ("forward", "backward", "weight",
                                                          "update"):
            continue
        args = e.get("args", {})
        stage, step, chunk = e["pid"], args.get("step", 0), args.get("chunk", 0)
        if stage >= len(durs) or step <= skip:
            continue
        kind = {"forward": "F", "backward": "B", "weight": "W", "update": "U"}[e["name"]]
        if kind != "U" and not 0 <= chunk < nchunks[stage]:
            raise SimError("the trace %s has a %s of stage %d's chunk %d; it has %d"
                           % (path, e["name"], stage, chunk, nchunks[stage]))
        t0, t1 = e["ts"], e["ts"] + e["dur"]
        # the transfer waits inside the action are not its compute
        waited = sum(w["dur"] for w in spans
                     if w["pid"] == stage and w.get("cat") == "transfer"
                     and w["ts"] >= t0 and w["ts"] + w["dur"] <= t1)
        ms = (e["dur"] - waited) / 1e3
        if kind == "U":
            durs[stage]["U"].append(ms)
        else:
            durs[stage]["chunks"][chunk][kind].append(ms)
    costs = []
    # the mean: a step is a sum of actions, and a few slow ones count
    mean = lambda v: statistics.mean(v) if v else 0.0
    for s, d in enumerate(durs):
        for c, x in enumerate(d["chunks"]):
            if not x["F"] or not d["U"]:
                raise SimError("the trace %s has no forward or update of stage %d%s after "
                               "step %d" % (path, s, " chunk %d" % c if nchunks[s] > 1 else "",
                                            skip))
        costs.append({"U": mean(d["U"]),
                      "chunks": [{k: mean(v) for k, v in x.items()} for x in d["chunks"]]})
    return costs


def simulate(p, costs, steps=3, latency_ms=0.02, gbps=10.0):
    """Returns (spans, step_ms): spans[stage] = [(kind, mb, chunk, step, start, end)]."""
    K = len(p["stages"])
    acts = [[x for x in (parse_action(a, s) for a in st["schedule"]) if x[0] != "S"]
            for s, st in enumerate(p["stages"])]
    chunks = [virtual_stages(st, s) for s, st in enumerate(p["stages"])]
    where = {v: (s, c) for s, vs in enumerate(chunks) for c, v in enumerate(vs)}
    N = len(where)  # virtual stages
    for s, a in enumerate(acts):
        for kind, mb, c in a:
            if c >= len(chunks[s]):
                raise SimError("stage %d: action %s names chunk %d; the stage has %d"
                               % (s, action_name(kind, mb, c), c, len(chunks[s])))

    def sends(s, phase):
        """How many of stage s's chunks send across stages in this phase (at least 1)."""
        peer = {"forward": 1, "backward": -1}[phase]
        return max(1, sum(1 for v in chunks[s] if 0 <= v + peer < N and where[v + peer][0] != s))

    # a transfer's bytes: the stage's send boundaries of the phase, shared by its sending chunks
    xfer = {(s, phase): latency_ms + sum(x["bytes"] for x in st.get("boundaries", [])
                                         if x["direction"] == "send" and x["phase"] == phase)
            / sends(s, phase) / (gbps * 1e9) * 1e3
            for s, st in enumerate(p["stages"]) for phase in ("forward", "backward")}

    def ready(s, v, end, phase):
        """When the output of stage s's virtual stage v ending at `end` is at its consumer."""
        return end if where[v][0] == s else end + xfer[(s, phase)]

    spans = [[] for _ in range(K)]
    free = [0.0] * K
    update_end = []
    for step in range(steps):
        arrive = {}  # (kind, virtual stage, mb) -> time its input is at its stage
        pos = [0] * K
        done = 0
        total = sum(len(a) for a in acts)
        while done < total:
            moved = False
            for s in range(K):
                while pos[s] < len(acts[s]):
                    kind, mb, c = acts[s][pos[s]]
                    v = chunks[s][c]
                    need = None
                    if kind == "F" and v > 0:
                        need = ("F", v, mb)
                    elif kind == "B" and v < N - 1:
                        need = ("B", v, mb)
                    if need is not None and need not in arrive:
                        break
                    start = max(free[s], arrive.get(need, 0.0))
                    end = start + (costs[s]["U"] if kind == "U" else costs[s]["chunks"][c][kind])
                    spans[s].append((kind, mb, c, step, start, end))
                    free[s] = end
                    if kind == "F" and v < N - 1:
                        arrive[("F", v + 1, mb)] = ready(s, v + 1, end, "forward")
                    if kind == "B" and v > 0:
                        arrive[("B", v - 1, mb)] = ready(s, v - 1, end, "backward")
                    if kind == "U" and s == p.get("loss_stage", K - 1):
                        update_end.append(end)
                    pos[s] += 1
                    done += 1
                    moved = True
            if not moved:
                blocked = ["stage %d at %s" % (s, action_name(*acts[s][pos[s]]))
                           for s in range(K) if pos[s] < len(acts[s])]
                raise SimError("the schedule deadlocks: " + ", ".join(blocked))
    step_ms = update_end[-1] - update_end[-2] if len(update_end) > 1 else update_end[-1]
    return spans, step_ms


def peak_activations(p):
    """Per stage: (the most micro-batches live at once, summed over chunks; their bytes).

    A forward of (chunk, micro-batch) makes it live, its backward ends it. The bytes take each
    chunk's micro-batch as activation_bytes_per_microbatch / V (that field is all V chunks')."""
    peaks = []
    for s, st in enumerate(p["stages"]):
        V = len(virtual_stages(st, s))
        live = [0] * V
        peak = 0
        for a in st["schedule"]:
            kind, _, c = parse_action(a, s)
            if kind == "F":
                live[c] += 1
                peak = max(peak, sum(live))
            elif kind == "B":
                live[c] -= 1
        peaks.append((peak, peak * st["memory"]["activation_bytes_per_microbatch"] / V
                      if V > 1 else peak * st["memory"]["activation_bytes_per_microbatch"]))
    return peaks


def lighter(colour, t):
    """colour mixed with white, t of the way (0: itself, 1: white)."""
    rgb = [int(colour[i:i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join("%02x" % round(x + (255 - x) * t) for x in rgb)


def write_svg(path, spans, step, title, V=1):
    """One row per stage; chunk c > 0 in a lighter shade of its kind's colour."""
    rows = [[x for x in r if x[3] == step] for r in spans]
    t0 = min(x[4] for r in rows for x in r)
    t1 = max(x[5] for r in rows for x in r)
    width, left, row_h = 1000.0, 70.0, 28.0
    scale = (width - left - 10) / max(t1 - t0, 1e-9)
    h = 40 + row_h * len(rows) + 30
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
           'font-family="sans-serif" font-size="11">' % (width, h),
           '<text x="5" y="16" font-size="13">%s</text>' % title]
    for s, r in enumerate(rows):
        y = 30 + s * row_h
        out.append('<text x="5" y="%.1f">stage %d</text>' % (y + 17, s))
        for kind, mb, c, _, a, b in r:
            x = left + (a - t0) * scale
            w = max((b - a) * scale, 0.5)
            label = action_name(kind, mb, c)
            fill = lighter(COLOURS[kind], 0.45 * c / (V - 1)) if c else COLOURS[kind]
            out.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" '
                       'stroke="white" stroke-width="0.5"><title>%s %.3f-%.3f ms</title></rect>'
                       % (x, y, w, row_h - 4, fill, label, a - t0, b - t0))
            if w > 14 and (not c or w > 6 * len(label)):
                out.append('<text x="%.1f" y="%.1f" fill="%s" text-anchor="middle">%s</text>'
                           % (x + w / 2, y + 16, "#222222" if c else "white", label))
    y = 30 + len(rows) * row_h + 15
    for i, (k, c) in enumerate(COLOURS.items()):
        out.append('<rect x="%d" y="%.1f" width="10" height="10" fill="%s"/>'
                   '<text x="%d" y="%.1f">%s</text>' % (left + 90 * i, y - 9, c,
                                                        left + 90 * i + 14, y, KINDS[k]))
    if V > 1:
        i = len(COLOURS)
        out.append('<rect x="%d" y="%.1f" width="10" height="10" fill="%s"/>'
                   '<text x="%d" y="%.1f">lighter: chunk 1+</text>'
                   % (left + 90 * i, y - 9, lighter(COLOURS["F"], 0.45), left + 90 * i + 14, y))
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
                   help="the same costs (ms) on every stage; F, B, W are a stage's per "
                   "micro-batch, so with V virtual stages each chunk costs F/V, B/V, W/V")
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
            costs = uniform_costs(p, v[0], v[1], v[2], v[3] if len(v) > 3 else 0.0)
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
    V = p.get("virtual_stages", 1)
    KV = "K %d, V %d" % (K, V) if V > 1 else "K %d" % K
    last = a.steps - 1
    busy = [sum(x[5] - x[4] for x in r if x[3] == last) for r in spans]
    bubble = 1.0 - sum(busy) / (K * step_ms)
    peaks = peak_activations(p)
    print("schedule %s, %s, M %d, costs %s" % (p["schedule"], KV, p["microbatches"], source))
    print("step %.3f ms, bubble %.1f%%" % (step_ms, 100 * bubble))
    for s in range(K):
        c = stage_totals(costs[s])
        print("  stage %d: F %.3f B %.3f W %.3f U %.3f ms; busy %.3f ms (%.1f%%); peak "
              "activations %d micro-batches, %.2f MiB" % (s, c["F"], c["B"], c["W"], c["U"],
                                                         busy[s],
                                               100 * busy[s] / step_ms, peaks[s][0],
                                               peaks[s][1] / 2**20))
        chunks = costs[s]["chunks"]
        if len(chunks) > 1:
            for i, (x, v) in enumerate(zip(chunks, virtual_stages(p["stages"][s], s))):
                print("    chunk %d (virtual stage %d): F %.3f B %.3f W %.3f ms"
                      % (i, v, x["F"], x["B"], x["W"]))
    if a.svg:
        write_svg(a.svg, spans, last, "%s, %s, M %d: %.2f ms per step, bubble %.1f%%"
                  % (p["schedule"], KV, p["microbatches"], step_ms, 100 * bubble), V)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"schedule": p["schedule"], "stages": K, "virtual_stages": V,
                       "microbatches": p["microbatches"],
                       "costs": source, "step_ms": step_ms, "bubble": bubble,
                       "busy_ms": busy, "peak_activation_microbatches": [x[0] for x in peaks],
                       "peak_activation_bytes": [x[1] for x in peaks]}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
