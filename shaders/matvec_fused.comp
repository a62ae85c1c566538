#version 460
// Fused decode matvec, one row t of x per workgroup row (gl_WorkGroupID.y; one token per sequence
// when decoding a batch): y[t] = W . f(x[t]), with an optional RMSNorm folded in front and an
// epilogue chosen by specialization constants.
//   NORM = 1: f(x) = x * rsqrt(mean(x^2) + eps) * norm_w, else f(x) = x. The norm's scale is a
//     scalar, so y_r = rsqrt(mean(x^2) + eps) * dot(W_r, x * norm_w); the sum of squares is
//     gathered in the same pass over x and reduced together with the row sums.
//   EPILOGUE = 0: y[r] = acc_r; 1: y[r] += acc_r (residual); 2: SwiGLU over stacked [gate; up]
//     rows, y[r] = silu(acc_r) * acc_{r + rows} for r < rows (W has 2 * rows rows).
// One workgroup computes ROWS output rows (2 * ROWS weight rows for SwiGLU). Every invocation
// walks the columns in steps of 8 (cols % 8 == 0: one 16-byte uvec4 load per row) or 4 (one
// 8-byte uvec2 load), loads x once per step and reuses it for all of its rows. The partial sums
// are reduced with subgroupAdd, then across subgroups through shared memory (any subgroup size).
// Weights: f16, or GGUF blocks decoded on load (quant.glsl), four columns per step. A stacked
// weight ([q; k; v], [gate; up]) may hold up to three segments of different types: weight rows
// below seg_row.x are WTYPE at byte 0, rows below seg_row.y are WTYPE1 from byte seg_byte.x, the
// rest WTYPE2 from byte seg_byte.y. All three f16 takes the wide f16 loads above.
// Bindings: 0 W [rows (x2 for SwiGLU), cols] (f16 or blocks), 1 x f32 [n, cols], 2 y f32
// [n, rows], 3 norm_w f32 [cols] (bound even when NORM = 0). cols % 4 == 0.
// Spec: 0 WG, 22 ROWS, 2 NORM, 3 EPILOGUE, 26 WTYPE, 27 WTYPE1, 28 WTYPE2.
// Groups: (ceil(rows / ROWS), n, 1).
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 22) const uint ROWS = 1;
layout(constant_id = 2) const uint NORM = 0;
layout(constant_id = 3) const uint EPILOGUE = 0;
layout(constant_id = 26) const uint WTYPE = 1;
layout(constant_id = 27) const uint WTYPE1 = 1;
layout(constant_id = 28) const uint WTYPE2 = 1;
const bool ALL_F16 = WTYPE <= 1 && WTYPE1 <= 1 && WTYPE2 <= 1;

// Accumulators per invocation: one per weight row, then one for the sum of squares of x.
const uint NACC = (EPILOGUE == 2) ? 2 * ROWS : ROWS;
const uint NRED = NACC + 1;

// The f16 weight seen as 8 halves (rows 16-byte aligned when cols % 8 == 0) or 4 halves.
layout(set = 0, binding = 0) readonly buffer W8 { uvec4 w8[]; };
layout(set = 0, binding = 0) readonly buffer W4 { uvec2 w4[]; };
layout(set = 0, binding = 0) readonly buffer WQ { uint wq[]; };
layout(set = 0, binding = 1) readonly buffer X { vec4 x4[]; };
layout(set = 0, binding = 2) buffer Y { float y[]; };
layout(set = 0, binding = 3) readonly buffer NormW { vec4 nw4[]; };

#define QW(i) wq[i]
#include "quant.glsl"

layout(push_constant) uniform Push {
    uint rows;
    uint cols;
    float eps;
    uint pad0;
    uvec2 seg_row;
    uvec2 seg_byte;
} pc;

// Per-subgroup partial sums: [NRED][WG] (WG subgroups at most, for a subgroup size of 1).
shared float sg_sums[NRED * WG];

// The weight row behind accumulator k, clamped into range (a clamped row's sum is never stored).
uint weight_row(uint r0, uint k) {
    uint r = (k < ROWS) ? r0 + k : pc.rows + r0 + (k - ROWS);
    uint last = (EPILOGUE == 2) ? 2 * pc.rows - 1 : pc.rows - 1;
    return min(r, last);
}

float dot8(uvec4 q, vec4 a, vec4 b) {
    return dot(unpackHalf2x16(q.x), a.xy) + dot(unpackHalf2x16(q.y), a.zw)
         + dot(unpackHalf2x16(q.z), b.xy) + dot(unpackHalf2x16(q.w), b.zw);
}

