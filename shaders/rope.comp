#version 460
// Rotate-half RoPE in place on x [n_tokens, heads, head_dim]; row t is at position rows[t].x.
// For i < head_dim / 2 with (c, s) = table[pos, i]:
//   x'[i] = x[i] c - x[i + d/2] s,  x'[i + d/2] = x[i + d/2] c + x[i] s.
// One invocation per (head, i) pair. Bindings: 0 params, 1 x f32 (read-write),
// 2 table f32 [max_seq, head_dim / 2, 2]. Groups: (ceil(heads * head_dim / 2 / WG), n_tokens, 1).
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0) readonly buffer Params { TokenParams params; uvec4 rows[]; };
layout(set = 0, binding = 1) buffer X { float x[]; };
layout(set = 0, binding = 2) readonly buffer Table { float table[]; };

layout(push_constant) uniform Push {
    uint heads;
    uint head_dim;
    uint pad0;
    uint pad1;
} pc;

void main() {
    uint half_dim = pc.head_dim / 2;
    uint idx = gl_GlobalInvocationID.x;
    uint t = gl_WorkGroupID.y;
    if (t >= params.n_tokens || idx >= pc.heads * half_dim) return;
    uint h = idx / half_dim;
    uint i = idx % half_dim;
    uint pos = rows[t].x;
    vec2 cs = vec2(table[(pos * half_dim + i) * 2], table[(pos * half_dim + i) * 2 + 1]);
    uint base = (t * pc.heads + h) * pc.head_dim;
    float a = x[base + i];
    float b = x[base + i + half_dim];
    x[base + i] = a * cs.x - b * cs.y;
    x[base + i + half_dim] = b * cs.x + a * cs.y;
}
