//! The Vulkan backend: uploads the weights, lowers the model with the chosen kernels, and runs
//! each step under the other five knobs, recording counters, host spans and GPU timestamps into
//! trace records.

mod chain;
mod residency;

use std::collections::{BTreeMap, HashMap};
use std::ops::Range as StdRange;

use anyhow::{Context as _, anyhow, bail};
use profiler::trace::{ClockMeta, GpuSpan, OpInfo, Phase, TokenRecord};

use super::attention::gather_bytes;
use super::kernels::{RowParams, TokenParams, params_bytes, prompt_rows};
use super::knobs::{Barriers, Descriptors, Knobs, Recording, Submit, Sync};
use super::program::{
    Access, Action, Buf, Grid, KvPlan, Shape, Step, StepKind, Tuning, TuningOverrides, add_facts,
    lower,
};
use super::spans::SpanLog;
use crate::generate::{Backend, BatchBackend, SeqStep, StepOutput, argmax};
use crate::host_span;
use crate::kv::{
    BlockPool, BlockTables, KvConfig, KvGeometry, KvKind, PagedAttention, window_start,
};
use crate::model::{ModelConfig, Weights};
use crate::vk::{
    BufRange, Buffer, BufferDesc, Cmd, DescSet, FenceId, Gpu, Pipeline, PipelineDesc, QueryPool,
    Queue, Recorder, SetLifetime, host_now_ns,
};

/// GPU timestamp level.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Timestamps {
    Off,
    Token,
    Region,
    Dispatch,
}

impl Timestamps {
    pub fn name(self) -> &'static str {
        match self {
            Timestamps::Off => "off",
            Timestamps::Token => "token",
            Timestamps::Region => "region",
            Timestamps::Dispatch => "dispatch",
        }
    }
}

/// How to build an engine.
#[derive(Clone, Copy, Debug)]
pub struct EngineOptions {
    pub knobs: Knobs,
    pub timestamps: Timestamps,
    /// Positions one sequence can hold (prompt + generated tokens).
    pub max_seq: u32,
    /// KV layout, element type, batch and prompt chunk.
    pub kv: KvConfig,
    /// Read the logits back every step even where the kernels pick the token on the GPU (for
    /// `--dump` and the correctness tests; adds a copy and `4 * vocab` bytes per token).
    pub logits_readback: bool,
    /// Tuning keys set on the command line (`--tuning`), over the device's defaults.
    pub tuning: TuningOverrides,
}

/// A GPU timestamp span of a prepared program: an op, the steps it covers, and the queries of
/// its start and end. A span that follows another in the same command buffer starts at that
/// one's end query (one timestamp per boundary instead of two: every timestamp costs GPU time,
/// and the work between them is serialized by the barriers anyway).
#[derive(Clone, Debug)]
struct SpanDef {
    op: u32,
    first: usize,
    last: usize,
    start_q: u32,
    end_q: u32,
    /// Whether `start_q` is this span's own query (false: the previous span's end).
    own_start: bool,
}

/// A lowered program ready to run: its steps split into submit chunks, its descriptor sets when
/// they are bound once, its timestamp spans and query pool.
struct Prepared {
    kind: StepKind,
    /// Which of the two decode programs this is under `--sync chained` (1: bound to the `*Alt`
    /// buffers); 0 otherwise.
    slot: usize,
    steps: Vec<Step>,
    chunks: Vec<(Cmd, StdRange<usize>)>,
    sets: Vec<Option<DescSet>>,
    spans: Vec<SpanDef>,
    queries: Option<QueryPool>,
    recorded: bool,
    /// The submit chunk each step belongs to (GPU spans name the submit that ran them).
    chunk_of_step: Vec<u32>,
    /// What the host reads back after the step: the logits, the GPU argmax, or both.
    reads_logits: bool,
    reads_argmax: bool,
    /// The persistent kernel's phase ops, in clock order, when it writes phase clocks.
    phase_ops: Vec<u32>,
}

/// What a step that ran leaves for its trace record ([`Engine::push_record`]).
struct StepRun<'a> {
    kind: StepKind,
    rows: &'a [RowParams],
    outs: &'a [StepOutput],
    log: SpanLog,
    start_ns: u64,
    wall_ns: u64,
    counters: profiler::trace::Counters,
    gpu_spans: Vec<GpuSpan>,
    gpu_busy: Option<u64>,
}

/// A cached descriptor set's key: the pipeline and the (buffer, offset, bytes) of each binding.
type SetKey = (PipelineDesc, Vec<(Buf, u64, u64)>);

/// The Vulkan decoder for one model under one knob setting.
pub struct Engine {
    rec: Recorder,
    shape: Shape,
    tuning: Tuning,
    opts: EngineOptions,
    tied: bool,
    bufs: BTreeMap<Buf, Buffer>,
    pipelines: HashMap<PipelineDesc, Pipeline>,
    cached_sets: HashMap<SetKey, DescSet>,
    decode: Option<Prepared>,
    /// The second decode program under `--sync chained` (slot 1).
    decode_alt: Option<Prepared>,
    /// Prompt-chunk programs by row count (recorded anew each chunk, built once).
    prefill: HashMap<u32, Prepared>,
    kv: KvPlan,
    pool: BlockPool,
    tables: BlockTables,
    fence: FenceId,
    /// The slot-1 program's fence under `--sync chained`.
    fence_alt: FenceId,
    chain: chain::Chain,
    ops: Vec<OpInfo>,
    op_index: HashMap<String, u32>,
    records: Vec<TokenRecord>,
    /// Barrier tracking: ranges (buffer, offset, bytes, written) touched since the last barrier.
    track: Vec<(Buf, u64, u64, bool)>,
    epoch_ns: u64,
    clock: ClockMeta,
    period_ns: f64,
    valid_mask: u64,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("knobs", &self.opts.knobs)
            .finish()
    }
}

/// The lowering's shape of a model config with a KV capacity of `max_seq`.
pub fn shape_of(cfg: &ModelConfig, max_seq: u32) -> Shape {
    Shape {
        layers: cfg.layers as u32,
        hidden: cfg.hidden as u32,
        heads: cfg.heads as u32,
        kv_heads: cfg.kv_heads as u32,
        head_dim: cfg.head_dim as u32,
        intermediate: cfg.intermediate as u32,
        vocab: cfg.vocab as u32,
        eps: cfg.rms_norm_eps,
        qk_norm: cfg.qk_norm,
        max_seq,
    }
}

/// A row-major matrix of `rows` rows, transposed.
fn transposed(data: &[f32], rows: usize) -> Vec<f32> {
    let cols = data.len() / rows.max(1);
    let mut out = vec![0.0; data.len()];
    for (r, row) in data.chunks_exact(cols.max(1)).enumerate() {
        for (c, v) in row.iter().enumerate() {
            out[c * rows + r] = *v;
        }
    }
    out
}

fn f16_bytes(data: &[f32]) -> Vec<u8> {
    let h: Vec<half::f16> = data.iter().map(|v| half::f16::from_f32(*v)).collect();
    bytemuck::cast_slice(&h).to_vec()
}

fn f32_bytes(data: &[f32]) -> Vec<u8> {
    bytemuck::cast_slice(data).to_vec()
}

