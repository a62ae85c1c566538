//! The Vulkan loader's layer interface: the only module of the layer that holds raw Vulkan
//! handles and `unsafe`.
//!
//! The library exports one symbol, `vkNegotiateLoaderLayerInterfaceVersion`; the loader gets
//! `vkGetInstanceProcAddr` and `vkGetDeviceProcAddr` from it (exporting them globally makes some
//! loaders recurse into the layer). `vkCreateInstance` and `vkCreateDevice` take the next
//! layer's entry points from the loader's chain info and advance the chain. Every intercepted
//! call is counted in the device's [`DeviceState`] and passed down unchanged, except for the GPU
//! timestamps the layer adds at the chosen level, written into its own query pool:
//!
//! - `submit`: two command buffers of the layer's own wrap the program's command buffers of each
//!   `vkQueueSubmit` (a query reset and a top-of-pipe timestamp; a bottom-of-pipe timestamp);
//! - `command-buffer`: a reset and timestamp after `vkBeginCommandBuffer`, one before
//!   `vkEndCommandBuffer`, in every primary command buffer;
//! - `dispatch`: a reset and timestamp before and a timestamp after every dispatch.
//!
//! Timestamps are read with `vkGetQueryPoolResults` after a host wait proves their submission
//! complete (a fence that was signalled by it or a later submit of its queue, a queue or device
//! idle), so the layer never blocks the program on its own queries.
//!
//! Every `unsafe extern "system"` function here is called by the loader (or by the program
//! through it) with the arguments of the Vulkan command it implements; the Vulkan specification's
//! valid usage for that command is the safety contract, and each passes its arguments on to the
//! next layer unchanged (`vkCreateDevice` adds the calibrated-timestamps extension).
#![allow(unsafe_op_in_unsafe_fn)]

use std::collections::HashMap;
use std::ffi::{CStr, c_char, c_void};
use std::mem::transmute;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, RwLock};

use ash::vk::{self, Handle};
use profiler::capture::{RawDevice, RawRecord};
use profiler::trace::{ClockMeta, DeviceMeta};

use crate::output::Output;
use crate::state::{Cmd, Completed, DeviceState, Level, Pending, Stamp};

// ---- the loader's layer interface (vk_layer.h) -----------------------------------------------

const LAYER_NEGOTIATE_INTERFACE_STRUCT: u32 = 1;
const VK_LAYER_LINK_INFO: u32 = 0;
const VK_LOADER_DATA_CALLBACK: u32 = 1;

#[repr(C)]
pub struct NegotiateLayerInterface {
    s_type: u32,
    p_next: *mut c_void,
    loader_layer_interface_version: u32,
    pfn_get_instance_proc_addr: Option<vk::PFN_vkGetInstanceProcAddr>,
    pfn_get_device_proc_addr: Option<vk::PFN_vkGetDeviceProcAddr>,
    pfn_get_physical_device_proc_addr: *const c_void,
}

#[repr(C)]
struct LayerInstanceLink {
    p_next: *mut LayerInstanceLink,
    pfn_next_get_instance_proc_addr: vk::PFN_vkGetInstanceProcAddr,
    pfn_next_get_physical_device_proc_addr: *const c_void,
}

#[repr(C)]
struct LayerDeviceLink {
    p_next: *mut LayerDeviceLink,
    pfn_next_get_instance_proc_addr: vk::PFN_vkGetInstanceProcAddr,
    pfn_next_get_device_proc_addr: vk::PFN_vkGetDeviceProcAddr,
}

/// `VkLayerInstanceCreateInfo` / `VkLayerDeviceCreateInfo`: only the union's first pointer is
/// read or written (the link, or the set-loader-data callback).
#[repr(C)]
struct LayerCreateInfo {
    s_type: vk::StructureType,
    p_next: *const c_void,
    function: u32,
    u: *mut c_void,
}

type SetDeviceLoaderData = unsafe extern "system" fn(vk::Device, *mut c_void) -> vk::Result;

/// Finds the loader's create info of `s_type` with `function` in a `pNext` chain.
unsafe fn find_chain(
    mut p: *const c_void,
    s_type: vk::StructureType,
    function: u32,
) -> *mut LayerCreateInfo {
    while !p.is_null() {
        let info = p as *mut LayerCreateInfo;
        if (*info).s_type == s_type && (*info).function == function {
            return info;
        }
        p = (*info).p_next;
    }
    std::ptr::null_mut()
}

/// The loader's dispatch key of a dispatchable handle: its first pointer-sized word.
unsafe fn key<H: Handle>(h: H) -> usize {
    let p = h.as_raw() as usize as *const usize;
    if p.is_null() { 0 } else { *p }
}

unsafe fn slice<'a, T>(p: *const T, n: u32) -> &'a [T] {
    if p.is_null() || n == 0 {
        &[]
    } else {
        std::slice::from_raw_parts(p, n as usize)
    }
}

/// Nanoseconds on the host's monotonic clock (the trace's clock).
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if rc != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

// ---- configuration and global tables ---------------------------------------------------------

struct Config {
    /// `$DECODESCOPE_CAPTURE_DIR`; without it the layer passes every call through uncounted.
    dir: Option<String>,
    level: Level,
}

fn config() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(|| {
        let dir = std::env::var("DECODESCOPE_CAPTURE_DIR")
            .ok()
            .filter(|d| !d.is_empty());
        let raw = std::env::var("DECODESCOPE_TIMESTAMPS").unwrap_or_default();
        let level = Level::parse(&raw).unwrap_or_else(|| {
            eprintln!(
                "decodescope layer: DECODESCOPE_TIMESTAMPS={raw:?} is not off, submit, \
                 command-buffer or dispatch; timestamps are off"
            );
            Level::Off
        });
        Config { dir, level }
    })
}

fn output() -> &'static Output {
    static OUT: OnceLock<Output> = OnceLock::new();
    OUT.get_or_init(|| {
        let c = config();
        match &c.dir {
            Some(d) => Output::open(d, c.level.name()),
            None => Output::disabled(),
        }
    })
}

struct InstanceData {
    handle: vk::Instance,
    next_gipa: vk::PFN_vkGetInstanceProcAddr,
    fns: ash::Instance,
}

fn instances() -> &'static Mutex<HashMap<usize, Arc<InstanceData>>> {
    static I: OnceLock<Mutex<HashMap<usize, Arc<InstanceData>>>> = OnceLock::new();
    I.get_or_init(Default::default)
}

fn devices() -> &'static RwLock<HashMap<usize, Arc<DeviceData>>> {
    static D: OnceLock<RwLock<HashMap<usize, Arc<DeviceData>>>> = OnceLock::new();
    D.get_or_init(Default::default)
}

