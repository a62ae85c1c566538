// Weights in GGUF blocks read in two steps: a fetch that issues the loads of a piece of a row into
// registers (raw words, nothing computed from them), and a decode that turns those words into
// values. A kernel fetches several pieces (rows, or channels of several rows) before it decodes
// the first, so their loads travel together: decoding a piece where it is loaded waits one round
// trip to memory per piece.
//
// Two shapes of piece:
// - a run: the 32 elements one lane takes of a row in a matvec (q_run_fetch, q_run_decode);
// - a group: 8 consecutive elements c .. c + 7 (c a multiple of 8) of a row (q_group_fetch,
//   q_group_decode), the down-projection's channels.
// Rows start at byte `rb` of the matrix that QW reads (quant.glsl's contract: blocks are 2-byte
// aligned; Q4_K rows start on a word). Every word a fetch loads holds at least one byte of its
// piece's blocks, so a buffer rounded up to whole words is never read past.
//
// The decoded values are quant.glsl's wload4 values: the same products in the same order, which
// are the CPU reference's (decoder/src/gguf/dequant.rs).

// Q_HAS(t): whether any matrix can have type t (the includer may define it from a specialization
// constant, so the other types' code compiles to nothing).
#ifndef Q_HAS
#define Q_HAS(t) true
#endif

// Raw words of one piece: 16 for a run (an f16 run is 64 bytes), at most 8 for a group.
const uint QRAW = 16;
const uint QGRAW = 8;

// Words o >> 2 .. of the n words of bytes from even byte o on, into r[at ..]: n + 1 words where
// o is 2 past a word (the last one then only holds the span's last two bytes), else n.
// n and at are constants at every call.
#define Q_SPAN(r, at, o, n) \
    [[unroll]] for (uint k_ = 0; k_ < (n); k_++) r[(at) + k_] = QW(((o) >> 2) + k_); \
    r[(at) + (n)] = (((o) & 2u) != 0u) ? QW(((o) >> 2) + (n)) : 0u;

// Word k of a span fetched by Q_SPAN from byte o: bytes o + 4k .. o + 4k + 3.
#define Q_SPANW(r, at, o, k) \
    ((((o) & 2u) == 0u) ? r[(at) + (k)] : ((r[(at) + (k)] >> 16) | (r[(at) + (k) + 1u] << 16)))

// The half at byte o (even) of word w, which holds it.
float q_half_of(uint w, uint o) { return unpackHalf2x16(w >> ((o & 2u) * 8u)).x; }

// Byte x (0 .. 11) of three words.
uint q_byte3(uint a, uint b, uint c, uint x) {
    uint w = x < 4u ? a : (x < 8u ? b : c);
    return (w >> (8u * (x & 3u))) & 0xffu;
}

// Q4_K: the 6-bit scale (x) and min (y) of sub-block j from the block's 12 scale bytes (its
// words 1 .. 3), as q4k_scale_min.
uvec2 q4k_sm3(uint a, uint b, uint c, uint j) {
    if (j < 4u) return uvec2(q_byte3(a, b, c, j) & 63u, q_byte3(a, b, c, j + 4u) & 63u);
    uint m = q_byte3(a, b, c, j + 4u);
    return uvec2((m & 0xfu) | ((q_byte3(a, b, c, j - 4u) >> 6) << 4), (m >> 4) | ((q_byte3(a, b, c, j) >> 6) << 4));
}

// Q6_K: elements l .. l + 3 of quarter k from the words of its low bits (lo: the ql bytes of
// quarters k & 1), high bits (hi: the qh bytes) and scale d * sc, as wload4.
vec4 q6k_four(uint lo, uint hi, uint k, float dsc) {
    uvec4 lb = (uvec4(lo) >> (uvec4(0u, 8u, 16u, 24u) + (k >= 2u ? 4u : 0u))) & 0xfu;
    uvec4 hb = (uvec4(hi) >> (uvec4(0u, 8u, 16u, 24u) + 2u * k)) & 3u;
    return dsc * vec4(ivec4(lb | (hb << 4)) - 32);
}

