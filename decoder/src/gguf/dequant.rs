//! ggml tensor types and their dequantization to `f32`.
//!
//! Block layouts, exactly as ggml defines them (`ggml-common.h`; all multi-byte fields
//! little-endian, `half` is IEEE binary16):
//!
//! | type | elements | bytes | layout | value of element j |
//! |---|---|---|---|---|
//! | F32 | 1 | 4 | `f32` | x |
//! | F16 | 1 | 2 | `half` | x |
//! | BF16 | 1 | 2 | bfloat16 | x |
//! | Q8_0 | 32 | 34 | `half d; i8 qs[32]` | `d * qs[j]` |
//! | Q4_0 | 32 | 18 | `half d; u8 qs[16]` | `d * (nib(j) - 8)` |
//! | Q4_1 | 32 | 20 | `half d; half m; u8 qs[16]` | `d * nib(j) + m` |
//! | Q5_0 | 32 | 22 | `half d; u8 qh[4]; u8 qs[16]` | `d * ((nib(j) \| hi(j) << 4) - 16)` |
//! | Q5_1 | 32 | 24 | `half d; half m; u8 qh[4]; u8 qs[16]` | `d * (nib(j) \| hi(j) << 4) + m` |
//! | Q4_K | 256 | 144 | `half d; half dmin; u8 scales[12]; u8 qs[128]` | see [`dequant_q4_k`] |
//! | Q6_K | 256 | 210 | `u8 ql[128]; u8 qh[64]; i8 scales[16]; half d` | see [`dequant_q6_k`] |
//! | Q5_K | 256 | 176 | `half d; half dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]` | see [`dequant_q5_k`] |
//! | Q3_K | 256 | 110 | `u8 hmask[32]; u8 qs[64]; u8 scales[12]; half d` | see [`dequant_q3_k`] |
//! | Q2_K | 256 | 84 | `u8 scales[16]; u8 qs[64]; half d; half dmin` | see [`dequant_q2_k`] |
//! | IQ4_NL | 32 | 18 | `half d; u8 qs[16]` | `d * IQ4[nib(j)]` |
//! | IQ4_XS | 256 | 136 | `half d; u16 scales_h; u8 scales_l[4]; u8 qs[128]` | see [`dequant_iq4_xs`] |
//!
//! In the 32-element formats `nib(j)` is the low nibble of `qs[j]` for `j < 16` and the high
//! nibble of `qs[j - 16]` for `j >= 16`; `hi(j)` is bit `j` of the little-endian `u32` `qh`;
//! `IQ4` is ggml's table of 16 non-linear levels ([`IQ4_LEVELS`]).

use std::fmt;

use half::{bf16, f16};

/// A ggml tensor type id. Types whose layout decodescope does not know are kept as `Other`
/// so that reading a file never fails because of a tensor that is not used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2K,
    Q3K,
    Q4K,
    Q5K,
    Q6K,
    Q8K,
    Iq4Nl,
    Iq4Xs,
    I8,
    I16,
    I32,
    I64,
    F64,
    Bf16,
    Other(u32),
}

/// Every type [`dequantize`] accepts, for error messages.
pub const DEQUANTIZABLE: &str =
    "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS";

impl GgmlType {
    pub fn from_id(id: u32) -> Self {
        match id {
            0 => GgmlType::F32,
            1 => GgmlType::F16,
            2 => GgmlType::Q4_0,
            3 => GgmlType::Q4_1,
            6 => GgmlType::Q5_0,
            7 => GgmlType::Q5_1,
            8 => GgmlType::Q8_0,
            9 => GgmlType::Q8_1,
            10 => GgmlType::Q2K,
            11 => GgmlType::Q3K,
            12 => GgmlType::Q4K,
            13 => GgmlType::Q5K,
            14 => GgmlType::Q6K,
            15 => GgmlType::Q8K,
            20 => GgmlType::Iq4Nl,
            23 => GgmlType::Iq4Xs,
            24 => GgmlType::I8,
            25 => GgmlType::I16,
            26 => GgmlType::I32,
            27 => GgmlType::I64,
            28 => GgmlType::F64,
            30 => GgmlType::Bf16,
            other => GgmlType::Other(other),
        }
    }

