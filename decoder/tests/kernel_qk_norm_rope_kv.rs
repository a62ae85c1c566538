//! qk_norm_rope_kv.comp against its CPU computation: GQA ratios 1, 3, 4 and 8, head_dim 64 and
//! 128, with and without the per-head norm, positions 0 and > 0 (the last cache row included);
//! every other cache row must be left as it was.
mod common;
mod kernel_support;

use decoder::exec::harness::Binding;
use decoder::exec::kernels::{AttnDims, QkNormRopeKvPush, qk_norm_rope_kv_cpu, rope_table};
use decoder::shaders::Shader;
use kernel_support::{ATTN_SHAPES, assert_close, inv_freq, launch, out_f32, params};

#[test]
fn qk_norm_rope_kv_gqa_positions() {
    common::with_gpu(|gpu| {
        let max_seq = 24;
        let eps = 1e-6;
        for (i, &(heads, kv_heads, hd)) in ATTN_SHAPES.iter().enumerate() {
            for (qk_norm, pos, wg) in [
                (true, 0, 32),
                (false, 13, 64),
                (true, max_seq - 1, 128),
                (true, 5, 256),
            ] {
                let dims = AttnDims {
                    heads,
                    kv_heads,
                    head_dim: hd,
                };
                let seed = 1000 + 10 * i as u64 + pos as u64;
                let qkv: Vec<f32> = common::rand_vec((heads + 2 * kv_heads) * hd, seed)
                    .iter()
                    .map(|v| 2.0 * v)
                    .collect();
                let q_norm_w: Vec<f32> = common::rand_vec(hd, seed + 1)
                    .iter()
                    .map(|v| 1.0 + 0.5 * v)
                    .collect();
                let k_norm_w: Vec<f32> = common::rand_vec(hd, seed + 2)
                    .iter()
                    .map(|v| 1.0 + 0.5 * v)
                    .collect();
                let table = rope_table(&inv_freq(hd), max_seq);
                let k0 = common::rand_vec(max_seq * kv_heads * hd, seed + 3);
                let v0 = common::rand_vec(max_seq * kv_heads * hd, seed + 4);
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
                    [(heads + kv_heads) as u32, 1, 1],
                    &[wg, qk_norm as u32],
                    &[
                        params(pos, 1, pos + 1),
                        Binding::input_f32(&qkv),
                        Binding::input_f32(&q_norm_w),
                        Binding::input_f32(&k_norm_w),
                        Binding::input_f32(&table),
                        Binding::output_f32(heads * hd, f32::NAN),
                        Binding::inout_f32(&k0),
                        Binding::inout_f32(&v0),
                    ],
                );
                let (mut k_want, mut v_want) = (k0.clone(), v0.clone());
                let norm = qk_norm.then_some((q_norm_w.as_slice(), k_norm_w.as_slice(), eps));
                let q_want =
                    qk_norm_rope_kv_cpu(&qkv, norm, &table, dims, pos, &mut k_want, &mut v_want);
                let what = format!(
                    "qk_norm_rope_kv heads={heads} kv_heads={kv_heads} hd={hd} norm={qk_norm} pos={pos} wg={wg}"
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
                // Other rows are compared too, so a stray write fails (they match exactly).
                assert_close(
                    &out_f32(&out, 6),
                    &k_want,
                    1e-5,
                    1e-5,
                    &format!("{what}: k cache"),
                );
                // v is copied: exact.
                kernel_support::assert_exact(
                    &out_f32(&out, 7),
                    &v_want,
                    &format!("{what}: v cache"),
                );
            }
        }
    });
}
