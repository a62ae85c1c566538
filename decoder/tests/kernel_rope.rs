//! rope.comp against its CPU computation: head_dim 64 and 128, prompt chunks (first positions 0
//! and > 0) and decode steps whose rows sit at unrelated positions (one per sequence), head counts
//! whose pairs are not multiples of the workgroup size.
mod common;
mod kernel_support;

use decoder::exec::harness::Binding;
use decoder::exec::kernels::{RopePush, RowParams, rope_cpu, rope_table};
use decoder::shaders::Shader;
use decoder::shaders::spec as id;
use kernel_support::{
    assert_close, decode_rows, inv_freq, launch, out_f32, params, params_rows, rows_name,
};

/// (heads, head_dim, rows (None: a prompt chunk pos0..pos0 + n through `params`), pos0, n, WG)
type Case = (usize, usize, Option<Vec<RowParams>>, usize, usize, u32);

#[test]
fn rope_positions_and_head_dims() {
    common::with_gpu(|gpu| {
        let max_seq = 48;
        let cases: [Case; 7] = [
            (1, 64, None, 0, 1, 32),
            (3, 64, None, 5, 3, 64),
            (5, 128, None, 0, 2, 256),
            (7, 128, None, 41, 7, 128),
            (2, 128, None, 47, 1, 32),
            (
                3,
                64,
                Some(decode_rows(&[(0, 30), (1, 2), (2, 47)], 0)),
                0,
                3,
                64,
            ),
            (5, 128, Some(decode_rows(&[(1, 9), (0, 0)], 8)), 0, 2, 32),
        ];
        for (heads, hd, rows, pos0, n, wg) in cases {
            let table = rope_table(&inv_freq(hd), max_seq);
            let x = common::rand_vec(n * heads * hd, (heads * hd + pos0 + n) as u64);
            let (prm, positions, name) = match &rows {
                None => (
                    params(pos0, n, pos0 + n),
                    (pos0..pos0 + n).collect::<Vec<_>>(),
                    format!("pos0={pos0} tokens={n}"),
                ),
                Some(rows) => (
                    params_rows(rows),
                    rows.iter().map(|r| r.pos as usize).collect(),
                    format!("rows={}", rows_name(rows)),
                ),
            };
            let push = RopePush {
                heads: heads as u32,
                head_dim: hd as u32,
                ..Default::default()
            };
            let out = launch(
                gpu,
                Shader::Rope,
                push.bytes(),
                [((heads * hd / 2) as u32).div_ceil(wg), n as u32, 1],
                &[(id::WG, wg)],
                &[prm, Binding::inout_f32(&x), Binding::input_f32(&table)],
            );
            let mut want = x.clone();
            for (t, &pos) in positions.iter().enumerate() {
                rope_cpu(
                    &mut want[t * heads * hd..(t + 1) * heads * hd],
                    heads,
                    hd,
                    pos,
                    &table,
                );
            }
            // Two products and a sum per element, possibly fused on the GPU: 1e-6 absolute
            // (inputs and outputs are within [-1.5, 1.5]).
            assert_close(
                &out_f32(&out, 1),
                &want,
                1e-6,
                1e-6,
                &format!("rope heads={heads} hd={hd} {name} wg={wg}"),
            );
        }
    });
}
