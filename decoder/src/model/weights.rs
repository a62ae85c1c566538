//! Checkpoint weights as f32 host tensors, in a struct tree that mirrors the Hugging Face names
//! (`model.layers.{i}.self_attn.q_proj.weight` is `weights.layers[i].q_proj`).
//!
//! Every tensor is looked up by its Hugging Face name in `model.safetensors` or, through
//! `model.safetensors.index.json`, in its shard; its shape is checked against the config.
//! Projection weights keep the Hugging Face layout `[out, in]`, row-major.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::config::ModelConfig;
use super::error::ModelError;
use super::quant::{Blocks, WeightType};
use super::safetensors_io::SafetensorsFile;

pub const SINGLE_FILE: &str = "model.safetensors";
pub const INDEX_FILE: &str = "model.safetensors.index.json";

/// One tensor, row-major: its f32 values, and for a matrix kept in GGUF blocks the blocks
/// themselves (`data` is then their dequantization, see [`super::quant`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    /// The Hugging Face name, e.g. `model.layers.0.mlp.up_proj.weight`.
    pub name: String,
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
    /// The blocks the GPU reads as they are; `None`: the GPU reads `data` as f16.
    pub blocks: Option<Blocks>,
}

impl Tensor {
    pub fn new(name: impl Into<String>, shape: &[usize], data: Vec<f32>) -> Self {
        Self {
            name: name.into(),
            shape: shape.to_vec(),
            data,
            blocks: None,
        }
    }

    /// A matrix kept in GGUF blocks; its values are the blocks dequantized (`gguf::dequant`).
    pub fn from_blocks(
        name: impl Into<String>,
        shape: &[usize],
        blocks: Blocks,
    ) -> Result<Self, ModelError> {
        let name = name.into();
        let data = blocks.dequantize(&name, shape)?;
        Ok(Self {
            name,
            shape: shape.to_vec(),
            data,
            blocks: Some(blocks),
        })
    }

    /// How the GPU stores this tensor.
    pub fn wtype(&self) -> WeightType {
        self.blocks.as_ref().map_or(WeightType::F16, |b| b.wtype)
    }

    pub fn elements(&self) -> usize {
        self.shape.iter().product()
    }

    /// Row `i` of a 2-D tensor.
    pub fn row(&self, i: usize) -> &[f32] {
        let cols = self.shape.last().copied().unwrap_or(0);
        &self.data[i * cols..(i + 1) * cols]
    }
}

/// The weights of one decoder layer.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerWeights {
    /// `input_layernorm.weight`: (hidden)
    pub input_layernorm: Tensor,
    /// `self_attn.q_proj.weight`: (heads * head_dim, hidden)
    pub q_proj: Tensor,
    /// `self_attn.k_proj.weight`: (kv_heads * head_dim, hidden)
    pub k_proj: Tensor,
    /// `self_attn.v_proj.weight`: (kv_heads * head_dim, hidden)
    pub v_proj: Tensor,
    /// `self_attn.o_proj.weight`: (hidden, heads * head_dim)
    pub o_proj: Tensor,
    /// `self_attn.q_norm.weight`: (head_dim), Qwen3 only
    pub q_norm: Option<Tensor>,
    /// `self_attn.k_norm.weight`: (head_dim), Qwen3 only
    pub k_norm: Option<Tensor>,
    /// `post_attention_layernorm.weight`: (hidden)
    pub post_attention_layernorm: Tensor,
    /// `mlp.gate_proj.weight`: (intermediate, hidden)
    pub gate_proj: Tensor,
    /// `mlp.up_proj.weight`: (intermediate, hidden)
    pub up_proj: Tensor,
    /// `mlp.down_proj.weight`: (hidden, intermediate)
    pub down_proj: Tensor,
}

/// All weights of a model.
#[derive(Debug, Clone, PartialEq)]
pub struct Weights {
    /// `model.embed_tokens.weight`: (vocab, hidden)
    pub embed_tokens: Tensor,
    pub layers: Vec<LayerWeights>,
    /// `model.norm.weight`: (hidden)
    pub norm: Tensor,
    /// `lm_head.weight`: (vocab, hidden); `None` when tied to `embed_tokens`.
    pub lm_head: Option<Tensor>,
}

