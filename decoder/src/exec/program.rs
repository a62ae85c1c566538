//! The model described once, and its two lowerings into GPU steps.
//!
//! [`describe`] lists the logical operations of one forward step ([`Op`]), the same list for
//! every mode. [`lower`] turns that list into [`Step`]s: with `Kernels::Primitive` every op is its
//! own dispatch (or transfer copy), with `Kernels::Fused` runs of ops are matched and replaced by
//! one fused kernel. Everything else the knobs decide (submits, waits, descriptors, barriers,
//! recording) happens later, in the engine, from these steps alone.

use profiler::trace::OpInfo;

use super::kernels::*;
use super::knobs::Kernels;
use crate::kv::KvGeometry;
use crate::shaders::Shader;

/// What the lowering needs to know about the model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shape {
    pub layers: u32,
    pub hidden: u32,
    pub heads: u32,
    pub kv_heads: u32,
    pub head_dim: u32,
    pub intermediate: u32,
    pub vocab: u32,
    pub eps: f32,
    /// Qwen3's per-head RMSNorm of q and k before RoPE.
    pub qk_norm: bool,
    /// Positions one sequence can hold (prompt and generated tokens).
    pub max_seq: u32,
}

/// Where the KV cache lives and how attention reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvPlan {
    /// The caches' layout (every layer's `KCache`/`VCache`).
    pub geo: KvGeometry,
    /// The contiguous scratch attention reads after a gather (`--paged-attention gather`).
    pub scratch: Option<KvGeometry>,
    /// Sliding window in positions (0: full causal attention).
    pub window: u32,
    /// Rows the params buffer holds (the largest step).
    pub max_rows: u32,
}

/// What a step computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StepKind {
    /// A chunk of one sequence's prompt: consecutive positions, logits of the last row only.
    Prefill,
    /// One token of every sequence: logits of every row.
    Decode,
}

impl Shape {
    pub fn q_dim(&self) -> u32 {
        self.heads * self.head_dim
    }
    pub fn kv_dim(&self) -> u32 {
        self.kv_heads * self.head_dim
    }
    pub fn qkv_rows(&self) -> u32 {
        self.q_dim() + 2 * self.kv_dim()
    }
    /// Bytes of weights one decode token reads: every matrix once (f16), the norms (f32), one
    /// embedding row.
    pub fn weight_bytes_per_token(&self) -> u64 {
        let (h, i) = (self.hidden as u64, self.intermediate as u64);
        let per_layer = 2 * (self.qkv_rows() as u64 * h + h * self.q_dim() as u64 + 3 * i * h)
            + 4 * (2 * h
                + if self.qk_norm {
                    2 * self.head_dim as u64
                } else {
                    0
                });
        self.layers as u64 * per_layer + 2 * self.vocab as u64 * h + 4 * h + 2 * h
    }
}

/// Tuning chosen per device: workgroup sizes and rows per workgroup, passed as specialization
/// constants.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tuning {
    /// Workgroup size of the primitive kernels.
    pub wg: u32,
    /// Rows per workgroup of the primitive matvec.
    pub matvec_rows: u32,
    /// (workgroup size, rows per workgroup) of `matvec_fused` by role.
    pub qkv: (u32, u32),
    pub gate_up: (u32, u32),
    /// o-projection and down-projection (residual epilogue).
    pub residual: (u32, u32),
    /// lm_head over the vocabulary.
    pub head: (u32, u32),
    pub attn_wg: u32,
    pub n_splits: u32,
    /// Prompt attention with one invocation per row and no barriers (CPU drivers), instead of
    /// the tiled kernel.
    pub prefill_rows: bool,
    /// Positions per tile of the split-K decode attention (shared memory: 16 fits a CPU
    /// driver's 32 KiB, 32 halves the barriers per position on GPUs).
    pub attn_tile: u32,
    /// 1: `attn_split` loads the next tile into registers while computing the current one.
    pub attn_prefetch: u32,
    /// Subgroup size of `attn_split_sg` (one subgroup per split, no workgroup barriers), or 0
    /// for the tiled `attn_split` (devices without subgroup arithmetic).
    pub attn_sg: u32,
    /// Query rows per `attn_prefill` workgroup (16 or 32).
    pub prefill_max_r: u32,
    /// Loads in flight per lane in `attn_split_sg`'s K and V loops (8, 16 or 32; at most the
    /// subgroup size).
    pub attn_unroll: u32,
    /// 1: `attn_split_sg` reads each K row with 8 lanes (coalesced) instead of one lane per
    /// position; 2: as 1, with all the rows' loads of a pass issued before the first dot product
    /// (H100, fused, batch 1: 484 against 470 tokens/s at context 512, but 246 against 297 at
    /// 16K, where its 32 extra vec4 registers per lane cost more resident subgroups than the
    /// fewer round trips save; so 1 stays the default).
    pub attn_kcoop: u32,
    /// The device's subgroup size (the persistent kernel's SG).
    pub subgroup: u32,
    /// Workgroup size of the persistent token kernel.
    pub persistent_wg: u32,
    /// Workgroups of the persistent token kernel: 0 until the engine's residency probe sets it,
    /// or the `persistent_groups` override (then probed at exactly that size).
    pub persistent_groups: u32,
    /// Splits per (row, KV head) the persistent kernel's attention aims for: 0 (the default)
    /// for the grid's subgroups over the units, or the `persistent_splits` override (tests use it
    /// to reach the merge's several rounds on a one-workgroup CPU grid).
    pub persistent_splits: u32,
    /// Attention units per workgroup whose first block of K and V rows the persistent kernel
    /// stages in shared memory, loaded during the QKV phase (`KV_STAGE`); 0: none.
    /// Lowered (to 0 at worst) where the device's shared memory cannot hold them.
    pub persistent_kv_stage: u32,
    /// Head groups of the persistent kernel's attention (`persistent::head_groups`): 0 (the
    /// default) gives each query head of a unit a subgroup of its own where the grid has one for
    /// every query head of every unit up to the KV capacity, 1 never, 2 always (tests use it to
    /// reach them on a one-workgroup CPU grid).
    pub persistent_head_groups: u32,
    /// Copies of each residual row the persistent kernel's float atomics spread over (`RC`, at
    /// most `persistent::MAX_RESIDUAL_COPIES`), so each word takes 1 / RC of the grid's atomics.
    pub persistent_res_copies: u32,
    /// The persistent kernel writes a device clock per phase (`--timestamps dispatch` on a
    /// device with shaderDeviceClock): set by the engine, not a tuning key.
    pub phase_clocks: bool,
}

