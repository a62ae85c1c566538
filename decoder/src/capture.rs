//! Captures: run a generation on the Vulkan engine and turn its records into a trace (in memory,
//! or streamed into the trace file as the steps run), plus the per-token summaries that `decoder
//! run` and `decoder capture` print.

use std::path::Path;

use anyhow::Context as _;
use profiler::io::TraceWriter;
use profiler::stats::median;
use profiler::trace::{
    DeviceMeta, FORMAT_NAME, FORMAT_VERSION, Meta, ModelMeta, PersistentGridMeta, Phase, RunMeta,
    TokenRecord, ToolMeta, Trace, TuningMeta,
};

use crate::exec::engine::{Engine, EngineOptions, Timestamps, shape_of};
use crate::exec::knobs::Knobs;
use crate::exec::program::TuningOverrides;
use crate::generate::{GenerateOptions, Generation, generate, generate_batch};
use crate::kv::{KvConfig, KvKind};
use crate::model::Model;
use crate::vk::Gpu;

/// What to capture.
#[derive(Clone, Debug)]
pub struct CaptureSpec {
    /// The model's name as the user gave it (preset or directory name).
    pub model_name: String,
    pub prompt: String,
    pub prompt_ids: Vec<u32>,
    /// Decode steps to run after the prefill (EOS is ignored so every capture has the asked
    /// length); the generation holds `decode_tokens + 1` tokens, the first from the prefill.
    pub decode_tokens: usize,
    pub knobs: Knobs,
    pub timestamps: Timestamps,
    /// Read the logits back every step (for logit comparisons; changes the counters).
    pub logits_readback: bool,
    /// KV layout, element type, batch and prompt chunk.
    pub kv: KvConfig,
    /// Tuning keys set on the command line, over the device's defaults.
    pub tuning: TuningOverrides,
}

/// The prompts of a batch: sequence b decodes after the first `len - b * step` tokens of
/// `ids` (`step = ceil(len / (2 * batch))`), so the sequences have different lengths, the
/// longest the whole prompt, the shortest about half of it.
pub fn batch_prompts(ids: &[u32], batch: u32) -> Vec<Vec<u32>> {
    let b = batch.max(1) as usize;
    let step = ids.len().div_ceil(2 * b);
    (0..b)
        .map(|i| ids[..ids.len().saturating_sub(i * step).max(1)].to_vec())
        .collect()
}

/// Runs `spec` on `gpu` and returns the trace and the generation (every record in memory).
pub fn capture(
    gpu: &Gpu,
    model: &Model,
    spec: &CaptureSpec,
) -> anyhow::Result<(Trace, Generation)> {
    let mut engine = engine_for(gpu, model, spec)?;
    let generation = generate_for(&mut engine, model, spec)?;
    let trace = build_trace(&engine, model, spec, &generation);
    Ok((trace, generation))
}

/// A capture streamed into its trace file ([`capture_to`]).
#[derive(Debug)]
pub struct Streamed {
    /// The complete trace, beside its path until [`profiler::io::StagedOutput::commit`].
    pub staged: profiler::io::StagedOutput,
    pub summary: Summary,
    pub generation: Generation,
}

/// Runs `spec` on `gpu` and writes its trace to `path` as it runs, one step's record at a time
/// (`profiler::io::TraceWriter`): memory holds each record without its spans, not the trace, so
/// a capture of any length at `--timestamps dispatch` keeps its memory flat. The trace is staged
/// beside `path`; nothing replaces `path` until the caller commits it.
pub fn capture_to(
    gpu: &Gpu,
    model: &Model,
    spec: &CaptureSpec,
    path: &Path,
) -> anyhow::Result<Streamed> {
    let mut engine = engine_for(gpu, model, spec)?;
    engine.stream_records(TraceWriter::create(path)?)?;
    let generation = generate_for(&mut engine, model, spec)?;
    let meta = trace_meta(&engine, model, spec, &generation);
    let summary = summarize_records(engine.records(), meta.run.batch);
    let staged = engine.finish_stream(&meta)?;
    Ok(Streamed {
        staged,
        summary,
        generation,
    })
}

