//! `decoder bench`: load a model once and measure a sweep in one process: presets (and, with
//! `--ablation`, every single knob flipped alone from each preset toward the other and every knob
//! value neither preset uses; with `--also`, named settings such as `fused:kernels=persistent`) at every
//! context length, batch size and KV layout asked for. Each setting, layout, batch size and
//! context gets an engine of its own whose KV capacity is that context's, so a point runs the
//! tuning a run of that context gets (split plans, the persistent kernel's workgroup); the
//! contexts run in ascending order on one growing prompt, and at each every paged attention path
//! decodes from the same cache in turn:
//! warm-up steps, the timed steps at `--timestamps` level, then a few steps at dispatch level for
//! the per-op breakdown (attention GPU time per step), rewound before the next. Writes one trace
//! per point, `bench.json` (one row per point) and `bench.md` (both rewritten after every point
//! while the sweep runs), and prints the table.

use std::path::PathBuf;

use anyhow::Context as _;
use profiler::stats::median;
use profiler::trace::{Phase, TokenRecord};
use serde::Serialize;

use super::capture::with_context;
use super::peer;
use super::run::{ModelArgs, PromptArgs, load_model, prompt_ids};
use crate::capture::{CaptureSpec, batch_prompts, build_trace};
use crate::exec::engine::{Engine, EngineOptions, Timestamps, shape_of};
use crate::exec::knobs::{Kernels, Knobs, Mode};
use crate::exec::program::WeightTypes;
use crate::generate::Generation;
use crate::kv::{KvConfig, KvDtype, KvKind, PagedAttention};
use crate::vk::{Gpu, GpuOptions};

mod measure;
mod report;

use measure::*;
use report::*;
pub use report::{Row, peer_table, table};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub tuning: super::gpu::TuningArgs,
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
    /// every context (batch 1); its decode tokens/s goes into the table beside ours. When the
    /// server refuses its own greedy text (not valid UTF-8, as random weights produce), the
    /// completion runs again with the vocabulary's partial-character tokens banned, and the
    /// table says so.
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

pub fn run(args: Args) -> anyhow::Result<()> {
    // A bad DECODESCOPE_TUNING is refused before the sweep, not at its first point.
    args.tuning.overrides()?;
    let also = args
        .also
        .iter()
        .map(|s| parse_setting(s))
        .collect::<anyhow::Result<Vec<_>>>()?;
    // A --llama-server with no binary there is refused before the sweep; a server that fails to
    // run later costs its rows only (peer_rows).
    if let Some(path) = &args.llama_server {
        peer::server_binary(path)?;
    }
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
        probe_bandwidth(&gpu)
    };
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;
    let (settings, mut refused) = sweep(
        &args.mode,
        args.ablation,
        &also,
        gpu.info().push_descriptors,
    );
    // A group shares its prompts: contexts in ascending order extend the same prompt, each in an
    // engine sized for it, and the paged attention paths decode from the same cache one after the
    // other. Rows are reported in sweep order.
    let mut contexts = args.context.clone();
    contexts.sort_unstable();
    contexts.dedup();
    let groups = groups(&args, &settings, &mut refused)?;
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
        weight_bytes_per_token: shape_of(&model.config, 1)
            .weight_bytes_per_token(&WeightTypes::of(&model.weights)),
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
                bar.println(progress_line(&row));
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
    let (peers, peer_error) = peer_rows(&args, &base_ids, &rows);
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

/// Measures the device's memory bandwidth for the rows' roofline shares (None where it fails).
fn probe_bandwidth(gpu: &Gpu) -> Option<crate::vk::Bandwidth> {
    eprintln!("probing the memory bandwidth of {}", gpu.info().name);
    let b = super::gpu::probe_or_warn(gpu);
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
}

/// The sweep's engines: every setting at every KV layout and batch size, each with the paged
/// attention paths it decodes. A path a setting cannot take is left out and added to `refused`.
fn groups(
    args: &Args,
    settings: &[Setting],
    refused: &mut Vec<(String, String)>,
) -> anyhow::Result<Vec<Group>> {
    let mut groups = vec![];
    for &batch in &args.batch {
        for (kv, paths) in kv_groups(args, batch)? {
            for (name, knobs) in settings {
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
    Ok(groups)
}

/// The line printed as each point is measured.
fn progress_line(row: &Row) -> String {
    format!(
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
        row.roofline_share.map_or(String::new(), |v| format!(
            ", {:.1}% of the roofline",
            100.0 * v
        ))
    )
}

/// llama.cpp's rows with `--llama-server`, and why they are missing where it failed: a peer
/// that fails to run costs its rows, not the sweep's.
fn peer_rows(args: &Args, base_ids: &[u32], rows: &[Row]) -> (Vec<peer::PeerRow>, Option<String>) {
    match &args.llama_server {
        Some(path) => match llama_rows(args, path, base_ids, rows) {
            Ok(p) => (p, None),
            Err(e) => {
                eprintln!("warning: llama.cpp side by side failed: {e:#}");
                (Vec::new(), Some(format!("{e:#}")))
            }
        },
        None => (Vec::new(), None),
    }
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
                GpuSpan(0, 0, other * 1000, 0, 0, 1),
                GpuSpan(1, other * 1000, picked * 1000, 0, 0, 1),
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
