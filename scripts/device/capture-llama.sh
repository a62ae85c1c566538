#!/usr/bin/env bash
# llama.cpp's Vulkan llama-server under the capture layer on the lent GPU machine, beside the
# decoder's two presets: per-decode-token counters of all three, and what each timestamp level of
# the layer costs llama-server in tokens/s. Run from the repository root there (it has no Rust
# toolchain: build the release binaries here first, README "On a GPU"):
#
#   scripts/device/capture-llama.sh OUT_DIR
#
# Expects .device-bin/profiler, .device-bin/libdecodescope_layer.so and .device-bin/decoder
# (override with PROFILER, LAYER, DECODER; `profiler record --layer` writes the layer's manifest
# itself) and llama-server unpacked at $LLAMA_SERVER (default /tmp/llama: the folder holding
# llama-server and its libraries, unpacked from .device-bin/llama.tar.xz when that is there and
# /tmp/llama is not). python3 drives the server.
#
# 1. `decoder export-gguf` writes $MODEL (default qwen3-0.6b, synthesized on first use) as GGUF.
# 2. llama-server answers one /completion request: a prompt of $CONTEXT token ids (default 512),
#    $N_PREDICT tokens (default 128), ignore_eos, temperature 0; without the layer and under
#    `profiler record` at each of $LEVELS (default: off submit command-buffer dispatch), after one
#    untimed warm-up run, in $REPEATS (default 5) interleaved rounds. $LEVELS may also name
#    `perf-logger`: llama-server without the layer, with GGML_VK_PERF_LOGGER=1 (llama.cpp's own
#    per-op GPU timer), for what timing every op costs it; `perf-logger+LEVEL`: the same under
#    the layer at LEVEL (the summary compares the two timers' sums; the timer also counts the
#    host's pace, so host time the layer adds shows there too); and `LEVEL@NAME` the layer at
#    $LAYER_NAME (default: $LAYER) at that level with the environment $ENV_NAME (VAR=VALUE
#    ...; one of the two set): two builds of the layer in one sweep (LEVELS="dispatch
#    dispatch@old" LAYER_OLD=path), or one build with one of its DECODESCOPE_* switches
#    (LEVELS="dispatch dispatch@own" ENV_OWN="DECODESCOPE_SPREAD_ENDS=off"), and
#    `dispatch-interval` the dispatch level timed by
#    intervals between barriers instead of shader clocks (`--dispatch-timing interval`). $PIN
#    pins every run to CPUs (below); $SERVER_ARGS adds llama-server options to every run alike
#    (SERVER_ARGS="--poll 0": its CPU threadpool sleeps rather than busy-waits between graphs;
#    by default it spins 16 threads on a machine of 16 CPUs, beside the host thread that bounds
#    its decode and the layer's writer thread; docs/capture-layer.md has what that changes).
# 3. `decoder capture --mode both` at the same context and length.
# 4. One more llama-server run at `dispatch` with GGML_VK_DEBUG_MARKERS=1 (llama.cpp's pipeline
#    names on its dispatches) and the fused preset at `--timestamps dispatch`; `profiler diff`
#    of the two compares their ops by kind. Both traces go to OUT_DIR as .json.gz.
# 5. OUT_DIR/capture-llama.md and .json: submits, barriers, descriptor writes and dispatches per
#    decode token (median over decode steps, the first 2 skipped) of llama.cpp and both presets,
#    the decode steps the layer found, llama-server's tokens/s at each level against none (the
#    medians of the runs, and round by round: each round's run against the run without the layer
#    in the same round, whose median and quartiles show how far the rounds spread), and at
#    each level how many decode steps have a GPU span for every dispatch the step counts and the
#    host time per token llama-server spent recording, submitting and waiting (the last round's
#    trace: the layer's own work at each level shows in the first two).
# Traces and logs stay in $WORK (default /tmp/capture-llama), out of OUT_DIR.
#
# On lavapipe (a check of the script, not a measurement): GGML_VK_VISIBLE_DEVICES=0 MODEL=tiny
# CONTEXT=32 N_PREDICT=8 PROFILER=... LAYER=... DECODER=... LLAMA_SERVER=... scripts/device/...
set -euo pipefail
out=${1:?usage: $0 OUT_DIR}
bin=.device-bin
profiler=${PROFILER:-$bin/profiler}
layer=${LAYER:-$bin/libdecodescope_layer.so}
decoder=${DECODER:-$bin/decoder}
llama=${LLAMA_SERVER:-/tmp/llama}
model=${MODEL:-qwen3-0.6b}
context=${CONTEXT:-512}
n_predict=${N_PREDICT:-128}
levels=${LEVELS:-off submit command-buffer dispatch}
repeats=${REPEATS:-5}
work=${WORK:-/tmp/capture-llama}
# PIN=CPUS (taskset's list, e.g. 2-5) runs llama-server, and the profiler and layer with it, on
# those CPUs in every configuration alike: llama-server's decode is bound by its host thread, and
# where the scheduler puts it moves tokens/s by more than the layer does.
pin=()
[[ -n ${PIN:-} ]] && pin=(taskset -c "$PIN")