fn device_count() -> u32 {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

unsafe fn instance_of<H: Handle>(h: H) -> Option<Arc<InstanceData>> {
    let k = key(h);
    let map = instances().lock().unwrap_or_else(|e| e.into_inner());
    map.get(&k).cloned()
}

unsafe fn dev<H: Handle>(h: H) -> Option<Arc<DeviceData>> {
    let k = key(h);
    let map = devices().read().unwrap_or_else(|e| e.into_inner());
    map.get(&k).cloned()
}

// ---- the next layer's device entry points ----------------------------------------------------

macro_rules! next_table {
    ($($field:ident : $pfn:ident = $name:literal),* $(,)?) => {
        /// The next layer's entry points (`None` where it has none).
        #[derive(Clone, Copy)]
        struct Next { $($field: Option<vk::$pfn>,)* }
        impl Next {
            unsafe fn load(gdpa: vk::PFN_vkGetDeviceProcAddr, device: vk::Device) -> Next {
                Next {
                    $($field: transmute::<vk::PFN_vkVoidFunction, Option<vk::$pfn>>(
                        gdpa(device, concat!($name, "\0").as_ptr().cast()),
                    ),)*
                }
            }
        }
    };
}

next_table! {
    destroy_device: PFN_vkDestroyDevice = "vkDestroyDevice",
    get_device_queue: PFN_vkGetDeviceQueue = "vkGetDeviceQueue",
    get_device_queue2: PFN_vkGetDeviceQueue2 = "vkGetDeviceQueue2",
    queue_submit: PFN_vkQueueSubmit = "vkQueueSubmit",
    queue_submit2: PFN_vkQueueSubmit2 = "vkQueueSubmit2",
    queue_submit2_khr: PFN_vkQueueSubmit2 = "vkQueueSubmit2KHR",
    queue_wait_idle: PFN_vkQueueWaitIdle = "vkQueueWaitIdle",
    device_wait_idle: PFN_vkDeviceWaitIdle = "vkDeviceWaitIdle",
    wait_for_fences: PFN_vkWaitForFences = "vkWaitForFences",
    get_fence_status: PFN_vkGetFenceStatus = "vkGetFenceStatus",
    wait_semaphores: PFN_vkWaitSemaphores = "vkWaitSemaphores",
    wait_semaphores_khr: PFN_vkWaitSemaphores = "vkWaitSemaphoresKHR",
    create_command_pool: PFN_vkCreateCommandPool = "vkCreateCommandPool",
    destroy_command_pool: PFN_vkDestroyCommandPool = "vkDestroyCommandPool",
    reset_command_pool: PFN_vkResetCommandPool = "vkResetCommandPool",
    allocate_command_buffers: PFN_vkAllocateCommandBuffers = "vkAllocateCommandBuffers",
    free_command_buffers: PFN_vkFreeCommandBuffers = "vkFreeCommandBuffers",
    begin_command_buffer: PFN_vkBeginCommandBuffer = "vkBeginCommandBuffer",
    end_command_buffer: PFN_vkEndCommandBuffer = "vkEndCommandBuffer",
    reset_command_buffer: PFN_vkResetCommandBuffer = "vkResetCommandBuffer",
    cmd_bind_pipeline: PFN_vkCmdBindPipeline = "vkCmdBindPipeline",
    cmd_bind_descriptor_sets: PFN_vkCmdBindDescriptorSets = "vkCmdBindDescriptorSets",
    cmd_push_constants: PFN_vkCmdPushConstants = "vkCmdPushConstants",
    cmd_push_descriptor_set_khr: PFN_vkCmdPushDescriptorSetKHR = "vkCmdPushDescriptorSetKHR",
    cmd_dispatch: PFN_vkCmdDispatch = "vkCmdDispatch",
    cmd_dispatch_base: PFN_vkCmdDispatchBase = "vkCmdDispatchBase",
    cmd_dispatch_indirect: PFN_vkCmdDispatchIndirect = "vkCmdDispatchIndirect",
    cmd_copy_buffer: PFN_vkCmdCopyBuffer = "vkCmdCopyBuffer",
    cmd_copy_image: PFN_vkCmdCopyImage = "vkCmdCopyImage",
    cmd_copy_buffer_to_image: PFN_vkCmdCopyBufferToImage = "vkCmdCopyBufferToImage",
    cmd_copy_image_to_buffer: PFN_vkCmdCopyImageToBuffer = "vkCmdCopyImageToBuffer",
    cmd_fill_buffer: PFN_vkCmdFillBuffer = "vkCmdFillBuffer",
    cmd_update_buffer: PFN_vkCmdUpdateBuffer = "vkCmdUpdateBuffer",
    cmd_pipeline_barrier: PFN_vkCmdPipelineBarrier = "vkCmdPipelineBarrier",
    cmd_pipeline_barrier2: PFN_vkCmdPipelineBarrier2 = "vkCmdPipelineBarrier2",
    cmd_pipeline_barrier2_khr: PFN_vkCmdPipelineBarrier2 = "vkCmdPipelineBarrier2KHR",
    cmd_write_timestamp: PFN_vkCmdWriteTimestamp = "vkCmdWriteTimestamp",
    cmd_execute_commands: PFN_vkCmdExecuteCommands = "vkCmdExecuteCommands",
    allocate_descriptor_sets: PFN_vkAllocateDescriptorSets = "vkAllocateDescriptorSets",
    update_descriptor_sets: PFN_vkUpdateDescriptorSets = "vkUpdateDescriptorSets",
    update_descriptor_set_with_template: PFN_vkUpdateDescriptorSetWithTemplate =
        "vkUpdateDescriptorSetWithTemplate",
    create_compute_pipelines: PFN_vkCreateComputePipelines = "vkCreateComputePipelines",
    set_debug_utils_object_name: PFN_vkSetDebugUtilsObjectNameEXT =
        "vkSetDebugUtilsObjectNameEXT",
    cmd_begin_debug_utils_label: PFN_vkCmdBeginDebugUtilsLabelEXT =
        "vkCmdBeginDebugUtilsLabelEXT",
    cmd_end_debug_utils_label: PFN_vkCmdEndDebugUtilsLabelEXT = "vkCmdEndDebugUtilsLabelEXT",
    map_memory: PFN_vkMapMemory = "vkMapMemory",
    unmap_memory: PFN_vkUnmapMemory = "vkUnmapMemory",
    flush_mapped_memory_ranges: PFN_vkFlushMappedMemoryRanges = "vkFlushMappedMemoryRanges",
    invalidate_mapped_memory_ranges: PFN_vkInvalidateMappedMemoryRanges =
        "vkInvalidateMappedMemoryRanges",
    // The layer's own use.
    create_query_pool: PFN_vkCreateQueryPool = "vkCreateQueryPool",
    destroy_query_pool: PFN_vkDestroyQueryPool = "vkDestroyQueryPool",
    get_query_pool_results: PFN_vkGetQueryPoolResults = "vkGetQueryPoolResults",
    cmd_reset_query_pool: PFN_vkCmdResetQueryPool = "vkCmdResetQueryPool",
    get_calibrated_timestamps_khr: PFN_vkGetCalibratedTimestampsKHR =
        "vkGetCalibratedTimestampsKHR",
    get_calibrated_timestamps_ext: PFN_vkGetCalibratedTimestampsKHR =
        "vkGetCalibratedTimestampsEXT",
}

/// Queries in the layer's pool: two per timestamp pair.
const QUERY_SLOTS: u32 = 16_384;
/// At the dispatch level a command buffer takes slots in blocks of this many pairs, with one
/// query reset per block rather than one per dispatch.
const BLOCK_SLOTS: u32 = 32;

/// The layer's own timestamp resources on one device.
struct Timer {
    pool: vk::QueryPool,
    /// Free slots; at the dispatch level, the first slots of free blocks.
    free: Vec<u32>,
    /// Dispatch level: the block each command buffer is filling (first slot, slots used).
    blocks: HashMap<u64, (u32, u32)>,
    /// Per queue family: the layer's command pool, and per slot the start and end command
    /// buffers of a submit-level pair (recorded once, reused whenever the slot is).
    cmd_pools: HashMap<u32, vk::CommandPool>,
    wrappers: HashMap<(u32, u32), (vk::CommandBuffer, vk::CommandBuffer)>,
}

struct Inner {
    state: DeviceState,
    timer: Option<Timer>,
}

struct DeviceData {
    handle: vk::Device,
    next_gdpa: vk::PFN_vkGetDeviceProcAddr,
    next: Next,
    set_loader_data: Option<SetDeviceLoaderData>,
    period_ns: f64,
    valid_mask: u64,
    inner: Mutex<Inner>,
}

impl DeviceData {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn ns(&self, ticks: u64) -> u64 {
        ((ticks & self.valid_mask) as f64 * self.period_ns) as u64
    }

    /// Reads a timestamp pair: waiting when its submission is known complete, else only if it
    /// is available. `None` when it is not.
    unsafe fn read_pair(
        &self,
        pool: vk::QueryPool,
        slot: u32,
        complete: bool,
    ) -> Option<(u64, u64)> {
        let f = self.next.get_query_pool_results?;
        if complete {
            let mut v = [0u64; 2];
            let r = f(
                self.handle,
                pool,
                slot * 2,
                2,
                16,
                v.as_mut_ptr().cast(),
                8,
                vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WAIT,
            );
            (r == vk::Result::SUCCESS).then_some((v[0], v[1]))
        } else {
            let mut v = [0u64; 4];
            let r = f(
                self.handle,
                pool,
                slot * 2,
                2,
                32,
                v.as_mut_ptr().cast(),
                16,
                vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WITH_AVAILABILITY,
            );
            (r == vk::Result::SUCCESS && v[1] != 0 && v[3] != 0).then_some((v[0], v[2]))
        }
    }

    /// Reads `list` into GPU spans of the current group; frees the layer's own slots.
    unsafe fn read_stamps(&self, g: &mut Inner, list: &[Pending], complete: bool) {
        let Some(pool) = g.timer.as_ref().map(|t| t.pool) else {
            return;
        };
        for p in list {
            match self.read_pair(pool, p.stamp.slot, complete) {
                Some((a, b)) => g.state.gpu_span(p, self.ns(a), self.ns(b)),
                None => g.state.dropped(1),
            }
            if p.owner.is_none()
                && let Some(t) = g.timer.as_mut()
            {
                t.free.push(p.stamp.slot);
            }
        }
    }

    /// Reads every stamp whose submission a wait proved complete.
    unsafe fn harvest(&self, g: &mut Inner) {
        let done = g.state.take_complete();
        self.read_stamps(g, &done, true);
    }

    fn free_slots(g: &mut Inner, slots: Vec<u32>) {
        let blocks = g.state.level == Level::Dispatch;
        if let Some(t) = g.timer.as_mut() {
            if blocks {
                // The blocks the slots came from (each once; a block is never half-free).
                let mut firsts: Vec<u32> = slots.iter().map(|s| s - s % BLOCK_SLOTS).collect();
                firsts.sort_unstable();
                firsts.dedup();
                t.free.extend(firsts);
            } else {
                t.free.extend(slots);
            }
        }
    }

    /// A dispatch-level slot for `cb` from its current block, or the first of a new block (whose
    /// queries are reset in `cb` first).
    unsafe fn take_block_slot(&self, g: &mut Inner, cb: vk::CommandBuffer) -> Option<u32> {
        let k = cb.as_raw();
        let t = g.timer.as_mut()?;
        if let Some((first, used)) = t.blocks.get_mut(&k)
            && *used < BLOCK_SLOTS
        {
            *used += 1;
            return Some(*first + *used - 1);
        }
        let Some(first) = t.free.pop() else {
            g.state.dropped(1);
            return None;
        };
        t.blocks.insert(k, (first, 1));
        if let Some(reset) = self.next.cmd_reset_query_pool {
            reset(cb, t.pool, first * 2, BLOCK_SLOTS * 2);
        }
        Some(first)
    }

    /// Forgets the block `cb` was filling (its slots come back through its stamps).
    fn end_block(g: &mut Inner, cb: u64) {
        if let Some(t) = g.timer.as_mut() {
            t.blocks.remove(&cb);
        }
    }

    fn take_slot(g: &mut Inner) -> Option<u32> {
        let slot = g.timer.as_mut().and_then(|t| t.free.pop());
        if slot.is_none() && g.timer.is_some() {
            g.state.dropped(1);
        }
        slot
    }

    /// Records a query reset (unless the slot's block was reset already) and the start
    /// timestamp of `slot` into `cb`.
    unsafe fn stamp_start(&self, g: &Inner, cb: vk::CommandBuffer, slot: u32, reset: bool) {
        if let (Some(t), Some(r), Some(ts)) = (
            g.timer.as_ref(),
            self.next.cmd_reset_query_pool,
            self.next.cmd_write_timestamp,
        ) {
            if reset {
                r(cb, t.pool, slot * 2, 2);
            }
            ts(cb, vk::PipelineStageFlags::TOP_OF_PIPE, t.pool, slot * 2);
        }
    }

    unsafe fn stamp_end(&self, g: &Inner, cb: vk::CommandBuffer, slot: u32) {
        if let (Some(t), Some(ts)) = (g.timer.as_ref(), self.next.cmd_write_timestamp) {
            ts(
                cb,
                vk::PipelineStageFlags::BOTTOM_OF_PIPE,
                t.pool,
                slot * 2 + 1,
            );
        }
    }

    /// The layer's start and end command buffers for a submit-level pair in `slot` on `family`.
    unsafe fn wrappers(
        &self,
        g: &mut Inner,
        family: u32,
        slot: u32,
    ) -> Option<(vk::CommandBuffer, vk::CommandBuffer)> {
        if let Some(w) = g.timer.as_ref()?.wrappers.get(&(family, slot)) {
            return Some(*w);
        }
        let n = self.next;
        let pool = match g.timer.as_ref()?.cmd_pools.get(&family) {
            Some(p) => *p,
            None => {
                let info = vk::CommandPoolCreateInfo::default().queue_family_index(family);
                let mut p = vk::CommandPool::null();
                if n.create_command_pool?(self.handle, &info, std::ptr::null(), &mut p)
                    != vk::Result::SUCCESS
                {
                    return None;
                }
                g.timer.as_mut()?.cmd_pools.insert(family, p);
                p
            }
        };
        let info = vk::CommandBufferAllocateInfo::default()
            .command_pool(pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(2);
        let mut cbs = [vk::CommandBuffer::null(); 2];
        if n.allocate_command_buffers?(self.handle, &info, cbs.as_mut_ptr()) != vk::Result::SUCCESS
        {
            return None;
        }
        // The loader's dispatch pointer goes into command buffers the layer made itself, so
        // that the layers below it find their own state for them.
        if let Some(set) = self.set_loader_data {
            for cb in cbs {
                if set(self.handle, cb.as_raw() as usize as *mut c_void) != vk::Result::SUCCESS {
                    return None;
                }
            }
        }
        let begin = vk::CommandBufferBeginInfo::default();
        let (b, e) = (n.begin_command_buffer?, n.end_command_buffer?);
        let ok = vk::Result::SUCCESS;
        if b(cbs[0], &begin) != ok {
            return None;
        }
        self.stamp_start(g, cbs[0], slot, true);
        if e(cbs[0]) != ok || b(cbs[1], &begin) != ok {
            return None;
        }
        self.stamp_end(g, cbs[1], slot);
        if e(cbs[1]) != ok {
            return None;
        }
        let w = (cbs[0], cbs[1]);
        g.timer.as_mut()?.wrappers.insert((family, slot), w);
        Some(w)
    }

    /// A wait returned at `end` after starting at `start`: record it, read what it completed,
    /// and end the wait group when it succeeded.
    unsafe fn waited(&self, kind: &str, what: Completed<'_>, r: vk::Result, start: u64) {
        let end = now_ns();
        let mut g = self.lock();
        g.state.host_span("wait", start, end);
        if r == vk::Result::SUCCESS {
            g.state.completed(what);
            self.harvest(&mut g);
            g.state.close_group(kind, end);
        }
    }
}

// ---- negotiation and the proc-addr functions --------------------------------------------------

/// The layer's one exported symbol.
///
/// # Safety
/// `p` points to the loader's `VkNegotiateLayerInterface`.
#[unsafe(no_mangle)]
pub unsafe extern "system" fn vkNegotiateLoaderLayerInterfaceVersion(
    p: *mut NegotiateLayerInterface,
) -> vk::Result {
    if p.is_null() || (*p).s_type != LAYER_NEGOTIATE_INTERFACE_STRUCT {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    }
    if (*p).loader_layer_interface_version < 2 {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    }
    (*p).loader_layer_interface_version = 2;
    (*p).pfn_get_instance_proc_addr = Some(get_instance_proc_addr);
    (*p).pfn_get_device_proc_addr = Some(get_device_proc_addr);
    (*p).pfn_get_physical_device_proc_addr = std::ptr::null();
    vk::Result::SUCCESS
}

fn as_void(f: *const ()) -> vk::PFN_vkVoidFunction {
    // SAFETY: `f` is one of this module's `extern "system"` functions; the loader casts it back
    // to the type of the command it asked for, which is the function's own type.
    Some(unsafe { transmute::<*const (), unsafe extern "system" fn()>(f) })
}

/// The layer's version of a device-level command, if it intercepts it.
fn intercept(name: &[u8]) -> vk::PFN_vkVoidFunction {
    let f: *const () = match name {
        b"vkGetDeviceProcAddr" => get_device_proc_addr as *const (),
        b"vkDestroyDevice" => destroy_device as *const (),
        b"vkGetDeviceQueue" => get_device_queue as *const (),
        b"vkGetDeviceQueue2" => get_device_queue2 as *const (),
        b"vkQueueSubmit" => queue_submit as *const (),
        b"vkQueueSubmit2" => queue_submit2 as *const (),
        b"vkQueueSubmit2KHR" => queue_submit2_khr as *const (),
        b"vkQueueWaitIdle" => queue_wait_idle as *const (),
        b"vkDeviceWaitIdle" => device_wait_idle as *const (),
        b"vkWaitForFences" => wait_for_fences as *const (),
        b"vkWaitSemaphores" => wait_semaphores as *const (),
        b"vkWaitSemaphoresKHR" => wait_semaphores_khr as *const (),
        b"vkCreateCommandPool" => create_command_pool as *const (),
        b"vkDestroyCommandPool" => destroy_command_pool as *const (),
        b"vkResetCommandPool" => reset_command_pool as *const (),
        b"vkAllocateCommandBuffers" => allocate_command_buffers as *const (),
        b"vkFreeCommandBuffers" => free_command_buffers as *const (),
        b"vkBeginCommandBuffer" => begin_command_buffer as *const (),
        b"vkEndCommandBuffer" => end_command_buffer as *const (),
        b"vkResetCommandBuffer" => reset_command_buffer as *const (),
        b"vkCmdBindPipeline" => cmd_bind_pipeline as *const (),
        b"vkCmdBindDescriptorSets" => cmd_bind_descriptor_sets as *const (),
        b"vkCmdPushConstants" => cmd_push_constants as *const (),
        b"vkCmdPushDescriptorSetKHR" => cmd_push_descriptor_set_khr as *const (),
        b"vkCmdDispatch" => cmd_dispatch as *const (),
        b"vkCmdDispatchBase" => cmd_dispatch_base as *const (),
        b"vkCmdDispatchIndirect" => cmd_dispatch_indirect as *const (),
        b"vkCmdCopyBuffer" => cmd_copy_buffer as *const (),
        b"vkCmdCopyImage" => cmd_copy_image as *const (),
        b"vkCmdCopyBufferToImage" => cmd_copy_buffer_to_image as *const (),
        b"vkCmdCopyImageToBuffer" => cmd_copy_image_to_buffer as *const (),
        b"vkCmdFillBuffer" => cmd_fill_buffer as *const (),
        b"vkCmdUpdateBuffer" => cmd_update_buffer as *const (),
        b"vkCmdPipelineBarrier" => cmd_pipeline_barrier as *const (),
        b"vkCmdPipelineBarrier2" => cmd_pipeline_barrier2 as *const (),
        b"vkCmdPipelineBarrier2KHR" => cmd_pipeline_barrier2_khr as *const (),
        b"vkCmdWriteTimestamp" => cmd_write_timestamp as *const (),
        b"vkCmdExecuteCommands" => cmd_execute_commands as *const (),
        b"vkAllocateDescriptorSets" => allocate_descriptor_sets as *const (),
        b"vkUpdateDescriptorSets" => update_descriptor_sets as *const (),
        b"vkUpdateDescriptorSetWithTemplate" => update_descriptor_set_with_template as *const (),
        b"vkCreateComputePipelines" => create_compute_pipelines as *const (),
        b"vkSetDebugUtilsObjectNameEXT" => set_debug_utils_object_name as *const (),
        b"vkCmdBeginDebugUtilsLabelEXT" => cmd_begin_debug_utils_label as *const (),
        b"vkCmdEndDebugUtilsLabelEXT" => cmd_end_debug_utils_label as *const (),
        b"vkMapMemory" => map_memory as *const (),
        b"vkUnmapMemory" => unmap_memory as *const (),
        b"vkFlushMappedMemoryRanges" => flush_mapped_memory_ranges as *const (),
        b"vkInvalidateMappedMemoryRanges" => invalidate_mapped_memory_ranges as *const (),
        _ => return None,
    };
    as_void(f)
}

unsafe extern "system" fn get_instance_proc_addr(
    instance: vk::Instance,
    name: *const c_char,
) -> vk::PFN_vkVoidFunction {
    if name.is_null() {
        return None;
    }
    let n = CStr::from_ptr(name).to_bytes();
    match n {
        b"vkGetInstanceProcAddr" => return as_void(get_instance_proc_addr as *const ()),
        b"vkCreateInstance" => return as_void(create_instance as *const ()),
        b"vkDestroyInstance" => return as_void(destroy_instance as *const ()),
        b"vkCreateDevice" => return as_void(create_device as *const ()),
        _ => {}
    }
    if instance == vk::Instance::null() {
        return None;
    }
    let inst = instance_of(instance)?;
    let next = (inst.next_gipa)(instance, name);
    match (next, intercept(n)) {
        (Some(_), Some(ours)) => Some(ours),
        (next, _) => next,
    }
}

unsafe extern "system" fn get_device_proc_addr(
    device: vk::Device,
    name: *const c_char,
) -> vk::PFN_vkVoidFunction {
    if name.is_null() || device == vk::Device::null() {
        return None;
    }
    let d = dev(device)?;
    let next = (d.next_gdpa)(device, name);
    match (next, intercept(CStr::from_ptr(name).to_bytes())) {
        (Some(_), Some(ours)) => Some(ours),
        (next, _) => next,
    }
}

// ---- instance -------------------------------------------------------------------------------

unsafe extern "system" fn create_instance(
    info: *const vk::InstanceCreateInfo<'_>,
    alloc: *const vk::AllocationCallbacks<'_>,
    out: *mut vk::Instance,
) -> vk::Result {
    let link = find_chain(
        (*info).p_next,
        vk::StructureType::LOADER_INSTANCE_CREATE_INFO,
        VK_LAYER_LINK_INFO,
    );
    if link.is_null() || (*link).u.is_null() {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    }
    let l = (*link).u as *mut LayerInstanceLink;
    let next_gipa = (*l).pfn_next_get_instance_proc_addr;
    (*link).u = (*l).p_next.cast();
    let Some(create) = transmute::<vk::PFN_vkVoidFunction, Option<vk::PFN_vkCreateInstance>>(
        next_gipa(vk::Instance::null(), c"vkCreateInstance".as_ptr()),
    ) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    let r = create(info, alloc, out);
    if r != vk::Result::SUCCESS {
        return r;
    }
    let instance = *out;
    let fns = ash::Instance::load_with(
        |name| {
            transmute::<vk::PFN_vkVoidFunction, *const c_void>(next_gipa(instance, name.as_ptr()))
        },
        instance,
    );
    // The raw file is opened (and the process announced) with the first instance.
    let _ = output();
    instances()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(
            key(instance),
            Arc::new(InstanceData {
                handle: instance,
                next_gipa,
                fns,
            }),
        );
    r
}

unsafe extern "system" fn destroy_instance(
    instance: vk::Instance,
    alloc: *const vk::AllocationCallbacks<'_>,
) {
    let k = key(instance);
    let inst = instances()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&k);
    if let Some(i) = inst {
        (i.fns.fp_v1_0().destroy_instance)(instance, alloc);
    }
}

// ---- device ---------------------------------------------------------------------------------

fn c_name(bytes: &[c_char]) -> String {
    let b: Vec<u8> = bytes
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&b).into_owned()
}

