//! argmax.comp against its CPU computation: lengths that are not multiples of the workgroup
//! size, ties (the lowest index must win, also across invocations), all-negative values, and
//! steps of several rows (one workgroup per row: indices first, then the values' bits).
mod common;
mod kernel_support;

use decoder::exec::harness::Binding;
use decoder::exec::kernels::{ArgmaxPush, argmax_cpu};
use decoder::shaders::Shader;
use decoder::shaders::spec as id;
use kernel_support::{launch, out_u32};

#[test]
fn argmax_ties_odd_sizes_and_rows() {
    common::with_gpu(|gpu| {
        // (row length n, rows [rows, n], WG)
        let mut cases: Vec<(usize, Vec<f32>, u32)> = Vec::new();
        for (n, wg) in [(1, 32), (7, 64), (1000, 256), (4099, 128), (151, 32)] {
            cases.push((n, common::rand_vec(n, n as u64), wg));
        }
        // Ties: the max at indices 3, 700 and 2500 (different invocations for every WG).
        let mut tie = common::rand_vec(3000, 5);
        for i in [2500, 700, 3] {
            tie[i] = 2.0;
        }
        cases.push((3000, tie.clone(), 64));
        cases.push((3000, tie, 256));
        // All negative, the max last.
        let mut neg: Vec<f32> = common::rand_vec(513, 6)
            .iter()
            .map(|v| v.abs() - 3.0)
            .collect();
        neg[512] = -0.5;
        cases.push((513, neg, 32));
        // Four rows of 777: a tie in row 1 (indices 600 and 5), the max first in row 2, the
        // same max value as row 1 in row 3 at another index.
        let mut batch = common::rand_vec(4 * 777, 7);
        batch[777 + 600] = 3.0;
        batch[777 + 5] = 3.0;
        batch[2 * 777] = 1.5;
        batch[3 * 777 + 400] = 3.0;
        cases.push((777, batch.clone(), 64));
        cases.push((777, batch, 256));
        for (n, x, wg) in cases {
            let rows = x.len() / n;
            let out = launch(
                gpu,
                Shader::Argmax,
                ArgmaxPush {
                    n: n as u32,
                    ..Default::default()
                }
                .bytes(),
                [rows as u32, 1, 1],
                &[(id::WG, wg)],
                &[
                    Binding::input_f32(&x),
                    Binding {
                        bytes: vec![0xAB; 8 * rows],
                        read_back: true,
                    },
                ],
            );
            let got = out_u32(&out, 1);
            for (t, row) in x.chunks(n).enumerate() {
                let (idx, val) = argmax_cpu(row).expect("non-empty row");
                // Exact: an index and the bits of an input value.
                assert_eq!(
                    (got[t], f32::from_bits(got[rows + t])),
                    (idx, val),
                    "argmax n={n} rows={rows} row {t} wg={wg}"
                );
            }
        }
    });
}
