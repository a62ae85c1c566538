//! `decoder bench`: load a model once and measure a sweep in one process: presets (and, with
//! `--ablation`, every single knob flipped alone from each preset toward the other and every knob
//! value neither preset uses; with `--also`, named settings such as `fused:kernels=persistent`) at every
//! context length, batch size and KV layout asked for. One engine per setting, layout and batch
//! size runs the contexts in ascending order on one growing prompt (each context prefills only
//! the tokens it adds); at each, every paged attention path decodes from the same cache in turn:
//! warm-up steps, the timed steps at `--timestamps` level, then a few steps at dispatch level for
//! the per-op breakdown (attention GPU time per step), rewound before the next. Writes one trace
//! per point, `bench.json` (one row per point) and `bench.md` (both rewritten after every point
//! while the sweep runs), and prints the table.

use std::path::PathBuf;

use anyhow::Context as _;
use profiler::trace::{Phase, TokenRecord};
use serde::Serialize;

use super::capture::with_context;
use super::peer;
use super::run::{ModelArgs, PromptArgs, load_model, prompt_ids};
use crate::capture::{CaptureSpec, batch_prompts, build_trace};
use crate::exec::engine::{Engine, EngineOptions, Timestamps, shape_of};
use crate::exec::knobs::{Kernels, Knobs, Mode};
use crate::generate::{Generation, StopReason};
use crate::kv::{KvConfig, KvDtype, KvKind, PagedAttention};
use crate::vk::{Gpu, GpuOptions};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub prompt: PromptArgs,
    /// Timed decode steps per point.
    #[arg(long, default_value_t = 64)]
    pub max_tokens: usize,
    /// Decode steps run before the timed ones (not measured).
    #[arg(long, default_value_t = 4)]
    pub warmup: usize,
    /// Decode steps at dispatch-level timestamps after the timed ones, for the per-op breakdown
    /// (attention GPU time); 0 skips it.
    #[arg(long, default_value_t = 8)]
    pub breakdown: usize,
    /// Prompt lengths in tokens, comma-separated (the prompt repeated): the KV cache holds this
    /// much context when decoding starts. 0 keeps the prompt as given.
    #[arg(long, value_delimiter = ',', default_value = "0")]
    pub context: Vec<usize>,
    /// Batch sizes, comma-separated: sequences decoded together (prompts of different lengths:
    /// sequence b's is the context cut by b / (2 * batch)).
    #[arg(long, value_delimiter = ',', default_value = "1")]
    pub batch: Vec<u32>,
    /// KV layouts, comma-separated: contiguous, paged, rotating.
    #[arg(
        long = "kv",
        value_enum,
        value_delimiter = ',',
        default_value = "contiguous"
    )]
    pub kv: Vec<KvKind>,
    /// Attention paths for the paged layout, comma-separated: gather, fused.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "fused")]
    pub paged_attention: Vec<PagedAttention>,
    /// KV cache element type.
    #[arg(long, value_enum, default_value = "f16")]
    pub kv_dtype: KvDtype,
    /// Positions per block of the paged layout: 16 or 32.
    #[arg(long, default_value_t = 16)]
    pub block_size: u32,
    /// Keep the paged pool unshuffled (block tables in order); by default they are fragmented.
    #[arg(long)]
    pub no_fragment: bool,
    /// Sliding window of the rotating layout.
    #[arg(long, default_value_t = 0)]
    pub window: u32,
    /// Most prompt tokens one step processes.
    #[arg(long, default_value_t = 2048)]
    pub prefill_chunk: u32,
    /// Presets to run, comma-separated.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "generic,fused"
    )]
    pub mode: Vec<Mode>,
    /// Also flip every knob alone from each preset toward the other, and run every knob value
    /// neither preset uses (`--kernels persistent`, `--submit per-layer`, ...) alone, at every
    /// point.
    #[arg(long)]
    pub ablation: bool,
    /// Extra settings, comma-separated: a preset with knobs changed, PRESET:KNOB=VALUE[:...],
    /// for example `fused:kernels=persistent` or `generic:descriptors=push:submit=token`.
    #[arg(long, value_delimiter = ',', value_name = "SETTING")]
    pub also: Vec<String>,
    /// GPU timestamp levels of the timed steps, comma-separated (off, token, region, dispatch):
    /// every point is measured at each, from the same cache, so their cost shows side by side.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "token")]
    pub timestamps: Vec<Timestamps>,
    /// Skip the memory bandwidth probe: rows then have no roofline share.
    #[arg(long)]
    pub no_probe: bool,
    /// Vulkan device (index or name substring).
    #[arg(long)]
    pub device: Option<String>,
    /// Directory for one trace per point, bench.json and bench.md.
    #[arg(long, default_value = "results/bench")]
    pub out: PathBuf,
    /// Also measure llama.cpp's Vulkan backend in the same run: its `llama-server` binary (or
    /// the folder holding it, as scripts/fetch-llama-server.sh prints) is started on the same
    /// weights exported to GGUF (f16) and asked for greedy completions of the same prompt at
    /// every context (batch 1); its decode tokens/s goes into the table beside ours.
    #[arg(long, value_name = "PATH", help_heading = "Peers")]
    pub llama_server: Option<PathBuf>,
    /// Completions llama.cpp runs at each context: its row is their median tokens/s (its rate
    /// moves by 10% and more from one completion to the next; every run's figure goes into
    /// bench.json).
    #[arg(long, default_value_t = 3, value_name = "N", help_heading = "Peers",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub llama_runs: u32,
}

