//! Traces of programs that decodescope did not write: the raw records of the capture layer
//! (`layer/`, a Vulkan layer loaded into an unmodified program by `profiler record`) and the
//! rules that turn them into a [`Trace`].
//!
//! The layer writes one file of JSON lines per process (`layer.PID.jsonl`, in a folder that
//! `profiler record` made), one [`RawRecord`] per line, written through a shared mapping of the
//! file as soon as it is made, so a program that crashes or is stopped still leaves every
//! finished record behind (followed by the zero bytes of the mapping's unwritten end); beside it the live file `live.PID` ([`parse_live`]) holds what
//! was submitted after the last record. The unit of the raw stream is the **wait group**: every
//! Vulkan call the program made since the previous host wait (`vkWaitForFences`,
//! `vkQueueWaitIdle`, `vkDeviceWaitIdle`, `vkWaitSemaphores` with a timeout; polls end no group)
//! up to and including the next one. A foreign program
//! does not say where a decode token starts, so [`segment`] groups wait groups into steps:
//!
//! - [`StepRule::Wait`]: every wait group is one step.
//! - [`StepRule::Auto`]: find the last stretch of the program in which the *work signature* of
//!   the wait groups (what the GPU was given: the pipelines, dispatches, copies and barriers of
//!   every submitted command buffer, the submits and the kind of wait; not host-side counts such
//!   as command buffers begun or descriptor writes, which change when a program first records
//!   what it later replays) repeats with a period of P wait groups at least
//!   [`MIN_REPEATS`] times; each period is one decode step, anchored at the end of the stretch
//!   (at its start for a run cut short, [`Anchor`]).
//!   The stretch is then extended backwards by whole periods whose *executed work* (the same
//!   commands, however the program split them into command buffers and submits) matches the
//!   first period: a runtime may batch the submits of its first decode token differently
//!   (llama.cpp does) without that token being anything but a decode step.
//!   What comes before is one prologue step (setup, weight uploads and the prompt, phase
//!   `prefill`); what comes after (teardown) is summed into `meta.capture.epilogue` (for a run
//!   cut short, into `meta.capture.tail` with the live file's unwritten work).
//!
//! Every counter is counted as the decoder's recorder counts it (TRACE_FORMAT.md), except the
//! byte counters: the layer sees `vkFlushMappedMemoryRanges`, `vkInvalidateMappedMemoryRanges`
//! and `vkCmdUpdateBuffer`, not plain stores into host-coherent mapped memory, so the trace lists
//! `bytes_to_device` and `bytes_from_device` in `meta.capture.unknown_counters`.

use std::collections::BTreeMap;
use std::ops::Range;

mod raw;
mod records;
mod steps;

pub use records::StepStream;

pub use raw::{
    LIVE_BYTES, LIVE_MAGIC, LIVE_SLOTS, LIVE_WORDS, LiveDevice, RAW_VERSION, RawCapture, RawDevice,
    RawGpuSpan, RawGroup, RawOp, RawProcess, RawQueue, RawQueueWork, RawRecord, RawUntimed,
    parse_live, parse_raw, read_raw,
};
pub use steps::{
    Anchor, MIN_REPEATS, Period, Segmentation, StepRule, extend_by_work, find_period, segment,
};

use crate::trace::{
    CaptureMeta, CaptureQueue, CaptureTail, Counters, FORMAT_NAME, FORMAT_VERSION, Knobs, Meta,
    ModelMeta, OpInfo, Phase, RunMeta, TokenRecord, ToolMeta, Trace, UNKNOWN,
};

/// Everything `profiler record` knows about the program it ran.
#[derive(Clone, Debug, Default)]
pub struct ProgramRun {
    pub program: String,
    pub args: Vec<String>,
    /// The exit code, `None` when a signal ended the program.
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// True when `profiler record` forwarded Ctrl-C (SIGINT) to the program.
    pub interrupted: bool,
    pub created_unix_ms: u64,
}

/// What went wrong turning raw records into a trace.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    #[error(
        "{program} never loaded the capture layer: it did not create a Vulkan instance through the \
         Vulkan loader, or the loader could not load the layer's library (VK_LOADER_DEBUG=error,warn \
         shows why), so there is nothing to trace (profiler record traces Vulkan programs)"
    )]
    NoVulkan { program: String },
    #[error("{program} created a Vulkan instance but no device, so there is nothing to trace")]
    NoDevice { program: String },
    #[error(
        "{program} created a Vulkan device ({device}) but never waited for work on it (no fence, \
         queue or device wait), so there are no steps to trace"
    )]
    NoWork { program: String, device: String },
    #[error(
        "the raw capture {file} was written by capture layer format {found}, but this profiler \
         reads format {RAW_VERSION}; rebuild the layer and the profiler together"
    )]
    Version { file: String, found: u32 },
    #[error("cannot read the raw capture {file}: {err}")]
    Read {
        file: String,
        /// In the message, so not a `#[source]`.
        err: std::io::Error,
    },
    #[error("the raw capture {file} is not valid at line {line}: {message}")]
    Invalid {
        file: String,
        line: usize,
        message: String,
    },
}

