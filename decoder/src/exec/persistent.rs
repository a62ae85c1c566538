//! The persistent token kernel (`--kernels persistent`): how a decode step is lowered to one
//! dispatch of `shaders/persistent.comp`, and the sizes the engine and the kernel share.
//!
//! The kernel runs every phase of every layer in one dispatch, its workgroups meeting at
//! device-scope barriers or waiting for each other's tagged words, so the grid must be resident at
//! once. The engine establishes that with a residency probe (the same pipeline with `probe = 1`)
//! before building the decode program (`engine/residency.rs`), and every wait in the kernel is
//! bounded, so a grid that loses forward progress fails the step with an error instead of hanging.

use profiler::trace::OpInfo;

use super::kernels::PersistentPush;
use super::program::{
    Action, Buf, F32, Grid, Lower, Op, Range, Region, Shape, Tuning, WeightTypes, add_facts,
    matrix_bytes, r, read, rw, spec, whole_words, write,
};
use crate::model::WeightType;
use crate::shaders::Shader;
use crate::shaders::spec as id;

/// Phases per layer (A, C, MO, UD of `shaders/persistent.glsl`), each ending at a hand-off: a
/// grid barrier, or tagged words its successor polls.
pub const PHASES_PER_LAYER: u32 = 4;

/// The kernel's phases in clock order: their labels and op kinds. Phase k runs from clock k to
/// clock k + 1 (`clocks(layers)` clocks in all).
pub fn phases(layers: u32) -> Vec<(String, &'static str)> {
    let mut out = Vec::with_capacity((layers * PHASES_PER_LAYER + 1) as usize);
    for l in 0..layers {
        for (name, kind) in [
            ("qkv_proj", "matvec"),
            ("attention", "attention"),
            ("attn_merge_o_proj", "attention"),
            ("mlp", "matvec"),
        ] {
            out.push((format!("token/L{l}.{name}"), kind));
        }
    }
    out.push(("token/lm_head_argmax".into(), "matvec"));
    out
}

/// Which wait of a step ran out and what that says, from the kernel's status word where it says
/// so (bits 0-1 are 1): bit 2 tells a poll of tagged words from a grid barrier, bits 4-15 the
/// phase clock the wait comes before (an index into [`phases`]; 0 is the residency probe's
/// barriers) and bits 16-31 the workgroup whose wait it was (`fail_step` in
/// shaders/persistent.glsl), on a grid of `groups` workgroups.
pub fn lost_wait(status: u32, layers: u32, groups: u32) -> String {
    let site = (status >> 4) & 0xfff;
    let group = status >> 16;
    let phase = phases(layers)
        .get(site as usize)
        .map(|(label, _)| label.trim_start_matches("token/").to_string())
        .unwrap_or_else(|| format!("phase {site}"));
    let resident = format!("not all {groups} workgroups of its grid were resident");
    let poll = status & 4 != 0;
    let what = match (poll, site) {
        (true, _) => format!("{phase}'s poll for the values it reads from other workgroups"),
        (false, 0) => "a grid barrier of the residency probe".to_string(),
        (false, _) => format!("the grid barrier before {phase}"),
    };
    // A poll can also wait for a value that no workgroup writes with the step's tag, or run out
    // on words that carry it, as the attention's did on the NVIDIA driver while its subgroup
    // voted in the loop.
    let why = if poll {
        format!(
            "{resident}, a value it reads was never written with the step's tag, or the compiled \
             poll does not see what it reads (docs/persistent-kernel.md, \"Tagged words in wide \
             workgroups\")"
        )
    } else {
        format!("{resident} (is another program using the device?)")
    };
    format!("workgroup {group}'s wait at {what} ran out: {why}")
}

/// The layer whose attention phase's poll a lost-wait status word names (its bit 2 set and its
/// phase clock, bits 4-15, that attention's): the poll that reads the QKV phase's tagged words.
pub fn lost_attention_poll(status: u32, layers: u32) -> Option<u32> {
    let site = (status >> 4) & 0xfff;
    let layer = site / PHASES_PER_LAYER;
    (status & 4 != 0 && layer < layers && site == PHASES_PER_LAYER * layer + 1).then_some(layer)
}

/// What the QKV words a lost poll of layer `layer`'s attention read (`words`, the step's tagged
/// words, read back after the step) say about their writers: a word written in this step at that
/// layer or a later one carries `ll_tag` of shaders/persistent.glsl, the step's epoch x layers +
/// the layer + 1 (never 0), and any other tag is an earlier step's.
pub fn polled_words(words: &[u64], epoch: u32, layers: u32, layer: u32, qkv_rows: u32) -> String {
    let want = match epoch.wrapping_mul(layers).wrapping_add(layer + 1) {
        0 => 1,
        t => t,
    };
    let later = layers.saturating_sub(layer);
    let stale = |w: &u64| ((w >> 32) as u32).wrapping_sub(want) >= later;
    match words.iter().position(stale) {
        None => format!(
            "read back after the step, all {} of its QKV words carry the step's tag: they were \
             written, and the poll ran out reading them",
            words.len()
        ),
        Some(i) => {
            let row = qkv_rows.max(1) as usize;
            format!(
                "read back after the step, {} of its {} QKV words lack the step's tag (the first: row \
                 {}'s element {} of {}): their writers had not written them",
                words.iter().filter(|w| stale(w)).count(),
                words.len(),
                i / row,
                i % row,
                row
            )
        }
    }
}

