//! The lowering of attention and the KV cache, for every layout: the KV writes (the primitive
//! append or the fused q/k-norm + RoPE + KV kernel), the paged gather, and the three attention
//! kernels (primitive scores + softmax + weighted sum for decode, split-K + merge for fused
//! decode, the tiled prompt attention for prompt chunks).
//!
//! Every kernel that touches a cache takes the layout as the specialization constants of
//! `kv.glsl` ([`KvGeometry::spec`]) and binds the block tables, so one lowering serves the contiguous,
//! paged and rotating layouts. With `--paged-attention gather`, attention first copies the
//! positions it attends into a contiguous scratch ([`Buf::KScratch`], [`Buf::VScratch`]) with the
//! `kv_gather` kernel (its own op label, with its bytes) and then reads the scratch as a
//! contiguous cache.

use profiler::trace::OpInfo;

use super::kernels::*;
use super::program::{Buf, F32, Grid, Lower, Range, Region, StepKind, r, read, rw, spec, write};
use crate::kv::KvGeometry;
use crate::shaders::Shader;
use crate::shaders::spec as id;

impl Lower<'_> {
    /// Specialization constants: `base` by id, and the layout of `geo` (`kv.glsl`).
    fn kv_spec(geo: &KvGeometry, base: &[(usize, u32)]) -> [u32; crate::vk::SPEC_CONSTANTS] {
        let mut pairs = base.to_vec();
        pairs.extend(geo.spec());
        spec(&pairs)
    }

    fn kv_table(&self) -> Range {
        let g = &self.kv.geo;
        r(
            Buf::KvTable,
            0,
            (g.seqs as u64 * g.table_stride as u64 * 4).max(16),
        )
    }

    /// Bytes of one K (or V) row under `geo`.
    fn kv_row_bytes(&self, geo: &KvGeometry) -> u64 {
        self.s.kv_dim() as u64 * geo.dtype.bytes()
    }

    /// Layer `l`'s K and V caches.
    fn caches(&self, l: u32) -> (Range, Range) {
        let bytes = self.kv.geo.buffer_bytes(self.s.kv_dim());
        (r(Buf::KCache(l), 0, bytes), r(Buf::VCache(l), 0, bytes))
    }

    /// What attention of layer `l` reads: the caches, or, under the paged gather, the scratch
    /// after a `kv_gather` of the positions this step attends (`whole_step`: one range for a
    /// prompt chunk; else one per decode row).
    fn attention_source(&mut self, l: u32, whole_step: bool) -> (Range, Range, KvGeometry) {
        let (k, v) = self.caches(l);
        let Some(scratch) = self.kv.scratch else {
            return (k, v, self.kv.geo);
        };
        let kvd = self.s.kv_dim();
        let bytes = scratch.buffer_bytes(kvd);
        let (ks, vs) = (r(Buf::KScratch, 0, bytes), r(Buf::VScratch, 0, bytes));
        let row = self.kv_row_bytes(&self.kv.geo);
        let binds = vec![
            read(self.params()),
            read(self.kv_table()),
            read(k),
            read(v),
            write(ks),
            write(vs),
        ];
        // Per attended position: a K row and a V row read from the blocks and written out.
        let facts = OpInfo {
            bytes_read_per_kv: 2 * row,
            bytes_written_per_kv: 2 * row,
            ..Default::default()
        };
        let push = KvGatherPush {
            row_words: (row / 16) as u32,
            max_seq: self.s.max_seq,
            ..Default::default()
        }
        .bytes();
        let groups_z = if whole_step { 1 } else { self.n };
        let sp = Self::kv_spec(&self.kv.geo, &[(id::WG, 64), (id::MODE, whole_step as u32)]);
        self.dispatch(
            format!("L{l}.kv_gather"),
            "kv",
            Region::Attn(l),
            Shader::KvGather,
            sp,
            push,
            Grid::Fixed([self.s.max_seq.div_ceil(16), 1, groups_z]),
            binds,
            facts,
        );
        (ks, vs, scratch)
    }

    /// The primitive KV append of layer `l`: the step's K and V rows into their slots.
    pub(super) fn kv_append(&mut self, l: u32) {
        let kvd = self.s.kv_dim();
        let (kc, vc) = self.caches(l);
        let row = self.kv_row_bytes(&self.kv.geo);
        for (name, src, dst) in [("k_append", Buf::K, kc), ("v_append", Buf::V, vc)] {
            let src = self.act(src, kvd);
            let binds = vec![
                read(self.params()),
                read(src),
                read(self.kv_table()),
                rw(dst),
            ];
            let facts = OpInfo {
                bytes_read: src.bytes,
                bytes_written: self.n as u64 * row,
                ..Default::default()
            };
            let push = KvAppendPush {
                kv_dim: kvd,
                ..Default::default()
            }
            .bytes();
            let sp = Self::kv_spec(&self.kv.geo, &[(id::WG, self.t.wg)]);
            self.dispatch(
                format!("L{l}.{name}"),
                "kv",
                Region::Attn(l),
                Shader::KvAppend,
                sp,
                push,
                Grid::Fixed([kvd.div_ceil(self.t.wg), self.n, 1]),
                binds,
                facts,
            );
        }
    }

    /// The tiled prompt attention of layer `l` over the chunk's rows.
    pub(super) fn attention_prefill(&mut self, l: u32) {
        debug_assert_eq!(self.kind, StepKind::Prefill);
        let s = *self.s;
        let (qd, kvd, hd) = (s.q_dim(), s.kv_dim(), s.head_dim);
        let (k, v, geo) = self.attention_source(l, true);
        let q = self.act(Buf::Q, qd);
        let out = self.act(Buf::Attn, qd);
        let binds = vec![
            read(self.params()),
            read(q),
            read(self.kv_table()),
            read(k),
            read(v),
            write(out),
        ];
        let tq = prefill_tokens_per_group_rows(s.heads / s.kv_heads, self.t.prefill_max_r);
        let tiles = self.n.div_ceil(tq);
        // Each query tile reads the K and V rows it attends once.
        let facts = OpInfo {
            bytes_read: q.bytes,
            bytes_written: out.bytes,
            bytes_read_per_kv: tiles as u64 * 2 * kvd as u64 * geo.dtype.bytes() / self.n as u64,
            flops_per_kv: 4 * qd as u64,
            ..Default::default()
        };
        let push = AttnPrefillPush {
            heads: s.heads,
            kv_heads: s.kv_heads,
            head_dim: hd,
            scale: 1.0 / (hd as f32).sqrt(),
        }
        .bytes();
        // GPUs: the tiled kernel; CPU drivers: one invocation per row (see the shaders).
        let (shader, sp, grid) = if self.t.prefill_rows {
            (
                Shader::AttnPrefillRows,
                Self::kv_spec(&geo, &[(id::WG, 64)]),
                Grid::Fixed([(self.n * s.heads).div_ceil(64), 1, 1]),
            )
        } else {
            (
                Shader::AttnPrefill,
                Self::kv_spec(
                    &geo,
                    &[
                        (id::WG, self.t.attn_wg.max(64)),
                        (id::R_SPEC, self.t.prefill_max_r),
                    ],
                ),
                Grid::Fixed([tiles, s.kv_heads, 1]),
            )
        };
        self.dispatch(
            format!("L{l}.attn_prefill"),
            "attention",
            Region::Attn(l),
            shader,
            sp,
            push,
            grid,
            binds,
            facts,
        );
    }

    /// Primitive decode attention of layer `l`: scores, softmax and weighted sum, one row per
    /// sequence.
    pub(super) fn attention_primitive(&mut self, l: u32) {
        let s = *self.s;
        let n = self.n;
        let (qd, kvd, hd) = (s.q_dim(), s.kv_dim(), s.head_dim);
        let (k, v, geo) = self.attention_source(l, false);
        let row = kvd as u64 * geo.dtype.bytes();
        let stride = s.max_seq;
        let scale = 1.0 / (hd as f32).sqrt();
        let q = self.act(Buf::Q, qd);
        let scores = r(
            Buf::Scores,
            0,
            n as u64 * s.heads as u64 * stride as u64 * F32,
        );
        let wg = self.t.wg;
        // Scores: per attended position, one dot product per query head.
        let binds = vec![
            read(self.params()),
            read(q),
            read(self.kv_table()),
            read(k),
            write(scores),
        ];
        let facts = OpInfo {
            bytes_read: q.bytes,
            bytes_read_per_kv: row,
            bytes_written_per_kv: s.heads as u64 * F32,
            flops_per_kv: 2 * qd as u64,
            ..Default::default()
        };
        let push = ScoresPush {
            heads: s.heads,
            kv_heads: s.kv_heads,
            head_dim: hd,
            stride,
            scale,
            ..Default::default()
        }
        .bytes();
        let grid = Grid::KvScaled {
            per: wg,
            y: s.heads,
            z: n,
        };
        self.dispatch(
            format!("L{l}.attn_scores"),
            "attention",
            Region::Attn(l),
            Shader::AttnScores,
            Self::kv_spec(&geo, &[(id::WG, wg)]),
            push,
            grid,
            binds,
            facts,
        );
        // Softmax over each row.
        let binds = vec![read(self.params()), rw(scores)];
        let per_kv = s.heads as u64 * F32;
        let facts = OpInfo {
            bytes_read_per_kv: per_kv,
            bytes_written_per_kv: per_kv,
            flops_per_kv: 5 * s.heads as u64,
            ..Default::default()
        };
        let push = SoftmaxPush {
            heads: s.heads,
            stride,
            pad0: 0,
            pad1: 0,
        }
        .bytes();
        self.dispatch(
            format!("L{l}.softmax"),
            "attention",
            Region::Attn(l),
            Shader::Softmax,
            spec(&[(id::WG, wg)]),
            push,
            Grid::Fixed([s.heads, n, 1]),
            binds,
            facts,
        );
        // Weighted sum of V.
        let out = self.act(Buf::Attn, qd);
        let binds = vec![
            read(self.params()),
            read(scores),
            read(self.kv_table()),
            read(v),
            write(out),
        ];
        let facts = OpInfo {
            bytes_written: out.bytes,
            bytes_read_per_kv: per_kv + row,
            flops_per_kv: 2 * qd as u64,
            ..Default::default()
        };
        let push = WsumPush {
            heads: s.heads,
            kv_heads: s.kv_heads,
            head_dim: hd,
            stride,
        }
        .bytes();
        self.dispatch(
            format!("L{l}.attn_wsum"),
            "attention",
            Region::Attn(l),
            Shader::AttnWsum,
            Self::kv_spec(&geo, &[(id::WG, wg)]),
            push,
            Grid::Fixed([hd.div_ceil(wg), s.heads, n]),
            binds,
            facts,
        );
    }

    /// The fused q/k norm + RoPE + KV write of layer `l` for every decode row.
    pub(super) fn qk_norm_rope_kv(&mut self, l: u32) {
        let s = *self.s;
        let (qd, kvd, hd) = (s.q_dim(), s.kv_dim(), s.head_dim);
        let (kc, vc) = self.caches(l);
        let qkv = self.act(Buf::Qkv, s.qkv_rows());
        let (qn, kn) = if s.qk_norm {
            (
                r(Buf::QNorm(l), 0, hd as u64 * F32),
                r(Buf::KNorm(l), 0, hd as u64 * F32),
            )
        } else {
            (
                r(Buf::AttnNorm(l), 0, hd as u64 * F32),
                r(Buf::AttnNorm(l), 0, hd as u64 * F32),
            )
        };
        let table = r(Buf::RopeTable, 0, s.max_seq as u64 * hd as u64 * F32);
        let binds = vec![
            read(self.params()),
            read(qkv),
            read(qn),
            read(kn),
            read(table),
            write(self.act(Buf::Q, qd)),
            read(self.kv_table()),
            rw(kc),
            rw(vc),
        ];
        let n = self.n as u64;
        let facts = OpInfo {
            bytes_read: qkv.bytes + n * (qd + kvd) as u64 * F32,
            bytes_written: n * (qd as u64 * F32 + 2 * kvd as u64 * self.kv.geo.dtype.bytes()),
            flops: n * 8 * (qd + kvd) as u64,
            ..Default::default()
        };
        let push = QkNormRopeKvPush {
            heads: s.heads,
            kv_heads: s.kv_heads,
            head_dim: hd,
            eps: s.eps,
        }
        .bytes();
        let sp = Self::kv_spec(
            &self.kv.geo,
            &[
                (id::WG, hd.next_power_of_two().clamp(32, 128) / 2),
                (id::QK_NORM, s.qk_norm as u32),
            ],
        );
        self.dispatch(
            format!("L{l}.qk_norm_rope_kv"),
            "rope",
            Region::Attn(l),
            Shader::QkNormRopeKv,
            sp,
            push,
            Grid::Fixed([s.heads + s.kv_heads, self.n, 1]),
            binds,
            facts,
        );
    }

    /// Fused decode attention of layer `l`: split-K over each row's range, then the merge.
    pub(super) fn attention_split(&mut self, l: u32) {
        let s = *self.s;
        let (qd, kvd, hd) = (s.q_dim(), s.kv_dim(), s.head_dim);
        let (k, v, geo) = self.attention_source(l, false);
        let splits = self.t.n_splits;
        let n = self.n as u64;
        let partial = r(
            Buf::Partial,
            0,
            n * s.heads as u64 * splits as u64 * (hd as u64 + 2) * F32,
        );
        let q = self.act(Buf::Q, qd);
        let binds = vec![
            read(self.params()),
            read(q),
            read(self.kv_table()),
            read(k),
            read(v),
            write(partial),
        ];
        let facts = OpInfo {
            bytes_read: q.bytes,
            bytes_written: partial.bytes,
            bytes_read_per_kv: 2 * kvd as u64 * geo.dtype.bytes(),
            flops_per_kv: 4 * qd as u64,
            ..Default::default()
        };
        let push = AttnSplitPush {
            heads: s.heads,
            kv_heads: s.kv_heads,
            head_dim: hd,
            n_splits: splits,
            scale: 1.0 / (hd as f32).sqrt(),
            ..Default::default()
        }
        .bytes();
        let (shader, sp, groups) = if self.t.attn_sg > 0 {
            // Four subgroups (at least 64 invocations) per workgroup, one split each.
            let sg = self.t.attn_sg;
            let wg = (4 * sg).max(64);
            let sp = Self::kv_spec(
                &geo,
                &[
                    (id::WG, wg),
                    (id::KCOOP, self.t.attn_kcoop),
                    (id::SG, sg),
                    (id::UNROLL, self.t.attn_unroll.min(sg)),
                ],
            );
            (Shader::AttnSplitSg, sp, splits.div_ceil(wg / sg))
        } else {
            let sp = Self::kv_spec(
                &geo,
                &[
                    (id::WG, self.t.attn_wg),
                    (id::TILE, self.t.attn_tile),
                    (id::PREFETCH, self.t.attn_prefetch),
                ],
            );
            (Shader::AttnSplit, sp, splits)
        };
        self.dispatch(
            format!("L{l}.attn_split"),
            "attention",
            Region::Attn(l),
            shader,
            sp,
            push,
            Grid::Fixed([groups, s.kv_heads, self.n]),
            binds,
            facts,
        );
        let out = self.act(Buf::Attn, qd);
        let binds = vec![read(partial), write(out)];
        let facts = Self::stream_facts(&binds, 3 * partial.bytes / F32);
        let push = AttnMergePush {
            heads: s.heads,
            head_dim: hd,
            n_splits: splits,
            pad0: 0,
        }
        .bytes();
        // (dimension, lane) pairs: four or more lanes per dimension for head_dim <= 128.
        let sp = spec(&[(id::WG, (4 * hd).next_power_of_two().clamp(64, 512))]);
        self.dispatch(
            format!("L{l}.attn_merge"),
            "attention",
            Region::Attn(l),
            Shader::AttnMerge,
            sp,
            push,
            Grid::Fixed([s.heads, self.n, 1]),
            binds,
            facts,
        );
    }
}

/// Bytes of K and V a step of `rows` attending `kv_positions` positions in total copies with the
/// paged gather (0 for the other paths), for every layer: the counter behind "bytes copied".
pub fn gather_bytes(layers: u32, kv_dim: u32, dtype_bytes: u64, kv_positions: u64) -> u64 {
    // Read from the blocks and written to the scratch, K and V.
    layers as u64 * kv_positions * 2 * kv_dim as u64 * dtype_bytes
}
