//! Host-side descriptions of the compute kernels: push-constant blocks that mirror the GLSL
//! `layout(push_constant)` blocks byte for byte (checked by size assertions), the binding order of
//! each shader, and the CPU computations each kernel is tested against.
//!
//! Conventions shared by every shader (see `shaders/common.glsl`):
//! - bindings are storage buffers of set 0, in the order documented on each push struct;
//! - activations are f32; matrix weights are f16, row-major `[out, in]`; norm weights are f32;
//! - per-step values (first position, token count, KV length) come from the `TokenParams` buffer
//!   (`shaders/common.glsl`), never from push constants, so a recorded command buffer can be
//!   replayed for every token;
//! - specialization constants are set by name (`crate::shaders::spec`, generated from the shaders'
//!   declarations); `WG` (id 0) is the workgroup size; more constants are listed per kernel.
//! - KV caches are f32 `[max_seq, kv_heads, head_dim]` per layer (a descriptor range of one
//!   buffer); RoPE uses a host-computed table `[max_seq, head_dim / 2, 2]` of (cos, sin).

use bytemuck::{Pod, Zeroable};

/// The per-step values that kernels read from the params buffer (binding named `params`).
/// Mirrors `struct TokenParams` in `shaders/common.glsl`. The buffer holds this header followed
/// by one [`RowParams`] per row of the step.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable, PartialEq, Eq)]
pub struct TokenParams {
    /// Position of the step's first row.
    pub pos0: u32,
    /// Rows in this step (prompt tokens of one sequence, or one token per sequence).
    pub n_tokens: u32,
    /// The largest `pos + 1` over the step's rows.
    pub kv_len: u32,
    /// Sequences in this step.
    pub n_seqs: u32,
}
const _: () = assert!(std::mem::size_of::<TokenParams>() == 16);

/// One row of a step (`rows[t]` in the shaders): the row is position `pos` of sequence `seq` and
/// attends positions `lo..=pos` (`lo > 0` only under a sliding window).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable, PartialEq, Eq)]
pub struct RowParams {
    pub pos: u32,
    pub seq: u32,
    pub lo: u32,
    pub pad0: u32,
}
const _: () = assert!(std::mem::size_of::<RowParams>() == 16);

/// The bytes of a params buffer: the header and its rows.
pub fn params_bytes(header: &TokenParams, rows: &[RowParams]) -> Vec<u8> {
    let mut b = bytemuck::bytes_of(header).to_vec();
    b.extend_from_slice(bytemuck::cast_slice(rows));
    b
}

/// Rows of one sequence's consecutive positions `pos0..pos0 + n` under `window` (0: none).
pub fn prompt_rows(seq: u32, pos0: u32, n: u32, window: u32) -> Vec<RowParams> {
    (pos0..pos0 + n)
        .map(|pos| RowParams {
            pos,
            seq,
            lo: crate::kv::window_start(pos, window),
            pad0: 0,
        })
        .collect()
}

