//! The GGUF container: header, metadata, tensor infos and tensor data.
//!
//! Byte layout (all little-endian; versions 2 and 3 share it, version 1 used 32-bit counts and
//! is not read):
//!
//! ```text
//! magic            4 bytes "GGUF"
//! version          u32
//! tensor_count     u64
//! metadata_count   u64
//! metadata         metadata_count x { key: string, value_type: u32, value }
//! tensor infos     tensor_count x { name: string, n_dims: u32, dims: [u64; n_dims],
//!                                   ggml_type: u32, offset: u64 }
//! padding          zeros up to a multiple of `general.alignment` (default 32)
//! tensor data      each tensor at data_start + offset (offsets are multiples of the alignment)
//!
//! string           { len: u64, bytes: [u8; len] } (UTF-8, no terminator)
//! array value      { elem_type: u32, count: u64, values: [elem; count] }
//! ```
//!
//! Tensor dims are listed innermost first: `dims[0]` is the number of columns (the contiguous
//! dimension), so a PyTorch weight of shape `(rows, cols)` has `dims == [cols, rows]`.

use std::collections::BTreeMap;
use std::fmt;
use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use super::dequant::GgmlType;

/// The four bytes every GGUF file starts with.
pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";
/// Tensor data alignment when the file has no `general.alignment` key.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// The GGUF versions this reader understands.
pub const SUPPORTED_VERSIONS: [u32; 2] = [2, 3];

/// Errors from reading a GGUF file. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    #[error("cannot read {}: {err}", path.display())]
    Io {
        path: PathBuf,
        /// In the message, so not a `#[source]`: `{:#}` chains would say it twice.
        err: io::Error,
    },
    #[error(
        "{} is not a GGUF file: it starts with {found:02x?} instead of \"GGUF\"; pass a .gguf \
         file written by llama.cpp",
        path.display()
    )]
    BadMagic { path: PathBuf, found: Vec<u8> },
    #[error(
        "{} is GGUF version {version}, but only versions 2 and 3 can be read{hint}",
        path.display()
    )]
    UnsupportedVersion {
        path: PathBuf,
        version: u32,
        hint: &'static str,
    },
    #[error(
        "{} is truncated: the file ends at byte {file_bytes}, inside {what}, which starts at byte \
         {at}; download or copy it again",
        path.display()
    )]
    Truncated {
        path: PathBuf,
        /// What was being read where the file ended.
        what: String,
        /// Where that starts.
        at: u64,
        file_bytes: u64,
    },
    #[error("{} is not a valid GGUF file: {what}", path.display())]
    Malformed { path: PathBuf, what: String },
}

/// The type tag of a metadata value, as stored in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ValueType {
    U8,
    I8,
    U16,
    I16,
    U32,
    I32,
    F32,
    Bool,
    String,
    Array,
    U64,
    I64,
    F64,
}

impl ValueType {
    /// The tag stored in the file.
    pub fn id(self) -> u32 {
        match self {
            ValueType::U8 => 0,
            ValueType::I8 => 1,
            ValueType::U16 => 2,
            ValueType::I16 => 3,
            ValueType::U32 => 4,
            ValueType::I32 => 5,
            ValueType::F32 => 6,
            ValueType::Bool => 7,
            ValueType::String => 8,
            ValueType::Array => 9,
            ValueType::U64 => 10,
            ValueType::I64 => 11,
            ValueType::F64 => 12,
        }
    }

    pub fn from_id(id: u32) -> Option<Self> {
        Some(match id {
            0 => ValueType::U8,
            1 => ValueType::I8,
            2 => ValueType::U16,
            3 => ValueType::I16,
            4 => ValueType::U32,
            5 => ValueType::I32,
            6 => ValueType::F32,
            7 => ValueType::Bool,
            8 => ValueType::String,
            9 => ValueType::Array,
            10 => ValueType::U64,
            11 => ValueType::I64,
            12 => ValueType::F64,
            _ => return None,
        })
    }

