#version 460
// Merges the split-K partials of attn_split for each row t and head h:
//   out[t, h] = sum_s exp(m_s - M) o_s / sum_s exp(m_s - M) l_s,  M = max_s m_s.
// Empty splits (m = -inf) weigh 0; a head with no positions at all gets 0. One workgroup per
// (head, row); with WG >= head_dim its invocations are (dimension, lane) pairs, each lane summing
// every lanes-th split four at a time (loads in flight instead of one dependent walk over the
// splits), reduced through shared memory. Bindings: 0 partial f32 [n, heads, n_splits, hd + 2], 1 out f32 [n, heads, hd].
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

// Per-lane partial sums of the output, reduced across the lanes of each dimension.
shared float acc_sh[WG];

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

    // Invocation tid works on dimension d = tid % head_dim over the splits lane, lane + lanes,
    // ... (lanes = WG / head_dim), four splits at a time so four loads are in flight.
    uint lanes = max(1u, WG / pc.head_dim);
    uint lane = tid / pc.head_dim;
    uint d = tid - lane * pc.head_dim;
    float acc = 0.0;
    if (WG >= pc.head_dim) {
        if (lane < lanes) {
            vec4 a = vec4(0.0);
            uint s = lane;
            for (; s + 3 * lanes < pc.n_splits; s += 4 * lanes) {
                [[unroll]] for (uint u = 0; u < 4; u++) {
                    uint su = s + u * lanes;
                    float wgt = (su < CACHED_SPLITS) ? weight_sh[su] : split_weight(partial[base + su * stride], big_m);
                    a[u] += wgt * partial[base + su * stride + 2 + d];
                }
            }
            for (; s < pc.n_splits; s += lanes) {
                float wgt = (s < CACHED_SPLITS) ? weight_sh[s] : split_weight(partial[base + s * stride], big_m);
                a.x += wgt * partial[base + s * stride + 2 + d];
            }
            acc = (a.x + a.y) + (a.z + a.w);
        }
        acc_sh[tid] = acc;
        barrier();
        if (lane == 0) {
            float sum = acc_sh[tid];
            for (uint k = 1; k < lanes; k++) sum += acc_sh[tid + k * pc.head_dim];
            y[(t * pc.heads + h) * pc.head_dim + d] = sum * inv;
        }
    } else {
        // A workgroup narrower than a head: each invocation walks several dimensions.
        for (uint dd = tid; dd < pc.head_dim; dd += WG) {
            float a = 0.0;
            for (uint s = 0; s < pc.n_splits; s++) {
                float wgt = (s < CACHED_SPLITS) ? weight_sh[s] : split_weight(partial[base + s * stride], big_m);
                a += wgt * partial[base + s * stride + 2 + dd];
            }
            y[(t * pc.heads + h) * pc.head_dim + dd] = a * inv;
        }
    }
}
