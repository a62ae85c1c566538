// The persistent token kernel (`--kernels persistent`), included by persistent.comp and by
// persistent_clocked.comp (PHASE_CLOCKS defined). One dispatch runs a whole decode step (one
// token per sequence, ROWS rows) through every layer. Its GRID workgroups (G below, the grid as
// the host's residency probe sized it) hand each phase's results to the next, at device-scope
// barriers or as tagged words (below):
//
//   per layer l:  A  QKV matvec, RMSNorm folded (layer 0 reads the embedding rows directly);
//                    the layer's residual rows are set up (below); the first block of K and V
//                    rows of the first unit of the first KV_STAGE subgroups is loaded during the
//                    phase and goes into shared memory at its end (stage_kv_load, stage_kv_store)
//                 C  split-K attention: a unit per (row, KV head, split) of whole blocks of SG
//                    positions, online softmax, partials (m, l, o) per query head. A unit is one
//                    subgroup, or GS of one workgroup with GQ / GS query heads each (head groups,
//                    where the grid has room for them). Each subgroup applies q RMSNorm + RoPE
//                    to its query heads itself and keeps them in shared memory, where lane j
//                    reads them whole to score position j; the unit whose split holds the row's
//                    position also applies them to the new k, writes k and v into the caches
//                    and uses them from registers
//                 MO merge of the splits and the o-projection: a workgroup per (row, query head,
//                    OC of the head's dims) merges those dims (lanes keep a running max) and adds
//                    their columns of W_o times them to the row's o-projection sum D
//                 UD gate/up matvec with RMSNorm folded (its input R + D) and the SwiGLU, each
//                    workgroup keeping its channels' activations in shared memory; then their
//                    rows of W_down^T (a transposed copy: a contiguous row per channel) times
//                    them, added to the next residual row
//   head:         H  lm_head with the final norm folded, HR rows per subgroup in flight at a
//                    time; each workgroup keeps the argmax of its rows; the last workgroup to
//                    finish (an atomic count) reduces them.
//
// A to C and C to MO hand over tagged words, which the reader polls (see "tagged words"); MO to
// UD and UD to the next layer's A are grid barriers, since their values are sums of float
// atomics, which carry no tag (and layer 0's A to C is one too). So 2 grid barriers per layer.
// The o- and down-projections are split over the grid by their input (a head's dims, a
// workgroup's channels), not by their output rows, so neither needs a barrier of its own: each
// workgroup adds its part of every output with float atomics. The residual stream lives in x as
// rows R0, R1, D0 and D1: layer l reads R[l % 2] and builds R[(l + 1) % 2], and its o-projection
// sums into D[l % 2]. Phase A copies R[l % 2] into R[(l + 1) % 2] and clears D[(l + 1) % 2] (each
// vec4 by the workgroup that owns it, from the value it staged: see stage); MO adds the
// o-projection into D[l % 2]; UD reads R[l % 2] + D[l % 2], adds D[l % 2] and the down-projection
// into R[(l + 1) % 2], which nothing reads in that phase.
// Atomics sum in no fixed order, so the last bits of the residual (and of the logits) can differ
// between runs.
//
// The residual rows' copies: each of R0, R1, D0 and D1 is RC rows in x, and a workgroup's atomics
// add into copy (its index mod RC); a row's value is the sum of its copies (sum4), which every
// reader loads at once. Every word of D and of the next R takes an atomic from every workgroup
// (the o- and down-projections' sums), and the atomics of the whole grid to one cache line are
// processed one after another where the line lives: the fence of a grid barrier's arrival waits
// for them. Phase A's owners write copy 0 of R[(l + 1) % 2] and clear its other copies and every
// copy of D[(l + 1) % 2].
//
// The matvec phases A and UD give each row to KS subgroups of one workgroup (KS > 1 when the
// grid has more subgroups than twice the rows; their sums meet in shared memory) after the
// workgroup has staged the step's input row, normalized, in shared memory; lanes stride the
// columns in 16-byte loads of 8 halves. A matvec phase's first weight loads (PF per lane for each
// of PF_SETS (pass, matrix) sets: QKV's first four passes over the grid, which on an H100 is all
// of them, and the first two of gate/up's) are issued between the barrier's arrival and its wait,
// so they travel while the grid meets; so do each invocation's first vec4 of the phase's norm
// weights (prefetch_norm) and, before the merge, its first unit's W_o loads (prefetch_wo).
// Prefetching more (gate/up's third pass too) made the barrier before it slower by more than it
// saved: the loads queue ahead of the barrier's own traffic.
//
// Code size: every workgroup runs every phase's code once per layer, and the size of the code
// shows in every phase's time, the untouched phases included: straight-line code that runs once
// per layer costs its instruction fetch on every SM, on the critical path. So each phase's code is
// there once per call, unrolling is kept to the loads it puts in flight, and the unrolled loops
// carry no per-element guards or selects that can be moved out of them or made unnecessary.
//
// Forward progress: a barrier waits for every workgroup of the grid, and a poll for tagged words
// for the workgroups that write them, so all G must be resident at once. Vulkan does not promise
// that; the host establishes it with a probe (this kernel with `probe = 1`, a few barriers and
// nothing else) at the grid size it will use, and every wait is bounded: a workgroup that spins
// `spin_limit` times marks the step failed (status word of the argmax output = 1, sticky in the
// sync buffer) and leaves a barrier, or goes on past a poll, so the host reports an error instead
// of hanging. Workgroup 0 sets the status word to 2 when it starts and the last workgroup sets it
// to 0 when it has written the tokens (1 where the step failed), so a step that did not finish
// can never pass for one that did.
//
// The barrier: one arrival counter that only grows during a step (barrier k of the step waits
// until it reads k G), so an arrival is one atomic and a wait is polls of one word; the last
// workgroup to finish the step (the `done` count reaches G, so no workgroup is still waiting)
// sets both back to 0 for the next step.
//
// Memory model: the residual rows, the sync words and the KV caches are `coherent` (their loads
// and stores go to the device's coherent level, bypassing incoherent caches); the tagged words
// are device-scope atomics, which carry their own order (a value and its tag are one word). A grid
// barrier's arrival is memoryBarrier() + barrier() in every invocation (release), then one
// invocation's atomic add; its wait is that invocation's polls of the counter as device-scope
// acquire loads, then a workgroup control barrier with buffer and shared semantics, which orders
// the other invocations' loads after the acquire. (An acquire fence in every invocation instead
// would also wait for the loads a phase issues while the grid meets.) GLSL's classic coherent model
// rather than `#pragma use_vulkan_memory_model`: Mesa 22.3's lavapipe, where CI runs, drops
// stores after workgroup barriers in this kernel when it is compiled under the Vulkan memory
// model. Weights are read-only during the dispatch.
//
// Phase clocks (PHASE_CLOCKS): workgroup 0's first invocation writes the device clock when the step
// starts and as it leaves each hand-off (clk[4 l + k] after phase k of layer l: a barrier's wait,
// or its first polls for tagged words that all carried their tag); the workgroup that reduces the
// argmax writes it at the end (clk[4 layers + 1]). The host maps them onto the dispatch's
// timestamps as one GPU span per phase.
//
// Per-layer weights and caches are reached through buffer device addresses (`ptrs`, PTRS per
// layer: attn_norm, wqkv, q_norm, k_norm, wo, mlp_norm, wgate_up, wdown, k_cache, v_cache,
// wdown^T, and the layer's weight types in place of an address; then the embedding's and the
// lm_head's addresses).
//
// Weights in GGUF blocks (WQ = 1, where any matrix is not f16): every matrix is read where it lies,
// in its own type (per layer and matrix, from the pointer table: a Q4_K_M file mixes Q4_K and
// Q6_K), decoded with quant.glsl's arithmetic, the CPU reference's. The phases keep their split of
// the work; the loads change: the matvec rows (QKV, gate/up, lm_head) stride 8 elements per lane
// as the f16 loads do (32 for Q8_0), the merge reads its OC columns of W_o per row, and the
// down-projection reads W_down itself (no transposed copy: the file's blocks are the only copy),
// a workgroup's channels consecutive and a cluster of lanes per output row (persistent_quant.glsl,
// down_rows). Q4_K and Q6_K rows go by persistent_quant.glsl's units instead, several rows' words
// in flight at once. The f16 kernel (WQ = 0) compiles none of this and keeps its prefetches and
// wide loads.
// Bindings: 0 params, 1 ids u32 [n], 2 ptrs (64-bit addresses as uvec2), 3 block tables, 4 sync
// u32 [4 + 2 G n], 5 embed f16 [vocab, hidden], 6 lm_head f16 [vocab, hidden], 7 final norm f32
// [hidden], 8 rope f32 [max_seq, hd / 2, 2], 9 x f32 [4 RC, n, hidden] (R0, R1, D0, D1, RC copies
// each), 10 qkv tagged words [n, qkv_rows], 11 phase clocks uvec2 [4 layers + 2], 12 partial
// tagged words [n, heads, max_splits, hd + 4], 13 logits f32 [n, vocab], 14 argmax out u32 [2 n +
// 1].
// Spec: 0 WG, 1 SG (the subgroup size), 2 QK_NORM, 3 GQ (query heads per KV head), 4..7 the KV
// layout (shaders/kv.glsl), 8 XS (vec4s of shared staging: at least (hidden + intermediate +
// NSG + DE) / 4 for a staged row, the MLP's activations and DE zeros, NSG * OC / 4 for the merge
// and NSG * GQ * (hd / 4 + PJ4) for the attention), 9 VPL (vec4s of a head per lane: ceil(hd / 4 /
// SG)), 10 KC (16-byte chunks of a K row), and from 11 on the model's shapes and the static tuning
// of the step (below; 23 the K and V staging, 24 the head groups, 25 the residual rows' copies):
// with them constant, the compiler folds the address arithmetic, divisions, loop bounds and
// guards that depend on them. The head groups size a subgroup's arrays (GQ / GS heads), so each
// grouping has code of its own (chosen at run time instead, the one-group kernel spilled).
// 26..28 are matvec_fused's weight types (unused here), 29 WQ, 30 and 31 the embedding's and the
// lm_head's types (ggml ids; 0 or 1 f16), 32 the types of the model's matrices as a mask.
// Requires hidden, q_dim and intermediate multiples of 8, hd a multiple of OC (16), float atomic
// adds on buffers (VK_EXT_shader_atomic_float), and subgroup arithmetic and shuffles.
//
// docs/persistent-kernel.md describes this design at length, with the measurements behind each
// choice and the variants that were tried and not taken.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference_uvec2 : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_EXT_shader_atomic_float : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_EXT_shader_atomic_int64 : require
#ifdef PHASE_CLOCKS
#extension GL_EXT_shader_realtime_clock : require
#endif
#include "common.glsl"

#define KV_TABLE_BINDING 3
#include "kv.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint SG = 32;
layout(constant_id = 2) const uint QK_NORM = 0;
layout(constant_id = 3) const uint GQ = 1;
layout(constant_id = 8) const uint XS = 256;
layout(constant_id = 9) const uint VPL = 1;
layout(constant_id = 10) const uint KC = 16;
// The model's shapes (the embedding's rows are VOCAB), the grid (GRID workgroups, as the
// residency probe sized it), the partial buffer's splits per (row, head), the splits per (row,
// KV head) to aim for (0: nsub() over the units) and the step's rows (one per sequence).
layout(constant_id = 11) const uint HIDDEN = 1024;
layout(constant_id = 12) const uint HEADS = 16;
layout(constant_id = 13) const uint KV_HEADS = 8;
layout(constant_id = 14) const uint HEAD_DIM = 128;
layout(constant_id = 15) const uint INTER = 3072;
layout(constant_id = 16) const uint VOCAB = 1000;
layout(constant_id = 17) const uint LAYERS = 1;
layout(constant_id = 18) const float EPS = 1e-6;
layout(constant_id = 19) const uint GRID = 1;
layout(constant_id = 20) const uint MAX_SPLITS = 1;
layout(constant_id = 21) const uint SPLIT_WANT = 0;
layout(constant_id = 22) const uint ROWS = 1;
// Attention units per workgroup whose first block of K and V rows is staged in shared memory during
// the QKV phase (see stage_kv_load): the first unit of subgroups 0 .. KV_STAGE - 1 (of head groups
// 0 .. KV_STAGE - 1 with GS > 1, whose subgroups share it).
layout(constant_id = 23) const uint KV_STAGE = 0;
// Head groups: subgroups per attention unit, each taking GQ / GS of its query heads (1, or GQ
// where the grid has a subgroup for every head of every unit: decoder/src/exec/persistent.rs,
// head_groups).
layout(constant_id = 24) const uint GS = 1;
// Copies of each residual row (R0, R1, D0, D1) that the float atomics add into: workgroup w's go
// to copy w % RC, so each word takes 1 / RC of the grid's atomics; a reader sums the copies (see
// "the residual rows' copies").
layout(constant_id = 25) const uint RC = 1;
// Weights in GGUF blocks (see the top), and the embedding's and lm_head's types.
layout(constant_id = 29) const uint WQ = 0;
layout(constant_id = 30) const uint WT_EMBED = 1;
layout(constant_id = 31) const uint WT_HEAD = 1;
// A bit per ggml type id of the model's matrices: the branches of every other type are left out,
// since each type's loads and decode are code of their own and the kernel's code size is time
// (see "Code size" above).
layout(constant_id = 32) const uint WT_MASK = 0xffffffffu;
#define WT_HAS(t) (((WT_MASK >> (t)) & 1u) != 0u)

