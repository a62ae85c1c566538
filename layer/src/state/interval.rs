//! The `dispatch` level's timing of one command buffer's recording: timestamp pairs taken in
//! blocks of [`BLOCK_PAIRS`], and every dispatch given the span of its interval between the
//! program's barriers.
//!
//! An interval runs from one boundary to the next, and a boundary is a bottom-of-pipe timestamp
//! written just before a barrier (or the end of the command buffer, or executed secondaries)
//! that follows a dispatch, where the GPU drains for the barrier anyway ([`Timing::close`]).
//! Every dispatch of an interval gets that interval's span: one alone is timed exactly (with its
//! barrier's wait), and dispatches the program lets run concurrently share it. The first
//! interval of a command buffer, or one after a transfer, starts at a top-of-pipe timestamp
//! before its first dispatch, written into that dispatch's pair ([`Timing::dispatch`]).
//!
//! A block's queries are reset when the recording first writes one of them
//! ([`Timing::first_write`]), not when it takes the block: a clocked dispatch's pair names its
//! clock record and writes no query unless it starts the recording's bracket, so a recording of
//! clocked dispatches resets only the block its bracket starts in (and the one it ends in), not
//! one block in [`BLOCK_PAIRS`] dispatches. On NVIDIA's driver each reset in the middle of a
//! program's command stream cost llama-server about 5% of its tokens/s.
//!
//! The same logic serves both ways a recording is counted: in the command buffer's lock-free
//! slot ([`crate::recording`]), where a dispatch costs no device lock, and in its
//! [`CmdState`](super::CmdState) under the lock (a command buffer the slot table had no room
//! for). Either way the recording's timing joins the command buffer's state when it ends
//! ([`DeviceState::absorb`](super::DeviceState::absorb)).

use super::{BLOCK_PAIRS, Source, Stamp};

/// The op of a dispatch recorded without the device's lock and without a debug label: found
/// from its pipeline ([`Timing::pipelines`]) when the recording joins the device's state.
pub const UNRESOLVED: u32 = u32::MAX;

/// One recording's dispatch-level timing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Timing {
    /// The dispatches' stamps, in the order recorded.
    pub stamps: Vec<Stamp>,
    /// The pipeline bound at each stamp whose op is [`UNRESOLVED`]: (index in `stamps`,
    /// pipeline handle, 0 when none was bound).
    pub pipelines: Vec<(usize, u64)>,
    /// The blocks of pairs this recording holds (the first pair of each).
    pub blocks: Vec<u32>,
    /// Pairs of the last block in use.
    used: u32,
    /// The last block's query pool, as the ffi side's raw handle: every query the recording
    /// still writes (a start for the current dispatch, a boundary after it) is in that block.
    pub pool: u64,
    /// The query holding the start of the current interval (the last boundary written).
    boundary: Option<u32>,
    /// The stamps of the dispatches recorded since that boundary.
    open: Vec<usize>,
    /// The bracket of the recording's clocked dispatches: the query of the first one's
    /// top-of-pipe start and the one the recording's end writes (the last one's end query).
    bracket: Option<(u32, u32)>,
    /// Whether the recording brackets its clocked dispatches, decided at the first one
    /// (`None` before it).
    bracketing: Option<bool>,
    /// The blocks (first pairs) whose queries the recording has reset.
    reset: Vec<u32>,
}

impl Timing {
    /// The next pair of the current block; `None` when a new block is needed
    /// ([`Timing::add_block`]).
    pub fn next_pair(&mut self) -> Option<u32> {
        let &first = self.blocks.last()?;
        if self.used >= BLOCK_PAIRS {
            return None;
        }
        self.used += 1;
        Some(first + self.used - 1)
    }

    /// Before the caller writes query `q`: the first pair of its block when this is the
    /// recording's first write into that block, whose queries the caller then resets first
    /// (all [`BLOCK_PAIRS`] pairs, before the write).
    pub fn first_write(&mut self, q: u32) -> Option<u32> {
        let first = q / 2 / BLOCK_PAIRS * BLOCK_PAIRS;
        if self.reset.contains(&first) {
            return None;
        }
        self.reset.push(first);
        Some(first)
    }

