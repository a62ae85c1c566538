//! llama.cpp side by side in `decoder bench`: export the bench's model to GGUF, start
//! `llama-server` (its Vulkan backend) on it, and drive its `/completion` endpoint with the same
//! prompt token ids at every context of the sweep (greedy, `ignore_eos`), reading llama.cpp's own
//! decode timing (`timings.predicted_per_second`) and the tokens it generated.
//!
//! The server is a child process on a loopback port; it is stopped when the bench is done or
//! fails (and its log is kept next to the bench output).

use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use serde::Serialize;

/// One llama.cpp measurement at one context.
#[derive(Clone, Debug, Serialize)]
pub struct PeerRow {
    pub runtime: String,
    pub context: usize,
    /// Tokens llama.cpp generated (its `predicted_n`).
    pub decode_tokens: usize,
    /// llama.cpp's decode tokens per second (`timings.predicted_per_second`): the median of
    /// `tokens_per_s_runs`.
    pub tokens_per_s: f64,
    /// Each completion's figure, in the order they ran (`--llama-runs`).
    pub tokens_per_s_runs: Vec<f64>,
    pub ms_per_token: f64,
    /// llama.cpp's prompt tokens per second (`timings.prompt_per_second`).
    pub prompt_tokens_per_s: f64,
    /// Leading greedy tokens llama.cpp and decodescope share on the same weights and prompt.
    pub shared_leading_tokens: usize,
    /// Tokens compared (the shorter of the two generations).
    pub compared_tokens: usize,
    /// Tokens banned from llama.cpp's greedy choice because its server refused text that is not
    /// valid UTF-8 ([`Server::complete`]); 0 when nothing was banned.
    pub banned_tokens: usize,
    #[serde(skip)]
    pub ids: Vec<u32>,
}

/// The `llama-server` binary: `path` itself, or `path/llama-server`.
pub fn server_binary(path: &Path) -> anyhow::Result<PathBuf> {
    let bin = if path.is_dir() {
        path.join("llama-server")
    } else {
        path.to_path_buf()
    };
    if !bin.is_file() {
        bail!(
            "--llama-server {}: no llama-server binary there (scripts/fetch-llama-server.sh fetches one and prints its folder)",
            path.display()
        );
    }
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = bin.metadata().map(|m| m.permissions().mode()).unwrap_or(0);
        if mode & 0o111 == 0 {
            bail!(
                "--llama-server {}: {} is not executable (chmod +x it, or give the folder that \
                 scripts/fetch-llama-server.sh prints)",
                path.display(),
                bin.display()
            );
        }
    }
    Ok(bin)
}

/// A running `llama-server`, killed on drop.
pub struct Server {
    child: Child,
    http: Loopback,
    log: PathBuf,
    /// The GGUF file it serves.
    gguf: PathBuf,
    /// The vocabulary's partial-UTF-8 tokens, once a completion needed them banned.
    partial_utf8: std::cell::OnceCell<Vec<u32>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How long a completion may take to answer: a long context on a slow device, with room.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(1800);

/// How long llama-server may take to load a model and answer `/health`.
pub const READY_TIMEOUT: Duration = Duration::from_secs(600);

/// An HTTP client of a server on a loopback port (llama-server's JSON endpoints), through `ureq`:
/// no proxy, every status returned rather than raised, `timeout` for each whole request.
#[derive(Debug)]
pub struct Loopback {
    agent: ureq::Agent,
    port: u16,
}

impl Loopback {
    pub fn new(port: u16, timeout: Duration) -> Loopback {
        let agent = ureq::Agent::config_builder()
            .proxy(None)
            .http_status_as_error(false)
            .timeout_global(Some(timeout))
            .build()
            .into();
        Loopback { agent, port }
    }

    /// `GET path` (no body) or `POST path` with a JSON `body`: (status, body).
    pub fn request(&self, path: &str, body: Option<&str>) -> anyhow::Result<(u16, String)> {
        let url = format!("http://127.0.0.1:{}{path}", self.port);
        let answer = match body {
            None => self.agent.get(&url).call(),
            Some(json) => self
                .agent
                .post(&url)
                .header("Content-Type", "application/json")
                .send(json),
        };
        let mut answer = answer.with_context(|| format!("no answer from {url}"))?;
        let text = answer
            .body_mut()
            .read_to_string()
            .with_context(|| format!("cannot read the answer of {url}"))?;
        Ok((answer.status().as_u16(), text))
    }

