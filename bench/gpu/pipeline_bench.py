#!/usr/bin/env python3
"""Pipelines on one GPU: K stages sharing it against 1 stage, GPipe against 1F1B.

The stages of a pipeline on one GPU do the same work as one stage; what they add
is the transfers between them (host-staged: device -> pinned buffer -> MPI ->
pinned buffer -> device) and the launches of more, smaller kernels. This measures
that overhead: the same model, mini-batch and micro-batches compiled as 1 stage
and as K stages, each schedule, side by side in alternating rounds.

  # where gpipe-compile is (Debian's python3 with torch, onnx):
  /usr/bin/python3 bench/gpu/pipeline_bench.py pack --bin build/bin --out DIR \\
      [--layers 8 --width 4096 --classes 1024 --batch 1024] [--precision tf32] \\
      [--configs k1_m4,k2_m4_gpipe,k2_m4_1f1b,...]
  # anywhere, no GPU: the weights and data, checked against every pipeline.json
  python3 bench/gpu/pipeline_bench.py run --programs DIR --dry-run
  # on the GPU machine (Open MPI from a test/cuda/device/pack.py bundle, --mpi):
  python3 bench/gpu/pipeline_bench.py run --programs DIR [--mpi BUNDLE/mpi] \\
      [--steps 30 --warmup 5 --repeat 2] [--deadline S] [--out DIR]

A config is kK_mM[_SCHEDULE][_prof] (1 stage has no schedule; SCHEDULE gpipe, 1f1b, zbh1, or il, zbv, bfpp: the
interleaved, ZB-V and breadth-first schedules with 2 chunks per stage, --virtual-stages 2; _prof: compiled with
--profile, each stage run with --profile FILE, its cost table kept as OUT/costs_CONFIG.jsonl (the stages' tables
of the last round, joined in stage order), its whole loss curve compared with the config without _prof, which
it must equal bit for bit: the timers only record events; every stage also writes --report, the last round's
kept as OUT/report_CONFIG_stageS.json; pack --costs TABLE compiles with a cost table). run writes the MLP's
weights (device_bench.py's, torch's seeded init) and data, runs every config in
each round (the order reversed every other round), each for warmup + steps steps
(`--log-json`: the loss stage's per-step ms, warmup dropped, median), and writes
OUT/pipeline.txt: per config the median ms/step over rounds, its throughput
relative to 1 stage at the same M, the per-round numbers and the first losses
(every config trains the same weights from the same data: they must agree).
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import device_bench  # noqa: E402  (its path set-up also imports run.py)
from device_bench import MlpBench, device_run  # noqa: E402

DEFAULT_CONFIGS = "k1_m4,k2_m4_gpipe,k2_m4_1f1b,k1_m8,k2_m8_gpipe,k2_m8_1f1b,k4_m8_gpipe,k4_m8_1f1b"
CONFIG = re.compile(r"^k(\d+)_m(\d+)(?:_(gpipe|1f1b|zbh1|il|zbv|bfpp))?(_prof)?$")
# config suffix -> (--schedule, --virtual-stages)
SCHEDULES = {"gpipe": ("gpipe", 1), "1f1b": ("1f1b", 1), "zbh1": ("zbh1", 1),
             "il": ("interleaved", 2), "zbv": ("zbv", 2), "bfpp": ("bfpp", 2)}


def parse_config(c):
    m = CONFIG.match(c)
    if not m or (int(m.group(1)) > 1) != (m.group(3) is not None):
        raise ValueError("config %r is not kK_mM (1 stage) or kK_mM_%s, then _prof or nothing"
                         % (c, "|".join(SCHEDULES)))
    return int(m.group(1)), int(m.group(2)), m.group(3) or "gpipe"


def profiled(c):
    """(whether config c is a --profile build, the config it is the twin of)."""
    return (True, c[:-len("_prof")]) if c.endswith("_prof") else (False, c)


def pack(a):
    configs = [c for c in a.configs.split(",") if c]
    for c in configs:
        parse_config(c)
    out = os.path.abspath(a.out)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    cfg = {"layers": a.layers, "width": a.width, "classes": a.classes, "batch": a.batch}
    model_dir = os.path.join(out, "model")
    device_bench.must(MlpBench.export_cmd(cfg, model_dir))
    for c in configs:
        k, m, sched = parse_config(c)
        schedule, chunks = SCHEDULES[sched]
        d = os.path.join(out, c)
        t0 = time.monotonic()
        device_bench.must([os.path.join(a.bin, "gpipe-compile"),
                           os.path.join(model_dir, "model.onnx"), "-o", d, "--lr", repr(a.lr),
                           "--stages", str(k), "--microbatches", str(m), "--schedule", schedule,
                           "--virtual-stages", str(chunks),
                           "--remat", "none"]
                          + (["--profile"] if profiled(c)[0] else [])
                          + (["--costs", os.path.abspath(a.costs)] if a.costs else [])
                          + (["--target", "cuda", "--cuda-arch", a.cuda_arch]
                             + device_bench.PRECISION_FLAGS[a.precision]
                             if a.target == "cuda" else ["--target", "cpu"]))
        for f in os.listdir(d):
            p = os.path.join(d, f)
            if f == "pipeline.json":
                continue
            if re.match(r"^stage\d+$", f):
                subprocess.run(["strip", "--strip-unneeded", p], check=False)
            else:
                device_bench.must(["rm", "-rf", p])
        print("pipeline_bench: %s compiled in %.0fs" % (c, time.monotonic() - t0), flush=True)
    shutil.rmtree(model_dir)
    with open(os.path.join(out, "bench.json"), "w") as f:
        json.dump(dict(cfg, model="mlp", lr=a.lr, configs=configs,
                       precision=a.precision if a.target == "cuda" else "cpu (plumbing check)",
                       precisions=[a.precision]), f)
    print("pipeline_bench: packed %s into %s" % (",".join(configs), out))
    return 0


def losses_of(log):
    """Every step's loss of a --log-json, in order."""
    with open(log) as f:
        rows = [json.loads(x) for x in f if x.strip()]
    return [r["loss"] for r in rows if "loss" in r and "step" in r]


