// The persistent kernel's grouped reads of weights in GGUF blocks (WQ = 1), included by
// persistent.glsl after its matvec rows: what each lane loads of a row, in which order, and how
// many rows' loads it has in flight. quant.glsl's block layouts and arithmetic (the CPU
// reference's, decoder/src/gguf/dequant.rs) are the contract; only the grouping of the loads is
// new here.
//
// Read four elements at a time (wload4), a Q6_K row costs a load per scale, per d and per pair
// of nibble and high bits, and the lm_head of a Q4_K_M file (Q6_K) took twice the time of a Q8_0
// one. Here every lane takes a unit of 32 elements of a Q4_K or Q6_K row whose bytes it loads as
// whole words, scales included, and issues the words of QR rows (QKV's passes, gate and up of one
// pass, the lm_head's rows) before it decodes any. Words, not decoded floats, stay live between
// the loads and their use: 8 or 13 registers per row and lane. The other types' rows keep
// persistent.glsl's loads: on an H200, Q8_0 rows read as units (a block per lane, all types in
// this file) ran slower than a row at a time (docs/persistent-kernel.md, rows 92 to 94).
//
// The down-projection of every type is here too (down_rows): a cluster of lanes per output row,
// 8 channels a piece, all of a lane's rows' words issued at once.

// Whether rows of type t are read by units (this file) rather than by persistent.glsl's part_dot_q.
bool rows_in_units(uint t) { return (t == WT_Q4_K && WT_HAS(WT_Q4_K)) || (t == WT_Q6_K && WT_HAS(WT_Q6_K)); }

// ---- units: a lane's share of a row ----
//
// A row is cut into units of 32 elements, one per lane at a time, whose bytes a lane loads as
// whole words (a 2-byte-aligned span by the 3 words that cover it):
//   Q4_K  unit u: block u / 8, both nibbles of 16 bytes of qs (u % 8 = 2 m + h: bytes
//         32 m + 16 h .. + 15), i.e. elements 64 m + 16 h .. + 15 of sub-block 2 m and the same of
//         sub-block 2 m + 1: 4 words of qs, d and dmin, the 3 words of the scales;
//   Q6_K  unit u: block u / 8, half n = (u % 8) / 4, positions l0 .. l0 + 7 (l0 = 8 (u % 4)) of
//         all four quarters k (elements 128 n + 32 k + l0 .. + 7): 3 words each of ql (k even,
//         odd), qh and the half's 8 scales, and d.

// Rows a subgroup has in flight at once (even: gate/up take QR / 2 passes of both at a time),
// and the most words a unit takes (Q6_K). At 4 rows the Q4_K_M kernel spilled 928 bytes a thread
// and ran 16% slower at 512, 9% at 16K (an H200; docs/persistent-kernel.md, row 106).
const uint QR = 2;
const uint UW = 13;

// The 8 bytes at byte 2 `odd` of words a, b, c (odd: the span starts 2 bytes into a).
uvec2 span8(uint a, uint b, uint c, bool odd) {
    return odd ? uvec2((a >> 16) | (b << 16), (b >> 16) | (c << 16)) : uvec2(a, b);
}

// Byte i (0..11) of a Q4_K block's scales, held as 3 words (no dynamic index: no local memory).
uint q4k_sbyte(uint s0, uint s1, uint s2, uint i) {
    uint w = i < 4u ? s0 : (i < 8u ? s1 : s2);
    return (w >> (8u * (i & 3u))) & 0xffu;
}

// quant.glsl's q4k_scale_min from the scales' 3 words.
uvec2 q4k_sm(uint s0, uint s1, uint s2, uint j) {
    return q4k_unpack_scale_min(j, q4k_sbyte(s0, s1, s2, j), q4k_sbyte(s0, s1, s2, j + 4u),
                                j < 4u ? 0u : q4k_sbyte(s0, s1, s2, j - 4u));
}

