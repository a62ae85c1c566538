//! Synthetic traces: realistic, deterministic captures built without a GPU.
//!
//! Used for the scale benchmark (10,000 tokens at dispatch level), the golden-file tests, the fuzz
//! corpus, and by anyone who needs a trace before the decoder can write one
//! (`profiler synth-trace`). The shapes follow a Qwen3-like model (hidden 1024, 16 query heads,
//! 8 KV heads, head_dim 128, f16 weights); GPU times are bytes over bandwidth plus a per-dispatch
//! overhead, with seeded noise. Nothing here is measured: never present these numbers as results.

use crate::rng::Rng;
use crate::trace::{
    ClockMeta, Counters, DeviceMeta, FORMAT_NAME, FORMAT_VERSION, GpuSpan, HostSpan, Knobs, Meta,
    ModelMeta, OpInfo, Phase, RunMeta, TokenRecord, ToolMeta, Trace,
};

/// What a synthetic dispatch does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SynthKernels {
    /// One primitive per dispatch (about 21 per layer), as the generic-primitive preset.
    Primitive,
    /// Fused kernels (7 per layer), as the fused token-region preset.
    Fused,
}

/// When a synthetic step submits its recorded work.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SynthSubmit {
    /// A submit and a fence wait after every dispatch.
    PerDispatch,
    /// A submit and a fence wait after every layer.
    PerLayer,
    /// One submit and one wait per token; the command buffer is recorded once and replayed.
    PerToken,
}

/// Timestamp query level of a synthetic capture.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SynthTimestamps {
    Off,
    Token,
    Region,
    Dispatch,
}

impl SynthTimestamps {
    fn name(self) -> &'static str {
        match self {
            SynthTimestamps::Off => "off",
            SynthTimestamps::Token => "token",
            SynthTimestamps::Region => "region",
            SynthTimestamps::Dispatch => "dispatch",
        }
    }
}

/// Parameters of [`synthetic_trace`].
#[derive(Clone, Debug)]
pub struct SynthOptions {
    pub layers: u32,
    pub prompt_tokens: u32,
    pub decode_tokens: u32,
    pub kernels: SynthKernels,
    pub submit: SynthSubmit,
    pub timestamps: SynthTimestamps,
    /// Empty submits added to every step (to test gates on `submits`).
    pub extra_submits_per_token: u32,
    /// Multiplies every GPU duration (to test timing diffs).
    pub gpu_scale: f64,
    /// Seeds the timing noise.
    pub seed: u64,
    /// Seeds the generated token ids (two captures of the same run share it).
    pub token_seed: u64,
    /// Whether the device had calibrated timestamps (else `fence-fallback`).
    pub calibrated: bool,
}

impl Default for SynthOptions {
    fn default() -> Self {
        SynthOptions {
            layers: 14,
            prompt_tokens: 8,
            decode_tokens: 64,
            kernels: SynthKernels::Primitive,
            submit: SynthSubmit::PerLayer,
            timestamps: SynthTimestamps::Dispatch,
            extra_submits_per_token: 0,
            gpu_scale: 1.0,
            seed: 1,
            token_seed: 42,
            calibrated: true,
        }
    }
}

const HIDDEN: u64 = 1024;
const HEADS: u64 = 16;
const KV_HEADS: u64 = 8;
const HEAD_DIM: u64 = 128;
const INTERMEDIATE: u64 = 3072;
const VOCAB: u64 = 151_936;
const F16: u64 = 2;
const F32: u64 = 4;
const BANDWIDTH_GBPS: f64 = 3000.0;

/// One dispatch of the synthetic schedule.
struct Step {
    op: u32,
    layer: Option<u32>,
    /// Region index within the layer (0 attention, 1 feed-forward), for region-level spans.
    region: u32,
    queue: u8,
    transfer: bool,
}

struct OpTable {
    ops: Vec<OpInfo>,
}

impl OpTable {
    fn add(&mut self, info: OpInfo) -> u32 {
        self.ops.push(info);
        (self.ops.len() - 1) as u32
    }
}

