#!/usr/bin/env bash
# The fix: P1 = a35beb2 with the attention's poll per lane (9ab97f1's kernel), P2 = a35beb2 with the
# layer loop from a push constant (scratch), P3 = both, H = a35beb2; and phase clocks at 16K.
set -uo pipefail
for b in H P1 P2 P3; do xz -dc .device-bin/dec-$b.xz > /tmp/dec-$b; chmod +x /tmp/dec-$b; done
S=$OUT/diagp.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a $S
/tmp/dec-H export-gguf qwen3-0.6b --dtype q4_0 --out /tmp/q40.gguf 2>&1 | tail -1 | tee -a $S
run() { # bin model ctx kernels tuning
  b=$1 m=$2 c=$3 k=$4 t=$5
  s0=$(date +%s.%N)
  timeout 60 /tmp/dec-$b capture --model $m --mode fused --kernels $k --timestamps token --context $c --max-tokens 32 --tuning $t --out /tmp/t.json > /tmp/o.txt 2>&1
  rc=$?
  el=$(python3 -c "print(round($(date +%s.%N)-$s0,1))")
  ids=$(python3 -c "import json;t=json.load(open('/tmp/t.json'));print(t['meta']['run']['generated_ids'][:32])" 2>/dev/null | md5sum | cut -c1-8)
  echo "rc=$rc ${el}s $b $(basename $m) ctx=$c $k $t ids=$ids $(grep -E 'tokens / s|GPU time / token' /tmp/o.txt | tr -s ' ' | tr '\n' ' ')" | tee -a $S
  grep -E "^error|Register" /tmp/o.txt | cut -c1-400 | head -4 | tee -a $S
  rm -f /tmp/t.json
}
run H /tmp/q40.gguf 512 fused persistent_wg=256
run H /tmp/q40.gguf 512 persistent persistent_wg=256
run H /tmp/q40.gguf 512 persistent persistent_wg=512
for b in P1 P2 P3; do
  run $b /tmp/q40.gguf 512 persistent persistent_wg=512
  run $b /tmp/q40.gguf 512 persistent persistent_wg=1024
  run $b /tmp/q40.gguf 16384 persistent persistent_wg=1024
done
/tmp/dec-H export-gguf qwen3-0.6b --dtype q4_k_m --out /tmp/q4.gguf 2>&1 | tail -1 | tee -a $S
for b in P1 P2 P3; do run $b /tmp/q4.gguf 512 persistent persistent_wg=1024; done
run P1 /tmp/q40.gguf 512 persistent persistent_wg=256
# Phase clocks at 16K, 256 invocations: where Q4_0 and Q4_K_M lose to Q8_0.
/tmp/dec-H export-gguf qwen3-0.6b --dtype q8_0 --out /tmp/q8.gguf 2>&1 | tail -1 | tee -a $S
for m in q8 q4 q40; do
  timeout 60 /tmp/dec-H capture --model /tmp/$m.gguf --mode fused --kernels persistent --timestamps dispatch --context 16384 --max-tokens 32 --out /tmp/ph-$m.json > /tmp/o.txt 2>&1
  echo "phases $m 16384 $(grep -E 'tokens / s' /tmp/o.txt | tr -s ' ')" | tee -a $S
  python3 traces/bench/2026-12-02-quant-q8-rows/phases.py /tmp/ph-$m.json | tee -a $S
done
