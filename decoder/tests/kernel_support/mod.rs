//! Helpers shared by the kernel tests (`tests/kernel_*.rs`): launching one kernel with the
//! validation layer on, params bindings with rows, the KV cache layouts every cache-addressing
//! kernel runs over, f16-representable inputs, and tolerance checks that say what failed.
#![allow(dead_code)]

use decoder::exec::harness::{Binding, Launch, run_kernel};
use decoder::exec::kernels::{
    AttnDims, RowParams, TokenParams, attention_rows_cpu, params_bytes, prompt_rows,
};
use decoder::kv::{BlockPool, BlockTables, KvConfig, KvDtype, KvGeometry, KvKind, window_start};
use decoder::shaders::Shader;
use decoder::vk::{Gpu, SPEC_CONSTANTS};

/// Runs `shader` once and returns the read-back bindings (in binding order).
pub fn launch(
    gpu: &Gpu,
    shader: Shader,
    push: Vec<u8>,
    groups: [u32; 3],
    spec: &[(usize, u32)],
    bindings: &[Binding],
) -> Vec<Option<Vec<u8>>> {
    // Specialization constants by id (`decoder::shaders::spec::NAME`), the others 0.
    let mut s = [0u32; SPEC_CONSTANTS];
    for &(id, v) in spec {
        s[id] = v;
    }
    let launch = Launch {
        shader,
        push,
        groups,
        spec: s,
    };
    run_kernel(gpu, &launch, bindings).unwrap_or_else(|e| panic!("run {}: {e}", shader.name()))
}

/// Binding `i` of a launch's results as f32.
pub fn out_f32(out: &[Option<Vec<u8>>], i: usize) -> Vec<f32> {
    decoder::exec::harness::f32s(out[i].as_ref().expect("binding read back"))
}

/// Binding `i` of a launch's results as u32.
pub fn out_u32(out: &[Option<Vec<u8>>], i: usize) -> Vec<u32> {
    out[i]
        .as_ref()
        .expect("binding read back")
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Values in [-scale, scale) rounded to f16, so an f16 upload holds them exactly.
pub fn f16_vec(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    crate::common::rand_vec(n, seed)
        .iter()
        .map(|v| half::f16::from_f32(v * scale).to_f32())
        .collect()
}

/// Asserts `|got[i] - want[i]| <= tol * scale[i]` for every i. `scale` is the magnitude the
/// result was computed from (e.g. the sum of |terms| of a dot product), so `tol` bounds the
/// relative rounding of an f32 sum taken in another order.
pub fn assert_close_scaled(got: &[f32], want: &[f32], scale: &[f32], tol: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for i in 0..got.len() {
        let allowed = tol * scale[i];
        let err = (got[i] - want[i]).abs();
        // Written so that a NaN on either side fails.
        assert!(
            err <= allowed,
            "{what}: element {i}: got {} want {} (|diff| {err} > {allowed})",
            got[i],
            want[i]
        );
    }
}

/// Asserts `|got[i] - want[i]| <= atol + rtol * |want[i]|` for every i.
pub fn assert_close(got: &[f32], want: &[f32], atol: f32, rtol: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for i in 0..got.len() {
        let allowed = atol + rtol * want[i].abs();
        let err = (got[i] - want[i]).abs();
        assert!(
            err <= allowed,
            "{what}: element {i}: got {} want {} (|diff| {err} > {allowed})",
            got[i],
            want[i]
        );
    }
}

/// Asserts bitwise equality (values that are computed exactly, e.g. f16 widened to f32).
pub fn assert_exact(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            g.to_bits() == w.to_bits(),
            "{what}: element {i}: got {g} want {w}"
        );
    }
}

/// RoPE inverse frequencies for theta = 10000, as the model config computes them unscaled.
pub fn inv_freq(head_dim: usize) -> Vec<f32> {
    (0..head_dim / 2)
        .map(|i| (1.0 / 10000f64.powf(2.0 * i as f64 / head_dim as f64)) as f32)
        .collect()
}

