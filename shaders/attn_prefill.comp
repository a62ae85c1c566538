#version 460
// Tiled causal attention for a prompt chunk (flash-attention style: an online softmax, no score
// matrix in memory). The step's rows are consecutive positions of one sequence; row t is position
// pos_t and attends [lo_t, pos_t] (rows[t] = (pos_t, seq, lo_t); lo_t > 0 under a sliding window),
// so the chunk's own K and V (already in the cache) and every earlier position are read through
// the layout of shaders/kv.glsl.
//
// Workgroup (b, kvh) owns R = TQ * G query rows: tokens b * TQ .. b * TQ + TQ - 1 of the chunk
// times the G = heads / kv_heads query heads of KV head kvh (TQ = max(1, MAX_R / G)), so each K/V
// tile loaded into shared memory serves R rows. It walks the union of its rows' ranges in tiles of
// TK positions: copy the tile's K and V rows (coalesced 16-byte loads), one score per (row,
// position) from shared memory (-inf outside the row's range), an online-softmax update per row
// (running max m, sum l, rescale alpha), and o = o * alpha + p . V for the output slots each
// invocation keeps in registers. Memory is bounded by the tile sizes whatever the context.
// Limits: head_dim % 4 == 0, head_dim <= 128, G <= MAX_R. About 25 KiB of shared memory with
// MAX_R = 16, 28 KiB with 32.
// Bindings: 0 params, 1 q f32 [n, heads, hd], 2 block tables, 3 k_cache, 4 v_cache,
// 5 out f32 [n, heads, hd]. Spec: 0 WG, 1 MAX_R (0: 16), 4..7 the KV layout.
// Groups: (ceil(n / TQ), kv_heads, 1).
#include "common.glsl"

#define KV_TABLE_BINDING 2
#define KV_K_BINDING 3
#define KV_V_BINDING 4
#define KV_READ
#include "kv.glsl"

layout(local_size_x_id = 0) in;

// Rows per workgroup (spec 1; 0 means 16): 32 on GPUs halves the K/V reads per row.
layout(constant_id = 1) const uint R_SPEC = 0;
const uint MAX_R = R_SPEC == 0 ? 16 : R_SPEC;
const uint MAX_HD4 = 32;
const uint PAD_HD4 = MAX_HD4 + 1;
// Positions per K/V tile: 16, or 8 with 32 rows (so shared memory stays under 32 KiB).
const uint TK = MAX_R >= 32 ? 8 : 16;
const uint O_PER = (MAX_R * MAX_HD4 * 4 + WG - 1) / WG;
// (row, position) pairs per invocation: pair tid + k * WG is (pair / TK, pair % TK).
const uint P_PER = (MAX_R * TK + WG - 1) / WG;

layout(set = 0, binding = 0) readonly buffer Params { TokenParams params; uvec4 rows[]; };
layout(set = 0, binding = 1) readonly buffer Q { vec4 q4[]; };
layout(set = 0, binding = 5) writeonly buffer Out { float y[]; };

layout(push_constant) uniform Push {
    uint heads;
    uint kv_heads;
    uint head_dim;
    float scale;
} pc;

shared vec4 q_sh[MAX_R * PAD_HD4];
shared vec4 k_sh[TK * PAD_HD4];
shared vec4 v_sh[TK * MAX_HD4];
shared float s_sh[MAX_R * TK];
shared float p_sh[MAX_R * TK];
shared float alpha_sh[MAX_R];
shared float inv_l_sh[MAX_R];

