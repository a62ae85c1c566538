//! embed.comp against its CPU computation: hidden sizes that are not multiples of the workgroup
//! size, repeated ids, the first and last rows of the table.
mod common;
mod kernel_support;

use decoder::exec::harness::Binding;
use decoder::exec::kernels::{EmbedPush, embed_cpu};
use decoder::shaders::Shader;
use decoder::shaders::spec as id;
use kernel_support::{assert_exact, f16_vec, launch, out_f32};

#[test]
fn embed_odd_sizes() {
    common::with_gpu(|gpu| {
        let vocab = 37;
        for (hidden, wg) in [(1, 32), (67, 64), (128, 32), (1000, 256), (257, 128)] {
            let table = f16_vec(vocab * hidden, hidden as u64, 2.0);
            let ids = [0u32, 36, 5, 5, 17];
            let push = EmbedPush {
                hidden: hidden as u32,
                n_tokens: ids.len() as u32,
                ..Default::default()
            };
            let out = launch(
                gpu,
                Shader::Embed,
                push.bytes(),
                [(hidden as u32).div_ceil(wg), ids.len() as u32, 1],
                &[(id::WG, wg)],
                &[
                    Binding::input_u32(&ids),
                    Binding::input_f16(&table),
                    Binding::output_f32(ids.len() * hidden, f32::NAN),
                ],
            );
            // f16 -> f32 widening is exact: bitwise equality.
            assert_exact(
                &out_f32(&out, 2),
                &embed_cpu(&ids, &table, hidden),
                &format!("embed hidden={hidden} wg={wg}"),
            );
        }
    });
}
