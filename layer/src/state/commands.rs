//! Command pools and command buffers: what each recorded, its labels and pipeline, the ops of
//! its dispatches and the timestamp pairs recorded into it.

use super::*;

/// Tags of the commands that make up a command buffer's work signature.
#[derive(Clone, Copy, Debug)]
pub enum Cmd {
    /// A pipeline bound, by its handle.
    BindPipeline(u64),
    Dispatch,
    Transfer,
    Barrier(u64),
    BindSets,
    PushConstants,
    Timestamp,
    Execute(u64),
}

impl Cmd {
    /// The command's part of a recording's signature.
    pub fn code(self) -> u64 {
        match self {
            Cmd::BindPipeline(p) => mix(1, p),
            Cmd::Dispatch => 2,
            Cmd::Transfer => 3,
            Cmd::Barrier(n) => 4 << 32 | n,
            Cmd::BindSets => 5,
            Cmd::PushConstants => 6,
            Cmd::Timestamp => 7,
            Cmd::Execute(sig) => mix(8, sig),
        }
    }
}

/// What one command buffer recorded since it was begun.
#[derive(Clone, Debug, Default)]
pub struct CmdState {
    pub pool: u64,
    pub secondary: bool,
    pub counters: Counters,
    pub signature: u64,
    /// Order-free hash of the commands (a wrapping sum of their mixed codes): equal for the same
    /// work however it is split into command buffers and submits.
    pub work: u64,
    labels: Vec<String>,
    pipeline: Option<u64>,
    /// The op of a dispatch recorded now (labels and pipeline unchanged since it was found).
    op_cache: Option<u32>,
    record_start_ns: Option<u64>,
    /// Timestamp pairs recorded into this command buffer (at the dispatch level, those of the
    /// recording's dispatches once it ended: [`DeviceState::absorb`]).
    pub stamps: Vec<Stamp>,
    /// Dispatch level: the recording's timing while it records under the device's lock (a
    /// command buffer without a lock-free slot).
    timing: Timing,
    /// Dispatch level: the blocks of pairs the ended recording holds (first pair of each).
    pub(super) blocks: Vec<u32>,
    /// Dispatches recorded with a stamp of their own.
    pub(super) timed_dispatches: u64,
    /// The last submission, until its stamps are read.
    pub unread: Option<Submission>,
    /// Begun since its pool's last reset (it is on the pool's list of begun command buffers).
    begun: bool,
    /// Recorded with `SIMULTANEOUS_USE`: it may be submitted again while pending, when its
    /// queries cannot be reset from the host, so with host resets it is not timed.
    pub simultaneous: bool,
}

/// Command buffer `cmd`'s state. Every lookup of the per-command-buffer map goes through this
/// one out-of-line copy of the map's probe, as every creation goes through [`cmd_entry`]: a
/// command buffer is looked up several times a record-submit-wait cycle, in different
/// functions, and a copy of the probe inlined into each missed the instruction cache in each
/// (a program records right after it waits, with the caches cold).
#[inline(never)]
pub(super) fn cmd_mut(cmds: &mut FastMap<u64, CmdState>, cmd: u64) -> Option<&mut CmdState> {
    cmds.get_mut(&cmd)
}

/// Command buffer `cmd`'s state, created empty if the layer did not see it allocated.
#[inline(never)]
pub(super) fn cmd_entry(cmds: &mut FastMap<u64, CmdState>, cmd: u64) -> &mut CmdState {
    cmds.entry(cmd).or_default()
}

/// Returns the timestamp pairs `c`'s recording holds to the free list (the dispatch level's
/// blocks of pairs, or the other levels' stamps' pairs), leaving its lists empty.
#[cold]
fn free_pairs(c: &mut CmdState, slots: &mut Slots, level: Level) {
    let mut blocks = std::mem::take(&mut c.blocks);
    blocks.append(&mut c.timing.blocks);
    let stamps = std::mem::take(&mut c.stamps);
    if level == Level::Dispatch {
        for b in blocks {
            slots.put(b);
        }
    } else {
        for s in stamps {
            slots.put(s.slot);
        }
    }
}

impl DeviceState {
    pub fn add_pool(&mut self, pool: u64, family: u32) {
        self.pool_family.insert(pool, family);
    }