fn matvec(label: String, rows: u64, cols: u64) -> OpInfo {
    OpInfo {
        label,
        kind: "matvec".into(),
        bytes_read: rows * cols * F16 + cols * F32,
        bytes_written: rows * F32,
        flops: 2 * rows * cols,
        ..OpInfo::default()
    }
}

fn simple(label: String, kind: &str, elems: u64) -> OpInfo {
    OpInfo {
        label,
        kind: kind.into(),
        bytes_read: elems * F32,
        bytes_written: elems * F32,
        flops: 4 * elems,
        ..OpInfo::default()
    }
}

fn attention(label: String, per_kv_bytes: u64, per_kv_flops: u64) -> OpInfo {
    OpInfo {
        label,
        kind: "attention".into(),
        bytes_read: HEADS * HEAD_DIM * F32,
        bytes_written: HEADS * HEAD_DIM * F32,
        bytes_read_per_kv: per_kv_bytes,
        flops_per_kv: per_kv_flops,
        ..OpInfo::default()
    }
}

fn schedule(opts: &SynthOptions, table: &mut OpTable) -> Vec<Step> {
    let q = HEADS * HEAD_DIM;
    let kv = KV_HEADS * HEAD_DIM;
    let mut steps = Vec::new();
    let embed = table.add(OpInfo {
        label: "embed".into(),
        kind: "embed".into(),
        bytes_read: HIDDEN * F16,
        bytes_written: HIDDEN * F32,
        ..OpInfo::default()
    });
    steps.push(Step {
        op: embed,
        layer: None,
        region: 0,
        queue: 0,
        transfer: false,
    });
    for l in 0..opts.layers {
        let p = |name: &str| format!("L{l}.{name}");
        let mut ops: Vec<(OpInfo, u32, bool)> = Vec::new();
        match opts.kernels {
            SynthKernels::Primitive => {
                ops.push((simple(p("attn_norm"), "norm", HIDDEN), 0, false));
                ops.push((matvec(p("q_proj"), q, HIDDEN), 0, false));
                ops.push((matvec(p("k_proj"), kv, HIDDEN), 0, false));
                ops.push((matvec(p("v_proj"), kv, HIDDEN), 0, false));
                ops.push((simple(p("q_norm"), "norm", q), 0, false));
                ops.push((simple(p("k_norm"), "norm", kv), 0, false));
                ops.push((simple(p("rope_q"), "rope", q), 0, false));
                ops.push((simple(p("rope_k"), "rope", kv), 0, false));
                ops.push((simple(p("kv_append_k"), "kv", kv), 0, true));
                ops.push((simple(p("kv_append_v"), "kv", kv), 0, true));
                ops.push((attention(p("attn_scores"), kv * F16, 2 * q), 0, false));
                ops.push((
                    attention(p("softmax"), HEADS * F32 * 2, 5 * HEADS),
                    0,
                    false,
                ));
                ops.push((attention(p("attn_values"), kv * F16, 2 * q), 0, false));
                ops.push((matvec(p("o_proj"), HIDDEN, q), 0, false));
                ops.push((simple(p("attn_residual"), "elementwise", HIDDEN), 0, false));
                ops.push((simple(p("ffn_norm"), "norm", HIDDEN), 1, false));
                ops.push((matvec(p("gate_proj"), INTERMEDIATE, HIDDEN), 1, false));
                ops.push((matvec(p("up_proj"), INTERMEDIATE, HIDDEN), 1, false));
                ops.push((simple(p("silu_mul"), "elementwise", INTERMEDIATE), 1, false));
                ops.push((matvec(p("down_proj"), HIDDEN, INTERMEDIATE), 1, false));
                ops.push((simple(p("ffn_residual"), "elementwise", HIDDEN), 1, false));
            }
            SynthKernels::Fused => {
                ops.push((matvec(p("norm_qkv"), q + 2 * kv, HIDDEN), 0, false));
                ops.push((
                    simple(p("qk_norm_rope_kv_write"), "rope", q + 2 * kv),
                    0,
                    false,
                ));
                ops.push((
                    attention(p("attention_split_k"), 2 * kv * F16, 4 * q),
                    0,
                    false,
                ));
                ops.push((simple(p("attention_reduce"), "attention", 8 * q), 0, false));
                ops.push((matvec(p("o_proj_residual"), HIDDEN, q), 0, false));
                ops.push((
                    matvec(p("norm_gate_up_silu"), 2 * INTERMEDIATE, HIDDEN),
                    1,
                    false,
                ));
                ops.push((matvec(p("down_residual"), HIDDEN, INTERMEDIATE), 1, false));
            }
        }
        for (info, region, transfer) in ops {
            let op = table.add(info);
            steps.push(Step {
                op,
                layer: Some(l),
                region,
                queue: 0,
                transfer,
            });
        }
    }
    let final_norm = table.add(simple("final_norm".into(), "norm", HIDDEN));
    steps.push(Step {
        op: final_norm,
        layer: None,
        region: 0,
        queue: 0,
        transfer: false,
    });
    let lm_head = table.add(matvec("lm_head".into(), VOCAB, HIDDEN));
    steps.push(Step {
        op: lm_head,
        layer: None,
        region: 0,
        queue: 0,
        transfer: false,
    });
    match opts.kernels {
        SynthKernels::Primitive => {
            let readback = table.add(OpInfo {
                label: "logits_readback".into(),
                kind: "copy".into(),
                bytes_read: VOCAB * F32,
                bytes_written: VOCAB * F32,
                ..OpInfo::default()
            });
            steps.push(Step {
                op: readback,
                layer: None,
                region: 0,
                queue: 1,
                transfer: true,
            });
        }
        SynthKernels::Fused => {
            let argmax = table.add(simple("argmax".into(), "argmax", VOCAB));
            steps.push(Step {
                op: argmax,
                layer: None,
                region: 0,
                queue: 0,
                transfer: false,
            });
        }
    }
    steps
}

