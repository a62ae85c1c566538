//! The CPU reference: a scalar f32 forward pass with a KV cache, the oracle every GPU path is
//! checked against. It computes what the Hugging Face `Qwen3ForCausalLM` / `LlamaForCausalLM`
//! eager implementations compute, in f32:
//!
//! RMSNorm -> q/k/v projections -> (Qwen3) per-head RMSNorm of q and k -> RoPE (rotate-half) ->
//! KV cache append -> causal GQA attention -> o projection -> residual -> RMSNorm -> SwiGLU MLP
//! -> residual, for every layer; then the final RMSNorm and the lm_head (tied or not).
//!
//! [`Reference::forward`] is written to be read next to a GPU kernel: one comment per step, the
//! shape of every buffer, all memory allocated once in [`Reference::new`]. Matrix-vector
//! products may split their rows across threads; each row is computed the same way whatever
//! the split, so results do not depend on the thread count.
//!
//! [`forward_full`] recomputes a whole sequence without any cache (layer by layer over all
//! positions), for tests that check the cached path.

use std::path::PathBuf;

use super::config::ModelConfig;
use super::error::ModelError;
use super::weights::{Weights, tensor_names_and_shapes};
use crate::generate::{Backend, StepOutput, argmax};

/// Below this many multiply-adds a matrix-vector product (or an attention) stays on one thread.
const PARALLEL_MIN_MACS: usize = 1 << 20;
/// Most threads the reference uses.
const MAX_THREADS: usize = 16;

/// The shape of one position's attention in [`attend`].
#[derive(Clone, Copy, Debug)]
struct AttendShape {
    head_dim: usize,
    kv_dim: usize,
    group: usize,
    /// Attended positions: lo..=pos.
    lo: usize,
    pos: usize,
    scale: f32,
}

/// Causal GQA attention of one position, per query head h (KV head h / group), over positions
/// lo..=pos of one layer's caches `(positions, kv_dim)`:
/// att[t] = q_h . k_t * scale; softmax; out_h = sum_t att[t] * v_t. Heads may be split across
/// threads (`att` holds one `max_seq` row per thread); each head is computed the same way
/// whatever the split.
fn attend(
    out: &mut [f32],
    att: &mut [f32],
    q: &[f32],
    keys: &[f32],
    values: &[f32],
    a: AttendShape,
    threads: usize,
) {
    let hd = a.head_dim;
    let heads = out.len() / hd;
    let span = a.pos + 1 - a.lo;
    let max_seq = att.len() / MAX_THREADS;
    let one = |h0: usize, out: &mut [f32], att: &mut [f32]| {
        for (i, o) in out.chunks_exact_mut(hd).enumerate() {
            let h = h0 + i;
            let qh = &q[h * hd..(h + 1) * hd];
            let kv_off = (h / a.group) * hd;
            let att = &mut att[..span];
            for (j, s) in att.iter_mut().enumerate() {
                let at = (a.lo + j) * a.kv_dim + kv_off;
                *s = dot(qh, &keys[at..at + hd]) * a.scale;
            }
            softmax(att);
            o.fill(0.0);
            for (j, &p) in att.iter().enumerate() {
                let at = (a.lo + j) * a.kv_dim + kv_off;
                for (x, &v) in o.iter_mut().zip(&values[at..at + hd]) {
                    *x += p * v;
                }
            }
        }
    };
    let threads = threads.clamp(1, MAX_THREADS).min(heads);
    if threads <= 1 || heads * span * hd * 2 < PARALLEL_MIN_MACS {
        one(0, out, &mut att[..max_seq]);
        return;
    }
    let per = heads.div_ceil(threads);
    std::thread::scope(|sc| {
        let mut parts = out
            .chunks_mut(per * hd)
            .zip(att.chunks_mut(max_seq))
            .enumerate();
        let first = parts.next();
        for (i, (o, a)) in parts {
            sc.spawn(move || one(i * per, o, a));
        }
        if let Some((_, (o, a))) = first {
            one(0, o, a);
        }
    });
}

