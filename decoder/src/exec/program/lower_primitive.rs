//! The generic-primitive lowering: one dispatch (or transfer copy) per op.

use super::*;

impl Lower<'_> {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn rmsnorm(
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
            spec(&[(id::WG, wg)]),
            push,
            Grid::Fixed([rows, 1, 1]),
            binds,
            facts,
        );
    }

    /// `y = W x` for the `rows x cols` weight `w` stored as `wt`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn matvec(
        &mut self,
        label: String,
        region: Region,
        (w, wt): (Range, WeightType),
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
                    spec(&[(id::WG, 64), (id::WTYPE, wt.spec_id())]),
                    Grid::Fixed([rows.div_ceil(32), self.n.div_ceil(32), 1]),
                )
            } else {
                let (wg, per) = (self.t.wg, self.t.matvec_rows);
                (
                    Shader::Matvec,
                    spec(&[(id::WG, wg), (id::ROWS, per), (id::WTYPE, wt.spec_id())]),
                    Grid::Fixed([rows.div_ceil(per), self.n, 1]),
                )
            };
        self.dispatch(
            label, "matvec", region, shader, sp, push, grid, binds, facts,
        );
    }

    /// The `hidden x cols` weight `w` times the first `cols` values of `x`, into `Tmp` (which the
    /// residual add after it reads): the attention output and down projections.
    fn proj_to_tmp(
        &mut self,
        label: String,
        region: Region,
        (w, wt): (Buf, WeightType),
        x: Buf,
        cols: u32,
    ) {
        let h = self.s.hidden;
        let (w, x, y) = (
            r(w, 0, matrix_bytes(wt, h, cols)),
            self.act(x, cols),
            self.act(Buf::Tmp, h),
        );
        self.matvec(label, region, (w, wt), x, y, h, cols);
    }

    /// Generic-primitive lowering of one op: its own dispatches (or transfer copy).
    pub(super) fn lower_primitive(&mut self, op: Op) {
        let h = self.s.hidden;
        match op {
            Op::Embed => self.embed(),
            Op::AttnNorm(l) => {
                let w = r(Buf::AttnNorm(l), 0, h as u64 * F32);
                self.layer_norm(format!("L{l}.attn_norm"), Region::Attn(l), w);
            }
            Op::QkvProj(l) => self.qkv_proj(l),
            Op::QkNorm(l) => self.qk_norm(l),
            Op::Rope(l) => self.rope(l),
            Op::KvAppend(l) => self.kv_append(l),
            Op::Attention(l) => match self.kind {
                StepKind::Prefill => self.attention_prefill(l),
                StepKind::Decode => self.attention_primitive(l),
            },
            Op::OProj(l) => {
                let label = format!("L{l}.o_proj");
                let wt = self.w.layer(l).o;
                self.proj_to_tmp(
                    label,
                    Region::Attn(l),
                    (Buf::Wo(l), wt),
                    Buf::Attn,
                    self.s.q_dim(),
                );
            }
            Op::AttnResidual(l) => self.add(format!("L{l}.attn_residual"), Region::Attn(l)),
            Op::MlpNorm(l) => {
                let w = r(Buf::MlpNorm(l), 0, h as u64 * F32);
                self.layer_norm(format!("L{l}.mlp_norm"), Region::Mlp(l), w);
            }
            Op::GateUpProj(l) => self.gate_up_proj(l),
            Op::SiluMul(l) => self.silu_mul(l),
            Op::DownProj(l) => {
                let label = format!("L{l}.down_proj");
                let inter = self.s.intermediate;
                let wt = self.w.layer(l).down;
                self.proj_to_tmp(label, Region::Mlp(l), (Buf::WDown(l), wt), Buf::Act, inter);
            }
            Op::MlpResidual(l) => self.add(format!("L{l}.mlp_residual"), Region::Mlp(l)),
            Op::FinalNorm => self.final_norm(),
            Op::LmHead => self.lm_head(),
            Op::Argmax => self.logits_readback(),
        }
    }

    /// RMSNorm of every row of the residual `X` into `H` with weight `w`.
    fn layer_norm(&mut self, label: String, region: Region, w: Range) {
        let (h, n) = (self.s.hidden, self.n);
        let (x, y) = (self.act(Buf::X, h), self.act(Buf::H, h));
        self.rmsnorm(label, region, x, w, y, h, n);
    }

    /// The q, k and v projections of `H`, three matvecs over the stacked `Wqkv` (into the raw
    /// q and k where the model norms them).
    fn qkv_proj(&mut self, l: u32) {
        let s = *self.s;
        let (h, qd, kvd) = (s.hidden, s.q_dim(), s.kv_dim());
        let (qo, ko) = if s.qk_norm {
            (Buf::QRaw, Buf::KRaw)
        } else {
            (Buf::Q, Buf::K)
        };
        let hx = self.act(Buf::H, h);
        let t = self.w.layer(l);
        let outs = [
            ("q_proj", t.q, qd, self.act(qo, qd)),
            ("k_proj", t.k, kvd, self.act(ko, kvd)),
            ("v_proj", t.v, kvd, self.act(Buf::V, kvd)),
        ];
        // The three matrices lie one after another in the stacked buffer, each in its own type.
        let mut offset = 0;
        for (name, wt, rows, y) in outs {
            let w = r(Buf::Wqkv(l), offset, matrix_bytes(wt, rows, h));
            offset += w.bytes;
            self.matvec(
                format!("L{l}.{name}"),
                Region::Attn(l),
                (w, wt),
                hx,
                y,
                rows,
                h,
            );
        }
    }

    /// Qwen3's per-head RMSNorm of the raw q and k.
    fn qk_norm(&mut self, l: u32) {
        let s = *self.s;
        let (n, qd, kvd, hd) = (self.n, s.q_dim(), s.kv_dim(), s.head_dim);
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

    /// RoPE of q and k in place, one dispatch each.
    fn rope(&mut self, l: u32) {
        let s = *self.s;
        let (n, hd) = (self.n, s.head_dim);
        for (name, buf, heads) in [("q_rope", Buf::Q, s.heads), ("k_rope", Buf::K, s.kv_heads)] {
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
            let sp = spec(&[(id::WG, self.t.wg)]);
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

    /// The gate and up projections of `H`: two matvecs over the stacked `WGateUp`.
    fn gate_up_proj(&mut self, l: u32) {
        let (h, inter) = (self.s.hidden, self.s.intermediate);
        let t = self.w.layer(l);
        let gate = matrix_bytes(t.gate, inter, h);
        let hx = self.act(Buf::H, h);
        let (g, u) = (self.act(Buf::Gate, inter), self.act(Buf::Up, inter));
        self.matvec(
            format!("L{l}.gate_proj"),
            Region::Mlp(l),
            (r(Buf::WGateUp(l), 0, gate), t.gate),
            hx,
            g,
            inter,
            h,
        );
        self.matvec(
            format!("L{l}.up_proj"),
            Region::Mlp(l),
            (r(Buf::WGateUp(l), gate, matrix_bytes(t.up, inter, h)), t.up),
            hx,
            u,
            inter,
            h,
        );
    }

    /// `Act = silu(Gate) * Up`.
    fn silu_mul(&mut self, l: u32) {
        let (n, inter) = (self.n, self.s.intermediate);
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
        let sp = spec(&[(id::WG, self.t.wg)]);
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

    /// The final RMSNorm of the rows that feed the head: a prompt chunk's last row, a decode
    /// step's every row.
    fn final_norm(&mut self) {
        let (h, n) = (self.s.hidden, self.n);
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

    /// The lm_head matvec over the vocabulary, for the head's rows.
    fn lm_head(&mut self) {
        let s = *self.s;
        let h = s.hidden;
        let rows = self.head_rows();
        let wt = self.w.lm_head;
        let (w, x) = (
            r(Buf::LmHead, 0, matrix_bytes(wt, s.vocab, h)),
            r(Buf::H, 0, rows as u64 * h as u64 * F32),
        );
        let y = r(Buf::Logits, 0, rows as u64 * s.vocab as u64 * F32);
        let saved = self.n;
        self.n = rows;
        self.matvec("lm_head".into(), Region::Head, (w, wt), x, y, s.vocab, h);
        self.n = saved;
    }

    pub(super) fn embed(&mut self) {
        let (n, h) = (self.n, self.s.hidden);
        let ids = r(Buf::Ids, 0, n as u64 * 4);
        let wt = self.w.embed;
        let table = r(Buf::Embed, 0, matrix_bytes(wt, self.s.vocab, h));
        let out = self.act(Buf::X, h);
        let binds = vec![read(ids), read(table), write(out)];
        let facts = OpInfo {
            bytes_read: ids.bytes + matrix_bytes(wt, n, h),
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
        let sp = spec(&[(id::WG, self.t.wg), (id::WTYPE, wt.spec_id())]);
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

    pub(super) fn add(&mut self, label: String, region: Region) {
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
        let sp = spec(&[(id::WG, self.t.wg)]);
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
}