    pub fn id(self) -> u32 {
        match self {
            GgmlType::F32 => 0,
            GgmlType::F16 => 1,
            GgmlType::Q4_0 => 2,
            GgmlType::Q4_1 => 3,
            GgmlType::Q5_0 => 6,
            GgmlType::Q5_1 => 7,
            GgmlType::Q8_0 => 8,
            GgmlType::Q8_1 => 9,
            GgmlType::Q2K => 10,
            GgmlType::Q3K => 11,
            GgmlType::Q4K => 12,
            GgmlType::Q5K => 13,
            GgmlType::Q6K => 14,
            GgmlType::Q8K => 15,
            GgmlType::Iq4Nl => 20,
            GgmlType::Iq4Xs => 23,
            GgmlType::I8 => 24,
            GgmlType::I16 => 25,
            GgmlType::I32 => 26,
            GgmlType::I64 => 27,
            GgmlType::F64 => 28,
            GgmlType::Bf16 => 30,
            GgmlType::Other(id) => id,
        }
    }

    /// `(elements per block, bytes per block)`, when known.
    pub fn block_layout(self) -> Option<(u64, u64)> {
        Some(match self {
            GgmlType::F32 => (1, 4),
            GgmlType::F16 | GgmlType::Bf16 => (1, 2),
            GgmlType::Q4_0 => (32, 18),
            GgmlType::Q4_1 => (32, 20),
            GgmlType::Q5_0 => (32, 22),
            GgmlType::Q5_1 => (32, 24),
            GgmlType::Q8_0 => (32, 34),
            GgmlType::Q8_1 => (32, 36),
            GgmlType::Q2K => (256, 84),
            GgmlType::Q3K => (256, 110),
            GgmlType::Q4K => (256, 144),
            GgmlType::Q5K => (256, 176),
            GgmlType::Q6K => (256, 210),
            GgmlType::Q8K => (256, 292),
            GgmlType::Iq4Nl => (32, 18),
            GgmlType::Iq4Xs => (256, 136),
            GgmlType::I8 => (1, 1),
            GgmlType::I16 => (1, 2),
            GgmlType::I32 => (1, 4),
            GgmlType::I64 | GgmlType::F64 => (1, 8),
            GgmlType::Other(_) => return None,
        })
    }

    /// Bytes of one row of `cols` elements; `None` when the layout is unknown or `cols` is not
    /// a whole number of blocks.
    pub fn row_bytes(self, cols: u64) -> Option<u64> {
        let (elems, bytes) = self.block_layout()?;
        cols.is_multiple_of(elems).then(|| cols / elems * bytes)
    }

    pub fn can_dequantize(self) -> bool {
        matches!(
            self,
            GgmlType::F32
                | GgmlType::F16
                | GgmlType::Bf16
                | GgmlType::Q8_0
                | GgmlType::Q4_0
                | GgmlType::Q4_1
                | GgmlType::Q5_0
                | GgmlType::Q5_1
                | GgmlType::Q2K
                | GgmlType::Q3K
                | GgmlType::Q4K
                | GgmlType::Q5K
                | GgmlType::Q6K
                | GgmlType::Iq4Nl
                | GgmlType::Iq4Xs
        )
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            GgmlType::F32 => "F32",
            GgmlType::F16 => "F16",
            GgmlType::Q4_0 => "Q4_0",
            GgmlType::Q4_1 => "Q4_1",
            GgmlType::Q5_0 => "Q5_0",
            GgmlType::Q5_1 => "Q5_1",
            GgmlType::Q8_0 => "Q8_0",
            GgmlType::Q8_1 => "Q8_1",
            GgmlType::Q2K => "Q2_K",
            GgmlType::Q3K => "Q3_K",
            GgmlType::Q4K => "Q4_K",
            GgmlType::Q5K => "Q5_K",
            GgmlType::Q6K => "Q6_K",
            GgmlType::Q8K => "Q8_K",
            GgmlType::Iq4Nl => "IQ4_NL",
            GgmlType::Iq4Xs => "IQ4_XS",
            GgmlType::I8 => "I8",
            GgmlType::I16 => "I16",
            GgmlType::I32 => "I32",
            GgmlType::I64 => "I64",
            GgmlType::F64 => "F64",
            GgmlType::Bf16 => "BF16",
            GgmlType::Other(id) => {
                let known = match id {
                    16 => "IQ2_XXS",
                    17 => "IQ2_XS",
                    18 => "IQ3_XXS",
                    19 => "IQ1_S",
                    21 => "IQ3_S",
                    22 => "IQ2_S",
                    29 => "IQ1_M",
                    34 => "TQ1_0",
                    35 => "TQ2_0",
                    39 => "MXFP4",
                    _ => return write!(f, "type id {id}"),
                };
                return write!(f, "{known} (type id {id})");
            }
        };
        f.write_str(name)
    }
}

