#!/usr/bin/env bash
# The whole test suite, as CI runs it: setup, formatting and clippy, the SmolLM2 import (once),
# every crate's tests (GPU tests run on lavapipe with the validation layer), then the headless
# capture of both modes diffed against the baselines under traces/gates.toml.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
source scripts/env.sh
cargo fmt --all --check
cargo clippy --workspace --all-targets --quiet -- -D warnings
# Every binary and the capture layer's library (a cdylib, which --bins would skip), so that
# `profiler record` finds libdecodescope_layer.so beside itself.
cargo build --workspace --quiet
./scripts/fetch-smollm2.sh "$DECODER"
cargo test --workspace
./scripts/ci-gates.sh
