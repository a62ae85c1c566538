//! What `decoder bench` writes: the rows, the table, `bench.md` and `bench.json`.

use super::*;

/// One measured point of the sweep.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub setting: String,
    pub mode: String,
    /// `contiguous`, `paged:16`, `rotating:4096`.
    pub kv: String,
    /// `gather` or `fused` for the paged layout, else empty.
    pub paged_attention: String,
    pub batch: u32,
    /// Prompt tokens of the longest sequence (the context when decoding starts).
    pub context: usize,
    pub timestamps: String,
    pub decode_steps: usize,
    /// Sequence-tokens per second (batch x decode steps / their wall time).
    pub tokens_per_s: f64,
    /// Wall time of one decode step, median.
    pub ms_per_step: f64,
    pub host_enqueue_us: f64,
    /// GPU busy time of one decode step, median (timestamps on).
    pub gpu_us: Option<f64>,
    /// The GPU's idle time before a decode step, median: from the last step's last GPU span to
    /// this one's first (`profiler::stats::gpu_gap_ns`; timestamps on, clock calibrated).
    pub gpu_gap_us: Option<f64>,
    /// GPU time of the attention ops (attention kernels and the paged gather, or the persistent
    /// kernel's attention and merge phases) per decode step: their median share of a step's GPU
    /// time over the dispatch-level breakdown steps, times `gpu_us` (the sum itself when the
    /// timed steps ran without timestamps).
    pub attention_gpu_us: Option<f64>,
    /// The paged gather's share of `attention_gpu_us`.
    pub gather_gpu_us: Option<f64>,
    pub submits: f64,
    pub barriers: f64,
    pub descriptor_writes: f64,
    pub dispatches: f64,
    /// K and V bytes the paged gather copies per step.
    pub kv_bytes_copied: f64,
    /// The persistent kernel's grid, `WORKGROUPSxINVOCATIONS` (`132x1024`: its workgroup size
    /// follows the weights and the KV capacity, `Tuning::for_weights`); empty for the other
    /// kernels.
    pub persistent_grid: String,
    /// Prompt tokens per second of the prefill this point ran: every sequence's whole prompt.
    pub prompt_tokens_per_s: f64,
    /// Bytes one decode step must read: the weights once plus every K and V row attended.
    pub bytes_per_step: f64,
    /// `bytes_per_step` over the step's median wall time.
    pub achieved_gbps: f64,
    /// `achieved_gbps` over the probe's read bandwidth (0..1): how close the step runs to the
    /// memory roofline. `None` without the probe.
    pub roofline_share: Option<f64>,
    /// Sequence 0's greedy tokens equal those of the first setting at this context and batch
    /// (every layout and path must generate the same text).
    pub tokens_match: bool,
    #[serde(skip)]
    pub(super) ids: Vec<u32>,
}

pub(super) fn fmt(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

pub(super) fn opt(v: Option<f64>) -> String {
    v.map_or("-".into(), fmt)
}

/// The sweep as a Markdown table.
pub fn table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| setting | kv | batch | context | timestamps | tokens/s | ms/step | host enqueue us | GPU us | GPU gap us | attention GPU us | submits | barriers | descriptor writes | dispatches | grid | KV bytes copied | MB/step | GB/s | roofline | prompt tokens/s | same tokens |\n\
         |---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---|\n",
    );
    for r in rows {
        let kv = if r.paged_attention.is_empty() {
            r.kv.clone()
        } else {
            format!("{} {}", r.kv, r.paged_attention)
        };
        out.push_str(&format!(
            "| {} | {kv} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.setting,
            r.batch,
            r.context,
            r.timestamps,
            fmt(r.tokens_per_s),
            fmt(r.ms_per_step),
            fmt(r.host_enqueue_us),
            opt(r.gpu_us),
            opt(r.gpu_gap_us),
            opt(r.attention_gpu_us),
            r.submits,
            r.barriers,
            r.descriptor_writes,
            r.dispatches,
            if r.persistent_grid.is_empty() {
                "-"
            } else {
                &r.persistent_grid
            },
            r.kv_bytes_copied,
            fmt(r.bytes_per_step / 1e6),
            fmt(r.achieved_gbps),
            r.roofline_share
                .map_or("-".into(), |v| format!("{:.1}%", 100.0 * v)),
            fmt(r.prompt_tokens_per_s),
            if r.tokens_match { "yes" } else { "NO" },
        ));
    }
    out
}

/// What `bench.json` says about the run besides its rows.
pub(super) struct Meta {
    pub(super) device: String,
    pub(super) device_type: String,
    pub(super) driver: String,
    pub(super) weight_bytes_per_token: u64,
    pub(super) bandwidth: Option<crate::vk::Bandwidth>,
}

