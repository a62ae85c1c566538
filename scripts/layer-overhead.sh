#!/usr/bin/env bash
# What the capture layer costs: the decoder's own per-token wall time (median over decode steps,
# from the trace `decoder capture` writes itself) without the layer and under `profiler record`
# at each timestamp level, for both presets. Prints a markdown table (README "Profile your own
# runtime" quotes it).
#
#   scripts/layer-overhead.sh [MODEL] [TOKENS] [REPEATS]     # defaults: smollm2 16 3
#
# Uses $PROFILER and $DECODER (default: the debug builds in $CARGO_TARGET_DIR) and the layer
# beside the profiler. The decoder runs with its own timestamps off, so every GPU timestamp in
# the run is the layer's. Each cell is the median of REPEATS runs (the machine is shared: read
# differences of a few percent as noise).
set -euo pipefail
cd "$(dirname "$0")/.."
profiler=${PROFILER:-}
decoder=${DECODER:-}
source scripts/env.sh
PROFILER=${profiler:-$PROFILER}
DECODER=${decoder:-$DECODER}
model=${1:-smollm2}
tokens=${2:-16}
repeats=${3:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

median_wall_us() {
  python3 - "$1" <<'PY'
import json, statistics, sys
t = json.load(open(sys.argv[1]))
d = [r["wall_ns"] / 1e3 for r in t["tokens"] if r["phase"] == "decode"][2:]
print(statistics.median(d))
PY
}

echo "| preset | layer | wall us / token | vs no layer |"
echo "|---|---|---|---|"
for mode in fused generic; do
  base=
  for level in none off submit command-buffer dispatch; do
    runs=()
    for _ in $(seq "$repeats"); do
      args=(capture --model "$model" --mode "$mode" --timestamps off --max-tokens "$tokens"
        --out "$work/own.json")
      if [[ $level == none ]]; then
        "$DECODER" "${args[@]}" >/dev/null 2>&1
      else
        "$PROFILER" record --timestamps "$level" --out "$work/layer.json" -- \
          "$DECODER" "${args[@]}" >/dev/null 2>&1
      fi
      runs+=("$(median_wall_us "$work/own.json")")
    done
    us=$(printf '%s\n' "${runs[@]}" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    base=${base:-$us}
    rel=$(awk -v a="$us" -v b="$base" 'BEGIN {printf "%+.1f%%", (a / b - 1) * 100}')
    printf '| %s | %s | %.0f | %s |\n' "$mode" "$level" "$us" "$rel"
  done
done
