//! Helpers shared by the kernel tests (`tests/kernel_*.rs`): launching one kernel with the
//! validation layer on, f16-representable inputs, and tolerance checks that say what failed.
#![allow(dead_code)]

use decoder::exec::harness::{Binding, Launch, run_kernel};
use decoder::shaders::Shader;
use decoder::vk::{Gpu, SPEC_CONSTANTS};

/// Runs `shader` once and returns the read-back bindings (in binding order).
pub fn launch(
    gpu: &Gpu,
    shader: Shader,
    push: Vec<u8>,
    groups: [u32; 3],
    spec: &[u32],
    bindings: &[Binding],
) -> Vec<Option<Vec<u8>>> {
    let mut s = [0u32; SPEC_CONSTANTS];
    s[..spec.len()].copy_from_slice(spec);
    let launch = Launch {
        shader,
        push,
        groups,
        spec: s,
    };
    run_kernel(gpu, &launch, bindings).unwrap_or_else(|e| panic!("run {}: {e}", shader.name()))
}

/// Binding `i` of a launch's results as f32.
pub fn out_f32(out: &[Option<Vec<u8>>], i: usize) -> Vec<f32> {
    decoder::exec::harness::f32s(out[i].as_ref().expect("binding read back"))
}

/// Binding `i` of a launch's results as u32.
pub fn out_u32(out: &[Option<Vec<u8>>], i: usize) -> Vec<u32> {
    out[i]
        .as_ref()
        .expect("binding read back")
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// The `TokenParams` binding for a step.
pub fn params(pos0: usize, n_tokens: usize, kv_len: usize) -> Binding {
    Binding::input_u32(&[pos0 as u32, n_tokens as u32, kv_len as u32, 0])
}

/// Values in [-scale, scale) rounded to f16, so an f16 upload holds them exactly.
pub fn f16_vec(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    crate::common::rand_vec(n, seed)
        .iter()
        .map(|v| half::f16::from_f32(v * scale).to_f32())
        .collect()
}

/// Asserts `|got[i] - want[i]| <= tol * scale[i]` for every i. `scale` is the magnitude the
/// result was computed from (e.g. the sum of |terms| of a dot product), so `tol` bounds the
/// relative rounding of an f32 sum taken in another order.
pub fn assert_close_scaled(got: &[f32], want: &[f32], scale: &[f32], tol: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for i in 0..got.len() {
        let allowed = tol * scale[i];
        let err = (got[i] - want[i]).abs();
        // Written so that a NaN on either side fails.
        assert!(
            err <= allowed,
            "{what}: element {i}: got {} want {} (|diff| {err} > {allowed})",
            got[i],
            want[i]
        );
    }
}

/// Asserts `|got[i] - want[i]| <= atol + rtol * |want[i]|` for every i.
pub fn assert_close(got: &[f32], want: &[f32], atol: f32, rtol: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for i in 0..got.len() {
        let allowed = atol + rtol * want[i].abs();
        let err = (got[i] - want[i]).abs();
        assert!(
            err <= allowed,
            "{what}: element {i}: got {} want {} (|diff| {err} > {allowed})",
            got[i],
            want[i]
        );
    }
}

/// Asserts bitwise equality (values that are computed exactly, e.g. f16 widened to f32).
pub fn assert_exact(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            g.to_bits() == w.to_bits(),
            "{what}: element {i}: got {g} want {w}"
        );
    }
}

/// RoPE inverse frequencies for theta = 10000, as the model config computes them unscaled.
pub fn inv_freq(head_dim: usize) -> Vec<f32> {
    (0..head_dim / 2)
        .map(|i| (1.0 / 10000f64.powf(2.0 * i as f64 / head_dim as f64)) as f32)
        .collect()
}

/// The attention shapes every attention test covers: GQA ratios 1, 3, 4 and 8 with head_dim 64
/// and 128, as (heads, kv_heads, head_dim).
pub const ATTN_SHAPES: [(usize, usize, usize); 5] = [
    (2, 2, 64),
    (6, 2, 128),
    (4, 1, 64),
    (8, 1, 128),
    (16, 2, 64),
];

/// A KV cache `[max_seq, kv_heads, head_dim]` with values in [-1, 1) for positions `< filled` and
/// NaN after them, so a kernel that reads past the attended positions poisons its output.
pub fn kv_cache(max_seq: usize, row: usize, filled: usize, seed: u64) -> Vec<f32> {
    let mut c = crate::common::rand_vec(max_seq * row, seed);
    for v in &mut c[filled * row..] {
        *v = f32::NAN;
    }
    c
}