/// Turns the raw captures of one program run into a trace of its busiest device (the one with
/// the most submits), in memory. [`Plan::new`] and [`StepStream`] do the same one group at a
/// time, for a trace written as it is built (`profiler record`).
pub fn build_trace(
    raws: &[RawCapture],
    run: &ProgramRun,
    rule: StepRule,
    kinds: &crate::kinds::KindRules,
) -> Result<Trace, CaptureError> {
    let heads: Vec<RawHeads> = raws.iter().map(RawHeads::of).collect();
    let plan = Plan::new(&heads, run, rule, kinds)?;
    let mut tokens = Vec::new();
    let mut stream = StepStream::new(&plan);
    let mut keep = |t: TokenRecord| -> Result<(), CaptureError> {
        tokens.push(t);
        Ok(())
    };
    for g in raws[plan.file()].groups.iter() {
        stream.feed(g, &mut keep)?;
    }
    stream.finish(&mut keep)?;
    let (meta, ops) = plan.into_parts();
    Ok(Trace {
        format: FORMAT_NAME.into(),
        version: FORMAT_VERSION,
        meta,
        ops,
        tokens,
    })
}

/// A raw file without the spans of its groups: what [`Plan::new`] reads.
#[derive(Clone, Debug, Default)]
pub struct RawHeads {
    /// Every record but the groups (`groups` is empty).
    pub raw: RawCapture,
    /// The groups, every device's, in file order.
    pub groups: Vec<GroupHead>,
}

impl RawHeads {
    /// The heads of a file parsed whole.
    pub fn of(raw: &RawCapture) -> RawHeads {
        RawHeads {
            raw: RawCapture {
                file: raw.file.clone(),
                process: raw.process.clone(),
                devices: raw.devices.clone(),
                ops: raw.ops.clone(),
                queues: raw.queues.clone(),
                groups: Vec::new(),
                truncated: raw.truncated,
                live: raw.live.clone(),
            },
            groups: raw.groups.iter().map(GroupHead::of).collect(),
        }
    }
}

/// A wait group without its host and GPU spans (a few hundred bytes, where a group with its
/// spans at `dispatch` level is tens of kilobytes).
#[derive(Clone, Debug, Default)]
pub struct GroupHead {
    pub device: u32,
    pub index: u64,
    pub signature: u64,
    pub work_signature: u64,
    pub counters: Counters,
    pub start_ns: u64,
    pub end_ns: u64,
    pub dropped_timestamps: u64,
    pub untimed: Vec<RawUntimed>,
    pub queues: Vec<RawQueueWork>,
    /// The groups (by index) whose GPU spans this group reported, each once.
    pub spans_for: Vec<u64>,
}

impl GroupHead {
    pub fn of(g: &RawGroup) -> GroupHead {
        let mut spans_for: Vec<u64> = g.gpu_spans.iter().map(|s| s.0).collect();
        spans_for.sort_unstable();
        spans_for.dedup();
        GroupHead {
            device: g.device,
            index: g.index,
            signature: g.signature,
            work_signature: g.work_signature,
            counters: g.counters,
            start_ns: g.start_ns,
            end_ns: g.end_ns,
            dropped_timestamps: g.dropped_timestamps,
            untimed: g.untimed.clone(),
            queues: g.queues.clone(),
            spans_for,
        }
    }
}

/// Everything about the trace of a program run except its step records: the device traced, its
/// ops, the steps as ranges of its wait groups, and the metadata. Made from the groups' heads
/// alone, so the raw files need not be held in memory whole.
#[derive(Debug)]
pub struct Plan {
    file: usize,
    device: u32,
    meta: Meta,
    ops: Vec<OpInfo>,
    op_index: BTreeMap<u32, u32>,
    /// Steps over the traced device's groups (positions in its group order).
    steps: Vec<(Phase, Range<usize>)>,
    /// Per step: the position of the last group whose spans it needs (its GPU spans are read
    /// back at later waits).
    ready_at: Vec<usize>,
    untimed_of: BTreeMap<u64, u64>,
    epoch: u64,
    gpu_minus_host_ns: Option<i64>,
    timestamps_on: bool,
}

