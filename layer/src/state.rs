//! The bookkeeping of one `VkDevice`, in safe Rust: what each command buffer recorded, the wait
//! group being built, op labels, queues and what is in flight on them, and the GPU timestamp
//! slots waiting to be read.
//!
//! Handles arrive from [`crate::ffi`] as opaque `u64` keys; nothing here calls Vulkan. The ffi
//! side asks this module what to record and what to read ([`ReadJob`]) and hands back what the
//! driver answered ([`DeviceState::read_done`]).
//!
//! Everything here runs on the program's threads inside its Vulkan calls, so the hot paths
//! (a recorded command, a submit) allocate nothing per call beyond amortized vector growth, hash
//! handles with [`KeyHasher`] rather than SipHash, and leave serialization to the writer thread
//! ([`crate::output`]).

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

use profiler::capture::{RawGpuSpan, RawQueueWork, RawUntimed};
use profiler::trace::Counters;

/// Queue kinds as the trace numbers them (`GpuSpan::queue`).
pub const QUEUE_COMPUTE: u8 = 0;
pub const QUEUE_TRANSFER: u8 = 1;

/// Pairs of queries (start, end) in one of the layer's query pools.
pub const POOL_PAIRS: u32 = 8_192;
/// The most query pools the layer creates on one device before it drops timestamps (counted).
pub const MAX_POOLS: u32 = 16;
/// At the dispatch level a command buffer takes timestamp pairs in blocks of this many, with
/// one query reset per block rather than one per dispatch.
pub const BLOCK_PAIRS: u32 = 32;
/// Submissions kept in flight per queue before the oldest are read without proof of completion.
const INFLIGHT_LIMIT: usize = 4_096;

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

/// A hash of bytes built from [`mix`] (stable across runs and builds, unlike `DefaultHasher`).
pub fn hash_bytes(bytes: &[u8]) -> u64 {
    let mut h = 0u64;
    for c in bytes.chunks(8) {
        let mut w = [0u8; 8];
        w[..c.len()].copy_from_slice(c);
        h = mix(h, u64::from_le_bytes(w));
    }
    mix(h, bytes.len() as u64)
}

/// The hasher of the layer's handle-keyed maps: one [`mix`] per integer written.
#[derive(Clone, Copy, Debug, Default)]
pub struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        self.0 = mix(self.0, hash_bytes(bytes));
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = mix(self.0, v);
    }
    fn write_u32(&mut self, v: u32) {
        self.0 = mix(self.0, v as u64);
    }
    fn write_usize(&mut self, v: usize) {
        self.0 = mix(self.0, v as u64);
    }
}

/// A map keyed by handles (or small tuples of them).
pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<KeyHasher>>;

/// Host span names the layer writes (`HostSpan`'s name), kept as a tag until the writer thread
/// turns them into strings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Host {
    Record,
    Descriptors,
    Submit,
    Wait,
}

impl Host {
    pub fn name(self) -> &'static str {
        match self {
            Host::Record => "record",
            Host::Descriptors => "descriptors",
            Host::Submit => "submit",
            Host::Wait => "wait",
        }
    }
}

/// A host span: name, start (host ns, absolute), duration, depth.
pub type HostTag = (Host, u64, u64, u32);

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

/// A timestamp pair the layer wrote into a command buffer or a submit: pair `slot` (queries
/// `2 slot` and `2 slot + 1` of pool `slot / POOL_PAIRS`), naming op `op`, covering `covers`
/// dispatches (1 for a dispatch; a command buffer's or a submit's dispatches for a region).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    pub slot: u32,
    pub op: u32,
    pub covers: u64,
}

/// One submission of a command buffer (or of a whole submit) whose stamps are not read yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Submission {
    pub queue: u64,
    pub seq: u64,
    pub group: u64,
    pub submit: u32,
    pub kind: u8,
}

/// Stamps to read for one submission: the ffi side reads them (contiguous slots in one call)
/// and returns the results to [`DeviceState::read_done`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadJob {
    pub sub: Submission,
    pub stamps: Vec<Stamp>,
    /// The layer's own submit-level slot: freed once read (command buffers' slots are freed
    /// when the command buffer is recorded again, reset or freed).
    pub own: bool,
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
    /// Timestamp pairs recorded into this command buffer.
    pub stamps: Vec<Stamp>,
    /// Dispatch level: the blocks of pairs this command buffer holds (first pair of each) and
    /// how many pairs of the last one it used.
    blocks: Vec<u32>,
    block_used: u32,
    /// Dispatches recorded with a stamp of their own.
    timed_dispatches: u64,
    /// The last submission, until its stamps are read.
    pub unread: Option<Submission>,
    /// Begun since its pool's last reset (it is on the pool's list of begun command buffers).
    begun: bool,
}

