//! Reading and writing `.safetensors` files tensor by tensor.
//!
//! The header is parsed and validated by the `safetensors` crate's [`Metadata`]. Tensor bytes
//! are read with positioned reads instead of a memory map: mapping a file needs `unsafe`, which
//! this crate keeps inside `vk/`, and reading one tensor at a time keeps the peak memory of a
//! load at the f32 weights plus one tensor's raw bytes.
//!
//! [`SafetensorsWriter`] streams: the header is written first from the tensor list, then each
//! tensor's values in order, so a 1 GB checkpoint is written without holding it in memory.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use safetensors::Dtype;
use safetensors::tensor::{Metadata, TensorInfo};

use super::error::ModelError;

/// The safetensors crate's limit on the JSON header.
const MAX_HEADER_BYTES: u64 = 100_000_000;
/// Raw bytes read and converted at a time.
const READ_CHUNK_BYTES: usize = 8 << 20;

/// One opened safetensors file: its parsed header and the open file.
#[derive(Debug)]
pub struct SafetensorsFile {
    path: PathBuf,
    file: File,
    /// Byte offset of the data section (8 + header length).
    data_start: u64,
    metadata: Metadata,
}

/// Bytes per element of a safetensors dtype name (`None` for one this reader does not know).
fn dtype_bytes(dtype: &str) -> Option<u64> {
    Some(match dtype {
        "F64" | "I64" | "U64" => 8,
        "F32" | "I32" | "U32" => 4,
        "F16" | "BF16" | "I16" | "U16" => 2,
        "BOOL" | "U8" | "I8" | "F8_E5M2" | "F8_E4M3" | "F8_E8M0" => 1,
        _ => return None,
    })
}

/// Which tensor a header that the `safetensors` crate refuses as "invalid shape, data type, or
/// offset" is wrong about, by the crate's rules: each tensor's `data_offsets` hold exactly its
/// shape's elements of its dtype, and the tensors' data follow one another from byte 0 without
/// gaps. `None` when the header is not that kind of wrong (the crate's own message is then the
/// clearer one).
fn explain_layout(header: &[u8]) -> Option<String> {
    let map: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(header).ok()?;
    let mut spans = Vec::new();
    for (name, v) in map.iter().filter(|(k, _)| *k != "__metadata__") {
        let dtype = v.get("dtype")?.as_str()?;
        let numbers = |key: &str| -> Option<Vec<u64>> {
            v.get(key)?.as_array()?.iter().map(|d| d.as_u64()).collect()
        };
        let (shape, offsets) = (numbers("shape")?, numbers("data_offsets")?);
        let [begin, end] = offsets[..] else {
            return None;
        };
        let per = dtype_bytes(dtype)?;
        let bytes = shape
            .iter()
            .try_fold(1u64, |n, &d| n.checked_mul(d))
            .and_then(|n| n.checked_mul(per));
        if end < begin || bytes != Some(end - begin) {
            let size = bytes.map_or("more bytes than fit in 64 bits".into(), |b| {
                format!("{b} bytes")
            });
            return Some(format!(
                "tensor {name:?} is {dtype} of shape {shape:?}, {size}, but its data_offsets \
                 [{begin}, {end}] hold {} bytes",
                end.saturating_sub(begin)
            ));
        }
        spans.push((begin, end, name.as_str()));
    }
    spans.sort();
    let mut at = (0u64, None::<&str>);
    for (begin, end, name) in spans {
        if begin != at.0 {
            let before = at.1.map_or("the data section starts at 0".into(), |p| {
                format!("tensor {p:?} before it ends at {}", at.0)
            });
            return Some(format!(
                "tensor {name:?}'s data start at byte {begin}, but {before}: the tensors' data \
                 must follow one another without gaps or overlaps"
            ));
        }
        at = (end, Some(name));
    }
    None
}