/// The attention shapes every attention test covers: GQA ratios 1, 3, 4 and 8 with head_dim 64
/// and 128, as (heads, kv_heads, head_dim).
pub const ATTN_SHAPES: [(usize, usize, usize); 5] = [
    (2, 2, 64),
    (6, 2, 128),
    (4, 1, 64),
    (8, 1, 128),
    (16, 2, 64),
];

/// A KV cache `[max_seq, kv_heads, head_dim]` with values in [-1, 1) for positions `< filled` and
/// NaN after them, so a kernel that reads past the attended positions poisons its output.
pub fn kv_cache(max_seq: usize, row: usize, filled: usize, seed: u64) -> Vec<f32> {
    let mut c = crate::common::rand_vec(max_seq * row, seed);
    for v in &mut c[filled * row..] {
        *v = f32::NAN;
    }
    c
}

/// Row `t` of a step: position `pos` of sequence `seq`, attending positions `lo..=pos`.
pub fn row(seq: usize, pos: usize, lo: usize) -> RowParams {
    assert!(lo <= pos, "row of sequence {seq}: lo {lo} > pos {pos}");
    RowParams {
        pos: pos as u32,
        seq: seq as u32,
        lo: lo as u32,
        pad0: 0,
    }
}

/// The params binding of a step with explicit rows: the header (`pos0` the first row's position,
/// `kv_len` the largest `pos + 1`, `n_seqs` the distinct sequences) followed by the rows.
pub fn params_rows(rows: &[RowParams]) -> Binding {
    let mut seqs: Vec<u32> = rows.iter().map(|r| r.seq).collect();
    seqs.sort_unstable();
    seqs.dedup();
    let header = TokenParams {
        pos0: rows.first().map_or(0, |r| r.pos),
        n_tokens: rows.len() as u32,
        kv_len: rows.iter().map(|r| r.pos + 1).max().unwrap_or(0),
        n_seqs: seqs.len() as u32,
    };
    Binding {
        bytes: params_bytes(&header, rows),
        read_back: false,
    }
}

/// The params binding of a prompt-like step: `n_tokens` consecutive positions `pos0..` of
/// sequence 0, each attending from position 0, with the header's `kv_len` as given.
pub fn params(pos0: usize, n_tokens: usize, kv_len: usize) -> Binding {
    let header = TokenParams {
        pos0: pos0 as u32,
        n_tokens: n_tokens as u32,
        kv_len: kv_len as u32,
        n_seqs: 1,
    };
    let rows = prompt_rows(0, pos0 as u32, n_tokens as u32, 0);
    Binding {
        bytes: params_bytes(&header, &rows),
        read_back: false,
    }
}

/// A KV cache layout that the kernel tests run every cache-addressing kernel over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvCase {
    pub kind: KvKind,
    pub dtype: KvDtype,
    /// Positions per block (paged).
    pub block: u32,
    /// Shuffled pool, so block tables are scattered (paged).
    pub fragment: bool,
}

impl KvCase {
    pub fn name(&self) -> String {
        match self.kind {
            KvKind::Paged => format!(
                "paged:{}{} {}",
                self.block,
                if self.fragment { " fragmented" } else { "" },
                self.dtype.name()
            ),
            _ => format!("{} {}", self.kind.name(), self.dtype.name()),
        }
    }

    pub fn rotating(&self) -> bool {
        self.kind == KvKind::Rotating
    }
}

/// The layouts: contiguous f32 and f16, paged blocks of 16 (f16) and 32 (f32) on fragmented
/// pools, and a rotating f16 ring (the tests give it a window and positions past the ring).
pub const KV_CASES: [KvCase; 5] = [
    KvCase {
        kind: KvKind::Contiguous,
        dtype: KvDtype::F32,
        block: 16,
        fragment: false,
    },
    KvCase {
        kind: KvKind::Contiguous,
        dtype: KvDtype::F16,
        block: 16,
        fragment: false,
    },
    KvCase {
        kind: KvKind::Paged,
        dtype: KvDtype::F16,
        block: 16,
        fragment: true,
    },
    KvCase {
        kind: KvKind::Paged,
        dtype: KvDtype::F32,
        block: 32,
        fragment: true,
    },
    KvCase {
        kind: KvKind::Rotating,
        dtype: KvDtype::F16,
        block: 16,
        fragment: false,
    },
];

