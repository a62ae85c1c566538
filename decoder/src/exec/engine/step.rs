//! Per-step preparation: a step shape lowered into a program, split into command buffers by the
//! `submit` knob, its timestamp spans laid out by the timestamp level, its ops named and its
//! pipelines created.

use std::collections::BTreeMap;

use anyhow::{Context as _, anyhow};
use profiler::trace::OpInfo;

use super::{Engine, Prepared, SpanDef, Timestamps, chain};
use crate::exec::knobs::{Descriptors, Recording, Submit};
use crate::exec::program::{Action, Bind, Buf, Step, StepKind, add_facts, lower};
use crate::exec::spans::SpanLog;
use crate::vk::{BufRange, Buffer, Pipeline, PipelineDesc, Queue, SetLifetime};

impl Engine {
    pub(super) fn op_id(&mut self, step: &Step) -> u32 {
        if let Some(&i) = self.op_index.get(&step.label) {
            return i;
        }
        let i = self.ops.len() as u32;
        self.ops.push(step.facts.clone());
        self.op_index.insert(step.label.clone(), i);
        i
    }

    /// The op of `facts` (by its label), registered on first use.
    pub(super) fn facts_op(&mut self, facts: OpInfo) -> u32 {
        if let Some(&i) = self.op_index.get(&facts.label) {
            return i;
        }
        let i = self.ops.len() as u32;
        self.op_index.insert(facts.label.clone(), i);
        self.ops.push(facts);
        i
    }

    pub(super) fn region_op(&mut self, label: String, kind: &str, steps: &[Step]) -> u32 {
        if let Some(&i) = self.op_index.get(&label) {
            return i;
        }
        let mut f = OpInfo {
            label: label.clone(),
            kind: kind.into(),
            ..Default::default()
        };
        for s in steps {
            add_facts(&mut f, &s.facts);
        }
        let i = self.ops.len() as u32;
        self.ops.push(f);
        self.op_index.insert(label, i);
        i
    }

    /// Lowers and prepares the program of a step of `kind` over `n_tokens` rows.
    pub(super) fn prepare(&mut self, n_tokens: u32, kind: StepKind) -> anyhow::Result<Prepared> {
        self.prepare_slot(n_tokens, kind, 0)
    }

    /// [`Engine::prepare`] for chain slot `slot`: a decode program under `--sync chained` is
    /// bound to that slot's buffers and reads its ids from the other slot's argmax
    /// (`engine/chain.rs`); every other program ignores `slot`.
    pub(super) fn prepare_slot(
        &mut self,
        n_tokens: u32,
        kind: StepKind,
        slot: usize,
    ) -> anyhow::Result<Prepared> {
        let k = self.opts.knobs;
        let mut steps = lower(
            &self.shape,
            &self.wtypes,
            &self.tuning,
            &self.kv,
            k.kernels,
            n_tokens,
            kind,
            self.opts.logits_readback,
        );
        if kind == StepKind::Decode && self.chained() {
            chain::bind_slot(&mut steps, slot);
        }
        let gpu_steps: Vec<usize> = (0..steps.len())
            .filter(|&i| !matches!(steps[i].action, Action::HostRead))
            .collect();
        let bounds = self.submit_bounds(&steps, &gpu_steps);
        let mut chunks = Vec::new();
        for w in bounds.windows(2) {
            let cmd = self.rec.new_cmd(Queue::Compute)?;
            chunks.push((cmd, w[0]..w[1]));
        }
        let mut spans = self.timestamp_spans(&steps, &gpu_steps);
        for s in &steps {
            if !matches!(s.action, Action::HostRead) {
                self.op_id(s);
            }
        }
        let mut chunk_of_step = vec![0u32; steps.len()];
        for (c, (_, range)) in chunks.iter().enumerate() {
            for i in range.clone() {
                chunk_of_step[i] = c as u32;
            }
        }
        let n_queries = assign_queries(&mut spans, &gpu_steps, &chunk_of_step);
        let queries = if spans.is_empty() {
            None
        } else {
            Some(self.rec.create_query_pool(n_queries)?)
        };
        let host_reads = |buf: Buf| {
            steps.iter().any(|s| {
                matches!(s.action, Action::HostRead)
                    && s.binds.first().is_some_and(|b| b.range.buf == buf)
            })
        };
        let (reads_logits, reads_argmax) = (
            host_reads(Self::slot_buf(Buf::LogitsReadback, slot)),
            host_reads(Self::slot_buf(Buf::ArgmaxOut, slot)),
        );
        let phase_ops = self.phase_ops(kind);
        let mut prepared = Prepared {
            kind,
            slot,
            steps,
            chunks,
            sets: Vec::new(),
            spans,
            queries,
            recorded: false,
            chunk_of_step,
            reads_logits,
            reads_argmax,
            phase_ops,
        };
        // Pipelines, and descriptor sets bound once.
        for i in 0..prepared.steps.len() {
            let set = if let Action::Dispatch { .. } = prepared.steps[i].action {
                let desc = self.pipeline_desc(&prepared.steps[i]);
                self.pipeline(desc)?;
                if k.descriptors == Descriptors::BoundOnce {
                    Some(self.write_new_set(&prepared.steps[i], SetLifetime::Persistent)?)
                } else {
                    None
                }
            } else {
                None
            };
            prepared.sets.push(set);
        }
        if k.recording == Recording::Once && kind == StepKind::Decode {
            let mut log = SpanLog::new(self.epoch_ns);
            for c in 0..prepared.chunks.len() {
                self.record_chunk(&mut prepared, c, 0, &mut log)?;
            }
            prepared.recorded = true;
        }
        Ok(prepared)
    }