// ---- runs: 32 elements of a row ----
//
// Run i of a row, for Q6_K, Q4_0, Q4_1 and F16 (the kernel reads Q8_0 and Q4_K rows its own way):
// Q4_0, Q4_1 and F16 columns 32 i .. 32 i + 31 (a block); Q6_K, whose quarters interleave, columns
// 256 B + 128 n + 32 k + l0 + e for k = 0 .. 3 and e = 0 .. 7, with B = i / 8, n = i / 4 % 2 and
// l0 = 8 (i % 4): the bytes of one column run serve all four quarters.

// Column of value 4 q (q = 0 .. 7) of run i: the first of four consecutive columns.
uint q_run_col(uint t, uint i, uint q) {
    if (t == WT_Q6_K) return 256u * (i >> 3) + 128u * ((i >> 2) & 1u) + 32u * (q >> 1) + 8u * (i & 3u) + 4u * (q & 1u);
    return 32u * i + 4u * q;
}

void q_run_fetch(uint t, uint rb, uint i, out uint r[QRAW]) {
    [[unroll]] for (uint k = 0; k < QRAW; k++) r[k] = 0u;
    if (Q_HAS(WT_Q6_K) && t == WT_Q6_K) {
        uint bb = rb + 210u * (i >> 3), n = (i >> 2) & 1u, l0 = 8u * (i & 3u);
        uint o = bb + 64u * n + l0;
        Q_SPAN(r, 0u, o, 2u)
        Q_SPAN(r, 3u, o + 32u, 2u)
        Q_SPAN(r, 6u, bb + 128u + 32u * n + l0, 2u)
        Q_SPAN(r, 9u, bb + 192u + 8u * n, 2u)
        r[12] = QW((bb + 208u) >> 2);
    } else if (Q_HAS(WT_Q4_0) && t == WT_Q4_0) {
        uint b4 = (rb + 18u * i) >> 2;
        [[unroll]] for (uint k = 0; k < 5u; k++) r[k] = QW(b4 + k);
    } else if (Q_HAS(WT_Q4_1) && t == WT_Q4_1) {
        uint b = rb + 20u * i;
        [[unroll]] for (uint k = 0; k < 5u; k++) r[k] = QW((b >> 2) + k);
        r[5] = (b & 2u) != 0u ? QW((b >> 2) + 5u) : 0u;
    } else if (Q_HAS(WT_F16)) {
        uint b4 = (rb + 64u * i) >> 2;
        [[unroll]] for (uint k = 0; k < 16u; k++) r[k] = QW(b4 + k);
    }
}