/// The engine for `spec`, with room for its prompt and decode tokens.
fn engine_for(gpu: &Gpu, model: &Model, spec: &CaptureSpec) -> anyhow::Result<Engine> {
    let max_seq = spec
        .prompt_ids
        .len()
        .checked_add(spec.decode_tokens)
        .and_then(|n| n.checked_add(2))
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| {
            anyhow::anyhow!(
                "{} prompt tokens and {} decode tokens need more than 2^32 - 2 positions, the most \
                 the engine addresses; lower --context or --max-tokens",
                spec.prompt_ids.len(),
                spec.decode_tokens
            )
        })?;
    let opts = EngineOptions {
        knobs: spec.knobs,
        timestamps: spec.timestamps,
        max_seq,
        kv: spec.kv,
        logits_readback: spec.logits_readback,
        tuning: spec.tuning,
    };
    let engine = Engine::new(gpu, &model.config, &model.weights, opts)
        .context("cannot set up the Vulkan decoder")?;
    for line in engine.persistent_report() {
        eprintln!("{line}");
    }
    Ok(engine)
}

/// Runs the prompt and the decode steps of `spec` on `engine` (every sequence of a batch; the
/// first one's generation is returned).
fn generate_for(
    engine: &mut Engine,
    model: &Model,
    spec: &CaptureSpec,
) -> anyhow::Result<Generation> {
    if spec.kv.batch > 1 {
        let prompts = batch_prompts(&spec.prompt_ids, spec.kv.batch);
        let mut gens = generate_batch(
            engine,
            &prompts,
            spec.decode_tokens + 1,
            spec.logits_readback,
        )?;
        let mut first = gens.swap_remove(0);
        first.text = model.tokenizer.decode(&first.ids).unwrap_or_default();
        return Ok(first);
    }
    let gen_opts = GenerateOptions {
        max_tokens: spec.decode_tokens + 1,
        temperature: 0.0,
        top_p: 1.0,
        seed: 0,
        ignore_eos: true,
        dump_logits: spec.logits_readback,
    };
    generate(
        engine,
        &model.tokenizer,
        &spec.prompt_ids,
        &gen_opts,
        &mut |_| {},
    )
}

/// The trace of everything `engine` ran.
pub fn build_trace(
    engine: &Engine,
    model: &Model,
    spec: &CaptureSpec,
    generation: &Generation,
) -> Trace {
    Trace {
        format: FORMAT_NAME.into(),
        version: FORMAT_VERSION,
        meta: trace_meta(engine, model, spec, generation),
        ops: engine.ops().to_vec(),
        tokens: engine.records().to_vec(),
    }
}

