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

    #[allow(clippy::too_many_arguments)]
    pub(super) fn matvec(
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
                    spec(&[(id::WG, 64)]),
                    Grid::Fixed([rows.div_ceil(32), self.n.div_ceil(32), 1]),
                )
            } else {
                let (wg, per) = (self.t.wg, self.t.matvec_rows);
                (
                    Shader::Matvec,
                    spec(&[(id::WG, wg), (id::ROWS, per)]),
                    Grid::Fixed([rows.div_ceil(per), self.n, 1]),
                )
            };
        self.dispatch(
            label, "matvec", region, shader, sp, push, grid, binds, facts,
        );
    }

    pub(super) fn lower_primitive(&mut self, op: Op) {
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

    pub(super) fn embed(&mut self) {
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
        let sp = spec(&[(id::WG, self.t.wg)]);
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