const uint NSG = WG / SG;
// Query heads per subgroup of an attention unit.
const uint GH = GQ / GS;
#define NEG_INF uintBitsToFloat(0xff800000u)
// Phases per layer (A, C, MO, UD), each ending at a hand-off (a grid barrier or tagged words):
// the phase clocks' slots.
const uint PHASES_PER_LAYER = 4;
// uvec4s per lane of a matvec row loaded while the grid meets, for PF_SETS (pass, matrix) sets:
// the first PF_SETS passes of a one-matrix phase (QKV), the first PF_SETS / 2 of gate/up's two.
const uint PF = 4;
const uint PF_SETS = 4;
// lm_head rows a subgroup reads at a time, and the chunks per lane of each read at once.
const uint HR = 4;
const uint HC = 4;
// vec4s of a block's V rows (SG positions) each lane holds.
const uint VR = SG * VPL;
// vec4s of one query head's softmax weights for a block (SG positions).
const uint PJ4 = (SG + 3u) / 4u;

layout(buffer_reference, std430, buffer_reference_align = 16) readonly buffer W8Ref { uvec4 w8[]; };
layout(buffer_reference, std430, buffer_reference_align = 16) readonly buffer F32Ref { vec4 v4[]; };
// W_down^T: 4 halves (a uvec2) at a time.
layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer W4Ref { uvec2 u2[]; };
// The caches: read through plain (incoherent) loads, since a step never reads a position it
// writes from memory (the subgroup that writes it uses it from registers), and written through
// their own references. f16 elements stay packed (uvec2 per 4) until used.
layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer KV16Ref { uvec2 u2[]; };
layout(buffer_reference, std430, buffer_reference_align = 16) readonly buffer KRowRef { uvec4 c16[]; };
layout(buffer_reference, std430, buffer_reference_align = 16) readonly buffer KV32Ref { vec4 f4[]; };
layout(buffer_reference, std430, buffer_reference_align = 8) writeonly buffer KV16WRef { f16vec4 h4[]; };
layout(buffer_reference, std430, buffer_reference_align = 16) writeonly buffer KV32WRef { vec4 f4[]; };

// Words of a weight matrix in GGUF blocks, for quant.glsl: `qsrc` is set to the matrix before
// each wload4.
layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer QRef { uint w[]; };
QRef qsrc;
#define QW(i) qsrc.w[i]
#include "quant.glsl"

layout(set = 0, binding = 0) readonly buffer Params { TokenParams params; uvec4 rows[]; };
layout(set = 0, binding = 1) readonly buffer Ids { uint ids[]; };
layout(set = 0, binding = 2) readonly buffer Ptrs { uvec2 ptrs[]; };
layout(set = 0, binding = 4) coherent volatile buffer Sync { uint arrive; uint done; uint fail; uint epoch; uint best[]; } sy;
layout(set = 0, binding = 5) readonly buffer Embed { uvec4 embed8[]; };
layout(set = 0, binding = 6) readonly buffer Head { uvec4 head8[]; };
layout(set = 0, binding = 7) readonly buffer FinalNorm { vec4 final_norm4[]; };
// RoPE's (cos, sin) pairs as vec4s: two consecutive pairs each.
layout(set = 0, binding = 8) readonly buffer Rope4 { vec4 rope4[]; };
// The residual stream: two rows R0, R1 (layer l reads R[l % 2] and builds R[(l + 1) % 2]) and the
// o-projection's sum D, each [n, hidden].
layout(set = 0, binding = 9) coherent buffer X { float x[]; };
// The same rows as vec4s (every row starts at a multiple of 4 elements: hidden is a multiple of 8).
layout(set = 0, binding = 9) coherent buffer X4 { vec4 x4v[]; };
// Tagged words (see "tagged words" below): qkv [n, qkv_rows].
layout(set = 0, binding = 10) buffer Qkv { uint64_t qkv_ll[]; };
layout(set = 0, binding = 11) writeonly buffer Clocks { uvec2 clk[]; };
// Tagged words: a partial is (m, l, 2 unused, hd sums), so its sums start at a multiple of 4.
layout(set = 0, binding = 12) buffer Partial { uint64_t part_ll[]; };
layout(set = 0, binding = 13) writeonly buffer Logits { float logits[]; };
layout(set = 0, binding = 14) writeonly buffer Out { uint result[]; };

// The only values that differ between dispatches of one pipeline: the probe and the steps share
// it (its grid is a specialization constant, so the probe's pipeline is the steps').
layout(push_constant) uniform Push {
    uint spin_limit;  // spins before a barrier wait is declared lost
    uint probe;       // 1: only the residency probe's barriers
} pc;

shared vec4 xs[XS];

// The staged input row's vec4 v lives at xs[xsw(v)]. In a GGUF-block kernel (WQ = 1) each group
// of 8 vec4s (32 elements: a Q8_0 block, a Q4_K sub-block) has its vec4s permuted by the group's
// index, so that lanes taking one block each read the same vec4 of 8 consecutive blocks from 8
// different banks instead of one (and lanes taking 8 columns each no longer share banks two by
// two). The f16 kernel keeps the plain layout. Only the staged row's readers and writers use it.
uint xsw(uint v) { return (WQ == 1u && HIDDEN % 32u == 0u) ? v ^ ((v >> 3) & 7u) : v; }
shared float red_f[WG];
shared uint red_u[WG];
shared bool flag_sh;
// Subgroups that reached the end of the step (see last_to_finish).
shared uint alive_sh;
// The step's parameters, read once when the step starts rather than after a barrier in each
// attention and merge phase, where their load was one more round trip on the phase's chain: the
// cache length, and each row's (pos, seq, lo, -).
shared uvec4 rows_sh[ROWS];
uint kv_len = 0u;
// This invocation's vec4 of the next matvec phase's norm weights (element i = the invocation's
// index; none where hidden / 4 is smaller than that), loaded while the grid meets.
vec4 norm_pf = vec4(0.0);

// Barriers this invocation has passed in this step.
uint barriers = 0u;
// The current matvec's first loads: PF per (pass, matrix), two matrices for gate/up.
uvec4 pf[PF_SETS * PF];

// ---- the grid barrier ----

// Fails the step where a wait ran out: `poll` 0 for a grid barrier, 1 for a poll of tagged words,
// at `site`, the phase clock the wait comes before (a phase index on the host:
// persistent::phases). The status word says 1 (bits 0-1), which wait (bit 2), where (bits 4-15)
// and in which workgroup (bits 16-31); the first workgroup's failure is the one kept.
void fail_step(uint poll, uint site) {
    uint w = 1u | (poll << 2) | (min(site, 4095u) << 4) | (min(gl_WorkGroupID.x, 65535u) << 16);
    uint first = atomicCompSwap(sy.fail, 0u, w);
    result[2 * ROWS] = first == 0u ? w : first;
}

void phase_clock(uint k) {
#ifdef PHASE_CLOCKS
    if (gl_WorkGroupID.x == 0u && gl_LocalInvocationIndex == 0u) clk[k] = clockRealtime2x32EXT();
#endif
}

// Arrival at the next grid barrier: this workgroup's writes so far are visible to the grid once
// it has passed the barrier. Work that reads nothing the grid writes may go between this and
// grid_wait().
void grid_arrive() {
    memoryBarrier();
    barrier();
    barriers++;
    if (gl_LocalInvocationIndex == 0) atomicAdd(sy.arrive, 1u);
}

// Waits until every workgroup has arrived. Returns false when the step failed (the caller
// leaves). The polls are acquire loads, and the control barrier passes the acquire on to the
// workgroup: no fence, which would wait for the loads issued since the arrival.
bool grid_wait(uint clock_at) {
    if (gl_LocalInvocationIndex == 0) {
        uint target = barriers * GRID;
        bool ok = true;
        uint spins = 0u;
        while (atomicLoad(sy.arrive, gl_ScopeDevice, gl_StorageSemanticsBuffer, gl_SemanticsAcquire) < target) {
            spins++;
            if (spins > pc.spin_limit) {
                fail_step(0u, clock_at);
                ok = false;
                break;
            }
            if ((spins & 255u) == 0u && sy.fail != 0u) {
                ok = false;
                break;
            }
        }
        flag_sh = !ok;
    }
    controlBarrier(gl_ScopeWorkgroup, gl_ScopeWorkgroup, gl_StorageSemanticsBuffer | gl_StorageSemanticsShared, gl_SemanticsAcquireRelease);
    bool ok = !flag_sh;
    phase_clock(clock_at);
    return ok;
}

bool grid_sync() {
    grid_arrive();
    return grid_wait(0u);
}

// The end of a step for this workgroup: true in the last one to get here, when every other
// workgroup has finished (and none waits at a barrier any more); that one resets the barrier
// words for the next step.
//
// lavapipe (mesa's llvmpipe) stops every loop of a shader invocation for good once its loops
// together have run 65535 iterations (LP_MAX_TGSI_LOOP_ITERATIONS, one budget for all of them);
// the subgroup then runs on with no lane active, so its stores and its share of each later
// workgroup barrier are lost without a word, and the step's token is garbage. Each subgroup
// counts itself here, without a loop, and a step where one did not arrive reports it (status 3).
bool last_to_finish() {
    if (subgroupElect()) atomicAdd(alive_sh, 1u);
    memoryBarrier();
    barrier();
    if (gl_LocalInvocationIndex == 0) {
        if (alive_sh != NSG) atomicExchange(sy.fail, 3u);
        bool last = atomicAdd(sy.done, 1u) == GRID - 1u;
        if (last) {
            atomicExchange(sy.arrive, 0u);
            atomicExchange(sy.done, 0u);
            // The next step's tags (see "tagged words").
            atomicAdd(sy.epoch, 1u);
        }
        flag_sh = last;
    }
    barrier();
    memoryBarrier();
    return flag_sh;
}

// ---- tagged words ----
//
// Two of a layer's four hand-offs need no grid barrier: the QKV phase's rows to the attention,
// and the attention's partials to the merge. Their values travel as tagged words, a 64-bit
// atomic (value bits, tag) where the tag names the step and layer that wrote it; a reader polls
// the words it needs until every one carries the tag it expects. One round trip to the coherent
// level instead of the writer's fence, the arrival, the polls of the counter and the reader's
// loads after them. Each word is written once per layer, so a word read too early carries an
// older tag and is read again. Tags count steps (the sync buffer's epoch, which the last
// workgroup of a step advances and the host never resets) times layers, from 1; the host zeroes
// both buffers once, so no word holds a tag before it is written.

uint tag_base = 0u;

uint ll_tag(uint l) {
    uint t = tag_base * LAYERS + l + 1u;
    return t == 0u ? 1u : t;
}

uint64_t ll_word(float v, uint tag) { return packUint2x32(uvec2(floatBitsToUint(v), tag)); }

// The value of word w, and ok cleared where its tag is not `tag`.
float ll_value(uint64_t w, uint tag, inout bool ok) {
    uvec2 u = unpackUint2x32(w);
    ok = ok && u.y == tag;
    return uintBitsToFloat(u.x);
}

void qkv_put(uint i, float v, uint tag) {
    atomicStore(qkv_ll[i], ll_word(v, tag), gl_ScopeDevice, gl_StorageSemanticsNone, gl_SemanticsRelaxed);
}

float qkv_get(uint i, uint tag, inout bool ok) {
    return ll_value(atomicLoad(qkv_ll[i], gl_ScopeDevice, gl_StorageSemanticsNone, gl_SemanticsRelaxed), tag, ok);
}

void part_put(uint i, float v, uint tag) {
    atomicStore(part_ll[i], ll_word(v, tag), gl_ScopeDevice, gl_StorageSemanticsNone, gl_SemanticsRelaxed);
}

float part_get(uint i, uint tag, inout bool ok) {
    return ll_value(atomicLoad(part_ll[i], gl_ScopeDevice, gl_StorageSemanticsNone, gl_SemanticsRelaxed), tag, ok);
}

// Elements i .. i + 3 of qkv.
vec4 qkv_get4(uint i, uint tag, inout bool ok) {
    vec4 v;
    [[unroll]] for (uint c = 0; c < 4u; c++) v[c] = qkv_get(i + c, tag, ok);
    return v;
}

// Elements i .. i + 3 of the partials.
vec4 part_get4(uint i, uint tag, inout bool ok) {
    vec4 v;
    [[unroll]] for (uint c = 0; c < 4u; c++) v[c] = part_get(i + c, tag, ok);
    return v;
}

