//! Synthetic checkpoints: real Hugging Face directories (`config.json`, `generation_config.json`,
//! `tokenizer.json`, `tokenizer_config.json`, `model.safetensors` or shards with an index) with
//! deterministic random weights, so nothing needs a download.
//!
//! Weight scales are chosen so that a forward pass stays well behaved over thousands of
//! positions and greedy decoding produces varied tokens:
//! - embeddings and lm_head have std `3 / sqrt(hidden)`, so logits (the final RMSNorm output,
//!   rms 1, times a row) have std about 3: peaked enough to be decisive, never degenerate;
//! - projections have std `1 / sqrt(fan_in)`, so every sublayer's output has rms about 1 and the
//!   residual stream grows only like the square root of the layer count; the updates outweigh
//!   the small embedding, so a tied lm_head does not simply predict the current token again;
//! - attention scores have std about 2.5 (Qwen3 through q/k-norm weights near 1.6, Llama through
//!   q/k projections 1.6x larger), so attention depends on the context instead of averaging it.
//!
//! Every value is rounded to bf16 and values below 2^-14 in magnitude are flushed to zero, so
//! the same checkpoint written as BF16, F16 or F32 holds exactly the same numbers.
//!
//! Each tensor draws from its own stream seeded by (seed, tensor name), so the values do not
//! depend on the order tensors are written or on sharding. Writing streams tensor by tensor:
//! memory stays at a few MB whatever the checkpoint size.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use profiler::rng::Rng;
use serde_json::{Value, json};

use super::config::{Arch, ConfigFile, ModelConfig, WeightDtype};
use super::error::ModelError;
use super::safetensors_io::{SafetensorsWriter, TensorEntry};
use super::weights::{INDEX_FILE, SINGLE_FILE, Weights, tensor_names_and_shapes};

/// The seed used when none is given (and for presets generated into the cache).
pub const DEFAULT_SEED: u64 = 0x5EED;

/// Values are generated and written this many at a time.
const CHUNK_ELEMENTS: usize = 1 << 20;

/// The synthetic checkpoints that `decoder synth` and `--model NAME` know.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Preset {
    /// Qwen3: hidden 256, 4 layers, 8 query / 2 KV heads, head_dim 64, vocab 4096, tied.
    Tiny,
    /// Llama: hidden 288, 3 layers, 9 query / 3 KV heads, head_dim 32 (derived), vocab 3000,
    /// untied, Llama 3 RoPE scaling.
    TinyLlama,
    /// The Qwen3-0.6B shape (about 596 M parameters with the tied embedding).
    Qwen3_0_6b,
    /// The Llama-3.2-1B shape (about 1.24 B parameters with the tied embedding).
    Llama1b,
}

