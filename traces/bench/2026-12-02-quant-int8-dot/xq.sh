#!/usr/bin/env bash
# Q8_0 rows against an 8-bit input (persistent_xq 0 / 1), contexts 512 and 16384, with an
# optimized decoder of commit 64b68fb (the tuning key exists only there) in .device-bin/decoder.xz.
# Its output is xq.txt.
set -uo pipefail
xz -dc .device-bin/decoder.xz > /tmp/decoder && chmod +x /tmp/decoder
D=/tmp/decoder
g=/tmp/q8.gguf
S=$OUT/xq.txt
$D export-gguf qwen3-0.6b --dtype q8_0 --out $g 2>&1 | tail -1 | tee -a $S
run() { # ctx xq ts
  $D capture --model $g --mode fused --kernels persistent --timestamps $3 --context $1 --max-tokens 64 \
    --tuning persistent_xq=$2 --out /tmp/c$1-x$2-$3.json > /tmp/o.txt 2>&1
  echo "ctx=$1 xq=$2 ts=$3 $(grep -E 'tokens / s|GPU time / token' /tmp/o.txt | tr -s ' ' | tr '\n' ' ')" | tee -a $S
  grep -iE "driver statistics|error" /tmp/o.txt | cut -c1-300 | head -2 | tee -a $S
}
for ctx in 512 16384; do
  for round in 1 2; do
    for x in 0 1; do run $ctx $x token; done
  done
done
for x in 0 1; do run 512 $x dispatch; python3 traces/bench/2026-12-02-quant-q8-rows/phases.py /tmp/c512-x$x-dispatch.json | tee -a $S; done
for x in 0 1; do
  $D run --model $g --backend vulkan --mode fused --kernels persistent --max-tokens 32 --ignore-eos --tuning persistent_xq=$x --dump /tmp/p$x.st > /dev/null 2>&1
done
$D run --model $g --backend vulkan --mode fused --max-tokens 32 --ignore-eos --dump /tmp/f.st > /dev/null 2>&1
for x in 0 1; do echo "CHECK xq=$x vs fused: $(python3 traces/bench/2026-12-02-quant-units-two-rows/cmp.py /tmp/p$x.st /tmp/f.st)" | tee -a $S; done
