//! Runs one compute kernel on host data: the building block of every kernel test and of the
//! first-kernel self-check that `decoder selfcheck` runs. Not used on the decode path.

use crate::shaders::Shader;
use crate::vk::{
    BufRange, BufferDesc, Gpu, PipelineDesc, Queue, Recorder, SPEC_CONSTANTS, VkResult,
};

/// One binding of a kernel run: its initial contents (f32, f16 bits or u32 words as bytes) and
/// whether its contents are read back after the run.
#[derive(Clone, Debug)]
pub struct Binding {
    pub bytes: Vec<u8>,
    pub read_back: bool,
}

impl Binding {
    pub fn input_f32(v: &[f32]) -> Self {
        Binding {
            bytes: bytemuck::cast_slice(v).to_vec(),
            read_back: false,
        }
    }
    pub fn input_f16(v: &[f32]) -> Self {
        let h: Vec<half::f16> = v.iter().map(|x| half::f16::from_f32(*x)).collect();
        Binding {
            bytes: bytemuck::cast_slice(&h).to_vec(),
            read_back: false,
        }
    }
    pub fn input_u32(v: &[u32]) -> Self {
        Binding {
            bytes: bytemuck::cast_slice(v).to_vec(),
            read_back: false,
        }
    }
    /// An output of `n` f32 values, initialised to `init`.
    pub fn output_f32(n: usize, init: f32) -> Self {
        Binding {
            bytes: bytemuck::cast_slice(&vec![init; n]).to_vec(),
            read_back: true,
        }
    }
    /// An input that the kernel also writes (read back after the run).
    pub fn inout_f32(v: &[f32]) -> Self {
        Binding {
            bytes: bytemuck::cast_slice(v).to_vec(),
            read_back: true,
        }
    }
}

/// A single kernel launch.
#[derive(Clone, Debug)]
pub struct Launch {
    pub shader: Shader,
    pub push: Vec<u8>,
    pub groups: [u32; 3],
    /// Specialization constants by id (0: workgroup size); unspecified ids are 0 and must have
    /// defaults in the shader, so pass every constant the shader declares.
    pub spec: [u32; SPEC_CONSTANTS],
}

/// Uploads the bindings, runs the launch once, and returns the read-back bindings' bytes (in
/// binding order; `None` for bindings not read back).
pub fn run_kernel(
    gpu: &Gpu,
    launch: &Launch,
    bindings: &[Binding],
) -> VkResult<Vec<Option<Vec<u8>>>> {
    let mut rec = Recorder::new(gpu)?;
    let pipeline = gpu.create_pipeline(PipelineDesc {
        shader: launch.shader,
        bindings: bindings.len() as u32,
        push_bytes: launch.push.len() as u32,
        spec: launch.spec,
        push_descriptor: false,
    })?;
    let mut buffers = Vec::with_capacity(bindings.len());
    for (i, b) in bindings.iter().enumerate() {
        let buf = gpu.create_buffer(
            BufferDesc::device(b.bytes.len() as u64),
            &format!("binding{i}"),
        )?;
        rec.upload(&buf, 0, &b.bytes)?;
        buffers.push(buf);
    }
    let set = rec.alloc_set(&pipeline, crate::vk::SetLifetime::Transient)?;
    let ranges: Vec<BufRange<'_>> = buffers.iter().map(BufRange::whole).collect();
    rec.write_set(set, &ranges);
    let cmd = rec.new_cmd(Queue::Compute)?;
    let fence = rec.new_fence()?;
    rec.begin(cmd)?;
    rec.bind_pipeline(cmd, &pipeline);
    rec.bind_set(cmd, &pipeline, set);
    if !launch.push.is_empty() {
        rec.push_constants(cmd, &pipeline, &launch.push);
    }
    rec.dispatch(cmd, launch.groups);
    rec.full_barrier(cmd);
    rec.end(cmd)?;
    rec.submit(&[cmd], Some(fence))?;
    rec.wait(fence)?;
    let mut out = Vec::with_capacity(bindings.len());
    for (b, buf) in bindings.iter().zip(&buffers) {
        if b.read_back {
            let mut bytes = vec![0u8; b.bytes.len()];
            rec.download(buf, 0, &mut bytes)?;
            out.push(Some(bytes));
        } else {
            out.push(None);
        }
    }
    Ok(out)
}

/// Reinterprets read-back bytes as f32.
pub fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}
