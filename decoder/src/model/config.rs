//! `config.json`: the file schema as Hugging Face writers produce it ([`ConfigFile`], every field
//! an `Option`), and the normalized runtime configuration ([`ModelConfig`]) that everything else
//! reads. [`ConfigFile::normalize`] is the one place where writers' variants are reconciled and
//! unsupported options are rejected.
//!
//! Variants handled: transformers 4.x (`rope_theta` and `rope_scaling` at the top level,
//! `torch_dtype`) and 5.x (`rope_parameters` holding `rope_type` and `rope_theta`, `dtype`);
//! `head_dim` given or derived as `hidden_size / num_attention_heads`; `num_key_value_heads`
//! absent meaning one KV head per query head.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::error::ModelError;

/// The architectures the decoder implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Arch {
    /// `Qwen3ForCausalLM`: Llama plus a per-head RMSNorm on q and k before RoPE.
    Qwen3,
    /// `LlamaForCausalLM`.
    Llama,
}

impl Arch {
    /// The Hugging Face class name, as written in `architectures`.
    pub fn hf_class(self) -> &'static str {
        match self {
            Arch::Qwen3 => "Qwen3ForCausalLM",
            Arch::Llama => "LlamaForCausalLM",
        }
    }

    /// The Hugging Face `model_type`.
    pub fn model_type(self) -> &'static str {
        match self {
            Arch::Qwen3 => "qwen3",
            Arch::Llama => "llama",
        }
    }
}

/// The element type of stored weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WeightDtype {
    Bf16,
    F16,
    F32,
}

impl WeightDtype {
    /// The name used in `config.json` (`torch_dtype` / `dtype`).
    pub fn torch_name(self) -> &'static str {
        match self {
            WeightDtype::Bf16 => "bfloat16",
            WeightDtype::F16 => "float16",
            WeightDtype::F32 => "float32",
        }
    }

    pub fn from_torch_name(name: &str) -> Option<Self> {
        match name {
            "bfloat16" => Some(WeightDtype::Bf16),
            "float16" => Some(WeightDtype::F16),
            "float32" => Some(WeightDtype::F32),
            _ => None,
        }
    }

    pub fn bytes_per_element(self) -> usize {
        match self {
            WeightDtype::Bf16 | WeightDtype::F16 => 2,
            WeightDtype::F32 => 4,
        }
    }

    pub fn safetensors(self) -> safetensors::Dtype {
        match self {
            WeightDtype::Bf16 => safetensors::Dtype::BF16,
            WeightDtype::F16 => safetensors::Dtype::F16,
            WeightDtype::F32 => safetensors::Dtype::F32,
        }
    }
}

/// Llama 3 RoPE frequency scaling (`rope_type: "llama3"`), as Hugging Face's
/// `_compute_llama3_parameters` applies it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Llama3Scaling {
    pub factor: f64,
    pub low_freq_factor: f64,
    pub high_freq_factor: f64,
    pub original_max_position_embeddings: f64,
}

impl Llama3Scaling {
    /// Scales one inverse frequency (radians per position).
    pub fn apply(&self, inv_freq: f64) -> f64 {
        let low_freq_wavelen = self.original_max_position_embeddings / self.low_freq_factor;
        let high_freq_wavelen = self.original_max_position_embeddings / self.high_freq_factor;
        let wavelen = 2.0 * std::f64::consts::PI / inv_freq;
        if wavelen < high_freq_wavelen {
            // High frequencies: unchanged.
            inv_freq
        } else if wavelen > low_freq_wavelen {
            // Low frequencies: slowed down by `factor`.
            inv_freq / self.factor
        } else {
            // In between: interpolate smoothly between the two.
            let smooth = (self.original_max_position_embeddings / wavelen - self.low_freq_factor)
                / (self.high_freq_factor - self.low_freq_factor);
            (1.0 - smooth) * inv_freq / self.factor + smooth * inv_freq
        }
    }

    /// What the scaling divides inverse frequency `inv_freq` by: llama.cpp's `rope_freqs` factor
    /// (1 for the high frequencies, `factor` for the low ones).
    pub fn divisor(&self, inv_freq: f64) -> f64 {
        inv_freq / self.apply(inv_freq)
    }
}

/// RoPE's unscaled inverse frequencies (radians per position) of a head of `head_dim` dimensions,
/// one per pair: `theta^(-2i / head_dim)`.
pub fn rope_base_inv_freq(theta: f64, head_dim: usize) -> Vec<f64> {
    (0..head_dim / 2)
        .map(|i| 1.0 / theta.powf((2 * i) as f64 / head_dim as f64))
        .collect()
}

