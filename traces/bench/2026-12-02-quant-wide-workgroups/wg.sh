#!/usr/bin/env bash
# The persistent kernel at persistent_wg 256, 512 and 1024: qwen3-0.6b at Q8_0, Q4_K_M and f16, with
# an optimized decoder of 8d0d6cb in .device-bin/decoder-base.xz (before the default of 0656b17).
# Run from the repository root on the GPU machine; its output is wg.txt.
set -uo pipefail
xz -dc .device-bin/decoder-base.xz > /tmp/base && chmod +x /tmp/base
D=/tmp/base
S=$OUT/wg.txt
$D export-gguf qwen3-0.6b --dtype q8_0 --out /tmp/q8.gguf 2>&1 | tail -1 | tee -a $S
$D export-gguf qwen3-0.6b --dtype q4_k_m --out /tmp/q4.gguf 2>&1 | tail -1 | tee -a $S
run() { # model ctx ts wg
  m=$1; [[ $m == f16 ]] && mp=qwen3-0.6b || mp=/tmp/$m.gguf
  $D capture --model $mp --mode fused --kernels persistent --timestamps $3 --context $2 --max-tokens 64 \
    --tuning persistent_wg=$4 --out /tmp/$1-$2-$3-$4.json > /tmp/o.txt 2>&1
  echo "$1 ctx=$2 ts=$3 wg=$4 $(grep -E 'tokens / s|GPU time / token' /tmp/o.txt | tr -s ' ' | tr '\n' ' ')" | tee -a $S
  grep -iE "driver statistics|error" /tmp/o.txt | cut -c1-300 | head -1 | tee -a $S
  if [[ $3 == dispatch ]]; then python3 traces/bench/2026-12-02-quant-q8-rows/phases.py /tmp/$1-$2-$3-$4.json | tee -a $S; fi
}
for ctx in 512 4096 16384; do for wg in 256 1024; do run q8 $ctx token $wg; done; done
run q8 512 token 512
for ctx in 512 16384; do for wg in 256 1024; do run q4 $ctx token $wg; done; done
for wg in 256 1024; do run f16 512 token $wg; done
run q8 512 dispatch 1024
run q8 16384 dispatch 1024
run q4 512 dispatch 1024
run q4 512 dispatch 256
