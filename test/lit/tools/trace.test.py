"""Checks a gpipe-run --trace file against the pipeline.json it ran:
usage: trace.test.py TRACE PIPELINE_JSON STEPS. Prints one line per stage."""
import json
import sys

trace, pipeline, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
events = json.load(open(trace))["traceEvents"]
desc = json.load(open(pipeline))
M = desc["microbatches"]
for st in desc["stages"]:
    s = st["index"]
    mine = [e for e in events if e["pid"] == s and e["ph"] == "X"]
    ts = [e["ts"] for e in mine]
    assert ts == sorted(ts), "stage %d: events out of order" % s
    actions = [e for e in mine if e["cat"] == "action" and e["name"] != "step end"]
    got = [(e["args"]["step"], {"forward": "F", "backward": "B", "update": "U"}
            [e["name"]] + str(e["args"].get("microbatch", ""))) for e in actions]
    want = [(step, a) for step in range(1, steps + 1) for a in st["schedule"]]
    assert got == want, "stage %d: actions %s, want %s" % (s, got, want)
    ends = [e["args"]["step"] for e in mine if e["name"] == "step end"]
    assert ends == list(range(1, steps + 1)), ends
    # One wait per boundary tensor and micro-batch (update-phase ones once a
    # step), inside the action that moved it.
    waits = [e for e in mine if e["cat"] == "transfer"]
    per_step = sum(1 if b["phase"] == "update" else M for b in st["boundaries"])
    assert len(waits) == per_step * steps, (len(waits), per_step)
    kinds = {("send wait" if b["direction"] == "send" else "recv wait",
              b["peer"], b["bytes"]) for b in st["boundaries"]}
    for w in waits:
        a = w["args"]
        assert (w["name"], a["peer"], a["bytes"]) in kinds, w
        assert any(x["ts"] <= w["ts"] and
                   w["ts"] + w["dur"] <= x["ts"] + x["dur"] + 1e-3 and
                   x["args"]["step"] == a["step"] and
                   x["args"].get("microbatch") == a["microbatch"]
                   for x in actions), "wait outside its action: %s" % w
    print("stage %d: %d steps of %s, %d transfer waits, in order"
          % (s, steps, " ".join(st["schedule"]), len(waits)))