fn version(v: u32) -> String {
    format!(
        "{}.{}.{}",
        vk::api_version_major(v),
        vk::api_version_minor(v),
        vk::api_version_patch(v)
    )
}

unsafe fn device_meta(inst: &InstanceData, pd: vk::PhysicalDevice) -> DeviceMeta {
    let props = inst.fns.get_physical_device_properties(pd);
    let mut driver = String::new();
    if props.api_version >= vk::API_VERSION_1_2 {
        let mut dp = vk::PhysicalDeviceDriverProperties::default();
        let mut p2 = vk::PhysicalDeviceProperties2::default().push_next(&mut dp);
        (inst.fns.fp_v1_1().get_physical_device_properties2)(pd, &mut p2);
        driver = format!("{} {}", c_name(&dp.driver_name), c_name(&dp.driver_info))
            .trim()
            .to_owned();
    }
    let device_type = match props.device_type {
        vk::PhysicalDeviceType::DISCRETE_GPU => "discrete",
        vk::PhysicalDeviceType::INTEGRATED_GPU => "integrated",
        vk::PhysicalDeviceType::VIRTUAL_GPU => "virtual",
        vk::PhysicalDeviceType::CPU => "cpu",
        _ => "other",
    };
    DeviceMeta {
        name: c_name(&props.device_name),
        device_type: device_type.into(),
        vendor_id: props.vendor_id,
        device_id: props.device_id,
        driver,
        api_version: version(props.api_version),
        timestamp_period_ns: props.limits.timestamp_period as f64,
        compute_units: 0,
        memory_bandwidth_gbps: None,
    }
}

