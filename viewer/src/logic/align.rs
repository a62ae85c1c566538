//! A/B alignment: which step of A is shown beside which step of B.
//!
//! Steps pair by phase and order within the phase: A's prefill with B's prefill, A's k-th decode
//! token with B's k-th decode token. That is the pairing `profiler diff` uses for its per-token
//! counter comparison. One aligned row is one x position in the per-token plots and one entry of
//! the selection; a row may have only one side when the captures differ in length.

use profiler::Phase;

/// One x position: the step of A and the step of B shown there (indices into `Trace::tokens`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AlignedRow {
    pub phase: Phase,
    /// 0-based position of the row within its phase (decode token k).
    pub ordinal: usize,
    pub a: Option<usize>,
    pub b: Option<usize>,
}

/// The aligned rows of two traces: prefill rows first, then decode rows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Alignment {
    pub rows: Vec<AlignedRow>,
}

/// Aligns the steps of A and B, given the phase of every step of each (an empty slice for a
/// missing trace).
pub fn align(a: &[Phase], b: &[Phase]) -> Alignment {
    let of = |phases: &[Phase], p: Phase| -> Vec<usize> {
        phases
            .iter()
            .enumerate()
            .filter(|(_, x)| **x == p)
            .map(|(i, _)| i)
            .collect()
    };
    let mut rows = Vec::with_capacity(a.len().max(b.len()));
    for phase in [Phase::Prefill, Phase::Decode] {
        let (ia, ib) = (of(a, phase), of(b, phase));
        for ordinal in 0..ia.len().max(ib.len()) {
            rows.push(AlignedRow {
                phase,
                ordinal,
                a: ia.get(ordinal).copied(),
                b: ib.get(ordinal).copied(),
            });
        }
    }
    Alignment { rows }
}

impl Alignment {
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    pub fn get(&self, row: usize) -> Option<&AlignedRow> {
        self.rows.get(row)
    }

    /// The row showing step `index` of A (`side == 0`) or B (`side == 1`).
    pub fn row_of(&self, side: usize, index: usize) -> Option<usize> {
        self.rows.iter().position(|r| {
            let s = if side == 0 { r.a } else { r.b };
            s == Some(index)
        })
    }

    /// Rows before the first decode row (the prefill rows). The plots put row `r` at
    /// `x = r - prefill_len()`, so decode token k sits at x = k and the prefill at negative x.
    pub fn prefill_len(&self) -> usize {
        self.rows
            .iter()
            .take_while(|r| r.phase == Phase::Prefill)
            .count()
    }

    /// First and last prefill row, for shading.
    pub fn prefill_rows(&self) -> Option<(usize, usize)> {
        let first = self.rows.iter().position(|r| r.phase == Phase::Prefill)?;
        let last = self.rows.iter().rposition(|r| r.phase == Phase::Prefill)?;
        Some((first, last))
    }

    /// The row of decode token `ordinal` (clamped to the last decode row), or the last row when
    /// there is no decode row.
    pub fn decode_row(&self, ordinal: usize) -> Option<usize> {
        let decode: Vec<usize> = self
            .rows
            .iter()
            .enumerate()
            .filter(|(_, r)| r.phase == Phase::Decode)
            .map(|(i, _)| i)
            .collect();
        match decode.get(ordinal.min(decode.len().saturating_sub(1))) {
            Some(&i) => Some(i),
            None => self.rows.len().checked_sub(1),
        }
    }

    /// A short name of a row: `prefill`, `decode 3`.
    pub fn label(&self, row: usize) -> String {
        match self.rows.get(row) {
            Some(r) if r.phase == Phase::Prefill && r.ordinal == 0 => "prefill".to_owned(),
            Some(r) if r.phase == Phase::Prefill => format!("prefill {}", r.ordinal),
            Some(r) => format!("decode {}", r.ordinal),
            None => "-".to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Phase::{Decode as D, Prefill as P};

    #[test]
    fn pairs_by_phase_and_order() {
        let al = align(&[P, D, D, D], &[P, D, D]);
        assert_eq!(al.len(), 4);
        assert_eq!(
            al.rows[0],
            AlignedRow {
                phase: P,
                ordinal: 0,
                a: Some(0),
                b: Some(0)
            }
        );
        assert_eq!((al.rows[2].a, al.rows[2].b), (Some(2), Some(2)));
        // A is longer: its last decode token has no partner.
        assert_eq!((al.rows[3].a, al.rows[3].b), (Some(3), None));
        assert_eq!(al.prefill_rows(), Some((0, 0)));
        assert_eq!(al.label(0), "prefill");
        assert_eq!(al.label(3), "decode 2");
    }

    #[test]
    fn a_missing_prefill_does_not_shift_decode_tokens() {
        // B has no prefill record: decode token k still faces decode token k.
        let al = align(&[P, D, D], &[D, D]);
        assert_eq!(al.len(), 3);
        assert_eq!((al.rows[0].a, al.rows[0].b), (Some(0), None));
        assert_eq!((al.rows[1].a, al.rows[1].b), (Some(1), Some(0)));
        assert_eq!((al.rows[2].a, al.rows[2].b), (Some(2), Some(1)));
        assert_eq!(al.row_of(1, 1), Some(2));
        assert_eq!(al.row_of(0, 0), Some(0));
        assert_eq!(al.row_of(1, 7), None);
    }

    #[test]
    fn one_trace_alone_and_none() {
        let al = align(&[P, P, D], &[]);
        assert_eq!(al.len(), 3);
        assert!(al.rows.iter().all(|r| r.b.is_none()));
        assert_eq!(al.prefill_rows(), Some((0, 1)));
        assert_eq!(al.prefill_len(), 2);
        assert_eq!(align(&[D, D], &[D]).prefill_len(), 0);
        assert_eq!(al.label(1), "prefill 1");
        assert_eq!(al.decode_row(0), Some(2));
        assert_eq!(al.decode_row(10), Some(2));
        let none = align(&[], &[]);
        assert!(none.is_empty());
        assert_eq!(none.decode_row(0), None);
        assert_eq!(none.prefill_rows(), None);
    }

    #[test]
    fn out_of_order_phases_group_by_phase() {
        // A writer that put a prefill record after decode records still aligns prefill first.
        let al = align(&[D, P, D], &[P, D, D]);
        assert_eq!((al.rows[0].a, al.rows[0].b), (Some(1), Some(0)));
        assert_eq!((al.rows[1].a, al.rows[1].b), (Some(0), Some(1)));
        assert_eq!((al.rows[2].a, al.rows[2].b), (Some(2), Some(2)));
    }
}
