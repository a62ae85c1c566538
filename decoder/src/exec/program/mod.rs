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
use crate::model::{WeightType, Weights};
use crate::shaders::Shader;
use crate::shaders::spec as id;

mod lower_fused;
mod lower_primitive;
pub mod tuning;

pub use tuning::{Tuning, TuningOverrides};

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

/// The storage type of one layer's matrices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LayerTypes {
    pub q: WeightType,
    pub k: WeightType,
    pub v: WeightType,
    pub o: WeightType,
    pub gate: WeightType,
    pub up: WeightType,
    pub down: WeightType,
}

impl LayerTypes {
    pub const F16: LayerTypes = LayerTypes {
        q: WeightType::F16,
        k: WeightType::F16,
        v: WeightType::F16,
        o: WeightType::F16,
        gate: WeightType::F16,
        up: WeightType::F16,
        down: WeightType::F16,
    };
}

/// The storage type of every matrix (each tensor keeps its own, as a GGUF file gives it): part of
/// the model description every lowering reads, beside [`Shape`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WeightTypes {
    pub embed: WeightType,
    /// The output projection's (the embedding's when tied).
    pub lm_head: WeightType,
    pub layers: Vec<LayerTypes>,
}

impl WeightTypes {
    /// Every matrix f16, for `layers` layers.
    pub fn f16(layers: u32) -> Self {
        Self {
            embed: WeightType::F16,
            lm_head: WeightType::F16,
            layers: vec![LayerTypes::F16; layers as usize],
        }
    }

    /// The types of `w`'s matrices.
    pub fn of(w: &Weights) -> Self {
        Self {
            embed: w.embed_tokens.wtype(),
            lm_head: w.lm_head().wtype(),
            layers: w
                .layers
                .iter()
                .map(|l| LayerTypes {
                    q: l.q_proj.wtype(),
                    k: l.k_proj.wtype(),
                    v: l.v_proj.wtype(),
                    o: l.o_proj.wtype(),
                    gate: l.gate_proj.wtype(),
                    up: l.up_proj.wtype(),
                    down: l.down_proj.wtype(),
                })
                .collect(),
        }
    }

    /// Layer `l`'s types (f16 past the end).
    pub fn layer(&self, l: u32) -> LayerTypes {
        self.layers
            .get(l as usize)
            .copied()
            .unwrap_or(LayerTypes::F16)
    }

    /// Every distinct type, sorted (`[F16]` for an f16 model).
    pub fn distinct(&self) -> Vec<WeightType> {
        let mut v = vec![self.embed, self.lm_head];
        for l in &self.layers {
            v.extend([l.q, l.k, l.v, l.o, l.gate, l.up, l.down]);
        }
        v.sort();
        v.dedup();
        v
    }

    /// The types joined by `+` (`f16`, `q4_k+q6_k`), for messages and traces.
    pub fn describe(&self) -> String {
        let names: Vec<&str> = self.distinct().iter().map(|t| t.name()).collect();
        names.join("+")
    }

    /// Every matrix f16.
    pub fn all_f16(&self) -> bool {
        self.distinct() == [WeightType::F16]
    }
}

/// Bytes of a `rows x cols` matrix of type `t`.
pub fn matrix_bytes(t: WeightType, rows: u32, cols: u32) -> u64 {
    rows as u64 * t.row_bytes(cols as u64)
}

