// KV cache addressing, shared by every kernel that reads or writes the caches (the host mirror is
// `KvGeometry::slot` in decoder/src/kv/mod.rs). A slot is one row of kv_heads * head_dim elements
// of a layer's K or V buffer:
//   contiguous (KV_LAYOUT 0): slot = seq * KV_UNIT + pos                 (KV_UNIT: max_seq)
//   paged      (KV_LAYOUT 1): slot = table[seq][pos / KV_UNIT] * KV_UNIT + pos % KV_UNIT
//                                                                        (KV_UNIT: block size)
//   rotating   (KV_LAYOUT 2): slot = seq * KV_UNIT + pos % KV_UNIT       (KV_UNIT: ring slots)
// Elements are f16 (KV_F16 = 1) or f32.
//
// Before including, define KV_TABLE_BINDING and, for each cache the kernel touches,
// KV_K_BINDING / KV_V_BINDING, and KV_READ (loads) and/or KV_WRITE (stores).
// (common.glsl enables GL_EXT_shader_16bit_storage.)

layout(constant_id = 4) const uint KV_LAYOUT = 0;
layout(constant_id = 5) const uint KV_UNIT = 1;
layout(constant_id = 6) const uint KV_TABLE_STRIDE = 1;
layout(constant_id = 7) const uint KV_F16 = 1;

layout(set = 0, binding = KV_TABLE_BINDING) readonly buffer KvTable { uint kv_table[]; };

#ifdef KV_WRITE
#define KV_QUAL
#else
#define KV_QUAL readonly
#endif

#ifdef KV_K_BINDING
layout(set = 0, binding = KV_K_BINDING) KV_QUAL buffer KCache32 { float k32[]; };
layout(set = 0, binding = KV_K_BINDING) KV_QUAL buffer KCache16 { float16_t k16[]; };
layout(set = 0, binding = KV_K_BINDING) KV_QUAL buffer KCache32v { vec4 k32v[]; };
layout(set = 0, binding = KV_K_BINDING) KV_QUAL buffer KCache16v { f16vec4 k16v[]; };
#endif
#ifdef KV_V_BINDING
layout(set = 0, binding = KV_V_BINDING) KV_QUAL buffer VCache32 { float v32[]; };
layout(set = 0, binding = KV_V_BINDING) KV_QUAL buffer VCache16 { float16_t v16[]; };
layout(set = 0, binding = KV_V_BINDING) KV_QUAL buffer VCache32v { vec4 v32v[]; };
layout(set = 0, binding = KV_V_BINDING) KV_QUAL buffer VCache16v { f16vec4 v16v[]; };
#endif

// The paged layout's block for (seq, logical block i).
uint kv_block(uint seq, uint i) { return kv_table[seq * KV_TABLE_STRIDE + i]; }

uint kv_slot(uint seq, uint pos) {
    if (KV_LAYOUT == 1u) return kv_block(seq, pos / KV_UNIT) * KV_UNIT + pos % KV_UNIT;
    if (KV_LAYOUT == 2u) return seq * KV_UNIT + pos % KV_UNIT;
    return seq * KV_UNIT + pos;
}

// Element i (scalar) or vec4 i4 of the caches.
#if defined(KV_READ) && defined(KV_K_BINDING)
float k_load(uint i) { return KV_F16 == 1u ? float(k16[i]) : k32[i]; }
vec4 k_load4(uint i4) { return KV_F16 == 1u ? vec4(k16v[i4]) : k32v[i4]; }
#endif
#if defined(KV_READ) && defined(KV_V_BINDING)
float v_load(uint i) { return KV_F16 == 1u ? float(v16[i]) : v32[i]; }
vec4 v_load4(uint i4) { return KV_F16 == 1u ? vec4(v16v[i4]) : v32v[i4]; }
#endif
#if defined(KV_WRITE) && defined(KV_K_BINDING)
void k_store(uint i, float x) {
    if (KV_F16 == 1u) k16[i] = float16_t(x); else k32[i] = x;
}
void k_store4(uint i4, vec4 x) {
    if (KV_F16 == 1u) k16v[i4] = f16vec4(x); else k32v[i4] = x;
}
#endif
#if defined(KV_WRITE) && defined(KV_V_BINDING)
void v_store(uint i, float x) {
    if (KV_F16 == 1u) v16[i] = float16_t(x); else v32[i] = x;
}
void v_store4(uint i4, vec4 x) {
    if (KV_F16 == 1u) v16v[i4] = f16vec4(x); else v32v[i4] = x;
}
#endif
