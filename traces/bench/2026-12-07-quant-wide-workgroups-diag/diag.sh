#!/usr/bin/env bash
# The Q4_K_M kernel at persistent_wg 512 and 1024 with the decoder of 8b78477 (decoder-A: a wait
# that runs out names itself), and with 8b78477's spin limit raised from 2^24 to 2^28 (decoder-B,
# a scratch build). Run from the repository root on the GPU machine; its output is diag.txt.
set -uo pipefail
for b in A B; do xz -dc .device-bin/decoder-$b.xz > /tmp/decoder-$b; chmod +x /tmp/decoder-$b; done
S=$OUT/diag.txt
/tmp/decoder-A devices 2>&1 | head -3 | tee -a $S
/tmp/decoder-A export-gguf qwen3-0.6b --dtype q4_k_m --out /tmp/q4.gguf 2>&1 | tail -1 | tee -a $S
/tmp/decoder-A export-gguf qwen3-0.6b --dtype q8_0 --out /tmp/q8.gguf 2>&1 | tail -1 | tee -a $S
run() { # build model context tuning
  b=$1 m=$2 c=$3 t=$4
  timeout 150 /tmp/decoder-$b capture --model /tmp/$m.gguf --mode fused --kernels persistent --timestamps token \
    --context $c --max-tokens 16 --tuning $t --out /tmp/t.json > /tmp/o.txt 2>&1
  echo "rc=$? $b $m ctx=$c $t $(grep -E 'tokens / s' /tmp/o.txt | tr -s ' ')" | tee -a $S
  grep -E "error|statistics|grid of" /tmp/o.txt | cut -c1-500 | head -4 | tee -a $S
}
run A q4 512 persistent_wg=256
run A q4 512 persistent_wg=512
run A q4 512 persistent_wg=512
run A q4 512 persistent_wg=1024
run A q8 512 persistent_wg=512
run A q4 512 persistent_wg=512,persistent_kv_stage=0
run A q4 512 persistent_wg=512,persistent_head_groups=1
run A q4 512 persistent_wg=512,persistent_res_copies=1
run A q4 512 persistent_wg=512,persistent_groups=66
run A q4 16384 persistent_wg=512
run B q4 512 persistent_wg=512
