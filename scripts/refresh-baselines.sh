#!/usr/bin/env bash
# Refreshes the baseline traces in traces/ after an intended change, and prints the diff table of
# old against new for the commit message:
#   scripts/refresh-baselines.sh > /tmp/diff.md && git commit -F /tmp/diff.md traces/
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
source traces/capture.env
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$DECODER" capture --mode both --out "$tmp" "${CAPTURE_ARGS[@]}" >&2
echo "Refresh the baseline traces"
echo
for mode in generic fused; do
  if [ -f "traces/$mode.json" ]; then
    echo "## $mode: old baseline (A) against new (B)"
    "$PROFILER" diff "traces/$mode.json" "$tmp/$mode.json" --format markdown || true
  fi
  cp "$tmp/$mode.json" "traces/$mode.json"
done