/// Clocks the kernel writes per step: the start, one per barrier, the end.
pub fn clocks(layers: u32) -> u32 {
    layers * PHASES_PER_LAYER + 2
}

/// The phase (index into [`phases`]) that does the work of a fused decode dispatch, by its
/// label: the embedding row is read by layer 0's QKV phase, q/k norm, RoPE and the cache write
/// by the attention phase, the argmax by the head.
pub fn phase_of(label: &str, layers: u32) -> Option<usize> {
    let per = PHASES_PER_LAYER as usize;
    match label {
        "embed" => return Some(0),
        "lm_head" | "argmax" => return Some(layers as usize * per),
        _ => {}
    }
    let (layer, name) = label.strip_prefix('L')?.split_once('.')?;
    let l: usize = layer.parse().ok()?;
    let k = match name {
        "qkv_proj" => 0,
        "qk_norm_rope_kv" => 1,
        n if n.starts_with("attn_merge") => 2,
        n if n.starts_with("attn_split") => 1,
        "o_proj_residual" => 2,
        "gate_up_silu" | "down_proj_residual" => 3,
        _ => return None,
    };
    (l < layers as usize).then_some(l * per + k)
}

/// The facts of each phase (labels and kinds of [`phases`]): the sums of the fused decode
/// dispatches whose work it does (`fused`: the fused lowering of the same step).
pub fn phase_facts(fused: &[super::program::Step], layers: u32) -> Vec<OpInfo> {
    let mut out: Vec<OpInfo> = phases(layers)
        .into_iter()
        .map(|(label, kind)| OpInfo {
            label,
            kind: kind.into(),
            ..Default::default()
        })
        .collect();
    for st in fused
        .iter()
        .filter(|st| matches!(st.action, Action::Dispatch { .. }))
    {
        if let Some(f) = phase_of(&st.label, layers).and_then(|k| out.get_mut(k)) {
            add_facts(f, &st.facts);
        }
    }
    out
}

/// Ticks from the first phase clock to each clock, from the kernel's 64-bit clock values; `None`
/// when they do not advance. A driver may read the clock's two 32-bit words apart (lavapipe does):
/// across a wrap of the low word the high word then lags or leads, and the values step back or
/// jump by 2^32. So where the values are not in order, every phase is timed by its low words alone,
/// wrapping (a phase is far shorter than 2^32 ticks); in order, the full values count (a phase may
/// then be as long as it likes).
pub fn clock_offsets(c: &[u64]) -> Option<Vec<u64>> {
    let in_order = c.windows(2).all(|w| w[1] >= w[0]);
    let mut at = 0u64;
    let mut out = Vec::with_capacity(c.len());
    for (k, &v) in c.iter().enumerate() {
        if k > 0 {
            let prev = c[k - 1];
            at += if in_order {
                v - prev
            } else {
                (v as u32).wrapping_sub(prev as u32) as u64
            };
        }
        out.push(at);
    }
    (at > 0).then_some(out)
}

/// Per-layer entries of the kernel's pointer table (`ptrs`): the addresses of
/// [`layer_ptr_bufs`], then the layer's weight types ([`packed_types`]).
pub const PTRS_PER_LAYER: usize = 12;

/// Bytes of the pointer table: the layers' entries, then the embedding's and the lm_head's
/// addresses.
pub fn ptr_table_bytes(layers: u32) -> u64 {
    8 * (layers as u64 * PTRS_PER_LAYER as u64 + 2)
}

/// The per-layer buffers whose device addresses the pointer table holds, in the kernel's order
/// (the last entry, the layer's weight types, is not an address). The transposed W_down exists
/// for f16 weights only: none where the kernel reads `blocks` ([`reads_blocks`]).
pub fn layer_ptr_bufs(l: u32, blocks: bool) -> [Option<Buf>; PTRS_PER_LAYER - 1] {
    [
        Some(Buf::AttnNorm(l)),
        Some(Buf::Wqkv(l)),
        None, // q_norm: filled where the model has it (Qwen3)
        None, // k_norm
        Some(Buf::Wo(l)),
        Some(Buf::MlpNorm(l)),
        Some(Buf::WGateUp(l)),
        Some(Buf::WDown(l)),
        Some(Buf::KCache(l)),
        Some(Buf::VCache(l)),
        (!blocks).then_some(Buf::WDownT(l)),
    ]
}

/// Whether the kernel reads weights in GGUF blocks (its `WQ`): any matrix that is not f16. It then
/// reads every matrix in its own type and W_down itself, with no transposed copy.
pub fn reads_blocks(w: &WeightTypes) -> bool {
    !w.all_f16()
}