// The values of run i fetched into r: w[q] holds columns q_run_col(t, i, q) .. + 3.
void q_run_decode(uint t, uint rb, uint i, uint r[QRAW], out vec4 w[8]) {
    if (Q_HAS(WT_Q6_K) && t == WT_Q6_K) {
        uint bb = rb + 210u * (i >> 3), l0 = 8u * (i & 3u);
        float d = q_half_of(r[12], bb + 208u);
        uint o = bb;  // every span starts at bb plus a multiple of 4
        uvec2 sc = uvec2(Q_SPANW(r, 9u, o, 0u), Q_SPANW(r, 9u, o, 1u));
        [[unroll]] for (uint k = 0; k < 4u; k++) {
            // The scale of quarter k at columns l0 ..: byte l0 / 16 + 2k of the eight.
            uint si = (l0 >> 4) + 2u * k;
            uint sw = si < 4u ? sc.x : sc.y;
            float dsc = d * float(int(sw << (24u - 8u * (si & 3u))) >> 24);
            [[unroll]] for (uint e = 0; e < 2u; e++) {
                uint lo = (k & 1u) == 0u ? Q_SPANW(r, 0u, o, e) : Q_SPANW(r, 3u, o, e);
                w[2u * k + e] = q6k_four(lo, Q_SPANW(r, 6u, o, e), k, dsc);
            }
        }
    } else if (Q_HAS(WT_Q4_0) && t == WT_Q4_0) {
        uint b = rb + 18u * i;
        float d = q_half_of(r[0], b);
        [[unroll]] for (uint k = 0; k < 4u; k++) {
            uint v = (b & 2u) != 0u ? r[k + 1u] : (r[k] >> 16) | (r[k + 1u] << 16);
            w[k] = d * (q_nibbles(v, 0u) - 8.0);
            w[k + 4u] = d * (q_nibbles(v, 4u) - 8.0);
        }
    } else if (Q_HAS(WT_Q4_1) && t == WT_Q4_1) {
        uint b = rb + 20u * i;
        float d, m;
        if ((b & 2u) == 0u) {
            vec2 dm = unpackHalf2x16(r[0]);
            d = dm.x;
            m = dm.y;
        } else {
            d = unpackHalf2x16(r[0] >> 16).x;
            m = unpackHalf2x16(r[1]).x;
        }
        [[unroll]] for (uint k = 0; k < 4u; k++) {
            uint v = (b & 2u) != 0u ? (r[k + 1u] >> 16) | (r[k + 2u] << 16) : r[k + 1u];
            w[k] = d * q_nibbles(v, 0u) + m;
            w[k + 4u] = d * q_nibbles(v, 4u) + m;
        }
    } else if (Q_HAS(WT_F16)) {
        [[unroll]] for (uint k = 0; k < 8u; k++) w[k] = vec4(unpackHalf2x16(r[2u * k]), unpackHalf2x16(r[2u * k + 1u]));
    } else {
        [[unroll]] for (uint k = 0; k < 8u; k++) w[k] = vec4(0.0);
    }
}

// ---- groups: 8 consecutive elements of a row ----

void q_group_fetch(uint t, uint rb, uint c, out uint r[QGRAW]) {
    [[unroll]] for (uint k = 0; k < QGRAW; k++) r[k] = 0u;
    if (Q_HAS(WT_Q8_0) && t == WT_Q8_0) {
        uint b = rb + 34u * (c >> 5);
        r[0] = QW(b >> 2);
        Q_SPAN(r, 1u, b + 2u + (c & 31u), 2u)
    } else if (Q_HAS(WT_Q4_K) && t == WT_Q4_K) {
        uint b4 = (rb + 144u * (c >> 8)) >> 2, e = c & 255u;
        [[unroll]] for (uint k = 0; k < 4u; k++) r[k] = QW(b4 + k);
        // Sub-block pair e / 64 holds its 64 elements' nibbles in 32 bytes (low, then high).
        r[4] = QW(b4 + 4u + 8u * (e >> 6) + ((e & 31u) >> 2));
        r[5] = QW(b4 + 4u + 8u * (e >> 6) + ((e & 31u) >> 2) + 1u);
    } else if (Q_HAS(WT_Q6_K) && t == WT_Q6_K) {
        uint bb = rb + 210u * (c >> 8), e = c & 255u, n = e >> 7, k = (e & 127u) >> 5, l = e & 31u;
        Q_SPAN(r, 0u, bb + 64u * n + l + ((k & 1u) != 0u ? 32u : 0u), 2u)
        Q_SPAN(r, 3u, bb + 128u + 32u * n + l, 2u)
        r[6] = QW((bb + 192u + 8u * n + (l >> 4) + 2u * k) >> 2);
        r[7] = QW((bb + 208u) >> 2);
    } else if (Q_HAS(WT_Q4_0) && t == WT_Q4_0) {
        uint b = rb + 18u * (c >> 5);
        r[0] = QW(b >> 2);
        Q_SPAN(r, 1u, b + 2u + (c & 15u), 2u)
    } else if (Q_HAS(WT_Q4_1) && t == WT_Q4_1) {
        uint b = rb + 20u * (c >> 5);
        r[0] = QW(b >> 2);
        r[1] = QW((b + 2u) >> 2);
        Q_SPAN(r, 2u, b + 4u + (c & 15u), 2u)
    } else if (Q_HAS(WT_F16)) {
        uint o = rb + 2u * c;
        Q_SPAN(r, 0u, o, 4u)
    }
}