impl SafetensorsFile {
    /// Opens `path` and validates its header; a file too short for its header or for any of its
    /// tensors is an error naming the file (and the first tensor cut short).
    pub fn open(path: &Path) -> Result<Self, ModelError> {
        // A FIFO or a device would block or never end: only a regular file is opened.
        let file = profiler::io::open_regular_file(path).map_err(|e| ModelError::io(path, e))?;
        let file_bytes = file.metadata().map_err(|e| ModelError::io(path, e))?.len();
        let bad = |reason: String| ModelError::Safetensors {
            path: path.to_path_buf(),
            reason,
        };
        if file_bytes < 8 {
            return Err(bad(format!(
                "the file has {file_bytes} bytes, fewer than the 8 of the header length"
            )));
        }
        let mut reader = &file;
        let mut len_bytes = [0u8; 8];
        reader
            .read_exact(&mut len_bytes)
            .map_err(|e| ModelError::io(path, e))?;
        let header_bytes = u64::from_le_bytes(len_bytes);
        if header_bytes > MAX_HEADER_BYTES {
            return Err(bad(format!(
                "the header claims {header_bytes} bytes, more than the {MAX_HEADER_BYTES} allowed"
            )));
        }
        let data_start = 8 + header_bytes;
        if data_start > file_bytes {
            return Err(bad(format!(
                "the header claims {header_bytes} bytes but the file has only {file_bytes}; the \
                 file is truncated"
            )));
        }
        let mut header = vec![0u8; header_bytes as usize];
        reader
            .read_exact(&mut header)
            .map_err(|e| ModelError::io(path, e))?;
        let metadata: Metadata = serde_json::from_slice(&header).map_err(|e| {
            bad(match explain_layout(&header) {
                Some(why) => format!("its JSON header is invalid: {why}"),
                None => format!("its JSON header does not parse: {e}"),
            })
        })?;

        // Name the first tensor (in file order) whose bytes run past the end of the file.
        let available = file_bytes - data_start;
        for name in metadata.offset_keys() {
            if let Some(info) = metadata.info(&name)
                && info.data_offsets.1 as u64 > available
            {
                return Err(ModelError::TruncatedTensor {
                    name,
                    path: path.to_path_buf(),
                    end_byte: data_start + info.data_offsets.1 as u64,
                    file_bytes,
                });
            }
        }
        Ok(Self {
            path: path.to_path_buf(),
            file,
            data_start,
            metadata,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Tensor names in file order.
    pub fn names(&self) -> Vec<String> {
        self.metadata.offset_keys()
    }

    pub fn info(&self, name: &str) -> Option<&TensorInfo> {
        self.metadata.info(name)
    }

    /// Reads tensor `name` as f32, checking its shape against `expected_shape`. BF16, F16 and F32
    /// are converted; any other dtype is an error naming the tensor.
    pub fn read_f32(&self, name: &str, expected_shape: &[usize]) -> Result<Vec<f32>, ModelError> {
        let dtype = self.checked_info(name, expected_shape)?.dtype;
        let convert: fn(&[u8], &mut Vec<f32>) = match dtype {
            Dtype::BF16 => |buf, out| {
                out.extend(
                    buf.chunks_exact(2)
                        .map(|b| f32::from_bits(u32::from(u16::from_le_bytes([b[0], b[1]])) << 16)),
                );
            },
            Dtype::F16 => |buf, out| {
                out.extend(
                    buf.chunks_exact(2)
                        .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32()),
                );
            },
            Dtype::F32 => |buf, out| {
                out.extend(
                    buf.chunks_exact(4)
                        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
                );
            },
            other => return Err(self.dtype_error(name, other)),
        };
        self.read_converted(name, expected_shape, convert)
    }

    /// Reads an I64 tensor `name`, checking its shape.
    pub fn read_i64(&self, name: &str, expected_shape: &[usize]) -> Result<Vec<i64>, ModelError> {
        let dtype = self.checked_info(name, expected_shape)?.dtype;
        if dtype != Dtype::I64 {
            return Err(self.dtype_error(name, dtype));
        }
        self.read_converted(name, expected_shape, |buf, out| {
            out.extend(
                buf.chunks_exact(8)
                    .map(|b| i64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])),
            );
        })
    }

