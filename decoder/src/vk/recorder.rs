//! The [`Recorder`]: the single place where the decoder issues Vulkan commands, and therefore the
//! single place where the per-token counters of docs/design.md are counted.
//!
//! Everything above `vk/` holds only the opaque ids handed out here ([`Cmd`], [`DescSet`],
//! [`FenceId`]) and the safe [`Buffer`], [`Pipeline`] and [`QueryPool`] wrappers.

use std::ffi::CString;
use std::sync::Arc;

use ash::vk;
use profiler::trace::Counters;

use super::buffer::{Buffer, BufferDesc};
use super::context::{Gpu, Shared};
use super::error::{VkError, VkResult, call};
use super::pipeline::Pipeline;

/// A queue of the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Queue {
    Compute,
    /// The separate transfer queue where the device has one, else the compute queue.
    Transfer,
}

/// A command buffer owned by the recorder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cmd {
    handle: vk::CommandBuffer,
    queue: Queue,
}

/// A descriptor set owned by the recorder's pools.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DescSet(vk::DescriptorSet);

/// A fence owned by the recorder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FenceId(usize);

/// How long a descriptor set lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetLifetime {
    /// Freed in bulk by [`Recorder::reset_transient_sets`] (once per token).
    Transient,
    /// Lives as long as the recorder.
    Persistent,
}

/// A range of a buffer bound to a descriptor or copied.
#[derive(Clone, Copy, Debug)]
pub struct BufRange<'a> {
    pub buffer: &'a Buffer,
    pub offset: u64,
    pub bytes: u64,
}

impl<'a> BufRange<'a> {
    pub fn whole(buffer: &'a Buffer) -> Self {
        BufRange {
            buffer,
            offset: 0,
            bytes: buffer.bytes(),
        }
    }
}

/// A pool of GPU timestamp queries. Destroyed when dropped.
pub struct QueryPool {
    shared: Arc<Shared>,
    pool: vk::QueryPool,
    count: u32,
}

impl std::fmt::Debug for QueryPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueryPool")
            .field("count", &self.count)
            .finish()
    }
}

impl QueryPool {
    pub fn count(&self) -> u32 {
        self.count
    }
}

impl Drop for QueryPool {
    fn drop(&mut self) {
        // SAFETY: created on this device; no submitted work uses it once its owner drops it.
        unsafe { self.shared.device.destroy_query_pool(self.pool, None) };
    }
}

const SETS_PER_POOL: u32 = 2048;
const BINDINGS_PER_SET: u32 = 12;
const STAGING_BYTES: u64 = 64 << 20;

struct DescriptorPools {
    pools: Vec<vk::DescriptorPool>,
    current: usize,
}

/// How long [`Recorder::wait`] polls a fence on a GPU before it blocks.
pub const SPIN_WAIT: std::time::Duration = std::time::Duration::from_millis(20);

/// Records, submits and waits, counting every call.
pub struct Recorder {
    gpu: Gpu,
    compute_pool: vk::CommandPool,
    transfer_pool: Option<vk::CommandPool>,
    transient: DescriptorPools,
    /// The other slot's transient pools (see [`Recorder::use_transient_slot`]).
    transient_other: DescriptorPools,
    transient_slot: usize,
    persistent: DescriptorPools,
    fences: Vec<vk::Fence>,
    staging: Option<Buffer>,
    upload_cmd: Option<Cmd>,
    download_cmd: Option<Cmd>,
    upload_fence: Option<FenceId>,
    counters: Counters,
    /// Commands recorded into each command buffer since it was begun; added to the counters each
    /// time the command buffer is submitted, so a replayed recording counts what it executes.
    recorded: std::collections::HashMap<vk::CommandBuffer, Counters>,
    last_label: String,
    current_label: String,
    /// Fence waits poll before they block (a GPU; see [`Recorder::wait`]).
    spin_waits: bool,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("counters", &self.counters)
            .finish()
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        let d = &self.gpu.shared.device;
        // SAFETY: wait for all work, then destroy what this recorder created, newest first.
        unsafe {
            let _ = d.device_wait_idle();
            self.staging = None;
            for f in self.fences.drain(..) {
                d.destroy_fence(f, None);
            }
            for p in self
                .persistent
                .pools
                .drain(..)
                .chain(self.transient.pools.drain(..))
                .chain(self.transient_other.pools.drain(..))
            {
                d.destroy_descriptor_pool(p, None);
            }
            if let Some(p) = self.transfer_pool.take() {
                d.destroy_command_pool(p, None);
            }
            d.destroy_command_pool(self.compute_pool, None);
        }
    }
}

