//! attn_merge.comp against its CPU computation on partials from `attn_split_cpu`, for steps of
//! several rows (one workgroup per (head, row)) whose rows attend different lengths: split counts
//! from 1 to past the 256 weights the shader caches, empty splits, and rows whose splits are all
//! empty (KV length 0), which must give 0 rather than NaN.
mod common;
mod kernel_support;

use decoder::exec::harness::Binding;
use decoder::exec::kernels::{AttnDims, AttnMergePush, attn_merge_cpu, attn_split_cpu};
use decoder::shaders::Shader;
use decoder::shaders::spec as id;
use kernel_support::{assert_close, kv_cache, launch, out_f32};

/// (heads, kv_heads, hd, KV length of each row, n_splits, WG)
type Case = (usize, usize, usize, &'static [usize], usize, u32);

#[test]
fn attn_merge_rows_and_splits() {
    common::with_gpu(|gpu| {
        let cases: [Case; 6] = [
            (3, 1, 64, &[10], 1, 32),
            (2, 2, 128, &[37, 5, 1], 5, 64),
            (4, 1, 64, &[20, 300], 256, 128),
            (1, 1, 64, &[300, 299], 300, 256),
            (3, 3, 128, &[7], 40, 32),
            (2, 1, 64, &[0, 9, 0], 4, 64),
        ];
        for (heads, kv_heads, hd, kv_lens, n_splits, wg) in cases {
            let dims = AttnDims {
                heads,
                kv_heads,
                head_dim: hd,
            };
            let n = kv_lens.len();
            let mut partial = Vec::new();
            let mut want = Vec::new();
            for (t, &kv_len) in kv_lens.iter().enumerate() {
                let seed = 3000 + (kv_len * 7 + n_splits + 1000 * t) as u64;
                let q: Vec<f32> = common::rand_vec(heads * hd, seed)
                    .iter()
                    .map(|v| 4.0 * v)
                    .collect();
                let k = kv_cache(kv_len.max(1), kv_heads * hd, kv_len, seed + 1);
                let v = kv_cache(kv_len.max(1), kv_heads * hd, kv_len, seed + 2);
                let p = attn_split_cpu(
                    &q,
                    &k,
                    &v,
                    dims,
                    0,
                    kv_len,
                    n_splits,
                    1.0 / (hd as f32).sqrt(),
                );
                want.extend(attn_merge_cpu(&p, heads, hd, n_splits));
                partial.extend(p);
            }
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
                [heads as u32, n as u32, 1],
                &[(id::WG, wg)],
                &[
                    Binding::input_f32(&partial),
                    Binding::output_f32(n * heads * hd, f32::NAN),
                ],
            );
            // Weighted averages of values in [-1, 1) with weights summed in another order:
            // 1e-6 absolute + 1e-5 relative.
            assert_close(
                &out_f32(&out, 1),
                &want,
                1e-6,
                1e-5,
                &format!(
                    "attn_merge heads={heads} hd={hd} kv_lens={kv_lens:?} n_splits={n_splits} wg={wg}"
                ),
            );
        }
    });
}
