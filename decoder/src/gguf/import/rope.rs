//! Llama 3 RoPE scaling from llama.cpp's `rope_freqs` tensor.
//!
//! llama.cpp's converter does not write the four numbers of Llama 3's scaling (`factor`,
//! `low_freq_factor`, `high_freq_factor`, `original_max_position_embeddings`) into the GGUF
//! metadata; it writes their effect, one factor per pair of head dimensions that divides the
//! pair's frequency: 1 for the high frequencies, `factor` for the low ones, and in between
//! `1 / ((1 - s) / factor + s)`, where `s = (original / wavelength - low) / (high - low)` is linear
//! in the pair's frequency. The decoder describes the same scaling by those four numbers
//! ([`Llama3Scaling`]), so they are recovered here: `factor` is the largest factor, and the line
//! `s` is fitted to the pairs in between (or placed in the gap between the two regimes when fewer
//! than two pairs lie there; every placement gives the same factors then). The four numbers are
//! determined only up to a common scale, so `low_freq_factor` is taken as 1.
//!
//! Whatever was recovered is checked against every factor in the file, so a tensor that does not
//! follow Llama 3's rule is refused rather than approximated.

use crate::model::{Llama3Scaling, rope_base_inv_freq};

/// The largest relative difference allowed between a factor in the file and the recovered
/// scaling's (the file holds f32 values computed in f64 by the converter).
const TOLERANCE: f64 = 1e-5;

