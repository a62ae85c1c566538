#version 460
// Split-K decode attention for one query row over params.kv_len cached positions, with GQA
// folding. Workgroup (s, kvh) covers positions [s * chunk, min(kv_len, (s + 1) * chunk)),
// chunk = ceil(kv_len / n_splits), for ALL G = heads / kv_heads query heads of KV head kvh, so
// each K and V element is read from memory once per workgroup. It writes, for each of those
// heads h, partial[h, s] = (m, l, o[0..hd]): the max scaled score, the sum of exp(score - m) and
// the unnormalized output sum exp(score - m) * v (an empty split writes m = -inf, l = 0, o = 0).
//
// The split is processed in tiles of up to WG positions:
//   1. invocation t computes the G scores of position t (K row read once, q staged in shared);
//   2. per head, the tile max (subgroupMax, then across subgroups through shared memory) updates
//      the running max m; every invocation keeps the same m, so the rescale factor
//      alpha = exp(m_old - m_new) is known everywhere without another round;
//   3. p = exp(score - m_new) goes to shared memory; each (part, d) slot, owned by one invocation
//      for the whole run, accumulates o = o * alpha + sum_t p_t * V[t, d] over its share of the
//      tile's positions (parts = WG / hd interleaved shares when WG > hd, so every invocation works).
// Each invocation's share of the sum of exp is rescaled the same way and reduced at the end.
//
// Limits: head_dim % 4 == 0, head_dim <= 128, G <= 8, WG a power of two in [32, 256].
// Bindings: 0 params, 1 q f32 [heads, hd], 2 k_cache f32 [max_seq, kv_heads, hd],
// 3 v_cache f32 [max_seq, kv_heads, hd], 4 partial f32 [heads, n_splits, hd + 2].
// Groups: (n_splits, kv_heads, 1).
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"

layout(local_size_x_id = 0) in;

const uint MAX_G = 8;
const uint MAX_HD = 128;
// Span of one head's output slots: parts * hd <= max(WG, MAX_HD).
const uint O_SPAN = (WG > MAX_HD) ? WG : MAX_HD;

layout(set = 0, binding = 0) readonly buffer Params { TokenParams params; };
layout(set = 0, binding = 1) readonly buffer Q { vec4 q4[]; };
layout(set = 0, binding = 2) readonly buffer K { vec4 k4[]; };
layout(set = 0, binding = 3) readonly buffer V { float v_cache[]; };
layout(set = 0, binding = 4) writeonly buffer Partial { float partial[]; };

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

shared vec4 q_sh[MAX_G * MAX_HD / 4];  // the group's q heads, pre-scaled: [G, hd / 4]
shared float p_sh[MAX_G * WG];         // the tile's probabilities: [G, WG]
shared float red_sh[MAX_G * WG];       // per-subgroup maxima or sums: [G, subgroups]
shared float o_sh[MAX_G * O_SPAN];     // running unnormalized outputs: [G, parts * hd]

