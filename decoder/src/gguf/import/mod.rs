//! GGUF file -> Hugging Face checkpoint directory.
//!
//! The directory holds what any Hugging Face Llama/Qwen3 checkpoint holds, so the normal loader
//! reads it with no GGUF special case:
//!
//! - `config.json`: transformers 4.x style (`rope_theta` at the top level), from `{arch}.*`
//! - `model.safetensors`: every weight dequantized to f32, un-permuted where llama.cpp permuted
//!   it, then stored as f16 (default) or bf16, named as in the original checkpoint
//! - `tokenizer.json`, `tokenizer_config.json` (with the chat template): see [`super::tokenizer`]
//! - `generation_config.json`: bos, eos (and end-of-turn), pad
//!
//! The directory appears atomically: everything is written into a hidden staging directory
//! beside the target, which is renamed to the target only when complete.

use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use indicatif::ProgressBar;
use serde_json::{Value as Json, json};

use super::dequant::{DEQUANTIZABLE, DequantError, GgmlType, dequantize};
use super::reader::{GgufError, GgufFile, TensorInfo, Value};
use super::tokenizer::{GgufVocab, TokenizerError};

mod hparams;
mod load;
mod rope;
mod staging;

pub use load::{is_gguf_file, load_gguf_model};

use hparams::*;
use staging::*;

/// The `general.architecture` values [`import_gguf`] converts.
pub const SUPPORTED_ARCHITECTURES: &str = "llama, qwen3";

/// The files of an imported checkpoint, all of which exist once an import has finished.
pub const CHECKPOINT_FILES: [&str; 5] = [
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
];

/// The transformers version whose `config.json` layout the importer writes.
const TRANSFORMERS_VERSION: &str = "4.46.0";

/// The dtype of the weights written to `model.safetensors`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum OutDtype {
    #[default]
    F16,
    Bf16,
}

impl OutDtype {
    /// The safetensors dtype tag.
    pub fn safetensors_name(self) -> &'static str {
        match self {
            OutDtype::F16 => "F16",
            OutDtype::Bf16 => "BF16",
        }
    }

    /// The `torch_dtype` written to `config.json`.
    pub fn torch_name(self) -> &'static str {
        match self {
            OutDtype::F16 => "float16",
            OutDtype::Bf16 => "bfloat16",
        }
    }

    /// Little-endian bytes of `values` in this dtype (round to nearest even).
    fn encode(self, values: &[f32]) -> Vec<u8> {
        let mut out = Vec::with_capacity(values.len() * 2);
        match self {
            OutDtype::F16 => {
                for &v in values {
                    out.extend_from_slice(&half::f16::from_f32(v).to_le_bytes());
                }
            }
            OutDtype::Bf16 => {
                for &v in values {
                    out.extend_from_slice(&half::bf16::from_f32(v).to_le_bytes());
                }
            }
        }
        out
    }

    fn max_finite(self) -> f32 {
        match self {
            OutDtype::F16 => half::f16::MAX.to_f32(),
            OutDtype::Bf16 => half::bf16::MAX.to_f32(),
        }
    }
}

/// How [`import_gguf`] writes its output.
#[derive(Debug, Clone, Copy, Default)]
pub struct ImportOptions {
    pub dtype: OutDtype,
    /// Replace the output directory when it already exists.
    pub overwrite: bool,
}

/// What an import produced.
#[derive(Debug, Clone)]
pub struct ImportSummary {
    pub out_dir: PathBuf,
    /// `general.architecture` (`llama`, `qwen3`).
    pub architecture: String,
    pub n_layers: u64,
    pub n_params: u64,
    pub n_tensors: usize,
    pub tied_embeddings: bool,
    pub bytes_weights: u64,
    /// Ids of the special tokens as the GGUF file numbers them.
    pub bos_token_id: Option<u32>,
    pub eos_token_id: Option<u32>,
}

