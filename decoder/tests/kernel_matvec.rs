//! matvec.comp (primitive, batched over tokens) against its CPU computation: odd row and column
//! counts (both the f16-pair and the scalar column paths), row counts that are not multiples of
//! ROWS, several tokens, several workgroup sizes.
mod common;
mod kernel_support;

use decoder::exec::harness::Binding;
use decoder::exec::kernels::{MatvecPush, matvec_cpu};
use decoder::shaders::Shader;
use decoder::shaders::spec as id;
use kernel_support::{assert_close_scaled, f16_vec, launch, out_f32};

#[test]
fn matvec_odd_sizes() {
    common::with_gpu(|gpu| {
        // (rows, cols, n_tokens, WG, ROWS)
        for (rows, cols, n_tokens, wg, rows_per_group) in [
            (1, 1, 1, 32, 1),
            (67, 129, 1, 64, 1),
            (130, 256, 3, 128, 4),
            (33, 1001, 2, 32, 3),
            (5, 64, 4, 256, 8),
            (97, 96, 1, 64, 2),
        ] {
            let w = f16_vec(rows * cols, (rows * cols) as u64, 1.0);
            let x = common::rand_vec(n_tokens * cols, cols as u64 + 11);
            let push = MatvecPush {
                rows: rows as u32,
                cols: cols as u32,
                n_tokens: n_tokens as u32,
                pad0: 0,
            };
            let out = launch(
                gpu,
                Shader::Matvec,
                push.bytes(),
                [(rows as u32).div_ceil(rows_per_group), n_tokens as u32, 1],
                &[(id::WG, wg), (id::ROWS, rows_per_group)],
                &[
                    Binding::input_f16(&w),
                    Binding::input_f32(&x),
                    Binding::output_f32(n_tokens * rows, f32::NAN),
                ],
            );
            let abs = |v: &[f32]| v.iter().map(|a| a.abs()).collect::<Vec<_>>();
            let magnitude = matvec_cpu(&abs(&w), &abs(&x), rows, cols);
            // f16 weights are exact; f32 sums in another order: |diff| <= 1e-5 * sum |w x|.
            assert_close_scaled(
                &out_f32(&out, 2),
                &matvec_cpu(&w, &x, rows, cols),
                &magnitude,
                1e-5,
                &format!(
                    "matvec rows={rows} cols={cols} tokens={n_tokens} wg={wg} ROWS={rows_per_group}"
                ),
            );
        }
    });
}

/// matvec.comp (decode and batched) and matmul.comp (prompt chunks) reading GGUF blocks of every
/// type the kernels decode, against the CPU product with the blocks' dequantization (what the
/// reference computes with): odd row counts, rows per workgroup that do not divide them, several
/// tokens.
#[test]
fn matvec_and_matmul_decode_every_block_type() {
    use decoder::gguf::dequantize;
    use decoder::gguf::quantize::quantize;
    use decoder::model::WeightType;
    common::with_gpu(|gpu| {
        let (rows, cols, n_tokens) = (37usize, 512usize, 5usize);
        let x = common::rand_vec(n_tokens * cols, 5);
        for t in WeightType::ALL
            .into_iter()
            .filter(|&t| t != WeightType::F16)
        {
            let values = common::rand_vec(rows * cols, t.spec_id() as u64);
            let mut bytes = quantize(t, &values);
            let w = dequantize(t.ggml(), &bytes, rows * cols).expect("dequantize");
            bytes.resize(bytes.len().div_ceil(4) * 4, 0);
            let words: Vec<u32> = bytes
                .chunks_exact(4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            let push = MatvecPush {
                rows: rows as u32,
                cols: cols as u32,
                n_tokens: n_tokens as u32,
                pad0: 0,
            };
            let abs = |v: &[f32]| v.iter().map(|a| a.abs()).collect::<Vec<_>>();
            let magnitude = matvec_cpu(&abs(&w), &abs(&x), rows, cols);
            let want = matvec_cpu(&w, &x, rows, cols);
            let bindings = [
                Binding::input_u32(&words),
                Binding::input_f32(&x),
                Binding::output_f32(n_tokens * rows, f32::NAN),
            ];
            let wt = (id::WTYPE, t.spec_id());
            for (shader, groups, spec) in [
                (
                    Shader::Matvec,
                    [(rows as u32).div_ceil(3), n_tokens as u32, 1],
                    vec![(id::WG, 64), (id::ROWS, 3), wt],
                ),
                (
                    Shader::Matmul,
                    [
                        (rows as u32).div_ceil(32),
                        (n_tokens as u32).div_ceil(32),
                        1,
                    ],
                    vec![(id::WG, 64), wt],
                ),
            ] {
                let out = launch(gpu, shader, push.bytes(), groups, &spec, &bindings);
                // The decoded weights are exact; f32 sums in another order.
                assert_close_scaled(
                    &out_f32(&out, 2),
                    &want,
                    &magnitude,
                    1e-5,
                    &format!("{shader:?} {t} rows={rows} cols={cols} tokens={n_tokens}"),
                );
            }
        }
    });
}
