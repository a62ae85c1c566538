//! The layer's GPU timestamps: its query pools, the commands it records into the program's
//! command buffers (and its own submit-level wrappers), and reading results back.

use std::ffi::c_void;

use ash::vk::{self, Handle};

use super::{DeviceData, Inner};
use crate::recording::Slot;
use crate::state::{BLOCK_PAIRS, MAX_POOLS, POOL_PAIRS, ReadJob, Source};

impl DeviceData {
    /// Creates one more query pool of [`POOL_PAIRS`] pairs; false when the driver refuses or
    /// the layer has [`MAX_POOLS`] already.
    pub(super) unsafe fn add_pool(&self, g: &mut Inner) -> bool {
        if g.timer.pools.len() as u32 >= MAX_POOLS {
            return false;
        }
        let Some(f) = self.next.create_query_pool else {
            return false;
        };
        let qi = vk::QueryPoolCreateInfo::default()
            .query_type(vk::QueryType::TIMESTAMP)
            .query_count(POOL_PAIRS * 2);
        let mut pool = vk::QueryPool::null();
        if f(self.handle, &qi, std::ptr::null(), &mut pool) != vk::Result::SUCCESS {
            return false;
        }
        if let Some(reset) = self.host_reset {
            reset(self.handle, pool, 0, POOL_PAIRS * 2);
        }
        g.timer.pools.push(pool);
        g.state.slots.grow();
        g.state.timing = true;
        true
    }

    /// A free pair (or block), adding a pool when every pool is full.
    pub(super) unsafe fn take_slot(&self, g: &mut Inner) -> Option<u32> {
        if let Some(s) = g.state.slots.take() {
            return Some(s);
        }
        if self.add_pool(g) {
            g.state.slots.take()
        } else {
            None
        }
    }

    /// The pool holding pair `slot`, and the pair's first query in it.
    pub(super) fn query(g: &Inner, slot: u32) -> Option<(vk::QueryPool, u32)> {
        let pool = *g.timer.pools.get((slot / POOL_PAIRS) as usize)?;
        Some((pool, (slot % POOL_PAIRS) * 2))
    }

    /// Records a reset of `pairs` pairs from `slot` into `cb`, unless the layer resets its
    /// queries from the host ([`Self::reset_on_host`]).
    pub(super) unsafe fn reset(&self, g: &Inner, cb: vk::CommandBuffer, slot: u32, pairs: u32) {
        if self.host_reset.is_some() {
            return;
        }
        if let (Some((pool, q)), Some(r)) = (Self::query(g, slot), self.next.cmd_reset_query_pool) {
            r(cb, pool, q, pairs * 2);
        }
    }

    /// Records a reset of the block from pair `first` (in query pool `pool`) into `cb`, unless
    /// the layer resets its queries from the host.
    unsafe fn reset_block(&self, cb: vk::CommandBuffer, pool: u64, first: u32) {
        if self.host_reset.is_some() {
            return;
        }
        if let Some(r) = self.next.cmd_reset_query_pool {
            r(
                cb,
                vk::QueryPool::from_raw(pool),
                (first % POOL_PAIRS) * 2,
                BLOCK_PAIRS * 2,
            );
        }
    }

    /// Resets from the host the pairs the state listed at the submit just counted
    /// ([`DeviceState::resets`](crate::state::DeviceState::resets)): one `vkResetQueryPool`
    /// per run of consecutive pairs in one pool.
    pub(super) unsafe fn reset_on_host(&self, g: &mut Inner) {
        let Some(reset) = self.host_reset else {
            return;
        };
        if g.state.resets.is_empty() {
            return;
        }
        let mut runs = std::mem::take(&mut g.state.resets);
        runs.sort_unstable();
        let mut i = 0;
        while i < runs.len() {
            let (first, mut end) = (runs[i].0, runs[i].0 + runs[i].1);
            i += 1;
            while i < runs.len()
                && runs[i].0 <= end
                && (first / POOL_PAIRS) == (runs[i].0 / POOL_PAIRS)
            {
                end = end.max(runs[i].0 + runs[i].1);
                i += 1;
            }
            if let Some((pool, q)) = Self::query(g, first) {
                reset(self.handle, pool, q, (end - first) * 2);
            }
        }
        runs.clear();
        g.state.resets = runs;
    }