/// Errors from [`import_gguf`]. Each names the file, and the tensor where one is involved.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    #[error(
        "{}: architecture {arch:?} (general.architecture) is not supported; decodescope imports \
         {SUPPORTED_ARCHITECTURES}",
        path.display()
    )]
    UnsupportedArchitecture { path: PathBuf, arch: String },
    #[error("{}: metadata key {key} is missing; the model cannot be described without it", path.display())]
    MissingKey { path: PathBuf, key: String },
    #[error("{}: metadata key {key} is {found}, expected {expected}", path.display())]
    BadKey {
        path: PathBuf,
        key: String,
        found: String,
        expected: &'static str,
    },
    #[error("{}: {what}", path.display())]
    UnsupportedFeature { path: PathBuf, what: String },
    #[error(
        "{}: tensor {tensor} has type {ggml_type}, which decodescope cannot dequantize \
         (supported: {DEQUANTIZABLE}); re-quantize the model to one of those types",
        path.display()
    )]
    UnsupportedTensorType {
        path: PathBuf,
        tensor: String,
        ggml_type: GgmlType,
    },
    #[error(
        "{}: tensor {tensor} is not part of a {arch} model as decodescope knows it, so it cannot \
         be converted",
        path.display()
    )]
    UnexpectedTensor {
        path: PathBuf,
        tensor: String,
        arch: String,
    },
    #[error("{}: tensor {tensor} is missing; the file is incomplete", path.display())]
    MissingTensor { path: PathBuf, tensor: String },
    #[error(
        "{}: {key} is {n_layers}, but the file holds the tensors of {present} layers (blk.N with \
         N below {present}); the metadata does not match the file",
        path.display()
    )]
    LayerCount {
        path: PathBuf,
        key: String,
        n_layers: u64,
        present: u64,
    },
    #[error(
        "{}: tensor {tensor} has shape {found:?}, but the metadata implies {expected:?}",
        path.display()
    )]
    BadShape {
        path: PathBuf,
        tensor: String,
        found: Vec<u64>,
        expected: Vec<u64>,
    },
    #[error("{}: tensor {tensor}: {err}", path.display())]
    Dequant {
        path: PathBuf,
        tensor: String,
        /// In the message, so not a `#[source]`: `{:#}` chains would say it twice.
        err: DequantError,
    },
    #[error("{}: tensor {tensor}: {what}", path.display())]
    NotRepresentable {
        path: PathBuf,
        tensor: String,
        what: String,
    },
    #[error("{}: {err}", path.display())]
    Model {
        path: PathBuf,
        /// In the message, so not a `#[source]`: `{:#}` chains would say it twice.
        err: Box<crate::model::ModelError>,
    },
    #[error(
        "{} already exists; pass --force to replace it, or choose another output directory",
        path.display()
    )]
    OutputExists { path: PathBuf },
    #[error(
        "--out {} is {what}, not a checkpoint directory; import-gguf writes a directory and never \
         puts one in place of anything else (not even with --force): remove it or give another \
         --out",
        path.display()
    )]
    OutputNotDirectory { path: PathBuf, what: String },
    #[error("cannot write {}: {err}", path.display())]
    Write {
        path: PathBuf,
        /// In the message, so not a `#[source]`: `{:#}` chains would say it twice.
        err: io::Error,
    },
}

/// What is done to a tensor's rows between dequantization and writing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RowTransform {
    None,
    /// Undo llama.cpp's RoPE row permutation, heads of `head_dim` rows each.
    UnpermuteRope {
        n_heads: usize,
    },
}

/// One tensor to write: where it comes from, its Hugging Face name and shape.
#[derive(Debug, Clone)]
struct Planned {
    gguf: TensorInfo,
    hf_name: String,
    transform: RowTransform,
}