/// The kernel's `WT_MASK`: a bit per ggml type id of `w`'s matrices, so that the kernel compiles
/// the loads and decode of those types only.
pub fn type_mask(w: &WeightTypes) -> u32 {
    w.distinct()
        .iter()
        .fold(0, |acc, t| acc | 1u32 << t.spec_id())
}

/// Layer `l`'s weight types as the kernel's `layer_wt` reads them: a byte each (ggml ids), q, k,
/// v and o in the low word, gate, up and down in the high one.
pub fn packed_types(w: &WeightTypes, l: u32) -> u64 {
    let t = w.layer(l);
    [t.q, t.k, t.v, t.o, t.gate, t.up, t.down]
        .iter()
        .enumerate()
        .fold(0u64, |acc, (i, t)| acc | (t.spec_id() as u64) << (8 * i))
}

/// Subgroups per attention unit of the kernel (its `GS`), for steps of `rows` rows: the unit's
/// query heads (`GQ` per KV head) each get a subgroup of their own where the grid has one for
/// every query head of every unit at the KV capacity (`max_seq`) with one block of positions per
/// unit, the split plan the kernel uses at short contexts either way. Else 1: the kernel's split
/// plan aims for `GS` times fewer splits, and longer chains of blocks per unit cost more than the
/// heads' sharing saves (measured: docs/persistent-kernel.md). The tuning key
/// `persistent_head_groups` overrides the rule (1: never, 2: always); a query-head count that does
/// not divide the workgroup's subgroups keeps 1.
pub fn head_groups(s: &Shape, t: &Tuning, rows: u32) -> u32 {
    let gq = (s.heads / s.kv_heads.max(1)).max(1);
    let sg = t.subgroup.max(1);
    let nsg = (t.persistent_wg / sg).max(1);
    if gq == 1 || !nsg.is_multiple_of(gq) || t.persistent_head_groups == 1 {
        return 1;
    }
    if t.persistent_head_groups == 2 {
        return gq;
    }
    let units = (rows.max(1) * s.kv_heads).max(1);
    let nsub = t.persistent_groups.max(1) * nsg;
    let want = if t.persistent_splits > 0 {
        t.persistent_splits
    } else {
        (nsub / gq / units).max(1)
    };
    let blocks = s.max_seq.div_ceil(sg);
    if blocks <= want { gq } else { 1 }
}

/// Dims of a head that one unit of the kernel's merge + o-projection phase takes (`OC`).
pub const MERGE_DIMS: u32 = 16;

/// Floats ahead of a partial's sums in the kernel's `partial` buffer: m, l and two unused, so that
/// the sums are whole vec4s.
const PARTIAL_LEAD: u64 = 4;

/// Rows per token of the kernel's `x` buffer: the residual rows R0 and R1 and the o-projection's
/// sums D0 and D1 (layer l adds to D[l % 2] while clearing the other), up to
/// [`MAX_RESIDUAL_COPIES`] copies of each.
pub const RESIDUAL_ROWS: u32 = 4 * MAX_RESIDUAL_COPIES;

/// The most copies of each residual row the kernel's float atomics may spread over (its `RC`,
/// the `persistent_res_copies` tuning).
pub const MAX_RESIDUAL_COPIES: u32 = 8;

/// Bytes of one element of the kernel's `qkv` and `partial` buffers: a tagged word (the value's
/// 32 bits and the tag of the step and layer that wrote it, one 64-bit atomic).
pub const TAGGED_WORD: u64 = 8;

/// Bytes of the kernel's `partial` buffer for `rows` rows: (m, l, 2 unused, hd sums) per split of
/// each (row, query head), as tagged words.
pub fn partial_bytes(s: &Shape, subgroup: u32, rows: u64) -> u64 {
    rows * s.heads as u64
        * max_splits(s, subgroup) as u64
        * (s.head_dim as u64 + PARTIAL_LEAD)
        * TAGGED_WORD
}

/// Bytes of the kernel's `qkv` buffer for `rows` rows, as tagged words.
pub fn qkv_bytes(s: &Shape, rows: u64) -> u64 {
    rows * s.qkv_rows() as u64 * TAGGED_WORD
}

/// Splits per (row, head) the kernel may write: one per block of `subgroup` positions.
pub fn max_splits(s: &Shape, subgroup: u32) -> u32 {
    s.max_seq.div_ceil(subgroup.max(1)).max(1)
}

/// vec4s of a head each lane holds.
pub fn vec4s_per_lane(s: &Shape, subgroup: u32) -> u32 {
    (s.head_dim / 4).div_ceil(subgroup.max(1)).max(1)
}

/// 16-byte chunks of one K row (a KV head's `head_dim` elements of `elem_bytes` each): lane j
/// of the attention phase loads position j's row whole.
pub fn k_row_chunks(s: &Shape, elem_bytes: u32) -> u32 {
    (s.head_dim * elem_bytes / 16).max(1)
}

/// Intermediate channels the down-projection reads at once (the shader's DE): the staging holds
/// that many zeros after a workgroup's last activation, so the loads need no guards.
const DOWN_CHANNELS: u32 = 24;