    fn checked_info(
        &self,
        name: &str,
        expected_shape: &[usize],
    ) -> Result<&TensorInfo, ModelError> {
        let info = self.info(name).ok_or_else(|| ModelError::MissingTensor {
            name: name.to_string(),
            path: self.path.clone(),
        })?;
        if info.shape != expected_shape {
            return Err(ModelError::TensorShape {
                name: name.to_string(),
                path: self.path.clone(),
                expected: expected_shape.to_vec(),
                found: info.shape.clone(),
            });
        }
        Ok(info)
    }

    fn dtype_error(&self, name: &str, dtype: Dtype) -> ModelError {
        ModelError::TensorDtype {
            name: name.to_string(),
            path: self.path.clone(),
            dtype: dtype.to_string(),
        }
    }

    /// Reads the bytes of tensor `name` chunk by chunk, converting each with `convert`.
    fn read_converted<T>(
        &self,
        name: &str,
        expected_shape: &[usize],
        convert: fn(&[u8], &mut Vec<T>),
    ) -> Result<Vec<T>, ModelError> {
        let info = self.checked_info(name, expected_shape)?;
        let (start, end) = info.data_offsets;
        let element_bytes = (info.dtype.bitsize() / 8).max(1);
        let mut out = Vec::with_capacity((end - start) / element_bytes);
        let mut reader = &self.file;
        reader
            .seek(SeekFrom::Start(self.data_start + start as u64))
            .map_err(|e| ModelError::io(&self.path, e))?;
        // A whole number of elements per chunk.
        let chunk_bytes = (READ_CHUNK_BYTES / element_bytes * element_bytes).min(end - start);
        let mut chunk = vec![0u8; chunk_bytes];
        let mut left = end - start;
        while left > 0 {
            let n = left.min(chunk.len());
            let buf = &mut chunk[..n];
            reader
                .read_exact(buf)
                .map_err(|e| ModelError::io(&self.path, e))?;
            convert(buf, &mut out);
            left -= n;
        }
        Ok(out)
    }
}

/// One tensor to be written: name, dtype and shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorEntry {
    pub name: String,
    pub dtype: Dtype,
    pub shape: Vec<usize>,
}

impl TensorEntry {
    pub fn new(name: impl Into<String>, dtype: Dtype, shape: &[usize]) -> Self {
        Self {
            name: name.into(),
            dtype,
            shape: shape.to_vec(),
        }
    }

    pub fn bytes(&self) -> u64 {
        self.shape.iter().product::<usize>() as u64 * (self.dtype.bitsize() / 8) as u64
    }
}

/// Streams a safetensors file: the header from the tensor list, then each tensor's data in list
/// order, through [`SafetensorsWriter::write_f32`] (converted to the tensor's dtype) or
/// [`SafetensorsWriter::write_bytes`] (little-endian raw bytes).
#[derive(Debug)]
pub struct SafetensorsWriter {
    path: PathBuf,
    out: BufWriter<File>,
    entries: Vec<TensorEntry>,
    /// Index of the tensor being written.
    current: usize,
    /// Bytes still owed to the current tensor.
    left_bytes: u64,
    scratch: Vec<u8>,
}

impl SafetensorsWriter {
    /// Creates `path` and writes the header for `entries` (written in that order).
    pub fn create(
        path: &Path,
        entries: Vec<TensorEntry>,
        metadata: Option<HashMap<String, String>>,
    ) -> Result<Self, ModelError> {
        let file = File::create(path).map_err(|e| ModelError::write(path, e))?;
        Self::from_file(path, file, entries, metadata)
    }

