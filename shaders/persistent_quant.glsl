// The persistent kernel's reads of Q4_K and Q6_K weights (WQ = 1), included by persistent.glsl
// after its matvec rows: what each lane loads of a row, in which order, and how many rows' loads
// it has in flight. quant.glsl's block layouts and arithmetic (the CPU reference's,
// decoder/src/gguf/dequant.rs) are the contract; only the grouping of the loads is new here.
//
// Read four elements at a time (wload4), a Q6_K row costs a load per scale, per d and per pair
// of nibble and high bits, and the lm_head of a Q4_K_M file (Q6_K) took twice the time of a Q8_0
// one. Here every lane takes a unit of 32 elements whose bytes it loads as whole words, scales
// included, and issues the words of QR rows (QKV's passes, gate and up of two passes, the
// lm_head's rows) before it decodes any; the down-projection issues each output row's words for
// all of the workgroup's channels at once. Words, not decoded floats, stay live between the loads
// and their use: 8 or 13 registers per row and lane.
//
// The other types keep persistent.glsl's loads: on an H200, Q8_0 rows read as units (a block per
// lane, all types in this file) ran slower than a row at a time (docs/persistent-kernel.md, rows
// 92 to 94).

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

// Rows a subgroup has in flight at once, and the most words a unit takes (Q6_K).
const uint QR = 4;
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

// ---- the down-projection: groups of 8 channels ----
//
// A workgroup's channels come in groups of 8 consecutive ones where a pass's slots do (per_wg a
// multiple of 8; intermediate is one too, so a group is all in or all past the last row), and 8
// consecutive elements of a row always share a Q4_K sub-block or a Q6_K quarter: their words
// carry their scales along (G8W at most, Q6_K's).

const uint G8W = 8;
// Output rows per invocation, and groups of 8 channels per row, whose words go out at once.
const uint DR = 2;
const uint DG = 3;

// Elements c .. c + 7 (c a multiple of 8) of the row at byte rb, type t (Q4_K or Q6_K, constant
// at each call): their words.
void g8_load(uint t, uint rb, uint c, out uint w[G8W]) {
    [[unroll]] for (uint k = 0; k < G8W; k++) w[k] = 0u;
    uint j = c & 31u;
    if (t == WT_Q4_K) {
        uint b = rb + (c / 256u) * 144u, o = (b + 16u + 32u * ((c & 255u) / 64u) + j) >> 2;
        [[unroll]] for (uint k = 0; k < 4u; k++) w[k] = QW((b >> 2) + k);
        w[4] = QW(o);
        w[5] = QW(o + 1u);
    } else {
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

// Elements c .. c + 7 of the row at byte rb times xa and xb (their activations): wload4's products.
float g8_dot(uint t, uint rb, uint c, uint w[G8W], vec4 xa, vec4 xb) {
    uint j = c & 31u;
    if (t == WT_Q4_K) {
        uint sub = (c & 255u) / 32u, hi = (sub & 1u) * 4u;
        vec2 dm = unpackHalf2x16(w[0]);
        uvec2 sm = q4k_sm(w[1], w[2], w[3], sub);
        float d1 = dm.x * float(sm.x), m1 = dm.y * float(sm.y);
        return dot(d1 * q_nibbles(w[4], hi) - m1, xa) + dot(d1 * q_nibbles(w[5], hi) - m1, xb);
    }
    uint b = rb + (c / 256u) * 210u, e = c & 255u, n = e / 128u, k = (e & 127u) / 32u;
    bool odd = (b & 2u) != 0u;
    uvec2 lw = span8(w[0], w[1], w[2], odd), hw = span8(w[3], w[4], w[5], odd);
    uint si = b + 192u + 8u * n + j / 16u + 2u * k;
    float s = unpackHalf2x16(odd ? w[7] >> 16 : w[7]).x * q_i8(w[6], si & 3u);
    uint sh = k >= 2u ? 4u : 0u;
    return dot(s * q6k_values(lw.x, sh, hw.x, k), xa) + dot(s * q6k_values(lw.y, sh, hw.y, k), xb);
}

// W_down (type t, rows of rbd bytes, constant at each call) at this workgroup's e_n channels
// (per_wg a multiple of 8) times their activations (after the staged row in xs), into xs[0 ..
// hidden): each invocation takes DR output rows at a time (tid + k WG) and DG groups of 8
// channels of each, all their words loaded before any is decoded. Groups past e_n read the last
// group of W_down and the zeros after the activations (phase_mlp clears DE >= 8 DG of them).
void down_groups(uint t, uint rbd, uint e_n, uint per_wg, uint wg_shift) {
    uint tid = gl_LocalInvocationIndex;
    for (uint h0 = tid; h0 < HIDDEN; h0 += DR * WG) {
        float acc[DR];
        [[unroll]] for (uint k = 0; k < DR; k++) acc[k] = 0.0;
        for (uint e = 0; e < e_n; e += 8u * DG) {
            uint w[DR][DG][G8W];
            uint cs[DG];
            [[unroll]] for (uint g = 0; g < DG; g++) {
                uint eg = e + 8u * g;
                cs[g] = min(pass_row(eg & (per_wg - 1u), per_wg, eg >> wg_shift), INTER - 8u);
            }
            [[unroll]] for (uint k = 0; k < DR; k++) {
                uint h = min(h0 + k * WG, HIDDEN - 1u);
                [[unroll]] for (uint g = 0; g < DG; g++) g8_load(t, h * rbd, cs[g], w[k][g]);
            }
            [[unroll]] for (uint k = 0; k < DR; k++) {
                uint h = min(h0 + k * WG, HIDDEN - 1u);
                [[unroll]] for (uint g = 0; g < DG; g++) {
                    uint a4 = (HIDDEN + e) / 4u + 2u * g;
                    acc[k] += g8_dot(t, h * rbd, cs[g], w[k][g], xs[a4], xs[a4 + 1u]);
                }
            }
        }
        [[unroll]] for (uint k = 0; k < DR; k++) {
            uint h = h0 + k * WG;
            if (h < HIDDEN) xs[h / 4u][h % 4u] = acc[k];
        }
    }
}
