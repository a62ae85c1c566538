#!/usr/bin/env bash
# Q4_K_M at persistent_wg 1024 and 512 (the error the steps end with), and Q8_0 at 256 and 1024 at
# 8192 and 2048 positions, with the decoder of wg.sh. Its output is diag.txt.
set -uo pipefail
xz -dc .device-bin/decoder-base.xz > /tmp/base && chmod +x /tmp/base
D=/tmp/base
S=$OUT/diag.txt
$D export-gguf qwen3-0.6b --dtype q8_0 --out /tmp/q8.gguf 2>&1 | tail -1 | tee -a $S
$D export-gguf qwen3-0.6b --dtype q4_k_m --out /tmp/q4.gguf 2>&1 | tail -1 | tee -a $S
run() { # model ctx wg
  $D capture --model /tmp/$1.gguf --mode fused --kernels persistent --timestamps token --context $2 --max-tokens 64 \
    --tuning persistent_wg=$3 --out /tmp/t.json > /tmp/o.txt 2>&1
  echo "rc=$? $1 ctx=$2 wg=$3 $(grep -E 'tokens / s|GPU time / token' /tmp/o.txt | tr -s ' ' | tr '\n' ' ')" | tee -a $S
  grep -iE "driver statistics" /tmp/o.txt | cut -c1-300 | head -1 | tee -a $S
  grep -viE "driver statistics" /tmp/o.txt | grep -iE "error|fail|refus|status|lost|spin" | head -5 | tee -a $S
}
run q4 512 1024
tail -20 /tmp/o.txt >> $S
run q4 512 512
for wg in 256 1024; do run q8 8192 $wg; done
for wg in 256 1024; do run q8 2048 $wg; done
