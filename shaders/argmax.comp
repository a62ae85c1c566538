#version 460
// Greedy sampling on the GPU, one workgroup per row t of x [rows, n]: out[t] = argmax(x[t, 0..n])
// (the lowest index on ties), out[rows + t] = the max value's f32 bits (so the host reads the
// tokens as one contiguous range). Each invocation scans a strided share keeping its first
// maximum, then a shared-memory tree keeps (larger value, then lower index).
// Bindings: 0 x f32 [rows, n], 1 out u32 [2 rows]. Groups: (rows, 1, 1). WG must be a power of
// two.
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(set = 0, binding = 0) readonly buffer X { float x[]; };
layout(set = 0, binding = 1) writeonly buffer Out { uint result[]; };

layout(push_constant) uniform Push {
    uint n;
    uint pad0;
    uint pad1;
    uint pad2;
} pc;

shared float best_v[WG];
shared uint best_i[WG];

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint row = gl_WorkGroupID.x;
    const uint NONE = 0xffffffffu;
    float bv = uintBitsToFloat(0xff800000u);
    uint bi = NONE;
    for (uint i = tid; i < pc.n; i += WG) {
        float v = x[row * pc.n + i];
        // Indices rise within one invocation, so strict > keeps the first maximum.
        if (bi == NONE || v > bv) {
            bv = v;
            bi = i;
        }
    }
    best_v[tid] = bv;
    best_i[tid] = bi;
    barrier();
    for (uint s = WG / 2; s > 0; s >>= 1) {
        if (tid < s) {
            float ov = best_v[tid + s];
            uint oi = best_i[tid + s];
            bool take = oi != NONE && (best_i[tid] == NONE || ov > best_v[tid] || (ov == best_v[tid] && oi < best_i[tid]));
            if (take) {
                best_v[tid] = ov;
                best_i[tid] = oi;
            }
        }
        barrier();
    }
    if (tid == 0) {
        result[row] = best_i[0];
        result[gl_NumWorkGroups.x + row] = floatBitsToUint(best_v[0]);
    }
}
