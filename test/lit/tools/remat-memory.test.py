"""Compares two pipeline.json files: remat stage vs remat none."""
import json
import sys

with_remat, without = (json.load(open(p)) for p in sys.argv[1:3])
assert with_remat["remat"] == "stage" and without["remat"] == "none"
ok = True
for a, b in zip(with_remat["stages"], without["stages"]):
    ma, mb = a["memory"], b["memory"]
    x, y = ma["activation_bytes_per_microbatch"], mb["activation_bytes_per_microbatch"]
    print(f"stage {a['index']}: remat stage {x} bytes "
          f"{'<' if x < y else '>='} remat none {y} bytes per in-flight micro-batch")
    ok &= x < y and ma["activation_bytes"] == x * with_remat["microbatches"]
    ok &= ma["arena_bytes"] < mb["arena_bytes"]
print("remat reduces every stage's activation memory" if ok else "FAIL")
sys.exit(0 if ok else 1)
