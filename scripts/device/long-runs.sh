#!/usr/bin/env bash
# Peak resident memory of long runs: `decoder capture` (tiny, fused preset, `--timestamps
# dispatch`) and `profiler record` of the same capture, each at $SHORT and $LONG decode tokens
# (default 2000 and 20000). Both stream their traces, so the longer run should grow its trace file
# and not its memory. Meant for a GPU machine, where 20,000 tiny decode tokens take seconds (on
# lavapipe `tests/tests/long_runs.rs` runs the same comparison at 40 and 400):
#
#   scripts/device/long-runs.sh OUT_DIR
#
# Uses $DECODER, $PROFILER (default .device-bin/decoder, .device-bin/profiler; the layer beside
# the profiler). Writes OUT_DIR/long-runs.md and .json: per run the decode tokens, the wall time,
# the peak RSS of the whole (the process and every child it waited for, from getrusage), the
# profiler's own peak (VmHWM, sampled while it runs) and the trace's size; `profiler stats` of the
# long capture, and how long it and `profiler diff` of the two long traces take.
#
# It is a test as well: it exits 1, after writing its tables, when a long run's peak (the process
# and its children) is more than $BOUND (default 1.5) times the short run's, when the profiler's own
# peak grows by more than 1 KiB a step beyond 2 MiB (the bound of tests/tests/long_runs.rs), or
# when `profiler stats` or `profiler diff` fails on the long traces.
set -euo pipefail
out=${1:?usage: $0 OUT_DIR}
short=${SHORT:-2000}
long=${LONG:-20000}
decoder=$(realpath "${DECODER:-.device-bin/decoder}")
profiler=$(realpath "${PROFILER:-.device-bin/profiler}")
work=${WORK:-/tmp/long-runs}
mkdir -p "$out" "$work"
python3 - "$decoder" "$profiler" "$work" "$out" "$short" "$long" "${BOUND:-1.5}" <<'PY'
import json, os, subprocess, sys
decoder, profiler, work, out = sys.argv[1:5]
short, long = int(sys.argv[5]), int(sys.argv[6])
bound = float(sys.argv[7])

def measured(args):
    # One child at a time, in a fresh process, so RUSAGE_CHILDREN's maxrss is this run's.
    code = ("import resource, subprocess, sys, time, json\n"
            "def hwm(pid):\n"
            "    try:\n"
            "        for l in open(f'/proc/{pid}/status'):\n"
            "            if l.startswith('VmHWM:'): return int(l.split()[1])\n"
            "    except OSError: pass\n"
            "    return 0\n"
            "t = time.time(); p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
            "own = 0\n"
            "while p.poll() is None:\n"
            "    own = max(own, hwm(p.pid)); time.sleep(0.01)\n"
            "print(json.dumps({'rc': p.returncode, 'wall_s': time.time() - t, 'own_kib': own,"
            " 'whole_kib': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))\n")
    r = subprocess.run([sys.executable, "-c", code] + args, capture_output=True, text=True)
    res = json.loads(r.stdout.strip().splitlines()[-1])
    if res["rc"] != 0:
        sys.exit(f"{' '.join(args)} failed ({res['rc']})")
    return res

rows = []
for what in ("capture", "record"):
    for n in (short, long):
        trace = f"{work}/{what}-{n}.json"
        cap = [decoder, "capture", "--model", "tiny", "--mode", "fused", "--max-tokens", str(n)]
        if what == "capture":
            args = cap + ["--timestamps", "dispatch", "--out", trace]
        else:
            args = [profiler, "record", "--timestamps", "dispatch", "--out", trace, "--"] + cap + [
                "--timestamps", "off", "--out", f"{work}/own-{n}.json"]
        res = measured(args)
        res.update({"run": what, "decode_tokens": n, "trace_bytes": os.path.getsize(trace)})
        rows.append(res)
        print(json.dumps(res), flush=True)
import time
t = time.time()
stats = subprocess.run([profiler, "stats", f"{work}/capture-{long}.json"], capture_output=True, text=True)
stats_s = time.time() - t
t = time.time()
diff = subprocess.run([profiler, "diff", f"{work}/capture-{long}.json", f"{work}/record-{long}.json"],
                      capture_output=True, text=True)
diff_s = time.time() - t
md = ["| run | decode tokens | wall s | peak RSS, whole (MiB) | profiler's own peak (MiB) | trace (MB) |",
      "|---|---:|---:|---:|---:|---:|"]
for r in rows:
    own = f"{r['own_kib'] / 1024:.1f}" if r["run"] == "record" else "-"
    md.append(f"| {r['run']} | {r['decode_tokens']} | {r['wall_s']:.1f} | {r['whole_kib'] / 1024:.1f} | {own} | {r['trace_bytes'] / 1e6:.1f} |")
for what in ("capture", "record"):
    a, b = [r for r in rows if r["run"] == what]
    md.append(f"\n{what}: the long run's peak is {b['whole_kib'] / a['whole_kib']:.2f}x the short one's")
md.append(f"\n`profiler stats` of the long capture: {stats_s:.2f} s (exit {stats.returncode}); "
          f"`profiler diff` of the long capture and the long record: {diff_s:.2f} s (exit {diff.returncode})")
open(f"{out}/long-runs.md", "w").write("\n".join(md) + "\n\n`profiler stats` of the long capture:\n\n```\n" + stats.stdout + "```\n")
json.dump(rows, open(f"{out}/long-runs.json", "w"), indent=1)
print("\n".join(md))
failed = []
for what in ("capture", "record"):
    a, b = [r for r in rows if r["run"] == what]
    if b["whole_kib"] > bound * a["whole_kib"]:
        failed.append(f"{what}: {long} tokens peaked at {b['whole_kib']} KiB, more than {bound}x "
                      f"the {a['whole_kib']} KiB of {short} tokens")
    if what == "record":
        # The profiler keeps a few hundred bytes of every wait group to decide the steps; what a
        # step's spans cost (kilobytes) must not stay.
        limit = a["own_kib"] + 2048 + (long - short)
        if b["own_kib"] > limit:
            failed.append(f"record: the profiler alone peaked at {b['own_kib']} KiB at {long} "
                          f"tokens, over {limit} KiB (1 KiB a step beyond 2 MiB)")
for name, p in (("stats", stats), ("diff", diff)):
    if p.returncode != 0:
        failed.append(f"profiler {name} of the long traces exited {p.returncode}: {p.stderr.strip()[-300:]}")
if failed:
    sys.exit("long-runs: FAILED\n" + "\n".join(failed))
print(f"long-runs: passed (every long run within {bound}x of its short one, the profiler within 1 KiB a step)")
PY
