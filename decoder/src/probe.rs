//! The bandwidth probe: how many bytes per second this device's memory gives a compute kernel
//! that only reads (the decode roofline: a batch-1 token must read every weight and every K and V
//! row attended) and `vkCmdCopyBuffer` (read plus write traffic).
//!
//! A large device-local buffer is read by `bw_read` (grid-stride vec4 loads, enough workgroups to
//! fill every compute unit several times over) and copied to a second buffer; one warm-up run,
//! then `runs` timed runs, and the best of them is kept. Times are GPU timestamps around each
//! command, or the host's wall time around submit and wait where the device has none.
//! [`measure`] keeps the result on the [`Gpu`], and every trace written from it carries the read
//! figure in `meta.device.memory_bandwidth_gbps`.

use crate::shaders::Shader;
use crate::vk::{
    Bandwidth, BufRange, BufferDesc, Gpu, PipelineDesc, Queue, Recorder, SPEC_CONSTANTS,
    SetLifetime, VkError, VkResult, host_now_ns,
};

/// Workgroup size of the read kernel.
const WG: u32 = 256;
/// Largest buffer the probe reads on a GPU.
const GPU_BYTES: u64 = 1 << 30;
/// Buffer size on a CPU device (lavapipe), where memory bandwidth is the CPU's.
const CPU_BYTES: u64 = 64 << 20;
/// A bit pattern the read kernel's sum never has (a NaN payload no sum of loads produces).
const MAGIC: u32 = 0x7fc0_dec0;

/// Probe options.
#[derive(Clone, Copy, Debug)]
pub struct ProbeOptions {
    /// Timed runs after the warm-up.
    pub runs: u32,
    /// Buffer size; `None` picks 1 GiB on a GPU (within the device's buffer and heap limits) and
    /// 64 MiB on a CPU device.
    pub bytes: Option<u64>,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        ProbeOptions {
            runs: 5,
            bytes: None,
        }
    }
}

/// The buffer size the probe uses on `gpu`: a multiple of 16 bytes within the device's limits.
pub fn probe_bytes(gpu: &Gpu, asked: Option<u64>) -> u64 {
    let info = gpu.info();
    let want = asked.unwrap_or(if info.device_type == "cpu" {
        CPU_BYTES
    } else {
        GPU_BYTES
    });
    let mut cap = info
        .max_storage_buffer_range
        .min(info.max_memory_allocation_size);
    if info.device_local_bytes > 0 {
        // Two buffers (source and copy destination) in at most a quarter of the heap.
        cap = cap.min(info.device_local_bytes / 8);
    }
    (want.min(cap) / 16 * 16).max(16)
}

/// Measures `gpu`'s read and copy bandwidth, keeps the result on `gpu` (see [`Gpu::bandwidth`])
/// and returns it. Returns the figures already kept when the device was probed before.
pub fn measure(gpu: &Gpu, opts: ProbeOptions) -> VkResult<Bandwidth> {
    if let Some(b) = gpu.bandwidth() {
        return Ok(b);
    }
    let b = run_probe(gpu, opts)?;
    gpu.set_bandwidth(b);
    Ok(b)
}

fn run_probe(gpu: &Gpu, opts: ProbeOptions) -> VkResult<Bandwidth> {
    if opts.runs == 0 {
        return Err(VkError::Unsupported(
            "the bandwidth probe needs at least one run".into(),
        ));
    }
    let info = gpu.info().clone();
    let bytes = probe_bytes(gpu, opts.bytes);
    let groups = (info.compute_units.max(1) * 32).clamp(64, 65_535);
    let mut rec = Recorder::new(gpu)?;
    let src = gpu.create_buffer(BufferDesc::device(bytes), "probe_src")?;
    let dst = gpu.create_buffer(BufferDesc::device(bytes), "probe_dst")?;
    let sink = gpu.create_buffer(BufferDesc::device(groups as u64 * 4), "probe_sink")?;
    let mut spec = [0u32; SPEC_CONSTANTS];
    spec[crate::shaders::spec::WG] = WG;
    let pipeline = gpu.create_pipeline(PipelineDesc {
        shader: Shader::BwRead,
        bindings: 2,
        push_bytes: 16,
        spec,
        push_descriptor: false,
    })?;
    let set = rec.alloc_set(&pipeline, SetLifetime::Persistent)?;
    rec.write_set(set, &[BufRange::whole(&src), BufRange::whole(&sink)]);
    let push: Vec<u8> = [(bytes / 16) as u32, MAGIC, 0, 0]
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .collect();
    let timestamps = info.timestamps && info.host_query_reset && info.timestamp_valid_bits > 0;
    let pool = if timestamps {
        Some(rec.create_query_pool(2)?)
    } else {
        None
    };
    let fence = rec.new_fence()?;
    // One submit per measured command, each bracketed by timestamps: returns its seconds.
    let time = |rec: &mut Recorder, read: bool| -> VkResult<f64> {
        if let Some(p) = &pool {
            rec.reset_queries(p, 0, 2)?;
        }
        let cmd = rec.new_cmd(Queue::Compute)?;
        rec.begin(cmd)?;
        rec.begin_label(cmd, if read { "probe_read" } else { "probe_copy" });
        if let Some(p) = &pool {
            rec.write_timestamp(cmd, p, 0, true);
        }
        if read {
            rec.bind_pipeline(cmd, &pipeline);
            rec.bind_set(cmd, &pipeline, set);
            rec.push_constants(cmd, &pipeline, &push);
            rec.dispatch(cmd, [groups, 1, 1]);
        } else {
            rec.copy(cmd, BufRange::whole(&src), &dst, 0);
        }
        if let Some(p) = &pool {
            rec.write_timestamp(cmd, p, 1, false);
        }
        rec.end_label(cmd);
        rec.full_barrier(cmd);
        rec.end(cmd)?;
        let t0 = host_now_ns();
        rec.submit(&[cmd], Some(fence))?;
        rec.wait(fence)?;
        let host_s = (host_now_ns() - t0) as f64 * 1e-9;
        Ok(match &pool {
            Some(p) => {
                let t = rec.read_queries(p, 0, 2)?;
                let mask = if info.timestamp_valid_bits >= 64 {
                    u64::MAX
                } else {
                    (1u64 << info.timestamp_valid_bits) - 1
                };
                let ticks = t[1].wrapping_sub(t[0]) & mask;
                ticks as f64 * info.timestamp_period_ns as f64 * 1e-9
            }
            None => host_s,
        })
    };
    let (mut best_read, mut best_copy) = (f64::INFINITY, f64::INFINITY);
    for run in 0..=opts.runs {
        let r = time(&mut rec, true)?;
        let c = time(&mut rec, false)?;
        // Run 0 warms caches, clocks and the pipeline up.
        if run > 0 {
            best_read = best_read.min(r);
            best_copy = best_copy.min(c);
        }
    }
    let gbps = |traffic: f64, s: f64| {
        if s > 0.0 && s.is_finite() {
            traffic / s / 1e9
        } else {
            0.0
        }
    };
    Ok(Bandwidth {
        read_gbps: gbps(bytes as f64, best_read),
        copy_gbps: gbps(2.0 * bytes as f64, best_copy),
        bytes,
        runs: opts.runs,
        timing: if timestamps {
            "gpu-timestamps"
        } else {
            "host-wall"
        },
    })
}
