#!/usr/bin/env bash
# Q8_0 rows read as consecutive words against the staged row in the rows' byte layout: optimized
# decoders of 8d0d6cb (base) and 7c819eb (xb, the experiment) in .device-bin as decoder-base.xz and
# decoder-xb.xz. Run from the repository root on the GPU machine; its output is xb.txt.
set -uo pipefail
for b in base xb; do xz -dc .device-bin/decoder-$b.xz > /tmp/$b && chmod +x /tmp/$b; done
S=$OUT/xb.txt
/tmp/base export-gguf qwen3-0.6b --dtype q8_0 --out /tmp/q8.gguf 2>&1 | tail -1 | tee -a $S
run() { # bin ctx ts [tuning]
  /tmp/$1 capture --model /tmp/q8.gguf --mode fused --kernels persistent --timestamps $3 --context $2 --max-tokens 64 \
    ${4:+--tuning $4} --out /tmp/$1-$2-$3.json > /tmp/o.txt 2>&1
  echo "$1 ctx=$2 ts=$3 ${4:-} $(grep -E 'tokens / s|GPU time / token' /tmp/o.txt | tr -s ' ' | tr '\n' ' ')" | tee -a $S
  grep -iE "driver statistics|error" /tmp/o.txt | cut -c1-300 | head -2 | tee -a $S
  if [[ $3 == dispatch ]]; then python3 traces/bench/2026-12-02-quant-q8-rows/phases.py /tmp/$1-$2-$3.json | tee -a $S; fi
}
for b in base xb; do
  /tmp/$b run --model /tmp/q8.gguf --backend vulkan --mode fused --kernels persistent --max-tokens 32 --ignore-eos --dump /tmp/p-$b.st > /dev/null 2>&1
done
/tmp/base run --model /tmp/q8.gguf --backend vulkan --mode fused --max-tokens 32 --ignore-eos --dump /tmp/f.st > /dev/null 2>&1
for b in base xb; do echo "CHECK $b vs fused: $(python3 traces/bench/2026-12-02-quant-units-two-rows/cmp.py /tmp/p-$b.st /tmp/f.st)" | tee -a $S; done
for ctx in 512 16384; do for r in 1 2; do for b in base xb; do run $b $ctx token; done; done; done
for ctx in 512 16384; do for b in base xb; do run $b $ctx dispatch; done; done
for b in base xb; do run $b 512 token persistent_wg=1024; done
