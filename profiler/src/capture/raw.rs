//! The capture layer's raw records, as `profiler record` reads them: one JSON line per
//! [`RawRecord`] in `layer.PID.jsonl`, and the live file `live.PID` ([`parse_live`]).

use std::io::BufRead;

use serde::{Deserialize, Serialize};

use super::CaptureError;
use crate::trace::{ClockMeta, Counters, DeviceMeta, HostSpan};

/// Version of the raw record stream; the layer and `profiler record` are built together, so a
/// mismatch means a stale library.
pub const RAW_VERSION: u32 = 2;

/// One line of a raw capture file.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum RawRecord {
    Process(RawProcess),
    Device(RawDevice),
    Queue(RawQueue),
    Op(RawOp),
    Group(RawGroup),
}

/// A queue the program got from a device (`vkGetDeviceQueue`/`vkGetDeviceQueue2`), announced
/// before the first group that submits to it.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct RawQueue {
    pub device: u32,
    /// The queue's number within its device (the order the program first got it).
    pub id: u32,
    pub family: u32,
    pub index: u32,
    /// `compute` or `transfer`.
    pub kind: String,
}

/// `[queue id, submits, command buffers, dispatches]`: what one group submitted to one queue.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct RawQueueWork(pub u32, pub u64, pub u64, pub u64);

/// `[group, dispatches]`: dispatches submitted in group `group` that have no GPU span at the
/// layer's timestamp level (reported when that became known: at the submit for work that could
/// not be timed, at a read for results that never became available).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct RawUntimed(pub u64, pub u64);

/// The first record of a file: the process the layer was loaded into.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct RawProcess {
    pub raw_version: u32,
    pub pid: u32,
    /// `/proc/self/exe`.
    pub exe: String,
    /// The timestamp level the layer ran at: `off`, `submit`, `command-buffer`, `dispatch`.
    pub timestamps: String,
    /// The layer's own version.
    pub layer_version: String,
}

/// A `VkDevice` the program created.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct RawDevice {
    /// Index of the device within the process (creation order).
    pub device: u32,
    pub info: DeviceMeta,
    /// How the layer's GPU timestamps map to the host clock (`method = "none"` without them).
    pub clock: ClockMeta,
    /// Timestamp level actually used on this device (`off` when its queues cannot write them).
    pub timestamps: String,
    /// At the `dispatch` level, how dispatches are timed: `shader-clock` (each instrumented
    /// dispatch reads the device clock itself) or `interval` (timestamps between the
    /// program's barriers); empty at other levels.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub dispatch_timing: String,
    /// Where the layer reset its timestamp queries: `host` (`vkResetQueryPool`) or
    /// `command-buffer` (`vkCmdResetQueryPool` in the command buffers it times); empty when
    /// untimed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub query_reset: String,
}

/// A label that GPU spans of a device name by id.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct RawOp {
    pub device: u32,
    pub id: u32,
    pub label: String,
    /// `dispatch` for a dispatch, `region` for a submit or command buffer span.
    pub kind: String,
}

/// Every call of one device from the end of the previous host wait to the end of this one.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct RawGroup {
    pub device: u32,
    /// 0-based, consecutive per device.
    pub index: u64,
    /// `fence`, `queue-idle`, `device-idle`, `semaphore`, or `destroy` (what was left when the
    /// device was destroyed).
    pub wait: String,
    /// Host monotonic ns (absolute): the previous group's end, and the moment the wait returned.
    pub start_ns: u64,
    pub end_ns: u64,
    /// Hash of the GPU work as submitted (the commands of every submitted command buffer in
    /// order, the submits, the kind of wait; see the module docs): equal work, equal hash.
    pub signature: u64,
    /// Hash of the same commands regardless of order and of how they were split into command
    /// buffers and submits (and the kind of wait).
    #[serde(default)]
    pub work_signature: u64,
    pub counters: Counters,
    /// `record`, `descriptors`, `submit` and `wait` spans, `start_ns` absolute, depth 1.
    #[serde(default)]
    pub host_spans: Vec<HostSpan>,
    /// GPU spans read back at this wait (they may belong to earlier groups).
    #[serde(default)]
    pub gpu_spans: Vec<RawGpuSpan>,
    /// Timestamp pairs the layer had to drop (query slots exhausted, results never available).
    #[serde(default)]
    pub dropped_timestamps: u64,
    /// Dispatches without a GPU span, by the group that submitted them (see [`RawUntimed`]).
    #[serde(default)]
    pub untimed: Vec<RawUntimed>,
    /// What this group submitted to each queue.
    #[serde(default)]
    pub queues: Vec<RawQueueWork>,
}

/// `[group, submit, op, queue, start_gpu_ns, end_gpu_ns, shared]`: a span of the work of submit
/// number `submit` (0-based within `group`), GPU times in ns (ticks times the timestamp period);
/// `shared` dispatches ran concurrently within it (the trace's [`crate::trace::GpuSpan`] `shared`).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct RawGpuSpan(pub u64, pub u32, pub u32, pub u8, pub u64, pub u64, pub u32);