impl Preset {
    pub const ALL: [Preset; 4] = [
        Preset::Tiny,
        Preset::TinyLlama,
        Preset::Qwen3_0_6b,
        Preset::Llama1b,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Preset::Tiny => "tiny",
            Preset::TinyLlama => "tiny-llama",
            Preset::Qwen3_0_6b => "qwen3-0.6b",
            Preset::Llama1b => "llama-1b",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == name)
    }

    /// The names of all presets, comma-separated (for messages).
    pub fn names() -> String {
        Self::ALL.map(Preset::name).join(", ")
    }

    fn spec(self) -> Spec {
        match self {
            Preset::Tiny => Spec {
                arch: Arch::Qwen3,
                hidden: 256,
                layers: 4,
                heads: 8,
                kv_heads: 2,
                head_dim: 64,
                write_head_dim: true,
                intermediate: 768,
                vocab: 4096,
                tied: true,
                rope_theta: 1_000_000.0,
                llama3: None,
                rms_norm_eps: 1e-6,
                max_position_embeddings: 32768,
            },
            Preset::TinyLlama => Spec {
                arch: Arch::Llama,
                hidden: 288,
                layers: 3,
                heads: 9,
                kv_heads: 3,
                head_dim: 32,
                // Older Llama configs leave head_dim out; it is derived as 288 / 9.
                write_head_dim: false,
                intermediate: 768,
                vocab: 3000,
                tied: false,
                rope_theta: 10_000.0,
                // With head_dim 32 and these values, the frequencies fall in all three bands.
                llama3: Some([8.0, 1.0, 4.0, 512.0]),
                rms_norm_eps: 1e-5,
                max_position_embeddings: 8192,
            },
            Preset::Qwen3_0_6b => Spec {
                arch: Arch::Qwen3,
                hidden: 1024,
                layers: 28,
                heads: 16,
                kv_heads: 8,
                head_dim: 128,
                write_head_dim: true,
                intermediate: 3072,
                vocab: 151_936,
                tied: true,
                rope_theta: 1_000_000.0,
                llama3: None,
                rms_norm_eps: 1e-6,
                max_position_embeddings: 40960,
            },
            Preset::Llama1b => Spec {
                arch: Arch::Llama,
                hidden: 2048,
                layers: 16,
                heads: 32,
                kv_heads: 8,
                head_dim: 64,
                write_head_dim: true,
                intermediate: 8192,
                vocab: 128_256,
                tied: true,
                rope_theta: 500_000.0,
                llama3: Some([32.0, 1.0, 4.0, 8192.0]),
                rms_norm_eps: 1e-5,
                max_position_embeddings: 131_072,
            },
        }
    }

    /// The normalized config of this preset (what loading its config.json gives).
    pub fn config(self) -> Result<ModelConfig, ModelError> {
        let spec = self.spec();
        let json = spec.config_json(ConfigLayout::Transformers4, WeightDtype::Bf16);
        let mut file: ConfigFile =
            serde_json::from_value(json).map_err(|source| ModelError::Json {
                path: PathBuf::from(format!("<preset {}>/config.json", self.name())),
                err: source,
            })?;
        file.path = PathBuf::from(format!("<preset {}>/config.json", self.name()));
        file.normalize()
    }
}

/// Which transformers version's config.json layout to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ConfigLayout {
    /// `rope_theta` / `rope_scaling` at the top level, `torch_dtype`.
    #[default]
    Transformers4,
    /// `rope_parameters` holding `rope_type` and `rope_theta`, `dtype`, `layer_types`.
    Transformers5,
}

/// How to write a synthetic checkpoint.
#[derive(Debug, Clone)]
pub struct SynthOptions {
    pub seed: u64,
    pub dtype: WeightDtype,
    /// 1 writes `model.safetensors`; more writes that many shards and an index.
    pub shards: usize,
    pub layout: ConfigLayout,
    /// Draw a progress bar on stderr (when it is a terminal).
    pub progress: bool,
}

impl Default for SynthOptions {
    fn default() -> Self {
        Self {
            seed: DEFAULT_SEED,
            dtype: WeightDtype::Bf16,
            shards: 1,
            layout: ConfigLayout::Transformers4,
            progress: false,
        }
    }
}

/// The shape and hyperparameters of a preset.
#[derive(Debug, Clone)]
struct Spec {
    arch: Arch,
    hidden: usize,
    layers: usize,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    write_head_dim: bool,
    intermediate: usize,
    vocab: usize,
    tied: bool,
    rope_theta: f64,
    /// factor, low_freq_factor, high_freq_factor, original_max_position_embeddings
    llama3: Option<[f64; 4]>,
    rms_norm_eps: f64,
    max_position_embeddings: usize,
}

