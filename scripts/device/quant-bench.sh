#!/usr/bin/env bash
# Quantized weights beside llama.cpp on a GPU machine: qwen3-0.6b exported by
# `decoder export-gguf --dtype` at each of $DTYPES (default: q8_0 q4_k_m), and `decoder bench
# --model FILE.gguf --llama-server` on each file (the decoder and llama.cpp read the same
# blocks), then `llama-1b` (Llama 3 RoPE scaling, exported with llama.cpp's rope_freqs tensor) at
# f16 and at each of $LLAMA_DTYPES (default: q8_0) beside llama.cpp, the quantized files read by
# both as they are. Runs from the repository root with an optimized decoder (README "On a GPU"):
#
#   scripts/device/quant-bench.sh OUT_DIR
#
# Expects .device-bin/decoder (override with DECODER) and llama-server at $LLAMA_SERVER (default
# /tmp/llama, unpacked from .device-bin/llama.tar.xz when missing). $CONTEXTS (default 512,16384),
# $TOKENS (default 256) set the bench, which runs the fused preset and the persistent kernel on
# every file; ONLY=qwen or ONLY=llama-1b runs one half. Each bench writes
# OUT_DIR/NAME/{bench.json,bench.md} and its plots.
set -euo pipefail
out=${1:?usage: $0 OUT_DIR}
bin=.device-bin
decoder=${DECODER:-$bin/decoder}
llama=${LLAMA_SERVER:-/tmp/llama}
dtypes=${DTYPES:-q8_0 q4_k_m}
contexts=${CONTEXTS:-512,16384}
tokens=${TOKENS:-256}
work=${WORK:-/tmp/quant-bench}
if [[ -z ${LLAMA_SERVER:-} && ! -e $llama/llama-server && -f $bin/llama.tar.xz ]]; then
  mkdir -p "$llama"
  tar -xJf "$bin/llama.tar.xz" -C "$llama" --strip-components=1
fi
for f in "$decoder" "$llama/llama-server"; do
  [[ -e $f ]] || { echo "quant-bench: $f is missing (see the header of $0)" >&2; exit 2; }
done
mkdir -p "$out" "$work"
export LD_LIBRARY_PATH="$llama${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
"$decoder" devices

bench() {
  local name=$1
  shift
  "$decoder" bench "$@" --context "$contexts" --max-tokens "$tokens" \
    --llama-server "$llama/llama-server" --out "$out/$name" 2>&1 | tail -n 30
}

only=${ONLY:-}
[[ $only == llama-1b ]] && dtypes=
for dtype in $dtypes; do
  gguf=$work/qwen3-0.6b-$dtype.gguf
  [[ -f $gguf ]] || "$decoder" export-gguf qwen3-0.6b --dtype "$dtype" --out "$gguf"
  bench "qwen3-0.6b-$dtype" --model "$gguf" --mode fused --also fused:kernels=persistent
done
[[ $only == qwen ]] && exit 0
bench llama-1b-f16 --model llama-1b --mode fused --also fused:kernels=persistent
for dtype in ${LLAMA_DTYPES-q8_0}; do
  gguf=$work/llama-1b-$dtype.gguf
  [[ -f $gguf ]] || "$decoder" export-gguf llama-1b --dtype "$dtype" --out "$gguf"
  bench "llama-1b-$dtype" --model "$gguf" --mode fused --also fused:kernels=persistent
done