// The values of the group at column c fetched into r: w[0] columns c .. c + 3, w[1] the next four.
void q_group_decode(uint t, uint rb, uint c, uint r[QGRAW], out vec4 w[2]) {
    if (Q_HAS(WT_Q8_0) && t == WT_Q8_0) {
        uint b = rb + 34u * (c >> 5), o = b + 2u + (c & 31u);
        float d = q_half_of(r[0], b);
        [[unroll]] for (uint k = 0; k < 2u; k++) {
            uint v = Q_SPANW(r, 1u, o, k);
            w[k] = vec4(d * q_i8(v, 0u), d * q_i8(v, 1u), d * q_i8(v, 2u), d * q_i8(v, 3u));
        }
    } else if (Q_HAS(WT_Q4_K) && t == WT_Q4_K) {
        uint e = c & 255u, j = 2u * (e >> 6) + ((e & 63u) >> 5);
        uvec2 sm = q4k_sm3(r[1], r[2], r[3], j);
        vec2 dm = unpackHalf2x16(r[0]);
        float d1 = dm.x * float(sm.x), m1 = dm.y * float(sm.y);
        [[unroll]] for (uint k = 0; k < 2u; k++) w[k] = d1 * q_nibbles(r[4u + k], (j & 1u) * 4u) - m1;
    } else if (Q_HAS(WT_Q6_K) && t == WT_Q6_K) {
        uint bb = rb + 210u * (c >> 8), e = c & 255u, n = e >> 7, k = (e & 127u) >> 5, l = e & 31u;
        uint o = bb;
        uint si = bb + 192u + 8u * n + (l >> 4) + 2u * k;
        uint sb = (r[6] >> (8u * (si & 3u))) & 0xffu;
        float dsc = q_half_of(r[7], bb + 208u) * float(int(sb << 24) >> 24);
        [[unroll]] for (uint q = 0; q < 2u; q++) w[q] = q6k_four(Q_SPANW(r, 0u, o, q), Q_SPANW(r, 3u, o, q), k, dsc);
    } else if (Q_HAS(WT_Q4_0) && t == WT_Q4_0) {
        uint b = rb + 18u * (c >> 5), o = b + 2u + (c & 15u), hi = (c & 16u) != 0u ? 4u : 0u;
        float d = q_half_of(r[0], b);
        [[unroll]] for (uint k = 0; k < 2u; k++) w[k] = d * (q_nibbles(Q_SPANW(r, 1u, o, k), hi) - 8.0);
    } else if (Q_HAS(WT_Q4_1) && t == WT_Q4_1) {
        uint b = rb + 20u * (c >> 5), o = b + 4u + (c & 15u), hi = (c & 16u) != 0u ? 4u : 0u;
        float d = q_half_of(r[0], b), m = q_half_of(r[1], b + 2u);
        [[unroll]] for (uint k = 0; k < 2u; k++) w[k] = d * q_nibbles(Q_SPANW(r, 2u, o, k), hi) + m;
    } else if (Q_HAS(WT_F16)) {
        uint o = rb + 2u * c;
        [[unroll]] for (uint k = 0; k < 2u; k++) w[k] = vec4(unpackHalf2x16(Q_SPANW(r, 0u, o, 2u * k)), unpackHalf2x16(Q_SPANW(r, 0u, o, 2u * k + 1u)));
    } else {
        w[0] = vec4(0.0);
        w[1] = vec4(0.0);
    }
}