impl Spec {
    fn specials(&self) -> Vec<String> {
        match self.arch {
            Arch::Qwen3 => ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
                .map(String::from)
                .to_vec(),
            Arch::Llama => {
                let mut names: Vec<String> = [
                    "<|begin_of_text|>",
                    "<|end_of_text|>",
                    "<|start_header_id|>",
                    "<|end_header_id|>",
                    "<|eom_id|>",
                    "<|eot_id|>",
                ]
                .map(String::from)
                .to_vec();
                // Llama 3 reserves the top 256 ids for special tokens.
                if self.vocab > 100_000 {
                    let mut n = 0;
                    while names.len() < 256 {
                        names.push(format!("<|reserved_special_token_{n}|>"));
                        n += 1;
                    }
                }
                names
            }
        }
    }

    /// Id of a special token: specials occupy the top of the vocabulary.
    fn special_id(&self, name: &str) -> u32 {
        let specials = self.specials();
        let base = self.vocab - specials.len();
        let i = specials.iter().position(|s| s == name).unwrap_or(0);
        (base + i) as u32
    }

    fn bos_eos(&self) -> (u32, Vec<u32>) {
        match self.arch {
            Arch::Qwen3 => (
                self.special_id("<|endoftext|>"),
                vec![
                    self.special_id("<|im_end|>"),
                    self.special_id("<|endoftext|>"),
                ],
            ),
            Arch::Llama => (
                self.special_id("<|begin_of_text|>"),
                vec![
                    self.special_id("<|end_of_text|>"),
                    self.special_id("<|eom_id|>"),
                    self.special_id("<|eot_id|>"),
                ],
            ),
        }
    }

    fn config_json(&self, layout: ConfigLayout, dtype: WeightDtype) -> Value {
        let (bos, eos) = self.bos_eos();
        let config_eos = match self.arch {
            // Qwen3's config.json names only <|im_end|>; generation_config.json names both.
            Arch::Qwen3 => json!(eos[0]),
            Arch::Llama => json!(eos),
        };
        let mut c = BTreeMap::<&str, Value>::new();
        c.insert("architectures", json!([self.arch.hf_class()]));
        c.insert("model_type", json!(self.arch.model_type()));
        c.insert("attention_bias", json!(false));
        c.insert("attention_dropout", json!(0.0));
        c.insert("bos_token_id", json!(bos));
        c.insert("eos_token_id", config_eos);
        if self.write_head_dim {
            c.insert("head_dim", json!(self.head_dim));
        }
        c.insert("hidden_act", json!("silu"));
        c.insert("hidden_size", json!(self.hidden));
        c.insert("initializer_range", json!(0.02));
        c.insert("intermediate_size", json!(self.intermediate));
        c.insert(
            "max_position_embeddings",
            json!(self.max_position_embeddings),
        );
        c.insert("num_attention_heads", json!(self.heads));
        c.insert("num_hidden_layers", json!(self.layers));
        c.insert("num_key_value_heads", json!(self.kv_heads));
        c.insert("rms_norm_eps", json!(self.rms_norm_eps));
        c.insert("tie_word_embeddings", json!(self.tied));
        c.insert("use_cache", json!(true));
        c.insert("vocab_size", json!(self.vocab));
        match self.arch {
            Arch::Qwen3 => {
                c.insert("max_window_layers", json!(self.layers));
                c.insert("sliding_window", Value::Null);
                c.insert("use_sliding_window", json!(false));
            }
            Arch::Llama => {
                c.insert("mlp_bias", json!(false));
                c.insert("pretraining_tp", json!(1));
            }
        }
        let scaling = self.llama3.map(|[factor, low, high, original]| {
            json!({
                "factor": factor,
                "low_freq_factor": low,
                "high_freq_factor": high,
                "original_max_position_embeddings": original as u64,
                "rope_type": "llama3",
            })
        });
        match layout {
            ConfigLayout::Transformers4 => {
                c.insert("rope_theta", json!(self.rope_theta));
                c.insert("rope_scaling", scaling.unwrap_or(Value::Null));
                c.insert("torch_dtype", json!(dtype.torch_name()));
                c.insert("transformers_version", json!("4.51.0"));
            }
            ConfigLayout::Transformers5 => {
                let mut params = scaling.unwrap_or_else(|| json!({"rope_type": "default"}));
                if let Some(obj) = params.as_object_mut() {
                    obj.insert("rope_theta".into(), json!(self.rope_theta));
                }
                c.insert("rope_parameters", params);
                c.insert("dtype", json!(dtype.torch_name()));
                c.insert("layer_types", json!(vec!["full_attention"; self.layers]));
                c.insert("transformers_version", json!("5.0.0"));
            }
        }
        json!(c)
    }