impl Recorder {
    pub fn new(gpu: &Gpu) -> VkResult<Recorder> {
        let s = &gpu.shared;
        let info = |family| {
            vk::CommandPoolCreateInfo::default()
                .queue_family_index(family)
                .flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER)
        };
        // SAFETY: valid create-infos; destroyed in Drop.
        let compute_pool = unsafe { s.device.create_command_pool(&info(s.compute_family), None) }
            .map_err(call("vkCreateCommandPool"))?;
        let mut rec = Recorder {
            gpu: gpu.clone(),
            compute_pool,
            transfer_pool: None,
            transient: DescriptorPools {
                pools: vec![],
                current: 0,
            },
            transient_other: DescriptorPools {
                pools: vec![],
                current: 0,
            },
            transient_slot: 0,
            persistent: DescriptorPools {
                pools: vec![],
                current: 0,
            },
            fences: vec![],
            staging: None,
            upload_cmd: None,
            download_cmd: None,
            upload_fence: None,
            counters: Counters::default(),
            recorded: std::collections::HashMap::new(),
            last_label: String::from("(none)"),
            current_label: String::new(),
            spin_waits: gpu.info().device_type != "cpu",
        };
        if let Some((family, _)) = s.transfer {
            // SAFETY: as above.
            rec.transfer_pool = Some(
                unsafe { s.device.create_command_pool(&info(family), None) }
                    .map_err(call("vkCreateCommandPool"))?,
            );
        }
        Ok(rec)
    }

    pub fn gpu(&self) -> &Gpu {
        &self.gpu
    }

    /// Counters since the last [`Recorder::take_counters`].
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Returns the counters and resets them to zero.
    pub fn take_counters(&mut self) -> Counters {
        std::mem::take(&mut self.counters)
    }

    fn dev(&self) -> &ash::Device {
        &self.gpu.shared.device
    }

    fn queue(&self, q: Queue) -> vk::Queue {
        match (q, self.gpu.shared.transfer) {
            (Queue::Transfer, Some((_, t))) => t,
            _ => self.gpu.shared.compute_queue,
        }
    }

    /// Allocates a primary command buffer for `queue`, reusable with [`Recorder::begin`].
    pub fn new_cmd(&mut self, queue: Queue) -> VkResult<Cmd> {
        let pool = match (queue, self.transfer_pool) {
            (Queue::Transfer, Some(p)) => p,
            _ => self.compute_pool,
        };
        let info = vk::CommandBufferAllocateInfo::default()
            .command_pool(pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(1);
        // SAFETY: the pool belongs to this device; buffers are freed with the pool.
        let v = unsafe { self.dev().allocate_command_buffers(&info) }
            .map_err(call("vkAllocateCommandBuffers"))?;
        Ok(Cmd {
            handle: v[0],
            queue,
        })
    }

    /// Begins (and implicitly resets) `cmd`. The caller guarantees the GPU finished its last use.
    pub fn begin(&mut self, cmd: Cmd) -> VkResult<()> {
        self.counters.command_buffers_begun += 1;
        self.recorded.insert(cmd.handle, Counters::default());
        // SAFETY: `cmd` came from this recorder's pools, which allow individual resets.
        unsafe {
            self.dev()
                .begin_command_buffer(cmd.handle, &vk::CommandBufferBeginInfo::default())
        }
        .map_err(call("vkBeginCommandBuffer"))
    }

    fn cmd_counts(&mut self, cmd: Cmd) -> &mut Counters {
        self.recorded.entry(cmd.handle).or_default()
    }

    pub fn end(&mut self, cmd: Cmd) -> VkResult<()> {
        // SAFETY: `cmd` is in the recording state.
        unsafe { self.dev().end_command_buffer(cmd.handle) }.map_err(call("vkEndCommandBuffer"))
    }

    pub fn bind_pipeline(&mut self, cmd: Cmd, p: &Pipeline) {
        self.cmd_counts(cmd).pipeline_binds += 1;
        // SAFETY: recording command buffer and a live compute pipeline.
        unsafe {
            self.dev()
                .cmd_bind_pipeline(cmd.handle, vk::PipelineBindPoint::COMPUTE, p.pipeline)
        }
    }

    fn grow(&self, persistent: bool) -> VkResult<vk::DescriptorPool> {
        let sizes = [vk::DescriptorPoolSize::default()
            .ty(vk::DescriptorType::STORAGE_BUFFER)
            .descriptor_count(SETS_PER_POOL * BINDINGS_PER_SET)];
        let info = vk::DescriptorPoolCreateInfo::default()
            .max_sets(SETS_PER_POOL)
            .pool_sizes(&sizes);
        let _ = persistent;
        // SAFETY: valid create-info; destroyed in Drop.
        unsafe { self.dev().create_descriptor_pool(&info, None) }
            .map_err(call("vkCreateDescriptorPool"))
    }

    /// Allocates a descriptor set for `p`'s layout.
    pub fn alloc_set(&mut self, p: &Pipeline, lifetime: SetLifetime) -> VkResult<DescSet> {
        if p.desc().push_descriptor {
            return Err(VkError::Unsupported(
                "a push-descriptor pipeline has no allocatable descriptor set".into(),
            ));
        }
        let persistent = lifetime == SetLifetime::Persistent;
        loop {
            let pools = if persistent {
                &self.persistent
            } else {
                &self.transient
            };
            if pools.current >= pools.pools.len() {
                let np = self.grow(persistent)?;
                let pools = if persistent {
                    &mut self.persistent
                } else {
                    &mut self.transient
                };
                pools.pools.push(np);
            }
            let pools = if persistent {
                &self.persistent
            } else {
                &self.transient
            };
            let layouts = [p.set_layout];
            let info = vk::DescriptorSetAllocateInfo::default()
                .descriptor_pool(pools.pools[pools.current])
                .set_layouts(&layouts);
            // SAFETY: the pool and layout belong to this device.
            match unsafe { self.dev().allocate_descriptor_sets(&info) } {
                Ok(v) => {
                    self.counters.descriptor_sets_allocated += 1;
                    return Ok(DescSet(v[0]));
                }
                Err(vk::Result::ERROR_OUT_OF_POOL_MEMORY)
                | Err(vk::Result::ERROR_FRAGMENTED_POOL) => {
                    let pools = if persistent {
                        &mut self.persistent
                    } else {
                        &mut self.transient
                    };
                    pools.current += 1;
                }
                Err(e) => return Err(call("vkAllocateDescriptorSets")(e)),
            }
        }
    }

    /// Makes `slot` (0 or 1) the transient pools that [`Recorder::alloc_set`] and
    /// [`Recorder::reset_transient_sets`] use: two steps in flight at once (`--sync chained`)
    /// each keep their own, so resetting one step's sets never frees the other's.
    pub fn use_transient_slot(&mut self, slot: usize) {
        if slot != self.transient_slot {
            std::mem::swap(&mut self.transient, &mut self.transient_other);
            self.transient_slot = slot;
        }
    }

    /// Frees every transient set at once. The caller guarantees the GPU finished using them.
    pub fn reset_transient_sets(&mut self) -> VkResult<()> {
        for &p in &self.transient.pools {
            // SAFETY: no pending work references these sets (caller's guarantee).
            unsafe {
                self.gpu
                    .shared
                    .device
                    .reset_descriptor_pool(p, vk::DescriptorPoolResetFlags::empty())
            }
            .map_err(call("vkResetDescriptorPool"))?;
        }
        self.transient.current = 0;
        Ok(())
    }

    fn buffer_infos(bufs: &[BufRange<'_>]) -> Vec<vk::DescriptorBufferInfo> {
        bufs.iter()
            .map(|b| {
                vk::DescriptorBufferInfo::default()
                    .buffer(b.buffer.handle)
                    .offset(b.offset)
                    .range(b.bytes)
            })
            .collect()
    }

    /// Writes `bufs` into bindings 0..N of `set` with one `VkWriteDescriptorSet` (consecutive
    /// bindings of one type are updated by a single write).
    pub fn write_set(&mut self, set: DescSet, bufs: &[BufRange<'_>]) {
        let infos = Self::buffer_infos(bufs);
        let write = vk::WriteDescriptorSet::default()
            .dst_set(set.0)
            .dst_binding(0)
            .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
            .buffer_info(&infos);
        self.counters.descriptor_writes += 1;
        // SAFETY: the set is not in use by pending work when the caller rewrites it.
        unsafe { self.dev().update_descriptor_sets(&[write], &[]) }
    }

    pub fn bind_set(&mut self, cmd: Cmd, p: &Pipeline, set: DescSet) {
        self.cmd_counts(cmd).descriptor_set_binds += 1;
        // SAFETY: recording command buffer; the set matches the pipeline's layout.
        unsafe {
            self.dev().cmd_bind_descriptor_sets(
                cmd.handle,
                vk::PipelineBindPoint::COMPUTE,
                p.layout,
                0,
                &[set.0],
                &[],
            )
        }
    }

    /// Pushes `bufs` as set 0 (`VK_KHR_push_descriptor`); counts one descriptor write.
    pub fn push_set(&mut self, cmd: Cmd, p: &Pipeline, bufs: &[BufRange<'_>]) -> VkResult<()> {
        let Some(pd) = &self.gpu.shared.push_descriptor else {
            return Err(VkError::Unsupported(
                "this device has no VK_KHR_push_descriptor".into(),
            ));
        };
        let infos = Self::buffer_infos(bufs);
        let write = vk::WriteDescriptorSet::default()
            .dst_binding(0)
            .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
            .buffer_info(&infos);
        self.counters.descriptor_writes += 1;
        // SAFETY: recording command buffer; the pipeline layout's set 0 is a push-descriptor set.
        unsafe {
            pd.cmd_push_descriptor_set(
                cmd.handle,
                vk::PipelineBindPoint::COMPUTE,
                p.layout,
                0,
                &[write],
            )
        };
        Ok(())
    }

    pub fn push_constants(&mut self, cmd: Cmd, p: &Pipeline, bytes: &[u8]) {
        self.cmd_counts(cmd).push_constant_updates += 1;
        // SAFETY: recording command buffer; `bytes` fits the pipeline's push-constant range.
        unsafe {
            self.dev().cmd_push_constants(
                cmd.handle,
                p.layout,
                vk::ShaderStageFlags::COMPUTE,
                0,
                bytes,
            )
        }
    }

    pub fn dispatch(&mut self, cmd: Cmd, groups: [u32; 3]) {
        self.cmd_counts(cmd).dispatches += 1;
        // SAFETY: recording command buffer with a bound compute pipeline and descriptors.
        unsafe {
            self.dev()
                .cmd_dispatch(cmd.handle, groups[0], groups[1], groups[2])
        }
    }

    /// Copies `src` to `dst` at `dst_offset`.
    pub fn copy(&mut self, cmd: Cmd, src: BufRange<'_>, dst: &Buffer, dst_offset: u64) {
        self.cmd_counts(cmd).transfer_commands += 1;
        let region = vk::BufferCopy::default()
            .src_offset(src.offset)
            .dst_offset(dst_offset)
            .size(src.bytes);
        // SAFETY: recording command buffer; ranges are within both buffers (validated in tests).
        unsafe {
            self.dev()
                .cmd_copy_buffer(cmd.handle, src.buffer.handle, dst.handle, &[region])
        }
    }

    /// One global memory barrier making every earlier compute and transfer write visible to every
    /// later compute, transfer and host access.
    pub fn full_barrier(&mut self, cmd: Cmd) {
        let c = self.cmd_counts(cmd);
        c.barrier_calls += 1;
        c.memory_barriers += 1;
        let mb = vk::MemoryBarrier::default()
            .src_access_mask(vk::AccessFlags::SHADER_WRITE | vk::AccessFlags::TRANSFER_WRITE)
            .dst_access_mask(
                vk::AccessFlags::SHADER_READ
                    | vk::AccessFlags::SHADER_WRITE
                    | vk::AccessFlags::TRANSFER_READ
                    | vk::AccessFlags::TRANSFER_WRITE
                    | vk::AccessFlags::HOST_READ,
            );
        let (src, dst) = match cmd.queue {
            Queue::Compute => (
                vk::PipelineStageFlags::COMPUTE_SHADER | vk::PipelineStageFlags::TRANSFER,
                vk::PipelineStageFlags::COMPUTE_SHADER
                    | vk::PipelineStageFlags::TRANSFER
                    | vk::PipelineStageFlags::HOST,
            ),
            Queue::Transfer => (
                vk::PipelineStageFlags::TRANSFER,
                vk::PipelineStageFlags::TRANSFER,
            ),
        };
        let mb = if cmd.queue == Queue::Transfer {
            mb.src_access_mask(vk::AccessFlags::TRANSFER_WRITE)
                .dst_access_mask(vk::AccessFlags::TRANSFER_READ | vk::AccessFlags::TRANSFER_WRITE)
        } else {
            mb
        };
        // SAFETY: recording command buffer; stages are supported by its queue.
        unsafe {
            self.dev().cmd_pipeline_barrier(
                cmd.handle,
                src,
                dst,
                vk::DependencyFlags::empty(),
                &[mb],
                &[],
                &[],
            )
        }
    }

    /// Opens a debug-utils region named `label` (RenderDoc, Nsight and RGP show it).
    pub fn begin_label(&mut self, cmd: Cmd, label: &str) {
        self.current_label.clear();
        self.current_label.push_str(label);
        if let Some(d) = &self.gpu.shared.debug_device {
            let Ok(name) = CString::new(label) else {
                return;
            };
            let l = vk::DebugUtilsLabelEXT::default().label_name(&name);
            // SAFETY: recording command buffer; the name outlives the call.
            unsafe { d.cmd_begin_debug_utils_label(cmd.handle, &l) };
        }
    }

    pub fn end_label(&mut self, cmd: Cmd) {
        if let Some(d) = &self.gpu.shared.debug_device {
            // SAFETY: closes the region opened by `begin_label` in the same command buffer.
            unsafe { d.cmd_end_debug_utils_label(cmd.handle) };
        }
    }

    /// Writes a GPU timestamp into `pool[index]`, at the top of the pipe (`start`) or after all
    /// earlier work (`!start`).
    pub fn write_timestamp(&mut self, cmd: Cmd, pool: &QueryPool, index: u32, start: bool) {
        self.cmd_counts(cmd).timestamp_writes += 1;
        let stage = if start {
            vk::PipelineStageFlags::TOP_OF_PIPE
        } else {
            vk::PipelineStageFlags::BOTTOM_OF_PIPE
        };
        // SAFETY: recording command buffer; `index` < pool size and was reset before this write.
        unsafe {
            self.dev()
                .cmd_write_timestamp(cmd.handle, stage, pool.pool, index)
        }
    }

    pub fn create_query_pool(&mut self, count: u32) -> VkResult<QueryPool> {
        let info = vk::QueryPoolCreateInfo::default()
            .query_type(vk::QueryType::TIMESTAMP)
            .query_count(count.max(1));
        // SAFETY: valid create-info; destroyed by QueryPool's Drop.
        let pool = unsafe { self.dev().create_query_pool(&info, None) }
            .map_err(call("vkCreateQueryPool"))?;
        Ok(QueryPool {
            shared: self.gpu.shared.clone(),
            pool,
            count: count.max(1),
        })
    }

    /// Resets queries `first..first+count` from the host (Vulkan 1.2 host query reset).
    pub fn reset_queries(&mut self, pool: &QueryPool, first: u32, count: u32) -> VkResult<()> {
        if !self.gpu.shared.info.host_query_reset {
            return Err(VkError::Unsupported(format!(
                "device {:?} has no hostQueryReset; use --timestamps off",
                self.gpu.shared.info.name
            )));
        }
        // SAFETY: no pending work uses these queries (the caller waited for the step's fence).
        unsafe { self.dev().reset_query_pool(pool.pool, first, count) };
        Ok(())
    }

    /// Reads `count` 64-bit timestamps starting at `first`; the work that wrote them has completed.
    pub fn read_queries(&mut self, pool: &QueryPool, first: u32, count: u32) -> VkResult<Vec<u64>> {
        let mut out = vec![0u64; count as usize];
        if count == 0 {
            return Ok(out);
        }
        // SAFETY: `out` holds `count` u64s; the queries were written by completed work.
        unsafe {
            self.dev().get_query_pool_results(
                pool.pool,
                first,
                &mut out,
                vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WAIT,
            )
        }
        .map_err(call("vkGetQueryPoolResults"))?;
        Ok(out)
    }

    pub fn new_fence(&mut self) -> VkResult<FenceId> {
        // SAFETY: valid create-info; destroyed in Drop.
        let f = unsafe {
            self.dev()
                .create_fence(&vk::FenceCreateInfo::default(), None)
        }
        .map_err(call("vkCreateFence"))?;
        self.fences.push(f);
        Ok(FenceId(self.fences.len() - 1))
    }

    /// Submits `cmds` in order to their queue, signalling `fence` when they complete.
    pub fn submit(&mut self, cmds: &[Cmd], fence: Option<FenceId>) -> VkResult<()> {
        let Some(first) = cmds.first() else {
            return Ok(());
        };
        match first.queue {
            Queue::Compute => self.counters.submits_compute += 1,
            Queue::Transfer => self.counters.submits_transfer += 1,
        }
        if !self.current_label.is_empty() {
            self.last_label.clone_from(&self.current_label);
        }
        for c in cmds {
            if let Some(r) = self.recorded.get(&c.handle) {
                self.counters.add(r);
            }
        }
        let handles: Vec<vk::CommandBuffer> = cmds.iter().map(|c| c.handle).collect();
        let info = vk::SubmitInfo::default().command_buffers(&handles);
        let f = fence.map_or(vk::Fence::null(), |f| self.fences[f.0]);
        let q = self.queue(first.queue);
        // SAFETY: executable command buffers of this device, submitted to the queue they were
        // allocated for; the fence is unsignalled (reset after every wait).
        unsafe { self.dev().queue_submit(q, &[info], f) }
            .map_err(|e| self.lost_or(e, "vkQueueSubmit"))
    }

    fn lost_or(&self, e: vk::Result, what: &'static str) -> VkError {
        if e == vk::Result::ERROR_DEVICE_LOST {
            VkError::DeviceLost {
                last_label: self.last_label.clone(),
            }
        } else {
            call(what)(e)
        }
    }

    /// Blocks until `fence` signals, then resets it. On a GPU the host first polls the fence
    /// for up to [`SPIN_WAIT`]: a decode step takes a few milliseconds, and a blocking wait
    /// adds the thread's wake-up to every token. A CPU driver's threads share the host's cores,
    /// so there the wait blocks at once.
    pub fn wait(&mut self, fence: FenceId) -> VkResult<()> {
        self.counters.fence_waits += 1;
        let f = [self.fences[fence.0]];
        if self.spin_waits {
            let start = std::time::Instant::now();
            // SAFETY: the fence belongs to this device and was submitted.
            while !unsafe { self.dev().get_fence_status(f[0]) }
                .map_err(|e| self.lost_or(e, "vkGetFenceStatus"))?
            {
                if start.elapsed() > SPIN_WAIT {
                    break;
                }
                std::hint::spin_loop();
            }
        }
        // SAFETY: the fence belongs to this device and was submitted.
        unsafe {
            self.dev()
                .wait_for_fences(&f, true, u64::MAX)
                .map_err(|e| self.lost_or(e, "vkWaitForFences"))?;
            self.dev().reset_fences(&f).map_err(call("vkResetFences"))
        }
    }

    /// Writes `data` into a host-visible buffer (counts `bytes_to_device`).
    pub fn write(&mut self, buf: &mut Buffer, offset: u64, data: &[u8]) -> VkResult<()> {
        self.counters.bytes_to_device += data.len() as u64;
        buf.write_mapped(offset, data)
    }

    /// Reads a host-visible buffer (counts `bytes_from_device`).
    pub fn read(&mut self, buf: &Buffer, offset: u64, out: &mut [u8]) -> VkResult<()> {
        self.counters.bytes_from_device += out.len() as u64;
        buf.read_mapped(offset, out)
    }

    fn staging(&mut self) -> VkResult<(Cmd, FenceId)> {
        if self.staging.is_none() {
            let b = self
                .gpu
                .create_buffer(BufferDesc::upload(STAGING_BYTES), "staging")?;
            self.staging = Some(b);
        }
        let cmd = match self.upload_cmd {
            Some(c) => c,
            None => {
                let c = self.new_cmd(Queue::Transfer)?;
                self.upload_cmd = Some(c);
                c
            }
        };
        let fence = match self.upload_fence {
            Some(f) => f,
            None => {
                let f = self.new_fence()?;
                self.upload_fence = Some(f);
                f
            }
        };
        Ok((cmd, fence))
    }

    /// Copies `data` into a device-local buffer at `offset` through the staging buffer, on the
    /// transfer queue, and waits for it.
    pub fn upload(&mut self, dst: &Buffer, offset: u64, data: &[u8]) -> VkResult<()> {
        let (cmd, fence) = self.staging()?;
        for (i, chunk) in data.chunks(STAGING_BYTES as usize).enumerate() {
            let mut staging = self
                .staging
                .take()
                .ok_or(VkError::Unsupported("staging buffer missing".into()))?;
            let r = self.write(&mut staging, 0, chunk);
            self.staging = Some(staging);
            r?;
            self.begin(cmd)?;
            if let Some(st) = self.staging.take() {
                let src = BufRange {
                    buffer: &st,
                    offset: 0,
                    bytes: chunk.len() as u64,
                };
                self.copy(cmd, src, dst, offset + (i as u64) * STAGING_BYTES);
                self.staging = Some(st);
            }
            self.end(cmd)?;
            self.submit(&[cmd], Some(fence))?;
            self.wait(fence)?;
        }
        Ok(())
    }

    /// Reads `out.len()` bytes of a device-local buffer at `offset` through a readback buffer.
    pub fn download(&mut self, src: &Buffer, offset: u64, out: &mut [u8]) -> VkResult<()> {
        let (_, fence) = self.staging()?;
        let cmd = match self.download_cmd {
            Some(c) => c,
            None => {
                let c = self.new_cmd(Queue::Compute)?;
                self.download_cmd = Some(c);
                c
            }
        };
        let rb = self
            .gpu
            .create_buffer(BufferDesc::readback(out.len() as u64), "download")?;
        self.begin(cmd)?;
        self.copy(
            cmd,
            BufRange {
                buffer: src,
                offset,
                bytes: out.len() as u64,
            },
            &rb,
            0,
        );
        self.end(cmd)?;
        self.submit(&[cmd], Some(fence))?;
        self.wait(fence)?;
        self.read(&rb, 0, out)
    }
}
