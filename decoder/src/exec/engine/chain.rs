//! Chained decode steps (`--sync chained`): the GPU runs the decode steps back to back, with no
//! host round trip between them.
//!
//! Under the other sync values the host submits a step, waits for it, reads its token and writes
//! that token into the next step's ids before submitting it. Chained, each decode call submits
//! the *next* step before it waits for this one:
//!
//! - the decode steps alternate between two recorded programs (slots 0 and 1). Each slot has its
//!   own host-visible `Params`, `ArgmaxOut` and `LogitsReadback` (`Buf::*Alt` in slot 1), fence,
//!   query pool and transient descriptor pools, so the host writes one step's parameters while
//!   the GPU runs the other step;
//! - a slot's program reads its token ids from the other slot's `ArgmaxOut` (its first words are
//!   the previous step's argmax), bound where the other programs bind `Ids`: the token passes
//!   from step to step with no copy and no command of its own. Where the caller gives the token
//!   (the first step after a prompt), the host writes it there. Every program ends with a full
//!   barrier before its readback, which also orders the next submission after it, so two steps
//!   never overlap on the device (the persistent kernel needs the whole GPU);
//! - the host reads this step's token, and the next call checks that the caller passes that very
//!   token at the next position (greedy decoding does, with or without the logits read back). If
//!   it passes another one (sampling, a forced token), the step submitted ahead is waited for and
//!   dropped, and the step runs with the caller's token. Its KV writes went to the position the
//!   new step writes again, so nothing reads them.
//!
//! This takes the host off the path between steps, but not the device's own cost of a submission
//! boundary, which the host's round trip used to overlap (docs/performance.md).
//!
//! A prompt step, a change of timestamps or attention path first waits for the step in flight and
//! drops it (`drain_chain`), as does the end of generation (the step after the last token never
//! makes a record). A chained step's trace record counts its own submits and fence waits; its wall
//! time runs from the previous chained step's completion (the rate the caller sees), or from its
//! submit where there was none.

use anyhow::anyhow;
use profiler::trace::{Counters, GpuSpan};

use super::{Engine, Prepared, StepRun};
use crate::exec::kernels::RowParams;
use crate::exec::knobs::Sync;
use crate::exec::program::{Buf, Step, StepKind};
use crate::exec::spans::SpanLog;
use crate::generate::StepOutput;
use crate::kv::window_start;
use crate::vk::host_now_ns;

/// The state of the chain between decode calls.
#[derive(Default)]
pub(super) struct Chain {
    /// The step submitted ahead of its call.
    in_flight: Option<InFlight>,
    /// The slot the next submitted step uses.
    next_slot: usize,
    /// When the host saw the last chained step complete (None after a dropped step).
    last_done_ns: Option<u64>,
}

/// A submitted chained step.
pub(super) struct InFlight {
    slot: usize,
    rows: Vec<RowParams>,
    /// The step's token ids: the caller's, or (submitted ahead) the previous step's argmax once
    /// the host has read it; None before that.
    ids: Option<Vec<u32>>,
    log: SpanLog,
    token_span: usize,
    start_ns: u64,
    /// What its submission counted.
    counters: Counters,
}

/// The slot-1 twin of a host-visible per-step buffer.
pub(super) fn alt_of(buf: Buf) -> Option<Buf> {
    match buf {
        Buf::Params => Some(Buf::ParamsAlt),
        Buf::ArgmaxOut => Some(Buf::ArgmaxOutAlt),
        Buf::LogitsReadback => Some(Buf::LogitsReadbackAlt),
        _ => None,
    }
}

/// Binds a lowered decode program to chain slot `slot`: its per-step buffers to the slot's
/// (the `*Alt` twins in slot 1), and its token ids to the other slot's argmax.
pub(super) fn bind_slot(steps: &mut [Step], slot: usize) {
    for st in steps.iter_mut() {
        for b in st.binds.iter_mut() {
            b.range.buf = match b.range.buf {
                Buf::Ids => Engine::slot_buf(Buf::ArgmaxOut, 1 - slot),
                buf => Engine::slot_buf(buf, slot),
            };
        }
    }
}

/// The rows of the step after `rows`: every sequence one position on.
fn next_rows(rows: &[RowParams], window: u32) -> Vec<RowParams> {
    rows.iter()
        .map(|r| RowParams {
            pos: r.pos + 1,
            lo: window_start(r.pos + 1, window),
            ..*r
        })
        .collect()
}

impl Engine {
    pub(super) fn chained(&self) -> bool {
        self.opts.knobs.sync == Sync::Chained
    }

    /// Under `--sync chained`, builds the second decode program (slot 1); drops it otherwise.
    /// Called whenever the decode program is rebuilt.
    pub(super) fn prepare_chain(&mut self) -> anyhow::Result<()> {
        self.decode_alt = if self.chained() {
            let rows = self.opts.kv.batch.max(1);
            Some(self.prepare_slot(rows, StepKind::Decode, 1)?)
        } else {
            None
        };
        Ok(())
    }

