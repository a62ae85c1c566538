#version 460
// RMSNorm over rows: y[r, i] = x[r, i] / sqrt(mean_i(x[r, :]^2) + eps) * w[i % n].
// One workgroup per row. Used for the layer norms (rows = tokens, n = hidden) and for Qwen3's
// per-head q/k norms (rows = tokens * heads, n = head_dim).
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0) readonly buffer X { float x[]; };
layout(set = 0, binding = 1) readonly buffer W { float w[]; };
layout(set = 0, binding = 2) writeonly buffer Y { float y[]; };

layout(push_constant) uniform Push {
    uint n;     // row length
    uint rows;  // number of rows
    float eps;
    uint pad0;
} pc;

void main() {
    uint row = gl_WorkGroupID.x;
    if (row >= pc.rows) return;
    uint base = row * pc.n;
    float ss = 0.0;
    for (uint i = gl_LocalInvocationID.x; i < pc.n; i += WG) {
        float v = x[base + i];
        ss += v * v;
    }
    float total = block_sum(ss);
    float scale = inversesqrt(total / float(pc.n) + pc.eps);
    for (uint i = gl_LocalInvocationID.x; i < pc.n; i += WG) {
        y[base + i] = x[base + i] * scale * w[i];
    }
}