/// Converts the GGUF file `gguf_path` into a Hugging Face checkpoint directory `out_dir`.
/// `progress` is advanced by the tensor bytes read (its length is set here); pass
/// `ProgressBar::hidden()` for none.
pub fn import_gguf(
    gguf_path: &Path,
    out_dir: &Path,
    options: &ImportOptions,
    progress: &ProgressBar,
) -> Result<ImportSummary, ImportError> {
    check_out_dir(out_dir, options.overwrite)?;
    let gguf = GgufFile::open(gguf_path)?;
    let path = gguf.path();
    let hp = read_hparams(&gguf)?;
    let plan = plan_tensors(&gguf, &hp)?;
    let tied = !plan.iter().any(|p| p.hf_name == "lm_head.weight");

    let vocab = GgufVocab::from_gguf(&gguf)?;
    if vocab.tokens.len() as u64 != hp.vocab_size {
        return Err(ImportError::UnsupportedFeature {
            path: path.to_path_buf(),
            what: format!(
                "the vocabulary has {} tokens but the embedding has {} rows",
                vocab.tokens.len(),
                hp.vocab_size
            ),
        });
    }
    let tok_files = vocab.to_files(path, hp.context_length)?;
    vocab.validate(path, &tok_files)?;

    let config = config_json(&hp, &vocab, tied, options.dtype);
    let generation_config = generation_config_json(&vocab);

    let staging = Staging::create(out_dir)?;
    write_json(&staging.path().join("config.json"), &config)?;
    write_json(
        &staging.path().join("generation_config.json"),
        &generation_config,
    )?;
    write_json(
        &staging.path().join("tokenizer.json"),
        &tok_files.tokenizer_json,
    )?;
    write_json(
        &staging.path().join("tokenizer_config.json"),
        &tok_files.tokenizer_config_json,
    )?;

    let bytes_in: u64 = plan.iter().filter_map(|p| p.gguf.bytes_len()).sum();
    progress.set_length(bytes_in);
    let bytes_weights = write_weights(
        &gguf,
        &plan,
        options.dtype,
        &staging.path().join("model.safetensors"),
        progress,
    )?;
    staging.commit(out_dir, options.overwrite)?;

    Ok(ImportSummary {
        out_dir: out_dir.to_path_buf(),
        architecture: hp.arch.key().to_string(),
        n_layers: hp.n_layers,
        n_params: plan.iter().map(|p| p.gguf.n_elements()).sum(),
        n_tensors: plan.len(),
        tied_embeddings: tied,
        bytes_weights,
        bos_token_id: vocab.bos_id,
        eos_token_id: vocab.eos_id,
    })
}

/// Whether `dir` holds every file of [`CHECKPOINT_FILES`].
pub fn is_complete_checkpoint(dir: &Path) -> bool {
    CHECKPOINT_FILES.iter().all(|f| dir.join(f).is_file())
}

// ---------------------------------------------------------------------------------------------
// Metadata -> hyper-parameters and config files