/// Random logical caches, `[lens[s], row]` per sequence, values in [-scale, scale).
pub fn logical_caches(lens: &[usize], row: usize, seed: u64, scale: f32) -> Vec<Vec<f32>> {
    lens.iter()
        .enumerate()
        .map(|(s, &len)| {
            crate::common::rand_vec(len * row, seed + 7919 * s as u64)
                .iter()
                .map(|v| v * scale)
                .collect()
        })
        .collect()
}

/// One layer's K (or V) buffer under a [`KvCase`], built from logical per-sequence caches: the
/// physical binding (every slot that holds no position is NaN, so a stray read poisons the
/// result), the block-table binding, specialization constants 4..=7, and the way back from a
/// read-back physical buffer to logical positions (checking that no unused slot was written).
///
/// Sequence `s` has written positions `0..lens[s]`. The contiguous and paged layouts hold all of
/// them; the rotating ring of `window + step` slots holds the last ones only ([`KvLayout::held`]),
/// so a test keeps each row's range within them (`lo = window_start(pos, window)`).
pub struct KvLayout {
    pub case: KvCase,
    pub geo: KvGeometry,
    /// Elements per slot (`kv_heads * head_dim`).
    row: usize,
    lens: Vec<usize>,
    /// The table the kernels read: entries a sequence has not allocated point at a poison block
    /// (all NaN) that no sequence holds.
    table: Vec<u32>,
    /// The (sequence, position) each physical slot holds.
    owner: Vec<Option<(usize, usize)>>,
}

impl KvLayout {
    /// The layout of `case` for sequences of up to `max_seq` positions that have written
    /// `0..lens[s]`; `step` is the most positions one step writes and `window` the sliding window
    /// (both size the rotating ring, `window` must then be > 0; the other layouts ignore them).
    pub fn new(
        case: KvCase,
        row: usize,
        max_seq: usize,
        lens: &[usize],
        step: usize,
        window: usize,
    ) -> KvLayout {
        assert!(
            lens.iter().all(|&l| l <= max_seq),
            "lens {lens:?} > {max_seq}"
        );
        assert!(
            !case.rotating() || window > 0,
            "the rotating layout needs a window"
        );
        let cfg = KvConfig {
            kind: case.kind,
            dtype: case.dtype,
            block: case.block,
            fragment: case.fragment,
            window: if case.rotating() { window as u32 } else { 0 },
            batch: lens.len() as u32,
            prefill_chunk: step.max(1) as u32,
            ..Default::default()
        };
        let geo = KvGeometry::new(&cfg, max_seq as u32);
        let mut tables = BlockTables::new(geo.seqs, geo.table_stride);
        let (slots, table) = if case.kind == KvKind::Paged {
            // Two blocks more than the tables can take: the poison block, and one that stays
            // free (NaN, never addressed).
            let capacity = geo.pool_blocks() + 2;
            let mut pool = BlockPool::new(capacity, case.fragment, 0x5eed + lens.len() as u64);
            let poison = pool.alloc().expect("a block for the poison block");
            // Sequences take turns, a block at a time, as interleaved steps allocate them.
            let block = case.block as usize;
            for b in 0..max_seq.div_ceil(block) {
                for (s, &len) in lens.iter().enumerate() {
                    if len > b * block {
                        let upto = len.min((b + 1) * block) as u32;
                        tables
                            .ensure(&mut pool, s as u32, upto, case.block)
                            .expect("the pool covers every table");
                    }
                }
            }
            let mut table = tables.entries().to_vec();
            let stride = tables.stride() as usize;
            for s in 0..lens.len() {
                for e in &mut table[s * stride + tables.held(s as u32) as usize..(s + 1) * stride] {
                    *e = poison;
                }
            }
            (capacity as usize * block, table)
        } else {
            // Not read by these layouts; one 16-byte word keeps the binding valid.
            (geo.slots as usize, vec![0; 4])
        };
        let mut layout = KvLayout {
            case,
            geo,
            row,
            lens: lens.to_vec(),
            table,
            owner: vec![None; slots],
        };
        for s in 0..lens.len() {
            for pos in layout.held(s) {
                let slot = geo.slot(&tables, s as u32, pos as u32) as usize;
                assert!(
                    layout.owner[slot].is_none(),
                    "{}: slot {slot} holds two positions",
                    case.name()
                );
                layout.owner[slot] = Some((s, pos));
            }
        }
        layout
    }