    /// A new block, from pair `first`, in query pool `pool`; returns its first pair (taken).
    pub fn add_block(&mut self, first: u32, pool: u64) -> u32 {
        self.blocks.push(first);
        self.used = 1;
        self.pool = pool;
        first
    }

    /// The stamp of a dispatch of op `op` with pair `slot`; true when the caller must write the
    /// interval's start (top of pipe, query `2 slot`): the first interval of the recording, or
    /// the first after a transfer.
    pub fn dispatch(&mut self, slot: u32, op: u32) -> bool {
        let fresh = self.boundary.is_none();
        let start = *self.boundary.get_or_insert(2 * slot);
        self.open.push(self.stamps.len());
        self.stamps.push(Stamp {
            start,
            ..Stamp::pair(slot, op, 1)
        });
        fresh
    }

    /// A dispatch of op [`UNRESOLVED`] whose pipeline is `pipeline` (0: none bound).
    pub fn dispatch_of_pipeline(&mut self, slot: u32, pipeline: u64) -> bool {
        self.pipelines.push((self.stamps.len(), pipeline));
        self.dispatch(slot, UNRESOLVED)
    }

    /// The stamp of a dispatch whose shader reads the clock itself (its pipeline was
    /// instrumented), with pair `slot` whose clock record it writes. True when the caller must
    /// write the recording's bracket start (top of pipe, query `2 slot`): the first clocked
    /// dispatch of a recording that brackets them, which `bracket` (asked once, at that
    /// dispatch) decides. Like a transfer, it ends the interval machinery's claim on the time
    /// since the last boundary, so an uninstrumented dispatch after it starts an interval of
    /// its own.
    pub fn clocked(&mut self, slot: u32, op: u32, bracket: impl FnOnce() -> bool) -> bool {
        self.stamps.push(Stamp {
            source: Source::Clock,
            ..Stamp::pair(slot, op, 1)
        });
        self.transfer();
        if !*self.bracketing.get_or_insert_with(bracket) {
            return false;
        }
        let fresh = self.bracket.is_none();
        let start = self.bracket.map_or(2 * slot, |(s, _)| s);
        self.bracket = Some((start, 2 * slot + 1));
        fresh
    }

    /// A clocked dispatch of op [`UNRESOLVED`] whose pipeline is `pipeline`.
    pub fn clocked_of_pipeline(
        &mut self,
        slot: u32,
        pipeline: u64,
        bracket: impl FnOnce() -> bool,
    ) -> bool {
        self.pipelines.push((self.stamps.len(), pipeline));
        self.clocked(slot, UNRESOLVED, bracket)
    }

    /// Adds the pairs of the recording's clocked dispatches, whose records its end copies for
    /// the host, to `pairs`.
    pub fn clocked_pairs(&self, pairs: &mut Vec<u32>) {
        pairs.extend(
            self.stamps
                .iter()
                .filter(|s| s.source == Source::Clock)
                .map(|s| s.slot),
        );
    }

    /// True when the timing holds nothing (as after [`Timing::clear`]).
    pub fn is_empty(&self) -> bool {
        self.stamps.is_empty()
            && self.pipelines.is_empty()
            && self.blocks.is_empty()
            && self.open.is_empty()
            && self.used == 0
            && self.pool == 0
            && self.boundary.is_none()
            && self.bracket.is_none()
            && self.bracketing.is_none()
            && self.reset.is_empty()
    }

    /// Empties the timing for the command buffer's next recording, keeping what its lists
    /// hold room for.
    pub fn clear(&mut self) {
        let Timing {
            mut stamps,
            mut pipelines,
            mut blocks,
            mut open,
            mut reset,
            ..
        } = std::mem::take(self);
        stamps.clear();
        pipelines.clear();
        blocks.clear();
        open.clear();
        reset.clear();
        *self = Timing {
            stamps,
            pipelines,
            blocks,
            open,
            reset,
            ..Timing::default()
        };
    }

