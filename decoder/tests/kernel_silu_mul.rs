//! silu_mul.comp against its CPU computation on lengths that are not multiples of the workgroup
//! size, with gate values large enough to saturate the sigmoid.
mod common;
mod kernel_support;

use decoder::exec::harness::Binding;
use decoder::exec::kernels::{SiluMulPush, silu_mul_cpu};
use decoder::shaders::Shader;
use decoder::shaders::spec as id;
use kernel_support::{assert_close, launch, out_f32};

#[test]
fn silu_mul_odd_sizes() {
    common::with_gpu(|gpu| {
        for (n, wg) in [(1, 32), (65, 64), (1000, 256), (3001, 128)] {
            let g: Vec<f32> = common::rand_vec(n, 3 + n as u64)
                .iter()
                .map(|v| v * 12.0)
                .collect();
            let u = common::rand_vec(n, 4 + n as u64);
            let push = SiluMulPush {
                n: n as u32,
                ..Default::default()
            };
            let out = launch(
                gpu,
                Shader::SiluMul,
                push.bytes(),
                [(n as u32).div_ceil(wg), 1, 1],
                &[(id::WG, wg)],
                &[
                    Binding::input_f32(&g),
                    Binding::input_f32(&u),
                    Binding::output_f32(n, f32::NAN),
                ],
            );
            // exp on the GPU is within a few ulp of the CPU's: 1e-5 relative (+1e-6 near 0).
            assert_close(
                &out_f32(&out, 2),
                &silu_mul_cpu(&g, &u),
                1e-6,
                1e-5,
                &format!("silu_mul n={n} wg={wg}"),
            );
        }
    });
}
