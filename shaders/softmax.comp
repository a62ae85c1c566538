#version 460
// In-place softmax of each score row s[t, h, lo_t .. pos_t] (f32, max-subtracted; rows[t] =
// (pos_t, seq_t, lo_t)); entries outside the row's range are left untouched. One workgroup per
// row. Bindings: 0 params, 1 scores f32 [n_tokens, heads, stride] (read-write).
// Groups: (heads, n_tokens, 1). WG must be a power of two.
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0) readonly buffer Params { TokenParams params; uvec4 rows[]; };
layout(set = 0, binding = 1) buffer S { float s[]; };

layout(push_constant) uniform Push {
    uint heads;
    uint stride;
    uint pad0;
    uint pad1;
} pc;

void main() {
    uint h = gl_WorkGroupID.x;
    uint t = gl_WorkGroupID.y;
    // Uniform over the workgroup: the whole group leaves before any barrier.
    if (h >= pc.heads || t >= params.n_tokens) return;
    uint lo = rows[t].z;
    uint end = min(rows[t].x + 1, pc.stride);
    uint base = (t * pc.heads + h) * pc.stride;
    uint tid = gl_LocalInvocationID.x;

    float m = uintBitsToFloat(0xff800000u);  // -inf
    for (uint j = lo + tid; j < end; j += WG) m = max(m, s[base + j]);
    m = block_max(m);

    float sum = 0.0;
    for (uint j = lo + tid; j < end; j += WG) {
        float e = exp(s[base + j] - m);
        s[base + j] = e;
        sum += e;
    }
    float inv = 1.0 / block_sum(sum);
    // Each invocation rescales the entries it wrote itself.
    for (uint j = lo + tid; j < end; j += WG) s[base + j] *= inv;
}
