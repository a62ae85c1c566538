#!/usr/bin/env python3
"""Summarizes a per-workgroup timeline of the persistent kernel (the diagnostic build of
experiments.patch: DECODESCOPE_TIMELINE=FILE with --timestamps dispatch). FILE holds, per decode
step, one line per workgroup (its index, then 17 device-clock readings in ns of layer LAYERS / 2,
0 where the workgroup had no such event) and a line "--".

    python3 timeline_stats.py FILE

Prints, per event, the median over steps (the first two skipped) of the earliest, median and
latest workgroup, in us from the step's earliest layer start; then the hand-offs: how long after
its last producer a consumer saw the data, for Qwen3-0.6B's shapes on a 132-workgroup grid at
context 512 (unit u of the attention on workgroup u, KV head u // 16; merge unit u reads head
u // 8's 16 splits)."""
import statistics
import sys

EVENTS = [
    "layer start (barrier left)", "qkv: row staged", "qkv: done (puts issued)",
    "attention: q polled", "attention: first block scored", "attention: V summed",
    "attention: puts issued", "merge: partials polled", "merge: W_o atomics issued",
    "merge: arrival (after fence)", "mlp: start (barrier left)", "mlp: row staged",
    "mlp: gate/up done", "mlp: down done", "mlp: atomics issued", "mlp: arrival (after fence)",
    "next layer: start (barrier left)",
]


def load(path):
    steps, cur = [], []
    for line in open(path):
        line = line.strip()
        if line == "--":
            steps.append(cur)
            cur = []
        elif line:
            cur.append([int(v) for v in line.split()[1:]])
    return steps[2:]


def q(values):
    v = sorted(values)
    n = len(v)
    return f"p10 {v[n // 10] / 1e3:5.2f}  median {v[n // 2] / 1e3:5.2f}  p90 {v[9 * n // 10] / 1e3:5.2f} us"


def main():
    steps = load(sys.argv[1])
    print(f"{len(steps)} steps, {len(steps[0])} workgroups")
    print(f"{'event':34s} {'n':>4s} {'earliest':>9s} {'median':>8s} {'latest':>8s}  (us)")
    for k, name in enumerate(EVENTS):
        lo, med, hi = [], [], []
        for s in steps:
            base = min(w[0] for w in s if w[0] > 0)
            vals = sorted(w[k] - base for w in s if w[k] > 0)
            if vals:
                lo.append(vals[0])
                med.append(vals[len(vals) // 2])
                hi.append(vals[-1])
        n = sum(1 for w in steps[0] if w[k] > 0)
        print(f"{name:34s} {n:4d} {statistics.median(lo) / 1e3:9.2f} {statistics.median(med) / 1e3:8.2f} "
              f"{statistics.median(hi) / 1e3:8.2f}")
    merge, qpoll, b1, b2 = [], [], [], []
    for s in steps:
        for u in range(min(128, len(s))):
            prod = [s[16 * (u // 16) + i][6] for i in range(16)]
            if min(prod) > 0 and s[u][7] > 0:
                merge.append(s[u][7] - max(prod))
            kvh = u // 16
            rows = list(range(2 * kvh * 128, (2 * kvh + 2) * 128))
            rows += list(range(2048 + kvh * 128, 2048 + kvh * 128 + 128))
            rows += list(range(3072 + kvh * 128, 3072 + kvh * 128 + 128))
            prods = {(r % 1056) // 8 for r in rows}
            if s[u][3] > 0:
                qpoll.append(s[u][3] - max(s[p][2] for p in prods))
        last = max(w[9] for w in s)
        b1 += [w[10] - last for w in s]
        last = max(w[15] for w in s)
        b2 += [w[16] - last for w in s]
    print("hand-offs, after the last producer:")
    print(f"  attention's q polls (tagged words)   {q(qpoll)}")
    print(f"  merge's partial polls (tagged words) {q(merge)}")
    print(f"  barrier before the MLP (leave)       {q(b1)}")
    print(f"  barrier before the next layer        {q(b2)}")


if __name__ == "__main__":
    main()