unsafe extern "system" fn create_device(
    pd: vk::PhysicalDevice,
    info: *const vk::DeviceCreateInfo<'_>,
    alloc: *const vk::AllocationCallbacks<'_>,
    out: *mut vk::Device,
) -> vk::Result {
    let link = find_chain(
        (*info).p_next,
        vk::StructureType::LOADER_DEVICE_CREATE_INFO,
        VK_LAYER_LINK_INFO,
    );
    if link.is_null() || (*link).u.is_null() {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    }
    let l = (*link).u as *mut LayerDeviceLink;
    let next_gipa = (*l).pfn_next_get_instance_proc_addr;
    let next_gdpa = (*l).pfn_next_get_device_proc_addr;
    (*link).u = (*l).p_next.cast();
    let cb = find_chain(
        (*info).p_next,
        vk::StructureType::LOADER_DEVICE_CREATE_INFO,
        VK_LOADER_DATA_CALLBACK,
    );
    let set_loader_data: Option<SetDeviceLoaderData> = if cb.is_null() || (*cb).u.is_null() {
        None
    } else {
        Some(transmute::<*mut c_void, SetDeviceLoaderData>((*cb).u))
    };
    let Some(inst) = instance_of(pd) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    let Some(create) = transmute::<vk::PFN_vkVoidFunction, Option<vk::PFN_vkCreateDevice>>(
        next_gipa(inst.handle, c"vkCreateDevice".as_ptr()),
    ) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };

    // Calibrated timestamps, added to the program's extensions when GPU timestamps are on.
    let level = if output().enabled() {
        config().level
    } else {
        Level::Off
    };
    let requested: Vec<*const c_char> = slice(
        (*info).pp_enabled_extension_names,
        (*info).enabled_extension_count,
    )
    .to_vec();
    let has = |name: &CStr| {
        requested
            .iter()
            .any(|&p| !p.is_null() && CStr::from_ptr(p) == name)
    };
    let available = inst
        .fns
        .enumerate_device_extension_properties(pd)
        .unwrap_or_default();
    let supports = |name: &CStr| {
        available
            .iter()
            .any(|e| e.extension_name_as_c_str().is_ok_and(|n| n == name))
    };
    let calib: Option<&CStr> = [
        ash::khr::calibrated_timestamps::NAME,
        ash::ext::calibrated_timestamps::NAME,
    ]
    .into_iter()
    .find(|n| level != Level::Off && (has(n) || supports(n)));
    let mut names = requested.clone();
    if let Some(n) = calib
        && !has(n)
    {
        names.push(n.as_ptr());
    }
    let mut ci = *info;
    ci.enabled_extension_count = names.len() as u32;
    ci.pp_enabled_extension_names = names.as_ptr();
    let r = create(pd, &ci, alloc, out);
    if r != vk::Result::SUCCESS {
        return r;
    }
    let device = *out;
    let next = Next::load(next_gdpa, device);
    let meta = device_meta(&inst, pd);
    let families = inst.fns.get_physical_device_queue_family_properties(pd);
    let valid_bits = families
        .iter()
        .map(|f| f.timestamp_valid_bits)
        .max()
        .unwrap_or(0);
    let index = device_count();
    let out_stream = output().clone();
    let mut state = DeviceState::new(index, level, out_stream.clone(), now_ns());
    state.timestamp_families = families
        .iter()
        .map(|f| f.timestamp_valid_bits > 0)
        .collect();
    state.transfer_families = families
        .iter()
        .map(|f| {
            f.queue_flags.contains(vk::QueueFlags::TRANSFER)
                && !f
                    .queue_flags
                    .intersects(vk::QueueFlags::COMPUTE | vk::QueueFlags::GRAPHICS)
        })
        .collect();

    // The layer's query pool.
    let mut timer = None;
    if level != Level::Off && valid_bits > 0 && meta.timestamp_period_ns > 0.0 {
        let qi = vk::QueryPoolCreateInfo::default()
            .query_type(vk::QueryType::TIMESTAMP)
            .query_count(QUERY_SLOTS * 2);
        let mut pool = vk::QueryPool::null();
        if let Some(f) = next.create_query_pool
            && f(device, &qi, std::ptr::null(), &mut pool) == vk::Result::SUCCESS
        {
            let step = if level == Level::Dispatch {
                BLOCK_SLOTS
            } else {
                1
            };
            timer = Some(Timer {
                pool,
                free: (0..QUERY_SLOTS).step_by(step as usize).rev().collect(),
                blocks: HashMap::new(),
                cmd_pools: HashMap::new(),
                wrappers: HashMap::new(),
            });
        }
    }
    let period_ns = meta.timestamp_period_ns;
    let valid_mask = if valid_bits >= 64 {
        u64::MAX
    } else {
        (1u64 << valid_bits) - 1
    };
    let clock = if timer.is_none() {
        ClockMeta {
            calibrated: false,
            method: "none".into(),
            max_deviation_ns: None,
            gpu_minus_host_ns: 0,
        }
    } else {
        let f = match calib {
            Some(n) if n == ash::khr::calibrated_timestamps::NAME => next
                .get_calibrated_timestamps_khr
                .map(|f| (f, "VK_KHR_calibrated_timestamps")),
            Some(_) => next
                .get_calibrated_timestamps_ext
                .map(|f| (f, "VK_EXT_calibrated_timestamps")),
            None => None,
        };
        let sample = f.and_then(|(f, method)| {
            let infos = [
                vk::CalibratedTimestampInfoKHR::default().time_domain(vk::TimeDomainKHR::DEVICE),
                vk::CalibratedTimestampInfoKHR::default()
                    .time_domain(vk::TimeDomainKHR::CLOCK_MONOTONIC),
            ];
            let mut ts = [0u64; 2];
            let mut dev_ns = 0u64;
            (f(device, 2, infos.as_ptr(), ts.as_mut_ptr(), &mut dev_ns) == vk::Result::SUCCESS)
                .then_some((ts, dev_ns, method))
        });
        match sample {
            Some((ts, max_dev, method)) => ClockMeta {
                calibrated: true,
                method: method.into(),
                max_deviation_ns: Some(max_dev),
                gpu_minus_host_ns: ((ts[0] & valid_mask) as f64 * period_ns) as i64 - ts[1] as i64,
            },
            None => ClockMeta {
                calibrated: false,
                method: "fence-fallback".into(),
                max_deviation_ns: None,
                gpu_minus_host_ns: 0,
            },
        }
    };
    out_stream.write(&RawRecord::Device(RawDevice {
        device: index,
        info: meta,
        clock,
        timestamps: if timer.is_some() {
            level.name().into()
        } else {
            "off".into()
        },
    }));
    let data = DeviceData {
        handle: device,
        next_gdpa,
        next,
        set_loader_data,
        period_ns,
        valid_mask,
        inner: Mutex::new(Inner { state, timer }),
    };
    devices()
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key(device), Arc::new(data));
    let _ = next_gipa;
    r
}

