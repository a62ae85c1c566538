#version 460
// Fused q/k head norm + RoPE + KV-cache write for one decode token at position p = params.pos0.
// qkv is the fused QKV matvec output [q: heads * hd | k: kv_heads * hd | v: kv_heads * hd].
// Workgroup g < heads handles q head g; workgroup heads + kh handles k head kh and copies v head
// kh. For each head: optional RMSNorm over hd (QK_NORM = 1, weights q_norm_w or k_norm_w), then
// rotate-half RoPE with (c, s) = table[p, i]; q goes to q_out [heads, hd], k and v straight into
// the caches at row p: k_cache[p, kh, :], v_cache[p, kh, :].
// Bindings: 0 params, 1 qkv f32, 2 q_norm_w f32 [hd], 3 k_norm_w f32 [hd],
// 4 table f32 [max_seq, hd / 2, 2], 5 q_out f32 [heads, hd], 6 k_cache f32 [max_seq, kv_heads, hd],
// 7 v_cache f32 [max_seq, kv_heads, hd]. Spec: 0 WG (a power of two), 1 QK_NORM.
// Groups: (heads + kv_heads, 1, 1).
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint QK_NORM = 0;

layout(set = 0, binding = 0) readonly buffer Params { TokenParams params; };
layout(set = 0, binding = 1) readonly buffer Qkv { float qkv[]; };
layout(set = 0, binding = 2) readonly buffer QNorm { float q_norm_w[]; };
layout(set = 0, binding = 3) readonly buffer KNorm { float k_norm_w[]; };
layout(set = 0, binding = 4) readonly buffer Table { float table[]; };
layout(set = 0, binding = 5) writeonly buffer QOut { float q_out[]; };
layout(set = 0, binding = 6) writeonly buffer KCache { float k_cache[]; };
layout(set = 0, binding = 7) writeonly buffer VCache { float v_cache[]; };

layout(push_constant) uniform Push {
    uint heads;
    uint kv_heads;
    uint head_dim;
    float eps;
} pc;

void main() {
    uint g = gl_WorkGroupID.x;
    // Uniform over the workgroup: the whole group leaves before any barrier.
    if (g >= pc.heads + pc.kv_heads) return;
    uint tid = gl_LocalInvocationID.x;
    uint hd = pc.head_dim;
    uint half_dim = hd / 2;
    uint pos = params.pos0;
    bool is_q = g < pc.heads;
    uint kh = g - pc.heads;  // meaningful only when !is_q
    uint src = is_q ? g * hd : (pc.heads + kh) * hd;
    uint dst = is_q ? g * hd : (pos * pc.kv_heads + kh) * hd;

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
        float c = table[ti];
        float s = table[ti + 1];
        float ra = a * c - b * s;
        float rb = b * c + a * s;
        if (is_q) {
            q_out[dst + i] = ra;
            q_out[dst + i + half_dim] = rb;
        } else {
            k_cache[dst + i] = ra;
            k_cache[dst + i + half_dim] = rb;
        }
    }

    if (!is_q) {
        uint vsrc = (pc.heads + pc.kv_heads + kh) * hd;
        for (uint i = tid; i < hd; i += WG) v_cache[dst + i] = qkv[vsrc + i];
    }
}
