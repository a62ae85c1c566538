#version 460
// Primitive matmul for prompt chunks: y[t, r] = sum_c W[r, c] * x[t, c] (f16 weights converted on
// load, f32 accumulation), so each weight element is read once per 16 tokens instead of once per
// token. Every invocation computes a block of 4 rows x 4 tokens straight from memory, 4 columns
// at a time (four 8-byte weight loads and four 16-byte activation loads feed 64 multiply-adds);
// no shared memory and no barriers, so neighbouring invocations share their loads through the
// caches (CPU drivers run barrier-free kernels far faster). A workgroup of WG = 64 covers 32
// rows x 32 tokens (8 x 8 invocations). Tails of rows and tokens are clamped on load and masked
// on store. cols % 4 == 0.
// Quantized weights (WTYPE != 1) are decoded four columns at a time by quant.glsl.
// Bindings: 0 W [rows, cols] (f16 or blocks), 1 x f32 [n_tokens, cols], 2 y f32 [n_tokens, rows].
// Spec: 0 WG (must be 64), 26 WTYPE. Groups: (ceil(rows / 32), ceil(n_tokens / 32), 1).
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(constant_id = 26) const uint WTYPE = 1;

layout(set = 0, binding = 0) readonly buffer W { f16vec4 w4[]; };
layout(set = 0, binding = 0) readonly buffer WQ { uint wq[]; };
layout(set = 0, binding = 1) readonly buffer X { vec4 x4[]; };
layout(set = 0, binding = 2) writeonly buffer Y { float y[]; };

#define QW(i) wq[i]
#include "quant.glsl"

layout(push_constant) uniform Push {
    uint rows;
    uint cols;
    uint n_tokens;
    uint pad0;
} pc;

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint r0 = gl_WorkGroupID.x * 32 + (tid / 8) * 4;
    uint t0 = gl_WorkGroupID.y * 32 + (tid % 8) * 4;
    if (r0 >= pc.rows || t0 >= pc.n_tokens) return;
    uint c4 = pc.cols / 4;
    uint rb = wt_row_bytes(WTYPE, pc.cols);
    uint wr[4];
    uint xr[4];
    [[unroll]] for (uint i = 0; i < 4; i++) {
        wr[i] = min(r0 + i, pc.rows - 1) * c4;
        xr[i] = min(t0 + i, pc.n_tokens - 1) * c4;
    }
    vec4 acc[4];  // acc[row].token
    [[unroll]] for (uint i = 0; i < 4; i++) acc[i] = vec4(0.0);
    for (uint c = 0; c < c4; c++) {
        vec4 a0, a1, a2, a3;
        if (WT_IS_F16(WTYPE)) {
            a0 = vec4(w4[wr[0] + c]);
            a1 = vec4(w4[wr[1] + c]);
            a2 = vec4(w4[wr[2] + c]);
            a3 = vec4(w4[wr[3] + c]);
        } else {
            // wr[i] / c4 is the row.
            a0 = wload4(WTYPE, (wr[0] / c4) * rb, 4 * c);
            a1 = wload4(WTYPE, (wr[1] / c4) * rb, 4 * c);
            a2 = wload4(WTYPE, (wr[2] / c4) * rb, 4 * c);
            a3 = wload4(WTYPE, (wr[3] / c4) * rb, 4 * c);
        }
        vec4 b0 = x4[xr[0] + c];
        vec4 b1 = x4[xr[1] + c];
        vec4 b2 = x4[xr[2] + c];
        vec4 b3 = x4[xr[3] + c];
        acc[0] += vec4(dot(a0, b0), dot(a0, b1), dot(a0, b2), dot(a0, b3));
        acc[1] += vec4(dot(a1, b0), dot(a1, b1), dot(a1, b2), dot(a1, b3));
        acc[2] += vec4(dot(a2, b0), dot(a2, b1), dot(a2, b2), dot(a2, b3));
        acc[3] += vec4(dot(a3, b0), dot(a3, b1), dot(a3, b2), dot(a3, b3));
    }
    [[unroll]] for (uint i = 0; i < 4; i++) {
        uint r = r0 + i;
        if (r >= pc.rows) break;
        [[unroll]] for (uint j = 0; j < 4; j++) {
            uint t = t0 + j;
            if (t < pc.n_tokens) y[t * pc.rows + r] = acc[i][j];
        }
    }
}
