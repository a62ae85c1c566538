//! kv_gather.comp (the paged layout's gather into a contiguous scratch) over every KV layout
//! (contiguous f32 and f16, paged blocks of 16 and 32 on fragmented pools, a wrapped rotating
//! ring): MODE 0 gathers each decode row's range `[lo, pos]` of its own sequence (three sequences,
//! rows in another order, windows with lo > 0), MODE 1 the whole step's range of the first row's
//! sequence (a prompt chunk of sequence 1). The copy is exact (16-byte words, f16 or f32), and
//! every scratch position outside the gathered ranges keeps its value.
mod common;
mod kernel_support;

use decoder::exec::harness::Binding;
use decoder::exec::kernels::{KvGatherPush, RowParams};
use decoder::kv::KvDtype;
use decoder::shaders::Shader;
use decoder::shaders::spec as id;
use kernel_support::{
    KV_CASES, KvLayout, assert_exact, chunk_rows, decode, decode_rows, f16_vec, launch,
    lens_and_step, logical_caches, params_rows, rows_name,
};

/// The (sequence, positions) a gather of `rows` in `mode` copies.
fn gathered(rows: &[RowParams], mode: u32) -> Vec<(usize, std::ops::RangeInclusive<usize>)> {
    if mode == 0 {
        rows.iter()
            .map(|r| (r.seq as usize, r.lo as usize..=r.pos as usize))
            .collect()
    } else {
        let (first, last) = (rows[0], rows[rows.len() - 1]);
        vec![(first.seq as usize, first.lo as usize..=last.pos as usize)]
    }
}

#[test]
fn kv_gather_rows_and_whole_step_every_layout() {
    common::with_gpu(|gpu| {
        let max_seq = 40;
        let seqs = 3;
        for (c, case) in KV_CASES.iter().enumerate() {
            for mode in [0u32, 1] {
                let v = c + mode as usize;
                let (kv_dim, wg) = [(128, 64), (192, 32), (128, 128)][v % 3];
                let window = if case.rotating() { 12 } else { [0, 9][v % 2] };
                let rows = if mode == 0 {
                    decode_rows(&[(2, max_seq - 1), (0, 5), (1, 22)], window)
                } else {
                    chunk_rows(1, 20, 6, window)
                };
                let n = rows.len();
                let (lens, step) = lens_and_step(&rows, seqs);
                let layout = KvLayout::new(*case, kv_dim, max_seq, &lens, step, window);
                assert!(!case.rotating() || layout.wrapped(), "the ring must wrap");
                let seed = 60 + 10 * c as u64 + mode as u64;
                let k = layout.round(&logical_caches(&lens, kv_dim, seed, 1.0));
                let v = layout.round(&logical_caches(&lens, kv_dim, seed + 1, 1.0));
                // The scratch `[seqs, max_seq, kv_dim]` starts with other values (f16-exact).
                let scratch = |s: u64| f16_vec(seqs * max_seq * kv_dim, s, 2.0);
                let (k0, v0) = (scratch(seed + 2), scratch(seed + 3));
                let inout = |x: &[f32]| {
                    let b = match case.dtype {
                        KvDtype::F16 => Binding::input_f16(x),
                        KvDtype::F32 => Binding::input_f32(x),
                    };
                    Binding {
                        read_back: true,
                        ..b
                    }
                };
                let row_bytes = kv_dim * case.dtype.bytes() as usize;
                let out = launch(
                    gpu,
                    Shader::KvGather,
                    KvGatherPush {
                        row_words: (row_bytes / 16) as u32,
                        max_seq: max_seq as u32,
                        ..Default::default()
                    }
                    .bytes(),
                    [
                        (max_seq as u32).div_ceil(16),
                        1,
                        if mode == 0 { n as u32 } else { 1 },
                    ],
                    &layout.spec(&[(id::WG, wg), (id::MODE, mode)]),
                    &[
                        params_rows(&rows),
                        layout.table(),
                        layout.cache(&k),
                        layout.cache(&v),
                        inout(&k0),
                        inout(&v0),
                    ],
                );
                let what = format!(
                    "kv_gather {} mode={mode} kv_dim={kv_dim} rows={} wg={wg}",
                    case.name(),
                    rows_name(&rows)
                );
                for (name, logical, init, i) in [("k", &k, &k0, 4), ("v", &v, &v0, 5)] {
                    let mut want = init.clone();
                    for (s, range) in gathered(&rows, mode) {
                        for p in range {
                            let dst = (s * max_seq + p) * kv_dim;
                            want[dst..dst + kv_dim]
                                .copy_from_slice(&logical[s][p * kv_dim..(p + 1) * kv_dim]);
                        }
                    }
                    let got = decode(out[i].as_ref().expect("scratch read back"), case.dtype);
                    // Copies of 16-byte words: exact; untouched positions keep their values.
                    assert_exact(&got, &want, &format!("{what}: {name} scratch"));
                }
            }
        }
    });
}
