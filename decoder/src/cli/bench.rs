//! `decoder bench`: load a model once and measure a sweep in one process: presets (and, with
//! `--ablation`, every single knob flipped alone from each preset toward the other) at every
//! context length, batch size and KV layout asked for. Each point prefills its prompts, decodes
//! warm-up steps, then the timed steps at `--timestamps` level, then a few steps at dispatch level
//! for the per-op breakdown (attention GPU time per step). Writes one trace per point,
//! `bench.json` (one row per point) and `bench.md`, and prints the table.

use std::path::PathBuf;

use anyhow::Context as _;
use profiler::trace::{Phase, TokenRecord};
use serde::Serialize;

use super::capture::with_context;
use super::peer;
use super::run::{ModelArgs, PromptArgs, load_model, prompt_ids};
use crate::capture::{CaptureSpec, batch_prompts, build_trace};
use crate::exec::engine::{Engine, EngineOptions, Timestamps, shape_of};
use crate::exec::knobs::{Knobs, Mode};
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
    #[arg(long, default_value_t = 512)]
    pub prefill_chunk: u32,
    /// Presets to run, comma-separated.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "generic,fused"
    )]
    pub mode: Vec<Mode>,
    /// Also flip every knob alone from each preset toward the other (at every point).
    #[arg(long)]
    pub ablation: bool,
    /// GPU timestamp level of the timed steps.
    #[arg(long, value_enum, default_value = "token")]
    pub timestamps: Timestamps,
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
}

/// A named knob setting of a sweep.
pub type Setting = (String, Knobs);

/// The settings of a sweep: `(name, knobs)`, the presets first; refused combinations are
/// returned apart with the reason.
pub fn sweep(
    modes: &[Mode],
    ablation: bool,
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
    }
    (run, refused)
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
    /// GPU time of the attention ops (attention kernels and the paged gather) per decode step,
    /// median over the dispatch-level breakdown steps.
    pub attention_gpu_us: Option<f64>,
    /// The paged gather's share of `attention_gpu_us`.
    pub gather_gpu_us: Option<f64>,
    pub submits: f64,
    pub barriers: f64,
    pub descriptor_writes: f64,
    pub dispatches: f64,
    /// K and V bytes the paged gather copies per step.
    pub kv_bytes_copied: f64,
    /// Prompt tokens (every sequence's) per second of the prefill's wall time.
    pub prompt_tokens_per_s: f64,
    /// Bytes one decode step must read: the weights once plus every K and V row attended.
    pub bytes_per_step: f64,
    /// `bytes_per_step` over the step's median wall time.
    pub achieved_gbps: f64,
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
        "| setting | kv | batch | context | tokens/s | ms/step | host enqueue us | GPU us | attention GPU us | submits | barriers | descriptor writes | dispatches | KV bytes copied | GB/s | prompt tokens/s | same tokens |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n",
    );
    for r in rows {
        let kv = if r.paged_attention.is_empty() {
            r.kv.clone()
        } else {
            format!("{} {}", r.kv, r.paged_attention)
        };
        out.push_str(&format!(
            "| {} | {kv} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.setting,
            r.batch,
            r.context,
            fmt(r.tokens_per_s),
            fmt(r.ms_per_step),
            fmt(r.host_enqueue_us),
            opt(r.gpu_us),
            opt(r.attention_gpu_us),
            r.submits,
            r.barriers,
            r.descriptor_writes,
            r.dispatches,
            r.kv_bytes_copied,
            fmt(r.achieved_gbps),
            fmt(r.prompt_tokens_per_s),
            if r.tokens_match { "yes" } else { "NO" },
        ));
    }
    out
}