/// A submission on a queue that no wait has proven complete yet.
#[derive(Clone, Debug)]
struct Inflight {
    sub: Submission,
    cbs: Vec<u64>,
    own: Option<Stamp>,
}

#[derive(Clone, Debug, Default)]
struct QueueInfo {
    id: u32,
    family: u32,
    kind: u8,
    /// Submits so far, and the newest one known complete.
    submitted: u64,
    completed: u64,
    inflight: VecDeque<Inflight>,
}

/// The wait group being built.
#[derive(Debug, Default)]
struct Group {
    start_ns: u64,
    counters: Counters,
    signature: u64,
    work: u64,
    host: Vec<HostTag>,
    gpu: Vec<RawGpuSpan>,
    untimed: Vec<RawUntimed>,
    queues: Vec<RawQueueWork>,
    dropped: u64,
}

/// A finished wait group, handed to the writer thread (which turns it into a `RawGroup`).
#[derive(Debug)]
pub struct Closed {
    pub device: u32,
    pub index: u64,
    pub wait: &'static str,
    pub start_ns: u64,
    pub end_ns: u64,
    pub signature: u64,
    pub work_signature: u64,
    pub counters: Counters,
    pub host: Vec<HostTag>,
    pub gpu: Vec<RawGpuSpan>,
    pub untimed: Vec<RawUntimed>,
    pub queues: Vec<RawQueueWork>,
    pub dropped: u64,
}

/// What the device state asks the ffi side to announce in the raw stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Announce {
    Op {
        id: u32,
        label: String,
        kind: &'static str,
    },
    Queue {
        id: u32,
        family: u32,
        index: u32,
        kind: u8,
    },
}

/// A timestamp pair for a dispatch: `reset` is the first pair of a new block, whose queries the
/// ffi side resets in the command buffer first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DispatchSlot {
    pub slot: u32,
    pub reset: Option<u32>,
}

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

/// Everything the layer knows about one device.
#[derive(Debug)]
pub struct DeviceState {
    pub index: u32,
    pub level: Level,
    pub slots: Slots,
    /// True once the device's query pools exist (timestamps on and supported).
    pub timing: bool,
    group: Group,
    next_group: u64,
    cmds: FastMap<u64, CmdState>,
    pool_family: FastMap<u64, u32>,
    /// Per command pool, the command buffers begun since its last reset: a pool reset touches
    /// these alone (llama.cpp resets a pool of hundreds of command buffers a dozen times a
    /// token, having used a few).
    pool_begun: FastMap<u64, Vec<u64>>,
    pipeline_labels: FastMap<u64, String>,
    /// Shader modules' code hashes.
    modules: FastMap<u64, u64>,
    dispatch_ops: HashMap<String, u32>,
    region_ops: HashMap<&'static str, u32>,
    next_op: u32,
    queues: FastMap<u64, QueueInfo>,
    fences: FastMap<u64, (u64, u64)>,
    /// Timeline semaphores' pending signals: (value, queue, submit sequence), oldest first.
    timelines: FastMap<u64, Vec<(u64, u64, u64)>>,
    mapped: FastMap<u64, (u64, u64)>,
    recording: u32,
    /// Everything counted so far, closed groups and the open one (the live file's copy).
    pub total: Counters,
    pub announce: Vec<Announce>,
    /// Families whose queues can write timestamps.
    pub timestamp_families: Vec<bool>,
    /// Families that are transfer-only (their submits count as `submits_transfer`).
    pub transfer_families: Vec<bool>,
}

impl DeviceState {
    pub fn new(index: u32, level: Level, now_ns: u64) -> DeviceState {
        DeviceState {
            index,
            level,
            slots: Slots::new(level),
            timing: false,
            group: Group {
                start_ns: now_ns,
                ..Group::default()
            },
            next_group: 0,
            cmds: FastMap::default(),
            pool_family: FastMap::default(),
            pool_begun: FastMap::default(),
            pipeline_labels: FastMap::default(),
            modules: FastMap::default(),
            dispatch_ops: HashMap::new(),
            region_ops: HashMap::new(),
            next_op: 0,
            queues: FastMap::default(),
            fences: FastMap::default(),
            timelines: FastMap::default(),
            mapped: FastMap::default(),
            recording: 0,
            total: Counters::default(),
            announce: Vec::new(),
            timestamp_families: Vec::new(),
            transfer_families: Vec::new(),
        }
    }

    /// The id of a dispatch labelled `label`, announcing a new one.
    pub fn dispatch_op(&mut self, label: &str) -> u32 {
        if let Some(&id) = self.dispatch_ops.get(label) {
            return id;
        }
        let id = self.next_op;
        self.next_op += 1;
        self.dispatch_ops.insert(label.to_owned(), id);
        self.announce.push(Announce::Op {
            id,
            label: label.to_owned(),
            kind: "dispatch",
        });
        id
    }