/// Hugging Face tensor names and their shapes for a config, in checkpoint order.
pub fn tensor_names_and_shapes(config: &ModelConfig) -> Vec<(String, Vec<usize>)> {
    let (h, q, kv, i, d) = (
        config.hidden,
        config.q_dim(),
        config.kv_dim(),
        config.intermediate,
        config.head_dim,
    );
    let mut out = vec![(
        "model.embed_tokens.weight".to_string(),
        vec![config.vocab, h],
    )];
    for l in 0..config.layers {
        let p = format!("model.layers.{l}");
        out.push((format!("{p}.input_layernorm.weight"), vec![h]));
        out.push((format!("{p}.self_attn.q_proj.weight"), vec![q, h]));
        out.push((format!("{p}.self_attn.k_proj.weight"), vec![kv, h]));
        out.push((format!("{p}.self_attn.v_proj.weight"), vec![kv, h]));
        out.push((format!("{p}.self_attn.o_proj.weight"), vec![h, q]));
        if config.qk_norm {
            out.push((format!("{p}.self_attn.q_norm.weight"), vec![d]));
            out.push((format!("{p}.self_attn.k_norm.weight"), vec![d]));
        }
        out.push((format!("{p}.post_attention_layernorm.weight"), vec![h]));
        out.push((format!("{p}.mlp.gate_proj.weight"), vec![i, h]));
        out.push((format!("{p}.mlp.up_proj.weight"), vec![i, h]));
        out.push((format!("{p}.mlp.down_proj.weight"), vec![h, i]));
    }
    out.push(("model.norm.weight".to_string(), vec![h]));
    if !config.tie_word_embeddings {
        out.push(("lm_head.weight".to_string(), vec![config.vocab, h]));
    }
    out
}

impl Weights {
    /// Loads every tensor the config calls for from `dir`.
    pub fn load(dir: &Path, config: &ModelConfig) -> Result<Self, ModelError> {
        let checkpoint = Checkpoint::open(dir)?;
        checkpoint.reject_unplaced(config)?;
        // Before a name is listed: the config's layer count against the checkpoint's, so that a
        // huge num_hidden_layers fails at once and extra layers are not silently ignored.
        checkpoint.check_layers(&dir.join("config.json"), config.layers)?;
        let mut by_name: HashMap<String, Tensor> = HashMap::new();
        for (name, shape) in tensor_names_and_shapes(config) {
            let tensor = checkpoint.read(&name, &shape)?;
            by_name.insert(name, tensor);
        }
        Self::assemble(config, by_name, checkpoint.describe())
    }

    /// Weights from tensors already in memory (named as in a checkpoint, shapes as the config
    /// implies), for tests and tools that build models without files.
    pub fn from_tensors(config: &ModelConfig, tensors: Vec<Tensor>) -> Result<Self, ModelError> {
        let expected: HashMap<String, Vec<usize>> =
            tensor_names_and_shapes(config).into_iter().collect();
        let mut by_name = HashMap::new();
        for t in tensors {
            match expected.get(&t.name) {
                Some(shape) if *shape == t.shape && t.data.len() == t.elements() => {}
                _ => {
                    return Err(ModelError::TensorShape {
                        name: t.name.clone(),
                        path: PathBuf::from("(weights in memory)"),
                        expected: expected.get(&t.name).cloned().unwrap_or_default(),
                        found: t.shape.clone(),
                    });
                }
            }
            by_name.insert(t.name.clone(), t);
        }
        Self::assemble(config, by_name, PathBuf::from("(weights in memory)"))
    }

