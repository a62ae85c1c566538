//! attn_prefill.comp (tiled flash attention of a prompt chunk) and attn_prefill_rows.comp (one
//! invocation per (row, head), no barriers) against `attention_rows_cpu`, over every KV layout
//! (contiguous f32 and f16, paged blocks of 16 and 32 on fragmented pools, a wrapped rotating
//! ring): GQA ratios 1, 3, 4 and 8 (rows per workgroup 16, 5, 4 and 2), head_dim 64 and 128;
//! chunks of sequence 1 of two, starting at position 0 and past earlier cached positions,
//! sliding windows (lo > 0), chunk lengths that are not multiples of the rows per workgroup nor
//! of the 16-position tiles. Cache slots that hold no position are NaN, so reading them fails the
//! test.
mod common;
mod kernel_support;

use decoder::exec::harness::Binding;
use decoder::exec::kernels::{AttnDims, AttnPrefillPush, prefill_tokens_per_group_rows};
use decoder::shaders::Shader;
use decoder::shaders::spec as id;
use kernel_support::{
    ATTN_SHAPES, KV_CASES, KvLayout, assert_close, attention_seqs_cpu, chunk_rows, launch,
    logical_caches, out_f32, rows_name,
};

#[test]
fn attn_prefill_and_rows_layouts_chunks_windows() {
    common::with_gpu(|gpu| {
        let max_seq = 112;
        // Chunks of sequence 1: (pos0, n, window off the rotating layout): the prompt's first
        // chunk; a chunk after 37 cached positions crossing tiles and blocks; a late chunk under a
        // window.
        let chunks = [(0, 7, 0), (37, 35, 30), (90, 13, 24)];
        for (i, &(heads, kv_heads, hd)) in ATTN_SHAPES.iter().enumerate() {
            for (c, case) in KV_CASES.iter().enumerate() {
                // Keep the suite quick: each (shape, layout) runs one chunk; over the shapes,
                // every layout runs every chunk.
                let (pos0, n, window) = chunks[(i + c) % chunks.len()];
                // The ring needs a window, and a first chunk past it so that it wraps. One ring size
                // for every chunk (sized for the longest): each new specialization costs lavapipe
                // seconds of compilation.
                let (pos0, window) = if case.rotating() {
                    (pos0.max(60), 24)
                } else {
                    (pos0, window)
                };
                let step = chunks.iter().map(|ch| ch.1).max().expect("chunks");
                let rows = chunk_rows(1, pos0, n, window);
                let dims = AttnDims {
                    heads,
                    kv_heads,
                    head_dim: hd,
                };
                let kv_dim = kv_heads * hd;
                // Sequence 0 holds positions of its own (in the same pool or buffer).
                let lens = [60, pos0 + n];
                let layout = KvLayout::new(*case, kv_dim, max_seq, &lens, step, window);
                assert!(!case.rotating() || layout.wrapped(), "the ring must wrap");
                let seed = 4000 + 10 * (5 * i + c) as u64;
                let k = layout.round(&logical_caches(&lens, kv_dim, seed, 1.0));
                let v = layout.round(&logical_caches(&lens, kv_dim, seed + 1, 1.0));
                // Larger q so the softmax is peaked and the online rescaling matters.
                let q: Vec<f32> = common::rand_vec(n * heads * hd, seed + 2)
                    .iter()
                    .map(|x| 3.0 * x)
                    .collect();
                let scale = 1.0 / (hd as f32).sqrt();
                let want = attention_seqs_cpu(&q, &k, &v, dims, &rows, scale);
                let push = AttnPrefillPush {
                    heads: heads as u32,
                    kv_heads: kv_heads as u32,
                    head_dim: hd as u32,
                    scale,
                };
                let bindings = [
                    kernel_support::params_rows(&rows),
                    Binding::input_f32(&q),
                    layout.table(),
                    layout.cache(&k),
                    layout.cache(&v),
                    Binding::output_f32(n * heads * hd, f32::NAN),
                ];
                // The engine's sizes: 64 rows-kernel lanes; the tiled kernel at 64 lanes with 16
                // rows per group (CPU devices) and 256 lanes with 32 rows (GPUs).
                let group = (heads / kv_heads) as u32;
                let wg_rows = 64;
                let mut runs = Vec::new();
                for (wg_tiled, max_r) in [(64, 16), (256, 32)] {
                    let tq = prefill_tokens_per_group_rows(group, max_r);
                    runs.push((
                        Shader::AttnPrefill,
                        wg_tiled,
                        [(n as u32).div_ceil(tq), kv_heads as u32, 1],
                        vec![(id::WG, wg_tiled), (id::R_SPEC, max_r)],
                    ));
                }
                runs.push((
                    Shader::AttnPrefillRows,
                    wg_rows,
                    [((n * heads) as u32).div_ceil(wg_rows), 1, 1],
                    vec![(id::WG, wg_rows)],
                ));
                for (shader, wg, groups, spec) in runs {
                    let out = launch(
                        gpu,
                        shader,
                        push.bytes(),
                        groups,
                        &layout.spec(&spec),
                        &bindings,
                    );
                    // Online softmax in f32 on the same cache values as the CPU; outputs are
                    // convex combinations of values in [-1, 1): 2e-5 absolute.
                    assert_close(
                        &out_f32(&out, 5),
                        &want,
                        2e-5,
                        0.0,
                        &format!(
                            "{} {} heads={heads} kv_heads={kv_heads} hd={hd} rows={} wg={wg}",
                            shader.name(),
                            case.name(),
                            rows_name(&rows)
                        ),
                    );
                }
            }
        }
    });
}
