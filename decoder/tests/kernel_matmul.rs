//! matmul.comp (the blocked matmul of prompt chunks: 4 rows x 4 tokens per invocation, 32 x 32
//! per workgroup) against a CPU matvec per token: row and token counts that are not multiples of
//! 32 nor of 4 (the clamped loads and masked stores of the tails), a single row or token, column
//! counts that are multiples of 4 but not of 8, f16 weights. Outputs start as NaN so a missed
//! store fails, and a sentinel past the end must survive.
mod common;
mod kernel_support;

use decoder::exec::harness::Binding;
use decoder::exec::kernels::{MatvecPush, matvec_cpu};
use decoder::shaders::Shader;
use decoder::shaders::spec as id;
use kernel_support::{abs_vec, assert_close_scaled, f16_vec, launch, out_f32};

#[test]
fn matmul_tails_against_matvec_per_token() {
    common::with_gpu(|gpu| {
        // (rows, cols, tokens)
        for (rows, cols, n) in [
            (1, 4, 1),
            (37, 132, 5),
            (70, 256, 33),
            (129, 520, 40),
            (33, 1028, 3),
            (96, 64, 64),
            (5, 12, 67),
        ] {
            let w = f16_vec(rows * cols, (rows * cols + n) as u64, 1.0);
            let x = common::rand_vec(n * cols, (cols + 7 * n) as u64);
            let tail = 64;
            let mut init = vec![f32::NAN; n * rows];
            init.extend(std::iter::repeat_n(1234.5, tail));
            let push = MatvecPush {
                rows: rows as u32,
                cols: cols as u32,
                n_tokens: n as u32,
                pad0: 0,
            };
            let out = launch(
                gpu,
                Shader::Matmul,
                push.bytes(),
                [(rows as u32).div_ceil(32), (n as u32).div_ceil(32), 1],
                &[(id::WG, 64)],
                &[
                    Binding::input_f16(&w),
                    Binding::input_f32(&x),
                    Binding::inout_f32(&init),
                ],
            );
            let got = out_f32(&out, 2);
            let what = format!("matmul rows={rows} cols={cols} tokens={n}");
            // f16 weights are exact in f32 and the products too up to one rounding. The CPU sums
            // `cols` terms in order, the GPU sums cols / 4 dot products of 4: to first order the
            // two differ by at most (cols + cols / 4 + 4) units of roundoff (2^-24) of sum |w x|.
            let tol = (cols + cols / 4 + 4) as f32 * f32::EPSILON / 2.0;
            assert_close_scaled(
                &got[..n * rows],
                &matvec_cpu(&w, &x, rows, cols),
                &matvec_cpu(&abs_vec(&w), &abs_vec(&x), rows, cols),
                tol,
                &what,
            );
            assert!(
                got[n * rows..].iter().all(|v| *v == 1234.5),
                "{what}: a store past the output"
            );
        }
    });
}
