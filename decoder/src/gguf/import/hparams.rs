//! The model's hyperparameters from the GGUF metadata (`{arch}.*`), and the `config.json` and
//! `generation_config.json` written from them.

use super::*;

/// The architectures decodescope converts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Arch {
    Llama,
    Qwen3,
}

impl Arch {
    pub(super) fn key(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen3 => "qwen3",
        }
    }
}

/// The model's hyper-parameters, read from `{arch}.*` metadata.
#[derive(Debug, Clone)]
pub(super) struct Hparams {
    pub(super) arch: Arch,
    pub(super) n_layers: u64,
    pub(super) hidden: u64,
    pub(super) intermediate: u64,
    pub(super) n_heads: u64,
    pub(super) n_kv_heads: u64,
    pub(super) head_dim: u64,
    pub(super) context_length: u64,
    pub(super) rms_norm_eps: f64,
    pub(super) rope_theta: f64,
    pub(super) rope_scaling: Json,
    pub(super) vocab_size: u64,
}

pub(super) fn read_hparams(gguf: &GgufFile) -> Result<Hparams, ImportError> {
    let path = gguf.path();
    let arch_name =
        meta_str(gguf, "general.architecture")?.ok_or_else(|| ImportError::MissingKey {
            path: path.to_path_buf(),
            key: "general.architecture".into(),
        })?;
    let arch = match arch_name {
        "llama" => Arch::Llama,
        "qwen3" => Arch::Qwen3,
        other => {
            return Err(ImportError::UnsupportedArchitecture {
                path: path.to_path_buf(),
                arch: other.to_string(),
            });
        }
    };
    let a = arch.key();
    let req = |key: &str| -> Result<u64, ImportError> {
        let key = format!("{a}.{key}");
        meta_u64(gguf, &key)?.ok_or(ImportError::MissingKey {
            path: path.to_path_buf(),
            key,
        })
    };
    let opt = |key: &str| meta_u64(gguf, &format!("{a}.{key}"));
    let unsupported = |what: String| ImportError::UnsupportedFeature {
        path: path.to_path_buf(),
        what,
    };

    let n_layers = req("block_count")?;
    let hidden = req("embedding_length")?;
    let intermediate = req("feed_forward_length")?;
    let n_heads = req("attention.head_count")?;
    let n_kv_heads = opt("attention.head_count_kv")?.unwrap_or(n_heads);
    let context_length = req("context_length")?;
    if n_heads == 0 || n_kv_heads == 0 || !n_heads.is_multiple_of(n_kv_heads) {
        return Err(unsupported(format!(
            "{n_heads} query heads cannot share {n_kv_heads} key/value heads"
        )));
    }
    let head_dim = match opt("attention.key_length")? {
        Some(d) => d,
        None if hidden.is_multiple_of(n_heads) => hidden / n_heads,
        None => {
            return Err(unsupported(format!(
                "hidden size {hidden} is not a multiple of {n_heads} heads and {a}.attention.key_length is missing"
            )));
        }
    };
    if let Some(v) = opt("attention.value_length")?
        && v != head_dim
    {
        return Err(unsupported(format!(
            "value heads of {v} dimensions differ from key heads of {head_dim}"
        )));
    }
    if let Some(rot) = opt("rope.dimension_count")?
        && rot != head_dim
    {
        return Err(unsupported(format!(
            "RoPE on {rot} of {head_dim} head dimensions (partial rotary) is not supported"
        )));
    }
    if !head_dim.is_multiple_of(2) {
        return Err(unsupported(format!("head dimension {head_dim} is odd")));
    }
    let rms_norm_eps = meta_f64(gguf, &format!("{a}.attention.layer_norm_rms_epsilon"))?
        .ok_or_else(|| ImportError::MissingKey {
            path: path.to_path_buf(),
            key: format!("{a}.attention.layer_norm_rms_epsilon"),
        })?;
    let rope_theta = meta_f64(gguf, &format!("{a}.rope.freq_base"))?.unwrap_or(10_000.0);
    let rope_scaling = match meta_str(gguf, &format!("{a}.rope.scaling.type"))? {
        None | Some("none") => Json::Null,
        Some("linear") => {
            let factor = meta_f64(gguf, &format!("{a}.rope.scaling.factor"))?.ok_or_else(|| {
                ImportError::MissingKey {
                    path: path.to_path_buf(),
                    key: format!("{a}.rope.scaling.factor"),
                }
            })?;
            json!({"type": "linear", "rope_type": "linear", "factor": factor})
        }
        Some(other) => {
            return Err(unsupported(format!(
                "RoPE scaling {other:?} ({a}.rope.scaling.type) is not supported; only linear"
            )));
        }
    };
    let rope_scaling = match gguf.tensor("rope_freqs.weight") {
        None => rope_scaling,
        Some(_) if !rope_scaling.is_null() => {
            return Err(unsupported(format!(
                "both {a}.rope.scaling.type and tensor rope_freqs.weight scale RoPE; a model \
                 has one or the other"
            )));
        }
        Some(t) => llama3_scaling(gguf, t, rope_theta, head_dim)?,
    };
    let vocab_size = match gguf.tensor("token_embd.weight") {
        Some(t) if t.dims.len() == 2 => t.dims[1],
        Some(t) => {
            return Err(ImportError::BadShape {
                path: path.to_path_buf(),
                tensor: t.name.clone(),
                found: t.shape(),
                expected: vec![opt("vocab_size")?.unwrap_or(0), hidden],
            });
        }
        None => {
            return Err(ImportError::MissingTensor {
                path: path.to_path_buf(),
                tensor: "token_embd.weight".into(),
            });
        }
    };
    Ok(Hparams {
        arch,
        n_layers,
        hidden,
        intermediate,
        n_heads,
        n_kv_heads,
        head_dim,
        context_length,
        rms_norm_eps,
        rope_theta,
        rope_scaling,
        vocab_size,
    })
}

