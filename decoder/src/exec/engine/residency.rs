//! The engine's side of the persistent token kernel: its extra buffers, the pointer table of
//! per-layer buffer addresses, the residency probe that sizes its grid, and the status check
//! after each step.
//!
//! Forward-progress assumption: the kernel's grid barriers, and its polls for other workgroups'
//! tagged words, need every workgroup of the grid to be running at once. Vulkan promises no such
//! thing, so the grid size is established here by running the kernel's probe mode (four grid
//! barriers, nothing else) at a candidate size with a short spin limit: a size passes when no
//! workgroup's wait ran out. Candidates go from two workgroups per compute unit down to one
//! workgroup; CPU drivers run one (see `grid_candidates`). A size that passed can still lose
//! residency later (another program taking the device), which is why the kernel's waits stay
//! bounded and [`Engine::check_persistent_status`] turns a lost wait into an error.

use anyhow::{Context as _, anyhow, bail};

use super::Engine;
use super::Timestamps;
use crate::exec::kernels::RowParams;
use crate::exec::knobs::Kernels;
use crate::exec::persistent::{
    DeviceCaps, PTRS_PER_LAYER, clock_offsets, clocks, fit_kv_stage, fit_workgroup, layer_ptr_bufs,
    lost_attention_poll, lost_wait, packed_types, partial_bytes, phase_facts, polled_words,
    ptr_table_bytes, push, qkv_bytes, reads_blocks, sync_bytes, unsupported,
};
use crate::exec::program::{Buf, Step, StepKind};
use crate::vk::{BufferDesc, Queue, SetLifetime};
use profiler::trace::GpuSpan;

/// Spins of a probe wait: long enough for a resident grid to meet (microseconds on a GPU,
/// scheduling delays on a CPU driver), short enough that a failed candidate costs little.
const PROBE_SPINS_GPU: u32 = 1 << 20;
const PROBE_SPINS_CPU: u32 = 1 << 24;

impl Engine {
    pub(super) fn persistent(&self) -> bool {
        self.opts.knobs.kernels == Kernels::Persistent
    }

    /// Sizes the persistent kernel's workgroup to the device's shared memory, and refuses the
    /// kernel where it cannot run, with one sentence.
    pub(super) fn check_persistent(&mut self) -> anyhow::Result<()> {
        if !self.persistent() {
            return Ok(());
        }
        let limit = self.gpu().info().max_compute_shared_memory;
        let rows = self.opts.kv.batch.max(1);
        let kv_bytes = self.kv.geo.dtype.bytes() as u32;
        self.tuning.persistent_kv_stage =
            fit_kv_stage(&self.shape, &self.tuning, rows, kv_bytes, limit);
        self.tuning.persistent_wg = fit_workgroup(&self.shape, &self.tuning, rows, kv_bytes, limit);
        // A workgroup that shrank has fewer subgroups to stage for.
        self.tuning.persistent_kv_stage = self
            .tuning
            .persistent_kv_stage
            .min(self.tuning.persistent_wg / self.tuning.subgroup.max(1));
        let info = self.gpu().info();
        if let Some(why) = unsupported(
            &self.shape,
            &self.tuning,
            rows,
            kv_bytes,
            DeviceCaps {
                grid_sync: info.grid_sync,
                // Shuffles imply arithmetic (DeviceInfo::subgroup_shuffle).
                subgroup_shuffle: info.subgroup_shuffle,
                float_atomics: info.float_atomic_add,
                int64_atomics: info.int64_atomics,
                shared_limit: info.max_compute_shared_memory,
            },
        ) {
            bail!(why);
        }
        if self.opts.kv.gathers() {
            bail!(
                "--paged-attention gather copies the cache for the fused kernels; the persistent kernel reads the \
                 blocks in place: use --paged-attention fused with --kernels persistent"
            );
        }
        Ok(())
    }

    /// Candidate grid sizes, largest first.
    fn grid_candidates(&self) -> Vec<u32> {
        if self.tuning.persistent_groups > 0 {
            return vec![self.tuning.persistent_groups];
        }
        let info = self.gpu().info();
        if info.device_type == "cpu" {
            // CPU drivers run one workgroup: lavapipe (Mesa 22.3) runs a grid of two unreliably
            // when the machine is busy (a workgroup stops mid-step after a barrier with no failed
            // wait, in about half the steps under three concurrent runs; the status word turns
            // it into an error). One workgroup runs every phase and never waits.
            return vec![1];
        }
        // Two workgroups per compute unit, then halving: 2 x CU, CU, CU / 2, ..., 1.
        let mut out = vec![];
        let mut g = 2 * info.compute_units.max(1);
        while g >= 1 {
            out.push(g);
            g /= 2;
        }
        out
    }

