#!/usr/bin/env bash
# The kept change of row 104 (docs/persistent-kernel.md) against the kernel before it: decoder-old.xz
# (c96c98f run with persistent_q8_rows=0, the kernel of 30d05dd) against decoder.xz (the commit under
# test), Q8_0, three rounds at each context, then one capture each at --timestamps dispatch.
# Run as: OUT=$OUT bash ab-sums.sh
set -uo pipefail
xz -dc .device-bin/decoder.xz > /tmp/new && xz -dc .device-bin/decoder-old.xz > /tmp/old && chmod +x /tmp/new /tmp/old
g=/tmp/q8.gguf
/tmp/new export-gguf qwen3-0.6b --dtype ${DTYPE:-q8_0} --out $g 2>&1 | tail -1
run() { # bin ctx ts
  local tun=""; [[ $1 == old ]] && tun="--tuning persistent_q8_rows=0"
  /tmp/$1 capture --model $g --mode fused --kernels persistent --timestamps $3 --context $2 --max-tokens 64 $tun \
    --out $OUT/$1-c$2-$3.json > /tmp/o.txt 2>&1
  echo "$1 ctx=$2 ts=$3 $(grep -E 'tokens / s|GPU time / token' /tmp/o.txt | tr -s ' ' | tr '\n' ' ')"
  grep -E "driver statistics|rror" /tmp/o.txt | cut -c1-200 | head -2
}
for ctx in 512 16384; do for round in 1 2 3; do for b in old new; do run $b $ctx token; done; done; done
for b in old new; do run $b 512 dispatch; done
for f in $OUT/*-c512-dispatch.json; do
  python3 - "$f" <<'PY'
import json,sys,collections
t=json.load(open(sys.argv[1]))
d=[r for r in t["tokens"] if r["phase"]=="decode"][2:]
acc=collections.Counter()
for r in d:
    for s in r.get("gpu_spans",[]):
        n=t["ops"][s[0]]["label"]; n=n.split(".")[-1]
        acc[n]+=s[2]
print(sys.argv[1].split("/")[-1], {k: round(v/len(d)/1e3,1) for k,v in acc.most_common(8)})
PY
done
rm -f $OUT/*token.json
