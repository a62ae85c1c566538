#version 460
// Primitive KV append: row t of src [n_tokens, kv_dim] f32 goes into the cache at the slot of
// (rows[t].y, rows[t].x), converted to the cache's element type (shaders/kv.glsl). One
// invocation per element. Run once for K and once for V.
// Bindings: 0 params, 1 src f32 [n_tokens, kv_dim], 2 block tables u32, 3 cache.
// Spec: 0 WG, 4..7 the KV layout. Groups: (ceil(kv_dim / WG), n_tokens, 1).
#include "common.glsl"

#define KV_TABLE_BINDING 2
#define KV_K_BINDING 3
#define KV_WRITE
#include "kv.glsl"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0) readonly buffer Params { TokenParams params; uvec4 rows[]; };
layout(set = 0, binding = 1) readonly buffer Src { float src[]; };

layout(push_constant) uniform Push {
    uint kv_dim;
    uint pad0;
    uint pad1;
    uint pad2;
} pc;

void main() {
    uint i = gl_GlobalInvocationID.x;
    uint t = gl_WorkGroupID.y;
    if (t >= params.n_tokens || i >= pc.kv_dim) return;
    uint slot = kv_slot(rows[t].y, rows[t].x);
    k_store(slot * pc.kv_dim + i, src[t * pc.kv_dim + i]);
}