    /// Fewest bytes one value of this type occupies (used to reject absurd counts early).
    fn min_bytes(self) -> u64 {
        match self {
            ValueType::U8 | ValueType::I8 | ValueType::Bool => 1,
            ValueType::U16 | ValueType::I16 => 2,
            ValueType::U32 | ValueType::I32 | ValueType::F32 => 4,
            ValueType::U64 | ValueType::I64 | ValueType::F64 | ValueType::String => 8,
            ValueType::Array => 12,
        }
    }
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            ValueType::U8 => "u8",
            ValueType::I8 => "i8",
            ValueType::U16 => "u16",
            ValueType::I16 => "i16",
            ValueType::U32 => "u32",
            ValueType::I32 => "i32",
            ValueType::F32 => "f32",
            ValueType::Bool => "bool",
            ValueType::String => "string",
            ValueType::Array => "array",
            ValueType::U64 => "u64",
            ValueType::I64 => "i64",
            ValueType::F64 => "f64",
        };
        f.write_str(name)
    }
}

/// One metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(Array),
    U64(u64),
    I64(i64),
    F64(f64),
}

/// A metadata array: every element has `elem_type` (arrays may nest).
#[derive(Debug, Clone, PartialEq)]
pub struct Array {
    pub elem_type: ValueType,
    pub values: Vec<Value>,
}

impl Value {
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::U8,
            Value::I8(_) => ValueType::I8,
            Value::U16(_) => ValueType::U16,
            Value::I16(_) => ValueType::I16,
            Value::U32(_) => ValueType::U32,
            Value::I32(_) => ValueType::I32,
            Value::F32(_) => ValueType::F32,
            Value::Bool(_) => ValueType::Bool,
            Value::String(_) => ValueType::String,
            Value::Array(_) => ValueType::Array,
            Value::U64(_) => ValueType::U64,
            Value::I64(_) => ValueType::I64,
            Value::F64(_) => ValueType::F64,
        }
    }

    /// Any integer value that is not negative, widened.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// Any integer value, widened.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => i64::try_from(v).ok(),
            Value::I8(v) => Some(v.into()),
            Value::I16(v) => Some(v.into()),
            Value::I32(v) => Some(v.into()),
            Value::I64(v) => Some(v),
            _ => None,
        }
    }

    /// A float value. An `f32` is widened through its shortest decimal form, so `1e-5f32`
    /// becomes `1e-5` rather than `9.999999747378752e-6`.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(f32_to_f64_shortest(v)),
            Value::F64(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&Array> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
}

/// Widens an `f32` to the `f64` whose decimal form is the shortest one that reads back as the
/// same `f32` (what a person wrote in the original config).
pub fn f32_to_f64_shortest(v: f32) -> f64 {
    format!("{v}").parse::<f64>().unwrap_or(f64::from(v))
}

/// One tensor's description from the tensor-info table.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    /// Dimensions innermost first (`dims[0]` is the contiguous one: columns).
    pub dims: Vec<u64>,
    pub ggml_type: GgmlType,
    /// Offset of the first byte from the start of the data section.
    pub offset: u64,
}

impl TensorInfo {
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }

    /// The shape in PyTorch order (outermost first): `[rows, cols]` for a matrix.
    pub fn shape(&self) -> Vec<u64> {
        self.dims.iter().rev().copied().collect()
    }

    /// Bytes of tensor data, when the type's block layout is known and the row length fits it.
    pub fn bytes_len(&self) -> Option<u64> {
        let cols = *self.dims.first()?;
        let row_bytes = self.ggml_type.row_bytes(cols)?;
        let rows: u64 = self.dims.iter().skip(1).product();
        row_bytes.checked_mul(rows)
    }
}

/// An open GGUF file: all metadata and tensor infos are read on open; tensor data is read on
/// demand with [`GgufFile::read_tensor_data`].
#[derive(Debug)]
pub struct GgufFile {
    path: PathBuf,
    version: u32,
    metadata: BTreeMap<String, Value>,
    tensors: Vec<TensorInfo>,
    alignment: u64,
    data_start: u64,
    file_bytes: u64,
}

