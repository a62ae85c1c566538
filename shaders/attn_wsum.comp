#version 460
// Weighted sum over V (primitive, one row per sequence when decoding):
//   out[t, h, d] = sum_{lo_t <= j <= pos_t} p[t, h, j] * V[slot(seq_t, j), h / group, d],
// V read through the layout of shaders/kv.glsl. One invocation per (d, h, t).
// Bindings: 0 params, 1 probs f32 [n_tokens, heads, stride], 2 block tables, 3 v_cache,
// 4 out f32 [n_tokens, heads, head_dim]. Spec: 0 WG, 4..7 the KV layout.
// Groups: (ceil(head_dim / WG), heads, n_tokens).
#include "common.glsl"

#define KV_TABLE_BINDING 2
#define KV_V_BINDING 3
#define KV_READ
#include "kv.glsl"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0) readonly buffer Params { TokenParams params; uvec4 rows[]; };
layout(set = 0, binding = 1) readonly buffer P { float p[]; };
layout(set = 0, binding = 4) writeonly buffer Out { float y[]; };

layout(push_constant) uniform Push {
    uint heads;
    uint kv_heads;
    uint head_dim;
    uint stride;
} pc;

void main() {
    uint d = gl_GlobalInvocationID.x;
    uint h = gl_WorkGroupID.y;
    uint t = gl_WorkGroupID.z;
    if (d >= pc.head_dim || h >= pc.heads || t >= params.n_tokens) return;
    uvec4 row = rows[t];
    uint end = min(row.x + 1, pc.stride);
    uint kvh = h / (pc.heads / pc.kv_heads);
    uint pbase = (t * pc.heads + h) * pc.stride;
    uint off = kvh * pc.head_dim + d;
    float acc = 0.0;
    for (uint j = row.z; j < end; j++) {
        acc += p[pbase + j] * v_load(kv_slot(row.y, j) * pc.kv_heads * pc.head_dim + off);
    }
    y[(t * pc.heads + h) * pc.head_dim + d] = acc;
}
