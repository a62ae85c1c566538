//! How a weight matrix is stored on the GPU: f16 elements, or GGUF blocks kept as the file gives
//! them and decoded where a kernel reads them.
//!
//! A [`Tensor`](super::Tensor) read from a safetensors checkpoint holds f32 values and goes to the
//! GPU as f16 ([`WeightType::F16`]). A tensor read from (or quantized like) a GGUF file also holds
//! its [`Blocks`]: the GPU gets those bytes unchanged, and the tensor's f32 values are the blocks
//! dequantized by `gguf::dequant` (the CPU reference computes with exactly those values, so the
//! block layouts of `gguf/dequant.rs` are the one contract between the reference and the shaders'
//! decoders in `shaders/quant.glsl`).

use crate::gguf::{GgmlType, dequantize};

use super::error::ModelError;

/// The storage type of a weight matrix on the GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WeightType {
    F16,
    Q8_0,
    Q4_0,
    Q4_1,
    Q4K,
    Q6K,
}

impl WeightType {
    /// Every type, f16 first.
    pub const ALL: [WeightType; 6] = [
        WeightType::F16,
        WeightType::Q8_0,
        WeightType::Q4_0,
        WeightType::Q4_1,
        WeightType::Q4K,
        WeightType::Q6K,
    ];

    /// The ggml type of the same layout.
    pub fn ggml(self) -> GgmlType {
        match self {
            WeightType::F16 => GgmlType::F16,
            WeightType::Q8_0 => GgmlType::Q8_0,
            WeightType::Q4_0 => GgmlType::Q4_0,
            WeightType::Q4_1 => GgmlType::Q4_1,
            WeightType::Q4K => GgmlType::Q4K,
            WeightType::Q6K => GgmlType::Q6K,
        }
    }

    /// The block type of a ggml type the kernels decode (`None` for every other type, F16
    /// included: f16 data is held as f32 values like a safetensors tensor).
    pub fn from_ggml_blocks(t: GgmlType) -> Option<Self> {
        Some(match t {
            GgmlType::Q8_0 => WeightType::Q8_0,
            GgmlType::Q4_0 => WeightType::Q4_0,
            GgmlType::Q4_1 => WeightType::Q4_1,
            GgmlType::Q4K => WeightType::Q4K,
            GgmlType::Q6K => WeightType::Q6K,
            _ => return None,
        })
    }

    /// The value of the shaders' `WTYPE` specialization constants: the ggml type id (F16 = 1,
    /// Q4_0 = 2, Q4_1 = 3, Q8_0 = 8, Q4_K = 12, Q6_K = 14), as `shaders/quant.glsl` names them.
    pub fn spec_id(self) -> u32 {
        self.ggml().id()
    }

    /// `(elements, bytes)` of one block (one element for f16).
    pub fn block(self) -> (u64, u64) {
        // Every variant's ggml type has a known layout.
        self.ggml().block_layout().unwrap_or((1, 2))
    }

    /// Bytes of one row of `cols` elements (`cols` a whole number of blocks, which
    /// [`Tensor::from_blocks`](super::Tensor::from_blocks) checks).
    pub fn row_bytes(self, cols: u64) -> u64 {
        let (elems, bytes) = self.block();
        cols / elems * bytes
    }

    /// The lower-case name used on the command line and in traces (`f16`, `q8_0`, `q4_k`, ...).
    pub fn name(self) -> &'static str {
        match self {
            WeightType::F16 => "f16",
            WeightType::Q8_0 => "q8_0",
            WeightType::Q4_0 => "q4_0",
            WeightType::Q4_1 => "q4_1",
            WeightType::Q4K => "q4_k",
            WeightType::Q6K => "q6_k",
        }
    }
}

impl std::fmt::Display for WeightType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A matrix in GGUF blocks: row-major, each row a whole number of blocks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocks {
    pub wtype: WeightType,
    pub bytes: Vec<u8>,
}

impl Blocks {
    /// Checks that `bytes` are whole blocks of `wtype` for a `[rows, cols]` matrix and returns
    /// the values they hold (the dequantization of `gguf::dequant`). `name` names the tensor in
    /// the error.
    pub fn dequantize(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, ModelError> {
        let cols = shape.last().copied().unwrap_or(0);
        let elements: usize = shape.iter().product();
        let (block, _) = self.wtype.block();
        let bad = |reason: String| ModelError::BadBlocks {
            name: name.to_string(),
            wtype: self.wtype,
            reason,
        };
        if shape.len() != 2 {
            return Err(bad(format!(
                "only matrices are kept in blocks, this tensor has shape {shape:?}"
            )));
        }
        if !(cols as u64).is_multiple_of(block) {
            return Err(bad(format!(
                "a row of {cols} elements is not a whole number of {block}-element blocks; \
                 quantize it to a type with smaller blocks"
            )));
        }
        dequantize(self.wtype.ggml(), &self.bytes, elements).map_err(|e| bad(e.to_string()))
    }
}