impl GgufFile {
    /// Opens and parses the header, metadata and tensor infos of `path`, and checks that every
    /// tensor's data lies inside the file.
    pub fn open(path: &Path) -> Result<Self, GgufError> {
        let io_err = |err| GgufError::Io {
            path: path.to_path_buf(),
            err,
        };
        // A FIFO or a device would block or never end: only a regular file is opened.
        let file = profiler::io::open_regular_file(path).map_err(io_err)?;
        let file_bytes = file.metadata().map_err(io_err)?.len();
        let mut src = Source {
            inner: BufReader::with_capacity(1 << 20, file),
            path,
            pos: 0,
            file_bytes,
        };

        let magic = src.bytes(4, "the magic bytes")?;
        if magic != GGUF_MAGIC {
            return Err(GgufError::BadMagic {
                path: path.to_path_buf(),
                found: magic,
            });
        }
        let version = src.u32("the version")?;
        if !SUPPORTED_VERSIONS.contains(&version) {
            let hint = if version.swap_bytes() <= 3 {
                " (this looks like a big-endian file; convert it to little-endian with llama.cpp)"
            } else if version == 1 {
                " (re-convert the model with a current llama.cpp)"
            } else {
                ""
            };
            return Err(GgufError::UnsupportedVersion {
                path: path.to_path_buf(),
                version,
                hint,
            });
        }
        let tensor_count = src.u64("the tensor count")?;
        let metadata_count = src.u64("the metadata count")?;
        // Each metadata entry takes at least 8 (key length) + 4 (type) + 1 bytes, each tensor info
        // at least 8 + 4 + 4 + 8: reject counts that cannot fit before allocating for them (the
        // tensor infos once the metadata before them has been read).
        src.check_count(
            metadata_count,
            13,
            "the metadata entries (as many as the header's metadata count)",
        )?;

        let mut metadata = BTreeMap::new();
        for i in 0..metadata_count {
            let key = src.string(&format!("the key of metadata entry {i}"))?;
            let what = format!("metadata value {key:?}");
            let type_id = src.u32(&what)?;
            let value_type = ValueType::from_id(type_id)
                .ok_or_else(|| src.malformed(format!("{what} has unknown type id {type_id}")))?;
            let value = src.value(value_type, &what, 0)?;
            if metadata.insert(key.clone(), value).is_some() {
                return Err(src.malformed(format!("metadata key {key:?} appears twice")));
            }
        }

        let alignment = match metadata.get("general.alignment") {
            None => DEFAULT_ALIGNMENT,
            Some(v) => match v.as_u64() {
                Some(a) if a > 0 && a.is_power_of_two() => a,
                _ => {
                    return Err(src.malformed(format!(
                        "general.alignment is {v:?}, expected a power of two"
                    )));
                }
            },
        };

        src.check_count(
            tensor_count,
            24,
            "the tensor infos (as many as the header's tensor count)",
        )?;
        let mut tensors: Vec<TensorInfo> = Vec::new();
        let mut names = std::collections::HashSet::new();
        for i in 0..tensor_count {
            let name = src.string(&format!("the name of tensor {i}"))?;
            let what = format!("the info of tensor {name:?}");
            let n_dims = src.u32(&what)?;
            if n_dims == 0 || n_dims > 8 {
                return Err(src.malformed(format!("tensor {name:?} has {n_dims} dimensions")));
            }
            let mut dims = Vec::with_capacity(n_dims as usize);
            for _ in 0..n_dims {
                dims.push(src.u64(&what)?);
            }
            let ggml_type = GgmlType::from_id(src.u32(&what)?);
            let offset = src.u64(&what)?;
            if !offset.is_multiple_of(alignment) {
                return Err(src.malformed(format!(
                    "tensor {name:?} starts at offset {offset}, which is not a multiple of the \
                     alignment {alignment}"
                )));
            }
            if !names.insert(name.clone()) {
                return Err(src.malformed(format!("tensor {name:?} appears twice")));
            }
            tensors.push(TensorInfo {
                name,
                dims,
                ggml_type,
                offset,
            });
        }

        let data_start = src.pos.div_ceil(alignment) * alignment;
        check_layout(&tensors, alignment).map_err(|what| src.malformed(what))?;
        for t in &tensors {
            // Types whose block layout is unknown are skipped here; reading them fails later
            // with a message that names the type.
            let Some(len) = t.bytes_len() else {
                if t.ggml_type.block_layout().is_some() {
                    return Err(src.malformed(format!(
                        "tensor {:?} has {} columns, which does not fit type {}'s block size",
                        t.name, t.dims[0], t.ggml_type
                    )));
                }
                continue;
            };
            let end = data_start
                .checked_add(t.offset)
                .and_then(|s| s.checked_add(len));
            match end {
                Some(end) if end <= file_bytes => {}
                _ => {
                    return Err(GgufError::Truncated {
                        path: path.to_path_buf(),
                        what: format!("the data of tensor {:?} ({len} bytes)", t.name),
                        at: data_start.saturating_add(t.offset),
                        file_bytes,
                    });
                }
            }
        }

        Ok(GgufFile {
            path: path.to_path_buf(),
            version,
            metadata,
            tensors,
            alignment,
            data_start,
            file_bytes,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn version(&self) -> u32 {
        self.version
    }

    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Absolute file offset of the tensor data section.
    pub fn data_start(&self) -> u64 {
        self.data_start
    }

    pub fn file_bytes(&self) -> u64 {
        self.file_bytes
    }

    /// All metadata, sorted by key.
    pub fn metadata(&self) -> &BTreeMap<String, Value> {
        &self.metadata
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.get(key)
    }

    /// Tensor infos in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// Reads the raw bytes of one tensor (still in its GGUF type's block layout).
    pub fn read_tensor_data(&self, info: &TensorInfo) -> Result<Vec<u8>, GgufError> {
        let len = info.bytes_len().ok_or_else(|| GgufError::Malformed {
            path: self.path.clone(),
            what: format!(
                "tensor {:?} has type {}, whose byte size is unknown to decodescope",
                info.name, info.ggml_type
            ),
        })?;
        let io_err = |err| GgufError::Io {
            path: self.path.clone(),
            err,
        };
        let mut file = profiler::io::open_regular_file(&self.path).map_err(io_err)?;
        let at = self.data_start.saturating_add(info.offset);
        file.seek(SeekFrom::Start(at)).map_err(io_err)?;
        let len_usize = usize::try_from(len).map_err(|_| GgufError::Malformed {
            path: self.path.clone(),
            what: format!("tensor {:?} is too large for this machine", info.name),
        })?;
        let mut buf = vec![0u8; len_usize];
        file.read_exact(&mut buf).map_err(|e| {
            if e.kind() == io::ErrorKind::UnexpectedEof {
                GgufError::Truncated {
                    path: self.path.clone(),
                    what: format!("the data of tensor {:?}", info.name),
                    at,
                    file_bytes: self.file_bytes,
                }
            } else {
                io_err(e)
            }
        })?;
        Ok(buf)
    }
}

/// Checks that the tensors' data lie one after the other in the order of their infos, each
/// padded to `alignment`, as llama.cpp's reader requires (`gguf_init_from_file`): a tensor whose
/// type or shape does not match the bytes written would otherwise be read from the wrong bytes,
/// a silent wrong answer. Stops at the first tensor whose byte size is unknown (its type has no
/// block layout here; reading it fails with a message that names the type).
fn check_layout(tensors: &[TensorInfo], alignment: u64) -> Result<(), String> {
    let mut expected = 0u64;
    let mut prev: Option<&TensorInfo> = None;
    for t in tensors {
        if t.offset != expected {
            let after = match prev {
                Some(p) => format!(
                    "tensor {:?} ({}, dims {:?}) before it ends, padded to the alignment {alignment}, \
                     at {expected}",
                    p.name, p.ggml_type, p.dims
                ),
                None => "the first tensor's data start at 0".to_string(),
            };
            return Err(format!(
                "tensor {:?} ({}, dims {:?}) starts at offset {} of the data section, but {after}: \
                 a type or shape does not match the bytes written (llama.cpp rejects this file \
                 too); re-export or re-quantize the model",
                t.name, t.ggml_type, t.dims, t.offset
            ));
        }
        let Some(len) = t.bytes_len() else {
            return Ok(());
        };
        expected = len
            .checked_next_multiple_of(alignment)
            .and_then(|l| expected.checked_add(l))
            .ok_or_else(|| {
                format!(
                    "tensor {:?} ({} bytes) overflows the data section",
                    t.name, len
                )
            })?;
        prev = Some(t);
    }
    Ok(())
}

/// A byte source that knows its file name and position, so every error says where it happened.
struct Source<'a, R> {
    inner: R,
    path: &'a Path,
    pos: u64,
    file_bytes: u64,
}

/// Arrays nest at most this deep (GGUF writers use one level; the limit stops a crafted file
/// from recursing without end).
const MAX_ARRAY_NESTING: u32 = 8;

impl<R: Read> Source<'_, R> {
    fn malformed(&self, what: String) -> GgufError {
        GgufError::Malformed {
            path: self.path.to_path_buf(),
            what,
        }
    }

    fn fill(&mut self, buf: &mut [u8], what: &str) -> Result<(), GgufError> {
        self.inner.read_exact(buf).map_err(|e| {
            if e.kind() == io::ErrorKind::UnexpectedEof {
                GgufError::Truncated {
                    path: self.path.to_path_buf(),
                    what: what.to_string(),
                    at: self.pos,
                    file_bytes: self.file_bytes,
                }
            } else {
                GgufError::Io {
                    path: self.path.to_path_buf(),
                    err: e,
                }
            }
        })?;
        self.pos += buf.len() as u64;
        Ok(())
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], GgufError> {
        let mut b = [0u8; N];
        self.fill(&mut b, what)?;
        Ok(b)
    }

    fn bytes(&mut self, n: u64, what: &str) -> Result<Vec<u8>, GgufError> {
        self.check_count(n, 1, what)?;
        let mut b = vec![0u8; n as usize];
        self.fill(&mut b, what)?;
        Ok(b)
    }

    /// Fails with `Truncated` when `count` items of at least `min_bytes` each cannot fit in
    /// the rest of the file.
    fn check_count(&self, count: u64, min_bytes: u64, what: &str) -> Result<(), GgufError> {
        let left = self.file_bytes.saturating_sub(self.pos);
        let need = count.saturating_mul(min_bytes);
        if need > left {
            return Err(GgufError::Truncated {
                path: self.path.to_path_buf(),
                what: format!(
                    "{what}: {count} of at least {min_bytes} bytes each need {need} bytes, and \
                     {left} are left"
                ),
                at: self.pos,
                file_bytes: self.file_bytes,
            });
        }
        Ok(())
    }

    fn u32(&mut self, what: &str) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &str) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    fn string(&mut self, what: &str) -> Result<String, GgufError> {
        let len = self.u64(what)?;
        let bytes = self.bytes(len, what)?;
        String::from_utf8(bytes).map_err(|e| self.malformed(format!("{what} is not UTF-8: {e}")))
    }