/// A named knob setting of a sweep.
pub type Setting = (String, Knobs);

/// The settings of a sweep: `(name, knobs)`, the presets first; refused combinations are
/// returned apart with the reason.
pub fn sweep(
    modes: &[Mode],
    ablation: bool,
    also: &[(String, Knobs)],
    push_descriptors: bool,
) -> (Vec<Setting>, Vec<(String, String)>) {
    let (g, f) = (Knobs::preset(Mode::Generic), Knobs::preset(Mode::Fused));
    let mut run: Vec<Setting> = modes
        .iter()
        .map(|m| (m.name().to_string(), Knobs::preset(*m)))
        .collect();
    let mut refused = vec![];
    if ablation {
        for (from, base, toward) in [("generic", g, f), ("fused", f, g)] {
            for (knob, value, k) in base.single_flips(&toward) {
                let name = format!("{from} --{knob} {value}");
                match k.validate(push_descriptors) {
                    Ok(()) => run.push((name, k)),
                    Err(e) => refused.push((name, e)),
                }
            }
        }
        for (from, knob, value, k) in Knobs::beyond_presets() {
            let name = format!("{from} --{knob} {value}");
            match k.validate(push_descriptors) {
                Ok(()) => run.push((name, k)),
                Err(e) => refused.push((name, e)),
            }
        }
    }
    for (name, k) in also {
        if run.iter().any(|(_, r)| r == k) {
            continue;
        }
        match k.validate(push_descriptors) {
            Ok(()) => run.push((name.clone(), *k)),
            Err(e) => refused.push((name.clone(), e)),
        }
    }
    (run, refused)
}

/// A `--also` setting, PRESET:KNOB=VALUE[:KNOB=VALUE...], as `(name, knobs)`; the name is the
/// way the ablation writes it (`fused --kernels persistent`). A value may hold a colon itself
/// (`submit=every:4`): a piece without `=` continues the value before it.
pub fn parse_setting(spec: &str) -> anyhow::Result<Setting> {
    let mut pieces = spec.split(':');
    let preset = pieces.next().unwrap_or_default();
    let mut parts: Vec<String> = Vec::new();
    for piece in pieces {
        match parts.last_mut() {
            Some(last) if !piece.contains('=') => {
                last.push(':');
                last.push_str(piece);
            }
            _ => parts.push(piece.to_string()),
        }
    }
    let mode = <Mode as clap::ValueEnum>::from_str(preset, true).map_err(|_| {
        anyhow::anyhow!(
            "--also {spec:?}: {preset:?} is not a preset; start with generic: or fused:"
        )
    })?;
    let mut knobs = Knobs::preset(mode);
    let mut name = mode.name().to_string();
    let mut any = false;
    for part in &parts {
        let (knob, value) = part.split_once('=').ok_or_else(|| {
            anyhow::anyhow!(
                "--also {spec:?}: {part:?} is not KNOB=VALUE (for example kernels=persistent)"
            )
        })?;
        let bad = |e: String| anyhow::anyhow!("--also {spec:?}: {e}");
        match knob {
            "submit" => knobs.submit = value.parse().map_err(bad)?,
            "sync" => knobs.sync = value.parse().map_err(bad)?,
            "descriptors" => knobs.descriptors = value.parse().map_err(bad)?,
            "barriers" => knobs.barriers = value.parse().map_err(bad)?,
            "kernels" => knobs.kernels = value.parse().map_err(bad)?,
            "recording" => knobs.recording = value.parse().map_err(bad)?,
            _ => anyhow::bail!(
                "--also {spec:?}: unknown knob {knob:?}; the knobs are submit, sync, descriptors, barriers, kernels and \
                 recording"
            ),
        }
        name.push_str(&format!(" --{knob} {value}"));
        any = true;
    }
    if !any {
        anyhow::bail!("--also {spec:?} changes no knob; use --mode {preset} for the preset itself");
    }
    Ok((name, knobs))
}

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
    /// Prompt tokens per second of the prefill this point ran: every sequence's tokens added
    /// since the previous context of its sweep group (all of them at the first context).
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
    ids: Vec<u32>,
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
}