/// The `rope_scaling` of `config.json` (Llama 3's, or null) that gives the factors of tensor
/// `rope_freqs.weight` (`t`).
fn llama3_scaling(
    gguf: &GgufFile,
    t: &TensorInfo,
    theta: f64,
    head_dim: u64,
) -> Result<Json, ImportError> {
    let path = gguf.path();
    let pairs = head_dim / 2;
    if t.ggml_type != GgmlType::F32 || t.dims != [pairs] {
        return Err(ImportError::UnsupportedFeature {
            path: path.to_path_buf(),
            what: format!(
                "tensor rope_freqs.weight is {} of shape {:?}; llama.cpp writes it as f32 of \
                 shape [{pairs}] (one factor per pair of the {head_dim} head dimensions)",
                t.ggml_type,
                t.shape()
            ),
        });
    }
    let factors =
        dequantize(t.ggml_type, &gguf.read_tensor_data(t)?, pairs as usize).map_err(|e| {
            ImportError::UnsupportedFeature {
                path: path.to_path_buf(),
                what: format!("tensor rope_freqs.weight cannot be read: {e}"),
            }
        })?;
    let scaling =
        super::rope::llama3_from_factors(&factors, theta, head_dim as usize).map_err(|why| {
            ImportError::UnsupportedFeature {
                path: path.to_path_buf(),
                what: format!(
                    "tensor rope_freqs.weight {why}; decodescope runs Llama 3 RoPE scaling only"
                ),
            }
        })?;
    Ok(match scaling {
        None => Json::Null,
        Some(s) => json!({
            "rope_type": "llama3",
            "factor": s.factor,
            "low_freq_factor": s.low_freq_factor,
            "high_freq_factor": s.high_freq_factor,
            "original_max_position_embeddings": s.original_max_position_embeddings,
        }),
    })
}

