//! attn_merge.comp against its CPU computation on partials from `attn_split_cpu`: split counts
//! from 1 to past the 256 weights the shader caches, empty splits, and a head whose splits are
//! all empty (KV length 0), which must give 0 rather than NaN.
mod common;
mod kernel_support;

use decoder::exec::harness::Binding;
use decoder::exec::kernels::{AttnDims, AttnMergePush, attn_merge_cpu, attn_split_cpu};
use decoder::shaders::Shader;
use kernel_support::{assert_close, kv_cache, launch, out_f32};

#[test]
fn attn_merge_splits() {
    common::with_gpu(|gpu| {
        // (heads, kv_heads, hd, kv_len, n_splits, WG)
        for (heads, kv_heads, hd, kv_len, n_splits, wg) in [
            (3, 1, 64, 10, 1, 32),
            (2, 2, 128, 37, 5, 64),
            (4, 1, 64, 20, 256, 128),
            (1, 1, 64, 300, 300, 256),
            (3, 3, 128, 7, 40, 32),
            (2, 1, 64, 0, 4, 64),
        ] {
            let dims = AttnDims {
                heads,
                kv_heads,
                head_dim: hd,
            };
            let seed = 3000 + (kv_len * 7 + n_splits) as u64;
            let q: Vec<f32> = common::rand_vec(heads * hd, seed)
                .iter()
                .map(|v| 4.0 * v)
                .collect();
            let k = kv_cache(kv_len.max(1), kv_heads * hd, kv_len, seed + 1);
            let v = kv_cache(kv_len.max(1), kv_heads * hd, kv_len, seed + 2);
            let partial = attn_split_cpu(
                &q,
                &k,
                &v,
                dims,
                0,
                kv_len,
                n_splits,
                1.0 / (hd as f32).sqrt(),
            );
            let out = launch(
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
                    Binding::input_f32(&partial),
                    Binding::output_f32(heads * hd, f32::NAN),
                ],
            );
            // Weighted averages of values in [-1, 1) with weights summed in another order:
            // 1e-6 absolute + 1e-5 relative.
            assert_close(
                &out_f32(&out, 1),
                &attn_merge_cpu(&partial, heads, hd, n_splits),
                1e-6,
                1e-5,
                &format!(
                    "attn_merge heads={heads} hd={hd} kv_len={kv_len} n_splits={n_splits} wg={wg}"
                ),
            );
        }
    });
}
