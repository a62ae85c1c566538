//! The workspace's one random number generator and its one string hash, with the distributions
//! the bootstrap, the synthetic traces and checkpoints and the decoder's sampling need. Written
//! here rather than taken from a crate so that golden outputs stay identical across dependency
//! upgrades: the same seed gives the same numbers forever.

/// SplitMix64's increment: 2^64 divided by the golden ratio, odd.
pub const GOLDEN_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// SplitMix64's output function (Stafford's "Mix13" variant of the MurmurHash3 finaliser): a
/// bijection of 64 bits in which every input bit changes about half of the output bits. [`Rng`]
/// draws with it; it also makes a stable hash of integers (the capture layer's signatures).
#[inline]
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// 64-bit FNV-1a of `bytes`: a stable hash of a name, to derive a seed from it.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// SplitMix64 (Steele, Lea, Flood 2014): 64 bits of state, passes BigCrush, trivially seedable.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// A generator whose stream depends on `seed` and on `label` (its [`fnv1a`] mixed into the
    /// seed, and the first draw skipped), so independent streams (one per tensor of a synthetic
    /// checkpoint) need no shared state.
    pub fn for_label(seed: u64, label: &str) -> Self {
        let mut g = Rng::new(seed ^ fnv1a(label.as_bytes()).rotate_left(17));
        g.next_u64();
        g
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GOLDEN_GAMMA);
        mix64(self.0)
    }

    /// Uniform in [0, 1), 53 bits.
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Two uniforms in [-1, 1) from one draw (24 bits each: the draw's top 24 bits, then bits 8
    /// to 31).
    pub fn pair_symmetric(&mut self) -> (f32, f32) {
        let x = self.next_u64();
        let scale = 1.0 / (1u32 << 23) as f32;
        let a = ((x >> 40) as u32) as f32 * scale - 1.0;
        let b = (((x >> 8) & 0xff_ffff) as u32) as f32 * scale - 1.0;
        (a, b)
    }

    /// Uniform in (0, 1): never 0, for logarithms.
    fn uniform_open(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform integer in [0, n) (0 for `n == 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        // Lemire's multiply-shift; the bias for the small n used here is below 2^-40.
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// Standard normal (Box-Muller, one value per call).
    pub fn normal(&mut self) -> f64 {
        let u1 = self.uniform_open();
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    /// Gamma(shape, 1) for `shape >= 1` (Marsaglia and Tsang 2000).
    fn gamma_ge1(&mut self, shape: f64) -> f64 {
        let d = shape - 1.0 / 3.0;
        let c = 1.0 / (9.0 * d).sqrt();
        loop {
            let x = self.normal();
            let v = 1.0 + c * x;
            if v <= 0.0 {
                continue;
            }
            let v = v * v * v;
            let u = self.uniform_open();
            if u < 1.0 - 0.0331 * x * x * x * x || u.ln() < 0.5 * x * x + d * (1.0 - v + v.ln()) {
                return d * v;
            }
        }
    }

    /// Beta(a, b) for `a, b >= 1`, from two gamma variates.
    pub fn beta(&mut self, a: f64, b: f64) -> f64 {
        let x = self.gamma_ge1(a);
        let y = self.gamma_ge1(b);
        x / (x + y)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn beta_mean_matches() {
        let mut rng = Rng::new(7);
        let (a, b) = (3.0, 5.0);
        let n = 20_000;
        let mean = (0..n).map(|_| rng.beta(a, b)).sum::<f64>() / n as f64;
        // Mean a/(a+b) = 0.375, standard error ~0.0011; 0.01 is about 9 standard errors.
        assert!((mean - 0.375).abs() < 0.01, "mean {mean}");
    }

    /// The stream is a contract (golden traces, synthetic checkpoints): SplitMix64's published
    /// first outputs for seed 0, and FNV-1a's for "a".
    #[test]
    fn streams_are_the_published_ones() {
        let mut rng = Rng::new(0);
        assert_eq!(rng.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(rng.next_u64(), 0x6e78_9e6a_a1b9_65f4);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn below_stays_in_range() {
        let mut rng = Rng::new(1);
        assert!((0..1000).all(|_| rng.below(7) < 7));
    }
}
