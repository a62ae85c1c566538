#version 450
// No push constants and no built-ins of the instrumenter's: it declares both.
layout(local_size_x = 8, local_size_y = 8) in;
layout(std430, binding = 0) buffer Data { uint data[]; };

void main() {
    data[gl_GlobalInvocationID.y * 64u + gl_GlobalInvocationID.x] = 1u;
}