// Unit u of the row at byte rb, type t (Q4_K or Q6_K, constant at each call): its words.
void unit_load(uint t, uint rb, uint u, out uint w[UW]) {
    [[unroll]] for (uint k = 0; k < UW; k++) w[k] = 0u;
    if (t == WT_Q4_K) {
        uint b = rb + (u / 8u) * 144u, q = u % 8u;
        [[unroll]] for (uint k = 0; k < 4u; k++) w[k] = QW((b >> 2) + k);
        uint o = (b + 16u + 16u * q) >> 2;
        [[unroll]] for (uint k = 0; k < 4u; k++) w[4u + k] = QW(o + k);
    } else {
        uint b = rb + (u / 8u) * 210u, q = u % 8u, n = q / 4u, l0 = 8u * (q % 4u);
        bool odd = (b & 2u) != 0u;
        // ql of the even and odd quarters, qh, the half's scales: 3 words each (the third only
        // where the span starts 2 bytes into its first).
        uint at[4] = uint[4](b + 64u * n + l0, b + 64u * n + 32u + l0, b + 128u + 32u * n + l0, b + 192u + 8u * n);
        [[unroll]] for (uint s = 0; s < 4u; s++) {
            w[3u * s] = QW(at[s] >> 2);
            w[3u * s + 1u] = QW((at[s] >> 2) + 1u);
            if (odd) w[3u * s + 2u] = QW((at[s] >> 2) + 2u);
        }
        w[12] = QW((b + 208u) >> 2);
    }
}

// Unit u's products with xs (the staged input row), from its words: the products of wload4.
float unit_dot(uint t, uint rb, uint u, uint w[UW]) {
    float acc = 0.0;
    if (t == WT_Q4_K) {
        uint q = u % 8u, m = q / 2u, h = q % 2u;
        vec2 dm = unpackHalf2x16(w[0]);
        uvec2 s0 = q4k_sm(w[1], w[2], w[3], 2u * m), s1 = q4k_sm(w[1], w[2], w[3], 2u * m + 1u);
        float d0 = dm.x * float(s0.x), m0 = dm.y * float(s0.y);
        float d1 = dm.x * float(s1.x), m1 = dm.y * float(s1.y);
        // Elements e0 .. e0 + 15 (low nibbles) and e0 + 32 .. e0 + 47 (high ones).
        uint e4 = ((u / 8u) * 256u + 64u * m + 16u * h) / 4u;
        [[unroll]] for (uint k = 0; k < 4u; k++) {
            acc += dot(d0 * q_nibbles(w[4u + k], 0u) - m0, xs[xsw(e4 + k)]);
            acc += dot(d1 * q_nibbles(w[4u + k], 4u) - m1, xs[xsw(e4 + 8u + k)]);
        }
    } else {
        uint b = rb + (u / 8u) * 210u, q = u % 8u, n = q / 4u, l0 = 8u * (q % 4u);
        bool odd = (b & 2u) != 0u;
        uvec2 qle = span8(w[0], w[1], w[2], odd), qlo = span8(w[3], w[4], w[5], odd);
        uvec2 qh = span8(w[6], w[7], w[8], odd), sc = span8(w[9], w[10], w[11], odd);
        float d = unpackHalf2x16(odd ? w[12] >> 16 : w[12]).x;
        uint e4 = ((u / 8u) * 256u + 128u * n + l0) / 4u;
        [[unroll]] for (uint k = 0; k < 4u; k++) {
            // Scale l0 / 16 + 2 k of the half's 8 (a signed byte).
            uint si = l0 / 16u + 2u * k;
            float s = d * q_i8(si < 4u ? sc.x : sc.y, si & 3u);
            [[unroll]] for (uint g = 0; g < 2u; g++) {
                uint lw = (k & 1u) == 0u ? (g == 0u ? qle.x : qle.y) : (g == 0u ? qlo.x : qlo.y);
                vec4 v = q6k_values(lw, k >= 2u ? 4u : 0u, g == 0u ? qh.x : qh.y, k);
                acc += dot(s * v, xs[xsw(e4 + 8u * k + g)]);
            }
        }
    }
    return acc;
}