    fn generation_config_json(&self) -> Value {
        let (bos, eos) = self.bos_eos();
        json!({
            "bos_token_id": bos,
            "eos_token_id": eos,
            "do_sample": false,
            "transformers_version": "4.51.0",
        })
    }

    fn tokenizer_config_json(&self) -> Value {
        match self.arch {
            Arch::Qwen3 => json!({
                "bos_token": null,
                "eos_token": "<|im_end|>",
                "pad_token": "<|endoftext|>",
                "model_max_length": self.max_position_embeddings,
                "tokenizer_class": "Qwen2Tokenizer",
                "chat_template": "{%- for message in messages %}{{- '<|im_start|>' + \
                    message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}\
                    {%- endfor %}{%- if add_generation_prompt %}\
                    {{- '<|im_start|>assistant\\n' }}{%- endif %}",
            }),
            Arch::Llama => json!({
                "bos_token": "<|begin_of_text|>",
                "eos_token": "<|eot_id|>",
                "model_max_length": self.max_position_embeddings,
                "tokenizer_class": "PreTrainedTokenizerFast",
                "chat_template": "{{- bos_token }}{%- for message in messages %}\
                    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + \
                    message['content'] | trim + '<|eot_id|>' }}{%- endfor %}\
                    {%- if add_generation_prompt %}\
                    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}",
            }),
        }
    }

    fn tokenizer_json(&self) -> Value {
        let specials = self.specials();
        let bos = (self.arch == Arch::Llama).then(|| specials[0].clone());
        byte_level_bpe_json(self.vocab, &specials, bos.as_deref())
    }

    /// (center, half width) of the uniform distribution of one tensor's values.
    fn distribution(&self, name: &str) -> (f32, f32) {
        // A uniform on [-a, a] has std a / sqrt(3).
        let uniform = |std: f64| (0.0, (std * 3f64.sqrt()) as f32);
        let (h, q, i) = (
            self.hidden as f64,
            (self.heads * self.head_dim) as f64,
            self.intermediate as f64,
        );
        let qk_proj_gain = if self.arch == Arch::Qwen3 { 1.0 } else { 1.6 };
        if name.ends_with("embed_tokens.weight") || name == "lm_head.weight" {
            uniform(3.0 / h.sqrt())
        } else if name.ends_with("q_norm.weight") || name.ends_with("k_norm.weight") {
            (1.6, 0.1)
        } else if name.ends_with("norm.weight") {
            (1.0, 0.1)
        } else if name.ends_with("q_proj.weight") || name.ends_with("k_proj.weight") {
            uniform(qk_proj_gain / h.sqrt())
        } else if name.ends_with("o_proj.weight") {
            uniform(1.0 / q.sqrt())
        } else if name.ends_with("down_proj.weight") {
            uniform(1.0 / i.sqrt())
        } else {
            // v_proj, gate_proj, up_proj: fan-in hidden.
            uniform(1.0 / h.sqrt())
        }
    }
}

/// Rounds to bf16 and flushes magnitudes below 2^-14 to zero, so the value is exact in bf16,
/// f16 and f32 alike.
fn representable(v: f32) -> f32 {
    let b = half::bf16::from_f32(v).to_f32();
    if b.abs() < 1.0 / 16384.0 { 0.0 } else { b }
}

