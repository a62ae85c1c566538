//! The engine's device resources: the timestamp calibration, every buffer the lowerings bind
//! (sized from the shape, the KV plan and the knobs), and the weights uploaded into them.

use anyhow::{Context as _, anyhow, bail};
use profiler::trace::ClockMeta;

use super::{Engine, Timestamps, chain};
use crate::exec::kernels::{RowParams, TokenParams};
use crate::exec::program::{Buf, matrix_bytes, whole_words};
use crate::model::{ModelConfig, Tensor, Weights};
use crate::vk::BufferDesc;

impl Engine {
    pub(super) fn calibrate(&mut self) -> anyhow::Result<()> {
        if self.opts.timestamps == Timestamps::Off {
            return Ok(());
        }
        let method = self.gpu().info().calibrated_timestamps.clone();
        match (self.gpu().calibrate()?, method) {
            (Some(c), Some(m)) => {
                let gpu_ns = ((c.gpu_ticks & self.valid_mask) as f64 * self.period_ns) as i64;
                self.clock = ClockMeta {
                    calibrated: true,
                    method: m,
                    max_deviation_ns: Some(c.max_deviation_ns),
                    gpu_minus_host_ns: gpu_ns - c.host_ns as i64,
                };
            }
            _ => {
                self.clock = ClockMeta {
                    calibrated: false,
                    method: "fence-fallback".into(),
                    ..Default::default()
                };
            }
        }
        Ok(())
    }

    /// Creates every buffer the lowerings bind (the activations, the persistent kernel's and the
    /// chained program's, the gather scratch, each layer's weights and KV cache), each under its
    /// checkpoint name.
    pub(super) fn create_buffers(&mut self, cfg: &ModelConfig) -> anyhow::Result<()> {
        let s = self.shape;
        let mut want = self.activation_buffers();
        want.extend(self.persistent_buffers());
        if self.chained() {
            // The second decode program's host-visible words (engine/chain.rs).
            let alt: Vec<(Buf, BufferDesc, String)> = want
                .iter()
                .filter_map(|(buf, desc, name)| {
                    chain::alt_of(*buf).map(|alt| (alt, *desc, format!("{name}_alt")))
                })
                .collect();
            want.extend(alt);
        }
        if let Some(scratch) = self.kv.scratch {
            let bytes = scratch.buffer_bytes(s.kv_dim());
            want.push((
                Buf::KScratch,
                BufferDesc::device(bytes),
                "k_gather_scratch".into(),
            ));
            want.push((
                Buf::VScratch,
                BufferDesc::device(bytes),
                "v_gather_scratch".into(),
            ));
        }
        if !self.tied {
            want.push((
                Buf::LmHead,
                BufferDesc::device(whole_words(matrix_bytes(
                    self.wtypes.lm_head,
                    s.vocab,
                    s.hidden,
                ))),
                "lm_head".into(),
            ));
        }
        for l in 0..s.layers {
            want.extend(self.layer_buffers(cfg, l));
        }
        self.check_offset_alignment()?;
        for (buf, desc, name) in want {
            let b = self
                .gpu()
                .create_buffer(desc, &name)
                .with_context(|| format!("creating buffer {name}"))?;
            self.bufs.insert(buf, b);
        }
        Ok(())
    }

