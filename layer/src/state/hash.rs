//! The layer's hashing: stable across runs and builds (signatures, stable pipeline names) and
//! cheap enough for handle-keyed maps on the program's threads.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use profiler::rng::{GOLDEN_GAMMA, mix64};

/// Mixes `v` into the hash `h` (SplitMix64's step and output function over h ^ v, the
/// profiler's [`mix64`]): deterministic across runs.
#[inline]
pub fn mix(h: u64, v: u64) -> u64 {
    mix64((h ^ v).wrapping_add(GOLDEN_GAMMA))
}

/// A hash of bytes built from [`mix`] (stable across runs and builds, unlike `DefaultHasher`).
pub fn hash_bytes(bytes: &[u8]) -> u64 {
    let mut h = 0u64;
    for c in bytes.chunks(8) {
        let mut w = [0u8; 8];
        w[..c.len()].copy_from_slice(c);
        h = mix(h, u64::from_le_bytes(w));
    }
    mix(h, bytes.len() as u64)
}

/// The hasher of the layer's handle-keyed maps: one [`mix`] per integer written.
#[derive(Clone, Copy, Debug, Default)]
pub struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        self.0 = mix(self.0, hash_bytes(bytes));
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = mix(self.0, v);
    }
    fn write_u32(&mut self, v: u32) {
        self.0 = mix(self.0, v as u64);
    }
    fn write_usize(&mut self, v: usize) {
        self.0 = mix(self.0, v as u64);
    }
}

/// A map keyed by handles (or small tuples of them).
pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<KeyHasher>>;
