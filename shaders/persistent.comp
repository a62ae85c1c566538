#version 460
// The persistent token kernel (`--kernels persistent`): one dispatch runs a whole decode step
// (one token per sequence, `params.n_tokens` rows) through every layer. Its G workgroups (the
// grid, sized by the host's residency probe) meet at device-scope barriers between phases:
//
//   per layer l:  A  QKV matvec, RMSNorm folded (layer 0 reads the embedding rows directly)
//                 B  q/k RMSNorm + RoPE, k and v into the caches at the row's slot
//                 C  split-K attention: a subgroup per (row, KV head, split) of whole blocks of
//                    SG positions, online softmax, partials (m, l, o) per query head
//                 M  merge of the splits, a workgroup per (row, query head)
//                 O  o-projection, residual add as its epilogue
//                 U  gate/up matvec with RMSNorm folded, SwiGLU epilogue
//                 D  down-projection, residual add
//   head:         H  lm_head with the final norm folded; each workgroup keeps the argmax of its
//                    rows; after a last barrier workgroup 0 reduces them.
//
// That is 7 barriers per layer plus one. Matvec phases give each subgroup whole rows (lanes
// stride the columns in 16-byte loads of 8 halves) after the workgroup has staged the step's
// input row, normalized, in shared memory.
//
// Forward progress: a barrier waits for every workgroup of the grid, so all G must be resident
// at once. Vulkan does not promise that; the host establishes it with a probe (this kernel with
// `probe = 1`, a few barriers and nothing else) at the grid size it will use, and every wait is
// bounded: a workgroup that spins `spin_limit` times marks the step failed (status word of the
// argmax output = 1, sticky in the sync buffer) and the grid leaves, so the host reports an error
// instead of hanging. Workgroup 0 sets the status word to 2 when it starts and to 0 when it has
// written the tokens, so a step that did not finish can never pass for one that did.
//
// Memory model: activations, partials, the sync words and the KV caches are `coherent` (their
// loads and stores go to the device's coherent level, bypassing incoherent caches); a grid
// barrier is memoryBarrier() + barrier() in every invocation, one invocation's atomic arrival on
// a counter and its atomic polls of the generation word, then memoryBarrier() + barrier() again.
// (GLSL's classic coherent model rather than `#pragma use_vulkan_memory_model`: Mesa 22.3's
// lavapipe, where CI runs, drops stores after workgroup barriers in this kernel when it is
// compiled under the Vulkan memory model.) Weights are read-only during the dispatch.
//
// Per-layer weights and caches are reached through buffer device addresses (`ptrs`, 10 per
// layer: attn_norm, wqkv, q_norm, k_norm, wo, mlp_norm, wgate_up, wdown, k_cache, v_cache).
// Bindings: 0 params, 1 ids u32 [n], 2 ptrs (64-bit addresses as uvec2), 3 block tables, 4 sync u32 [4 + 2 G n],
// 5 embed f16 [vocab, hidden], 6 lm_head f16 [vocab, hidden], 7 final norm f32 [hidden],
// 8 rope f32 [max_seq, hd / 2, 2], 9 x f32 [n, hidden], 10 qkv f32 [n, qkv_rows], 11 q f32
// [n, heads, hd], 12 partial f32 [n, heads, max_splits, hd + 2], 13 attn f32 [n, heads, hd],
// 14 act f32 [n, inter], 15 logits f32 [n, vocab], 16 argmax out u32 [2 n + 1].
// Spec: 0 WG, 1 SG (the subgroup size), 2 QK_NORM, 3 GQ (query heads per KV head), 4..7 the KV
// layout (shaders/kv.glsl), 8 XS (vec4s of shared staging: the widest input row, and at least
// NSG * hd / 4), 9 VPL (vec4s of a head per lane: ceil(hd / 4 / SG)).
// Requires hidden, q_dim and intermediate multiples of 8 and hd a multiple of 4.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference_uvec2 : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_ballot : require
#include "common.glsl"