    /// Records the start timestamp of `slot` into `cb`.
    pub(super) unsafe fn stamp_start(&self, g: &Inner, cb: vk::CommandBuffer, slot: u32) {
        if let (Some((pool, q)), Some(ts)) = (Self::query(g, slot), self.next.cmd_write_timestamp) {
            ts(cb, vk::PipelineStageFlags::TOP_OF_PIPE, pool, q);
        }
    }

    /// A dispatch of `groups` workgroups recorded into `cb`, which has slot `s`, at the dispatch
    /// level: its pair (the device's lock is taken only for a new block, whose queries are reset
    /// first), its stamp, and the interval's start when it opens one; an instrumented pipeline
    /// reads the clock unless the dispatch is too wide for it ([`ShaderClock::clocks`]), when it
    /// is told to skip it and timed by interval. Without a pair (every pool full) it stays
    /// untimed, counted as such at its submit.
    pub(super) unsafe fn time_dispatch(&self, cb: vk::CommandBuffer, s: &Slot, groups: u32) {
        let mut t = s.timing();
        let pair = match t.next_pair() {
            Some(p) => p,
            None => {
                // The slot's mutex is not held while the device's lock is taken: the device's
                // state takes them in the other order.
                drop(t);
                let block = {
                    let mut g = self.lock();
                    self.take_slot(&mut g).and_then(|first| {
                        let Some((pool, _)) = Self::query(&g, first) else {
                            g.state.slots.put(first);
                            return None;
                        };
                        Some((first, pool))
                    })
                };
                let Some((first, pool)) = block else {
                    return;
                };
                t = s.timing();
                t.add_block(first, pool.as_raw())
            }
        };
        let instrumented = self
            .clock
            .as_ref()
            .and_then(|c| Some((c, c.pipeline(s.pipeline())?)));
        let clocked = instrumented.filter(|(c, _)| c.clocks(groups));
        let fresh = match (clocked, s.label_op()) {
            (Some((c, _)), Some(op)) => t.clocked(pair, op, || c.wants_bracket()),
            (Some((c, _)), None) => t.clocked_of_pipeline(pair, s.pipeline(), || c.wants_bracket()),
            (None, Some(op)) => t.dispatch(pair, op),
            (None, None) => t.dispatch_of_pipeline(pair, s.pipeline()),
        };
        if let Some((c, target)) = instrumented {
            c.arm(&self.next, cb, target, clocked.is_some().then_some(pair));
        }
        if fresh && let Some(ts) = self.next.cmd_write_timestamp {
            if let Some(first) = t.first_write(2 * pair) {
                self.reset_block(cb, t.pool, first);
            }
            ts(
                cb,
                vk::PipelineStageFlags::TOP_OF_PIPE,
                vk::QueryPool::from_raw(t.pool),
                (pair % POOL_PAIRS) * 2,
            );
        }
    }

    /// Ends the current interval of `cb`'s recording in slot `s`: a bottom-of-pipe timestamp
    /// into the query [`Timing::close`](crate::state::Timing::close) names.
    pub(super) unsafe fn close_slot_interval(&self, cb: vk::CommandBuffer, s: &Slot) {
        let mut t = s.timing();
        if let (Some(q), Some(ts)) = (t.close(), self.next.cmd_write_timestamp) {
            if let Some(first) = t.first_write(q) {
                self.reset_block(cb, t.pool, first);
            }
            ts(
                cb,
                vk::PipelineStageFlags::BOTTOM_OF_PIPE,
                vk::QueryPool::from_raw(t.pool),
                q % (2 * POOL_PAIRS),
            );
        }
    }

