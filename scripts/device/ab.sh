#!/usr/bin/env bash
# A/B of the persistent token kernel on the lent GPU: for each context, binary and tuning setting,
# one `decoder capture` at dispatch timestamps (phase clocks) and its `profiler stats`, so every
# variant's phase table comes from the same machine in the same command. Run from the repository
# root there, after `source .gl/enter.sh`:
#
#   BINS=".device-bin/decoder .device-bin/decoder-base" SETTINGS="persistent_roll=0 persistent_roll=3" \
#     scripts/device/ab.sh OUT_DIR [CONTEXT...]
#
# BINS: decoder binaries (default .device-bin/decoder); SETTINGS: DECODESCOPE_TUNING values, `-`
# for none (default `-`); contexts default to 512; MODEL (qwen3-0.6b), TOKENS (64) and ROUNDS (1:
# rounds of the whole list, interleaved, to see the noise). PROFILER defaults to
# .device-bin/profiler.
#
# OUT_DIR/ab.txt: every capture's output and stats; OUT_DIR/ab-summary.txt: one line per run
# (median GPU µs per token, each phase's µs per token, the binary's size and registers, and the
# generated text, which must be the same wherever the variants compute the same thing).
set -euo pipefail
out=${1:?usage: $0 OUT_DIR [CONTEXT...]}
shift
contexts=("$@")
[ ${#contexts[@]} -gt 0 ] || contexts=(512)
read -r -a bins <<< "${BINS:-.device-bin/decoder}"
read -r -a settings <<< "${SETTINGS:--}"
profiler=${PROFILER:-.device-bin/profiler}
work=${WORK:-/tmp/ab}
mkdir -p "$out" "$work"
log=$out/ab.txt
summary=$out/ab-summary.txt
: > "$log"
: > "$summary"
for round in $(seq 1 "${ROUNDS:-1}"); do
  for ctx in "${contexts[@]}"; do
    for b in "${bins[@]}"; do
      for s in "${settings[@]}"; do
        tuning=$s
        [ "$s" = "-" ] && tuning=
        name="r$round c$ctx $(basename "$b") ${s}"
        trace=$work/trace
        echo "=== $name" >> "$log"
        if ! DECODESCOPE_TUNING=$tuning "$b" capture --mode fused --kernels persistent --timestamps dispatch \
          --model "${MODEL:-qwen3-0.6b}" --context "$ctx" --max-tokens "${TOKENS:-64}" --out "$trace" \
          >> "$work/capture.txt" 2>&1; then
          cat "$work/capture.txt" >> "$log"
          echo "$name: capture failed (see ab.txt)" >> "$summary"
          : > "$work/capture.txt"
          continue
        fi
        cat "$work/capture.txt" >> "$log"
        "$profiler" stats "$trace" > "$work/stats.txt" 2>&1 || true
        cat "$work/stats.txt" >> "$log"
        gpu=$(awk '/^  gpu_us /{print $5, $6; exit}' "$work/stats.txt")
        phases=$(awk '/^  token\//{printf "%s=%s%s ", $1, $4, $5}' "$work/stats.txt" | sed 's/token\///g')
        code=$(grep -m1 -o 'driver statistics): .*' "$work/capture.txt" | cut -c21-140 || true)
        text=$(grep -m1 '^fused: ' "$work/capture.txt" | cut -c1-60 || true)
        echo "$name | gpu $gpu | $phases| $code | $text" >> "$summary"
        : > "$work/capture.txt"
      done
    done
  done
done
cat "$summary"
