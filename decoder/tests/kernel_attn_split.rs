//! attn_split.comp against its CPU computation, and attn_split + attn_merge on the GPU against
//! `attention_rows_cpu`, over every KV layout (contiguous f32 and f16, paged blocks of 16 and 32
//! on fragmented pools, a wrapped rotating ring): GQA ratios 1, 3, 4 and 8, head_dim 64 and 128;
//! decode steps of three sequences whose rows attend spans of different lengths (so each row has
//! its own split chunk), sliding windows (lo > 0); spans that cross split and tile boundaries
//! (several tiles in one split), split counts from 1 to more than the span (empty splits) up to
//! 256, tiles of 16 positions (and 32 on devices whose tuning uses them), workgroup sizes 32 to
//! 256 (on the contiguous f32 layout; 64 on the others), and the subgroup kernel
//! (attn_split_sg.comp) where the device has subgroup arithmetic. Cache slots that hold no position are
//! NaN, so reading them fails the test. A long paged row checks the restaging of the block
//! table's shared-memory slice.
mod common;
mod kernel_support;

use decoder::exec::harness::Binding;
use decoder::exec::kernels::{AttnDims, AttnMergePush, AttnSplitPush, RowParams, attn_split_cpu};
use decoder::shaders::Shader;
use decoder::shaders::spec as id;
use decoder::vk::Gpu;
use kernel_support::{
    ATTN_SHAPES, KV_CASES, KvCase, KvLayout, assert_close, attention_seqs_cpu, decode_rows, launch,
    lens_and_step, logical_caches, out_f32, params_rows, rows_name, split_tiles,
};

/// Which decode-attention kernel computes the partials.
#[derive(Clone, Copy, Debug)]
enum SplitKernel {
    /// attn_split.comp with K/V tiles of this many positions.
    Tiled(u32),
    /// attn_split_sg.comp with subgroups of this size (the device's), loads in flight per lane
    /// and K rows read by one lane (0) or eight (1).
    Subgroup(u32, u32, u32),
}

/// The kernels the device runs: the tiled one at each tile size, and the subgroup one where the
/// device has subgroup arithmetic (as the engine's tuning picks it).
fn kernels(gpu: &Gpu) -> Vec<SplitKernel> {
    let mut k: Vec<SplitKernel> = split_tiles(gpu)
        .into_iter()
        .map(SplitKernel::Tiled)
        .collect();
    let info = gpu.info();
    let sg =
        decoder::exec::program::Tuning::for_device(info.compute_units, info.subgroup_size, 4096, 8)
            .with_subgroups(
                info.subgroup_size,
                info.subgroup_arithmetic && info.subgroup_shuffle,
            )
            .attn_sg;
    if sg > 0 {
        for unroll in [8, 16, 32].into_iter().filter(|&u| u <= sg) {
            for kcoop in [0, 1, 2] {
                k.push(SplitKernel::Subgroup(sg, unroll, kcoop));
            }
        }
    } else {
        eprintln!(
            "this device has no subgroup arithmetic at subgroup size {}: attn_split_sg is not run",
            info.subgroup_size
        );
    }
    k
}

/// One split + merge run: `rows` over `layout`, checked against the CPU.
#[allow(clippy::too_many_arguments)]
fn split_and_merge(
    gpu: &Gpu,
    layout: &KvLayout,
    dims: AttnDims,
    rows: &[RowParams],
    n_splits: usize,
    wg: u32,
    kernel: SplitKernel,
    seed: u64,
) {
    let AttnDims {
        heads,
        kv_heads,
        head_dim: hd,
    } = dims;
    let n = rows.len();
    let kv_dim = kv_heads * hd;
    let lens: Vec<usize> = (0..layout.geo.seqs as usize)
        .map(|s| layout.held(s).end)
        .collect();
    let k = layout.round(&logical_caches(&lens, kv_dim, seed + 1, 1.0));
    let v = layout.round(&logical_caches(&lens, kv_dim, seed + 2, 1.0));
    let scale = 1.0 / (hd as f32).sqrt();
    // Larger q so the softmax is peaked and the online rescaling matters.
    let q: Vec<f32> = common::rand_vec(n * heads * hd, seed)
        .iter()
        .map(|x| 4.0 * x)
        .collect();
    let push = AttnSplitPush {
        heads: heads as u32,
        kv_heads: kv_heads as u32,
        head_dim: hd as u32,
        n_splits: n_splits as u32,
        scale,
        ..Default::default()
    };
    let stride = hd + 2;
    // The engine's launch of each kernel: the tiled one workgroup per split; the subgroup one
    // four subgroups (at least 64 invocations) per workgroup, one split each.
    let (shader, spec, groups) = match kernel {
        SplitKernel::Tiled(tile) => (
            Shader::AttnSplit,
            vec![(id::WG, wg), (id::TILE, tile)],
            n_splits as u32,
        ),
        SplitKernel::Subgroup(sg, unroll, kcoop) => {
            let wg = (4 * sg).max(64);
            (
                Shader::AttnSplitSg,
                vec![
                    (id::WG, wg),
                    (id::KCOOP, kcoop),
                    (id::SG, sg),
                    (id::UNROLL, unroll),
                ],
                (n_splits as u32).div_ceil(wg / sg),
            )
        }
    };
    let out = launch(
        gpu,
        shader,
        push.bytes(),
        [groups, kv_heads as u32, n as u32],
        &layout.spec(&spec),
        &[
            params_rows(rows),
            Binding::input_f32(&q),
            layout.table(),
            layout.cache(&k),
            layout.cache(&v),
            Binding::output_f32(n * heads * n_splits * stride, f32::NAN),
        ],
    );
    let got = out_f32(&out, 5);
    let want: Vec<f32> = rows
        .iter()
        .enumerate()
        .flat_map(|(t, r)| {
            let s = r.seq as usize;
            attn_split_cpu(
                &q[t * heads * hd..(t + 1) * heads * hd],
                &k[s],
                &v[s],
                dims,
                r.lo as usize,
                r.pos as usize + 1,
                n_splits,
                scale,
            )
        })
        .collect();
    let what = format!(
        "{kernel:?} {} heads={heads} kv_heads={kv_heads} hd={hd} rows={} n_splits={n_splits} wg={wg}",
        layout.case.name(),
        rows_name(rows)
    );
    for (i, (g, w)) in got.chunks(stride).zip(want.chunks(stride)).enumerate() {
        let (t, h, split) = (i / (heads * n_splits), i / n_splits % heads, i % n_splits);
        let at = format!("{what}: row {t} head {h} split {split}");
        if w[0] == f32::NEG_INFINITY {
            // An empty split: exactly (-inf, 0, 0...).
            assert!(
                g[0] == f32::NEG_INFINITY && g[1..].iter().all(|x| *x == 0.0),
                "{at}: empty split: {:?}",
                &g[..4]
            );
            continue;
        }
        // m: a dot product of hd terms |q k| <= 4 * scale: 1e-5 absolute.
        assert_close(&g[..1], &w[..1], 1e-5, 1e-5, &format!("{at}: m"));
        // l and o are sums of exp(score - m) (<= 1 each) times |v| < 1; exp of scores that
        // differ by ~1e-5 adds 1e-5 relative: 2e-5 of l.
        assert_close(&g[1..], &w[1..], 2e-5 * w[1], 0.0, &format!("{at}: l, o"));
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
        [heads as u32, n as u32, 1],
        &[(id::WG, wg)],
        &[
            Binding::input_f32(&got),
            Binding::output_f32(n * heads * hd, f32::NAN),
        ],
    );
    // A convex combination of v values in [-1, 1): 2e-5 absolute.
    assert_close(
        &out_f32(&merged, 1),
        &attention_seqs_cpu(&q, &k, &v, dims, rows, scale),
        2e-5,
        0.0,
        &format!("{what}: merged"),
    );
}