    /// The positions sequence `seq` holds: all it has written, or the ring's last ones.
    pub fn held(&self, seq: usize) -> std::ops::Range<usize> {
        let len = self.lens[seq];
        match self.case.kind {
            KvKind::Rotating => len.saturating_sub(self.geo.unit as usize)..len,
            _ => 0..len,
        }
    }

    /// Whether some sequence has written more positions than its ring holds (rotating), so the
    /// ring has wrapped.
    pub fn wrapped(&self) -> bool {
        (0..self.lens.len()).any(|s| self.held(s).start > 0)
    }

    /// Specialization constants: `base` by id (`decoder::shaders::spec`), and the layout.
    pub fn spec(&self, base: &[(usize, u32)]) -> Vec<(usize, u32)> {
        let mut pairs = base.to_vec();
        pairs.extend(self.geo.spec());
        pairs
    }

    /// The block-table binding.
    pub fn table(&self) -> Binding {
        Binding::input_u32(&self.table)
    }

    /// `logical` as the cache stores it: rounded to f16 for an f16 cache. The CPU expectation
    /// must use these values.
    pub fn round(&self, logical: &[Vec<f32>]) -> Vec<Vec<f32>> {
        logical
            .iter()
            .map(|c| match self.case.dtype {
                KvDtype::F16 => c.iter().map(|v| half::f16::from_f32(*v).to_f32()).collect(),
                KvDtype::F32 => c.clone(),
            })
            .collect()
    }

    /// The physical values holding `logical` (`[lens[s], row]` per sequence), NaN where no held
    /// position lives.
    fn physical(&self, logical: &[Vec<f32>]) -> Vec<f32> {
        assert_eq!(
            logical.len(),
            self.lens.len(),
            "one logical cache per sequence"
        );
        let mut phys = vec![f32::NAN; self.owner.len() * self.row];
        for (slot, owner) in self.owner.iter().enumerate() {
            if let Some((s, pos)) = *owner {
                phys[slot * self.row..(slot + 1) * self.row]
                    .copy_from_slice(&logical[s][pos * self.row..(pos + 1) * self.row]);
            }
        }
        phys
    }

    /// The cache binding (read-only) holding `logical`.
    pub fn cache(&self, logical: &[Vec<f32>]) -> Binding {
        let phys = self.physical(logical);
        match self.case.dtype {
            KvDtype::F16 => Binding::input_f16(&phys),
            KvDtype::F32 => Binding::input_f32(&phys),
        }
    }

    /// The cache binding holding `logical`, read back after the run (a cache the kernel writes).
    pub fn cache_inout(&self, logical: &[Vec<f32>]) -> Binding {
        Binding {
            read_back: true,
            ..self.cache(logical)
        }
    }

    /// The logical caches (`[lens[s], row]` per sequence, NaN at positions not held) of a
    /// read-back cache. Fails when a slot that holds no position was written (it must still be
    /// NaN).
    pub fn logical(&self, bytes: &[u8], what: &str) -> Vec<Vec<f32>> {
        let phys = decode(bytes, self.case.dtype);
        assert_eq!(
            phys.len(),
            self.owner.len() * self.row,
            "{what}: cache size"
        );
        let mut out: Vec<Vec<f32>> = self
            .lens
            .iter()
            .map(|&len| vec![f32::NAN; len * self.row])
            .collect();
        for (slot, owner) in self.owner.iter().enumerate() {
            let src = &phys[slot * self.row..(slot + 1) * self.row];
            match *owner {
                Some((s, pos)) => {
                    out[s][pos * self.row..(pos + 1) * self.row].copy_from_slice(src);
                }
                None => {
                    if let Some(i) = src.iter().position(|v| !v.is_nan()) {
                        panic!(
                            "{what}: unused slot {slot} (element {i}) was written: {}",
                            src[i]
                        );
                    }
                }
            }
        }
        out
    }

