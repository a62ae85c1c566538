#version 460
// Primitive matvec, batched over tokens for prefill: y[t, r] = sum_c W[r, c] * x[t, c].
// f16 weights converted on load, f32 accumulation. One workgroup computes ROWS rows of one
// token: each invocation strides over the columns (pairs of f16 when cols is even) keeping ROWS
// partial sums, then a shared-memory tree reduces them. WG must be a power of two.
// Bindings: 0 W f16 [rows, cols], 1 x f32 [n_tokens, cols], 2 y f32 [n_tokens, rows].
// Spec: 0 WG, 1 ROWS. Groups: (ceil(rows / ROWS), n_tokens, 1).
#extension GL_EXT_shader_16bit_storage : require
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 22) const uint ROWS = 1;

layout(set = 0, binding = 0) readonly buffer W { float16_t w[]; };
layout(set = 0, binding = 0) readonly buffer W2 { f16vec2 w2[]; };
layout(set = 0, binding = 1) readonly buffer X { float x[]; };
layout(set = 0, binding = 1) readonly buffer X2 { vec2 x2[]; };
layout(set = 0, binding = 2) writeonly buffer Y { float y[]; };

layout(push_constant) uniform Push {
    uint rows;
    uint cols;
    uint n_tokens;
    uint pad0;
} pc;

shared float partial[ROWS * WG];

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint r0 = gl_WorkGroupID.x * ROWS;
    uint t = gl_WorkGroupID.y;
    // Uniform over the workgroup: the whole group leaves before any barrier.
    if (r0 >= pc.rows || t >= pc.n_tokens) return;

    float acc[ROWS];
    [[unroll]] for (uint k = 0; k < ROWS; k++) acc[k] = 0.0;

    if ((pc.cols & 1u) == 0u) {
        uint half_cols = pc.cols / 2;
        uint xbase = t * half_cols;
        for (uint c = tid; c < half_cols; c += WG) {
            vec2 xv = x2[xbase + c];
            [[unroll]] for (uint k = 0; k < ROWS; k++) {
                // Rows past the end read the last row; their sums are never stored.
                uint r = min(r0 + k, pc.rows - 1);
                acc[k] += dot(vec2(w2[r * half_cols + c]), xv);
            }
        }
    } else {
        uint xbase = t * pc.cols;
        for (uint c = tid; c < pc.cols; c += WG) {
            float xv = x[xbase + c];
            [[unroll]] for (uint k = 0; k < ROWS; k++) {
                uint r = min(r0 + k, pc.rows - 1);
                acc[k] += float(w[r * pc.cols + c]) * xv;
            }
        }
    }

    [[unroll]] for (uint k = 0; k < ROWS; k++) partial[k * WG + tid] = acc[k];
    barrier();
    for (uint s = WG / 2; s > 0; s >>= 1) {
        if (tid < s) {
            [[unroll]] for (uint k = 0; k < ROWS; k++) partial[k * WG + tid] += partial[k * WG + tid + s];
        }
        barrier();
    }
    if (tid < ROWS && r0 + tid < pc.rows) {
        y[t * pc.rows + r0 + tid] = partial[tid * WG];
    }
}
