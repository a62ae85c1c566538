//! Commands counted while a command buffer records, without the device's lock.
//!
//! A runtime such as llama.cpp makes a few thousand `vkCmd*` calls a token. Taking the device's
//! lock and looking the command buffer up in a hash map on each of them cost about 70 ns a call
//! on the H100 machine's Xeon, several percent of the runtime's tokens/s. Here each command
//! buffer has a slot of atomics in a fixed open-addressing table, found by its handle without a
//! lock; a recorded command adds to its slot with plain (relaxed load, store) updates, which is
//! enough because Vulkan lets only one thread record a command buffer at a time. The device's
//! state takes what a slot holds (*drains* it) under its lock whenever it needs the recording:
//! when it ends, is submitted, executed as a secondary, begun again, reset or freed.
//!
//! Slots are claimed when command buffers are allocated and released when they are freed, both
//! under the device's lock, so lookups race only with those. A command buffer that finds no slot
//! (the table is full) is counted under the lock as before; whether it has a slot never changes
//! while it lives, so each recording is counted one way.
//!
//! At the `dispatch` timestamp level a slot also holds its recording's [`Timing`]: the query
//! pairs of its dispatches and the intervals between its barriers. The recording thread takes
//! the slot's own mutex for it (uncontended: the device's state touches it only when the
//! recording ends or is dropped), and the device's lock only to take a new block of pairs
//! (once per [`BLOCK_PAIRS`](crate::state::BLOCK_PAIRS) dispatches). A dispatch's op is its
//! innermost debug label's, which the label commands leave in the slot (they take the device's
//! lock), or else it is found from the pipeline when the recording ends.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use profiler::trace::Counters;

use crate::state::{Cmd, Timing, UNRESOLVED, mix};

/// Slots in a device's table (command buffers alive at once, with room to probe).
const SLOTS: usize = 1 << 13;
/// Slots probed from a handle's home slot before giving up.
const PROBES: usize = 32;
const EMPTY: u64 = 0;
/// A freed slot: lookups probe past it, claims reuse it.
const FREED: u64 = u64::MAX;

/// What a slot counts, in the order of [`Slot::n`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counted {
    Dispatch = 0,
    BindSets = 1,
    PushConstants = 2,
    BarrierCall = 3,
    PipelineBind = 4,
    Transfer = 5,
    Timestamp = 6,
}

const COUNTED: usize = 7;

/// One command buffer's commands since its last drain. Two cache lines: the handle, the hashes
/// and the counters of the common commands share the first.
#[repr(align(64))]
pub struct Slot {
    key: AtomicU64,
    signature: AtomicU64,
    work: AtomicU64,
    n: [AtomicU64; COUNTED],
    memory_barriers: AtomicU64,
    pipeline: AtomicU64,
    /// The op of the innermost open debug label ([`UNRESOLVED`]: none open).
    label_op: AtomicU32,
    /// Whether the command buffer's dispatches get timestamps (a primary one of a queue
    /// family that writes them), set when the slot is claimed.
    timed: AtomicBool,
    timing: Mutex<Timing>,
}

impl Default for Slot {
    fn default() -> Slot {
        Slot {
            key: AtomicU64::new(EMPTY),
            signature: AtomicU64::new(0),
            work: AtomicU64::new(0),
            n: Default::default(),
            memory_barriers: AtomicU64::new(0),
            pipeline: AtomicU64::new(0),
            label_op: AtomicU32::new(UNRESOLVED),
            timed: AtomicBool::new(false),
            timing: Mutex::new(Timing::default()),
        }
    }
}

/// What a drained slot held: counters to add, the recording's running signature and work hash
/// (zero when nothing was recorded), and the last pipeline bound.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Drained {
    pub counters: Counters,
    pub signature: u64,
    pub work: u64,
    pub pipeline: Option<u64>,
}

impl Drained {
    /// True when the slot held nothing since its last drain.
    #[inline]
    pub fn is_empty(&self) -> bool {
        *self == Drained::default()
    }
}

/// Adds `v` to an atomic that only the recording thread writes (see the module's doc).
#[inline]
fn add(a: &AtomicU64, v: u64) {
    a.store(a.load(Ordering::Relaxed).wrapping_add(v), Ordering::Relaxed);
}

impl Slot {
    /// Counts one recorded command whose signature code is `code`.
    #[inline]
    pub fn count(&self, what: Counted, code: u64) {
        add(&self.n[what as usize], 1);
        self.signature.store(
            mix(self.signature.load(Ordering::Relaxed), code),
            Ordering::Relaxed,
        );
        add(&self.work, mix(0, code));
    }

    /// A barrier call with `n` memory, buffer and image barriers.
    #[inline]
    pub fn barrier(&self, n: u64, code: u64) {
        self.count(Counted::BarrierCall, code);
        add(&self.memory_barriers, n);
    }

