#version 450
// Early returns inside an if and a loop, Function variables, short-circuit &&s (OpPhis, one of
// them naming the entry block as a parent), a ternary, and the built-ins the instrumenter reuses.
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer Data { float data[]; };
layout(push_constant) uniform Push { uint n; float scale; } pc;

void main() {
    bool wide = pc.n > 2u && pc.scale > 0.0;
    uint i = gl_GlobalInvocationID.x;
    float acc = 0.0;
    if (i >= pc.n || !wide) return;
    for (uint k = 0u; k < 4u; ++k) {
        if (data[k] < 0.0 && k > 1u) return;
        acc += (k & 1u) == 0u ? data[k] : -data[k];
    }
    data[i] = acc * pc.scale + float(gl_LocalInvocationIndex + gl_NumWorkGroups.y);
}