impl Engine {
    /// Uploads `weights` to `gpu` and prepares the decode program under `opts`.
    pub fn new(
        gpu: &Gpu,
        cfg: &ModelConfig,
        weights: &Weights,
        opts: EngineOptions,
    ) -> anyhow::Result<Engine> {
        let info = gpu.info().clone();
        opts.knobs
            .validate(info.push_descriptors)
            .map_err(|e| anyhow!(e))?;
        if opts.timestamps != Timestamps::Off && !info.timestamps {
            bail!(
                "device {:?} cannot write timestamps on its compute queue; use --timestamps off",
                info.name
            );
        }
        opts.kv.validate().map_err(|e| anyhow!(e))?;
        let shape = shape_of(cfg, opts.max_seq);
        if opts.kv.dtype == crate::kv::KvDtype::F16 && !shape.kv_dim().is_multiple_of(8) {
            bail!(
                "an f16 KV cache needs kv_heads * head_dim to be a multiple of 8 (this model: {}); use --kv-dtype f32",
                shape.kv_dim()
            );
        }
        if !shape.head_dim.is_multiple_of(4)
            || shape.head_dim > 128
            || shape.heads / shape.kv_heads > 8
        {
            bail!(
                "the attention kernels need head_dim % 4 == 0, head_dim <= 128 and at most 8 query heads per KV head \
                 (this model: head_dim {}, {} / {} heads)",
                shape.head_dim,
                shape.heads,
                shape.kv_heads
            );
        }
        let geo = KvGeometry::new(&opts.kv, opts.max_seq);
        let kv = KvPlan {
            geo,
            scratch: opts.kv.gathers().then(|| geo.scratch(opts.max_seq)),
            window: opts.kv.attention_window(),
            // A prompt step never holds more rows than a sequence has positions.
            max_rows: opts
                .kv
                .prefill_chunk
                .min(opts.max_seq)
                .max(opts.kv.batch)
                .max(1),
        };
        let pool = BlockPool::new(geo.pool_blocks(), opts.kv.fragment, 0x5eed_b10c);
        let tables = BlockTables::new(geo.seqs, geo.table_stride);
        let tuning = Tuning::for_device(
            info.compute_units,
            info.subgroup_size,
            opts.max_seq,
            shape.kv_heads,
        )
        .with_subgroups(
            info.subgroup_size,
            info.subgroup_arithmetic && info.subgroup_shuffle,
        );
        let tuning = tuning.with(&opts.tuning);
        let mut rec = Recorder::new(gpu)?;
        let fence = rec.new_fence()?;
        let fence_alt = rec.new_fence()?;
        let epoch_ns = host_now_ns();
        let valid_mask = if info.timestamp_valid_bits >= 64 {
            u64::MAX
        } else {
            (1u64 << info.timestamp_valid_bits) - 1
        };
        let mut engine = Engine {
            rec,
            shape,
            tuning,
            opts,
            tied: weights.lm_head.is_none(),
            bufs: BTreeMap::new(),
            pipelines: HashMap::new(),
            cached_sets: HashMap::new(),
            decode: None,
            decode_alt: None,
            prefill: HashMap::new(),
            kv,
            pool,
            tables,
            fence,
            fence_alt,
            chain: chain::Chain::default(),
            ops: Vec::new(),
            op_index: HashMap::new(),
            records: Vec::new(),
            track: Vec::new(),
            epoch_ns,
            clock: ClockMeta {
                calibrated: false,
                method: "none".into(),
                ..Default::default()
            },
            period_ns: info.timestamp_period_ns as f64,
            valid_mask,
        };
        engine.tuning.phase_clocks = engine.wants_phase_clocks();
        engine.check_persistent()?;
        engine.create_buffers(cfg)?;
        engine.upload_weights(cfg, weights)?;
        engine.setup_persistent()?;
        engine.calibrate()?;
        let decode = engine.prepare(engine.opts.kv.batch.max(1), StepKind::Decode)?;
        engine.decode = Some(decode);
        engine.prepare_chain()?;
        // Setup work (uploads, bound-once descriptors, a replayed recording) is not a token's.
        engine.rec.take_counters();
        Ok(engine)
    }

    pub fn shape(&self) -> &Shape {
        &self.shape
    }
    pub fn tuning(&self) -> &Tuning {
        &self.tuning
    }
    pub fn knobs(&self) -> &Knobs {
        &self.opts.knobs
    }
    pub fn kv_config(&self) -> &KvConfig {
        &self.opts.kv
    }
    /// The persistent kernel's grid, as the residency probe sized it: (workgroups, invocations
    /// each), or None for the other kernels.
    pub fn persistent_grid(&self) -> Option<(u32, u32)> {
        self.persistent()
            .then_some((self.tuning.persistent_groups, self.tuning.persistent_wg))
    }

    /// What `capture` and `bench` print about the persistent kernel: its grid, and the driver's
    /// statistics of its compiled pipeline (registers, spills, ... where the device reports
    /// them: VK_KHR_pipeline_executable_properties). Empty for the other kernels.
    pub fn persistent_report(&self) -> Vec<String> {
        let Some((groups, wg)) = self.persistent_grid() else {
            return Vec::new();
        };
        let stage = match self.tuning.persistent_kv_stage {
            0 => "no K and V rows staged".to_string(),
            1 => "the first unit's first block of K and V rows staged in shared memory".into(),
            n => format!("{n} units' first blocks of K and V rows staged in shared memory"),
        };
        let mut out = vec![format!(
            "persistent kernel: a grid of {groups} workgroups of {wg} invocations (residency probe); {stage}"
        )];
        for (desc, p) in &self.pipelines {
            if !matches!(
                desc.shader,
                crate::shaders::Shader::Persistent | crate::shaders::Shader::PersistentClocked
            ) {
                continue;
            }
            // A driver that fails to report is worth a line, not the run.
            let stats = match p.statistics() {
                Ok(s) => s,
                Err(e) => {
                    out.push(format!(
                        "{}: the driver's statistics could not be read ({e})",
                        desc.shader.name()
                    ));
                    continue;
                }
            };
            if !stats.is_empty() {
                let list: Vec<String> = stats
                    .iter()
                    .map(|s| format!("{} {}", s.name, s.value))
                    .collect();
                out.push(format!(
                    "{} (driver statistics): {}",
                    desc.shader.name(),
                    list.join(", ")
                ));
            }
        }
        out
    }

    pub fn timestamps(&self) -> Timestamps {
        self.opts.timestamps
    }

    /// Switches the GPU timestamp level of the decode steps that follow (the prompt programs
    /// are rebuilt on their next use): the bench measures tokens/s at one level and the per-op
    /// breakdown at `dispatch` level on the same KV cache.
    pub fn set_timestamps(&mut self, level: Timestamps) -> anyhow::Result<()> {
        if level == self.opts.timestamps {
            return Ok(());
        }
        if level != Timestamps::Off && !self.gpu().info().timestamps {
            bail!(
                "device {:?} cannot write timestamps on its compute queue; use --timestamps off",
                self.gpu().info().name
            );
        }
        self.drain_chain()?;
        self.opts.timestamps = level;
        self.tuning.phase_clocks = self.wants_phase_clocks();
        self.calibrate()?;
        self.prefill.clear();
        let decode = self.prepare(self.opts.kv.batch.max(1), StepKind::Decode)?;
        self.decode = Some(decode);
        self.prepare_chain()?;
        // Building programs is setup work, not a step's.
        self.rec.take_counters();
        Ok(())
    }
    /// Switches how the decode steps that follow read a paged cache (gather into a contiguous
    /// scratch, or through the block table), on the same KV cache: the bench measures both paths
    /// after one prompt. The scratch is created on the first switch to `gather`.
    pub fn set_paged_attention(&mut self, path: PagedAttention) -> anyhow::Result<()> {
        if self.opts.kv.kind != KvKind::Paged {
            bail!(
                "--paged-attention applies to the paged layout only (this engine's layout: {})",
                self.opts.kv.layout_name()
            );
        }
        if path == self.opts.kv.paged_attention {
            return Ok(());
        }
        self.drain_chain()?;
        if self.persistent() && path == PagedAttention::Gather {
            bail!(
                "--paged-attention gather copies the cache for the fused kernels; the persistent kernel reads the \
                 blocks in place: use --paged-attention fused with --kernels persistent"
            );
        }
        self.opts.kv.paged_attention = path;
        if self.opts.kv.gathers() && self.kv.scratch.is_none() {
            let scratch = self.kv.geo.scratch(self.shape.max_seq);
            let bytes = scratch.buffer_bytes(self.shape.kv_dim());
            for (buf, name) in [
                (Buf::KScratch, "k_gather_scratch"),
                (Buf::VScratch, "v_gather_scratch"),
            ] {
                let b = self
                    .gpu()
                    .create_buffer(BufferDesc::device(bytes), name)
                    .with_context(|| format!("creating buffer {name}"))?;
                self.bufs.insert(buf, b);
            }
        }
        self.kv.scratch = if self.opts.kv.gathers() {
            Some(self.kv.geo.scratch(self.shape.max_seq))
        } else {
            None
        };
        self.prefill.clear();
        let decode = self.prepare(self.opts.kv.batch.max(1), StepKind::Decode)?;
        self.decode = Some(decode);
        self.prepare_chain()?;
        self.rec.take_counters();
        Ok(())
    }

