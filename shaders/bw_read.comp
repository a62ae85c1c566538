#version 460
// Bandwidth probe: reads every vec4 of `src` once (grid-stride, four independent loads in flight
// per invocation) and writes nothing unless the sum's bits equal `magic`, which the host picks so
// that it never happens; the reads cannot be optimised away and the writes cost nothing.
// Bindings: 0 src vec4 [n], 1 dst f32 [groups]. Groups: (any, 1, 1).
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0) readonly buffer Src { vec4 src[]; };
layout(set = 0, binding = 1) writeonly buffer Dst { float dst[]; };

layout(push_constant) uniform Push {
    uint n;      // vec4s in src
    uint magic;  // bit pattern the sum never has
    uint pad0;
    uint pad1;
} pc;

void main() {
    uint stride = gl_NumWorkGroups.x * WG;
    uint i = gl_GlobalInvocationID.x;
    vec4 a0 = vec4(0.0), a1 = vec4(0.0), a2 = vec4(0.0), a3 = vec4(0.0);
    for (; i + 3u * stride < pc.n; i += 4u * stride) {
        a0 += src[i];
        a1 += src[i + stride];
        a2 += src[i + 2u * stride];
        a3 += src[i + 3u * stride];
    }
    for (; i < pc.n; i += stride) {
        a0 += src[i];
    }
    vec4 a = (a0 + a1) + (a2 + a3);
    float s = (a.x + a.y) + (a.z + a.w);
    if (floatBitsToUint(s) == pc.magic) {
        dst[gl_WorkGroupID.x] = s;
    }
}
