//! A small deterministic PRNG (SplitMix64): the same seed gives the same stream on every machine,
//! which is what synthetic checkpoints and seeded sampling need.

#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// A generator whose stream depends on `seed` and on `label` (FNV-1a of the label mixed into
    /// the seed), so independent streams (one per tensor) need no shared state.
    pub fn for_label(seed: u64, label: &str) -> Self {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in label.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        let mut g = Self::new(seed ^ h.rotate_left(17));
        g.next_u64();
        g
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1) with 53 bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Two uniforms in [-1, 1) from one draw (24 bits each).
    pub fn next_pair_symmetric(&mut self) -> (f32, f32) {
        let x = self.next_u64();
        let scale = 1.0 / (1u32 << 23) as f32;
        let a = ((x >> 40) as u32) as f32 * scale - 1.0;
        let b = (((x >> 8) & 0xff_ffff) as u32) as f32 * scale - 1.0;
        (a, b)
    }

    /// Uniform integer in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        // Multiply-shift: bias is below 2^-64 * n, irrelevant here.
        ((u128::from(self.next_u64()) * u128::from(n.max(1))) >> 64) as u64
    }
}