/// vec4s of the kernel's shared staging: a staged input row with the MLP's activations of one
/// workgroup after it (at most every channel, on a grid of one, then DOWN_CHANNELS zeros), the
/// merge's per-subgroup sums, and the attention's per-subgroup query heads with a block's softmax
/// weights.
pub fn staging_vec4s(s: &Shape, t: &Tuning) -> u32 {
    let sg = t.subgroup.max(1);
    let nsg = (t.persistent_wg / sg).max(1);
    let gq = (s.heads / s.kv_heads.max(1)).max(1);
    let attention = nsg * gq * (s.head_dim + 4 * sg.div_ceil(4));
    [
        s.hidden + s.intermediate + nsg + DOWN_CHANNELS,
        nsg * MERGE_DIMS,
        attention,
    ]
    .into_iter()
    .max()
    .unwrap_or(4)
    .div_ceil(4)
}

/// Bytes of the kernel's K and V staging (`kvs`): per staged unit, a block of `subgroup` K rows
/// padded by one 16-byte chunk each and as many V rows, with `kv_bytes` bytes per element; and
/// one spare chunk.
pub fn kv_stage_bytes(s: &Shape, t: &Tuning, kv_bytes: u32) -> u64 {
    let kc = k_row_chunks(s, kv_bytes) as u64;
    t.persistent_kv_stage as u64 * t.subgroup.max(1) as u64 * (2 * kc + 1) * 16 + 16
}

/// Bytes of shared memory the kernel declares for steps of up to `rows` rows with cache
/// elements of `kv_bytes` bytes (staging, two reduction arrays, a flag, each row's parameters
/// and the K and V staging).
pub fn shared_bytes(s: &Shape, t: &Tuning, rows: u32, kv_bytes: u32) -> u64 {
    staging_vec4s(s, t) as u64 * 16
        + t.persistent_wg as u64 * 8
        + 16
        + 16 * rows.max(1) as u64
        + kv_stage_bytes(s, t, kv_bytes)
}

/// The K and V staging's units (`t.persistent_kv_stage`, at most the workgroup's subgroups),
/// lowered while the kernel's shared memory is more than `shared_limit` bytes: the staging is
/// the first thing to give up, before the workgroup shrinks.
pub fn fit_kv_stage(s: &Shape, t: &Tuning, rows: u32, kv_bytes: u32, shared_limit: u32) -> u32 {
    let mut t = *t;
    t.persistent_kv_stage = t
        .persistent_kv_stage
        .min(t.persistent_wg / t.subgroup.max(1));
    while t.persistent_kv_stage > 0 && shared_bytes(s, &t, rows, kv_bytes) > shared_limit as u64 {
        t.persistent_kv_stage -= 1;
    }
    t.persistent_kv_stage
}

/// The workgroup size the kernel runs at for steps of up to `rows` rows: `t.persistent_wg`,
/// halved (not below one subgroup) while its shared memory is more than `shared_limit` bytes.
/// The attention keeps each subgroup's query heads there, so models with many query heads per
/// KV head need fewer subgroups per workgroup on devices with little shared memory (lavapipe:
/// 32 KiB).
pub fn fit_workgroup(s: &Shape, t: &Tuning, rows: u32, kv_bytes: u32, shared_limit: u32) -> u32 {
    let mut t = *t;
    while shared_bytes(s, &t, rows, kv_bytes) > shared_limit as u64
        && t.persistent_wg / 2 >= t.subgroup.max(1)
    {
        t.persistent_wg /= 2;
    }
    t.persistent_wg
}

/// Bytes of the grid-sync buffer for up to `groups` workgroups and `rows` rows: four words, then
/// a (value, index) pair per workgroup and row.
pub fn sync_bytes(groups: u32, rows: u32) -> u64 {
    16 + 8 * groups as u64 * rows as u64
}

/// What the persistent kernel needs of a device, as the device reports it.
#[derive(Clone, Copy, Debug)]
pub struct DeviceCaps {
    /// Buffer device addresses (the kernel's pointer table).
    pub grid_sync: bool,
    /// Subgroup arithmetic and shuffles in compute shaders.
    pub subgroup_shuffle: bool,
    /// Float atomic adds on buffers (VK_EXT_shader_atomic_float).
    pub float_atomics: bool,
    /// 64-bit integers and 64-bit buffer atomics (the tagged words).
    pub int64_atomics: bool,
    /// maxComputeSharedMemorySize, bytes.
    pub shared_limit: u32,
}