def ms_of(log, warmup):
    """(median ms/step after the warm-up steps, first 3 losses) of a --log-json."""
    rows = []
    with open(log) as f:
        for line in f:
            line = line.strip()
            if line:
                r = json.loads(line)
                if "loss" in r and "step" in r:
                    rows.append(r)
    ms = [r["ms"] for r in rows[warmup:] if "ms" in r]
    if not ms:
        raise ValueError("no timed steps after the warm-up in %s" % log)
    return statistics.median(ms), [round(r["loss"], 5) for r in rows[:3]]


def run(a):
    progs = os.path.abspath(a.programs)
    with open(os.path.join(progs, "bench.json")) as f:
        cfg = json.load(f)
    configs = cfg["configs"]
    work = os.path.abspath(a.workdir)
    os.makedirs(work, exist_ok=True)
    out = os.path.abspath(a.out or os.environ.get("OUT") or work)
    os.makedirs(out, exist_ok=True)
    pjs = {}
    for c in configs:
        with open(os.path.join(progs, c, "pipeline.json")) as f:
            pjs[c] = json.load(f)
    notes = []
    if a.mpi and not a.dry_run:
        notes.append(device_run.install_mpi(notes, a.mpi)[1])
    t0 = time.monotonic()
    wdir, ddir, problems = device_bench.write_inputs(cfg, pjs, work)
    for c, pj in pjs.items():
        problems += ["%s: %s" % (c, s) for s in device_bench.check_inputs(pj, wdir, ddir,
                                                                              multi_stage=True)]
    print("pipeline_bench: inputs in %.1fs, %s" % (time.monotonic() - t0,
          "consistent" if not problems else "problems: " + "; ".join(problems)), flush=True)
    if problems:
        return 1
    env = device_run.env_with(device_run.nvidia_lib_dirs())
    mpirun = a.mpirun or ("/usr/bin/orterun" if os.path.exists("/usr/bin/orterun")
                          else shutil.which("orterun") or shutil.which("mpirun") or "mpirun")
    total = a.warmup + a.steps

    def profile_file(c, r, s):
        return os.path.join(work, "profile_%s_%d_stage%d.jsonl" % (c, r, s))

    def cmds(c, log, r=0):
        pj = pjs[c]
        return [[os.path.join(progs, c, st["executable"]), "--data", ddir, "--steps", str(total),
                 "--weights-in", wdir, "--log-json", log, "--quiet",
                 "--pipeline", os.path.join(progs, c, "pipeline.json"),
                 "--comm-timeout", "30"]
                + (["--profile", profile_file(c, r, s)] if profiled(c)[0] else [])
                + ["--report", os.path.join(out, "report_%s_stage%d.json" % (c, s))]
                for s, st in enumerate(pj["stages"])]
    if a.dry_run:
        for c in configs:
            print("%s: %s" % (c, " : ".join(" ".join(x) for x in cmds(c, "LOG"))))
        return 0
    res = {c: {"ms": [], "loss": None, "fail": [], "curve": None} for c in configs}
    deadline = None if a.deadline is None else device_bench.START + a.deadline

    def table(state):
        lines = ["# pipeline_bench (%s): %d-layer MLP width %d, %d classes, batch %d, %s; "
                 "%d warm-up + %d steps, %d rounds; MPI single copy: %s"
                 % (state, cfg["layers"], cfg["width"], cfg["classes"], cfg["batch"],
                    cfg["precision"], a.warmup, a.steps, a.repeat, a.single_copy),
                 "", "| config | stages | M | schedule | ms/step (median) | throughput vs 1 "
                 "stage, same M | rounds (ms) | first losses |", "|---|---|---|---|---|---|---|---|"]
        base = {}
        for c in configs:
            k, m, _ = parse_config(c)
            if k == 1 and res[c]["ms"] and not profiled(c)[0]:
                base[m] = statistics.median(res[c]["ms"])
        for c in configs:
            k, m, sched = parse_config(c)
            r = res[c]
            med = statistics.median(r["ms"]) if r["ms"] else None
            rel = "%.3fx" % (base[m] / med) if med and m in base else "n/a"
            lines.append("| %s | %d | %d | %s | %s | %s | %s | %s |" % (
                c, k, m, sched if k > 1 else "-", "%.3f" % med if med else "n/a", rel,
                ", ".join("%.3f" % x for x in r["ms"]), r["loss"]))
        for c in configs:
            prof, twin = profiled(c)
            if not prof or twin not in res or not res[c]["curve"] or not res[twin]["curve"]:
                continue
            a_, b_ = res[c]["curve"], res[twin]["curve"]
            same = a_ == b_
            diff = max(abs(x - y) for x, y in zip(a_, b_)) if len(a_) == len(b_) else None
            tp, tt = res[c]["ms"], res[twin]["ms"]
            lines.append("- %s: losses of all %d steps %s those of %s%s; ms/step %s that of %s"
                         % (c, len(a_), "equal (bit for bit)" if same else "DIFFER from", twin,
                            "" if same or diff is None else " (max |diff| %.3g)" % diff,
                            "%.3fx" % (statistics.median(tp) / statistics.median(tt))
                            if tp and tt else "n/a", twin))
        for c in configs:
            for f in res[c]["fail"]:
                lines.append("- %s: %s" % (c, f))
        lines += ["- " + n for n in notes]
        text = "\n".join(lines) + "\n"
        with open(os.path.join(out, "pipeline.txt"), "w") as f:
            f.write(text)
        return text
    for r in range(a.repeat):
        for c in (configs if r % 2 == 0 else list(reversed(configs))):
            if deadline is not None and time.monotonic() > deadline - 10:
                res[c]["fail"].append("round %d: not run (deadline)" % r)
                continue
            log = os.path.join(work, "log_%s_%d.jsonl" % (c, r))
            if os.path.exists(log):
                os.remove(log)
            try:
                rc, secs = device_run.launch(cmds(c, log, r), env, a.timeout,
                                             os.path.join(work, "run_%s_%d.log" % (c, r)), mpirun,
                                             single_copy=a.single_copy)
            except Exception as e:  # noqa: BLE001 - recorded, the rounds go on
                res[c]["fail"].append("round %d: %s" % (r, e))
                continue
            if rc != 0:
                res[c]["fail"].append("round %d: %s: %s" % (r, device_run.outcome(rc, secs),
                                      device_run.tail(os.path.join(work, "run_%s_%d.log"
                                                                   % (c, r)), 600)))
                continue
            try:
                ms, loss = ms_of(log, a.warmup)
            except (OSError, ValueError) as e:
                res[c]["fail"].append("round %d: %s" % (r, e))
                continue
            res[c]["ms"].append(ms)
            res[c]["loss"] = res[c]["loss"] or loss
            res[c]["curve"] = res[c]["curve"] or losses_of(log)
            if profiled(c)[0]:
                # The stages' cost tables of this round, joined in stage order
                # (as gpipe-run --profile does).
                try:
                    with open(os.path.join(out, "costs_%s.jsonl" % c), "w") as f:
                        for s in range(len(pjs[c]["stages"])):
                            with open(profile_file(c, r, s)) as g:
                                f.write(g.read())
                except OSError as e:
                    res[c]["fail"].append("round %d: cost table: %s" % (r, e))
            print("pipeline_bench: round %d %s: %.3f ms/step (%.1fs)" % (r, c, ms, secs),
                  flush=True)
            table("running")
    print(table("done"), flush=True)
    return 0 if all(res[c]["ms"] for c in configs) else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack")
    p.add_argument("--bin", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--width", type=int, default=4096)
    p.add_argument("--classes", type=int, default=1024)
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--precision", choices=sorted(device_bench.PRECISION_FLAGS), default="tf32")
    p.add_argument("--cuda-arch", default="90")
    p.add_argument("--configs", default=DEFAULT_CONFIGS)
    p.add_argument("--costs", default=None,
                   help="a cost table for every compile (gpipe-compile --costs): with a CUDA "
                        "table, pipeline.json predicts each stage's GPU memory")
    p.add_argument("--target", choices=["cuda", "cpu"], default="cuda",
                   help="cpu: the same programs for the CPU target, to check the plumbing here")
    r = sub.add_parser("run")
    r.add_argument("--programs", required=True)
    r.add_argument("--workdir", default="/tmp/gpipe_pipeline_bench")
    r.add_argument("--out", default=None)
    r.add_argument("--steps", type=int, default=30)
    r.add_argument("--warmup", type=int, default=5)
    r.add_argument("--repeat", type=int, default=2)
    r.add_argument("--timeout", type=float, default=90.0)
    r.add_argument("--deadline", type=float, default=None)
    r.add_argument("--mpi", help="a pack.py bundle's mpi/ folder, installed first")
    r.add_argument("--mpirun", default=None)
    r.add_argument("--dry-run", action="store_true")
    r.add_argument("--single-copy", default="none",
                   help="Open MPI's btl_vader_single_copy_mechanism for the stages (none, as "
                        "the GPU check; cma where the machine allows cross-memory attach)")
    a = ap.parse_args()
    return pack(a) if a.cmd == "pack" else run(a)


if __name__ == "__main__":
    sys.exit(main())
