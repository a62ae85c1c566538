#!/usr/bin/env bash
# The Q8_0 row reads of rows 102 and 103 (docs/persistent-kernel.md) against a block a lane: one
# decoder run with --tuning persistent_q8_rows 0, 2 and 4 in turns, at contexts 512 and 16384
# (tokens/s at --timestamps token), then at 512 with phase clocks (--timestamps dispatch, summed by
# phases.py). Reads the decoder from .device-bin/decoder.xz and writes traces into $OUT:
#   OUT=DIR bash q8-chunks.sh
set -uo pipefail
xz -dc .device-bin/decoder.xz > /tmp/decoder && chmod +x /tmp/decoder
D=/tmp/decoder
g=/tmp/q8.gguf
time $D export-gguf qwen3-0.6b --dtype q8_0 --out $g 2>&1 | tail -2
run() { # ctx rows ts
  $D capture --model $g --mode fused --kernels persistent --timestamps $3 --context $1 --max-tokens 64 \
    --tuning persistent_q8_rows=$2 --out $OUT/c$1-r$2-$3.json > /tmp/o.txt 2>&1
  echo "ctx=$1 rows=$2 ts=$3 $(grep -E 'tokens / s|GPU time / token' /tmp/o.txt | tr -s ' ' | tr '\n' ' ')"
  grep -iE "driver statistics|error" /tmp/o.txt | cut -c1-400 | head -3
}
for ctx in 512 16384; do
  for round in 1 2; do
    for r in 0 2 4; do run $ctx $r token; done
  done
done
for r in 0 2 4; do run 512 $r dispatch; done
for f in $OUT/c512-r*-dispatch.json; do
  python3 "$(dirname "$0")/phases.py" "$f"
done
ls -la $OUT
