//! attn_wsum.comp against its CPU computation over every KV layout (contiguous f32 and f16, paged
//! blocks of 16 and 32 on fragmented pools, a wrapped rotating ring), GQA ratios 1, 3, 4 and 8,
//! head_dim 64 and 128, decode steps of several sequences and prompt chunks past position 0,
//! sliding windows; probabilities outside each row's range and cache slots holding no position
//! are NaN. Then the whole primitive attention chain attn_scores -> softmax -> attn_wsum on the
//! GPU against `attention_rows_cpu`, over every layout.
mod common;
mod kernel_support;

use decoder::exec::harness::Binding;
use decoder::exec::kernels::{AttnDims, RowParams, ScoresPush, SoftmaxPush, WsumPush};
use decoder::shaders::Shader;
use decoder::shaders::spec as id;
use kernel_support::{
    ATTN_SHAPES, KV_CASES, KvLayout, abs_caches, abs_vec, assert_close, assert_close_scaled,
    attention_seqs_cpu, chunk_rows, decode_rows, launch, lens_and_step, logical_caches, out_f32,
    params_rows, rows_name, softmax_rows_cpu, wsum_rows_cpu,
};

/// The rows of step `kind` (0: a decode step of three sequences in another order than the
/// sequences; 1: a prompt chunk of sequence 1) under `window`.
fn step_rows(kind: usize, window: usize) -> Vec<RowParams> {
    if kind == 0 {
        decode_rows(&[(1, 70), (2, 37), (0, 12)], window)
    } else {
        chunk_rows(1, 50, 3, window)
    }
}

#[test]
fn attn_wsum_layouts_rows_windows() {
    common::with_gpu(|gpu| {
        let max_seq = 72;
        for (i, &(heads, kv_heads, hd)) in ATTN_SHAPES.iter().enumerate() {
            for (c, case) in KV_CASES.iter().enumerate() {
                for kind in 0..2 {
                    let v = i + c + kind;
                    let window = if case.rotating() { 20 } else { [0, 29][v % 2] };
                    let wg = [32, 64, 256][v % 3];
                    let rows = step_rows(kind, window);
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
                    let seed = 300 + 10 * (5 * i + c) as u64 + kind as u64;
                    let vals = layout.round(&logical_caches(&lens, kv_dim, seed, 1.0));
                    let stride = lens.iter().max().expect("sequences") + 2;
                    let mut p: Vec<f32> = common::rand_vec(n * heads * stride, seed + 1)
                        .iter()
                        .map(|x| x * 4.0)
                        .collect();
                    softmax_rows_cpu(&mut p, heads, stride, &rows);
                    for (l, line) in p.chunks_mut(stride).enumerate() {
                        let r = rows[l / heads];
                        for (j, x) in line.iter_mut().enumerate() {
                            if j < r.lo as usize || j > r.pos as usize {
                                *x = f32::NAN;
                            }
                        }
                    }
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
                        [(hd as u32).div_ceil(wg), heads as u32, n as u32],
                        &layout.spec(&[(id::WG, wg)]),
                        &[
                            params_rows(&rows),
                            Binding::input_f32(&p),
                            layout.table(),
                            layout.cache(&vals),
                            Binding::output_f32(n * heads * hd, f32::NAN),
                        ],
                    );
                    let magnitude =
                        wsum_rows_cpu(&abs_vec(&p), &abs_caches(&vals), dims, &rows, stride);
                    // Sums over positions in another order: |diff| <= 1e-5 * sum |p v|.
                    assert_close_scaled(
                        &out_f32(&out, 4),
                        &wsum_rows_cpu(&p, &vals, dims, &rows, stride),
                        &magnitude,
                        1e-5,
                        &format!(
                            "attn_wsum {} heads={heads} kv_heads={kv_heads} hd={hd} rows={} window={window} wg={wg}",
                            case.name(),
                            rows_name(&rows)
                        ),
                    );
                }
            }
        }
    });
}

#[test]
fn primitive_attention_chain_matches_attention_rows_cpu() {
    common::with_gpu(|gpu| {
        let max_seq = 72;
        for (i, &(heads, kv_heads, hd)) in ATTN_SHAPES.iter().enumerate() {
            for (c, case) in KV_CASES.iter().enumerate() {
                // Every shape meets every layout; the step kind and the workgroup alternate.
                let kind = (i + c) % 2;
                let wg = [64, 32, 128, 256][(i + c) % 4];
                let window = if case.rotating() {
                    20
                } else {
                    [0, 0, 29][(i + c) % 3]
                };
                let rows = step_rows(kind, window);
                let n = rows.len();
                let dims = AttnDims {
                    heads,
                    kv_heads,
                    head_dim: hd,
                };
                let kv_dim = kv_heads * hd;
                let (lens, step) = lens_and_step(&rows, 3);
                let layout = KvLayout::new(*case, kv_dim, max_seq, &lens, step, window);
                let seed = 500 + 10 * (5 * i + c) as u64;
                let k = layout.round(&logical_caches(&lens, kv_dim, seed, 1.0));
                let v = layout.round(&logical_caches(&lens, kv_dim, seed + 1, 1.0));
                let q = common::rand_vec(n * heads * hd, seed + 2);
                let kv_len = *lens.iter().max().expect("sequences");
                let stride = max_seq;
                let scale = 1.0 / (hd as f32).sqrt();
                let prm = params_rows(&rows);
                let (h32, kvh32, hd32) = (heads as u32, kv_heads as u32, hd as u32);
                let spec = layout.spec(&[(id::WG, wg)]);
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
                    [(kv_len as u32).div_ceil(wg), h32, n as u32],
                    &spec,
                    &[
                        prm.clone(),
                        Binding::input_f32(&q),
                        layout.table(),
                        layout.cache(&k),
                        Binding::output_f32(n * heads * stride, f32::NAN),
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
                    [h32, n as u32, 1],
                    &[(id::WG, wg)],
                    &[prm.clone(), Binding::inout_f32(&out_f32(&scores, 4))],
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
                    [hd32.div_ceil(wg), h32, n as u32],
                    &spec,
                    &[
                        prm,
                        Binding::input_f32(&out_f32(&probs, 1)),
                        layout.table(),
                        layout.cache(&v),
                        Binding::output_f32(n * heads * hd, f32::NAN),
                    ],
                );
                // Three f32 stages, each within ~1e-6 relative, on the same cache values as the
                // CPU; outputs are convex combinations of values in [-1, 1): 2e-5 absolute.
                assert_close(
                    &out_f32(&out, 4),
                    &attention_seqs_cpu(&q, &k, &v, dims, &rows, scale),
                    2e-5,
                    0.0,
                    &format!(
                        "primitive attention {} heads={heads} kv_heads={kv_heads} hd={hd} rows={} window={window} wg={wg}",
                        case.name(),
                        rows_name(&rows)
                    ),
                );
            }
        }
    });
}
