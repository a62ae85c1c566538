//! The trace record of each step that ran: counters, host spans, GPU spans on the host timeline.

use profiler::trace::{GpuSpan, Phase, TokenRecord};

use super::{Engine, Prepared, StepRun};
use crate::exec::attention::gather_bytes;
use crate::exec::kernels::RowParams;
use crate::exec::program::StepKind;

impl Engine {
    /// Appends the trace record of a step that ran.
    pub(super) fn push_record(&mut self, r: StepRun<'_>) {
        let StepRun {
            kind,
            rows,
            outs,
            log,
            start_ns,
            wall_ns,
            mut counters,
            gpu_spans,
            gpu_busy,
        } = r;
        let host_wait_ns = log.total_ns("wait");
        let host_enqueue_ns =
            log.total_ns("record") + log.total_ns("descriptors") + log.total_ns("submit");
        // Positions attended: the last row of a prompt chunk, every row of a decode step.
        let attended = |r: &RowParams| (r.pos + 1 - r.lo) as u64;
        let kv_positions: u64 = match kind {
            StepKind::Prefill => rows.last().map_or(0, attended),
            StepKind::Decode => rows.iter().map(attended).sum(),
        };
        if self.kv.scratch.is_some() {
            // The gather copies what every row attends (the whole chunk range for a prompt).
            let gathered: u64 = match kind {
                StepKind::Prefill => match (rows.first(), rows.last()) {
                    (Some(a), Some(b)) => (b.pos + 1 - a.lo) as u64,
                    _ => 0,
                },
                StepKind::Decode => kv_positions,
            };
            counters.kv_bytes_copied += gather_bytes(
                self.shape.layers,
                self.shape.kv_dim(),
                self.kv.geo.dtype.bytes(),
                gathered,
            );
        }
        let phase = match kind {
            StepKind::Prefill => Phase::Prefill,
            StepKind::Decode => Phase::Decode,
        };
        self.records.push(TokenRecord {
            index: self.records.len() as u32,
            phase,
            position: rows.first().map_or(0, |r| r.pos),
            n_tokens: rows.len() as u32,
            kv_len: kv_positions as u32,
            token_id: outs.first().map(|o| o.argmax),
            start_ns: start_ns.saturating_sub(self.epoch_ns),
            wall_ns,
            host_enqueue_ns,
            host_wait_ns,
            gpu_busy_ns: gpu_busy,
            counters,
            host_spans: log.spans,
            gpu_spans,
            gpu_untimed: 0,
        });
    }

    /// Converts raw timestamps to GPU spans on the host timeline (relative to the epoch) and the
    /// step's GPU busy time (the union of its spans).
    pub(super) fn gpu_spans(
        &self,
        p: &Prepared,
        raw: &[u64],
        wait_end: u64,
        start_ns: u64,
    ) -> (Vec<GpuSpan>, Option<u64>) {
        if p.spans.is_empty() || raw.is_empty() {
            return (Vec::new(), None);
        }
        let ns = |t: u64| ((t & self.valid_mask) as f64 * self.period_ns) as i64;
        let offset = if self.clock.calibrated {
            self.clock.gpu_minus_host_ns
        } else {
            // Fallback: the step's last GPU timestamp happened no later than the wait returned.
            let last_end = p
                .spans
                .iter()
                .map(|s| ns(raw[s.end_q as usize]))
                .max()
                .unwrap_or(0);
            last_end - wait_end as i64
        };
        let epoch = self.epoch_ns as i64;
        let mut spans: Vec<GpuSpan> = p
            .spans
            .iter()
            .map(|s| {
                let a = ns(raw[s.start_q as usize]) - offset - epoch;
                let b = ns(raw[s.end_q as usize]) - offset - epoch;
                let start = a.max(start_ns as i64 - epoch).max(0) as u64;
                let end = (b.max(a)).max(0) as u64;
                GpuSpan(
                    s.op,
                    start,
                    end.saturating_sub(start),
                    0,
                    p.chunk_of_step[s.first],
                )
            })
            .collect();
        spans.sort_by_key(|s| s.1);
        let busy = profiler::stats::union_ns(&spans);
        (spans, Some(busy))
    }
}