/// Errors from [`dequantize`]. The caller adds the tensor name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DequantError {
    #[error("type {0} cannot be dequantized (supported: {DEQUANTIZABLE})")]
    UnsupportedType(GgmlType),
    #[error("{n_elements} elements are not a whole number of {ggml_type} blocks of {block}")]
    PartialBlock {
        ggml_type: GgmlType,
        n_elements: usize,
        block: usize,
    },
    #[error("{ggml_type} data for {n_elements} elements must be {expected} bytes, got {got}")]
    WrongLength {
        ggml_type: GgmlType,
        n_elements: usize,
        expected: usize,
        got: usize,
    },
}

/// Dequantizes `n_elements` values of type `ggml_type` from `data` (exactly their bytes).
pub fn dequantize(
    ggml_type: GgmlType,
    data: &[u8],
    n_elements: usize,
) -> Result<Vec<f32>, DequantError> {
    if !ggml_type.can_dequantize() {
        return Err(DequantError::UnsupportedType(ggml_type));
    }
    let (block_elems, block_bytes) = ggml_type
        .block_layout()
        .ok_or(DequantError::UnsupportedType(ggml_type))?;
    let (block_elems, block_bytes) = (block_elems as usize, block_bytes as usize);
    if !n_elements.is_multiple_of(block_elems) {
        return Err(DequantError::PartialBlock {
            ggml_type,
            n_elements,
            block: block_elems,
        });
    }
    let expected = n_elements / block_elems * block_bytes;
    if data.len() != expected {
        return Err(DequantError::WrongLength {
            ggml_type,
            n_elements,
            expected,
            got: data.len(),
        });
    }
    let mut out = vec![0f32; n_elements];
    let blocks = data
        .chunks_exact(block_bytes)
        .zip(out.chunks_exact_mut(block_elems));
    match ggml_type {
        GgmlType::F32 => {
            blocks.for_each(|(b, y)| y[0] = f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        }
        GgmlType::F16 => blocks.for_each(|(b, y)| y[0] = f16_at(b, 0)),
        GgmlType::Bf16 => blocks
            .for_each(|(b, y)| y[0] = bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32()),
        GgmlType::Q8_0 => blocks.for_each(|(b, y)| dequant_q8_0(b, y)),
        GgmlType::Q4_0 => blocks.for_each(|(b, y)| dequant_q4_0(b, y)),
        GgmlType::Q4_1 => blocks.for_each(|(b, y)| dequant_q4_1(b, y)),
        GgmlType::Q5_0 => blocks.for_each(|(b, y)| dequant_q5_0(b, y)),
        GgmlType::Q5_1 => blocks.for_each(|(b, y)| dequant_q5_1(b, y)),
        GgmlType::Q4K => blocks.for_each(|(b, y)| dequant_q4_k(b, y)),
        GgmlType::Q6K => blocks.for_each(|(b, y)| dequant_q6_k(b, y)),
        GgmlType::Q5K => blocks.for_each(|(b, y)| dequant_q5_k(b, y)),
        GgmlType::Q3K => blocks.for_each(|(b, y)| dequant_q3_k(b, y)),
        GgmlType::Q2K => blocks.for_each(|(b, y)| dequant_q2_k(b, y)),
        GgmlType::Iq4Nl => blocks.for_each(|(b, y)| dequant_iq4_nl(b, y)),
        GgmlType::Iq4Xs => blocks.for_each(|(b, y)| dequant_iq4_xs(b, y)),
        _ => return Err(DequantError::UnsupportedType(ggml_type)),
    }
    Ok(out)
}

fn f16_at(b: &[u8], at: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[at], b[at + 1]])).to_f32()
}

