//! The bookkeeping of one `VkDevice`, in safe Rust: what each command buffer recorded, the wait
//! group being built, op labels, queues, fences and the GPU timestamp slots waiting to be read.
//!
//! Handles arrive from [`crate::ffi`] as opaque `u64` keys; nothing here calls Vulkan.

use std::collections::HashMap;

use profiler::capture::{RawGpuSpan, RawGroup, RawOp, RawRecord};
use profiler::trace::{Counters, HostSpan};

use crate::output::Output;

/// Queue kinds as the trace numbers them (`GpuSpan::queue`).
pub const QUEUE_COMPUTE: u8 = 0;
pub const QUEUE_TRANSFER: u8 = 1;

/// The GPU timestamp level (`DECODESCOPE_TIMESTAMPS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    Off,
    Submit,
    CommandBuffer,
    Dispatch,
}

impl Level {
    pub fn parse(s: &str) -> Option<Level> {
        match s {
            "" | "off" => Some(Level::Off),
            "submit" => Some(Level::Submit),
            "command-buffer" => Some(Level::CommandBuffer),
            "dispatch" => Some(Level::Dispatch),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Level::Off => "off",
            Level::Submit => "submit",
            Level::CommandBuffer => "command-buffer",
            Level::Dispatch => "dispatch",
        }
    }
}

