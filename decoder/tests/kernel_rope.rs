//! rope.comp against its CPU computation: head_dim 64 and 128, several tokens, first positions 0
//! and > 0, head counts whose pairs are not multiples of the workgroup size.
mod common;
mod kernel_support;

use decoder::exec::harness::Binding;
use decoder::exec::kernels::{RopePush, rope_cpu, rope_table};
use decoder::shaders::Shader;
use kernel_support::{assert_close, inv_freq, launch, out_f32, params};

#[test]
fn rope_positions_and_head_dims() {
    common::with_gpu(|gpu| {
        let max_seq = 48;
        // (heads, head_dim, pos0, n_tokens, WG)
        for (heads, hd, pos0, n_tokens, wg) in [
            (1, 64, 0, 1, 32),
            (3, 64, 5, 3, 64),
            (5, 128, 0, 2, 256),
            (7, 128, 41, 7, 128),
            (2, 128, 47, 1, 32),
        ] {
            let table = rope_table(&inv_freq(hd), max_seq);
            let x = common::rand_vec(n_tokens * heads * hd, (heads * hd + pos0) as u64);
            let push = RopePush {
                heads: heads as u32,
                head_dim: hd as u32,
                ..Default::default()
            };
            let out = launch(
                gpu,
                Shader::Rope,
                push.bytes(),
                [((heads * hd / 2) as u32).div_ceil(wg), n_tokens as u32, 1],
                &[wg],
                &[
                    params(pos0, n_tokens, pos0 + n_tokens),
                    Binding::inout_f32(&x),
                    Binding::input_f32(&table),
                ],
            );
            let mut want = x.clone();
            rope_cpu(&mut want, heads, hd, pos0, &table);
            // Two products and a sum per element, possibly fused on the GPU: 1e-6 absolute
            // (inputs and outputs are within [-1.5, 1.5]).
            assert_close(
                &out_f32(&out, 1),
                &want,
                1e-6,
                1e-6,
                &format!("rope heads={heads} hd={hd} pos0={pos0} tokens={n_tokens} wg={wg}"),
            );
        }
    });
}