    /// The largest grid the probe says is resident.
    pub(super) fn max_grid(&self) -> u32 {
        self.grid_candidates().first().copied().unwrap_or(1)
    }

    /// The extra buffers: the pointer table, the grid-sync words and the tagged words the kernel
    /// hands between phases (its own: no other program writes them, see `setup_persistent`).
    pub(super) fn persistent_buffers(&self) -> Vec<(Buf, BufferDesc, String)> {
        if !self.persistent() {
            return vec![];
        }
        let rows = self.opts.kv.batch.max(1);
        let mut out = vec![
            (
                Buf::Ptrs,
                BufferDesc::device(ptr_table_bytes(self.shape.layers)),
                "persistent_ptrs".into(),
            ),
            (
                Buf::GridSync,
                BufferDesc::device(sync_bytes(self.max_grid(), rows)),
                "persistent_sync".into(),
            ),
            (
                Buf::TaggedQkv,
                BufferDesc::device(qkv_bytes(&self.shape, rows as u64)),
                "persistent_qkv".into(),
            ),
            (
                Buf::TaggedPartial,
                BufferDesc::device(partial_bytes(
                    &self.shape,
                    self.tuning.subgroup,
                    rows as u64,
                )),
                "persistent_partial".into(),
            ),
        ];
        let s = &self.shape;
        if !reads_blocks(&self.wtypes) {
            for l in 0..s.layers {
                out.push((
                    Buf::WDownT(l),
                    BufferDesc::device(s.hidden as u64 * s.intermediate as u64 * 2),
                    format!("model.layers.{l}.mlp.down_proj_transposed"),
                ));
            }
        }
        if self.gpu().info().shader_device_clock {
            out.push((
                Buf::PhaseClocks,
                BufferDesc::readback(8 * clocks(self.shape.layers) as u64),
                "persistent_phase_clocks".into(),
            ));
        }
        out
    }

    /// Whether decode steps run the kernel with phase clocks: `--timestamps dispatch` on a
    /// device with a shader device clock.
    pub(super) fn wants_phase_clocks(&self) -> bool {
        self.persistent()
            && self.opts.timestamps == Timestamps::Dispatch
            && self.gpu().info().shader_device_clock
    }

    /// The phase ops of a decode program that writes phase clocks (none otherwise), their facts
    /// those of the fused dispatches whose work each phase does.
    pub(super) fn phase_ops(&mut self, kind: StepKind) -> Vec<u32> {
        if !self.tuning.phase_clocks || kind != StepKind::Decode {
            return vec![];
        }
        let fused = crate::exec::program::lower(
            &self.shape,
            &self.wtypes,
            &self.tuning,
            &self.kv,
            Kernels::Fused,
            self.opts.kv.batch.max(1),
            StepKind::Decode,
            false,
        );
        phase_facts(&fused, self.shape.layers)
            .into_iter()
            .map(|f| self.facts_op(f))
            .collect()
    }

    /// Replaces the token dispatch's span by one span per phase of the kernel: the phase
    /// clocks (`clock_offsets`), scaled onto the dispatch's timestamps (the device clock's unit
    /// is not the timestamps'). Clocks that do not advance keep the dispatch's span.
    pub(super) fn phase_spans(
        &mut self,
        phase_ops: &[u32],
        spans: Vec<GpuSpan>,
    ) -> anyhow::Result<Vec<GpuSpan>> {
        let Some(&token_op) = self.op_index.get("token") else {
            return Ok(spans);
        };
        if phase_ops.is_empty() || spans.is_empty() {
            return Ok(spans);
        }
        let n = clocks(self.shape.layers) as usize;
        // uvec2 (low, high) per clock.
        let c: Vec<u64> = self
            .read_u32s(Buf::PhaseClocks, 0, 2 * n)?
            .chunks_exact(2)
            .map(|w| w[0] as u64 | (w[1] as u64) << 32)
            .collect();
        let Some(c) = clock_offsets(&c).filter(|_| phase_ops.len() + 1 == n) else {
            return Ok(spans);
        };
        let total = c[n - 1];
        let mut out = Vec::with_capacity(spans.len() + phase_ops.len());
        for s in spans {
            if s.op() != token_op {
                out.push(s);
                continue;
            }
            let at = |k: usize| {
                s.start_ns() + (c[k] as f64 / total as f64 * s.dur_ns() as f64).round() as u64
            };
            for (k, &op) in phase_ops.iter().enumerate() {
                let (a, b) = (at(k), at(k + 1));
                out.push(GpuSpan(op, a, b - a, s.queue(), s.submit(), 1));
            }
        }
        Ok(out)
    }

