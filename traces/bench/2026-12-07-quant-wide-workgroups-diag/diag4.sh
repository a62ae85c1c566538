#!/usr/bin/env bash
# The K-quants' lost poll read from the lanes (G), with acquire polls (GF1) and by the engine (H),
# and Q4_0 in wider workgroups. Builds: H = a35beb2; DA, G, GF1 = scratch builds of bb6cfd1 (README).
set -uo pipefail
for b in DA G GF1 H; do xz -dc .device-bin/dec-$b.xz > /tmp/dec-$b; chmod +x /tmp/dec-$b; done
S=$OUT/diag4.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a $S
/tmp/dec-H export-gguf qwen3-0.6b --dtype q4_k_m --out /tmp/q4.gguf 2>&1 | tail -1 | tee -a $S
/tmp/dec-H export-gguf qwen3-0.6b --dtype q4_0 --out /tmp/q40.gguf 2>&1 | tail -1 | tee -a $S
run() { # bin model ctx tuning
  b=$1 m=$2 c=$3 t=$4
  DS_DIAG=1 timeout 80 /tmp/dec-$b capture --model $m --mode fused --kernels persistent --timestamps token --context $c --max-tokens 32 --tuning $t --out /tmp/t.json > /tmp/o.txt 2>&1
  rc=$?
  ids=$(python3 -c "import json;t=json.load(open('/tmp/t.json'));print(t['meta']['run']['generated_ids'][:32])" 2>/dev/null | md5sum | cut -c1-8)
  echo "rc=$rc $b $(basename $m) ctx=$c $t ids=$ids $(grep -E 'tokens / s|GPU time / token' /tmp/o.txt | tr -s ' ' | tr '\n' ' ')" | tee -a $S
  grep -E "^error|DIAG|Register|spill" /tmp/o.txt | cut -c1-1500 | head -70 | tee -a $S
  rm -f /tmp/t.json
}
run H /tmp/q4.gguf 512 persistent_wg=512
run G /tmp/q4.gguf 512 persistent_wg=512
run GF1 /tmp/q4.gguf 512 persistent_wg=512
run GF1 /tmp/q4.gguf 16384 persistent_wg=1024
run GF1 /tmp/q4.gguf 512 persistent_wg=256
run DA /tmp/q4.gguf 512 persistent_wg=256
for c in 512 16384; do for w in 256 512 1024; do run H /tmp/q40.gguf $c persistent_wg=$w; done; done
