//! GGUF reading and import into a Hugging Face checkpoint.
//!
//! - [`reader`]: the GGUF container (header, metadata of every value type, tensor infos,
//!   alignment, tensor data), versions 2 and 3.
//! - [`dequant`]: ggml tensor types and their block layouts, dequantized to `f32`.
//! - [`quantize`]: llama.cpp's reference quantizers and its per-tensor type choice.
//! - [`tokenizer`]: `tokenizer.json` / `tokenizer_config.json` from `tokenizer.ggml.*`.
//! - [`import`]: the whole conversion, written atomically into a checkpoint directory that the
//!   normal Hugging Face loader reads with no GGUF special case.

pub mod dequant;
pub mod export;
pub mod import;
pub mod quantize;
pub mod reader;
pub mod tokenizer;

pub use dequant::{DequantError, GgmlType, dequantize};
pub use import::{
    CHECKPOINT_FILES, ImportError, ImportOptions, ImportSummary, OutDtype, import_gguf,
    is_complete_checkpoint, is_gguf_file, load_gguf_model, permute_rope_rows, unpermute_rope_rows,
};
pub use reader::{Array, GgufError, GgufFile, TensorInfo, Value, ValueType};
pub use tokenizer::{GgufVocab, TokenizerError, TokenizerFiles};