/// The metadata of a trace of what `engine` ran for `spec`.
pub fn trace_meta(
    engine: &Engine,
    model: &Model,
    spec: &CaptureSpec,
    generation: &Generation,
) -> Meta {
    let info = engine.gpu().info();
    let cfg = &model.config;
    let shape = shape_of(cfg, engine.shape().max_seq);
    Meta {
        tool: ToolMeta {
            name: "decodescope".into(),
            version: env!("CARGO_PKG_VERSION").into(),
        },
        created_unix_ms: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64),
        epoch_host_ns: engine.epoch_ns(),
        device: DeviceMeta {
            name: info.name.clone(),
            device_type: info.device_type.clone(),
            vendor_id: info.vendor_id,
            device_id: info.device_id,
            driver: profiler::vulkan::driver(&info.driver_name, &info.driver_info),
            api_version: info.api_version.clone(),
            timestamp_period_ns: info.timestamp_period_ns as f64,
            compute_units: info.compute_units,
            memory_bandwidth_gbps: engine.gpu().bandwidth().map(|b| b.read_gbps),
        },
        clock: engine.clock().clone(),
        model: ModelMeta {
            name: spec.model_name.clone(),
            architecture: cfg.arch.model_type().into(),
            parameters: cfg.parameter_count(),
            layers: cfg.layers as u32,
            hidden: cfg.hidden as u32,
            heads: cfg.heads as u32,
            kv_heads: cfg.kv_heads as u32,
            head_dim: cfg.head_dim as u32,
            intermediate: cfg.intermediate as u32,
            vocab: cfg.vocab as u32,
            weight_dtype: engine.weight_types().describe(),
            weight_bytes_per_token: shape.weight_bytes_per_token(engine.weight_types()),
        },
        knobs: spec.knobs.to_trace(),
        run: RunMeta {
            prompt: spec.prompt.clone(),
            prompt_tokens: spec.prompt_ids.len() as u32,
            decode_tokens: spec.decode_tokens as u32,
            context: 0,
            kv_layout: spec.kv.layout_name(),
            kv_dtype: spec.kv.dtype.name().into(),
            kv_block_size: if spec.kv.kind == KvKind::Paged {
                spec.kv.block
            } else {
                0
            },
            kv_window: spec.kv.attention_window(),
            paged_attention: if spec.kv.kind == KvKind::Paged {
                spec.kv.paged_attention.name().into()
            } else {
                String::new()
            },
            batch: spec.kv.batch.max(1),
            prefill_chunk: spec.kv.prefill_chunk,
            timestamps: spec.timestamps.name().into(),
            generated_ids: generation.ids.clone(),
            generated_text: generation.text.clone(),
            tuning: Some(tuning_meta(engine, &spec.tuning)),
        },
        capture: None,
    }
}

/// The tuning `engine` resolved (every key, defaults included) and the persistent kernel's grid,
/// for `meta.run.tuning`; `overrides` are the keys the command line set.
pub fn tuning_meta(engine: &Engine, overrides: &TuningOverrides) -> TuningMeta {
    let t = engine.tuning();
    TuningMeta {
        keys: t
            .values()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        overrides: overrides.to_string(),
        persistent_grid: engine.persistent_grid().map(|(workgroups, invocations)| {
            PersistentGridMeta {
                workgroups,
                invocations,
                subgroup_size: t.subgroup,
                head_groups: crate::exec::persistent::head_groups(
                    engine.shape(),
                    t,
                    engine.kv_config().batch.max(1),
                ),
            }
        }),
    }
}

/// Per-decode-token medians of one capture: the numbers the A/B table compares.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Summary {
    pub decode_tokens: usize,
    pub submits: f64,
    pub barriers: f64,
    pub descriptor_writes: f64,
    pub dispatches: f64,
    pub command_buffers_begun: f64,
    pub fence_waits: f64,
    pub host_enqueue_us: f64,
    pub gpu_us: Option<f64>,
    pub wall_us: f64,
    pub tokens_per_s: f64,
}

/// Medians over the decode tokens of `trace` (the prefill excluded).
pub fn summarize(trace: &Trace) -> Summary {
    summarize_records(&trace.tokens, trace.meta.run.batch)
}

/// Medians over the decode records of `tokens` (the prefill excluded), a record of a batch of
/// `batch` sequences advancing each by one token. Reads no spans, so the span-less records of
/// a streamed capture give the same summary as the trace.
pub fn summarize_records(tokens: &[TokenRecord], batch: u32) -> Summary {
    let d: Vec<_> = tokens.iter().filter(|t| t.phase == Phase::Decode).collect();
    let m =
        |f: &dyn Fn(&profiler::trace::TokenRecord) -> f64| median(d.iter().map(|t| f(t)).collect());
    let gpu: Vec<f64> = d
        .iter()
        .filter_map(|t| t.gpu_busy_ns.map(|g| g as f64 / 1e3))
        .collect();
    let wall_us = m(&|t| t.wall_ns as f64 / 1e3);
    // A decode record of a batch advances every sequence by one token.
    let batch = batch.max(1) as f64;
    Summary {
        decode_tokens: d.len(),
        submits: m(&|t| t.counters.submits() as f64),
        barriers: m(&|t| t.counters.barrier_calls as f64),
        descriptor_writes: m(&|t| t.counters.descriptor_writes as f64),
        dispatches: m(&|t| t.counters.dispatches as f64),
        command_buffers_begun: m(&|t| t.counters.command_buffers_begun as f64),
        fence_waits: m(&|t| t.counters.fence_waits as f64),
        host_enqueue_us: m(&|t| t.host_enqueue_ns as f64 / 1e3),
        gpu_us: (!gpu.is_empty()).then(|| median(gpu)),
        wall_us,
        tokens_per_s: if wall_us > 0.0 {
            batch * 1e6 / wall_us
        } else {
            0.0
        },
    }
}