if [[ -z ${LLAMA_SERVER:-} && ! -e $llama/llama-server && -f $bin/llama.tar.xz ]]; then
  # The archive holds one folder (its name varies: bin/, llama/) with llama-server in it.
  mkdir -p "$llama"
  tar -xJf "$bin/llama.tar.xz" -C "$llama" --strip-components=1
fi
for f in "$profiler" "$layer" "$decoder" "$llama/llama-server"; do
  if [[ ! -e $f ]]; then
    echo "capture-llama: $f is missing (see the header of $0)" >&2
    exit 2
  fi
done
command -v python3 >/dev/null || { echo "capture-llama: python3 is needed" >&2; exit 2; }
mkdir -p "$out" "$work"
profiler=$(realpath "$profiler")
layer=$(realpath "$layer")
decoder=$(realpath "$decoder")
llama=$(realpath "$llama")
export LD_LIBRARY_PATH="$llama${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

"$decoder" devices
gguf=$work/$model.gguf
[[ -f $gguf ]] || "$decoder" export-gguf "$model" --out "$gguf"

# One llama-server run: $1 = none or a timestamp level, $2 = the run's tag (its timings go to
# llama-$2.timings.json).
serve() {
  local level=$1 tag=$2 port log pid trace=${3:-$work/llama-$1.json}
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  log=$work/llama-$tag.log
  local server=("$llama/llama-server" -m "$gguf" --host 127.0.0.1 --port "$port"
    -c $((context + n_predict + 64)) -np 1 -ngl 999 -fa on --no-webui ${SERVER_ARGS:-})
  if [[ $level == none ]]; then
    "${pin[@]}" "${server[@]}" >"$log" 2>&1 &
  elif [[ $level == perf-logger ]]; then
    # llama.cpp's own per-op GPU timer, no layer: what timing every op costs it.
    GGML_VK_PERF_LOGGER=1 "${pin[@]}" "${server[@]}" >"$log" 2>&1 &
  else
    local lay=$layer lv=$level vars=()
    # perf-logger+LEVEL: the layer at LEVEL with llama.cpp's per-op timer on.
    if [[ $lv == perf-logger+* ]]; then
      lv=${lv#perf-logger+}
      vars=(GGML_VK_PERF_LOGGER=1)
    fi
    # LEVEL@NAME: the layer at $LAYER_NAME with $ENV_NAME (an A/B in one sweep).
    if [[ $lv == *@* ]]; then
      local name lvar evar
      name=$(tr 'a-z-' 'A-Z_' <<<"${lv#*@}")
      lvar=LAYER_$name evar=ENV_$name
      lv=${lv%@*}
      if [[ -z ${!lvar:-} && -z ${!evar:-} ]]; then
        echo "capture-llama: $level needs \$$lvar (a layer library) or \$$evar" >&2
        exit 2
      fi
      lay=${!lvar:-$layer}
      [[ -f $lay ]] || { echo "capture-llama: \$$lvar=$lay is not a file" >&2; exit 2; }
      # shellcheck disable=SC2206  # VAR=VALUE words, split on purpose
      vars+=(${!evar:-})
    fi
    # dispatch-interval: the dispatch level timed by intervals between barriers instead of
    # shader clocks.
    local how=clock
    if [[ $lv == dispatch-interval ]]; then
      lv=dispatch how=interval
    fi
    env "${vars[@]}" "${pin[@]}" "$profiler" record --layer "$lay" --timestamps "$lv" \
      --dispatch-timing "$how" --out "$trace" -- "${server[@]}" >"$log" 2>&1 &
  fi
  pid=$!
  if ! python3 - "$port" "$context" "$n_predict" "$work/llama-$tag.timings.json" "$pid" "$log" <<'PY'
import json, os, re, sys, time, urllib.error, urllib.request
port, context, n_predict, dest, pid, log = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5]), sys.argv[6]
base = f"http://127.0.0.1:{port}"
deadline = time.time() + 900
while True:
    try:
        with urllib.request.urlopen(base + "/health", timeout=5) as r:
            if r.status == 200:
                break
    except Exception:
        pass
    try:
        os.kill(pid, 0)
    except OSError:
        sys.exit(f"llama-server exited before it was ready (see its log)")
    if time.time() > deadline:
        sys.exit("llama-server was not ready after 900 s")
    time.sleep(0.5)