float dot4(uvec2 q, vec4 a) {
    return dot(unpackHalf2x16(q.x), a.xy) + dot(unpackHalf2x16(q.y), a.zw);
}

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint r0 = gl_WorkGroupID.x * ROWS;
    uint tok = gl_WorkGroupID.y;
    uint xo4 = tok * (pc.cols / 4);  // row tok of x, in vec4s
    uint yo = tok * pc.rows;         // row tok of y
    // Uniform over the workgroup: the whole group leaves before any barrier.
    if (r0 >= pc.rows) return;

    uint wrow[NACC];
    float acc[NACC];
    [[unroll]] for (uint k = 0; k < NACC; k++) {
        wrow[k] = weight_row(r0, k);
        acc[k] = 0.0;
    }
    float ss = 0.0;

    if (!ALL_F16) {
        uint wt[NACC];
        uint wbase[NACC];
        [[unroll]] for (uint k = 0; k < NACC; k++) {
            uint r = wrow[k];
            if (r < pc.seg_row.x) {
                wt[k] = WTYPE;
                wbase[k] = r * wt_row_bytes(WTYPE, pc.cols);
            } else if (r < pc.seg_row.y) {
                wt[k] = WTYPE1;
                wbase[k] = pc.seg_byte.x + (r - pc.seg_row.x) * wt_row_bytes(WTYPE1, pc.cols);
            } else {
                wt[k] = WTYPE2;
                wbase[k] = pc.seg_byte.y + (r - pc.seg_row.y) * wt_row_bytes(WTYPE2, pc.cols);
            }
        }
        uint n4 = pc.cols / 4;
        for (uint i = tid; i < n4; i += WG) {
            vec4 a = x4[xo4 + i];
            if (NORM == 1) {
                ss += dot(a, a);
                a *= nw4[i];
            }
            [[unroll]] for (uint k = 0; k < NACC; k++) acc[k] += dot(wload4(wt[k], wbase[k], 4 * i), a);
        }
    } else if ((pc.cols & 7u) == 0u) {
        uint n8 = pc.cols / 8;
        for (uint i = tid; i < n8; i += WG) {
            vec4 a = x4[xo4 + 2 * i];
            vec4 b = x4[xo4 + 2 * i + 1];
            if (NORM == 1) {
                ss += dot(a, a) + dot(b, b);
                a *= nw4[2 * i];
                b *= nw4[2 * i + 1];
            }
            [[unroll]] for (uint k = 0; k < NACC; k++) acc[k] += dot8(w8[wrow[k] * n8 + i], a, b);
        }
    } else {
        uint n4 = pc.cols / 4;
        for (uint i = tid; i < n4; i += WG) {
            vec4 a = x4[xo4 + i];
            if (NORM == 1) {
                ss += dot(a, a);
                a *= nw4[i];
            }
            [[unroll]] for (uint k = 0; k < NACC; k++) acc[k] += dot4(w4[wrow[k] * n4 + i], a);
        }
    }

    uint sg = gl_SubgroupID;
    [[unroll]] for (uint k = 0; k < NACC; k++) {
        float v = subgroupAdd(acc[k]);
        if (subgroupElect()) sg_sums[k * WG + sg] = v;
    }
    if (NORM == 1) {
        float v = subgroupAdd(ss);
        if (subgroupElect()) sg_sums[NACC * WG + sg] = v;
    }
    barrier();

    uint r = r0 + tid;
    if (tid < ROWS && r < pc.rows) {
        uint nsg = gl_NumSubgroups;
        float scale = 1.0;
        if (NORM == 1) {
            float total = 0.0;
            for (uint i = 0; i < nsg; i++) total += sg_sums[NACC * WG + i];
            scale = inversesqrt(total / float(pc.cols) + pc.eps);
        }
        float a = 0.0;
        for (uint i = 0; i < nsg; i++) a += sg_sums[tid * WG + i];
        a *= scale;
        if (EPILOGUE == 2) {
            float u = 0.0;
            for (uint i = 0; i < nsg; i++) u += sg_sums[(tid + ROWS) * WG + i];
            u *= scale;
            y[yo + r] = a / (1.0 + exp(-a)) * u;
        } else if (EPILOGUE == 1) {
            y[yo + r] += a;
        } else {
            y[yo + r] = a;
        }
    }
}