// unit_load and unit_dot for a type known only at run time (uniform in the subgroup, Q4_K or
// Q6_K): a branch per type the model has, each with its type constant.
void unit_load_any(uint t, uint rb, uint u, out uint w[UW]) {
    if (t == WT_Q4_K && WT_HAS(WT_Q4_K)) unit_load(WT_Q4_K, rb, u, w);
    else unit_load(WT_Q6_K, rb, u, w);
}

float unit_dot_any(uint t, uint rb, uint u, uint w[UW]) {
    if (t == WT_Q4_K && WT_HAS(WT_Q4_K)) return unit_dot(WT_Q4_K, rb, u, w);
    return unit_dot(WT_Q6_K, rb, u, w);
}

// This subgroup's parts of up to QR rows of cols columns of the matrix at p, against xs: row k
// (k < n, n uniform in the subgroup) of type tr[k].x (Q4_K or Q6_K) at byte tr[k].y; every lane
// gets each part (0 for k >= n). Every row's words of a lane's unit are loaded before any is
// decoded. The lanes take units as part_dot takes chunks (KS subgroups a row, see split_ks).
void rows_dot(uvec2 p, uvec2 tr[QR], uint n, uint cols, uint ks, out float s[QR]) {
    qsrc = QRef(p);
    uint stride = ks * SG, i = gl_SubgroupInvocationID + (gl_SubgroupID & (ks - 1u)) * SG;
    uint nu = cols / 32u;
    float acc[QR];
    [[unroll]] for (uint k = 0; k < QR; k++) acc[k] = 0.0;
    for (; i < nu; i += stride) {
        uint w[QR][UW];
        [[unroll]] for (uint k = 0; k < QR; k++) {
            if (k < n) unit_load_any(tr[k].x, tr[k].y, i, w[k]);
        }
        [[unroll]] for (uint k = 0; k < QR; k++) {
            if (k < n) acc[k] += unit_dot_any(tr[k].x, tr[k].y, i, w[k]);
        }
    }
    [[unroll]] for (uint k = 0; k < QR; k++) s[k] = k < n ? subgroupAdd(acc[k]) : 0.0;
}

// ---- the down-projection: a cluster of lanes a row ----
//
// A workgroup's e_n channels are consecutive (phase_mlp's mlp_row for WQ = 1), so each output row
// of W_down holds the workgroup's weights as one span of a few dozen bytes. A cluster of
// consecutive lanes takes a row, lane k its pieces k, k + cluster, ... of the span (pieces of 8
// channels, which always share a block and its scales), and the cluster's lanes sum their products
// with shuffles: a subgroup's load touches a line or two of each of its clusters' rows, where a
// lane a row touched a line per lane.

const uint G8W = 8;
// Rows a lane has in flight at once.
const uint DRW = 4;

// The sum of v over this lane's cluster of n consecutive lanes (n a power of two dividing SG, the
// same in the whole subgroup); every lane of the cluster gets it.
float cluster_sum(float v, uint n) {
    for (uint o = n >> 1; o > 0u; o >>= 1) v += subgroupShuffleXor(v, o);
    return v;
}

// For elements c .. c + 7 (c a multiple of 8) of a Q8_0, Q4_0 or Q4_1 row at byte rb: the byte of
// their 32-element block, and the byte of their quants in it (Q4_0, Q4_1: of the bytes whose low
// or high nibbles they are).
uvec2 block32_bytes(uint t, uint rb, uint c) {
    uint b = rb + wt_row_bytes(t, c & ~31u), j = c & 31u;
    return uvec2(b, b + (t == WT_Q4_1 ? 4u : 2u) + (t == WT_Q8_0 ? j : (j & 15u)));
}