/// The normalized configuration every other part of the decoder reads.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    pub arch: Arch,
    /// Width of the residual stream (`hidden_size`).
    pub hidden: usize,
    /// Number of decoder layers (`num_hidden_layers`).
    pub layers: usize,
    /// Query heads (`num_attention_heads`).
    pub heads: usize,
    /// Key/value heads (`num_key_value_heads`); `heads` is a multiple of it.
    pub kv_heads: usize,
    /// Width of one head.
    pub head_dim: usize,
    /// Width of the MLP (`intermediate_size`).
    pub intermediate: usize,
    /// Rows of the embedding and of the lm_head (`vocab_size`).
    pub vocab: usize,
    pub rms_norm_eps: f32,
    /// RoPE base.
    pub rope_theta: f64,
    pub rope_scaling: Option<Llama3Scaling>,
    pub max_position_embeddings: usize,
    /// The lm_head is the embedding matrix (`tie_word_embeddings`).
    pub tie_word_embeddings: bool,
    /// Per-head RMSNorm on q and k before RoPE (Qwen3).
    pub qk_norm: bool,
    /// The dtype config.json names; the tensors themselves may be stored in any of the three.
    pub dtype: WeightDtype,
    pub bos_token_id: Option<u32>,
    /// EOS ids from config.json (the tokenizer prefers generation_config.json's).
    pub eos_token_ids: Vec<u32>,
}

/// The fewest positions (`max_position_embeddings`) a model config may allow.
pub const MIN_POSITIONS: usize = 16;

/// The most elements one weight matrix may have (2^40: 4 TB of f32), far past any checkpoint
/// this decoder runs; a config past it has a typo.
pub const MAX_MATRIX_ELEMENTS: usize = 1 << 40;

impl ModelConfig {
    /// Reads and normalizes `dir/config.json`.
    pub fn from_dir(dir: &Path) -> Result<Self, ModelError> {
        ConfigFile::read(&dir.join("config.json"))?.normalize()
    }

    /// Width of all query heads together.
    pub fn q_dim(&self) -> usize {
        self.heads * self.head_dim
    }

    /// Width of all key (or value) heads together.
    pub fn kv_dim(&self) -> usize {
        self.kv_heads * self.head_dim
    }

    /// Query heads sharing one KV head.
    pub fn group_size(&self) -> usize {
        self.heads / self.kv_heads.max(1)
    }

    /// RoPE inverse frequencies, `head_dim / 2` entries, with Llama 3 scaling applied: the angle
    /// of pair `i` at position `pos` is `(pos as f32) * inv_freq[i]`, and its cos and sin are
    /// taken in f32. Every backend uses exactly these values.
    pub fn rope_inv_freq(&self) -> Vec<f32> {
        rope_base_inv_freq(self.rope_theta, self.head_dim)
            .into_iter()
            .map(|inv_freq| {
                let scaled = match &self.rope_scaling {
                    Some(s) => s.apply(inv_freq),
                    None => inv_freq,
                };
                scaled as f32
            })
            .collect()
    }

    /// Parameters of one decoder layer.
    pub fn layer_parameter_count(&self) -> u64 {
        let (h, q, kv, i) = (
            self.hidden as u64,
            self.q_dim() as u64,
            self.kv_dim() as u64,
            self.intermediate as u64,
        );
        let attention = h * q + 2 * h * kv + q * h;
        let mlp = 3 * h * i;
        let norms = 2 * h
            + if self.qk_norm {
                2 * self.head_dim as u64
            } else {
                0
            };
        attention + mlp + norms
    }

    /// Parameters of the whole model, the tied embedding counted once.
    pub fn parameter_count(&self) -> u64 {
        let embedding = (self.vocab * self.hidden) as u64;
        let lm_head = if self.tie_word_embeddings {
            0
        } else {
            embedding
        };
        // Saturating: sizes are bounded at load (`MAX_MATRIX_ELEMENTS`), a count past 2^64 is not.
        (self.layers as u64)
            .saturating_mul(self.layer_parameter_count())
            .saturating_add(embedding)
            .saturating_add(self.hidden as u64)
            .saturating_add(lm_head)
    }
}

/// `bos_token_id` / `eos_token_id`: one id or a list.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum TokenIds {
    One(u32),
    Many(Vec<u32>),
}

