#!/usr/bin/env bash
# The main job: set up, build, list the Vulkan devices, then capture the default model in both
# execution modes and print the A/B table of per-decode-token medians and the generated text.
#   scripts/demo.sh [extra flags for `decoder capture`, e.g. --model smollm2 --max-tokens 64]
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
source scripts/env.sh
echo "building (the first build compiles shaderc from source: about 10 minutes on 2 cores)"
cargo build -p decoder -p profiler --quiet
"$DECODER" devices
out=results/demo
"$DECODER" capture --mode both --timestamps dispatch --out "$out" "$@"
echo
echo "traces: $out/generic.json $out/fused.json"
echo "compare: $PROFILER diff $out/generic.json $out/fused.json"
echo "view:    cargo run -p viewer -- $out/generic.json $out/fused.json"