// Elements c .. c + 7 (c a multiple of 8) of the row at byte rb, type t (constant at each call;
// f16 rows are loaded by g8_dot): their words, scales included.
void g8_load(uint t, uint rb, uint c, out uint w[G8W]) {
    [[unroll]] for (uint k = 0; k < G8W; k++) w[k] = 0u;
    uint j = c & 31u;
    if (t == WT_Q8_0 || t == WT_Q4_0 || t == WT_Q4_1) {
        // The word of the block's first half (Q4_1: both halves, d and m), and the 8 bytes of
        // quants (Q4_0, Q4_1: the bytes whose low or high nibbles the 8 elements are) as 3 words.
        uvec2 bq = block32_bytes(t, rb, c);
        uint b = bq.x, q = bq.y;
        w[0] = QW(b >> 2);
        [[unroll]] for (uint k = 0; k < 3u; k++) {
            if (k < 2u || (q & 2u) != 0u) w[2u + k] = QW((q >> 2) + k);
        }
    } else if (t == WT_Q4_K) {
        uint b = rb + (c / 256u) * 144u, o = (b + 16u + 32u * ((c & 255u) / 64u) + j) >> 2;
        [[unroll]] for (uint k = 0; k < 4u; k++) w[k] = QW((b >> 2) + k);
        w[4] = QW(o);
        w[5] = QW(o + 1u);
    } else if (t == WT_Q6_K) {
        uint b = rb + (c / 256u) * 210u, e = c & 255u, n = e / 128u, k = (e & 127u) / 32u;
        uint ql = b + 64u * n + j + ((k & 1u) == 1u ? 32u : 0u), qh = b + 128u + 32u * n + j;
        bool odd = (b & 2u) != 0u;
        [[unroll]] for (uint q = 0; q < 3u; q++) {
            if (q < 2u || odd) {
                w[q] = QW((ql >> 2) + q);
                w[3u + q] = QW((qh >> 2) + q);
            }
        }
        w[6] = QW((b + 192u + 8u * n + j / 16u + 2u * k) >> 2);
        w[7] = QW((b + 208u) >> 2);
    }
}

// Elements c .. c + 7 of the row at byte rb times xa and xb (their activations), from their
// words: wload4's products.
float g8_dot(uint t, uint rb, uint c, uint w[G8W], vec4 xa, vec4 xb) {
    uint j = c & 31u;
    if (t == WT_Q8_0 || t == WT_Q4_0 || t == WT_Q4_1) {
        uvec2 bq = block32_bytes(t, rb, c);
        uint b = bq.x, q = bq.y;
        uvec2 v = span8(w[2], w[3], w[4], (q & 2u) != 0u);
        float d = unpackHalf2x16((b & 2u) != 0u ? w[0] >> 16 : w[0]).x;
        if (t == WT_Q8_0) {
            vec4 a = vec4(q_i8(v.x, 0u), q_i8(v.x, 1u), q_i8(v.x, 2u), q_i8(v.x, 3u));
            vec4 e = vec4(q_i8(v.y, 0u), q_i8(v.y, 1u), q_i8(v.y, 2u), q_i8(v.y, 3u));
            return dot(d * a, xa) + dot(d * e, xb);
        }
        uint hi = j < 16u ? 0u : 4u;
        if (t == WT_Q4_0) {
            return dot(d * (q_nibbles(v.x, hi) - 8.0), xa) + dot(d * (q_nibbles(v.y, hi) - 8.0), xb);
        }
        // Q4_1's blocks are 4-byte aligned: d and m are w[0]'s halves.
        float m = unpackHalf2x16(w[0] >> 16).x;
        return dot(d * q_nibbles(v.x, hi) + m, xa) + dot(d * q_nibbles(v.y, hi) + m, xb);
    }
    if (t == WT_Q4_K) {
        uint sub = (c & 255u) / 32u, hi = (sub & 1u) * 4u;
        vec2 dm = unpackHalf2x16(w[0]);
        uvec2 sm = q4k_sm(w[1], w[2], w[3], sub);
        float d1 = dm.x * float(sm.x), m1 = dm.y * float(sm.y);
        return dot(d1 * q_nibbles(w[4], hi) - m1, xa) + dot(d1 * q_nibbles(w[5], hi) - m1, xb);
    }
    if (t == WT_Q6_K) {
        uint b = rb + (c / 256u) * 210u, e = c & 255u, n = e / 128u, k = (e & 127u) / 32u;
        bool odd = (b & 2u) != 0u;
        uvec2 lw = span8(w[0], w[1], w[2], odd), hw = span8(w[3], w[4], w[5], odd);
        uint si = b + 192u + 8u * n + j / 16u + 2u * k;
        float s = unpackHalf2x16(odd ? w[7] >> 16 : w[7]).x * q_i8(w[6], si & 3u);
        uint sh = k >= 2u ? 4u : 0u;
        return dot(s * q6k_values(lw.x, sh, hw.x, k), xa) + dot(s * q6k_values(lw.y, sh, hw.y, k), xb);
    }
    return dot(wload4(WT_F16, rb, c), xa) + dot(wload4(WT_F16, rb, c + 4u), xb);
}

