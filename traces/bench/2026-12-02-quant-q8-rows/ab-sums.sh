#!/usr/bin/env bash
# Row 104 (docs/persistent-kernel.md) against the kernel before it: .device-bin/decoder-old.xz (a
# build of c96c98f run with persistent_q8_rows=0, the kernel of 30d05dd) and .device-bin/decoder.xz
# (row 104) in turns on qwen3-0.6b at Q8_0, three rounds at each context, then one run each with
# phase clocks (summed by phases.py). Writes traces into $OUT:
#   OUT=DIR bash ab-sums.sh
set -uo pipefail
xz -dc .device-bin/decoder.xz > /tmp/new && xz -dc .device-bin/decoder-old.xz > /tmp/old && chmod +x /tmp/new /tmp/old
g=/tmp/q8.gguf
/tmp/new export-gguf qwen3-0.6b --dtype ${DTYPE:-q8_0} --out $g 2>&1 | tail -1
run() { # bin ctx ts
  local tun=""; [[ $1 == old ]] && tun="--tuning persistent_q8_rows=0"
  /tmp/$1 capture --model $g --mode fused --kernels persistent --timestamps $3 --context $2 --max-tokens 64 $tun \
    --out $OUT/$1-c$2-$3.json > /tmp/o.txt 2>&1
  echo "$1 ctx=$2 ts=$3 $(grep -E 'tokens / s|GPU time / token' /tmp/o.txt | tr -s ' ' | tr '\n' ' ')"
  grep -E "driver statistics|rror" /tmp/o.txt | cut -c1-200 | head -2
}
for ctx in 512 16384; do for round in 1 2 3; do for b in old new; do run $b $ctx token; done; done; done
for b in old new; do run $b 512 dispatch; done
for f in $OUT/*-c512-dispatch.json; do
  python3 "$(dirname "$0")/phases.py" "$f"
done
rm -f $OUT/*token.json
