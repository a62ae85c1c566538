#version 460
// Split-K decode attention for the rows of a decode step (one query row per sequence), with GQA
// folding. Row t is position pos_t of sequence seq_t and attends positions [lo_t, pos_t] (rows[t]
// = (pos_t, seq_t, lo_t)). Workgroup (s, kvh, t) covers the positions [lo_t + s * chunk, ...)
// of row t, chunk = ceil(span / n_splits) rounded up to a multiple of 32 (span = pos_t + 1 -
// lo_t), for ALL G = heads / kv_heads query heads of KV head kvh, so each K and V element is read
// from memory once per workgroup. It writes, for each of those heads h, partial[t, h, s] = (m, l,
// o[0..hd]): the max scaled score, the sum of exp(score - m) and the unnormalized output sum
// exp(score - m) * v (an empty split writes m = -inf, l = 0, o = 0).
//
// K and V are read through the layout of shaders/kv.glsl (contiguous, paged or rotating; f16 or
// f32). For the paged layout the split's slice of the block table is staged in shared memory
// (TBL_SH entries at a time) and each tile's slots come from it; a tile past the table's staged
// slice restages it.
//
// The split is processed in tiles of TILE positions, software-pipelined so that the memory
// latency of one tile overlaps the arithmetic of the previous one:
//   0. every invocation holds its share of the NEXT tile's K and V rows in registers (16-byte
//      loads, all independent, issued before the current tile's arithmetic starts) and writes
//      them to shared memory once the current tile is done;
//   1. one invocation per (head, position) computes a score from shared memory (q staged once,
//      pre-scaled), with four independent partial sums;
//   2. the same invocations take the tile's max for their head (every invocation of a head reads
//      the same TILE scores, so they all agree on it), each turns its own score into
//      p = exp(score - m_new), and the head's first invocation publishes the rescale factor
//      alpha = exp(m_old - m_new); the running max lives in the registers of those invocations;
//   3. every invocation owns fixed output slots (head, d), kept in registers for the whole run:
//      o = o * alpha + sum_p p * V[p, d]; the owner of (head, 0) also keeps the running sum
//      l = l * alpha + sum_p p.
// No step has a serial loop over positions with one invocation per head, and there are three
// barriers per tile.
//
// Limits: head_dim % 4 == 0, head_dim <= 128, G <= 8, WG >= 32 (about 23 KiB of shared memory
// with TILE = 16, 40 KiB with 32, whatever WG is).
// Bindings: 0 params, 1 q f32 [n, heads, hd], 2 block tables, 3 k_cache, 4 v_cache,
// 5 partial f32 [n, heads, n_splits, hd + 2]. Spec: 0 WG, 1 TILE, 4..7 the KV layout.
// Groups: (n_splits, kv_heads, n).
#include "common.glsl"

#define KV_TABLE_BINDING 2
#define KV_K_BINDING 3
#define KV_V_BINDING 4
#define KV_READ
#include "kv.glsl"

layout(local_size_x_id = 0) in;

const uint MAX_G = 8;
const uint MAX_HD4 = 32;       // head_dim / 4 <= 32
const uint PAD_HD4 = MAX_HD4 + 1;  // padded row stride: rows read column-wise hit distinct banks
// Positions per tile (spec 1): 16 on CPU drivers (32 KiB of shared memory), 32 on GPUs.
layout(constant_id = 1) const uint TILE = 16;
// 1: the next tile's K and V are loaded into registers while the current one is computed;
// 0: each tile is loaded straight into shared memory when its turn comes.
layout(constant_id = 2) const uint PREFETCH = 1;
// Block-table entries staged in shared memory at a time (paged layout).
const uint TBL_SH = 256;
// Output slots (head, d) per invocation: slot = tid + k * WG for k < O_PER.
const uint O_PER = (MAX_G * MAX_HD4 * 4 + WG - 1) / WG;
// (head, position) pairs per invocation: pair = tid + k * WG is (pair / TILE, pair % TILE).
const uint P_PER = (MAX_G * TILE + WG - 1) / WG;
// 16-byte words of the next tile's K (and of its V) per invocation.
const uint L_PER = (TILE * MAX_HD4 + WG - 1) / WG;

layout(set = 0, binding = 0) readonly buffer Params { TokenParams params; uvec4 rows[]; };
layout(set = 0, binding = 1) readonly buffer Q { vec4 q4[]; };
layout(set = 0, binding = 5) writeonly buffer Partial { float partial[]; };

layout(push_constant) uniform Push {
    uint heads;
    uint kv_heads;
    uint head_dim;
    uint n_splits;
    float scale;
    uint pad0;
    uint pad1;
    uint pad2;
} pc;