/// GPU time per step of the spans `pick` selects in the dispatch-level breakdown `records`: their
/// median share of a step's GPU time (the union of its spans) times the timed steps' GPU time
/// `gpu_us`. Dispatch-level timestamps lengthen a step, and a step's spans can be far off as a
/// whole (the first breakdown step after the switch on lavapipe; on an H100 the persistent rows'
/// attention came out longer than the step), which a share within one step's own spans does not
/// carry over. Without timed GPU time (timestamps off), the median of the sums.
fn picked_us(records: &[TokenRecord], pick: &dyn Fn(u32) -> bool, gpu_us: Option<f64>) -> f64 {
    let picked = |t: &TokenRecord| {
        t.gpu_spans
            .iter()
            .filter(|s| pick(s.op()))
            .map(|s| s.dur_ns() as f64 / 1e3)
            .sum::<f64>()
    };
    match gpu_us {
        Some(gpu_us) => {
            let shares: Vec<f64> = records
                .iter()
                .filter_map(|t| {
                    let busy = profiler::stats::union_ns(&t.gpu_spans) as f64 / 1e3;
                    (busy > 0.0).then(|| (picked(t) / busy).min(1.0))
                })
                .collect();
            median(shares) * gpu_us
        }
        None => median(records.iter().map(picked).collect()),
    }
}

