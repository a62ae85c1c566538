//! The paged layout's host side: a pool of fixed-size blocks with a free list, and one block
//! table per sequence mapping logical blocks to physical ones.

use profiler::rng::Rng;

/// The free blocks of the pool. With `fragment`, the free list is shuffled once so consecutive
/// allocations land on scattered physical blocks (as a long-running server's pool looks).
#[derive(Clone, Debug)]
pub struct BlockPool {
    /// Free physical block ids; allocation pops from the end.
    free: Vec<u32>,
    capacity: u32,
}

impl BlockPool {
    pub fn new(blocks: u32, fragment: bool, seed: u64) -> BlockPool {
        // Popped from the end: reversed so an unfragmented pool hands out 0, 1, 2, ...
        let mut free: Vec<u32> = (0..blocks).rev().collect();
        if fragment {
            let mut rng = Rng::new(seed);
            // Fisher-Yates.
            for i in (1..free.len()).rev() {
                let j = (rng.next_u64() % (i as u64 + 1)) as usize;
                free.swap(i, j);
            }
        }
        BlockPool {
            free,
            capacity: blocks,
        }
    }

    /// A free block, or `None` when the pool is exhausted.
    pub fn alloc(&mut self) -> Option<u32> {
        self.free.pop()
    }

    /// Returns a block to the pool.
    pub fn release(&mut self, block: u32) {
        debug_assert!(block < self.capacity && !self.free.contains(&block));
        self.free.push(block);
    }

    pub fn free_blocks(&self) -> usize {
        self.free.len()
    }
    pub fn capacity(&self) -> u32 {
        self.capacity
    }
}

/// One block table per sequence: `[seqs, stride]` physical block ids (the layout the kernels
/// read), with the number of blocks each sequence holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockTables {
    stride: u32,
    entries: Vec<u32>,
    held: Vec<u32>,
}

impl BlockTables {
    pub fn new(seqs: u32, stride: u32) -> BlockTables {
        BlockTables {
            stride: stride.max(1),
            entries: vec![0; (seqs.max(1) * stride.max(1)) as usize],
            held: vec![0; seqs.max(1) as usize],
        }
    }

    /// The physical block of `seq`'s logical block `i` (0 when not allocated).
    pub fn block(&self, seq: u32, i: u32) -> u32 {
        self.entries
            .get((seq * self.stride + i) as usize)
            .copied()
            .unwrap_or(0)
    }

    /// Blocks `seq` holds.
    pub fn held(&self, seq: u32) -> u32 {
        self.held.get(seq as usize).copied().unwrap_or(0)
    }

    /// Makes `seq`'s table cover positions `0..len` with blocks of `block` positions, allocating
    /// from `pool`. Returns whether the table changed, or an error when the pool or the table
    /// runs out.
    pub fn ensure(
        &mut self,
        pool: &mut BlockPool,
        seq: u32,
        len: u32,
        block: u32,
    ) -> Result<bool, String> {
        let need = len.div_ceil(block);
        if need > self.stride {
            return Err(format!(
                "sequence {seq} needs {need} blocks of {block} positions, more than its table's {}",
                self.stride
            ));
        }
        let mut changed = false;
        while self.held(seq) < need {
            let b = pool.alloc().ok_or_else(|| {
                format!(
                    "the KV block pool ({} blocks) is exhausted",
                    pool.capacity()
                )
            })?;
            let i = self.held[seq as usize];
            self.entries[(seq * self.stride + i) as usize] = b;
            self.held[seq as usize] += 1;
            changed = true;
        }
        Ok(changed)
    }

    /// Frees every block of `seq`.
    pub fn release(&mut self, pool: &mut BlockPool, seq: u32) {
        for i in 0..self.held(seq) {
            pool.release(self.entries[(seq * self.stride + i) as usize]);
            self.entries[(seq * self.stride + i) as usize] = 0;
        }
        self.held[seq as usize] = 0;
    }

    /// The table row of `seq` as the kernels read it.
    pub fn row(&self, seq: u32) -> &[u32] {
        let s = (seq * self.stride) as usize;
        &self.entries[s..s + self.stride as usize]
    }

    /// Every row, `[seqs, stride]`.
    pub fn entries(&self) -> &[u32] {
        &self.entries
    }
    pub fn stride(&self) -> u32 {
        self.stride
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unfragmented_pool_hands_out_blocks_in_order() {
        let mut pool = BlockPool::new(8, false, 1);
        let mut t = BlockTables::new(2, 4);
        assert!(t.ensure(&mut pool, 0, 33, 16).expect("fits"));
        assert_eq!(t.row(0)[..3], [0, 1, 2]);
        assert!(!t.ensure(&mut pool, 0, 40, 16).expect("fits"));
        t.ensure(&mut pool, 1, 1, 16).expect("fits");
        assert_eq!(t.block(1, 0), 3);
    }

    #[test]
    fn fragmented_tables_are_scattered_and_distinct() {
        let mut pool = BlockPool::new(64, true, 7);
        let mut t = BlockTables::new(2, 32);
        t.ensure(&mut pool, 0, 32 * 16, 16).expect("fits");
        t.ensure(&mut pool, 1, 32 * 16, 16).expect("fits");
        let all: std::collections::BTreeSet<u32> = t.entries().iter().copied().collect();
        assert_eq!(all.len(), 64, "every block used once");
        let ascending = t.row(0).windows(2).filter(|w| w[1] == w[0] + 1).count();
        assert!(ascending < 8, "fragmented table is mostly non-consecutive");
        assert_eq!(pool.free_blocks(), 0);
        let err = t.ensure(&mut pool, 0, 33 * 16, 16).unwrap_err();
        assert!(err.contains("more than its table"), "{err}");
        t.release(&mut pool, 1);
        assert_eq!(pool.free_blocks(), 32);
    }
}
