#version 460
// Split-K decode attention with one subgroup per split and no workgroup barriers in the loop:
// the same contract as attn_split.comp (its partials, its split boundaries, its KV layouts), for
// devices with subgroup arithmetic. Row t is position pos_t of sequence seq_t and attends
// [lo_t, pos_t]; split s covers [lo_t + s * chunk, ...), chunk = ceil(span / n_splits) rounded up
// to a multiple of 32, for ALL G = heads / kv_heads query heads of KV head kvh.
//
// Workgroup (x, kvh, t) holds NSG = WG / SG subgroups; subgroup i handles split x * NSG + i.
// Each subgroup walks its split SG positions at a time:
//   1. lane j takes position t0 + j: its slot (paged: through the block table), and its G scores
//      from the whole K row (q pre-scaled, staged in shared memory, read as broadcasts);
//   2. the online softmax across the lanes with subgroupMax / subgroupAdd: running max m and sum
//      l per head (the same in every lane), the rescale alpha applied to the lane's outputs;
//   3. the lanes switch roles: lane j owns vec4 columns j, j + SG, ... of every head's output and
//      accumulates p * V over the SG positions, each V row read once, coalesced across lanes
//      (probabilities and slots pass through shared memory, synchronized within the subgroup).
// Every K and V element of the split is read from memory once.
//
// Limits: head_dim % 4 == 0, head_dim <= 128, G <= 8, SG >= 8, gl_SubgroupSize == SG (the size the host
// read from the device), WG a multiple of SG, SG a multiple of UNROLL.
// Bindings: 0 params, 1 q f32 [n, heads, hd], 2 block tables, 3 k_cache, 4 v_cache,
// 5 partial f32 [n, heads, n_splits, hd + 2]. Spec: 0 WG, 2 SG, 3 UNROLL, 4..7 the KV layout.
// Groups: (ceil(n_splits / (WG / SG)), kv_heads, n).
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#include "common.glsl"

#define KV_TABLE_BINDING 2
#define KV_K_BINDING 3
#define KV_V_BINDING 4
#define KV_READ
#include "kv.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint SG = 32;

const uint MAX_G = 8;
const uint MAX_HD4 = 32;
// vec4 columns of one head per lane (at most 4: SG >= 8 for head_dim 128).
const uint DPL = (MAX_HD4 + SG - 1) / SG;
const uint NSG = WG / SG;
// Loads in flight per lane in the K and V loops (a power of two that divides SG): the loop's
// memory round trips are latency-bound, so more loads per batch means fewer round trips.
layout(constant_id = 3) const uint UNROLL = 8;
// 1: the K loop reads each K row with LP lanes (coalesced: a load instruction covers SG / LP
// whole rows) and sums the dot products over those lanes with subgroupShuffleXor; 0: each lane
// reads its own position's whole row; 2: as 1, with all SG rows' loads issued before the first
// dot product. 1 and 2 need SG >= LP.
layout(constant_id = 2) const uint KCOOP = 0;
const uint LP = 8;
// vec4 columns per lane when LP lanes share a row.
const uint CPL = (MAX_HD4 + LP - 1) / LP;

layout(set = 0, binding = 0) readonly buffer Params { TokenParams params; uvec4 rows[]; };
layout(set = 0, binding = 1) readonly buffer Q { vec4 q4[]; };
layout(set = 0, binding = 5) writeonly buffer Partial { float partial[]; };

layout(push_constant) uniform Push {
    uint heads;
    uint kv_heads;
    uint head_dim;
    uint n_splits;
    float scale;
    uint pad0;
    uint pad1;
    uint pad2;
} pc;

shared vec4 q_sh[MAX_G * MAX_HD4];   // the group's q heads, pre-scaled: [G, hd / 4]
shared float p_sh[NSG * MAX_G * SG];  // per subgroup: probabilities [G, SG]
shared uint slot_sh[NSG * SG];        // per subgroup: the slot of each lane's position