/// Maps every tensor of the file to its Hugging Face name, checks its shape against the
/// hyper-parameters and its type against what can be dequantized, and checks nothing required
/// is missing. Sorted by Hugging Face name.
fn plan_tensors(gguf: &GgufFile, hp: &Hparams) -> Result<Vec<Planned>, ImportError> {
    let path = gguf.path();
    let (h, hd) = (hp.hidden, hp.head_dim);
    let q_rows = hp.n_heads * hd;
    let kv_rows = hp.n_kv_heads * hd;
    // llama.cpp permutes Llama's q/k rows for its RoPE layout; Qwen's are stored as is.
    let permuted = hp.arch == Arch::Llama;
    let rope = |n_heads: u64| {
        if permuted {
            RowTransform::UnpermuteRope {
                n_heads: n_heads as usize,
            }
        } else {
            RowTransform::None
        }
    };

    let mut plan = Vec::with_capacity(gguf.tensors().len());
    for t in gguf.tensors() {
        if t.name == "rope_freqs.weight" {
            // RoPE scaling, which `read_hparams` turned into the config's `rope_scaling`.
            continue;
        }
        let unexpected = || ImportError::UnexpectedTensor {
            path: path.to_path_buf(),
            tensor: t.name.clone(),
            arch: hp.arch.key().to_string(),
        };
        let (hf_name, shape, transform): (String, Vec<u64>, RowTransform) = match t.name.as_str() {
            "token_embd.weight" => (
                "model.embed_tokens.weight".into(),
                vec![hp.vocab_size, h],
                RowTransform::None,
            ),
            "output_norm.weight" => ("model.norm.weight".into(), vec![h], RowTransform::None),
            "output.weight" => (
                "lm_head.weight".into(),
                vec![hp.vocab_size, h],
                RowTransform::None,
            ),
            name => {
                let (layer_text, rest) = name
                    .strip_prefix("blk.")
                    .and_then(|s| s.split_once('.'))
                    .ok_or_else(unexpected)?;
                let layer: u64 = layer_text.parse().map_err(|_| unexpected())?;
                // `blk.01.` or a layer past block_count is not a tensor of this model.
                if layer >= hp.n_layers || layer.to_string() != layer_text {
                    return Err(unexpected());
                }
                let (hf, shape, transform) = match rest {
                    "attn_norm.weight" => ("input_layernorm.weight", vec![h], RowTransform::None),
                    "ffn_norm.weight" => (
                        "post_attention_layernorm.weight",
                        vec![h],
                        RowTransform::None,
                    ),
                    "attn_q.weight" => {
                        ("self_attn.q_proj.weight", vec![q_rows, h], rope(hp.n_heads))
                    }
                    "attn_k.weight" => (
                        "self_attn.k_proj.weight",
                        vec![kv_rows, h],
                        rope(hp.n_kv_heads),
                    ),
                    "attn_v.weight" => (
                        "self_attn.v_proj.weight",
                        vec![kv_rows, h],
                        RowTransform::None,
                    ),
                    "attn_output.weight" => (
                        "self_attn.o_proj.weight",
                        vec![h, q_rows],
                        RowTransform::None,
                    ),
                    "ffn_gate.weight" => (
                        "mlp.gate_proj.weight",
                        vec![hp.intermediate, h],
                        RowTransform::None,
                    ),
                    "ffn_up.weight" => (
                        "mlp.up_proj.weight",
                        vec![hp.intermediate, h],
                        RowTransform::None,
                    ),
                    "ffn_down.weight" => (
                        "mlp.down_proj.weight",
                        vec![h, hp.intermediate],
                        RowTransform::None,
                    ),
                    "attn_q_norm.weight" if hp.arch == Arch::Qwen3 => {
                        ("self_attn.q_norm.weight", vec![hd], RowTransform::None)
                    }
                    "attn_k_norm.weight" if hp.arch == Arch::Qwen3 => {
                        ("self_attn.k_norm.weight", vec![hd], RowTransform::None)
                    }
                    _ => return Err(unexpected()),
                };
                (format!("model.layers.{layer}.{hf}"), shape, transform)
            }
        };
        if t.shape() != shape {
            return Err(ImportError::BadShape {
                path: path.to_path_buf(),
                tensor: t.name.clone(),
                found: t.shape(),
                expected: shape,
            });
        }
        if !t.ggml_type.can_dequantize() {
            return Err(ImportError::UnsupportedTensorType {
                path: path.to_path_buf(),
                tensor: t.name.clone(),
                ggml_type: t.ggml_type,
            });
        }
        plan.push(Planned {
            gguf: t.clone(),
            hf_name,
            transform,
        });
    }

    let mut required = vec![
        "token_embd.weight".to_string(),
        "output_norm.weight".to_string(),
    ];
    let mut per_layer = vec![
        "attn_norm",
        "ffn_norm",
        "attn_q",
        "attn_k",
        "attn_v",
        "attn_output",
        "ffn_gate",
        "ffn_up",
        "ffn_down",
    ];
    if hp.arch == Arch::Qwen3 {
        per_layer.extend(["attn_q_norm", "attn_k_norm"]);
    }
    // Every tensor named a layer below block_count (checked above): the layers present are
    // those up to the highest one named.
    let present = gguf
        .tensors()
        .iter()
        .filter_map(|t| {
            t.name
                .strip_prefix("blk.")?
                .split_once('.')?
                .0
                .parse::<u64>()
                .ok()
        })
        .max()
        .map_or(0, |l| l + 1);
    if present < hp.n_layers {
        return Err(ImportError::LayerCount {
            path: path.to_path_buf(),
            key: format!("{}.block_count", hp.arch.key()),
            n_layers: hp.n_layers,
            present,
        });
    }
    // block_count is now at most the highest layer named: no more names than the file has.
    for l in 0..hp.n_layers {
        required.extend(per_layer.iter().map(|t| format!("blk.{l}.{t}.weight")));
    }
    if let Some(missing) = required.into_iter().find(|n| gguf.tensor(n).is_none()) {
        return Err(ImportError::MissingTensor {
            path: path.to_path_buf(),
            tensor: missing,
        });
    }
    plan.sort_by(|a, b| a.hf_name.cmp(&b.hf_name));
    Ok(plan)
}

/// llama.cpp's permutation of a q or k projection, as its converter applies it: per head of
/// `head_dim` rows, `reshape(2, head_dim / 2, cols).swapaxes(0, 1)`, so that GGUF row
/// `2i + s` of a head holds Hugging Face row `s * head_dim / 2 + i` (the two halves that
/// RoPE rotates together become adjacent rows). `None` when the rows do not split into
/// `n_heads` heads of an even size.
/// Rows are `cols` elements of any type (f32 values, or the bytes of whole blocks).
pub fn permute_rope_rows<T: Copy + Default>(
    hf: &[T],
    n_heads: usize,
    cols: usize,
) -> Option<Vec<T>> {
    let (head_dim, half) = rope_head_split(hf.len(), n_heads, cols)?;
    let mut out = vec![T::default(); hf.len()];
    for h in 0..n_heads {
        for s in 0..2 {
            for i in 0..half {
                let from = h * head_dim + s * half + i;
                let to = h * head_dim + 2 * i + s;
                out[to * cols..(to + 1) * cols]
                    .copy_from_slice(&hf[from * cols..(from + 1) * cols]);
            }
        }
    }
    Some(out)
}