fn fmt(v: f64) -> String {
    if v == v.trunc() && v.abs() < 1e9 {
        format!("{v:.0}")
    } else if v.abs() >= 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// What a row of the A/B table holds, which decides how it is written and compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RowKind {
    /// The same in every column by construction (the token count): not compared.
    Identity,
    /// A count per token: fewer is better.
    Count,
    /// A time per token in µs, written in the unit that suits it: less is better.
    Time,
    /// A rate: more is better.
    Rate,
}

type Row = (&'static str, RowKind, fn(&Summary) -> Option<f64>);

/// The rows of the A/B table, in order.
const ROWS: &[Row] = &[
    ("decode tokens", RowKind::Identity, |s| {
        Some(s.decode_tokens as f64)
    }),
    ("submits / token", RowKind::Count, |s| Some(s.submits)),
    ("barriers / token", RowKind::Count, |s| Some(s.barriers)),
    ("descriptor writes / token", RowKind::Count, |s| {
        Some(s.descriptor_writes)
    }),
    ("dispatches / token", RowKind::Count, |s| Some(s.dispatches)),
    ("command buffers begun / token", RowKind::Count, |s| {
        Some(s.command_buffers_begun)
    }),
    ("fence waits / token", RowKind::Count, |s| {
        Some(s.fence_waits)
    }),
    ("host enqueue / token", RowKind::Time, |s| {
        Some(s.host_enqueue_us)
    }),
    ("GPU time / token", RowKind::Time, |s| s.gpu_us),
    ("wall time / token", RowKind::Time, |s| Some(s.wall_us)),
    ("tokens / s", RowKind::Rate, |s| Some(s.tokens_per_s)),
];

/// A table of per-decode-token medians, one column per named capture. With two captures a last
/// column says how the second compares with the first, oriented per row so that it reads the
/// right way: `88.0x better` for fewer submits and for more tokens per second alike.
pub fn table(columns: &[(&str, &Summary)]) -> String {
    let mut cells: Vec<Vec<String>> = vec![];
    let mut header = vec!["median per decode token".to_string()];
    header.extend(columns.iter().map(|(n, _)| n.to_string()));
    let compare = columns.len() == 2;
    if compare {
        header.push(format!("{} vs {}", columns[1].0, columns[0].0));
    }
    cells.push(header);
    for (name, kind, f) in ROWS {
        let mut row = vec![name.to_string()];
        let vals: Vec<Option<f64>> = columns.iter().map(|(_, s)| f(s)).collect();
        row.extend(vals.iter().map(|v| match (v, kind) {
            (None, _) => "-".into(),
            (Some(v), RowKind::Time) => profiler::fmt_us(*v),
            (Some(v), _) => fmt(*v),
        }));
        if compare {
            row.push(match kind {
                RowKind::Identity => String::new(),
                RowKind::Count | RowKind::Time => {
                    profiler::fmt_speedup(vals[0], vals[1], profiler::Better::Lower)
                }
                RowKind::Rate => profiler::fmt_speedup(vals[0], vals[1], profiler::Better::Higher),
            });
        }
        cells.push(row);
    }
    let width = |s: &str| s.chars().count();
    let widths: Vec<usize> = (0..cells[0].len())
        .map(|c| cells.iter().map(|r| width(&r[c])).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for (i, r) in cells.iter().enumerate() {
        let line: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(c, s)| {
                let pad = " ".repeat(widths[c] - width(s));
                if c == 0 {
                    format!("{s}{pad}")
                } else {
                    format!("{pad}{s}")
                }
            })
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
        if i == 0 {
            out.push_str(
                &widths
                    .iter()
                    .map(|w| "-".repeat(*w))
                    .collect::<Vec<_>>()
                    .join("  "),
            );
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Per-token medians shaped like lavapipe's generic and fused captures.
    fn generic_and_fused() -> (Summary, Summary) {
        let generic = Summary {
            decode_tokens: 24,
            submits: 88.0,
            barriers: 88.0,
            descriptor_writes: 79.0,
            dispatches: 79.0,
            command_buffers_begun: 88.0,
            fence_waits: 88.0,
            host_enqueue_us: 552.8,
            gpu_us: None,
            wall_us: 27_400.0,
            tokens_per_s: 36.5,
        };
        let fused = Summary {
            decode_tokens: 24,
            submits: 1.0,
            barriers: 31.0,
            descriptor_writes: 0.0,
            dispatches: 31.0,
            command_buffers_begun: 0.0,
            fence_waits: 1.0,
            host_enqueue_us: 13.61,
            gpu_us: None,
            wall_us: 5_480.0,
            tokens_per_s: 182.5,
        };
        (generic, fused)
    }

    fn row<'a>(table: &'a str, name: &str) -> Vec<&'a str> {
        let line = table
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no row {name} in\n{table}"));
        line[name.len()..]
            .split("  ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .collect()
    }

    #[test]
    fn the_comparison_reads_better_for_fewer_calls_and_more_tokens() {
        let (g, f) = generic_and_fused();
        let t = table(&[("generic", &g), ("fused", &f)]);
        assert!(
            t.lines()
                .next()
                .is_some_and(|h| h.ends_with("fused vs generic")),
            "{t}"
        );
        assert_eq!(row(&t, "submits / token"), ["88", "1", "88.0x better"]);
        assert_eq!(
            row(&t, "descriptor writes / token"),
            ["79", "0", "eliminated"]
        );
        assert_eq!(
            row(&t, "host enqueue / token"),
            ["552.8 µs", "13.61 µs", "40.6x better"]
        );
        assert_eq!(
            row(&t, "wall time / token"),
            ["27.40 ms", "5.48 ms", "5.00x better"]
        );
        // Throughput is higher-is-better: fused's 5x the tokens/s is better, not "0.2x".
        assert_eq!(row(&t, "tokens / s"), ["36.50", "182.5", "5.00x better"]);
        assert_eq!(row(&t, "GPU time / token"), ["-", "-", "-"]);
        assert_eq!(row(&t, "decode tokens"), ["24", "24"]);
        // Swapped, every comparison turns to worse.
        let t = table(&[("fused", &f), ("generic", &g)]);
        assert_eq!(row(&t, "tokens / s"), ["182.5", "36.50", "5.00x worse"]);
        assert_eq!(row(&t, "submits / token"), ["1", "88", "88.0x worse"]);
        assert_eq!(row(&t, "descriptor writes / token"), ["0", "79", "new"]);
    }

    #[test]
    fn columns_line_up_with_multibyte_units() {
        let (g, f) = generic_and_fused();
        let t = table(&[("generic", &g), ("fused", &f)]);
        let lines: Vec<&str> = t.lines().collect();
        let width = lines[1].chars().count();
        for l in &lines {
            assert!(
                l.chars().count() <= width,
                "{l:?} is wider than the rule\n{t}"
            );
        }
        let host = lines
            .iter()
            .find(|l| l.starts_with("host enqueue"))
            .expect("host row");
        assert_eq!(host.chars().count(), width, "{t}");
        // One capture: no comparison column.
        let one = table(&[("fused", &f)]);
        assert!(!one.contains("vs"), "{one}");
    }
}
