#version 460
// Embedding lookup: out[t, i] = f32(table[ids[t], i]) for t < n_tokens, i < hidden, the table
// f16 (WTYPE = 1) or GGUF blocks decoded on load (quant.glsl).
// Bindings: 0 ids u32 [n_tokens], 1 table [vocab, hidden] (f16 or blocks), 2 out f32
// [n_tokens, hidden]. Spec: 0 WG, 26 WTYPE.
// Groups: (ceil(hidden / WG), n_tokens, 1). The host checks ids < vocab before uploading them.
#extension GL_EXT_shader_16bit_storage : require
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0) readonly buffer Ids { uint ids[]; };
layout(constant_id = 26) const uint WTYPE = 1;

layout(set = 0, binding = 1) readonly buffer Table { float16_t table[]; };
layout(set = 0, binding = 1) readonly buffer TableQ { uint tq[]; };
layout(set = 0, binding = 2) writeonly buffer Out { float y[]; };

#define QW(i) tq[i]
#include "quant.glsl"

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
    if (WT_IS_F16(WTYPE)) {
        y[t * pc.hidden + i] = float(table[ids[t] * pc.hidden + i]);
    } else {
        vec4 v = wload4(WTYPE, ids[t] * wt_row_bytes(WTYPE, pc.hidden), i & ~3u);
        y[t * pc.hidden + i] = v[i & 3u];
    }
}