void main() {
    uint split = gl_WorkGroupID.x;
    uint kvh = gl_WorkGroupID.y;
    // Uniform over the workgroup: the whole group leaves before any barrier.
    if (split >= pc.n_splits || kvh >= pc.kv_heads) return;
    uint tid = gl_LocalInvocationID.x;
    uint group = pc.heads / pc.kv_heads;
    uint hd = pc.head_dim;
    uint hd4 = hd / 4;
    float neg_inf = uintBitsToFloat(0xff800000u);

    uint kv_len = params.kv_len;
    uint chunk = (kv_len + pc.n_splits - 1) / pc.n_splits;
    uint begin = min(kv_len, split * chunk);
    uint end = min(kv_len, begin + chunk);

    uint parts = max(1u, WG / hd);
    uint n_slots = parts * hd;
    for (uint i = tid; i < group * hd4; i += WG) q_sh[i] = q4[kvh * group * hd4 + i] * pc.scale;
    for (uint w = tid; w < n_slots; w += WG) {
        [[unroll]] for (uint g = 0; g < MAX_G; g++) {
            if (g < group) o_sh[g * O_SPAN + w] = 0.0;
        }
    }
    barrier();

    float m_run[MAX_G];
    float l_part[MAX_G];
    [[unroll]] for (uint g = 0; g < MAX_G; g++) {
        m_run[g] = neg_inf;
        l_part[g] = 0.0;
    }
    uint sg = gl_SubgroupID;
    uint nsg = gl_NumSubgroups;
    uint row4 = pc.kv_heads * hd4;
    uint row = pc.kv_heads * hd;

    for (uint t0 = begin; t0 < end; t0 += WG) {
        uint n = min(WG, end - t0);
        bool live = tid < n;

        // 1. Scores of position t0 + tid for every head of the group.
        float s[MAX_G];
        [[unroll]] for (uint g = 0; g < MAX_G; g++) s[g] = live ? 0.0 : neg_inf;
        if (live) {
            uint kb = (t0 + tid) * row4 + kvh * hd4;
            for (uint d4 = 0; d4 < hd4; d4++) {
                vec4 kv = k4[kb + d4];
                [[unroll]] for (uint g = 0; g < MAX_G; g++) {
                    if (g < group) s[g] += dot(q_sh[g * hd4 + d4], kv);
                }
            }
        }

        // 2. Tile max per head, then the running max and the rescale factor.
        [[unroll]] for (uint g = 0; g < MAX_G; g++) {
            if (g < group) {
                float mx = subgroupMax(s[g]);
                if (subgroupElect()) red_sh[g * WG + sg] = mx;
            }
        }
        barrier();
        float alpha[MAX_G];
        [[unroll]] for (uint g = 0; g < MAX_G; g++) {
            alpha[g] = 1.0;
            if (g < group) {
                float mt = neg_inf;
                for (uint i = 0; i < nsg; i++) mt = max(mt, red_sh[g * WG + i]);
                float m_new = max(m_run[g], mt);
                alpha[g] = exp(m_run[g] - m_new);
                m_run[g] = m_new;
                float p = live ? exp(s[g] - m_new) : 0.0;
                p_sh[g * WG + tid] = p;
                l_part[g] = l_part[g] * alpha[g] + p;
            }
        }
        barrier();

        // 3. o = o * alpha + sum_t p_t * V[t, d] over this slot's share of the tile.
        for (uint w = tid; w < n_slots; w += WG) {
            uint part = w / hd;
            uint d = w - part * hd;
            float acc[MAX_G];
            [[unroll]] for (uint g = 0; g < MAX_G; g++) acc[g] = 0.0;
            for (uint tt = part; tt < n; tt += parts) {
                float vv = v_cache[(t0 + tt) * row + kvh * hd + d];
                [[unroll]] for (uint g = 0; g < MAX_G; g++) {
                    if (g < group) acc[g] += p_sh[g * WG + tt] * vv;
                }
            }
            [[unroll]] for (uint g = 0; g < MAX_G; g++) {
                if (g < group) o_sh[g * O_SPAN + w] = o_sh[g * O_SPAN + w] * alpha[g] + acc[g];
            }
        }
        // The next tile overwrites red_sh and p_sh.
        barrier();
    }

    // Sum of exp per head across invocations.
    [[unroll]] for (uint g = 0; g < MAX_G; g++) {
        if (g < group) {
            float ls = subgroupAdd(l_part[g]);
            if (subgroupElect()) red_sh[g * WG + sg] = ls;
        }
    }
    barrier();

    uint stride = hd + 2;
    for (uint w = tid; w < group * hd; w += WG) {
        uint g = w / hd;
        uint d = w - g * hd;
        float o = 0.0;
        for (uint part = 0; part < parts; part++) o += o_sh[g * O_SPAN + part * hd + d];
        partial[((kvh * group + g) * pc.n_splits + split) * stride + 2 + d] = o;
    }
    if (tid < group) {
        float l = 0.0;
        for (uint i = 0; i < nsg; i++) l += red_sh[tid * WG + i];
        uint b = ((kvh * group + tid) * pc.n_splits + split) * stride;
        partial[b] = m_run[tid];
        partial[b + 1] = l;
    }
}
