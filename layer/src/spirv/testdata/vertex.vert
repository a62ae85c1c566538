#version 450
// Not a compute shader: refused.
void main() { gl_Position = vec4(0.0); }