    /// A pipeline bound.
    #[inline]
    pub fn bind(&self, pipeline: u64, code: u64) {
        self.count(Counted::PipelineBind, code);
        self.pipeline.store(pipeline, Ordering::Relaxed);
    }

    /// Counts `what` (a command the slot counts: every one but `Execute`, which needs the
    /// other command buffers' state); false when it was not counted.
    #[inline]
    pub fn record(&self, what: Cmd) -> bool {
        let code = what.code();
        match what {
            Cmd::BindPipeline(p) => self.bind(p, code),
            Cmd::Dispatch => self.count(Counted::Dispatch, code),
            Cmd::Transfer => self.count(Counted::Transfer, code),
            Cmd::Barrier(n) => self.barrier(n, code),
            Cmd::BindSets => self.count(Counted::BindSets, code),
            Cmd::PushConstants => self.count(Counted::PushConstants, code),
            Cmd::Timestamp => self.count(Counted::Timestamp, code),
            Cmd::Execute(_) => return false,
        }
        true
    }

    /// The pipeline bound last (0: none since the last drain).
    #[inline]
    pub fn pipeline(&self) -> u64 {
        self.pipeline.load(Ordering::Relaxed)
    }

    /// The op of the innermost open debug label, if one is open.
    #[inline]
    pub fn label_op(&self) -> Option<u32> {
        Some(self.label_op.load(Ordering::Relaxed)).filter(|&op| op != UNRESOLVED)
    }

    /// Sets the op of the innermost open debug label (`None`: none open).
    pub fn set_label_op(&self, op: Option<u32>) {
        self.label_op
            .store(op.unwrap_or(UNRESOLVED), Ordering::Relaxed);
    }

    /// Whether the command buffer's dispatches are timed.
    #[inline]
    pub fn timed(&self) -> bool {
        self.timed.load(Ordering::Relaxed)
    }

    /// The recording's dispatch-level timing.
    #[inline]
    pub fn timing(&self) -> MutexGuard<'_, Timing> {
        self.timing.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes the recording's timing, leaving it empty, and forgets its labels.
    fn take_timing(&self) -> Timing {
        self.set_label_op(None);
        std::mem::take(&mut *self.timing())
    }

    /// Takes what the slot holds, leaving it empty. Plain loads and stores suffice: a slot is
    /// drained under the same Vulkan rule as it is written (its command buffer, or the pool it
    /// came from, used by one thread at a time), after the recording thread's last write.
    fn take(&self) -> Drained {
        if self.signature.load(Ordering::Relaxed) == 0
            && self.n.iter().all(|a| a.load(Ordering::Relaxed) == 0)
        {
            return Drained::default();
        }
        let take = |a: &AtomicU64| {
            let v = a.load(Ordering::Relaxed);
            a.store(0, Ordering::Relaxed);
            v
        };
        let n = |c: Counted| take(&self.n[c as usize]);
        let counters = Counters {
            dispatches: n(Counted::Dispatch),
            descriptor_set_binds: n(Counted::BindSets),
            push_constant_updates: n(Counted::PushConstants),
            barrier_calls: n(Counted::BarrierCall),
            pipeline_binds: n(Counted::PipelineBind),
            transfer_commands: n(Counted::Transfer),
            timestamp_writes: n(Counted::Timestamp),
            memory_barriers: take(&self.memory_barriers),
            ..Counters::default()
        };
        let pipeline = take(&self.pipeline);
        Drained {
            counters,
            signature: take(&self.signature),
            work: take(&self.work),
            pipeline: (pipeline != 0).then_some(pipeline),
        }
    }
}

/// A device's slots.
pub struct Table {
    slots: Box<[Slot]>,
}

impl Default for Table {
    fn default() -> Table {
        Table {
            slots: (0..SLOTS).map(|_| Slot::default()).collect(),
        }
    }
}

impl Table {
    fn home(key: u64) -> usize {
        mix(0, key) as usize & (SLOTS - 1)
    }

    /// The slot where command buffer `key`'s probe starts (its own, unless the table had a
    /// collision there): what to prefetch before `key` is looked up.
    #[inline]
    pub fn home_slot(&self, key: u64) -> &Slot {
        &self.slots[Self::home(key)]
    }

    /// The slot of command buffer `key`, if it has one.
    #[inline]
    pub fn find(&self, key: u64) -> Option<&Slot> {
        if key == EMPTY || key == FREED {
            return None;
        }
        let home = Self::home(key);
        for i in 0..PROBES {
            let s = &self.slots[(home + i) & (SLOTS - 1)];
            match s.key.load(Ordering::Acquire) {
                k if k == key => return Some(s),
                EMPTY => return None,
                _ => {}
            }
        }
        None
    }

