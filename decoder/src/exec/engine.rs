//! The Vulkan backend: uploads the weights, lowers the model with the chosen kernels, and runs
//! each step under the other five knobs, recording counters, host spans and GPU timestamps into
//! trace records.

mod chain;
mod records;
mod residency;
mod resources;
mod step;
mod submit;

use std::collections::{BTreeMap, HashMap};
use std::ops::Range as StdRange;

use anyhow::{Context as _, anyhow, bail};
use profiler::trace::{ClockMeta, GpuSpan, OpInfo};

use super::kernels::{RowParams, prompt_rows};
use super::knobs::Knobs;
use super::program::{Buf, KvPlan, Shape, Step, StepKind, Tuning, TuningOverrides, WeightTypes};
use super::spans::SpanLog;
use crate::generate::{Backend, BatchBackend, SeqStep, StepOutput};
use crate::host_span;
use crate::kv::{
    BlockPool, BlockTables, KvConfig, KvGeometry, KvKind, PagedAttention, window_start,
};
use crate::model::{ModelConfig, Weights};
use crate::vk::{
    Buffer, BufferDesc, Cmd, DescSet, FenceId, Gpu, Pipeline, PipelineDesc, QueryPool, Recorder,
    host_now_ns,
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
    /// The storage type of every matrix, as the weights give them.
    wtypes: WeightTypes,
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
    records: records::RecordLog,
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
        let wtypes = WeightTypes::of(weights);
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
        let tuning = tuning.for_weights(&wtypes, opts.max_seq).with(&opts.tuning);
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
            wtypes,
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
            records: records::RecordLog::default(),
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
    /// The storage type of every matrix on the GPU.
    pub fn weight_types(&self) -> &WeightTypes {
        &self.wtypes
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
        // The kernels index the embedding by token id: one past the vocabulary would read
        // outside it.
        if let Some(bad) = tokens.iter().find(|&&t| t >= self.shape.vocab) {
            bail!(
                "token id {bad} is past the model's vocabulary of {} ids",
                self.shape.vocab
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
        if let Some(bad) = outs.iter().find(|o| o.argmax >= self.shape.vocab) {
            bail!(
                "the {} kernels returned token id {} for a step, past the model's vocabulary of {} ids: \
                 their result is wrong; run with --validation, or another --kernels setting",
                self.opts.knobs.kernels,
                bad.argmax,
                self.shape.vocab
            );
        }
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
        })?;
        Ok(outs)
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
