//! argmax.comp against its CPU computation: lengths that are not multiples of the workgroup
//! size, ties (the lowest index must win, also across invocations), all-negative values.
mod common;
mod kernel_support;

use decoder::exec::harness::Binding;
use decoder::exec::kernels::{ArgmaxPush, argmax_cpu};
use decoder::shaders::Shader;
use kernel_support::{launch, out_u32};

#[test]
fn argmax_ties_and_odd_sizes() {
    common::with_gpu(|gpu| {
        let mut cases: Vec<(Vec<f32>, u32)> = Vec::new();
        for (n, wg) in [(1, 32), (7, 64), (1000, 256), (4099, 128), (151, 32)] {
            cases.push((common::rand_vec(n, n as u64), wg));
        }
        // Ties: the max at indices 3, 700 and 2500 (different invocations for every WG).
        let mut tie = common::rand_vec(3000, 5);
        for i in [2500, 700, 3] {
            tie[i] = 2.0;
        }
        cases.push((tie.clone(), 64));
        cases.push((tie, 256));
        // All negative, the max last.
        let mut neg: Vec<f32> = common::rand_vec(513, 6)
            .iter()
            .map(|v| v.abs() - 3.0)
            .collect();
        neg[512] = -0.5;
        cases.push((neg, 32));
        for (x, wg) in cases {
            let out = launch(
                gpu,
                Shader::Argmax,
                ArgmaxPush {
                    n: x.len() as u32,
                    ..Default::default()
                }
                .bytes(),
                [1, 1, 1],
                &[wg],
                &[
                    Binding::input_f32(&x),
                    Binding {
                        bytes: vec![0xAB; 8],
                        read_back: true,
                    },
                ],
            );
            let got = out_u32(&out, 1);
            let (idx, val) = argmax_cpu(&x).expect("non-empty input");
            // Exact: an index and the bits of an input value.
            assert_eq!(
                (got[0], f32::from_bits(got[1])),
                (idx, val),
                "argmax n={} wg={wg}",
                x.len()
            );
        }
    });
}