    fn assemble(
        config: &ModelConfig,
        mut by_name: HashMap<String, Tensor>,
        source: PathBuf,
    ) -> Result<Self, ModelError> {
        let mut take = |name: &str| {
            by_name
                .remove(name)
                .ok_or_else(|| ModelError::MissingTensor {
                    name: name.to_string(),
                    path: source.clone(),
                })
        };
        let embed_tokens = take("model.embed_tokens.weight")?;
        let mut layers = Vec::with_capacity(config.layers);
        for l in 0..config.layers {
            let p = format!("model.layers.{l}");
            layers.push(LayerWeights {
                input_layernorm: take(&format!("{p}.input_layernorm.weight"))?,
                q_proj: take(&format!("{p}.self_attn.q_proj.weight"))?,
                k_proj: take(&format!("{p}.self_attn.k_proj.weight"))?,
                v_proj: take(&format!("{p}.self_attn.v_proj.weight"))?,
                o_proj: take(&format!("{p}.self_attn.o_proj.weight"))?,
                q_norm: if config.qk_norm {
                    Some(take(&format!("{p}.self_attn.q_norm.weight"))?)
                } else {
                    None
                },
                k_norm: if config.qk_norm {
                    Some(take(&format!("{p}.self_attn.k_norm.weight"))?)
                } else {
                    None
                },
                post_attention_layernorm: take(&format!("{p}.post_attention_layernorm.weight"))?,
                gate_proj: take(&format!("{p}.mlp.gate_proj.weight"))?,
                up_proj: take(&format!("{p}.mlp.up_proj.weight"))?,
                down_proj: take(&format!("{p}.mlp.down_proj.weight"))?,
            });
        }
        let norm = take("model.norm.weight")?;
        let lm_head = if config.tie_word_embeddings {
            None
        } else {
            Some(take("lm_head.weight")?)
        };
        Ok(Self {
            embed_tokens,
            layers,
            norm,
            lm_head,
        })
    }

    /// The output projection: `lm_head`, or the embedding when tied.
    pub fn lm_head(&self) -> &Tensor {
        self.lm_head.as_ref().unwrap_or(&self.embed_tokens)
    }

    /// Every tensor, in checkpoint order (the tied lm_head is not repeated).
    pub fn tensors(&self) -> Vec<&Tensor> {
        let mut out = vec![&self.embed_tokens];
        for l in &self.layers {
            out.extend([
                &l.input_layernorm,
                &l.q_proj,
                &l.k_proj,
                &l.v_proj,
                &l.o_proj,
            ]);
            out.extend(l.q_norm.iter());
            out.extend(l.k_norm.iter());
            out.extend([
                &l.post_attention_layernorm,
                &l.gate_proj,
                &l.up_proj,
                &l.down_proj,
            ]);
        }
        out.push(&self.norm);
        out.extend(self.lm_head.iter());
        out
    }

    /// Number of parameters, the tied embedding counted once.
    pub fn parameter_count(&self) -> u64 {
        self.tensors().iter().map(|t| t.elements() as u64).sum()
    }
}

/// `model.safetensors.index.json`.
#[derive(Debug, Deserialize)]
struct ShardIndex {
    weight_map: HashMap<String, String>,
}

/// The safetensors files of a checkpoint directory and where each tensor lives.
#[derive(Debug)]
pub struct Checkpoint {
    /// The index file when sharded, else the single file.
    source: PathBuf,
    files: Vec<SafetensorsFile>,
    /// Tensor name -> index into `files`.
    location: HashMap<String, usize>,
}

impl Checkpoint {
    /// Opens `dir/model.safetensors.index.json` and its shards, or `dir/model.safetensors`.
    pub fn open(dir: &Path) -> Result<Self, ModelError> {
        let index_path = dir.join(INDEX_FILE);
        let single_path = dir.join(SINGLE_FILE);
        if index_path.is_file() {
            let text =
                std::fs::read_to_string(&index_path).map_err(|e| ModelError::io(&index_path, e))?;
            let index: ShardIndex =
                serde_json::from_str(&text).map_err(|err| ModelError::Json {
                    path: index_path.clone(),
                    err,
                })?;
            let mut shard_names: Vec<&String> = index.weight_map.values().collect();
            shard_names.sort();
            shard_names.dedup();
            let mut files = Vec::new();
            let mut shard_of = HashMap::new();
            for shard in shard_names {
                if shard.contains('/') || shard.contains('\\') || shard.starts_with('.') {
                    return Err(ModelError::InvalidConfig {
                        path: index_path.clone(),
                        field: "weight_map".into(),
                        value: shard.clone(),
                        reason: "shards must be plain file names in the checkpoint directory"
                            .into(),
                    });
                }
                shard_of.insert(shard.clone(), files.len());
                files.push(SafetensorsFile::open(&dir.join(shard))?);
            }
            let mut location = HashMap::new();
            for (name, shard) in &index.weight_map {
                if let Some(&i) = shard_of.get(shard) {
                    location.insert(name.clone(), i);
                }
            }
            Ok(Self {
                source: index_path,
                files,
                location,
            })
        } else if single_path.is_file() {
            let file = SafetensorsFile::open(&single_path)?;
            let location = file.names().into_iter().map(|n| (n, 0)).collect();
            Ok(Self {
                source: single_path,
                files: vec![file],
                location,
            })
        } else {
            Err(ModelError::MissingFile {
                path: single_path,
                hint: format!(
                    "a checkpoint directory needs {SINGLE_FILE} or {INDEX_FILE} with its shards"
                ),
            })
        }
    }