    /// Ends the recording's bracket of clocked dispatches: the query the caller writes (bottom
    /// of pipe) at the recording's end, its [`Source::Bracket`] stamp added; `None` without
    /// clocked dispatches or once closed.
    pub fn close_bracket(&mut self) -> Option<u32> {
        let (start, end) = self.bracket.take()?;
        self.stamps.push(Stamp {
            slot: start / 2,
            op: UNRESOLVED,
            covers: 0,
            start,
            end,
            shared: 1,
            source: Source::Bracket,
        });
        Some(end)
    }

    /// Ends the current interval before a barrier, the end of the recording or executed
    /// secondaries: the query its dispatches end at (the caller writes it, bottom of pipe), or
    /// `None` when no dispatch was recorded since the last boundary.
    pub fn close(&mut self) -> Option<u32> {
        let &last = self.open.last()?;
        let end = self.stamps[last].end;
        let shared = self.open.len() as u32;
        for i in self.open.drain(..) {
            self.stamps[i].end = end;
            self.stamps[i].shared = shared;
        }
        self.boundary = Some(end);
        Some(end)
    }

    /// A transfer: a dispatch after it starts an interval at a boundary of its own, unless the
    /// current interval already has dispatches (the transfer then runs within it).
    pub fn transfer(&mut self) {
        if self.open.is_empty() {
            self.boundary = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing() -> Timing {
        let mut t = Timing::default();
        t.add_block(64, 9);
        t
    }

    #[test]
    fn pairs_come_from_the_block_until_it_is_used_up() {
        let mut t = Timing::default();
        assert_eq!(t.next_pair(), None, "no block yet");
        assert_eq!(t.add_block(32, 1), 32);
        for k in 1..BLOCK_PAIRS {
            assert_eq!(t.next_pair(), Some(32 + k));
        }
        assert_eq!(t.next_pair(), None);
        assert_eq!(t.add_block(96, 2), 96);
        assert_eq!(t.next_pair(), Some(97));
        assert_eq!((t.blocks.clone(), t.pool), (vec![32, 96], 2));
    }

    #[test]
    fn a_block_is_reset_once_a_recording_at_its_first_write() {
        let mut t = Timing::default();
        t.add_block(32, 1);
        t.next_pair();
        assert_eq!(t.first_write(2 * 32), Some(32));
        assert_eq!(t.first_write(2 * 33 + 1), None, "the same block");
        t.add_block(8_192 + 64, 2);
        assert_eq!(t.first_write(2 * (8_192 + 64) + 1), Some(8_192 + 64));
        assert_eq!(t.first_write(2 * (8_192 + 64 + 31)), None);
        t.clear();
        t.add_block(32, 1);
        assert_eq!(
            t.first_write(2 * 32),
            Some(32),
            "a new recording resets it again"
        );
    }

    #[test]
    fn unbracketed_clocked_dispatches_write_no_query() {
        // Nothing for the caller to write, so no block is ever reset.
        let mut t = timing();
        assert!(!t.clocked(64, 0, || false));
        let b = t.next_pair().expect("pair");
        assert!(!t.clocked(b, 1, || unreachable!("asked once")));
        assert_eq!(t.close(), None);
        assert_eq!(t.close_bracket(), None);
        assert!(t.reset.is_empty());
    }

    #[test]
    fn an_interval_is_shared_by_its_dispatches_and_starts_where_the_last_ended() {
        let mut t = timing();
        assert!(
            t.dispatch(64, 0),
            "the first interval starts with a timestamp of its own"
        );
        let b = t.next_pair().expect("pair");
        assert!(!t.dispatch(b, 1));
        assert_eq!(t.close(), Some(2 * b + 1));
        assert_eq!(t.close(), None, "no dispatch since the boundary");
        let c = t.next_pair().expect("pair");
        assert!(!t.dispatch(c, 2));
        assert_eq!(t.close(), Some(2 * c + 1));
        let s = &t.stamps;
        assert_eq!((s[0].start, s[0].end, s[0].shared), (128, 2 * b + 1, 2));
        assert_eq!((s[1].start, s[1].end, s[1].shared), (128, 2 * b + 1, 2));
        assert_eq!(
            (s[2].start, s[2].end, s[2].shared),
            (2 * b + 1, 2 * c + 1, 1)
        );
    }

    #[test]
    fn a_transfer_between_intervals_starts_a_fresh_one_but_not_inside_one() {
        let mut t = timing();
        t.dispatch(64, 0);
        t.close();
        t.transfer();
        let b = t.next_pair().expect("pair");
        assert!(t.dispatch(b, 0), "after a transfer: a start of its own");
        t.transfer();
        let c = t.next_pair().expect("pair");
        assert!(
            !t.dispatch(c, 0),
            "the transfer ran inside the open interval"
        );
        assert_eq!(t.close(), Some(2 * c + 1));
        assert_eq!(t.stamps[2].start, 2 * b);
    }

    #[test]
    fn a_clocked_dispatch_has_its_own_record_and_splits_intervals_around_it() {
        let mut t = timing();
        assert!(t.dispatch(64, 0));
        assert_eq!(t.close(), Some(129));
        let b = t.next_pair().expect("pair");
        assert!(
            t.clocked(b, 1, || true),
            "the first clocked dispatch starts the bracket"
        );
        assert_eq!(t.close(), None, "a clocked dispatch writes no boundary");
        let c = t.next_pair().expect("pair");
        assert!(
            t.dispatch(c, 2),
            "an interval after a clocked dispatch starts with a timestamp of its own"
        );
        let s = &t.stamps;
        assert_eq!((s[1].source, s[1].slot, s[1].shared), (Source::Clock, b, 1));
        assert_eq!(s[2].start, 2 * c);
        let d = t.next_pair().expect("pair");
        assert!(
            !t.clocked_of_pipeline(d, 0xbeef, || unreachable!("decided at the first")),
            "one bracket a recording"
        );
        assert_eq!(t.pipelines, vec![(3, 0xbeef)]);
        assert_eq!(t.close(), Some(2 * c + 1), "the open interval still closes");
        assert_eq!(
            t.stamps[3].end,
            2 * d + 1,
            "the clocked stamp keeps its pair"
        );
        assert_eq!(
            t.close_bracket(),
            Some(2 * d + 1),
            "ends at the last one's query"
        );
        assert_eq!(t.close_bracket(), None);
        let br = t.stamps.last().expect("bracket");
        assert_eq!(
            (br.source, br.start, br.end, br.slot),
            (Source::Bracket, 2 * b, 2 * d + 1, b)
        );
    }

    #[test]
    fn a_recording_without_a_bracket_still_lists_its_clocked_pairs() {
        let mut t = timing();
        assert!(!t.clocked(64, 1, || false), "no bracket: no start to write");
        let b = t.next_pair().expect("pair");
        assert!(!t.clocked(b, 2, || unreachable!("decided at the first")));
        assert_eq!(t.close_bracket(), None);
        let mut pairs = vec![7];
        t.clocked_pairs(&mut pairs);
        assert_eq!(pairs, vec![7, 64, b]);
        assert!(t.stamps.iter().all(|s| s.source == Source::Clock));
    }

    #[test]
    fn a_cleared_timing_is_empty_and_keeps_its_room() {
        let mut t = timing();
        t.clocked(64, 1, || true);
        let room = t.stamps.capacity();
        t.clear();
        assert_eq!(t.stamps.capacity(), room);
        t.stamps.shrink_to(0);
        t.blocks.shrink_to(0);
        t.pipelines.shrink_to(0);
        t.open.shrink_to(0);
        assert_eq!(t, Timing::default());
    }

    #[test]
    fn unresolved_ops_remember_their_pipeline() {
        let mut t = timing();
        t.dispatch(64, 5);
        let b = t.next_pair().expect("pair");
        t.dispatch_of_pipeline(b, 0xfeed);
        assert_eq!(t.stamps[1].op, UNRESOLVED);
        assert_eq!(t.pipelines, vec![(1, 0xfeed)]);
    }
}
