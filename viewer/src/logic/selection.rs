//! The selected tokens: one aligned row in focus (the timeline shows it) and an anchor, so that
//! shift-click and shift-arrow select a range (the flamegraph shows every selected token).

use std::ops::RangeInclusive;

/// A selection of aligned rows: `anchor..=focus` in either order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Selection {
    pub anchor: usize,
    pub focus: usize,
}

impl Selection {
    pub fn single(row: usize) -> Selection {
        Selection {
            anchor: row,
            focus: row,
        }
    }

    /// The selected rows, ascending.
    pub fn range(&self) -> RangeInclusive<usize> {
        self.anchor.min(self.focus)..=self.anchor.max(self.focus)
    }

    /// How many rows are selected (at least one).
    pub fn count(&self) -> usize {
        self.anchor.abs_diff(self.focus) + 1
    }

    pub fn is_single(&self) -> bool {
        self.anchor == self.focus
    }

    pub fn contains(&self, row: usize) -> bool {
        self.range().contains(&row)
    }

    /// A click on `row`: selects it alone, or extends the range to it when `extend` (shift).
    pub fn click(&mut self, row: usize, extend: bool) {
        self.focus = row;
        if !extend {
            self.anchor = row;
        }
    }

    /// Moves the focus by `delta` rows within `0..n_rows` (arrow keys).
    pub fn step(&mut self, delta: isize, n_rows: usize, extend: bool) {
        if n_rows == 0 {
            return;
        }
        let target = (self.focus as isize + delta).clamp(0, n_rows as isize - 1) as usize;
        self.click(target, extend);
    }

    /// Keeps both ends inside `0..n_rows` (after a trace was closed or replaced).
    pub fn clamp(&mut self, n_rows: usize) {
        let last = n_rows.saturating_sub(1);
        self.anchor = self.anchor.min(last);
        self.focus = self.focus.min(last);
    }
}

/// The aligned row under plot coordinate `x` (rows sit at integer x): the nearest row, or `None`
/// when there are no rows or `x` lies more than half a row outside them.
pub fn row_at_x(x: f64, n_rows: usize) -> Option<usize> {
    if n_rows == 0 || !x.is_finite() || x < -0.5 || x > n_rows as f64 - 0.5 {
        return None;
    }
    Some((x.round().max(0.0) as usize).min(n_rows - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn click_and_shift_click() {
        let mut s = Selection::single(3);
        assert!(s.is_single());
        s.click(7, true);
        assert_eq!(s.range(), 3..=7);
        assert_eq!(s.count(), 5);
        assert!(s.contains(5) && !s.contains(8));
        s.click(1, true);
        assert_eq!(s.range(), 1..=3);
        s.click(4, false);
        assert_eq!(s.range(), 4..=4);
    }

    #[test]
    fn arrows_stay_inside() {
        let mut s = Selection::single(0);
        s.step(-1, 10, false);
        assert_eq!(s, Selection::single(0));
        s.step(3, 10, false);
        assert_eq!(s, Selection::single(3));
        s.step(20, 10, true);
        assert_eq!(s.range(), 3..=9);
        s.step(1, 0, false);
        assert_eq!(s.range(), 3..=9);
        s.clamp(5);
        assert_eq!(s.range(), 3..=4);
        s.clamp(0);
        assert_eq!(s, Selection::single(0));
    }

    #[test]
    fn nearest_row_under_the_pointer() {
        assert_eq!(row_at_x(2.4, 10), Some(2));
        assert_eq!(row_at_x(2.6, 10), Some(3));
        assert_eq!(row_at_x(-0.4, 10), Some(0));
        assert_eq!(row_at_x(-0.6, 10), None);
        assert_eq!(row_at_x(9.49, 10), Some(9));
        assert_eq!(row_at_x(9.6, 10), None);
        assert_eq!(row_at_x(0.0, 0), None);
        assert_eq!(row_at_x(f64::NAN, 3), None);
    }
}