    /// Writes into `file`, opened for writing (for example by [`profiler::io::write_output`]);
    /// `path` names it in errors.
    pub fn from_file(
        path: &Path,
        file: File,
        entries: Vec<TensorEntry>,
        metadata: Option<HashMap<String, String>>,
    ) -> Result<Self, ModelError> {
        let bad = |reason: String| ModelError::Safetensors {
            path: path.to_path_buf(),
            reason,
        };
        let mut offset = 0usize;
        let mut infos = Vec::with_capacity(entries.len());
        for e in &entries {
            let n = e.bytes() as usize;
            infos.push((
                e.name.clone(),
                TensorInfo {
                    dtype: e.dtype,
                    shape: e.shape.clone(),
                    data_offsets: (offset, offset + n),
                },
            ));
            offset += n;
        }
        let meta = Metadata::new(metadata, infos).map_err(|e| bad(e.to_string()))?;
        let mut header = serde_json::to_vec(&meta).map_err(|e| bad(e.to_string()))?;
        header.resize(header.len().next_multiple_of(8), b' ');

        let mut out = BufWriter::with_capacity(1 << 20, file);
        out.write_all(&(header.len() as u64).to_le_bytes())
            .and_then(|()| out.write_all(&header))
            .map_err(|e| ModelError::write(path, e))?;
        let left_bytes = entries.first().map_or(0, TensorEntry::bytes);
        let mut writer = Self {
            path: path.to_path_buf(),
            out,
            entries,
            current: 0,
            left_bytes,
            scratch: Vec::new(),
        };
        writer.skip_empty();
        Ok(writer)
    }

    /// The tensor whose data is expected next, if any.
    pub fn current(&self) -> Option<&TensorEntry> {
        self.entries.get(self.current)
    }

    /// Appends values to the current tensor, converted to its dtype (BF16, F16 or F32).
    pub fn write_f32(&mut self, values: &[f32]) -> Result<(), ModelError> {
        let Some(entry) = self.entries.get(self.current) else {
            return Err(self.overflow());
        };
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        match entry.dtype {
            Dtype::BF16 => {
                for v in values {
                    scratch.extend_from_slice(&half::bf16::from_f32(*v).to_le_bytes());
                }
            }
            Dtype::F16 => {
                for v in values {
                    scratch.extend_from_slice(&half::f16::from_f32(*v).to_le_bytes());
                }
            }
            Dtype::F32 => {
                for v in values {
                    scratch.extend_from_slice(&v.to_le_bytes());
                }
            }
            other => {
                return Err(ModelError::TensorDtype {
                    name: entry.name.clone(),
                    path: self.path.clone(),
                    dtype: format!("{other} (write_f32 converts to BF16, F16 or F32 only)"),
                });
            }
        }
        let result = self.write_bytes(&scratch);
        self.scratch = scratch;
        result
    }

    /// Appends raw little-endian bytes to the current tensor.
    pub fn write_bytes(&mut self, bytes: &[u8]) -> Result<(), ModelError> {
        if bytes.len() as u64 > self.left_bytes {
            return Err(self.overflow());
        }
        self.out
            .write_all(bytes)
            .map_err(|e| ModelError::write(&self.path, e))?;
        self.left_bytes -= bytes.len() as u64;
        if self.left_bytes == 0 {
            self.current += 1;
            self.left_bytes = self.entries.get(self.current).map_or(0, TensorEntry::bytes);
            self.skip_empty();
        }
        Ok(())
    }

    /// Checks that every tensor was written in full, then flushes and syncs the file.
    pub fn finish(mut self) -> Result<(), ModelError> {
        if let Some(entry) = self.entries.get(self.current) {
            return Err(ModelError::Safetensors {
                path: self.path.clone(),
                reason: format!(
                    "the writer stopped before tensor {} was written in full (internal error)",
                    entry.name
                ),
            });
        }
        self.out
            .flush()
            .map_err(|e| ModelError::write(&self.path, e))?;
        // A device or FIFO written in place has nothing to sync (and refuses fsync).
        let file = self.out.get_ref();
        if file.metadata().is_ok_and(|m| m.is_file()) {
            file.sync_all()
                .map_err(|e| ModelError::write(&self.path, e))?;
        }
        Ok(())
    }

    fn skip_empty(&mut self) {
        while self.left_bytes == 0 && self.current < self.entries.len() {
            self.current += 1;
            self.left_bytes = self.entries.get(self.current).map_or(0, TensorEntry::bytes);
        }
    }

    fn overflow(&self) -> ModelError {
        let name = self
            .entries
            .get(self.current)
            .map_or("(none left)", |e| e.name.as_str());
        ModelError::Safetensors {
            path: self.path.clone(),
            reason: format!("more data was written than tensor {name} holds (internal error)"),
        }
    }
}