// Before another round of polls of tagged words: false when the wait ran out (the step fails)
// or another workgroup failed the step. The caller then goes on with what it has; the step's
// status word reports the failure, and no workgroup waits for ever.
bool ll_again(inout uint spins, uint site) {
    spins++;
    if (spins > pc.spin_limit) {
        fail_step(1u, site);
        return false;
    }
    return (spins & 255u) != 0u || sy.fail == 0u;
}

// ---- helpers ----

// Entries of the pointer table per layer (decoder/src/exec/persistent.rs: PTRS_PER_LAYER).
const uint PTRS = 12;
uvec2 layer_ptr(uint l, uint k) { return ptrs[l * PTRS + k]; }

// Matrices of a layer, by their slot in the packed types: q, k, v, o, gate, up, down.
const uint MQ = 0, MK = 1, MV = 2, MO = 3, MGATE = 4, MUP = 5, MDOWN = 6;

// The weight type (ggml id) of matrix m of layer l: a byte each, in the layer's last entry.
uint layer_wt(uint l, uint m) {
    uvec2 p = layer_ptr(l, PTRS - 1u);
    return ((m < 4u ? p.x : p.y) >> (8u * (m & 3u))) & 0xffu;
}

// The embedding's and the lm_head's addresses, after the layers'.
uvec2 embed_ptr() { return ptrs[LAYERS * PTRS]; }
uvec2 head_ptr() { return ptrs[LAYERS * PTRS + 1u]; }
// The next matvec phase's norm weights do not depend on the step: each invocation loads its first
// vec4 of them between a barrier's arrival and its wait, and stage() takes it from norm_pf, so
// their round trip (and their pointer's) leaves the phase's chain.
void prefetch_norm(uvec2 norm) {
    if (gl_LocalInvocationIndex < HIDDEN / 4u) norm_pf = F32Ref(norm).v4[gl_LocalInvocationIndex];
}

