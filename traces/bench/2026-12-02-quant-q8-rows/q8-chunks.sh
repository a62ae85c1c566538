#!/usr/bin/env bash
# Q8_0 chunked rows A/B (rows 102 and 103 of docs/persistent-kernel.md): --tuning persistent_q8_rows
# 0 / 2 / 4 at contexts 512 and 16384, on the device with the decoder of the commit under test in
# .device-bin/decoder.xz; OUT is the device tool's output folder. Run as: OUT=$OUT bash q8-chunks.sh
set -uo pipefail
xz -dc .device-bin/decoder.xz > /tmp/decoder && chmod +x /tmp/decoder
D=/tmp/decoder
g=/tmp/q8.gguf
time $D export-gguf qwen3-0.6b --dtype q8_0 --out $g 2>&1 | tail -2
run() { # ctx rows ts
  $D capture --model $g --mode fused --kernels persistent --timestamps $3 --context $1 --max-tokens 64 \
    --tuning persistent_q8_rows=$2 --out $OUT/c$1-r$2-$3.json > /tmp/o.txt 2>&1
  echo "ctx=$1 rows=$2 ts=$3 $(grep -E 'tokens / s|GPU time / token' /tmp/o.txt | tr -s ' ' | tr '\n' ' ')"
  grep -iE "driver statistics|error" /tmp/o.txt | cut -c1-400 | head -3
}
for ctx in 512 16384; do
  for round in 1 2; do
    for r in 0 2 4; do run $ctx $r token; done
  done
done
for r in 0 2 4; do run 512 $r dispatch; done
for f in $OUT/c512-r*-dispatch.json; do
  python3 - "$f" <<'PY'
import json,sys,collections
t=json.load(open(sys.argv[1]))
d=[r for r in t["tokens"] if r["phase"]=="decode"][2:]
acc=collections.Counter()
for r in d:
    for s in r.get("gpu_spans",[]):
        name=t["ops"][s[0]]["label"]
        dur=s[2]
        n=name.split(".")[-1] if "." in name else name
        acc[n]+=dur
print(sys.argv[1].split("/")[-1], {k: round(v/len(d)/1e3,1) for k,v in acc.most_common(8)})
PY
done
ls -la $OUT