/// Bytes of a weight buffer holding `bytes` of matrices: rounded up to whole words, since the
/// kernels read GGUF blocks as 4-byte words.
pub fn whole_words(bytes: u64) -> u64 {
    bytes.div_ceil(4) * 4
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
    /// Bytes of weights one decode token reads: every matrix once in its storage type (blocks
    /// with their scales), the norms (f32), one embedding row.
    pub fn weight_bytes_per_token(&self, w: &WeightTypes) -> u64 {
        let (h, i, q, kv) = (self.hidden, self.intermediate, self.q_dim(), self.kv_dim());
        let norms = 4
            * (2 * h as u64
                + if self.qk_norm {
                    2 * self.head_dim as u64
                } else {
                    0
                });
        let mut total = 0;
        for l in 0..self.layers {
            let t = w.layer(l);
            total += matrix_bytes(t.q, q, h)
                + matrix_bytes(t.k, kv, h)
                + matrix_bytes(t.v, kv, h)
                + matrix_bytes(t.o, h, q)
                + matrix_bytes(t.gate, i, h)
                + matrix_bytes(t.up, i, h)
                + matrix_bytes(t.down, h, i)
                + norms;
        }
        total + matrix_bytes(w.lm_head, self.vocab, h) + 4 * h as u64 + matrix_bytes(w.embed, 1, h)
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
    pub(super) w: &'a WeightTypes,
    pub(super) t: &'a Tuning,
    pub(super) kv: &'a KvPlan,
    pub(super) n: u32,
    pub(super) kind: StepKind,
    pub(super) steps: Vec<Step>,
}

pub(super) const F32: u64 = 4;

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

/// Specialization constants by id (`id::NAME`: `crate::shaders::spec`, which build.rs generates
/// from the shaders' declarations); the others 0.
pub(super) fn spec(values: &[(usize, u32)]) -> [u32; crate::vk::SPEC_CONSTANTS] {
    let mut s = [0u32; crate::vk::SPEC_CONSTANTS];
    for &(id, v) in values {
        s[id] = v;
    }
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
}

/// Lowers one forward step over `n_tokens` rows of kind `kind`. Fused kernels serve decode steps
/// (one row per sequence); a prompt chunk always uses the batched primitive kernels with the
/// tiled prompt attention.
#[allow(clippy::too_many_arguments)]
pub fn lower(
    s: &Shape,
    w: &WeightTypes,
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
        w,
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
            &WeightTypes::f16(s.layers),
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
            &WeightTypes::f16(s.layers),
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

    /// Q8_0 everywhere, Q6_K for layer 1's v_proj and down_proj (a mixed stack).
    fn quantized(s: &Shape) -> WeightTypes {
        let mut w = WeightTypes::f16(s.layers);
        w.embed = WeightType::Q8_0;
        w.lm_head = WeightType::Q8_0;
        for (l, t) in w.layers.iter_mut().enumerate() {
            let big = if l == 1 {
                WeightType::Q6K
            } else {
                WeightType::Q8_0
            };
            *t = LayerTypes {
                q: WeightType::Q8_0,
                k: WeightType::Q8_0,
                v: big,
                o: WeightType::Q8_0,
                gate: WeightType::Q8_0,
                up: WeightType::Q8_0,
                down: big,
            };
        }
        w
    }

    /// Every lowering reads each matrix once per decode token, in its storage type: the weight
    /// ranges its steps bind add up to `weight_bytes_per_token` (less the norms and the
    /// embedding row, which the embed step reads instead of its whole table).
    #[test]
    fn lowerings_read_the_quantized_bytes() {
        let s = tiny();
        let t = Tuning::for_device(8, 8, s.max_seq, s.kv_heads);
        let w = quantized(&s);
        let is_matrix = |b: Buf| {
            matches!(
                b,
                Buf::Wqkv(_) | Buf::Wo(_) | Buf::WGateUp(_) | Buf::WDown(_) | Buf::LmHead
            )
        };
        let (h, v) = (s.hidden, s.vocab);
        let norms = s.layers as u64 * 4 * (2 * h as u64 + 2 * s.head_dim as u64) + 4 * h as u64;
        let want = s.weight_bytes_per_token(&w) - norms - matrix_bytes(w.embed, 1, h);
        // The lm_head of a tied model is the embedding table.
        assert_eq!(
            want,
            (0..s.layers)
                .map(|l| {
                    let x = w.layer(l);
                    matrix_bytes(x.q, s.q_dim(), h)
                        + matrix_bytes(x.k, s.kv_dim(), h)
                        + matrix_bytes(x.v, s.kv_dim(), h)
                        + matrix_bytes(x.o, h, s.q_dim())
                        + matrix_bytes(x.gate, s.intermediate, h)
                        + matrix_bytes(x.up, s.intermediate, h)
                        + matrix_bytes(x.down, h, s.intermediate)
                })
                .sum::<u64>()
                + matrix_bytes(WeightType::Q8_0, v, h)
        );
        for kernels in [Kernels::Primitive, Kernels::Fused] {
            let steps = lower(&s, &w, &t, &plan(&s), kernels, 1, StepKind::Decode, false);
            let read: u64 = steps
                .iter()
                .flat_map(|st| &st.binds)
                .filter(|b| is_matrix(b.range.buf))
                .map(|b| b.range.bytes)
                .sum();
            assert_eq!(read, want, "{kernels:?}");
            // The stacked [q; k; v] of layer 1 is Q8_0 then Q6_K for v.
            let q8 = matrix_bytes(WeightType::Q8_0, s.q_dim() + s.kv_dim(), h);
            let v6 = matrix_bytes(WeightType::Q6K, s.kv_dim(), h);
            let qkv: Vec<Range> = steps
                .iter()
                .flat_map(|st| &st.binds)
                .map(|b| b.range)
                .filter(|r| r.buf == Buf::Wqkv(1))
                .collect();
            match kernels {
                Kernels::Primitive => assert_eq!(qkv.last(), Some(&r(Buf::Wqkv(1), q8, v6))),
                _ => assert_eq!(qkv, [r(Buf::Wqkv(1), 0, q8 + v6)]),
            }
        }
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
        let gb = s.weight_bytes_per_token(&WeightTypes::f16(s.layers)) as f64 / 1e9;
        assert!((1.1..1.3).contains(&gb), "{gb} GB");
    }
}