/// The reference decoder for one sequence, borrowing the weights.
#[derive(Debug)]
pub struct Reference<'w> {
    config: ModelConfig,
    weights: &'w Weights,
    /// Positions the KV cache holds.
    max_seq: usize,
    threads: usize,
    /// RoPE inverse frequencies: (head_dim / 2)
    inv_freq: Vec<f32>,
    /// cos and sin of the current position's angles: (head_dim / 2) each
    cos: Vec<f32>,
    sin: Vec<f32>,
    /// The residual stream: (hidden)
    x: Vec<f32>,
    /// Normalized input of a sublayer: (hidden)
    xb: Vec<f32>,
    /// Output of o_proj or down_proj, before the residual add: (hidden)
    xb2: Vec<f32>,
    /// Queries of all heads: (heads * head_dim)
    q: Vec<f32>,
    /// Key of this position, all KV heads: (kv_heads * head_dim)
    k: Vec<f32>,
    /// Value of this position, all KV heads: (kv_heads * head_dim)
    v: Vec<f32>,
    /// Attention scores, then probabilities, of one head per thread: (threads, max_seq)
    att: Vec<f32>,
    /// Attention output of all heads: (heads * head_dim)
    attn_out: Vec<f32>,
    /// MLP gate, then silu(gate) * up: (intermediate)
    hb: Vec<f32>,
    /// MLP up: (intermediate)
    hb2: Vec<f32>,
    /// Logits of the last position run with logits: (vocab)
    logits: Vec<f32>,
    /// Keys of every layer and position: (layers, max_seq, kv_heads * head_dim)
    key_cache: Vec<f32>,
    /// Values of every layer and position: (layers, max_seq, kv_heads * head_dim)
    value_cache: Vec<f32>,
    /// Round keys and values to f16 as they enter the cache (an f16 KV cache).
    kv_f16: bool,
    /// Sliding-window attention over the last `window` positions (0: full causal attention).
    window: usize,
}

