// The kernels of wgpu-step, one invocation per element of `data`. WORKGROUP is replaced by
// kernel.rs's constant before the module is created (one source of truth for the dispatch size).

@group(0) @binding(0) var<storage, read_write> data: array<u32>;
// (dispatch index + 1, 0, 0, 0): the slot of the params buffer at this dispatch's dynamic offset.
@group(0) @binding(1) var<uniform> params: vec4<u32>;

// The prologue's setup dispatch, once: data[i] = 3 * data[i].
@compute @workgroup_size(WORKGROUP)
fn scale(@builtin(global_invocation_id) id: vec3<u32>) {
    if id.x < arrayLength(&data) {
        data[id.x] = data[id.x] * 3u;
    }
}

// Every dispatch of a step: data[i] += dispatch index + 1, so each result depends on every
// dispatch before it.
@compute @workgroup_size(WORKGROUP)
fn add(@builtin(global_invocation_id) id: vec3<u32>) {
    if id.x < arrayLength(&data) {
        data[id.x] = data[id.x] + params.x;
    }
}
