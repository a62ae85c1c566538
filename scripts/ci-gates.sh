#!/usr/bin/env bash
# Headless capture of both presets on the default model, each diffed against its baseline in
# traces/ under traces/gates.toml, then the gates between the modes (traces/gates-modes.toml).
# Writes the Markdown reports and the Chrome/Perfetto exports into a results folder (printed at
# the end) and exits 1 when a gate fails.
#   scripts/ci-gates.sh [RESULTS_DIR]   (default: results/ci)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
source traces/capture.env
out=${1:-results/ci}
mkdir -p "$out"
"$DECODER" capture --mode both --out "$out" "${CAPTURE_ARGS[@]}" > "$out/capture.txt"
cat "$out/capture.txt"
status=0
report="$out/report.md"
{
  echo "# decodescope CI: both modes against their baselines"
  echo
} > "$report"
for mode in generic fused; do
  "$PROFILER" export --format chrome "$out/$mode.json" "$out/$mode.chrome.json"
  echo "## $mode against traces/$mode.json" >> "$report"
  if ! "$PROFILER" diff "traces/$mode.json" "$out/$mode.json" --gates traces/gates.toml --format markdown \
      >> "$report"; then
    echo "GATE FAILED: $mode against its baseline" | tee -a "$report"
    status=1
  fi
done
echo "## generic (A) against fused (B)" >> "$report"
if ! "$PROFILER" diff "$out/generic.json" "$out/fused.json" --gates traces/gates-modes.toml \
    --ignore knobs --format markdown >> "$report"; then
  echo "GATE FAILED: between the modes" | tee -a "$report"
  status=1
fi
grep -E "^\| *(FAIL|WARN)|GATE FAILED|not comparable" "$report" || true
echo "results: $out (report.md, generic/fused .json and .chrome.json)"
exit $status