    /// Polls `/health` every 250 ms until it answers 200. Fails, with a sentence that follows the
    /// server's name, when `server` exits first or `limit` passes.
    pub fn wait_ready(&self, server: &mut Child, limit: Duration) -> anyhow::Result<()> {
        let started = Instant::now();
        loop {
            if let Some(status) = server.try_wait()? {
                bail!("exited ({status}) before it was ready");
            }
            if let Ok((200, _)) = self.request("/health", None) {
                return Ok(());
            }
            if started.elapsed() > limit {
                bail!("did not become ready in {} s", limit.as_secs());
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

/// A loopback port that was free a moment ago, for a server to listen on.
pub fn free_port() -> anyhow::Result<u16> {
    let l =
        TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("cannot find a free loopback port")?;
    Ok(l.local_addr()?.port())
}

impl Server {
    /// Starts `bin` on `gguf` with room for `n_ctx` positions, full offload and flash attention,
    /// and waits until its `/health` answers (or fails with the end of its log).
    pub fn start(bin: &Path, gguf: &Path, n_ctx: usize, log: &Path) -> anyhow::Result<Server> {
        let port = free_port()?;
        let log_file = std::fs::File::create(log)
            .with_context(|| format!("cannot create {}", log.display()))?;
        let lib_dir = bin.parent().unwrap_or(Path::new("."));
        let mut ld = lib_dir.as_os_str().to_owned();
        if let Some(old) = std::env::var_os("LD_LIBRARY_PATH") {
            ld.push(":");
            ld.push(old);
        }
        let mut cmd = Command::new(bin);
        cmd.args(["-m"])
            .arg(gguf)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args([
                "-c",
                &n_ctx.to_string(),
                "-np",
                "1",
                "-ngl",
                "999",
                "-fa",
                "on",
            ])
            .args(["-b", "2048", "-ub", "512", "--no-webui"])
            .env("LD_LIBRARY_PATH", ld)
            .stdin(Stdio::null())
            .stdout(log_file.try_clone()?)
            .stderr(log_file);
        let child = cmd
            .spawn()
            .with_context(|| format!("cannot start {}", bin.display()))?;
        let mut server = Server {
            child,
            http: Loopback::new(port, ANSWER_TIMEOUT),
            log: log.to_path_buf(),
            gguf: gguf.to_path_buf(),
            partial_utf8: std::cell::OnceCell::new(),
        };
        match server.http.wait_ready(&mut server.child, READY_TIMEOUT) {
            Ok(()) => Ok(server),
            Err(e) => Err(anyhow!(
                "llama-server {e}; the end of its log ({}):\n{}",
                server.log.display(),
                server.log_tail()
            )),
        }
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }

    /// Greedy completion of `prompt` (token ids) for `n_predict` tokens.
    ///
    /// llama-server parses what it generated as a chat message before it answers, and answers
    /// 500 ("The model produced output that does not match the expected Content-only format")
    /// when the text is not valid UTF-8, which greedy decoding of random weights produces
    /// from lone bytes and parts of characters. Such a completion is run again with those
    /// tokens banned ([`Completion::banned_tokens`] says how many): its timing is the same work,
    /// and the tokens it shares with decodescope's end at the first banned one decodescope chose.
    pub fn complete(&self, prompt: &[u32], n_predict: usize) -> anyhow::Result<Completion> {
        // Once a completion needed the ban, every later one runs with it from the start.
        let mut banned = self.partial_utf8.get().map(Vec::as_slice).unwrap_or(&[]);
        loop {
            match self.try_complete(prompt, n_predict, banned)? {
                Ok(c) => {
                    return Ok(Completion {
                        banned_tokens: banned.len(),
                        ..c
                    });
                }
                Err(refusal) if banned.is_empty() => {
                    banned = self.partial_utf8_tokens().with_context(|| {
                        format!("llama-server refused its own generation ({refusal})")
                    })?;
                    if banned.is_empty() {
                        bail!(
                            "llama-server refused its own generation ({refusal}), and the \
                             vocabulary of {} has no partial-character tokens to ban",
                            self.gguf.display()
                        );
                    }
                }
                Err(refusal) => bail!(
                    "llama-server /completion answered 500 even with the {} tokens that are not \
                     whole UTF-8 characters banned: {refusal}",
                    banned.len()
                ),
            }
        }
    }

    /// The vocabulary's tokens that are not whole UTF-8 text, read from the served file once.
    fn partial_utf8_tokens(&self) -> anyhow::Result<&[u32]> {
        if let Some(ids) = self.partial_utf8.get() {
            return Ok(ids);
        }
        let file = crate::gguf::reader::GgufFile::open(&self.gguf)
            .with_context(|| format!("cannot read the vocabulary of {}", self.gguf.display()))?;
        let vocab = crate::gguf::tokenizer::GgufVocab::from_gguf(&file)?;
        Ok(self.partial_utf8.get_or_init(|| vocab.partial_utf8_ids()))
    }

    /// One `/completion`, with `banned` tokens' logits at minus infinity; `Ok(Err(answer))` when
    /// llama-server refused the text it generated (the 500 of [`Server::complete`]).
    fn try_complete(
        &self,
        prompt: &[u32],
        n_predict: usize,
        banned: &[u32],
    ) -> anyhow::Result<Result<Completion, String>> {
        let bias: Vec<serde_json::Value> = banned
            .iter()
            .map(|&id| serde_json::json!([id, false]))
            .collect();
        let req = serde_json::json!({
            "prompt": prompt,
            "n_predict": n_predict,
            "temperature": 0.0,
            "top_k": 1,
            "ignore_eos": true,
            "cache_prompt": false,
            "return_tokens": true,
            "stream": false,
            "logit_bias": bias,
        });
        let (status, body) = self
            .http
            .request("/completion", Some(&req.to_string()))
            .context("llama-server /completion")?;
        if status == 500 && body.contains("does not match the expected") {
            return Ok(Err(body.chars().take(400).collect()));
        }
        if status != 200 {
            bail!(
                "llama-server /completion answered {status}: {}",
                body.chars().take(400).collect::<String>()
            );
        }
        let v: serde_json::Value = serde_json::from_str(&body)
            .with_context(|| format!("llama-server /completion: not JSON: {:.200}", body))?;
        let t = &v["timings"];
        let num = |x: &serde_json::Value, what: &str| {
            x.as_f64()
                .with_context(|| format!("llama-server /completion: no {what} in its answer"))
        };
        Ok(Ok(Completion {
            predicted_n: num(&t["predicted_n"], "timings.predicted_n")? as usize,
            predicted_per_second: num(&t["predicted_per_second"], "timings.predicted_per_second")?,
            prompt_per_second: t["prompt_per_second"].as_f64().unwrap_or(0.0),
            tokens: v["tokens"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|x| x.as_u64())
                        .map(|x| x as u32)
                        .collect()
                })
                .unwrap_or_default(),
            banned_tokens: 0,
        }))
    }
}

/// What `/completion` reported.
pub struct Completion {
    pub predicted_n: usize,
    pub predicted_per_second: f64,
    pub prompt_per_second: f64,
    pub tokens: Vec<u32>,
    /// Tokens banned because llama-server refused the text without the ban (0: none).
    pub banned_tokens: usize,
}

/// Exports `model_dir` to `out_dir/model.gguf` (f16, as the bench's weights) unless it is there.
pub fn export_model(model_dir: &Path, out_dir: &Path) -> anyhow::Result<PathBuf> {
    let gguf = out_dir.join("model.gguf");
    crate::gguf::export::export_gguf(model_dir, &gguf, crate::gguf::export::ExportDtype::F16)
        .with_context(|| format!("exporting {} to {}", model_dir.display(), gguf.display()))?;
    Ok(gguf)
}

/// Leading tokens `a` and `b` share, and how many were compared.
pub fn shared_prefix(a: &[u32], b: &[u32]) -> (usize, usize) {
    let n = a.len().min(b.len());
    (a.iter().zip(b).take_while(|(x, y)| x == y).count(), n)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A one-answer server on a loopback port: the request it read comes back through the
    /// handle.
    fn answer_once(answer: &'static str) -> (u16, std::thread::JoinHandle<String>) {
        use std::io::{BufRead, BufReader, Read, Write};
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let handle = std::thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let mut reader = BufReader::new(stream);
            let mut head = String::new();
            while !head.ends_with("\r\n\r\n") && reader.read_line(&mut head).unwrap() > 0 {}
            let length = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse().unwrap())
                })
                .unwrap_or(0);
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            reader.get_mut().write_all(answer.as_bytes()).unwrap();
            head + &String::from_utf8(body).unwrap()
        });
        (port, handle)
    }

    #[test]
    fn the_client_posts_json_and_returns_every_status() {
        let (port, server) = answer_once(
            "HTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
        );
        let http = Loopback::new(port, Duration::from_secs(10));
        let (status, body) = http.request("/completion", Some("{\"n\":1}")).unwrap();
        assert_eq!((status, body.as_str()), (503, "abcde"));
        let request = server.join().unwrap();
        assert!(
            request.starts_with("POST /completion HTTP/1.1\r\n"),
            "{request}"
        );
        assert!(
            request
                .to_ascii_lowercase()
                .contains("content-type: application/json"),
            "{request}"
        );
        assert!(request.ends_with("{\"n\":1}"), "{request}");

        let (port, server) =
            answer_once("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}");
        let (status, body) = Loopback::new(port, Duration::from_secs(10))
            .request("/health", None)
            .unwrap();
        assert_eq!((status, body.as_str()), (200, "{}"));
        assert!(
            server
                .join()
                .unwrap()
                .starts_with("GET /health HTTP/1.1\r\n")
        );
    }

    #[test]
    fn shared_prefix_counts_leading_matches() {
        assert_eq!(shared_prefix(&[1, 2, 3, 4], &[1, 2, 9]), (2, 3));
        assert_eq!(shared_prefix(&[], &[1]), (0, 0));
    }
}
