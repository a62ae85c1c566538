#version 460
// SwiGLU activation: out[i] = silu(g[i]) * u[i] = g[i] / (1 + exp(-g[i])) * u[i].
// Bindings: 0 g f32 [n], 1 u f32 [n], 2 out f32 [n]. Groups: (ceil(n / WG), 1, 1).
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0) readonly buffer G { float g[]; };
layout(set = 0, binding = 1) readonly buffer U { float u[]; };
layout(set = 0, binding = 2) writeonly buffer Out { float y[]; };

layout(push_constant) uniform Push {
    uint n;
    uint pad0;
    uint pad1;
    uint pad2;
} pc;

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= pc.n) return;
    float a = g[i];
    y[i] = a / (1.0 + exp(-a)) * u[i];
}
