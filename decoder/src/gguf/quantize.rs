//! Quantization to GGUF blocks as llama.cpp's reference quantizers do it (`quantize_row_*_ref`
//! of ggml-quants.c, no importance matrix), and the per-tensor type choice of `llama-quantize`
//! for the schemes decodescope exports.
//!
//! Written from the algorithms, not from llama.cpp's code: the block layouts are those of
//! [`super::dequant`]; rounding follows ggml (`nearest_int`: to nearest, ties to even, through the
//! float adder; `roundf` for Q8_0: ties away from zero; a truncating `(int8_t)` cast for Q4_0 and
//! Q4_1), so the blocks match llama.cpp's byte for byte on the same f32 input.
//!
//! One simplification: llama.cpp quantizes what its converter wrote (usually an f16 or bf16
//! GGUF); decodescope quantizes the checkpoint's values read as f32, which for a bf16 or f16
//! checkpoint are the same numbers.

use half::f16;

use crate::model::{ModelConfig, ModelError, Tensor, WeightType, Weights};

/// A file type of `llama-quantize`: the default type of the matrices, with its exceptions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QuantScheme {
    /// `Q8_0`: every matrix Q8_0.
    Q8_0,
    /// `Q4_0`: matrices Q4_0, the output projection Q6_K.
    Q4_0,
    /// `Q4_1`: matrices Q4_1, the output projection Q6_K.
    Q4_1,
    /// `Q4_K_M`: matrices Q4_K; the output projection, and `attn_v` and `ffn_down` in the layers
    /// `use_more_bits` picks, Q6_K.
    Q4KM,
}

/// Which matrix of the model a tensor is, for [`QuantScheme::type_for`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The token embedding table (`token_embd`); `tied`: it is also the output projection.
    Embed { tied: bool },
    /// `lm_head` (`output`).
    Output,
    /// `v_proj` (`attn_v`) of layer `layer` of `layers`.
    AttnV { layer: usize, layers: usize },
    /// `down_proj` (`ffn_down`) of layer `layer` of `layers`.
    FfnDown { layer: usize, layers: usize },
    /// Every other matrix (q, k, o, gate, up).
    Other,
}

/// llama.cpp's choice of the layers whose `attn_v` / `ffn_down` get more bits: the first and last
/// eighth, and every third layer between.
pub fn use_more_bits(layer: usize, layers: usize) -> bool {
    let (i, n) = (layer as i64, layers as i64);
    i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
}

impl QuantScheme {
    /// The type llama.cpp gives a matrix of `cols` columns in this scheme, `None` where no block
    /// type the kernels decode fits (llama.cpp would fall back to Q5_0 for a Q4_K row that is not
    /// a whole number of 256-element blocks).
    pub fn type_for(self, role: Role, cols: usize) -> Option<WeightType> {
        let base = self.base();
        let fits = |t: WeightType| (cols as u64).is_multiple_of(t.block().0);
        let chosen = match role {
            // The output projection (the embedding when tied): Q8_0 where the default type's
            // blocks do not fit the row, else Q6_K unless the default is Q8_0.
            Role::Output | Role::Embed { tied: true } => {
                if !fits(base) {
                    WeightType::Q8_0
                } else if base == WeightType::Q8_0 {
                    base
                } else if fits(WeightType::Q6K) {
                    WeightType::Q6K
                } else {
                    // ggml's fallback for a Q6_K row of partial blocks.
                    WeightType::Q8_0
                }
            }
            Role::AttnV { layer, layers } | Role::FfnDown { layer, layers }
                if self == QuantScheme::Q4KM && use_more_bits(layer, layers) =>
            {
                WeightType::Q6K
            }
            _ => base,
        };
        fits(chosen).then_some(chosen)
    }

    /// The type of the matrices without an exception.
    pub fn base(self) -> WeightType {
        match self {
            QuantScheme::Q8_0 => WeightType::Q8_0,
            QuantScheme::Q4_0 => WeightType::Q4_0,
            QuantScheme::Q4_1 => WeightType::Q4_1,
            QuantScheme::Q4KM => WeightType::Q4K,
        }
    }

    /// The `general.file_type` value (`llama_ftype`).
    pub fn file_type(self) -> u32 {
        match self {
            QuantScheme::Q4_0 => 2,
            QuantScheme::Q4_1 => 3,
            QuantScheme::Q8_0 => 7,
            QuantScheme::Q4KM => 15,
        }
    }
}