impl Tuning {
    /// Uses the subgroup decode attention when the device has subgroup arithmetic and shuffles
    /// (`ops`) with subgroups of `subgroup` lanes (8 to 128, a power of two).
    pub fn with_subgroups(mut self, subgroup: u32, ops: bool) -> Tuning {
        if ops && subgroup.is_power_of_two() && (8..=128).contains(&subgroup) {
            self.attn_sg = subgroup;
        }
        self
    }

    /// Applies `key=value` overrides separated by commas (`attn_wg`, `n_splits`, `attn_tile`),
    /// the form the `DECODESCOPE_TUNING` environment variable takes when tuning kernels on a new
    /// device. Unknown keys and values the kernels cannot take are refused, naming them.
    pub fn with_overrides(mut self, spec: &str) -> Result<Tuning, String> {
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (key, value) = item
                .split_once('=')
                .ok_or_else(|| format!("DECODESCOPE_TUNING: {item:?} is not key=value"))?;
            let v: u32 = value.parse().map_err(|_| {
                format!("DECODESCOPE_TUNING: {key}={value:?} is not a whole number")
            })?;
            match key {
                "attn_wg" if v.is_power_of_two() && (32..=1024).contains(&v) => self.attn_wg = v,
                "n_splits" if (1..=1024).contains(&v) => self.n_splits = v,
                "attn_tile" if v == 16 || v == 32 => self.attn_tile = v,
                "attn_prefetch" if v <= 1 => self.attn_prefetch = v,
                "attn_sg" if v == 0 || (v.is_power_of_two() && (8..=128).contains(&v)) => {
                    self.attn_sg = v
                }
                "prefill_max_r" if v == 16 || v == 32 => self.prefill_max_r = v,
                "attn_unroll" if v == 8 || v == 16 || v == 32 => self.attn_unroll = v,
                "attn_kcoop" if v <= 2 => self.attn_kcoop = v,
                "persistent_wg" if v.is_power_of_two() && (32..=1024).contains(&v) => {
                    self.persistent_wg = v
                }
                "persistent_groups" if (1..=4096).contains(&v) => self.persistent_groups = v,
                "persistent_splits" if (1..=4096).contains(&v) => self.persistent_splits = v,
                "persistent_kv_stage" if v <= 8 => self.persistent_kv_stage = v,
                "persistent_head_groups" if v <= 2 => self.persistent_head_groups = v,
                "persistent_res_copies" if (1..=8).contains(&v) => self.persistent_res_copies = v,
                "attn_wg"
                | "n_splits"
                | "attn_tile"
                | "attn_prefetch"
                | "attn_sg"
                | "prefill_max_r"
                | "attn_unroll"
                | "attn_kcoop"
                | "persistent_wg"
                | "persistent_groups"
                | "persistent_splits"
                | "persistent_kv_stage"
                | "persistent_head_groups"
                | "persistent_res_copies" => {
                    return Err(format!(
                        "DECODESCOPE_TUNING: {key}={v} is out of range (attn_wg: a power of two \
                         from 32 to 1024, n_splits: 1 to 1024, attn_tile: 16 or 32, attn_prefetch: 0 or 1, attn_sg: 0 or \
                         the device's subgroup size, prefill_max_r: 16 or 32, attn_unroll: 8, 16 or 32, attn_kcoop: 0, 1 or 2, \
                         persistent_wg: a power of two from 32 to 1024, persistent_groups and persistent_splits: 1 to 4096, \
                         persistent_kv_stage: 0 to 8, persistent_head_groups: 0 (by the grid), 1 (off) or 2 (on), persistent_res_copies: 1 to 8)"
                    ));
                }
                _ => {
                    return Err(format!(
                        "DECODESCOPE_TUNING: unknown key {key:?} (use attn_wg, n_splits, attn_tile, attn_prefetch, attn_sg, \
                         prefill_max_r, attn_unroll, attn_kcoop, persistent_wg, persistent_groups, persistent_splits, \
                         persistent_kv_stage, persistent_head_groups or persistent_res_copies)"
                    ));
                }
            }
        }
        Ok(self)
    }
}

/// What a fused matvec computes, for its tuning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MvRole {
    Qkv,
    GateUp,
    Residual,
    Head,
}