    /// Command buffers of `pool` (for a pool reset or destruction).
    pub fn cmds_of_pool(&self, pool: u64) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .cmds
            .iter()
            .filter(|(_, c)| c.pool == pool)
            .map(|(&k, _)| k)
            .collect();
        v.sort_unstable();
        v
    }

    /// The command buffers of `pool` begun since its last reset (for a pool reset, which
    /// leaves the others as they are: never recorded since, they hold nothing to read or clear).
    pub fn begun_in_pool(&mut self, pool: u64) -> Vec<u64> {
        let mut v = self.pool_begun.remove(&pool).unwrap_or_default();
        v.retain(|k| {
            cmd_mut(&mut self.cmds, *k).is_some_and(|c| {
                let mine = c.pool == pool && c.begun;
                c.begun = false;
                mine
            })
        });
        v.sort_unstable();
        v.dedup();
        v
    }

    pub fn forget_pool(&mut self, pool: u64) {
        self.pool_family.remove(&pool);
        self.pool_begun.remove(&pool);
    }

    pub fn allocate_cmd(&mut self, cmd: u64, pool: u64, secondary: bool) {
        self.cmds.insert(
            cmd,
            CmdState {
                pool,
                secondary,
                ..CmdState::default()
            },
        );
    }

    /// True when `cmd` is a primary command buffer whose queue family can write timestamps
    /// (and, with host resets, one that is not submitted again while pending).
    pub fn can_time(&self, cmd: u64) -> bool {
        self.timing
            && self.cmds.get(&cmd).is_some_and(|c| {
                !(c.secondary || self.host_reset && c.simultaneous)
                    && self
                        .pool_family
                        .get(&c.pool)
                        .and_then(|&f| self.timestamp_families.get(f as usize))
                        .copied()
                        .unwrap_or(false)
            })
    }

    /// The stamps of `cmd`'s last submission, which the program has finished with (it records,
    /// resets or frees the command buffer only once that submission is complete): read them
    /// before the command buffer's slots go. Below the command-buffer level nothing can be
    /// unread, and the command buffer's state is not looked up: after the program's wait it
    /// is out of the cache, and a begin or a submit would wait for it.
    pub fn unread_of(&mut self, cmd: u64) -> Option<ReadJob> {
        if !self.stamps_command_buffers() {
            return None;
        }
        let c = cmd_mut(&mut self.cmds, cmd)?;
        let sub = c.unread.take()?;
        Some(ReadJob {
            sub,
            stamps: c.stamps.clone(),
            own: false,
        })
    }

    /// Forgets the recording of `cmd` (its stamps must have been read: [`Self::unread_of`]);
    /// its slots go back to the free list.
    fn clear_recording(&mut self, cmd: u64) -> Option<&mut CmdState> {
        let c = cmd_mut(&mut self.cmds, cmd)?;
        if c.record_start_ns.take().is_some() {
            self.recording = self.recording.saturating_sub(1);
        }
        if !(c.blocks.is_empty() && c.timing.blocks.is_empty() && c.stamps.is_empty()) {
            free_pairs(c, &mut self.slots, self.level);
        }
        // Field by field, keeping the lists' room: a command buffer begins after every wait,
        // and rebuilding the whole state (dropping the old one) was code enough to miss the
        // instruction cache at each begin.
        c.counters = Counters::default();
        c.signature = 0;
        c.work = 0;
        c.labels.clear();
        c.pipeline = None;
        c.op_cache = None;
        c.stamps.clear();
        if !c.timing.is_empty() {
            c.timing.clear();
        }
        c.blocks.clear();
        c.timed_dispatches = 0;
        c.unread = None;
        Some(c)
    }

    /// `vkBeginCommandBuffer` (an implicit reset): counts it and starts a new recording, with
    /// `SIMULTANEOUS_USE` or not. True when that flag changed since the last recording (the
    /// caller updates the lock-free slot's `timed`: [`Self::can_time`]).
    pub fn begin_cmd(&mut self, cmd: u64, now_ns: u64, simultaneous: bool) -> bool {
        self.group.counters.command_buffers_begun += 1;
        self.total.command_buffers_begun += 1;
        cmd_entry(&mut self.cmds, cmd);
        let mut changed = false;
        if let Some(c) = self.clear_recording(cmd) {
            changed = c.simultaneous != simultaneous;
            c.simultaneous = simultaneous;
            c.record_start_ns = Some(now_ns);
            if !c.begun {
                c.begun = true;
                let pool = c.pool;
                self.pool_begun.entry(pool).or_default().push(cmd);
            }
        }
        self.recording += 1;
        changed
    }

    /// `vkResetCommandBuffer` or a pool reset: the recording is gone.
    pub fn reset_cmd(&mut self, cmd: u64) {
        self.clear_recording(cmd);
    }

    /// `vkFreeCommandBuffers` or a pool's destruction.
    pub fn free_cmd(&mut self, cmd: u64) {
        self.clear_recording(cmd);
        self.cmds.remove(&cmd);
    }

    pub fn end_cmd(&mut self, cmd: u64, now_ns: u64) {
        let Some(c) = cmd_mut(&mut self.cmds, cmd) else {
            return;
        };
        if self.level == Level::Dispatch {
            let mut timing = std::mem::take(&mut c.timing);
            self.absorb(cmd, &mut timing);
            if let Some(c) = cmd_mut(&mut self.cmds, cmd) {
                c.timing = timing;
            }
        }
        let Some(c) = cmd_mut(&mut self.cmds, cmd) else {
            return;
        };
        // A command-buffer stamp (or the submit level's, in a command buffer) covers every
        // dispatch recorded into it.
        let dispatches = c.counters.dispatches;
        if matches!(self.level, Level::CommandBuffer | Level::Submit)
            && let Some(s) = c.stamps.first_mut()
        {
            s.covers = dispatches;
        }
        if let Some(s) = c.record_start_ns.take() {
            self.recording = self.recording.saturating_sub(1);
            self.group
                .host
                .push((Host::Record, s, now_ns.saturating_sub(s), 1));
        }
    }

    /// Counts a command recorded into `cmd`.
    pub fn record(&mut self, cmd: u64, what: Cmd) {
        let c = cmd_entry(&mut self.cmds, cmd);
        let code = what.code();
        c.signature = mix(c.signature, code);
        c.work = c.work.wrapping_add(mix(0, code));
        let k = &mut c.counters;
        match what {
            Cmd::BindPipeline(_) => k.pipeline_binds += 1,
            Cmd::Dispatch => k.dispatches += 1,
            Cmd::Transfer => k.transfer_commands += 1,
            Cmd::Barrier(n) => {
                k.barrier_calls += 1;
                k.memory_barriers += n;
            }
            Cmd::BindSets => k.descriptor_set_binds += 1,
            Cmd::PushConstants => k.push_constant_updates += 1,
            Cmd::Timestamp => k.timestamp_writes += 1,
            Cmd::Execute(_) => {}
        }
        // A transfer before an interval's first dispatch: that dispatch's span starts at a
        // boundary of its own, not before the transfer.
        if matches!(what, Cmd::Transfer) {
            c.timing.transfer();
        }
    }

    /// `vkCmdExecuteCommands`: the secondaries' recorded commands become the primary's.
    pub fn execute_secondaries(&mut self, cmd: u64, secondaries: &[u64]) {
        for s in secondaries {
            let (counters, sig, work) = match self.cmds.get(s) {
                Some(c) => (c.counters, c.signature, c.work),
                None => continue,
            };
            self.record(cmd, Cmd::Execute(sig));
            if let Some(c) = cmd_mut(&mut self.cmds, cmd) {
                c.counters.add(&counters);
                c.work = c.work.wrapping_add(work);
            }
        }
    }

    pub fn bind_pipeline(&mut self, cmd: u64, pipeline: u64) {
        if let Some(c) = cmd_mut(&mut self.cmds, cmd) {
            c.pipeline = Some(pipeline);
            c.op_cache = None;
        }
        self.record(cmd, Cmd::BindPipeline(pipeline));
    }

    /// What `cmd` recorded without the lock ([`crate::recording`]) since its last drain.
    pub fn drained(&mut self, cmd: u64, d: crate::recording::Drained) {
        let c = cmd_entry(&mut self.cmds, cmd);
        c.counters.add(&d.counters);
        if d.signature != 0 {
            c.signature = mix(c.signature, d.signature);
        }
        c.work = c.work.wrapping_add(d.work);
        if let Some(p) = d.pipeline {
            c.pipeline = Some(p);
            c.op_cache = None;
        }
    }

    /// `vkCreateShaderModule`: remembers the hash of its code.
    pub fn shader_module(&mut self, module: u64, code_hash: u64) {
        self.modules.insert(module, code_hash);
    }

    pub fn destroy_shader_module(&mut self, module: u64) {
        self.modules.remove(&module);
    }

    /// The hash of a shader module's code, if the layer saw it created.
    pub fn module_hash(&self, module: u64) -> Option<u64> {
        self.modules.get(&module).copied()
    }

    /// A compute pipeline created from code hashed `code_hash` (the module's, or a module
    /// chained into the stage), entry point `entry`, specialization data hashed `spec`: its
    /// label is `entry@HASH` (`entry@HASH+SPEC` with specialization data), the same in every run
    /// of the same program, unless the program names the pipeline.
    pub fn created_pipeline(&mut self, pipeline: u64, entry: &str, code_hash: u64, spec: u64) {
        let mut label = format!("{entry}@{:08x}", code_hash as u32);
        if spec != 0 {
            label.push_str(&format!("+{:04x}", spec as u16));
        }
        self.pipeline_labels.entry(pipeline).or_insert(label);
        self.pipeline_ops.remove(&pipeline);
    }

    /// `vkSetDebugUtilsObjectNameEXT` on a pipeline.
    pub fn name_pipeline(&mut self, pipeline: u64, name: String) {
        self.pipeline_labels.insert(pipeline, name);
        self.pipeline_ops.remove(&pipeline);
        for c in self.cmds.values_mut() {
            if c.pipeline == Some(pipeline) {
                c.op_cache = None;
            }
        }
    }

    pub fn push_label(&mut self, cmd: u64, label: String) {
        if let Some(c) = cmd_mut(&mut self.cmds, cmd) {
            c.labels.push(label);
            c.op_cache = None;
        }
    }

    pub fn pop_label(&mut self, cmd: u64) {
        if let Some(c) = cmd_mut(&mut self.cmds, cmd) {
            c.labels.pop();
            c.op_cache = None;
        }
    }

    /// The op of a dispatch recorded now into `cmd`: labelled by the innermost debug-utils
    /// label, else the bound pipeline's debug name, else its stable `entry@HASH` label.
    pub fn dispatch_op_of(&mut self, cmd: u64) -> u32 {
        let Some(c) = self.cmds.get(&cmd) else {
            return self.pipeline_op(0);
        };
        if let Some(op) = c.op_cache {
            return op;
        }
        let op = match (c.labels.last().cloned(), c.pipeline) {
            (Some(label), _) => self.dispatch_op(&label),
            (None, pipeline) => self.pipeline_op(pipeline.unwrap_or(0)),
        };
        if let Some(c) = cmd_mut(&mut self.cmds, cmd) {
            c.op_cache = Some(op);
        }
        op
    }

    /// A timestamp pair for a dispatch recorded into `cmd` at the dispatch level under the
    /// device's lock: from its current block, or the first of a new one (whose queries are
    /// reset at their first write: [`Self::first_write`]). `None` when the pools
    /// are full (the caller may add a pool and retry) or `cmd` is unknown.
    pub fn dispatch_slot(&mut self, cmd: u64) -> Option<u32> {
        let c = cmd_mut(&mut self.cmds, cmd)?;
        if let Some(slot) = c.timing.next_pair() {
            return Some(slot);
        }
        let first = self.slots.take()?;
        let c = cmd_mut(&mut self.cmds, cmd)?;
        Some(c.timing.add_block(first, 0))
    }

    /// Before the caller writes query `q` of `cmd`'s recording under the device's lock
    /// ([`Timing::first_write`]): the first pair of the block to reset first, if any.
    pub fn first_write(&mut self, cmd: u64, q: u32) -> Option<u32> {
        cmd_mut(&mut self.cmds, cmd)?.timing.first_write(q)
    }

    /// A region's stamp recorded into `cmd` (the command buffer's).
    pub fn add_stamp(&mut self, cmd: u64, stamp: Stamp) {
        if let Some(c) = cmd_mut(&mut self.cmds, cmd) {
            c.stamps.push(stamp);
        }
    }

    /// The stamp of a dispatch of op `op` recorded into `cmd` with pair `slot`, at the dispatch
    /// level under the device's lock ([`Timing::dispatch`]): true when the caller must write
    /// the interval's start (query `2 slot`).
    pub fn dispatch_stamp(&mut self, cmd: u64, slot: u32, op: u32) -> bool {
        self.cmds
            .get_mut(&cmd)
            .is_some_and(|c| c.timing.dispatch(slot, op))
    }

    /// The pipeline bound in `cmd` now (recorded under the device's lock).
    pub fn bound_pipeline(&self, cmd: u64) -> Option<u64> {
        self.cmds.get(&cmd)?.pipeline
    }

    /// The stamp of a clocked dispatch of op `op` recorded into `cmd` with pair `slot`, under
    /// the device's lock ([`Timing::clocked`]): true when the caller must write the bracket's
    /// start (query `2 slot`).
    pub fn clocked_stamp(
        &mut self,
        cmd: u64,
        slot: u32,
        op: u32,
        bracket: impl FnOnce() -> bool,
    ) -> bool {
        self.cmds
            .get_mut(&cmd)
            .is_some_and(|c| c.timing.clocked(slot, op, bracket))
    }

    /// Ends `cmd`'s bracket of clocked dispatches ([`Timing::close_bracket`]), recorded under
    /// the device's lock: its end query, if it has one, and the clocked dispatches' pairs
    /// added to `pairs`.
    pub fn close_bracket(&mut self, cmd: u64, pairs: &mut Vec<u32>) -> Option<u32> {
        let t = &mut cmd_mut(&mut self.cmds, cmd)?.timing;
        t.clocked_pairs(pairs);
        t.close_bracket()
    }

    /// Ends `cmd`'s current interval ([`Timing::close`]): the query its dispatches end at (the
    /// caller writes it, bottom of pipe), or `None` when no dispatch was recorded since the
    /// last boundary.
    pub fn close_interval(&mut self, cmd: u64) -> Option<u32> {
        cmd_mut(&mut self.cmds, cmd)?.timing.close()
    }

    /// A recording's dispatch-level timing joins `cmd`'s state when the recording ends: its
    /// stamps (each op found now where the dispatch left it to its pipeline) are read after
    /// its submission, and its blocks are freed with the recording. `t` is left empty
    /// ([`Timing::clear`]) for the command buffer's next recording.
    pub fn absorb(&mut self, cmd: u64, t: &mut Timing) {
        for &(i, pipeline) in &t.pipelines {
            let op = self.pipeline_op(pipeline);
            if let Some(s) = t.stamps.get_mut(i) {
                s.op = op;
            }
        }
        match cmd_mut(&mut self.cmds, cmd) {
            Some(c) => {
                c.timed_dispatches += t
                    .stamps
                    .iter()
                    .filter(|s| s.source != Source::Bracket)
                    .count() as u64;
                c.stamps.append(&mut t.stamps);
                c.blocks.append(&mut t.blocks);
            }
            // An unknown command buffer: its pairs go back at once.
            None => {
                for b in t.blocks.drain(..) {
                    self.slots.put(b);
                }
            }
        }
        t.clear();
    }

    /// Frees the pairs of a recording's timing that never joined its state (the recording was
    /// begun again, reset or freed before it ended).
    pub fn discard_timing(&mut self, t: Timing) {
        for b in t.blocks {
            self.slots.put(b);
        }
    }

    /// The op of a dispatch with `pipeline` bound (0: none) and no debug label: the pipeline's
    /// debug name, else its stable `entry@HASH` label.
    pub fn pipeline_op(&mut self, pipeline: u64) -> u32 {
        if let Some(&op) = self.pipeline_ops.get(&pipeline) {
            return op;
        }
        let label = self
            .pipeline_labels
            .get(&pipeline)
            .map_or("dispatch", String::as_str)
            .to_owned();
        let op = self.dispatch_op(&label);
        self.pipeline_ops.insert(pipeline, op);
        op
    }

    /// The op of `cmd`'s innermost debug label, if it has one open.
    pub fn label_op(&mut self, cmd: u64) -> Option<u32> {
        let label = self.cmds.get(&cmd)?.labels.last()?.clone();
        Some(self.dispatch_op(&label))
    }

    /// The slot of `cmd`'s command-buffer-level stamp (its first), if it has one.
    pub fn command_buffer_stamp(&self, cmd: u64) -> Option<u32> {
        self.cmds.get(&cmd)?.stamps.first().map(|s| s.slot)
    }
}