unsafe extern "system" fn destroy_device(
    device: vk::Device,
    alloc: *const vk::AllocationCallbacks<'_>,
) {
    let k = key(device);
    let d = devices()
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&k);
    let Some(d) = d else {
        return;
    };
    {
        let mut g = d.lock();
        g.state.close_group("destroy", now_ns());
        if let Some(t) = g.timer.take() {
            if let Some(f) = d.next.destroy_command_pool {
                for p in t.cmd_pools.values() {
                    f(device, *p, std::ptr::null());
                }
            }
            if let Some(f) = d.next.destroy_query_pool {
                f(device, t.pool, std::ptr::null());
            }
        }
    }
    if let Some(f) = d.next.destroy_device {
        f(device, alloc);
    }
}

unsafe extern "system" fn get_device_queue(
    device: vk::Device,
    family: u32,
    index: u32,
    out: *mut vk::Queue,
) {
    let Some(d) = dev(device) else { return };
    let Some(f) = d.next.get_device_queue else {
        return;
    };
    f(device, family, index, out);
    if !out.is_null() {
        d.lock().state.add_queue((*out).as_raw(), family);
    }
}

unsafe extern "system" fn get_device_queue2(
    device: vk::Device,
    info: *const vk::DeviceQueueInfo2<'_>,
    out: *mut vk::Queue,
) {
    let Some(d) = dev(device) else { return };
    let Some(f) = d.next.get_device_queue2 else {
        return;
    };
    f(device, info, out);
    if !out.is_null() && !info.is_null() {
        d.lock()
            .state
            .add_queue((*out).as_raw(), (*info).queue_family_index);
    }
}

// ---- submits and waits ------------------------------------------------------------------------

