//! attn_scores.comp against its CPU computation over every KV layout (contiguous f32 and f16,
//! paged blocks of 16 and 32 on fragmented pools, a rotating ring that has wrapped): GQA ratios 1,
//! 3, 4 and 8, head_dim 64 and 128; decode steps of three sequences (rows in another order than
//! the sequences, the last slot of the cache included) and prompt chunks starting past position
//! 0; sliding windows (lo > 0); KV lengths that are not multiples of the workgroup size. Entries
//! outside each row's range must be left untouched, and cache slots that hold no position are NaN
//! so reading them fails the test.
mod common;
mod kernel_support;

use decoder::exec::harness::Binding;
use decoder::exec::kernels::{AttnDims, ScoresPush};
use decoder::shaders::Shader;
use decoder::shaders::spec as id;
use kernel_support::{
    ATTN_SHAPES, KV_CASES, KvLayout, abs_caches, abs_vec, assert_close_scaled, chunk_rows,
    decode_rows, launch, lens_and_step, logical_caches, out_f32, params_rows, scores_rows_cpu,
};

#[test]
fn attn_scores_layouts_rows_windows() {
    common::with_gpu(|gpu| {
        let max_seq = 80;
        let seqs = 3;
        for (i, &(heads, kv_heads, hd)) in ATTN_SHAPES.iter().enumerate() {
            for (c, case) in KV_CASES.iter().enumerate() {
                for step_kind in 0..2 {
                    let v = i + c + step_kind;
                    // The rotating ring needs a window; the other layouts run with and without one.
                    let window = if case.rotating() { 24 } else { [0, 33][v % 2] };
                    let wg = [32, 64, 256][v % 3];
                    let rows = if step_kind == 0 {
                        decode_rows(&[(2, max_seq - 1), (0, 37), (1, 5)], window)
                    } else {
                        chunk_rows(1, 41, 4, window)
                    };
                    let n = rows.len();
                    let dims = AttnDims {
                        heads,
                        kv_heads,
                        head_dim: hd,
                    };
                    let kv_dim = kv_heads * hd;
                    let (lens, step) = lens_and_step(&rows, seqs);
                    let layout = KvLayout::new(*case, kv_dim, max_seq, &lens, step, window);
                    assert!(!case.rotating() || layout.wrapped(), "the ring must wrap");
                    let seed = 100 + 10 * (5 * i + c) as u64 + step_kind as u64;
                    let k = layout.round(&logical_caches(&lens, kv_dim, seed, 1.0));
                    let q = common::rand_vec(n * heads * hd, seed + 1);
                    let kv_len = *lens.iter().max().expect("sequences");
                    let stride = kv_len + 3;
                    let scale = 1.0 / (hd as f32).sqrt();
                    let init = vec![7.0f32; n * heads * stride];
                    let push = ScoresPush {
                        heads: heads as u32,
                        kv_heads: kv_heads as u32,
                        head_dim: hd as u32,
                        stride: stride as u32,
                        scale,
                        ..Default::default()
                    };
                    let out = launch(
                        gpu,
                        Shader::AttnScores,
                        push.bytes(),
                        [(kv_len as u32).div_ceil(wg), heads as u32, n as u32],
                        &layout.spec(&[(id::WG, wg)]),
                        &[
                            params_rows(&rows),
                            Binding::input_f32(&q),
                            layout.table(),
                            layout.cache(&k),
                            Binding::inout_f32(&init),
                        ],
                    );
                    let mut want = init.clone();
                    scores_rows_cpu(&q, &k, dims, &rows, stride, scale, &mut want);
                    let mut magnitude = init.clone();
                    scores_rows_cpu(
                        &abs_vec(&q),
                        &abs_caches(&k),
                        dims,
                        &rows,
                        stride,
                        scale,
                        &mut magnitude,
                    );
                    let got = out_f32(&out, 4);
                    let what = format!(
                        "attn_scores {} heads={heads} kv_heads={kv_heads} hd={hd} rows={} window={window} wg={wg}",
                        case.name(),
                        kernel_support::rows_name(&rows)
                    );
                    // The cache values are the same f16/f32 numbers on both sides; dot products
                    // in another order: |diff| <= 1e-5 * sum |q k| * scale. Untouched entries
                    // keep 7.0 exactly (checked bitwise below: 7.0 * 1e-5 would allow 7e-5).
                    assert_close_scaled(&got, &want, &magnitude, 1e-5, &what);
                    for (t, r) in rows.iter().enumerate() {
                        for h in 0..heads {
                            for j in
                                (0..stride).filter(|&j| j < r.lo as usize || j > r.pos as usize)
                            {
                                let v = got[(t * heads + h) * stride + j];
                                assert!(
                                    v == 7.0,
                                    "{what}: entry t={t} h={h} j={j} outside the row's range was written ({v})"
                                );
                            }
                        }
                    }
                }
            }
        }
    });
}
