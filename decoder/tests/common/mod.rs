//! Shared helpers for the decoder's GPU tests.
#![allow(dead_code)]

use decoder::vk::{Gpu, GpuOptions};
use profiler::rng::Rng;

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

/// Deterministic pseudo-random values in [-1, 1): the first of each draw's
/// [`Rng::pair_symmetric`] after one skipped draw (the stream these tests' tolerances were set on).
pub fn rand_vec(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = Rng::new(seed);
    rng.next_u64();
    (0..n).map(|_| rng.pair_symmetric().0).collect()
}

/// Largest absolute difference between two slices of equal length.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "length mismatch");
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}