impl TokenIds {
    pub fn to_vec(&self) -> Vec<u32> {
        match self {
            TokenIds::One(id) => vec![*id],
            TokenIds::Many(ids) => ids.clone(),
        }
    }
}

/// `rope_scaling` (4.x) or `rope_parameters` (5.x).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct RopeFile {
    pub rope_type: Option<String>,
    /// The older spelling of `rope_type`.
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub rope_theta: Option<f64>,
    pub factor: Option<f64>,
    pub low_freq_factor: Option<f64>,
    pub high_freq_factor: Option<f64>,
    pub original_max_position_embeddings: Option<f64>,
    pub partial_rotary_factor: Option<f64>,
}

/// `config.json` as written by transformers 4.x or 5.x; only the fields the decoder reads or must
/// reject. Unknown fields are ignored.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ConfigFile {
    /// Where it was read from, for error messages.
    #[serde(skip)]
    pub path: PathBuf,
    pub architectures: Option<Vec<String>>,
    pub model_type: Option<String>,
    pub hidden_size: Option<usize>,
    pub intermediate_size: Option<usize>,
    pub num_hidden_layers: Option<usize>,
    pub num_attention_heads: Option<usize>,
    pub num_key_value_heads: Option<usize>,
    pub head_dim: Option<usize>,
    pub vocab_size: Option<usize>,
    pub rms_norm_eps: Option<f64>,
    pub rope_theta: Option<f64>,
    pub rope_scaling: Option<RopeFile>,
    pub rope_parameters: Option<RopeFile>,
    pub partial_rotary_factor: Option<f64>,
    pub max_position_embeddings: Option<usize>,
    pub tie_word_embeddings: Option<bool>,
    pub torch_dtype: Option<String>,
    pub dtype: Option<String>,
    pub hidden_act: Option<String>,
    pub attention_bias: Option<bool>,
    pub mlp_bias: Option<bool>,
    pub use_sliding_window: Option<bool>,
    pub layer_types: Option<Vec<String>>,
    pub bos_token_id: Option<TokenIds>,
    pub eos_token_id: Option<TokenIds>,
}

