"""Checks a gpipe-run --profile cost table, the predictions a --costs compile
wrote, and that the profiled program trained the plain one's weights:
usage: profile.test.py COSTS PROF_PIPELINE COSTED_PIPELINE PROF_W PLAIN_W STEPS."""
import glob
import json
import os
import sys


def nbytes(shape):
    """A float32 weight file's data bytes."""
    n = 4
    for d in shape:
        n *= d
    return n


costs, prof_pj, costed_pj, prof_w, plain_w, steps = sys.argv[1:7]
steps = int(steps)
lines = [json.loads(l) for l in open(costs) if l.strip()]
desc = json.load(open(prof_pj))
M = desc["microbatches"]
for st in desc["stages"]:
    s = st["index"]
    head = [l for l in lines if "gpipe_profile" in l and l["stage"] == s]
    assert len(head) == 1, head
    assert head[0]["steps"] == steps - 1, head[0]
    assert head[0]["microbatches"] == M and head[0]["target"] == "cpu", head[0]
    assert head[0]["build_id"] == desc["build_id"], (head[0], desc["build_id"])
    units = [l for l in lines if "unit" in l and l["stage"] == s]
    assert [u["unit"] for u in units] == list(range(len(units)))
    kinds = sorted({u["function"] for u in units})
    assert kinds == ["backward", "forward", "update", "weight"], kinds
    for u in units:
        assert u["seconds"] > 0 and u["ops"], u
        for op in u["ops"]:
            assert op["op"].startswith(("nn.", "pipe.")) and op["signature"], op
    fwd = {u["calls"] for u in units if u["function"] == "forward"}
    assert fwd == {(steps - 1) * M}, fwd
    upd = {u["calls"] for u in units if u["function"] == "update"}
    assert upd == {steps - 1}, upd
    print("stage %d: %d steps counted, %d units (%s), every forward unit called %d times"
          % (s, steps - 1, len(units), ", ".join(sorted(kinds, key=["forward", "backward", "update", "weight"].index)),
             (steps - 1) * M))
    # The links: per peer it exchanges boundary tensors with, 8 bytes and
    # each boundary size, measured (a positive time; not compared across
    # sizes: other tests share the cores).
    links = [l for l in lines if "link" in l and l["stage"] == s]
    want = {(b["peer"], b["bytes"]) for b in st["boundaries"]} | \
        {(b["peer"], 8) for b in st["boundaries"]}
    got = {(l["link"], l["bytes"]) for l in links}
    assert got == want, (got, want)
    assert all(l["seconds"] > 0 and l["repeats"] >= 4 for l in links), links
    print("stage %d: links measured to peers %s at %d sizes" % (
        s, sorted({p for p, _ in got}), len({b for _, b in got})))
    # The runtime memory by part: the process before its arena, the largest
    # weight-file piece mapped while loading (its largest parameter here),
    # what the GEMMs first touched, and the steady rest that includes it;
    # runtime_bytes (the peak less the arena) covers start and the larger
    # of load and steady, and no link buffer (measured before the links).
    h = head[0]
    largest = max(nbytes(p["shape"]) for p in st["params"])
    assert h["start_bytes"] > 0 and h["load_bytes"] == min(largest, 16 << 20), (h, largest)
    assert 0 < h["library_bytes"] <= h["steady_bytes"], h
    assert h["runtime_bytes"] >= h["start_bytes"] + max(h["load_bytes"], h["steady_bytes"]) - (1 << 20), h
    # Units that called the math libraries (GEMMs here) carry what the
    # libraries held once they had run in the warm-up step: the last of
    # them is the header's library_bytes.
    lib = [u["library_bytes"] for u in units if "library_bytes" in u]
    assert lib and all(0 <= b for b in lib), lib
    assert max(lib) == h["library_bytes"] or h["library_bytes"] == h["steady_bytes"], (lib, h)
    print("stage %d: runtime memory by part: start, load (its largest parameter), library within steady" % s)
costed = json.load(open(costed_pj))
lines_by_stage = {l["stage"]: l for l in lines if "gpipe_profile" in l}
most = max(l["library_bytes"] for l in lines if "library_bytes" in l and "unit" in l)
for st in costed["stages"]:
    # The same table's place (first, last) predicts the stage: start plus
    # the larger of its own largest parameter's piece and the steady rest,
    # whose libraries' part is the largest the table has for one of the
    # stage's GEMMs (by signature): between none and the table's largest.
    h = lines_by_stage[st["index"]]
    largest = min(max(nbytes(p["shape"]) for p in st["params"]), 16 << 20)
    base = st["memory"]["arena_bytes"] + h["start_bytes"]
    rest = h["steady_bytes"] - h["library_bytes"]
    got = st["memory"]["predicted_peak_bytes"]
    assert base + max(largest, rest) < got <= base + max(largest, rest + most), (st["memory"], h, most)
for st in costed["stages"]:
    t = st["predicted_seconds_per_step"]
    assert len(t) == 4 and all(x > 0 for x in t[:3]) and t[3] >= 0, t
    assert st["predicted_analytic_share"] == 0, st["predicted_analytic_share"]
print("predicted: %d stages, each forward, backward, weight and update > 0 but the update, costs = %s"
      % (len(costed["stages"]), costed["costs"]))
a = sorted(os.path.basename(f) for f in glob.glob(os.path.join(prof_w, "*.npy")))
b = sorted(os.path.basename(f) for f in glob.glob(os.path.join(plain_w, "*.npy")))
assert a == b and a, (a, b)
for f in a:
    assert open(os.path.join(prof_w, f), "rb").read() == open(os.path.join(plain_w, f), "rb").read(), f
print("weights: %d parameters equal bit for bit" % len(a))
