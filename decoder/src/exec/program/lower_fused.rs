//! The fused token-region lowering: runs of ops matched and replaced by one fused kernel.

use super::*;

/// What a fused matvec computes, for its tuning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MvRole {
    Qkv,
    GateUp,
    Residual,
    Head,
}

/// A weight the fused matvec reads: its buffer and up to three stacked matrices in order, each
/// `(storage type, rows)` (`[q; k; v]`, `[gate; up]`, or one matrix).
struct Stacked {
    buf: Buf,
    parts: Vec<(WeightType, u32)>,
}

impl Stacked {
    fn one(buf: Buf, t: WeightType, rows: u32) -> Self {
        Stacked {
            buf,
            parts: vec![(t, rows)],
        }
    }

    /// The whole range, the segments' first rows and bytes (past the end where there are fewer
    /// than three), and the three types.
    fn layout(&self, cols: u32) -> (Range, [u32; 2], [u32; 2], [WeightType; 3]) {
        let (mut rows, mut bytes) = (0u32, 0u64);
        let (mut seg_row, mut seg_byte) = ([0u32; 2], [0u32; 2]);
        let last = self.parts.last().map_or(WeightType::F16, |p| p.0);
        let mut types = [last; 3];
        for (i, &(t, n)) in self.parts.iter().enumerate() {
            types[i.min(2)] = t;
            rows += n;
            bytes += matrix_bytes(t, n, cols);
            if i < 2 {
                seg_row[i] = rows;
                seg_byte[i] = bytes as u32;
            }
        }
        for i in self.parts.len()..2 {
            seg_row[i] = rows;
            seg_byte[i] = bytes as u32;
        }
        (r(self.buf, 0, bytes), seg_row, seg_byte, types)
    }
}

impl Lower<'_> {
    #[allow(clippy::too_many_arguments)]
    fn matvec_fused(
        &mut self,
        label: String,
        region: Region,
        w: Stacked,
        x: Range,
        y: Bind,
        norm: Option<Range>,
        epilogue: u32,
        rows: u32,
        cols: u32,
        role: MvRole,
    ) {
        let norm_w = norm.unwrap_or(r(Buf::FinalNorm, 0, self.s.hidden as u64 * F32));
        let (w, seg_row, seg_byte, types) = w.layout(cols);
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
            seg_row,
            seg_byte,
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
        let sp = spec(&[
            (id::WG, wg),
            (id::ROWS, per),
            (id::NORM, norm.is_some() as u32),
            (id::EPILOGUE, epilogue),
            (id::WTYPE, types[0].spec_id()),
            (id::WTYPE1, types[1].spec_id()),
            (id::WTYPE2, types[2].spec_id()),
        ]);
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

    /// Fused lowering of one decode token: matches runs of ops and emits one kernel per run.
    pub(in crate::exec) fn lower_fused(&mut self, ops: &[Op], logits_readback: bool) {
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
                    let t = self.w.layer(l);
                    let w = Stacked {
                        buf: Buf::Wqkv(l),
                        parts: vec![(t.q, qd), (t.k, s.kv_dim()), (t.v, s.kv_dim())],
                    };
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
                    let w = Stacked::one(Buf::Wo(l), self.w.layer(l).o, h);
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
                    let t = self.w.layer(l);
                    let w = Stacked {
                        buf: Buf::WGateUp(l),
                        parts: vec![(t.gate, inter), (t.up, inter)],
                    };
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
                    let w = Stacked::one(Buf::WDown(l), self.w.layer(l).down, h);
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
                    let w = Stacked::one(Buf::LmHead, self.w.lm_head, s.vocab);
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
                    let sp = spec(&[(id::WG, 256)]);
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
