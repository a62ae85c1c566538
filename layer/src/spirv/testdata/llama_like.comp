#version 450
// What llama.cpp's shaders use: a specialization-constant workgroup size, shared memory,
// subgroup arithmetic, 16-bit storage, 64-bit integers and a push-constant block of many members.
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(local_size_x_id = 0, local_size_y = 1, local_size_z = 1) in;
layout(constant_id = 1) const uint ROWS = 2;
layout(std430, binding = 0) readonly buffer A { float16_t a[]; };
layout(std430, binding = 1) writeonly buffer D { float d[]; };
layout(push_constant) uniform Params {
    uint ne00; uint ne01; uint nb00; uint nb01;
    uint64_t base; float eps; uint misalign;
} p;
shared float partial[64];

void main() {
    const uint row = gl_WorkGroupID.x * ROWS;
    if (row >= p.ne01) {
        return;
    }
    float sum = 0.0;
    for (uint i = gl_LocalInvocationID.x; i < p.ne00; i += gl_WorkGroupSize.x) {
        sum += float(a[uint(p.base) + row * p.nb01 + i * p.nb00]);
    }
    sum = subgroupAdd(sum);
    if (gl_SubgroupInvocationID == 0u) {
        partial[gl_SubgroupID] = sum;
    }
    barrier();
    if (gl_LocalInvocationID.x == 0u) {
        float total = 0.0;
        for (uint s = 0u; s < gl_NumSubgroups; ++s) {
            total += partial[s];
        }
        d[row] = total + p.eps;
    }
}
