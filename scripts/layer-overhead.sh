#!/usr/bin/env bash
# What the capture layer costs: the decoder's own per-token wall time and host enqueue time
# (recording, binding and submitting; medians over decode steps, from the trace `decoder capture`
# writes itself) without the layer and under `profiler record` at each timestamp level, for both
# presets. Prints a markdown table (docs/capture-layer.md quotes it).
#
#   scripts/layer-overhead.sh [MODEL] [TOKENS] [REPEATS]     # defaults: smollm2 16 5
#
# Uses $PROFILER and $DECODER (default: the debug builds in $CARGO_TARGET_DIR) and the layer
# beside the profiler. The decoder runs with its own timestamps off, so every GPU timestamp in
# the run is the layer's. Each cell is the median of REPEATS runs, the levels taking turns (the
# machine is shared: read differences of a few percent as noise). $LEVELS (default: off submit
# command-buffer dispatch) may name LEVEL@NAME: the layer at $LAYER_NAME at that level, to compare
# two builds of the layer in one run; $MODES (default: fused generic) picks the presets.
# The last column compares each round's host enqueue with the run without the layer in the same
# round: its median and quartiles say how far the rounds spread.
set -euo pipefail
cd "$(dirname "$0")/.."
profiler=${PROFILER:-}
decoder=${DECODER:-}
source scripts/env.sh
PROFILER=${profiler:-$PROFILER}
DECODER=${decoder:-$DECODER}
model=${1:-smollm2}
tokens=${2:-16}
repeats=${3:-5}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# "WALL_US ENQUEUE_US CALL_US FAST_PERCENT" of a trace's decode steps (the first 2 skipped):
# medians of the steps' wall and host enqueue times, the enqueue made of per-call medians (for
# each kind of enqueue span, record, descriptors and submit, its median duration over all the
# run's calls times its calls per step), and the share of submits that returned in under 2 us.
# On lavapipe a submit returns in about 0.3 us or takes 7 to 20 us, in proportions that change
# from run to run (docs/capture-layer.md, "The decoder under the layer"), so a step's sum moves with
# them; the per-call medians do not, and they are where the layer's own time per call shows.
medians() {
  python3 - "$1" <<'PY'
import json, statistics, sys
t = json.load(open(sys.argv[1]))
d = [r for r in t["tokens"] if r["phase"] == "decode"][2:]
calls = {}
for r in d:
    for name, _start, dur, _depth in r["host_spans"]:
        if name in ("record", "descriptors", "submit"):
            calls.setdefault(name, []).append(dur)
per_call = sum(statistics.median(v) * len(v) / len(d) for v in calls.values())
submits = calls.get("submit", [])
fast = 100 * sum(1 for s in submits if s < 2000) / max(len(submits), 1)
print(statistics.median(r["wall_ns"] / 1e3 for r in d),
      statistics.median(r["host_enqueue_ns"] / 1e3 for r in d),
      per_call / 1e3, fast)
PY
}

# The median of the numbers on stdin.
median() {
  sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'
}

# "MEDIAN% (Q1% to Q3%)" of the percentages on stdin.
quartiles() {
  sort -g | awk '{a[NR]=$1} END {
    printf "%+.1f%% (%+.1f%% to %+.1f%%)", a[int((NR+1)/2)], a[int((NR+3)/4)], a[int((3*NR+1)/4)]}'
}

read -r -a levels <<<"none ${LEVELS:-off submit command-buffer dispatch}"
read -r -a modes <<<"${MODES:-fused generic}"
echo "| preset | layer | wall us / token | vs no layer | host enqueue us / token | vs no layer | enqueue by per-call medians, us / token | vs no layer | host enqueue vs no layer, round by round: median (quartiles) | submits under 2 us |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for mode in "${modes[@]}"; do
  # Repeats outside, levels inside: a slow drift of the shared machine's load reaches every
  # level alike instead of one level's whole block of runs.
  declare -A runs=()
  for rep in $(seq "$repeats"); do
    for level in "${levels[@]}"; do
      args=(capture --model "$model" --mode "$mode" --timestamps off --max-tokens "$tokens"
        --out "$work/own.json")
      if [[ $level == none ]]; then
        "$DECODER" "${args[@]}" >/dev/null 2>&1
      else
        layer=()
        lv=$level
        if [[ $level == *@* ]]; then
          lv=${level%@*}
          var=LAYER_$(tr 'a-z-' 'A-Z_' <<<"${level#*@}")
          [[ -f ${!var:-} ]] || { echo "layer-overhead: $level needs \$$var (a layer library)" >&2; exit 2; }
          layer=(--layer "${!var}")
        fi
        "$PROFILER" record "${layer[@]}" --timestamps "$lv" --out "$work/layer.json" -- \
          "$DECODER" "${args[@]}" >/dev/null 2>&1
      fi
      runs[$level.$rep]=$(medians "$work/own.json")
    done
  done
  base=
  base_enqueue=
  base_calls=
  for level in "${levels[@]}"; do
    mine=$(for rep in $(seq "$repeats"); do echo "${runs[$level.$rep]}"; done)
    us=$(cut -d' ' -f1 <<<"$mine" | median)
    enqueue=$(cut -d' ' -f2 <<<"$mine" | median)
    calls=$(cut -d' ' -f3 <<<"$mine" | median)
    fast=$(cut -d' ' -f4 <<<"$mine" | median)
    base=${base:-$us}
    base_enqueue=${base_enqueue:-$enqueue}
    base_calls=${base_calls:-$calls}
    rel=$(awk -v a="$us" -v b="$base" 'BEGIN {printf "%+.1f%%", (a / b - 1) * 100}')
    rel_enqueue=$(awk -v a="$enqueue" -v b="$base_enqueue" 'BEGIN {printf "%+.1f%%", (a / b - 1) * 100}')
    rel_calls=$(awk -v a="$calls" -v b="$base_calls" 'BEGIN {printf "%+.1f%%", (a / b - 1) * 100}')
    # Each round against the run without the layer in the same round: how far the rounds
    # spread, which the medians alone do not show.
    rounds=$(for rep in $(seq "$repeats"); do
      awk -v a="$(cut -d' ' -f2 <<<"${runs[$level.$rep]}")" \
        -v b="$(cut -d' ' -f2 <<<"${runs[none.$rep]}")" 'BEGIN {print (a / b - 1) * 100}'
    done | quartiles)
    printf '| %s | %s | %.0f | %s | %.0f | %s | %.0f | %s | %s | %.1f%% |\n' "$mode" "$level" "$us" "$rel" \
      "$enqueue" "$rel_enqueue" "$calls" "$rel_calls" "$rounds" "$fast"
  done
  unset runs
done
