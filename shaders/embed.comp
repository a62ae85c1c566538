#version 460
// Embedding lookup: out[t, i] = f32(table[ids[t], i]) for t < n_tokens, i < hidden.
// Bindings: 0 ids u32 [n_tokens], 1 table f16 [vocab, hidden], 2 out f32 [n_tokens, hidden].
// Groups: (ceil(hidden / WG), n_tokens, 1). The host checks ids < vocab before uploading them.
#extension GL_EXT_shader_16bit_storage : require
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0) readonly buffer Ids { uint ids[]; };
layout(set = 0, binding = 1) readonly buffer Table { float16_t table[]; };
layout(set = 0, binding = 2) writeonly buffer Out { float y[]; };

layout(push_constant) uniform Push {
    uint hidden;
    uint n_tokens;
    uint pad0;
    uint pad1;
} pc;

void main() {
    uint i = gl_GlobalInvocationID.x;
    uint t = gl_WorkGroupID.y;
    if (i >= pc.hidden || t >= pc.n_tokens) return;
    y[t * pc.hidden + i] = float(table[ids[t] * pc.hidden + i]);
}
