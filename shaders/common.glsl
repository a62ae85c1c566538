// Shared definitions for decodescope's compute shaders.
//
// Conventions (see decoder/src/exec/kernels.rs for the Rust side of every push-constant block):
// - bindings are storage buffers in set 0, numbered in the order the Rust side lists them;
// - activations are f32, matrix weights f16 or GGUF blocks decoded on load (quant.glsl; row-major
//   [out, in]), norm weights f32;
// - per-token values (positions, KV length) come from the TokenParams buffer, never from push
//   constants, so a command buffer recorded once can be replayed for every token;
// - the workgroup size is specialization constant 0 (`WG`).

#extension GL_EXT_control_flow_attributes : enable
#extension GL_EXT_shader_16bit_storage : require

layout(constant_id = 0) const uint WG = 256;

// Per-step values written by the host before each submit. The params buffer holds this header
// followed by one `uvec4` per token row of the step (kernels that need them declare
// `uvec4 rows[]` after the header): rows[t] = (pos, seq, lo, 0): row t is position `pos` of
// sequence `seq` and attends positions lo..pos (lo > 0 only under a sliding window). A prompt
// step's rows are consecutive positions of one sequence; a decode step has one row per sequence.
struct TokenParams {
    uint pos0;      // position of the step's first row
    uint n_tokens;  // rows in this step (the batch when decoding)
    uint kv_len;    // the largest pos + 1 over the step's rows
    uint n_seqs;    // sequences in this step
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