impl Plan {
    /// The plan of the trace of `raws`' busiest device (the one with the most submits).
    pub fn new(
        raws: &[RawHeads],
        run: &ProgramRun,
        rule: StepRule,
        kinds: &crate::kinds::KindRules,
    ) -> Result<Plan, CaptureError> {
        let loaded: Vec<(usize, &RawHeads)> = raws
            .iter()
            .enumerate()
            .filter(|(_, r)| r.raw.process.is_some())
            .collect();
        if loaded.is_empty() {
            return Err(CaptureError::NoVulkan {
                program: run.program.clone(),
            });
        }
        let (fi, dev, seen) = busiest_device(&loaded, run)?;
        let heads = &raws[fi];
        let raw = &heads.raw;
        let device = raw
            .devices
            .iter()
            .find(|d| d.device == dev)
            .cloned()
            .unwrap_or_default();
        let process = raw.process.clone().unwrap_or_default();
        let groups: Vec<&GroupHead> = heads.groups.iter().filter(|g| g.device == dev).collect();
        if groups.is_empty() {
            return Err(CaptureError::NoWork {
                program: run.program.clone(),
                device: device.info.name.clone(),
            });
        }

        let (ops, op_index) = device_ops(raw, dev, kinds);

        let signatures: Vec<u64> = groups.iter().map(|g| g.signature).collect();
        let work: Vec<u64> = groups.iter().map(|g| g.work_signature).collect();
        let has_work: Vec<bool> = groups.iter().map(|g| g.counters.submits() > 0).collect();
        // Work the live file saw submitted after the last group the layer wrote: the open group of
        // a program that died between two waits.
        let live = raw.live.iter().find(|l| l.device == dev);
        let mut written = Counters::default();
        for g in &groups {
            written.add(&g.counters);
        }
        let unwritten = live.map_or(Counters::default(), |l| l.counters.saturating_sub(&written));
        let open_work = unwritten.submits() > 0 || unwritten.dispatches > 0;
        let cut = run.signal.is_some() || raw.truncated || open_work;
        let anchor = if cut { Anchor::Start } else { Anchor::End };
        let seg = segment(&signatures, &work, &has_work, rule, anchor);

        // GPU spans and untimed dispatches are reported at a later wait than the one that ends
        // their submit's group.
        let mut untimed_of: BTreeMap<u64, u64> = BTreeMap::new();
        let mut dropped = 0u64;
        for g in &groups {
            dropped += g.dropped_timestamps;
            for u in &g.untimed {
                *untimed_of.entry(u.0).or_default() += u.1;
            }
        }
        let untimed_dispatches: u64 = untimed_of.values().sum();
        let epoch = groups.first().map_or(0, |g| g.start_ns);
        let timestamps_on = device.timestamps != "off";
        let calibrated = device.clock.calibrated;
        let ready_at = ready_at(&groups, &seg.steps);

        let mut epilogue = Counters::default();
        let mut epilogue_wall_ns = 0;
        let mut tail = None;
        let ended = match (run.exit_code, run.signal) {
            (_, Some(s)) => format!("the program was ended by signal {s}"),
            (Some(c), None) => format!("the program exited with status {c}"),
            (None, None) => "the program's end is unknown".into(),
        };
        if cut {
            // A run cut short: what follows the last whole step, and what the live file saw
            // submitted after the last record, is its tail.
            let after = &groups[seg.epilogue.clone()];
            let mut counters = unwritten;
            for g in after {
                counters.add(&g.counters);
            }
            // Where the last step ends (as its record has it).
            let from = seg.steps.last().map_or(epoch, |(_, r)| {
                let (first, last) = (groups[r.start], groups[r.end - 1]);
                epoch
                    + first.start_ns.saturating_sub(epoch)
                    + last.end_ns.saturating_sub(first.start_ns)
            });
            let last = after
                .last()
                .map_or(from, |g| g.end_ns)
                .max(live.map_or(0, |l| l.last_submit_ns));
            if counters != Counters::default() {
                tail = Some(CaptureTail {
                    reason: format!(
                        "{ended} before this work's wait group ended: {} wait group(s) after the \
                         last step{}",
                        after.len(),
                        if open_work {
                            ", and work submitted after the last wait"
                        } else {
                            ""
                        }
                    ),
                    wait_groups: after.len() as u64 + u64::from(open_work),
                    counters,
                    wall_ns: last.saturating_sub(from),
                });
            }
        } else if let (Some(a), Some(b)) = (
            groups.get(seg.epilogue.start),
            seg.epilogue.end.checked_sub(1).and_then(|i| groups.get(i)),
        ) {
            for g in &groups[seg.epilogue.clone()] {
                epilogue.add(&g.counters);
            }
            epilogue_wall_ns = b.end_ns.saturating_sub(a.start_ns);
        }
        // Every queue of every device, with what was submitted to it (groups, plus a cut run's
        // unwritten work on the traced device's only queue, where there is one).
        let queues = queue_totals(&loaded);
        let complete = run.exit_code == Some(0) && !raw.truncated && tail.is_none();
        let mut notes = Vec::new();
        match (run.exit_code, run.signal) {
            (Some(0), _) => {}
            (Some(c), _) => notes.push(format!(
                "the program exited with status {c}: the trace holds what it did until then"
            )),
            (None, Some(s)) => notes.push(format!(
                "the program was ended by signal {s}{}: the trace holds what it did until then",
                if run.interrupted { " after Ctrl-C" } else { "" }
            )),
            (None, None) => notes.push("the program's exit status is unknown".into()),
        }
        if raw.truncated {
            notes.push(format!(
                "the layer's last record in {} was cut short and is left out",
                raw.file
            ));
        }
        if let Some(t) = &tail {
            notes.push(format!(
                "the last {} dispatch(es) and {} submit(s) ran after the last complete step and are \
                 in meta.capture.tail, not in a step",
                t.counters.dispatches,
                t.counters.submits()
            ));
        }
        if timestamps_on && untimed_dispatches > 0 {
            notes.push(format!(
                "{untimed_dispatches} dispatch(es) have no GPU span (gpu_untimed in their steps): \
                 GPU time and the op table cover the rest"
            ));
        }
        if seen.len() > 1 {
            notes.push(format!(
                "devices seen: {}; this trace is of the busiest",
                seen.join(", ")
            ));
        }
        let decode_steps = seg
            .steps
            .iter()
            .filter(|(phase, _)| *phase == Phase::Decode)
            .count() as u32;
        let unknown = || UNKNOWN.to_owned();
        let meta = Meta {
            tool: ToolMeta {
                name: "decodescope-layer".into(),
                version: process.layer_version.clone(),
            },
            created_unix_ms: run.created_unix_ms,
            epoch_host_ns: epoch,
            device: device.info.clone(),
            clock: device.clock.clone(),
            model: ModelMeta {
                name: unknown(),
                architecture: unknown(),
                ..ModelMeta::default()
            },
            knobs: Knobs {
                mode: unknown(),
                submit: unknown(),
                sync: unknown(),
                descriptors: unknown(),
                barriers: unknown(),
                kernels: unknown(),
                recording: unknown(),
            },
            run: RunMeta {
                prompt: String::new(),
                prompt_tokens: 0,
                decode_tokens: decode_steps,
                timestamps: device.timestamps.clone(),
                ..RunMeta::default()
            },
            capture: Some(CaptureMeta {
                program: run.program.clone(),
                args: run.args.clone(),
                exe: process.exe.clone(),
                pid: process.pid,
                exit_code: run.exit_code,
                signal: run.signal,
                complete,
                notes,
                step_rule: rule.name().into(),
                step_rule_detail: seg.detail.clone(),
                period_waits: seg.period.map_or(0, |p| p.period as u32),
                wait_groups: groups.len() as u64,
                epilogue_waits: seg.epilogue.len() as u64,
                epilogue,
                epilogue_wall_ns,
                dropped_timestamps: dropped,
                unknown_counters: vec!["bytes_to_device".into(), "bytes_from_device".into()],
                untimed_dispatches: if timestamps_on { untimed_dispatches } else { 0 },
                dispatch_timing: device.dispatch_timing.clone(),
                query_reset: device.query_reset.clone(),
                queues,
                tail,
            }),
        };
        Ok(Plan {
            file: fi,
            device: dev,
            meta,
            ops,
            op_index,
            steps: seg.steps,
            ready_at,
            untimed_of,
            epoch,
            gpu_minus_host_ns: calibrated.then_some(device.clock.gpu_minus_host_ns),
            timestamps_on,
        })
    }