pub(super) fn config_json(hp: &Hparams, vocab: &GgufVocab, tied: bool, dtype: OutDtype) -> Json {
    let (architecture, model_type) = match hp.arch {
        Arch::Llama => ("LlamaForCausalLM", "llama"),
        Arch::Qwen3 => ("Qwen3ForCausalLM", "qwen3"),
    };
    let mut c = json!({
        "architectures": [architecture],
        "model_type": model_type,
        "vocab_size": hp.vocab_size,
        "hidden_size": hp.hidden,
        "intermediate_size": hp.intermediate,
        "num_hidden_layers": hp.n_layers,
        "num_attention_heads": hp.n_heads,
        "num_key_value_heads": hp.n_kv_heads,
        "head_dim": hp.head_dim,
        "max_position_embeddings": hp.context_length,
        "rms_norm_eps": hp.rms_norm_eps,
        "rope_theta": hp.rope_theta,
        "rope_scaling": hp.rope_scaling,
        "tie_word_embeddings": tied,
        "hidden_act": "silu",
        "attention_bias": false,
        "attention_dropout": 0.0,
        "initializer_range": 0.02,
        "use_cache": true,
        "torch_dtype": dtype.torch_name(),
        "transformers_version": TRANSFORMERS_VERSION,
    });
    match hp.arch {
        Arch::Llama => {
            c["mlp_bias"] = json!(false);
            c["pretraining_tp"] = json!(1);
        }
        Arch::Qwen3 => {
            c["use_sliding_window"] = json!(false);
            c["sliding_window"] = Json::Null;
            c["max_window_layers"] = json!(hp.n_layers);
        }
    }
    for (key, id) in [
        ("bos_token_id", vocab.bos_id),
        ("eos_token_id", vocab.eos_id),
        ("pad_token_id", vocab.pad_id),
    ] {
        if let Some(id) = id {
            c[key] = json!(id);
        }
    }
    c
}

pub(super) fn generation_config_json(vocab: &GgufVocab) -> Json {
    let mut c = json!({"transformers_version": TRANSFORMERS_VERSION});
    if let Some(bos) = vocab.bos_id {
        c["bos_token_id"] = json!(bos);
    }
    let mut eos: Vec<u32> = vocab.eos_id.into_iter().collect();
    if let Some(eot) = vocab.eot_id
        && !eos.contains(&eot)
    {
        eos.push(eot);
    }
    match eos.as_slice() {
        [] => {}
        [one] => c["eos_token_id"] = json!(one),
        many => c["eos_token_id"] = json!(many),
    }
    if let Some(pad) = vocab.pad_id {
        c["pad_token_id"] = json!(pad);
    }
    c
}

pub(super) fn bad_key(
    gguf: &GgufFile,
    key: &str,
    v: &Value,
    expected: &'static str,
) -> ImportError {
    ImportError::BadKey {
        path: gguf.path().to_path_buf(),
        key: key.to_string(),
        found: format!("a {} ({v:?})", v.value_type()),
        expected,
    }
}

pub(super) fn meta_u64(gguf: &GgufFile, key: &str) -> Result<Option<u64>, ImportError> {
    gguf.get(key)
        .map(|v| {
            v.as_u64()
                .ok_or_else(|| bad_key(gguf, key, v, "a non-negative integer"))
        })
        .transpose()
}

pub(super) fn meta_f64(gguf: &GgufFile, key: &str) -> Result<Option<f64>, ImportError> {
    gguf.get(key)
        .map(|v| v.as_f64().ok_or_else(|| bad_key(gguf, key, v, "a float")))
        .transpose()
}

pub(super) fn meta_str<'a>(gguf: &'a GgufFile, key: &str) -> Result<Option<&'a str>, ImportError> {
    gguf.get(key)
        .map(|v| v.as_str().ok_or_else(|| bad_key(gguf, key, v, "a string")))
        .transpose()
}

// ---------------------------------------------------------------------------------------------
// Tensors: names, shapes, the RoPE permutation
