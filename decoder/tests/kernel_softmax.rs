//! softmax.comp against its CPU computation: causal rows of different lengths (first positions 0
//! and > 0, several tokens), rows longer than the workgroup, entries past each row untouched.
mod common;
mod kernel_support;

use decoder::exec::harness::Binding;
use decoder::exec::kernels::{SoftmaxPush, softmax_cpu};
use decoder::shaders::Shader;
use kernel_support::{assert_close, launch, out_f32, params};

#[test]
fn softmax_causal_rows() {
    common::with_gpu(|gpu| {
        // (heads, pos0, n_tokens, stride, WG)
        for (heads, pos0, n_tokens, stride, wg) in [
            (1, 0, 1, 1, 32),
            (3, 0, 4, 7, 32),
            (2, 9, 3, 13, 64),
            (5, 300, 2, 305, 128),
            (4, 70, 3, 77, 256),
        ] {
            let mut s: Vec<f32> =
                common::rand_vec(n_tokens * heads * stride, (pos0 + stride) as u64)
                    .iter()
                    .map(|v| v * 8.0)
                    .collect();
            // Past each causal row: a sentinel that must survive.
            for (r, row) in s.chunks_mut(stride).enumerate() {
                for v in &mut row[(pos0 + r / heads + 1).min(stride)..] {
                    *v = 1234.5;
                }
            }
            let push = SoftmaxPush {
                heads: heads as u32,
                stride: stride as u32,
                ..Default::default()
            };
            let out = launch(
                gpu,
                Shader::Softmax,
                push.bytes(),
                [heads as u32, n_tokens as u32, 1],
                &[wg],
                &[
                    params(pos0, n_tokens, pos0 + n_tokens),
                    Binding::inout_f32(&s),
                ],
            );
            let mut want = s.clone();
            softmax_cpu(&mut want, heads, stride, pos0);
            // exp and the sum in another order: 1e-5 relative + 1e-7 absolute; the sentinels
            // are compared with 0 tolerance beyond that (1234.5 * 1e-5 would be too lax, so
            // they are asserted exactly below).
            let got = out_f32(&out, 1);
            let what = format!(
                "softmax heads={heads} pos0={pos0} tokens={n_tokens} stride={stride} wg={wg}"
            );
            assert_close(&got, &want, 1e-7, 1e-5, &what);
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                if *w == 1234.5 {
                    assert!(
                        *g == 1234.5,
                        "{what}: entry {i} past the causal row was written ({g})"
                    );
                }
            }
        }
    });
}