/// The role of the Hugging Face tensor `name` in a model of `layers` layers (`None`: not a
/// matrix this module quantizes, such as a norm).
pub fn role_of(name: &str, layers: usize, tied: bool) -> Option<Role> {
    if name == "model.embed_tokens.weight" {
        return Some(Role::Embed { tied });
    }
    if name == "lm_head.weight" {
        return Some(Role::Output);
    }
    let rest = name.strip_prefix("model.layers.")?;
    let (layer, proj) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    Some(match proj {
        "self_attn.v_proj.weight" => Role::AttnV { layer, layers },
        "mlp.down_proj.weight" => Role::FfnDown { layer, layers },
        "self_attn.q_proj.weight"
        | "self_attn.k_proj.weight"
        | "self_attn.o_proj.weight"
        | "mlp.gate_proj.weight"
        | "mlp.up_proj.weight" => Role::Other,
        _ => return None,
    })
}

/// `weights` with every matrix quantized as `scheme` gives it (norms stay f32), each tensor's
/// values replaced by its blocks' dequantization: the model a GGUF file of this scheme holds.
pub fn quantize_weights(
    config: &ModelConfig,
    weights: &Weights,
    scheme: QuantScheme,
) -> Result<Weights, ModelError> {
    let mut out = Vec::new();
    for t in weights.tensors() {
        let Some(role) = role_of(&t.name, config.layers, config.tie_word_embeddings) else {
            out.push(t.clone());
            continue;
        };
        let cols = t.shape.last().copied().unwrap_or(0);
        let wtype = scheme.type_for(role, cols).ok_or_else(|| ModelError::BadBlocks {
            name: t.name.clone(),
            wtype: scheme.base(),
            reason: format!(
                "rows of {cols} elements are not whole blocks of the type {scheme:?} gives it;                  export this model as q8_0, q4_0 or q4_1"
            ),
        })?;
        let blocks = crate::model::Blocks {
            wtype,
            bytes: quantize(wtype, &t.data),
        };
        out.push(Tensor::from_blocks(t.name.clone(), &t.shape, blocks)?);
    }
    Weights::from_tensors(config, out)
}

/// `values` (a whole number of blocks) quantized to `wtype`; f16 gives the f16 bytes.
pub fn quantize(wtype: WeightType, values: &[f32]) -> Vec<u8> {
    let (elems, bytes) = wtype.block();
    let mut out = Vec::with_capacity(values.len() / elems as usize * bytes as usize);
    for x in values.chunks_exact(elems as usize) {
        match wtype {
            WeightType::F16 => out.extend_from_slice(&f16::from_f32(x[0]).to_le_bytes()),
            WeightType::Q8_0 => q8_0(x, &mut out),
            WeightType::Q4_0 => q4_0(x, &mut out),
            WeightType::Q4_1 => q4_1(x, &mut out),
            WeightType::Q4K => q4_k(x, &mut out),
            WeightType::Q6K => q6_k(x, &mut out),
        }
    }
    out
}

/// ggml's `nearest_int`: round to nearest, ties to even (|v| < 2^22).
fn nearest_int(v: f32) -> i32 {
    let bits = (v + 12_582_912.0f32).to_bits() as i32;
    (bits & 0x007f_ffff) - 0x0040_0000
}

fn put_f16(out: &mut Vec<u8>, v: f32) {
    out.extend_from_slice(&f16::from_f32(v).to_le_bytes());
}

fn f16_round(v: f32) -> f32 {
    f16::from_f32(v).to_f32()
}

/// Q8_0: `d = max|x| / 127`, `q = round(x / d)` (ties away from zero).
fn q8_0(x: &[f32], out: &mut Vec<u8>) {
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    put_f16(out, d);
    out.extend(x.iter().map(|v| (v * id).round() as i8 as u8));
}

/// Q4_0: `d = -m / 8` for the value `m` of largest magnitude; `q = min(15, trunc(x / d + 8.5))`.
fn q4_0(x: &[f32], out: &mut Vec<u8>) {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    let d = max / -8.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    put_f16(out, d);
    let q = |v: f32| ((v * id + 8.5) as i8).min(15) as u8;
    out.extend((0..16).map(|j| q(x[j]) | (q(x[j + 16]) << 4)));
}