    /// Asserts that every held position of `got` (from [`KvLayout::logical`]) equals `want`
    /// bitwise, naming the sequence and position that differ.
    pub fn assert_held_exact(&self, got: &[Vec<f32>], want: &[Vec<f32>], what: &str) {
        let row = self.row;
        for s in 0..self.lens.len() {
            for pos in self.held(s) {
                assert_exact(
                    &got[s][pos * row..(pos + 1) * row],
                    &want[s][pos * row..(pos + 1) * row],
                    &format!("{what}: sequence {s} position {pos}"),
                );
            }
        }
    }
}

/// Cache bytes of `dtype` as f32 (f16 widens exactly).
pub fn decode(bytes: &[u8], dtype: KvDtype) -> Vec<f32> {
    match dtype {
        KvDtype::F16 => bytes
            .chunks_exact(2)
            .map(|c| half::f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32())
            .collect(),
        KvDtype::F32 => decoder::exec::harness::f32s(bytes),
    }
}

/// CPU attention of rows of several sequences: row t attends `rows[t].lo..=rows[t].pos` of the
/// logical caches of sequence `rows[t].seq` (`attention_rows_cpu` row by row).
pub fn attention_seqs_cpu(
    q: &[f32],
    k: &[Vec<f32>],
    v: &[Vec<f32>],
    dims: AttnDims,
    rows: &[RowParams],
    scale: f32,
) -> Vec<f32> {
    let per_row = dims.heads * dims.head_dim;
    rows.iter()
        .enumerate()
        .flat_map(|(t, r)| {
            let s = r.seq as usize;
            attention_rows_cpu(
                &q[t * per_row..(t + 1) * per_row],
                &k[s],
                &v[s],
                dims,
                &[(r.lo as usize, r.pos as usize)],
                scale,
            )
        })
        .collect()
}

/// CPU attention scores of rows of several sequences (`attn_scores.comp`): `scores[t, h, j] =
/// scale * dot(q[t, h], k[seq_t][j, h / group])` for `lo_t <= j <= pos_t` (and `j < stride`);
/// other entries of `scores` `[n, heads, stride]` are left as they are.
pub fn scores_rows_cpu(
    q: &[f32],
    k: &[Vec<f32>],
    dims: AttnDims,
    rows: &[RowParams],
    stride: usize,
    scale: f32,
    scores: &mut [f32],
) {
    let (heads, kv_heads, hd) = (dims.heads, dims.kv_heads, dims.head_dim);
    for (t, r) in rows.iter().enumerate() {
        let kc = &k[r.seq as usize];
        for h in 0..heads {
            let qh = &q[(t * heads + h) * hd..][..hd];
            let kvh = h / dims.group();
            for j in r.lo as usize..=(r.pos as usize).min(stride - 1) {
                let kj = &kc[(j * kv_heads + kvh) * hd..][..hd];
                scores[(t * heads + h) * stride + j] =
                    scale * qh.iter().zip(kj).map(|(a, b)| a * b).sum::<f32>();
            }
        }
    }
}

/// CPU softmax in place of each row `scores[t, h, lo_t..=pos_t]` (`softmax.comp`); the rest of
/// `scores` `[n, heads, stride]` is left as it is.
pub fn softmax_rows_cpu(scores: &mut [f32], heads: usize, stride: usize, rows: &[RowParams]) {
    for (i, line) in scores.chunks_mut(stride).enumerate() {
        let r = rows[i / heads];
        let span = &mut line[r.lo as usize..=(r.pos as usize).min(stride - 1)];
        let m = span.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0.0;
        for v in span.iter_mut() {
            *v = (*v - m).exp();
            sum += *v;
        }
        for v in span.iter_mut() {
            *v /= sum;
        }
    }
}