    /// The activation, parameter and readback buffers, sized for the most rows a step holds.
    fn activation_buffers(&self) -> Vec<(Buf, BufferDesc, String)> {
        let s = self.shape;
        let (b, h, f32b) = (self.kv.max_rows as u64, s.hidden as u64, 4u64);
        // Rows of x per token: the persistent kernel keeps its residual rows R0, R1 and the
        // o-projection's sum there.
        let x_rows = if self.persistent() {
            crate::exec::persistent::RESIDUAL_ROWS as u64
        } else {
            1
        };
        // Rows of a decode step: one per sequence.
        let seqs = self.opts.kv.batch.max(1) as u64;
        let geo = self.kv.geo;
        let (qd, kvd, inter) = (s.q_dim() as u64, s.kv_dim() as u64, s.intermediate as u64);
        vec![
            (
                Buf::Embed,
                BufferDesc::device(whole_words(matrix_bytes(
                    self.wtypes.embed,
                    s.vocab,
                    s.hidden,
                ))),
                "embed_tokens".into(),
            ),
            (Buf::FinalNorm, BufferDesc::device(h * f32b), "norm".into()),
            (
                Buf::RopeTable,
                BufferDesc::device(s.max_seq as u64 * s.head_dim as u64 * f32b),
                "rope_table".into(),
            ),
            (Buf::Ids, BufferDesc::upload(b * 4), "ids".into()),
            (
                Buf::Params,
                BufferDesc::upload(
                    (std::mem::size_of::<TokenParams>()
                        + b as usize * std::mem::size_of::<RowParams>()) as u64,
                ),
                "params".into(),
            ),
            (
                Buf::KvTable,
                BufferDesc::upload((geo.seqs as u64 * geo.table_stride as u64 * 4).max(16)),
                "kv_block_tables".into(),
            ),
            (
                Buf::X,
                BufferDesc::device(x_rows * b * h * f32b),
                "x".into(),
            ),
            (Buf::H, BufferDesc::device(b * h * f32b), "h".into()),
            (Buf::QRaw, BufferDesc::device(b * qd * f32b), "q_raw".into()),
            (
                Buf::KRaw,
                BufferDesc::device(b * kvd * f32b),
                "k_raw".into(),
            ),
            (Buf::Q, BufferDesc::device(b * qd * f32b), "q".into()),
            (Buf::K, BufferDesc::device(b * kvd * f32b), "k".into()),
            (Buf::V, BufferDesc::device(b * kvd * f32b), "v".into()),
            (
                Buf::Qkv,
                BufferDesc::device(seqs * s.qkv_rows() as u64 * f32b),
                "qkv".into(),
            ),
            (
                Buf::Scores,
                BufferDesc::device(seqs * s.heads as u64 * s.max_seq as u64 * f32b),
                "scores".into(),
            ),
            (
                Buf::Partial,
                BufferDesc::device(
                    seqs * s.heads as u64
                        * self.tuning.n_splits as u64
                        * (s.head_dim as u64 + 2)
                        * f32b,
                ),
                "attn_partial".into(),
            ),
            (Buf::Attn, BufferDesc::device(b * qd * f32b), "attn".into()),
            (Buf::Tmp, BufferDesc::device(b * h * f32b), "tmp".into()),
            (
                Buf::Gate,
                BufferDesc::device(b * inter * f32b),
                "gate".into(),
            ),
            (Buf::Up, BufferDesc::device(b * inter * f32b), "up".into()),
            (Buf::Act, BufferDesc::device(b * inter * f32b), "act".into()),
            (
                Buf::Logits,
                BufferDesc::device(seqs * s.vocab as u64 * f32b),
                "logits".into(),
            ),
            (
                Buf::LogitsReadback,
                BufferDesc::readback(seqs * s.vocab as u64 * f32b),
                "logits_readback".into(),
            ),
            (
                Buf::ArgmaxOut,
                // (index, value) per row, then the persistent kernel's status word.
                BufferDesc::readback(8 * seqs + 4),
                "argmax_out".into(),
            ),
        ]
    }

