#!/usr/bin/env bash
# Q4_K_M: the persistent kernel's units with QR = 4 rows in flight (decoder: the kernel of ff62daf)
# against QR = 2 (decoder-qr2: the same with shaders/persistent_quant.glsl's QR = 2, as committed),
# contexts 512 and 16384; phase clocks at 16K, with Q8_0's. Optimized decoders in .device-bin as
# .xz; the output is ab.txt.
set -uo pipefail
for b in decoder decoder-qr2; do xz -dc .device-bin/$b.xz > /tmp/$b && chmod +x /tmp/$b; done
S=$OUT/ab.txt
/tmp/decoder export-gguf qwen3-0.6b --dtype q4_k_m --out /tmp/q4.gguf 2>&1 | tail -1 | tee -a $S
/tmp/decoder export-gguf qwen3-0.6b --dtype q8_0 --out /tmp/q8.gguf 2>&1 | tail -1 | tee -a $S
run() { # bin gguf ctx ts
  /tmp/$1 capture --model /tmp/$2.gguf --mode fused --kernels persistent --timestamps $4 --context $3 --max-tokens 64 \
    --out /tmp/$1-$2-$3-$4.json > /tmp/o.txt 2>&1
  echo "$1 $2 ctx=$3 ts=$4 $(grep -E 'tokens / s|GPU time / token' /tmp/o.txt | tr -s ' ' | tr '\n' ' ')" | tee -a $S
  grep -iE "driver statistics|error" /tmp/o.txt | cut -c1-300 | head -1 | tee -a $S
  if [[ $4 == dispatch ]]; then python3 traces/bench/2026-12-02-quant-q8-rows/phases.py /tmp/$1-$2-$3-$4.json | tee -a $S; fi
}
for ctx in 512 16384; do for b in decoder decoder-qr2; do run $b q4 $ctx token; done; done
for b in decoder decoder-qr2; do run $b q4 16384 dispatch; done
run decoder q8 16384 dispatch
for b in decoder decoder-qr2; do
  /tmp/$b run --model /tmp/q4.gguf --backend vulkan --mode fused --kernels persistent --max-tokens 32 --ignore-eos --dump /tmp/p-$b.st > /dev/null 2>&1
done
/tmp/decoder run --model /tmp/q4.gguf --backend vulkan --mode fused --max-tokens 32 --ignore-eos --dump /tmp/f.st > /dev/null 2>&1
for b in decoder decoder-qr2; do echo "CHECK $b vs fused: $(python3 traces/bench/2026-12-02-quant-units-two-rows/cmp.py /tmp/p-$b.st /tmp/f.st)" | tee -a $S; done
