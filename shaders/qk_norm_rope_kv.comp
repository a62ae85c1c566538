#version 460
// Fused q/k head norm + RoPE + KV-cache write for the rows of a decode step (one token per
// sequence): row t is position p = rows[t].x of sequence rows[t].y. qkv holds each row's fused
// QKV matvec output [q: heads * hd | k: kv_heads * hd | v: kv_heads * hd].
// Workgroup (g, t): g < heads handles q head g of row t; g = heads + kh handles k head kh and
// copies v head kh. For each head: optional RMSNorm over hd (QK_NORM = 1, weights q_norm_w or
// k_norm_w), then rotate-half RoPE with (c, s) = rope[p, i]; q goes to q_out [n, heads, hd], k and
// v straight into the caches at the slot of (seq, p) (shaders/kv.glsl, f16 or f32).
// Bindings: 0 params, 1 qkv f32 [n, qkv_rows], 2 q_norm_w f32 [hd], 3 k_norm_w f32 [hd],
// 4 rope f32 [max_seq, hd / 2, 2], 5 q_out f32 [n, heads, hd], 6 block tables, 7 k_cache,
// 8 v_cache. Spec: 0 WG (a power of two), 1 QK_NORM, 4..7 the KV layout.
// Groups: (heads + kv_heads, n, 1).
#include "common.glsl"

#define KV_TABLE_BINDING 6
#define KV_K_BINDING 7
#define KV_V_BINDING 8
#define KV_WRITE
#include "kv.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 2) const uint QK_NORM = 0;

layout(set = 0, binding = 0) readonly buffer Params { TokenParams params; uvec4 rows[]; };
layout(set = 0, binding = 1) readonly buffer Qkv { float qkv[]; };
layout(set = 0, binding = 2) readonly buffer QNorm { float q_norm_w[]; };
layout(set = 0, binding = 3) readonly buffer KNorm { float k_norm_w[]; };
layout(set = 0, binding = 4) readonly buffer Rope { float rope[]; };
layout(set = 0, binding = 5) writeonly buffer QOut { float q_out[]; };

layout(push_constant) uniform Push {
    uint heads;
    uint kv_heads;
    uint head_dim;
    float eps;
} pc;

void main() {
    uint g = gl_WorkGroupID.x;
    uint t = gl_WorkGroupID.y;
    // Uniform over the workgroup: the whole group leaves before any barrier.
    if (g >= pc.heads + pc.kv_heads || t >= params.n_tokens) return;
    uint tid = gl_LocalInvocationID.x;
    uint hd = pc.head_dim;
    uint half_dim = hd / 2;
    uint pos = rows[t].x;
    bool is_q = g < pc.heads;
    uint kh = g - pc.heads;  // meaningful only when !is_q
    uint row_base = t * (pc.heads + 2 * pc.kv_heads) * hd;
    uint src = row_base + (is_q ? g * hd : (pc.heads + kh) * hd);
    uint dst = is_q ? (t * pc.heads + g) * hd : (kv_slot(rows[t].y, pos) * pc.kv_heads + kh) * hd;

    float scale = 1.0;
    if (QK_NORM == 1) {
        float ss = 0.0;
        for (uint i = tid; i < hd; i += WG) {
            float v = qkv[src + i];
            ss += v * v;
        }
        scale = inversesqrt(block_sum(ss) / float(hd) + pc.eps);
    }

    for (uint i = tid; i < half_dim; i += WG) {
        float a = qkv[src + i] * scale;
        float b = qkv[src + i + half_dim] * scale;
        if (QK_NORM == 1) {
            a *= is_q ? q_norm_w[i] : k_norm_w[i];
            b *= is_q ? q_norm_w[i + half_dim] : k_norm_w[i + half_dim];
        }
        uint ti = (pos * half_dim + i) * 2;
        float c = rope[ti];
        float s = rope[ti + 1];
        float ra = a * c - b * s;
        float rb = b * c + a * s;
        if (is_q) {
            q_out[dst + i] = ra;
            q_out[dst + i + half_dim] = rb;
        } else {
            k_store(dst + i, ra);
            k_store(dst + i + half_dim, rb);
        }
    }

    if (!is_q) {
        uint vsrc = row_base + (pc.heads + pc.kv_heads + kh) * hd;
        for (uint i = tid; i < hd; i += WG) v_store(dst + i, qkv[vsrc + i]);
    }
}
