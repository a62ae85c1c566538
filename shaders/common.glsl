// Shared definitions for decodescope's compute shaders.
//
// Conventions (see decoder/src/exec/kernels.rs for the Rust side of every push-constant block):
// - bindings are storage buffers in set 0, numbered in the order the Rust side lists them;
// - activations are f32, matrix weights f16 (row-major [out, in]), norm weights f32;
// - per-token values (positions, KV length) come from the TokenParams buffer, never from push
//   constants, so a command buffer recorded once can be replayed for every token;
// - the workgroup size is specialization constant 0 (`WG`).

#extension GL_EXT_control_flow_attributes : enable

layout(constant_id = 0) const uint WG = 256;

// Per-step values written by the host before each submit.
struct TokenParams {
    uint pos0;      // position of the step's first token
    uint n_tokens;  // tokens in this step (1 when decoding)
    uint kv_len;    // cached positions attended by the step's last token (pos0 + n_tokens)
    uint pad0;
};

// Block-wide sum over WG invocations through shared memory; every invocation gets the total.
shared float red_scratch[WG];
float block_sum(float v) {
    uint t = gl_LocalInvocationID.x;
    red_scratch[t] = v;
    barrier();
    for (uint s = WG / 2; s > 0; s >>= 1) {
        if (t < s) red_scratch[t] += red_scratch[t + s];
        barrier();
    }
    float total = red_scratch[0];
    barrier();
    return total;
}

float block_max(float v) {
    uint t = gl_LocalInvocationID.x;
    red_scratch[t] = v;
    barrier();
    for (uint s = WG / 2; s > 0; s >>= 1) {
        if (t < s) red_scratch[t] = max(red_scratch[t], red_scratch[t + s]);
        barrier();
    }
    float total = red_scratch[0];
    barrier();
    return total;
}