impl<'w> Reference<'w> {
    /// Checks the weights against the config and allocates every buffer for `max_seq` positions.
    pub fn new(
        config: &ModelConfig,
        weights: &'w Weights,
        max_seq: usize,
    ) -> Result<Self, ModelError> {
        check_weights(config, weights)?;
        let c = config;
        let kv_cache_len = c.layers * max_seq * c.kv_dim();
        Ok(Self {
            config: c.clone(),
            weights,
            max_seq,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get().min(MAX_THREADS)),
            inv_freq: c.rope_inv_freq(),
            cos: vec![0.0; c.head_dim / 2],
            sin: vec![0.0; c.head_dim / 2],
            x: vec![0.0; c.hidden],
            xb: vec![0.0; c.hidden],
            xb2: vec![0.0; c.hidden],
            q: vec![0.0; c.q_dim()],
            k: vec![0.0; c.kv_dim()],
            v: vec![0.0; c.kv_dim()],
            att: vec![0.0; MAX_THREADS * max_seq],
            attn_out: vec![0.0; c.q_dim()],
            hb: vec![0.0; c.intermediate],
            hb2: vec![0.0; c.intermediate],
            logits: vec![0.0; c.vocab],
            key_cache: vec![0.0; kv_cache_len],
            value_cache: vec![0.0; kv_cache_len],
            kv_f16: false,
            window: 0,
        })
    }

    /// Stores keys and values rounded to f16 (`f16`), as an f16 KV cache holds them, and
    /// attends only the last `window` positions (0: every position), Mistral-style.
    pub fn set_kv(&mut self, f16: bool, window: usize) {
        self.kv_f16 = f16;
        self.window = window;
    }

    /// Limits the threads used by matrix-vector products (results do not change).
    pub fn set_threads(&mut self, threads: usize) {
        self.threads = threads.clamp(1, MAX_THREADS);
    }

    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    pub fn max_seq(&self) -> usize {
        self.max_seq
    }

    /// The logits of the last position run by [`Reference::forward`].
    pub fn logits(&self) -> &[f32] {
        &self.logits
    }

    /// Runs `token` at `pos` (positions before it must already be in the cache) and returns the
    /// logits: (vocab).
    pub fn forward(&mut self, token: u32, pos: usize) -> Result<&[f32], ModelError> {
        self.forward_layers(token, pos)?;
        let w = self.weights;
        let eps = self.config.rms_norm_eps;

        // 15. Final RMSNorm: xb = rmsnorm(x) * norm.                      (hidden)
        rmsnorm(&mut self.xb, &self.x, &w.norm.data, eps);
        // 16. Logits: logits = lm_head . xb (the embedding when tied).     (vocab)
        matvec(&mut self.logits, &w.lm_head().data, &self.xb, self.threads);
        Ok(&self.logits)
    }

    /// Runs `token` at `pos` through every layer, appending its K and V to the cache, without
    /// computing logits (prompt positions other than the last need none).
    pub fn forward_layers(&mut self, token: u32, pos: usize) -> Result<(), ModelError> {
        let c = &self.config;
        if pos >= self.max_seq {
            return Err(ModelError::Position {
                pos,
                reason: format!("the KV cache was allocated for {} positions", self.max_seq),
            });
        }
        if token as usize >= c.vocab {
            return Err(ModelError::TokenOutOfRange {
                id: token,
                vocab: c.vocab,
            });
        }
        let w = self.weights;
        let (hidden, head_dim, kv_dim) = (c.hidden, c.head_dim, c.kv_dim());
        let half = head_dim / 2;
        let group = c.group_size();
        let eps = c.rms_norm_eps;
        let scale = 1.0 / (head_dim as f32).sqrt();

        // 1. Embedding: x = embed_tokens[token].                                (hidden)
        self.x.copy_from_slice(w.embed_tokens.row(token as usize));

        // RoPE angles of this position: angle_i = pos * inv_freq_i.     (head_dim / 2)
        for i in 0..half {
            let angle = pos as f32 * self.inv_freq[i];
            self.cos[i] = angle.cos();
            self.sin[i] = angle.sin();
        }

        for (l, lw) in w.layers.iter().enumerate() {
            // 2. Attention RMSNorm: xb = rmsnorm(x) * input_layernorm.          (hidden)
            rmsnorm(&mut self.xb, &self.x, &lw.input_layernorm.data, eps);

            // 3. Projections: q = Wq.xb (heads*head_dim), k = Wk.xb, v = Wv.xb (kv_dim).
            matvec(&mut self.q, &lw.q_proj.data, &self.xb, self.threads);
            matvec(&mut self.k, &lw.k_proj.data, &self.xb, self.threads);
            matvec(&mut self.v, &lw.v_proj.data, &self.xb, self.threads);

            // 4. Qwen3: RMSNorm over each head of q and k (weights: head_dim).
            if let (Some(qn), Some(kn)) = (&lw.q_norm, &lw.k_norm) {
                for head in self.q.chunks_exact_mut(head_dim) {
                    rmsnorm_in_place(head, &qn.data, eps);
                }
                for head in self.k.chunks_exact_mut(head_dim) {
                    rmsnorm_in_place(head, &kn.data, eps);
                }
            }

            // 5. RoPE, rotate-half: pairs (i, i + head_dim/2) of every q and k head.
            for head in self.q.chunks_exact_mut(head_dim) {
                rope_rotate_half(head, &self.cos, &self.sin);
            }
            for head in self.k.chunks_exact_mut(head_dim) {
                rope_rotate_half(head, &self.cos, &self.sin);
            }

            // 6. KV cache append: key_cache[l, pos] = k, value_cache[l, pos] = v (rounded to
            //    f16 when the cache is f16).
            let layer_base = l * self.max_seq * kv_dim;
            let at = layer_base + pos * kv_dim;
            self.key_cache[at..at + kv_dim].copy_from_slice(&self.k);
            self.value_cache[at..at + kv_dim].copy_from_slice(&self.v);
            if self.kv_f16 {
                for x in &mut self.key_cache[at..at + kv_dim] {
                    *x = round_f16(*x);
                }
                for x in &mut self.value_cache[at..at + kv_dim] {
                    *x = round_f16(*x);
                }
            }

            // 7. Causal GQA attention, per query head h (KV head h / group), over positions
            //    lo..=pos (lo = pos + 1 - window under a sliding window, else 0):
            //    att[t] = q_h . k_t / sqrt(head_dim); softmax; attn_out_h = sum_t att[t] * v_t.
            let lo = if self.window == 0 {
                0
            } else {
                (pos + 1).saturating_sub(self.window)
            };
            attend(
                &mut self.attn_out,
                &mut self.att,
                &self.q,
                &self.key_cache[layer_base..],
                &self.value_cache[layer_base..],
                AttendShape {
                    head_dim,
                    kv_dim,
                    group,
                    lo,
                    pos,
                    scale,
                },
                self.threads,
            );

            // 8. Output projection: xb2 = Wo.attn_out.                          (hidden)
            matvec(&mut self.xb2, &lw.o_proj.data, &self.attn_out, self.threads);
            // 9. Residual: x += xb2.
            add_in_place(&mut self.x, &self.xb2);

            // 10. MLP RMSNorm: xb = rmsnorm(x) * post_attention_layernorm.      (hidden)
            rmsnorm(
                &mut self.xb,
                &self.x,
                &lw.post_attention_layernorm.data,
                eps,
            );
            // 11. Gate and up: hb = Wg.xb, hb2 = Wu.xb.                   (intermediate)
            matvec(&mut self.hb, &lw.gate_proj.data, &self.xb, self.threads);
            matvec(&mut self.hb2, &lw.up_proj.data, &self.xb, self.threads);
            // 12. SwiGLU: hb = silu(hb) * hb2.                            (intermediate)
            for (g, &u) in self.hb.iter_mut().zip(&self.hb2) {
                *g = silu(*g) * u;
            }
            // 13. Down projection: xb2 = Wd.hb.                                 (hidden)
            matvec(&mut self.xb2, &lw.down_proj.data, &self.hb, self.threads);
            // 14. Residual: x += xb2.
            add_in_place(&mut self.x, &self.xb2);
        }
        debug_assert_eq!(self.x.len(), hidden);
        Ok(())
    }
}