// Two chains of fused multiply-adds (the even and the odd halves), then one add: fewer
// instructions than four dot products and their sum (3.7 KB less code).
float dot8(uvec4 w, vec4 a, vec4 b) {
    vec2 s = unpackHalf2x16(w.x) * a.xy;
    s = fma(unpackHalf2x16(w.y), a.zw, s);
    s = fma(unpackHalf2x16(w.z), b.xy, s);
    s = fma(unpackHalf2x16(w.w), b.zw, s);
    return s.x + s.y;
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

// The residual stream's rows in x: R0, R1, then D, RC copies each (see binding 9).
uint res_at(uint k) { return k * RC * ROWS * HIDDEN; }

// Copy c of a residual row at `at` (res_at or d_at).
uint copy_at(uint at, uint c) { return at + c * ROWS * HIDDEN; }

// Elements o .. o + 3 of the row at `at` (o a multiple of 4): the sum of its copies.
vec4 sum4(uint at, uint o) {
    vec4 v = x4v[(at + o) / 4u];
    [[unroll]] for (uint c = 1; c < RC; c++) v += x4v[(copy_at(at, c) + o) / 4u];
    return v;
}

// The copy this workgroup's atomics add into.
uint my_copy(uint at) { return copy_at(at, gl_WorkGroupID.x % RC); }

// The o-projection's sum of layer l: D[l % 2], after R0 and R1.
uint d_at(uint l) { return res_at(2u + l % 2u); }

// Input sources of a matvec phase (see stage): R[l % 2], the embedding row, R[l % 2] + D[l % 2].
const uint SRC_X = 0, SRC_EMBED = 1, SRC_XD = 2;

// Whether this workgroup writes vec4 i of row t of the residual rows for the grid (see stage):
// vec4 e = t hidden / 4 + i belongs to workgroup e % GRID, so the writes spread over the grid.
bool owns4(uint t, uint i) { return (t * (HIDDEN / 4u) + i) % GRID == gl_WorkGroupID.x; }

// Stages input row t (hidden values) of `src` into xs, multiplied by the norm weights `norm`
// (the RMS scale is returned); layer l reads R[k], k = l % 2 (and D[l % 2] for SRC_XD). Ends with
// a barrier. The residual rows' upkeep rides on the staged loads: the workgroup that owns a vec4
// (owns4) writes it from the value it staged, with no loads of its own:
// - SRC_X / SRC_EMBED (phase A): R[1 - k] = R[k] (layer 0: R0 = R1 = the embedding row) in its
//   first copy and 0 in the others, which UD adds to with atomics, and D[(l + 1) % 2] = 0 in every
//   copy (layer 0: D[0] too), which the next layer's MO adds to (the last to read it was the
//   previous layer's UD, before the barrier that ends it);
// - SRC_XD (phase UD): R[1 - k] += D[l % 2], float atomics beside the down-projection's.
float stage(uint src, uint t, uvec2 norm, uint l) {
    uint k = l % 2u, d = d_at(l);
    uint tid = gl_LocalInvocationIndex;
    uint cols = HIDDEN, n4 = cols / 4;
    float ss = 0.0;
    for (uint i = tid; i < n4; i += WG) {
        vec4 v;
        uint o = t * cols + 4 * i;
        bool own = owns4(t, i);
        if (src == SRC_EMBED) {
            if (WT_IS_F16(WT_EMBED)) {
                uvec4 e = embed8[(ids[t] * cols) / 8 + i / 2];
                v = (i % 2 == 0) ? half4(e.x, e.y) : half4(e.z, e.w);
            } else {
                // Clamped: an id past the vocabulary (the host refuses one) must not read past
                // the embedding through its address.
                qsrc = QRef(embed_ptr());
                v = wload4(WT_EMBED, min(ids[t], VOCAB - 1u) * wt_row_bytes(WT_EMBED, cols), 4u * i);
            }
            if (own) {
                x4v[(res_at(0u) + o) / 4u] = v;
                [[unroll]] for (uint c = 1; c < RC; c++) x4v[(copy_at(res_at(0u), c) + o) / 4u] = vec4(0.0);
            }
        } else {
            v = sum4(res_at(k), o);
            if (src == SRC_XD) {
                vec4 dv = sum4(d, o);
                if (own) {
                    [[unroll]] for (uint c = 0; c < 4u; c++) atomicAdd(x[my_copy(res_at(1u - k)) + o + c], dv[c]);
                }
                v += dv;
            }
        }
        if (src != SRC_XD && own) {
            x4v[(res_at(1u - k) + o) / 4u] = v;
            [[unroll]] for (uint c = 0; c < RC; c++) {
                if (c > 0u) x4v[(copy_at(res_at(1u - k), c) + o) / 4u] = vec4(0.0);
                x4v[(copy_at(d_at(l + 1u), c) + o) / 4u] = vec4(0.0);
                if (l == 0u) x4v[(copy_at(d_at(0u), c) + o) / 4u] = vec4(0.0);
            }
        }
        ss += dot(v, v);
        xs[xsw(i)] = v * (i == tid ? norm_pf : F32Ref(norm).v4[i]);
    }
    float scale = inversesqrt(wg_sum(ss) / float(cols) + EPS);
    barrier();
    return scale;
}

uint nsub() { return GRID * NSG; }

// ---- matvec rows ----
//
// A matvec over `rows` rows gives each row to KS subgroups of one workgroup (a power of two: the
// largest with rows * KS * 2 <= the grid's subgroups, at most NSG). Subgroup s of a workgroup
// takes row slot s / KS and column part s % KS; a pass over the grid covers G * NSG / KS rows.
// Divisions by KS are shifts: a division by a value the compiler cannot see is a long sequence
// of instructions, and the kernel's code size is time (see the top).

uint split_ks(uint rows) {
    uint ks = 1u;
    while (ks < NSG && rows * ks * 2u <= nsub()) ks *= 2u;
    return ks;
}

// Row of row slot `slot` of this workgroup in pass j, with per_wg slots per workgroup.
uint pass_row(uint slot, uint per_wg, uint j) {
    return gl_WorkGroupID.x * per_wg + slot + j * GRID * per_wg;
}

// Row of this subgroup in pass j.
uint mv_row(uint ks, uint j) {
    return pass_row(gl_SubgroupID >> findLSB(ks), NSG >> findLSB(ks), j);
}

uint mv_passes(uint rows, uint ks) {
    uint per_pass = GRID * (NSG >> findLSB(ks));
    return (rows + per_pass - 1u) / per_pass;
}

// Loads this subgroup's first PF uvec4s per lane of `row` into pf[at ..].
void prefetch(W8Ref w, uint row, uint rows, uint cols, uint ks, uint at) {
    uint n8 = cols / 8;
    uint stride = ks * SG;
    uint i = gl_SubgroupInvocationID + (gl_SubgroupID & (ks - 1u)) * SG;
    [[unroll]] for (uint j = 0; j < PF; j++) {
        pf[at + j] = (row < rows && i + j * stride < n8) ? w.w8[row * n8 + i + j * stride] : uvec4(0u);
    }
}

// This subgroup's part of dot(W[row], xs) over cols (a multiple of 8); every lane gets it. With
// `pre`, the first PF loads per lane are the ones in `p`.
float part_dot(W8Ref w, uint row, uint cols, uint ks, bool pre, uvec4 p[PF]) {
    uint n8 = cols / 8;
    uint base = row * n8;
    uint stride = ks * SG;
    uint i = gl_SubgroupInvocationID + (gl_SubgroupID & (ks - 1u)) * SG;
    float acc = 0.0;
    if (pre) {
        [[unroll]] for (uint j = 0; j < PF; j++) {
            if (i < n8) acc += dot8(p[j], xs[xsw(2 * i)], xs[xsw(2 * i + 1)]);
            i += stride;
        }
    }
    for (; i + 3u * stride < n8; i += 4u * stride) {
        uvec4 a = w.w8[base + i];
        uvec4 b = w.w8[base + i + stride];
        uvec4 c = w.w8[base + i + 2u * stride];
        uvec4 d = w.w8[base + i + 3u * stride];
        acc += dot8(a, xs[xsw(2 * i)], xs[xsw(2 * i + 1)]);
        acc += dot8(b, xs[xsw(2 * (i + stride))], xs[xsw(2 * (i + stride) + 1)]);
        acc += dot8(c, xs[xsw(2 * (i + 2u * stride))], xs[xsw(2 * (i + 2u * stride) + 1)]);
        acc += dot8(d, xs[xsw(2 * (i + 3u * stride))], xs[xsw(2 * (i + 3u * stride) + 1)]);
    }
    for (; i < n8; i += stride) acc += dot8(w.w8[base + i], xs[xsw(2 * i)], xs[xsw(2 * i + 1)]);
    return subgroupAdd(acc);
}

// part_dot for two rows of the same width at once (gate/up): one copy of the code, both rows'
// loads in flight together, each row summed in the same order as part_dot.
vec2 part_dot2(W8Ref w, uint row0, uint row1, uint cols, uint ks, bool pre, uvec4 p0[PF], uvec4 p1[PF]) {
    uint n8 = cols / 8;
    uint base0 = row0 * n8, base1 = row1 * n8;
    uint stride = ks * SG;
    uint i = gl_SubgroupInvocationID + (gl_SubgroupID & (ks - 1u)) * SG;
    vec2 acc = vec2(0.0);
    if (pre) {
        [[unroll]] for (uint j = 0; j < PF; j++) {
            if (i < n8) {
                acc.x += dot8(p0[j], xs[xsw(2 * i)], xs[xsw(2 * i + 1)]);
                acc.y += dot8(p1[j], xs[xsw(2 * i)], xs[xsw(2 * i + 1)]);
            }
            i += stride;
        }
    }
    for (; i + 3u * stride < n8; i += 4u * stride) {
        uvec4 a[4], b[4];
        [[unroll]] for (uint k = 0; k < 4u; k++) {
            a[k] = w.w8[base0 + i + k * stride];
            b[k] = w.w8[base1 + i + k * stride];
        }
        [[unroll]] for (uint k = 0; k < 4u; k++) {
            uint c = i + k * stride;
            acc.x += dot8(a[k], xs[xsw(2 * c)], xs[xsw(2 * c + 1)]);
            acc.y += dot8(b[k], xs[xsw(2 * c)], xs[xsw(2 * c + 1)]);
        }
    }
    for (; i < n8; i += stride) {
        acc.x += dot8(w.w8[base0 + i], xs[xsw(2 * i)], xs[xsw(2 * i + 1)]);
        acc.y += dot8(w.w8[base1 + i], xs[xsw(2 * i)], xs[xsw(2 * i + 1)]);
    }
    return vec2(subgroupAdd(acc.x), subgroupAdd(acc.y));
}

// This lane's part of a row of type t at byte rb of qsrc against xs: 8 columns from chunk i on,
// every `stride` chunks, four chunks' loads issued before their products. Called with a constant
// t (see wt_case), so each copy decodes one type with no branches between its loads.
float qdot_lane(uint t, uint rb, uint n8, uint i, uint stride) {
    float acc = 0.0;
    for (; i + 3u * stride < n8; i += 4u * stride) {
        vec4 w[8];
        [[unroll]] for (uint k = 0; k < 4u; k++) {
            uint c = 8u * (i + k * stride);
            w[2u * k] = wload4(t, rb, c);
            w[2u * k + 1u] = wload4(t, rb, c + 4u);
        }
        [[unroll]] for (uint k = 0; k < 4u; k++) {
            uint j = i + k * stride;
            acc += dot(w[2u * k], xs[xsw(2u * j)]) + dot(w[2u * k + 1u], xs[xsw(2u * j + 1u)]);
        }
    }
    for (; i < n8; i += stride) acc += dot(wload4(t, rb, 8u * i), xs[xsw(2u * i)]) + dot(wload4(t, rb, 8u * i + 4u), xs[xsw(2u * i + 1u)]);
    return acc;
}

// Elements c .. c + n - 1 of the row at byte rb into w[0 .. n / 4), for a Q8_0 or Q4_K row: n is
// 16 or 32 and c a multiple of n, both t and n constant at each call. The elements share a block
// (Q8_0) or a sub-block (Q4_K), whose scales are read once for all n; their bytes come as aligned
// words (a Q8_0 block's are 2 bytes past a word boundary where the block starts on one). The
// products are wload4's (and the CPU reference's).
void wload_run(uint t, uint rb, uint c, uint n, out vec4 w[8]) {
    uint m = n / 4u;
    uint words[9];
    if (t == WT_Q8_0) {
        uint b = rb + (c / 32u) * 34u;
        float d = q_half(b);
        uint o = b + 2u + (c & 31u);
        uint o4 = o >> 2, sh = (o & 3u) * 8u;
        [[unroll]] for (uint k = 0; k < 9u; k++) words[k] = (k < m || (k == m && sh != 0u)) ? QW(o4 + k) : 0u;
        [[unroll]] for (uint k = 0; k < 8u; k++) {
            uint v = sh == 0u ? words[k] : (words[k] >> sh) | (words[k + 1u] << (32u - sh));
            w[k] = k < m ? vec4(d * q_i8(v, 0u), d * q_i8(v, 1u), d * q_i8(v, 2u), d * q_i8(v, 3u)) : vec4(0.0);
        }
    } else {
        // Q4_K rows are whole 144-byte blocks from a word boundary (qkv_row's offsets too).
        uint b = rb + (c / 256u) * 144u, j = (c & 255u) / 32u;
        uvec2 sm = q4k_scale_min(b, j);
        vec2 dm = unpackHalf2x16(QW(b >> 2));
        float d1 = dm.x * float(sm.x), m1 = dm.y * float(sm.y);
        uint q0 = (b + 16u + 32u * (j / 2u) + (c & 31u)) >> 2, hi = (j & 1u) * 4u;
        [[unroll]] for (uint k = 0; k < 8u; k++) words[k] = k < m ? QW(q0 + k) : 0u;
        [[unroll]] for (uint k = 0; k < 8u; k++) w[k] = k < m ? d1 * q_nibbles(words[k], hi) - m1 : vec4(0.0);
    }
}

// qdot_lane for Q8_0 and Q4_K: 32 columns a lane from chunk i on, every `stride` chunks. A Q8_0
// block's products q x go into four independent sums (a vec4), scaled by d once: 8 dependent adds
// a block where the dot products of d q made 32 (rows go one at a time, and the chain of a lane's
// adds is part of what each waits for). The reference sums (d q) x: the last bits differ.
float qdot32_lane(uint t, uint rb, uint n32, uint i, uint stride) {
    float acc = 0.0;
    for (; t == WT_Q8_0 && i < n32; i += stride) {
        uint b = rb + i * 34u;
        float d = q_half(b);
        uint o4 = (b + 2u) >> 2, sh = ((b + 2u) & 3u) * 8u;
        uint words[9];
        [[unroll]] for (uint k = 0; k < 9u; k++) words[k] = (k < 8u || sh != 0u) ? QW(o4 + k) : 0u;
        vec4 a = vec4(0.0);
        [[unroll]] for (uint k = 0; k < 8u; k++) {
            uint v = sh == 0u ? words[k] : (words[k] >> sh) | (words[k + 1u] << (32u - sh));
            a += vec4(q_i8(v, 0u), q_i8(v, 1u), q_i8(v, 2u), q_i8(v, 3u)) * xs[xsw(8u * i + k)];
        }
        acc += d * ((a.x + a.y) + (a.z + a.w));
    }
    for (; t != WT_Q8_0 && i < n32; i += stride) {
        vec4 w[8];
        wload_run(t, rb, 32u * i, 32u, w);
        [[unroll]] for (uint k = 0; k < 8u; k++) acc += dot(w[k], xs[xsw(8u * i + k)]);
    }
    return acc;
}

// part_dot for a row in GGUF blocks (WQ): the row of type t at byte rb of the matrix at p. The
// same lanes take the same 8 columns as in part_dot (32 for Q8_0 and Q4_K, whose scales are
// then read once per 32). The type is a branch outside the loop: each branch's loop has its
// type constant.
float part_dot_q(uvec2 p, uint t, uint rb, uint cols, uint ks) {
    qsrc = QRef(p);
    uint n8 = cols / 8u, stride = ks * SG;
    uint i = gl_SubgroupInvocationID + (gl_SubgroupID & (ks - 1u)) * SG;
    float acc;
    if (t == WT_Q8_0 && WT_HAS(WT_Q8_0)) acc = qdot32_lane(WT_Q8_0, rb, cols / 32u, i, stride);
    else if (t == WT_Q4_K && WT_HAS(WT_Q4_K)) acc = qdot32_lane(WT_Q4_K, rb, cols / 32u, i, stride);
    else if (t == WT_Q4_0 && WT_HAS(WT_Q4_0)) acc = qdot_lane(WT_Q4_0, rb, n8, i, stride);
    else if (t == WT_Q4_1 && WT_HAS(WT_Q4_1)) acc = qdot_lane(WT_Q4_1, rb, n8, i, stride);
    else if (t == WT_Q6_K && WT_HAS(WT_Q6_K)) acc = qdot_lane(WT_Q6_K, rb, n8, i, stride);
    else acc = qdot_lane(WT_F16, rb, n8, i, stride);
    return subgroupAdd(acc);
}

// Passes of a phase with `mats` matrices whose first loads are prefetched.
uint pf_passes(uint mats) { return PF_SETS / mats; }

// The prefetched loads of pass j of matrix `mat` of `mats` (1 for QKV, 2 for gate/up; constants
// at every call): set mats j + mat.
void pass_pf(uint j, uint mat, uint mats, out uvec4 p[PF]) {
    [[unroll]] for (uint c = 0; c < PF; c++) {
        p[c] = pf[mat * PF + c];
        [[unroll]] for (uint jj = 1; jj < PF_SETS; jj++) {
            if (jj < pf_passes(mats) && j == jj) p[c] = pf[(mats * jj + mat) * PF + c];
        }
    }
}

// part_dot for pass j of a one-matrix phase, input row t: from the prefetched loads where they
// hold it. The pass's loads are selected by value (pf indices stay constant, so pf stays in
// registers) and part_dot's code is there once per call (see the note on code size at the top).
float pass_dot(W8Ref w, uint row, uint cols, uint ks, uint t, uint j) {
    uvec4 p[PF];
    pass_pf(j, 0u, 1u, p);
    return part_dot(w, row, cols, ks, t == 0u && j < pf_passes(1u), p);
}

// Prefetches the first passes of matrix `mat` of `mats` (rows at `offset` + the pass's row).
void prefetch_passes(W8Ref w, uint rows, uint offset, uint bound, uint cols, uint mat, uint mats) {
    uint ks = split_ks(rows);
    [[unroll]] for (uint j = 0; j < PF_SETS; j++) {
        if (j < pf_passes(mats)) prefetch(w, offset + mv_row(ks, j), bound, cols, ks, (mats * j + mat) * PF);
    }
}

// Sums the KS parts of each row slot (every subgroup of the workgroup calls it together);
// every lane of every part gets its row's total. The order of the sum is fixed.
float row_total(float part, uint ks) {
    if (ks == 1u) return part;
    if (subgroupElect()) red_f[gl_SubgroupID] = part;
    barrier();
    uint b = gl_SubgroupID & ~(ks - 1u);
    float s = 0.0;
    for (uint k = 0; k < ks; k++) s += red_f[b + k];
    barrier();
    return s;
}

bool writes_row(uint ks) { return (gl_SubgroupID & (ks - 1u)) == 0u && subgroupElect(); }

#include "persistent_quant.glsl"

// ---- phases ----

uint qkv_rows() { return HEADS * HEAD_DIM + 2u * KV_HEADS * HEAD_DIM; }

void prefetch_qkv(uint l) {
    if (WQ == 1u) return;
    uint rows = qkv_rows();
    prefetch_passes(W8Ref(layer_ptr(l, 1)), rows, 0u, rows, HIDDEN, 0u, 1u);
}

// One vec4 of a cache row as loaded: packed halves (f16) or floats (f32); the other is unused.
struct KvRaw {
    uvec2 h;
    vec4 f;
};

KvRaw kv_raw(uvec2 p, uint i4, bool load) {
    KvRaw r;
    r.h = uvec2(0u);
    r.f = vec4(0.0);
    if (load) {
        if (KV_F16 == 1u) r.h = KV16Ref(p).u2[i4];
        else r.f = KV32Ref(p).f4[i4];
    }
    return r;
}

vec4 kv_value(KvRaw r) { return KV_F16 == 1u ? half4(r.h.x, r.h.y) : r.f; }

void kv_store(uvec2 p, uint i4, vec4 v) {
    if (KV_F16 == 1u) KV16WRef(p).h4[i4] = f16vec4(v);
    else KV32WRef(p).f4[i4] = v;
}

// The split plan of a step: blocks of SG positions, `per` blocks per split, `splits` splits.
void split_plan(out uint per, out uint splits) {
    uint blocks = (kv_len + SG - 1u) / SG;
    uint units = ROWS * KV_HEADS;
    uint want = SPLIT_WANT > 0u ? SPLIT_WANT : max(1u, nsub() / GS / max(1u, units));
    per = max(1u, (blocks + want - 1u) / want);
    splits = (blocks + per - 1u) / per;
}

// A lane's part of a head at qkv[src ..] as loaded: for each of its elements e = 4 v + c, the
// pair RoPE rotates together (a: element i, b: element i + hd / 2, where i = e mod hd / 2). All of
// a head's loads are issued at once, before its RMS scale is known.
struct HeadRaw {
    vec4 a;
    vec4 b;
};

HeadRaw head_raw(uint src, uint v, uint tag, inout bool ok) {
    // Elements 4 v .. 4 v + 3 are consecutive, and so are their partners: two vec4 loads (src and
    // hd / 2 are multiples of 4).
    uint half_dim = HEAD_DIM / 2;
    uint i = 4u * v < half_dim ? 4u * v : 4u * v - half_dim;
    HeadRaw r;
    r.a = qkv_get4(src + i, tag, ok);
    r.b = qkv_get4(src + i + half_dim, tag, ok);
    return r;
}

// The sum of squares of the lane's own elements (each of the head's elements is one lane's own;
// elements 4 v .. 4 v + 3 are all in the first half or all in the second, hd / 2 being a multiple
// of 4).
float head_ss(HeadRaw r, uint v) {
    vec4 own = 4u * v < HEAD_DIM / 2 ? r.a : r.b;
    return dot(own, own);
}

// The RMS scale of a head from its lanes' sums of squares (1 without QK norm).
float head_scale(float ss) {
    if (QK_NORM == 0u) return 1.0;
    return inversesqrt(subgroupAdd(ss) / float(HEAD_DIM) + EPS);
}

// What RoPE and the norm weights give elements 4 v .. 4 v + 3 of a head at `pos` (element i pairs
// with i + hd / 2): cos and sin, and the q and k norm weights of both elements of each pair.
// Loaded when a unit starts, with the head's own loads, since none depends on the step.
struct RopeW {
    vec4 co, si, qa, qb, ka, kb;
};

// Whole vec4 loads: i (below) and hd / 2 are multiples of 4, so each quantity of the four
// elements is one vec4, or two for the interleaved (cos, sin) pairs.
RopeW rope_w(uint v, uint pos, uvec2 qn, uvec2 kn) {
    uint half_dim = HEAD_DIM / 2;
    uint i = 4u * v < half_dim ? 4u * v : 4u * v - half_dim;
    uint t4 = (pos * half_dim + i) / 2u;
    vec4 r0 = rope4[t4], r1 = rope4[t4 + 1u];
    RopeW r;
    r.co = vec4(r0.x, r0.z, r1.x, r1.z);
    r.si = vec4(r0.y, r0.w, r1.y, r1.w);
    r.qa = vec4(1.0);
    r.qb = vec4(1.0);
    r.ka = vec4(1.0);
    r.kb = vec4(1.0);
    if (QK_NORM == 1u) {
        r.qa = F32Ref(qn).v4[i / 4u];
        r.qb = F32Ref(qn).v4[(i + half_dim) / 4u];
        r.ka = F32Ref(kn).v4[i / 4u];
        r.kb = F32Ref(kn).v4[(i + half_dim) / 4u];
    }
    return r;
}

// Elements 4 v .. 4 v + 3 of a head after RMSNorm (scale, weights na / nb: Qwen3) and RoPE.
vec4 roped4(HeadRaw r, uint v, float scale, vec4 na, vec4 nb, RopeW w) {
    vec4 a = r.a * scale * na, b = r.b * scale * nb;
    vec4 o = 4u * v < HEAD_DIM / 2 ? a * w.co - b * w.si : b * w.co + a * w.si;
    return o;
}

// Lane j's K row for the block at p0 (position p0 + j), whole: KC 16-byte chunks. Where the
// position is not attended or is the step's own (`pos`, scored from registers) the lane reads
// row 0 instead, and its score is masked or replaced.
void load_k(out uvec4 kc[KC], uvec2 kp, uint seq, uint kvh, uint p0, uint lo, uint p_end, uint pos) {
    uint p = p0 + gl_SubgroupInvocationID;
    bool cached = p >= lo && p < p_end && p != pos;
    uint row = cached ? ((kv_slot(seq, p) * KV_HEADS + kvh) * KC) : 0u;
    [[unroll]] for (uint c = 0; c < KC; c++) kc[c] = KRowRef(kp).c16[row + c];
}

// Bit j set where position p0 + j of a block (p0 a multiple of SG, lo - p0 < SG) is read from
// the cache: in [lo, p_end), not the step's own `pos`. For SG <= 32.
uint cached_mask(uint p0, uint lo, uint p_end, uint pos) {
    uint a = lo > p0 ? lo - p0 : 0u;
    uint b = min(p_end - p0, SG);
    uint m = (b >= 32u ? 0xffffffffu : (1u << b) - 1u) & ~((1u << a) - 1u);
    if (pos >= p0 && pos < p0 + SG) m &= ~(1u << (pos - p0));
    return m;
}

// The lane's vec4s of the V rows of the block at p0, every position of it (those not read from
// the cache, outside [lo, p_end) or the step's own, as zeros). Which positions load is one mask,
// and in the contiguous layout their rows are one base and a stride (a block never leaves its
// sequence's region there): a few instructions less for each of the SG positions.
void load_v(out KvRaw vr[VR], uvec2 vp, uint seq, uint kvh, uint p0, uint lo, uint p_end, uint pos) {
    uint hd4 = HEAD_DIM / 4u, lane = gl_SubgroupInvocationID;
    uint vm = SG <= 32u ? cached_mask(p0, lo, p_end, pos) : 0u;
    uint vrow = KV_HEADS * hd4;
    uint vb0 = KV_LAYOUT == 0u ? ((seq * KV_UNIT + p0) * KV_HEADS + kvh) * hd4 : 0u;
    [[unroll]] for (uint j = 0; j < SG; j++) {
        uint p = p0 + j;
        bool cached = SG <= 32u ? ((vm >> j) & 1u) != 0u : (p >= lo && p < p_end && p != pos);
        uint base4 = KV_LAYOUT == 0u ? vb0 + j * vrow : (cached ? (kv_slot(seq, p) * KV_HEADS + kvh) * hd4 : 0u);
        [[unroll]] for (uint k = 0; k < VPL; k++) {
            uint v = lane + k * SG;
            vr[j * VPL + k] = kv_raw(vp, base4 + v, cached && v < hd4);
        }
    }
}

// ---- K and V rows staged ahead of the attention ----
//
// The cache's positions before the step's own were written by earlier steps, so a unit's K and V
// rows do not depend on this step's data. For the first block of the first unit of subgroups 0 ..
// KV_STAGE - 1, the workgroup loads them while the QKV phase runs, into kvs; the attention then
// scores and sums that block from shared memory, without the two round trips to the cache on its
// chain. The loads are issued in the QKV phase so that their round trip runs beside its matvec:
// staged after the QKV phase, its round trip came before the attention's polls and cost more than
// it saved. A slot holds SG K
// rows, each padded by one 16-byte chunk (lane j reads row j: 8 lanes of a 16-byte read then cover
// the 32 banks), then SG V rows. Positions that are not read from the cache (outside [lo, p_end)
// or the step's own) hold zeros. Subgroup 0 does not stage where there are others: its first
// invocation polls the barriers, and its lanes poll the query rows of its attention unit; their
// loads would queue behind the staging's.
const uint KV_SLOT = SG * (2u * KC + 1u);
shared uvec4 kvs[KV_STAGE * KV_SLOT + 1u];
const uint KV_STAGERS = NSG > 1u ? WG - SG : WG;
// uvec4s each staging invocation loads (all at once, then stores); 1 without staging, since an
// array may not be empty.
const uint KV_PER = KV_STAGE > 0u ? (KV_STAGE * 2u * SG * KC + KV_STAGERS - 1u) / KV_STAGERS : 1u;

// The first block of subgroup s's first attention unit in this workgroup: its row t, KV head kvh,
// first position p0 and end p_end; false where the subgroup has no unit or the block is empty.
bool first_block(uint s, uint per, uint splits, out uint t, out uint kvh, out uint p0, out uint p_end) {
    uint u = s * GRID + gl_WorkGroupID.x;
    uint head = u / splits, sp = u - head * splits;
    t = min(head / KV_HEADS, ROWS - 1u);
    kvh = head % KV_HEADS;
    uint pos = rows_sh[t].x, lo = rows_sh[t].z;
    uint p_begin = sp * per * SG;
    p_end = min(p_begin + per * SG, pos + 1u);
    p0 = max(p_begin, lo - lo % SG);
    return u < ROWS * KV_HEADS * splits && p0 < p_end;
}

// Element e of the staging: its slot, K (0) or V (1), row and chunk, and its index in kvs.
void kv_stage_at(uint e, out uint slot, out uint which, out uint row, out uint c, out uint at) {
    uint per_slot = 2u * SG * KC;
    slot = e / per_slot;
    uint rem = e - slot * per_slot;
    which = rem / (SG * KC);
    row = (rem / KC) % SG;
    c = rem % KC;
    at = slot * KV_SLOT + (which == 0u ? row * (KC + 1u) + c : SG * (KC + 1u) + row * KC + c);
}

// This invocation's staged loads: issued in the QKV phase right after its staged row's loads
// (stage_kv_load; a subgroup's loads complete in order, and the row is on the phase's chain),
// stored into kvs at the phase's end (stage_kv_store, before the workgroup barrier that precedes
// the attention). So their round trip to the cache runs beside the QKV matvec instead of on the
// chain before the attention.
uvec4 kv_pf[KV_PER];

void stage_kv_load(uint l) {
    uint tid = gl_LocalInvocationIndex;
    if (KV_STAGE == 0u || tid < WG - KV_STAGERS) return;
    uint i = tid - (WG - KV_STAGERS);
    uint per, splits;
    split_plan(per, splits);
    uvec2 kp = layer_ptr(l, 8), vp = layer_ptr(l, 9);
    [[unroll]] for (uint k = 0; k < KV_PER; k++) {
        uint slot, which, row, c, at;
        kv_stage_at(i + k * KV_STAGERS, slot, which, row, c, at);
        uint t, kvh, p0, p_end;
        bool ok = slot < KV_STAGE && first_block(slot, per, splits, t, kvh, p0, p_end);
        uint p = p0 + row;
        ok = ok && p >= rows_sh[t].z && p < p_end && p != rows_sh[t].x;
        kv_pf[k] = uvec4(0u);
        if (ok) kv_pf[k] = KRowRef(which == 0u ? kp : vp).c16[(kv_slot(rows_sh[t].y, p) * KV_HEADS + kvh) * KC + c];
    }
}

void stage_kv_store() {
    uint tid = gl_LocalInvocationIndex;
    if (KV_STAGE == 0u || tid < WG - KV_STAGERS) return;
    uint i = tid - (WG - KV_STAGERS);
    [[unroll]] for (uint k = 0; k < KV_PER; k++) {
        uint slot, which, row, c, at;
        kv_stage_at(i + k * KV_STAGERS, slot, which, row, c, at);
        if (slot < KV_STAGE) kvs[at] = kv_pf[k];
    }
}

// A: qkv[t] = W_qkv . norm(R[l % 2][t]) (layer 0: the embedding row), as tagged words. Its
// staging also keeps the residual rows (see stage): R[(l + 1) % 2] = R[l % 2] and the next
// layer's D[(l + 1) % 2] = 0, so this layer's MO may start before the grid has finished this phase.
// Layer 0 also writes R0 from the embedding rows and clears D[0]: a grid barrier follows its
// phase A. The attention's staged K and V rows travel during the phase (stage_kv_load, after the
// staged row's loads; stage_kv_store at its end).
// Row r of layer l's stacked q, k and v rows (each matrix in its own type, one after another):
// its type and byte offset (WQ).
uvec2 qkv_row(uint l, uint r) {
    uint qd = HEADS * HEAD_DIM, kvd = KV_HEADS * HEAD_DIM;
    uint tq = layer_wt(l, MQ), tk = layer_wt(l, MK), tv = layer_wt(l, MV);
    uint bq = wt_row_bytes(tq, HIDDEN), bk = wt_row_bytes(tk, HIDDEN);
    if (r < qd) return uvec2(tq, r * bq);
    if (r < qd + kvd) return uvec2(tk, qd * bq + (r - qd) * bk);
    return uvec2(tv, qd * bq + kvd * bk + (r - qd - kvd) * wt_row_bytes(tv, HIDDEN));
}

void phase_qkv(uint l) {
    uint n = ROWS;
    uint rows = qkv_rows(), ks = split_ks(rows), passes = mv_passes(rows, ks);
    W8Ref w = W8Ref(layer_ptr(l, 1));
    uint tag = ll_tag(l);
    for (uint t = 0; t < n; t++) {
        float scale = stage(l == 0u ? SRC_EMBED : SRC_X, t, layer_ptr(l, 0), l);
        if (t == 0u) stage_kv_load(l);
        // Rows in units (Q4_K, Q6_K): QR passes' rows at once.
        bool units_qkv = WQ == 1u && rows_in_units(layer_wt(l, MQ)) && rows_in_units(layer_wt(l, MK)) && rows_in_units(layer_wt(l, MV));
        for (uint j = 0; units_qkv && j < passes; j += QR) {
            uvec2 tr[QR];
            uint nr = 0u;
            [[unroll]] for (uint k = 0; k < QR; k++) {
                uint r = mv_row(ks, j + k);
                tr[k] = uvec2(WT_Q4_K, 0u);
                if (j + k < passes && r < rows) {
                    tr[k] = qkv_row(l, r);
                    nr = k + 1u;
                }
            }
            float s[QR];
            rows_dot(layer_ptr(l, 1u), tr, nr, HIDDEN, ks, s);
            [[unroll]] for (uint k = 0; k < QR; k++) {
                if (j + k < passes) {
                    uint r = mv_row(ks, j + k);
                    float v = row_total(s[k], ks) * scale;
                    if (r < rows && writes_row(ks)) qkv_put(t * rows + r, v, tag);
                }
            }
        }
        for (uint j = 0; !units_qkv && j < passes; j++) {
            uint r = mv_row(ks, j);
            float s = 0.0;
            if (r < rows) {
                if (WQ == 1u) {
                    uvec2 tr = qkv_row(l, r);
                    s = part_dot_q(layer_ptr(l, 1u), tr.x, tr.y, HIDDEN, ks);
                } else {
                    s = pass_dot(w, r, HIDDEN, ks, t, j);
                }
            }
            s = row_total(s, ks) * scale;
            if (r < rows && writes_row(ks)) qkv_put(t * rows + r, s, tag);
        }
        barrier();
    }
    stage_kv_store();
}

// One vec4 of a staged V row (base: the row's first uvec4 in kvs) as kv_raw loads it.
KvRaw kv_staged(uint base, uint i4, bool load) {
    KvRaw r;
    r.h = uvec2(0u);
    r.f = vec4(0.0);
    if (load) {
        if (KV_F16 == 1u) {
            uvec4 q = kvs[base + i4 / 2u];
            r.h = (i4 & 1u) == 0u ? q.xy : q.zw;
        } else {
            r.f = uintBitsToFloat(kvs[base + i4]);
        }
    }
    return r;
}

// C: split-K attention, one subgroup per (row, KV head, split). Lane j holds position j of the
// current block's scores; lanes hold vec4 v = lane + k SG (k < VPL) of every head vector.
void phase_attention(uint l) {
    uint n = ROWS;
    uint hd = HEAD_DIM, hd4 = hd / 4;
    uint qkv_n = qkv_rows();
    uint lane = gl_SubgroupInvocationID;
    uint per, splits;
    split_plan(per, splits);
    uvec2 kp = layer_ptr(l, 8), vp = layer_ptr(l, 9);
    uvec2 qn = layer_ptr(l, 2), kn = layer_ptr(l, 3);
    float qscale = inversesqrt(float(hd));
    uint tag = ll_tag(l);
    uint units = n * KV_HEADS * splits;
    // With head groups (GS > 1), GS subgroups of a workgroup take each unit, subgroup s its
    // query heads (s % GS) GH .. (s % GS + 1) GH - 1. Subgroup s's k-th unit is
    // (s / GS + k NSG / GS) GRID + the workgroup's index.
    uint gsel = gl_SubgroupID % GS;
    uint first_u = (gl_SubgroupID / GS) * GRID + gl_WorkGroupID.x;
    // Workgroup 0's clock for the phase's start where its subgroup 0 has no unit to take it.
    if (l > 0u && gl_WorkGroupID.x >= units) phase_clock(PHASES_PER_LAYER * l + 1u);
    // Units go round the workgroups first, so short contexts spread over the whole device.
    for (uint u = first_u; u < units; u += nsub() / GS) {
        // One division by the run-time split count; the rest are by constants.
        uint head = u / splits, sp = u - head * splits;
        uint t = head / KV_HEADS, kvh = head % KV_HEADS;
        uint seq = rows_sh[t].y, pos = rows_sh[t].x, lo = rows_sh[t].z;
        uint p_begin = sp * per * SG;
        uint p_end = min(p_begin + per * SG, pos + 1u);
        // The step's own k and v: the split that holds `pos` makes them and writes the caches.
        // Every load of the query heads (and of the step's k and v) is issued before the first
        // RMS scale is reduced: one round trip to the coherent level instead of two per head.
        bool mine = p_begin <= pos && pos < p_begin + per * SG;
        uint ksrc = t * qkv_n + (HEADS + kvh) * hd;
        uint vsrc = t * qkv_n + (HEADS + KV_HEADS + kvh) * hd;
        HeadRaw qraw[GH * VPL], kraw[VPL];
        vec4 knew[VPL], vnew[VPL];
        RopeW rw[VPL];
        [[unroll]] for (uint k = 0; k < VPL; k++) {
            uint v = lane + k * SG;
            rw[k] = rope_w(v < hd4 ? v : 0u, pos, qn, kn);
            knew[k] = vec4(0.0);
        }
        // Polled until every word carries this layer's tag (the QKV phase of other workgroups
        // may still be writing them). Each lane polls its own words, with no vote of the
        // subgroup in the loop: on the NVIDIA driver, a loop that went on while the subgroup's
        // minimum of `ok` was 0 ran out its polls in kernels of 512 and 1024 invocations with
        // every lane reading every word tagged (docs/persistent-kernel.md, "Tagged words in
        // wide workgroups"). The lanes meet again at the subgroup barrier below.
        uint spins = 0u;
        bool ok;
        do {
            ok = true;
            [[unroll]] for (uint k = 0; k < VPL; k++) {
                uint v = lane + k * SG;
                [[unroll]] for (uint g = 0; g < GH; g++) {
                    qraw[g * VPL + k] = HeadRaw(vec4(0.0), vec4(0.0));
                    if (v < hd4) qraw[g * VPL + k] = head_raw(t * qkv_n + (kvh * GQ + gsel * GH + g) * hd, v, tag, ok);
                }
                kraw[k] = HeadRaw(vec4(0.0), vec4(0.0));
                vnew[k] = vec4(0.0);
                if (mine && v < hd4) {
                    kraw[k] = head_raw(ksrc, v, tag, ok);
                    vnew[k] = qkv_get4(vsrc + 4u * v, tag, ok);
                }
            }
        } while (!ok && ll_again(spins, PHASES_PER_LAYER * l + 1u));
        if (l > 0u && u == first_u) phase_clock(PHASES_PER_LAYER * l + 1u);
        // This subgroup's query heads go to its part of xs (every lane reads them whole when it
        // scores its position), and the block's weights after them.
        uint qb = gl_SubgroupID * GH * (hd4 + PJ4);
        uint pb = qb + GH * hd4;
        subgroupBarrier();
        vec4 acc[GH * VPL];
        float m[GH], lsum[GH];
        [[unroll]] for (uint g = 0; g < GH; g++) {
            m[g] = NEG_INF;
            lsum[g] = 0.0;
            float ss = 0.0;
            [[unroll]] for (uint k = 0; k < VPL; k++) {
                uint v = lane + k * SG;
                if (v < hd4) ss += head_ss(qraw[g * VPL + k], v);
            }
            float scale = head_scale(ss);
            [[unroll]] for (uint k = 0; k < VPL; k++) {
                uint v = lane + k * SG;
                if (v < hd4) xs[qb + g * hd4 + v] = roped4(qraw[g * VPL + k], v, scale, rw[k].qa, rw[k].qb, rw[k]) * qscale;
                acc[g * VPL + k] = vec4(0.0);
            }
        }
        subgroupMemoryBarrierShared();
        subgroupBarrier();
        if (mine) {
            float ss = 0.0;
            [[unroll]] for (uint k = 0; k < VPL; k++) {
                uint v = lane + k * SG;
                if (v < hd4) ss += head_ss(kraw[k], v);
            }
            float scale = head_scale(ss);
            uint base4 = ((kv_slot(seq, pos) * KV_HEADS + kvh) * hd) / 4;
            [[unroll]] for (uint k = 0; k < VPL; k++) {
                uint v = lane + k * SG;
                if (v < hd4) {
                    knew[k] = roped4(kraw[k], v, scale, rw[k].ka, rw[k].kb, rw[k]);
                    // (The head group's first subgroup writes the caches.)
                    if (gsel == 0u) {
                        kv_store(kp, base4 + v, knew[k]);
                        kv_store(vp, base4 + v, vnew[k]);
                    }
                    // Attention reads what the cache holds.
                    if (KV_F16 == 1u) {
                        knew[k] = vec4(f16vec4(knew[k]));
                        vnew[k] = vec4(f16vec4(vnew[k]));
                    }
                }
            }
        }
        // This subgroup's first unit has its first block staged (stage_kv_load) where it is one of
        // the KV_STAGE first subgroups.
        uint first_p0 = max(p_begin, lo - lo % SG);
        bool staged_unit = gl_SubgroupID / GS < KV_STAGE && u == first_u;
        for (uint p0 = first_p0; p0 < p_end; p0 += SG) {
            bool staged = staged_unit && p0 == first_p0;
            uint sb = (gl_SubgroupID / GS) * KV_SLOT;
            uvec4 kc[KC];
            if (staged) {
                [[unroll]] for (uint c = 0; c < KC; c++) kc[c] = kvs[sb + lane * (KC + 1u) + c];
            } else {
                load_k(kc, kp, seq, kvh, p0, lo, p_end, pos);
            }
            bool ok = p0 + lane >= lo && p0 + lane < p_end;
            float mine_s[GH];
            [[unroll]] for (uint g = 0; g < GH; g++) {
                float d = 0.0;
                // Every lane reads the same query vec4s (a broadcast from shared memory).
                [[unroll]] for (uint c = 0; c < KC; c++) {
                    if (KV_F16 == 1u) d += dot8(kc[c], xs[qb + g * hd4 + 2u * c], xs[qb + g * hd4 + 2u * c + 1u]);
                    else d += dot(uintBitsToFloat(kc[c]), xs[qb + g * hd4 + c]);
                }
                mine_s[g] = ok ? d : NEG_INF;
            }
            if (mine && p0 <= pos && pos < p0 + SG) {
                // The step's own position, from the k in registers.
                [[unroll]] for (uint g = 0; g < GH; g++) {
                    float d = 0.0;
                    [[unroll]] for (uint k = 0; k < VPL; k++) {
                        uint v = lane + k * SG;
                        if (v < hd4) d += dot(xs[qb + g * hd4 + v], knew[k]);
                    }
                    d = subgroupAdd(d);
                    if (lane == pos - p0) mine_s[g] = d;
                }
            }
            float pj[GH];
            [[unroll]] for (uint g = 0; g < GH; g++) {
                float bm = subgroupMax(mine_s[g]);
                float nm = max(m[g], bm);
                float alpha = (m[g] == NEG_INF) ? 0.0 : exp(m[g] - nm);
                pj[g] = (mine_s[g] == NEG_INF) ? 0.0 : exp(mine_s[g] - nm);
                lsum[g] = lsum[g] * alpha + subgroupAdd(pj[g]);
                m[g] = nm;
                [[unroll]] for (uint k = 0; k < VPL; k++) acc[g * VPL + k] *= alpha;
            }
            // The weights go to shared memory, where every lane reads them four at a time (after
            // every lane has read the last block's).
            subgroupBarrier();
            [[unroll]] for (uint g = 0; g < GH; g++) xs[pb + g * PJ4 + lane / 4u][lane % 4u] = pj[g];
            subgroupMemoryBarrierShared();
            subgroupBarrier();
            KvRaw vr[VR];
            if (staged) {
                [[unroll]] for (uint j = 0; j < SG; j++) {
                    [[unroll]] for (uint k = 0; k < VPL; k++) {
                        uint v = lane + k * SG;
                        vr[j * VPL + k] = kv_staged(sb + SG * (KC + 1u) + j * KC, v, v < hd4);
                    }
                }
            } else {
                load_v(vr, vp, seq, kvh, p0, lo, p_end, pos);
            }
            [[unroll]] for (uint j = 0; j < SG; j++) {
                vec4 vv[VPL];
                [[unroll]] for (uint k = 0; k < VPL; k++) vv[k] = kv_value(vr[j * VPL + k]);
                [[unroll]] for (uint g = 0; g < GH; g++) {
                    float w = xs[pb + g * PJ4 + j / 4u][j % 4u];
                    [[unroll]] for (uint k = 0; k < VPL; k++) acc[g * VPL + k] += w * vv[k];
                }
            }
            // The step's own position (its V loaded as zeros above), from registers.
            if (mine && p0 <= pos && pos < p0 + SG) {
                uint j = pos - p0;
                [[unroll]] for (uint g = 0; g < GH; g++) {
                    float w = xs[pb + g * PJ4 + j / 4u][j % 4u];
                    [[unroll]] for (uint k = 0; k < VPL; k++) acc[g * VPL + k] += w * vnew[k];
                }
            }
        }
        [[unroll]] for (uint g = 0; g < GH; g++) {
            uint h = kvh * GQ + gsel * GH + g;
            uint base = ((t * HEADS + h) * MAX_SPLITS + sp) * (hd + 4u);
            if (lane == 0u) {
                part_put(base, m[g], tag);
                part_put(base + 1u, lsum[g], tag);
            }
            [[unroll]] for (uint k = 0; k < VPL; k++) {
                uint v = lane + k * SG;
                if (v < hd4) {
                    vec4 a = acc[g * VPL + k];
                    [[unroll]] for (uint c = 0; c < 4u; c++) part_put(base + 4u + 4u * v + c, a[c], tag);
                }
            }
        }
    }
}

// MO: a workgroup per (row, query head, OC of the head's dims): it merges those dims of the
// head's splits, then adds W_o[:, dims] . merged to the row's D (float atomics; D is summed in
// no fixed order). Lane i of subgroup s takes splits s SG + i, + NSG SG, ..., keeping a running
// max; the lanes meet at the subgroup's max, the subgroups in shared memory.
// (decoder/src/exec/persistent.rs: MERGE_DIMS; the projection below takes its 16 as a[0 .. 3].)
const uint OC = 16;
// W_o rows per invocation loaded at once.
const uint OR = 4;

// This invocation's W_o loads for rows tid + m WG of the columns from col8 (uvec4 index in a
// row) on: 2 per row, the OC dims of a unit.
void load_wo(out uvec4 w[2 * OR], W8Ref wo, uint col8) {
    uint n8 = (HEADS * HEAD_DIM) / 8;
    [[unroll]] for (uint m = 0; m < OR; m++) {
        uint r = gl_LocalInvocationIndex + m * WG;
        bool ok = r < HIDDEN;
        w[2 * m] = ok ? wo.w8[r * n8 + col8] : uvec4(0u);
        w[2 * m + 1] = ok ? wo.w8[r * n8 + col8 + 1u] : uvec4(0u);
    }
}

// The first W_o column (uvec4 index in a row) of merge unit u: its head's OC dims from c0 on.
uint wo_col8(uint u) {
    uint chunks = HEAD_DIM / OC, hc = u % (HEADS * chunks);
    return ((hc / chunks) * HEAD_DIM + (hc % chunks) * OC) / 8u;
}

// The first merge unit's W_o loads, into pf before the merge polls its partials (free there:
// QKV's prefetch is used, gate/up's not yet issued).
void prefetch_wo(uint l) {
    if (WQ == 1u) return;
    uvec4 w[2 * OR];
    load_wo(w, W8Ref(layer_ptr(l, 4)), wo_col8(gl_WorkGroupID.x));
    [[unroll]] for (uint k = 0; k < 2u * OR; k++) pf[k] = w[k];
}

// Columns c .. c + OC of W_o's row at byte rb (type t, constant at each call) times a (WQ): the
// OC / 4 loads issued before their products.
float wo_row(uint t, uint rb, uint c, vec4 a[OC / 4]) {
    vec4 w[OC / 4];
    if (t == WT_Q8_0 || t == WT_Q4_K) {
        // The OC columns share a block (Q8_0) or a sub-block (Q4_K): its scales read once.
        vec4 w8[8];
        wload_run(t, rb, c, OC, w8);
        [[unroll]] for (uint q = 0; q < OC / 4; q++) w[q] = w8[q];
    } else {
        [[unroll]] for (uint q = 0; q < OC / 4; q++) w[q] = wload4(t, rb, c + 4u * q);
    }
    float v = 0.0;
    [[unroll]] for (uint q = 0; q < OC / 4; q++) v += dot(w[q], a[q]);
    return v;
}

void phase_merge_o(uint l) {
    uint n = ROWS;
    uint hd = HEAD_DIM, chunks = hd / OC;
    uint tid = gl_LocalInvocationIndex, lane = gl_SubgroupInvocationID, sg = gl_SubgroupID;
    uint per, splits;
    split_plan(per, splits);
    W8Ref wo = W8Ref(layer_ptr(l, 4));
    // Subgroups that have splits.
    uint used = min(NSG, (splits + SG - 1u) / SG);
    uint tag = ll_tag(l);
    for (uint u = gl_WorkGroupID.x; u < n * HEADS * chunks; u += GRID) {
        uint t = u / (HEADS * chunks), hc = u % (HEADS * chunks);
        uint h = hc / chunks, c0 = (hc % chunks) * OC;
        uint col8 = wo_col8(u);
        // The weights first: they do not depend on the step.
        uvec4 w[2 * OR];
        if (WQ == 1u) {
            // Read per row below (wo_row).
        } else if (u == gl_WorkGroupID.x) {
            [[unroll]] for (uint k = 0; k < 2u * OR; k++) w[k] = pf[k];
        } else {
            load_wo(w, wo, col8);
        }
        uint base = (t * HEADS + h) * MAX_SPLITS * (hd + 4u);
        float mx = NEG_INF, lsum = 0.0;
        vec4 acc[OC / 4];
        [[unroll]] for (uint q = 0; q < OC / 4; q++) acc[q] = vec4(0.0);
        for (uint s = sg * SG + lane; s < splits; s += NSG * SG) {
            uint b = base + s * (hd + 4u);
            // Polled until every word carries this layer's tag (the attention of other
            // workgroups may still be writing them).
            float ms, ls;
            vec4 o[OC / 4];
            uint spins = 0u;
            bool ok;
            do {
                ok = true;
                ms = part_get(b, tag, ok);
                ls = part_get(b + 1u, tag, ok);
                [[unroll]] for (uint q = 0; q < OC / 4; q++) o[q] = part_get4(b + 4u + c0 + 4u * q, tag, ok);
            } while (!ok && ll_again(spins, PHASES_PER_LAYER * l + 2u));
            if (u == gl_WorkGroupID.x) phase_clock(PHASES_PER_LAYER * l + 2u);
            float nm = max(mx, ms);
            float sc = (mx == NEG_INF) ? 0.0 : exp(mx - nm);
            float ws = (ms == NEG_INF) ? 0.0 : exp(ms - nm);
            lsum = lsum * sc + ws * ls;
            [[unroll]] for (uint q = 0; q < OC / 4; q++) acc[q] = acc[q] * sc + ws * o[q];
            mx = nm;
        }
        float top = subgroupMax(mx);
        float e = (mx == NEG_INF) ? 0.0 : exp(mx - top);
        float lt = subgroupAdd(lsum * e);
        // The OC sums over the subgroup as a reduce-scatter: each exchange halves the values a
        // lane holds (the lanes with bit `off` keep the upper half), then plain exchanges while
        // lanes are left. On 32 lanes that is 16 shuffles instead of 16 subgroup sums of 5 each
        // (less code).
        float f[OC];
        [[unroll]] for (uint q = 0; q < OC; q++) f[q] = acc[q / 4u][q % 4u] * e;
        uint cnt = OC, first = 0u;
        [[unroll]] for (uint off = SG / 2u; off >= 1u; off >>= 1u) {
            if (cnt > 1u) {
                uint h = cnt / 2u;
                bool up = (lane & off) != 0u;
                [[unroll]] for (uint d = 0; d < OC / 2u; d++) {
                    if (d < h) {
                        float keep = up ? f[d + h] : f[d];
                        float send = up ? f[d] : f[d + h];
                        f[d] = keep + subgroupShuffleXor(send, off);
                    }
                }
                if (up) first += h;
                cnt = h;
            } else {
                f[0] += subgroupShuffleXor(f[0], off);
            }
        }
        // Lane holds the totals of dims first .. first + cnt - 1; with more lanes than dims,
        // SG / OC lanes hold each, and the lowest writes.
        if (SG <= OC || (lane & (SG / OC - 1u)) == 0u) {
            [[unroll]] for (uint d = 0; d < OC; d++) {
                uint i = sg * OC + first + d;
                if (d < cnt) xs[i / 4u][i % 4u] = f[d];
            }
        }
        if (subgroupElect()) {
            red_f[sg] = lt;
            red_u[sg] = floatBitsToUint(top);
        }
        barrier();
        // The subgroups' sums meet at the largest of their maxima (every invocation needs them).
        float gtop = NEG_INF;
        for (uint i = 0; i < used; i++) gtop = max(gtop, uintBitsToFloat(red_u[i]));
        float total = 0.0;
        vec4 a[OC / 4];
        [[unroll]] for (uint q = 0; q < OC / 4; q++) a[q] = vec4(0.0);
        for (uint i = 0; i < used; i++) {
            float mi = uintBitsToFloat(red_u[i]);
            float wi = (mi == NEG_INF) ? 0.0 : exp(mi - gtop);
            total += wi * red_f[i];
            [[unroll]] for (uint q = 0; q < OC / 4; q++) a[q] += wi * xs[i * (OC / 4) + q];
        }
        float inv = total > 0.0 ? 1.0 / total : 0.0;
        barrier();
        uint d = my_copy(d_at(l)) + t * HIDDEN;
        if (WQ == 1u) {
            // Columns col8 8 .. + OC of each row of W_o, in its type.
            uint to = layer_wt(l, MO), rbo = wt_row_bytes(to, HEADS * hd), c = col8 * 8u;
            qsrc = QRef(layer_ptr(l, 4u));
            for (uint r = tid; r < HIDDEN; r += WG) {
                float v;
                if (to == WT_Q8_0 && WT_HAS(WT_Q8_0)) v = wo_row(WT_Q8_0, r * rbo, c, a);
                else if (to == WT_Q4_0 && WT_HAS(WT_Q4_0)) v = wo_row(WT_Q4_0, r * rbo, c, a);
                else if (to == WT_Q4_1 && WT_HAS(WT_Q4_1)) v = wo_row(WT_Q4_1, r * rbo, c, a);
                else if (to == WT_Q4_K && WT_HAS(WT_Q4_K)) v = wo_row(WT_Q4_K, r * rbo, c, a);
                else if (to == WT_Q6_K && WT_HAS(WT_Q6_K)) v = wo_row(WT_Q6_K, r * rbo, c, a);
                else v = wo_row(WT_F16, r * rbo, c, a);
                atomicAdd(x[d + r], v * inv);
            }
            continue;
        }
        [[unroll]] for (uint m = 0; m < OR; m++) {
            uint r = tid + m * WG;
            float v = (dot8(w[2 * m], a[0], a[1]) + dot8(w[2 * m + 1], a[2], a[3])) * inv;
            if (r < HIDDEN) atomicAdd(x[d + r], v);
        }
        // Rows past OR WG (wide models), one at a time.
        uint n8 = (HEADS * hd) / 8u;
        for (uint r = OR * WG + tid; r < HIDDEN; r += WG) {
            float v = (dot8(wo.w8[r * n8 + col8], a[0], a[1]) + dot8(wo.w8[r * n8 + col8 + 1u], a[2], a[3])) * inv;
            atomicAdd(x[d + r], v);
        }
    }
}

void prefetch_gate_up(uint l) {
    if (WQ == 1u) return;
    W8Ref w = W8Ref(layer_ptr(l, 6));
    prefetch_passes(w, INTER, 0u, INTER, HIDDEN, 0u, 2u);
    prefetch_passes(w, INTER, INTER, 2u * INTER, HIDDEN, 1u, 2u);
}

// W_down^T rows (intermediate channels) loaded at once per invocation: on an H100 a workgroup's
// 24 channels (3 passes of 8 subgroups) in one round trip. 16 took two; 32 made the kernel 12 KB
// larger and every phase slower.
// (decoder/src/exec/persistent.rs: DOWN_CHANNELS, for the zeros the staging holds after the
// activations.)
const uint DE = 24;

// This invocation's W_down^T loads for output vec4 i4 (clamped to the last: the caller drops
// vec4s past the row) and channels e0 .. e0 + DE - 1 of its workgroup (clamped to the last row:
// their activations are zeros, see phase_mlp).
void load_down(out uvec2 dw[DE], W4Ref wd, uint i4, uint e0, uint per_wg, uint wg_shift) {
    uint h4 = HIDDEN / 4u, i = min(i4, h4 - 1u);
    [[unroll]] for (uint q = 0; q < DE; q++) {
        uint e = e0 + q;
        // pass_row(e % per_wg, per_wg, e / per_wg), per_wg being a power of two.
        uint c = min(pass_row(e & (per_wg - 1u), per_wg, e >> wg_shift), INTER - 1u);
        dw[q] = wd.u2[c * h4 + i];
    }
}

// Row of gate and up of this subgroup in pass j (e_n channels a workgroup): the f16 kernel's
// passes stride the grid (W_down^T's rows, a contiguous one per channel, do not mind where a
// workgroup's channels are); in GGUF blocks a workgroup's channels are consecutive, so that its
// share of each row of W_down is one span (persistent_quant.glsl, down_rows).
uint mlp_row(uint ks, uint j, uint e_n) {
    if (WQ == 0u) return mv_row(ks, j);
    return gl_WorkGroupID.x * e_n + j * (NSG >> findLSB(ks)) + (gl_SubgroupID >> findLSB(ks));
}

// UD: act = silu(gate . norm(x)) * (up . norm(x)) for this workgroup's rows (W = [gate; up]; x =
// R[cur] + D), kept in shared memory after the staged row; then R[nxt] += W_down[:, those rows]
// . act with float atomics, read from W_down^T (a contiguous row per channel; in GGUF blocks from
// W_down itself, down_rows). The workgroup adds the vec4s of D it owns to R[nxt] as it stages
// them, so R[nxt] then holds R[cur] + D + down(act).
void phase_mlp(uint l) {
    uint n = ROWS;
    uint rows = INTER, ks = split_ks(rows), passes = mv_passes(rows, ks);
    uint per_wg = NSG >> findLSB(ks), e_n = passes * per_wg, wg_shift = findLSB(per_wg);
    uint nxt = 1u - l % 2u;
    uint tid = gl_LocalInvocationIndex, h4 = HIDDEN / 4u;
    W8Ref w = W8Ref(layer_ptr(l, 6));
    W4Ref wd = W4Ref(layer_ptr(l, 10));
    for (uint t = 0; t < n; t++) {
        // The down-projection's first loads do not depend on the step: they go out now and
        // travel while gate/up streams, instead of after the activations.
        // (After the staged row's loads: issued before them, they delayed the row and took as
        // much from the merge as they gave the MLP.)
        float scale = stage(SRC_XD, t, layer_ptr(l, 5), l);
        uvec2 dw[DE];
        if (WQ == 0u) load_down(dw, wd, tid, 0u, per_wg, wg_shift);
        // Rows in units (Q4_K, Q6_K): gate's and up's rows of QR / 2 passes at once.
        uint tg = layer_wt(l, MGATE), tu = layer_wt(l, MUP);
        uint bg = wt_row_bytes(tg, HIDDEN), bu = wt_row_bytes(tu, HIDDEN);
        bool units_gu = WQ == 1u && rows_in_units(tg) && rows_in_units(tu);
        for (uint j = 0; units_gu && j < passes; j += QR / 2u) {
            uvec2 tr[QR];
            uint nr = 0u;
            [[unroll]] for (uint k = 0; k < QR / 2u; k++) {
                uint r = mlp_row(ks, j + k, e_n);
                tr[2u * k] = uvec2(tg, 0u);
                tr[2u * k + 1u] = uvec2(tu, 0u);
                if (j + k < passes && r < rows) {
                    tr[2u * k].y = r * bg;
                    tr[2u * k + 1u].y = INTER * bg + r * bu;
                    nr = 2u * k + 2u;
                }
            }
            float s[QR];
            rows_dot(layer_ptr(l, 6u), tr, nr, HIDDEN, ks, s);
            [[unroll]] for (uint k = 0; k < QR / 2u; k++) {
                if (j + k < passes) {
                    uint r = mlp_row(ks, j + k, e_n);
                    float g = row_total(s[2u * k], ks) * scale;
                    float u = row_total(s[2u * k + 1u], ks) * scale;
                    uint a = HIDDEN + (j + k) * per_wg + (gl_SubgroupID >> findLSB(ks));
                    if (writes_row(ks)) xs[a / 4u][a % 4u] = r < rows ? g / (1.0 + exp(-g)) * u : 0.0;
                }
            }
        }
        for (uint j = 0; !units_gu && j < passes; j++) {
            uint r = mlp_row(ks, j, e_n);
            vec2 gu = vec2(0.0);
            if (r < rows) {
                if (WQ == 1u) {
                    // Gate's row, then up's, each in its own type.
                    gu.x = part_dot_q(layer_ptr(l, 6u), tg, r * bg, HIDDEN, ks);
                    gu.y = part_dot_q(layer_ptr(l, 6u), tu, INTER * bg + r * bu, HIDDEN, ks);
                } else {
                    uvec4 p0[PF], p1[PF];
                    pass_pf(j, 0u, 2u, p0);
                    pass_pf(j, 1u, 2u, p1);
                    gu = part_dot2(w, r, r + INTER, HIDDEN, ks, t == 0u && j < pf_passes(2u), p0, p1);
                }
            }
            float g = row_total(gu.x, ks) * scale;
            float u = row_total(gu.y, ks) * scale;
            // Channel e = j per_wg + slot of this workgroup, after the staged row.
            uint a = HIDDEN + j * per_wg + (gl_SubgroupID >> findLSB(ks));
            if (writes_row(ks)) xs[a / 4u][a % 4u] = r < rows ? g / (1.0 + exp(-g)) * u : 0.0;
        }
        // The DE slots after the last channel read as zeros (the f16 loads below; down_rows
        // reads no channel past e_n).
        if (WQ == 0u && tid < DE) xs[(HIDDEN + e_n + tid) / 4u][(HIDDEN + e_n + tid) % 4u] = 0.0;
        barrier();
        if (WQ == 1u) {
            // W_down's rows in their type, at this workgroup's channels (down_rows).
            uint td = layer_wt(l, MDOWN), rbd = wt_row_bytes(td, INTER);
            uint c0 = gl_WorkGroupID.x * e_n;
            qsrc = QRef(layer_ptr(l, 7u));
            if (td == WT_Q8_0 && WT_HAS(WT_Q8_0)) down_rows(WT_Q8_0, rbd, c0, e_n);
            else if (td == WT_Q4_0 && WT_HAS(WT_Q4_0)) down_rows(WT_Q4_0, rbd, c0, e_n);
            else if (td == WT_Q4_1 && WT_HAS(WT_Q4_1)) down_rows(WT_Q4_1, rbd, c0, e_n);
            else if (td == WT_Q4_K && WT_HAS(WT_Q4_K)) down_rows(WT_Q4_K, rbd, c0, e_n);
            else if (td == WT_Q6_K && WT_HAS(WT_Q6_K)) down_rows(WT_Q6_K, rbd, c0, e_n);
            else down_rows(WT_F16, rbd, c0, e_n);
        }
        for (uint i4 = tid; WQ == 0u && i4 < h4; i4 += WG) {
            vec4 acc = vec4(0.0);
            for (uint e0 = 0; e0 < e_n; e0 += DE) {
                // No guards: a channel past the last row reads the last row and one past e_n
                // any row, and their activations are zeros (rows past the last were staged as
                // zeros, and the DE slots after e_n were cleared), so they add nothing. The
                // loads for (i4, e0) are in dw; the next (i4, e0)'s go out before these are used.
                uvec2 cw[DE] = dw;
                uint ne = e0 + DE, ni = i4;
                if (ne >= e_n) {
                    ne = 0u;
                    ni += WG;
                }
                if (ni < h4) load_down(dw, wd, ni, ne, per_wg, wg_shift);
                // The activations of channels e0 .. e0 + DE - 1: whole vec4s of xs (hidden and
                // DE are multiples of 4), so every component index is a constant.
                uint a4 = (HIDDEN + e0) / 4u;
                [[unroll]] for (uint q = 0; q < DE; q++) acc += xs[a4 + q / 4u][q % 4u] * half4(cw[q].x, cw[q].y);
            }
            // Over the staged row, which nothing reads any more: the atomics go out from
            // consecutive invocations to consecutive words (a vec4 per invocation would take
            // four times the memory transactions).
            xs[i4] = acc;
        }
        barrier();
        uint o = my_copy(res_at(nxt)) + t * HIDDEN;
        for (uint i = tid; i < HIDDEN; i += WG) atomicAdd(x[o + i], xs[i / 4u][i % 4u]);
        barrier();
    }
}

// Keeps (value, index) pairs ordered: the larger value, then the lower index.
bool better(float v, uint i, float bv, uint bi) {
    const uint NONE = 0xffffffffu;
    return i != NONE && (bi == NONE || v > bv || (v == bv && i < bi));
}

// The best of every invocation's (bv, bi), in invocation 0: the subgroups' bests (the largest
// value, then the lowest index with it; a pair without an index has the value -inf and the
// index NONE, so it loses to every pair with one) meet in red_f and red_u, and invocation 0
// folds those NSG. (Invocation 0 folding all WG pairs in a serial loop put a long serial chain at
// the step's tail.) The caller's next barrier frees red_f and red_u.
void wg_best(inout float bv, inout uint bi) {
    const uint NONE = 0xffffffffu;
    float sv = subgroupMax(bv);
    uint si = subgroupMin(bv == sv ? bi : NONE);
    if (subgroupElect()) {
        red_f[gl_SubgroupID] = sv;
        red_u[gl_SubgroupID] = si;
    }
    barrier();
    if (gl_LocalInvocationIndex == 0u) {
        bv = sv;
        bi = si;
        for (uint i = 1u; i < NSG; i++) {
            if (better(red_f[i], red_u[i], bv, bi)) {
                bv = red_f[i];
                bi = red_u[i];
            }
        }
    }
}

// H: logits[t] = lm_head . norm(x[t]); each workgroup writes the best of its rows.
void phase_head() {
    uint n = ROWS;
    uint G = GRID;
    const uint NONE = 0xffffffffu;
    for (uint t = 0; t < n; t++) {
        // The final norm's weights come through binding 7: stage them by hand.
        uint tid = gl_LocalInvocationIndex;
        float ss = 0.0;
        for (uint i = tid; i < HIDDEN / 4; i += WG) {
            vec4 v = sum4(res_at(LAYERS % 2u), t * HIDDEN + 4 * i);
            ss += dot(v, v);
            xs[xsw(i)] = v * (i == tid ? norm_pf : final_norm4[i]);
        }
        float scale = inversesqrt(wg_sum(ss) / float(HIDDEN) + EPS);
        barrier();
        float bv = NEG_INF;
        uint bi = NONE;
        // HR rows per subgroup at a time (r0 + k nsub), the first HC chunks per lane of each
        // loaded at once: HR x HC loads in flight per lane.
        uint n8 = HIDDEN / 8, lane = gl_SubgroupInvocationID;
        // An lm_head in GGUF blocks: in units (Q4_K, Q6_K), QR rows per subgroup at a time; else
        // a row at a time.
        for (uint r0 = gl_WorkGroupID.x * NSG + gl_SubgroupID; rows_in_units(WT_HEAD) && r0 < VOCAB; r0 += QR * nsub()) {
            uvec2 tr[QR];
            uint nr = 0u;
            [[unroll]] for (uint k = 0; k < QR; k++) {
                uint r = r0 + k * nsub();
                tr[k] = uvec2(WT_HEAD, r < VOCAB ? r * wt_row_bytes(WT_HEAD, HIDDEN) : 0u);
                if (r < VOCAB) nr = k + 1u;
            }
            float s[QR];
            rows_dot(head_ptr(), tr, nr, HIDDEN, 1u, s);
            [[unroll]] for (uint k = 0; k < QR; k++) {
                uint r = r0 + k * nsub();
                float v = s[k] * scale;
                if (r < VOCAB) {
                    if (subgroupElect()) logits[t * VOCAB + r] = v;
                    if (better(v, r, bv, bi)) {
                        bv = v;
                        bi = r;
                    }
                }
            }
        }
        for (uint r = gl_WorkGroupID.x * NSG + gl_SubgroupID; !WT_IS_F16(WT_HEAD) && !rows_in_units(WT_HEAD) && r < VOCAB; r += nsub()) {
            float s = part_dot_q(head_ptr(), WT_HEAD, r * wt_row_bytes(WT_HEAD, HIDDEN), HIDDEN, 1u) * scale;
            if (subgroupElect()) logits[t * VOCAB + r] = s;
            if (better(s, r, bv, bi)) {
                bv = s;
                bi = r;
            }
        }
        for (uint r0 = gl_WorkGroupID.x * NSG + gl_SubgroupID; WT_IS_F16(WT_HEAD) && r0 < VOCAB; r0 += HR * nsub()) {
            uvec4 w[HR * HC];
            [[unroll]] for (uint k = 0; k < HR; k++) {
                uint r = r0 + k * nsub();
                [[unroll]] for (uint c = 0; c < HC; c++) {
                    uint i = lane + c * SG;
                    w[k * HC + c] = (r < VOCAB && i < n8) ? head8[r * n8 + i] : uvec4(0u);
                }
            }
            [[unroll]] for (uint k = 0; k < HR; k++) {
                uint r = r0 + k * nsub();
                float acc = 0.0;
                [[unroll]] for (uint c = 0; c < HC; c++) {
                    uint i = lane + c * SG;
                    if (i < n8) acc += dot8(w[k * HC + c], xs[xsw(2 * i)], xs[xsw(2 * i + 1)]);
                }
                // Rows wider than HC chunks per lane: the rest, one load at a time.
                if (r < VOCAB) {
                    for (uint i = lane + HC * SG; i < n8; i += SG) acc += dot8(head8[r * n8 + i], xs[xsw(2 * i)], xs[xsw(2 * i + 1)]);
                }
                float s = subgroupAdd(acc) * scale;
                if (r < VOCAB) {
                    if (subgroupElect()) logits[t * VOCAB + r] = s;
                    if (better(s, r, bv, bi)) {
                        bv = s;
                        bi = r;
                    }
                }
            }
        }
        wg_best(bv, bi);
        if (tid == 0u) {
            sy.best[2u * (t * G + gl_WorkGroupID.x)] = floatBitsToUint(bv);
            sy.best[2u * (t * G + gl_WorkGroupID.x) + 1u] = bi;
        }
        barrier();
    }
}

// In the last workgroup to finish: reduces the groups' bests into the output.
void phase_argmax() {
    uint n = ROWS;
    uint G = GRID;
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
        wg_best(bv, bi);
        if (tid == 0u) {
            result[t] = bi;
            result[n + t] = floatBitsToUint(bv);
        }
        barrier();
    }
}

