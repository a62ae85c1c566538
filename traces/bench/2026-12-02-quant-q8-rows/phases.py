"""GPU time per decode token of each phase of the persistent kernel (its phase clocks, recorded
at --timestamps dispatch), summed over layers, the first 2 decode steps skipped: the lines of
chunks.txt and sums.txt (means over steps; `profiler stats FILE` gives each op's median per token).

    python3 phases.py TRACE.json
"""
import collections
import json
import sys

t = json.load(open(sys.argv[1]))
d = [r for r in t["tokens"] if r["phase"] == "decode"][2:]
acc = collections.Counter()
for r in d:
    for op, _start, dur, *_ in r.get("gpu_spans", []):
        acc[t["ops"][op]["label"].split(".")[-1]] += dur
print(sys.argv[1].split("/")[-1], {k: round(v / len(d) / 1e3, 1) for k, v in acc.most_common(8)})
