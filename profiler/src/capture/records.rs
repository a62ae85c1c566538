//! The step records of a trace, built one wait group at a time: [`StepStream`] takes the traced
//! device's groups in file order and hands out each step's [`TokenRecord`] as soon as every GPU
//! span it needs has been read (spans are read back at later waits than their submits'), so a
//! trace of any length is written holding a few steps, not the program's whole run.

use std::collections::{BTreeMap, VecDeque};

use super::{Plan, RawGpuSpan, RawGroup};
use crate::trace::{Counters, GpuSpan, HostSpan, Phase, TokenRecord};

/// A step's groups so far: everything its record needs but the GPU spans, which are looked up
/// when it is complete.
#[derive(Debug)]
struct StepAcc {
    step: usize,
    phase: Phase,
    start_ns: u64,
    end_ns: u64,
    counters: Counters,
    /// The `token` span first (its length is known at the end), then the groups' spans.
    host_spans: Vec<HostSpan>,
    wait_ns: u64,
    gpu_untimed: u64,
    /// (group index, submits of the step before it): where the group's GPU spans go.
    parts: Vec<(u64, u32)>,
    submits_before: u32,
}

/// Turns the traced device's wait groups into step records, in order (see the module docs).
#[derive(Debug)]
pub struct StepStream<'p> {
    plan: &'p Plan,
    /// Position of the next group of the traced device.
    pos: usize,
    /// The step the next group belongs to.
    step: usize,
    open: Option<StepAcc>,
    /// Steps whose groups are all read, waiting for GPU spans reported later.
    pending: VecDeque<StepAcc>,
    spans_of: BTreeMap<u64, Vec<RawGpuSpan>>,
    emitted: u32,
    decode_index: u32,
}

impl<'p> StepStream<'p> {
    pub fn new(plan: &'p Plan) -> Self {
        StepStream {
            plan,
            pos: 0,
            step: 0,
            open: None,
            pending: VecDeque::new(),
            spans_of: BTreeMap::new(),
            emitted: 0,
            decode_index: 0,
        }
    }

    /// Takes the next group of the plan's raw file (groups of other devices are skipped) and
    /// hands every step that became complete to `emit`, in order.
    pub fn feed<E>(
        &mut self,
        g: &RawGroup,
        emit: &mut impl FnMut(TokenRecord) -> Result<(), E>,
    ) -> Result<(), E> {
        if g.device != self.plan.device() {
            return Ok(());
        }
        for s in &g.gpu_spans {
            self.spans_of.entry(s.0).or_default().push(*s);
        }
        let p = self.pos;
        self.pos += 1;
        if let Some((phase, range)) = self.plan.steps.get(self.step)
            && range.contains(&p)
        {
            let step = self.step;
            let epoch = self.plan.epoch;
            let acc = self.open.get_or_insert_with(|| StepAcc {
                step,
                phase: *phase,
                start_ns: g.start_ns,
                end_ns: g.end_ns,
                counters: Counters::default(),
                host_spans: vec![HostSpan(
                    "token".into(),
                    g.start_ns.saturating_sub(epoch),
                    0,
                    0,
                )],
                wait_ns: 0,
                gpu_untimed: 0,
                parts: Vec::new(),
                submits_before: 0,
            });
            acc.end_ns = g.end_ns;
            acc.counters.add(&g.counters);
            acc.gpu_untimed += self.plan.untimed_of.get(&g.index).copied().unwrap_or(0);
            for h in &g.host_spans {
                if h.0 == "wait" {
                    acc.wait_ns += h.2;
                }
                acc.host_spans
                    .push(HostSpan(h.0.clone(), h.1.saturating_sub(epoch), h.2, h.3));
            }
            acc.parts.push((g.index, acc.submits_before));
            acc.submits_before += g.counters.submits() as u32;
            if p + 1 == range.end
                && let Some(done) = self.open.take()
            {
                self.pending.push_back(done);
                self.step += 1;
            }
        }
        self.emit_ready(Some(p), emit)
    }

