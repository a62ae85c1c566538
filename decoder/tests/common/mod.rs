//! Shared helpers for the decoder's GPU tests.
#![allow(dead_code)]

use decoder::vk::{Gpu, GpuOptions};

/// Opens the test device with the validation layer on (`DECODESCOPE_DEVICE` picks one, as
/// `--device` does), runs `f`, and fails if the validation layer reported any warning or error.
pub fn with_gpu<T>(f: impl FnOnce(&Gpu) -> T) -> T {
    let gpu = Gpu::new(&GpuOptions {
        device: std::env::var("DECODESCOPE_DEVICE").ok(),
        validation: true,
    })
    .expect("open a Vulkan device with validation (run scripts/setup.sh)");
    let out = f(&gpu);
    gpu.wait_idle().expect("device idle");
    let messages = gpu.validation_messages();
    assert!(
        messages.is_empty(),
        "validation layer reported {} message(s):\n{}",
        messages.len(),
        messages.join("\n")
    );
    out
}

/// Deterministic pseudo-random values in [-1, 1) (SplitMix64).
pub fn rand_vec(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    (0..n)
        .map(|_| {
            s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            (z >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

/// Largest absolute difference between two slices of equal length.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "length mismatch");
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}
