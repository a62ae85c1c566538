//! The trace record of each step that ran (counters, host spans, GPU spans on the host
//! timeline) and where the records go: kept whole in memory, or streamed into a trace file.

use anyhow::Context as _;
use profiler::io::{StagedOutput, TraceWriter};
use profiler::trace::{GpuSpan, Meta, Phase, TokenRecord};

use super::{Engine, Prepared, StepRun};
use crate::exec::attention::gather_bytes;
use crate::exec::kernels::RowParams;
use crate::exec::program::StepKind;

/// Where the trace records of the steps that ran go. By default each record is kept whole in
/// memory (the bench rewinds them, the tests read their spans). Once [`Engine::stream_records`]
/// hands it a writer, each record is written to the trace as its step finishes and kept without
/// its host and GPU spans (the counters and times the summaries read: a few hundred bytes a
/// step, where a dispatch-level record is tens of kilobytes), so a long capture's memory does
/// not grow with its trace.
#[derive(Debug, Default)]
pub(super) struct RecordLog {
    kept: Vec<TokenRecord>,
    stream: Option<TraceWriter>,
}

impl RecordLog {
    fn push(&mut self, mut record: TokenRecord) -> anyhow::Result<()> {
        if let Some(out) = &mut self.stream {
            out.push(&record)
                .context("cannot write the step's trace record")?;
            strip_spans(&mut record);
        }
        self.kept.push(record);
        Ok(())
    }
}

/// A record without its host and GPU spans (what a streamed log keeps in memory).
fn strip_spans(record: &mut TokenRecord) {
    record.host_spans = Vec::new();
    record.gpu_spans = Vec::new();
}

impl Engine {
    /// The trace records of the steps run so far; once streaming
    /// ([`Engine::stream_records`]), those written to the trace carry no host or GPU spans.
    pub fn records(&self) -> &[TokenRecord] {
        &self.records.kept
    }

    /// Forgets the step records from `len` on (the bench rewinds the decode steps of one
    /// setting before it measures the next on the same prompt). Records already streamed into a
    /// trace stay in it: rewinding is for the in-memory log.
    pub fn truncate_records(&mut self, len: usize) {
        self.records.kept.truncate(len);
    }

    /// Writes every step's record into `out` as the step finishes, from now on (the records
    /// kept so far first); [`Engine::finish_stream`] completes the trace.
    pub fn stream_records(&mut self, mut out: TraceWriter) -> anyhow::Result<()> {
        for record in &mut self.records.kept {
            out.push(record)
                .context("cannot write a step's trace record")?;
            strip_spans(record);
        }
        self.records.stream = Some(out);
        Ok(())
    }

    /// Completes the trace that [`Engine::stream_records`] started with `meta` and the ops of
    /// every step so far, and returns it staged beside its path, to be renamed into place by
    /// [`StagedOutput::commit`]. The engine keeps its records in memory again afterwards.
    pub fn finish_stream(&mut self, meta: &Meta) -> anyhow::Result<StagedOutput> {
        let out = self
            .records
            .stream
            .take()
            .ok_or_else(|| anyhow::anyhow!("internal: no trace is being streamed"))?;
        Ok(out.finish(meta, &self.ops)?)
    }

    /// Appends the trace record of a step that ran.
    pub(super) fn push_record(&mut self, r: StepRun<'_>) -> anyhow::Result<()> {
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
            index: self.records.kept.len() as u32,
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
        })
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
                    1,
                )
            })
            .collect();
        spans.sort_by_key(|s| s.1);
        let busy = profiler::stats::union_ns(&spans);
        (spans, Some(busy))
    }
}