    /// The raw file (an index into the files given to [`Plan::new`]) whose device is traced.
    pub fn file(&self) -> usize {
        self.file
    }

    /// The traced device (its index within its process).
    pub fn device(&self) -> u32 {
        self.device
    }

    /// The trace's metadata.
    pub fn meta(&self) -> &Meta {
        &self.meta
    }

    /// The trace's ops.
    pub fn ops(&self) -> &[OpInfo] {
        &self.ops
    }

    /// The metadata and the ops.
    pub fn into_parts(self) -> (Meta, Vec<OpInfo>) {
        (self.meta, self.ops)
    }
}

/// The (raw file, device) with the most submits, and every device seen as a phrase.
fn busiest_device(
    loaded: &[(usize, &RawHeads)],
    run: &ProgramRun,
) -> Result<(usize, u32, Vec<String>), CaptureError> {
    let mut best: Option<(usize, u32, u64)> = None;
    let mut seen = Vec::new();
    for &(fi, r) in loaded {
        for d in &r.raw.devices {
            let submits: u64 = r
                .groups
                .iter()
                .filter(|g| g.device == d.device)
                .map(|g| g.counters.submits())
                .sum();
            seen.push(format!(
                "{} (pid {}, {submits} submits)",
                d.info.name,
                r.raw.process.as_ref().map_or(0, |p| p.pid)
            ));
            if best.is_none_or(|(_, _, s)| submits > s) {
                best = Some((fi, d.device, submits));
            }
        }
    }
    let Some((fi, dev, _)) = best else {
        return Err(CaptureError::NoDevice {
            program: run.program.clone(),
        });
    };
    Ok((fi, dev, seen))
}