#define KV_TABLE_BINDING 3
#include "kv.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint SG = 32;
layout(constant_id = 2) const uint QK_NORM = 0;
layout(constant_id = 3) const uint GQ = 1;
layout(constant_id = 8) const uint XS = 256;
layout(constant_id = 9) const uint VPL = 1;

const uint NSG = WG / SG;
#define NEG_INF uintBitsToFloat(0xff800000u)

layout(buffer_reference, std430, buffer_reference_align = 16) readonly buffer W8Ref { uvec4 w8[]; };
layout(buffer_reference, std430, buffer_reference_align = 16) readonly buffer F32Ref { vec4 v4[]; };
layout(buffer_reference, std430, buffer_reference_align = 8) coherent buffer KV16Ref { f16vec4 h4[]; };
layout(buffer_reference, std430, buffer_reference_align = 16) coherent buffer KV32Ref { vec4 f4[]; };
layout(buffer_reference, std430, buffer_reference_align = 2) coherent buffer KV16sRef { float16_t h[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) coherent buffer KV32sRef { float f[]; };

layout(set = 0, binding = 0) readonly buffer Params { TokenParams params; uvec4 rows[]; };
layout(set = 0, binding = 1) readonly buffer Ids { uint ids[]; };
layout(set = 0, binding = 2) readonly buffer Ptrs { uvec2 ptrs[]; };
layout(set = 0, binding = 4) coherent volatile buffer Sync { uint arrive; uint gen; uint fail; uint pad; uint best[]; } sy;
layout(set = 0, binding = 5) readonly buffer Embed { uvec4 embed8[]; };
layout(set = 0, binding = 6) readonly buffer Head { uvec4 head8[]; };
layout(set = 0, binding = 7) readonly buffer FinalNorm { vec4 final_norm4[]; };
layout(set = 0, binding = 8) readonly buffer Rope { float rope[]; };
layout(set = 0, binding = 9) coherent buffer X { float x[]; };
layout(set = 0, binding = 10) coherent buffer Qkv { float qkv[]; };
layout(set = 0, binding = 11) coherent buffer Q { vec4 q4[]; };
layout(set = 0, binding = 12) coherent buffer Partial { float partial[]; };
layout(set = 0, binding = 13) coherent buffer Attn { vec4 attn4[]; };
layout(set = 0, binding = 14) coherent buffer Act { float act[]; };
layout(set = 0, binding = 15) writeonly buffer Logits { float logits[]; };
layout(set = 0, binding = 16) writeonly buffer Out { uint result[]; };

layout(push_constant) uniform Push {
    uint layers;
    uint hidden;
    uint heads;
    uint kv_heads;
    uint head_dim;
    uint inter;
    uint vocab;
    float eps;
    uint max_splits;  // splits per (row, head) the partial buffer holds
    uint spin_limit;  // spins before a barrier wait is declared lost
    uint probe;       // 1: only the residency probe's barriers
    uint pad0;
} pc;

shared vec4 xs[XS];
shared float red_f[WG];
shared uint red_u[WG];
shared bool failed_sh;

// ---- the grid barrier ----

void fail_step() {
    atomicExchange(sy.fail, 1u);
    result[2 * params.n_tokens] = 1u;
}

// Every workgroup of the grid waits here for all the others; writes before it are visible to
// every invocation after it. Returns false when the step failed (the caller leaves).
bool grid_sync() {
    memoryBarrier();
    barrier();
    if (gl_LocalInvocationIndex == 0) {
        uint G = gl_NumWorkGroups.x;
        bool ok = atomicAdd(sy.fail, 0u) == 0u;
        if (ok) {
            uint g = atomicAdd(sy.gen, 0u);
            uint a = atomicAdd(sy.arrive, 1u);
            if (a == G - 1u) {
                atomicExchange(sy.arrive, 0u);
                atomicAdd(sy.gen, 1u);
            } else {
                uint spins = 0u;
                while (sy.gen == g) {
                    spins++;
                    if (spins > pc.spin_limit) {
                        fail_step();
                        ok = false;
                        break;
                    }
                    if ((spins & 255u) == 0u
                        && atomicAdd(sy.fail, 0u) != 0u) {
                        ok = false;
                        break;
                    }
                }
            }
        }
        failed_sh = !ok;
    }
    memoryBarrier();
    barrier();
    return !failed_sh;
}

// ---- helpers ----

uvec2 layer_ptr(uint l, uint k) { return ptrs[l * 10u + k]; }

float dot8(uvec4 w, vec4 a, vec4 b) {
    return dot(unpackHalf2x16(w.x), a.xy) + dot(unpackHalf2x16(w.y), a.zw)
         + dot(unpackHalf2x16(w.z), b.xy) + dot(unpackHalf2x16(w.w), b.zw);
}

vec4 half4(uint lo, uint hi) { return vec4(unpackHalf2x16(lo), unpackHalf2x16(hi)); }

// Block-wide sum (every invocation gets it); red_f is free again on return.
float wg_sum(float v) {
    float s = subgroupAdd(v);
    if (subgroupElect()) red_f[gl_SubgroupID] = s;
    barrier();
    float total = 0.0;
    for (uint i = 0; i < NSG; i++) total += red_f[i];
    barrier();
    return total;
}

// Input sources of a matvec phase.
const uint SRC_X = 0, SRC_EMBED = 1, SRC_ATTN = 2, SRC_ACT = 3;

// Stages input row t (cols values) of `src` into xs, multiplied by the norm weights when
// `norm` != 0 (the RMS scale is returned, 1 otherwise). Ends with a barrier.
float stage(uint src, uint t, uint cols, uvec2 norm) {
    uint tid = gl_LocalInvocationIndex;
    uint n4 = cols / 4;
    bool has_norm = any(notEqual(norm, uvec2(0u)));
    float ss = 0.0;
    for (uint i = tid; i < n4; i += WG) {
        vec4 v;
        if (src == SRC_X) v = vec4(x[t * cols + 4 * i], x[t * cols + 4 * i + 1], x[t * cols + 4 * i + 2], x[t * cols + 4 * i + 3]);
        else if (src == SRC_EMBED) {
            uvec4 e = embed8[(ids[t] * cols) / 8 + i / 2];
            v = (i % 2 == 0) ? half4(e.x, e.y) : half4(e.z, e.w);
        } else if (src == SRC_ATTN) v = attn4[t * n4 + i];
        else v = vec4(act[t * cols + 4 * i], act[t * cols + 4 * i + 1], act[t * cols + 4 * i + 2], act[t * cols + 4 * i + 3]);
        ss += dot(v, v);
        if (has_norm) v *= F32Ref(norm).v4[i];
        xs[i] = v;
    }
    float scale = 1.0;
    if (has_norm) scale = inversesqrt(wg_sum(ss) / float(cols) + pc.eps);
    barrier();
    return scale;
}

// dot(W[row], xs) over cols (a multiple of 8), by one subgroup; every lane gets the sum.
float row_dot(W8Ref w, uint row, uint cols) {
    uint n8 = cols / 8;
    uint base = row * n8;
    uint lane = gl_SubgroupInvocationID;
    float acc = 0.0;
    uint i = lane;
    for (; i + 3u * SG < n8; i += 4u * SG) {
        uvec4 a = w.w8[base + i];
        uvec4 b = w.w8[base + i + SG];
        uvec4 c = w.w8[base + i + 2u * SG];
        uvec4 d = w.w8[base + i + 3u * SG];
        acc += dot8(a, xs[2 * i], xs[2 * i + 1]);
        acc += dot8(b, xs[2 * (i + SG)], xs[2 * (i + SG) + 1]);
        acc += dot8(c, xs[2 * (i + 2u * SG)], xs[2 * (i + 2u * SG) + 1]);
        acc += dot8(d, xs[2 * (i + 3u * SG)], xs[2 * (i + 3u * SG) + 1]);
    }
    for (; i < n8; i += SG) acc += dot8(w.w8[base + i], xs[2 * i], xs[2 * i + 1]);
    return subgroupAdd(acc);
}

uint gsub() { return gl_WorkGroupID.x * NSG + gl_SubgroupID; }
uint nsub() { return gl_NumWorkGroups.x * NSG; }

// ---- phases ----

// A: qkv[t] = W_qkv . norm(x[t]) (layer 0: the embedding row, also copied into x by group 0).
void phase_qkv(uint l) {
    uint n = params.n_tokens;
    uint rows = pc.heads * pc.head_dim + 2u * pc.kv_heads * pc.head_dim;
    W8Ref w = W8Ref(layer_ptr(l, 1));
    for (uint t = 0; t < n; t++) {
        uint src = (l == 0u) ? SRC_EMBED : SRC_X;
        float scale = stage(src, t, pc.hidden, layer_ptr(l, 0));
        if (l == 0u && gl_WorkGroupID.x == 0u) {
            // The residual stream starts as the embedding row (read again only after barriers).
            for (uint i = gl_LocalInvocationIndex; i < pc.hidden / 4; i += WG) {
                uvec4 e = embed8[(ids[t] * pc.hidden) / 8 + i / 2];
                vec4 v = (i % 2 == 0) ? half4(e.x, e.y) : half4(e.z, e.w);
                x[t * pc.hidden + 4 * i] = v.x;
                x[t * pc.hidden + 4 * i + 1] = v.y;
                x[t * pc.hidden + 4 * i + 2] = v.z;
                x[t * pc.hidden + 4 * i + 3] = v.w;
            }
        }
        for (uint r = gsub(); r < rows; r += nsub()) {
            float s = row_dot(w, r, pc.hidden) * scale;
            if (subgroupElect()) qkv[t * rows + r] = s;
        }
        barrier();
    }
}

// B: per (row, head): RMSNorm over the head (Qwen3), RoPE; q to `q`, k and v into the caches.
void phase_rope_kv(uint l) {
    uint n = params.n_tokens;
    uint hd = pc.head_dim, half_dim = hd / 2;
    uint nh = pc.heads + pc.kv_heads;
    uint qkv_rows = (pc.heads + 2u * pc.kv_heads) * hd;
    uint lane = gl_SubgroupInvocationID;
    F32Ref qn = F32Ref(layer_ptr(l, 2)), kn = F32Ref(layer_ptr(l, 3));
    for (uint u = gsub(); u < n * nh; u += nsub()) {
        uint t = u / nh, g = u % nh;
        bool is_q = g < pc.heads;
        uint kh = g - pc.heads;
        uint pos = rows[t].x;
        uint src = t * qkv_rows + (is_q ? g * hd : (pc.heads + kh) * hd);
        uint slot = is_q ? 0u : kv_slot(rows[t].y, pos);
        float scale = 1.0;
        if (QK_NORM == 1u) {
            float ss = 0.0;
            for (uint i = lane; i < hd; i += SG) ss += qkv[src + i] * qkv[src + i];
            scale = inversesqrt(subgroupAdd(ss) / float(hd) + pc.eps);
        }
        for (uint i = lane; i < half_dim; i += SG) {
            float a = qkv[src + i] * scale, b = qkv[src + i + half_dim] * scale;
            if (QK_NORM == 1u) {
                F32Ref nw = is_q ? qn : kn;
                a *= nw.v4[i / 4][i % 4];
                b *= nw.v4[(i + half_dim) / 4][(i + half_dim) % 4];
            }
            uint ti = (pos * half_dim + i) * 2;
            float c = rope[ti], s = rope[ti + 1];
            float ra = a * c - b * s, rb = b * c + a * s;
            if (is_q) {
                uint d = (t * pc.heads + g) * hd;
                q4[(d + i) / 4][(d + i) % 4] = ra;
                q4[(d + i + half_dim) / 4][(d + i + half_dim) % 4] = rb;
            } else {
                uint d = (slot * pc.kv_heads + kh) * hd;
                if (KV_F16 == 1u) {
                    KV16sRef kc = KV16sRef(layer_ptr(l, 8));
                    kc.h[d + i] = float16_t(ra);
                    kc.h[d + i + half_dim] = float16_t(rb);
                } else {
                    KV32sRef kc = KV32sRef(layer_ptr(l, 8));
                    kc.f[d + i] = ra;
                    kc.f[d + i + half_dim] = rb;
                }
            }
        }
        if (!is_q) {
            uint vsrc = t * qkv_rows + (pc.heads + pc.kv_heads + kh) * hd;
            uint d = (slot * pc.kv_heads + kh) * hd;
            for (uint i = lane; i < hd; i += SG) {
                if (KV_F16 == 1u) KV16sRef(layer_ptr(l, 9)).h[d + i] = float16_t(qkv[vsrc + i]);
                else KV32sRef(layer_ptr(l, 9)).f[d + i] = qkv[vsrc + i];
            }
        }
    }
}

vec4 kv_load(uvec2 p, uint i4) {
    if (KV_F16 == 1u) return vec4(KV16Ref(p).h4[i4]);
    return KV32Ref(p).f4[i4];
}

// The split plan of a step: blocks of SG positions, `per` blocks per split, `splits` splits.
void split_plan(out uint per, out uint splits) {
    uint blocks = (params.kv_len + SG - 1u) / SG;
    uint units = params.n_tokens * pc.kv_heads;
    uint want = max(1u, nsub() / max(1u, units));
    per = max(1u, (blocks + want - 1u) / want);
    splits = (blocks + per - 1u) / per;
}

// C: split-K attention, one subgroup per (row, KV head, split). Lane j holds position j of the
// current block's scores; lanes hold vec4 v = lane + k SG (k < VPL) of every head vector.
void phase_attention(uint l) {
    uint n = params.n_tokens;
    uint hd = pc.head_dim, hd4 = hd / 4;
    uint lane = gl_SubgroupInvocationID;
    uint per, splits;
    split_plan(per, splits);
    uvec2 kp = layer_ptr(l, 8), vp = layer_ptr(l, 9);
    float qscale = inversesqrt(float(hd));
    for (uint u = gsub(); u < n * pc.kv_heads * splits; u += nsub()) {
        uint t = u / (pc.kv_heads * splits);
        uint rem = u % (pc.kv_heads * splits);
        uint kvh = rem / splits, sp = rem % splits;
        uint seq = rows[t].y, pos = rows[t].x, lo = rows[t].z;
        vec4 qr[GQ * VPL];
        vec4 acc[GQ * VPL];
        float m[GQ], lsum[GQ];
        [[unroll]] for (uint g = 0; g < GQ; g++) {
            m[g] = NEG_INF;
            lsum[g] = 0.0;
            [[unroll]] for (uint k = 0; k < VPL; k++) {
                uint v = lane + k * SG;
                qr[g * VPL + k] = v < hd4 ? q4[((t * pc.heads + kvh * GQ + g) * hd) / 4 + v] * qscale : vec4(0.0);
                acc[g * VPL + k] = vec4(0.0);
            }
        }
        uint p_begin = sp * per * SG;
        uint p_end = min(p_begin + per * SG, pos + 1u);
        for (uint p0 = max(p_begin, lo - lo % SG); p0 < p_end; p0 += SG) {
            // K of the block's SG positions, all loads first.
            vec4 kr[SG * VPL];
            [[unroll]] for (uint j = 0; j < SG; j++) {
                uint p = p0 + j;
                bool ok = p >= lo && p < p_end;
                uint base4 = ok ? ((kv_slot(seq, p) * pc.kv_heads + kvh) * hd) / 4 : 0u;
                [[unroll]] for (uint k = 0; k < VPL; k++) {
                    uint v = lane + k * SG;
                    kr[j * VPL + k] = (ok && v < hd4) ? kv_load(kp, base4 + v) : vec4(0.0);
                }
            }
            float mine[GQ];
            [[unroll]] for (uint g = 0; g < GQ; g++) mine[g] = NEG_INF;
            [[unroll]] for (uint j = 0; j < SG; j++) {
                uint p = p0 + j;
                bool ok = p >= lo && p < p_end;
                [[unroll]] for (uint g = 0; g < GQ; g++) {
                    float d = 0.0;
                    [[unroll]] for (uint k = 0; k < VPL; k++) d += dot(qr[g * VPL + k], kr[j * VPL + k]);
                    d = subgroupAdd(d);
                    if (lane == j && ok) mine[g] = d;
                }
            }
            float pj[GQ];
            [[unroll]] for (uint g = 0; g < GQ; g++) {
                float bm = subgroupMax(mine[g]);
                float nm = max(m[g], bm);
                float alpha = (m[g] == NEG_INF) ? 0.0 : exp(m[g] - nm);
                pj[g] = (mine[g] == NEG_INF) ? 0.0 : exp(mine[g] - nm);
                lsum[g] = lsum[g] * alpha + subgroupAdd(pj[g]);
                m[g] = nm;
                [[unroll]] for (uint k = 0; k < VPL; k++) acc[g * VPL + k] *= alpha;
            }
            vec4 vr[SG * VPL];
            [[unroll]] for (uint j = 0; j < SG; j++) {
                uint p = p0 + j;
                bool ok = p >= lo && p < p_end;
                uint base4 = ok ? ((kv_slot(seq, p) * pc.kv_heads + kvh) * hd) / 4 : 0u;
                [[unroll]] for (uint k = 0; k < VPL; k++) {
                    uint v = lane + k * SG;
                    vr[j * VPL + k] = (ok && v < hd4) ? kv_load(vp, base4 + v) : vec4(0.0);
                }
            }
            [[unroll]] for (uint j = 0; j < SG; j++) {
                [[unroll]] for (uint g = 0; g < GQ; g++) {
                    float w = subgroupBroadcast(pj[g], j);
                    [[unroll]] for (uint k = 0; k < VPL; k++) acc[g * VPL + k] += w * vr[j * VPL + k];
                }
            }
        }
        [[unroll]] for (uint g = 0; g < GQ; g++) {
            uint h = kvh * GQ + g;
            uint base = ((t * pc.heads + h) * pc.max_splits + sp) * (hd + 2u);
            if (lane == 0u) {
                partial[base] = m[g];
                partial[base + 1u] = lsum[g];
            }
            [[unroll]] for (uint k = 0; k < VPL; k++) {
                uint v = lane + k * SG;
                if (v < hd4) {
                    vec4 a = acc[g * VPL + k];
                    partial[base + 2u + 4u * v] = a.x;
                    partial[base + 3u + 4u * v] = a.y;
                    partial[base + 4u + 4u * v] = a.z;
                    partial[base + 5u + 4u * v] = a.w;
                }
            }
        }
    }
}

// M: merges the splits of each (row, query head), one workgroup per pair: subgroup s takes
// splits s, s + NSG, ...; the subgroups' sums meet in shared memory (xs).
void phase_merge() {
    uint n = params.n_tokens;
    uint hd = pc.head_dim, hd4 = hd / 4;
    uint lane = gl_SubgroupInvocationID, sg = gl_SubgroupID;
    uint per, splits;
    split_plan(per, splits);
    for (uint u = gl_WorkGroupID.x; u < n * pc.heads; u += gl_NumWorkGroups.x) {
        uint base = u * pc.max_splits * (hd + 2u);
        float mx = NEG_INF;
        for (uint s = lane; s < splits; s += SG) mx = max(mx, partial[base + s * (hd + 2u)]);
        mx = subgroupMax(mx);
        float lsum = 0.0;
        vec4 acc[VPL];
        [[unroll]] for (uint k = 0; k < VPL; k++) acc[k] = vec4(0.0);
        for (uint s = sg; s < splits; s += NSG) {
            uint b = base + s * (hd + 2u);
            float ms = partial[b];
            float w = (ms == NEG_INF) ? 0.0 : exp(ms - mx);
            lsum += w * partial[b + 1u];
            [[unroll]] for (uint k = 0; k < VPL; k++) {
                uint v = lane + k * SG;
                if (v < hd4) {
                    acc[k] += w * vec4(partial[b + 2u + 4u * v], partial[b + 3u + 4u * v], partial[b + 4u + 4u * v],
                                       partial[b + 5u + 4u * v]);
                }
            }
        }
        [[unroll]] for (uint k = 0; k < VPL; k++) {
            uint v = lane + k * SG;
            if (v < hd4) xs[sg * hd4 + v] = acc[k];
        }
        if (subgroupElect()) red_f[sg] = lsum;
        barrier();
        float total = 0.0;
        for (uint i = 0; i < NSG; i++) total += red_f[i];
        float inv = total > 0.0 ? 1.0 / total : 0.0;
        for (uint v = gl_LocalInvocationIndex; v < hd4; v += WG) {
            vec4 a = vec4(0.0);
            for (uint i = 0; i < NSG; i++) a += xs[i * hd4 + v];
            attn4[u * hd4 + v] = a * inv;
        }
        barrier();
    }
}

// O and D: x[t] += W . src[t].
void phase_residual(uvec2 wp, uint src, uint cols) {
    uint n = params.n_tokens;
    W8Ref w = W8Ref(wp);
    for (uint t = 0; t < n; t++) {
        stage(src, t, cols, uvec2(0u));
        for (uint r = gsub(); r < pc.hidden; r += nsub()) {
            float s = row_dot(w, r, cols);
            if (subgroupElect()) x[t * pc.hidden + r] += s;
        }
        barrier();
    }
}

// U: act[t] = silu(gate . norm(x[t])) * (up . norm(x[t])), W = [gate; up].
void phase_gate_up(uint l) {
    uint n = params.n_tokens;
    W8Ref w = W8Ref(layer_ptr(l, 6));
    for (uint t = 0; t < n; t++) {
        float scale = stage(SRC_X, t, pc.hidden, layer_ptr(l, 5));
        for (uint r = gsub(); r < pc.inter; r += nsub()) {
            float g = row_dot(w, r, pc.hidden) * scale;
            float u = row_dot(w, r + pc.inter, pc.hidden) * scale;
            if (subgroupElect()) act[t * pc.inter + r] = g / (1.0 + exp(-g)) * u;
        }
        barrier();
    }
}

// Keeps (value, index) pairs ordered: the larger value, then the lower index.
bool better(float v, uint i, float bv, uint bi) {
    const uint NONE = 0xffffffffu;
    return i != NONE && (bi == NONE || v > bv || (v == bv && i < bi));
}

// H: logits[t] = lm_head . norm(x[t]); each workgroup writes the best of its rows.
void phase_head() {
    uint n = params.n_tokens;
    uint G = gl_NumWorkGroups.x;
    const uint NONE = 0xffffffffu;
    for (uint t = 0; t < n; t++) {
        // The final norm's weights come through binding 7: stage them by hand.
        uint tid = gl_LocalInvocationIndex;
        float ss = 0.0;
        for (uint i = tid; i < pc.hidden / 4; i += WG) {
            uint o = t * pc.hidden + 4 * i;
            vec4 v = vec4(x[o], x[o + 1], x[o + 2], x[o + 3]);
            ss += dot(v, v);
            xs[i] = v * final_norm4[i];
        }
        float scale = inversesqrt(wg_sum(ss) / float(pc.hidden) + pc.eps);
        barrier();
        float bv = NEG_INF;
        uint bi = NONE;
        for (uint r = gsub(); r < pc.vocab; r += nsub()) {
            uint n8 = pc.hidden / 8, base = r * n8;
            float acc = 0.0;
            for (uint i = gl_SubgroupInvocationID; i < n8; i += SG) acc += dot8(head8[base + i], xs[2 * i], xs[2 * i + 1]);
            float s = subgroupAdd(acc) * scale;
            if (subgroupElect()) logits[t * pc.vocab + r] = s;
            if (better(s, r, bv, bi)) {
                bv = s;
                bi = r;
            }
        }
        red_f[tid] = bv;
        red_u[tid] = bi;
        barrier();
        if (tid == 0u) {
            for (uint i = SG; i < WG; i += SG) {
                if (better(red_f[i], red_u[i], bv, bi)) {
                    bv = red_f[i];
                    bi = red_u[i];
                }
            }
            sy.best[2u * (t * G + gl_WorkGroupID.x)] = floatBitsToUint(bv);
            sy.best[2u * (t * G + gl_WorkGroupID.x) + 1u] = bi;
        }
        barrier();
    }
}

// After the last barrier: workgroup 0 reduces the groups' bests into the output.
void phase_argmax() {
    uint n = params.n_tokens;
    uint G = gl_NumWorkGroups.x;
    const uint NONE = 0xffffffffu;
    uint tid = gl_LocalInvocationIndex;
    for (uint t = 0; t < n; t++) {
        float bv = NEG_INF;
        uint bi = NONE;
        for (uint g = tid; g < G; g += WG) {
            float v = uintBitsToFloat(sy.best[2u * (t * G + g)]);
            uint i = sy.best[2u * (t * G + g) + 1u];
            if (better(v, i, bv, bi)) {
                bv = v;
                bi = i;
            }
        }
        red_f[tid] = bv;
        red_u[tid] = bi;
        barrier();
        if (tid == 0u) {
            for (uint i = 1; i < WG; i++) {
                if (better(red_f[i], red_u[i], bv, bi)) {
                    bv = red_f[i];
                    bi = red_u[i];
                }
            }
            result[t] = bi;
            result[n + t] = floatBitsToUint(bv);
        }
        barrier();
    }
}

void main() {
    if (pc.probe == 1u) {
        for (uint i = 0; i < 4u; i++) {
            if (!grid_sync()) return;
        }
        return;
    }
    // The status word reads 2 ("did not finish") until workgroup 0 has written the tokens.
    if (gl_WorkGroupID.x == 0u && gl_LocalInvocationIndex == 0u) result[2 * params.n_tokens] = 2u;
    for (uint l = 0; l < pc.layers; l++) {
        phase_qkv(l);
        if (!grid_sync()) return;
        phase_rope_kv(l);
        if (!grid_sync()) return;
        phase_attention(l);
        if (!grid_sync()) return;
        phase_merge();
        if (!grid_sync()) return;
        phase_residual(layer_ptr(l, 4), SRC_ATTN, pc.heads * pc.head_dim);
        if (!grid_sync()) return;
        phase_gate_up(l);
        if (!grid_sync()) return;
        phase_residual(layer_ptr(l, 7), SRC_ACT, pc.inter);
        if (!grid_sync()) return;
    }
    phase_head();
    if (!grid_sync()) return;
    if (gl_WorkGroupID.x == 0u) {
        phase_argmax();
        if (gl_LocalInvocationIndex == 0u) result[2 * params.n_tokens] = 0u;
    }
}