shared vec4 q_sh[MAX_G * PAD_HD4];  // the group's q heads, pre-scaled: [G, hd / 4] (padded rows)
shared vec4 k_sh[TILE * PAD_HD4];   // the tile's K rows (padded rows)
shared vec4 v_sh[TILE * MAX_HD4];   // the tile's V rows
shared float s_sh[MAX_G * TILE];    // scores: [G, TILE]
shared float p_sh[MAX_G * TILE];    // probabilities exp(score - m): [G, TILE]
shared float alpha_sh[MAX_G];       // this tile's rescale factor per head
shared uint tbl_sh[TBL_SH];         // paged: blocks seg0 .. seg0 + TBL_SH of the row's table

// The slot of position pos of the row's sequence (paged: through the staged table slice).
uint slot_of(uint seq, uint pos, uint seg0) {
    return (KV_LAYOUT == 1u) ? tbl_sh[pos / KV_UNIT - seg0] * KV_UNIT + pos % KV_UNIT
                             : kv_slot(seq, pos);
}

void main() {
    uint split = gl_WorkGroupID.x;
    uint kvh = gl_WorkGroupID.y;
    uint t = gl_WorkGroupID.z;
    // Uniform over the workgroup: the whole group leaves before any barrier.
    if (split >= pc.n_splits || kvh >= pc.kv_heads || t >= params.n_tokens) return;
    uint tid = gl_LocalInvocationID.x;
    uint group = pc.heads / pc.kv_heads;
    uint hd = pc.head_dim;
    uint hd4 = hd / 4;
    float neg_inf = uintBitsToFloat(0xff800000u);

    uvec4 row = rows[t];
    uint seq = row.y;
    uint lo = row.z;
    uint stop = row.x + 1;
    uint span = stop - lo;
    // Splits start at multiples of 32 positions from lo (whatever TILE is), so a paged split's
    // tiles never straddle more blocks than they must.
    uint chunk = ((span + pc.n_splits - 1) / pc.n_splits + 31) / 32 * 32;
    uint begin = min(stop, lo + split * chunk);
    uint end = min(stop, begin + chunk);

    for (uint i = tid; i < group * hd4; i += WG) {
        uint g = i / hd4;
        q_sh[g * PAD_HD4 + (i - g * hd4)] = q4[(t * pc.heads + kvh * group) * hd4 + i] * pc.scale;
    }
    uint row4 = pc.kv_heads * hd4;

    // Paged: the split's slice of the block table (a split longer than TBL_SH blocks restages
    // it below, uniformly over the workgroup).
    uint seg0 = begin / KV_UNIT;
    if (KV_LAYOUT == 1u && begin < end) {
        uint count = min(TBL_SH, (end - 1) / KV_UNIT + 1 - seg0);
        for (uint i = tid; i < count; i += WG) tbl_sh[i] = kv_block(seq, seg0 + i);
    }
    barrier();

    // Prefetch the first tile.
    vec4 k_reg[L_PER];
    vec4 v_reg[L_PER];
    uint n_next = min(TILE, end - begin);
    if (PREFETCH == 1u) [[unroll]] for (uint k = 0; k < L_PER; k++) {
        uint i = tid + k * WG;
        if (i < n_next * hd4) {
            uint p = i / hd4;
            uint src = slot_of(seq, begin + p, seg0) * row4 + kvh * hd4 + (i - p * hd4);
            k_reg[k] = k_load4(src);
            v_reg[k] = v_load4(src);
        }
    }

    // Running max per (head, position) pair (every pair of a head holds the same value).
    float m_run[P_PER];
    [[unroll]] for (uint k = 0; k < P_PER; k++) m_run[k] = neg_inf;
    // Running sum of exp per output slot (kept by the slots with d = 0).
    float l_run[O_PER];
    // This invocation's output slots: slot tid + k * WG is (head slot_g[k], dim slot_d[k]).
    float o[O_PER];
    uint slot_g[O_PER];
    uint slot_d[O_PER];
    [[unroll]] for (uint k = 0; k < O_PER; k++) {
        o[k] = 0.0;
        l_run[k] = 0.0;
        uint slot = tid + k * WG;
        slot_g[k] = slot / hd;
        slot_d[k] = slot - slot_g[k] * hd;
    }

    for (uint t0 = begin; t0 < end; t0 += TILE) {
        uint n = n_next;

        // 0. The prefetched tile into shared memory (the previous tile's readers are done: the
        //    loop ends with a barrier), then the next tile's loads are issued.
        if (PREFETCH == 1u) {
            [[unroll]] for (uint k = 0; k < L_PER; k++) {
                uint i = tid + k * WG;
                if (i < n * hd4) {
                    uint p = i / hd4;
                    uint c = i - p * hd4;
                    k_sh[p * PAD_HD4 + c] = k_reg[k];
                    v_sh[p * MAX_HD4 + c] = v_reg[k];
                }
            }
        } else {
            for (uint i = tid; i < n * hd4; i += WG) {
                uint p = i / hd4;
                uint c = i - p * hd4;
                uint src = slot_of(seq, t0 + p, seg0) * row4 + kvh * hd4 + c;
                k_sh[p * PAD_HD4 + c] = k_load4(src);
                v_sh[p * MAX_HD4 + c] = v_load4(src);
            }
        }
        uint t1 = t0 + TILE;
        n_next = t1 < end ? min(TILE, end - t1) : 0;
        if (KV_LAYOUT == 1u && n_next > 0 && (t1 + n_next - 1) / KV_UNIT >= seg0 + TBL_SH) {
            // Uniform: restage the table slice from the next tile's block on.
            barrier();
            seg0 = t1 / KV_UNIT;
            uint count = min(TBL_SH, (end - 1) / KV_UNIT + 1 - seg0);
            for (uint i = tid; i < count; i += WG) tbl_sh[i] = kv_block(seq, seg0 + i);
        }
        barrier();
        if (PREFETCH == 1u) [[unroll]] for (uint k = 0; k < L_PER; k++) {
            uint i = tid + k * WG;
            if (i < n_next * hd4) {
                uint p = i / hd4;
                uint src = slot_of(seq, t1 + p, seg0) * row4 + kvh * hd4 + (i - p * hd4);
                k_reg[k] = k_load4(src);
                v_reg[k] = v_load4(src);
            }
        }

        // 1. Scores, one invocation per (head, position).
        float s_reg[P_PER];
        [[unroll]] for (uint k = 0; k < P_PER; k++) {
            uint i = tid + k * WG;
            uint g = i / TILE;
            uint p = i - g * TILE;
            s_reg[k] = neg_inf;
            if (g < group && p < n) {
                uint qb = g * PAD_HD4;
                uint kb = p * PAD_HD4;
                vec4 s4 = vec4(0.0);
                uint c = 0;
                for (; c + 4 <= hd4; c += 4) {
                    s4.x += dot(q_sh[qb + c], k_sh[kb + c]);
                    s4.y += dot(q_sh[qb + c + 1], k_sh[kb + c + 1]);
                    s4.z += dot(q_sh[qb + c + 2], k_sh[kb + c + 2]);
                    s4.w += dot(q_sh[qb + c + 3], k_sh[kb + c + 3]);
                }
                for (; c < hd4; c++) s4.x += dot(q_sh[qb + c], k_sh[kb + c]);
                s_reg[k] = (s4.x + s4.y) + (s4.z + s4.w);
                s_sh[g * TILE + p] = s_reg[k];
            }
        }
        barrier();

        // 2. Online softmax: the tile's max per head, the probabilities, the rescale factor.
        [[unroll]] for (uint k = 0; k < P_PER; k++) {
            uint i = tid + k * WG;
            uint g = i / TILE;
            uint p = i - g * TILE;
            if (g < group) {
                float mt = neg_inf;
                for (uint j = 0; j < n; j++) mt = max(mt, s_sh[g * TILE + j]);
                float m_new = max(m_run[k], mt);
                if (p < n) p_sh[g * TILE + p] = exp(s_reg[k] - m_new);
                if (p == 0) alpha_sh[g] = exp(m_run[k] - m_new);
                m_run[k] = m_new;
            }
        }
        barrier();

        // 3. o = o * alpha + sum_p p * V[p, d] for this invocation's slots (and l for d = 0).
        [[unroll]] for (uint k = 0; k < O_PER; k++) {
            if (tid + k * WG < group * hd) {
                uint g = slot_g[k];
                uint d = slot_d[k];
                float acc = 0.0;
                for (uint p = 0; p < n; p++) acc += p_sh[g * TILE + p] * v_sh[p * MAX_HD4 + d / 4][d % 4];
                float alpha = alpha_sh[g];
                o[k] = o[k] * alpha + acc;
                if (d == 0) {
                    float sum = 0.0;
                    for (uint p = 0; p < n; p++) sum += p_sh[g * TILE + p];
                    l_run[k] = l_run[k] * alpha + sum;
                }
            }
        }
        // The next tile overwrites k_sh, v_sh, s_sh, p_sh and alpha_sh.
        barrier();
    }

    uint stride = hd + 2;
    [[unroll]] for (uint k = 0; k < O_PER; k++) {
        uint slot = tid + k * WG;
        if (slot < group * hd) {
            uint g = slot / hd;
            uint d = slot - g * hd;
            uint b = ((t * pc.heads + kvh * group + g) * pc.n_splits + split) * stride;
            partial[b + 2 + d] = o[k];
            if (d == 0) partial[b + 1] = l_run[k];
        }
    }
    [[unroll]] for (uint k = 0; k < P_PER; k++) {
        uint i = tid + k * WG;
        uint g = i / TILE;
        if (g < group && i - g * TILE == 0) {
            partial[((t * pc.heads + kvh * group + g) * pc.n_splits + split) * stride] = m_run[k];
        }
    }
}