    /// Forgets the step records from `len` on (the bench rewinds the decode steps of one
    /// setting before it measures the next on the same prompt).
    pub fn truncate_records(&mut self, len: usize) {
        self.records.truncate(len);
    }

    /// The block tables of the paged layout (empty rows for the others).
    pub fn block_tables(&self) -> &BlockTables {
        &self.tables
    }
    pub fn gpu(&self) -> &Gpu {
        self.rec.gpu()
    }
    pub fn epoch_ns(&self) -> u64 {
        self.epoch_ns
    }
    pub fn clock(&self) -> &ClockMeta {
        &self.clock
    }
    /// The per-op facts table the records' GPU spans index.
    pub fn ops(&self) -> &[OpInfo] {
        &self.ops
    }
    /// The trace records of the steps run so far.
    pub fn records(&self) -> &[TokenRecord] {
        &self.records
    }

    fn calibrate(&mut self) -> anyhow::Result<()> {
        if self.opts.timestamps == Timestamps::Off {
            return Ok(());
        }
        let method = self.gpu().info().calibrated_timestamps.clone();
        match (self.gpu().calibrate()?, method) {
            (Some(c), Some(m)) => {
                let gpu_ns = ((c.gpu_ticks & self.valid_mask) as f64 * self.period_ns) as i64;
                self.clock = ClockMeta {
                    calibrated: true,
                    method: m,
                    max_deviation_ns: Some(c.max_deviation_ns),
                    gpu_minus_host_ns: gpu_ns - c.host_ns as i64,
                };
            }
            _ => {
                self.clock = ClockMeta {
                    calibrated: false,
                    method: "fence-fallback".into(),
                    ..Default::default()
                };
            }
        }
        Ok(())
    }

    fn create_buffers(&mut self, cfg: &ModelConfig) -> anyhow::Result<()> {
        let s = self.shape;
        let (b, h, f32b, f16b) = (self.kv.max_rows as u64, s.hidden as u64, 4u64, 2u64);
        // Rows of x per token: the persistent kernel keeps its residual rows R0, R1 and the
        // o-projection's sum there.
        let x_rows = if self.persistent() {
            crate::exec::persistent::RESIDUAL_ROWS as u64
        } else {
            1
        };
        // Rows of a decode step: one per sequence.
        let seqs = self.opts.kv.batch.max(1) as u64;
        let geo = self.kv.geo;
        let (qd, kvd, inter) = (s.q_dim() as u64, s.kv_dim() as u64, s.intermediate as u64);
        let mut want: Vec<(Buf, BufferDesc, String)> = vec![
            (
                Buf::Embed,
                BufferDesc::device(s.vocab as u64 * h * f16b),
                "embed_tokens".into(),
            ),
            (Buf::FinalNorm, BufferDesc::device(h * f32b), "norm".into()),
            (
                Buf::RopeTable,
                BufferDesc::device(s.max_seq as u64 * s.head_dim as u64 * f32b),
                "rope_table".into(),
            ),
            (Buf::Ids, BufferDesc::upload(b * 4), "ids".into()),
            (
                Buf::Params,
                BufferDesc::upload(
                    (std::mem::size_of::<TokenParams>()
                        + b as usize * std::mem::size_of::<RowParams>()) as u64,
                ),
                "params".into(),
            ),
            (
                Buf::KvTable,
                BufferDesc::upload((geo.seqs as u64 * geo.table_stride as u64 * 4).max(16)),
                "kv_block_tables".into(),
            ),
            (
                Buf::X,
                BufferDesc::device(x_rows * b * h * f32b),
                "x".into(),
            ),
            (Buf::H, BufferDesc::device(b * h * f32b), "h".into()),
            (Buf::QRaw, BufferDesc::device(b * qd * f32b), "q_raw".into()),
            (
                Buf::KRaw,
                BufferDesc::device(b * kvd * f32b),
                "k_raw".into(),
            ),
            (Buf::Q, BufferDesc::device(b * qd * f32b), "q".into()),
            (Buf::K, BufferDesc::device(b * kvd * f32b), "k".into()),
            (Buf::V, BufferDesc::device(b * kvd * f32b), "v".into()),
            (
                Buf::Qkv,
                BufferDesc::device(seqs * s.qkv_rows() as u64 * f32b),
                "qkv".into(),
            ),
            (
                Buf::Scores,
                BufferDesc::device(seqs * s.heads as u64 * s.max_seq as u64 * f32b),
                "scores".into(),
            ),
            (
                Buf::Partial,
                BufferDesc::device(
                    seqs * s.heads as u64
                        * self.tuning.n_splits as u64
                        * (s.head_dim as u64 + 2)
                        * f32b,
                ),
                "attn_partial".into(),
            ),
            (Buf::Attn, BufferDesc::device(b * qd * f32b), "attn".into()),
            (Buf::Tmp, BufferDesc::device(b * h * f32b), "tmp".into()),
            (
                Buf::Gate,
                BufferDesc::device(b * inter * f32b),
                "gate".into(),
            ),
            (Buf::Up, BufferDesc::device(b * inter * f32b), "up".into()),
            (Buf::Act, BufferDesc::device(b * inter * f32b), "act".into()),
            (
                Buf::Logits,
                BufferDesc::device(seqs * s.vocab as u64 * f32b),
                "logits".into(),
            ),
            (
                Buf::LogitsReadback,
                BufferDesc::readback(seqs * s.vocab as u64 * f32b),
                "logits_readback".into(),
            ),
            (
                Buf::ArgmaxOut,
                // (index, value) per row, then the persistent kernel's status word.
                BufferDesc::readback(8 * seqs + 4),
                "argmax_out".into(),
            ),
        ];
        want.extend(self.persistent_buffers());
        if self.chained() {
            // The second decode program's host-visible words (engine/chain.rs).
            let alt: Vec<(Buf, BufferDesc, String)> = want
                .iter()
                .filter_map(|(buf, desc, name)| {
                    chain::alt_of(*buf).map(|alt| (alt, *desc, format!("{name}_alt")))
                })
                .collect();
            want.extend(alt);
        }
        if let Some(scratch) = self.kv.scratch {
            let bytes = scratch.buffer_bytes(s.kv_dim());
            want.push((
                Buf::KScratch,
                BufferDesc::device(bytes),
                "k_gather_scratch".into(),
            ));
            want.push((
                Buf::VScratch,
                BufferDesc::device(bytes),
                "v_gather_scratch".into(),
            ));
        }
        if !self.tied {
            want.push((
                Buf::LmHead,
                BufferDesc::device(s.vocab as u64 * h * f16b),
                "lm_head".into(),
            ));
        }
        for l in 0..s.layers {
            let p = format!("model.layers.{l}");
            want.extend([
                (
                    Buf::AttnNorm(l),
                    BufferDesc::device(h * f32b),
                    format!("{p}.input_layernorm"),
                ),
                (
                    Buf::MlpNorm(l),
                    BufferDesc::device(h * f32b),
                    format!("{p}.post_attention_layernorm"),
                ),
                (
                    Buf::Wqkv(l),
                    BufferDesc::device(s.qkv_rows() as u64 * h * f16b),
                    format!("{p}.self_attn.qkv_proj"),
                ),
                (
                    Buf::Wo(l),
                    BufferDesc::device(h * qd * f16b),
                    format!("{p}.self_attn.o_proj"),
                ),
                (
                    Buf::WGateUp(l),
                    BufferDesc::device(2 * inter * h * f16b),
                    format!("{p}.mlp.gate_up_proj"),
                ),
                (
                    Buf::WDown(l),
                    BufferDesc::device(h * inter * f16b),
                    format!("{p}.mlp.down_proj"),
                ),
                (
                    Buf::KCache(l),
                    BufferDesc::device(geo.buffer_bytes(kvd as u32)),
                    format!("{p}.k_cache"),
                ),
                (
                    Buf::VCache(l),
                    BufferDesc::device(geo.buffer_bytes(kvd as u32)),
                    format!("{p}.v_cache"),
                ),
            ]);
            if cfg.qk_norm {
                want.push((
                    Buf::QNorm(l),
                    BufferDesc::device(s.head_dim as u64 * f32b),
                    format!("{p}.self_attn.q_norm"),
                ));
                want.push((
                    Buf::KNorm(l),
                    BufferDesc::device(s.head_dim as u64 * f32b),
                    format!("{p}.self_attn.k_norm"),
                ));
            }
        }
        let align = self.gpu().info().min_storage_buffer_offset_alignment.max(1);
        for sub in [
            qd * h * f16b,
            (qd + kvd) * h * f16b,
            inter * h * f16b,
            h * f32b,
            kvd * f32b,
        ] {
            if sub % align != 0 {
                bail!(
                    "this model's tensor sizes give a buffer offset of {sub} bytes, not a multiple of the \
                     device's minStorageBufferOffsetAlignment ({align}); decodescope cannot bind it"
                );
            }
        }
        for (buf, desc, name) in want {
            let b = self
                .gpu()
                .create_buffer(desc, &name)
                .with_context(|| format!("creating buffer {name}"))?;
            self.bufs.insert(buf, b);
        }
        Ok(())
    }