    /// The file a missing tensor should have been in.
    pub fn describe(&self) -> PathBuf {
        self.source.clone()
    }

    /// Every tensor name, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.location.keys().cloned().collect();
        names.sort();
        names
    }

    /// The layers the checkpoint holds tensors for: one more than the largest `i` of a
    /// `model.layers.{i}.` name (0 when there is none).
    pub fn layer_count(&self) -> usize {
        self.location
            .keys()
            .filter_map(|n| {
                n.strip_prefix("model.layers.")?
                    .split('.')
                    .next()?
                    .parse()
                    .ok()
            })
            .map(|i: usize| i.saturating_add(1))
            .max()
            .unwrap_or(0)
    }

    /// Fails unless the checkpoint holds tensors for exactly `layers` layers, the config's
    /// `num_hidden_layers` (read from `config_path`).
    pub fn check_layers(&self, config_path: &Path, layers: usize) -> Result<(), ModelError> {
        let found = self.layer_count();
        if found == layers {
            return Ok(());
        }
        let present = match found {
            0 => "no layer tensors (model.layers.*)".to_string(),
            n => format!(
                "tensors for {n} layers (model.layers.0 to model.layers.{})",
                n - 1
            ),
        };
        let fix = if found > layers {
            "the checkpoint has more layers than its config.json, which would silently skip them"
        } else {
            "the checkpoint does not match its config.json"
        };
        Err(ModelError::InvalidConfig {
            path: config_path.to_path_buf(),
            field: "num_hidden_layers".into(),
            value: layers.to_string(),
            reason: format!(
                "{} has {present}; {fix}: set num_hidden_layers to {found}, or use the checkpoint \
                 this config was written for",
                self.source.display()
            ),
        })
    }

    /// Reads tensor `name` as f32 with its shape checked.
    pub fn read(&self, name: &str, shape: &[usize]) -> Result<Tensor, ModelError> {
        let file = self
            .location
            .get(name)
            .and_then(|&i| self.files.get(i))
            .ok_or_else(|| ModelError::MissingTensor {
                name: name.to_string(),
                path: self.source.clone(),
            })?;
        let data = file.read_f32(name, shape)?;
        Ok(Tensor::new(name, shape, data))
    }

    /// The file that holds tensor `name` (the checkpoint's directory when it is not listed).
    fn path_of(&self, name: &str) -> PathBuf {
        self.location
            .get(name)
            .and_then(|&i| self.files.get(i))
            .map_or_else(|| self.source.clone(), |f| f.path().to_path_buf())
    }

    /// Tensors the architecture has no place for are rejected rather than silently left out:
    /// biases (not part of either architecture as implemented), and Qwen3's per-head q and k
    /// norms under a config without them (a Llama would give another model's tokens).
    fn reject_unplaced(&self, config: &ModelConfig) -> Result<(), ModelError> {
        for name in self.names() {
            let hint = if name.ends_with(".bias") {
                "projection biases are not implemented".to_string()
            } else if !config.qk_norm
                && (name.ends_with(".self_attn.q_norm.weight")
                    || name.ends_with(".self_attn.k_norm.weight"))
            {
                format!(
                    "{} has no q or k norm, which Qwen3ForCausalLM has; config.json's \
                     architectures (or model_type) names the wrong model",
                    config.arch.hf_class()
                )
            } else {
                continue;
            };
            return Err(ModelError::UnsupportedTensor {
                path: self.path_of(&name),
                name,
                hint,
            });
        }
        Ok(())
    }
}
