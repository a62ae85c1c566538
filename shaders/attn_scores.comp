#version 460
// Attention scores over the cached positions (primitive, batched over tokens):
//   s[t, h, j] = scale * dot(q[t, h], K[j, h / group]),  group = heads / kv_heads,
// for j < params.pos0 + t + 1 (causal); other j < stride are left untouched.
// One invocation per (j, h, t). Bindings: 0 params, 1 q f32 [n_tokens, heads, head_dim],
// 2 k_cache f32 [max_seq, kv_heads, head_dim], 3 scores f32 [n_tokens, heads, stride].
// Groups: (ceil(params.kv_len / WG), heads, n_tokens).
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0) readonly buffer Params { TokenParams params; };
layout(set = 0, binding = 1) readonly buffer Q { float q[]; };
layout(set = 0, binding = 2) readonly buffer K { float k_cache[]; };
layout(set = 0, binding = 3) buffer S { float scores[]; };

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
    uint len = params.pos0 + t + 1;
    if (j >= len || j >= pc.stride) return;
    uint kvh = h / (pc.heads / pc.kv_heads);
    uint qbase = (t * pc.heads + h) * pc.head_dim;
    uint kbase = (j * pc.kv_heads + kvh) * pc.head_dim;
    float acc = 0.0;
    for (uint d = 0; d < pc.head_dim; d++) {
        acc += q[qbase + d] * k_cache[kbase + d];
    }
    scores[(t * pc.heads + h) * pc.stride + j] = pc.scale * acc;
}