/// Writes a preset into `out` (which must not exist): into a temporary sibling first, renamed
/// into place once complete, so a reader never sees a half-written checkpoint.
pub fn write_preset(preset: Preset, out: &Path, opts: &SynthOptions) -> Result<(), ModelError> {
    let spec = preset.spec();
    let config = preset.config()?;
    write_atomically(out, |dir| {
        write_json(
            &dir.join("config.json"),
            &spec.config_json(opts.layout, opts.dtype),
        )?;
        write_json(
            &dir.join("generation_config.json"),
            &spec.generation_config_json(),
        )?;
        write_json(&dir.join("tokenizer.json"), &spec.tokenizer_json())?;
        write_json(
            &dir.join("tokenizer_config.json"),
            &spec.tokenizer_config_json(),
        )?;
        let entries = tensor_names_and_shapes(&config);
        let total_bytes: u64 = entries
            .iter()
            .map(|(_, s)| (s.iter().product::<usize>() * opts.dtype.bytes_per_element()) as u64)
            .sum();
        let bar = progress_bar(opts.progress, total_bytes, preset.name());
        let mut values = Vec::with_capacity(CHUNK_ELEMENTS);
        write_model_tensors(
            dir,
            &entries,
            opts.dtype,
            opts.shards,
            &mut |name, writer| {
                let (center, half_width) = spec.distribution(name);
                let mut rng = Rng::for_label(opts.seed, name);
                let mut left = writer
                    .current()
                    .map_or(0, |e| e.shape.iter().product::<usize>());
                while left > 0 {
                    let n = left.min(CHUNK_ELEMENTS);
                    values.clear();
                    while values.len() < n {
                        let (a, b) = rng.pair_symmetric();
                        values.push(representable(center + half_width * a));
                        if values.len() < n {
                            values.push(representable(center + half_width * b));
                        }
                    }
                    writer.write_f32(&values)?;
                    bar.inc((n * opts.dtype.bytes_per_element()) as u64);
                    left -= n;
                }
                Ok(())
            },
        )?;
        bar.finish_and_clear();
        Ok(())
    })
}

/// Writes `weights` as the checkpoint tensors of `dir` (`model.safetensors`, or `shards` shards
/// and an index), converted to `dtype`. The config and tokenizer files are the caller's.
pub fn write_weights(
    dir: &Path,
    weights: &Weights,
    dtype: WeightDtype,
    shards: usize,
) -> Result<(), ModelError> {
    let tensors = weights.tensors();
    let entries: Vec<(String, Vec<usize>)> = tensors
        .iter()
        .map(|t| (t.name.clone(), t.shape.clone()))
        .collect();
    let by_name: std::collections::HashMap<&str, &super::weights::Tensor> =
        tensors.iter().map(|t| (t.name.as_str(), *t)).collect();
    write_model_tensors(dir, &entries, dtype, shards, &mut |name, writer| {
        let tensor = by_name.get(name).ok_or_else(|| ModelError::MissingTensor {
            name: name.to_string(),
            path: dir.to_path_buf(),
        })?;
        for chunk in tensor.data.chunks(CHUNK_ELEMENTS) {
            writer.write_f32(chunk)?;
        }
        Ok(())
    })
}

