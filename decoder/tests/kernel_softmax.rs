//! softmax.comp against its CPU computation: rows of a prompt chunk (first positions 0 and > 0)
//! and of a decode step of several sequences, sliding windows (lo > 0), rows longer than the
//! workgroup; entries outside each row's range `[lo, pos]` (before and after it) untouched.
mod common;
mod kernel_support;

use decoder::exec::harness::Binding;
use decoder::exec::kernels::{RowParams, SoftmaxPush};
use decoder::shaders::Shader;
use decoder::shaders::spec as id;
use kernel_support::{
    assert_close, chunk_rows, decode_rows, launch, out_f32, params, params_rows, rows_name,
    softmax_rows_cpu,
};

/// (heads, rows, stride, WG, whether the binding comes from `params` (lo = 0, sequence 0))
type Case = (usize, Vec<RowParams>, usize, u32, bool);

#[test]
fn softmax_rows_and_windows() {
    common::with_gpu(|gpu| {
        let cases: Vec<Case> = vec![
            (1, chunk_rows(0, 0, 1, 0), 1, 32, true),
            (3, chunk_rows(0, 0, 4, 0), 7, 32, true),
            (2, chunk_rows(0, 9, 3, 0), 13, 64, true),
            (5, chunk_rows(0, 300, 2, 0), 305, 128, true),
            (4, chunk_rows(1, 70, 3, 20), 77, 256, false),
            (
                3,
                decode_rows(&[(2, 300), (0, 4), (1, 77)], 0),
                305,
                64,
                false,
            ),
            (
                2,
                decode_rows(&[(1, 300), (0, 40), (2, 7)], 33),
                303,
                32,
                false,
            ),
        ];
        for (heads, rows, stride, wg, prompt) in cases {
            let n = rows.len();
            let seed = (stride + 10 * n + heads) as u64;
            let mut s: Vec<f32> = common::rand_vec(n * heads * stride, seed)
                .iter()
                .map(|v| v * 8.0)
                .collect();
            // Outside each row's range: a sentinel that must survive.
            let outside = |i: usize, j: usize| {
                let r = rows[i / heads];
                j < r.lo as usize || j > r.pos as usize
            };
            for (i, line) in s.chunks_mut(stride).enumerate() {
                for (j, v) in line.iter_mut().enumerate() {
                    if outside(i, j) {
                        *v = 1234.5;
                    }
                }
            }
            let prm = if prompt {
                params(rows[0].pos as usize, n, rows[n - 1].pos as usize + 1)
            } else {
                params_rows(&rows)
            };
            let push = SoftmaxPush {
                heads: heads as u32,
                stride: stride as u32,
                ..Default::default()
            };
            let out = launch(
                gpu,
                Shader::Softmax,
                push.bytes(),
                [heads as u32, n as u32, 1],
                &[(id::WG, wg)],
                &[prm, Binding::inout_f32(&s)],
            );
            let mut want = s.clone();
            softmax_rows_cpu(&mut want, heads, stride, &rows);
            let got = out_f32(&out, 1);
            let what = format!(
                "softmax heads={heads} rows={} stride={stride} wg={wg}",
                rows_name(&rows)
            );
            // exp and the sum in another order: 1e-5 relative + 1e-7 absolute. The sentinels are
            // asserted exactly below (1234.5 * 1e-5 would be too lax).
            assert_close(&got, &want, 1e-7, 1e-5, &what);
            for (i, line) in got.chunks(stride).enumerate() {
                for (j, g) in line.iter().enumerate() {
                    if outside(i, j) {
                        assert!(
                            *g == 1234.5,
                            "{what}: entry ({i}, {j}) outside the row's range was written ({g})"
                        );
                    }
                }
            }
        }
    });
}