void main() {
    uint kvh = gl_WorkGroupID.y;
    uint n_tok = params.n_tokens;
    uint group = pc.heads / pc.kv_heads;
    uint tq_per = max(1u, MAX_R / group);
    uint tq0 = gl_WorkGroupID.x * tq_per;
    // Uniform over the workgroup: the whole group leaves before any barrier.
    if (tq0 >= n_tok || kvh >= pc.kv_heads) return;
    uint tq_n = min(tq_per, n_tok - tq0);
    uint nr = tq_n * group;  // active rows
    uint tid = gl_LocalInvocationID.x;
    uint hd = pc.head_dim;
    uint hd4 = hd / 4;
    float neg_inf = uintBitsToFloat(0xff800000u);

    uint seq = rows[tq0].y;
    uint lo_all = rows[tq0].z;
    uint stop = rows[tq0 + tq_n - 1].x + 1;

    // Row r: token tq0 + r / group, head kvh * group + r % group.
    for (uint i = tid; i < nr * hd4; i += WG) {
        uint r = i / hd4;
        uint c = i - r * hd4;
        uint tok = tq0 + r / group;
        uint h = kvh * group + r % group;
        q_sh[r * PAD_HD4 + c] = q4[(tok * pc.heads + h) * hd4 + c] * pc.scale;
    }

    // Running max per (row, position) pair (every pair of a row holds the same value) and
    // running sum per output slot (kept by the slots with d = 0).
    float m_run[P_PER];
    [[unroll]] for (uint k = 0; k < P_PER; k++) m_run[k] = neg_inf;
    float o[O_PER];
    float l_run[O_PER];
    [[unroll]] for (uint k = 0; k < O_PER; k++) {
        o[k] = 0.0;
        l_run[k] = 0.0;
    }
    uint row4 = pc.kv_heads * hd4;

    for (uint t0 = lo_all; t0 < stop; t0 += TK) {
        uint n = min(TK, stop - t0);
        // 1. The tile's K and V rows.
        for (uint i = tid; i < n * hd4; i += WG) {
            uint p = i / hd4;
            uint c = i - p * hd4;
            uint src = kv_slot(seq, t0 + p) * row4 + kvh * hd4 + c;
            k_sh[p * PAD_HD4 + c] = k_load4(src);
            v_sh[p * MAX_HD4 + c] = v_load4(src);
        }
        barrier();

        // 2. Scores, one invocation per (row, position); -inf outside the row's range.
        float s_reg[P_PER];
        [[unroll]] for (uint k = 0; k < P_PER; k++) {
            uint i = tid + k * WG;
            uint r = i / TK;
            uint p = i - r * TK;
            float s = neg_inf;
            if (r < nr && p < n) {
                uvec4 row = rows[tq0 + r / group];
                uint pos = t0 + p;
                if (pos >= row.z && pos <= row.x) {
                    uint qb = r * PAD_HD4;
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
                    s = (s4.x + s4.y) + (s4.z + s4.w);
                }
                s_sh[r * TK + p] = s;
            }
            s_reg[k] = s;
        }
        barrier();

        // 3. Online softmax, in parallel: every pair of a row takes the row's tile max (they all
        //    agree), turns its own score into a probability; the row's first pair publishes alpha.
        [[unroll]] for (uint k = 0; k < P_PER; k++) {
            uint i = tid + k * WG;
            uint r = i / TK;
            uint p = i - r * TK;
            if (r < nr) {
                float mt = neg_inf;
                for (uint j = 0; j < n; j++) mt = max(mt, s_sh[r * TK + j]);
                float m_new = max(m_run[k], mt);
                float e = 0.0;
                float alpha = 1.0;
                if (m_new != neg_inf) {
                    e = (s_reg[k] == neg_inf) ? 0.0 : exp(s_reg[k] - m_new);
                    alpha = (m_run[k] == neg_inf) ? 0.0 : exp(m_run[k] - m_new);
                    m_run[k] = m_new;
                }
                if (p < n) p_sh[r * TK + p] = e;
                if (p == 0) alpha_sh[r] = alpha;
            }
        }
        barrier();

        // 4. o = o * alpha + sum_p p * V[p, d] for this invocation's slots (row, d), and the
        //    running sum for d = 0.
        [[unroll]] for (uint k = 0; k < O_PER; k++) {
            uint slot = tid + k * WG;
            if (slot < nr * hd) {
                uint r = slot / hd;
                uint d = slot - r * hd;
                float acc = 0.0;
                for (uint p = 0; p < n; p++) acc += p_sh[r * TK + p] * v_sh[p * MAX_HD4 + d / 4][d % 4];
                float alpha = alpha_sh[r];
                o[k] = o[k] * alpha + acc;
                if (d == 0) {
                    float sum = 0.0;
                    for (uint p = 0; p < n; p++) sum += p_sh[r * TK + p];
                    l_run[k] = l_run[k] * alpha + sum;
                }
            }
        }
        barrier();
    }

    [[unroll]] for (uint k = 0; k < O_PER; k++) {
        uint slot = tid + k * WG;
        if (slot < nr * hd && slot % hd == 0) {
            inv_l_sh[slot / hd] = l_run[k] > 0.0 ? 1.0 / l_run[k] : 0.0;
        }
    }
    barrier();
    [[unroll]] for (uint k = 0; k < O_PER; k++) {
        uint slot = tid + k * WG;
        if (slot < nr * hd) {
            uint r = slot / hd;
            uint d = slot - r * hd;
            uint tok = tq0 + r / group;
            uint h = kvh * group + r % group;
            y[(tok * pc.heads + h) * hd + d] = o[k] * inv_l_sh[r];
        }
    }
}