/// Mixes `v` into the hash `h` (splitmix64 finaliser over h ^ v): deterministic across runs.
pub fn mix(h: u64, v: u64) -> u64 {
    let mut z = (h ^ v).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Tags of the commands that make up a command buffer's work signature.
#[derive(Clone, Copy, Debug)]
pub enum Cmd {
    BindPipeline(u32),
    Dispatch,
    Transfer,
    Barrier(u64),
    BindSets,
    PushConstants,
    Timestamp,
    Execute(u64),
}

impl Cmd {
    fn code(self) -> u64 {
        match self {
            Cmd::BindPipeline(p) => 1 << 32 | p as u64,
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

/// A GPU timestamp pair the layer wrote: query slot `slot` (queries `2 slot` and `2 slot + 1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    pub slot: u32,
    pub op: u32,
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
    pipeline: Option<u32>,
    record_start_ns: Option<u64>,
    /// Timestamp pairs recorded into this command buffer (command-buffer and dispatch levels).
    pub stamps: Vec<Stamp>,
}

/// A timestamp pair of a submitted batch, waiting for its queue to finish.
#[derive(Clone, Copy, Debug)]
pub struct Pending {
    pub group: u64,
    pub submit: u32,
    pub queue_kind: u8,
    pub queue: u64,
    pub seq: u64,
    pub stamp: Stamp,
    /// The command buffer that owns the slot (it is freed when the buffer is re-begun or
    /// freed); `None` for the layer's own submit-level slots, freed once read.
    pub owner: Option<u64>,
}

#[derive(Clone, Copy, Debug, Default)]
struct QueueInfo {
    family: u32,
    kind: u8,
    /// Submits so far, and how many of them are known complete.
    submitted: u64,
    completed: u64,
}

/// The wait group being built.
#[derive(Debug, Default)]
struct Group {
    start_ns: u64,
    counters: Counters,
    signature: u64,
    work: u64,
    host_spans: Vec<HostSpan>,
    gpu_spans: Vec<RawGpuSpan>,
    dropped: u64,
}

/// Everything the layer knows about one device.
#[derive(Debug)]
pub struct DeviceState {
    pub index: u32,
    pub level: Level,
    out: Output,
    group: Group,
    next_group: u64,
    cmds: HashMap<u64, CmdState>,
    pool_family: HashMap<u64, u32>,
    pipelines: HashMap<u64, u32>,
    names: HashMap<u64, String>,
    ops: HashMap<(String, &'static str), u32>,
    queues: HashMap<u64, QueueInfo>,
    fences: HashMap<u64, (u64, u64)>,
    mapped: HashMap<u64, (u64, u64)>,
    recording: u32,
    pub pending: Vec<Pending>,
    /// Families whose queues can write timestamps.
    pub timestamp_families: Vec<bool>,
    /// Families that are transfer-only (their submits count as `submits_transfer`).
    pub transfer_families: Vec<bool>,
}

impl DeviceState {
    pub fn new(index: u32, level: Level, out: Output, now_ns: u64) -> DeviceState {
        DeviceState {
            index,
            level,
            out,
            group: Group {
                start_ns: now_ns,
                ..Group::default()
            },
            next_group: 0,
            cmds: HashMap::new(),
            pool_family: HashMap::new(),
            pipelines: HashMap::new(),
            names: HashMap::new(),
            ops: HashMap::new(),
            queues: HashMap::new(),
            fences: HashMap::new(),
            mapped: HashMap::new(),
            recording: 0,
            pending: Vec::new(),
            timestamp_families: Vec::new(),
            transfer_families: Vec::new(),
        }
    }

    pub fn output(&self) -> &Output {
        &self.out
    }

    /// The id of `label` as an op of `kind`, announcing a new one to the raw stream.
    pub fn op(&mut self, label: &str, kind: &'static str) -> u32 {
        if let Some(&id) = self.ops.get(&(label.to_owned(), kind)) {
            return id;
        }
        let id = self.ops.len() as u32;
        self.ops.insert((label.to_owned(), kind), id);
        self.out.write(&RawRecord::Op(RawOp {
            device: self.index,
            id,
            label: label.to_owned(),
            kind: kind.to_owned(),
        }));
        id
    }

    // ---- queues, pools, command buffers -------------------------------------------------

    pub fn add_queue(&mut self, queue: u64, family: u32) {
        let kind = if self
            .transfer_families
            .get(family as usize)
            .copied()
            .unwrap_or(false)
        {
            QUEUE_TRANSFER
        } else {
            QUEUE_COMPUTE
        };
        self.queues.entry(queue).or_insert(QueueInfo {
            family,
            kind,
            ..QueueInfo::default()
        });
    }

    pub fn queue_family(&self, queue: u64) -> Option<u32> {
        self.queues.get(&queue).map(|q| q.family)
    }

    pub fn add_pool(&mut self, pool: u64, family: u32) {
        self.pool_family.insert(pool, family);
    }

    /// Forgets a destroyed pool and its command buffers; returns the slots they held.
    pub fn destroy_pool(&mut self, pool: u64) -> Vec<u32> {
        self.pool_family.remove(&pool);
        let gone: Vec<u64> = self
            .cmds
            .iter()
            .filter(|(_, c)| c.pool == pool)
            .map(|(&k, _)| k)
            .collect();
        gone.into_iter().flat_map(|k| self.free_cmd(k)).collect()
    }

    /// Command buffers of `pool` (for a pool reset).
    pub fn cmds_of_pool(&self, pool: u64) -> Vec<u64> {
        self.cmds
            .iter()
            .filter(|(_, c)| c.pool == pool)
            .map(|(&k, _)| k)
            .collect()
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

    /// Forgets a freed command buffer; returns the timestamp slots it held.
    pub fn free_cmd(&mut self, cmd: u64) -> Vec<u32> {
        self.pending.retain(|p| p.owner != Some(cmd));
        self.cmds
            .remove(&cmd)
            .map(|c| c.stamps.iter().map(|s| s.slot).collect())
            .unwrap_or_default()
    }

    /// True when `cmd` is a primary command buffer whose queue family can write timestamps.
    pub fn can_time(&self, cmd: u64) -> bool {
        self.cmds.get(&cmd).is_some_and(|c| {
            !c.secondary
                && self
                    .pool_family
                    .get(&c.pool)
                    .and_then(|&f| self.timestamp_families.get(f as usize))
                    .copied()
                    .unwrap_or(false)
        })
    }

    /// `vkBeginCommandBuffer` (and an implicit reset): counts it and forgets the old recording;
    /// returns the timestamp slots the old recording held.
    pub fn begin_cmd(&mut self, cmd: u64, now_ns: u64) -> Vec<u32> {
        self.group.counters.command_buffers_begun += 1;
        self.pending.retain(|p| p.owner != Some(cmd));
        let c = self.cmds.entry(cmd).or_default();
        let slots = c.stamps.iter().map(|s| s.slot).collect();
        let (pool, secondary) = (c.pool, c.secondary);
        *c = CmdState {
            pool,
            secondary,
            record_start_ns: Some(now_ns),
            ..CmdState::default()
        };
        self.recording += 1;
        slots
    }

    /// `vkResetCommandBuffer`: the recording is gone; returns its slots.
    pub fn reset_cmd(&mut self, cmd: u64) -> Vec<u32> {
        self.pending.retain(|p| p.owner != Some(cmd));
        match self.cmds.get_mut(&cmd) {
            Some(c) => {
                if c.record_start_ns.take().is_some() {
                    self.recording = self.recording.saturating_sub(1);
                }
                let slots = c.stamps.drain(..).map(|s| s.slot).collect();
                c.counters = Counters::default();
                c.signature = 0;
                c.work = 0;
                slots
            }
            None => Vec::new(),
        }
    }

    pub fn end_cmd(&mut self, cmd: u64, now_ns: u64) {
        let start = self
            .cmds
            .get_mut(&cmd)
            .and_then(|c| c.record_start_ns.take());
        if let Some(s) = start {
            self.recording = self.recording.saturating_sub(1);
            self.group
                .host_spans
                .push(HostSpan("record".into(), s, now_ns.saturating_sub(s), 1));
        }
    }

    /// Counts a command recorded into `cmd`.
    pub fn record(&mut self, cmd: u64, what: Cmd) {
        let c = self.cmds.entry(cmd).or_default();
        c.signature = mix(c.signature, what.code());
        c.work = c.work.wrapping_add(mix(0, what.code()));
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
    }

    /// `vkCmdExecuteCommands`: the secondaries' recorded commands become the primary's.
    pub fn execute_secondaries(&mut self, cmd: u64, secondaries: &[u64]) {
        for s in secondaries {
            let (counters, sig, work) = match self.cmds.get(s) {
                Some(c) => (c.counters, c.signature, c.work),
                None => continue,
            };
            self.record(cmd, Cmd::Execute(sig));
            if let Some(c) = self.cmds.get_mut(&cmd) {
                c.counters.add(&counters);
                c.work = c.work.wrapping_add(work);
            }
        }
    }

    pub fn bind_pipeline(&mut self, cmd: u64, pipeline: u64) {
        let n = self.pipelines.len() as u32;
        let id = *self.pipelines.entry(pipeline).or_insert(n);
        if let Some(c) = self.cmds.get_mut(&cmd) {
            c.pipeline = Some(id);
        }
        self.record(cmd, Cmd::BindPipeline(id));
    }

    pub fn created_pipeline(&mut self, pipeline: u64) {
        let n = self.pipelines.len() as u32;
        self.pipelines.entry(pipeline).or_insert(n);
    }

    pub fn set_name(&mut self, object: u64, name: String) {
        self.names.insert(object, name);
    }

    pub fn push_label(&mut self, cmd: u64, label: String) {
        if let Some(c) = self.cmds.get_mut(&cmd) {
            c.labels.push(label);
        }
    }

    pub fn pop_label(&mut self, cmd: u64) {
        if let Some(c) = self.cmds.get_mut(&cmd) {
            c.labels.pop();
        }
    }

    /// The label of a dispatch recorded now into `cmd`: the innermost debug-utils label, else
    /// the bound pipeline's debug name, else `pipeline N` (N in creation order).
    pub fn dispatch_label(&self, cmd: u64) -> String {
        let Some(c) = self.cmds.get(&cmd) else {
            return "dispatch".into();
        };
        if let Some(l) = c.labels.last() {
            return l.clone();
        }
        match c.pipeline {
            Some(id) => {
                let named = self
                    .pipelines
                    .iter()
                    .find(|(_, v)| **v == id)
                    .and_then(|(h, _)| self.names.get(h));
                match named {
                    Some(n) => n.clone(),
                    None => format!("pipeline {id}"),
                }
            }
            None => "dispatch".into(),
        }
    }

    /// The slot of `cmd`'s command-buffer-level stamp (its first), if it has one.
    pub fn command_buffer_stamp(&self, cmd: u64) -> Option<u32> {
        self.cmds.get(&cmd)?.stamps.first().map(|s| s.slot)
    }

    pub fn add_stamp(&mut self, cmd: u64, stamp: Stamp) {
        if let Some(c) = self.cmds.get_mut(&cmd) {
            c.stamps.push(stamp);
        }
    }

    // ---- host calls -----------------------------------------------------------------------

    pub fn descriptor_sets_allocated(&mut self, n: u64) {
        self.group.counters.descriptor_sets_allocated += n;
    }

    pub fn descriptor_writes(&mut self, n: u64) {
        self.group.counters.descriptor_writes += n;
    }

    pub fn bytes_to_device(&mut self, n: u64) {
        self.group.counters.bytes_to_device += n;
    }

    pub fn bytes_from_device(&mut self, n: u64) {
        self.group.counters.bytes_from_device += n;
    }

    pub fn fence_wait(&mut self) {
        self.group.counters.fence_waits += 1;
    }

    /// A host span of a call that took `start_ns..end_ns`: `descriptors` calls nest inside a
    /// recording when one is open.
    pub fn host_span(&mut self, name: &str, start_ns: u64, end_ns: u64) {
        let depth = if name == "descriptors" && self.recording > 0 {
            2
        } else {
            1
        };
        self.group.host_spans.push(HostSpan(
            name.into(),
            start_ns,
            end_ns.saturating_sub(start_ns),
            depth,
        ));
    }

    pub fn map(&mut self, memory: u64, offset: u64, size: u64) {
        self.mapped.insert(memory, (offset, size));
    }

    pub fn unmap(&mut self, memory: u64) {
        self.mapped.remove(&memory);
    }

    /// Bytes of a flushed or invalidated range (`VK_WHOLE_SIZE` runs to the end of the map).
    pub fn range_bytes(&self, memory: u64, offset: u64, size: u64) -> u64 {
        if size != u64::MAX {
            return size;
        }
        match self.mapped.get(&memory) {
            Some(&(mo, ms)) if ms != u64::MAX => (mo + ms).saturating_sub(offset),
            _ => 0,
        }
    }

    // ---- submits and waits ----------------------------------------------------------------

    /// Counts a `vkQueueSubmit` of `batches` (command buffer keys per batch) to `queue`; returns
    /// the submit's index in the group, the queue kind and the submit's sequence number on its
    /// queue. Slots of earlier, unread submissions of these command buffers are returned in
    /// `stale` for the caller to read (without waiting) first.
    pub fn submit(&mut self, queue: u64, batches: &[Vec<u64>], fence: Option<u64>) -> SubmitInfo {
        let q = self.queues.entry(queue).or_default();
        q.submitted += 1;
        let (kind, seq) = (q.kind, q.submitted);
        let index = self.group.counters.submits() as u32;
        match kind {
            QUEUE_TRANSFER => self.group.counters.submits_transfer += 1,
            _ => self.group.counters.submits_compute += 1,
        }
        self.group.signature = mix(self.group.signature, 0x5b_0000 | kind as u64);
        let group = self.next_group;
        let mut stamps = Vec::new();
        for batch in batches {
            self.group.signature = mix(self.group.signature, 0xba7c4);
            for cmd in batch {
                if let Some(c) = self.cmds.get(cmd) {
                    self.group.counters.add(&c.counters);
                    self.group.signature = mix(self.group.signature, c.signature);
                    self.group.work = self.group.work.wrapping_add(c.work);
                    for s in &c.stamps {
                        stamps.push(Pending {
                            group,
                            submit: index,
                            queue_kind: kind,
                            queue,
                            seq,
                            stamp: *s,
                            owner: Some(*cmd),
                        });
                    }
                }
            }
        }
        if let Some(f) = fence {
            self.fences.insert(f, (queue, seq));
        }
        SubmitInfo {
            group,
            index,
            kind,
            seq,
            stamps,
        }
    }

    /// Slots of `stamps`' command buffers that an earlier submission still holds unread.
    pub fn unread_of(&self, stamps: &[Pending]) -> Vec<Pending> {
        self.pending
            .iter()
            .filter(|p| {
                stamps
                    .iter()
                    .any(|s| s.owner.is_some() && s.owner == p.owner)
            })
            .copied()
            .collect()
    }

    pub fn forget_pending(&mut self, read: &[Pending]) {
        self.pending.retain(|p| {
            !read
                .iter()
                .any(|r| r.stamp.slot == p.stamp.slot && r.seq == p.seq)
        });
    }

    pub fn add_pending(&mut self, stamps: Vec<Pending>) {
        self.pending.extend(stamps);
    }

    /// Marks work complete after a wait returned: `fences` waited on (all of them), or a whole
    /// queue, or the whole device.
    pub fn completed(&mut self, what: Completed<'_>) {
        match what {
            Completed::Fences(fs) => {
                for f in fs {
                    if let Some(&(q, seq)) = self.fences.get(f)
                        && let Some(qi) = self.queues.get_mut(&q)
                    {
                        qi.completed = qi.completed.max(seq);
                    }
                }
            }
            Completed::Queue(q) => {
                if let Some(qi) = self.queues.get_mut(&q) {
                    qi.completed = qi.submitted;
                }
            }
            Completed::Device => {
                for qi in self.queues.values_mut() {
                    qi.completed = qi.submitted;
                }
            }
            Completed::Unknown => {}
        }
    }

    /// Pending stamps whose submission is known complete (removed from the pending list).
    pub fn take_complete(&mut self) -> Vec<Pending> {
        let queues = &self.queues;
        let (done, rest): (Vec<Pending>, Vec<Pending>) = self
            .pending
            .drain(..)
            .partition(|p| queues.get(&p.queue).is_some_and(|q| q.completed >= p.seq));
        self.pending = rest;
        done
    }

    /// Records a GPU span read back for a stamp (GPU ns).
    pub fn gpu_span(&mut self, p: &Pending, start_gpu_ns: u64, end_gpu_ns: u64) {
        self.group.gpu_spans.push(RawGpuSpan(
            p.group,
            p.submit,
            p.stamp.op,
            p.queue_kind,
            start_gpu_ns,
            end_gpu_ns,
        ));
    }

    pub fn dropped(&mut self, n: u64) {
        self.group.dropped += n;
    }

    /// Ends the current wait group with a wait of `kind` that returned at `now_ns`, and writes
    /// it to the raw stream. A `destroy` group with nothing in it is not written.
    pub fn close_group(&mut self, kind: &str, now_ns: u64) {
        let g = std::mem::replace(
            &mut self.group,
            Group {
                start_ns: now_ns,
                ..Group::default()
            },
        );
        if kind == "destroy" && g.counters == Counters::default() && g.gpu_spans.is_empty() {
            return;
        }
        let wait = kind.bytes().fold(0u64, |h, b| mix(h, b as u64));
        let signature = mix(g.signature, wait);
        let work_signature = mix(g.work, wait);
        let index = self.next_group;
        self.next_group += 1;
        self.out.write(&RawRecord::Group(RawGroup {
            device: self.index,
            index,
            wait: kind.to_owned(),
            start_ns: g.start_ns,
            end_ns: now_ns,
            signature,
            work_signature,
            counters: g.counters,
            host_spans: g.host_spans,
            gpu_spans: g.gpu_spans,
            dropped_timestamps: g.dropped,
        }));
    }
}

/// What [`DeviceState::submit`] returns.
#[derive(Debug)]
pub struct SubmitInfo {
    pub group: u64,
    pub index: u32,
    pub kind: u8,
    pub seq: u64,
    /// The stamps recorded in the submitted command buffers, for [`DeviceState::add_pending`].
    pub stamps: Vec<Pending>,
}

/// What a returned wait proves finished.
#[derive(Debug)]
pub enum Completed<'a> {
    Fences(&'a [u64]),
    Queue(u64),
    Device,
    Unknown,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> DeviceState {
        DeviceState::new(0, Level::Off, Output::disabled(), 0)
    }

    #[test]
    fn commands_count_at_every_submit() {
        let mut s = state();
        s.allocate_cmd(7, 1, false);
        s.begin_cmd(7, 0);
        s.bind_pipeline(7, 100);
        s.record(7, Cmd::Dispatch);
        s.record(7, Cmd::Barrier(2));
        s.end_cmd(7, 5);
        s.add_queue(9, 0);
        s.submit(9, &[vec![7]], Some(3));
        s.submit(9, &[vec![7]], Some(3));
        let c = s.group.counters;
        assert_eq!(c.command_buffers_begun, 1);
        assert_eq!(c.submits_compute, 2);
        assert_eq!(c.dispatches, 2);
        assert_eq!(c.barrier_calls, 2);
        assert_eq!(c.memory_barriers, 4);
        assert_eq!(c.pipeline_binds, 2);
    }

    #[test]
    fn signatures_ignore_host_side_counts() {
        let work = |s: &mut DeviceState, begin: bool| {
            if begin {
                s.begin_cmd(7, 0);
                s.bind_pipeline(7, 100);
                s.record(7, Cmd::Dispatch);
                s.end_cmd(7, 1);
            }
            s.submit(9, &[vec![7]], None);
            let sig = s.group.signature;
            s.close_group("fence", 2);
            sig
        };
        let mut s = state();
        s.allocate_cmd(7, 1, false);
        s.add_queue(9, 0);
        let first = work(&mut s, true);
        let replay = work(&mut s, false);
        assert_eq!(first, replay);
    }

    #[test]
    fn labels_then_names_then_pipeline_numbers() {
        let mut s = state();
        s.allocate_cmd(7, 1, false);
        s.begin_cmd(7, 0);
        s.bind_pipeline(7, 100);
        assert_eq!(s.dispatch_label(7), "pipeline 0");
        s.set_name(100, "matvec".into());
        assert_eq!(s.dispatch_label(7), "matvec");
        s.push_label(7, "L0.q_proj".into());
        assert_eq!(s.dispatch_label(7), "L0.q_proj");
        s.pop_label(7);
        assert_eq!(s.dispatch_label(7), "matvec");
    }

    #[test]
    fn whole_size_ranges_run_to_the_end_of_the_map() {
        let mut s = state();
        s.map(5, 256, 1024);
        assert_eq!(s.range_bytes(5, 512, u64::MAX), 768);
        assert_eq!(s.range_bytes(5, 512, 64), 64);
    }
}
