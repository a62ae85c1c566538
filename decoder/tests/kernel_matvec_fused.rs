//! matvec_fused.comp against its CPU computation: every epilogue (store, residual, SwiGLU) with
//! and without the folded RMSNorm; both load widths (cols % 8 == 0: 8 halves per load, cols % 8
//! == 4: 4 halves); row counts that are not multiples of ROWS; workgroup sizes 32 to 256; one
//! token row or several (one workgroup row per token row, as a batched decode step runs it).
mod common;
mod kernel_support;

use decoder::exec::harness::Binding;
use decoder::exec::kernels::{
    Epilogue, MatvecFusedPush, matvec_cpu, matvec_fused_cpu, rmsnorm_cpu,
};
use decoder::shaders::Shader;
use decoder::shaders::spec as id;
use kernel_support::{assert_close_scaled, f16_vec, launch, out_f32};

#[test]
fn matvec_fused_epilogues_norm_and_widths() {
    common::with_gpu(|gpu| {
        let eps = 1e-6;
        // (rows, cols, WG, ROWS, token rows)
        let shapes = [
            (37, 132, 32, 1, 1),
            (70, 256, 64, 4, 3),
            (129, 520, 128, 2, 2),
            (5, 100, 256, 8, 4),
            (33, 1028, 64, 3, 1),
        ];
        let mut case = 0u64;
        for epilogue in [Epilogue::Store, Epilogue::Residual, Epilogue::SwiGlu] {
            for norm in [false, true] {
                for &(rows, cols, wg, rows_per_group, n) in &shapes {
                    case += 1;
                    let w_rows = if epilogue == Epilogue::SwiGlu {
                        2 * rows
                    } else {
                        rows
                    };
                    let w = f16_vec(w_rows * cols, 10 * case, 1.0);
                    let x: Vec<f32> = common::rand_vec(n * cols, 20 * case)
                        .iter()
                        .map(|v| 3.0 * v)
                        .collect();
                    let norm_w: Vec<f32> = common::rand_vec(cols, 30 * case)
                        .iter()
                        .map(|v| 1.0 + 0.5 * v)
                        .collect();
                    let y0 = common::rand_vec(n * rows, 40 * case);
                    let push = MatvecFusedPush {
                        rows: rows as u32,
                        cols: cols as u32,
                        eps,
                        ..Default::default()
                    };
                    let out = launch(
                        gpu,
                        Shader::MatvecFused,
                        push.bytes(),
                        [(rows as u32).div_ceil(rows_per_group), n as u32, 1],
                        &[
                            (id::WG, wg),
                            (id::ROWS, rows_per_group),
                            (id::NORM, norm as u32),
                            (id::EPILOGUE, epilogue.spec()),
                        ],
                        &[
                            Binding::input_f16(&w),
                            Binding::input_f32(&x),
                            Binding::inout_f32(&y0),
                            Binding::input_f32(&norm_w),
                        ],
                    );
                    let mut want = y0.clone();
                    let mut magnitude = Vec::with_capacity(n * rows);
                    for t in 0..n {
                        let xt = &x[t * cols..(t + 1) * cols];
                        matvec_fused_cpu(
                            &w,
                            xt,
                            norm.then_some((norm_w.as_slice(), eps)),
                            epilogue,
                            &mut want[t * rows..(t + 1) * rows],
                        );
                        // The scale of each result: sum |w f(x)| per weight row, times |up| for
                        // SwiGLU's product, plus |y0| for the residual.
                        let fx = if norm {
                            rmsnorm_cpu(xt, &norm_w, cols, eps)
                        } else {
                            xt.to_vec()
                        };
                        let abs = |v: &[f32]| v.iter().map(|a| a.abs()).collect::<Vec<_>>();
                        let mag_rows = matvec_cpu(&abs(&w), &abs(&fx), w_rows, cols);
                        let acc = matvec_cpu(&w, &fx, w_rows, cols);
                        magnitude.extend((0..rows).map(|r| match epilogue {
                            Epilogue::Store => mag_rows[r],
                            Epilogue::Residual => mag_rows[r] + y0[t * rows + r].abs(),
                            Epilogue::SwiGlu => {
                                mag_rows[r] * acc[r + rows].abs().max(1.0)
                                    + mag_rows[r + rows] * acc[r].abs()
                            }
                        }));
                    }
                    // f16 weights exact; f32 sums in another order (and the norm's scale):
                    // |diff| <= 2e-5 * magnitude.
                    assert_close_scaled(
                        &out_f32(&out, 2),
                        &want,
                        &magnitude,
                        2e-5,
                        &format!(
                            "matvec_fused {epilogue:?} norm={norm} rows={rows} cols={cols} tokens={n} wg={wg} ROWS={rows_per_group}"
                        ),
                    );
                }
            }
        }
    });
}