    /// Uploads the pointer table, zeroes the sync words and the tagged words (once: the epoch
    /// that tags them only grows from here) and sizes the grid with the probe.
    pub(super) fn setup_persistent(&mut self) -> anyhow::Result<()> {
        if !self.persistent() {
            return Ok(());
        }
        let mut table: Vec<u64> =
            Vec::with_capacity(self.shape.layers as usize * PTRS_PER_LAYER + 2);
        let address = |b: Buf| {
            super::step::stored(&self.bufs, self.tied, b)?
                .device_address()
                .ok_or_else(|| anyhow!("internal: no buffer device address"))
        };
        let blocks = reads_blocks(&self.wtypes);
        for l in 0..self.shape.layers {
            let mut bufs = layer_ptr_bufs(l, blocks);
            if self.bufs.contains_key(&Buf::QNorm(l)) {
                bufs[2] = Some(Buf::QNorm(l));
                bufs[3] = Some(Buf::KNorm(l));
            }
            for b in bufs {
                table.push(match b {
                    Some(b) => address(b)?,
                    None => 0,
                });
            }
            table.push(packed_types(&self.wtypes, l));
        }
        table.push(address(Buf::Embed)?);
        table.push(address(Buf::LmHead)?);
        let ptrs = self
            .bufs
            .get(&Buf::Ptrs)
            .ok_or_else(|| anyhow!("internal: pointer table missing"))?;
        self.rec
            .upload(ptrs, 0, bytemuck::cast_slice(&table))
            .context("uploading the persistent kernel's pointer table")?;
        for b in [Buf::TaggedQkv, Buf::TaggedPartial, Buf::GridSync] {
            let buf = self
                .bufs
                .get(&b)
                .ok_or_else(|| anyhow!("internal: buffer {b:?} missing"))?;
            let zeros = vec![0u8; buf.bytes() as usize];
            self.rec
                .upload(buf, 0, &zeros)
                .with_context(|| format!("zeroing the persistent kernel's {b:?} buffer"))?;
        }
        let mut found = None;
        for g in self.grid_candidates() {
            if self.probe_grid(g)? {
                found = Some(g);
                break;
            }
        }
        let g = found.ok_or_else(|| {
            anyhow!(
                "--kernels persistent: the residency probe could not run {} workgroups at once on this device \
                 (a grid barrier's wait ran out), so the kernel's forward-progress assumption does not hold; \
                 use --kernels fused",
                self.grid_candidates().last().copied().unwrap_or(1)
            )
        })?;
        self.tuning.persistent_groups = g;
        self.zero_sync()?;
        Ok(())
    }

    fn zero_sync(&mut self) -> anyhow::Result<()> {
        let sync = self
            .bufs
            .get(&Buf::GridSync)
            .ok_or_else(|| anyhow!("internal: sync buffer missing"))?;
        // Words 0 to 2 (arrive, done, fail) and the workgroups' bests; word 3, the epoch that tags
        // the kernel's tagged words, keeps growing, so no word written before reads as current.
        let zeros = vec![0u8; sync.bytes() as usize];
        self.rec
            .upload(sync, 0, &zeros[..12])
            .context("zeroing the persistent kernel's sync words")?;
        self.rec
            .upload(sync, 16, &zeros[16..])
            .context("zeroing the persistent kernel's sync words")?;
        Ok(())
    }