    /// Hands out the steps still waiting (every group has been read).
    pub fn finish<E>(
        mut self,
        emit: &mut impl FnMut(TokenRecord) -> Result<(), E>,
    ) -> Result<(), E> {
        self.emit_ready(None, emit)
    }

    /// Emits the pending steps whose spans have all been read by position `read` (all: `None`).
    fn emit_ready<E>(
        &mut self,
        read: Option<usize>,
        emit: &mut impl FnMut(TokenRecord) -> Result<(), E>,
    ) -> Result<(), E> {
        while let Some(acc) = self.pending.front() {
            if read.is_some_and(|p| self.plan.ready_at[acc.step] > p) {
                break;
            }
            let Some(acc) = self.pending.pop_front() else {
                break;
            };
            let record = self.record(acc);
            emit(record)?;
        }
        Ok(())
    }

    /// The record of a complete step; its groups' GPU spans are dropped from memory.
    fn record(&mut self, acc: StepAcc) -> TokenRecord {
        let plan = self.plan;
        let epoch = plan.epoch;
        let start = acc.start_ns;
        let wall = acc.end_ns.saturating_sub(start);
        let mut raw_spans: Vec<(RawGpuSpan, u32)> = Vec::new();
        for (g, submits_before) in &acc.parts {
            if let Some(v) = self.spans_of.remove(g) {
                raw_spans.extend(v.iter().map(|s| (*s, s.1 + submits_before)));
            }
        }
        let gpu_spans = place_gpu_spans(
            &raw_spans,
            &plan.op_index,
            plan.gpu_minus_host_ns,
            epoch,
            start,
            acc.end_ns,
        );
        let gpu_busy_ns = plan
            .timestamps_on
            .then(|| crate::stats::union_ns(&gpu_spans));
        let position = match acc.phase {
            Phase::Prefill => 0,
            Phase::Decode => {
                self.decode_index += 1;
                self.decode_index - 1
            }
        };
        let mut host_spans = acc.host_spans;
        if let Some(token) = host_spans.first_mut() {
            token.2 = wall;
        }
        let index = self.emitted;
        self.emitted += 1;
        TokenRecord {
            index,
            phase: acc.phase,
            position,
            n_tokens: 1,
            kv_len: 0,
            token_id: None,
            start_ns: start.saturating_sub(epoch),
            wall_ns: wall,
            host_enqueue_ns: wall.saturating_sub(acc.wait_ns),
            host_wait_ns: acc.wait_ns,
            gpu_busy_ns,
            counters: acc.counters,
            host_spans,
            gpu_spans,
            gpu_untimed: acc.gpu_untimed,
        }
    }
}

/// GPU spans of one step on the host timeline, relative to `epoch`. With a calibration
/// (`gpu_minus_host_ns`), exact; without one, the step's last GPU end is aligned with the moment
/// its last wait returned (`step_end_ns`), as the decoder's fence fallback does.
fn place_gpu_spans(
    raw: &[(RawGpuSpan, u32)],
    op_index: &BTreeMap<u32, u32>,
    gpu_minus_host_ns: Option<i64>,
    epoch: u64,
    step_start_ns: u64,
    step_end_ns: u64,
) -> Vec<GpuSpan> {
    if raw.is_empty() {
        return Vec::new();
    }
    let offset = match gpu_minus_host_ns {
        Some(o) => o,
        None => {
            let last = raw.iter().map(|(s, _)| s.5).max().unwrap_or(0);
            last as i64 - step_end_ns as i64
        }
    };
    let mut out: Vec<GpuSpan> = raw
        .iter()
        .filter_map(|(s, submit)| {
            let op = *op_index.get(&s.2)?;
            let a = s.4 as i64 - offset - epoch as i64;
            let b = s.5 as i64 - offset - epoch as i64;
            let start = a.max(step_start_ns as i64 - epoch as i64).max(0) as u64;
            let end = b.max(a).max(0) as u64;
            Some(GpuSpan(
                op,
                start,
                end.saturating_sub(start),
                s.3,
                *submit,
                s.6,
            ))
        })
        .collect();
    out.sort_by_key(|s| (s.1, s.0));
    out
}