impl ConfigFile {
    /// Reads and parses one `config.json`.
    pub fn read(path: &Path) -> Result<Self, ModelError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                ModelError::MissingFile {
                    path: path.to_path_buf(),
                    hint: "a checkpoint directory needs config.json; give a Hugging Face \
                           checkpoint directory or a preset name"
                        .into(),
                }
            } else {
                ModelError::io(path, e)
            }
        })?;
        let mut file: ConfigFile = serde_json::from_str(&text).map_err(|err| ModelError::Json {
            path: path.to_path_buf(),
            err,
        })?;
        file.path = path.to_path_buf();
        Ok(file)
    }

    /// Reconciles the writers' variants and rejects what the decoder does not implement.
    pub fn normalize(&self) -> Result<ModelConfig, ModelError> {
        let arch = self.arch()?;
        self.reject_unsupported()?;

        let hidden = self.required("hidden_size", self.hidden_size)?;
        let layers = self.required("num_hidden_layers", self.num_hidden_layers)?;
        let heads = self.required("num_attention_heads", self.num_attention_heads)?;
        let intermediate = self.required("intermediate_size", self.intermediate_size)?;
        let vocab = self.required("vocab_size", self.vocab_size)?;
        let kv_heads = self.num_key_value_heads.unwrap_or(heads);
        if kv_heads == 0 || heads % kv_heads != 0 {
            return Err(self.invalid(
                "num_key_value_heads",
                kv_heads,
                format!("must divide num_attention_heads = {heads}"),
            ));
        }
        let head_dim = match self.head_dim {
            Some(d) => d,
            None if hidden % heads == 0 => hidden / heads,
            None => {
                return Err(self.invalid(
                    "hidden_size",
                    hidden,
                    format!(
                        "head_dim is absent and hidden_size is not a multiple of \
                         num_attention_heads = {heads}; add head_dim"
                    ),
                ));
            }
        };
        if head_dim == 0 || head_dim % 2 != 0 {
            return Err(self.invalid("head_dim", head_dim, "RoPE needs an even head_dim".into()));
        }

        let (rope_theta, rope_scaling) = self.rope()?;
        let dtype = self.dtype()?;
        let rms_norm_eps = self.rms_norm_eps.unwrap_or(1e-6);
        if !(rms_norm_eps.is_finite() && rms_norm_eps >= 0.0) {
            return Err(self.invalid(
                "rms_norm_eps",
                rms_norm_eps,
                "must be a finite non-negative number".into(),
            ));
        }
        let max_position_embeddings = self.max_position_embeddings.unwrap_or(match arch {
            Arch::Qwen3 => 32768,
            Arch::Llama => 2048,
        });
        if max_position_embeddings < MIN_POSITIONS {
            return Err(self.invalid(
                "max_position_embeddings",
                max_position_embeddings,
                format!(
                    "a model needs room for at least {MIN_POSITIONS} positions (a prompt and a \
                     few generated tokens); set it to the context length the model was trained \
                     with"
                ),
            ));
        }
        // Every size must be addressable: one past 32 bits or a matrix past this machine's memory
        // is a typo, and would overflow the element counts the loader and the engine compute.
        for (field, value) in [
            ("hidden_size", hidden),
            ("num_hidden_layers", layers),
            ("num_attention_heads", heads),
            ("head_dim", head_dim),
            ("intermediate_size", intermediate),
            ("vocab_size", vocab),
        ] {
            if u32::try_from(value).is_err() {
                return Err(self.invalid(
                    field,
                    value,
                    "sizes are at most 2^32 - 1; check the config".into(),
                ));
            }
        }
        for (field, value, matrix, elements) in [
            (
                "vocab_size",
                vocab,
                "vocab_size x hidden_size",
                vocab.checked_mul(hidden),
            ),
            (
                "num_attention_heads",
                heads,
                "num_attention_heads x head_dim x hidden_size",
                heads
                    .checked_mul(head_dim)
                    .and_then(|q| q.checked_mul(hidden)),
            ),
            (
                "intermediate_size",
                intermediate,
                "intermediate_size x hidden_size",
                intermediate.checked_mul(hidden),
            ),
        ] {
            if elements.is_none_or(|n| n > MAX_MATRIX_ELEMENTS) {
                return Err(self.invalid(
                    field,
                    value,
                    format!(
                        "{matrix} is more than 2^{} elements (hidden_size = {hidden}); check the \
                         config's sizes",
                        MAX_MATRIX_ELEMENTS.ilog2()
                    ),
                ));
            }
        }

        Ok(ModelConfig {
            arch,
            hidden,
            layers,
            heads,
            kv_heads,
            head_dim,
            intermediate,
            vocab,
            rms_norm_eps: rms_norm_eps as f32,
            rope_theta,
            rope_scaling,
            max_position_embeddings,
            tie_word_embeddings: self.tie_word_embeddings.unwrap_or(false),
            qk_norm: arch == Arch::Qwen3,
            dtype,
            bos_token_id: self
                .bos_token_id
                .as_ref()
                .and_then(|t| t.to_vec().first().copied()),
            eos_token_ids: self
                .eos_token_id
                .as_ref()
                .map(TokenIds::to_vec)
                .unwrap_or_default(),
        })
    }

    fn arch(&self) -> Result<Arch, ModelError> {
        let hint = "the decoder implements Qwen3ForCausalLM and LlamaForCausalLM";
        match self.architectures.as_deref() {
            Some([one]) => match one.as_str() {
                "Qwen3ForCausalLM" => Ok(Arch::Qwen3),
                "LlamaForCausalLM" => Ok(Arch::Llama),
                other => Err(self.unsupported("architectures", other, hint)),
            },
            Some(many) if !many.is_empty() => {
                Err(self.unsupported("architectures", &many.join(", "), hint))
            }
            _ => match self.model_type.as_deref() {
                Some("qwen3") => Ok(Arch::Qwen3),
                Some("llama") => Ok(Arch::Llama),
                Some(other) => Err(self.unsupported("model_type", other, hint)),
                None => Err(self.missing("architectures")),
            },
        }
    }

    fn reject_unsupported(&self) -> Result<(), ModelError> {
        if let Some(act) = &self.hidden_act
            && act != "silu"
        {
            return Err(self.unsupported(
                "hidden_act",
                act,
                "the MLP implemented is SwiGLU (silu)",
            ));
        }
        if self.attention_bias == Some(true) {
            return Err(self.unsupported(
                "attention_bias",
                "true",
                "attention projections with biases are not implemented",
            ));
        }
        if self.mlp_bias == Some(true) {
            return Err(self.unsupported(
                "mlp_bias",
                "true",
                "MLP projections with biases are not implemented",
            ));
        }
        if self.use_sliding_window == Some(true) {
            return Err(self.unsupported(
                "use_sliding_window",
                "true",
                "only full causal attention is implemented",
            ));
        }
        if let Some(types) = &self.layer_types
            && let Some(other) = types.iter().find(|t| *t != "full_attention")
        {
            return Err(self.unsupported(
                "layer_types",
                other,
                "only full causal attention (full_attention) is implemented",
            ));
        }
        if let Some(f) = self.partial_rotary_factor
            && f != 1.0
        {
            return Err(self.unsupported(
                "partial_rotary_factor",
                &f.to_string(),
                "only RoPE over the whole head is implemented",
            ));
        }
        Ok(())
    }

    /// The RoPE base and scaling from either layout.
    fn rope(&self) -> Result<(f64, Option<Llama3Scaling>), ModelError> {
        let (field, rope) = match (&self.rope_parameters, &self.rope_scaling) {
            (Some(p), _) => ("rope_parameters", Some(p)),
            (None, Some(s)) => ("rope_scaling", Some(s)),
            (None, None) => ("rope_scaling", None),
        };
        let theta = rope
            .and_then(|r| r.rope_theta)
            .or(self.rope_theta)
            .unwrap_or(10000.0);
        if !(theta.is_finite() && theta > 1.0) {
            return Err(self.invalid("rope_theta", theta, "must be a number above 1".into()));
        }
        let Some(rope) = rope else {
            return Ok((theta, None));
        };
        if let Some(f) = rope.partial_rotary_factor
            && f != 1.0
        {
            return Err(self.unsupported(
                &format!("{field}.partial_rotary_factor"),
                &f.to_string(),
                "only RoPE over the whole head is implemented",
            ));
        }
        let kind = rope.rope_type.as_deref().or(rope.kind.as_deref());
        match kind {
            None | Some("default") => Ok((theta, None)),
            Some("llama3") => {
                let get = |name: &str, v: Option<f64>| {
                    v.ok_or_else(|| self.missing(&format!("{field}.{name}")))
                };
                let scaling = Llama3Scaling {
                    factor: get("factor", rope.factor)?,
                    low_freq_factor: get("low_freq_factor", rope.low_freq_factor)?,
                    high_freq_factor: get("high_freq_factor", rope.high_freq_factor)?,
                    original_max_position_embeddings: get(
                        "original_max_position_embeddings",
                        rope.original_max_position_embeddings,
                    )?,
                };
                if !(scaling.factor > 0.0
                    && scaling.low_freq_factor > 0.0
                    && scaling.high_freq_factor > scaling.low_freq_factor
                    && scaling.original_max_position_embeddings > 0.0)
                {
                    return Err(self.invalid(
                        field,
                        format!("{scaling:?}"),
                        "llama3 scaling needs factor > 0 and high_freq_factor > \
                         low_freq_factor > 0"
                            .into(),
                    ));
                }
                Ok((theta, Some(scaling)))
            }
            Some(other) => Err(self.unsupported(
                &format!("{field}.rope_type"),
                other,
                "the RoPE scalings implemented are default and llama3",
            )),
        }
    }

    fn dtype(&self) -> Result<WeightDtype, ModelError> {
        let (field, name) = match (&self.dtype, &self.torch_dtype) {
            (Some(d), _) => ("dtype", d),
            (None, Some(d)) => ("torch_dtype", d),
            // transformers reads a config without a dtype as float32.
            (None, None) => return Ok(WeightDtype::F32),
        };
        WeightDtype::from_torch_name(name).ok_or_else(|| {
            self.unsupported(
                field,
                name,
                "the dtypes supported are bfloat16, float16, float32",
            )
        })
    }

    fn required(&self, field: &str, value: Option<usize>) -> Result<usize, ModelError> {
        match value {
            None => Err(self.missing(field)),
            Some(0) => Err(self.invalid(field, 0, "must be positive".into())),
            Some(v) => Ok(v),
        }
    }

    fn missing(&self, field: &str) -> ModelError {
        ModelError::MissingField {
            path: self.path.clone(),
            field: field.to_string(),
        }
    }

    fn unsupported(&self, field: &str, value: &str, hint: &str) -> ModelError {
        ModelError::Unsupported {
            path: self.path.clone(),
            field: field.to_string(),
            value: value.to_string(),
            hint: hint.to_string(),
        }
    }

    fn invalid(&self, field: &str, value: impl std::fmt::Display, reason: String) -> ModelError {
        ModelError::InvalidConfig {
            path: self.path.clone(),
            field: field.to_string(),
            value: value.to_string(),
            reason,
        }
    }
}