    fn value(&mut self, t: ValueType, what: &str, depth: u32) -> Result<Value, GgufError> {
        Ok(match t {
            ValueType::U8 => Value::U8(u8::from_le_bytes(self.array(what)?)),
            ValueType::I8 => Value::I8(i8::from_le_bytes(self.array(what)?)),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.array(what)?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.array(what)?)),
            ValueType::U32 => Value::U32(u32::from_le_bytes(self.array(what)?)),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.array(what)?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.array(what)?)),
            ValueType::U64 => Value::U64(u64::from_le_bytes(self.array(what)?)),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.array(what)?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.array(what)?)),
            ValueType::Bool => match self.array::<1>(what)?[0] {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                b => return Err(self.malformed(format!("{what} is a bool with byte {b}"))),
            },
            ValueType::String => Value::String(self.string(what)?),
            ValueType::Array => {
                if depth >= MAX_ARRAY_NESTING {
                    return Err(self.malformed(format!("{what} nests arrays too deeply")));
                }
                let elem_id = self.u32(what)?;
                let elem_type = ValueType::from_id(elem_id).ok_or_else(|| {
                    self.malformed(format!("{what} is an array of unknown type id {elem_id}"))
                })?;
                let count = self.u64(what)?;
                self.check_count(count, elem_type.min_bytes(), what)?;
                let mut values = Vec::with_capacity(count as usize);
                for _ in 0..count {
                    values.push(self.value(elem_type, what, depth + 1)?);
                }
                Value::Array(Array { elem_type, values })
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f32_widens_through_its_shortest_decimal() {
        assert_eq!(f32_to_f64_shortest(1e-5), 1e-5);
        assert_eq!(f32_to_f64_shortest(100000.0), 100000.0);
        assert_eq!(f32_to_f64_shortest(1e-6), 1e-6);
    }

    #[test]
    fn integer_widening_rejects_negative_as_unsigned() {
        assert_eq!(Value::I32(-1).as_u64(), None);
        assert_eq!(Value::I32(-1).as_i64(), Some(-1));
        assert_eq!(Value::U8(7).as_u64(), Some(7));
        assert_eq!(Value::String("x".into()).as_u64(), None);
    }
}
