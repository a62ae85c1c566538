//! One device's work: a storage buffer of [`ELEMENTS`] u32s, the two pipelines of
//! `kernels.wgsl`, and the three kinds of submit the program makes (prologue, step, read-back).
//! Every submit is followed by a blocking `device.poll` on that submission.

use anyhow::{Context, Result, bail};

/// Elements of the data buffer (16 KiB: small, lavapipe runs it on the CPU).
pub const ELEMENTS: u32 = 4096;
/// Invocations per workgroup; substituted into `kernels.wgsl`.
const WORKGROUP: u32 = 64;
const DATA_BYTES: u64 = ELEMENTS as u64 * 4;
/// Bytes of one params slot as the shader reads it (`vec4<u32>`).
const PARAMS_BYTES: u64 = 16;
const SHADER: &str = include_str!("kernels.wgsl");

/// The labels the program gives its objects (none with `--no-labels`). The compute passes and
/// pipelines are the ones a capture sees around and in its dispatches.
pub mod label {
    pub const SHADER_MODULE: &str = "wgpu-step kernels";
    pub const SCALE_PIPELINE: &str = "scale";
    pub const ADD_PIPELINE: &str = "add";
    pub const PROLOGUE_PASS: &str = "prologue";
    pub const STEP_PASS: &str = "step";
    pub const READBACK_ENCODER: &str = "readback";
}

/// What the data buffer holds after the prologue and `steps` steps of `dispatches` dispatches:
/// element `i` starts as `i`, the prologue triples it, and dispatch `d` of every step adds
/// `d + 1` (u32 arithmetic wraps, as the shader's does).
pub fn expected(i: u32, steps: u32, dispatches: u32) -> u32 {
    let per_step = dispatches.wrapping_mul(dispatches.wrapping_add(1)) / 2;
    i.wrapping_mul(3).wrapping_add(steps.wrapping_mul(per_step))
}

pub struct Work {
    device: wgpu::Device,
    queue: wgpu::Queue,
    data: wgpu::Buffer,
    params: wgpu::Buffer,
    readback: wgpu::Buffer,
    bind_group: wgpu::BindGroup,
    scale: wgpu::ComputePipeline,
    add: wgpu::ComputePipeline,
    dispatches: u32,
    /// Bytes between params slots: the device's dynamic uniform offset alignment.
    param_stride: u32,
    labels: bool,
}

