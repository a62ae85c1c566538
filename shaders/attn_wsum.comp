#version 460
// Weighted sum over V (primitive, batched over tokens):
//   out[t, h, d] = sum_{j < params.pos0 + t + 1} p[t, h, j] * V[j, h / group, d].
// One invocation per (d, h, t). Bindings: 0 params, 1 probs f32 [n_tokens, heads, stride],
// 2 v_cache f32 [max_seq, kv_heads, head_dim], 3 out f32 [n_tokens, heads, head_dim].
// Groups: (ceil(head_dim / WG), heads, n_tokens).
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0) readonly buffer Params { TokenParams params; };
layout(set = 0, binding = 1) readonly buffer P { float p[]; };
layout(set = 0, binding = 2) readonly buffer V { float v_cache[]; };
layout(set = 0, binding = 3) writeonly buffer Out { float y[]; };

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
    uint len = min(params.pos0 + t + 1, pc.stride);
    uint kvh = h / (pc.heads / pc.kv_heads);
    uint pbase = (t * pc.heads + h) * pc.stride;
    uint row = pc.kv_heads * pc.head_dim;
    uint vbase = kvh * pc.head_dim + d;
    float acc = 0.0;
    for (uint j = 0; j < len; j++) {
        acc += p[pbase + j] * v_cache[j * row + vbase];
    }
    y[(t * pc.heads + h) * pc.head_dim + d] = acc;
}
