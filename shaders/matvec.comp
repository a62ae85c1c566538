#version 460
// Primitive matvec, batched over tokens for prefill: y[t, r] = sum_c W[r, c] * x[t, c].
// Weights f16 (WTYPE = 1) converted on load, or GGUF blocks decoded on load (quant.glsl; four
// columns at a time, cols a whole number of blocks); f32 accumulation. One workgroup computes ROWS rows of one
// token: each invocation strides over the columns (pairs of f16 when cols is even) keeping ROWS
// partial sums, then a shared-memory tree reduces them. WG must be a power of two.
// Bindings: 0 W [rows, cols] (f16 or blocks), 1 x f32 [n_tokens, cols], 2 y f32 [n_tokens, rows].
// Spec: 0 WG, 22 ROWS, 26 WTYPE. Groups: (ceil(rows / ROWS), n_tokens, 1).
#extension GL_EXT_shader_16bit_storage : require
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 22) const uint ROWS = 1;
layout(constant_id = 26) const uint WTYPE = 1;

layout(set = 0, binding = 0) readonly buffer W { float16_t w[]; };
layout(set = 0, binding = 0) readonly buffer W2 { f16vec2 w2[]; };
layout(set = 0, binding = 0) readonly buffer WQ { uint wq[]; };
layout(set = 0, binding = 1) readonly buffer X { float x[]; };
layout(set = 0, binding = 1) readonly buffer X4 { vec4 x4[]; };
layout(set = 0, binding = 1) readonly buffer X2 { vec2 x2[]; };
layout(set = 0, binding = 2) writeonly buffer Y { float y[]; };

#define QW(i) wq[i]
#include "quant.glsl"

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

    if (!WT_IS_F16(WTYPE)) {
        uint rb = wt_row_bytes(WTYPE, pc.cols);
        uint c4 = pc.cols / 4;
        for (uint c = tid; c < c4; c += WG) {
            vec4 xv = x4[t * c4 + c];
            [[unroll]] for (uint k = 0; k < ROWS; k++) {
                uint r = min(r0 + k, pc.rows - 1);
                acc[k] += dot(wload4(WTYPE, r * rb, 4 * c), xv);
            }
        }
    } else if ((pc.cols & 1u) == 0u) {
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