impl Work {
    /// Creates the buffers, the bind group and both pipelines; submits nothing.
    pub fn new(
        device: wgpu::Device,
        queue: wgpu::Queue,
        dispatches: u32,
        labels: bool,
    ) -> Result<Self> {
        let l = |s: &'static str| labels.then_some(s);
        let param_stride = device
            .limits()
            .min_uniform_buffer_offset_alignment
            .max(PARAMS_BYTES as u32);
        let params_bytes = u64::from(dispatches) * u64::from(param_stride);
        if params_bytes > device.limits().max_buffer_size {
            bail!(
                "--dispatches {dispatches} needs a params buffer of {params_bytes} bytes, more \
                 than the device allows ({}); use fewer dispatches",
                device.limits().max_buffer_size
            );
        }
        let data = device.create_buffer(&wgpu::BufferDescriptor {
            label: l("data"),
            size: DATA_BYTES,
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let params = device.create_buffer(&wgpu::BufferDescriptor {
            label: l("params"),
            size: params_bytes,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let readback = device.create_buffer(&wgpu::BufferDescriptor {
            label: l("readback"),
            size: DATA_BYTES,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: l("data and params"),
            entries: &[
                wgpu::BindGroupLayoutEntry {
                    binding: 0,
                    visibility: wgpu::ShaderStages::COMPUTE,
                    ty: wgpu::BindingType::Buffer {
                        ty: wgpu::BufferBindingType::Storage { read_only: false },
                        has_dynamic_offset: false,
                        min_binding_size: wgpu::BufferSize::new(4),
                    },
                    count: None,
                },
                wgpu::BindGroupLayoutEntry {
                    binding: 1,
                    visibility: wgpu::ShaderStages::COMPUTE,
                    ty: wgpu::BindingType::Buffer {
                        ty: wgpu::BufferBindingType::Uniform,
                        has_dynamic_offset: true,
                        min_binding_size: wgpu::BufferSize::new(PARAMS_BYTES),
                    },
                    count: None,
                },
            ],
        });
        let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: l("data and params"),
            layout: &layout,
            entries: &[
                wgpu::BindGroupEntry {
                    binding: 0,
                    resource: data.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 1,
                    resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                        buffer: &params,
                        offset: 0,
                        size: wgpu::BufferSize::new(PARAMS_BYTES),
                    }),
                },
            ],
        });
        let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: l("data and params"),
            bind_group_layouts: &[&layout],
            push_constant_ranges: &[],
        });
        let source = SHADER.replace("WORKGROUP", &WORKGROUP.to_string());
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: l(label::SHADER_MODULE),
            source: wgpu::ShaderSource::Wgsl(source.into()),
        });
        let pipeline = |name: &'static str, entry: &str| {
            device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: l(name),
                layout: Some(&pipeline_layout),
                module: &module,
                entry_point: Some(entry),
                compilation_options: Default::default(),
                cache: None,
            })
        };
        let scale = pipeline(label::SCALE_PIPELINE, "scale");
        let add = pipeline(label::ADD_PIPELINE, "add");
        Ok(Self {
            device,
            queue,
            data,
            params,
            readback,
            bind_group,
            scale,
            add,
            dispatches,
            param_stride,
            labels,
        })
    }

    fn label(&self, s: &'static str) -> Option<&'static str> {
        self.labels.then_some(s)
    }

    fn groups() -> u32 {
        ELEMENTS.div_ceil(WORKGROUP)
    }

    /// Uploads the data and the params (wgpu stages both into its pending-writes command
    /// buffer, which goes out with this submit), then one dispatch of `scale`: one submit, one
    /// wait.
    pub fn prologue(&self) -> Result<()> {
        let data: Vec<u8> = (0..ELEMENTS).flat_map(u32::to_le_bytes).collect();
        self.queue.write_buffer(&self.data, 0, &data);
        let mut params = vec![0u8; self.params.size() as usize];
        for d in 0..self.dispatches {
            let at = (d * self.param_stride) as usize;
            params[at..at + 4].copy_from_slice(&(d + 1).to_le_bytes());
        }
        self.queue.write_buffer(&self.params, 0, &params);
        let mut enc = self
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: self.label(label::PROLOGUE_PASS),
            });
        {
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: self.label(label::PROLOGUE_PASS),
                timestamp_writes: None,
            });
            pass.set_pipeline(&self.scale);
            pass.set_bind_group(0, &self.bind_group, &[0]);
            pass.dispatch_workgroups(Self::groups(), 1, 1);
        }
        let index = self.queue.submit([enc.finish()]);
        self.wait(index).context("the prologue")
    }

    /// One step: one encoder, one compute pass of `dispatches` dispatches of `add` (dispatch
    /// `d` reads params slot `d`), one submit, one wait.
    pub fn step(&self) -> Result<()> {
        let mut enc = self
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: self.label(label::STEP_PASS),
            });
        {
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: self.label(label::STEP_PASS),
                timestamp_writes: None,
            });
            pass.set_pipeline(&self.add);
            for d in 0..self.dispatches {
                pass.set_bind_group(0, &self.bind_group, &[d * self.param_stride]);
                pass.dispatch_workgroups(Self::groups(), 1, 1);
            }
        }
        let index = self.queue.submit([enc.finish()]);
        self.wait(index)
    }

    /// Copies the data into the mappable buffer (one submit, no dispatch), maps it (the poll
    /// that waits for the copy also runs the map callback) and returns the values.
    pub fn read_back(&self) -> Result<Vec<u32>> {
        let mut enc = self
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: self.label(label::READBACK_ENCODER),
            });
        enc.copy_buffer_to_buffer(&self.data, 0, &self.readback, 0, DATA_BYTES);
        let index = self.queue.submit([enc.finish()]);
        let (tx, rx) = std::sync::mpsc::channel();
        self.readback.map_async(wgpu::MapMode::Read, .., move |r| {
            // The receiver outlives the poll below; a send error cannot happen.
            let _ = tx.send(r);
        });
        self.wait(index).context("the read-back")?;
        rx.try_recv()
            .context("the read-back's map callback did not run during the poll")?
            .context("mapping the read-back buffer")?;
        let values = {
            let view = self.readback.get_mapped_range(..);
            view.chunks_exact(4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect()
        };
        self.readback.unmap();
        Ok(values)
    }

    /// Blocks until submission `index` has finished (wgpu waits on its timeline semaphore).
    fn wait(&self, index: wgpu::SubmissionIndex) -> Result<()> {
        self.device
            .poll(wgpu::PollType::Wait {
                submission_index: Some(index),
                timeout: None,
            })
            .context("waiting for the submission (device.poll)")?;
        Ok(())
    }
}
