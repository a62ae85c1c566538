//! attn_wsum.comp against its CPU computation (GQA ratios 1, 3, 4 and 8, head_dim 64 and 128,
//! first positions 0 and > 0, several tokens, probabilities and V rows past the causal length
//! poisoned with NaN), and the whole primitive attention chain attn_scores -> softmax ->
//! attn_wsum on the GPU against `attention_cpu`.
mod common;
mod kernel_support;

use decoder::exec::harness::Binding;
use decoder::exec::kernels::{
    AttnDims, ScoresPush, SoftmaxPush, WsumPush, attention_cpu, attn_wsum_cpu, softmax_cpu,
};
use decoder::shaders::Shader;
use kernel_support::{
    ATTN_SHAPES, assert_close, assert_close_scaled, kv_cache, launch, out_f32, params,
};

#[test]
fn attn_wsum_gqa_positions() {
    common::with_gpu(|gpu| {
        let max_seq = 80;
        for (i, &(heads, kv_heads, hd)) in ATTN_SHAPES.iter().enumerate() {
            for (pos0, n_tokens, wg) in [(0, 3, 32), (37, 2, 64), (70, 1, 256)] {
                let dims = AttnDims {
                    heads,
                    kv_heads,
                    head_dim: hd,
                };
                let kv_len = pos0 + n_tokens;
                let stride = kv_len + 2;
                let mut p: Vec<f32> = common::rand_vec(n_tokens * heads * stride, 300 + i as u64)
                    .iter()
                    .map(|v| v * 4.0)
                    .collect();
                softmax_cpu(&mut p, heads, stride, pos0);
                for (r, row) in p.chunks_mut(stride).enumerate() {
                    for v in &mut row[pos0 + r / heads + 1..] {
                        *v = f32::NAN;
                    }
                }
                let v = kv_cache(max_seq, kv_heads * hd, kv_len, 400 + i as u64);
                let push = WsumPush {
                    heads: heads as u32,
                    kv_heads: kv_heads as u32,
                    head_dim: hd as u32,
                    stride: stride as u32,
                };
                let out = launch(
                    gpu,
                    Shader::AttnWsum,
                    push.bytes(),
                    [(hd as u32).div_ceil(wg), heads as u32, n_tokens as u32],
                    &[wg],
                    &[
                        params(pos0, n_tokens, kv_len),
                        Binding::input_f32(&p),
                        Binding::input_f32(&v),
                        Binding::output_f32(n_tokens * heads * hd, f32::NAN),
                    ],
                );
                let abs = |x: &[f32]| x.iter().map(|a| a.abs()).collect::<Vec<_>>();
                let magnitude = attn_wsum_cpu(&abs(&p), &abs(&v), dims, pos0, stride);
                // Sums over positions in another order: |diff| <= 1e-5 * sum |p v|.
                assert_close_scaled(
                    &out_f32(&out, 3),
                    &attn_wsum_cpu(&p, &v, dims, pos0, stride),
                    &magnitude,
                    1e-5,
                    &format!(
                        "attn_wsum heads={heads} kv_heads={kv_heads} hd={hd} pos0={pos0} tokens={n_tokens} wg={wg}"
                    ),
                );
            }
        }
    });
}

#[test]
fn primitive_attention_chain_matches_attention_cpu() {
    common::with_gpu(|gpu| {
        let max_seq = 64;
        for (i, &(heads, kv_heads, hd)) in ATTN_SHAPES.iter().enumerate() {
            let (pos0, n_tokens, wg) = [
                (0, 4, 64),
                (29, 3, 32),
                (50, 1, 128),
                (13, 2, 256),
                (61, 1, 64),
            ][i];
            let dims = AttnDims {
                heads,
                kv_heads,
                head_dim: hd,
            };
            let kv_len = pos0 + n_tokens;
            let stride = max_seq;
            let scale = 1.0 / (hd as f32).sqrt();
            let q = common::rand_vec(n_tokens * heads * hd, 500 + i as u64);
            let k = kv_cache(max_seq, kv_heads * hd, kv_len, 600 + i as u64);
            let v = kv_cache(max_seq, kv_heads * hd, kv_len, 700 + i as u64);
            let prm = params(pos0, n_tokens, kv_len);
            let (h32, kvh32, hd32) = (heads as u32, kv_heads as u32, hd as u32);
            let scores = launch(
                gpu,
                Shader::AttnScores,
                ScoresPush {
                    heads: h32,
                    kv_heads: kvh32,
                    head_dim: hd32,
                    stride: stride as u32,
                    scale,
                    ..Default::default()
                }
                .bytes(),
                [(kv_len as u32).div_ceil(wg), h32, n_tokens as u32],
                &[wg],
                &[
                    prm.clone(),
                    Binding::input_f32(&q),
                    Binding::input_f32(&k),
                    Binding::output_f32(n_tokens * heads * stride, 0.0),
                ],
            );
            let probs = launch(
                gpu,
                Shader::Softmax,
                SoftmaxPush {
                    heads: h32,
                    stride: stride as u32,
                    ..Default::default()
                }
                .bytes(),
                [h32, n_tokens as u32, 1],
                &[wg],
                &[prm.clone(), Binding::inout_f32(&out_f32(&scores, 3))],
            );
            let out = launch(
                gpu,
                Shader::AttnWsum,
                WsumPush {
                    heads: h32,
                    kv_heads: kvh32,
                    head_dim: hd32,
                    stride: stride as u32,
                }
                .bytes(),
                [hd32.div_ceil(wg), h32, n_tokens as u32],
                &[wg],
                &[
                    prm,
                    Binding::input_f32(&out_f32(&probs, 1)),
                    Binding::input_f32(&v),
                    Binding::output_f32(n_tokens * heads * hd, f32::NAN),
                ],
            );
            // Three f32 stages, each within ~1e-6 relative; outputs are convex combinations of
            // values in [-1, 1): 2e-5 absolute.
            assert_close(
                &out_f32(&out, 3),
                &attention_cpu(&q, &k, &v, dims, pos0, scale),
                2e-5,
                0.0,
                &format!(
                    "primitive attention heads={heads} kv_heads={kv_heads} hd={hd} pos0={pos0} tokens={n_tokens} wg={wg}"
                ),
            );
        }
    });
}