    /// The id of a region (`submit`, `command buffer`), announcing a new one.
    pub fn region_op(&mut self, label: &'static str) -> u32 {
        if let Some(&id) = self.region_ops.get(label) {
            return id;
        }
        let id = self.next_op;
        self.next_op += 1;
        self.region_ops.insert(label, id);
        self.announce.push(Announce::Op {
            id,
            label: label.to_owned(),
            kind: "region",
        });
        id
    }

    // ---- queues, pools, command buffers -------------------------------------------------

    pub fn add_queue(&mut self, queue: u64, family: u32, index: u32) {
        if self.queues.contains_key(&queue) {
            return;
        }
        let transfer = self
            .transfer_families
            .get(family as usize)
            .copied()
            .unwrap_or(false);
        let kind = if transfer {
            QUEUE_TRANSFER
        } else {
            QUEUE_COMPUTE
        };
        let id = self.queues.len() as u32;
        self.queues.insert(
            queue,
            QueueInfo {
                id,
                family,
                kind,
                ..QueueInfo::default()
            },
        );
        self.announce.push(Announce::Queue {
            id,
            family,
            index,
            kind,
        });
    }

    pub fn queue_family(&self, queue: u64) -> Option<u32> {
        self.queues.get(&queue).map(|q| q.family)
    }

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
            self.cmds.get_mut(k).is_some_and(|c| {
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

    /// True when `cmd` is a primary command buffer whose queue family can write timestamps.
    pub fn can_time(&self, cmd: u64) -> bool {
        self.timing
            && self.cmds.get(&cmd).is_some_and(|c| {
                !c.secondary
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
    /// before the command buffer's slots go.
    pub fn unread_of(&mut self, cmd: u64) -> Option<ReadJob> {
        let c = self.cmds.get_mut(&cmd)?;
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
        let c = self.cmds.get_mut(&cmd)?;
        if c.record_start_ns.take().is_some() {
            self.recording = self.recording.saturating_sub(1);
        }
        let blocks = std::mem::take(&mut c.blocks);
        let stamps = std::mem::take(&mut c.stamps);
        let (pool, secondary, begun) = (c.pool, c.secondary, c.begun);
        *c = CmdState {
            pool,
            secondary,
            begun,
            ..CmdState::default()
        };
        if self.level == Level::Dispatch {
            for b in blocks {
                self.slots.put(b);
            }
        } else {
            for s in stamps {
                self.slots.put(s.slot);
            }
        }
        self.cmds.get_mut(&cmd)
    }

    /// `vkBeginCommandBuffer` (an implicit reset): counts it and starts a new recording.
    pub fn begin_cmd(&mut self, cmd: u64, now_ns: u64) {
        self.group.counters.command_buffers_begun += 1;
        self.total.command_buffers_begun += 1;
        self.cmds.entry(cmd).or_default();
        if let Some(c) = self.clear_recording(cmd) {
            c.record_start_ns = Some(now_ns);
            if !c.begun {
                c.begun = true;
                let pool = c.pool;
                self.pool_begun.entry(pool).or_default().push(cmd);
            }
        }
        self.recording += 1;
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
        let Some(c) = self.cmds.get_mut(&cmd) else {
            return;
        };
        // A command-buffer stamp covers every dispatch recorded into it.
        let dispatches = c.counters.dispatches;
        if self.level == Level::CommandBuffer
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
        let c = self.cmds.entry(cmd).or_default();
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
        if let Some(c) = self.cmds.get_mut(&cmd) {
            c.pipeline = Some(pipeline);
            c.op_cache = None;
        }
        self.record(cmd, Cmd::BindPipeline(pipeline));
    }

    /// What `cmd` recorded without the lock ([`crate::recording`]) since its last drain.
    pub fn drained(&mut self, cmd: u64, d: crate::recording::Drained) {
        let c = self.cmds.entry(cmd).or_default();
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
    }

    /// `vkSetDebugUtilsObjectNameEXT` on a pipeline.
    pub fn name_pipeline(&mut self, pipeline: u64, name: String) {
        self.pipeline_labels.insert(pipeline, name);
        for c in self.cmds.values_mut() {
            if c.pipeline == Some(pipeline) {
                c.op_cache = None;
            }
        }
    }

    pub fn push_label(&mut self, cmd: u64, label: String) {
        if let Some(c) = self.cmds.get_mut(&cmd) {
            c.labels.push(label);
            c.op_cache = None;
        }
    }

    pub fn pop_label(&mut self, cmd: u64) {
        if let Some(c) = self.cmds.get_mut(&cmd) {
            c.labels.pop();
            c.op_cache = None;
        }
    }

    /// The op of a dispatch recorded now into `cmd`: labelled by the innermost debug-utils
    /// label, else the bound pipeline's debug name, else its stable `entry@HASH` label.
    pub fn dispatch_op_of(&mut self, cmd: u64) -> u32 {
        if let Some(op) = self.cmds.get(&cmd).and_then(|c| c.op_cache) {
            return op;
        }
        let op = {
            let c = self.cmds.get(&cmd);
            let label: &str = match c {
                Some(c) => match (c.labels.last(), c.pipeline) {
                    (Some(l), _) => l,
                    (None, Some(p)) => self
                        .pipeline_labels
                        .get(&p)
                        .map_or("dispatch", String::as_str),
                    (None, None) => "dispatch",
                },
                None => "dispatch",
            };
            // Borrow juggling: the label lives in `self`, so look it up before inserting.
            match self.dispatch_ops.get(label) {
                Some(&id) => id,
                None => {
                    let owned = label.to_owned();
                    self.dispatch_op(&owned)
                }
            }
        };
        if let Some(c) = self.cmds.get_mut(&cmd) {
            c.op_cache = Some(op);
        }
        op
    }

    /// A timestamp pair for a dispatch recorded into `cmd` at the dispatch level: from its
    /// current block, or the first of a new one. `None` when the pools are full (the caller
    /// may add a pool and retry) or `cmd` cannot be timed.
    pub fn dispatch_slot(&mut self, cmd: u64) -> Option<DispatchSlot> {
        let c = self.cmds.get_mut(&cmd)?;
        if let Some(&first) = c.blocks.last()
            && c.block_used < BLOCK_PAIRS
        {
            c.block_used += 1;
            return Some(DispatchSlot {
                slot: first + c.block_used - 1,
                reset: None,
            });
        }
        let first = self.slots.take()?;
        let c = self.cmds.get_mut(&cmd)?;
        c.blocks.push(first);
        c.block_used = 1;
        Some(DispatchSlot {
            slot: first,
            reset: Some(first),
        })
    }

    /// A stamp recorded into `cmd` (a dispatch's, or the command buffer's region).
    pub fn add_stamp(&mut self, cmd: u64, stamp: Stamp, dispatch: bool) {
        if let Some(c) = self.cmds.get_mut(&cmd) {
            c.stamps.push(stamp);
            if dispatch {
                c.timed_dispatches += 1;
            }
        }
    }

    /// The slot of `cmd`'s command-buffer-level stamp (its first), if it has one.
    pub fn command_buffer_stamp(&self, cmd: u64) -> Option<u32> {
        self.cmds.get(&cmd)?.stamps.first().map(|s| s.slot)
    }

    // ---- host calls -----------------------------------------------------------------------

    pub fn descriptor_sets_allocated(&mut self, n: u64) {
        self.group.counters.descriptor_sets_allocated += n;
        self.total.descriptor_sets_allocated += n;
    }

    pub fn descriptor_writes(&mut self, n: u64) {
        self.group.counters.descriptor_writes += n;
        self.total.descriptor_writes += n;
    }

    pub fn bytes_to_device(&mut self, n: u64) {
        self.group.counters.bytes_to_device += n;
        self.total.bytes_to_device += n;
    }

    pub fn bytes_from_device(&mut self, n: u64) {
        self.group.counters.bytes_from_device += n;
        self.total.bytes_from_device += n;
    }

    pub fn fence_wait(&mut self) {
        self.group.counters.fence_waits += 1;
        self.total.fence_waits += 1;
    }

    /// A host span of a call that took `start_ns..end_ns`: `descriptors` calls nest inside a
    /// recording when one is open.
    pub fn host_span(&mut self, name: Host, start_ns: u64, end_ns: u64) {
        let depth = if name == Host::Descriptors && self.recording > 0 {
            2
        } else {
            1
        };
        self.group
            .host
            .push((name, start_ns, end_ns.saturating_sub(start_ns), depth));
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

    // ---- submits ---------------------------------------------------------------------------

    /// Read jobs for the command buffers of a submit that an earlier submission still holds
    /// unread (it is complete: a command buffer is submitted again only once it is).
    pub fn resubmitted(&mut self, batches: &[Vec<u64>]) -> Vec<ReadJob> {
        let mut jobs = Vec::new();
        for cmd in batches.iter().flatten() {
            if let Some(j) = self.unread_of(*cmd) {
                jobs.push(j);
            }
        }
        jobs
    }

    /// Counts a `vkQueueSubmit` of `batches` (command buffer keys per batch) to `queue`, which
    /// signals `fence` and the timeline semaphore values `signals` when done; `own` is the
    /// layer's submit-level stamp when it wraps this submit. Returns the submission.
    pub fn submit(
        &mut self,
        queue: u64,
        batches: &[Vec<u64>],
        fence: Option<u64>,
        signals: &[(u64, u64)],
        own: Option<Stamp>,
    ) -> Submission {
        if !self.queues.contains_key(&queue) {
            // A queue the layer did not see handed out (another layer's): count it anyway.
            self.add_queue(queue, 0, u32::MAX);
        }
        let level = self.level;
        let index = self.group.counters.submits() as u32;
        let group = self.next_group;
        let Some(q) = self.queues.get_mut(&queue) else {
            unreachable!("the queue was added above")
        };
        q.submitted += 1;
        let sub = Submission {
            queue,
            seq: q.submitted,
            group,
            submit: index,
            kind: q.kind,
        };
        let qid = q.id;
        match q.kind {
            QUEUE_TRANSFER => {
                self.group.counters.submits_transfer += 1;
                self.total.submits_transfer += 1;
            }
            _ => {
                self.group.counters.submits_compute += 1;
                self.total.submits_compute += 1;
            }
        }
        self.group.signature = mix(self.group.signature, 0x5b_0000 | sub.kind as u64);
        let mut cbs = Vec::new();
        let (mut dispatches, mut untimed) = (0u64, 0u64);
        for batch in batches {
            self.group.signature = mix(self.group.signature, 0xba7c4);
            for cmd in batch {
                let Some(c) = self.cmds.get_mut(cmd) else {
                    continue;
                };
                self.group.counters.add(&c.counters);
                self.total.add(&c.counters);
                self.group.signature = mix(self.group.signature, c.signature);
                self.group.work = self.group.work.wrapping_add(c.work);
                dispatches += c.counters.dispatches;
                untimed += match level {
                    Level::Off | Level::Submit => 0,
                    Level::CommandBuffer if c.stamps.is_empty() => c.counters.dispatches,
                    Level::CommandBuffer => 0,
                    Level::Dispatch => c.counters.dispatches.saturating_sub(c.timed_dispatches),
                };
                if !c.stamps.is_empty() {
                    c.unread = Some(sub);
                }
                cbs.push(*cmd);
            }
        }
        if level == Level::Submit && own.is_none() {
            untimed = dispatches;
        }
        if untimed > 0 {
            self.group.untimed.push(RawUntimed(group, untimed));
        }
        let nbuf = cbs.len() as u64;
        match self.group.queues.iter_mut().find(|w| w.0 == qid) {
            Some(w) => {
                w.1 += 1;
                w.2 += nbuf;
                w.3 += dispatches;
            }
            None => self
                .group
                .queues
                .push(RawQueueWork(qid, 1, nbuf, dispatches)),
        }
        if let Some(f) = fence {
            self.fences.insert(f, (queue, sub.seq));
        }
        for &(sem, value) in signals {
            let list = self.timelines.entry(sem).or_default();
            list.push((value, queue, sub.seq));
            if list.len() > 64 {
                // Signals nobody waits for on the host (a semaphore only the GPU waits on):
                // forget those whose queue is known complete, and keep the list bounded.
                let queues = &self.queues;
                list.retain(|&(_, q, seq)| queues.get(&q).is_none_or(|qi| qi.completed < seq));
                if list.len() > 4_096 {
                    list.drain(..list.len() - 2_048);
                }
            }
        }
        let own = own.map(|s| Stamp {
            covers: dispatches,
            ..s
        });
        let timed = own.is_some()
            || cbs
                .iter()
                .any(|c| self.cmds.get(c).is_some_and(|c| c.unread == Some(sub)));
        if timed && let Some(q) = self.queues.get_mut(&queue) {
            q.inflight.push_back(Inflight { sub, cbs, own });
        }
        sub
    }

    /// Read jobs for submissions that have been in flight so long that the list must shrink
    /// (a program whose waits the layer cannot interpret): the oldest are read for whatever is
    /// available.
    pub fn overdue(&mut self) -> Vec<ReadJob> {
        let mut jobs = Vec::new();
        let over: Vec<u64> = self
            .queues
            .iter()
            .filter(|(_, q)| q.inflight.len() > INFLIGHT_LIMIT)
            .map(|(&k, _)| k)
            .collect();
        for queue in over {
            let Some(q) = self.queues.get_mut(&queue) else {
                continue;
            };
            let excess = q.inflight.len() - INFLIGHT_LIMIT / 2;
            let old: Vec<Inflight> = q.inflight.drain(..excess).collect();
            for f in old {
                self.jobs_of(f, &mut jobs);
            }
        }
        jobs
    }

    fn jobs_of(&mut self, f: Inflight, jobs: &mut Vec<ReadJob>) {
        if let Some(own) = f.own {
            jobs.push(ReadJob {
                sub: f.sub,
                stamps: vec![own],
                own: true,
            });
        }
        for cmd in f.cbs {
            if self.cmds.get(&cmd).is_some_and(|c| c.unread == Some(f.sub))
                && let Some(j) = self.unread_of(cmd)
            {
                jobs.push(j);
            }
        }
    }

    // ---- completion -------------------------------------------------------------------------

    /// Work proven complete by a wait or a poll that returned success.
    pub fn completed(&mut self, what: Completed<'_>) -> Vec<ReadJob> {
        let mut marks: Vec<(u64, u64)> = Vec::new();
        match what {
            Completed::Fences(fs) => {
                for f in fs {
                    if let Some(&(q, seq)) = self.fences.get(f) {
                        marks.push((q, seq));
                    }
                }
            }
            Completed::Semaphores(ss) => {
                for &(sem, value) in ss {
                    if let Some(list) = self.timelines.get_mut(&sem) {
                        list.retain(|&(v, q, seq)| {
                            if v <= value {
                                marks.push((q, seq));
                                false
                            } else {
                                true
                            }
                        });
                    }
                }
            }
            Completed::Queue(q) => {
                if let Some(qi) = self.queues.get(&q) {
                    marks.push((q, qi.submitted));
                }
            }
            Completed::Device => {
                for (&q, qi) in &self.queues {
                    marks.push((q, qi.submitted));
                }
            }
        }
        let mut jobs = Vec::new();
        for (q, seq) in marks {
            let Some(qi) = self.queues.get_mut(&q) else {
                continue;
            };
            if seq <= qi.completed {
                continue;
            }
            qi.completed = seq;
            let mut done = Vec::new();
            while qi.inflight.front().is_some_and(|f| f.sub.seq <= seq) {
                if let Some(f) = qi.inflight.pop_front() {
                    done.push(f);
                }
            }
            for f in done {
                self.jobs_of(f, &mut jobs);
            }
        }
        jobs
    }

    /// Everything still unread (at the device's destruction or the program's exit): read for
    /// whatever is available.
    pub fn all_unread(&mut self) -> Vec<ReadJob> {
        let mut jobs = Vec::new();
        let mut inflight = Vec::new();
        for q in self.queues.values_mut() {
            inflight.extend(q.inflight.drain(..));
        }
        inflight.sort_by_key(|f| (f.sub.group, f.sub.submit));
        for f in inflight {
            self.jobs_of(f, &mut jobs);
        }
        let mut rest: Vec<u64> = self
            .cmds
            .iter()
            .filter(|(_, c)| c.unread.is_some())
            .map(|(&k, _)| k)
            .collect();
        rest.sort_unstable();
        for cmd in rest {
            if let Some(j) = self.unread_of(cmd) {
                jobs.push(j);
            }
        }
        jobs
    }

    /// The driver's answer for a read job: `results[i]` is the (start, end) GPU ns of
    /// `job.stamps[i]`, `None` where it was not available (then its dispatches are untimed).
    pub fn read_done(&mut self, job: &ReadJob, results: &[Option<(u64, u64)>]) {
        let mut untimed = 0;
        for (s, r) in job.stamps.iter().zip(results) {
            match r {
                Some((a, b)) => self.group.gpu.push(RawGpuSpan(
                    job.sub.group,
                    job.sub.submit,
                    s.op,
                    job.sub.kind,
                    *a,
                    *b,
                )),
                None => {
                    self.group.dropped += 1;
                    untimed += s.covers;
                }
            }
            if job.own {
                self.slots.put(s.slot);
            }
        }
        if untimed > 0 {
            self.group.untimed.push(RawUntimed(job.sub.group, untimed));
        }
    }

    /// Wait groups closed so far.
    pub fn groups_closed(&self) -> u64 {
        self.next_group
    }

    pub fn open_group_start_ns(&self) -> u64 {
        self.group.start_ns
    }

    /// Ends the current wait group with a wait of `kind` that returned at `now_ns`. A group
    /// with nothing in it at the device's end (`destroy`, `exit`) is not written.
    pub fn close_group(&mut self, kind: &'static str, now_ns: u64) -> Option<Closed> {
        let g = std::mem::replace(
            &mut self.group,
            Group {
                start_ns: now_ns,
                ..Group::default()
            },
        );
        if matches!(kind, "destroy" | "exit")
            && g.counters == Counters::default()
            && g.gpu.is_empty()
            && g.untimed.is_empty()
        {
            return None;
        }
        let wait = kind.bytes().fold(0u64, |h, b| mix(h, b as u64));
        let index = self.next_group;
        self.next_group += 1;
        Some(Closed {
            device: self.index,
            index,
            wait: kind,
            start_ns: g.start_ns,
            end_ns: now_ns,
            signature: mix(g.signature, wait),
            work_signature: mix(g.work, wait),
            counters: g.counters,
            host: g.host,
            gpu: g.gpu,
            untimed: g.untimed,
            queues: g.queues,
            dropped: g.dropped,
        })
    }
}

/// What a returned wait or a successful poll proves finished.
#[derive(Debug)]
pub enum Completed<'a> {
    Fences(&'a [u64]),
    /// Timeline semaphores that reached at least these values.
    Semaphores(&'a [(u64, u64)]),
    Queue(u64),
    Device,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(level: Level) -> DeviceState {
        let mut s = DeviceState::new(0, level, 0);
        s.timestamp_families = vec![true];
        s.transfer_families = vec![false];
        s.add_pool(1, 0);
        s.add_queue(9, 0, 0);
        if level != Level::Off {
            s.timing = true;
            s.slots.grow();
        }
        s
    }

    #[test]
    fn commands_count_at_every_submit() {
        let mut s = state(Level::Off);
        s.allocate_cmd(7, 1, false);
        s.begin_cmd(7, 0);
        s.bind_pipeline(7, 100);
        s.record(7, Cmd::Dispatch);
        s.record(7, Cmd::Barrier(2));
        s.end_cmd(7, 5);
        s.submit(9, &[vec![7]], Some(3), &[], None);
        s.submit(9, &[vec![7]], Some(3), &[], None);
        let c = s.group.counters;
        assert_eq!(c.command_buffers_begun, 1);
        assert_eq!(c.submits_compute, 2);
        assert_eq!(c.dispatches, 2);
        assert_eq!(c.barrier_calls, 2);
        assert_eq!(c.memory_barriers, 4);
        assert_eq!(c.pipeline_binds, 2);
        assert_eq!(s.total, c);
        assert_eq!(s.group.queues, vec![RawQueueWork(0, 2, 2, 2)]);
    }

    #[test]
    fn a_pool_reset_touches_the_command_buffers_begun_since_the_last_one() {
        let mut s = state(Level::Off);
        for k in [7, 8, 9] {
            s.allocate_cmd(k, 1, false);
        }
        s.add_pool(2, 0);
        s.allocate_cmd(20, 2, false);
        s.begin_cmd(8, 0);
        s.begin_cmd(8, 1);
        s.begin_cmd(7, 2);
        s.begin_cmd(20, 3);
        assert_eq!(s.begun_in_pool(1), vec![7, 8]);
        assert_eq!(s.begun_in_pool(1), Vec::<u64>::new());
        s.begin_cmd(9, 4);
        s.free_cmd(9);
        s.begin_cmd(8, 5);
        assert_eq!(s.begun_in_pool(1), vec![8]);
        assert_eq!(s.begun_in_pool(2), vec![20]);
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
            s.submit(9, &[vec![7]], None, &[], None);
            let sig = s.group.signature;
            s.close_group("fence", 2);
            sig
        };
        let mut s = state(Level::Off);
        s.allocate_cmd(7, 1, false);
        let first = work(&mut s, true);
        let replay = work(&mut s, false);
        assert_eq!(first, replay);
    }

    #[test]
    fn labels_then_names_then_stable_pipeline_labels() {
        let mut s = state(Level::Dispatch);
        s.allocate_cmd(7, 1, false);
        s.begin_cmd(7, 0);
        s.created_pipeline(100, "main", 0x1234_5678_9abc, 0);
        s.bind_pipeline(7, 100);
        let op = s.dispatch_op_of(7);
        assert_eq!(
            s.announce.last(),
            Some(&Announce::Op {
                id: op,
                label: "main@56789abc".into(),
                kind: "dispatch"
            })
        );
        s.name_pipeline(100, "matvec".into());
        let named = s.dispatch_op_of(7);
        assert_ne!(named, op);
        s.push_label(7, "L0.q_proj".into());
        let labelled = s.dispatch_op_of(7);
        assert!(
            matches!(s.announce.last(), Some(Announce::Op { label, .. }) if label == "L0.q_proj")
        );
        s.pop_label(7);
        assert_eq!(s.dispatch_op_of(7), named);
        assert_ne!(labelled, named);
        // Specialization data distinguishes pipelines of one module.
        s.created_pipeline(101, "main", 0x1234_5678_9abc, 0xbeef);
        s.bind_pipeline(7, 101);
        s.dispatch_op_of(7);
        assert!(
            matches!(s.announce.last(), Some(Announce::Op { label, .. }) if label == "main@56789abc+beef")
        );
    }

    /// Records `n` timed dispatches into command buffer 7 and submits it.
    fn timed_token(s: &mut DeviceState, n: u32, fence: u64) -> Submission {
        s.begin_cmd(7, 0);
        s.bind_pipeline(7, 100);
        for _ in 0..n {
            s.record(7, Cmd::Dispatch);
            let slot = s.dispatch_slot(7).expect("a slot");
            let op = s.dispatch_op_of(7);
            s.add_stamp(
                7,
                Stamp {
                    slot: slot.slot,
                    op,
                    covers: 1,
                },
                true,
            );
        }
        s.end_cmd(7, 1);
        s.submit(9, &[vec![7]], Some(fence), &[], None)
    }

    #[test]
    fn a_fence_wait_reads_every_stamp_of_its_submission_and_blocks_hold_32() {
        let mut s = state(Level::Dispatch);
        s.allocate_cmd(7, 1, false);
        let sub = timed_token(&mut s, 40, 3);
        let jobs = s.completed(Completed::Fences(&[3]));
        assert_eq!(jobs.len(), 1);
        assert_eq!(jobs[0].sub, sub);
        assert_eq!(jobs[0].stamps.len(), 40);
        let slots: Vec<u32> = jobs[0].stamps.iter().map(|s| s.slot).collect();
        // Two blocks: 32 consecutive pairs, then 8 of the next block.
        assert_eq!(slots[31] - slots[0], 31);
        assert_eq!(slots[39] - slots[32], 7);
        s.read_done(&jobs[0], &vec![Some((1, 2)); 40]);
        assert_eq!(s.group.gpu.len(), 40);
        assert!(s.group.untimed.is_empty());
        // Read once only.
        assert!(s.completed(Completed::Device).is_empty());
    }

    #[test]
    fn a_command_buffer_recorded_again_gives_up_its_unread_stamps_first() {
        // The program learnt of the completion in a way the layer did not see (a poll, a
        // binary semaphore): the stamps are read when the command buffer is reused.
        let mut s = state(Level::Dispatch);
        s.allocate_cmd(7, 1, false);
        timed_token(&mut s, 3, 3);
        let job = s.unread_of(7).expect("unread stamps");
        assert_eq!(job.stamps.len(), 3);
        s.read_done(&job, &[Some((1, 2)), None, Some((3, 4))]);
        assert_eq!(s.group.gpu.len(), 2);
        assert_eq!(s.group.untimed, vec![RawUntimed(0, 1)]);
        // The queue's later completion finds nothing left to read.
        timed_token(&mut s, 3, 4);
        let jobs = s.completed(Completed::Fences(&[3]));
        assert!(jobs.is_empty(), "{jobs:?}");
        assert_eq!(s.completed(Completed::Fences(&[4])).len(), 1);
    }

    #[test]
    fn timeline_semaphore_values_complete_their_submissions() {
        let mut s = state(Level::Dispatch);
        s.allocate_cmd(7, 1, false);
        s.begin_cmd(7, 0);
        s.record(7, Cmd::Dispatch);
        let slot = s.dispatch_slot(7).expect("slot");
        s.add_stamp(
            7,
            Stamp {
                slot: slot.slot,
                op: 0,
                covers: 1,
            },
            true,
        );
        s.end_cmd(7, 1);
        s.submit(9, &[vec![7]], None, &[(55, 10)], None);
        assert!(s.completed(Completed::Semaphores(&[(55, 9)])).is_empty());
        assert_eq!(s.completed(Completed::Semaphores(&[(55, 10)])).len(), 1);
    }

    #[test]
    fn untimed_dispatches_are_counted() {
        // A secondary command buffer's dispatches cannot be timed at the dispatch level.
        let mut s = state(Level::Dispatch);
        s.allocate_cmd(8, 1, true);
        s.allocate_cmd(7, 1, false);
        s.begin_cmd(8, 0);
        s.record(8, Cmd::Dispatch);
        s.record(8, Cmd::Dispatch);
        s.end_cmd(8, 0);
        s.begin_cmd(7, 0);
        s.execute_secondaries(7, &[8]);
        s.end_cmd(7, 0);
        s.submit(9, &[vec![7]], None, &[], None);
        assert_eq!(s.group.untimed, vec![RawUntimed(0, 2)]);
        // A submit the submit level could not wrap.
        let mut s = state(Level::Submit);
        s.allocate_cmd(7, 1, false);
        s.begin_cmd(7, 0);
        s.record(7, Cmd::Dispatch);
        s.end_cmd(7, 0);
        s.submit(9, &[vec![7]], None, &[], None);
        assert_eq!(s.group.untimed, vec![RawUntimed(0, 1)]);
    }

    #[test]
    fn whole_size_ranges_run_to_the_end_of_the_map() {
        let mut s = state(Level::Off);
        s.map(5, 256, 1024);
        assert_eq!(s.range_bytes(5, 512, u64::MAX), 768);
        assert_eq!(s.range_bytes(5, 512, 64), 64);
    }

    #[test]
    fn code_hashes_are_stable() {
        assert_eq!(hash_bytes(b"spirv"), hash_bytes(b"spirv"));
        assert_ne!(hash_bytes(b"spirv"), hash_bytes(b"spirw"));
        assert_ne!(hash_bytes(&[0; 8]), hash_bytes(&[0; 16]));
    }
}
