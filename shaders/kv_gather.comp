#version 460
// The paged layout's gather: copies the K and V rows a step attends from the sequence's blocks
// (shaders/kv.glsl) into a contiguous scratch [seqs, max_seq, kv_dim] that the contiguous
// attention kernels then read. Per-row mode (MODE 0, decode): workgroup z gathers positions
// [lo, pos] of row z's sequence. Whole-step mode (MODE 1, a prompt chunk of one sequence):
// positions [rows[0].lo, rows[n - 1].pos] of rows[0]'s sequence. Rows are copied as 16-byte
// words whatever the element type (row_words = kv_dim * element bytes / 16). Each workgroup
// copies GP positions; workgroups past the range leave at once, so the grid covers max_seq and a
// recording can be replayed at any length.
// Bindings: 0 params, 1 block tables, 2 k_cache, 3 v_cache, 4 k_scratch, 5 v_scratch.
// Spec: 0 WG, 1 MODE, 4..7 the KV layout of the caches.
// Groups: (ceil(max_seq / GP), 1, MODE == 0 ? n : 1).
#include "common.glsl"

#define KV_TABLE_BINDING 1
#include "kv.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint MODE = 0;

const uint GP = 16;

layout(set = 0, binding = 0) readonly buffer Params { TokenParams params; uvec4 rows[]; };
layout(set = 0, binding = 2) readonly buffer KSrc { uvec4 k_src[]; };
layout(set = 0, binding = 3) readonly buffer VSrc { uvec4 v_src[]; };
layout(set = 0, binding = 4) writeonly buffer KDst { uvec4 k_dst[]; };
layout(set = 0, binding = 5) writeonly buffer VDst { uvec4 v_dst[]; };

layout(push_constant) uniform Push {
    uint row_words;  // 16-byte words per slot
    uint max_seq;    // scratch positions per sequence
    uint pad0;
    uint pad1;
} pc;

void main() {
    uint z = gl_WorkGroupID.z;
    if (z >= params.n_tokens) return;
    uint seq = rows[z].y;
    uint lo = rows[z].z;
    uint stop = rows[z].x + 1;
    if (MODE == 1u) {
        seq = rows[0].y;
        lo = rows[0].z;
        stop = rows[params.n_tokens - 1].x + 1;
    }
    uint p0 = lo + gl_WorkGroupID.x * GP;
    if (p0 >= stop) return;
    uint n = min(GP, stop - p0);
    for (uint i = gl_LocalInvocationID.x; i < n * pc.row_words; i += WG) {
        uint p = i / pc.row_words;
        uint w = i - p * pc.row_words;
        uint pos = p0 + p;
        uint src = kv_slot(seq, pos) * pc.row_words + w;
        uint dst = (seq * pc.max_seq + pos) * pc.row_words + w;
        k_dst[dst] = k_src[src];
        v_dst[dst] = v_src[src];
    }
}