impl Backend for Reference<'_> {
    fn step(
        &mut self,
        tokens: &[u32],
        pos: usize,
        want_logits: bool,
    ) -> anyhow::Result<StepOutput> {
        let Some((&last, rest)) = tokens.split_last() else {
            anyhow::bail!("step called with no tokens at position {pos}");
        };
        for (i, &t) in rest.iter().enumerate() {
            self.forward_layers(t, pos + i)?;
        }
        let logits = self.forward(last, pos + rest.len())?;
        Ok(StepOutput {
            argmax: argmax(logits),
            logits: want_logits.then(|| logits.to_vec()),
        })
    }
}

/// `x` rounded to the nearest f16 (ties to even), as an f16 KV cache stores it.
pub fn round_f16(x: f32) -> f32 {
    half::f16::from_f32(x).to_f32()
}

/// The logits of the last position of `tokens`, recomputed from scratch without a KV cache:
/// each layer runs over all positions, keys and values of every position computed anew.
pub fn forward_full(
    config: &ModelConfig,
    weights: &Weights,
    tokens: &[u32],
) -> Result<Vec<f32>, ModelError> {
    check_weights(config, weights)?;
    let c = config;
    let n = tokens.len();
    if n == 0 {
        return Err(ModelError::Position {
            pos: 0,
            reason: "forward_full needs at least one token".into(),
        });
    }
    let (hidden, head_dim, q_dim, kv_dim) = (c.hidden, c.head_dim, c.q_dim(), c.kv_dim());
    let group = c.group_size();
    let eps = c.rms_norm_eps;
    let scale = 1.0 / (head_dim as f32).sqrt();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(16));
    let inv_freq = c.rope_inv_freq();

    // Residual stream of every position: (n, hidden)
    let mut x = vec![0.0f32; n * hidden];
    for (row, &t) in x.chunks_exact_mut(hidden).zip(tokens) {
        if t as usize >= c.vocab {
            return Err(ModelError::TokenOutOfRange {
                id: t,
                vocab: c.vocab,
            });
        }
        row.copy_from_slice(weights.embed_tokens.row(t as usize));
    }
    // Per-position buffers: xb (n, hidden), q (n, q_dim), k and v (n, kv_dim), out (n, q_dim),
    // hb and hb2 (intermediate), o (hidden), att (n), cos and sin (head_dim / 2).
    let mut xb = vec![0.0f32; n * hidden];
    let mut q = vec![0.0f32; n * q_dim];
    let mut k = vec![0.0f32; n * kv_dim];
    let mut v = vec![0.0f32; n * kv_dim];
    let mut out = vec![0.0f32; n * q_dim];
    let mut hb = vec![0.0f32; c.intermediate];
    let mut hb2 = vec![0.0f32; c.intermediate];
    let mut o = vec![0.0f32; hidden];
    let mut att = vec![0.0f32; n];
    let mut cos = vec![0.0f32; head_dim / 2];
    let mut sin = vec![0.0f32; head_dim / 2];

    for lw in &weights.layers {
        for p in 0..n {
            let xb_p = &mut xb[p * hidden..(p + 1) * hidden];
            rmsnorm(
                xb_p,
                &x[p * hidden..(p + 1) * hidden],
                &lw.input_layernorm.data,
                eps,
            );
            let q_p = &mut q[p * q_dim..(p + 1) * q_dim];
            let k_p = &mut k[p * kv_dim..(p + 1) * kv_dim];
            matvec(q_p, &lw.q_proj.data, xb_p, threads);
            matvec(k_p, &lw.k_proj.data, xb_p, threads);
            matvec(
                &mut v[p * kv_dim..(p + 1) * kv_dim],
                &lw.v_proj.data,
                xb_p,
                threads,
            );
            if let (Some(qn), Some(kn)) = (&lw.q_norm, &lw.k_norm) {
                q_p.chunks_exact_mut(head_dim)
                    .for_each(|h| rmsnorm_in_place(h, &qn.data, eps));
                k_p.chunks_exact_mut(head_dim)
                    .for_each(|h| rmsnorm_in_place(h, &kn.data, eps));
            }
            for i in 0..head_dim / 2 {
                let angle = p as f32 * inv_freq[i];
                cos[i] = angle.cos();
                sin[i] = angle.sin();
            }
            q_p.chunks_exact_mut(head_dim)
                .for_each(|h| rope_rotate_half(h, &cos, &sin));
            k_p.chunks_exact_mut(head_dim)
                .for_each(|h| rope_rotate_half(h, &cos, &sin));
        }
        // Causal attention of every position over positions 0..=p.
        for p in 0..n {
            for h in 0..c.heads {
                let q_h = &q[p * q_dim + h * head_dim..][..head_dim];
                let kv_off = (h / group) * head_dim;
                let scores = &mut att[..=p];
                for (t, s) in scores.iter_mut().enumerate() {
                    *s = dot(q_h, &k[t * kv_dim + kv_off..][..head_dim]) * scale;
                }
                softmax(scores);
                let out_h = &mut out[p * q_dim + h * head_dim..][..head_dim];
                out_h.fill(0.0);
                for (t, &a) in scores.iter().enumerate() {
                    for (acc, &vv) in out_h.iter_mut().zip(&v[t * kv_dim + kv_off..][..head_dim]) {
                        *acc += a * vv;
                    }
                }
            }
        }
        for p in 0..n {
            let x_p = &mut x[p * hidden..(p + 1) * hidden];
            matvec(
                &mut o,
                &lw.o_proj.data,
                &out[p * q_dim..(p + 1) * q_dim],
                threads,
            );
            add_in_place(x_p, &o);
            let xb_p = &mut xb[p * hidden..(p + 1) * hidden];
            rmsnorm(xb_p, x_p, &lw.post_attention_layernorm.data, eps);
            matvec(&mut hb, &lw.gate_proj.data, xb_p, threads);
            matvec(&mut hb2, &lw.up_proj.data, xb_p, threads);
            for (g, &u) in hb.iter_mut().zip(&hb2) {
                *g = silu(*g) * u;
            }
            matvec(&mut o, &lw.down_proj.data, &hb, threads);
            add_in_place(x_p, &o);
        }
    }
    let last = &x[(n - 1) * hidden..];
    let mut normed = vec![0.0f32; hidden];
    rmsnorm(&mut normed, last, &weights.norm.data, eps);
    let mut logits = vec![0.0f32; c.vocab];
    matvec(&mut logits, &weights.lm_head().data, &normed, threads);
    Ok(logits)
}

