//! kv_append.comp (the primitive KV append) over every KV layout (contiguous f32 and f16, paged
//! blocks of 16 and 32 on fragmented pools, a wrapped rotating ring): a decode step of three
//! sequences (rows in another order than the sequences, position 0 and the last position) and a
//! prompt chunk; row widths that are not multiples of the workgroup size. Each row lands at its
//! slot converted exactly as `half::f16::from_f32` rounds (round to nearest, ties to even,
//! subnormals kept) for an f16 cache and bit for bit for f32; every other held position keeps its
//! value, and slots that hold no position stay NaN.
mod common;
mod kernel_support;

use decoder::exec::harness::Binding;
use decoder::exec::kernels::KvAppendPush;
use decoder::shaders::Shader;
use decoder::shaders::spec as id;
use kernel_support::{
    KV_CASES, KvLayout, chunk_rows, decode_rows, launch, lens_and_step, logical_caches,
    params_rows, rows_name,
};

/// Source rows: random values over several binades, with values whose f16 rounding is a tie (to
/// even: down and up), just off a tie, and f16 subnormals, at the start of every row.
fn source(n: usize, kv_dim: usize, seed: u64) -> Vec<f32> {
    let ulp = 1.0 / 1024.0; // f16 spacing in [1, 2)
    let specials = [
        1.0 + ulp / 2.0,          // tie between 1 and 1 + ulp: to even, 1
        1.0 + 3.0 * ulp / 2.0,    // tie between 1 + ulp and 1 + 2 ulp: to even, 1 + 2 ulp
        -(1.0 + 3.0 * ulp / 2.0), // the same, negative
        1.0 + ulp / 2.0 + 1e-7,   // just above a tie: up
        1.0 + ulp / 2.0 - 1e-7,   // just below a tie: down
        3.0e-6,                   // f16 subnormal
        -1.0e-7,                  // f16 subnormal (the smallest is 6e-8)
        2.0e-8,                   // rounds to 0 in f16
        1000.3,                   // spacing 0.5
        -65000.0,                 // near the f16 maximum (65504)
    ];
    let mut x: Vec<f32> = common::rand_vec(n * kv_dim, seed)
        .iter()
        .enumerate()
        .map(|(i, v)| v * [0.01, 1.0, 37.0, 3000.0][i % 4])
        .collect();
    for row in x.chunks_mut(kv_dim) {
        row[..specials.len()].copy_from_slice(&specials);
    }
    x
}

#[test]
fn kv_append_layouts_rows_f16_rounding() {
    common::with_gpu(|gpu| {
        let max_seq = 40;
        for (c, case) in KV_CASES.iter().enumerate() {
            // (kv_dim, WG, step kind)
            for (kv_dim, wg, kind) in [(192, 128, 0), (64, 256, 1), (1024, 64, c % 2)] {
                let window = if case.rotating() { 8 } else { 0 };
                let rows = if kind == 0 {
                    decode_rows(&[(1, 17), (0, 0), (2, max_seq - 1)], window)
                } else {
                    chunk_rows(1, 27, 5, window)
                };
                let n = rows.len();
                let (lens, step) = lens_and_step(&rows, 3);
                let layout = KvLayout::new(*case, kv_dim, max_seq, &lens, step, window);
                assert!(!case.rotating() || layout.wrapped(), "the ring must wrap");
                let seed = 40 + 10 * c as u64 + kind as u64 + kv_dim as u64;
                // The step's own positions hold stale values before the write.
                let before = layout.round(&logical_caches(&lens, kv_dim, seed, 1.0));
                let src = source(n, kv_dim, seed + 1);
                let out = launch(
                    gpu,
                    Shader::KvAppend,
                    KvAppendPush {
                        kv_dim: kv_dim as u32,
                        ..Default::default()
                    }
                    .bytes(),
                    [(kv_dim as u32).div_ceil(wg), n as u32, 1],
                    &layout.spec(&[(id::WG, wg)]),
                    &[
                        params_rows(&rows),
                        Binding::input_f32(&src),
                        layout.table(),
                        layout.cache_inout(&before),
                    ],
                );
                let mut want = before.clone();
                for (t, r) in rows.iter().enumerate() {
                    let (s, p) = (r.seq as usize, r.pos as usize);
                    want[s][p * kv_dim..(p + 1) * kv_dim]
                        .copy_from_slice(&src[t * kv_dim..(t + 1) * kv_dim]);
                }
                let want = layout.round(&want);
                let what = format!(
                    "kv_append {} kv_dim={kv_dim} rows={} wg={wg}",
                    case.name(),
                    rows_name(&rows)
                );
                let got = layout.logical(out[3].as_ref().expect("cache read back"), &what);
                // A conversion and copies: exact, written rows and untouched rows alike.
                layout.assert_held_exact(&got, &want, &what);
            }
        }
    });
}
