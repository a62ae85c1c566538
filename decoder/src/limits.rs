//! Sizes that come from flags, checked against what they imply before any memory is allocated:
//! `--context`, `--max-tokens` and `--batch` against the model's `max_position_embeddings`, the
//! device's buffer limits and the host's available memory, all with checked arithmetic. Every
//! error names the flag, the value, the limit and what to do.

use anyhow::bail;

use crate::kv::{KvConfig, KvGeometry};
use crate::model::ModelConfig;
use crate::vk::DeviceInfo;

/// The sizes of one run, as the flags give them.
#[derive(Clone, Copy, Debug, Default)]
pub struct RunSize {
    /// Prompt tokens after tokenizing (0 before the prompt is tokenized).
    pub prompt_tokens: usize,
    /// `--context`: the prompt is repeated to this many tokens (0: as given).
    pub context: usize,
    /// Tokens to generate (`--max-tokens`).
    pub max_tokens: usize,
    /// Sequences decoded together (`--batch`).
    pub batch: u32,
    /// The logits of every step are kept (`--logits`, `--dump`).
    pub logits_per_token: bool,
}

impl RunSize {
    /// Prompt positions: the prompt, or `--context` when that is longer.
    pub fn prompt_positions(&self) -> usize {
        self.prompt_tokens.max(self.context)
    }

    /// The flags that set the positions, as a phrase for errors.
    fn describe(&self, tokens_flag: &str) -> String {
        let prompt = if self.context > self.prompt_tokens {
            format!("--context {}", self.context)
        } else {
            format!("the prompt's {} tokens", self.prompt_tokens)
        };
        format!("{prompt} and {tokens_flag} {}", self.max_tokens)
    }

    /// What to lower, as a phrase for errors.
    fn fix(&self, tokens_flag: &str) -> String {
        if self.context > self.prompt_tokens {
            format!("lower --context or {tokens_flag}")
        } else {
            format!("lower {tokens_flag} or shorten the prompt")
        }
    }
}

/// Checks that a sequence of the run fits the model and the engine, and returns the KV capacity
/// the engine is built with (`max_seq`: prompt positions + generated tokens + 2).
///
/// `max_position_embeddings` bounds the positions a sequence uses (the prompt and every
/// generated token but the last); positions past it are outside what the model was trained on
/// and, for RoPE scaled to it, outside what its frequencies describe.
pub fn check_positions(
    cfg: &ModelConfig,
    size: &RunSize,
    tokens_flag: &str,
) -> anyhow::Result<u32> {
    let what = size.describe(tokens_flag);
    let fix = size.fix(tokens_flag);
    let limit = cfg.max_position_embeddings;
    let positions = size.prompt_positions().checked_add(size.max_tokens);
    match positions {
        Some(p) if p <= limit => {}
        Some(p) => bail!(
            "{what} need {p} positions, but the model has max_position_embeddings = {limit} \
             (its config.json); {fix} so that together they are at most {limit}"
        ),
        None => bail!(
            "{what} need more positions than this machine can count; the model has \
             max_position_embeddings = {limit}: {fix}"
        ),
    }
    let max_seq = size
        .prompt_positions()
        .checked_add(size.max_tokens)
        .and_then(|p| p.checked_add(2))
        .and_then(|p| u32::try_from(p).ok());
    match max_seq {
        Some(m) => Ok(m),
        None => {
            bail!("{what} need more than 2^32 - 2 positions, the most the engine addresses; {fix}")
        }
    }
}

/// Host bytes a run keeps for each generated token: its id, its step time, its trace record
/// (counters, host spans and, at `--timestamps dispatch`, one GPU span per dispatch, about 18 a
/// layer) and, when every step's logits are kept, `vocab` f32 values.
pub fn host_bytes_per_token(cfg: &ModelConfig, logits: bool) -> u64 {
    let layers = cfg.layers as u64;
    let record = 512 + layers.saturating_mul(18).saturating_mul(32);
    let logits = if logits {
        (cfg.vocab as u64).saturating_mul(4)
    } else {
        0
    };
    (4 + 8 + record).saturating_add(logits)
}

/// Checks that what the run keeps in host memory for its tokens (the repeated prompt, every
/// step's record and logits, the RoPE table) fits the memory the host has available
/// (`MemAvailable` in `/proc/meminfo`; skipped where that cannot be read).
pub fn check_host_memory(
    cfg: &ModelConfig,
    size: &RunSize,
    max_seq: u32,
    tokens_flag: &str,
) -> anyhow::Result<()> {
    let Some(available) = host_available_bytes() else {
        return Ok(());
    };
    let seqs = u64::from(size.batch.max(1));
    let tokens = (size.max_tokens as u64)
        .saturating_add(1)
        .saturating_mul(seqs);
    let bytes = tokens
        .saturating_mul(host_bytes_per_token(cfg, size.logits_per_token))
        .saturating_add((size.prompt_positions() as u64).saturating_mul(4 * seqs))
        .saturating_add(
            u64::from(max_seq)
                .saturating_mul(cfg.head_dim as u64)
                .saturating_mul(4),
        );
    if bytes > available {
        bail!(
            "{} would keep about {} in host memory (per-step records{} and the RoPE table), but \
             {} is available (MemAvailable in /proc/meminfo); {}{}",
            size.describe(tokens_flag),
            fmt_bytes(bytes),
            if size.logits_per_token {
                " with every step's logits"
            } else {
                ""
            },
            fmt_bytes(available),
            size.fix(tokens_flag),
            if size.logits_per_token {
                ", or drop --logits / --dump"
            } else {
                ""
            }
        );
    }
    Ok(())
}