/// Checks that every tensor has the shape the config implies.
pub fn check_weights(config: &ModelConfig, weights: &Weights) -> Result<(), ModelError> {
    let expected = tensor_names_and_shapes(config);
    let tensors = weights.tensors();
    let in_memory = PathBuf::from("(weights in memory)");
    if weights.layers.len() != config.layers
        || weights.lm_head.is_some() == config.tie_word_embeddings
        || tensors.len() != expected.len()
    {
        return Err(ModelError::InvalidConfig {
            path: in_memory,
            field: "num_hidden_layers / tie_word_embeddings".into(),
            value: format!("{} / {}", config.layers, config.tie_word_embeddings),
            reason: format!(
                "the weights hold {} layers and {} tensors, the config implies {} tensors",
                weights.layers.len(),
                tensors.len(),
                expected.len()
            ),
        });
    }
    for (t, (name, shape)) in tensors.iter().zip(&expected) {
        if &t.shape != shape || t.data.len() != t.elements() {
            return Err(ModelError::TensorShape {
                name: name.clone(),
                path: in_memory,
                expected: shape.clone(),
                found: t.shape.clone(),
            });
        }
        debug_assert_eq!(
            &t.name, name,
            "tensor order follows tensor_names_and_shapes"
        );
    }
    Ok(())
}