fn fmt(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn opt(v: Option<f64>) -> String {
    v.map_or("-".into(), fmt)
}

/// The sweep as a Markdown table.
pub fn table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| setting | kv | batch | context | timestamps | tokens/s | ms/step | host enqueue us | GPU us | GPU gap us | attention GPU us | submits | barriers | descriptor writes | dispatches | KV bytes copied | MB/step | GB/s | roofline | prompt tokens/s | same tokens |\n\
         |---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n",
    );
    for r in rows {
        let kv = if r.paged_attention.is_empty() {
            r.kv.clone()
        } else {
            format!("{} {}", r.kv, r.paged_attention)
        };
        out.push_str(&format!(
            "| {} | {kv} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
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

/// The KV settings of the sweep at one batch size.
/// The KV settings of one batch size, as engines to build: each with the paged attention paths
/// it decodes with (one for the contiguous and rotating layouts).
fn kv_groups(args: &Args, batch: u32) -> anyhow::Result<Vec<(KvConfig, Vec<PagedAttention>)>> {
    let mut out = vec![];
    for &kind in &args.kv {
        let paths: Vec<PagedAttention> = if kind == KvKind::Paged {
            let mut p = args.paged_attention.clone();
            p.dedup();
            p
        } else {
            vec![PagedAttention::Fused]
        };
        let cfg = KvConfig {
            kind,
            dtype: args.kv_dtype,
            block: args.block_size,
            fragment: kind == KvKind::Paged && !args.no_fragment,
            window: if kind == KvKind::Rotating {
                args.window
            } else {
                0
            },
            paged_attention: paths[0],
            batch,
            prefill_chunk: args.prefill_chunk,
        };
        cfg.validate().map_err(|e| anyhow::anyhow!(e))?;
        out.push((cfg, paths));
    }
    Ok(out)
}

/// One engine of the sweep: a setting, a KV layout and batch size, the paths it decodes with.
struct Group {
    kv: KvConfig,
    paths: Vec<PagedAttention>,
    name: String,
    knobs: Knobs,
}

/// What `bench.json` says about the run besides its rows.
struct Meta {
    device: String,
    device_type: String,
    driver: String,
    weight_bytes_per_token: u64,
    bandwidth: Option<crate::vk::Bandwidth>,
}

/// The rows in table order (context, batch, then the order measured), each marked with whether
/// its tokens equal those of the first row at its context and batch.
fn ordered(rows: &[Row]) -> Vec<Row> {
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
fn write_results(
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
        match super::plot::render(&json, &args.out) {
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

/// Medians of the decode records in `recs`.
struct Medians {
    wall_us: f64,
    host_enqueue_us: f64,
    gpu_us: Option<f64>,
    submits: f64,
    barriers: f64,
    descriptor_writes: f64,
    dispatches: f64,
    kv_bytes_copied: f64,
    kv_positions: f64,
}

fn medians(recs: &[&TokenRecord]) -> Medians {
    let m = |f: &dyn Fn(&TokenRecord) -> f64| median(recs.iter().map(|t| f(t)).collect());
    let gpu: Vec<f64> = recs
        .iter()
        .filter_map(|t| t.gpu_busy_ns.map(|g| g as f64 / 1e3))
        .collect();
    Medians {
        wall_us: m(&|t| t.wall_ns as f64 / 1e3),
        host_enqueue_us: m(&|t| t.host_enqueue_ns as f64 / 1e3),
        gpu_us: (!gpu.is_empty()).then(|| median(gpu)),
        submits: m(&|t| t.counters.submits() as f64),
        barriers: m(&|t| t.counters.barrier_calls as f64),
        descriptor_writes: m(&|t| t.counters.descriptor_writes as f64),
        dispatches: m(&|t| t.counters.dispatches as f64),
        kv_bytes_copied: m(&|t| t.counters.kv_bytes_copied as f64),
        kv_positions: m(&|t| t.kv_len as f64),
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let also = args
        .also
        .iter()
        .map(|s| parse_setting(s))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let model = load_model(&args.model.model)?;
    let base_ids = prompt_ids(&model, &args.prompt)?;
    let gpu = Gpu::new(&GpuOptions {
        device: args.device.clone(),
        validation: false,
    })
    .context("cannot open the Vulkan device")?;
    if args.timestamps.is_empty() {
        anyhow::bail!("--timestamps needs at least one level");
    }
    let bandwidth = if args.no_probe {
        None
    } else {
        eprintln!("probing the memory bandwidth of {}", gpu.info().name);
        let b = super::gpu::probe_or_warn(&gpu);
        if let Some(b) = &b {
            eprintln!(
                "read {:.0} GB/s, copy {:.0} GB/s (read + write), best of {} over {} MiB",
                b.read_gbps,
                b.copy_gbps,
                b.runs,
                b.bytes >> 20
            );
        }
        b
    };
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;
    let (settings, mut refused) = sweep(
        &args.mode,
        args.ablation,
        &also,
        gpu.info().push_descriptors,
    );
    // A group shares one engine and its prompts: contexts in ascending order extend the same
    // prompt (each prefills only the tokens it adds), and the paged attention paths decode from
    // the same cache one after the other. Rows are reported in sweep order.
    let mut contexts = args.context.clone();
    contexts.sort_unstable();
    contexts.dedup();
    let mut groups = vec![];
    for &batch in &args.batch {
        for (kv, paths) in kv_groups(&args, batch)? {
            for (name, knobs) in &settings {
                let mut paths = paths.clone();
                // The persistent kernel reads paged blocks in place only: no gather path.
                if knobs.kernels == Kernels::Persistent && paths.contains(&PagedAttention::Gather) {
                    paths.retain(|p| *p != PagedAttention::Gather);
                    let what = format!("{name} {} gather batch {batch}", kv.layout_name());
                    if !refused.iter().any(|(n, _)| *n == what) {
                        refused.push((
                            what,
                            "the persistent kernel reads the paged blocks in place; it has no gather path".into(),
                        ));
                    }
                }
                let Some(&first) = paths.first() else {
                    continue;
                };
                groups.push(Group {
                    kv: KvConfig {
                        paged_attention: first,
                        ..kv
                    },
                    paths,
                    name: name.clone(),
                    knobs: *knobs,
                });
            }
        }
    }
    let n_points: usize = groups.iter().map(|g| g.paths.len()).sum::<usize>()
        * contexts.len()
        * args.timestamps.len();
    eprintln!(
        "bench on {}: {n_points} points ({} settings x {} contexts x {} batch sizes x {} KV settings), {} timed decode steps each",
        gpu.info().name,
        settings.len(),
        contexts.len(),
        args.batch.len(),
        n_points
            / (settings.len() * contexts.len() * args.batch.len() * args.timestamps.len()).max(1),
        args.max_tokens
    );
    let bar = indicatif::ProgressBar::new(n_points as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("[{pos}/{len}] {wide_msg} ({elapsed})")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let info = Meta {
        device: gpu.info().name.clone(),
        device_type: gpu.info().device_type.clone(),
        driver: format!("{} {}", gpu.info().driver_name, gpu.info().driver_info),
        weight_bytes_per_token: shape_of(&model.config, 1).weight_bytes_per_token(),
        bandwidth,
    };
    let mut rows: Vec<Row> = Vec::new();
    for g in &groups {
        bar.set_message(format!("{} {} batch {}", g.name, g.kv, g.kv.batch));
        run_group(
            &args,
            &gpu,
            &model,
            &base_ids,
            &contexts,
            g,
            &bar,
            &mut |row| {
                bar.println(format!(
                "{} {} {} batch {} context {} timestamps {}: {:.1} tokens/s, {:.2} ms/step, attention {} us/step{}",
                row.setting,
                row.kv,
                row.paged_attention,
                row.batch,
                row.context,
                row.timestamps,
                row.tokens_per_s,
                row.ms_per_step,
                opt(row.attention_gpu_us),
                row.roofline_share.map_or(String::new(), |v| format!(", {:.1}% of the roofline", 100.0 * v))
            ));
                rows.push(row);
                bar.inc(1);
                // What is measured so far survives a sweep that is stopped or runs out of time.
                write_results(&args, &info, &ordered(&rows), &[], None, &refused, false)
            },
        )
        .with_context(|| format!("bench {} {} batch {}", g.name, g.kv, g.kv.batch))?;
    }
    bar.finish_and_clear();
    let rows = ordered(&rows);
    // A peer that fails to run costs its rows, not the sweep's.
    let (peers, peer_error) = match &args.llama_server {
        Some(path) => match llama_rows(&args, path, &base_ids, &rows) {
            Ok(p) => (p, None),
            Err(e) => {
                eprintln!("warning: llama.cpp side by side failed: {e:#}");
                (Vec::new(), Some(format!("{e:#}")))
            }
        },
        None => (Vec::new(), None),
    };
    let text = write_results(
        &args,
        &info,
        &rows,
        &peers,
        peer_error.as_deref(),
        &refused,
        true,
    )?;
    println!("{text}");
    eprintln!(
        "wrote {}, {} and one trace per point",
        args.out.join("bench.md").display(),
        args.out.join("bench.json").display()
    );
    Ok(())
}

/// llama.cpp at every context of the sweep (batch 1), on the bench's weights exported to GGUF.
fn llama_rows(
    args: &Args,
    path: &std::path::Path,
    base_ids: &[u32],
    rows: &[Row],
) -> anyhow::Result<Vec<peer::PeerRow>> {
    let bin = peer::server_binary(path)?;
    let dir = crate::model::resolve_model(&args.model.model)
        .with_context(|| format!("cannot find the model {:?}", args.model.model))?;
    eprintln!("llama.cpp: exporting {} to GGUF", dir.display());
    let gguf = peer::export_model(&dir, &args.out)?;
    let prompts: Vec<Vec<u32>> = args
        .context
        .iter()
        .map(|&c| with_context(base_ids.to_vec(), c))
        .collect();
    let n_predict = args.warmup + args.max_tokens;
    let n_ctx = prompts.iter().map(Vec::len).max().unwrap_or(0) + n_predict + 64;
    let log = args.out.join("llama-server.log");
    eprintln!(
        "llama.cpp: starting {} (log {})",
        bin.display(),
        log.display()
    );
    let server = peer::Server::start(&bin, &gguf, n_ctx, &log)?;
    let mut out = Vec::new();
    for ids in &prompts {
        let mut runs = Vec::new();
        let mut first = None;
        for k in 0..args.llama_runs {
            let c = server
                .complete(ids, n_predict)
                .with_context(|| format!("llama.cpp at context {}, run {}", ids.len(), k + 1))?;
            runs.push(c.predicted_per_second);
            first.get_or_insert(c);
        }
        let mut c = first.context("--llama-runs: llama.cpp ran no completion")?;
        c.predicted_per_second = median(runs.clone());
        // decodescope's sequence 0 at this context, batch 1 (the first setting measured).
        let ours = rows
            .iter()
            .find(|r| r.context == ids.len() && r.batch == 1)
            .map(|r| r.ids.as_slice())
            .unwrap_or(&[]);
        let (shared, compared) = peer::shared_prefix(&c.tokens, ours);
        eprintln!(
            "llama.cpp context {}: {:.1} tokens/s (median of {:?}), {shared} of {compared} leading tokens as decodescope",
            ids.len(),
            c.predicted_per_second,
            runs.iter()
                .map(|r| (r * 10.0).round() / 10.0)
                .collect::<Vec<_>>()
        );
        out.push(peer::PeerRow {
            runtime: "llama.cpp (Vulkan)".into(),
            context: ids.len(),
            decode_tokens: c.predicted_n,
            tokens_per_s: c.predicted_per_second,
            tokens_per_s_runs: runs,
            ms_per_token: if c.predicted_per_second > 0.0 {
                1e3 / c.predicted_per_second
            } else {
                0.0
            },
            prompt_tokens_per_s: c.prompt_per_second,
            shared_leading_tokens: shared,
            compared_tokens: compared,
            ids: c.tokens,
        });
    }
    Ok(out)
}

/// llama.cpp beside every batch-1 setting measured at the same context.
pub fn peer_table(rows: &[Row], peers: &[peer::PeerRow]) -> String {
    let mut out = String::from(
        "\n| context | runtime / setting | kv | tokens/s | vs llama.cpp | same leading tokens |\n|---:|---|---|---:|---:|---|\n",
    );
    for p in peers {
        out.push_str(&format!(
            "| {} | {} | f16 | {} | 1.00x | - |\n",
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
fn write_file(path: &std::path::Path, bytes: &[u8]) -> anyhow::Result<()> {
    profiler::io::write_output(path, |w| std::io::Write::write_all(w, bytes))
        .with_context(|| format!("cannot write {}", path.display()))
}

/// The sequences of a point as they decode: each one's last token and next position.
struct Decoding {
    last: Vec<u32>,
    positions: Vec<u32>,
    /// Sequence 0's tokens, for the trace.
    first_ids: Vec<u32>,
}

impl Decoding {
    fn run(&mut self, engine: &mut Engine, steps: usize) -> anyhow::Result<()> {
        for _ in 0..steps {
            let outs = engine.decode_step(&self.last, &self.positions)?;
            for (i, o) in outs.iter().enumerate() {
                self.last[i] = o.argmax;
                self.positions[i] += 1;
            }
            self.first_ids.push(self.last[0]);
        }
        Ok(())
    }
}

/// Measures a group's points: for each context (ascending), prefills what the prompts add, then
/// for each paged attention path decodes warm-up, timed and breakdown steps from the same cache
/// and hands the row to `emit`; the decode steps are rewound before the next path and context.
#[allow(clippy::too_many_arguments)]
fn run_group(
    args: &Args,
    gpu: &Gpu,
    model: &crate::model::Model,
    base_ids: &[u32],
    contexts: &[usize],
    g: &Group,
    bar: &indicatif::ProgressBar,
    emit: &mut dyn FnMut(Row) -> anyhow::Result<String>,
) -> anyhow::Result<()> {
    let longest = with_context(base_ids.to_vec(), contexts.last().copied().unwrap_or(0));
    let steps = args.warmup + args.max_tokens + args.breakdown;
    let opts = EngineOptions {
        knobs: g.knobs,
        timestamps: args.timestamps[0],
        max_seq: (longest.len() + steps + 2) as u32,
        kv: g.kv,
        logits_readback: false,
    };
    let mut engine = Engine::new(gpu, &model.config, &model.weights, opts)
        .context("cannot set up the Vulkan decoder")?;
    for line in engine.persistent_report() {
        bar.println(line);
    }
    // Prompt tokens in the cache per sequence, and the greedy token after each prompt.
    let mut held: Vec<usize> = vec![0; g.kv.batch.max(1) as usize];
    let mut after: Vec<u32> = vec![0; held.len()];
    for &context in contexts {
        let ids = with_context(base_ids.to_vec(), context);
        let prompts = batch_prompts(&ids, g.kv.batch);
        bar.set_message(format!(
            "{} {} batch {} context {}: prompt",
            g.name,
            g.kv.layout_name(),
            g.kv.batch,
            ids.len()
        ));
        let prefill_start = std::time::Instant::now();
        let mut added = 0;
        for (seq, p) in prompts.iter().enumerate() {
            // Every prompt extends the previous context's (the same token stream, cut longer):
            // only the new tokens run; the last one runs again when nothing is new. A rotating
            // cache reuses slots, so the decode steps since may have overwritten its window:
            // it runs the whole prompt.
            let from = if g.kv.kind == KvKind::Rotating {
                0
            } else {
                held[seq].min(p.len().saturating_sub(1))
            };
            after[seq] = engine.prefill(seq as u32, &p[from..], from as u32)?.argmax;
            added += p.len() - from;
            held[seq] = p.len();
        }
        let prefill_s = prefill_start.elapsed().as_secs_f64();
        let mark = engine.records().len();
        for &path in &g.paths {
            let mut kv = g.kv;
            if kv.kind == KvKind::Paged {
                engine.set_paged_attention(path)?;
                kv.paged_attention = path;
            }
            for &level in &args.timestamps {
                engine.set_timestamps(level)?;
                bar.set_message(format!(
                    "{} {}{} batch {} context {} timestamps {}: decode",
                    g.name,
                    kv.layout_name(),
                    if kv.gathers() { " gather" } else { "" },
                    kv.batch,
                    ids.len(),
                    level.name()
                ));
                let mut row = measure(
                    args,
                    &mut engine,
                    model,
                    &ids,
                    &prompts,
                    &after,
                    kv,
                    g,
                    level,
                )?;
                row.prompt_tokens_per_s = if prefill_s > 0.0 {
                    added as f64 / prefill_s
                } else {
                    0.0
                };
                engine.truncate_records(mark);
                emit(row)?;
            }
        }
    }
    Ok(())
}

/// Decodes one point from the prompts already in `engine`'s cache (`first[i]` is sequence i's
/// token after its prompt): warm-up, timed steps, breakdown steps; writes its trace.
#[allow(clippy::too_many_arguments)]
fn measure(
    args: &Args,
    engine: &mut Engine,
    model: &crate::model::Model,
    ids: &[u32],
    prompts: &[Vec<u32>],
    first: &[u32],
    kv: KvConfig,
    g: &Group,
    level: Timestamps,
) -> anyhow::Result<Row> {
    let (name, knobs) = (g.name.as_str(), g.knobs);
    let mut seqs = Decoding {
        positions: prompts.iter().map(|p| p.len() as u32).collect(),
        first_ids: vec![first[0]],
        last: first.to_vec(),
    };
    seqs.run(engine, args.warmup)?;
    let timed_from = engine.records().len();
    seqs.run(engine, args.max_tokens)?;
    let timed_to = engine.records().len();
    let generation = Generation {
        prompt_tokens: prompts[0].len(),
        ids: seqs.first_ids.clone(),
        logits: Vec::new(),
        vocab: 0,
        text: String::new(),
        stop: StopReason::MaxTokens,
        prefill_ns: 0,
        decode_ns: 0,
        step_ns: Vec::new(),
    };
    let spec = CaptureSpec {
        model_name: args.model.model.clone(),
        prompt: args.prompt.prompt.clone(),
        prompt_ids: ids.to_vec(),
        decode_tokens: args.warmup + args.max_tokens,
        knobs,
        timestamps: level,
        logits_readback: false,
        kv,
    };
    let trace = build_trace(engine, model, &spec, &generation);
    let timed: Vec<&TokenRecord> = engine.records()[timed_from..timed_to]
        .iter()
        .filter(|t| t.phase == Phase::Decode)
        .collect();
    let m = medians(&timed);
    let gaps: Vec<f64> = if engine.clock().calibrated {
        let recs = engine.records();
        (timed_from..timed_to)
            .filter(|&i| recs[i].phase == Phase::Decode)
            .filter_map(|i| profiler::stats::gpu_gap_ns(recs, i).map(|g| g as f64 / 1e3))
            .collect()
    } else {
        Vec::new()
    };
    let gpu_gap_us = (!gaps.is_empty()).then(|| median(gaps));
    let decode_steps = timed.len();
    let (attention_gpu_us, gather_gpu_us) = if args.breakdown > 0 {
        engine.set_timestamps(Timestamps::Dispatch)?;
        let from = engine.records().len();
        seqs.run(engine, args.breakdown)?;
        let ops = engine.ops();
        let is_attention = |op: u32| {
            ops.get(op as usize)
                .is_some_and(|o| o.kind == "attention" || o.label.ends_with("kv_gather"))
        };
        let is_gather = |op: u32| {
            ops.get(op as usize)
                .is_some_and(|o| o.label.ends_with("kv_gather"))
        };
        let records = &engine.records()[from..];
        let per_step = |pick: &dyn Fn(u32) -> bool| picked_us(records, pick, m.gpu_us);
        // A program with no attention dispatch of its own (the persistent kernel runs the whole
        // token in one) has no attention time to report.
        let separate = records
            .iter()
            .any(|t| t.gpu_spans.iter().any(|s| is_attention(s.op())));
        (
            separate.then(|| per_step(&is_attention)),
            kv.gathers().then(|| per_step(&is_gather)),
        )
    } else {
        (None, None)
    };
    let context = prompts[0].len();
    let file = args.out.join(format!(
        "{}-{}-b{}-c{}{}.json",
        name.replace([' ', ':'], "_").replace("--", ""),
        kv.layout_name().replace(':', "") + if kv.gathers() { "-gather" } else { "" },
        kv.batch,
        context,
        if args.timestamps.len() > 1 {
            format!("-t{}", level.name())
        } else {
            String::new()
        }
    ));
    profiler::io::write_trace(&file, &trace)
        .with_context(|| format!("cannot write {}", file.display()))?;
    let shape = engine.shape();
    let kv_row_bytes = shape.kv_dim() as u64 * kv.dtype.bytes();
    let bytes_per_step = shape.weight_bytes_per_token() as f64
        + m.kv_positions * 2.0 * shape.layers as f64 * kv_row_bytes as f64;
    let wall_s = m.wall_us * 1e-6;
    Ok(Row {
        setting: name.to_string(),
        mode: knobs.mode_name().to_string(),
        kv: kv.layout_name(),
        paged_attention: if kv.kind == KvKind::Paged {
            kv.paged_attention.name().into()
        } else {
            String::new()
        },
        batch: kv.batch,
        context,
        timestamps: level.name().into(),
        decode_steps,
        tokens_per_s: if wall_s > 0.0 {
            kv.batch as f64 / wall_s
        } else {
            0.0
        },
        ms_per_step: m.wall_us / 1e3,
        host_enqueue_us: m.host_enqueue_us,
        gpu_us: m.gpu_us,
        gpu_gap_us,
        attention_gpu_us,
        gather_gpu_us,
        submits: m.submits,
        barriers: m.barriers,
        descriptor_writes: m.descriptor_writes,
        dispatches: m.dispatches,
        kv_bytes_copied: m.kv_bytes_copied,
        // Set by the group, which ran the prompt.
        prompt_tokens_per_s: 0.0,
        bytes_per_step,
        achieved_gbps: if wall_s > 0.0 {
            bytes_per_step / wall_s / 1e9
        } else {
            0.0
        },
        roofline_share: engine
            .gpu()
            .bandwidth()
            .filter(|b| b.read_gbps > 0.0 && wall_s > 0.0)
            .map(|b| bytes_per_step / wall_s / 1e9 / b.read_gbps),
        tokens_match: true,
        ids: seqs.first_ids.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::knobs::{Kernels, Submit, Sync};
    use profiler::trace::GpuSpan;

    #[test]
    fn also_settings_take_values_with_colons() {
        let (name, k) = parse_setting("fused:submit=every:4:sync=chained").expect("setting");
        assert_eq!(name, "fused --submit every:4 --sync chained");
        assert_eq!((k.submit, k.sync), (Submit::Every(4), Sync::Chained));
        let (_, k) = parse_setting("fused:kernels=persistent").expect("setting");
        assert_eq!(k.kernels, Kernels::Persistent);
        let err = parse_setting("fused:every:4")
            .expect_err("no knob")
            .to_string();
        assert!(err.contains("\"every:4\" is not KNOB=VALUE"), "{err}");
        assert!(parse_setting("fused").is_err());
    }

    /// A step of two spans: op 0 (`other` us) then op 1 (`picked` us).
    fn step(other: u64, picked: u64) -> TokenRecord {
        TokenRecord {
            gpu_spans: vec![
                GpuSpan(0, 0, other * 1000, 0, 0),
                GpuSpan(1, other * 1000, picked * 1000, 0, 0),
            ],
            ..Default::default()
        }
    }

    #[test]
    fn picked_time_is_a_share_of_the_timed_gpu_time() {
        let is_one = |op: u32| op == 1;
        // A quarter of each step, but one step's timestamps are a thousand times too long.
        let records = vec![step(300, 100), step(300_000, 100_000), step(600, 200)];
        assert_eq!(picked_us(&records, &is_one, Some(2000.0)), 500.0);
        // Without timed GPU time: the median of the sums.
        assert_eq!(picked_us(&records, &is_one, None), 200.0);
        // Steps without spans are left out of the shares.
        let mut empty = records.clone();
        empty.push(TokenRecord::default());
        assert_eq!(picked_us(&empty, &is_one, Some(2000.0)), 500.0);
    }
}