unsafe extern "system" fn queue_submit(
    queue: vk::Queue,
    count: u32,
    submits: *const vk::SubmitInfo<'_>,
    fence: vk::Fence,
) -> vk::Result {
    let Some(d) = dev(queue) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    let Some(f) = d.next.queue_submit else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    let infos = slice(submits, count);
    let batches: Vec<Vec<u64>> = infos
        .iter()
        .map(|s| {
            slice(s.p_command_buffers, s.command_buffer_count)
                .iter()
                .map(|c| c.as_raw())
                .collect()
        })
        .collect();
    let t0 = now_ns();
    let mut g = d.lock();
    let fence_key = (fence != vk::Fence::null()).then(|| fence.as_raw());
    let info = g.state.submit(queue.as_raw(), &batches, fence_key);
    let stale = g.state.unread_of(&info.stamps);
    d.read_stamps(&mut g, &stale, false);
    g.state.forget_pending(&stale);
    let mut pending = info.stamps;

    // Submit level: the layer's own command buffers around the program's.
    let first = batches.iter().position(|b| !b.is_empty());
    let last = batches.iter().rposition(|b| !b.is_empty());
    let device_group = infos.iter().any(|s| {
        !s.p_next.is_null() && {
            let b = s.p_next as *const vk::BaseInStructure<'_>;
            (*b).s_type == vk::StructureType::DEVICE_GROUP_SUBMIT_INFO
        }
    });
    let family = g.state.queue_family(queue.as_raw());
    let mut wrapped: Option<(Vec<vk::SubmitInfo<'_>>, Vec<Vec<vk::CommandBuffer>>)> = None;
    if g.state.level == Level::Submit
        && !device_group
        && let (Some(first), Some(last), Some(family)) = (first, last, family)
        && g.state
            .timestamp_families
            .get(family as usize)
            .copied()
            .unwrap_or(false)
        && let Some(slot) = DeviceData::take_slot(&mut g)
    {
        match d.wrappers(&mut g, family, slot) {
            Some((start, end)) => {
                let mut lists: Vec<Vec<vk::CommandBuffer>> = infos
                    .iter()
                    .map(|s| slice(s.p_command_buffers, s.command_buffer_count).to_vec())
                    .collect();
                lists[first].insert(0, start);
                lists[last].push(end);
                let mut copy: Vec<vk::SubmitInfo<'_>> = infos.to_vec();
                for (s, l) in copy.iter_mut().zip(&lists) {
                    s.command_buffer_count = l.len() as u32;
                    s.p_command_buffers = l.as_ptr();
                }
                let op = g.state.op("submit", "region");
                pending.push(Pending {
                    group: info.group,
                    submit: info.index,
                    queue_kind: info.kind,
                    queue: queue.as_raw(),
                    seq: info.seq,
                    stamp: Stamp { slot, op },
                    owner: None,
                });
                wrapped = Some((copy, lists));
            }
            None => DeviceData::free_slots(&mut g, vec![slot]),
        }
    }
    g.state.add_pending(pending);
    let r = match &wrapped {
        Some((copy, _)) => f(queue, copy.len() as u32, copy.as_ptr(), fence),
        None => f(queue, count, submits, fence),
    };
    g.state.host_span("submit", t0, now_ns());
    r
}

unsafe fn submit2(
    queue: vk::Queue,
    count: u32,
    submits: *const vk::SubmitInfo2<'_>,
    fence: vk::Fence,
    khr: bool,
) -> vk::Result {
    let Some(d) = dev(queue) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    let f = if khr {
        d.next.queue_submit2_khr
    } else {
        d.next.queue_submit2
    };
    let Some(f) = f else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    let batches: Vec<Vec<u64>> = slice(submits, count)
        .iter()
        .map(|s| {
            slice(s.p_command_buffer_infos, s.command_buffer_info_count)
                .iter()
                .map(|c| c.command_buffer.as_raw())
                .collect()
        })
        .collect();
    let t0 = now_ns();
    let mut g = d.lock();
    let fence_key = (fence != vk::Fence::null()).then(|| fence.as_raw());
    let info = g.state.submit(queue.as_raw(), &batches, fence_key);
    let stale = g.state.unread_of(&info.stamps);
    d.read_stamps(&mut g, &stale, false);
    g.state.forget_pending(&stale);
    g.state.add_pending(info.stamps);
    let r = f(queue, count, submits, fence);
    g.state.host_span("submit", t0, now_ns());
    r
}

unsafe extern "system" fn queue_submit2(
    queue: vk::Queue,
    count: u32,
    submits: *const vk::SubmitInfo2<'_>,
    fence: vk::Fence,
) -> vk::Result {
    submit2(queue, count, submits, fence, false)
}

unsafe extern "system" fn queue_submit2_khr(
    queue: vk::Queue,
    count: u32,
    submits: *const vk::SubmitInfo2<'_>,
    fence: vk::Fence,
) -> vk::Result {
    submit2(queue, count, submits, fence, true)
}

unsafe extern "system" fn queue_wait_idle(queue: vk::Queue) -> vk::Result {
    let Some(d) = dev(queue) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    let Some(f) = d.next.queue_wait_idle else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    let t0 = now_ns();
    let r = f(queue);
    d.waited("queue-idle", Completed::Queue(queue.as_raw()), r, t0);
    r
}

unsafe extern "system" fn device_wait_idle(device: vk::Device) -> vk::Result {
    let Some(d) = dev(device) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    let Some(f) = d.next.device_wait_idle else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    let t0 = now_ns();
    let r = f(device);
    d.waited("device-idle", Completed::Device, r, t0);
    r
}

unsafe extern "system" fn wait_for_fences(
    device: vk::Device,
    count: u32,
    fences: *const vk::Fence,
    wait_all: vk::Bool32,
    timeout: u64,
) -> vk::Result {
    let Some(d) = dev(device) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    let Some(f) = d.next.wait_for_fences else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    d.lock().state.fence_wait();
    let t0 = now_ns();
    let r = f(device, count, fences, wait_all, timeout);
    let list = slice(fences, count);
    let done: Vec<u64> = if wait_all == vk::TRUE || count == 1 {
        list.iter().map(|f| f.as_raw()).collect()
    } else {
        // waitAny: the fences that are signalled now.
        list.iter()
            .filter(|&&fe| {
                d.next
                    .get_fence_status
                    .is_some_and(|s| s(device, fe) == vk::Result::SUCCESS)
            })
            .map(|f| f.as_raw())
            .collect()
    };
    d.waited("fence", Completed::Fences(&done), r, t0);
    r
}

unsafe fn semaphores(
    device: vk::Device,
    info: *const vk::SemaphoreWaitInfo<'_>,
    timeout: u64,
    khr: bool,
) -> vk::Result {
    let Some(d) = dev(device) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    let f = if khr {
        d.next.wait_semaphores_khr
    } else {
        d.next.wait_semaphores
    };
    let Some(f) = f else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    let t0 = now_ns();
    let r = f(device, info, timeout);
    d.waited("semaphore", Completed::Unknown, r, t0);
    r
}

unsafe extern "system" fn wait_semaphores(
    device: vk::Device,
    info: *const vk::SemaphoreWaitInfo<'_>,
    timeout: u64,
) -> vk::Result {
    semaphores(device, info, timeout, false)
}

unsafe extern "system" fn wait_semaphores_khr(
    device: vk::Device,
    info: *const vk::SemaphoreWaitInfo<'_>,
    timeout: u64,
) -> vk::Result {
    semaphores(device, info, timeout, true)
}

// ---- command pools and buffers --------------------------------------------------------------

unsafe extern "system" fn create_command_pool(
    device: vk::Device,
    info: *const vk::CommandPoolCreateInfo<'_>,
    alloc: *const vk::AllocationCallbacks<'_>,
    out: *mut vk::CommandPool,
) -> vk::Result {
    let Some(d) = dev(device) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    let Some(f) = d.next.create_command_pool else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    let r = f(device, info, alloc, out);
    if r == vk::Result::SUCCESS {
        d.lock()
            .state
            .add_pool((*out).as_raw(), (*info).queue_family_index);
    }
    r
}

unsafe extern "system" fn destroy_command_pool(
    device: vk::Device,
    pool: vk::CommandPool,
    alloc: *const vk::AllocationCallbacks<'_>,
) {
    let Some(d) = dev(device) else { return };
    let Some(f) = d.next.destroy_command_pool else {
        return;
    };
    {
        let mut g = d.lock();
        for c in g.state.cmds_of_pool(pool.as_raw()) {
            DeviceData::end_block(&mut g, c);
        }
        let slots = g.state.destroy_pool(pool.as_raw());
        DeviceData::free_slots(&mut g, slots);
    }
    f(device, pool, alloc);
}

unsafe extern "system" fn reset_command_pool(
    device: vk::Device,
    pool: vk::CommandPool,
    flags: vk::CommandPoolResetFlags,
) -> vk::Result {
    let Some(d) = dev(device) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    let Some(f) = d.next.reset_command_pool else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    {
        let mut g = d.lock();
        for c in g.state.cmds_of_pool(pool.as_raw()) {
            DeviceData::end_block(&mut g, c);
            let slots = g.state.reset_cmd(c);
            DeviceData::free_slots(&mut g, slots);
        }
    }
    f(device, pool, flags)
}

unsafe extern "system" fn allocate_command_buffers(
    device: vk::Device,
    info: *const vk::CommandBufferAllocateInfo<'_>,
    out: *mut vk::CommandBuffer,
) -> vk::Result {
    let Some(d) = dev(device) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    let Some(f) = d.next.allocate_command_buffers else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    let r = f(device, info, out);
    if r == vk::Result::SUCCESS {
        let i = &*info;
        let mut g = d.lock();
        for cb in slice(out, i.command_buffer_count) {
            g.state.allocate_cmd(
                cb.as_raw(),
                i.command_pool.as_raw(),
                i.level == vk::CommandBufferLevel::SECONDARY,
            );
        }
    }
    r
}

unsafe extern "system" fn free_command_buffers(
    device: vk::Device,
    pool: vk::CommandPool,
    count: u32,
    cbs: *const vk::CommandBuffer,
) {
    let Some(d) = dev(device) else { return };
    let Some(f) = d.next.free_command_buffers else {
        return;
    };
    {
        let mut g = d.lock();
        for cb in slice(cbs, count) {
            DeviceData::end_block(&mut g, cb.as_raw());
            let slots = g.state.free_cmd(cb.as_raw());
            DeviceData::free_slots(&mut g, slots);
        }
    }
    f(device, pool, count, cbs);
}

unsafe extern "system" fn begin_command_buffer(
    cb: vk::CommandBuffer,
    info: *const vk::CommandBufferBeginInfo<'_>,
) -> vk::Result {
    let Some(d) = dev(cb) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    let Some(f) = d.next.begin_command_buffer else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    let t0 = now_ns();
    let r = f(cb, info);
    if r == vk::Result::SUCCESS {
        let k = cb.as_raw();
        let mut g = d.lock();
        DeviceData::end_block(&mut g, k);
        let old = g.state.begin_cmd(k, t0);
        DeviceData::free_slots(&mut g, old);
        if g.state.level == Level::CommandBuffer
            && g.state.can_time(k)
            && let Some(slot) = DeviceData::take_slot(&mut g)
        {
            d.stamp_start(&g, cb, slot, true);
            let op = g.state.op("command buffer", "region");
            g.state.add_stamp(k, Stamp { slot, op });
        }
    }
    r
}

unsafe extern "system" fn end_command_buffer(cb: vk::CommandBuffer) -> vk::Result {
    let Some(d) = dev(cb) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    let Some(f) = d.next.end_command_buffer else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    {
        let k = cb.as_raw();
        let mut g = d.lock();
        if g.state.level == Level::CommandBuffer
            && let Some(slot) = g.state.command_buffer_stamp(k)
        {
            d.stamp_end(&g, cb, slot);
        }
        DeviceData::end_block(&mut g, k);
        g.state.end_cmd(k, now_ns());
    }
    f(cb)
}

unsafe extern "system" fn reset_command_buffer(
    cb: vk::CommandBuffer,
    flags: vk::CommandBufferResetFlags,
) -> vk::Result {
    let Some(d) = dev(cb) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    let Some(f) = d.next.reset_command_buffer else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    {
        let mut g = d.lock();
        DeviceData::end_block(&mut g, cb.as_raw());
        let slots = g.state.reset_cmd(cb.as_raw());
        DeviceData::free_slots(&mut g, slots);
    }
    f(cb, flags)
}

// ---- recorded commands ------------------------------------------------------------------------

/// Counts `what` in `cb` and passes the command down with `call`.
unsafe fn recorded(cb: vk::CommandBuffer, what: Cmd, call: impl FnOnce(&Next)) {
    let Some(d) = dev(cb) else { return };
    d.lock().state.record(cb.as_raw(), what);
    call(&d.next);
}

/// A dispatch: counted, and timed at the dispatch level.
unsafe fn dispatched(cb: vk::CommandBuffer, call: impl FnOnce(&Next)) {
    let Some(d) = dev(cb) else { return };
    let k = cb.as_raw();
    let mut g = d.lock();
    g.state.record(k, Cmd::Dispatch);
    let slot = if g.state.level == Level::Dispatch && g.state.can_time(k) {
        d.take_block_slot(&mut g, cb)
    } else {
        None
    };
    if let Some(slot) = slot {
        let label = g.state.dispatch_label(k);
        let op = g.state.op(&label, "dispatch");
        g.state.add_stamp(k, Stamp { slot, op });
        d.stamp_start(&g, cb, slot, false);
    }
    call(&d.next);
    if let Some(slot) = slot {
        d.stamp_end(&g, cb, slot);
    }
}

unsafe extern "system" fn cmd_bind_pipeline(
    cb: vk::CommandBuffer,
    bind_point: vk::PipelineBindPoint,
    pipeline: vk::Pipeline,
) {
    let Some(d) = dev(cb) else { return };
    d.lock().state.bind_pipeline(cb.as_raw(), pipeline.as_raw());
    if let Some(f) = d.next.cmd_bind_pipeline {
        f(cb, bind_point, pipeline);
    }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "system" fn cmd_bind_descriptor_sets(
    cb: vk::CommandBuffer,
    bind_point: vk::PipelineBindPoint,
    layout: vk::PipelineLayout,
    first: u32,
    count: u32,
    sets: *const vk::DescriptorSet,
    dyn_count: u32,
    dyn_offsets: *const u32,
) {
    recorded(cb, Cmd::BindSets, |n| {
        if let Some(f) = n.cmd_bind_descriptor_sets {
            f(
                cb,
                bind_point,
                layout,
                first,
                count,
                sets,
                dyn_count,
                dyn_offsets,
            );
        }
    });
}

unsafe extern "system" fn cmd_push_constants(
    cb: vk::CommandBuffer,
    layout: vk::PipelineLayout,
    stages: vk::ShaderStageFlags,
    offset: u32,
    size: u32,
    values: *const c_void,
) {
    recorded(cb, Cmd::PushConstants, |n| {
        if let Some(f) = n.cmd_push_constants {
            f(cb, layout, stages, offset, size, values);
        }
    });
}

unsafe extern "system" fn cmd_push_descriptor_set_khr(
    cb: vk::CommandBuffer,
    bind_point: vk::PipelineBindPoint,
    layout: vk::PipelineLayout,
    set: u32,
    count: u32,
    writes: *const vk::WriteDescriptorSet<'_>,
) {
    let Some(d) = dev(cb) else { return };
    // Counted when recorded, as the decoder's recorder counts a push.
    d.lock().state.descriptor_writes(count as u64);
    if let Some(f) = d.next.cmd_push_descriptor_set_khr {
        f(cb, bind_point, layout, set, count, writes);
    }
}

unsafe extern "system" fn cmd_dispatch(cb: vk::CommandBuffer, x: u32, y: u32, z: u32) {
    dispatched(cb, |n| {
        if let Some(f) = n.cmd_dispatch {
            f(cb, x, y, z);
        }
    });
}

unsafe extern "system" fn cmd_dispatch_base(
    cb: vk::CommandBuffer,
    bx: u32,
    by: u32,
    bz: u32,
    x: u32,
    y: u32,
    z: u32,
) {
    dispatched(cb, |n| {
        if let Some(f) = n.cmd_dispatch_base {
            f(cb, bx, by, bz, x, y, z);
        }
    });
}

unsafe extern "system" fn cmd_dispatch_indirect(
    cb: vk::CommandBuffer,
    buffer: vk::Buffer,
    offset: vk::DeviceSize,
) {
    dispatched(cb, |n| {
        if let Some(f) = n.cmd_dispatch_indirect {
            f(cb, buffer, offset);
        }
    });
}

unsafe extern "system" fn cmd_copy_buffer(
    cb: vk::CommandBuffer,
    src: vk::Buffer,
    dst: vk::Buffer,
    count: u32,
    regions: *const vk::BufferCopy,
) {
    recorded(cb, Cmd::Transfer, |n| {
        if let Some(f) = n.cmd_copy_buffer {
            f(cb, src, dst, count, regions);
        }
    });
}

unsafe extern "system" fn cmd_copy_image(
    cb: vk::CommandBuffer,
    src: vk::Image,
    src_layout: vk::ImageLayout,
    dst: vk::Image,
    dst_layout: vk::ImageLayout,
    count: u32,
    regions: *const vk::ImageCopy,
) {
    recorded(cb, Cmd::Transfer, |n| {
        if let Some(f) = n.cmd_copy_image {
            f(cb, src, src_layout, dst, dst_layout, count, regions);
        }
    });
}

unsafe extern "system" fn cmd_copy_buffer_to_image(
    cb: vk::CommandBuffer,
    src: vk::Buffer,
    dst: vk::Image,
    layout: vk::ImageLayout,
    count: u32,
    regions: *const vk::BufferImageCopy,
) {
    recorded(cb, Cmd::Transfer, |n| {
        if let Some(f) = n.cmd_copy_buffer_to_image {
            f(cb, src, dst, layout, count, regions);
        }
    });
}

unsafe extern "system" fn cmd_copy_image_to_buffer(
    cb: vk::CommandBuffer,
    src: vk::Image,
    layout: vk::ImageLayout,
    dst: vk::Buffer,
    count: u32,
    regions: *const vk::BufferImageCopy,
) {
    recorded(cb, Cmd::Transfer, |n| {
        if let Some(f) = n.cmd_copy_image_to_buffer {
            f(cb, src, layout, dst, count, regions);
        }
    });
}

unsafe extern "system" fn cmd_fill_buffer(
    cb: vk::CommandBuffer,
    dst: vk::Buffer,
    offset: vk::DeviceSize,
    size: vk::DeviceSize,
    data: u32,
) {
    recorded(cb, Cmd::Transfer, |n| {
        if let Some(f) = n.cmd_fill_buffer {
            f(cb, dst, offset, size, data);
        }
    });
}

unsafe extern "system" fn cmd_update_buffer(
    cb: vk::CommandBuffer,
    dst: vk::Buffer,
    offset: vk::DeviceSize,
    size: vk::DeviceSize,
    data: *const c_void,
) {
    recorded(cb, Cmd::Transfer, |n| {
        if let Some(f) = n.cmd_update_buffer {
            f(cb, dst, offset, size, data);
        }
    });
}

#[allow(clippy::too_many_arguments)]
unsafe extern "system" fn cmd_pipeline_barrier(
    cb: vk::CommandBuffer,
    src: vk::PipelineStageFlags,
    dst: vk::PipelineStageFlags,
    deps: vk::DependencyFlags,
    mem_count: u32,
    mem: *const vk::MemoryBarrier<'_>,
    buf_count: u32,
    buf: *const vk::BufferMemoryBarrier<'_>,
    img_count: u32,
    img: *const vk::ImageMemoryBarrier<'_>,
) {
    let n = mem_count as u64 + buf_count as u64 + img_count as u64;
    recorded(cb, Cmd::Barrier(n), |next| {
        if let Some(f) = next.cmd_pipeline_barrier {
            f(
                cb, src, dst, deps, mem_count, mem, buf_count, buf, img_count, img,
            );
        }
    });
}

unsafe fn barrier2(cb: vk::CommandBuffer, info: *const vk::DependencyInfo<'_>, khr: bool) {
    let n = if info.is_null() {
        0
    } else {
        let i = &*info;
        i.memory_barrier_count as u64
            + i.buffer_memory_barrier_count as u64
            + i.image_memory_barrier_count as u64
    };
    recorded(cb, Cmd::Barrier(n), |next| {
        let f = if khr {
            next.cmd_pipeline_barrier2_khr
        } else {
            next.cmd_pipeline_barrier2
        };
        if let Some(f) = f {
            f(cb, info);
        }
    });
}

unsafe extern "system" fn cmd_pipeline_barrier2(
    cb: vk::CommandBuffer,
    info: *const vk::DependencyInfo<'_>,
) {
    barrier2(cb, info, false);
}

unsafe extern "system" fn cmd_pipeline_barrier2_khr(
    cb: vk::CommandBuffer,
    info: *const vk::DependencyInfo<'_>,
) {
    barrier2(cb, info, true);
}

unsafe extern "system" fn cmd_write_timestamp(
    cb: vk::CommandBuffer,
    stage: vk::PipelineStageFlags,
    pool: vk::QueryPool,
    query: u32,
) {
    recorded(cb, Cmd::Timestamp, |n| {
        if let Some(f) = n.cmd_write_timestamp {
            f(cb, stage, pool, query);
        }
    });
}

unsafe extern "system" fn cmd_execute_commands(
    cb: vk::CommandBuffer,
    count: u32,
    cbs: *const vk::CommandBuffer,
) {
    let Some(d) = dev(cb) else { return };
    let secondaries: Vec<u64> = slice(cbs, count).iter().map(|c| c.as_raw()).collect();
    d.lock()
        .state
        .execute_secondaries(cb.as_raw(), &secondaries);
    if let Some(f) = d.next.cmd_execute_commands {
        f(cb, count, cbs);
    }
}

unsafe extern "system" fn cmd_begin_debug_utils_label(
    cb: vk::CommandBuffer,
    label: *const vk::DebugUtilsLabelEXT<'_>,
) {
    let Some(d) = dev(cb) else { return };
    if !label.is_null() && !(*label).p_label_name.is_null() {
        let name = CStr::from_ptr((*label).p_label_name)
            .to_string_lossy()
            .into_owned();
        d.lock().state.push_label(cb.as_raw(), name);
    }
    if let Some(f) = d.next.cmd_begin_debug_utils_label {
        f(cb, label);
    }
}

unsafe extern "system" fn cmd_end_debug_utils_label(cb: vk::CommandBuffer) {
    let Some(d) = dev(cb) else { return };
    d.lock().state.pop_label(cb.as_raw());
    if let Some(f) = d.next.cmd_end_debug_utils_label {
        f(cb);
    }
}

// ---- descriptors, pipelines, names, memory ----------------------------------------------------

unsafe extern "system" fn allocate_descriptor_sets(
    device: vk::Device,
    info: *const vk::DescriptorSetAllocateInfo<'_>,
    out: *mut vk::DescriptorSet,
) -> vk::Result {
    let Some(d) = dev(device) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    let Some(f) = d.next.allocate_descriptor_sets else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    let t0 = now_ns();
    let r = f(device, info, out);
    let mut g = d.lock();
    if r == vk::Result::SUCCESS {
        g.state
            .descriptor_sets_allocated((*info).descriptor_set_count as u64);
    }
    g.state.host_span("descriptors", t0, now_ns());
    r
}

unsafe extern "system" fn update_descriptor_sets(
    device: vk::Device,
    write_count: u32,
    writes: *const vk::WriteDescriptorSet<'_>,
    copy_count: u32,
    copies: *const vk::CopyDescriptorSet<'_>,
) {
    let Some(d) = dev(device) else { return };
    let t0 = now_ns();
    if let Some(f) = d.next.update_descriptor_sets {
        f(device, write_count, writes, copy_count, copies);
    }
    let mut g = d.lock();
    g.state.descriptor_writes(write_count as u64);
    g.state.host_span("descriptors", t0, now_ns());
}

unsafe extern "system" fn update_descriptor_set_with_template(
    device: vk::Device,
    set: vk::DescriptorSet,
    template: vk::DescriptorUpdateTemplate,
    data: *const c_void,
) {
    let Some(d) = dev(device) else { return };
    let t0 = now_ns();
    if let Some(f) = d.next.update_descriptor_set_with_template {
        f(device, set, template, data);
    }
    let mut g = d.lock();
    g.state.descriptor_writes(1);
    g.state.host_span("descriptors", t0, now_ns());
}

unsafe extern "system" fn create_compute_pipelines(
    device: vk::Device,
    cache: vk::PipelineCache,
    count: u32,
    infos: *const vk::ComputePipelineCreateInfo<'_>,
    alloc: *const vk::AllocationCallbacks<'_>,
    out: *mut vk::Pipeline,
) -> vk::Result {
    let Some(d) = dev(device) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    let Some(f) = d.next.create_compute_pipelines else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    let r = f(device, cache, count, infos, alloc, out);
    if r == vk::Result::SUCCESS {
        let mut g = d.lock();
        for p in slice(out, count) {
            g.state.created_pipeline(p.as_raw());
        }
    }
    r
}

unsafe extern "system" fn set_debug_utils_object_name(
    device: vk::Device,
    info: *const vk::DebugUtilsObjectNameInfoEXT<'_>,
) -> vk::Result {
    let Some(d) = dev(device) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    if !info.is_null()
        && (*info).object_type == vk::ObjectType::PIPELINE
        && !(*info).p_object_name.is_null()
    {
        let name = CStr::from_ptr((*info).p_object_name)
            .to_string_lossy()
            .into_owned();
        d.lock().state.set_name((*info).object_handle, name);
    }
    match d.next.set_debug_utils_object_name {
        Some(f) => f(device, info),
        None => vk::Result::SUCCESS,
    }
}

unsafe extern "system" fn map_memory(
    device: vk::Device,
    memory: vk::DeviceMemory,
    offset: vk::DeviceSize,
    size: vk::DeviceSize,
    flags: vk::MemoryMapFlags,
    out: *mut *mut c_void,
) -> vk::Result {
    let Some(d) = dev(device) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    let Some(f) = d.next.map_memory else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    let r = f(device, memory, offset, size, flags, out);
    if r == vk::Result::SUCCESS {
        d.lock().state.map(memory.as_raw(), offset, size);
    }
    r
}

unsafe extern "system" fn unmap_memory(device: vk::Device, memory: vk::DeviceMemory) {
    let Some(d) = dev(device) else { return };
    d.lock().state.unmap(memory.as_raw());
    if let Some(f) = d.next.unmap_memory {
        f(device, memory);
    }
}

unsafe extern "system" fn flush_mapped_memory_ranges(
    device: vk::Device,
    count: u32,
    ranges: *const vk::MappedMemoryRange<'_>,
) -> vk::Result {
    let Some(d) = dev(device) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    let Some(f) = d.next.flush_mapped_memory_ranges else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    {
        let mut g = d.lock();
        let bytes: u64 = slice(ranges, count)
            .iter()
            .map(|r| g.state.range_bytes(r.memory.as_raw(), r.offset, r.size))
            .sum();
        g.state.bytes_to_device(bytes);
    }
    f(device, count, ranges)
}

unsafe extern "system" fn invalidate_mapped_memory_ranges(
    device: vk::Device,
    count: u32,
    ranges: *const vk::MappedMemoryRange<'_>,
) -> vk::Result {
    let Some(d) = dev(device) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    let Some(f) = d.next.invalidate_mapped_memory_ranges else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    let r = f(device, count, ranges);
    let mut g = d.lock();
    let bytes: u64 = slice(ranges, count)
        .iter()
        .map(|r| g.state.range_bytes(r.memory.as_raw(), r.offset, r.size))
        .sum();
    g.state.bytes_from_device(bytes);
    r
}
