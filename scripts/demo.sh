#!/usr/bin/env bash
# The main job: set up, build, list the Vulkan devices, then capture a real model in both
# execution modes and print the A/B table of per-decode-token medians and the generated text.
# The model is SmolLM2-135M-Instruct, fetched once by scripts/fetch-smollm2.sh and asked a
# question in its chat template; when it cannot be fetched, one line says why and the demo
# captures the synthetic `tiny` model instead (scripts/demo-model.sh decides). 16 decode tokens
# unless --max-tokens says otherwise. The build is the `demo` profile (Cargo.toml: unoptimized,
# under 2 minutes on two cores); scripts/test.sh builds the dev profile beside it.
#   scripts/demo.sh [extra flags for `decoder capture`, e.g. --max-tokens 64, --model tiny]
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
source scripts/env.sh
echo "building (the first build takes about 2 minutes on 2 cores)"
cargo build --profile demo -p decoder -p profiler -p decodescope-layer --quiet  # the layer: for `profiler record`
DECODER=$CARGO_TARGET_DIR/demo/decoder
PROFILER=$CARGO_TARGET_DIR/demo/profiler
"$DECODER" devices
out=results/demo
mkdir -p "$out"
mapfile -t model_args < <(DEMO_FETCH_LOG="$out/fetch-smollm2.log" ./scripts/demo-model.sh "$DECODER" "$@")
tokens=(--max-tokens 16)
for arg in "$@"; do
  case $arg in
    --max-tokens | --max-tokens=*) tokens=() ;;
  esac
done
"$DECODER" capture --mode both --timestamps dispatch --out "$out" "${tokens[@]}" "${model_args[@]}" "$@"
echo
echo "traces: $out/generic.json $out/fused.json"
echo "compare: $PROFILER diff $out/generic.json $out/fused.json"
echo "view:    cargo run -p viewer -- $out/generic.json $out/fused.json"