    /// Ends `cb`'s bracket of clocked dispatches at the end of its recording, if it has one: a
    /// bottom-of-pipe timestamp into the query
    /// [`Timing::close_bracket`](crate::state::Timing::close_bracket) names. Then the clocked
    /// dispatches' records are copied for the host.
    pub(super) unsafe fn close_bracket(&self, g: &mut Inner, cb: vk::CommandBuffer) {
        let Some(c) = &self.clock else {
            return;
        };
        let mut pairs = Vec::new();
        let (end, reset) = match self.slot(cb) {
            Some(s) => {
                let mut t = s.timing();
                t.clocked_pairs(&mut pairs);
                let end = t.close_bracket();
                (end, end.and_then(|q| t.first_write(q)))
            }
            None => {
                let end = g.state.close_bracket(cb.as_raw(), &mut pairs);
                let k = cb.as_raw();
                (end, end.and_then(|q| g.state.first_write(k, q)))
            }
        };
        if pairs.is_empty() {
            return;
        }
        if let Some(q) = end
            && let Some(ts) = self.next.cmd_write_timestamp
            && let Some((pool, first)) = Self::query(g, q / 2)
        {
            if let Some(block) = reset {
                self.reset(g, cb, block, BLOCK_PAIRS);
            }
            ts(
                cb,
                vk::PipelineStageFlags::BOTTOM_OF_PIPE,
                pool,
                first + q % 2,
            );
        }
        c.copy_back(&self.next, cb, &mut pairs);
    }

    /// Ends `cb`'s current interval of dispatches (in its slot, or in the state for a command
    /// buffer without one): a bottom-of-pipe timestamp into the query that names.
    pub(super) unsafe fn close_interval(&self, g: &mut Inner, cb: vk::CommandBuffer) {
        if g.state.level != crate::state::Level::Dispatch {
            return;
        }
        if let Some(s) = self.slot(cb) {
            self.close_slot_interval(cb, s);
            return;
        }
        let Some(q) = g.state.close_interval(cb.as_raw()) else {
            return;
        };
        if let (Some((pool, first)), Some(ts)) =
            (Self::query(g, q / 2), self.next.cmd_write_timestamp)
        {
            if let Some(block) = g.state.first_write(cb.as_raw(), q) {
                self.reset(g, cb, block, BLOCK_PAIRS);
            }
            ts(
                cb,
                vk::PipelineStageFlags::BOTTOM_OF_PIPE,
                pool,
                first + q % 2,
            );
        }
    }

    /// Records the end timestamp of `slot` into `cb`.
    pub(super) unsafe fn stamp_end(&self, g: &Inner, cb: vk::CommandBuffer, slot: u32) {
        if let (Some((pool, q)), Some(ts)) = (Self::query(g, slot), self.next.cmd_write_timestamp) {
            ts(cb, vk::PipelineStageFlags::BOTTOM_OF_PIPE, pool, q + 1);
        }
    }