/// Q8_0: `half d; i8 qs[32]`.
fn dequant_q8_0(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    for (yj, &q) in y.iter_mut().zip(&b[2..34]) {
        *yj = d * f32::from(q as i8);
    }
}

/// Q4_0: `half d; u8 qs[16]`; low nibbles are elements 0..16, high nibbles 16..32, offset 8.
fn dequant_q4_0(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let qs = &b[2..18];
    for j in 0..16 {
        y[j] = d * (i32::from(qs[j] & 0x0f) - 8) as f32;
        y[j + 16] = d * (i32::from(qs[j] >> 4) - 8) as f32;
    }
}

/// Q4_1: `half d; half m; u8 qs[16]`; value `d * q + m`.
fn dequant_q4_1(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let m = f16_at(b, 2);
    let qs = &b[4..20];
    for j in 0..16 {
        y[j] = d * f32::from(qs[j] & 0x0f) + m;
        y[j + 16] = d * f32::from(qs[j] >> 4) + m;
    }
}

/// The 5-bit quant of element `j` (and `j + 16`) from the low/high nibbles and the `qh` bits.
fn q5_pair(qs: &[u8], qh: u32, j: usize) -> (u8, u8) {
    let h0 = (((qh >> j) & 1) << 4) as u8;
    let h1 = (((qh >> (j + 16)) & 1) << 4) as u8;
    ((qs[j] & 0x0f) | h0, (qs[j] >> 4) | h1)
}

/// Q5_0: `half d; u8 qh[4]; u8 qs[16]`; value `d * (q - 16)`.
fn dequant_q5_0(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
    let qs = &b[6..22];
    for j in 0..16 {
        let (q0, q1) = q5_pair(qs, qh, j);
        y[j] = d * (i32::from(q0) - 16) as f32;
        y[j + 16] = d * (i32::from(q1) - 16) as f32;
    }
}

/// Q5_1: `half d; half m; u8 qh[4]; u8 qs[16]`; value `d * q + m`.
fn dequant_q5_1(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let m = f16_at(b, 2);
    let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
    let qs = &b[8..24];
    for j in 0..16 {
        let (q0, q1) = q5_pair(qs, qh, j);
        y[j] = d * f32::from(q0) + m;
        y[j + 16] = d * f32::from(q1) + m;
    }
}

/// The 6-bit (scale, min) pair of sub-block `j` (0..8) packed in Q4_K's 12 `scales` bytes:
/// sub-blocks 0..4 use the low 6 bits of bytes `j` and `j + 4`; sub-blocks 4..8 take their low
/// 4 bits from byte `j + 4` (low/high nibble) and their top 2 bits from the top bits of bytes
/// `j - 4` and `j`.
pub(crate) fn q4_k_scale_min(j: usize, s: &[u8]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        (
            (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4),
            (s[j + 4] >> 4) | ((s[j] >> 6) << 4),
        )
    }
}

/// The factors `(d * scale, dmin * min)` of sub-blocks `2c` and `2c + 1` of a Q4_K or Q5_K block
/// `b` (both start `half d; half dmin; u8 scales[12]`).
fn k_chunk_scales(b: &[u8], c: usize) -> [(f32, f32); 2] {
    let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
    [2 * c, 2 * c + 1].map(|j| {
        let (sc, m) = q4_k_scale_min(j, &b[4..16]);
        (d * f32::from(sc), dmin * f32::from(m))
    })
}