/// Q4_1: `d = (max - min) / 15`, `m = min`, `q = min(15, trunc((x - min) / d + 0.5))`.
fn q4_1(x: &[f32], out: &mut Vec<u8>) {
    let min = x.iter().fold(f32::MAX, |m, &v| if v < m { v } else { m });
    let max = x.iter().fold(-f32::MAX, |m, &v| if v > m { v } else { m });
    let d = (max - min) / 15.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    put_f16(out, d);
    put_f16(out, min);
    let q = |v: f32| (((v - min) * id + 0.5) as i8).min(15) as u8;
    out.extend((0..16).map(|j| q(x[j]) | (q(x[j + 16]) << 4)));
}

/// ggml's `make_qkx2_quants`: the scale and (negated) min of a sub-block of `x` quantized to
/// `0..=nmax`, searching `nstep + 1` scales around the min-max one for the least weighted error.
/// Returns `(scale, -min)`; `l` receives the quants.
#[allow(clippy::too_many_arguments)]
fn make_qkx2_quants(
    nmax: i32,
    x: &[f32],
    weights: &[f32],
    l: &mut [u8],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
) -> (f32, f32) {
    let n = x.len();
    let (mut min, mut max) = (x[0], x[0]);
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        min = min.min(x[i]);
        max = max.max(x[i]);
        sum_w += weights[i];
        sum_x += weights[i] * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l.iter_mut().for_each(|q| *q = 0);
        return (0.0, -min);
    }
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best = 0.0f32;
    for i in 0..n {
        let q = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
        l[i] = q as u8;
        let diff = scale * q as f32 + min - x[i];
        // w * (diff * diff), as ggml groups it: (w * diff) * diff rounds otherwise and, in about
        // one block of 50 MB of Q4_K, picks another scale than llama-quantize.
        best += weights[i] * (diff * diff);
    }
    let mut aux = vec![0u8; n];
    for is in 0..=nstep {
        iscale = (rmin + rdelta * is as f32 + nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for i in 0..n {
            let q = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            aux[i] = q as u8;
            let (w, q) = (weights[i], q as f32);
            sum_l += w * q;
            sum_l2 += w * q * q;
            sum_xl += w * q * x[i];
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut err = 0.0f32;
            for i in 0..n {
                let diff = this_scale * aux[i] as f32 + this_min - x[i];
                err += weights[i] * (diff * diff);
            }
            if err < best {
                l.copy_from_slice(&aux);
                best = err;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// Q4_K: 8 sub-blocks of 32 fitted by [`make_qkx2_quants`] (weights `rms + |x|`), their scales
/// and mins quantized to 6 bits against the block's largest, then every element re-quantized
/// against its sub-block's quantized scale and min.
fn q4_k(x: &[f32], out: &mut Vec<u8>) {
    let mut l = [0u8; 256];
    let (mut scales, mut mins) = ([0.0f32; 8], [0.0f32; 8]);
    let (mut max_scale, mut max_min) = (0.0f32, 0.0f32);
    for j in 0..8 {
        let xs = &x[32 * j..32 * j + 32];
        let av = (xs.iter().map(|v| v * v).sum::<f32>() / 32.0).sqrt();
        let weights: Vec<f32> = xs.iter().map(|v| av + v.abs()).collect();
        let (s, m) = make_qkx2_quants(15, xs, &weights, &mut l[32 * j..32 * j + 32], -1.0, 0.1, 20);
        scales[j] = s;
        mins[j] = m;
        max_scale = max_scale.max(s);
        max_min = max_min.max(m);
    }
    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let mut sc = [0u8; 12];
    for j in 0..8 {
        let ls = nearest_int(inv_scale * scales[j]).min(63) as u8;
        let lm = nearest_int(inv_min * mins[j]).min(63) as u8;
        if j < 4 {
            sc[j] = ls;
            sc[j + 4] = lm;
        } else {
            sc[j + 4] = (ls & 0x0f) | ((lm & 0x0f) << 4);
            sc[j - 4] |= (ls >> 4) << 6;
            sc[j] |= (lm >> 4) << 6;
        }
    }
    let d = f16_round(max_scale / 63.0);
    let dmin = f16_round(max_min / 63.0);
    for j in 0..8 {
        let (s, m) = super::dequant::q4_k_scale_min(j, &sc);
        let dj = d * s as f32;
        if dj == 0.0 {
            continue;
        }
        let dm = dmin * m as f32;
        for i in 0..32 {
            l[32 * j + i] = nearest_int((x[32 * j + i] + dm) / dj).clamp(0, 15) as u8;
        }
    }
    put_f16(out, max_scale / 63.0);
    put_f16(out, max_min / 63.0);
    out.extend_from_slice(&sc);
    for c in 0..4 {
        out.extend((0..32).map(|i| l[64 * c + i] | (l[64 * c + i + 32] << 4)));
    }
}

/// ggml's `make_qx_quants` with `rmse_type = 1` (weights `x^2`): a signed scale for quants in
/// `-nmax..nmax`, the best of 19 candidates around `-nmax / max`. `l` receives `q + nmax`.
fn make_qx_quants(nmax: i32, x: &[f32], l: &mut [u8]) -> f32 {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax < 1e-30 {
        l.iter_mut().for_each(|q| *q = 0);
        return 0.0;
    }
    let fit = |iscale: f32| {
        let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
        for &v in x {
            let q = nearest_int(iscale * v).clamp(-nmax, nmax - 1) as f32;
            let w = v * v;
            sumlx += w * v * q;
            suml2 += w * q * q;
        }
        (sumlx, suml2)
    };
    let fill = |iscale: f32, l: &mut [u8]| {
        for (q, &v) in l.iter_mut().zip(x) {
            *q = (nmax + nearest_int(iscale * v).clamp(-nmax, nmax - 1)) as u8;
        }
    };
    let iscale = -(nmax as f32) / max;
    fill(iscale, l);
    let (sumlx, suml2) = fit(iscale);
    let mut scale = sumlx / suml2;
    let mut best = scale * sumlx;
    for is in -9i32..=9 {
        if is == 0 {
            continue;
        }
        let iscale = -(nmax as f32 + 0.1 * is as f32) / max;
        let (sumlx, suml2) = fit(iscale);
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            fill(iscale, l);
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// Q6_K: 16 sub-blocks of 16 fitted by [`make_qx_quants`], their scales quantized to signed 8
/// bits against the largest, every element re-quantized to `-32..32` against its scale.
fn q6_k(x: &[f32], out: &mut Vec<u8>) {
    let mut l = [0u8; 256];
    let mut scales = [0.0f32; 16];
    let (mut max_scale, mut max_abs) = (0.0f32, 0.0f32);
    for (ib, s) in scales.iter_mut().enumerate() {
        *s = make_qx_quants(32, &x[16 * ib..16 * ib + 16], &mut l[16 * ib..16 * ib + 16]);
        if s.abs() > max_abs {
            max_abs = s.abs();
            max_scale = *s;
        }
    }
    let mut block = [0u8; 210];
    if max_abs < 1e-15 {
        out.extend_from_slice(&block);
        return;
    }
    let iscale = -128.0 / max_scale;
    let d = f16_round(1.0 / iscale);
    let mut sc = [0i8; 16];
    for (ib, s) in sc.iter_mut().enumerate() {
        *s = nearest_int(iscale * scales[ib]).min(127) as i8;
    }
    for (j, &s) in sc.iter().enumerate() {
        let dj = d * s as f32;
        if dj == 0.0 {
            continue;
        }
        for i in 0..16 {
            l[16 * j + i] = (nearest_int(x[16 * j + i] / dj).clamp(-32, 31) + 32) as u8;
        }
    }
    for half in 0..2 {
        let (j, ql, qh) = (128 * half, 64 * half, 128 + 32 * half);
        for i in 0..32 {
            let q = |k: usize| l[j + i + 32 * k];
            block[ql + i] = (q(0) & 0x0f) | ((q(2) & 0x0f) << 4);
            block[ql + i + 32] = (q(1) & 0x0f) | ((q(3) & 0x0f) << 4);
            block[qh + i] =
                (q(0) >> 4) | ((q(1) >> 4) << 2) | ((q(2) >> 4) << 4) | ((q(3) >> 4) << 6);
        }
    }
    for (ib, s) in sc.iter().enumerate() {
        block[192 + ib] = *s as u8;
    }
    block[208..210].copy_from_slice(&f16::from_f32(1.0 / iscale).to_le_bytes());
    out.extend_from_slice(&block);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::dequantize;

    /// A deterministic spread of values with a few outliers.
    fn values(n: usize, seed: u32) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|i| {
                s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                let v = (s >> 8) as f32 / (1u32 << 24) as f32 - 0.5;
                if i % 97 == 3 { 4.0 * v } else { v }
            })
            .collect()
    }

    #[test]
    fn nearest_int_rounds_ties_to_even() {
        assert_eq!(
            [0.5, 1.5, 2.5, -0.5, -1.5, 2.4, -2.6].map(nearest_int),
            [0, 2, 2, 0, -2, 2, -3]
        );
    }

    /// Every type round-trips within its step: the worst error of an element is at most half a
    /// quantization step of its block (plus the f16 rounding of the scales), relative to the
    /// block's range.
    #[test]
    fn every_type_round_trips_within_its_step() {
        let x = values(4096, 7);
        for (t, tol) in [
            (WeightType::Q8_0, 1.0 / 127.0),
            (WeightType::Q4_0, 1.0 / 8.0),
            (WeightType::Q4_1, 1.0 / 15.0),
            (WeightType::Q4K, 2.0 / 15.0),
            (WeightType::Q6K, 1.0 / 32.0),
        ] {
            let bytes = quantize(t, &x);
            assert_eq!(bytes.len() as u64, t.row_bytes(x.len() as u64), "{t}");
            let y = dequantize(t.ggml(), &bytes, x.len()).expect("dequantize");
            let (block, _) = t.block();
            for (bx, by) in x.chunks(block as usize).zip(y.chunks(block as usize)) {
                let range = bx.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                for (a, b) in bx.iter().zip(by) {
                    assert!((a - b).abs() <= tol * range + 1e-3, "{t}: {a} -> {b}");
                }
            }
        }
    }

    /// Blocks worked out by hand from the algorithms.
    #[test]
    fn q8_0_and_q4_0_blocks_by_hand() {
        // max|x| = 1.27: d = 0.01, q = x * 100.
        let mut x = vec![0.0f32; 32];
        x[0] = 1.27;
        x[1] = -0.6;
        x[2] = 0.004;
        let b = quantize(WeightType::Q8_0, &x);
        assert_eq!(b[..2], f16::from_f32(0.01).to_le_bytes());
        assert_eq!(b[2..5], [127, (-60i8) as u8, 0]);

        // Largest magnitude -4.0: d = 0.5, q = trunc(x / 0.5 + 8.5), clamped to 15.
        let mut x = vec![0.0f32; 32];
        x[0] = -4.0; // 0
        x[1] = 3.9; // 16.3 -> 15
        x[16] = 1.0; // 10.5 -> 10, the high nibble of qs[0]
        let b = quantize(WeightType::Q4_0, &x);
        assert_eq!(b[..2], f16::from_f32(0.5).to_le_bytes());
        assert_eq!(b[2], 10 << 4);
        assert_eq!(b[3], 15 | (8 << 4));
    }

    #[test]
    fn q4_k_m_gives_more_bits_where_llama_cpp_does() {
        let s = QuantScheme::Q4KM;
        // 28 layers (qwen3-0.6b): the first and last 3 or 4, and every third between.
        let more: Vec<usize> = (0..28).filter(|&i| use_more_bits(i, 28)).collect();
        assert_eq!(more, [0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 24, 25, 26, 27]);
        let v = |layer| s.type_for(Role::AttnV { layer, layers: 28 }, 1024);
        assert_eq!((v(0), v(3)), (Some(WeightType::Q6K), Some(WeightType::Q4K)));
        assert_eq!(
            s.type_for(Role::Embed { tied: true }, 1024),
            Some(WeightType::Q6K)
        );
        assert_eq!(
            s.type_for(Role::Embed { tied: false }, 1024),
            Some(WeightType::Q4K)
        );
        assert_eq!(
            QuantScheme::Q8_0.type_for(Role::Output, 1024),
            Some(WeightType::Q8_0)
        );
        assert_eq!(
            QuantScheme::Q4_0.type_for(Role::Output, 1024),
            Some(WeightType::Q6K)
        );
        // A 288-wide row: no Q4_K; the output falls back to Q8_0.
        assert_eq!(s.type_for(Role::Other, 288), None);
        assert_eq!(s.type_for(Role::Output, 288), Some(WeightType::Q8_0));
    }
}