void main() {
    // Zeroed before the first workgroup barrier, which orders it before the subgroups' counts.
    if (gl_LocalInvocationIndex == 0u) alive_sh = 0u;
    if (pc.probe == 1u) {
        for (uint i = 0; i < 4u; i++) {
            if (!grid_sync()) return;
        }
        last_to_finish();
        return;
    }
    // The status word reads 2 ("did not finish") until the last workgroup has written the tokens.
    if (gl_WorkGroupID.x == 0u && gl_LocalInvocationIndex == 0u) result[2 * ROWS] = 2u;
    phase_clock(0u);
    kv_len = params.kv_len;
    tag_base = sy.epoch;
    // Read after the workgroup barriers of layer 0's first stage() at the earliest (the K and V
    // staging's loads), which order these stores before them.
    for (uint t = gl_LocalInvocationIndex; t < ROWS; t += WG) rows_sh[t] = rows[t];
    prefetch_qkv(0u);
    prefetch_norm(layer_ptr(0u, 0u));
    for (uint l = 0; l < LAYERS; l++) {
        uint c = PHASES_PER_LAYER * l;
        phase_qkv(l);
        if (l == 0u) {
            // Orders layer 0's clear of D[0] (and the step's rows_sh) before every use.
            grid_arrive();
            if (!grid_wait(c + 1u)) return;
        } else {
            // The attention polls the rows it needs (tagged words); the K and V rows staged in
            // the QKV phase are in kvs for every subgroup after this barrier.
            barrier();
        }
        phase_attention(l);
        // The workgroup's subgroups meet (shared memory changes hands); the merge polls the
        // partials it needs (tagged words).
        barrier();
        prefetch_wo(l);
        phase_merge_o(l);
        grid_arrive();
        prefetch_gate_up(l);
        prefetch_norm(layer_ptr(l, 5));
        if (!grid_wait(c + 3u)) return;
        phase_mlp(l);
        grid_arrive();
        if (l + 1u < LAYERS) {
            prefetch_qkv(l + 1u);
            prefetch_norm(layer_ptr(l + 1u, 0u));
        } else if (gl_LocalInvocationIndex < HIDDEN / 4u) {
            norm_pf = final_norm4[gl_LocalInvocationIndex];
        }
        if (!grid_wait(c + 4u)) return;
    }
    phase_head();
    if (last_to_finish()) {
        phase_argmax();
        if (gl_LocalInvocationIndex == 0u) {
#ifdef PHASE_CLOCKS
            clk[PHASES_PER_LAYER * LAYERS + 1u] = clockRealtime2x32EXT();
#endif
            // fail_step's word where a wait ran out, 3 where a subgroup's loops were stopped
            // (last_to_finish).
            result[2 * ROWS] = sy.fail;
        }
    }
}
