//! attn_scores.comp against its CPU computation: GQA ratios 1, 3, 4 and 8, head_dim 64 and 128,
//! several tokens with first positions 0 and > 0 (causal rows of different lengths), KV lengths
//! that are not multiples of the workgroup size, entries past each row left untouched, and cache
//! rows past the KV length poisoned with NaN.
mod common;
mod kernel_support;

use decoder::exec::harness::Binding;
use decoder::exec::kernels::{AttnDims, ScoresPush, attn_scores_cpu};
use decoder::shaders::Shader;
use kernel_support::{ATTN_SHAPES, assert_close_scaled, kv_cache, launch, out_f32, params};

#[test]
fn attn_scores_gqa_positions() {
    common::with_gpu(|gpu| {
        let max_seq = 80;
        for (i, &(heads, kv_heads, hd)) in ATTN_SHAPES.iter().enumerate() {
            // (pos0, n_tokens, WG)
            for (pos0, n_tokens, wg) in [(0, 3, 32), (37, 2, 64), (70, 1, 256)] {
                let dims = AttnDims {
                    heads,
                    kv_heads,
                    head_dim: hd,
                };
                let kv_len = pos0 + n_tokens;
                let stride = kv_len + 3;
                let scale = 1.0 / (hd as f32).sqrt();
                let q = common::rand_vec(n_tokens * heads * hd, 100 + i as u64);
                let k = kv_cache(max_seq, kv_heads * hd, kv_len, 200 + i as u64);
                let init = vec![7.0f32; n_tokens * heads * stride];
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
                    [(kv_len as u32).div_ceil(wg), heads as u32, n_tokens as u32],
                    &[wg],
                    &[
                        params(pos0, n_tokens, kv_len),
                        Binding::input_f32(&q),
                        Binding::input_f32(&k),
                        Binding::inout_f32(&init),
                    ],
                );
                let mut want = init.clone();
                attn_scores_cpu(&q, &k, dims, pos0, stride, scale, &mut want);
                let abs = |v: &[f32]| v.iter().map(|a| a.abs()).collect::<Vec<_>>();
                let mut magnitude = init.clone();
                attn_scores_cpu(
                    &abs(&q),
                    &abs(&k),
                    dims,
                    pos0,
                    stride,
                    scale,
                    &mut magnitude,
                );
                // Untouched entries keep 7.0 exactly (magnitude 7.0 * 1e-5 would allow 7e-5, so
                // they are checked bitwise below); dot products: |diff| <= 1e-5 * sum |q k| scale.
                let got = out_f32(&out, 3);
                let what = format!(
                    "attn_scores heads={heads} kv_heads={kv_heads} hd={hd} pos0={pos0} tokens={n_tokens} wg={wg}"
                );
                assert_close_scaled(&got, &want, &magnitude, 1e-5, &what);
                for t in 0..n_tokens {
                    for h in 0..heads {
                        for j in pos0 + t + 1..stride {
                            let v = got[(t * heads + h) * stride + j];
                            assert!(
                                v == 7.0,
                                "{what}: entry t={t} h={h} j={j} past the causal row was written ({v})"
                            );
                        }
                    }
                }
            }
        }
    });
}