impl Tuning {
    /// Workgroup and split sizes for a device with `compute_units` units and `subgroup` lanes,
    /// for contexts up to `max_seq` positions over `kv_heads` KV heads.
    pub fn for_device(compute_units: u32, subgroup: u32, max_seq: u32, kv_heads: u32) -> Tuning {
        // Split-K: about two workgroups per compute unit over all KV heads, at least 16 positions
        // per split, no more than 256 splits (32 splits of 8 KV heads measured best on an H200 at
        // 512 and 2048 positions).
        let want = (2 * compute_units).div_ceil(kv_heads.max(1)).max(1);
        // Long contexts: enough splits that no workgroup walks more than ~128 positions
        // serially (its tiles are latency-bound; more workgroups keep more loads in flight).
        // (64: measured on an H100 at 16K positions, where 256 splits of the subgroup kernel
        // and 33 of the tiled one come out level.)
        let by_len = max_seq.div_ceil(64);
        let n_splits = want.max(by_len).min(max_seq.div_ceil(16)).clamp(1, 256);
        if subgroup >= 32 {
            // GPUs: the sizes that `kernel_bench` measured fastest on an H200 (wide subgroups,
            // many compute units): small workgroups with few rows for the short matrices, more
            // rows for the vocabulary-sized lm_head.
            Tuning {
                wg: 128,
                matvec_rows: 2,
                qkv: (128, 4),
                gate_up: (32, 2),
                residual: (128, 2),
                head: (64, 4),
                attn_wg: 256,
                n_splits,
                prefill_rows: false,
                attn_tile: 32,
                attn_prefetch: 0,
                attn_sg: 0,
                // 16 query rows per group: 1157 prompt tokens/s at 16K on an H100 against
                // 904 with 32 (chunks of 2048, `scripts/device/tune.sh`).
                prefill_max_r: 16,
                attn_unroll: 8,
                // Eight lanes per K row: attention at 16K on an H100 from 2889 to 1807 us per
                // token (the one-lane-per-row loads are 2 KiB apart across the subgroup).
                attn_kcoop: 1,
                subgroup,
                // 256. 512 (half the workgroups: the probe gives one per SM either way) made the
                // driver cap the kernel at 128 registers and spill (docs/persistent-kernel.md).
                persistent_wg: 256,
                persistent_groups: 0,
                persistent_splits: 0,
                // The first unit's first block: its loads go out during the QKV phase, so their
                // round trip runs beside its matvec and the attention at short contexts reads no
                // cache. (Staged after the QKV phase instead, its round trip came before the
                // attention's polls and it lost: docs/persistent-kernel.md.)
                persistent_kv_stage: 1,
                persistent_head_groups: 0,
                // Each residual word takes an atomic from every workgroup twice a layer; 4 copies
                // measured best of 1, 2, 4 and 8 (docs/persistent-kernel.md).
                persistent_res_copies: 4,
                phase_clocks: false,
            }
        } else {
            // CPU drivers (lavapipe) and narrow subgroups.
            Tuning {
                wg: 128,
                matvec_rows: 2,
                qkv: (64, 4),
                gate_up: (64, 4),
                residual: (64, 4),
                head: (64, 4),
                attn_wg: 64,
                n_splits,
                prefill_rows: true,
                attn_tile: 16,
                attn_prefetch: 0,
                attn_sg: 0,
                prefill_max_r: 16,
                attn_unroll: 8,
                attn_kcoop: 0,
                subgroup,
                persistent_wg: 64,
                persistent_groups: 0,
                persistent_splits: 0,
                // One subgroup's, so CI checks the staged blocks (DECODESCOPE_TUNING
                // persistent_kv_stage on a GPU) beside the loaded ones.
                persistent_kv_stage: 1,
                persistent_head_groups: 0,
                // The GPU's value, so CI runs the copies' code (on one workgroup every atomic
                // goes to the first copy; the others are cleared and summed).
                persistent_res_copies: 4,
                phase_clocks: false,
            }
        }
    }
}

/// A buffer of the engine, by role. Weights per layer carry the layer index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Buf {
    Embed,
    LmHead,
    FinalNorm,
    AttnNorm(u32),
    MlpNorm(u32),
    /// q, k and v projections stacked: [q_dim + 2 kv_dim, hidden] f16.
    Wqkv(u32),
    QNorm(u32),
    KNorm(u32),
    Wo(u32),
    /// gate and up projections stacked: [2 intermediate, hidden] f16.
    WGateUp(u32),
    WDown(u32),
    /// down projection transposed, [intermediate, hidden] f16: a contiguous row per channel
    /// (the persistent kernel's MLP phase; allocated for `--kernels persistent` only).
    WDownT(u32),
    KCache(u32),
    VCache(u32),
    /// Host-visible: the paged layout's block tables `[seqs, stride]` u32 (bound, unused, by the
    /// other layouts).
    KvTable,
    /// The contiguous K and V the paged gather writes, shared by every layer.
    KScratch,
    VScratch,
    RopeTable,
    /// Host-visible: the step's token ids.
    Ids,
    /// Host-visible: the step's `TokenParams` and its rows.
    Params,
    /// The second decode program's `Params`, `ArgmaxOut` and `LogitsReadback` under `--sync
    /// chained`, whose steps alternate between two programs so the host can write one step's
    /// parameters while the GPU runs the other (`engine/chain.rs`).
    ParamsAlt,
    ArgmaxOutAlt,
    LogitsReadbackAlt,
    X,
    H,
    QRaw,
    KRaw,
    Q,
    K,
    V,
    Qkv,
    Scores,
    Partial,
    Attn,
    Tmp,
    Gate,
    Up,
    Act,
    Logits,
    /// Host-visible: the logits read back.
    LogitsReadback,
    /// Host-visible: the GPU argmax (index, value bits), then the persistent kernel's status.
    ArgmaxOut,
    /// The persistent kernel's table of per-layer buffer device addresses.
    Ptrs,
    /// The persistent kernel's grid-barrier words and per-workgroup argmax candidates.
    GridSync,
    /// Host-visible: the persistent kernel's phase clocks.
    PhaseClocks,
    /// The persistent kernel's q, k and v rows and its attention partials, as tagged words.
    TaggedQkv,
    TaggedPartial,
}

/// How a dispatch accesses a binding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
    ReadWrite,
}

/// A byte range of an engine buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    pub buf: Buf,
    pub offset: u64,
    pub bytes: u64,
}

/// A binding of a dispatch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bind {
    pub range: Range,
    pub access: Access,
}

/// The dispatch grid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grid {
    Fixed([u32; 3]),
    /// `x = ceil(kv_len / per)` for the step's KV length.
    KvScaled {
        per: u32,
        y: u32,
        z: u32,
    },
}

/// The timestamp region a step belongs to: `embed`, `L{i}.attn`, `L{i}.mlp` or `head`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Region {
    Embed,
    Attn(u32),
    Mlp(u32),
    Head,
    /// A whole decode step in one dispatch (the persistent kernel).
    Token,
}

impl Region {
    pub fn label(&self) -> String {
        match self {
            Region::Embed => "embed".into(),
            Region::Attn(l) => format!("L{l}.attn"),
            Region::Mlp(l) => format!("L{l}.mlp"),
            Region::Head => "head".into(),
            Region::Token => "token".into(),
        }
    }
    /// The transformer layer, for `--submit per-layer`.
    pub fn layer(&self, layers: u32) -> u32 {
        match self {
            Region::Embed => 0,
            Region::Attn(l) | Region::Mlp(l) => *l,
            Region::Head | Region::Token => layers.saturating_sub(1),
        }
    }
}