/// The ops of device `dev`, renumbered densely in id order, each with its kind, and the map from
/// the layer's op ids to their numbers.
fn device_ops(
    raw: &RawCapture,
    dev: u32,
    kinds: &crate::kinds::KindRules,
) -> (Vec<OpInfo>, BTreeMap<u32, u32>) {
    let mut op_index: BTreeMap<u32, u32> = BTreeMap::new();
    let mut ops: Vec<OpInfo> = Vec::new();
    let mut dev_ops: Vec<&RawOp> = raw.ops.iter().filter(|o| o.device == dev).collect();
    dev_ops.sort_by_key(|o| o.id);
    for o in dev_ops {
        op_index.insert(o.id, ops.len() as u32);
        ops.push(OpInfo {
            label: o.label.clone(),
            // A dispatch gets the kind of the first op-kind rule its label matches.
            kind: kinds.classify(&o.label, &o.kind).to_owned(),
            ..OpInfo::default()
        });
    }
    (ops, op_index)
}

/// Every queue of every device with what was submitted to it; queues never submitted to are
/// left out.
fn queue_totals(loaded: &[(usize, &RawHeads)]) -> Vec<CaptureQueue> {
    let mut queues: Vec<CaptureQueue> = Vec::new();
    for (_, r) in loaded {
        for q in &r.raw.queues {
            let name = r
                .raw
                .devices
                .iter()
                .find(|d| d.device == q.device)
                .map_or(String::new(), |d| d.info.name.clone());
            let mut cq = CaptureQueue {
                device: q.device,
                device_name: name,
                family: q.family,
                index: q.index,
                kind: q.kind.clone(),
                ..CaptureQueue::default()
            };
            for g in r.groups.iter().filter(|g| g.device == q.device) {
                for w in g.queues.iter().filter(|w| w.0 == q.id) {
                    cq.submits += w.1;
                    cq.command_buffers += w.2;
                    cq.dispatches += w.3;
                }
            }
            queues.push(cq);
        }
    }
    queues.retain(|q| q.submits > 0);
    queues
}

