# llama-server runs with GGML_VK_PERF_LOGGER=1 (bench folder 2026-11-29-dispatch-level-cost): one server per
# configuration, N requests of 128 tokens after a 512-token prompt; ARGS: LLAMA_DIR GGUF SERVERS REQUESTS PIN|- [PREFIX...]
# (PREFIX: e.g. profiler record --layer L --timestamps dispatch --out T --). VAR_LOG=PATH keeps each server's log at PATH.K.
# Prints, per server, the tokens/s of each of its requests.
import json, os, subprocess, sys, time, urllib.request, socket
llama, gguf, nproc_, nreq, pin = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
pre = sys.argv[6:]  # optional prefix command (profiler record ... --)
def port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p
prompt = [(i * 7919) % 2900 + 100 for i in range(512)]
for k in range(nproc_):
    p = port()
    cmd = ([] if pin == "-" else ["taskset", "-c", pin]) + pre + [f"{llama}/llama-server", "-m", gguf, "--host", "127.0.0.1", "--port", str(p), "-c", "704", "-np", "1", "-ngl", "999", "-fa", "on", "--no-webui"]
    logf = open(os.environ.get("VAR_LOG", "/dev/null") + (f".{k}" if os.environ.get("VAR_LOG") else ""), "w")
    proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{p}"
    t_end = time.time() + 120
    while True:
        if time.time() > t_end or proc.poll() is not None:
            print("server failed", k, flush=True); proc.kill(); sys.exit(1)
        try:
            with urllib.request.urlopen(base + "/health", timeout=5) as r:
                if r.status == 200: break
        except Exception: pass
        time.sleep(0.3)
    out = []
    for j in range(nreq):
        body = json.dumps({"prompt": prompt, "n_predict": 128, "ignore_eos": True, "temperature": 0.0, "top_k": 1, "cache_prompt": False}).encode()
        req = urllib.request.Request(base + "/completion", body, {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=600) as r:
                out.append(round(json.load(r)["timings"]["predicted_per_second"]))
        except Exception as e:
            out.append(-1)
    proc.send_signal(2); proc.wait()
    print(pin, ' '.join(pre[:1]), k, out, flush=True)