/// The live file `live.PID` beside the raw file: a fixed array of [`LIVE_SLOTS`] slots of
/// [`LIVE_WORDS`] little-endian u64 words that the layer keeps current with plain stores into a
/// shared mapping, so that it survives the program's death (SIGKILL included) with the counters
/// of work the program submitted after the last record the layer wrote. Words of a slot:
/// 0 [`LIVE_MAGIC`] when in use, 1 the device index, 2 wait groups closed, 3 the open group's
/// start (host ns), 4 the last submit's time (host ns), 5.. every counter counted on the device
/// so far, in [`Counters::to_fields`] order.
pub const LIVE_SLOTS: usize = 8;
/// u64 words per slot of the live file.
pub const LIVE_WORDS: usize = 32;
/// Word 0 of a slot in use.
pub const LIVE_MAGIC: u64 = 0x6465_636f_6465_4c32;
/// Size of the live file in bytes.
pub const LIVE_BYTES: usize = LIVE_SLOTS * LIVE_WORDS * 8;

/// One device's slot of the live file.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LiveDevice {
    pub device: u32,
    pub groups_closed: u64,
    pub open_start_ns: u64,
    pub last_submit_ns: u64,
    /// Everything counted on the device up to its last submit.
    pub counters: Counters,
}

/// The slots in use of a live file's bytes (a short or foreign file has none).
pub fn parse_live(bytes: &[u8]) -> Vec<LiveDevice> {
    let word = |i: usize| -> u64 {
        bytes
            .get(i * 8..i * 8 + 8)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u64::from_le_bytes)
    };
    (0..LIVE_SLOTS)
        .filter_map(|s| {
            let w = |k: usize| word(s * LIVE_WORDS + k);
            (w(0) == LIVE_MAGIC).then(|| LiveDevice {
                device: w(1) as u32,
                groups_closed: w(2),
                open_start_ns: w(3),
                last_submit_ns: w(4),
                counters: Counters::from_fields(std::array::from_fn(|i| w(5 + i))),
            })
        })
        .collect()
}

/// One raw file, parsed.
#[derive(Clone, Debug, Default)]
pub struct RawCapture {
    pub file: String,
    pub process: Option<RawProcess>,
    pub devices: Vec<RawDevice>,
    pub ops: Vec<RawOp>,
    pub queues: Vec<RawQueue>,
    pub groups: Vec<RawGroup>,
    /// True when the last line was cut short (the program died while the layer wrote it).
    pub truncated: bool,
    /// The process's live file, where there is one ([`parse_live`]).
    pub live: Vec<LiveDevice>,
}

/// Parses one raw file's text. A final line without its newline is a record cut short by the
/// program's death: it is dropped and `truncated` set. Zero bytes after the last record (the
/// unwritten end of the layer's mapping of the file, left by a program that did not exit
/// cleanly) end the records. Anything else malformed is an error.
pub fn parse_raw(file: &str, text: &str) -> Result<RawCapture, CaptureError> {
    let mut groups = Vec::new();
    let mut out = read_raw(file, text.as_bytes(), |g| {
        groups.push(g);
        Ok::<(), CaptureError>(())
    })?;
    out.groups = groups;
    Ok(out)
}

/// [`parse_raw`] line by line from `reader`: each group is handed to `on_group` as it is read
/// rather than kept (the returned capture has no groups), so a raw file of any length is read
/// holding one record at a time.
pub fn read_raw<R: BufRead, E: From<CaptureError>>(
    file: &str,
    mut reader: R,
    mut on_group: impl FnMut(RawGroup) -> Result<(), E>,
) -> Result<RawCapture, E> {
    let mut out = RawCapture {
        file: file.to_owned(),
        ..RawCapture::default()
    };
    let mut line = String::new();
    let mut number = 0;
    loop {
        line.clear();
        let n = reader
            .read_line(&mut line)
            .map_err(|err| CaptureError::Read {
                file: file.to_owned(),
                err,
            })?;
        if n == 0 {
            break;
        }
        number += 1;
        // The layer writes through a shared mapping of the file, which runs on in zero bytes
        // past its last record when the program did not exit cleanly.
        if line.starts_with('\0') && line.bytes().all(|b| b == 0) {
            break;
        }
        if line.trim().is_empty() {
            continue;
        }
        let rec: RawRecord = match serde_json::from_str(&line) {
            Ok(r) => r,
            // Only the last line can lack its newline.
            Err(_) if !line.ends_with('\n') => {
                out.truncated = true;
                break;
            }
            Err(e) => {
                return Err(CaptureError::Invalid {
                    file: file.to_owned(),
                    line: number,
                    message: e.to_string(),
                }
                .into());
            }
        };
        match rec {
            RawRecord::Process(p) => {
                if p.raw_version != RAW_VERSION {
                    return Err(CaptureError::Version {
                        file: file.to_owned(),
                        found: p.raw_version,
                    }
                    .into());
                }
                out.process = Some(p);
            }
            RawRecord::Device(d) => out.devices.push(d),
            RawRecord::Queue(q) => out.queues.push(q),
            RawRecord::Op(o) => out.ops.push(o),
            RawRecord::Group(g) => on_group(g)?,
        }
    }
    Ok(out)
}