/// Writes tensors `entries` (in order) into `model.safetensors`, or into `shards` files of about
/// equal size plus `model.safetensors.index.json`. `fill(name, writer)` writes one tensor's data.
pub fn write_model_tensors(
    dir: &Path,
    entries: &[(String, Vec<usize>)],
    dtype: WeightDtype,
    shards: usize,
    fill: &mut dyn FnMut(&str, &mut SafetensorsWriter) -> Result<(), ModelError>,
) -> Result<(), ModelError> {
    let st_dtype = dtype.safetensors();
    let bytes_of =
        |shape: &[usize]| (shape.iter().product::<usize>() * dtype.bytes_per_element()) as u64;
    let total_bytes: u64 = entries.iter().map(|(_, s)| bytes_of(s)).sum();
    let shards = shards.clamp(1, entries.len().max(1));

    // Split into contiguous groups of about total / shards bytes each.
    let mut groups: Vec<Vec<&(String, Vec<usize>)>> = vec![Vec::new()];
    let mut group_bytes = 0u64;
    for (k, entry) in entries.iter().enumerate() {
        let left_entries = entries.len() - k;
        let groups_left = shards - groups.len();
        let full = group_bytes >= total_bytes.div_ceil(shards as u64);
        if groups_left > 0
            && !groups.last().is_none_or(Vec::is_empty)
            && (full || left_entries <= groups_left)
        {
            groups.push(Vec::new());
            group_bytes = 0;
        }
        if let Some(g) = groups.last_mut() {
            g.push(entry);
        }
        group_bytes += bytes_of(&entry.1);
    }

    let mut weight_map = BTreeMap::new();
    let n = groups.len();
    for (g, group) in groups.iter().enumerate() {
        let file_name = if n == 1 {
            SINGLE_FILE.to_string()
        } else {
            format!("model-{:05}-of-{:05}.safetensors", g + 1, n)
        };
        let path = dir.join(&file_name);
        let list: Vec<TensorEntry> = group
            .iter()
            .map(|(name, shape)| TensorEntry::new(name.clone(), st_dtype, shape))
            .collect();
        let mut meta = std::collections::HashMap::new();
        meta.insert("format".to_string(), "pt".to_string());
        let mut writer = SafetensorsWriter::create(&path, list, Some(meta))?;
        for (name, _) in group {
            fill(name, &mut writer)?;
            weight_map.insert(name.clone(), file_name.clone());
        }
        writer.finish()?;
    }
    if n > 1 {
        write_json(
            &dir.join(INDEX_FILE),
            &json!({ "metadata": { "total_size": total_bytes }, "weight_map": weight_map }),
        )?;
    }
    Ok(())
}

/// Runs `write(tmp)` on a fresh hidden directory beside `out` ([`profiler::io::StagedDir`]),
/// then renames it to `out`. Fails if `out` exists (also when another process renamed its own
/// copy there first).
pub fn write_atomically(
    out: &Path,
    write: impl FnOnce(&Path) -> Result<(), ModelError>,
) -> Result<(), ModelError> {
    if out.exists() {
        return Err(ModelError::write(
            out,
            std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "it already exists; remove it or choose another directory",
            ),
        ));
    }
    let staged = profiler::io::StagedDir::create(out).map_err(|e| ModelError::write(out, e))?;
    write(staged.path())?;
    staged
        .commit(out, false)
        .map_err(|e| ModelError::write(out, e))
}

fn write_json(path: &Path, value: &Value) -> Result<(), ModelError> {
    let text = serde_json::to_string_pretty(value).map_err(|e| {
        ModelError::write(
            path,
            std::io::Error::new(std::io::ErrorKind::InvalidData, e),
        )
    })?;
    std::fs::write(path, text + "\n").map_err(|e| ModelError::write(path, e))
}

fn progress_bar(enabled: bool, total_bytes: u64, name: &str) -> indicatif::ProgressBar {
    if !enabled {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(total_bytes);
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{msg} [{bar:40}] {binary_bytes}/{binary_total_bytes} ({eta})",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(format!("writing {name}"));
    bar
}

/// GPT-2's byte-to-character map: printable bytes map to themselves, the others to U+0100 on.
pub fn byte_to_char_table() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut next = 256u32;
    for b in 0..=255u8 {
        let printable = matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
        table[b as usize] = if printable {
            char::from(b)
        } else {
            let c = char::from_u32(next).unwrap_or('?');
            next += 1;
            c
        };
    }
    table
}