    /// Where the submit knob splits a program's steps into command buffers: the first step of
    /// each chunk, then the number of steps.
    fn submit_bounds(&self, steps: &[Step], gpu_steps: &[usize]) -> Vec<usize> {
        let mut bounds: Vec<usize> = vec![0];
        for (j, &i) in gpu_steps.iter().enumerate().skip(1) {
            let split = match self.opts.knobs.submit {
                Submit::Dispatch => true,
                Submit::Every(n) => j % n as usize == 0,
                Submit::PerLayer => {
                    let prev = steps[gpu_steps[j - 1]].region.layer(self.shape.layers);
                    steps[i].region.layer(self.shape.layers) != prev
                }
                Submit::Token => false,
            };
            if split {
                bounds.push(i);
            }
        }
        bounds.push(steps.len());
        bounds
    }

    /// The timestamp spans of a program at the timestamp level, their queries not yet assigned
    /// ([`assign_queries`]).
    fn timestamp_spans(&mut self, steps: &[Step], gpu_steps: &[usize]) -> Vec<SpanDef> {
        let mut spans = Vec::new();
        match self.opts.timestamps {
            Timestamps::Off => {}
            Timestamps::Token => {
                if let (Some(&first), Some(&last)) = (gpu_steps.first(), gpu_steps.last()) {
                    let op = self.region_op("token".into(), "token", steps);
                    spans.push(SpanDef {
                        op,
                        first,
                        last,
                        start_q: 0,
                        end_q: 0,
                        own_start: true,
                    });
                }
            }
            Timestamps::Region => {
                let mut j = 0;
                while j < gpu_steps.len() {
                    let region = steps[gpu_steps[j]].region;
                    let mut e = j;
                    while e + 1 < gpu_steps.len() && steps[gpu_steps[e + 1]].region == region {
                        e += 1;
                    }
                    let covered: Vec<Step> = (j..=e).map(|x| steps[gpu_steps[x]].clone()).collect();
                    let op = self.region_op(region.label(), "region", &covered);
                    spans.push(SpanDef {
                        op,
                        first: gpu_steps[j],
                        last: gpu_steps[e],
                        start_q: 0,
                        end_q: 0,
                        own_start: true,
                    });
                    j = e + 1;
                }
            }
            Timestamps::Dispatch => {
                for &i in gpu_steps {
                    let op = self.op_id(&steps[i]);
                    spans.push(SpanDef {
                        op,
                        first: i,
                        last: i,
                        start_q: 0,
                        end_q: 0,
                        own_start: true,
                    });
                }
            }
        }
        spans
    }