/// The inverse of [`permute_rope_rows`]: GGUF row `2i + s` of each head goes back to Hugging
/// Face row `s * head_dim / 2 + i`.
pub fn unpermute_rope_rows<T: Copy + Default>(
    gguf: &[T],
    n_heads: usize,
    cols: usize,
) -> Option<Vec<T>> {
    let (head_dim, half) = rope_head_split(gguf.len(), n_heads, cols)?;
    let mut out = vec![T::default(); gguf.len()];
    for h in 0..n_heads {
        for s in 0..2 {
            for i in 0..half {
                let from = h * head_dim + 2 * i + s;
                let to = h * head_dim + s * half + i;
                out[to * cols..(to + 1) * cols]
                    .copy_from_slice(&gguf[from * cols..(from + 1) * cols]);
            }
        }
    }
    Some(out)
}

/// `(head_dim, head_dim / 2)` for `len` values in rows of `cols`, split into `n_heads` heads.
fn rope_head_split(len: usize, n_heads: usize, cols: usize) -> Option<(usize, usize)> {
    if cols == 0 || n_heads == 0 || !len.is_multiple_of(cols) {
        return None;
    }
    let rows = len / cols;
    if !rows.is_multiple_of(n_heads) || !(rows / n_heads).is_multiple_of(2) {
        return None;
    }
    let head_dim = rows / n_heads;
    Some((head_dim, head_dim / 2))
}

// ---------------------------------------------------------------------------------------------
// Writing

/// Writes `model.safetensors`: an 8-byte little-endian header length, the JSON header (padded
/// with spaces to a multiple of 8), then every tensor's bytes back to back in header order.
/// Tensors are converted one at a time, so memory holds one tensor, not the model.
/// Returns the bytes of tensor data written.
fn write_weights(
    gguf: &GgufFile,
    plan: &[Planned],
    dtype: OutDtype,
    out: &Path,
    progress: &ProgressBar,
) -> Result<u64, ImportError> {
    let mut header = serde_json::Map::new();
    header.insert(
        "__metadata__".into(),
        json!({"format": "pt", "converted_from": "gguf"}),
    );
    let mut offset = 0u64;
    for p in plan {
        let bytes = p.gguf.n_elements() * 2;
        header.insert(
            p.hf_name.clone(),
            json!({
                "dtype": dtype.safetensors_name(),
                "shape": p.gguf.shape(),
                "data_offsets": [offset, offset + bytes],
            }),
        );
        offset += bytes;
    }
    let mut header_bytes = Json::Object(header).to_string().into_bytes();
    while !header_bytes.len().is_multiple_of(8) {
        header_bytes.push(b' ');
    }

    let write_err = |err| ImportError::Write {
        path: out.to_path_buf(),
        err,
    };
    let file = File::create(out).map_err(write_err)?;
    let mut w = BufWriter::with_capacity(1 << 22, file);
    w.write_all(&(header_bytes.len() as u64).to_le_bytes())
        .map_err(write_err)?;
    w.write_all(&header_bytes).map_err(write_err)?;

    for p in plan {
        let t = &p.gguf;
        progress.set_message(t.name.clone());
        let raw = gguf.read_tensor_data(t)?;
        let n = usize::try_from(t.n_elements()).map_err(|_| ImportError::NotRepresentable {
            path: gguf.path().to_path_buf(),
            tensor: t.name.clone(),
            what: "too many elements for this machine".into(),
        })?;
        let mut values = dequantize(t.ggml_type, &raw, n).map_err(|err| ImportError::Dequant {
            path: gguf.path().to_path_buf(),
            tensor: t.name.clone(),
            err,
        })?;
        if let RowTransform::UnpermuteRope { n_heads } = p.transform {
            let cols = t.dims[0] as usize;
            values = unpermute_rope_rows(&values, n_heads, cols).ok_or_else(|| {
                ImportError::NotRepresentable {
                    path: gguf.path().to_path_buf(),
                    tensor: t.name.clone(),
                    what: format!(
                        "shape {:?} does not split into {n_heads} heads of an even size",
                        t.shape()
                    ),
                }
            })?;
        }
        check_representable(gguf.path(), &t.name, &values, dtype)?;
        w.write_all(&dtype.encode(&values)).map_err(write_err)?;
        progress.inc(raw.len() as u64);
    }
    let file = w.into_inner().map_err(|e| write_err(e.into_error()))?;
    file.sync_all().map_err(write_err)?;
    Ok(offset)
}