/// Checks the buffers whose size grows with the positions against `info`'s limits: each layer's
/// K (or V) cache and the attention scores against `maxStorageBufferRange` and
/// `maxMemoryAllocationSize`, the whole cache against the device-local memory.
pub fn check_device(
    cfg: &ModelConfig,
    info: &DeviceInfo,
    kv: &KvConfig,
    max_seq: u32,
) -> anyhow::Result<()> {
    let geo = KvGeometry::new(kv, max_seq);
    let kv_dim = (cfg.kv_heads as u64).saturating_mul(cfg.head_dim as u64);
    let layer_bytes = geo
        .slots
        .saturating_mul(kv_dim)
        .saturating_mul(geo.dtype.bytes());
    let scores_bytes = u64::from(geo.seqs)
        .saturating_mul(cfg.heads as u64)
        .saturating_mul(u64::from(max_seq))
        .saturating_mul(4);
    let per_buffer = info
        .max_storage_buffer_range
        .min(info.max_memory_allocation_size);
    let hint = "lower --context or --max-tokens (or --batch), or use --kv-dtype f16 or \
                --kv rotating --window W";
    for (what, bytes) in [
        ("one layer's K (or V) cache", layer_bytes),
        ("the attention scores", scores_bytes),
    ] {
        if bytes > per_buffer {
            bail!(
                "{max_seq} positions x {} sequences need {} for {what}, but {} allows at most {} \
                 in one buffer (maxStorageBufferRange / maxMemoryAllocationSize); {hint}",
                geo.seqs,
                fmt_bytes(bytes),
                info.name,
                fmt_bytes(per_buffer)
            );
        }
    }
    let total = layer_bytes
        .saturating_mul(2)
        .saturating_mul(cfg.layers as u64);
    if info.device_local_bytes > 0 && total > info.device_local_bytes {
        bail!(
            "{max_seq} positions x {} sequences need {} of KV cache over {} layers, but {} has {} \
             of device-local memory; {hint}",
            geo.seqs,
            fmt_bytes(total),
            cfg.layers,
            info.name,
            fmt_bytes(info.device_local_bytes)
        );
    }
    Ok(())
}

/// The memory the host can give without swapping (`MemAvailable` in `/proc/meminfo`), bytes;
/// `None` where it cannot be read.
pub fn host_available_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_mem_available(&text)
}

fn parse_mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// Bytes as the reports write them (`512 B`, `1.50 MB`, `17.18 GB`).
fn fmt_bytes(b: u64) -> String {
    profiler::fmt_bytes(b as f64)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests unwrap: a failure is a test failure.
mod tests {
    use super::*;

    fn tiny() -> ModelConfig {
        crate::model::Preset::Tiny.config().unwrap()
    }

    #[test]
    fn positions_past_the_model_name_the_flags_and_the_limit() {
        let cfg = tiny();
        let ok = RunSize {
            prompt_tokens: 9,
            max_tokens: 32,
            ..Default::default()
        };
        assert_eq!(check_positions(&cfg, &ok, "--max-tokens").unwrap(), 43);
        let long = RunSize {
            context: 40_000,
            ..ok
        };
        let msg = check_positions(&cfg, &long, "--max-tokens")
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("--context 40000 and --max-tokens 32 need 40032 positions")
                && msg.contains("max_position_embeddings = 32768")
                && msg.contains("lower --context"),
            "{msg}"
        );
        let overflow = RunSize {
            max_tokens: usize::MAX,
            ..ok
        };
        let msg = check_positions(&cfg, &overflow, "--max-tokens")
            .unwrap_err()
            .to_string();
        assert!(msg.contains("shorten the prompt"), "{msg}");
    }

    #[test]
    fn every_steps_logits_past_the_host_memory_are_refused() {
        let Some(available) = host_available_bytes() else {
            return;
        };
        let mut cfg = tiny();
        cfg.vocab = 1 << 30;
        // 4 GiB of logits a step: more steps than the host could hold.
        let steps = usize::try_from(available >> 32)
            .unwrap_or(usize::MAX)
            .saturating_add(2);
        let size = RunSize {
            prompt_tokens: 9,
            max_tokens: steps,
            logits_per_token: true,
            ..Default::default()
        };
        let msg = check_host_memory(&cfg, &size, 64, "--max-tokens")
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("MemAvailable") && msg.contains("--logits"),
            "{msg}"
        );
        let fine = RunSize {
            max_tokens: 2,
            logits_per_token: false,
            ..size
        };
        check_host_memory(&cfg, &fine, 64, "--max-tokens").unwrap();
    }

    #[test]
    fn mem_available_is_read_in_bytes() {
        let text = "MemTotal:       16000 kB\nMemAvailable:    2048 kB\n";
        assert_eq!(parse_mem_available(text), Some(2 * 1024 * 1024));
        assert_eq!(parse_mem_available("MemTotal: 1 kB\n"), None);
    }
}