# Ids below 3000 exist in every vocabulary (the synthetic tiny one has 4096).
prompt = [(i * 7919) % 2900 + 100 for i in range(context)]
body = json.dumps({"prompt": prompt, "n_predict": n_predict, "ignore_eos": True,
                   "temperature": 0.0, "top_k": 1, "cache_prompt": False, "return_tokens": True,
                   "stream": False}).encode()
req = urllib.request.Request(base + "/completion", body, {"Content-Type": "application/json"})
try:
    with urllib.request.urlopen(req, timeout=3600) as r:
        answer = json.load(r)
except urllib.error.HTTPError as e:
    # A synthetic model's random text can end inside a UTF-8 character; this llama-server then
    # answers 500 ("does not match the expected Content-only format") after generating every
    # token. Its log still has the timings of the run: read them there.
    text = e.read().decode("utf-8", "replace")
    if e.code != 500 or "Content-only format" not in text:
        raise
    time.sleep(0.5)
    found = re.findall(r"\|\s+eval time =\s+([\d.]+) ms /\s+(\d+) tokens \(.*?([\d.]+) tokens per second\)",
                       open(log, errors="replace").read())
    if not found:
        sys.exit(f"llama-server answered 500 ({text}) and its log has no eval timings")
    ms, n, per_s = found[-1]
    answer = {"timings": {"predicted_ms": float(ms), "predicted_n": int(n),
                          "predicted_per_second": float(per_s), "from_log": True},
              "tokens_predicted": int(n)}
if answer.get("tokens_predicted") != n_predict:
    sys.exit(f"llama-server predicted {answer.get('tokens_predicted')} tokens, not {n_predict}")
json.dump({"timings": answer["timings"], "tokens_predicted": answer.get("tokens_predicted")},
          open(dest, "w"))
print(f"llama-server: {answer['timings']['predicted_per_second']:.2f} tokens/s")
PY
  then
    kill -INT "$pid" 2>/dev/null || true
    wait "$pid" || true
    echo "capture-llama: the run at level $level failed; the end of $log:" >&2
    tail -n 20 "$log" >&2
    exit 1
  fi
  kill -INT "$pid"
  wait "$pid" || true
  tail -n 2 "$log"
  # Each run's timings as they come, so that a sweep cut short still says what it measured.
  python3 -c 'import json,sys; t=json.load(open(sys.argv[1])); print(json.dumps({"run": sys.argv[2], **t["timings"]}))' \
    "$work/llama-$tag.timings.json" "$tag" >>"$out/timings.jsonl"
}