    /// Gives command buffer `key` a slot (called under the device's lock), whose dispatches
    /// are `timed` at the dispatch level; false when its probe run is full (it is then counted
    /// under the lock).
    pub fn claim(&self, key: u64, timed: bool) -> bool {
        if key == EMPTY || key == FREED {
            return false;
        }
        if let Some(s) = self.find(key) {
            s.timed.store(timed, Ordering::Relaxed);
            return true;
        }
        let home = Self::home(key);
        for i in 0..PROBES {
            let s = &self.slots[(home + i) & (SLOTS - 1)];
            let k = s.key.load(Ordering::Acquire);
            if k == EMPTY || k == FREED {
                s.take();
                s.timed.store(timed, Ordering::Relaxed);
                s.key.store(key, Ordering::Release);
                return true;
            }
        }
        false
    }

    /// Releases command buffer `key`'s slot (called under the device's lock, once the
    /// command buffer is freed); what its recording still held of its timing.
    pub fn release(&self, key: u64) -> Option<Timing> {
        let s = self.find(key)?;
        s.take();
        let t = s.take_timing();
        s.key.store(FREED, Ordering::Release);
        Some(t)
    }

    /// Takes command buffer `key`'s recording's timing (`None` without a slot).
    pub fn take_timing(&self, key: u64) -> Option<Timing> {
        self.find(key).map(Slot::take_timing)
    }

    /// Runs `f` on command buffer `key`'s recording's timing, which `f` leaves empty for the
    /// next recording ([`Timing::clear`], keeping the room its lists have), and forgets the
    /// recording's labels. Called under the device's lock: the slot's mutex is taken after it.
    pub fn end_timing(&self, key: u64, f: impl FnOnce(&mut Timing)) {
        if let Some(s) = self.find(key) {
            s.set_label_op(None);
            f(&mut s.timing());
        }
    }

    /// Takes what command buffer `key`'s slot holds (`None` without a slot).
    pub fn drain(&self, key: u64) -> Option<Drained> {
        self.find(key).map(Slot::take)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Table {
        fn claim_untimed(&self, key: u64) -> bool {
            self.claim(key, false)
        }
    }

    #[test]
    fn counts_reach_the_drain_and_leave_the_slot_empty() {
        let t = Table::default();
        assert!(t.claim_untimed(0xabc));
        let s = t.find(0xabc).expect("claimed");
        s.bind(77, 1);
        s.count(Counted::Dispatch, 2);
        s.count(Counted::Dispatch, 2);
        s.barrier(3, 4 << 32 | 3);
        let d = t.drain(0xabc).expect("claimed");
        assert_eq!(d.counters.dispatches, 2);
        assert_eq!(d.counters.pipeline_binds, 1);
        assert_eq!(d.counters.barrier_calls, 1);
        assert_eq!(d.counters.memory_barriers, 3);
        assert_eq!(d.pipeline, Some(77));
        assert_ne!(d.signature, 0);
        assert_eq!(t.drain(0xabc), Some(Drained::default()));
    }

    #[test]
    fn the_same_commands_give_the_same_hashes_and_order_changes_only_the_signature() {
        let t = Table::default();
        for k in [1u64, 2, 3] {
            assert!(t.claim_untimed(k));
        }
        let rec = |k: u64, codes: &[u64]| {
            let s = t.find(k).expect("claimed");
            for &c in codes {
                s.count(Counted::Dispatch, c);
            }
            t.drain(k).expect("claimed")
        };
        let a = rec(1, &[5, 6]);
        let b = rec(2, &[5, 6]);
        let c = rec(3, &[6, 5]);
        assert_eq!((a.signature, a.work), (b.signature, b.work));
        assert_eq!(a.work, c.work);
        assert_ne!(a.signature, c.signature);
    }

    #[test]
    fn freed_slots_are_probed_past_and_reused() {
        let t = Table::default();
        // Handles with one home slot, so they share a probe run.
        let home = Table::home(10);
        let same: Vec<u64> = (11..u64::MAX)
            .filter(|&k| Table::home(k) == home)
            .take(3)
            .collect();
        assert!(t.claim_untimed(10));
        for &k in &same {
            assert!(t.claim_untimed(k));
        }
        t.release(10);
        assert!(t.find(10).is_none());
        for &k in &same {
            assert!(t.find(k).is_some(), "{k} is found past the freed slot");
        }
        assert!(t.claim_untimed(10));
        assert!(t.find(10).is_some());
    }

    #[test]
    fn a_full_probe_run_refuses_and_the_handle_is_counted_elsewhere() {
        let t = Table::default();
        let home = Table::home(1);
        let same: Vec<u64> = (1..u64::MAX)
            .filter(|&k| Table::home(k) == home)
            .take(PROBES + 1)
            .collect();
        for &k in &same[..PROBES] {
            assert!(t.claim_untimed(k));
        }
        // The run from `home` is full; a handle of the same home finds no slot.
        assert!(!t.claim_untimed(same[PROBES]));
        assert!(t.find(same[PROBES]).is_none());
    }
}
