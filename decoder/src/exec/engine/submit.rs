//! Recording and submission: descriptor sets by the `descriptors` knob, barriers by the
//! `barriers` knob, command buffers recorded (or replayed) and submitted, and the wait and
//! readback that complete a step.

use anyhow::{anyhow, bail};
use profiler::trace::GpuSpan;

use super::{Engine, Prepared, chain};
use crate::exec::kernels::{RowParams, TokenParams, params_bytes};
use crate::exec::knobs::{Barriers, Descriptors, Recording, Sync};
use crate::exec::program::{Access, Action, Bind, Buf, Grid, Step, StepKind};
use crate::exec::spans::SpanLog;
use crate::generate::{StepOutput, argmax};
use crate::host_span;
use crate::vk::{DescSet, FenceId, PipelineDesc, SetLifetime, host_now_ns};

impl Engine {
    /// `n` little-endian words of the host-visible buffer `buf`, from byte `offset`.
    pub(super) fn read_u32s(
        &mut self,
        buf: Buf,
        offset: u64,
        n: usize,
    ) -> anyhow::Result<Vec<u32>> {
        let b = self
            .bufs
            .get(&buf)
            .ok_or_else(|| anyhow!("internal: buffer {buf:?} missing"))?;
        let mut bytes = vec![0u8; 4 * n];
        self.rec.read(b, offset, &mut bytes)?;
        Ok(bytes
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    pub(super) fn write_new_set(
        &mut self,
        step: &Step,
        lifetime: SetLifetime,
    ) -> anyhow::Result<DescSet> {
        let desc = self.pipeline_desc(step);
        self.pipeline(desc)?;
        let Engine {
            rec,
            pipelines,
            bufs,
            tied,
            ..
        } = self;
        let p = pipelines
            .get(&desc)
            .ok_or_else(|| anyhow!("internal: pipeline missing"))?;
        let set = rec.alloc_set(p, lifetime)?;
        let ranges = Self::ranges(bufs, *tied, &step.binds)?;
        rec.write_set(set, &ranges);
        Ok(set)
    }

    /// Descriptor sets for the dispatches of chunk `c` that need one now (per-dispatch: a new set
    /// each time; cached: the first time a binding combination is seen).
    pub(super) fn chunk_sets(
        &mut self,
        p: &Prepared,
        c: usize,
    ) -> anyhow::Result<Vec<Option<DescSet>>> {
        let range = p.chunks[c].1.clone();
        let mut out = Vec::with_capacity(range.len());
        // A recording that is replayed keeps referencing its sets, so they must outlive the
        // per-step reset of the transient pool (which the prompt's step still performs).
        let replayed = self.opts.knobs.recording == Recording::Once && p.kind == StepKind::Decode;
        let lifetime = if replayed {
            SetLifetime::Persistent
        } else {
            SetLifetime::Transient
        };
        for i in range {
            let step = &p.steps[i];
            let set = match (&step.action, self.opts.knobs.descriptors) {
                (Action::Dispatch { .. }, Descriptors::PerDispatch) => {
                    Some(self.write_new_set(step, lifetime)?)
                }
                (Action::Dispatch { .. }, Descriptors::Cached) => {
                    let key = (
                        self.pipeline_desc(step),
                        step.binds
                            .iter()
                            .map(|b| (b.range.buf, b.range.offset, b.range.bytes))
                            .collect::<Vec<_>>(),
                    );
                    match self.cached_sets.get(&key) {
                        Some(s) => Some(*s),
                        None => {
                            let s = self.write_new_set(step, SetLifetime::Persistent)?;
                            self.cached_sets.insert(key, s);
                            Some(s)
                        }
                    }
                }
                (Action::Dispatch { .. }, Descriptors::BoundOnce) => p.sets[i],
                _ => None,
            };
            out.push(set);
        }
        Ok(out)
    }

    /// Records chunk `c` of `p` for a step whose rows attend up to `kv_len` positions (only
    /// KV-scaled grids depend on it; replayed programs have none).
    pub(super) fn record_chunk(
        &mut self,
        p: &mut Prepared,
        c: usize,
        kv_len: u32,
        log: &mut SpanLog,
    ) -> anyhow::Result<()> {
        let sets = if matches!(
            self.opts.knobs.descriptors,
            Descriptors::PerDispatch | Descriptors::Cached
        ) {
            host_span!(log, "descriptors", 1, { self.chunk_sets(p, c)? })
        } else {
            p.chunks[c].1.clone().map(|i| p.sets[i]).collect()
        };
        host_span!(log, "record", 1, {
            self.record_steps(p, c, kv_len, &sets)?;
        });
        Ok(())
    }

    pub(super) fn record_steps(
        &mut self,
        p: &mut Prepared,
        c: usize,
        kv_len: u32,
        sets: &[Option<DescSet>],
    ) -> anyhow::Result<()> {
        let (cmd, range) = (p.chunks[c].0, p.chunks[c].1.clone());
        let barriers = self.opts.knobs.barriers;
        let descriptors = self.opts.knobs.descriptors;
        let descs: Vec<Option<PipelineDesc>> = range
            .clone()
            .map(|i| {
                matches!(p.steps[i].action, Action::Dispatch { .. })
                    .then(|| self.pipeline_desc(&p.steps[i]))
            })
            .collect();
        let Engine {
            rec,
            pipelines,
            bufs,
            tied,
            track,
            ..
        } = self;
        rec.begin(cmd)?;
        if c == 0 {
            // Tracking starts fresh each step: the previous step's wait, or (chained) the full
            // barrier before its readback, ordered everything before it.
            track.clear();
        }
        let mut bound: Option<PipelineDesc> = None;
        // The spans are in step order and do not overlap: cursors to the next one to open and
        // to close, instead of a scan of every span at every step.
        let mut open = p.spans.partition_point(|s| s.first < range.start);
        let mut close = p.spans.partition_point(|s| s.last < range.start);
        for (j, i) in range.clone().enumerate() {
            let step = &p.steps[i];
            if barriers == Barriers::Tracked {
                if hazard(track, &step.binds) {
                    rec.full_barrier(cmd);
                    track.clear();
                }
                touch(track, &step.binds);
            }
            if let Action::HostRead = step.action {
                continue;
            }
            if let Some(q) = &p.queries {
                while let Some(s) = p.spans.get(open).filter(|s| s.first == i) {
                    open += 1;
                    if s.own_start {
                        rec.write_timestamp(cmd, q, s.start_q, true);
                    }
                }
            }
            rec.begin_label(cmd, &step.label);
            match &step.action {
                Action::Dispatch { push, grid, .. } => {
                    let desc =
                        descs[j].ok_or_else(|| anyhow!("internal: dispatch without pipeline"))?;
                    let pl = pipelines
                        .get(&desc)
                        .ok_or_else(|| anyhow!("internal: pipeline missing"))?;
                    if bound != Some(desc) {
                        rec.bind_pipeline(cmd, pl);
                        bound = Some(desc);
                    }
                    if descriptors == Descriptors::Push {
                        let ranges = Self::ranges(bufs, *tied, &step.binds)?;
                        rec.push_set(cmd, pl, &ranges)?;
                    } else {
                        let set = sets[j].ok_or_else(|| {
                            anyhow!("internal: no descriptor set for {}", step.label)
                        })?;
                        rec.bind_set(cmd, pl, set);
                    }
                    if !push.is_empty() {
                        rec.push_constants(cmd, pl, push);
                    }
                    let groups = match *grid {
                        Grid::Fixed(g) => g,
                        Grid::KvScaled { per, y, z } => [kv_len.div_ceil(per), y, z],
                    };
                    rec.dispatch(cmd, groups);
                }
                Action::Copy => {
                    let r = Self::ranges(bufs, *tied, &step.binds)?;
                    rec.copy(cmd, r[0], r[1].buffer, r[1].offset);
                }
                Action::HostRead => {}
            }
            rec.end_label(cmd);
            if barriers == Barriers::Full {
                rec.full_barrier(cmd);
            }
            if let Some(q) = &p.queries {
                while let Some(s) = p.spans.get(close).filter(|s| s.last == i) {
                    close += 1;
                    rec.write_timestamp(cmd, q, s.end_q, false);
                }
            }
        }
        rec.end(cmd)?;
        Ok(())
    }

    /// The buffer that program slot `slot` uses for `buf` (the `*Alt` ones in slot 1).
    pub(super) fn slot_buf(buf: Buf, slot: usize) -> Buf {
        match (slot, chain::alt_of(buf)) {
            (1, Some(alt)) => alt,
            _ => buf,
        }
    }

    pub(super) fn slot_fence(&self, slot: usize) -> FenceId {
        if slot == 1 {
            self.fence_alt
        } else {
            self.fence
        }
    }

    /// Writes a step's parameters (and its token ids where `tokens` gives them: a chained step
    /// submitted ahead reads the previous step's argmax instead), records the program where it
    /// is not replayed, and submits it. Under `--sync submit` it also waits after every chunk but
    /// the last.
    pub(super) fn submit_prepared(
        &mut self,
        p: &mut Prepared,
        tokens: Option<&[u32]>,
        rows: &[RowParams],
        log: &mut SpanLog,
    ) -> anyhow::Result<()> {
        let n = rows.len() as u32;
        let k = self.opts.knobs;
        let replay = p.recorded && k.recording == Recording::Once;
        let kv_len = rows.iter().map(|r| r.pos + 1).max().unwrap_or(0);
        let mut seqs: Vec<u32> = rows.iter().map(|r| r.seq).collect();
        seqs.sort_unstable();
        seqs.dedup();
        let slot = p.slot;
        // A chained decode program reads its ids where the other slot's step leaves its argmax.
        let ids_buf = if p.kind == StepKind::Decode && self.chained() {
            Self::slot_buf(Buf::ArgmaxOut, 1 - slot)
        } else {
            Buf::Ids
        };
        host_span!(log, "record", 1, {
            let header = TokenParams {
                pos0: rows.first().map_or(0, |r| r.pos),
                n_tokens: n,
                kv_len,
                n_seqs: seqs.len() as u32,
            };
            let Engine { rec, bufs, .. } = self;
            if let Some(tokens) = tokens {
                let ids = bufs
                    .get_mut(&ids_buf)
                    .ok_or_else(|| anyhow!("internal: ids buffer missing"))?;
                rec.write(ids, 0, bytemuck::cast_slice(tokens))?;
            }
            let pb = bufs
                .get_mut(&Self::slot_buf(Buf::Params, slot))
                .ok_or_else(|| anyhow!("internal: params buffer missing"))?;
            rec.write(pb, 0, &params_bytes(&header, rows))?;
            rec.use_transient_slot(slot);
            if !replay && matches!(k.descriptors, Descriptors::PerDispatch) {
                rec.reset_transient_sets()?;
            }
            if let Some(q) = &p.queries {
                rec.reset_queries(q, 0, q.count())?;
            }
        });
        let last = p.chunks.len() - 1;
        let fence = self.slot_fence(slot);
        for c in 0..p.chunks.len() {
            if !replay {
                self.record_chunk(p, c, kv_len, log)?;
            }
            let signal = k.sync == Sync::Submit || c == last;
            host_span!(log, "submit", 1, {
                self.rec.submit(&[p.chunks[c].0], signal.then_some(fence))?;
            });
            if signal && c != last {
                host_span!(log, "wait", 1, {
                    self.rec.wait(fence)?;
                });
            }
        }
        Ok(())
    }

    /// Waits for a submitted program's last chunk and reads its results back: the outputs, the
    /// GPU spans and the GPU busy time.
    #[allow(clippy::type_complexity)]
    pub(super) fn complete_prepared(
        &mut self,
        p: &mut Prepared,
        n: u32,
        log: &mut SpanLog,
        start_ns: u64,
    ) -> anyhow::Result<(Vec<StepOutput>, Vec<GpuSpan>, Option<u64>)> {
        let fence = self.slot_fence(p.slot);
        host_span!(log, "wait", 1, {
            self.rec.wait(fence)?;
        });
        let wait_end = host_now_ns();
        let head_rows = match p.kind {
            StepKind::Prefill => 1,
            StepKind::Decode => n as usize,
        };
        let vocab = self.shape.vocab as usize;
        // Readback: the tokens (and the logits where they are read back).
        let (logits, gpu_tokens, raw_ts) = host_span!(log, "readback", 1, {
            let logits = if p.reads_logits {
                let mut bytes = vec![0u8; head_rows * vocab * 4];
                let b = self
                    .bufs
                    .get(&Self::slot_buf(Buf::LogitsReadback, p.slot))
                    .ok_or_else(|| anyhow!("internal: readback missing"))?;
                self.rec.read(b, 0, &mut bytes)?;
                Some(
                    bytes
                        .chunks_exact(4)
                        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                        .collect::<Vec<f32>>(),
                )
            } else {
                None
            };
            let gpu_tokens = if p.reads_argmax {
                Some(self.read_u32s(Self::slot_buf(Buf::ArgmaxOut, p.slot), 0, head_rows)?)
            } else {
                None
            };
            let raw = match &p.queries {
                Some(q) => self.rec.read_queries(q, 0, q.count())?,
                None => Vec::new(),
            };
            (logits, gpu_tokens, raw)
        });
        self.check_persistent_status(p.kind, n, p.slot)?;
        let outs = host_span!(log, "sample", 1, {
            let mut outs = Vec::with_capacity(head_rows);
            for row in 0..head_rows {
                let row_logits = logits
                    .as_ref()
                    .map(|l| l[row * vocab..(row + 1) * vocab].to_vec());
                let id = match (&gpu_tokens, &row_logits) {
                    (Some(t), _) => t[row],
                    (None, Some(l)) => argmax(l),
                    (None, None) => {
                        bail!("internal: the program read back neither logits nor a token")
                    }
                };
                outs.push(StepOutput {
                    logits: row_logits,
                    argmax: id,
                });
            }
            outs
        });
        let (gpu_spans, busy) = self.gpu_spans(p, &raw_ts, wait_end, start_ns);
        let gpu_spans = self.phase_spans(&p.phase_ops, gpu_spans)?;
        Ok((outs, gpu_spans, busy))
    }
}

/// True when a step touches a range written since the last barrier, or writes one read since.
pub(super) fn hazard(t: &[(Buf, u64, u64, bool)], binds: &[Bind]) -> bool {
    binds.iter().any(|b| {
        let r = b.range;
        let writes = b.access != Access::Read;
        t.iter().any(|&(buf, off, len, w)| {
            buf == r.buf && off < r.offset + r.bytes && r.offset < off + len && (w || writes)
        })
    })
}

/// Records the ranges a step touches.
pub(super) fn touch(t: &mut Vec<(Buf, u64, u64, bool)>, binds: &[Bind]) {
    for b in binds {
        let r = b.range;
        t.push((r.buf, r.offset, r.bytes, b.access != Access::Read));
    }
}
