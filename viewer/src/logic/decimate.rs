//! Min/max decimation of a per-token series for drawing: at most two points per pixel column,
//! so a 10,000-token plot costs what a plot as wide as the screen costs, and no spike is lost.

/// The points `(row, values[row])` for rows in `[x_min, x_max]` (plus one row on each side so the
/// line reaches the edges), reduced to the first, minimum, maximum and last point of each of
/// `buckets` equal slices of that range. NaN values are skipped. Points come back sorted by x.
pub fn decimate_min_max(values: &[f64], x_min: f64, x_max: f64, buckets: usize) -> Vec<[f64; 2]> {
    if values.is_empty() || x_min.is_nan() || x_max.is_nan() || x_min > x_max {
        return Vec::new();
    }
    let last = values.len() - 1;
    let lo = (x_min.floor() - 1.0).clamp(0.0, last as f64) as usize;
    let hi = (x_max.ceil() + 1.0).clamp(0.0, last as f64) as usize;
    let n = hi + 1 - lo;
    let buckets = buckets.max(1);
    let point = |i: usize| [i as f64, values[i]];
    if n <= buckets.saturating_mul(4) {
        return (lo..=hi)
            .filter(|&i| !values[i].is_nan())
            .map(point)
            .collect();
    }
    let mut out = Vec::with_capacity(buckets * 4);
    for b in 0..buckets {
        let from = lo + n * b / buckets;
        let to = lo + n * (b + 1) / buckets; // exclusive
        let idx: Vec<usize> = (from..to).filter(|&i| !values[i].is_nan()).collect();
        let (Some(&first), Some(&end)) = (idx.first(), idx.last()) else {
            continue;
        };
        let min = idx
            .iter()
            .copied()
            .min_by(|&a, &b| values[a].total_cmp(&values[b]))
            .unwrap_or(first);
        let max = idx
            .iter()
            .copied()
            .max_by(|&a, &b| values[a].total_cmp(&values[b]))
            .unwrap_or(first);
        let mut keep = [first, min, max, end];
        keep.sort_unstable();
        let mut prev = None;
        for i in keep {
            if prev != Some(i) {
                out.push(point(i));
                prev = Some(i);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_ranges_are_returned_whole() {
        let v = [1.0, f64::NAN, 3.0, 4.0];
        assert_eq!(
            decimate_min_max(&v, 0.0, 3.0, 100),
            vec![[0.0, 1.0], [2.0, 3.0], [3.0, 4.0]]
        );
        // One row of margin on each side of the visible range (row 1 is NaN).
        assert_eq!(
            decimate_min_max(&v, 2.2, 2.8, 100),
            vec![[2.0, 3.0], [3.0, 4.0]]
        );
        assert_eq!(
            decimate_min_max(&[5.0, 6.0, 7.0, 8.0], 2.5, 2.5, 100).len(),
            3
        );
        assert!(decimate_min_max(&[], 0.0, 1.0, 10).is_empty());
        assert!(decimate_min_max(&v, 3.0, 1.0, 10).is_empty());
    }

    #[test]
    fn large_ranges_keep_every_extreme() {
        let mut v: Vec<f64> = (0..100_000).map(|i| (i % 7) as f64).collect();
        v[54_321] = 1e6; // a spike
        v[77_777] = -1e6; // a dip
        let out = decimate_min_max(&v, 0.0, 99_999.0, 500);
        assert!(out.len() <= 500 * 4);
        assert!(out.len() >= 500);
        assert!(out.contains(&[54_321.0, 1e6]));
        assert!(out.contains(&[77_777.0, -1e6]));
        assert!(out.windows(2).all(|w| w[0][0] < w[1][0]), "sorted by x");
        assert_eq!(out.first().map(|p| p[0]), Some(0.0));
        assert_eq!(out.last().map(|p| p[0]), Some(99_999.0));
    }
}
