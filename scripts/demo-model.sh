#!/usr/bin/env bash
# Picks the model that scripts/demo.sh captures and prints its `decoder capture` arguments, one a
# line, on stdout:
#   - none when the demo's arguments already name a model (`--model` overrides);
#   - SmolLM2-135M-Instruct with a question in its chat template when scripts/fetch-smollm2.sh
#     has it or can fetch it, so the table shows a real model and the text makes sense;
#   - else `--model tiny` (the synthetic model, whose text is random), with one line on stderr
#     that says why.
#
#   scripts/demo-model.sh PATH/TO/decoder [the demo's arguments...]
#
# The fetch's own output goes to $DEMO_FETCH_LOG (default: a temporary file) and its last line to
# stderr. Exits 0 whatever the outcome, 2 on a bad command line.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ $# -lt 1 ]; then
  echo "usage: $0 PATH/TO/decoder [decoder capture arguments...]" >&2
  exit 2
fi
decoder=$1
shift

for arg in "$@"; do
  case $arg in
    --model | --model=*) exit 0 ;;
  esac
done

log=${DEMO_FETCH_LOG:-$(mktemp "${TMPDIR:-/tmp}/demo-fetch-smollm2.XXXXXX")}
echo "demo: getting SmolLM2-135M-Instruct (a 93 MB download on first use)" >&2
if ./scripts/fetch-smollm2.sh "$decoder" >"$log" 2>&1; then
  tail -n 1 "$log" >&2
  printf '%s\n' --model smollm2 --chat --prompt "What is the capital of France?"
else
  why=$(grep -v '^[[:space:]]*$' "$log" | tail -n 1 || true)
  why=${why#fetch-smollm2: }
  echo "demo: SmolLM2 is not available: ${why:-the fetch failed}; capturing the synthetic" \
    "tiny model instead, whose generated text is random (log: $log)" >&2
  printf '%s\n' --model tiny
fi
