//! The layer's timestamp pairs: which pairs of its query pools are free.

use super::{BLOCK_PAIRS, Level, POOL_PAIRS};

/// Free timestamp pairs of the layer's query pools.
#[derive(Debug, Default)]
pub struct Slots {
    /// Query pools created so far.
    pub pools: u32,
    /// Free pairs (at the dispatch level, the first pairs of free blocks).
    free: Vec<u32>,
    /// Pairs (or blocks) handed out per allocation.
    step: u32,
}

impl Slots {
    pub fn new(level: Level) -> Slots {
        Slots {
            pools: 0,
            free: Vec::new(),
            step: if level == Level::Dispatch {
                BLOCK_PAIRS
            } else {
                1
            },
        }
    }

    /// Takes a free pair (or block); `None` when every pool is full: the caller may add a
    /// pool with [`Slots::grow`] and retry.
    pub fn take(&mut self) -> Option<u32> {
        self.free.pop()
    }

    /// Adds the pairs of pool number `self.pools` and counts it.
    pub fn grow(&mut self) {
        let base = self.pools * POOL_PAIRS;
        self.free.extend(
            (0..POOL_PAIRS)
                .step_by(self.step as usize)
                .rev()
                .map(|i| base + i),
        );
        self.pools += 1;
    }

    pub fn put(&mut self, first: u32) {
        self.free.push(first);
    }
}
