#!/usr/bin/env bash
# After a lost wait, what the tagged QKV words hold: scratch builds of bb6cfd1 whose engine, when a
# step's status word names a lost wait and DS_DIAG is set, reads back the sync words (arrive, done,
# fail, epoch) and every tagged QKV word and prints those whose tag is not layer 0's for the step
# (epoch x layers + 1). DA: bb6cfd1's kernel; DV2: no rows read by units; DV3: a QKV pass whose
# two rows have different types (a Q4_K row with a Q6_K one) read as two single rows. Run from the
# repository root on the GPU machine; its output is diag3.txt. (Its `ids` column is empty: the
# script looked for the generated ids at the wrong key of the trace.)
set -uo pipefail
for b in DA DV2 DV3; do xz -dc .device-bin/dec-$b.xz > /tmp/dec-$b; chmod +x /tmp/dec-$b; done
S=$OUT/diag3.txt
/tmp/dec-DA export-gguf qwen3-0.6b --dtype q4_k_m --out /tmp/q4.gguf 2>&1 | tail -1 | tee -a $S
run() { # build context tuning
  b=$1 c=$2 t=$3
  DS_DIAG=1 timeout 80 /tmp/dec-$b capture --model /tmp/q4.gguf --mode fused --kernels persistent --timestamps token --context $c --max-tokens 32 --tuning $t --out /tmp/t.json > /tmp/o.txt 2>&1
  rc=$?
  ids=$(python3 -c "import json;t=json.load(open('/tmp/t.json'));print(t['meta'].get('generated_ids', t.get('generated_ids'))[:32])" 2>/dev/null | md5sum | cut -c1-8)
  echo "rc=$rc $b ctx=$c $t ids=$ids $(grep -E 'tokens / s|GPU time / token' /tmp/o.txt | tr -s ' ' | tr '\n' ' ')" | tee -a $S
  grep -E "^error|DIAG|Register" /tmp/o.txt | cut -c1-1500 | head -4 | tee -a $S
  rm -f /tmp/t.json
}
run DA 512 persistent_wg=256
run DA 512 persistent_wg=512
run DV3 512 persistent_wg=512
run DV2 512 persistent_wg=512
run DV3 512 persistent_wg=1024
run DV3 16384 persistent_wg=1024
run DA 16384 persistent_wg=256
