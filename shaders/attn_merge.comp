#version 460
// Merges the split-K partials of attn_split for each row t and head h:
//   out[t, h] = sum_s exp(m_s - M) o_s / sum_s exp(m_s - M) l_s,  M = max_s m_s.
// Empty splits (m = -inf) weigh 0; a head with no positions at all gets 0. One workgroup per
// (head, row). Bindings: 0 partial f32 [n, heads, n_splits, hd + 2], 1 out f32 [n, heads, hd].
// Groups: (heads, n, 1). WG must be a power of two.
#include "common.glsl"

layout(local_size_x_id = 0) in;

// Split weights kept in shared memory; splits past this are recomputed on the fly.
const uint CACHED_SPLITS = 256;

layout(set = 0, binding = 0) readonly buffer Partial { float partial[]; };
layout(set = 0, binding = 1) writeonly buffer Out { float y[]; };

layout(push_constant) uniform Push {
    uint heads;
    uint head_dim;
    uint n_splits;
    uint pad0;
} pc;

shared float weight_sh[CACHED_SPLITS];

float split_weight(float m, float big_m) {
    // exp(-inf - M) is 0 already; the test keeps -inf - -inf (NaN) out when every split is empty.
    return (m == uintBitsToFloat(0xff800000u)) ? 0.0 : exp(m - big_m);
}

void main() {
    uint h = gl_WorkGroupID.x;
    uint t = gl_WorkGroupID.y;
    // Uniform over the workgroup: the whole group leaves before any barrier.
    if (h >= pc.heads) return;
    uint tid = gl_LocalInvocationID.x;
    uint stride = pc.head_dim + 2;
    uint base = (t * pc.heads + h) * pc.n_splits * stride;

    float m = uintBitsToFloat(0xff800000u);
    for (uint s = tid; s < pc.n_splits; s += WG) m = max(m, partial[base + s * stride]);
    float big_m = block_max(m);

    float l = 0.0;
    for (uint s = tid; s < pc.n_splits; s += WG) {
        float wgt = split_weight(partial[base + s * stride], big_m);
        if (s < CACHED_SPLITS) weight_sh[s] = wgt;
        l += wgt * partial[base + s * stride + 1];
    }
    // block_sum's barriers also make weight_sh visible to the whole group.
    float total = block_sum(l);
    float inv = total > 0.0 ? 1.0 / total : 0.0;

    for (uint d = tid; d < pc.head_dim; d += WG) {
        float acc = 0.0;
        for (uint s = 0; s < pc.n_splits; s++) {
            float wgt = (s < CACHED_SPLITS) ? weight_sh[s] : split_weight(partial[base + s * stride], big_m);
            acc += wgt * partial[base + s * stride + 2 + d];
        }
        y[(t * pc.heads + h) * pc.head_dim + d] = acc * inv;
    }
}
