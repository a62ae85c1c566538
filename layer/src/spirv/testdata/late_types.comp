#version 450
// No built-ins used, floats only in the push constants: the 32-bit unsigned int, the bool and
// uvec3 are declared after the push-constant struct (or not at all) and must move or be added.
layout(local_size_x = 32) in;
layout(std430, binding = 0) buffer Data { float data[]; };
layout(push_constant) uniform Push { float scale; float bias; } pc;

void main() {
    float x = pc.scale * 2.0 + pc.bias;
    data[gl_GlobalInvocationID.x] = x;
}
