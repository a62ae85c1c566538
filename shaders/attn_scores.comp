#version 460
// Attention scores over the cached positions (primitive, one row per sequence when decoding):
//   s[t, h, j] = scale * dot(q[t, h], K[slot(seq_t, j), h / group]),  group = heads / kv_heads,
// for lo_t <= j <= pos_t (rows[t] = (pos_t, seq_t, lo_t)); other j < stride are left untouched.
// K is read through the layout of shaders/kv.glsl. One invocation per (j, h, t).
// Bindings: 0 params, 1 q f32 [n_tokens, heads, head_dim], 2 block tables, 3 k_cache,
// 4 scores f32 [n_tokens, heads, stride]. Spec: 0 WG, 4..7 the KV layout.
// Groups: (ceil(params.kv_len / WG), heads, n_tokens).
#include "common.glsl"

#define KV_TABLE_BINDING 2
#define KV_K_BINDING 3
#define KV_READ
#include "kv.glsl"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0) readonly buffer Params { TokenParams params; uvec4 rows[]; };
layout(set = 0, binding = 1) readonly buffer Q { float q[]; };
layout(set = 0, binding = 4) buffer S { float scores[]; };

layout(push_constant) uniform Push {
    uint heads;
    uint kv_heads;
    uint head_dim;
    uint stride;
    float scale;
    uint pad0;
    uint pad1;
    uint pad2;
} pc;

void main() {
    uint j = gl_GlobalInvocationID.x;
    uint h = gl_WorkGroupID.y;
    uint t = gl_WorkGroupID.z;
    if (t >= params.n_tokens || h >= pc.heads) return;
    uvec4 row = rows[t];
    if (j < row.z || j > row.x || j >= pc.stride) return;
    uint kvh = h / (pc.heads / pc.kv_heads);
    uint qbase = (t * pc.heads + h) * pc.head_dim;
    uint kbase = (kv_slot(row.y, j) * pc.kv_heads + kvh) * pc.head_dim;
    float acc = 0.0;
    for (uint d = 0; d < pc.head_dim; d++) {
        acc += q[qbase + d] * k_load(kbase + d);
    }
    scores[(t * pc.heads + h) * pc.stride + j] = pc.scale * acc;
}