void main() {
    uint kvh = gl_WorkGroupID.y;
    uint t = gl_WorkGroupID.z;
    // Uniform over the workgroup: the whole group leaves before its only barrier.
    if (kvh >= pc.kv_heads || t >= params.n_tokens) return;
    uint tid = gl_LocalInvocationID.x;
    uint group = pc.heads / pc.kv_heads;
    uint hd4 = pc.head_dim / 4;
    float neg_inf = uintBitsToFloat(0xff800000u);

    for (uint i = tid; i < group * hd4; i += WG) {
        uint g = i / hd4;
        q_sh[g * MAX_HD4 + (i - g * hd4)] = q4[(t * pc.heads + kvh * group) * hd4 + i] * pc.scale;
    }
    barrier();

    uint sg = gl_SubgroupID;
    uint lane = gl_SubgroupInvocationID;
    uint split = gl_WorkGroupID.x * NSG + sg;
    // Uniform over the subgroup; only subgroup-scope synchronization from here on.
    if (split >= pc.n_splits) return;

    uvec4 row = rows[t];
    uint seq = row.y;
    uint lo = row.z;
    uint stop = row.x + 1;
    uint span = stop - lo;
    uint chunk = ((span + pc.n_splits - 1) / pc.n_splits + 31) / 32 * 32;
    uint begin = min(stop, lo + split * chunk);
    uint end = min(stop, begin + chunk);
    uint row4 = pc.kv_heads * hd4;
    uint kv_off = kvh * hd4;

    float m[MAX_G];
    float l[MAX_G];
    vec4 o[MAX_G * DPL];
    [[unroll]] for (uint g = 0; g < MAX_G; g++) {
        m[g] = neg_inf;
        l[g] = 0.0;
        [[unroll]] for (uint k = 0; k < DPL; k++) o[g * DPL + k] = vec4(0.0);
    }
    uint pbase = sg * MAX_G * SG;

    for (uint t0 = begin; t0 < end; t0 += SG) {
        uint pos = t0 + lane;
        bool valid = pos < end;

        // 1. Lane j's position: slot and scores.
        // A lane past the end takes the first position's slot: finite data that it weighs 0.
        uint slot = kv_slot(seq, valid ? pos : t0);
        float s[MAX_G];
        [[unroll]] for (uint g = 0; g < MAX_G; g++) s[g] = 0.0;
        if (KCOOP == 2u) {
            // As KCOOP 1, with every row's loads issued before the first dot product: one
            // memory round trip for the SG rows instead of LP dependent ones (LP * CPL vec4
            // registers per lane).
            uint a = lane / LP;
            uint b = lane - a * LP;
            vec4 kv[LP * CPL];
            [[unroll]] for (uint it = 0; it < LP; it++) {
                uint kb = subgroupShuffle(slot, it * (SG / LP) + a) * row4 + kv_off;
                [[unroll]] for (uint u = 0; u < CPL; u++) {
                    uint c = b + u * LP;
                    kv[it * CPL + u] = c < hd4 ? k_load4(kb + c) : vec4(0.0);
                }
            }
            [[unroll]] for (uint it = 0; it < LP; it++) {
                uint pj = it * (SG / LP) + a;
                [[unroll]] for (uint g = 0; g < MAX_G; g++) {
                    if (g < group) {
                        float d = 0.0;
                        [[unroll]] for (uint u = 0; u < CPL; u++) {
                            d += dot(q_sh[g * MAX_HD4 + min(b + u * LP, MAX_HD4 - 1)], kv[it * CPL + u]);
                        }
                        d += subgroupShuffleXor(d, 1);
                        d += subgroupShuffleXor(d, 2);
                        d += subgroupShuffleXor(d, 4);
                        if (b == 0) p_sh[pbase + g * SG + pj] = d;
                    }
                }
            }
            subgroupMemoryBarrierShared();
            subgroupBarrier();
            [[unroll]] for (uint g = 0; g < MAX_G; g++) {
                if (g < group) s[g] = p_sh[pbase + g * SG + lane];
            }
        } else if (KCOOP == 1u) {
            // Iteration it: lanes a * LP .. a * LP + LP - 1 read position t0 + it * (SG / LP) + a,
            // lane b of them vec4 columns b, b + LP, ...; the cluster's sum is the score, which
            // its first lane stages in p_sh for the lane that owns the position.
            // (Shuffles within aligned groups of LP lanes: every lane takes part.)
            uint a = lane / LP;
            uint b = lane - a * LP;
            [[unroll]] for (uint it = 0; it < LP; it++) {
                uint pj = it * (SG / LP) + a;
                // Lane pj looked position t0 + pj's slot up (paged: one table read per
                // position, not one per lane that reads its row).
                uint kb = subgroupShuffle(slot, pj) * row4 + kv_off;
                vec4 kv[CPL];
                [[unroll]] for (uint u = 0; u < CPL; u++) {
                    uint c = b + u * LP;
                    kv[u] = c < hd4 ? k_load4(kb + c) : vec4(0.0);
                }
                [[unroll]] for (uint g = 0; g < MAX_G; g++) {
                    if (g < group) {
                        float d = 0.0;
                        [[unroll]] for (uint u = 0; u < CPL; u++) {
                            d += dot(q_sh[g * MAX_HD4 + min(b + u * LP, MAX_HD4 - 1)], kv[u]);
                        }
                        // Written out (LP = 8): no inner loop, whose trip count a CPU
                        // driver's loop limiter would add up over the outer loop's rounds.
                        d += subgroupShuffleXor(d, 1);
                        d += subgroupShuffleXor(d, 2);
                        d += subgroupShuffleXor(d, 4);
                        if (b == 0) p_sh[pbase + g * SG + pj] = d;
                    }
                }
            }
            subgroupMemoryBarrierShared();
            subgroupBarrier();
            [[unroll]] for (uint g = 0; g < MAX_G; g++) {
                if (g < group) s[g] = p_sh[pbase + g * SG + lane];
            }
        } else if (valid) {
            uint kb = slot * row4 + kv_off;
            // UNROLL loads issued before they are used: the memory round trips overlap.
            uint c = 0;
            for (; c + UNROLL <= hd4; c += UNROLL) {
                vec4 kv[UNROLL];
                [[unroll]] for (uint u = 0; u < UNROLL; u++) kv[u] = k_load4(kb + c + u);
                [[unroll]] for (uint u = 0; u < UNROLL; u++) {
                    [[unroll]] for (uint g = 0; g < MAX_G; g++) {
                        if (g < group) s[g] += dot(q_sh[g * MAX_HD4 + c + u], kv[u]);
                    }
                }
            }
            for (; c < hd4; c++) {
                vec4 kv = k_load4(kb + c);
                [[unroll]] for (uint g = 0; g < MAX_G; g++) {
                    if (g < group) s[g] += dot(q_sh[g * MAX_HD4 + c], kv);
                }
            }
        }

        // 2. Online softmax across the subgroup (at least lane 0 is valid: t0 < end).
        [[unroll]] for (uint g = 0; g < MAX_G; g++) {
            if (g < group) {
                float sc = valid ? s[g] : neg_inf;
                float m_new = max(m[g], subgroupMax(sc));
                float p = valid ? exp(sc - m_new) : 0.0;
                float alpha = exp(m[g] - m_new);
                l[g] = l[g] * alpha + subgroupAdd(p);
                m[g] = m_new;
                [[unroll]] for (uint k = 0; k < DPL; k++) o[g * DPL + k] *= alpha;
                p_sh[pbase + g * SG + lane] = p;
            }
        }
        slot_sh[sg * SG + lane] = slot;
        subgroupMemoryBarrierShared();
        subgroupBarrier();

        // 3. o += p * V over the SG positions, lane j owning columns j, j + SG, ...
        //    UNROLL positions at a time, their loads issued together. Lanes past the tail read
        //    slot 0 (a valid row) with p = 0.
        uint nv = min(SG, end - t0);
        for (uint j0 = 0; j0 < nv; j0 += UNROLL) {
            [[unroll]] for (uint k = 0; k < DPL; k++) {
                uint c = lane + k * SG;
                if (c < hd4) {
                    vec4 vv[UNROLL];
                    [[unroll]] for (uint u = 0; u < UNROLL; u++) {
                        vv[u] = v_load4(slot_sh[sg * SG + j0 + u] * row4 + kv_off + c);
                    }
                    [[unroll]] for (uint u = 0; u < UNROLL; u++) {
                        [[unroll]] for (uint g = 0; g < MAX_G; g++) {
                            if (g < group) o[g * DPL + k] += p_sh[pbase + g * SG + j0 + u] * vv[u];
                        }
                    }
                }
            }
        }
        // The next round overwrites p_sh and slot_sh.
        subgroupMemoryBarrierShared();
        subgroupBarrier();
    }

    uint stride = pc.head_dim + 2;
    [[unroll]] for (uint g = 0; g < MAX_G; g++) {
        if (g < group) {
            uint b = ((t * pc.heads + kvh * group + g) * pc.n_splits + split) * stride;
            if (lane == 0) {
                partial[b] = m[g];
                partial[b + 1] = l[g];
            }
            [[unroll]] for (uint k = 0; k < DPL; k++) {
                uint c = lane + k * SG;
                if (c < hd4) {
                    vec4 v = o[g * DPL + k];
                    partial[b + 2 + 4 * c] = v.x;
                    partial[b + 3 + 4 * c] = v.y;
                    partial[b + 4 + 4 * c] = v.z;
                    partial[b + 5 + 4 * c] = v.w;
                }
            }
        }
    }
}
