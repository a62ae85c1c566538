//! add.comp against its CPU computation on lengths that are not multiples of the workgroup size.
mod common;
mod kernel_support;

use decoder::exec::harness::Binding;
use decoder::exec::kernels::{AddPush, add_cpu};
use decoder::shaders::Shader;
use decoder::shaders::spec as id;
use kernel_support::{assert_exact, launch, out_f32};

#[test]
fn add_odd_sizes() {
    common::with_gpu(|gpu| {
        for (n, wg) in [(1, 32), (63, 64), (1000, 256), (4097, 128)] {
            let x = common::rand_vec(n, 1 + n as u64);
            let y = common::rand_vec(n, 2 + n as u64);
            let push = AddPush {
                n: n as u32,
                ..Default::default()
            };
            // One extra element past n must stay untouched.
            let mut x_ext = x.clone();
            x_ext.push(42.0);
            let out = launch(
                gpu,
                Shader::Add,
                push.bytes(),
                [(n as u32).div_ceil(wg), 1, 1],
                &[(id::WG, wg)],
                &[Binding::inout_f32(&x_ext), Binding::input_f32(&y)],
            );
            let mut want = x.clone();
            add_cpu(&mut want, &y);
            want.push(42.0);
            // One f32 add per element, the same on both sides: bitwise equality.
            assert_exact(&out_f32(&out, 0), &want, &format!("add n={n} wg={wg}"));
        }
    });
}
