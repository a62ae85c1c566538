//! attn_split.comp against its CPU computation, and attn_split + attn_merge on the GPU against
//! `attention_cpu`: GQA ratios 1, 3, 4 and 8, head_dim 64 and 128, KV lengths that cross split
//! and workgroup boundaries (several tiles in one split), split counts from 1 to more than the KV
//! length (empty splits) up to 256, workgroup sizes 32 to 256. Cache rows past the KV length are
//! NaN, so reading them fails the test.
mod common;
mod kernel_support;

use decoder::exec::harness::Binding;
use decoder::exec::kernels::{
    AttnDims, AttnMergePush, AttnSplitPush, attention_cpu, attn_split_cpu,
};
use decoder::shaders::Shader;
use kernel_support::{ATTN_SHAPES, assert_close, kv_cache, launch, out_f32, params};

#[test]
fn attn_split_and_merge_gqa_splits() {
    common::with_gpu(|gpu| {
        let max_seq = 304;
        // (kv_len, n_splits, WG): one split over several tiles; uneven chunks; a last split
        // shorter than the others; more splits than positions (empty splits); 256 splits.
        let cases = [
            (1, 1, 64),
            (5, 3, 32),
            (77, 1, 32),
            (100, 7, 64),
            (33, 64, 128),
            (300, 4, 256),
            (130, 256, 128),
            (9, 2, 256),
        ];
        for (i, &(heads, kv_heads, hd)) in ATTN_SHAPES.iter().enumerate() {
            for (c, &(kv_len, n_splits, wg)) in cases.iter().enumerate() {
                // Keep the suite quick: every shape runs every other case, all cases run overall.
                if (i + c) % 2 == 1 && c != 0 {
                    continue;
                }
                let dims = AttnDims {
                    heads,
                    kv_heads,
                    head_dim: hd,
                };
                let scale = 1.0 / (hd as f32).sqrt();
                let seed = 2000 + 100 * i as u64 + c as u64;
                // Larger q so the softmax is peaked and the online rescaling matters.
                let q: Vec<f32> = common::rand_vec(heads * hd, seed)
                    .iter()
                    .map(|v| 4.0 * v)
                    .collect();
                let k = kv_cache(max_seq, kv_heads * hd, kv_len, seed + 1);
                let v = kv_cache(max_seq, kv_heads * hd, kv_len, seed + 2);
                let push = AttnSplitPush {
                    heads: heads as u32,
                    kv_heads: kv_heads as u32,
                    head_dim: hd as u32,
                    n_splits: n_splits as u32,
                    scale,
                    ..Default::default()
                };
                let stride = hd + 2;
                let out = launch(
                    gpu,
                    Shader::AttnSplit,
                    push.bytes(),
                    [n_splits as u32, kv_heads as u32, 1],
                    &[wg],
                    &[
                        params(kv_len - 1, 1, kv_len),
                        Binding::input_f32(&q),
                        Binding::input_f32(&k),
                        Binding::input_f32(&v),
                        Binding::output_f32(heads * n_splits * stride, f32::NAN),
                    ],
                );
                let got = out_f32(&out, 4);
                let want = attn_split_cpu(&q, &k, &v, dims, 0, kv_len, n_splits, scale);
                let what = format!(
                    "attn_split heads={heads} kv_heads={kv_heads} hd={hd} kv_len={kv_len} n_splits={n_splits} wg={wg}"
                );
                for (s, (g, w)) in got.chunks(stride).zip(want.chunks(stride)).enumerate() {
                    let (h, split) = (s / n_splits, s % n_splits);
                    if w[0] == f32::NEG_INFINITY {
                        // An empty split: exactly (-inf, 0, 0...).
                        assert!(
                            g[0] == f32::NEG_INFINITY && g[1..].iter().all(|x| *x == 0.0),
                            "{what}: empty split {split} of head {h}: {:?}",
                            &g[..4]
                        );
                        continue;
                    }
                    // m: a dot product of hd terms |q k| <= 4 * scale: 1e-5 absolute.
                    assert_close(
                        &g[..1],
                        &w[..1],
                        1e-5,
                        1e-5,
                        &format!("{what}: m of head {h} split {split}"),
                    );
                    // l and o are sums of exp(score - m) (<= 1 each) times |v| < 1; exp of
                    // scores that differ by ~1e-5 adds 1e-5 relative: 2e-5 of l.
                    let tol = 2e-5 * w[1];
                    assert_close(
                        &g[1..],
                        &w[1..],
                        tol,
                        0.0,
                        &format!("{what}: l, o of head {h} split {split}"),
                    );
                }

                let merged = launch(
                    gpu,
                    Shader::AttnMerge,
                    AttnMergePush {
                        heads: heads as u32,
                        head_dim: hd as u32,
                        n_splits: n_splits as u32,
                        pad0: 0,
                    }
                    .bytes(),
                    [heads as u32, 1, 1],
                    &[wg],
                    &[
                        Binding::input_f32(&got),
                        Binding::output_f32(heads * hd, f32::NAN),
                    ],
                );
                // A convex combination of v values in [-1, 1): 2e-5 absolute.
                assert_close(
                    &out_f32(&merged, 1),
                    &attention_cpu(&q, &k, &v, dims, kv_len - 1, scale),
                    2e-5,
                    0.0,
                    &format!("{what}: merged"),
                );
            }
        }
    });
}
