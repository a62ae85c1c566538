#version 460
// Residual add in place: x[i] += y[i].
// Bindings: 0 x f32 [n] (read-write), 1 y f32 [n]. Groups: (ceil(n / WG), 1, 1).
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0) buffer X { float x[]; };
layout(set = 0, binding = 1) readonly buffer Y { float y[]; };

layout(push_constant) uniform Push {
    uint n;
    uint pad0;
    uint pad1;
    uint pad2;
} pc;

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= pc.n) return;
    x[i] += y[i];
}