/// What a step does.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    Dispatch {
        shader: Shader,
        spec: [u32; crate::vk::SPEC_CONSTANTS],
        push: Vec<u8>,
        grid: Grid,
    },
    /// A transfer copy from `binds[0]` to `binds[1]`.
    Copy,
    /// The host reads `binds[0]` after the step's last wait (no GPU command; the barrier
    /// tracker treats it as a reader).
    HostRead,
}

/// One unit of GPU work with the label that names it everywhere (debug region, timestamp span,
/// report row) and its per-op facts.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    pub label: String,
    pub kind: &'static str,
    pub region: Region,
    pub action: Action,
    pub binds: Vec<Bind>,
    /// Bytes and flops at a given KV length (for one run of this step).
    pub facts: OpInfo,
}

/// The logical operations of one forward step over `n` tokens, for every mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Embed,
    AttnNorm(u32),
    QkvProj(u32),
    QkNorm(u32),
    Rope(u32),
    KvAppend(u32),
    Attention(u32),
    OProj(u32),
    AttnResidual(u32),
    MlpNorm(u32),
    GateUpProj(u32),
    SiluMul(u32),
    DownProj(u32),
    MlpResidual(u32),
    FinalNorm,
    LmHead,
    Argmax,
}

/// The model, described once: the ops of one forward step in order.
pub fn describe(s: &Shape) -> Vec<Op> {
    let mut ops = vec![Op::Embed];
    for l in 0..s.layers {
        ops.push(Op::AttnNorm(l));
        ops.push(Op::QkvProj(l));
        if s.qk_norm {
            ops.push(Op::QkNorm(l));
        }
        ops.extend([
            Op::Rope(l),
            Op::KvAppend(l),
            Op::Attention(l),
            Op::OProj(l),
            Op::AttnResidual(l),
            Op::MlpNorm(l),
            Op::GateUpProj(l),
            Op::SiluMul(l),
            Op::DownProj(l),
            Op::MlpResidual(l),
        ]);
    }
    ops.extend([Op::FinalNorm, Op::LmHead, Op::Argmax]);
    ops
}

/// Lowering context: shapes, tuning, the KV plan, the step's rows and kind, and the steps
/// emitted so far.
pub(super) struct Lower<'a> {
    pub(super) s: &'a Shape,
    pub(super) t: &'a Tuning,
    pub(super) kv: &'a KvPlan,
    pub(super) n: u32,
    pub(super) kind: StepKind,
    pub(super) steps: Vec<Step>,
}

pub(super) const F32: u64 = 4;
pub(super) const F16: u64 = 2;

pub(super) fn r(buf: Buf, offset: u64, bytes: u64) -> Range {
    Range { buf, offset, bytes }
}
pub(super) fn read(range: Range) -> Bind {
    Bind {
        range,
        access: Access::Read,
    }
}
pub(super) fn write(range: Range) -> Bind {
    Bind {
        range,
        access: Access::Write,
    }
}
pub(super) fn rw(range: Range) -> Bind {
    Bind {
        range,
        access: Access::ReadWrite,
    }
}

pub(super) fn spec(values: &[u32]) -> [u32; crate::vk::SPEC_CONSTANTS] {
    let mut s = [0u32; crate::vk::SPEC_CONSTANTS];
    s[..values.len()].copy_from_slice(values);
    s
}