/// The rows in table order (context, batch, then the order measured), each marked with whether
/// its tokens equal those of the first row at its context and batch.
pub(super) fn ordered(rows: &[Row]) -> Vec<Row> {
    let mut out: Vec<Row> = rows.to_vec();
    out.sort_by_key(|r| (r.context, r.batch));
    for i in 0..out.len() {
        let first = out
            .iter()
            .position(|r| r.context == out[i].context && r.batch == out[i].batch)
            .unwrap_or(i);
        out[i].tokens_match = out[first].ids == out[i].ids;
    }
    out
}

/// Writes `bench.md` and `bench.json` (each atomically) and returns the Markdown. `complete` is
/// false while the sweep runs: the files then hold the points measured so far.
pub(super) fn write_results(
    args: &Args,
    meta: &Meta,
    rows: &[Row],
    peers: &[peer::PeerRow],
    peer_error: Option<&str>,
    refused: &[(String, String)],
    complete: bool,
) -> anyhow::Result<String> {
    let mut text = table(rows);
    if !peers.is_empty() {
        text.push_str(&peer_table(rows, peers));
    }
    if let Some(e) = peer_error {
        text.push_str(&format!("\nllama.cpp side by side failed: {e}\n"));
    }
    for (name, why) in refused {
        text.push_str(&format!("\nrefused: {name}: {why}\n"));
    }
    for r in rows.iter().filter(|r| !r.tokens_match) {
        text.push_str(&format!(
            "\nwarning: {} {} {} generated other tokens than the first setting at context {} batch {}\n",
            r.setting, r.kv, r.paged_attention, r.context, r.batch
        ));
    }
    match &meta.bandwidth {
        Some(b) => text.push_str(&format!(
            "\nroofline: bytes one step must read (weights + K and V attended) over its wall time, as a share of the probe's read bandwidth on {}: {:.0} GB/s (copy {:.0} GB/s, read + write)\n",
            meta.device, b.read_gbps, b.copy_gbps
        )),
        None => text.push_str("\nroofline: not measured (--no-probe)\n"),
    }
    if meta.device_type == "cpu" {
        text.push_str(&format!(
            "\n{} is a CPU device: these are CPU times, not GPU performance\n",
            meta.device
        ));
    }
    if !complete {
        text.push_str("\n(sweep still running: the points measured so far)\n");
    }
    write_file(&args.out.join("bench.md"), text.as_bytes())?;
    let json = serde_json::json!({
        "device": meta.device,
        "device_type": meta.device_type,
        "driver": meta.driver,
        "bandwidth": meta.bandwidth,
        "model": args.model.model,
        "complete": complete,
        "weight_bytes_per_token": meta.weight_bytes_per_token,
        "rows": rows,
        "peers": peers,
        "peer_error": peer_error,
        "refused": refused.iter().map(|(n, w)| serde_json::json!({"setting": n, "reason": w})).collect::<Vec<_>>(),
    });
    write_file(
        &args.out.join("bench.json"),
        serde_json::to_string_pretty(&json)?.as_bytes(),
    )?;
    if complete {
        // Plots are a view of bench.json; a plot that fails costs a warning, not the sweep.
        match crate::cli::plot::render(&json, &args.out) {
            Ok(files) => {
                for f in files {
                    eprintln!("plot: {}", f.display());
                }
            }
            Err(e) => eprintln!("warning: cannot draw the plots: {e:#}"),
        }
    }
    Ok(text)
}

/// llama.cpp beside every batch-1 setting measured at the same context.
pub fn peer_table(rows: &[Row], peers: &[peer::PeerRow]) -> String {
    let mut out = String::from(
        "\n| context | runtime / setting | kv | tokens/s | vs llama.cpp | same leading tokens |\n|---:|---|---|---:|---:|---|\n",
    );
    for p in peers {
        let note = if p.banned_tokens > 0 {
            format!(
                "- (its server refused text that is not valid UTF-8: {} partial-character tokens banned)",
                p.banned_tokens
            )
        } else {
            "-".into()
        };
        out.push_str(&format!(
            "| {} | {} | f16 | {} | 1.00x | {note} |\n",
            p.context,
            p.runtime,
            fmt(p.tokens_per_s)
        ));
        for r in rows
            .iter()
            .filter(|r| r.context == p.context && r.batch == 1)
        {
            let kv = if r.paged_attention.is_empty() {
                r.kv.clone()
            } else {
                format!("{} {}", r.kv, r.paged_attention)
            };
            out.push_str(&format!(
                "| {} | decodescope {} | {kv} | {} | {:.2}x | {} of {} |\n",
                r.context,
                r.setting,
                fmt(r.tokens_per_s),
                r.tokens_per_s / p.tokens_per_s.max(1e-9),
                peer::shared_prefix(&p.ids, &r.ids).0,
                peer::shared_prefix(&p.ids, &r.ids).1,
            ));
        }
    }
    out
}

/// Writes `bytes` to `path` with the one output writer (atomically over a file).
pub(super) fn write_file(path: &std::path::Path, bytes: &[u8]) -> anyhow::Result<()> {
    profiler::io::write_output(path, |w| std::io::Write::write_all(w, bytes))
        .with_context(|| format!("cannot write {}", path.display()))
}