    fn upload_weights(&mut self, cfg: &ModelConfig, w: &Weights) -> anyhow::Result<()> {
        let s = self.shape;
        let total: u64 = w.tensors().iter().map(|t| t.data.len() as u64).sum();
        let bar = indicatif::ProgressBar::new(total).with_message("uploading weights");
        bar.set_style(
            indicatif::ProgressStyle::with_template("{msg} [{bar:30}] {percent}% ({eta})")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        let mut jobs: Vec<(Buf, Vec<u8>, u64)> = vec![
            (
                Buf::Embed,
                f16_bytes(&w.embed_tokens.data),
                w.embed_tokens.data.len() as u64,
            ),
            (
                Buf::FinalNorm,
                f32_bytes(&w.norm.data),
                w.norm.data.len() as u64,
            ),
        ];
        if let Some(lm) = &w.lm_head {
            jobs.push((Buf::LmHead, f16_bytes(&lm.data), lm.data.len() as u64));
        }
        // The RoPE table: (cos, sin) of pos * inv_freq[i] in f32, as the CPU reference computes.
        let inv = cfg.rope_inv_freq();
        let mut table = Vec::with_capacity(s.max_seq as usize * inv.len() * 2);
        for pos in 0..s.max_seq {
            for f in &inv {
                let a = pos as f32 * f;
                table.push(a.cos());
                table.push(a.sin());
            }
        }
        jobs.push((Buf::RopeTable, f32_bytes(&table), 0));
        for (b, bytes, n) in jobs {
            let key = if b == Buf::LmHead && self.tied {
                Buf::Embed
            } else {
                b
            };
            let buf = self
                .bufs
                .get(&key)
                .ok_or_else(|| anyhow!("internal: buffer {b:?} missing"))?;
            self.rec
                .upload(buf, 0, &bytes)
                .with_context(|| format!("uploading {}", buf.name()))?;
            bar.inc(n);
        }
        for (l, lw) in w.layers.iter().enumerate() {
            let l = l as u32;
            let mut qkv = f16_bytes(&lw.q_proj.data);
            qkv.extend(f16_bytes(&lw.k_proj.data));
            qkv.extend(f16_bytes(&lw.v_proj.data));
            let mut gu = f16_bytes(&lw.gate_proj.data);
            gu.extend(f16_bytes(&lw.up_proj.data));
            let mut jobs = vec![
                (Buf::AttnNorm(l), f32_bytes(&lw.input_layernorm.data)),
                (
                    Buf::MlpNorm(l),
                    f32_bytes(&lw.post_attention_layernorm.data),
                ),
                (Buf::Wqkv(l), qkv),
                (Buf::Wo(l), f16_bytes(&lw.o_proj.data)),
                (Buf::WGateUp(l), gu),
                (Buf::WDown(l), f16_bytes(&lw.down_proj.data)),
            ];
            if self.persistent() {
                jobs.push((
                    Buf::WDownT(l),
                    f16_bytes(&transposed(&lw.down_proj.data, s.hidden as usize)),
                ));
            }
            if let (Some(qn), Some(kn)) = (&lw.q_norm, &lw.k_norm) {
                jobs.push((Buf::QNorm(l), f32_bytes(&qn.data)));
                jobs.push((Buf::KNorm(l), f32_bytes(&kn.data)));
            }
            for (b, bytes) in jobs {
                let buf = self
                    .bufs
                    .get(&b)
                    .ok_or_else(|| anyhow!("internal: buffer {b:?} missing"))?;
                self.rec
                    .upload(buf, 0, &bytes)
                    .with_context(|| format!("uploading {}", buf.name()))?;
            }
            let n: u64 = [
                &lw.q_proj,
                &lw.k_proj,
                &lw.v_proj,
                &lw.o_proj,
                &lw.gate_proj,
                &lw.up_proj,
                &lw.down_proj,
            ]
            .iter()
            .map(|t| t.data.len() as u64)
            .sum::<u64>()
                + (2 * s.hidden) as u64;
            bar.inc(n);
        }
        bar.finish_and_clear();
        Ok(())
    }

    fn op_id(&mut self, step: &Step) -> u32 {
        if let Some(&i) = self.op_index.get(&step.label) {
            return i;
        }
        let i = self.ops.len() as u32;
        self.ops.push(step.facts.clone());
        self.op_index.insert(step.label.clone(), i);
        i
    }

    /// The op of `facts` (by its label), registered on first use.
    fn facts_op(&mut self, facts: OpInfo) -> u32 {
        if let Some(&i) = self.op_index.get(&facts.label) {
            return i;
        }
        let i = self.ops.len() as u32;
        self.op_index.insert(facts.label.clone(), i);
        self.ops.push(facts);
        i
    }

    fn region_op(&mut self, label: String, kind: &str, steps: &[Step]) -> u32 {
        if let Some(&i) = self.op_index.get(&label) {
            return i;
        }
        let mut f = OpInfo {
            label: label.clone(),
            kind: kind.into(),
            ..Default::default()
        };
        for s in steps {
            add_facts(&mut f, &s.facts);
        }
        let i = self.ops.len() as u32;
        self.ops.push(f);
        self.op_index.insert(label, i);
        i
    }

    /// Lowers and prepares the program of a step of `kind` over `n_tokens` rows.
    fn prepare(&mut self, n_tokens: u32, kind: StepKind) -> anyhow::Result<Prepared> {
        self.prepare_slot(n_tokens, kind, 0)
    }

    /// [`Engine::prepare`] for chain slot `slot`: a decode program under `--sync chained` is
    /// bound to that slot's buffers and reads its ids from the other slot's argmax
    /// (`engine/chain.rs`); every other program ignores `slot`.
    fn prepare_slot(
        &mut self,
        n_tokens: u32,
        kind: StepKind,
        slot: usize,
    ) -> anyhow::Result<Prepared> {
        let k = self.opts.knobs;
        let mut steps = lower(
            &self.shape,
            &self.tuning,
            &self.kv,
            k.kernels,
            n_tokens,
            kind,
            self.opts.logits_readback,
        );
        if kind == StepKind::Decode && self.chained() {
            chain::bind_slot(&mut steps, slot);
        }
        let gpu_steps: Vec<usize> = (0..steps.len())
            .filter(|&i| !matches!(steps[i].action, Action::HostRead))
            .collect();
        // Submit chunks.
        let mut bounds: Vec<usize> = vec![0];
        for (j, &i) in gpu_steps.iter().enumerate().skip(1) {
            let split = match k.submit {
                Submit::Dispatch => true,
                Submit::Every(n) => j % n as usize == 0,
                Submit::PerLayer => {
                    let prev = steps[gpu_steps[j - 1]].region.layer(self.shape.layers);
                    steps[i].region.layer(self.shape.layers) != prev
                }
                Submit::Token => false,
            };
            if split {
                bounds.push(i);
            }
        }
        bounds.push(steps.len());
        let mut chunks = Vec::new();
        for w in bounds.windows(2) {
            let cmd = self.rec.new_cmd(Queue::Compute)?;
            chunks.push((cmd, w[0]..w[1]));
        }
        // Timestamp spans.
        let mut spans = Vec::new();
        match self.opts.timestamps {
            Timestamps::Off => {}
            Timestamps::Token => {
                if let (Some(&first), Some(&last)) = (gpu_steps.first(), gpu_steps.last()) {
                    let op = self.region_op("token".into(), "token", &steps);
                    spans.push(SpanDef {
                        op,
                        first,
                        last,
                        start_q: 0,
                        end_q: 0,
                        own_start: true,
                    });
                }
            }
            Timestamps::Region => {
                let mut j = 0;
                while j < gpu_steps.len() {
                    let region = steps[gpu_steps[j]].region;
                    let mut e = j;
                    while e + 1 < gpu_steps.len() && steps[gpu_steps[e + 1]].region == region {
                        e += 1;
                    }
                    let covered: Vec<Step> = (j..=e).map(|x| steps[gpu_steps[x]].clone()).collect();
                    let op = self.region_op(region.label(), "region", &covered);
                    spans.push(SpanDef {
                        op,
                        first: gpu_steps[j],
                        last: gpu_steps[e],
                        start_q: 0,
                        end_q: 0,
                        own_start: true,
                    });
                    j = e + 1;
                }
            }
            Timestamps::Dispatch => {
                for &i in &gpu_steps {
                    let op = self.op_id(&steps[i]);
                    spans.push(SpanDef {
                        op,
                        first: i,
                        last: i,
                        start_q: 0,
                        end_q: 0,
                        own_start: true,
                    });
                }
            }
        }
        for s in &steps {
            if !matches!(s.action, Action::HostRead) {
                self.op_id(s);
            }
        }
        let mut chunk_of_step = vec![0u32; steps.len()];
        for (c, (_, range)) in chunks.iter().enumerate() {
            for i in range.clone() {
                chunk_of_step[i] = c as u32;
            }
        }
        let n_queries = assign_queries(&mut spans, &gpu_steps, &chunk_of_step);
        let queries = if spans.is_empty() {
            None
        } else {
            Some(self.rec.create_query_pool(n_queries)?)
        };
        let host_reads = |buf: Buf| {
            steps.iter().any(|s| {
                matches!(s.action, Action::HostRead)
                    && s.binds.first().is_some_and(|b| b.range.buf == buf)
            })
        };
        let (reads_logits, reads_argmax) = (
            host_reads(Self::slot_buf(Buf::LogitsReadback, slot)),
            host_reads(Self::slot_buf(Buf::ArgmaxOut, slot)),
        );
        let phase_ops = self.phase_ops(kind);
        let mut prepared = Prepared {
            kind,
            slot,
            steps,
            chunks,
            sets: Vec::new(),
            spans,
            queries,
            recorded: false,
            chunk_of_step,
            reads_logits,
            reads_argmax,
            phase_ops,
        };
        // Pipelines, and descriptor sets bound once.
        for i in 0..prepared.steps.len() {
            let set = if let Action::Dispatch { .. } = prepared.steps[i].action {
                let desc = self.pipeline_desc(&prepared.steps[i]);
                self.pipeline(desc)?;
                if k.descriptors == Descriptors::BoundOnce {
                    Some(self.write_new_set(&prepared.steps[i], SetLifetime::Persistent)?)
                } else {
                    None
                }
            } else {
                None
            };
            prepared.sets.push(set);
        }
        if k.recording == Recording::Once && kind == StepKind::Decode {
            let mut log = SpanLog::new(self.epoch_ns);
            for c in 0..prepared.chunks.len() {
                self.record_chunk(&mut prepared, c, 0, &mut log)?;
            }
            prepared.recorded = true;
        }
        Ok(prepared)
    }

    fn pipeline_desc(&self, step: &Step) -> PipelineDesc {
        let Action::Dispatch {
            shader, spec, push, ..
        } = &step.action
        else {
            unreachable!("pipeline_desc is only asked for dispatches")
        };
        PipelineDesc {
            shader: *shader,
            bindings: step.binds.len() as u32,
            push_bytes: push.len() as u32,
            spec: *spec,
            push_descriptor: self.opts.knobs.descriptors == Descriptors::Push,
        }
    }

    fn pipeline(&mut self, desc: PipelineDesc) -> anyhow::Result<&Pipeline> {
        if !self.pipelines.contains_key(&desc) {
            let p = self.gpu().create_pipeline(desc).with_context(|| {
                format!("creating the pipeline of shader {}", desc.shader.name())
            })?;
            self.pipelines.insert(desc, p);
        }
        self.pipelines
            .get(&desc)
            .ok_or_else(|| anyhow!("internal: pipeline missing"))
    }

    fn ranges<'a>(
        bufs: &'a BTreeMap<Buf, Buffer>,
        tied: bool,
        binds: &[super::program::Bind],
    ) -> anyhow::Result<Vec<BufRange<'a>>> {
        binds
            .iter()
            .map(|b| {
                let key = if b.range.buf == Buf::LmHead && tied {
                    Buf::Embed
                } else {
                    b.range.buf
                };
                let buffer = bufs
                    .get(&key)
                    .ok_or_else(|| anyhow!("internal: buffer {key:?} missing"))?;
                Ok(BufRange {
                    buffer,
                    offset: b.range.offset,
                    bytes: b.range.bytes,
                })
            })
            .collect()
    }

    /// `n` little-endian words of the host-visible buffer `buf`, from byte `offset`.
    fn read_u32s(&mut self, buf: Buf, offset: u64, n: usize) -> anyhow::Result<Vec<u32>> {
        let b = self
            .bufs
            .get(&buf)
            .ok_or_else(|| anyhow!("internal: buffer {buf:?} missing"))?;
        let mut bytes = vec![0u8; 4 * n];
        self.rec.read(b, offset, &mut bytes)?;
        Ok(bytes
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    fn write_new_set(&mut self, step: &Step, lifetime: SetLifetime) -> anyhow::Result<DescSet> {
        let desc = self.pipeline_desc(step);
        self.pipeline(desc)?;
        let Engine {
            rec,
            pipelines,
            bufs,
            tied,
            ..
        } = self;
        let p = pipelines
            .get(&desc)
            .ok_or_else(|| anyhow!("internal: pipeline missing"))?;
        let set = rec.alloc_set(p, lifetime)?;
        let ranges = Self::ranges(bufs, *tied, &step.binds)?;
        rec.write_set(set, &ranges);
        Ok(set)
    }

    /// Descriptor sets for the dispatches of chunk `c` that need one now (per-dispatch: a new set
    /// each time; cached: the first time a binding combination is seen).
    fn chunk_sets(&mut self, p: &Prepared, c: usize) -> anyhow::Result<Vec<Option<DescSet>>> {
        let range = p.chunks[c].1.clone();
        let mut out = Vec::with_capacity(range.len());
        // A recording that is replayed keeps referencing its sets, so they must outlive the
        // per-step reset of the transient pool (which the prompt's step still performs).
        let replayed = self.opts.knobs.recording == Recording::Once && p.kind == StepKind::Decode;
        let lifetime = if replayed {
            SetLifetime::Persistent
        } else {
            SetLifetime::Transient
        };
        for i in range {
            let step = &p.steps[i];
            let set = match (&step.action, self.opts.knobs.descriptors) {
                (Action::Dispatch { .. }, Descriptors::PerDispatch) => {
                    Some(self.write_new_set(step, lifetime)?)
                }
                (Action::Dispatch { .. }, Descriptors::Cached) => {
                    let key = (
                        self.pipeline_desc(step),
                        step.binds
                            .iter()
                            .map(|b| (b.range.buf, b.range.offset, b.range.bytes))
                            .collect::<Vec<_>>(),
                    );
                    match self.cached_sets.get(&key) {
                        Some(s) => Some(*s),
                        None => {
                            let s = self.write_new_set(step, SetLifetime::Persistent)?;
                            self.cached_sets.insert(key, s);
                            Some(s)
                        }
                    }
                }
                (Action::Dispatch { .. }, Descriptors::BoundOnce) => p.sets[i],
                _ => None,
            };
            out.push(set);
        }
        Ok(out)
    }

    /// Records chunk `c` of `p` for a step whose rows attend up to `kv_len` positions (only
    /// KV-scaled grids depend on it; replayed programs have none).
    fn record_chunk(
        &mut self,
        p: &mut Prepared,
        c: usize,
        kv_len: u32,
        log: &mut SpanLog,
    ) -> anyhow::Result<()> {
        let sets = if matches!(
            self.opts.knobs.descriptors,
            Descriptors::PerDispatch | Descriptors::Cached
        ) {
            host_span!(log, "descriptors", 1, { self.chunk_sets(p, c)? })
        } else {
            p.chunks[c].1.clone().map(|i| p.sets[i]).collect()
        };
        host_span!(log, "record", 1, {
            self.record_steps(p, c, kv_len, &sets)?;
        });
        Ok(())
    }

    fn record_steps(
        &mut self,
        p: &mut Prepared,
        c: usize,
        kv_len: u32,
        sets: &[Option<DescSet>],
    ) -> anyhow::Result<()> {
        let (cmd, range) = (p.chunks[c].0, p.chunks[c].1.clone());
        let barriers = self.opts.knobs.barriers;
        let descriptors = self.opts.knobs.descriptors;
        let descs: Vec<Option<PipelineDesc>> = range
            .clone()
            .map(|i| {
                matches!(p.steps[i].action, Action::Dispatch { .. })
                    .then(|| self.pipeline_desc(&p.steps[i]))
            })
            .collect();
        let Engine {
            rec,
            pipelines,
            bufs,
            tied,
            track,
            ..
        } = self;
        rec.begin(cmd)?;
        if c == 0 {
            // Tracking starts fresh each step: the previous step's wait, or (chained) the full
            // barrier before its readback, ordered everything before it.
            track.clear();
        }
        let mut bound: Option<PipelineDesc> = None;
        // The spans are in step order and do not overlap: cursors to the next one to open and
        // to close, instead of a scan of every span at every step.
        let mut open = p.spans.partition_point(|s| s.first < range.start);
        let mut close = p.spans.partition_point(|s| s.last < range.start);
        for (j, i) in range.clone().enumerate() {
            let step = &p.steps[i];
            if barriers == Barriers::Tracked {
                if hazard(track, &step.binds) {
                    rec.full_barrier(cmd);
                    track.clear();
                }
                touch(track, &step.binds);
            }
            if let Action::HostRead = step.action {
                continue;
            }
            if let Some(q) = &p.queries {
                while let Some(s) = p.spans.get(open).filter(|s| s.first == i) {
                    open += 1;
                    if s.own_start {
                        rec.write_timestamp(cmd, q, s.start_q, true);
                    }
                }
            }
            rec.begin_label(cmd, &step.label);
            match &step.action {
                Action::Dispatch { push, grid, .. } => {
                    let desc =
                        descs[j].ok_or_else(|| anyhow!("internal: dispatch without pipeline"))?;
                    let pl = pipelines
                        .get(&desc)
                        .ok_or_else(|| anyhow!("internal: pipeline missing"))?;
                    if bound != Some(desc) {
                        rec.bind_pipeline(cmd, pl);
                        bound = Some(desc);
                    }
                    if descriptors == Descriptors::Push {
                        let ranges = Self::ranges(bufs, *tied, &step.binds)?;
                        rec.push_set(cmd, pl, &ranges)?;
                    } else {
                        let set = sets[j].ok_or_else(|| {
                            anyhow!("internal: no descriptor set for {}", step.label)
                        })?;
                        rec.bind_set(cmd, pl, set);
                    }
                    if !push.is_empty() {
                        rec.push_constants(cmd, pl, push);
                    }
                    let groups = match *grid {
                        Grid::Fixed(g) => g,
                        Grid::KvScaled { per, y, z } => [kv_len.div_ceil(per), y, z],
                    };
                    rec.dispatch(cmd, groups);
                }
                Action::Copy => {
                    let r = Self::ranges(bufs, *tied, &step.binds)?;
                    rec.copy(cmd, r[0], r[1].buffer, r[1].offset);
                }
                Action::HostRead => {}
            }
            rec.end_label(cmd);
            if barriers == Barriers::Full {
                rec.full_barrier(cmd);
            }
            if let Some(q) = &p.queries {
                while let Some(s) = p.spans.get(close).filter(|s| s.last == i) {
                    close += 1;
                    rec.write_timestamp(cmd, q, s.end_q, false);
                }
            }
        }
        rec.end(cmd)?;
        Ok(())
    }

    /// Makes the block tables cover `rows` (paged layout), writing changed rows to the device.
    fn ensure_blocks(&mut self, rows: &[RowParams]) -> anyhow::Result<()> {
        if self.kv.geo.kind != KvKind::Paged {
            return Ok(());
        }
        let block = self.kv.geo.unit;
        let mut changed: Vec<u32> = Vec::new();
        for row in rows {
            if self
                .tables
                .ensure(&mut self.pool, row.seq, row.pos + 1, block)
                .map_err(|e| anyhow!("{e}; raise the KV capacity (--max-tokens/--context)"))?
                && !changed.contains(&row.seq)
            {
                changed.push(row.seq);
            }
        }
        for seq in changed {
            let bytes: Vec<u8> = bytemuck::cast_slice(self.tables.row(seq)).to_vec();
            let offset = seq as u64 * self.tables.stride() as u64 * 4;
            let Engine { rec, bufs, .. } = self;
            let buf = bufs
                .get_mut(&Buf::KvTable)
                .ok_or_else(|| anyhow!("internal: block table buffer missing"))?;
            rec.write(buf, offset, &bytes)?;
        }
        Ok(())
    }

    /// Runs one step of `kind` over `tokens` (row i is `rows[i]`), records its trace record and
    /// returns the outputs of its head rows (the last prompt row, or every decode row).
    fn run(
        &mut self,
        tokens: &[u32],
        rows: &[RowParams],
        kind: StepKind,
    ) -> anyhow::Result<Vec<StepOutput>> {
        let n = tokens.len() as u32;
        if let Some(bad) = rows.iter().find(|r| r.pos >= self.shape.max_seq) {
            bail!(
                "position {} is past the KV cache's {} positions per sequence; raise --max-tokens/--context capacity",
                bad.pos,
                self.shape.max_seq
            );
        }
        if n > self.kv.max_rows {
            bail!(
                "a step of {n} rows exceeds the engine's capacity of {}",
                self.kv.max_rows
            );
        }
        if kind == StepKind::Decode && self.chained() {
            return self.run_chained(tokens, rows);
        }
        // A prompt after chained steps: the step submitted ahead is not wanted.
        self.drain_chain()?;
        let start_ns = host_now_ns();
        let mut log = SpanLog::new(self.epoch_ns);
        let token_span = log.open("token", 0);
        puffin::profile_scope!("token");
        self.ensure_blocks(rows)?;
        let mut p = match kind {
            StepKind::Decode => self
                .decode
                .take()
                .ok_or_else(|| anyhow!("internal: decode program missing"))?,
            StepKind::Prefill => match self.prefill.remove(&n) {
                Some(p) => p,
                None => host_span!(log, "record", 1, { self.prepare(n, kind)? }),
            },
        };
        let result = self
            .submit_prepared(&mut p, Some(tokens), rows, &mut log)
            .and_then(|()| self.complete_prepared(&mut p, n, &mut log, start_ns));
        match kind {
            StepKind::Decode => self.decode = Some(p),
            StepKind::Prefill => {
                self.prefill.insert(n, p);
            }
        }
        let (outs, gpu_spans, gpu_busy) = result?;
        log.close(token_span);
        let wall_ns = host_now_ns().saturating_sub(start_ns);
        let counters = self.rec.take_counters();
        self.push_record(StepRun {
            kind,
            rows,
            outs: &outs,
            log,
            start_ns,
            wall_ns,
            counters,
            gpu_spans,
            gpu_busy,
        });
        Ok(outs)
    }

    /// Appends the trace record of a step that ran.
    fn push_record(&mut self, r: StepRun<'_>) {
        let StepRun {
            kind,
            rows,
            outs,
            log,
            start_ns,
            wall_ns,
            mut counters,
            gpu_spans,
            gpu_busy,
        } = r;
        let host_wait_ns = log.total_ns("wait");
        let host_enqueue_ns =
            log.total_ns("record") + log.total_ns("descriptors") + log.total_ns("submit");
        // Positions attended: the last row of a prompt chunk, every row of a decode step.
        let attended = |r: &RowParams| (r.pos + 1 - r.lo) as u64;
        let kv_positions: u64 = match kind {
            StepKind::Prefill => rows.last().map_or(0, attended),
            StepKind::Decode => rows.iter().map(attended).sum(),
        };
        if self.kv.scratch.is_some() {
            // The gather copies what every row attends (the whole chunk range for a prompt).
            let gathered: u64 = match kind {
                StepKind::Prefill => match (rows.first(), rows.last()) {
                    (Some(a), Some(b)) => (b.pos + 1 - a.lo) as u64,
                    _ => 0,
                },
                StepKind::Decode => kv_positions,
            };
            counters.kv_bytes_copied += gather_bytes(
                self.shape.layers,
                self.shape.kv_dim(),
                self.kv.geo.dtype.bytes(),
                gathered,
            );
        }
        let phase = match kind {
            StepKind::Prefill => Phase::Prefill,
            StepKind::Decode => Phase::Decode,
        };
        self.records.push(TokenRecord {
            index: self.records.len() as u32,
            phase,
            position: rows.first().map_or(0, |r| r.pos),
            n_tokens: rows.len() as u32,
            kv_len: kv_positions as u32,
            token_id: outs.first().map(|o| o.argmax),
            start_ns: start_ns.saturating_sub(self.epoch_ns),
            wall_ns,
            host_enqueue_ns,
            host_wait_ns,
            gpu_busy_ns: gpu_busy,
            counters,
            host_spans: log.spans,
            gpu_spans,
            gpu_untimed: 0,
        });
    }

    /// The buffer that program slot `slot` uses for `buf` (the `*Alt` ones in slot 1).
    fn slot_buf(buf: Buf, slot: usize) -> Buf {
        match (slot, chain::alt_of(buf)) {
            (1, Some(alt)) => alt,
            _ => buf,
        }
    }

    fn slot_fence(&self, slot: usize) -> FenceId {
        if slot == 1 {
            self.fence_alt
        } else {
            self.fence
        }
    }

    /// Writes a step's parameters (and its token ids where `tokens` gives them: a chained step
    /// submitted ahead reads the previous step's argmax instead), records the program where it
    /// is not replayed, and submits it. Under `--sync submit` it also waits after every chunk but
    /// the last.
    fn submit_prepared(
        &mut self,
        p: &mut Prepared,
        tokens: Option<&[u32]>,
        rows: &[RowParams],
        log: &mut SpanLog,
    ) -> anyhow::Result<()> {
        let n = rows.len() as u32;
        let k = self.opts.knobs;
        let replay = p.recorded && k.recording == Recording::Once;
        let kv_len = rows.iter().map(|r| r.pos + 1).max().unwrap_or(0);
        let mut seqs: Vec<u32> = rows.iter().map(|r| r.seq).collect();
        seqs.sort_unstable();
        seqs.dedup();
        let slot = p.slot;
        // A chained decode program reads its ids where the other slot's step leaves its argmax.
        let ids_buf = if p.kind == StepKind::Decode && self.chained() {
            Self::slot_buf(Buf::ArgmaxOut, 1 - slot)
        } else {
            Buf::Ids
        };
        host_span!(log, "record", 1, {
            let header = TokenParams {
                pos0: rows.first().map_or(0, |r| r.pos),
                n_tokens: n,
                kv_len,
                n_seqs: seqs.len() as u32,
            };
            let Engine { rec, bufs, .. } = self;
            if let Some(tokens) = tokens {
                let ids = bufs
                    .get_mut(&ids_buf)
                    .ok_or_else(|| anyhow!("internal: ids buffer missing"))?;
                rec.write(ids, 0, bytemuck::cast_slice(tokens))?;
            }
            let pb = bufs
                .get_mut(&Self::slot_buf(Buf::Params, slot))
                .ok_or_else(|| anyhow!("internal: params buffer missing"))?;
            rec.write(pb, 0, &params_bytes(&header, rows))?;
            rec.use_transient_slot(slot);
            if !replay && matches!(k.descriptors, Descriptors::PerDispatch) {
                rec.reset_transient_sets()?;
            }
            if let Some(q) = &p.queries {
                rec.reset_queries(q, 0, q.count())?;
            }
        });
        let last = p.chunks.len() - 1;
        let fence = self.slot_fence(slot);
        for c in 0..p.chunks.len() {
            if !replay {
                self.record_chunk(p, c, kv_len, log)?;
            }
            let signal = k.sync == Sync::Submit || c == last;
            host_span!(log, "submit", 1, {
                self.rec.submit(&[p.chunks[c].0], signal.then_some(fence))?;
            });
            if signal && c != last {
                host_span!(log, "wait", 1, {
                    self.rec.wait(fence)?;
                });
            }
        }
        Ok(())
    }

    /// Waits for a submitted program's last chunk and reads its results back: the outputs, the
    /// GPU spans and the GPU busy time.
    #[allow(clippy::type_complexity)]
    fn complete_prepared(
        &mut self,
        p: &mut Prepared,
        n: u32,
        log: &mut SpanLog,
        start_ns: u64,
    ) -> anyhow::Result<(Vec<StepOutput>, Vec<GpuSpan>, Option<u64>)> {
        let fence = self.slot_fence(p.slot);
        host_span!(log, "wait", 1, {
            self.rec.wait(fence)?;
        });
        let wait_end = host_now_ns();
        let head_rows = match p.kind {
            StepKind::Prefill => 1,
            StepKind::Decode => n as usize,
        };
        let vocab = self.shape.vocab as usize;
        // Readback: the tokens (and the logits where they are read back).
        let (logits, gpu_tokens, raw_ts) = host_span!(log, "readback", 1, {
            let logits = if p.reads_logits {
                let mut bytes = vec![0u8; head_rows * vocab * 4];
                let b = self
                    .bufs
                    .get(&Self::slot_buf(Buf::LogitsReadback, p.slot))
                    .ok_or_else(|| anyhow!("internal: readback missing"))?;
                self.rec.read(b, 0, &mut bytes)?;
                Some(
                    bytes
                        .chunks_exact(4)
                        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                        .collect::<Vec<f32>>(),
                )
            } else {
                None
            };
            let gpu_tokens = if p.reads_argmax {
                Some(self.read_u32s(Self::slot_buf(Buf::ArgmaxOut, p.slot), 0, head_rows)?)
            } else {
                None
            };
            let raw = match &p.queries {
                Some(q) => self.rec.read_queries(q, 0, q.count())?,
                None => Vec::new(),
            };
            (logits, gpu_tokens, raw)
        });
        self.check_persistent_status(p.kind, n, p.slot)?;
        let outs = host_span!(log, "sample", 1, {
            let mut outs = Vec::with_capacity(head_rows);
            for row in 0..head_rows {
                let row_logits = logits
                    .as_ref()
                    .map(|l| l[row * vocab..(row + 1) * vocab].to_vec());
                let id = match (&gpu_tokens, &row_logits) {
                    (Some(t), _) => t[row],
                    (None, Some(l)) => argmax(l),
                    (None, None) => {
                        bail!("internal: the program read back neither logits nor a token")
                    }
                };
                outs.push(StepOutput {
                    logits: row_logits,
                    argmax: id,
                });
            }
            outs
        });
        let (gpu_spans, busy) = self.gpu_spans(p, &raw_ts, wait_end, start_ns);
        let gpu_spans = self.phase_spans(&p.phase_ops, gpu_spans)?;
        Ok((outs, gpu_spans, busy))
    }

    /// Runs a prompt of sequence `seq` at positions `pos0..` in chunks of at most
    /// `--prefill-chunk` tokens; returns the output of its last position.
    pub fn prefill(&mut self, seq: u32, tokens: &[u32], pos0: u32) -> anyhow::Result<StepOutput> {
        if seq >= self.kv.geo.seqs {
            bail!(
                "sequence {seq} is past the engine's batch of {}",
                self.kv.geo.seqs
            );
        }
        let chunk = self.opts.kv.prefill_chunk.max(1) as usize;
        let mut last = None;
        for (i, piece) in tokens.chunks(chunk).enumerate() {
            let p0 = pos0 + (i * chunk) as u32;
            let rows = prompt_rows(seq, p0, piece.len() as u32, self.kv.window);
            last = self.run(piece, &rows, StepKind::Prefill)?.pop();
        }
        last.ok_or_else(|| anyhow!("a prompt step needs at least one token"))
    }

    /// One decode step of every sequence: `tokens[i]` is sequence i's next token, at
    /// `positions[i]`. Returns one output per sequence.
    pub fn decode_step(
        &mut self,
        tokens: &[u32],
        positions: &[u32],
    ) -> anyhow::Result<Vec<StepOutput>> {
        let batch = self.opts.kv.batch.max(1) as usize;
        if tokens.len() != batch || positions.len() != batch {
            bail!(
                "a decode step takes one token for each of the {batch} sequences (got {} tokens, {} positions)",
                tokens.len(),
                positions.len()
            );
        }
        let rows: Vec<RowParams> = positions
            .iter()
            .enumerate()
            .map(|(seq, &pos)| RowParams {
                pos,
                seq: seq as u32,
                lo: window_start(pos, self.kv.window),
                pad0: 0,
            })
            .collect();
        self.run(tokens, &rows, StepKind::Decode)
    }

    /// Converts raw timestamps to GPU spans on the host timeline (relative to the epoch) and the
    /// step's GPU busy time (the union of its spans).
    fn gpu_spans(
        &self,
        p: &Prepared,
        raw: &[u64],
        wait_end: u64,
        start_ns: u64,
    ) -> (Vec<GpuSpan>, Option<u64>) {
        if p.spans.is_empty() || raw.is_empty() {
            return (Vec::new(), None);
        }
        let ns = |t: u64| ((t & self.valid_mask) as f64 * self.period_ns) as i64;
        let offset = if self.clock.calibrated {
            self.clock.gpu_minus_host_ns
        } else {
            // Fallback: the step's last GPU timestamp happened no later than the wait returned.
            let last_end = p
                .spans
                .iter()
                .map(|s| ns(raw[s.end_q as usize]))
                .max()
                .unwrap_or(0);
            last_end - wait_end as i64
        };
        let epoch = self.epoch_ns as i64;
        let mut spans: Vec<GpuSpan> = p
            .spans
            .iter()
            .map(|s| {
                let a = ns(raw[s.start_q as usize]) - offset - epoch;
                let b = ns(raw[s.end_q as usize]) - offset - epoch;
                let start = a.max(start_ns as i64 - epoch).max(0) as u64;
                let end = (b.max(a)).max(0) as u64;
                GpuSpan(
                    s.op,
                    start,
                    end.saturating_sub(start),
                    0,
                    p.chunk_of_step[s.first],
                )
            })
            .collect();
        spans.sort_by_key(|s| s.1);
        let busy = profiler::stats::union_ns(&spans);
        (spans, Some(busy))
    }
}

/// True when a step touches a range written since the last barrier, or writes one read since.
fn hazard(t: &[(Buf, u64, u64, bool)], binds: &[super::program::Bind]) -> bool {
    binds.iter().any(|b| {
        let r = b.range;
        let writes = b.access != Access::Read;
        t.iter().any(|&(buf, off, len, w)| {
            buf == r.buf && off < r.offset + r.bytes && r.offset < off + len && (w || writes)
        })
    })
}

/// Records the ranges a step touches.
fn touch(t: &mut Vec<(Buf, u64, u64, bool)>, binds: &[super::program::Bind]) {
    for b in binds {
        let r = b.range;
        t.push((r.buf, r.offset, r.bytes, b.access != Access::Read));
    }
}

impl Backend for Engine {
    /// The single-sequence interface (`--batch 1`): a one-token step after the prompt is a
    /// decode step, anything else a prompt.
    fn step(
        &mut self,
        tokens: &[u32],
        pos: usize,
        want_logits: bool,
    ) -> anyhow::Result<StepOutput> {
        if self.opts.kv.batch > 1 {
            bail!(
                "this engine decodes a batch of {} sequences; drive it with generate_batch",
                self.opts.kv.batch
            );
        }
        let out = if tokens.len() == 1 && pos > 0 {
            self.decode_step(tokens, &[pos as u32])?
                .pop()
                .ok_or_else(|| anyhow!("internal: a decode step returned no output"))?
        } else {
            self.prefill(0, tokens, pos as u32)?
        };
        check_logits(want_logits, &out)?;
        Ok(out)
    }
}

fn check_logits(want_logits: bool, out: &StepOutput) -> anyhow::Result<()> {
    if want_logits && out.logits.is_none() {
        bail!(
            "the logits were asked for but these kernels pick the token on the GPU; build the engine with \
             logits_readback (decoder run --dump does)"
        );
    }
    Ok(())
}

impl BatchBackend for Engine {
    fn batch(&self) -> usize {
        self.opts.kv.batch.max(1) as usize
    }

    fn step_batch(
        &mut self,
        steps: &[SeqStep<'_>],
        want_logits: bool,
    ) -> anyhow::Result<Vec<StepOutput>> {
        let decode = steps.len() == self.batch()
            && steps
                .iter()
                .enumerate()
                .all(|(i, s)| s.seq == i && s.tokens.len() == 1 && s.pos > 0);
        let outs = if decode {
            let tokens: Vec<u32> = steps.iter().map(|s| s.tokens[0]).collect();
            let positions: Vec<u32> = steps.iter().map(|s| s.pos as u32).collect();
            self.decode_step(&tokens, &positions)?
        } else {
            let mut outs = Vec::with_capacity(steps.len());
            for s in steps {
                outs.push(self.prefill(s.seq as u32, s.tokens, s.pos as u32)?);
            }
            outs
        };
        for o in &outs {
            check_logits(want_logits, o)?;
        }
        Ok(outs)
    }
}

/// Numbers the start and end queries of `spans` (in step order) and returns how many there are.
/// A span whose first GPU step directly follows the previous span's last one in the same command
/// buffer shares that span's end query as its start.
fn assign_queries(spans: &mut [SpanDef], gpu_steps: &[usize], chunk_of_step: &[u32]) -> u32 {
    let mut next = 0u32;
    let mut prev: Option<(usize, u32)> = None;
    for s in spans.iter_mut() {
        let follows = prev.is_some_and(|(last, _)| {
            let after = gpu_steps.partition_point(|&g| g <= last);
            gpu_steps.get(after) == Some(&s.first) && chunk_of_step[last] == chunk_of_step[s.first]
        });
        s.own_start = !follows;
        s.start_q = match prev {
            Some((_, end_q)) if follows => end_q,
            _ => {
                next += 1;
                next - 1
            }
        };
        s.end_q = next;
        next += 1;
        prev = Some((s.last, s.end_q));
    }
    next
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_matrix_is_transposed_row_for_column() {
        // 2 rows x 3 columns, row-major.
        let m = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        assert_eq!(transposed(&m, 2), vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
        assert_eq!(transposed(&transposed(&m, 2), 3), m.to_vec());
    }

    fn span(first: usize, last: usize) -> SpanDef {
        SpanDef {
            op: 0,
            first,
            last,
            start_q: 0,
            end_q: 0,
            own_start: true,
        }
    }

    #[test]
    fn adjacent_spans_in_one_command_buffer_share_a_boundary_query() {
        // GPU steps 0, 1, 3, 4, 5 (step 2 is a host read); steps 0-3 in command buffer 0,
        // 4-5 in command buffer 1.
        let gpu = [0, 1, 3, 4, 5];
        let chunk = [0, 0, 0, 0, 1, 1];
        let mut spans = vec![span(0, 0), span(1, 3), span(4, 4), span(5, 5)];
        let n = assign_queries(&mut spans, &gpu, &chunk);
        let got: Vec<(u32, u32, bool)> = spans
            .iter()
            .map(|s| (s.start_q, s.end_q, s.own_start))
            .collect();
        // The second span follows the first; the third starts a new command buffer; the fourth
        // follows the third.
        assert_eq!(
            got,
            [(0, 1, true), (1, 2, false), (3, 4, true), (4, 5, false)]
        );
        assert_eq!(n, 6);
        // Spans with a GPU step between them that no span covers do not share.
        let mut spans = vec![span(0, 0), span(3, 3)];
        assert_eq!(assign_queries(&mut spans, &gpu, &chunk), 4);
        assert!(spans[1].own_start);
    }
}
