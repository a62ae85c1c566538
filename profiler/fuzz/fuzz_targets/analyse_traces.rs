//! Fuzzes the statistics and the diff: the input's first 8 bytes seed structured mutations of the
//! golden traces (huge, zero and overflowing numbers; steps removed, repeated or swapped) that the
//! reader accepts, which are then analysed, diffed both ways, gated and rendered without a panic.
//! CI runs the same body over a fixed range of seeds (`tests/analysis_never_panics.rs`).

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut seed = [0u8; 8];
    for (s, d) in seed.iter_mut().zip(data) {
        *s = *d;
    }
    let _ = profiler::fuzzing::exercise_mutated(u64::from_le_bytes(seed));
});