/// Why the persistent kernel cannot run this model on this device at steps of up to `rows` rows
/// with cache elements of `kv_bytes` bytes, if it cannot.
pub fn unsupported(
    s: &Shape,
    t: &Tuning,
    rows: u32,
    kv_bytes: u32,
    caps: DeviceCaps,
) -> Option<String> {
    let DeviceCaps {
        grid_sync,
        subgroup_shuffle,
        float_atomics,
        int64_atomics,
        shared_limit,
    } = caps;
    if !grid_sync {
        return Some(
            "--kernels persistent needs buffer device addresses (bufferDeviceAddress), which this device lacks; \
             use --kernels fused"
                .into(),
        );
    }
    if !subgroup_shuffle {
        return Some(
            "--kernels persistent needs subgroup arithmetic and shuffles in compute shaders, which this device \
             lacks; use --kernels fused"
                .into(),
        );
    }
    if !t.subgroup.is_power_of_two() || t.subgroup > t.persistent_wg {
        return Some(format!(
            "--kernels persistent needs a power-of-two subgroup size no larger than its workgroup ({} lanes, \
             workgroup {}); use --kernels fused",
            t.subgroup, t.persistent_wg
        ));
    }
    if [s.hidden, s.intermediate, s.q_dim()]
        .iter()
        .any(|d| !d.is_multiple_of(8))
    {
        return Some(format!(
            "--kernels persistent needs hidden, intermediate and heads * head_dim to be multiples of 8 \
             (this model: {}, {}, {}); use --kernels fused",
            s.hidden,
            s.intermediate,
            s.q_dim()
        ));
    }
    if !s.head_dim.is_multiple_of(MERGE_DIMS) {
        return Some(format!(
            "--kernels persistent needs head_dim to be a multiple of {MERGE_DIMS} (this model: {}); use --kernels \
             fused",
            s.head_dim
        ));
    }
    if !float_atomics {
        return Some(
            "--kernels persistent adds to the residual stream with float atomics (VK_EXT_shader_atomic_float's \
             shaderBufferFloat32AtomicAdd), which this device lacks; use --kernels fused"
                .into(),
        );
    }
    if !int64_atomics {
        return Some(
            "--kernels persistent hands values between phases as 64-bit atomics (shaderInt64 and \
             shaderBufferInt64Atomics), which this device lacks; use --kernels fused"
                .into(),
        );
    }
    let bytes = shared_bytes(s, t, rows, kv_bytes);
    if bytes > shared_limit as u64 {
        return Some(format!(
            "--kernels persistent would declare {bytes} bytes of shared memory for this model, more than the \
             device's {shared_limit}; use --kernels fused"
        ));
    }
    None
}

/// The kernel's push constants: all that differs between the probe's dispatches and the steps'.
pub fn push(spin_limit: u32, probe: bool) -> PersistentPush {
    PersistentPush {
        spin_limit,
        probe: probe as u32,
    }
}

impl Lower<'_> {
    /// The bindings of the persistent kernel, in its order, for `n` rows.
    pub(super) fn persistent_binds(&self) -> Vec<super::program::Bind> {
        let s = *self.s;
        let n = self.n as u64;
        let ptr_bytes = ptr_table_bytes(s.layers);
        let matrix = |t: WeightType| whole_words(matrix_bytes(t, s.vocab, s.hidden));
        let partial = partial_bytes(&s, self.t.subgroup, n);
        let g = &self.kv.geo;
        let table: Range = r(
            Buf::KvTable,
            0,
            4 * (g.seqs as u64 * g.table_stride as u64).max(1),
        );
        vec![
            read(self.params()),
            read(r(Buf::Ids, 0, 4 * n)),
            read(r(Buf::Ptrs, 0, ptr_bytes)),
            read(table),
            rw(r(
                Buf::GridSync,
                0,
                sync_bytes(self.t.persistent_groups.max(1), self.n),
            )),
            read(r(Buf::Embed, 0, matrix(self.w.embed))),
            read(r(Buf::LmHead, 0, matrix(self.w.lm_head))),
            read(r(Buf::FinalNorm, 0, s.hidden as u64 * F32)),
            read(r(
                Buf::RopeTable,
                0,
                s.max_seq as u64 * s.head_dim as u64 * F32,
            )),
            rw(self.act(Buf::X, RESIDUAL_ROWS * s.hidden)),
            rw(r(Buf::TaggedQkv, 0, qkv_bytes(&s, n))),
            write(r(Buf::PhaseClocks, 0, 8 * clocks(s.layers) as u64)),
            rw(r(Buf::TaggedPartial, 0, partial)),
            write(self.act(Buf::Logits, s.vocab)),
            write(r(Buf::ArgmaxOut, 0, 4 * (2 * n + 1))),
        ]
    }

    /// The specialization constants of the kernel.
    pub(super) fn persistent_spec(&self) -> [u32; crate::vk::SPEC_CONSTANTS] {
        let s = *self.s;
        let t = self.t;
        let mut pairs = vec![
            (id::WG, t.persistent_wg),
            (id::SG, t.subgroup),
            (id::QK_NORM, s.qk_norm as u32),
            (id::GQ, s.heads / s.kv_heads.max(1)),
            (id::XS, staging_vec4s(&s, t)),
            (id::VPL, vec4s_per_lane(&s, t.subgroup)),
            (id::KC, k_row_chunks(&s, self.kv.geo.dtype.bytes() as u32)),
            (id::HIDDEN, s.hidden),
            (id::HEADS, s.heads),
            (id::KV_HEADS, s.kv_heads),
            (id::HEAD_DIM, s.head_dim),
            (id::INTER, s.intermediate),
            (id::VOCAB, s.vocab),
            (id::LAYERS, s.layers),
            (id::EPS, s.eps.to_bits()),
            (id::GRID, t.persistent_groups.max(1)),
            (id::MAX_SPLITS, max_splits(&s, t.subgroup)),
            (id::SPLIT_WANT, t.persistent_splits),
            (id::ROWS, self.n),
            (id::KV_STAGE, t.persistent_kv_stage),
            (id::GS, head_groups(&s, t, self.n)),
            (
                id::RC,
                t.persistent_res_copies.clamp(1, MAX_RESIDUAL_COPIES),
            ),
            (id::WQ, reads_blocks(self.w) as u32),
            (id::WT_EMBED, self.w.embed.spec_id()),
            (id::WT_HEAD, self.w.lm_head.spec_id()),
            (id::WT_MASK, type_mask(self.w)),
        ];
        pairs.extend(self.kv.geo.spec());
        spec(&pairs)
    }

    /// A decode step as one dispatch. Its facts are the sums of the fused lowering's steps (the
    /// same bytes and flops, in one dispatch), so reports keep their per-token totals.
    pub(super) fn lower_persistent(&mut self, ops: &[Op], logits_readback: bool) {
        let mut fused = Lower {
            s: self.s,
            w: self.w,
            t: self.t,
            kv: self.kv,
            n: self.n,
            kind: self.kind,
            steps: Vec::new(),
        };
        fused.lower_fused(ops, false);
        let mut facts = OpInfo::default();
        for st in fused
            .steps
            .iter()
            .filter(|st| matches!(st.action, Action::Dispatch { .. }))
        {
            add_facts(&mut facts, &st.facts);
        }
        let binds = self.persistent_binds();
        let sp = self.persistent_spec();
        let shader = if self.t.phase_clocks {
            Shader::PersistentClocked
        } else {
            Shader::Persistent
        };
        // The spin limit is a push constant so the probe and the steps share one pipeline (the
        // probe lowers this same step at the grid it tries).
        let push = push(spin_limit(self.t.subgroup), false).bytes();
        self.dispatch(
            "token".into(),
            "token",
            Region::Token,
            shader,
            sp,
            push,
            Grid::Fixed([self.t.persistent_groups.max(1), 1, 1]),
            binds,
            facts,
        );
        self.host_read(r(Buf::ArgmaxOut, 0, 4 * (2 * self.n as u64 + 1)));
        if logits_readback {
            self.logits_readback();
        }
    }
}