/// A byte-level BPE `tokenizer.json` with exactly `vocab` tokens: the 256 byte tokens (id =
/// byte value), merges that grow English-looking words and pieces until the vocabulary is full,
/// and `specials` as added special tokens at the top ids. `bos`, when given, is prepended by the
/// post-processor (as Llama 3's tokenizer does). Any UTF-8 text round-trips.
pub fn byte_level_bpe_json(vocab: usize, specials: &[String], bos: Option<&str>) -> Value {
    let table = byte_to_char_table();
    let map =
        |s: &str| -> Vec<String> { s.bytes().map(|b| table[b as usize].to_string()).collect() };
    let target = vocab.saturating_sub(specials.len()).max(256);
    let mut tokens: Vec<String> = table.iter().map(|c| c.to_string()).collect();
    let mut known: HashSet<String> = tokens.iter().cloned().collect();
    let mut merges: Vec<(String, String)> = Vec::new();

    // Grow each word left to right: every prefix becomes a token, as BPE training does for
    // frequent words.
    let mut add_word = |word: &str, tokens: &mut Vec<String>| {
        let pieces = map(word);
        let Some(first) = pieces.first() else { return };
        let mut current = first.clone();
        for piece in &pieces[1..] {
            if tokens.len() >= target {
                return;
            }
            let merged = format!("{current}{piece}");
            if known.insert(merged.clone()) {
                merges.push((current.clone(), piece.clone()));
                tokens.push(merged.clone());
            }
            current = merged;
        }
    };
    for word in COMMON_PIECES {
        add_word(word, &mut tokens);
    }
    for word in COMMON_WORDS {
        add_word(&format!(" {word}"), &mut tokens);
        add_word(word, &mut tokens);
    }
    let mut rng = Rng::for_label(0, "tokenizer");
    let mut guard = 0u64;
    while tokens.len() < target && guard < 50_000_000 {
        guard += 1;
        let syllables = 1 + rng.below(3);
        let mut word = String::new();
        if rng.below(10) < 7 {
            word.push(' ');
        }
        for s in 0..syllables {
            let onset = ONSETS[rng.below(ONSETS.len() as u64) as usize];
            let nucleus = NUCLEI[rng.below(NUCLEI.len() as u64) as usize];
            let coda = CODAS[rng.below(CODAS.len() as u64) as usize];
            if s == 0 && rng.below(8) == 0 {
                let mut chars = onset.chars();
                if let Some(c) = chars.next() {
                    word.extend(c.to_uppercase());
                    word.push_str(chars.as_str());
                }
            } else {
                word.push_str(onset);
            }
            word.push_str(nucleus);
            word.push_str(coda);
        }
        add_word(&word, &mut tokens);
    }
    // Should the generator ever run dry, fill with plain byte pairs so the size is exact.
    'fill: for a in 0..256 {
        for b in 0..256 {
            if tokens.len() >= target {
                break 'fill;
            }
            let (l, r) = (table[a].to_string(), table[b].to_string());
            let merged = format!("{l}{r}");
            if known.insert(merged.clone()) {
                merges.push((l, r));
                tokens.push(merged);
            }
        }
    }

    let vocab_map: serde_json::Map<String, Value> = tokens
        .iter()
        .enumerate()
        .map(|(id, t)| (t.clone(), json!(id)))
        .collect();
    let added: Vec<Value> = specials
        .iter()
        .enumerate()
        .map(|(i, s)| {
            json!({
                "id": tokens.len() + i,
                "content": s,
                "single_word": false,
                "lstrip": false,
                "rstrip": false,
                "normalized": false,
                "special": true,
            })
        })
        .collect();
    let byte_level = json!({
        "type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": true
    });
    let post_processor = match bos.and_then(|b| specials.iter().position(|s| s == b)) {
        Some(i) => {
            let bos = &specials[i];
            let bos_id = tokens.len() + i;
            json!({
                "type": "Sequence",
                "processors": [
                    byte_level,
                    {
                        "type": "TemplateProcessing",
                        "single": [
                            {"SpecialToken": {"id": bos, "type_id": 0}},
                            {"Sequence": {"id": "A", "type_id": 0}}
                        ],
                        "pair": [
                            {"SpecialToken": {"id": bos, "type_id": 0}},
                            {"Sequence": {"id": "A", "type_id": 0}},
                            {"SpecialToken": {"id": bos, "type_id": 1}},
                            {"Sequence": {"id": "B", "type_id": 1}}
                        ],
                        "special_tokens": {
                            bos.clone(): {"id": bos, "ids": [bos_id], "tokens": [bos]}
                        }
                    }
                ]
            })
        }
        None => byte_level.clone(),
    };
    let merges: Vec<Value> = merges.into_iter().map(|(a, b)| json!([a, b])).collect();
    json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": byte_level,
        "post_processor": post_processor,
        "decoder": {
            "type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true
        },
        "model": {
            "type": "BPE",
            "dropout": null,
            "unk_token": null,
            "continuing_subword_prefix": null,
            "end_of_word_suffix": null,
            "fuse_unk": false,
            "byte_fallback": false,
            "ignore_merges": false,
            "vocab": vocab_map,
            "merges": merges,
        }
    })
}

