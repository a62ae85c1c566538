//! The one error type of the model layer: every variant names the file, the field or the tensor
//! it is about, and says what the user can do.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("cannot read {}: {err}", path.display())]
    Io {
        path: PathBuf,
        /// In the message, so not a `#[source]`: `{:#}` chains would say it twice.
        err: std::io::Error,
    },
    #[error("cannot write {}: {err}", path.display())]
    Write {
        path: PathBuf,
        /// In the message, so not a `#[source]`: `{:#}` chains would say it twice.
        err: std::io::Error,
    },
    #[error("{} is missing: {hint}", path.display())]
    MissingFile { path: PathBuf, hint: String },
    #[error("malformed JSON in {}: {err}; fix or replace the file", path.display())]
    Json {
        path: PathBuf,
        /// In the message, so not a `#[source]`: `{:#}` chains would say it twice.
        err: serde_json::Error,
    },
    #[error("{}: unsupported {field} = {value}; {hint}", path.display())]
    Unsupported {
        path: PathBuf,
        field: String,
        value: String,
        hint: String,
    },
    #[error("{}: invalid {field} = {value}: {reason}", path.display())]
    InvalidConfig {
        path: PathBuf,
        field: String,
        value: String,
        reason: String,
    },
    #[error("{}: the required field {field} is missing; add it to the file", path.display())]
    MissingField { path: PathBuf, field: String },
    #[error("{} is not a valid safetensors file: {reason}; write or download it again", path.display())]
    Safetensors { path: PathBuf, reason: String },
    #[error(
        "tensor {name} is missing from {}; the checkpoint does not match its config.json",
        path.display()
    )]
    MissingTensor { name: String, path: PathBuf },
    #[error(
        "tensor {name} in {} has shape {found:?} but config.json implies {expected:?}; the \
         checkpoint does not match its config.json",
        path.display()
    )]
    TensorShape {
        name: String,
        path: PathBuf,
        expected: Vec<usize>,
        found: Vec<usize>,
    },
    #[error(
        "tensor {name} in {} has dtype {dtype}, which is not supported; convert the checkpoint \
         to BF16, F16 or F32",
        path.display()
    )]
    TensorDtype {
        name: String,
        path: PathBuf,
        dtype: String,
    },
    #[error(
        "tensor {name} in {} is truncated: its data ends at byte {end_byte} but the file has \
         {file_bytes} bytes; the file was cut short, write or download it again",
        path.display()
    )]
    TruncatedTensor {
        name: String,
        path: PathBuf,
        end_byte: u64,
        file_bytes: u64,
    },
    #[error("{}: unsupported tensor {name}: {hint}", path.display())]
    UnsupportedTensor {
        name: String,
        path: PathBuf,
        hint: String,
    },
    #[error("tensor {name} in {wtype} blocks: {reason}")]
    BadBlocks {
        name: String,
        wtype: super::quant::WeightType,
        reason: String,
    },
    #[error("tokenizer {}: {message}", path.display())]
    Tokenizer { path: PathBuf, message: String },
    #[error("chat template from {}: {message}", path.display())]
    ChatTemplate { path: PathBuf, message: String },
    #[error("{message}")]
    UnknownModel { message: String },
    #[error("the CPU reference cannot run position {pos}: {reason}")]
    Position { pos: usize, reason: String },
    #[error("token id {id} is outside the vocabulary of {vocab} tokens")]
    TokenOutOfRange { id: u32, vocab: usize },
}

impl ModelError {
    pub(crate) fn io(path: impl Into<PathBuf>, err: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            err,
        }
    }

    pub(crate) fn write(path: impl Into<PathBuf>, err: std::io::Error) -> Self {
        Self::Write {
            path: path.into(),
            err,
        }
    }
}