// W_down (type t, rows of rbd bytes, constant at each call) at this workgroup's e_n channels c0
// .. c0 + e_n - 1 times their activations (after the staged row in xs), into xs[0 .. hidden), in
// pieces of pw channels (8 where e_n is a multiple of 8, else 4 (wload4) or 1): a cluster of the
// next power of two lanes above the pieces of a row (at most 8) takes DRW rows at a time, all
// their pieces' loads issued before any is decoded. Channels past the last row read the row's
// last piece, and their activations are zeros.
void down_rows(uint t, uint rbd, uint c0, uint e_n) {
    uint pw = e_n % 8u == 0u ? 8u : (e_n % 4u == 0u ? 4u : 1u), np = e_n / pw;
    uint cl = min(min(8u, SG), 1u << findMSB(2u * np - 1u));
    uint tid = gl_LocalInvocationIndex, lane = tid & (cl - 1u), r = tid / cl, rpi = WG / cl;
    for (uint h0 = 0; h0 < HIDDEN; h0 += DRW * rpi) {
        float acc[DRW];
        uint rb[DRW];
        [[unroll]] for (uint k = 0; k < DRW; k++) {
            acc[k] = 0.0;
            rb[k] = min(h0 + k * rpi + r, HIDDEN - 1u) * rbd;
        }
        for (uint q = lane; q < np; q += cl) {
            uint c = min(c0 + pw * q, INTER - pw);
            if (pw == 8u) {
                uint w[DRW][G8W];
                [[unroll]] for (uint k = 0; k < DRW; k++) g8_load(t, rb[k], c, w[k]);
                uint a4 = HIDDEN / 4u + 2u * q;
                [[unroll]] for (uint k = 0; k < DRW; k++) acc[k] += g8_dot(t, rb[k], c, w[k], xs[a4], xs[a4 + 1u]);
            } else if (pw == 4u) {
                vec4 w[DRW];
                [[unroll]] for (uint k = 0; k < DRW; k++) w[k] = wload4(t, rb[k], c);
                [[unroll]] for (uint k = 0; k < DRW; k++) acc[k] += dot(w[k], xs[HIDDEN / 4u + q]);
            } else {
                uint a = HIDDEN + q;
                [[unroll]] for (uint k = 0; k < DRW; k++) acc[k] += wload4(t, rb[k], c & ~3u)[c & 3u] * xs[a / 4u][a % 4u];
            }
        }
        [[unroll]] for (uint k = 0; k < DRW; k++) {
            uint h = h0 + k * rpi + r;
            float s = cluster_sum(acc[k], cl);
            if (lane == 0u && h < HIDDEN) xs[h / 4u][h % 4u] = s;
        }
    }
}