/// Pieces that real byte-level BPE vocabularies learn first.
const COMMON_PIECES: &[&str] = &[
    "  ", "    ", "\n\n", "\t\t", ", ", ". ", ".\n", "ing", "ed", "er", "es", "en", "tion", "ly",
    "re", "in", "on", "an", "at", "or", "al", "ar", "ou", "st", "'s", "'t", "\"", "()", "{}", "00",
    "000", "19", "20", " (", " \"", " -", " =", " ==", " {", " }", ");", "();", " //", " 1", " 2",
    " 10", "é", "è", "ü", "ö", "ä", "ß", "ñ", "ç", "—", "–", "’s", "…", "€", "的", "是", "日本",
    "中国", "한국", "😀",
];

/// Common words, added with and without a leading space.
const COMMON_WORDS: &[&str] = &[
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by",
    "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an",
    "had", "they", "you", "were", "their", "one", "all", "we", "can", "her", "has", "there",
    "been", "if", "more", "when", "will", "would", "who", "so", "no", "she", "other", "its",
    "time", "about", "into", "than", "them", "only", "some", "could", "these", "two", "may",
    "first", "then", "do", "any", "like", "my", "now", "over", "such", "our", "man", "me", "even",
    "most", "made", "after", "also", "did", "many", "before", "must", "through", "back", "years",
    "where", "much", "your", "way", "well", "down", "should", "because", "each", "just", "those",
    "people", "how", "too", "little", "state", "good", "very", "make", "world", "still", "own",
    "see", "men", "work", "long", "get", "here", "between", "both", "life", "being", "under",
    "never", "day", "same", "another", "know", "while", "last", "might", "us", "great", "old",
    "year", "off", "come", "since", "against", "go", "came", "right", "used", "take", "three",
    "once", "upon", "story", "fox", "quick", "brown", "jumps", "lazy", "dog", "model", "token",
    "decode", "kernel", "memory", "vulkan", "shader", "buffer", "queue", "function", "return",
    "value", "number", "string", "class", "import", "self", "true", "false", "None", "print",
    "def", "const", "let", "fn", "struct", "impl", "pub", "use", "café", "naïve", "über", "año",
    "résumé", "straße",
];

const ONSETS: &[&str] = &[
    "", "b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "y",
    "z", "br", "ch", "cl", "cr", "dr", "fl", "fr", "gr", "pl", "pr", "sh", "st", "str", "th", "tr",
    "wh",
];
const NUCLEI: &[&str] = &[
    "a", "e", "i", "o", "u", "ai", "ea", "ee", "ou", "oo", "ie", "au",
];
const CODAS: &[&str] = &[
    "", "", "n", "r", "s", "t", "l", "m", "nd", "ng", "st", "rt", "ck", "th", "x",
];