/// Per step over `groups` (positions), the position of the last group that reports one of its
/// GPU spans (at least its own last group): the step's record is complete once that is read.
fn ready_at(groups: &[&GroupHead], steps: &[(Phase, Range<usize>)]) -> Vec<usize> {
    let position_of: BTreeMap<u64, usize> = groups
        .iter()
        .enumerate()
        .map(|(p, g)| (g.index, p))
        .collect();
    let mut last_report: Vec<usize> = (0..groups.len()).collect();
    for (q, g) in groups.iter().enumerate() {
        for i in &g.spans_for {
            if let Some(&p) = position_of.get(i) {
                last_report[p] = last_report[p].max(q);
            }
        }
    }
    steps
        .iter()
        .map(|(_, r)| {
            last_report[r.clone()]
                .iter()
                .copied()
                .max()
                .unwrap_or(r.start)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{ClockMeta, DeviceMeta, HostSpan};

    fn work(n: usize) -> Vec<bool> {
        vec![true; n]
    }

    #[test]
    fn one_wait_per_token_after_a_prologue() {
        // Uploads (1), a prompt (2), then tokens (3), then a teardown (4, no work).
        let s = [1, 1, 1, 1, 2, 3, 3, 3, 3, 3, 4];
        let mut w = work(s.len());
        w[10] = false;
        let seg = segment(&s, &[], &w, StepRule::Auto, Anchor::End);
        let p = seg.period.expect("a period");
        assert_eq!((p.start, p.period, p.count), (5, 1, 5));
        assert_eq!(seg.steps[0], (Phase::Prefill, 0..5));
        assert_eq!(seg.steps.len(), 6);
        assert_eq!(seg.epilogue, 10..11);
    }

    #[test]
    fn a_token_of_several_waits_is_one_step_anchored_at_the_end() {
        // Prompt groups 7 8 9 share their tail (8 9) with the token pattern 5 8 9.
        let mut s = vec![1, 1, 7, 8, 9];
        for _ in 0..4 {
            s.extend([5, 8, 9]);
        }
        s.push(0);
        let w = work(s.len());
        let seg = segment(&s, &[], &w, StepRule::Auto, Anchor::End);
        let p = seg.period.expect("a period");
        assert_eq!((p.period, p.count, p.end()), (3, 4, 17));
        assert_eq!(seg.steps[1], (Phase::Decode, 5..8));
    }

    #[test]
    fn a_first_token_submitted_differently_joins_by_its_work() {
        // Tokens 5 5 5 5 as submitted, but the first token (4) submitted its work (w) in
        // another split; the prompt (2) did other work (p).
        let s = [1, 2, 4, 5, 5, 5, 5];
        let w = [1, 20, 50, 50, 50, 50, 50];
        let seg = segment(&s, &w, &work(s.len()), StepRule::Auto, Anchor::End);
        let p = seg.period.expect("a period");
        assert_eq!((p.start, p.count, p.extended), (2, 5, 1));
        assert!(seg.detail.contains("the first 1 of them"), "{}", seg.detail);
    }

    #[test]
    fn a_run_cut_short_counts_its_steps_from_the_start() {
        // Prompt (1 2), tokens of two groups (5 8), killed inside the fourth token: anchored at
        // the end the steps would be (8 5); from the start they are (5 8) and the prefill is
        // the same as a complete run's.
        let s = [1, 2, 5, 8, 5, 8, 5, 8, 5];
        let w = work(s.len());
        let seg = segment(&s, &[], &w, StepRule::Auto, Anchor::Start);
        assert_eq!(seg.steps[0], (Phase::Prefill, 0..2));
        assert_eq!(seg.steps[1], (Phase::Decode, 2..4));
        assert_eq!(seg.steps.len(), 4);
        assert_eq!(seg.epilogue, 8..9);
        let end = segment(&s, &[], &w, StepRule::Auto, Anchor::End);
        assert_eq!(end.steps[0], (Phase::Prefill, 0..3));
    }

    #[test]
    fn live_files_parse_and_ignore_unused_slots() {
        let mut bytes = vec![0u8; LIVE_BYTES];
        let put = |b: &mut Vec<u8>, slot: usize, word: usize, v: u64| {
            let i = (slot * LIVE_WORDS + word) * 8;
            b[i..i + 8].copy_from_slice(&v.to_le_bytes());
        };
        put(&mut bytes, 1, 0, LIVE_MAGIC);
        put(&mut bytes, 1, 1, 3);
        put(&mut bytes, 1, 2, 7);
        put(&mut bytes, 1, 5 + 3, 42); // dispatches
        let live = parse_live(&bytes);
        assert_eq!(live.len(), 1);
        assert_eq!((live[0].device, live[0].groups_closed), (3, 7));
        assert_eq!(live[0].counters.dispatches, 42);
        assert!(parse_live(&bytes[..100]).is_empty());
    }

    #[test]
    fn wait_rule_keeps_every_group() {
        let s = [1, 2, 3, 3, 3, 3];
        let seg = segment(&s, &[], &work(6), StepRule::Wait, Anchor::End);
        assert_eq!(seg.steps.len(), 6);
        assert_eq!(seg.steps[1].0, Phase::Prefill);
        assert_eq!(seg.steps[2].0, Phase::Decode);
    }

    #[test]
    fn no_pattern_falls_back_to_waits() {
        let s = [1, 2, 3, 4];
        let seg = segment(&s, &[], &work(4), StepRule::Auto, Anchor::End);
        assert!(seg.period.is_none());
        assert_eq!(seg.steps.len(), 4);
        assert!(seg.detail.contains("no pattern"));
    }

    #[test]
    fn idle_repeats_are_not_a_decode_loop() {
        // Three empty device-idle waits at the end must not beat the real loop.
        let s = [2, 3, 3, 3, 9, 9, 9];
        let w = [true, true, true, true, false, false, false];
        let p = find_period(&s, &w, 3).expect("a period");
        assert_eq!((p.start, p.count), (1, 3));
    }

    fn group(index: u64, signature: u64, dispatches: u64, spans: Vec<RawGpuSpan>) -> RawGroup {
        let start = 1_000 + index * 100;
        RawGroup {
            device: 0,
            index,
            wait: "fence".into(),
            start_ns: start,
            end_ns: start + 100,
            signature,
            work_signature: signature,
            counters: Counters {
                submits_compute: 1,
                dispatches,
                fence_waits: 1,
                ..Counters::default()
            },
            host_spans: vec![HostSpan("wait".into(), start + 60, 40, 1)],
            gpu_spans: spans,
            dropped_timestamps: 0,
            ..RawGroup::default()
        }
    }

    fn raw(groups: Vec<RawGroup>) -> RawCapture {
        RawCapture {
            file: "layer.1.jsonl".into(),
            process: Some(RawProcess {
                raw_version: RAW_VERSION,
                pid: 1,
                exe: "/bin/prog".into(),
                timestamps: "dispatch".into(),
                layer_version: "0.1.0".into(),
            }),
            devices: vec![RawDevice {
                device: 0,
                info: DeviceMeta {
                    name: "gpu".into(),
                    ..DeviceMeta::default()
                },
                clock: ClockMeta {
                    calibrated: false,
                    method: "fence-fallback".into(),
                    max_deviation_ns: None,
                    gpu_minus_host_ns: 0,
                },
                timestamps: "dispatch".into(),
                dispatch_timing: "interval".into(),
                query_reset: "host".into(),
            }],
            ops: vec![RawOp {
                device: 0,
                id: 7,
                label: "matvec".into(),
                kind: "dispatch".into(),
            }],
            groups,
            truncated: false,
            ..RawCapture::default()
        }
    }

    #[test]
    fn raw_groups_become_a_trace() {
        // A prompt group, then 3 tokens, each with one 10 ns GPU span read at its own wait;
        // without a calibration the fence fallback puts the span's end at the wait's return.
        let mut gs = vec![group(0, 1, 9, vec![])];
        for i in 1..4 {
            gs.push(group(
                i,
                2,
                3,
                vec![RawGpuSpan(i, 0, 7, 0, 50_000, 50_010, 1)],
            ));
        }
        let run = ProgramRun {
            program: "prog".into(),
            exit_code: Some(0),
            ..ProgramRun::default()
        };
        let t =
            build_trace(&[raw(gs)], &run, StepRule::Auto, &Default::default()).expect("a trace");
        assert_eq!(t.tokens.len(), 4);
        assert_eq!(t.tokens[0].phase, Phase::Prefill);
        assert_eq!(t.meta.run.decode_tokens, 3);
        assert_eq!(t.meta.knobs.mode, UNKNOWN);
        assert_eq!(t.ops[0].label, "matvec");
        let c = t.meta.capture.as_ref().expect("capture");
        assert!(c.complete);
        assert_eq!(c.period_waits, 1);
        let d = &t.tokens[2];
        assert_eq!(d.counters.dispatches, 3);
        assert_eq!((d.host_wait_ns, d.host_enqueue_ns), (40, 60));
        assert_eq!(d.gpu_spans.len(), 1);
        let g = d.gpu_spans[0];
        // Relative to the epoch (the first group's start, 1000): the step ends at 1300 - 1000.
        assert_eq!(
            (g.op(), g.dur_ns(), g.start_ns() + g.dur_ns()),
            (0, 10, 300)
        );
        assert_eq!(d.gpu_busy_ns, Some(10));
    }

    #[test]
    fn a_step_is_written_once_the_wait_that_reads_its_spans_back_is_read() {
        // Group i's span is read back at wait i + 1 (the last one's at its own wait).
        let mut gs = vec![group(0, 1, 9, vec![])];
        for i in 1..5 {
            let mut spans = Vec::new();
            if i > 1 {
                spans.push(RawGpuSpan(i - 1, 0, 7, 0, 50_000, 50_010, 1));
            }
            if i == 4 {
                spans.push(RawGpuSpan(4, 0, 7, 0, 60_000, 60_010, 1));
            }
            gs.push(group(i, 2, 3, spans));
        }
        let raw = raw(gs);
        let run = ProgramRun {
            program: "prog".into(),
            exit_code: Some(0),
            ..ProgramRun::default()
        };
        let plan = Plan::new(
            &[RawHeads::of(&raw)],
            &run,
            StepRule::Auto,
            &Default::default(),
        )
        .expect("a plan");
        let mut stream = StepStream::new(&plan);
        let mut out = Vec::new();
        let mut written_after = Vec::new();
        for g in &raw.groups {
            stream
                .feed(g, &mut |t| {
                    out.push(t);
                    Ok::<(), CaptureError>(())
                })
                .expect("feed");
            written_after.push(out.len());
        }
        stream
            .finish(&mut |t| {
                out.push(t);
                Ok::<(), CaptureError>(())
            })
            .expect("finish");
        // The prologue at once; each decode step once the next wait has read its span back.
        assert_eq!(written_after, [1, 1, 2, 3, 5]);
        assert!(out[1..].iter().all(|t| t.gpu_spans.len() == 1));
        let indices: Vec<u32> = out.iter().map(|t| t.index).collect();
        assert_eq!(indices, [0, 1, 2, 3, 4]);
        // The same records as the trace built in memory.
        let whole = build_trace(
            std::slice::from_ref(&raw),
            &run,
            StepRule::Auto,
            &Default::default(),
        )
        .expect("trace");
        assert_eq!(whole.tokens, out);
    }

    #[test]
    fn a_killed_program_keeps_its_prefill_and_its_unwritten_work_is_the_tail() {
        // A prompt group, then tokens of two groups (2 3), killed after 3.5 tokens; the live
        // file saw 4 dispatches submitted after the last record.
        let sigs = [1, 2, 3, 2, 3, 2, 3, 2];
        let gs: Vec<RawGroup> = sigs
            .iter()
            .enumerate()
            .map(|(i, &s)| group(i as u64, s, s, vec![]))
            .collect();
        let mut written = Counters::default();
        for g in &gs {
            written.add(&g.counters);
        }
        let mut r = raw(gs);
        let mut live = written;
        live.dispatches += 4;
        live.submits_compute += 1;
        r.live = vec![LiveDevice {
            device: 0,
            groups_closed: 8,
            open_start_ns: 0,
            last_submit_ns: 2_000,
            counters: live,
        }];
        let run = ProgramRun {
            program: "prog".into(),
            signal: Some(9),
            ..ProgramRun::default()
        };
        let t = build_trace(&[r], &run, StepRule::Auto, &Default::default()).expect("a trace");
        assert_eq!(t.tokens[0].phase, Phase::Prefill);
        assert_eq!(t.tokens[0].counters.dispatches, 1, "the prompt group alone");
        assert_eq!(t.tokens.len(), 4);
        assert!(t.tokens[1..].iter().all(|s| s.counters.dispatches == 5));
        let c = t.meta.capture.expect("capture");
        assert!(!c.complete);
        let tail = c.tail.expect("a tail");
        // The half token's group (2 dispatches) and the unwritten 4.
        assert_eq!(tail.counters.dispatches, 6);
        assert!(tail.reason.contains("signal 9"), "{}", tail.reason);
        assert!(
            c.notes.iter().any(|n| n.contains("meta.capture.tail")),
            "{:?}",
            c.notes
        );
    }

    #[test]
    fn programs_without_vulkan_work_are_errors_and_failures_are_notes() {
        let run = ProgramRun {
            program: "prog".into(),
            exit_code: Some(3),
            ..ProgramRun::default()
        };
        let none = RawCapture::default();
        assert!(matches!(
            build_trace(&[none], &run, StepRule::Auto, &Default::default()),
            Err(CaptureError::NoVulkan { .. })
        ));
        let mut no_device = raw(vec![]);
        no_device.devices.clear();
        assert!(matches!(
            build_trace(&[no_device], &run, StepRule::Auto, &Default::default()),
            Err(CaptureError::NoDevice { .. })
        ));
        assert!(matches!(
            build_trace(&[raw(vec![])], &run, StepRule::Auto, &Default::default()),
            Err(CaptureError::NoWork { .. })
        ));
        let mut cut = raw(vec![group(0, 1, 1, vec![])]);
        cut.truncated = true;
        let t = build_trace(&[cut], &run, StepRule::Auto, &Default::default()).expect("a trace");
        let c = t.meta.capture.expect("capture");
        assert!(!c.complete);
        assert_eq!(c.exit_code, Some(3));
        assert_eq!(c.notes.len(), 2, "{:?}", c.notes);
    }

    /// A process record of this raw version, as the layer writes it (without its newline).
    fn process_line() -> String {
        serde_json::to_string(&RawRecord::Process(RawProcess {
            raw_version: RAW_VERSION,
            ..RawProcess::default()
        }))
        .expect("serialize")
    }

    #[test]
    fn a_cut_last_line_is_dropped_and_flagged() {
        let good = process_line();
        let text = format!("{good}\n{{\"group\": {{\"dev");
        let r = parse_raw("x", &text).expect("parse");
        assert!(r.truncated);
        assert!(r.process.is_some());
        let bad = format!("{good}\nnot json\n");
        assert!(matches!(
            parse_raw("x", &bad),
            Err(CaptureError::Invalid { line: 2, .. })
        ));
    }

    #[test]
    fn the_zero_end_of_a_mapped_file_ends_its_records() {
        let good = process_line();
        let zeros = "\0".repeat(5000);
        // Killed between two records: everything is kept, nothing is cut.
        let r = parse_raw("x", &format!("{good}\n{zeros}")).expect("parse");
        assert!(!r.truncated);
        assert!(r.process.is_some());
        // Killed while copying a record: the partial one is dropped and flagged.
        let r = parse_raw("x", &format!("{good}\n{{\"group\": {{\"dev{zeros}")).expect("parse");
        assert!(r.truncated);
        assert!(r.process.is_some());
        // Zero bytes inside a line are not an end of records.
        assert!(matches!(
            parse_raw("x", &format!("{good}\nx{zeros}\n")),
            Err(CaptureError::Invalid { line: 2, .. })
        ));
    }
}
