# Sourced by the scripts: cargo on PATH and the build directory kept outside the checkout, so a
# fresh clone (CI) reuses the compiled dependencies of earlier runs on the same machine.
export PATH="$HOME/.cargo/bin:$PATH"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/decodescope/target}"
export DECODER="$CARGO_TARGET_DIR/debug/decoder"
export PROFILER="$CARGO_TARGET_DIR/debug/profiler"