# A first run that is not timed (the driver compiles llama.cpp's pipelines into its cache), then
# $REPEATS rounds that run every configuration once each, interleaved, so drift hits them alike;
# each round starts one configuration later than the last, so that none always runs first or
# after the same one.
serve none warmup
configs=(none $levels)
for k in $(seq "$repeats"); do
  for i in "${!configs[@]}"; do
    level=${configs[$(((i + k - 1) % ${#configs[@]}))]}
    serve "$level" "$level-$k"
  done
done
if [[ -z ${SKIP_COMPARE:-} ]]; then
# $MODES (default: both) of the decoder at the same context and length.
modes=${MODES:-both}
dout=$work/decoder
if [[ $modes != both ]]; then
  mkdir -p "$dout"
  dout=$dout/$modes.json
fi
"$decoder" capture --model "$model" --mode "$modes" --context "$context" \
  --max-tokens "$n_predict" --out "$dout"

# llama.cpp's ops by name (its debug markers) beside the fused preset's, compared by kind.
export GGML_VK_DEBUG_MARKERS=1
serve dispatch markers "$work/llama-markers.json"
unset GGML_VK_DEBUG_MARKERS
"$decoder" capture --model "$model" --mode fused --context "$context" --max-tokens "$n_predict" \
  --timestamps dispatch --out "$work/fused-dispatch.json"
"$profiler" diff "$work/fused-dispatch.json" "$work/llama-markers.json" --format markdown \
  >"$out/diff-fused-llama.md" || true
"$profiler" stats "$work/llama-markers.json" --format markdown >"$out/stats-llama.md" || true
gzip -c "$work/llama-markers.json" >"$out/llama-markers.json.gz"
gzip -c "$work/fused-dispatch.json" >"$out/fused-dispatch.json.gz"
fi

python3 - "$work" "$out" "$levels" "$model" "$context" "$n_predict" "$repeats" <<'PY'
import json, os, re, statistics, sys
work, out, levels, model, context, n_predict, repeats = sys.argv[1:8]
levels = levels.split()

def summary(path, skip=2):
    t = json.load(open(path))
    dec = [r for r in t["tokens"] if r["phase"] == "decode"]
    use = dec[min(skip, len(dec) // 2):]
    med = lambda f: statistics.median(f(r) for r in use) if use else 0
    c = lambda k: (lambda r: r["counters"].get(k, 0))
    cap = t["meta"].get("capture") or {}
    level = t["meta"]["run"].get("timestamps", "off")
    # Decode steps whose every dispatch is timed: a span per dispatch at `dispatch`, none left
    # untimed at the region levels.
    if level == "dispatch":
        full = sum(1 for r in dec if len(r.get("gpu_spans", [])) == r["counters"].get("dispatches", 0)
                   and not r.get("gpu_untimed", 0))
    elif level in ("submit", "command-buffer"):
        full = sum(1 for r in dec if r.get("gpu_spans") and not r.get("gpu_untimed", 0))
    else:
        full = None
    return {
        "timed_steps": full,
        "untimed_dispatches": cap.get("untimed_dispatches", 0),
        "spans_per_step": med(lambda r: len(r.get("gpu_spans", []))),
        "decode_steps": len(dec),
        "submits": med(lambda r: r["counters"].get("submits_compute", 0) + r["counters"].get("submits_transfer", 0)),
        "barriers": med(c("barrier_calls")),
        "descriptor_writes": med(c("descriptor_writes")),
        "dispatches": med(c("dispatches")),
        "wall_us": med(lambda r: r["wall_ns"] / 1e3),
        # The program's host time in its recordings, submits and waits, as the layer saw it.
        **{f"{k}_us": med(lambda r, k=k: sum(s[2] for s in r.get("host_spans", []) if s[0] == k) / 1e3)
           for k in ("record", "submit", "wait")},
        "step_rule": cap.get("step_rule_detail", ""),
        "device": t["meta"]["device"]["name"],
    }

rows = {}
first = next((l for l in levels if os.path.exists(f"{work}/llama-{l}.json")), None)
if first:
    rows["llama.cpp"] = summary(f"{work}/llama-{first}.json")
for mode in ("generic", "fused"):
    if os.path.exists(f"{work}/decoder/{mode}.json"):
        rows[f"decoder {mode}"] = summary(f"{work}/decoder/{mode}.json")
speed, spread, from_log, by_round = {}, {}, [], {}
for l in ["none"] + levels:
    runs = []
    for k in range(1, int(repeats) + 1):
        p = f"{work}/llama-{l}-{k}.timings.json"
        if os.path.exists(p):
            timings = json.load(open(p))["timings"]
            runs.append(timings["predicted_per_second"])
            by_round.setdefault(l, {})[k] = timings["predicted_per_second"]
            if timings.get("from_log") and l not in from_log:
                from_log.append(l)
    if runs:
        speed[l] = statistics.median(runs)
        spread[l] = (min(runs), max(runs))


def round_by_round(l):
    """Each round's run at `l` against the run without the layer in the same round: the median
    and quartiles of those changes ("-" for none, or without a pair)."""
    mine, none = by_round.get(l, {}), by_round.get("none", {})
    d = sorted(100 * (mine[k] / none[k] - 1) for k in mine if k in none and none[k] > 0)
    if l == "none" or not d:
        return "-"
    q = lambda f: d[min(len(d) - 1, int(f * (len(d) - 1) + 0.5))]
    return f"{statistics.median(d):+.1f}% ({q(0.25):+.1f}% to {q(0.75):+.1f}%)"
sums = {l: summary(f"{work}/llama-{l}.json") for l in levels
        if os.path.exists(f"{work}/llama-{l}.json")}
steps = {l: s["decode_steps"] for l, s in sums.items()}
device = next((r["device"] for r in rows.values()), "")
md = [f"# llama.cpp under the capture layer: {model}, context {context}, {n_predict} tokens, {device}", "",
      "Per decode token (median over decode steps, the first 2 skipped):", "",
      "| runtime | decode steps | submits | barriers | descriptor writes | dispatches | wall us/token |",
      "|---|---|---|---|---|---|---|"]
for name, r in rows.items():
    md.append(f"| {name} | {r['decode_steps']} | {r['submits']:g} | {r['barriers']:g} | "
              f"{r['descriptor_writes']:g} | {r['dispatches']:g} | {r['wall_us']:.0f} |")
md += ["", f"llama-server tokens/s (its own timings; the median of {repeats} interleaved runs after an "
       "untimed warm-up) at each layer timestamp level:", "",
       "| layer | tokens/s | min - max | vs no layer | round by round: median (quartiles) | decode steps found | steps with every dispatch timed | GPU spans per step | untimed dispatches | record / submit / wait us per token |",
       "|---|---|---|---|---|---|---|---|---|---|"]
base = speed.get("none")
for l, v in speed.items():
    rel = f"{(v / base - 1) * 100:+.1f}%" if base else "-"
    lo, hi = spread[l]
    s = sums.get(l)
    timed = "-" if not s or s["timed_steps"] is None else f"{s['timed_steps']} of {s['decode_steps']}"
    spans = "-" if not s else f"{s['spans_per_step']:g}"
    untimed = "-" if not s else str(s["untimed_dispatches"])
    host = "-" if not s else f"{s['record_us']:.0f} / {s['submit_us']:.0f} / {s['wait_us']:.0f}"
    md.append(f"| {l} | {v:.2f} | {lo:.2f} - {hi:.2f} | {rel} | {round_by_round(l)} | {steps.get(l, '-')} | {timed} | {spans} | {untimed} | {host} |")
if from_log:
    md += ["", f"Tokens/s at {', '.join(from_log)} read from llama-server's log (it answered HTTP 500 "
           "after generating: the random text ended inside a UTF-8 character)."]

# llama.cpp's own per-op timer: "Total time: X us." ends each graph's report; a run's decode
# graphs are its last n_predict - 1 (the first 2 of them skipped).
def perf_total(log):
    totals = [float(m.group(1)) for m in
              re.finditer(r"^Total time: ([0-9.e+]+) us", open(log, errors="replace").read(), re.M)]
    dec = totals[-(int(n_predict) - 1):][2:]
    return statistics.median(dec) if dec else None

perf = {}
for l in [l for l in levels if l == "perf-logger" or l.startswith("perf-logger+")]:
    runs = [perf_total(p) for k in range(1, int(repeats) + 1)
            if os.path.exists(p := f"{work}/llama-{l}-{k}.log")]
    runs = [r for r in runs if r is not None]
    if runs:
        perf[l] = statistics.median(runs)
if perf:
    md += ["", "llama.cpp's own GPU timer (GGML_VK_PERF_LOGGER=1): the sum of its per-op times per decode "
           "token (median over the decode graphs, the first 2 skipped; median over rounds), without "
           "the layer and under it. The timer's per-op times also count how fast the host records and "
           "submits (llama.cpp submits a graph in several command buffers), so host time the layer adds "
           "shows here as GPU time: the difference is an upper bound on what the layer costs the GPU "
           "(traces/bench/2026-11-29-dispatch-cost-host-pacing):", "",
           "| configuration | GPU us per token | vs without the layer |", "|---|---|---|"]
    ref = perf.get("perf-logger")
    for l, v in perf.items():
        rel = f"{(v / ref - 1) * 100:+.1f}%" if ref else "-"
        md.append(f"| {l} | {v:.0f} | {rel} |")
if first:
    md += ["", f"Step rule ({first}): {rows['llama.cpp']['step_rule']}"]
open(f"{out}/capture-llama.md", "w").write("\n".join(md) + "\n")
json.dump({"model": model, "context": int(context), "n_predict": int(n_predict),
           "repeats": int(repeats), "per_token": rows, "llama_tokens_per_s": speed,
           "llama_tokens_per_s_range": spread, "llama_tokens_per_s_by_round": by_round,
           "llama_decode_steps": steps,
           "llama_perf_logger_gpu_us_per_token": perf,
           "llama_levels": sums},
          open(f"{out}/capture-llama.json", "w"), indent=1)
print("\n".join(md))
PY
