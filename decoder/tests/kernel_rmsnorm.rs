//! rmsnorm.comp against its CPU computation, on row lengths that are not multiples of the
//! workgroup size and with more rows than one workgroup handles.
mod common;

use decoder::exec::harness::{Binding, Launch, f32s, run_kernel};
use decoder::exec::kernels::{RmsNormPush, rmsnorm_cpu};
use decoder::shaders::Shader;

fn check(n: usize, rows: usize, wg: u32) {
    common::with_gpu(|gpu| {
        let x = common::rand_vec(n * rows, n as u64);
        let w: Vec<f32> = common::rand_vec(n, 7)
            .iter()
            .map(|v| 1.0 + 0.5 * v)
            .collect();
        let eps = 1e-6;
        let push = RmsNormPush {
            n: n as u32,
            rows: rows as u32,
            eps,
            pad0: 0,
        };
        let mut spec = [0; decoder::vk::SPEC_CONSTANTS];
        spec[decoder::shaders::spec::WG] = wg;
        let launch = Launch {
            shader: Shader::Rmsnorm,
            push: bytemuck::bytes_of(&push).to_vec(),
            groups: [rows as u32, 1, 1],
            spec,
        };
        let out = run_kernel(
            gpu,
            &launch,
            &[
                Binding::input_f32(&x),
                Binding::input_f32(&w),
                Binding::output_f32(n * rows, f32::NAN),
            ],
        )
        .expect("run rmsnorm");
        let gpu_y = f32s(out[2].as_ref().expect("output read back"));
        let cpu_y = rmsnorm_cpu(&x, &w, n, eps);
        // f32 sums in a different order: relative error ~1e-6 per element.
        let err = common::max_abs_diff(&gpu_y, &cpu_y);
        assert!(err < 1e-4, "n={n} rows={rows} wg={wg}: max abs diff {err}");
    });
}

#[test]
fn rmsnorm_odd_sizes() {
    for (n, rows, wg) in [
        (1, 1, 64),
        (63, 3, 64),
        (65, 5, 64),
        (257, 2, 256),
        (1000, 7, 128),
        (576, 9, 256),
    ] {
        check(n, rows, wg);
    }
}