/// `out = rmsnorm(x) * weight`: `x * (1 / sqrt(mean(x^2) + eps))`, then times the weight.
pub fn rmsnorm(out: &mut [f32], x: &[f32], weight: &[f32], eps: f32) {
    let inv_rms = 1.0 / (dot(x, x) / x.len() as f32 + eps).sqrt();
    for ((o, &xi), &wi) in out.iter_mut().zip(x).zip(weight) {
        *o = wi * (xi * inv_rms);
    }
}

fn rmsnorm_in_place(x: &mut [f32], weight: &[f32], eps: f32) {
    let inv_rms = 1.0 / (dot(x, x) / x.len() as f32 + eps).sqrt();
    for (xi, &wi) in x.iter_mut().zip(weight) {
        *xi = wi * (*xi * inv_rms);
    }
}

/// RoPE in the rotate-half convention: for i < d/2,
/// `(x_i, x_{i+d/2}) <- (x_i cos_i - x_{i+d/2} sin_i, x_{i+d/2} cos_i + x_i sin_i)`.
pub fn rope_rotate_half(head: &mut [f32], cos: &[f32], sin: &[f32]) {
    let half = head.len() / 2;
    let (lo, hi) = head.split_at_mut(half);
    for i in 0..half {
        let (a, b) = (lo[i], hi[i]);
        lo[i] = a * cos[i] - b * sin[i];
        hi[i] = b * cos[i] + a * sin[i];
    }
}

/// In-place softmax (max subtracted first).
pub fn softmax(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0f32;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    for v in x.iter_mut() {
        *v /= sum;
    }
}

/// `x * sigmoid(x)`.
pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

fn add_in_place(x: &mut [f32], y: &[f32]) {
    for (a, &b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

/// Dot product with eight independent partial sums (a fixed order, so results are
/// reproducible), combined pairwise at the end.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let mut tail = 0.0f32;
    for (x, y) in ra.iter().zip(rb) {
        tail += x * y;
    }
    ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7])) + tail
}

/// `out = w . x` for a row-major `w` of shape (out.len(), x.len()), rows split across up to
/// `threads` threads when large enough.
pub fn matvec(out: &mut [f32], w: &[f32], x: &[f32], threads: usize) {
    let cols = x.len();
    let rows = out.len();
    debug_assert_eq!(w.len(), rows * cols);
    let serial = |out: &mut [f32], w: &[f32]| {
        for (o, row) in out.iter_mut().zip(w.chunks_exact(cols.max(1))) {
            *o = dot(row, x);
        }
    };
    if threads <= 1 || rows * cols < PARALLEL_MIN_MACS || rows < threads {
        serial(out, w);
        return;
    }
    let rows_per = rows.div_ceil(threads);
    std::thread::scope(|s| {
        let mut chunks = out.chunks_mut(rows_per).zip(w.chunks(rows_per * cols));
        let first = chunks.next();
        for (o, wc) in chunks {
            s.spawn(move || serial(o, wc));
        }
        if let Some((o, wc)) = first {
            serial(o, wc);
        }
    });
}