#[test]
fn attn_split_and_merge_layouts_gqa_splits() {
    common::with_gpu(|gpu| {
        let max_seq = 304;
        let kernels = kernels(gpu);
        // (n_splits, WG, positions of sequences 0, 1, 2 (rows in the order 2, 0, 1)): one split
        // over several tiles next to a single-position row; uneven chunks; a last split shorter
        // than the others; more splits than positions (empty splits); 256 splits and the last
        // slot of the cache.
        let steps: [(usize, u32, [usize; 3]); 5] = [
            (1, 64, [0, 76, 4]),
            (3, 32, [4, 99, 8]),
            (7, 64, [99, 32, 299]),
            (64, 128, [32, 8, 129]),
            (256, 256, [129, 303, 40]),
        ];
        for (i, &(heads, kv_heads, hd)) in ATTN_SHAPES.iter().enumerate() {
            for (c, case) in KV_CASES.iter().enumerate() {
                // Keep the suite quick (each new pipeline costs lavapipe up to a second): each
                // (shape, layout) runs one step; over the shapes, every layout runs every step.
                let s = (i + c) % steps.len();
                let (n_splits, step_wg, pos) = steps[s];
                // Workgroup sizes on the first layout; the others at the engine's CPU-driver
                // size (each (WG, layout) pair is a pipeline that lavapipe compiles for ~1 s).
                let wg = if c == 0 { step_wg } else { 64 };
                let kernel = kernels[(i + c) % kernels.len()];
                let window = if case.rotating() {
                    40
                } else {
                    [0, 50][(i + s) % 2]
                };
                let rows = decode_rows(&[(2, pos[2]), (0, pos[0]), (1, pos[1])], window);
                let (lens, step) = lens_and_step(&rows, 3);
                let layout = KvLayout::new(*case, kv_heads * hd, max_seq, &lens, step, window);
                assert!(!case.rotating() || layout.wrapped(), "the ring must wrap");
                let dims = AttnDims {
                    heads,
                    kv_heads,
                    head_dim: hd,
                };
                let seed = 2000 + 100 * i as u64 + 10 * c as u64;
                split_and_merge(gpu, &layout, dims, &rows, n_splits, wg, kernel, seed);
            }
        }
    });
}

#[test]
fn attn_split_paged_row_longer_than_the_staged_table() {
    // The shader stages 256 block-table entries at a time: a split of more than 256 blocks of 16
    // positions restages them mid-split. Two sequences on one fragmented pool; one split (all of
    // a row's tiles in one workgroup), then two splits under a window whose start is not
    // block-aligned (the second split starts mid-table).
    common::with_gpu(|gpu| {
        let case = KvCase {
            kind: decoder::kv::KvKind::Paged,
            dtype: decoder::kv::KvDtype::F16,
            block: 16,
            fragment: true,
        };
        let (heads, kv_heads, hd) = (4, 1, 64);
        let max_seq = 4400;
        let kernels = kernels(gpu);
        for (n_splits, window) in [(1, 0), (2, 4300)] {
            let rows = decode_rows(&[(1, 4390), (0, 4123)], window);
            let (lens, step) = lens_and_step(&rows, 2);
            let layout = KvLayout::new(case, kv_heads * hd, max_seq, &lens, step, window);
            let dims = AttnDims {
                heads,
                kv_heads,
                head_dim: hd,
            };
            for kernel in &kernels {
                split_and_merge(
                    gpu,
                    &layout,
                    dims,
                    &rows,
                    n_splits,
                    64,
                    *kernel,
                    77 + n_splits as u64,
                );
            }
        }
    });
}