/// Recovers the Llama 3 scaling whose factors are `factors` (one per pair, `head_dim / 2` of
/// them) for RoPE base `theta`: `Ok(None)` when every factor is 1 (no scaling), an error that
/// says what does not fit otherwise.
pub(super) fn llama3_from_factors(
    factors: &[f32],
    theta: f64,
    head_dim: usize,
) -> Result<Option<Llama3Scaling>, String> {
    let freqs = rope_base_inv_freq(theta, head_dim);
    if factors.len() != freqs.len() {
        return Err(format!(
            "has {} values, but a head of {head_dim} dimensions has {} pairs",
            factors.len(),
            freqs.len()
        ));
    }
    if let Some((i, f)) = factors
        .iter()
        .enumerate()
        .find(|(_, f)| !f.is_finite() || **f < 1.0 - TOLERANCE as f32)
    {
        return Err(format!(
            "pair {i} has factor {f}; Llama 3 scaling only divides frequencies by 1 or more"
        ));
    }
    let factor = factors.iter().fold(1.0f64, |m, &f| m.max(f as f64));
    if factor <= 1.0 + TOLERANCE {
        return Ok(None);
    }
    // x: frequency in cycles per position (1 / wavelength), which `s` is linear in.
    let x: Vec<f64> = freqs
        .iter()
        .map(|f| f / (2.0 * std::f64::consts::PI))
        .collect();
    let near = |a: f64, b: f64| (a - b).abs() <= TOLERANCE * b.abs();
    let mut middle = Vec::new(); // (x, s) of the pairs between the regimes
    let mut unchanged_min = f64::INFINITY; // the lowest frequency left unchanged
    let mut slowed_max = 0.0f64; // the highest frequency divided by `factor`
    for (&xi, &f) in x.iter().zip(factors) {
        let f = f as f64;
        if near(f, 1.0) {
            unchanged_min = unchanged_min.min(xi);
        } else if near(f, factor) {
            slowed_max = slowed_max.max(xi);
        } else {
            middle.push((xi, (1.0 / f - 1.0 / factor) / (1.0 - 1.0 / factor)));
        }
    }
    // The line s = a x + b, s = 0 at x0 and s = 1 at x1 (x0 < x1).
    let (a, b) = match middle.len() {
        0 | 1 => {
            // Any line through the middle pair (if any) whose ends fall in the gap between the
            // slowed and the unchanged pairs gives these factors.
            let lo = slowed_max;
            let hi = if unchanged_min.is_finite() {
                unchanged_min
            } else {
                x.iter().fold(0.0f64, |m, &v| m.max(v)) * 2.0
            };
            if hi <= lo {
                return Err(
                    "divides a higher frequency by its largest factor than one it leaves \
                     unchanged, which Llama 3 scaling never does"
                        .to_string(),
                );
            }
            match middle.first() {
                None => {
                    let (x0, x1) = (lo + (hi - lo) / 3.0, lo + 2.0 * (hi - lo) / 3.0);
                    let a = 1.0 / (x1 - x0);
                    (a, -a * x0)
                }
                Some(&(xm, sm)) => {
                    if !(xm > lo && xm < hi) {
                        return Err(
                            "has a pair between the two regimes outside the gap between them"
                                .to_string(),
                        );
                    }
                    let a = 2.0 * (sm / (xm - lo)).max((1.0 - sm) / (hi - xm));
                    (a, sm - a * xm)
                }
            }
        }
        n => {
            // Least squares over the pairs in between.
            let n = n as f64;
            let (sx, ss) = middle
                .iter()
                .fold((0.0, 0.0), |(a, b), &(x, s)| (a + x, b + s));
            let (mx, ms) = (sx / n, ss / n);
            let (sxx, sxs) = middle.iter().fold((0.0, 0.0), |(a, b), &(x, s)| {
                (a + (x - mx) * (x - mx), b + (x - mx) * (s - ms))
            });
            if sxx <= 0.0 {
                return Err("has two pairs of one frequency".to_string());
            }
            let a = sxs / sxx;
            (a, ms - a * mx)
        }
    };
    // s rises with frequency from 0 (x0 > 0) to 1: anything else is not Llama 3's rule.
    if !(a > 0.0 && b < 0.0 && a.is_finite() && b.is_finite()) {
        return Err(
            "does not rise smoothly from the slowed to the unchanged frequencies as Llama 3 \
             scaling does"
                .to_string(),
        );
    }
    let x0 = -b / a;
    // With low_freq_factor 1: original = 1 / x0 and high_freq_factor = 1 + 1 / (a x0).
    let scaling = Llama3Scaling {
        factor,
        low_freq_factor: 1.0,
        high_freq_factor: 1.0 + 1.0 / (a * x0),
        original_max_position_embeddings: 1.0 / x0,
    };
    for (i, (&f, &inv)) in factors.iter().zip(&freqs).enumerate() {
        let want = scaling.divisor(inv);
        if !near(f as f64, want) {
            return Err(format!(
                "pair {i} has factor {f}, but the Llama 3 scaling that fits the other pairs \
                 (factor {factor}) gives {want}; the tensor does not follow Llama 3's rule"
            ));
        }
    }
    Ok(Some(scaling))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn factors(s: &Llama3Scaling, theta: f64, head_dim: usize) -> Vec<f32> {
        rope_base_inv_freq(theta, head_dim)
            .into_iter()
            .map(|f| s.divisor(f) as f32)
            .collect()
    }

    /// Every pair's frequency under `s` is the one under `t`, to f32 precision.
    fn same_frequencies(s: &Llama3Scaling, t: &Llama3Scaling, theta: f64, head_dim: usize) {
        for (i, f) in rope_base_inv_freq(theta, head_dim).into_iter().enumerate() {
            let (a, b) = (s.apply(f), t.apply(f));
            assert!((a - b).abs() <= 2e-6 * a, "pair {i}: {a} against {b}");
        }
    }

    #[test]
    fn llama_3_scalings_are_recovered_with_the_same_frequencies() {
        let cases = [
            // Llama 3.1/3.2 (head_dim 64 and 128, theta 500000).
            (32.0, 1.0, 4.0, 8192.0, 500_000.0, 64),
            (8.0, 1.0, 4.0, 8192.0, 500_000.0, 128),
            // The synthetic tiny-llama's, with a short original context.
            (8.0, 1.0, 4.0, 512.0, 10_000.0, 16),
            (4.0, 2.0, 3.0, 1024.0, 10_000.0, 32),
        ];
        for (factor, low, high, original, theta, head_dim) in cases {
            let s = Llama3Scaling {
                factor,
                low_freq_factor: low,
                high_freq_factor: high,
                original_max_position_embeddings: original,
            };
            let f = factors(&s, theta, head_dim);
            let got = llama3_from_factors(&f, theta, head_dim)
                .expect("recovered")
                .expect("scaled");
            assert_eq!(got.factor, factor);
            same_frequencies(&s, &got, theta, head_dim);
        }
    }

    #[test]
    fn all_ones_is_no_scaling() {
        assert_eq!(llama3_from_factors(&[1.0; 32], 500_000.0, 64), Ok(None));
    }

    #[test]
    fn factors_that_do_not_follow_llama_3_are_refused() {
        let s = Llama3Scaling {
            factor: 32.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 8192.0,
        };
        let good = factors(&s, 500_000.0, 64);
        // One pair in between nudged off the curve.
        let mut bent = good.clone();
        let i = bent
            .iter()
            .position(|&f| f > 1.0 && f < 32.0)
            .expect("a pair in between");
        bent[i] *= 1.01;
        let e = llama3_from_factors(&bent, 500_000.0, 64).expect_err("refused");
        assert!(e.contains("pair"), "{e}");
        // Reversed: the high frequencies slowed and the low ones kept.
        let mut reversed = good.clone();
        reversed.reverse();
        assert!(llama3_from_factors(&reversed, 500_000.0, 64).is_err());
        // A factor below 1, a NaN, and the wrong count.
        let mut low = good.clone();
        low[0] = 0.5;
        assert!(llama3_from_factors(&low, 500_000.0, 64).is_err());
        let mut nan = good.clone();
        nan[3] = f32::NAN;
        assert!(llama3_from_factors(&nan, 500_000.0, 64).is_err());
        assert!(llama3_from_factors(&good[1..], 500_000.0, 64).is_err());
    }
}