    /// Layer `l`'s weights, norms and KV cache.
    fn layer_buffers(&self, cfg: &ModelConfig, l: u32) -> Vec<(Buf, BufferDesc, String)> {
        let s = self.shape;
        let (h, f32b) = (s.hidden as u64, 4u64);
        let geo = self.kv.geo;
        let kvd = s.kv_dim() as u64;
        let t = self.wtypes.layer(l);
        let (hh, qd32, kvd32, inter32) = (s.hidden, s.q_dim(), s.kv_dim(), s.intermediate);
        // Stacked weights hold each matrix in its own type, one after another.
        let qkv = matrix_bytes(t.q, qd32, hh)
            + matrix_bytes(t.k, kvd32, hh)
            + matrix_bytes(t.v, kvd32, hh);
        let gate_up = matrix_bytes(t.gate, inter32, hh) + matrix_bytes(t.up, inter32, hh);
        let p = format!("model.layers.{l}");
        let mut want = vec![
            (
                Buf::AttnNorm(l),
                BufferDesc::device(h * f32b),
                format!("{p}.input_layernorm"),
            ),
            (
                Buf::MlpNorm(l),
                BufferDesc::device(h * f32b),
                format!("{p}.post_attention_layernorm"),
            ),
            (
                Buf::Wqkv(l),
                BufferDesc::device(whole_words(qkv)),
                format!("{p}.self_attn.qkv_proj"),
            ),
            (
                Buf::Wo(l),
                BufferDesc::device(whole_words(matrix_bytes(t.o, hh, qd32))),
                format!("{p}.self_attn.o_proj"),
            ),
            (
                Buf::WGateUp(l),
                BufferDesc::device(whole_words(gate_up)),
                format!("{p}.mlp.gate_up_proj"),
            ),
            (
                Buf::WDown(l),
                BufferDesc::device(whole_words(matrix_bytes(t.down, hh, inter32))),
                format!("{p}.mlp.down_proj"),
            ),
            (
                Buf::KCache(l),
                BufferDesc::device(geo.buffer_bytes(kvd as u32)),
                format!("{p}.k_cache"),
            ),
            (
                Buf::VCache(l),
                BufferDesc::device(geo.buffer_bytes(kvd as u32)),
                format!("{p}.v_cache"),
            ),
        ];
        if cfg.qk_norm {
            want.push((
                Buf::QNorm(l),
                BufferDesc::device(s.head_dim as u64 * f32b),
                format!("{p}.self_attn.q_norm"),
            ));
            want.push((
                Buf::KNorm(l),
                BufferDesc::device(s.head_dim as u64 * f32b),
                format!("{p}.self_attn.k_norm"),
            ));
        }
        want
    }

    /// Refuses a model whose weight and activation slices cannot be bound at their offsets.
    fn check_offset_alignment(&self) -> anyhow::Result<()> {
        let s = self.shape;
        let (h, f32b, kvd) = (s.hidden as u64, 4u64, s.kv_dim() as u64);
        let align = self.gpu().info().min_storage_buffer_offset_alignment.max(1);
        let mut subs = vec![h * f32b, kvd * f32b];
        for l in 0..s.layers {
            // Where k, v and up start in the stacked weights.
            let t = self.wtypes.layer(l);
            let q = matrix_bytes(t.q, s.q_dim(), s.hidden);
            subs.extend([
                q,
                q + matrix_bytes(t.k, s.kv_dim(), s.hidden),
                matrix_bytes(t.gate, s.intermediate, s.hidden),
            ]);
        }
        for sub in subs {
            if sub % align != 0 {
                bail!(
                    "this model's tensor sizes give a buffer offset of {sub} bytes, not a multiple of the \
                     device's minStorageBufferOffsetAlignment ({align}); decodescope cannot bind it"
                );
            }
        }
        Ok(())
    }

