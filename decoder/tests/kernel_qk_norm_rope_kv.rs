//! qk_norm_rope_kv.comp against its CPU computation over every KV layout (contiguous f32 and f16,
//! paged blocks of 16 and 32 on fragmented pools, a wrapped rotating ring): GQA ratios 1, 3, 4
//! and 8, head_dim 64 and 128, with and without the per-head norm; decode steps of three
//! sequences (rows in another order than the sequences, position 0 and the last position
//! included) and prompt chunks. The k and v rows land at each row's slot; every other held
//! position must keep its value and every slot that holds no position must stay NaN.
mod common;
mod kernel_support;

use decoder::exec::harness::Binding;
use decoder::exec::kernels::{AttnDims, QkNormRopeKvPush, qk_norm_rope_kv_cpu, rope_table};
use decoder::kv::KvDtype;
use decoder::shaders::Shader;
use decoder::shaders::spec as id;
use kernel_support::{
    ATTN_SHAPES, KV_CASES, KvLayout, assert_close, assert_exact, chunk_rows, decode_rows, inv_freq,
    launch, lens_and_step, logical_caches, out_f32, params_rows, rows_name,
};

#[test]
fn qk_norm_rope_kv_layouts_rows() {
    common::with_gpu(|gpu| {
        let max_seq = 40;
        let eps = 1e-6;
        for (i, &(heads, kv_heads, hd)) in ATTN_SHAPES.iter().enumerate() {
            for (c, case) in KV_CASES.iter().enumerate() {
                let v = i + c;
                let qk_norm = v % 3 != 1;
                let wg = [32, 64, 128, 256][v % 4];
                // Windows only size the rotating ring here (the kernel attends nothing).
                let window = if case.rotating() { 8 } else { 0 };
                let rows = if v % 2 == 0 {
                    decode_rows(&[(1, 13), (2, max_seq - 1), (0, 0)], window)
                } else {
                    chunk_rows(2, 29, 4, window)
                };
                let n = rows.len();
                let dims = AttnDims {
                    heads,
                    kv_heads,
                    head_dim: hd,
                };
                let kv_dim = kv_heads * hd;
                let (lens, step) = lens_and_step(&rows, 3);
                let layout = KvLayout::new(*case, kv_dim, max_seq, &lens, step, window);
                assert!(!case.rotating() || layout.wrapped(), "the ring must wrap");
                let seed = 1000 + 10 * (5 * i + c) as u64;
                let qkv: Vec<f32> = common::rand_vec(n * (heads + 2 * kv_heads) * hd, seed)
                    .iter()
                    .map(|x| 2.0 * x)
                    .collect();
                let q_norm_w: Vec<f32> = common::rand_vec(hd, seed + 1)
                    .iter()
                    .map(|x| 1.0 + 0.5 * x)
                    .collect();
                let k_norm_w: Vec<f32> = common::rand_vec(hd, seed + 2)
                    .iter()
                    .map(|x| 1.0 + 0.5 * x)
                    .collect();
                let table = rope_table(&inv_freq(hd), max_seq);
                // The step's own positions hold stale values before the write.
                let k0 = layout.round(&logical_caches(&lens, kv_dim, seed + 3, 1.0));
                let v0 = layout.round(&logical_caches(&lens, kv_dim, seed + 4, 1.0));
                let push = QkNormRopeKvPush {
                    heads: heads as u32,
                    kv_heads: kv_heads as u32,
                    head_dim: hd as u32,
                    eps,
                };
                let out = launch(
                    gpu,
                    Shader::QkNormRopeKv,
                    push.bytes(),
                    [(heads + kv_heads) as u32, n as u32, 1],
                    &layout.spec(&[(id::WG, wg), (id::QK_NORM, qk_norm as u32)]),
                    &[
                        params_rows(&rows),
                        Binding::input_f32(&qkv),
                        Binding::input_f32(&q_norm_w),
                        Binding::input_f32(&k_norm_w),
                        Binding::input_f32(&table),
                        Binding::output_f32(n * heads * hd, f32::NAN),
                        layout.table(),
                        layout.cache_inout(&k0),
                        layout.cache_inout(&v0),
                    ],
                );
                let (mut k_want, mut v_want) = (k0.clone(), v0.clone());
                let norm = qk_norm.then_some((q_norm_w.as_slice(), k_norm_w.as_slice(), eps));
                let per_row = (heads + 2 * kv_heads) * hd;
                let mut q_want = Vec::new();
                for (t, r) in rows.iter().enumerate() {
                    let s = r.seq as usize;
                    q_want.extend(qk_norm_rope_kv_cpu(
                        &qkv[t * per_row..(t + 1) * per_row],
                        norm,
                        &table,
                        dims,
                        r.pos as usize,
                        &mut k_want[s],
                        &mut v_want[s],
                    ));
                }
                let (k_want, v_want) = (layout.round(&k_want), layout.round(&v_want));
                let what = format!(
                    "qk_norm_rope_kv {} heads={heads} kv_heads={kv_heads} hd={hd} norm={qk_norm} rows={} wg={wg}",
                    case.name(),
                    rows_name(&rows)
                );
                // Normed heads have |x| up to ~sqrt(hd) * 1.5: the norm's sum and the rotation in
                // another order stay within 1e-5 absolute + 1e-5 relative.
                assert_close(
                    &out_f32(&out, 5),
                    &q_want,
                    1e-5,
                    1e-5,
                    &format!("{what}: q"),
                );
                // k: the same f32 bound, plus one f16 step (2^-10 relative) where both sides
                // round to f16 from values that straddle a rounding boundary.
                let k_rtol = match case.dtype {
                    KvDtype::F16 => 1e-5 + 1.0 / 1024.0,
                    KvDtype::F32 => 1e-5,
                };
                let k_got = layout.logical(out[7].as_ref().expect("k read back"), &what);
                let v_got = layout.logical(out[8].as_ref().expect("v read back"), &what);
                for s in 0..lens.len() {
                    for pos in layout.held(s) {
                        let at = |c: &[Vec<f32>]| c[s][pos * kv_dim..(pos + 1) * kv_dim].to_vec();
                        let here = format!("{what}: sequence {s} position {pos}");
                        if rows
                            .iter()
                            .any(|r| r.seq as usize == s && r.pos as usize == pos)
                        {
                            assert_close(
                                &at(&k_got),
                                &at(&k_want),
                                1e-5,
                                k_rtol,
                                &format!("{here}: k"),
                            );
                        } else {
                            // Not written: exactly as before.
                            assert_exact(&at(&k_got), &at(&k_want), &format!("{here}: k"));
                        }
                        // v is copied (and rounded to f16 as half::f16 rounds): exact.
                        assert_exact(&at(&v_got), &at(&v_want), &format!("{here}: v"));
                    }
                }
            }
        }
    });
}
