#!/usr/bin/env bash
# The long-context / paged-KV sweep on the lent GPU machine (it has no Rust toolchain: build the
# release binaries here first, see README "On a GPU"). Run from the repository root there, after
# `source .gl/enter.sh`, with the release `decoder` in .device-bin/:
#
#   scripts/device/kv-sweep.sh OUT_DIR [CONTEXTS] [BATCHES]
#
# One `decoder bench` process measures the fused preset at every context and batch size for the
# contiguous layout and both paged attention paths (fragmented tables), with llama.cpp's Vulkan
# llama-server beside it when LLAMA_SERVER names its folder (.device-bin/llama.tar.xz unpacked);
# then the generic preset beside the fused one at GENERIC_CONTEXT (the A/B at long context).
# Writes OUT_DIR/kv/ and OUT_DIR/generic/ (bench.json, bench.md, one trace per point).
set -euo pipefail
out=${1:?usage: $0 OUT_DIR [CONTEXTS] [BATCHES]}
contexts=${2:-1024,4096,16384,32768}
batches=${3:-1,4}
bin=${DECODER:-.device-bin/decoder}
model=${MODEL:-qwen3-0.6b}
peer=()
if [[ -n ${LLAMA_SERVER:-} ]]; then
  peer=(--llama-server "$LLAMA_SERVER")
fi
mkdir -p "$out"
"$bin" devices
"$bin" bench --model "$model" --mode fused --context "$contexts" --batch "$batches" \
  --kv contiguous,paged --paged-attention gather,fused --max-tokens "${TOKENS:-64}" \
  "${peer[@]}" --out "$out/kv"
"$bin" bench --model "$model" --mode generic,fused --context "${GENERIC_CONTEXT:-16384}" --batch 1 \
  --max-tokens "${GENERIC_TOKENS:-16}" --breakdown 0 --out "$out/generic"