/// Fails when a value is NaN or infinite, or too large for `dtype`.
fn check_representable(
    path: &Path,
    tensor: &str,
    values: &[f32],
    dtype: OutDtype,
) -> Result<(), ImportError> {
    let err = |what: String| ImportError::NotRepresentable {
        path: path.to_path_buf(),
        tensor: tensor.to_string(),
        what,
    };
    if let Some(i) = values.iter().position(|v| !v.is_finite()) {
        return Err(err(format!(
            "element {i} is {}; the file is damaged",
            values[i]
        )));
    }
    let max = dtype.max_finite();
    if let Some(i) = values.iter().position(|v| v.abs() > max) {
        return Err(err(format!(
            "element {i} is {}, beyond the {} range; import with --dtype bf16",
            values[i],
            dtype.safetensors_name()
        )));
    }
    Ok(())
}

fn write_json(path: &Path, value: &Json) -> Result<(), ImportError> {
    let write_err = |err| ImportError::Write {
        path: path.to_path_buf(),
        err,
    };
    let mut text =
        serde_json::to_string_pretty(value).map_err(|e| write_err(io::Error::other(e)))?;
    text.push('\n');
    let file = File::create(path).map_err(write_err)?;
    let mut w = BufWriter::new(file);
    w.write_all(text.as_bytes()).map_err(write_err)?;
    let file = w.into_inner().map_err(|e| write_err(e.into_error()))?;
    file.sync_all().map_err(write_err)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests unwrap: a failure is a test failure.
mod tests {
    use super::*;

    #[test]
    fn permutation_matches_a_hand_worked_head() {
        // One head of 4 rows, 1 column: Hugging Face rows [0, 1, 2, 3] are RoPE pairs (0, 2)
        // and (1, 3); llama.cpp stores them interleaved as [0, 2, 1, 3].
        let hf = [0.0, 1.0, 2.0, 3.0];
        assert_eq!(
            permute_rope_rows(&hf, 1, 1).unwrap(),
            vec![0.0, 2.0, 1.0, 3.0]
        );
        assert_eq!(
            unpermute_rope_rows(&[0.0, 2.0, 1.0, 3.0], 1, 1).unwrap(),
            hf.to_vec()
        );
    }

    #[test]
    fn unpermute_inverts_permute_on_a_small_matrix() {
        // 3 heads of head_dim 6, 5 columns: every element distinct.
        let (n_heads, head_dim, cols) = (3, 6, 5);
        let m: Vec<f32> = (0..n_heads * head_dim * cols).map(|i| i as f32).collect();
        let p = permute_rope_rows(&m, n_heads, cols).unwrap();
        assert_ne!(p, m, "the permutation must move rows");
        assert_eq!(unpermute_rope_rows(&p, n_heads, cols).unwrap(), m);
        assert_eq!(
            permute_rope_rows(
                &unpermute_rope_rows(&m, n_heads, cols).unwrap(),
                n_heads,
                cols
            )
            .unwrap(),
            m
        );
        // Row 1 of head 2 in the GGUF layout (i = 0, s = 1) is Hugging Face row 3 of head 2.
        let gguf_row = 2 * head_dim + 1;
        let hf_row = 2 * head_dim + 3;
        assert_eq!(
            p[gguf_row * cols..(gguf_row + 1) * cols],
            m[hf_row * cols..(hf_row + 1) * cols]
        );
    }

    #[test]
    fn permutation_rejects_shapes_that_do_not_split_into_heads() {
        assert!(
            permute_rope_rows(&[0.0; 12], 2, 2).is_none(),
            "3 rows per head is odd"
        );
        assert!(unpermute_rope_rows(&[0.0; 10], 3, 2).is_none());
    }

    #[test]
    fn dtype_encoding_is_little_endian() {
        assert_eq!(OutDtype::F16.encode(&[1.0]), vec![0x00, 0x3c]);
        assert_eq!(OutDtype::Bf16.encode(&[1.0]), vec![0x80, 0x3f]);
    }
}