impl Lower<'_> {
    pub(super) fn act(&self, buf: Buf, per_token: u32) -> Range {
        r(buf, 0, self.n as u64 * per_token as u64 * F32)
    }

    /// The params header and this step's rows.
    pub(super) fn params(&self) -> Range {
        r(
            Buf::Params,
            0,
            (std::mem::size_of::<TokenParams>()
                + self.n as usize * std::mem::size_of::<RowParams>()) as u64,
        )
    }

    /// Rows whose logits the step computes: the last prompt row, or every decode row.
    pub(super) fn head_rows(&self) -> u32 {
        match self.kind {
            StepKind::Prefill => 1,
            StepKind::Decode => self.n,
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn dispatch(
        &mut self,
        label: String,
        kind: &'static str,
        region: Region,
        shader: Shader,
        spec: [u32; crate::vk::SPEC_CONSTANTS],
        push: Vec<u8>,
        grid: Grid,
        binds: Vec<Bind>,
        facts: OpInfo,
    ) {
        let facts = OpInfo {
            label: label.clone(),
            kind: kind.into(),
            ..facts
        };
        self.steps.push(Step {
            label,
            kind,
            region,
            action: Action::Dispatch {
                shader,
                spec,
                push,
                grid,
            },
            binds,
            facts,
        });
    }

    /// Facts of a dispatch that streams its bindings once: reads of `Read`/`ReadWrite` ranges,
    /// writes of `Write`/`ReadWrite` ranges.
    pub(super) fn stream_facts(binds: &[Bind], flops: u64) -> OpInfo {
        let mut f = OpInfo {
            flops,
            ..Default::default()
        };
        for b in binds {
            match b.access {
                Access::Read => f.bytes_read += b.range.bytes,
                Access::Write => f.bytes_written += b.range.bytes,
                Access::ReadWrite => {
                    f.bytes_read += b.range.bytes;
                    f.bytes_written += b.range.bytes;
                }
            }
        }
        f
    }

    #[allow(clippy::too_many_arguments)]
    fn rmsnorm(
        &mut self,
        label: String,
        region: Region,
        x: Range,
        w: Range,
        y: Range,
        n: u32,
        rows: u32,
    ) {
        let binds = vec![read(x), read(w), write(y)];
        let facts = Self::stream_facts(&binds, 4 * rows as u64 * n as u64);
        let push = RmsNormPush {
            n,
            rows,
            eps: self.s.eps,
            pad0: 0,
        }
        .bytes();
        let wg = self.t.wg;
        self.dispatch(
            label,
            "norm",
            region,
            Shader::Rmsnorm,
            spec(&[wg]),
            push,
            Grid::Fixed([rows, 1, 1]),
            binds,
            facts,
        );
    }

    #[allow(clippy::too_many_arguments)]
    fn matvec(
        &mut self,
        label: String,
        region: Region,
        w: Range,
        x: Range,
        y: Range,
        rows: u32,
        cols: u32,
    ) {
        let binds = vec![read(w), read(x), write(y)];
        let facts = Self::stream_facts(&binds, 2 * self.n as u64 * rows as u64 * cols as u64);
        let push = MatvecPush {
            rows,
            cols,
            n_tokens: self.n,
            pad0: 0,
        }
        .bytes();
        // A prompt chunk: the blocked matmul reads each weight once per 4 tokens from memory (a
        // matvec per token would read the weights once per token). cols % 4 == 0 there.
        let (shader, sp, grid) =
            if self.kind == StepKind::Prefill && self.n > 1 && cols.is_multiple_of(4) {
                (
                    Shader::Matmul,
                    spec(&[64]),
                    Grid::Fixed([rows.div_ceil(32), self.n.div_ceil(32), 1]),
                )
            } else {
                let (wg, per) = (self.t.wg, self.t.matvec_rows);
                (
                    Shader::Matvec,
                    spec(&[wg, per]),
                    Grid::Fixed([rows.div_ceil(per), self.n, 1]),
                )
            };
        self.dispatch(
            label, "matvec", region, shader, sp, push, grid, binds, facts,
        );
    }

    #[allow(clippy::too_many_arguments)]
    fn matvec_fused(
        &mut self,
        label: String,
        region: Region,
        w: Range,
        x: Range,
        y: Bind,
        norm: Option<Range>,
        epilogue: u32,
        rows: u32,
        cols: u32,
        role: MvRole,
    ) {
        let norm_w = norm.unwrap_or(r(Buf::FinalNorm, 0, self.s.hidden as u64 * F32));
        let mut binds = vec![read(w), read(x), y];
        if norm.is_some() {
            binds.push(read(norm_w));
        }
        let w_rows = if epilogue == 2 { 2 * rows } else { rows };
        let mut facts = Self::stream_facts(&binds, 2 * w_rows as u64 * cols as u64);
        if norm.is_none() {
            binds.push(read(norm_w));
        }
        let push = MatvecFusedPush {
            rows,
            cols,
            eps: self.s.eps,
            pad0: 0,
        }
        .bytes();
        let (wg, per) = match role {
            MvRole::Qkv => self.t.qkv,
            MvRole::GateUp => self.t.gate_up,
            MvRole::Residual => self.t.residual,
            MvRole::Head => self.t.head,
        };
        // One workgroup row per token row of x.
        let grid = Grid::Fixed([rows.div_ceil(per), self.n, 1]);
        facts.flops += if epilogue == 2 { 4 * rows as u64 } else { 0 };
        facts.flops *= self.n as u64;
        let sp = spec(&[wg, per, norm.is_some() as u32, epilogue]);
        self.dispatch(
            label,
            "matvec",
            region,
            Shader::MatvecFused,
            sp,
            push,
            grid,
            binds,
            facts,
        );
    }

    fn lower_primitive(&mut self, op: Op) {
        let s = *self.s;
        let n = self.n;
        let (h, qd, kvd, hd, inter) = (s.hidden, s.q_dim(), s.kv_dim(), s.head_dim, s.intermediate);
        let wqkv_q = |l| r(Buf::Wqkv(l), 0, qd as u64 * h as u64 * F16);
        let wqkv_k = |l| {
            r(
                Buf::Wqkv(l),
                qd as u64 * h as u64 * F16,
                kvd as u64 * h as u64 * F16,
            )
        };
        let wqkv_v = |l| {
            r(
                Buf::Wqkv(l),
                (qd + kvd) as u64 * h as u64 * F16,
                kvd as u64 * h as u64 * F16,
            )
        };
        match op {
            Op::Embed => self.embed(),
            Op::AttnNorm(l) => {
                let (x, w, y) = (
                    self.act(Buf::X, h),
                    r(Buf::AttnNorm(l), 0, h as u64 * F32),
                    self.act(Buf::H, h),
                );
                self.rmsnorm(format!("L{l}.attn_norm"), Region::Attn(l), x, w, y, h, n);
            }
            Op::QkvProj(l) => {
                let (qo, ko) = if s.qk_norm {
                    (Buf::QRaw, Buf::KRaw)
                } else {
                    (Buf::Q, Buf::K)
                };
                let hx = self.act(Buf::H, h);
                let (q, k, v) = (self.act(qo, qd), self.act(ko, kvd), self.act(Buf::V, kvd));
                self.matvec(
                    format!("L{l}.q_proj"),
                    Region::Attn(l),
                    wqkv_q(l),
                    hx,
                    q,
                    qd,
                    h,
                );
                self.matvec(
                    format!("L{l}.k_proj"),
                    Region::Attn(l),
                    wqkv_k(l),
                    hx,
                    k,
                    kvd,
                    h,
                );
                self.matvec(
                    format!("L{l}.v_proj"),
                    Region::Attn(l),
                    wqkv_v(l),
                    hx,
                    v,
                    kvd,
                    h,
                );
            }
            Op::QkNorm(l) => {
                let (qr, q) = (self.act(Buf::QRaw, qd), self.act(Buf::Q, qd));
                let (kr, k) = (self.act(Buf::KRaw, kvd), self.act(Buf::K, kvd));
                let (qw, kw) = (
                    r(Buf::QNorm(l), 0, hd as u64 * F32),
                    r(Buf::KNorm(l), 0, hd as u64 * F32),
                );
                self.rmsnorm(
                    format!("L{l}.q_norm"),
                    Region::Attn(l),
                    qr,
                    qw,
                    q,
                    hd,
                    n * s.heads,
                );
                self.rmsnorm(
                    format!("L{l}.k_norm"),
                    Region::Attn(l),
                    kr,
                    kw,
                    k,
                    hd,
                    n * s.kv_heads,
                );
            }
            Op::Rope(l) => {
                for (name, buf, heads) in
                    [("q_rope", Buf::Q, s.heads), ("k_rope", Buf::K, s.kv_heads)]
                {
                    let x = self.act(buf, heads * hd);
                    let table = r(Buf::RopeTable, 0, s.max_seq as u64 * hd as u64 * F32);
                    let binds = vec![read(self.params()), rw(x), read(table)];
                    let rot = n as u64 * heads as u64 * hd as u64;
                    let facts = OpInfo {
                        bytes_read: rot * F32 + rot * F32,
                        bytes_written: rot * F32,
                        flops: 3 * rot,
                        ..Default::default()
                    };
                    let push = RopePush {
                        heads,
                        head_dim: hd,
                        pad0: 0,
                        pad1: 0,
                    }
                    .bytes();
                    let grid = Grid::Fixed([(heads * hd / 2).div_ceil(self.t.wg), n, 1]);
                    let sp = spec(&[self.t.wg]);
                    self.dispatch(
                        format!("L{l}.{name}"),
                        "rope",
                        Region::Attn(l),
                        Shader::Rope,
                        sp,
                        push,
                        grid,
                        binds,
                        facts,
                    );
                }
            }
            Op::KvAppend(l) => self.kv_append(l),
            Op::Attention(l) => match self.kind {
                StepKind::Prefill => self.attention_prefill(l),
                StepKind::Decode => self.attention_primitive(l),
            },
            Op::OProj(l) => {
                let (w, x, y) = (
                    r(Buf::Wo(l), 0, h as u64 * qd as u64 * F16),
                    self.act(Buf::Attn, qd),
                    self.act(Buf::Tmp, h),
                );
                self.matvec(format!("L{l}.o_proj"), Region::Attn(l), w, x, y, h, qd);
            }
            Op::AttnResidual(l) => self.add(format!("L{l}.attn_residual"), Region::Attn(l)),
            Op::MlpNorm(l) => {
                let (x, w, y) = (
                    self.act(Buf::X, h),
                    r(Buf::MlpNorm(l), 0, h as u64 * F32),
                    self.act(Buf::H, h),
                );
                self.rmsnorm(format!("L{l}.mlp_norm"), Region::Mlp(l), x, w, y, h, n);
            }
            Op::GateUpProj(l) => {
                let half = inter as u64 * h as u64 * F16;
                let hx = self.act(Buf::H, h);
                let (g, u) = (self.act(Buf::Gate, inter), self.act(Buf::Up, inter));
                self.matvec(
                    format!("L{l}.gate_proj"),
                    Region::Mlp(l),
                    r(Buf::WGateUp(l), 0, half),
                    hx,
                    g,
                    inter,
                    h,
                );
                self.matvec(
                    format!("L{l}.up_proj"),
                    Region::Mlp(l),
                    r(Buf::WGateUp(l), half, half),
                    hx,
                    u,
                    inter,
                    h,
                );
            }
            Op::SiluMul(l) => {
                let total = n * inter;
                let binds = vec![
                    read(self.act(Buf::Gate, inter)),
                    read(self.act(Buf::Up, inter)),
                    write(self.act(Buf::Act, inter)),
                ];
                let facts = Self::stream_facts(&binds, 5 * total as u64);
                let push = SiluMulPush {
                    n: total,
                    ..Default::default()
                }
                .bytes();
                let grid = Grid::Fixed([total.div_ceil(self.t.wg), 1, 1]);
                let sp = spec(&[self.t.wg]);
                self.dispatch(
                    format!("L{l}.silu_mul"),
                    "elementwise",
                    Region::Mlp(l),
                    Shader::SiluMul,
                    sp,
                    push,
                    grid,
                    binds,
                    facts,
                );
            }
            Op::DownProj(l) => {
                let (w, x, y) = (
                    r(Buf::WDown(l), 0, h as u64 * inter as u64 * F16),
                    self.act(Buf::Act, inter),
                    self.act(Buf::Tmp, h),
                );
                self.matvec(format!("L{l}.down_proj"), Region::Mlp(l), w, x, y, h, inter);
            }
            Op::MlpResidual(l) => self.add(format!("L{l}.mlp_residual"), Region::Mlp(l)),
            Op::FinalNorm => {
                // A prompt chunk's last row feeds the head; a decode step's every row does.
                let rows = self.head_rows();
                let first = (n - rows) as u64 * h as u64 * F32;
                let x = r(Buf::X, first, rows as u64 * h as u64 * F32);
                let y = r(Buf::H, 0, rows as u64 * h as u64 * F32);
                self.rmsnorm(
                    "final_norm".into(),
                    Region::Head,
                    x,
                    r(Buf::FinalNorm, 0, h as u64 * F32),
                    y,
                    h,
                    rows,
                );
            }
            Op::LmHead => {
                let rows = self.head_rows();
                let (w, x) = (
                    r(Buf::LmHead, 0, s.vocab as u64 * h as u64 * F16),
                    r(Buf::H, 0, rows as u64 * h as u64 * F32),
                );
                let y = r(Buf::Logits, 0, rows as u64 * s.vocab as u64 * F32);
                let saved = self.n;
                self.n = rows;
                self.matvec("lm_head".into(), Region::Head, w, x, y, s.vocab, h);
                self.n = saved;
            }
            Op::Argmax => self.logits_readback(),
        }
    }

    fn embed(&mut self) {
        let (n, h) = (self.n, self.s.hidden);
        let ids = r(Buf::Ids, 0, n as u64 * 4);
        let table = r(Buf::Embed, 0, self.s.vocab as u64 * h as u64 * F16);
        let out = self.act(Buf::X, h);
        let binds = vec![read(ids), read(table), write(out)];
        let facts = OpInfo {
            bytes_read: ids.bytes + n as u64 * h as u64 * F16,
            bytes_written: out.bytes,
            ..Default::default()
        };
        let push = EmbedPush {
            hidden: h,
            n_tokens: n,
            ..Default::default()
        }
        .bytes();
        let grid = Grid::Fixed([h.div_ceil(self.t.wg), n, 1]);
        let sp = spec(&[self.t.wg]);
        self.dispatch(
            "embed".into(),
            "embed",
            Region::Embed,
            Shader::Embed,
            sp,
            push,
            grid,
            binds,
            facts,
        );
    }

    fn add(&mut self, label: String, region: Region) {
        let total = self.n * self.s.hidden;
        let binds = vec![
            rw(self.act(Buf::X, self.s.hidden)),
            read(self.act(Buf::Tmp, self.s.hidden)),
        ];
        let facts = Self::stream_facts(&binds, total as u64);
        let push = AddPush {
            n: total,
            ..Default::default()
        }
        .bytes();
        let grid = Grid::Fixed([total.div_ceil(self.t.wg), 1, 1]);
        let sp = spec(&[self.t.wg]);
        self.dispatch(
            label,
            "elementwise",
            region,
            Shader::Add,
            sp,
            push,
            grid,
            binds,
            facts,
        );
    }

    pub(super) fn logits_readback(&mut self) {
        let bytes = self.head_rows() as u64 * self.s.vocab as u64 * F32;
        let (src, dst) = (r(Buf::Logits, 0, bytes), r(Buf::LogitsReadback, 0, bytes));
        self.steps.push(Step {
            label: "logits_readback".into(),
            kind: "copy",
            region: Region::Head,
            action: Action::Copy,
            binds: vec![read(src), write(dst)],
            facts: OpInfo {
                label: "logits_readback".into(),
                kind: "copy".into(),
                bytes_read: bytes,
                bytes_written: bytes,
                ..Default::default()
            },
        });
        self.host_read(dst);
    }

    pub(super) fn host_read(&mut self, range: Range) {
        self.steps.push(Step {
            label: "host_read".into(),
            kind: "copy",
            region: Region::Head,
            action: Action::HostRead,
            binds: vec![read(range)],
            facts: OpInfo::default(),
        });
    }

    /// Fused lowering of one decode token: matches runs of ops and emits one kernel per run.
    pub(super) fn lower_fused(&mut self, ops: &[Op], logits_readback: bool) {
        let s = *self.s;
        let (h, qd, inter) = (s.hidden, s.q_dim(), s.intermediate);
        let mut i = 0;
        while i < ops.len() {
            let rest = &ops[i..];
            match rest {
                [Op::Embed, ..] => {
                    self.embed();
                    i += 1;
                }
                // RMSNorm folded into the stacked QKV matvec.
                [Op::AttnNorm(l), Op::QkvProj(_), ..] => {
                    let l = *l;
                    let w = r(Buf::Wqkv(l), 0, s.qkv_rows() as u64 * h as u64 * F16);
                    let y = write(self.act(Buf::Qkv, s.qkv_rows()));
                    let norm = r(Buf::AttnNorm(l), 0, h as u64 * F32);
                    self.matvec_fused(
                        format!("L{l}.qkv_proj"),
                        Region::Attn(l),
                        w,
                        self.act(Buf::X, h),
                        y,
                        Some(norm),
                        0,
                        s.qkv_rows(),
                        h,
                        MvRole::Qkv,
                    );
                    i += 2;
                }
                // q/k norm + RoPE + KV-cache write in one kernel.
                _ if matches!(rest.first(), Some(Op::QkNorm(_) | Op::Rope(_))) => {
                    let l = match rest[0] {
                        Op::QkNorm(l) | Op::Rope(l) => l,
                        _ => unreachable!("guarded by matches! above"),
                    };
                    let consumed = rest
                        .iter()
                        .take_while(|o| matches!(o, Op::QkNorm(_) | Op::Rope(_) | Op::KvAppend(_)))
                        .count();
                    self.qk_norm_rope_kv(l);
                    i += consumed;
                }
                // Split-K attention over the cache in place (after a gather when paged-gather),
                // then the merge.
                [Op::Attention(l), ..] => {
                    self.attention_split(*l);
                    i += 1;
                }
                // o-projection with the residual add as its epilogue.
                [Op::OProj(l), Op::AttnResidual(_), ..] => {
                    let l = *l;
                    let w = r(Buf::Wo(l), 0, h as u64 * qd as u64 * F16);
                    let x = rw(self.act(Buf::X, h));
                    self.matvec_fused(
                        format!("L{l}.o_proj_residual"),
                        Region::Attn(l),
                        w,
                        self.act(Buf::Attn, qd),
                        x,
                        None,
                        1,
                        h,
                        qd,
                        MvRole::Residual,
                    );
                    i += 2;
                }
                // RMSNorm + gate/up + SiLU*up in one matvec over the stacked weights.
                [Op::MlpNorm(l), Op::GateUpProj(_), Op::SiluMul(_), ..] => {
                    let l = *l;
                    let w = r(Buf::WGateUp(l), 0, 2 * inter as u64 * h as u64 * F16);
                    let y = write(self.act(Buf::Act, inter));
                    let norm = r(Buf::MlpNorm(l), 0, h as u64 * F32);
                    self.matvec_fused(
                        format!("L{l}.gate_up_silu"),
                        Region::Mlp(l),
                        w,
                        self.act(Buf::X, h),
                        y,
                        Some(norm),
                        2,
                        inter,
                        h,
                        MvRole::GateUp,
                    );
                    i += 3;
                }
                // down-projection with the residual add as its epilogue.
                [Op::DownProj(l), Op::MlpResidual(_), ..] => {
                    let l = *l;
                    let w = r(Buf::WDown(l), 0, h as u64 * inter as u64 * F16);
                    let x = rw(self.act(Buf::X, h));
                    self.matvec_fused(
                        format!("L{l}.down_proj_residual"),
                        Region::Mlp(l),
                        w,
                        self.act(Buf::Act, inter),
                        x,
                        None,
                        1,
                        h,
                        inter,
                        MvRole::Residual,
                    );
                    i += 2;
                }
                // Final norm folded into the lm_head matvec, then the GPU argmax.
                [Op::FinalNorm, Op::LmHead, Op::Argmax, ..] => {
                    let w = r(Buf::LmHead, 0, s.vocab as u64 * h as u64 * F16);
                    let logits = self.act(Buf::Logits, s.vocab);
                    let norm = r(Buf::FinalNorm, 0, h as u64 * F32);
                    self.matvec_fused(
                        "lm_head".into(),
                        Region::Head,
                        w,
                        self.act(Buf::X, h),
                        write(logits),
                        Some(norm),
                        0,
                        s.vocab,
                        h,
                        MvRole::Head,
                    );
                    let out = r(Buf::ArgmaxOut, 0, 8 * self.n as u64);
                    let binds = vec![read(logits), write(out)];
                    let facts = Self::stream_facts(&binds, self.n as u64 * s.vocab as u64);
                    let push = ArgmaxPush {
                        n: s.vocab,
                        ..Default::default()
                    }
                    .bytes();
                    let sp = spec(&[256]);
                    self.dispatch(
                        "argmax".into(),
                        "argmax",
                        Region::Head,
                        Shader::Argmax,
                        sp,
                        push,
                        Grid::Fixed([self.n, 1, 1]),
                        binds,
                        facts,
                    );
                    self.host_read(r(Buf::ArgmaxOut, 0, 4 * self.n as u64));
                    if logits_readback {
                        self.logits_readback();
                    }
                    i += 3;
                }
                _ => {
                    // No fused pattern starts here: fall back to the primitive lowering of this op.
                    self.lower_primitive(rest[0]);
                    i += 1;
                }
            }
        }
    }
}

/// Lowers one forward step over `n_tokens` rows of kind `kind`. Fused kernels serve decode steps
/// (one row per sequence); a prompt chunk always uses the batched primitive kernels with the
/// tiled prompt attention.
pub fn lower(
    s: &Shape,
    t: &Tuning,
    kv: &KvPlan,
    kernels: Kernels,
    n_tokens: u32,
    kind: StepKind,
    logits_readback: bool,
) -> Vec<Step> {
    let ops = describe(s);
    let mut lw = Lower {
        s,
        t,
        kv,
        n: n_tokens.max(1),
        kind,
        steps: Vec::new(),
    };
    if kernels == Kernels::Fused && kind == StepKind::Decode {
        lw.lower_fused(&ops, logits_readback);
    } else if kernels == Kernels::Persistent && kind == StepKind::Decode {
        lw.lower_persistent(&ops, logits_readback);
    } else {
        for op in ops {
            lw.lower_primitive(op);
        }
    }
    lw.steps
}

/// Adds the byte and flop counts of `from` (fixed and per KV position) into `into`: an op made
/// of several dispatches, or one dispatch doing several ops' work, counts their sum.
pub fn add_facts(into: &mut OpInfo, from: &OpInfo) {
    into.bytes_read += from.bytes_read;
    into.bytes_written += from.bytes_written;
    into.flops += from.flops;
    into.bytes_read_per_kv += from.bytes_read_per_kv;
    into.bytes_written_per_kv += from.bytes_written_per_kv;
    into.flops_per_kv += from.flops_per_kv;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> Shape {
        Shape {
            layers: 4,
            hidden: 256,
            heads: 8,
            kv_heads: 2,
            head_dim: 64,
            intermediate: 768,
            vocab: 4096,
            eps: 1e-6,
            qk_norm: true,
            max_seq: 512,
        }
    }

    fn plan(s: &Shape) -> KvPlan {
        let cfg = crate::kv::KvConfig::default();
        KvPlan {
            geo: KvGeometry::new(&cfg, s.max_seq),
            scratch: None,
            window: 0,
            max_rows: cfg.prefill_chunk,
        }
    }

    #[test]
    fn primitive_lowering_has_one_step_per_primitive() {
        let s = tiny();
        let t = Tuning::for_device(8, 8, s.max_seq, s.kv_heads);
        let steps = lower(
            &s,
            &t,
            &plan(&s),
            Kernels::Primitive,
            1,
            StepKind::Decode,
            false,
        );
        let dispatches = steps
            .iter()
            .filter(|s| matches!(s.action, Action::Dispatch { .. }))
            .count();
        let copies = steps
            .iter()
            .filter(|s| matches!(s.action, Action::Copy))
            .count();
        // embed + per layer (norm, q, k, v, q_norm, k_norm, 2 rope, 2 KV appends, scores,
        // softmax, wsum, o, add, norm, gate, up, silu, down, add) + final norm + lm_head
        assert_eq!(dispatches, 1 + 4 * 21 + 2);
        // the logits readback
        assert_eq!(copies, 1);
    }

    #[test]
    fn fused_lowering_has_seven_dispatches_per_layer() {
        let s = tiny();
        let t = Tuning::for_device(8, 8, s.max_seq, s.kv_heads);
        let steps = lower(
            &s,
            &t,
            &plan(&s),
            Kernels::Fused,
            1,
            StepKind::Decode,
            false,
        );
        let dispatches = steps
            .iter()
            .filter(|s| matches!(s.action, Action::Dispatch { .. }))
            .count();
        assert_eq!(dispatches, 1 + 4 * 7 + 2);
        assert!(steps.iter().all(|s| !matches!(s.action, Action::Copy)));
        let labels: std::collections::HashSet<_> = steps
            .iter()
            .filter(|s| s.kind != "copy")
            .map(|s| &s.label)
            .collect();
        assert_eq!(labels.len(), 1 + 4 * 7 + 2, "labels are unique");
    }

    #[test]
    fn weight_bytes_of_qwen3_06b_shape() {
        let s = Shape {
            layers: 28,
            hidden: 1024,
            heads: 16,
            kv_heads: 8,
            head_dim: 128,
            intermediate: 3072,
            vocab: 151936,
            eps: 1e-6,
            qk_norm: true,
            max_seq: 1024,
        };
        // REFERENCES.md: ~0.44 B layer parameters + 0.156 B tied embedding, ~1.19 GB in f16.
        let gb = s.weight_bytes_per_token() as f64 / 1e9;
        assert!((1.1..1.3).contains(&gb), "{gb} GB");
    }
}
