//! llama.cpp side by side in `decoder bench`: export the bench's model to GGUF, start
//! `llama-server` (its Vulkan backend) on it, and drive its `/completion` endpoint with the same
//! prompt token ids at every context of the sweep (greedy, `ignore_eos`), reading llama.cpp's own
//! decode timing (`timings.predicted_per_second`) and the tokens it generated.
//!
//! The server is a child process on a loopback port; it is stopped when the bench is done or
//! fails (and its log is kept next to the bench output).

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
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
    Ok(bin)
}

/// A running `llama-server`, killed on drop.
pub struct Server {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> anyhow::Result<u16> {
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
            port,
            log: log.to_path_buf(),
        };
        let started = Instant::now();
        loop {
            if let Some(status) = server.child.try_wait()? {
                bail!(
                    "llama-server exited ({status}) before it was ready; the end of its log ({}):\n{}",
                    server.log.display(),
                    server.log_tail()
                );
            }
            if let Ok((200, _)) = server.request("GET", "/health", None) {
                return Ok(server);
            }
            if started.elapsed() > Duration::from_secs(600) {
                bail!(
                    "llama-server did not become ready in 600 s; the end of its log ({}):\n{}",
                    server.log.display(),
                    server.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }

    /// One HTTP/1.1 request on a fresh connection: (status, body).
    fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
    ) -> anyhow::Result<(u16, String)> {
        let mut s = TcpStream::connect((Ipv4Addr::LOCALHOST, self.port))?;
        s.set_read_timeout(Some(Duration::from_secs(1800)))?;
        let body = body.unwrap_or("");
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.port,
            body.len()
        )?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw)?;
        parse_response(&raw)
    }

    /// Greedy completion of `prompt` (token ids) for `n_predict` tokens.
    pub fn complete(&self, prompt: &[u32], n_predict: usize) -> anyhow::Result<Completion> {
        let req = serde_json::json!({
            "prompt": prompt,
            "n_predict": n_predict,
            "temperature": 0.0,
            "top_k": 1,
            "ignore_eos": true,
            "cache_prompt": false,
            "return_tokens": true,
            "stream": false,
        });
        let (status, body) = self
            .request("POST", "/completion", Some(&req.to_string()))
            .context("llama-server /completion")?;
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
        Ok(Completion {
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
        })
    }
}

/// What `/completion` reported.
pub struct Completion {
    pub predicted_n: usize,
    pub predicted_per_second: f64,
    pub prompt_per_second: f64,
    pub tokens: Vec<u32>,
}

/// Splits an HTTP/1.1 response into status and body (Content-Length, chunked, or to the end).
fn parse_response(raw: &[u8]) -> anyhow::Result<(u16, String)> {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .context("an HTTP answer without headers")?;
    let head = String::from_utf8_lossy(&raw[..split]);
    let mut body = raw[split + 4..].to_vec();
    let status: u16 = head
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .context("an HTTP answer without a status")?;
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    if chunked {
        let mut out = Vec::new();
        let mut rest = &body[..];
        loop {
            let eol = rest
                .windows(2)
                .position(|w| w == b"\r\n")
                .context("a truncated chunked HTTP body")?;
            let size = usize::from_str_radix(
                String::from_utf8_lossy(&rest[..eol])
                    .split(';')
                    .next()
                    .unwrap_or("")
                    .trim(),
                16,
            )
            .context("a bad chunk size in an HTTP body")?;
            rest = &rest[eol + 2..];
            if size == 0 || rest.len() < size {
                break;
            }
            out.extend_from_slice(&rest[..size]);
            rest = &rest[(size + 2).min(rest.len())..];
        }
        body = out;
    }
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
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

    #[test]
    fn responses_with_length_and_chunks() {
        let (s, b) = parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}").unwrap();
        assert_eq!((s, b.as_str()), (200, "{}"));
        let raw = b"HTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
        let (s, b) = parse_response(raw).unwrap();
        assert_eq!((s, b.as_str()), (503, "abcde"));
        assert!(parse_response(b"garbage").is_err());
    }

    #[test]
    fn shared_prefix_counts_leading_matches() {
        assert_eq!(shared_prefix(&[1, 2, 3, 4], &[1, 2, 9]), (2, 3));
        assert_eq!(shared_prefix(&[], &[1]), (0, 0));
    }
}
