#version 460
// Causal attention for a prompt chunk, one invocation per (row, query head) and no shared memory
// or barriers: the variant for CPU drivers (llvmpipe runs a workgroup's invocations as SIMD lanes
// and pays for every barrier by switching coroutines, so the tiled attn_prefill.comp is slow
// there; GPUs use the tiled kernel). Invocation i handles row t = i % n of head h = i / n, so
// neighbouring invocations (SIMD lanes) are consecutive positions of one head and read the same
// K and V rows. Each walks its row's range [lo_t, pos_t] (rows[t] = (pos_t, seq, lo_t)) through
// the layout of shaders/kv.glsl with an online softmax in f32, then writes out = o / l.
// Limits: head_dim % 4 == 0, head_dim <= 128.
// Bindings: 0 params, 1 q f32 [n, heads, hd], 2 block tables, 3 k_cache, 4 v_cache,
// 5 out f32 [n, heads, hd]. Spec: 0 WG, 4..7 the KV layout. Groups: (ceil(n * heads / WG), 1, 1).
#include "common.glsl"

#define KV_TABLE_BINDING 2
#define KV_K_BINDING 3
#define KV_V_BINDING 4
#define KV_READ
#include "kv.glsl"

layout(local_size_x_id = 0) in;

const uint MAX_HD = 128;

layout(set = 0, binding = 0) readonly buffer Params { TokenParams params; uvec4 rows[]; };
layout(set = 0, binding = 1) readonly buffer Q { float q[]; };
layout(set = 0, binding = 5) writeonly buffer Out { float y[]; };

layout(push_constant) uniform Push {
    uint heads;
    uint kv_heads;
    uint head_dim;
    float scale;
} pc;

void main() {
    uint i = gl_GlobalInvocationID.x;
    uint n = params.n_tokens;
    if (i >= n * pc.heads) return;
    uint t = i % n;
    uint h = i / n;
    uint hd = pc.head_dim;
    uint kvh = h / (pc.heads / pc.kv_heads);
    uvec4 row = rows[t];
    uint hd4 = hd / 4;
    vec4 qv[MAX_HD / 4];
    vec4 o[MAX_HD / 4];
    for (uint c = 0; c < hd4; c++) {
        uint qi = ((t * pc.heads + h) * hd) / 4 + c;
        qv[c] = vec4(q[4 * qi], q[4 * qi + 1], q[4 * qi + 2], q[4 * qi + 3]) * pc.scale;
        o[c] = vec4(0.0);
    }
    float m = uintBitsToFloat(0xff800000u);
    float l = 0.0;
    uint row4 = pc.kv_heads * hd4;
    for (uint j = row.z; j <= row.x; j++) {
        uint base = kv_slot(row.y, j) * row4 + kvh * hd4;
        vec4 s4 = vec4(0.0);
        for (uint c = 0; c < hd4; c++) s4 += qv[c] * k_load4(base + c);
        float s = (s4.x + s4.y) + (s4.z + s4.w);
        float m_new = max(m, s);
        float corr = exp(m - m_new);
        float p = exp(s - m_new);
        l = l * corr + p;
        for (uint c = 0; c < hd4; c++) o[c] = o[c] * corr + p * v_load4(base + c);
        m = m_new;
    }
    float inv = l > 0.0 ? 1.0 / l : 0.0;
    for (uint c = 0; c < hd4; c++) {
        vec4 r = o[c] * inv;
        uint yi = (t * pc.heads + h) * hd + 4 * c;
        y[yi] = r.x;
        y[yi + 1] = r.y;
        y[yi + 2] = r.z;
        y[yi + 3] = r.w;
    }
}