    pub(super) fn upload_weights(&mut self, cfg: &ModelConfig, w: &Weights) -> anyhow::Result<()> {
        let s = self.shape;
        let total: u64 = w.tensors().iter().map(|t| t.data.len() as u64).sum();
        let bar = indicatif::ProgressBar::new(total).with_message("uploading weights");
        bar.set_style(
            indicatif::ProgressStyle::with_template("{msg} [{bar:30}] {percent}% ({eta})")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        let mut jobs: Vec<(Buf, Vec<u8>, u64)> = vec![
            (
                Buf::Embed,
                gpu_bytes(&w.embed_tokens),
                w.embed_tokens.data.len() as u64,
            ),
            (
                Buf::FinalNorm,
                f32_bytes(&w.norm.data),
                w.norm.data.len() as u64,
            ),
        ];
        if let Some(lm) = &w.lm_head {
            jobs.push((Buf::LmHead, gpu_bytes(lm), lm.data.len() as u64));
        }
        // The RoPE table: (cos, sin) of pos * inv_freq[i] in f32, as the CPU reference computes.
        let inv = cfg.rope_inv_freq();
        let mut table = Vec::with_capacity(s.max_seq as usize * inv.len() * 2);
        for pos in 0..s.max_seq {
            for f in &inv {
                let a = pos as f32 * f;
                table.push(a.cos());
                table.push(a.sin());
            }
        }
        jobs.push((Buf::RopeTable, f32_bytes(&table), 0));
        for (b, bytes, n) in jobs {
            let buf = super::step::stored(&self.bufs, self.tied, b)?;
            self.rec
                .upload(buf, 0, &bytes)
                .with_context(|| format!("uploading {}", buf.name()))?;
            bar.inc(n);
        }
        for (l, lw) in w.layers.iter().enumerate() {
            let l = l as u32;
            let mut qkv = gpu_bytes(&lw.q_proj);
            qkv.extend(gpu_bytes(&lw.k_proj));
            qkv.extend(gpu_bytes(&lw.v_proj));
            let mut gu = gpu_bytes(&lw.gate_proj);
            gu.extend(gpu_bytes(&lw.up_proj));
            let mut jobs = vec![
                (Buf::AttnNorm(l), f32_bytes(&lw.input_layernorm.data)),
                (
                    Buf::MlpNorm(l),
                    f32_bytes(&lw.post_attention_layernorm.data),
                ),
                (Buf::Wqkv(l), qkv),
                (Buf::Wo(l), gpu_bytes(&lw.o_proj)),
                (Buf::WGateUp(l), gu),
                (Buf::WDown(l), gpu_bytes(&lw.down_proj)),
            ];
            if self.persistent() && !crate::exec::persistent::reads_blocks(&self.wtypes) {
                jobs.push((
                    Buf::WDownT(l),
                    f16_bytes(&transposed(&lw.down_proj.data, s.hidden as usize)),
                ));
            }
            if let (Some(qn), Some(kn)) = (&lw.q_norm, &lw.k_norm) {
                jobs.push((Buf::QNorm(l), f32_bytes(&qn.data)));
                jobs.push((Buf::KNorm(l), f32_bytes(&kn.data)));
            }
            for (b, bytes) in jobs {
                let buf = self
                    .bufs
                    .get(&b)
                    .ok_or_else(|| anyhow!("internal: buffer {b:?} missing"))?;
                self.rec
                    .upload(buf, 0, &bytes)
                    .with_context(|| format!("uploading {}", buf.name()))?;
            }
            let n: u64 = [
                &lw.q_proj,
                &lw.k_proj,
                &lw.v_proj,
                &lw.o_proj,
                &lw.gate_proj,
                &lw.up_proj,
                &lw.down_proj,
            ]
            .iter()
            .map(|t| t.data.len() as u64)
            .sum::<u64>()
                + (2 * s.hidden) as u64;
            bar.inc(n);
        }
        bar.finish_and_clear();
        Ok(())
    }
}

/// A row-major matrix of `rows` rows, transposed.
pub(super) fn transposed(data: &[f32], rows: usize) -> Vec<f32> {
    let cols = data.len() / rows.max(1);
    let mut out = vec![0.0; data.len()];
    for (r, row) in data.chunks_exact(cols.max(1)).enumerate() {
        for (c, v) in row.iter().enumerate() {
            out[c * rows + r] = *v;
        }
    }
    out
}

/// A matrix as the GPU holds it: its GGUF blocks as they are, else its values as f16.
pub(super) fn gpu_bytes(t: &Tensor) -> Vec<u8> {
    match &t.blocks {
        Some(b) => b.bytes.clone(),
        None => f16_bytes(&t.data),
    }
}

pub(super) fn f16_bytes(data: &[f32]) -> Vec<u8> {
    let h: Vec<half::f16> = data.iter().map(|v| half::f16::from_f32(*v)).collect();
    bytemuck::cast_slice(&h).to_vec()
}

pub(super) fn f32_bytes(data: &[f32]) -> Vec<u8> {
    bytemuck::cast_slice(data).to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_matrix_is_transposed_row_for_column() {
        // 2 rows x 3 columns, row-major.
        let m = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        assert_eq!(transposed(&m, 2), vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
        assert_eq!(transposed(&transposed(&m, 2), 3), m.to_vec());
    }
}