    /// Runs the kernel's probe mode on `groups` workgroups: true when every barrier met.
    fn probe_grid(&mut self, groups: u32) -> anyhow::Result<bool> {
        self.zero_sync()?;
        // The probe lowers the decode step itself (the batch's rows at this grid), so its pipeline
        // is the one the steps will run, with the same registers and shared memory per workgroup.
        // Its status word is word 2 x rows of the argmax output (after the rows' tokens and values).
        let rows = self.opts.kv.batch.max(1);
        let header = crate::exec::kernels::TokenParams {
            pos0: 0,
            n_tokens: rows,
            kv_len: 1,
            n_seqs: rows,
        };
        let params =
            crate::exec::kernels::params_bytes(&header, &vec![RowParams::default(); rows as usize]);
        let status_at = 8 * rows as u64;
        let mut tuning = self.tuning;
        tuning.persistent_groups = groups;
        let steps = crate::exec::program::lower(
            &self.shape,
            &self.wtypes,
            &tuning,
            &self.kv,
            Kernels::Persistent,
            rows,
            StepKind::Decode,
            false,
        );
        let step: Step = steps
            .into_iter()
            .find(|s| s.label == "token")
            .ok_or_else(|| anyhow!("internal: persistent lowering has no token step"))?;
        let spins = if self.gpu().info().device_type == "cpu" {
            PROBE_SPINS_CPU
        } else {
            PROBE_SPINS_GPU
        };
        let push_bytes = push(spins, true).bytes();
        {
            let p = self
                .bufs
                .get_mut(&Buf::Params)
                .ok_or_else(|| anyhow!("internal: params missing"))?;
            self.rec.write(p, 0, &params)?;
            let out = self
                .bufs
                .get_mut(&Buf::ArgmaxOut)
                .ok_or_else(|| anyhow!("internal: argmax buffer missing"))?;
            self.rec.write(out, status_at, &0u32.to_le_bytes())?;
        }
        let desc = self.pipeline_desc(&step);
        // Creates the pipeline too.
        let set = self.write_new_set(&step, SetLifetime::Persistent)?;
        let Engine {
            rec,
            pipelines,
            fence,
            ..
        } = self;
        let pl = pipelines
            .get(&desc)
            .ok_or_else(|| anyhow!("internal: pipeline missing"))?;
        let cmd = rec.new_cmd(Queue::Compute)?;
        rec.begin(cmd)?;
        rec.begin_label(cmd, "persistent_residency_probe");
        rec.bind_pipeline(cmd, pl);
        rec.bind_set(cmd, pl, set);
        rec.push_constants(cmd, pl, &push_bytes);
        rec.dispatch(cmd, [groups, 1, 1]);
        rec.end_label(cmd);
        rec.full_barrier(cmd);
        rec.end(cmd)?;
        rec.submit(&[cmd], Some(*fence))?;
        rec.wait(*fence)?;
        Ok(self.read_u32s(Buf::ArgmaxOut, status_at, 1)?[0] == 0)
    }

    /// Where a step's status word names a lost poll of an attention phase: what the step's QKV
    /// words, read back, say about their writers ([`polled_words`]).
    fn polled_qkv_words(&mut self, status: u32, rows: u32) -> anyhow::Result<Option<String>> {
        let Some(layer) = lost_attention_poll(status, self.shape.layers) else {
            return Ok(None);
        };
        let (Some(sync), Some(qkv)) = (
            self.bufs.get(&Buf::GridSync),
            self.bufs.get(&Buf::TaggedQkv),
        ) else {
            bail!("internal: the persistent kernel's sync or QKV buffer is missing");
        };
        // Word 3 of the sync buffer, the epoch, is the step's: a failed step does not advance it.
        let mut epoch = [0u8; 4];
        self.rec
            .download(sync, 12, &mut epoch)
            .context("reading back the persistent kernel's epoch after a lost wait")?;
        let mut bytes = vec![0u8; qkv_bytes(&self.shape, rows as u64) as usize];
        self.rec
            .download(qkv, 0, &mut bytes)
            .context("reading back the persistent kernel's QKV words after a lost wait")?;
        let words: Vec<u64> = bytes
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
            .collect();
        Ok(Some(polled_words(
            &words,
            u32::from_le_bytes(epoch),
            self.shape.layers,
            layer,
            self.shape.qkv_rows(),
        )))
    }

    /// After a decode step of the persistent kernel over `rows` rows: an error when a grid
    /// barrier's wait ran out.
    pub(super) fn check_persistent_status(
        &mut self,
        kind: StepKind,
        rows: u32,
        slot: usize,
    ) -> anyhow::Result<()> {
        if !self.persistent() || kind != StepKind::Decode {
            return Ok(());
        }
        let status = self.read_u32s(Self::slot_buf(Buf::ArgmaxOut, slot), 8 * rows as u64, 1)?[0];
        if status != 0 {
            // The barrier words of a step that did not finish are not reset by the kernel.
            self.zero_sync()?;
        }
        match status & 3 {
            0 if status == 0 => {}
            1 => {
                let mut wait = lost_wait(status, self.shape.layers, self.tuning.persistent_groups);
                if let Some(words) = self.polled_qkv_words(status, rows)? {
                    wait = format!("{wait}; {words}");
                }
                bail!(
                    "the persistent token kernel lost forward progress: {wait}; rerun, or use --kernels fused"
                )
            }
            3 => bail!(
                "the persistent token kernel's step was cut short on {}: a subgroup's loops stopped before the \
                 end of the step. lavapipe (llvmpipe) ends every loop of a shader invocation once its loops \
                 together have run 65535 times, and one step of this model at this context runs more in one \
                 invocation; use --kernels fused (one dispatch per kernel), or a larger --tuning persistent_wg \
                 (fewer iterations per invocation)",
                self.gpu().info().name
            ),
            _ => bail!(
                "the persistent token kernel did not finish its step (status word {status}): its workgroup 0 \
                 stopped before writing the tokens; rerun, or use --kernels fused"
            ),
        }
        Ok(())
    }
}