/// The KV settings of the sweep at one batch size.
fn kv_settings(args: &Args, batch: u32) -> anyhow::Result<Vec<KvConfig>> {
    let mut out = vec![];
    for &kind in &args.kv {
        let paths: Vec<PagedAttention> = if kind == KvKind::Paged {
            args.paged_attention.clone()
        } else {
            vec![PagedAttention::Fused]
        };
        for path in paths {
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
                paged_attention: path,
                batch,
                prefill_chunk: args.prefill_chunk,
            };
            cfg.validate().map_err(|e| anyhow::anyhow!(e))?;
            out.push(cfg);
        }
    }
    Ok(out)
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
    let model = load_model(&args.model.model)?;
    let base_ids = prompt_ids(&model, &args.prompt)?;
    let gpu = Gpu::new(&GpuOptions {
        device: args.device.clone(),
        validation: false,
    })
    .context("cannot open the Vulkan device")?;
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;
    let (settings, refused) = sweep(&args.mode, args.ablation, gpu.info().push_descriptors);
    let mut points = vec![];
    for &context in &args.context {
        for &batch in &args.batch {
            for kv in kv_settings(&args, batch)? {
                for (name, knobs) in &settings {
                    points.push((context, kv, name.clone(), *knobs));
                }
            }
        }
    }
    eprintln!(
        "bench on {}: {} points ({} settings x {} contexts x {} batch sizes x {} KV settings), {} timed decode steps each",
        gpu.info().name,
        points.len(),
        settings.len(),
        args.context.len(),
        args.batch.len(),
        points.len() / (settings.len() * args.context.len() * args.batch.len()).max(1),
        args.max_tokens
    );
    let bar = indicatif::ProgressBar::new(points.len() as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("[{pos}/{len}] {wide_msg} ({elapsed})")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut rows: Vec<Row> = Vec::new();
    for (context, kv, name, knobs) in points {
        bar.set_message(format!("{name} {kv} context {context}"));
        let mut row = point(&args, &gpu, &model, &base_ids, context, kv, &name, knobs)
            .with_context(|| format!("bench point {name} {kv} at context {context}"))?;
        if let Some(first) = rows
            .iter()
            .find(|r| r.context == row.context && r.batch == row.batch)
        {
            row.tokens_match = first.ids == row.ids;
            if !row.tokens_match {
                bar.println(format!(
                    "warning: {name} {} generated other tokens than {} {} at the same context and batch",
                    row.kv, first.setting, first.kv
                ));
            }
        }
        bar.println(format!(
            "{name} {} batch {} context {}: {:.1} tokens/s, {:.2} ms/step, attention {} us/step",
            row.kv,
            row.batch,
            row.context,
            row.tokens_per_s,
            row.ms_per_step,
            opt(row.attention_gpu_us)
        ));
        rows.push(row);
        bar.inc(1);
    }
    bar.finish_and_clear();
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
    let mut text = table(&rows);
    if !peers.is_empty() {
        text.push_str(&peer_table(&rows, &peers));
    }
    if let Some(e) = &peer_error {
        text.push_str(&format!("\nllama.cpp side by side failed: {e}\n"));
    }
    for (name, why) in &refused {
        text.push_str(&format!("\nrefused: {name}: {why}\n"));
    }
    println!("{text}");
    let md = args.out.join("bench.md");
    write_atomic(&md, text.as_bytes())?;
    let json = serde_json::json!({
        "device": gpu.info().name,
        "driver": format!("{} {}", gpu.info().driver_name, gpu.info().driver_info),
        "model": args.model.model,
        "weight_bytes_per_token": shape_of(&model.config, 1).weight_bytes_per_token(),
        "rows": rows,
        "peers": peers,
        "peer_error": peer_error,
        "refused": refused.iter().map(|(n, w)| serde_json::json!({"setting": n, "reason": w})).collect::<Vec<_>>(),
    });
    let js = args.out.join("bench.json");
    write_atomic(&js, serde_json::to_string_pretty(&json)?.as_bytes())?;
    eprintln!(
        "wrote {}, {} and one trace per point",
        md.display(),
        js.display()
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
        let c = server
            .complete(ids, n_predict)
            .with_context(|| format!("llama.cpp at context {}", ids.len()))?;
        // decodescope's sequence 0 at this context, batch 1 (the first setting measured).
        let ours = rows
            .iter()
            .find(|r| r.context == ids.len() && r.batch == 1)
            .map(|r| r.ids.as_slice())
            .unwrap_or(&[]);
        let (shared, compared) = peer::shared_prefix(&c.tokens, ours);
        eprintln!(
            "llama.cpp context {}: {:.1} tokens/s, {shared} of {compared} leading tokens as decodescope",
            ids.len(),
            c.predicted_per_second
        );
        out.push(peer::PeerRow {
            runtime: "llama.cpp (Vulkan)".into(),
            context: ids.len(),
            decode_tokens: c.predicted_n,
            tokens_per_s: c.predicted_per_second,
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

fn write_atomic(path: &std::path::Path, bytes: &[u8]) -> anyhow::Result<()> {
    let tmp = path.with_extension("partial");
    std::fs::write(&tmp, bytes).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))
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

/// Measures one point: prefill, warm-up, timed steps, breakdown steps.
#[allow(clippy::too_many_arguments)]
fn point(
    args: &Args,
    gpu: &Gpu,
    model: &crate::model::Model,
    base_ids: &[u32],
    context: usize,
    kv: KvConfig,
    name: &str,
    knobs: Knobs,
) -> anyhow::Result<Row> {
    let ids = with_context(base_ids.to_vec(), context);
    let prompts = batch_prompts(&ids, kv.batch);
    let steps = args.warmup + args.max_tokens + args.breakdown;
    let max_seq = (ids.len() + steps + 2) as u32;
    let opts = EngineOptions {
        knobs,
        timestamps: args.timestamps,
        max_seq,
        kv,
        logits_readback: false,
    };
    let mut engine = Engine::new(gpu, &model.config, &model.weights, opts)
        .context("cannot set up the Vulkan decoder")?;
    let mut last: Vec<u32> = Vec::with_capacity(prompts.len());
    let prefill_start = std::time::Instant::now();
    for (seq, p) in prompts.iter().enumerate() {
        last.push(engine.prefill(seq as u32, p, 0)?.argmax);
    }
    let prefill_s = prefill_start.elapsed().as_secs_f64();
    let prompt_tokens: usize = prompts.iter().map(Vec::len).sum();
    let mut seqs = Decoding {
        positions: prompts.iter().map(|p| p.len() as u32).collect(),
        first_ids: vec![last[0]],
        last,
    };
    seqs.run(&mut engine, args.warmup)?;
    let timed_from = engine.records().len();
    seqs.run(&mut engine, args.max_tokens)?;
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
        prompt_ids: ids.clone(),
        decode_tokens: args.warmup + args.max_tokens,
        knobs,
        timestamps: args.timestamps,
        logits_readback: false,
        kv,
    };
    let trace = build_trace(&engine, model, &spec, &generation);
    let timed: Vec<&TokenRecord> = engine.records()[timed_from..timed_to]
        .iter()
        .filter(|t| t.phase == Phase::Decode)
        .collect();
    let m = medians(&timed);
    let decode_steps = timed.len();
    let (attention_gpu_us, gather_gpu_us) = if args.breakdown > 0 {
        engine.set_timestamps(Timestamps::Dispatch)?;
        let from = engine.records().len();
        seqs.run(&mut engine, args.breakdown)?;
        let ops = engine.ops();
        let is_attention = |op: u32| {
            ops.get(op as usize)
                .is_some_and(|o| o.kind == "attention" || o.label.ends_with("kv_gather"))
        };
        let is_gather = |op: u32| {
            ops.get(op as usize)
                .is_some_and(|o| o.label.ends_with("kv_gather"))
        };
        let per_step = |pick: &dyn Fn(u32) -> bool| {
            median(
                engine.records()[from..]
                    .iter()
                    .map(|t| {
                        t.gpu_spans
                            .iter()
                            .filter(|s| pick(s.op()))
                            .map(|s| s.dur_ns() as f64 / 1e3)
                            .sum::<f64>()
                    })
                    .collect(),
            )
        };
        (
            Some(per_step(&is_attention)),
            kv.gathers().then(|| per_step(&is_gather)),
        )
    } else {
        (None, None)
    };
    let file = args.out.join(format!(
        "{}-{}-b{}-c{}.json",
        name.replace([' ', ':'], "_").replace("--", ""),
        kv.layout_name().replace(':', "") + if kv.gathers() { "-gather" } else { "" },
        kv.batch,
        context
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
        context: prompts[0].len(),
        timestamps: args.timestamps.name().into(),
        decode_steps,
        tokens_per_s: if wall_s > 0.0 {
            kv.batch as f64 / wall_s
        } else {
            0.0
        },
        ms_per_step: m.wall_us / 1e3,
        host_enqueue_us: m.host_enqueue_us,
        gpu_us: m.gpu_us,
        attention_gpu_us,
        gather_gpu_us,
        submits: m.submits,
        barriers: m.barriers,
        descriptor_writes: m.descriptor_writes,
        dispatches: m.dispatches,
        kv_bytes_copied: m.kv_bytes_copied,
        prompt_tokens_per_s: if prefill_s > 0.0 {
            prompt_tokens as f64 / prefill_s
        } else {
            0.0
        },
        bytes_per_step,
        achieved_gbps: if wall_s > 0.0 {
            bytes_per_step / wall_s / 1e9
        } else {
            0.0
        },
        tokens_match: true,
        ids: seqs.first_ids.clone(),
    })
}