    pub(super) fn pipeline_desc(&self, step: &Step) -> PipelineDesc {
        let Action::Dispatch {
            shader, spec, push, ..
        } = &step.action
        else {
            unreachable!("pipeline_desc is only asked for dispatches")
        };
        PipelineDesc {
            shader: *shader,
            bindings: step.binds.len() as u32,
            push_bytes: push.len() as u32,
            spec: *spec,
            push_descriptor: self.opts.knobs.descriptors == Descriptors::Push,
        }
    }

    pub(super) fn pipeline(&mut self, desc: PipelineDesc) -> anyhow::Result<&Pipeline> {
        if !self.pipelines.contains_key(&desc) {
            let p = self.gpu().create_pipeline(desc).with_context(|| {
                format!("creating the pipeline of shader {}", desc.shader.name())
            })?;
            self.pipelines.insert(desc, p);
        }
        self.pipelines
            .get(&desc)
            .ok_or_else(|| anyhow!("internal: pipeline missing"))
    }

    pub(super) fn ranges<'a>(
        bufs: &'a BTreeMap<Buf, Buffer>,
        tied: bool,
        binds: &[Bind],
    ) -> anyhow::Result<Vec<BufRange<'a>>> {
        binds
            .iter()
            .map(|b| {
                Ok(BufRange {
                    buffer: stored(bufs, tied, b.range.buf)?,
                    offset: b.range.offset,
                    bytes: b.range.bytes,
                })
            })
            .collect()
    }
}

/// The buffer that holds `b`: a tied lm_head is the embedding's.
pub(super) fn stored(bufs: &BTreeMap<Buf, Buffer>, tied: bool, b: Buf) -> anyhow::Result<&Buffer> {
    let key = if b == Buf::LmHead && tied {
        Buf::Embed
    } else {
        b
    };
    bufs.get(&key)
        .ok_or_else(|| anyhow!("internal: buffer {key:?} missing"))
}

/// Numbers the start and end queries of `spans` (in step order) and returns how many there are.
/// A span whose first GPU step directly follows the previous span's last one in the same command
/// buffer shares that span's end query as its start.
pub(super) fn assign_queries(
    spans: &mut [SpanDef],
    gpu_steps: &[usize],
    chunk_of_step: &[u32],
) -> u32 {
    let mut next = 0u32;
    let mut prev: Option<(usize, u32)> = None;
    for s in spans.iter_mut() {
        let follows = prev.is_some_and(|(last, _)| {
            let after = gpu_steps.partition_point(|&g| g <= last);
            gpu_steps.get(after) == Some(&s.first) && chunk_of_step[last] == chunk_of_step[s.first]
        });
        s.own_start = !follows;
        s.start_q = match prev {
            Some((_, end_q)) if follows => end_q,
            _ => {
                next += 1;
                next - 1
            }
        };
        s.end_q = next;
        next += 1;
        prev = Some((s.last, s.end_q));
    }
    next
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(first: usize, last: usize) -> SpanDef {
        SpanDef {
            op: 0,
            first,
            last,
            start_q: 0,
            end_q: 0,
            own_start: true,
        }
    }

    #[test]
    fn adjacent_spans_in_one_command_buffer_share_a_boundary_query() {
        // GPU steps 0, 1, 3, 4, 5 (step 2 is a host read); steps 0-3 in command buffer 0,
        // 4-5 in command buffer 1.
        let gpu = [0, 1, 3, 4, 5];
        let chunk = [0, 0, 0, 0, 1, 1];
        let mut spans = vec![span(0, 0), span(1, 3), span(4, 4), span(5, 5)];
        let n = assign_queries(&mut spans, &gpu, &chunk);
        let got: Vec<(u32, u32, bool)> = spans
            .iter()
            .map(|s| (s.start_q, s.end_q, s.own_start))
            .collect();
        // The second span follows the first; the third starts a new command buffer; the fourth
        // follows the third.
        assert_eq!(
            got,
            [(0, 1, true), (1, 2, false), (3, 4, true), (4, 5, false)]
        );
        assert_eq!(n, 6);
        // Spans with a GPU step between them that no span covers do not share.
        let mut spans = vec![span(0, 0), span(3, 3)];
        assert_eq!(assign_queries(&mut spans, &gpu, &chunk), 4);
        assert!(spans[1].own_start);
    }
}