macro_rules! push_block {
    ($(#[$doc:meta])* $name:ident { $($(#[$fdoc:meta])* $field:ident : $ty:ty),* $(,)? } = $size:expr) => {
        $(#[$doc])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, Default, Pod, Zeroable, PartialEq)]
        pub struct $name { $($(#[$fdoc])* pub $field: $ty),* }
        const _: () = assert!(std::mem::size_of::<$name>() == $size);
        impl $name {
            pub fn bytes(&self) -> Vec<u8> { bytemuck::bytes_of(self).to_vec() }
        }
    };
}

push_block! {
    /// `rmsnorm.comp`: `y[r, i] = x[r, i] * rsqrt(mean(x[r]^2) + eps) * w[i]`, one workgroup per row.
    /// Bindings: 0 `x` f32 [rows, n], 1 `w` f32 [n], 2 `y` f32 [rows, n]. Groups: (rows, 1, 1).
    RmsNormPush { n: u32, rows: u32, eps: f32, pad0: u32 } = 16
}

push_block! {
    /// `embed.comp`: `out[t, :] = f32(table[ids[t], :])`.
    /// Bindings: 0 `ids` u32 [n_tokens], 1 `table` f16 [vocab, hidden], 2 `out` f32 [n_tokens, hidden].
    /// Groups: (ceil(hidden / WG), n_tokens, 1).
    EmbedPush { hidden: u32, n_tokens: u32, pad0: u32, pad1: u32 } = 16
}

push_block! {
    /// `matvec.comp` (primitive, batched for prefill): `y[t, r] = sum_c W[r, c] * x[t, c]`, f32
    /// accumulation. Bindings: 0 `W` [rows, cols] (f16, or GGUF blocks: spec `WTYPE`), 1 `x` f32
    /// [n_tokens, cols], 2 `y` f32 [n_tokens, rows]. Spec: 0 WG, 1 ROWS (rows per workgroup).
    /// Groups: (ceil(rows / ROWS), n_tokens, 1).
    /// The same block serves `matmul.comp` (prompt chunks, cols % 4 == 0): each invocation a
    /// block of 4 rows x 4 tokens, a workgroup of 64 covers 32 x 32. Spec: 0 WG = 64.
    /// Groups: (ceil(rows / 32), ceil(n_tokens / 32), 1).
    MatvecPush { rows: u32, cols: u32, n_tokens: u32, pad0: u32 } = 16
}

push_block! {
    /// `rope.comp`: rotate-half RoPE in place on `x` [n_tokens, heads, head_dim]; row t is at
    /// position `rows[t].pos`: for i < head_dim/2, with (c, s) = table[pos, i]:
    /// `x'[i] = x[i] c - x[i + d/2] s`, `x'[i + d/2] = x[i + d/2] c + x[i] s`.
    /// Bindings: 0 `params`, 1 `x` f32 (read-write), 2 `table` f32 [max_seq, head_dim/2, 2].
    /// Groups: (ceil(heads * head_dim / 2 / WG), n_tokens, 1).
    RopePush { heads: u32, head_dim: u32, pad0: u32, pad1: u32 } = 16
}

push_block! {
    /// `attn_scores.comp`: `s[t, h, j] = scale * dot(q[t, h], K[slot(seq_t, j), h / group])` for
    /// `lo_t <= j <= pos_t` (the row's range); other `j < stride` are left untouched.
    /// Bindings: 0 `params` (with rows), 1 `q` f32 [n_tokens, heads, head_dim], 2 block tables,
    /// 3 `k_cache` (any layout, `shaders/kv.glsl`), 4 `scores` f32 [n_tokens, heads, stride].
    /// Spec: 0 WG, 4..7 the KV layout. Groups: (ceil(params.kv_len / WG), heads, n_tokens).
    ScoresPush { heads: u32, kv_heads: u32, head_dim: u32, stride: u32, scale: f32, pad0: u32, pad1: u32, pad2: u32 } = 32
}

push_block! {
    /// `softmax.comp`: in-place softmax of each row `s[t, h, lo_t..=pos_t]` (f32,
    /// max-subtracted); one workgroup per row.
    /// Bindings: 0 `params`, 1 `scores` f32 [n_tokens, heads, stride] (read-write).
    /// Groups: (heads, n_tokens, 1).
    SoftmaxPush { heads: u32, stride: u32, pad0: u32, pad1: u32 } = 16
}

push_block! {
    /// `attn_wsum.comp`: `out[t, h, d] = sum_{lo_t <= j <= pos_t} p[t, h, j] * V[slot(seq_t, j),
    /// h / group, d]`. Bindings: 0 `params` (with rows), 1 `probs` f32 [n_tokens, heads, stride],
    /// 2 block tables, 3 `v_cache` (any layout), 4 `out` f32 [n_tokens, heads, head_dim].
    /// Spec: 0 WG, 4..7 the KV layout. Groups: (ceil(head_dim / WG), heads, n_tokens).
    WsumPush { heads: u32, kv_heads: u32, head_dim: u32, stride: u32 } = 16
}

push_block! {
    /// `silu_mul.comp`: `out[i] = g[i] / (1 + exp(-g[i])) * u[i]`.
    /// Bindings: 0 `g` f32 [n], 1 `u` f32 [n], 2 `out` f32 [n]. Groups: (ceil(n / WG), 1, 1).
    SiluMulPush { n: u32, pad0: u32, pad1: u32, pad2: u32 } = 16
}

push_block! {
    /// `add.comp`: `x[i] += y[i]` in place. Bindings: 0 `x` f32 [n] (read-write), 1 `y` f32 [n].
    /// Groups: (ceil(n / WG), 1, 1).
    AddPush { n: u32, pad0: u32, pad1: u32, pad2: u32 } = 16
}

push_block! {
    /// `matvec_fused.comp` (fused decode, one token): `y = W · f(x)` with optional folded RMSNorm
    /// and epilogues chosen by specialization constants:
    /// - `ROWS`: rows per workgroup; `NORM` (0/1): `f(x) = x * rsqrt(mean(x^2) +
    ///   eps) * norm_w`, else `f(x) = x`; `EPILOGUE`: 0 store `y[r] = acc`, 1 residual
    ///   `y[r] += acc`, 2 SwiGLU over stacked [gate; up] rows: `y[r] = silu(acc_r) * acc_{r+rows}`
    ///   for r < rows (the weight has 2 * rows rows).
    /// - Uses wide (4 x f16) weight loads and subgroup reductions.
    ///
    /// - `WTYPE`, `WTYPE1`, `WTYPE2`: the storage types of up to three segments of the stacked
    ///   weight: weight rows below `seg_row[0]` are `WTYPE` from byte 0, rows below `seg_row[1]`
    ///   `WTYPE1` from byte `seg_byte[0]`, the rest `WTYPE2` from byte `seg_byte[1]`.
    ///
    /// Bindings: 0 `W` [rows (x2 for SwiGLU), cols] (f16 or blocks), 1 `x` f32 [cols], 2 `y`
    /// f32 [rows], 3 `norm_w` f32 [cols] (bound even when NORM = 0). `cols` is a multiple of 4.
    /// Groups: (ceil(rows / ROWS), 1, 1).
    MatvecFusedPush {
        rows: u32,
        cols: u32,
        eps: f32,
        pad0: u32,
        seg_row: [u32; 2],
        seg_byte: [u32; 2],
    } = 32
}

push_block! {
    /// `qk_norm_rope_kv.comp`: from the fused QKV output `qkv` [n, heads*hd + 2*kv_heads*hd] of
    /// the step's rows (row t at position `rows[t].pos` of sequence `rows[t].seq`): optional
    /// per-head RMSNorm of q and k heads (spec 1 `QK_NORM`), RoPE on q and k, q written to `q_out`
    /// [n, heads, hd], k and v written straight into the caches at the row's slot (any layout,
    /// f16 or f32). Bindings: 0 `params` (with rows), 1 `qkv`, 2 `q_norm_w` f32 [hd], 3
    /// `k_norm_w` f32 [hd], 4 RoPE table, 5 `q_out`, 6 block tables, 7 `k_cache`, 8 `v_cache`.
    /// Spec: 0 WG, 1 QK_NORM, 4..7 the KV layout. Groups: (heads + kv_heads, n, 1) (one workgroup
    /// per q or k head and row; the k workgroups also copy the matching v head).
    QkNormRopeKvPush { heads: u32, kv_heads: u32, head_dim: u32, eps: f32 } = 16
}

push_block! {
    /// `attn_split.comp`: split-K decode attention, one query row per sequence. Row t attends
    /// `[lo_t, pos_t]`; one workgroup per (split, kv head, row) computes ALL query heads of that
    /// KV group (each K/V element read once), with an online softmax in f32, over positions
    /// `[lo + s * chunk, min(pos + 1, lo + (s + 1) * chunk))`, `chunk = ceil(span / n_splits)`
    /// rounded up to a multiple of 32 (see [`split_chunk`]). It writes `partial[t, h, s] = (m, l,
    /// o[0..hd])`: running max, sum of exp, unnormalized output (an empty split writes m = -inf,
    /// l = 0, o = 0). K/V are read through the layout (paged: the split's table slice staged in
    /// shared memory). Bindings: 0 `params` (with rows), 1 `q` f32 [n, heads, hd], 2 block
    /// tables, 3 `k_cache`, 4 `v_cache`, 5 `partial` f32 [n, heads, n_splits, hd + 2].
    /// Spec: 0 WG, 1 TILE (16 or 32 positions), 4..7 the KV layout. Groups: (n_splits, kv_heads,
    /// n).
    AttnSplitPush { heads: u32, kv_heads: u32, head_dim: u32, n_splits: u32, scale: f32, pad0: u32, pad1: u32, pad2: u32 } = 32
}

push_block! {
    /// `attn_merge.comp`: `out[t, h] = sum_s exp(m_s - M) o_s / sum_s exp(m_s - M) l_s`, M = max
    /// m_s. Bindings: 0 `partial` f32 [n, heads, n_splits, hd + 2], 1 `out` f32 [n, heads, hd].
    /// Groups: (heads, n, 1).
    AttnMergePush { heads: u32, head_dim: u32, n_splits: u32, pad0: u32 } = 16
}

push_block! {
    /// `argmax.comp`: one workgroup per row t of `x` [rows, n]; `out[t] = argmax(x[t])` (lowest
    /// index on ties), `out[rows + t]` = the max value's f32 bits. Bindings: 0 `x` f32 [rows, n],
    /// 1 `out` u32 [2 rows]. Groups: (rows, 1, 1).
    ArgmaxPush { n: u32, pad0: u32, pad1: u32, pad2: u32 } = 16
}

push_block! {
    /// `kv_append.comp` (primitive KV append): row t of `src` [n, kv_dim] f32 into the cache at the
    /// slot of (`rows[t].seq`, `rows[t].pos`), converted to the cache's element type.
    /// Bindings: 0 `params` (with rows), 1 `src`, 2 block tables, 3 cache. Spec: 0 WG, 4..7 the
    /// KV layout. Groups: (ceil(kv_dim / WG), n, 1).
    KvAppendPush { kv_dim: u32, pad0: u32, pad1: u32, pad2: u32 } = 16
}

push_block! {
    /// `kv_gather.comp` (the paged layout's gather): copies the positions the step attends from
    /// the sequence's blocks into a contiguous scratch `[seqs, max_seq, kv_dim]`, as 16-byte words
    /// (`row_words` per slot). Spec 1 `MODE`: 0 per row (decode), 1 the whole step for
    /// `rows[0].seq` (prompt chunk). Bindings: 0 `params` (with rows), 1 block tables, 2 `k_cache`,
    /// 3 `v_cache`, 4 `k_scratch`, 5 `v_scratch`. Spec: 0 WG, 1 MODE, 4..7 the KV layout.
    /// Groups: (ceil(max_seq / 16), 1, MODE == 0 ? n : 1).
    KvGatherPush { row_words: u32, max_seq: u32, pad0: u32, pad1: u32 } = 16
}

push_block! {
    /// `attn_prefill.comp`: tiled causal attention of a prompt chunk (online softmax, no score
    /// matrix): row t attends `[lo_t, pos_t]` through the layout. Bindings: 0 `params` (with
    /// rows), 1 `q` f32 [n, heads, hd], 2 block tables, 3 `k_cache`, 4 `v_cache`, 5 `out` f32
    /// [n, heads, hd]. Spec: 0 WG, 4..7 the KV layout. Groups: (ceil(n / TQ), kv_heads, 1) with
    /// TQ = [`prefill_tokens_per_group`].
    AttnPrefillPush { heads: u32, kv_heads: u32, head_dim: u32, scale: f32 } = 16
}

/// Query tokens per `attn_prefill` workgroup for `group` query heads per KV head with the
/// shader's default `MAX_R = 16` rows (spec 1 = 0).
pub fn prefill_tokens_per_group(group: u32) -> u32 {
    prefill_tokens_per_group_rows(group, 16)
}

/// Query tokens per `attn_prefill` workgroup of `max_r` rows (spec 1) for `group` query heads
/// per KV head.
pub fn prefill_tokens_per_group_rows(group: u32, max_r: u32) -> u32 {
    (max_r / group.max(1)).max(1)
}

/// The positions one `attn_split` split covers for a row attending `span` positions:
/// `ceil(span / n_splits)` rounded up to a multiple of 32 (whatever the kernel's tile of 16 or
/// 32 positions, so a paged split's tiles never straddle more blocks than they must).
pub fn split_chunk(span: usize, n_splits: usize) -> usize {
    span.div_ceil(n_splits.max(1)).div_ceil(32) * 32
}

/// CPU RMSNorm over rows of `n`: the computation `rmsnorm.comp` performs.
pub fn rmsnorm_cpu(x: &[f32], w: &[f32], n: usize, eps: f32) -> Vec<f32> {
    let mut y = vec![0.0; x.len()];
    for (xr, yr) in x.chunks(n).zip(y.chunks_mut(n)) {
        let ss: f32 = xr.iter().map(|v| v * v).sum::<f32>() / n as f32;
        let scale = 1.0 / (ss + eps).sqrt();
        for ((yo, xi), wi) in yr.iter_mut().zip(xr).zip(w) {
            *yo = xi * scale * wi;
        }
    }
    y
}

/// The RoPE table the kernels read, `[max_seq, inv_freq.len(), 2]` of (cos, sin): the angle of
/// pair `i` at position `pos` is `(pos as f32) * inv_freq[i]` (pass `Config::rope_inv_freq()`),
/// with cos and sin taken in f32 as the CPU reference does.
pub fn rope_table(inv_freq: &[f32], max_seq: usize) -> Vec<f32> {
    let mut table = Vec::with_capacity(max_seq * inv_freq.len() * 2);
    for pos in 0..max_seq {
        for f in inv_freq {
            let angle = pos as f32 * f;
            table.push(angle.cos());
            table.push(angle.sin());
        }
    }
    table
}

/// CPU embedding lookup: the computation `embed.comp` performs. `table` is `[vocab, hidden]`
/// (f16 values widened to f32); returns `[ids.len(), hidden]`.
pub fn embed_cpu(ids: &[u32], table: &[f32], hidden: usize) -> Vec<f32> {
    ids.iter()
        .flat_map(|&id| {
            table[id as usize * hidden..(id as usize + 1) * hidden]
                .iter()
                .copied()
        })
        .collect()
}

/// CPU matvec batched over tokens: `y[t, r] = sum_c w[r, c] * x[t, c]` (`matvec.comp`). `w` is
/// `[rows, cols]`, `x` is `[n_tokens, cols]`; returns `[n_tokens, rows]`.
pub fn matvec_cpu(w: &[f32], x: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut y = Vec::with_capacity(x.len() / cols.max(1) * rows);
    for xt in x.chunks(cols) {
        y.extend(
            w.chunks(cols)
                .take(rows)
                .map(|wr| wr.iter().zip(xt).map(|(a, b)| a * b).sum::<f32>()),
        );
    }
    y
}

/// CPU rotate-half RoPE in place on `x` `[n_tokens, heads, head_dim]`, token `t` at position
/// `pos0 + t`, with `table` from [`rope_table`] (`rope.comp`).
pub fn rope_cpu(x: &mut [f32], heads: usize, head_dim: usize, pos0: usize, table: &[f32]) {
    let half = head_dim / 2;
    for (t, token) in x.chunks_mut(heads * head_dim).enumerate() {
        let row = &table[(pos0 + t) * half * 2..(pos0 + t + 1) * half * 2];
        for head in token.chunks_mut(head_dim) {
            let (lo, hi) = head.split_at_mut(half);
            for i in 0..half {
                let (c, s) = (row[2 * i], row[2 * i + 1]);
                let (a, b) = (lo[i], hi[i]);
                lo[i] = a * c - b * s;
                hi[i] = b * c + a * s;
            }
        }
    }
}

/// Attention head counts shared by the attention kernels' CPU computations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttnDims {
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
}

impl AttnDims {
    /// Query heads per KV head.
    pub fn group(&self) -> usize {
        self.heads / self.kv_heads
    }
}

/// CPU attention scores (`attn_scores.comp`): for each token `t` of `n_tokens` and head `h`,
/// `scores[t, h, j] = scale * dot(q[t, h], k_cache[j, h / group])` for `j < pos0 + t + 1`; other
/// entries of `scores` (`[n_tokens, heads, stride]`) are left as they are.
pub fn attn_scores_cpu(
    q: &[f32],
    k_cache: &[f32],
    dims: AttnDims,
    pos0: usize,
    stride: usize,
    scale: f32,
    scores: &mut [f32],
) {
    let AttnDims {
        heads,
        kv_heads,
        head_dim: hd,
    } = dims;
    let n_tokens = q.len() / (heads * hd);
    for t in 0..n_tokens {
        for h in 0..heads {
            let qh = &q[(t * heads + h) * hd..][..hd];
            let kvh = h / dims.group();
            for j in 0..(pos0 + t + 1).min(stride) {
                let kj = &k_cache[(j * kv_heads + kvh) * hd..][..hd];
                scores[(t * heads + h) * stride + j] =
                    scale * qh.iter().zip(kj).map(|(a, b)| a * b).sum::<f32>();
            }
        }
    }
}

/// CPU causal softmax in place (`softmax.comp`): row `(t, h)` of `scores` `[n_tokens, heads,
/// stride]` is normalized over its first `pos0 + t + 1` entries; the rest is left as it is.
pub fn softmax_cpu(scores: &mut [f32], heads: usize, stride: usize, pos0: usize) {
    for (r, row) in scores.chunks_mut(stride).enumerate() {
        let len = (pos0 + r / heads + 1).min(stride);
        let row = &mut row[..len];
        let m = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0.0;
        for v in row.iter_mut() {
            *v = (*v - m).exp();
            sum += *v;
        }
        for v in row.iter_mut() {
            *v /= sum;
        }
    }
}

/// CPU weighted sum over V (`attn_wsum.comp`): `out[t, h, d] = sum_{j < pos0 + t + 1}
/// probs[t, h, j] * v_cache[j, h / group, d]`; `probs` is `[n_tokens, heads, stride]`.
pub fn attn_wsum_cpu(
    probs: &[f32],
    v_cache: &[f32],
    dims: AttnDims,
    pos0: usize,
    stride: usize,
) -> Vec<f32> {
    let AttnDims {
        heads,
        kv_heads,
        head_dim: hd,
    } = dims;
    let n_tokens = probs.len() / (heads * stride);
    let mut out = vec![0.0; n_tokens * heads * hd];
    for t in 0..n_tokens {
        for h in 0..heads {
            let kvh = h / dims.group();
            let o = &mut out[(t * heads + h) * hd..][..hd];
            for j in 0..(pos0 + t + 1).min(stride) {
                let p = probs[(t * heads + h) * stride + j];
                for (od, vd) in o
                    .iter_mut()
                    .zip(&v_cache[(j * kv_heads + kvh) * hd..][..hd])
                {
                    *od += p * vd;
                }
            }
        }
    }
    out
}

/// CPU causal attention for `q` `[n_tokens, heads, head_dim]` whose first token is at `pos0`,
/// over caches `[max_seq, kv_heads, head_dim]` that already hold positions `0..pos0 + n_tokens`:
/// `softmax(scale * q K^T) V` per head. The reference for both attention paths (scores +
/// softmax + wsum, and attn_split + attn_merge).
pub fn attention_cpu(
    q: &[f32],
    k_cache: &[f32],
    v_cache: &[f32],
    dims: AttnDims,
    pos0: usize,
    scale: f32,
) -> Vec<f32> {
    let n_tokens = q.len() / (dims.heads * dims.head_dim);
    let stride = pos0 + n_tokens;
    let mut scores = vec![0.0; n_tokens * dims.heads * stride];
    attn_scores_cpu(q, k_cache, dims, pos0, stride, scale, &mut scores);
    softmax_cpu(&mut scores, dims.heads, stride, pos0);
    attn_wsum_cpu(&scores, v_cache, dims, pos0, stride)
}

/// CPU attention of arbitrary rows (the reference of `attn_prefill` and of `attn_split` +
/// `attn_merge`): row t of `q` `[n, heads, head_dim]` attends positions `rows[t].0..=rows[t].1`
/// (lo, pos) of caches `[positions, kv_heads, head_dim]` in logical order. Returns `[n, heads,
/// head_dim]`.
pub fn attention_rows_cpu(
    q: &[f32],
    k_cache: &[f32],
    v_cache: &[f32],
    dims: AttnDims,
    rows: &[(usize, usize)],
    scale: f32,
) -> Vec<f32> {
    let AttnDims {
        heads,
        kv_heads,
        head_dim: hd,
    } = dims;
    let mut out = vec![0.0; rows.len() * heads * hd];
    for (t, &(lo, pos)) in rows.iter().enumerate() {
        for h in 0..heads {
            let kvh = h / dims.group();
            let qh = &q[(t * heads + h) * hd..][..hd];
            let mut s: Vec<f32> = (lo..=pos)
                .map(|j| {
                    scale
                        * qh.iter()
                            .zip(&k_cache[(j * kv_heads + kvh) * hd..][..hd])
                            .map(|(a, b)| a * b)
                            .sum::<f32>()
                })
                .collect();
            let m = s.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let mut sum = 0.0;
            for v in s.iter_mut() {
                *v = (*v - m).exp();
                sum += *v;
            }
            let o = &mut out[(t * heads + h) * hd..][..hd];
            for (j, p) in (lo..=pos).zip(&s) {
                for (od, vd) in o
                    .iter_mut()
                    .zip(&v_cache[(j * kv_heads + kvh) * hd..][..hd])
                {
                    *od += p / sum * vd;
                }
            }
        }
    }
    out
}

/// CPU SwiGLU activation (`silu_mul.comp`): `out[i] = g[i] / (1 + exp(-g[i])) * u[i]`.
pub fn silu_mul_cpu(g: &[f32], u: &[f32]) -> Vec<f32> {
    g.iter()
        .zip(u)
        .map(|(a, b)| a / (1.0 + (-a).exp()) * b)
        .collect()
}

/// CPU residual add in place (`add.comp`): `x[i] += y[i]`.
pub fn add_cpu(x: &mut [f32], y: &[f32]) {
    for (a, b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

/// The epilogue of `matvec_fused.comp` (its specialization constant `EPILOGUE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Epilogue {
    /// `y[r] = acc_r`.
    Store,
    /// `y[r] += acc_r` (residual add).
    Residual,
    /// `y[r] = silu(acc_r) * acc_{r + rows}` over stacked `[gate; up]` weight rows.
    SwiGlu,
}

impl Epilogue {
    /// The value of specialization constant `EPILOGUE`.
    pub fn spec(self) -> u32 {
        match self {
            Epilogue::Store => 0,
            Epilogue::Residual => 1,
            Epilogue::SwiGlu => 2,
        }
    }
}

/// CPU fused matvec (`matvec_fused.comp`) of one token: `acc = w · f(x)`, where `f(x) = x *
/// rsqrt(mean(x^2) + eps) * norm_w` when `norm` is `Some((norm_w, eps))` and `f(x) = x`
/// otherwise, followed by `epilogue` into `y` `[rows]`. `w` is `[rows, cols]` (`[2 * rows, cols]`
/// for [`Epilogue::SwiGlu`]).
pub fn matvec_fused_cpu(
    w: &[f32],
    x: &[f32],
    norm: Option<(&[f32], f32)>,
    epilogue: Epilogue,
    y: &mut [f32],
) {
    let cols = x.len();
    let rows = y.len();
    let fx: Vec<f32> = match norm {
        Some((nw, eps)) => rmsnorm_cpu(x, nw, cols, eps),
        None => x.to_vec(),
    };
    let n_w = if epilogue == Epilogue::SwiGlu {
        2 * rows
    } else {
        rows
    };
    let acc = matvec_cpu(&w[..n_w * cols], &fx, n_w, cols);
    for (r, yr) in y.iter_mut().enumerate() {
        match epilogue {
            Epilogue::Store => *yr = acc[r],
            Epilogue::Residual => *yr += acc[r],
            Epilogue::SwiGlu => *yr = acc[r] / (1.0 + (-acc[r]).exp()) * acc[r + rows],
        }
    }
}

/// CPU fused q/k norm + RoPE + KV write (`qk_norm_rope_kv.comp`) for one token at `pos`: `qkv`
/// is `[heads * hd | kv_heads * hd | kv_heads * hd]`; `qk_norm` is `Some((q_norm_w, k_norm_w,
/// eps))` for Qwen3's per-head RMSNorm. Writes k and v into row `pos` of the caches
/// (`[max_seq, kv_heads, hd]`) and returns the rotated q `[heads, hd]`.
pub fn qk_norm_rope_kv_cpu(
    qkv: &[f32],
    qk_norm: Option<(&[f32], &[f32], f32)>,
    table: &[f32],
    dims: AttnDims,
    pos: usize,
    k_cache: &mut [f32],
    v_cache: &mut [f32],
) -> Vec<f32> {
    let AttnDims {
        heads,
        kv_heads,
        head_dim: hd,
    } = dims;
    let (q_len, kv_len) = (heads * hd, kv_heads * hd);
    let mut q = qkv[..q_len].to_vec();
    let mut k = qkv[q_len..q_len + kv_len].to_vec();
    if let Some((qw, kw, eps)) = qk_norm {
        q = rmsnorm_cpu(&q, qw, hd, eps);
        k = rmsnorm_cpu(&k, kw, hd, eps);
    }
    // Position `pos` as the only token: rope_cpu's token 0 sits at pos0 = pos.
    rope_cpu(&mut q, heads, hd, pos, table);
    rope_cpu(&mut k, kv_heads, hd, pos, table);
    k_cache[pos * kv_len..(pos + 1) * kv_len].copy_from_slice(&k);
    v_cache[pos * kv_len..(pos + 1) * kv_len]
        .copy_from_slice(&qkv[q_len + kv_len..q_len + 2 * kv_len]);
    q
}

/// CPU split-K decode attention (`attn_split.comp`) of one query row `q` `[heads, hd]` over the
/// cached positions `lo..stop` (caches `[positions, kv_heads, hd]` in logical order): split `s`
/// covers `[lo + s * chunk, min(stop, lo + (s + 1) * chunk))` with `chunk = split_chunk(stop -
/// lo, n_splits)`. Returns `partial` `[heads, n_splits, hd + 2]` of (max scaled score m, sum of
/// exp(score - m), sum of exp(score - m) * v); an empty split is (-inf, 0, 0).
#[allow(clippy::too_many_arguments)]
pub fn attn_split_cpu(
    q: &[f32],
    k_cache: &[f32],
    v_cache: &[f32],
    dims: AttnDims,
    lo: usize,
    stop: usize,
    n_splits: usize,
    scale: f32,
) -> Vec<f32> {
    let AttnDims {
        heads,
        kv_heads,
        head_dim: hd,
    } = dims;
    let chunk = split_chunk(stop - lo, n_splits);
    let stride = hd + 2;
    let mut partial = vec![0.0; heads * n_splits * stride];
    for h in 0..heads {
        let kvh = h / dims.group();
        let qh = &q[h * hd..][..hd];
        for s in 0..n_splits {
            let begin = (lo + s * chunk).min(stop);
            let end = (begin + chunk).min(stop);
            let scores: Vec<f32> = (begin..end)
                .map(|j| {
                    scale
                        * qh.iter()
                            .zip(&k_cache[(j * kv_heads + kvh) * hd..][..hd])
                            .map(|(a, b)| a * b)
                            .sum::<f32>()
                })
                .collect();
            let m = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let out = &mut partial[(h * n_splits + s) * stride..][..stride];
            out[0] = m;
            for (j, sc) in (begin..end).zip(&scores) {
                let p = (sc - m).exp();
                out[1] += p;
                for (od, vd) in out[2..]
                    .iter_mut()
                    .zip(&v_cache[(j * kv_heads + kvh) * hd..][..hd])
                {
                    *od += p * vd;
                }
            }
        }
    }
    partial
}

/// CPU merge of split-K partials (`attn_merge.comp`): `out[h] = sum_s exp(m_s - M) o_s /
/// sum_s exp(m_s - M) l_s` with `M = max_s m_s`; empty splits weigh 0, and a head whose splits are
/// all empty gets 0. Returns `[heads, head_dim]`.
pub fn attn_merge_cpu(partial: &[f32], heads: usize, head_dim: usize, n_splits: usize) -> Vec<f32> {
    let stride = head_dim + 2;
    let mut out = vec![0.0; heads * head_dim];
    for (h, o) in out.chunks_mut(head_dim).enumerate() {
        let splits = &partial[h * n_splits * stride..(h + 1) * n_splits * stride];
        let big_m = splits
            .chunks(stride)
            .map(|s| s[0])
            .fold(f32::NEG_INFINITY, f32::max);
        let weight = |m: f32| {
            if m == f32::NEG_INFINITY {
                0.0
            } else {
                (m - big_m).exp()
            }
        };
        let total: f32 = splits.chunks(stride).map(|s| weight(s[0]) * s[1]).sum();
        if total <= 0.0 {
            continue;
        }
        for s in splits.chunks(stride) {
            let wgt = weight(s[0]) / total;
            for (od, sd) in o.iter_mut().zip(&s[2..]) {
                *od += wgt * sd;
            }
        }
    }
    out
}

/// CPU argmax (`argmax.comp`): the index of the largest value, the lowest on ties, and that
/// value. `None` for an empty slice.
pub fn argmax_cpu(x: &[f32]) -> Option<(u32, f32)> {
    let mut best: Option<(u32, f32)> = None;
    for (i, &v) in x.iter().enumerate() {
        if best.is_none_or(|(_, b)| v > b) {
            best = Some((i as u32, v));
        }
    }
    best
}

push_block! {
    /// `persistent.comp`: a whole decode step in one dispatch (see the shader's header for the
    /// phases and bindings; the model's shapes, the grid and the step's rows are specialization
    /// constants). `spin_limit`: spins before a grid-barrier wait is declared lost; `probe` = 1:
    /// only the residency probe's barriers. Groups: (the probed grid, 1, 1).
    PersistentPush { spin_limit: u32, probe: u32 } = 8
}
