#!/usr/bin/env bash
# Decode-attention tuning on the lent GPU: `decoder bench` at one context under several
# DECODESCOPE_TUNING settings (split count, tile, workgroup size, prefetch), printing one row each.
#   scripts/device/tune.sh OUT_DIR [CONTEXT] [SETTING...]
set -euo pipefail
out=${1:?usage: $0 OUT_DIR [CONTEXT] [SETTING...]}
ctx=${2:-16384}
shift 2 || shift $#
bins=${BINS:-.device-bin/decoder}
settings=("$@")
[ ${#settings[@]} -gt 0 ] || settings=("")
for b in $bins; do
  for s in "${settings[@]}"; do
    echo "== $b ${s:-defaults}"
    SECONDS=0
    DECODESCOPE_TUNING=$s "$b" bench --model "${MODEL:-qwen3-0.6b}" --mode fused --context "$ctx" \
      --batch "${BATCH:-1}" --kv "${KV:-contiguous}" --max-tokens "${TOKENS:-16}" --out "$out/t" 2>&1 |
      grep -E "^\| fused|rror" || true
    echo "   ($SECONDS s including the prompt)"
  done
done