    /// The layer's start and end command buffers for a submit-level pair in `slot` on `family`
    /// (recorded once, reused whenever the slot is).
    pub(super) unsafe fn wrappers(
        &self,
        g: &mut Inner,
        family: u32,
        slot: u32,
    ) -> Option<(vk::CommandBuffer, vk::CommandBuffer)> {
        if let Some(w) = g.timer.wrappers.get(&(family, slot)) {
            return Some(*w);
        }
        let n = self.next;
        let pool = match g.timer.cmd_pools.get(&family) {
            Some(p) => *p,
            None => {
                let info = vk::CommandPoolCreateInfo::default().queue_family_index(family);
                let mut p = vk::CommandPool::null();
                if n.create_command_pool?(self.handle, &info, std::ptr::null(), &mut p)
                    != vk::Result::SUCCESS
                {
                    return None;
                }
                g.timer.cmd_pools.insert(family, p);
                p
            }
        };
        let info = vk::CommandBufferAllocateInfo::default()
            .command_pool(pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(2);
        let mut cbs = [vk::CommandBuffer::null(); 2];
        if n.allocate_command_buffers?(self.handle, &info, cbs.as_mut_ptr()) != vk::Result::SUCCESS
        {
            return None;
        }
        // The loader's dispatch pointer goes into command buffers the layer made itself, so
        // that the layers below it find their own state for them.
        if let Some(set) = self.set_loader_data {
            for cb in cbs {
                if set(self.handle, cb.as_raw() as usize as *mut c_void) != vk::Result::SUCCESS {
                    return None;
                }
            }
        }
        let begin = vk::CommandBufferBeginInfo::default();
        let (b, e) = (n.begin_command_buffer?, n.end_command_buffer?);
        let ok = vk::Result::SUCCESS;
        if b(cbs[0], &begin) != ok {
            return None;
        }
        self.reset(g, cbs[0], slot, 1);
        self.stamp_start(g, cbs[0], slot);
        if e(cbs[0]) != ok || b(cbs[1], &begin) != ok {
            return None;
        }
        self.stamp_end(g, cbs[1], slot);
        if e(cbs[1]) != ok {
            return None;
        }
        let w = (cbs[0], cbs[1]);
        g.timer.wrappers.insert((family, slot), w);
        Some(w)
    }

    /// Reads the stamps of `jobs` without waiting, one `vkGetQueryPoolResults` per run of
    /// consecutive pairs, and hands the results to the state.
    pub(super) unsafe fn read_jobs(&self, g: &mut Inner, jobs: Vec<ReadJob>) {
        let mut slots: Vec<u32> = Vec::new();
        let mut values: Vec<Option<u64>> = Vec::new();
        for job in jobs {
            // The job's pairs whose queries its stamps name, sorted; `values[2 i + k]` is query
            // `k` of pair `slots[i]`, once read and available. Every query a stamp names is in a
            // pair of the same job; a clocked dispatch's pair holds its queries only when they
            // bracket the command buffer.
            slots.clear();
            slots.extend(
                job.stamps
                    .iter()
                    .filter(|s| s.source != Source::Clock)
                    .flat_map(|s| [s.start / 2, s.end / 2]),
            );
            slots.sort_unstable();
            slots.dedup();
            values.clear();
            values.resize(slots.len() * 2, None);
            let mut i = 0;
            while i < slots.len() {
                // A run: consecutive pairs of one pool.
                let first = slots[i];
                let mut n = 1;
                while i + n < slots.len()
                    && slots[i + n] == first + n as u32
                    && !(first + n as u32).is_multiple_of(POOL_PAIRS)
                {
                    n += 1;
                }
                self.read_run(g, first, &mut values[2 * i..2 * (i + n)]);
                i += n;
            }
            let value = |q: u32| {
                let i = slots.binary_search(&(q / 2)).ok()?;
                values[2 * i + (q % 2) as usize]
            };
            let mut results: Vec<Option<(u64, u64)>> = job
                .stamps
                .iter()
                .map(|s| match s.source {
                    Source::Clock => None,
                    _ => Some((value(s.start)?, value(s.end)?)),
                })
                .collect();
            if let Some(c) = &self.clock {
                let clocked: Vec<usize> = (0..job.stamps.len())
                    .filter(|&i| job.stamps[i].source == Source::Clock)
                    .collect();
                if !clocked.is_empty() {
                    let bracket = job
                        .stamps
                        .iter()
                        .zip(&results)
                        .find(|(s, _)| s.source == Source::Bracket)
                        .and_then(|(_, r)| *r);
                    let clocks: Vec<Option<(u64, u64)>> = clocked
                        .iter()
                        .map(|&i| c.take(job.stamps[i].slot))
                        .collect();
                    let spans = g.state.clock_map.map(bracket, &clocks);
                    if bracket.is_some() {
                        c.establish(g.state.clock_map.established());
                    }
                    for (&i, span) in clocked.iter().zip(spans) {
                        results[i] = span;
                    }
                }
            }
            g.state.read_done(&job, &results);
        }
    }

    /// Reads the pairs from `first` into `out` (two queries a pair): each available query's
    /// time.
    unsafe fn read_run(&self, g: &Inner, first: u32, out: &mut [Option<u64>]) {
        let (Some((pool, q)), Some(f)) = (Self::query(g, first), self.next.get_query_pool_results)
        else {
            return;
        };
        let mut v = vec![0u64; out.len() * 2];
        let r = f(
            self.handle,
            pool,
            q,
            out.len() as u32,
            v.len() * 8,
            v.as_mut_ptr().cast(),
            16,
            vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WITH_AVAILABILITY,
        );
        // NOT_READY still fills in the available queries.
        if r != vk::Result::SUCCESS && r != vk::Result::NOT_READY {
            return;
        }
        for (o, pair) in out.iter_mut().zip(v.chunks_exact(2)) {
            if pair[1] != 0 {
                *o = Some(self.ns(pair[0]));
            }
        }
    }
}