    /// One chained decode step: this step (already in flight when the caller passes the token
    /// the GPU took), the next one submitted ahead, then this one's outputs.
    pub(super) fn run_chained(
        &mut self,
        tokens: &[u32],
        rows: &[RowParams],
    ) -> anyhow::Result<Vec<StepOutput>> {
        let ahead = self.chain.in_flight.take();
        let cur = match ahead {
            Some(f) if f.rows == rows && f.ids.as_deref() == Some(tokens) => f,
            Some(f) => {
                self.drop_step(f)?;
                self.submit_chained(Some(tokens), rows)?
            }
            None => self.submit_chained(Some(tokens), rows)?,
        };
        let next = next_rows(rows, self.kv.window);
        if next.iter().all(|r| r.pos < self.shape.max_seq) {
            match self.submit_chained(None, &next) {
                Ok(f) => self.chain.in_flight = Some(f),
                Err(e) => {
                    // Wait for this step before reporting, so nothing is left running.
                    let _ = self.complete_chained(cur);
                    return Err(e);
                }
            }
        }
        let outs = self.complete_chained(cur)?;
        if let Some(f) = &mut self.chain.in_flight {
            f.ids = Some(outs.iter().map(|o| o.argmax).collect());
        }
        Ok(outs)
    }

    /// Waits for the step submitted ahead, if any, and drops it.
    pub(super) fn drain_chain(&mut self) -> anyhow::Result<()> {
        match self.chain.in_flight.take() {
            Some(f) => self.drop_step(f),
            None => Ok(()),
        }
    }

    fn drop_step(&mut self, f: InFlight) -> anyhow::Result<()> {
        self.chain.last_done_ns = None;
        let mut log = f.log;
        let r = self.wait_slot(f.slot, f.rows.len(), &mut log, f.start_ns);
        // Its counters are no step's.
        self.rec.take_counters();
        r.map(|_| ())
    }

    /// Submits a decode step on the next slot: with the caller's `tokens`, or (None) with the
    /// previous step's argmax, which the program reads where that step left it.
    fn submit_chained(
        &mut self,
        tokens: Option<&[u32]>,
        rows: &[RowParams],
    ) -> anyhow::Result<InFlight> {
        let start_ns = host_now_ns();
        let mut log = SpanLog::new(self.epoch_ns);
        let token_span = log.open("token", 0);
        self.ensure_blocks(rows)?;
        let slot = self.chain.next_slot;
        let mut p = self.take_slot(slot)?;
        let r = self.submit_prepared(&mut p, tokens, rows, &mut log);
        self.put_slot(p);
        r?;
        self.chain.next_slot = 1 - slot;
        Ok(InFlight {
            slot,
            rows: rows.to_vec(),
            ids: tokens.map(<[u32]>::to_vec),
            log,
            token_span,
            start_ns,
            counters: self.rec.take_counters(),
        })
    }

    /// Waits for a chained step and records it.
    fn complete_chained(&mut self, f: InFlight) -> anyhow::Result<Vec<StepOutput>> {
        let mut log = f.log;
        let (outs, gpu_spans, gpu_busy) =
            self.wait_slot(f.slot, f.rows.len(), &mut log, f.start_ns)?;
        log.close(f.token_span);
        let done = host_now_ns();
        let from = self
            .chain
            .last_done_ns
            .map_or(f.start_ns, |d| d.max(f.start_ns));
        self.chain.last_done_ns = Some(done);
        let mut counters = f.counters;
        counters.add(&self.rec.take_counters());
        self.push_record(StepRun {
            kind: StepKind::Decode,
            rows: &f.rows,
            outs: &outs,
            log,
            start_ns: f.start_ns,
            wall_ns: done.saturating_sub(from),
            counters,
            gpu_spans,
            gpu_busy,
        })?;
        Ok(outs)
    }

    /// Waits for the step of `n` rows that slot `slot`'s program runs and reads it back.
    #[allow(clippy::type_complexity)]
    fn wait_slot(
        &mut self,
        slot: usize,
        n: usize,
        log: &mut SpanLog,
        start_ns: u64,
    ) -> anyhow::Result<(Vec<StepOutput>, Vec<GpuSpan>, Option<u64>)> {
        let mut p = self.take_slot(slot)?;
        let r = self.complete_prepared(&mut p, n as u32, log, start_ns);
        self.put_slot(p);
        r
    }

    fn take_slot(&mut self, slot: usize) -> anyhow::Result<Prepared> {
        let p = if slot == 1 {
            self.decode_alt.take()
        } else {
            self.decode.take()
        };
        p.ok_or_else(|| anyhow!("internal: chained decode program {slot} missing"))
    }

    fn put_slot(&mut self, p: Prepared) {
        if p.slot == 1 {
            self.decode_alt = Some(p);
        } else {
            self.decode = Some(p);
        }
    }
}
