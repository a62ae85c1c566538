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
//!
//! The device's state is here with its wait groups and host calls; [`commands`] holds command
//! pools and buffers and what they record, [`queues`] submits, completion and the stamps read
//! back, [`slots`] the free timestamp pairs, [`hash`] the stable hashing.

use std::collections::{HashMap, VecDeque};

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
/// at most one query reset per block rather than one per dispatch ([`Timing::first_write`]).
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

mod clock;
mod commands;
mod hash;
mod interval;
mod queues;
mod slots;
#[cfg(test)]
mod tests;

pub use clock::{ClockMap, RECHECK};
pub use commands::{Cmd, CmdState};
pub use hash::{FastMap, KeyHasher, hash_bytes, mix};
pub use interval::{Timing, UNRESOLVED};
pub use queues::Completed;
use queues::QueueInfo;
pub use slots::Slots;

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

/// A span the layer timed in a command buffer or a submit: it owns pair `slot` (queries
/// `2 slot` and `2 slot + 1` of pool `slot / POOL_PAIRS`), names op `op` and covers `covers`
/// dispatches (1 for a dispatch; a command buffer's or a submit's dispatches for a region). It
/// runs from query `start` to query `end` (numbered as `2 slot + 0 or 1`): its own pair for a
/// region, and for a dispatch the boundaries of its interval, which may be written into the pair
/// of another dispatch of the same command buffer ([`DeviceState::dispatch_stamp`]); `shared`
/// dispatches have that interval. At the dispatch level with shader clocks ([`Source`]), a
/// dispatch's times come from its pair's clock record instead, mapped onto its command buffer's
/// bracket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    pub slot: u32,
    pub op: u32,
    pub covers: u64,
    pub start: u32,
    pub end: u32,
    pub shared: u32,
    pub source: Source,
}

/// Where a stamp's times come from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Source {
    /// Its start and end queries.
    #[default]
    Queries,
    /// The clock record of its pair, written by the dispatch's own (instrumented) shader: the
    /// first workgroup's start and the last one's end, in device clock ticks.
    Clock,
    /// Its own pair's queries, around a whole command buffer whose dispatches are clocked: the
    /// timestamps their clocks are mapped onto; not a span of its own.
    Bracket,
}

impl Stamp {
    /// A span of its own pair.
    pub fn pair(slot: u32, op: u32, covers: u64) -> Stamp {
        Stamp {
            slot,
            op,
            covers,
            start: 2 * slot,
            end: 2 * slot + 1,
            shared: 1,
            source: Source::Queries,
        }
    }
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

/// Everything the layer knows about one device.
#[derive(Debug)]
pub struct DeviceState {
    pub index: u32,
    pub level: Level,
    pub slots: Slots,
    /// True once the device's query pools exist (timestamps on and supported).
    pub timing: bool,
    /// The ffi side resets queries from the host (`hostQueryReset`), never in a command
    /// buffer: the pairs of each submitted command buffer (and the submit level's own pair)
    /// are listed in [`Self::resets`] at its submit.
    pub host_reset: bool,
    /// Pairs to reset from the host before the submit just counted reaches the driver: (first
    /// pair, pairs). The ffi side empties it.
    pub resets: Vec<(u32, u32)>,
    /// Shader clocks onto timestamps ([`ClockMap`]).
    pub clock_map: ClockMap,
    group: Group,
    next_group: u64,
    cmds: FastMap<u64, CmdState>,
    pool_family: FastMap<u64, u32>,
    /// Per command pool, the command buffers begun since its last reset: a pool reset touches
    /// these alone (llama.cpp resets a pool of hundreds of command buffers a dozen times a
    /// token, having used a few).
    pool_begun: FastMap<u64, Vec<u64>>,
    pipeline_labels: FastMap<u64, String>,
    /// The op of each pipeline's dispatches without a label (found from `pipeline_labels`).
    pipeline_ops: FastMap<u64, u32>,
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
            host_reset: false,
            resets: Vec::new(),
            clock_map: ClockMap::default(),
            group: Group {
                start_ns: now_ns,
                ..Group::default()
            },
            next_group: 0,
            cmds: FastMap::default(),
            pool_family: FastMap::default(),
            pool_begun: FastMap::default(),
            pipeline_labels: FastMap::default(),
            pipeline_ops: FastMap::default(),
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

    /// Whether the program's own command buffers get stamps, and so can leave results unread
    /// after a submission: at the command-buffer and dispatch levels, and at the submit level
    /// where queries are reset from the host (a submit of one command buffer is then timed by
    /// that command buffer's pair, not by the layer's wrappers:
    /// [`Self::submit_timed_by_its_command_buffer`]). At `off` nothing is timed.
    pub fn stamps_command_buffers(&self) -> bool {
        match self.level {
            Level::Off => false,
            Level::Submit => self.host_reset,
            Level::CommandBuffer | Level::Dispatch => true,
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