/// CPU weighted sum over V of rows of several sequences (`attn_wsum.comp`): `out[t, h, d] =
/// sum_{lo_t <= j <= pos_t} probs[t, h, j] * v[seq_t][j, h / group, d]`.
pub fn wsum_rows_cpu(
    probs: &[f32],
    v: &[Vec<f32>],
    dims: AttnDims,
    rows: &[RowParams],
    stride: usize,
) -> Vec<f32> {
    let (heads, kv_heads, hd) = (dims.heads, dims.kv_heads, dims.head_dim);
    let mut out = vec![0.0; rows.len() * heads * hd];
    for (t, r) in rows.iter().enumerate() {
        let vc = &v[r.seq as usize];
        for h in 0..heads {
            let kvh = h / dims.group();
            let o = &mut out[(t * heads + h) * hd..][..hd];
            for j in r.lo as usize..=(r.pos as usize).min(stride - 1) {
                let p = probs[(t * heads + h) * stride + j];
                for (od, vd) in o.iter_mut().zip(&vc[(j * kv_heads + kvh) * hd..][..hd]) {
                    *od += p * vd;
                }
            }
        }
    }
    out
}

/// `|x|` element-wise (the magnitude a sum was computed from, for scaled tolerances).
pub fn abs_vec(x: &[f32]) -> Vec<f32> {
    x.iter().map(|v| v.abs()).collect()
}

/// [`abs_vec`] of every logical cache.
pub fn abs_caches(c: &[Vec<f32>]) -> Vec<Vec<f32>> {
    c.iter().map(|v| abs_vec(v)).collect()
}

/// The positions each of `seqs` sequences has written for `rows` (the largest `pos + 1` of its
/// rows; at least 1), and the most rows one sequence has in the step (the rotating ring's step).
pub fn lens_and_step(rows: &[RowParams], seqs: usize) -> (Vec<usize>, usize) {
    let mut lens = vec![1; seqs];
    let mut count = vec![0; seqs];
    for r in rows {
        let s = r.seq as usize;
        lens[s] = lens[s].max(r.pos as usize + 1);
        count[s] += 1;
    }
    (lens, count.into_iter().max().unwrap_or(1).max(1))
}

/// Rows of a decode step, one per `(seq, pos)`, each attending from `window_start(pos, window)`.
pub fn decode_rows(seq_pos: &[(usize, usize)], window: usize) -> Vec<RowParams> {
    seq_pos
        .iter()
        .map(|&(seq, pos)| row(seq, pos, window_start(pos as u32, window as u32) as usize))
        .collect()
}

/// Rows of a prompt chunk: positions `pos0..pos0 + n` of `seq`, each attending from
/// `window_start(pos, window)`.
pub fn chunk_rows(seq: usize, pos0: usize, n: usize, window: usize) -> Vec<RowParams> {
    prompt_rows(seq as u32, pos0 as u32, n as u32, window as u32)
}

/// Rows for a failure message: `seq:lo..=pos` each (the first two and the last of a long step).
pub fn rows_name(rows: &[RowParams]) -> String {
    let name = |r: &RowParams| format!("{}:{}..={}", r.seq, r.lo, r.pos);
    let names: Vec<String> = if rows.len() > 4 {
        vec![
            name(&rows[0]),
            name(&rows[1]),
            "...".into(),
            name(&rows[rows.len() - 1]),
        ]
    } else {
        rows.iter().map(name).collect()
    };
    format!("[{}] ({} rows)", names.join(" "), rows.len())
}

/// The `attn_split` tiles (spec 1) this device runs: 16 positions everywhere, and 32 where the
/// engine's tuning picks it (GPUs: 39 KiB of shared memory, more than a CPU driver's 32 KiB).
pub fn split_tiles(gpu: &Gpu) -> Vec<u32> {
    let info = gpu.info();
    let tuned =
        decoder::exec::program::Tuning::for_device(info.compute_units, info.subgroup_size, 4096, 8)
            .attn_tile;
    if tuned == 16 {
        vec![16]
    } else {
        vec![16, tuned]
    }
}