/// Builds a synthetic trace.
pub fn synthetic_trace(opts: &SynthOptions) -> Trace {
    let mut table = OpTable { ops: Vec::new() };
    let steps = schedule(opts, &mut table);
    let token_op = table.add(OpInfo {
        label: "token".into(),
        kind: "token".into(),
        ..OpInfo::default()
    });
    let mut region_ops = Vec::new();
    for l in 0..opts.layers {
        let attn = table.add(OpInfo {
            label: format!("L{l}.attn"),
            kind: "region".into(),
            ..OpInfo::default()
        });
        let ffn = table.add(OpInfo {
            label: format!("L{l}.mlp"),
            kind: "region".into(),
            ..OpInfo::default()
        });
        region_ops.push([attn, ffn]);
    }
    let head_region = table.add(OpInfo {
        label: "head".into(),
        kind: "region".into(),
        ..OpInfo::default()
    });

    let primitive = opts.kernels == SynthKernels::Primitive;
    let (mode, descriptors, barriers, recording) = if primitive {
        ("generic", "per-dispatch", "full", "every-token")
    } else {
        ("fused", "bound-once", "tracked", "once")
    };
    let (submit_knob, sync_knob) = match opts.submit {
        SynthSubmit::PerDispatch => ("every-dispatch", "every-submit"),
        SynthSubmit::PerLayer => ("per-layer", "every-submit"),
        SynthSubmit::PerToken => ("per-token", "readback"),
    };
    let standard = matches!(
        (opts.kernels, opts.submit),
        (SynthKernels::Primitive, SynthSubmit::PerDispatch)
            | (SynthKernels::Fused, SynthSubmit::PerToken)
    );

    let mut token_rng = Rng::new(opts.token_seed);
    let mut rng = Rng::new(opts.seed);
    let mut tokens = Vec::new();
    let mut t_ns: u64 = 1_000_000;
    let n_steps = 1 + opts.decode_tokens as usize;
    let weight_bytes: u64 = table
        .ops
        .iter()
        .filter(|o| o.kind == "matvec")
        .map(|o| o.bytes_read)
        .sum::<u64>()
        + HIDDEN * F16;

    for index in 0..n_steps {
        let prefill = index == 0;
        let (position, n_tokens) = if prefill {
            (0, opts.prompt_tokens.max(1))
        } else {
            (opts.prompt_tokens.max(1) + index as u32 - 1, 1)
        };
        let kv_len = position + n_tokens;
        // Prefill processes the whole prompt: matvecs become matmuls that reuse each weight.
        let work_scale = if prefill {
            1.0 + 0.25 * n_tokens as f64
        } else {
            1.0
        };
        let record_every_token = primitive || index == 0;
        let start = t_ns;
        let mut host = vec![HostSpan("token".into(), start, 0, 0)];
        let mut gpu: Vec<GpuSpan> = Vec::new();
        let mut counters = Counters::default();
        let mut t = start + jitter(&mut rng, 3_000.0, 0.1);
        let mut gpu_free = 0u64;
        let mut wait_ns = 0u64;
        let mut submit_index = 0u32;

        // Group dispatches into submits.
        let mut groups: Vec<Vec<&Step>> = Vec::new();
        for s in &steps {
            let new_group = match opts.submit {
                SynthSubmit::PerDispatch => true,
                SynthSubmit::PerLayer => groups
                    .last()
                    .and_then(|g| g.last())
                    .is_none_or(|last| last.layer != s.layer || last.queue != s.queue),
                SynthSubmit::PerToken => groups
                    .last()
                    .and_then(|g| g.last())
                    .is_none_or(|last| last.queue != s.queue),
            };
            if new_group {
                groups.push(Vec::new());
            }
            if let Some(g) = groups.last_mut() {
                g.push(s);
            }
        }

        let mut first_gpu_start = None;
        let mut last_gpu_end = 0u64;
        let mut layer_regions: Vec<(u32, u64, u64)> = Vec::new();
        let n_groups = groups.len();
        for (gi, group) in groups.iter().enumerate() {
            if record_every_token {
                let per = if primitive { 1_800.0 } else { 900.0 };
                let dur = jitter(&mut rng, per * group.len() as f64, 0.05);
                host.push(HostSpan("record".into(), t, dur, 1));
                if primitive {
                    host.push(HostSpan("descriptors".into(), t + dur / 10, dur / 2, 2));
                }
                t += dur;
                counters.command_buffers_begun += 1;
            } else {
                // Replay: only the per-token values in the device buffer change.
                let dur = jitter(&mut rng, 2_000.0, 0.05);
                host.push(HostSpan("record".into(), t, dur, 1));
                t += dur;
                counters.bytes_to_device += 8;
            }
            let submit_dur = jitter(&mut rng, 9_000.0, 0.1);
            host.push(HostSpan("submit".into(), t, submit_dur, 1));
            t += submit_dur;
            let queue = group.first().map_or(0, |s| s.queue);
            if queue == 1 {
                counters.submits_transfer += 1;
            } else {
                counters.submits_compute += 1;
            }
            // The GPU starts after the submit's latency and after earlier work.
            let mut g = t.max(gpu_free) + jitter(&mut rng, 6_000.0, 0.1);
            for s in group {
                let info = &table.ops[s.op as usize];
                let bytes = info.bytes_at(kv_len as u64) as f64;
                let overhead = if primitive { 2_500.0 } else { 1_500.0 };
                let base = (bytes / BANDWIDTH_GBPS + overhead) * work_scale * opts.gpu_scale;
                let dur = jitter(&mut rng, base, 0.04);
                if opts.timestamps == SynthTimestamps::Dispatch {
                    gpu.push(GpuSpan(s.op, g, dur, s.queue, submit_index, 1));
                }
                if let Some(l) = s.layer {
                    match layer_regions.last_mut() {
                        Some(r) if r.0 == l * 2 + s.region => r.2 = g + dur,
                        _ => layer_regions.push((l * 2 + s.region, g, g + dur)),
                    }
                }
                first_gpu_start.get_or_insert(g);
                last_gpu_end = last_gpu_end.max(g + dur);
                // Barrier gap.
                g += dur + if primitive { 700 } else { 200 };
                if s.transfer {
                    counters.transfer_commands += 1;
                } else {
                    counters.dispatches += 1;
                }
                if primitive {
                    counters.barrier_calls += 1;
                    counters.memory_barriers += 1;
                    counters.descriptor_sets_allocated += 1;
                    counters.descriptor_writes += 3;
                    counters.pipeline_binds += 1;
                    counters.descriptor_set_binds += 1;
                    counters.push_constant_updates += 1;
                } else if record_every_token {
                    counters.pipeline_binds += 1;
                    counters.descriptor_set_binds += 1;
                    counters.barrier_calls += 1;
                    counters.memory_barriers += 1;
                }
            }
            gpu_free = g;
            let last_group = gi + 1 == n_groups;
            if opts.submit != SynthSubmit::PerToken || last_group {
                let wake = jitter(&mut rng, 4_000.0, 0.2);
                let end = gpu_free.max(t) + wake;
                host.push(HostSpan("wait".into(), t, end - t, 1));
                wait_ns += end - t;
                counters.fence_waits += 1;
                t = end;
            }
            submit_index += 1;
        }
        for _ in 0..opts.extra_submits_per_token {
            let d = jitter(&mut rng, 9_000.0, 0.1);
            host.push(HostSpan("submit".into(), t, d, 1));
            t += d;
            counters.submits_compute += 1;
            counters.command_buffers_begun += 1;
        }
        let readback = jitter(&mut rng, if primitive { 60_000.0 } else { 2_000.0 }, 0.05);
        host.push(HostSpan("readback".into(), t, readback, 1));
        t += readback;
        counters.bytes_from_device += if primitive { VOCAB * F32 } else { 4 };
        let sample = jitter(&mut rng, if primitive { 90_000.0 } else { 500.0 }, 0.05);
        host.push(HostSpan("sample".into(), t, sample, 1));
        t += sample;
        let wall = t - start;
        host[0].2 = wall;

        let gpu_start = first_gpu_start.unwrap_or(start);
        match opts.timestamps {
            SynthTimestamps::Off => {}
            SynthTimestamps::Token => {
                gpu.push(GpuSpan(
                    token_op,
                    gpu_start,
                    last_gpu_end - gpu_start,
                    0,
                    0,
                    1,
                ));
                counters.timestamp_writes += 2;
            }
            SynthTimestamps::Region => {
                for (r, s, e) in &layer_regions {
                    let op = region_ops[(r / 2) as usize][(r % 2) as usize];
                    gpu.push(GpuSpan(op, *s, e - s, 0, 0, 1));
                    counters.timestamp_writes += 2;
                }
                let head_start = layer_regions.last().map_or(gpu_start, |r| r.2);
                gpu.push(GpuSpan(
                    head_region,
                    head_start,
                    last_gpu_end.saturating_sub(head_start),
                    0,
                    0,
                    1,
                ));
                counters.timestamp_writes += 2;
            }
            SynthTimestamps::Dispatch => {
                counters.timestamp_writes += 2 * gpu.len() as u64 + 2;
                gpu.push(GpuSpan(
                    token_op,
                    gpu_start,
                    last_gpu_end - gpu_start,
                    0,
                    0,
                    1,
                ));
            }
        }
        gpu.sort_by_key(|s| (s.1, std::cmp::Reverse(s.2)));
        let gpu_busy_ns = (opts.timestamps != SynthTimestamps::Off).then(|| {
            let dispatch: Vec<GpuSpan> = gpu
                .iter()
                .filter(|s| opts.timestamps != SynthTimestamps::Dispatch || s.op() != token_op)
                .copied()
                .collect();
            crate::stats::union_ns(&dispatch)
        });
        tokens.push(TokenRecord {
            index: index as u32,
            phase: if prefill {
                Phase::Prefill
            } else {
                Phase::Decode
            },
            position,
            n_tokens,
            kv_len,
            token_id: Some(token_rng.below(VOCAB) as u32),
            start_ns: start,
            wall_ns: wall,
            host_enqueue_ns: wall - wait_ns,
            host_wait_ns: wait_ns,
            gpu_busy_ns,
            counters,
            host_spans: host,
            gpu_spans: gpu,
            gpu_untimed: 0,
        });
        t_ns = t + jitter(&mut rng, 5_000.0, 0.1);
    }

    let generated_ids = tokens.iter().filter_map(|t| t.token_id).collect();
    Trace {
        format: FORMAT_NAME.to_owned(),
        version: FORMAT_VERSION,
        meta: Meta {
            tool: ToolMeta {
                name: "profiler synth-trace".into(),
                version: env!("CARGO_PKG_VERSION").into(),
            },
            created_unix_ms: 1_767_225_600_000,
            epoch_host_ns: 5_000_000_000_000,
            device: DeviceMeta {
                name: "Synthetic GPU".into(),
                device_type: "discrete".into(),
                vendor_id: 0x10de,
                device_id: 0x2330,
                driver: "synthetic 1.0".into(),
                api_version: "1.3.280".into(),
                timestamp_period_ns: 1.0,
                compute_units: 132,
                memory_bandwidth_gbps: Some(BANDWIDTH_GBPS),
            },
            clock: if opts.timestamps == SynthTimestamps::Off {
                ClockMeta {
                    calibrated: false,
                    method: "none".into(),
                    max_deviation_ns: None,
                    gpu_minus_host_ns: 0,
                }
            } else if opts.calibrated {
                ClockMeta {
                    calibrated: true,
                    method: "VK_KHR_calibrated_timestamps".into(),
                    max_deviation_ns: Some(1_000),
                    gpu_minus_host_ns: 123_456_789,
                }
            } else {
                ClockMeta {
                    calibrated: false,
                    method: "fence-fallback".into(),
                    max_deviation_ns: None,
                    gpu_minus_host_ns: 0,
                }
            },
            model: ModelMeta {
                name: "synthetic-qwen3".into(),
                architecture: "qwen3".into(),
                parameters: 0,
                layers: opts.layers,
                hidden: HIDDEN as u32,
                heads: HEADS as u32,
                kv_heads: KV_HEADS as u32,
                head_dim: HEAD_DIM as u32,
                intermediate: INTERMEDIATE as u32,
                vocab: VOCAB as u32,
                weight_dtype: "f16".into(),
                weight_bytes_per_token: weight_bytes,
            },
            knobs: Knobs {
                mode: if standard {
                    mode.into()
                } else {
                    "custom".into()
                },
                submit: submit_knob.into(),
                sync: sync_knob.into(),
                descriptors: descriptors.into(),
                barriers: barriers.into(),
                kernels: if primitive {
                    "primitive".into()
                } else {
                    "fused".into()
                },
                recording: recording.into(),
            },
            run: RunMeta {
                prompt: "The quick brown fox".into(),
                prompt_tokens: opts.prompt_tokens.max(1),
                decode_tokens: opts.decode_tokens,
                context: 0,
                kv_layout: "contiguous".into(),
                timestamps: opts.timestamps.name().into(),
                generated_ids,
                generated_text: String::new(),
                ..Default::default()
            },
            capture: None,
        },
        ops: table.ops,
        tokens,
    }
}

/// `base` (ns) with relative noise `rel`, never below 1.
fn jitter(rng: &mut Rng, base: f64, rel: f64) -> u64 {
    let v = base * (1.0 + rel * rng.normal().clamp(-3.0, 3.0));
    v.max(1.0).round() as u64
}
