#!/usr/bin/env bash
# The Q4_K_M kernel at persistent_wg 512 and 1024 with two scratch builds of 8b78477's decoder:
# V1 reads every layer's Q, K and V rows one row at a time (`units_qkv` false in phase_qkv), V2
# reads no rows by units at all (`rows_in_units` false); A is 8b78477 itself. Run from the
# repository root on the GPU machine; its output is diag2.txt.
set -uo pipefail
for b in A V1 V2; do xz -dc .device-bin/dec-$b.xz > /tmp/dec-$b; chmod +x /tmp/dec-$b; done
S=$OUT/diag2.txt
/tmp/dec-A export-gguf qwen3-0.6b --dtype q4_k_m --out /tmp/q4.gguf 2>&1 | tail -1 | tee -a $S
run() { # build model context tuning
  b=$1 m=$2 c=$3 t=$4
  timeout 70 /tmp/dec-$b capture --model /tmp/$m.gguf --mode fused --kernels persistent --timestamps token --context $c --max-tokens 32 --tuning $t --out /tmp/t.json > /tmp/o.txt 2>&1
  echo "rc=$? $b $m ctx=$c $t $(grep -E 'tokens / s|GPU time / token' /tmp/o.txt | tr -s ' ' | tr '\n' ' ')" | tee -a $S
  grep -E "error|statistics" /tmp/o.txt | cut -c1-400 | head -1 | tee -a $S
}
run V1 q4 512 persistent_wg=512
run V2 q4 512 persistent_wg=512
run A q4 512 persistent_wg=256
run V2 q4 512 persistent_wg=256
run V1 q4 512 persistent_wg=1024
run V2 q4 512 persistent_wg=1024
