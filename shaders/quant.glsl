// Weight decoders: four consecutive elements of a weight row in any storage type the decoder
// keeps on the GPU, read straight from the file's bytes (no dequantized copy).
//
// The includer defines QW(i) before including: word i (a uint, little-endian bytes) of the
// weight buffer, counted from the start of the bound range. A row starts at byte `row` (blocks
// are 2-byte aligned, so any even byte). `c` is the first of the four elements, a multiple of 4:
// four such elements always share a block, a nibble half and a scale.
//
// Types are the ggml type ids, the values of the WTYPE specialization constants (Rust:
// `model::WeightType::spec_id`). The block layouts and the arithmetic are those of
// decoder/src/gguf/dequant.rs, which the CPU reference uses: the same products in the same order.
//   F16   1  half x
//   Q4_0  2  18 B / 32: half d; u8 qs[16]                      d * (nib - 8)
//   Q4_1  3  20 B / 32: half d; half m; u8 qs[16]              d * nib + m
//   Q8_0  8  34 B / 32: half d; i8 qs[32]                      d * q
//   Q4_K 12 144 B / 256: half d, dmin; u8 scales[12]; qs[128]  (d * sc) * nib - dmin * mn
//   Q6_K 14 210 B / 256: u8 ql[128], qh[64]; i8 scales[16]; half d   (d * sc) * (q - 32)

const uint WT_F16 = 1u;
// F16, or 0: a WTYPE constant the host left unset (f16, the weights of every kernel before blocks).
#define WT_IS_F16(t) ((t) <= 1u)
const uint WT_Q4_0 = 2u;
const uint WT_Q4_1 = 3u;
const uint WT_Q8_0 = 8u;
const uint WT_Q4_K = 12u;
const uint WT_Q6_K = 14u;

// Bytes of one row of `cols` elements.
uint wt_row_bytes(uint t, uint cols) {
    if (t == WT_Q4_0) return cols / 32u * 18u;
    if (t == WT_Q4_1) return cols / 32u * 20u;
    if (t == WT_Q8_0) return cols / 32u * 34u;
    if (t == WT_Q4_K) return cols / 256u * 144u;
    if (t == WT_Q6_K) return cols / 256u * 210u;
    return cols * 2u;
}

// Four bytes starting at byte `o` (any alignment), little-endian.
uint q_word(uint o) {
    uint s = (o & 3u) * 8u;
    uint lo = QW(o >> 2);
    if (s == 0u) return lo;
    return (lo >> s) | (QW((o >> 2) + 1u) << (32u - s));
}

// The byte at `o`.
uint q_byte(uint o) {
    return (QW(o >> 2) >> ((o & 3u) * 8u)) & 0xffu;
}

// The half at even byte `o`.
float q_half(uint o) {
    return unpackHalf2x16(QW(o >> 2) >> ((o & 2u) * 8u)).x;
}

// Byte k (0..3) of w as a signed value.
float q_i8(uint w, uint k) {
    return float(int(w << (24u - 8u * k)) >> 24);
}

// Nibble k (0..3) of the four bytes w: the low nibbles (hi = 0) or the high ones (hi = 4).
vec4 q_nibbles(uint w, uint hi) {
    uvec4 b = (uvec4(w) >> (uvec4(0u, 8u, 16u, 24u) + hi)) & 0xfu;
    return vec4(b);
}

// Q4_K: the 6-bit scale (x) and min (y) of sub-block j (0..7) from bytes j, j + 4 and j - 4 of
// the block's 12 bytes of scales (the last one read for j >= 4 only).
uvec2 q4k_unpack_scale_min(uint j, uint bj, uint bj4, uint bjm4) {
    if (j < 4u) return uvec2(bj & 63u, bj4 & 63u);
    return uvec2((bj4 & 0xfu) | ((bjm4 >> 6) << 4), (bj4 >> 4) | ((bj >> 6) << 4));
}

// Q4_K: the scale and min of sub-block j (0..7) of the block at byte `b`.
uvec2 q4k_scale_min(uint b, uint j) {
    uint s = b + 4u;
    return q4k_unpack_scale_min(j, q_byte(s + j), q_byte(s + j + 4u), j < 4u ? 0u : q_byte(s + j - 4u));
}

// Q6_K: four consecutive values (q - 32) from their low bits (the low nibbles of lo, or its high
// ones with sh = 4) and their bit pair k (0..3) of each byte of hi.
vec4 q6k_values(uint lo, uint sh, uint hi, uint k) {
    uvec4 lb = (uvec4(lo) >> (uvec4(0u, 8u, 16u, 24u) + sh)) & 0xfu;
    uvec4 hb = (uvec4(hi) >> (uvec4(0u, 8u, 16u, 24u) + 2u * k)) & 3u;
    return vec4(ivec4(lb | (hb << 4)) - 32);
}

// Elements c..c+3 of the row at byte `row`, type t.
vec4 wload4(uint t, uint row, uint c) {
    if (t == WT_Q8_0) {
        uint b = row + (c / 32u) * 34u;
        float d = q_half(b);
        uint w = q_word(b + 2u + (c & 31u));
        return vec4(d * q_i8(w, 0u), d * q_i8(w, 1u), d * q_i8(w, 2u), d * q_i8(w, 3u));
    }
    if (t == WT_Q4_0) {
        uint b = row + (c / 32u) * 18u;
        float d = q_half(b);
        uint j = c & 31u;
        vec4 n = q_nibbles(q_word(b + 2u + (j & 15u)), j < 16u ? 0u : 4u);
        return d * (n - 8.0);
    }
    if (t == WT_Q4_1) {
        uint b = row + (c / 32u) * 20u;
        float d = q_half(b);
        float m = q_half(b + 2u);
        uint j = c & 31u;
        vec4 n = q_nibbles(q_word(b + 4u + (j & 15u)), j < 16u ? 0u : 4u);
        return d * n + m;
    }
    if (t == WT_Q4_K) {
        uint b = row + (c / 256u) * 144u;
        uint e = c & 255u;
        uint chunk = e / 64u;
        uint within = e & 63u;
        uint hi = within < 32u ? 0u : 1u;
        uvec2 sm = q4k_scale_min(b, 2u * chunk + hi);
        float d1 = q_half(b) * float(sm.x);
        float m1 = q_half(b + 2u) * float(sm.y);
        vec4 n = q_nibbles(q_word(b + 16u + 32u * chunk + (within & 31u)), 4u * hi);
        return d1 * n - m1;
    }
    if (t == WT_Q6_K) {
        uint b = row + (c / 256u) * 210u;
        uint e = c & 255u;
        uint n = e / 128u;
        uint r = e & 127u;
        uint k = r / 32u;  // which of the four elements l, l+32, l+64, l+96
        uint l = r & 31u;
        uint lo = q_word(b + 64u * n + l + ((k & 1u) == 1u ? 32u : 0u));
        uint hi = q_word(b + 128u + 32u * n + l);
        vec4 q = q6k_values(lo, k >= 2u ? 4u : 0u, hi, k);
        uint si = b + 192u + 8u * n + l / 16u + 2u * k;
        float sc = float(int(q_byte(si) << 24) >> 24);
        return (q_half(b + 208u) * sc) * q;
    }
    // F16
    uint o = row + 2u * c;
    uint w0 = q_word(o);
    uint w1 = q_word(o + 4u);
    return vec4(unpackHalf2x16(w0), unpackHalf2x16(w1));
}