/// Spins of one grid-barrier wait before the step is declared lost: a barrier on a GPU takes
/// microseconds, so 2^24 spins (seconds) only ever run out when a workgroup is not resident; on
/// a CPU driver (narrow subgroups) the threads of the grid share cores with everything else, so
/// the limit is far higher.
pub fn spin_limit(subgroup: u32) -> u32 {
    if subgroup >= 32 { 1 << 24 } else { 1 << 30 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_polls_words_say_whether_their_writers_wrote_them() {
        // ll_tag: epoch x layers + layer + 1, in the high half of each word.
        let word = |tag: u32, value: f32| (tag as u64) << 32 | value.to_bits() as u64;
        let (epoch, layers) = (5, 4);
        let mut words: Vec<u64> = (0..12).map(|i| word(5 * 4 + 1 + 1, i as f32)).collect();
        assert!(
            polled_words(&words, epoch, layers, 1, 6)
                .starts_with("read back after the step, all 12")
        );
        // A later layer of the same step overwrote one: still written this step.
        words[3] = word(5 * 4 + 3 + 1, 1.0);
        assert!(polled_words(&words, epoch, layers, 1, 6).contains("all 12"));
        // An earlier layer's tag and an earlier step's are not.
        words[7] = word(5 * 4 + 1, 1.0);
        words[9] = word(4 * 4 + 2 + 1, 1.0);
        assert_eq!(
            polled_words(&words, epoch, layers, 1, 6),
            "read back after the step, 2 of its 12 QKV words lack the step's tag (the first: row 1's \
             element 1 of 6): their writers had not written them"
        );
        // Never written at all: tag 0. The tag that wraps to 0 is 1.
        assert!(polled_words(&[0], epoch, layers, 0, 1).contains("1 of its 1"));
        assert!(polled_words(&[word(1, 0.0)], u32::MAX, 1, 0, 1).contains("all 1"));
    }

    #[test]
    fn a_lost_wait_names_its_barrier_or_poll_and_workgroup() {
        // The words fail_step writes: 1, bit 2 for a poll, the clock at bit 4, the group at 16.
        let word = |poll: u32, site: u32, group: u32| 1 | poll << 2 | site << 4 | group << 16;
        let resident = "not all 132 workgroups of its grid were resident";
        assert_eq!(
            lost_wait(word(0, 5, 131), 2, 132),
            format!(
                "workgroup 131's wait at the grid barrier before L1.attention ran out: {resident} (is \
                 another program using the device?)"
            )
        );
        assert!(
            lost_wait(word(0, 8, 0), 2, 132).starts_with(
                "workgroup 0's wait at the grid barrier before lm_head_argmax ran out"
            )
        );
        assert_eq!(
            lost_wait(word(1, 2, 7), 2, 132),
            format!(
                "workgroup 7's wait at L0.attn_merge_o_proj's poll for the values it reads from other \
                 workgroups ran out: {resident}, a value it reads was never written with the step's \
                 tag, or the compiled poll does not see what it reads (docs/persistent-kernel.md, \
                 \"Tagged words in wide workgroups\")"
            )
        );
        // Layer 1's attention poll (clock 5); its merge's poll (6) and a barrier there are not.
        assert_eq!(lost_attention_poll(word(1, 5, 4), 2), Some(1));
        assert_eq!(lost_attention_poll(word(1, 6, 4), 2), None);
        assert_eq!(lost_attention_poll(word(0, 5, 4), 2), None);
        assert_eq!(lost_attention_poll(word(1, 9, 4), 2), None);
        assert!(
            lost_wait(word(0, 0, 3), 2, 132)
                .starts_with("workgroup 3's wait at a grid barrier of the residency probe ran out")
        );
        assert!(lost_wait(word(0, 4000, 1), 2, 132).contains("phase 4000"));
    }

    fn shape(heads: u32, kv_heads: u32, head_dim: u32) -> Shape {
        Shape {
            layers: 2,
            hidden: 256,
            heads,
            kv_heads,
            head_dim,
            intermediate: 768,
            vocab: 1000,
            eps: 1e-6,
            qk_norm: true,
            max_seq: 4096,
        }
    }

    #[test]
    fn the_type_mask_has_a_bit_for_every_type_the_kernel_reads() {
        use crate::exec::program::LayerTypes;
        use crate::model::WeightType as W;
        // A Q4_K_M file: Q4_K, Q6_K for one layer's v and down and for the lm_head, a Q8_0
        // embedding.
        let q4k = LayerTypes {
            q: W::Q4K,
            k: W::Q4K,
            v: W::Q4K,
            o: W::Q4K,
            gate: W::Q4K,
            up: W::Q4K,
            down: W::Q4K,
        };
        let w = WeightTypes {
            embed: W::Q8_0,
            lm_head: W::Q6K,
            layers: vec![
                q4k,
                LayerTypes {
                    v: W::Q6K,
                    down: W::Q6K,
                    ..q4k
                },
            ],
        };
        let mask = type_mask(&w);
        let expected: u32 = [W::Q8_0, W::Q4K, W::Q6K]
            .iter()
            .map(|t| 1 << t.spec_id())
            .sum();
        assert_eq!(mask, expected);
        // Every type the kernel reads from the pointer table or its constants has its bit.
        for l in 0..2 {
            for byte in packed_types(&w, l).to_le_bytes().iter().take(7) {
                assert_ne!(mask & (1 << byte), 0, "layer {l}: type id {byte}");
            }
        }
        assert_ne!(mask & (1 << w.lm_head.spec_id()), 0);
        assert_eq!(type_mask(&WeightTypes::f16(2)), 1 << W::F16.spec_id());
    }

    #[test]
    fn the_workgroup_shrinks_until_its_shared_memory_fits() {
        // lavapipe's tuning: 8 lanes, workgroups of 64.
        let t = Tuning::for_device(1, 8, 4096, 2);
        assert_eq!((t.subgroup, t.persistent_wg), (8, 64));
        // GQA 8 at head_dim 128: 8 subgroups x 8 query heads x (128 + 8) floats is 34 KiB.
        let s = shape(16, 2, 128);
        assert!(shared_bytes(&s, &t, 1, 2) > 32768);
        let wg = fit_workgroup(&s, &t, 1, 2, 32768);
        assert!(wg < 64 && wg >= t.subgroup);
        let fitted = Tuning {
            persistent_wg: wg,
            ..t
        };
        assert!(shared_bytes(&s, &fitted, 1, 2) <= 32768);
        // A shape that fits keeps the workgroup; one that never fits stops at one subgroup.
        assert_eq!(fit_workgroup(&shape(8, 2, 64), &t, 1, 2, 32768), 64);
        assert_eq!(fit_workgroup(&s, &t, 1, 2, 1024), t.subgroup);
        // Each row's parameters take 16 bytes.
        assert_eq!(shared_bytes(&s, &t, 4, 2) - shared_bytes(&s, &t, 1, 2), 48);
    }

    #[test]
    fn head_groups_only_where_every_unit_keeps_one_block() {
        // An H100's tuning and grid (132 workgroups of 8 subgroups) and Qwen3-0.6B's heads (GQA
        // 2 over 8 KV heads): 1056 subgroups, 66 blocks of 32 positions a KV head with two
        // subgroups a unit.
        let t = Tuning {
            persistent_groups: 132,
            ..Tuning::for_device(132, 32, 40960, 8)
        };
        assert_eq!((t.subgroup, t.persistent_wg), (32, 256));
        let at = |max_seq: u32, t: &Tuning, rows: u32| {
            head_groups(
                &Shape {
                    max_seq,
                    ..shape(16, 8, 128)
                },
                t,
                rows,
            )
        };
        assert_eq!(at(770, &t, 1), 2);
        assert_eq!(at(66 * 32, &t, 1), 2);
        assert_eq!(at(66 * 32 + 1, &t, 1), 1);
        assert_eq!(at(16384 + 258, &t, 1), 1);
        // Rows share the grid: four rows have a quarter of the blocks each.
        assert_eq!(at(770, &t, 4), 1);
        assert_eq!(at(16 * 32, &t, 4), 2);
        // The overrides.
        let off = Tuning {
            persistent_head_groups: 1,
            ..t
        };
        let on = Tuning {
            persistent_head_groups: 2,
            ..t
        };
        assert_eq!(at(770, &off, 1), 1);
        assert_eq!(at(16384, &on, 1), 2);
        // GQA 1 has one head a unit; GQA 3 does not divide 8 subgroups.
        assert_eq!(head_groups(&shape(8, 8, 128), &on, 1), 1);
        assert_eq!(head_groups(&shape(24, 8, 128), &on, 1), 1);
        // GQA 8 takes every subgroup of a workgroup.
        assert_eq!(
            head_groups(
                &Shape {
                    max_seq: 256,
                    ..shape(64, 8, 64)
                },
                &t,
                1
            ),
            8
        );
    }

    #[test]
    fn the_kv_staging_gives_way_before_the_workgroup() {
        let t = Tuning {
            persistent_kv_stage: 3,
            ..Tuning::for_device(1, 8, 4096, 2)
        };
        let s = shape(8, 2, 128);
        // A slot: 8 K rows of 16 chunks padded by one, and 8 V rows of 16 chunks; f32 doubles
        // the chunks.
        let none = Tuning {
            persistent_kv_stage: 0,
            ..t
        };
        assert_eq!(
            shared_bytes(&s, &t, 1, 2) - shared_bytes(&s, &none, 1, 2),
            3 * 8 * 33 * 16
        );
        assert_eq!(
            kv_stage_bytes(&s, &t, 4) - kv_stage_bytes(&s, &none, 4),
            3 * 8 * 65 * 16
        );
        // Room for all three, for one, for none.
        let all = shared_bytes(&s, &t, 1, 2) as u32;
        assert_eq!(fit_kv_stage(&s, &t, 1, 2, all), 3);
        assert_eq!(fit_kv_stage(&s, &t, 1, 2, all - 2 * 8 * 33 * 16), 1);
        assert_eq!(fit_kv_stage(&s, &t, 1, 2, 1024), 0);
        // Never more units than the workgroup has subgroups.
        let wide = Tuning {
            persistent_kv_stage: 8,
            persistent_wg: 16,
            ..t
        };
        assert_eq!(fit_kv_stage(&s, &wide, 1, 2, u32::MAX), 2);
    }

    #[test]
    fn clock_offsets_survive_a_torn_read_of_the_clock() {
        // In order: the full values, however long a phase.
        let c = [10, 20, 20 + (5 << 32), (6 << 32) + 3];
        assert_eq!(
            clock_offsets(&c),
            Some(vec![0, 10, 10 + (5 << 32), (6 << 32) - 7])
        );
        // The low word wraps between clocks 1 and 2 and a high word lags (lavapipe: the value
        // steps back by about 2^32) or leads (it jumps by 2^32, then steps back). The low words'
        // wrapping differences are the truth either way.
        let lows = [0xffff_fff0u64 - 100, 0xffff_fff0, 0x20, 0x40];
        for highs in [[7u64, 7, 7, 8], [7, 8, 8, 8]] {
            let c: Vec<u64> = highs.iter().zip(lows).map(|(h, l)| (h << 32) + l).collect();
            assert_eq!(clock_offsets(&c), Some(vec![0, 100, 148, 180]), "{highs:?}");
        }
        // Clocks that do not advance time nothing.
        assert_eq!(clock_offsets(&[5, 5, 5]), None);
    }

    fn caps(float_atomics: bool) -> DeviceCaps {
        DeviceCaps {
            grid_sync: true,
            subgroup_shuffle: true,
            float_atomics,
            int64_atomics: true,
            shared_limit: 1 << 16,
        }
    }

    #[test]
    fn the_kernel_is_refused_without_float_or_64_bit_atomics_or_with_odd_head_dims() {
        let t = Tuning::for_device(132, 32, 1 << 20, 1);
        let s = shape(16, 8, 128);
        assert_eq!(unsupported(&s, &t, 1, 2, caps(true)), None);
        let why = unsupported(&s, &t, 1, 2, caps(false)).unwrap_or_default();
        assert!(why.contains("shaderBufferFloat32AtomicAdd"), "{why}");
        let no64 = DeviceCaps {
            int64_atomics: false,
            ..caps(true)
        };
        let why = unsupported(&s, &t, 1, 2, no64).unwrap_or_default();
        assert!(why.contains("shaderBufferInt64Atomics"), "{why}");
        // A merge unit takes 16 of a head's dims: head_dim 24 is refused, with the figure.
        let why = unsupported(&shape(16, 8, 24), &t, 1, 2, caps(true)).unwrap_or_default();
        assert!(
            why.contains("multiple of 16") && why.contains("24"),
            "{why}"
        );
    }
}