/// Q4_K: `half d; half dmin; u8 scales[12]; u8 qs[128]`, 8 sub-blocks of 32 elements. Each
/// 64-element chunk `c` (0..4) reads `qs[32c..32c+32]`: low nibbles are sub-block `2c`, high
/// nibbles sub-block `2c + 1`; element value `d * scale * q - dmin * min`.
pub fn dequant_q4_k(b: &[u8], y: &mut [f32]) {
    let qs = &b[16..144];
    for c in 0..4 {
        let [(d0, min0), (d1, min1)] = k_chunk_scales(b, c);
        let q = &qs[32 * c..32 * c + 32];
        let out = &mut y[64 * c..64 * c + 64];
        for l in 0..32 {
            out[l] = d0 * f32::from(q[l] & 0x0f) - min0;
            out[l + 32] = d1 * f32::from(q[l] >> 4) - min1;
        }
    }
}

/// Q6_K: `u8 ql[128]; u8 qh[64]; i8 scales[16]; half d`, 16 sub-blocks of 16 elements. Each
/// 128-element half `n` (0..2) reads `ql[64n..64n+64]`, `qh[32n..32n+32]` and `scales[8n..]`;
/// for `l` in 0..32 the four elements `l`, `l+32`, `l+64`, `l+96` take their low 4 bits from
/// the low nibble of `ql[l]`, of `ql[l+32]`, the high nibble of `ql[l]`, of `ql[l+32]`, and
/// their top 2 bits from bits 0-1, 2-3, 4-5, 6-7 of `qh[l]`; value `d * scale * (q - 32)`.
pub fn dequant_q6_k(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 208);
    for n in 0..2 {
        let ql = &b[64 * n..64 * n + 64];
        let qh = &b[128 + 32 * n..128 + 32 * n + 32];
        let sc = &b[192 + 8 * n..192 + 8 * n + 8];
        let out = &mut y[128 * n..128 * n + 128];
        for l in 0..32 {
            let is = l / 16;
            let q1 = i32::from((ql[l] & 0x0f) | ((qh[l] & 3) << 4)) - 32;
            let q2 = i32::from((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
            let q3 = i32::from((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            let q4 = i32::from((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            let scale = |k: usize| d * f32::from(sc[is + k] as i8);
            out[l] = scale(0) * q1 as f32;
            out[l + 32] = scale(2) * q2 as f32;
            out[l + 64] = scale(4) * q3 as f32;
            out[l + 96] = scale(6) * q4 as f32;
        }
    }
}

/// Q5_K: `half d; half dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]`: Q4_K's sub-blocks, scales and
/// nibbles, each quant with a fifth bit from `qh`: for 64-element chunk `c` (0..4), bit `2c` of
/// `qh[l]` tops element `l` of sub-block `2c` and bit `2c + 1` element `l` of sub-block `2c + 1`;
/// value `d * scale * q - dmin * min`.
pub fn dequant_q5_k(b: &[u8], y: &mut [f32]) {
    let qh = &b[16..48];
    let qs = &b[48..176];
    for c in 0..4 {
        let [(d0, min0), (d1, min1)] = k_chunk_scales(b, c);
        let q = &qs[32 * c..32 * c + 32];
        let out = &mut y[64 * c..64 * c + 64];
        for l in 0..32 {
            let h0 = ((qh[l] >> (2 * c)) & 1) << 4;
            let h1 = ((qh[l] >> (2 * c + 1)) & 1) << 4;
            out[l] = d0 * f32::from((q[l] & 0x0f) | h0) - min0;
            out[l + 32] = d1 * f32::from((q[l] >> 4) | h1) - min1;
        }
    }
}

/// Q3_K's 16 signed 6-bit scales from its 12 `scales` bytes: scale `k` takes its low 4 bits from
/// byte `k % 8` (low nibble for `k < 8`, high nibble after) and its top 2 bits from bits
/// `2 (k / 8) .. + 2` of byte `8 + k % 4`, minus 32.
fn q3_k_scales(s: &[u8]) -> [i32; 16] {
    std::array::from_fn(|k| {
        let low = if k < 8 { s[k] & 0x0f } else { s[k - 8] >> 4 };
        let high = (s[8 + k % 4] >> (2 * (k / 4))) & 3;
        i32::from(low | (high << 4)) - 32
    })
}

/// Q3_K: `u8 hmask[32]; u8 qs[64]; u8 scales[12]; half d`, 16 sub-blocks of 16 elements. Each
/// 128-element half `n` (0..2) reads `qs[32n..32n+32]`; its four 32-element quarters `j` (0..4)
/// take bits `2j..2j+2` of those bytes, element `l` of quarter `j` (l in 0..32) minus 4 unless bit
/// `4n + j` of `hmask[l]` is set; value `d * scale * q`, the scale of sub-block `8n + 2j + l / 16`.
pub fn dequant_q3_k(b: &[u8], y: &mut [f32]) {
    let hmask = &b[0..32];
    let d = f16_at(b, 108);
    let scales = q3_k_scales(&b[96..108]);
    for n in 0..2 {
        let q = &b[32 + 32 * n..64 + 32 * n];
        for j in 0..4 {
            for l in 0..32 {
                let low = i32::from((q[l] >> (2 * j)) & 3);
                let high = if hmask[l] & (1 << (4 * n + j)) != 0 {
                    0
                } else {
                    4
                };
                let dl = d * scales[8 * n + 2 * j + l / 16] as f32;
                y[128 * n + 32 * j + l] = dl * (low - high) as f32;
            }
        }
    }
}

/// Q2_K: `u8 scales[16]; u8 qs[64]; half d; half dmin`, 16 sub-blocks of 16 elements, each with a
/// 4-bit scale (low nibble) and min (high nibble). Quants are laid out as Q3_K's low bits: element
/// `l` of quarter `j` of half `n` is bits `2j..2j+2` of `qs[32n + l]`; value
/// `d * scale * q - dmin * min`.
pub fn dequant_q2_k(b: &[u8], y: &mut [f32]) {
    let scales = &b[0..16];
    let d = f16_at(b, 80);
    let dmin = f16_at(b, 82);
    for n in 0..2 {
        let q = &b[16 + 32 * n..48 + 32 * n];
        for j in 0..4 {
            for l in 0..32 {
                let sc = scales[8 * n + 2 * j + l / 16];
                let (dl, ml) = (d * f32::from(sc & 0x0f), dmin * f32::from(sc >> 4));
                y[128 * n + 32 * j + l] = dl * f32::from((q[l] >> (2 * j)) & 3) - ml;
            }
        }
    }
}

/// The 16 levels a 4-bit IQ4 quant indexes (ggml's `kvalues_iq4nl`).
pub const IQ4_LEVELS: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// 32 elements of IQ4 quants `qs` (16 bytes: low nibbles first, as Q4_0) at scale `d`.
fn iq4_run(d: f32, qs: &[u8], y: &mut [f32]) {
    for j in 0..16 {
        y[j] = d * f32::from(IQ4_LEVELS[usize::from(qs[j] & 0x0f)]);
        y[j + 16] = d * f32::from(IQ4_LEVELS[usize::from(qs[j] >> 4)]);
    }
}

/// IQ4_NL: `half d; u8 qs[16]`, Q4_0's layout with non-linear levels.
fn dequant_iq4_nl(b: &[u8], y: &mut [f32]) {
    iq4_run(f16_at(b, 0), &b[2..18], y);
}

/// IQ4_XS: `half d; u16 scales_h; u8 scales_l[4]; u8 qs[128]`, 8 sub-blocks of 32 laid out as
/// IQ4_NL's quants; sub-block `k`'s 6-bit scale takes its low 4 bits from nibble `k % 2` of
/// `scales_l[k / 2]` and its top 2 from bits `2k..2k+2` of `scales_h`; value `d * (scale - 32) *
/// IQ4[q]`.
fn dequant_iq4_xs(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let scales_h = u16::from_le_bytes([b[2], b[3]]);
    for k in 0..8 {
        let low = (b[4 + k / 2] >> (4 * (k % 2))) & 0x0f;
        let high = ((scales_h >> (2 * k)) & 3) as u8;
        let dl = d * (i32::from(low | (high << 4)) - 32) as f32;
        iq4_run(dl, &b[8 + 16 * k..24 + 16 * k], &mut y[32 * k..32 * k + 32]);
    }
}
