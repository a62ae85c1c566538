//! The Vulkan loader's layer interface: the only module of the layer that holds raw Vulkan
//! handles and `unsafe`.
//!
//! The library exports one symbol, `vkNegotiateLoaderLayerInterfaceVersion`; the loader gets
//! `vkGetInstanceProcAddr` and `vkGetDeviceProcAddr` from it ([`loader`]). `vkCreateInstance`
//! and `vkCreateDevice` take the next layer's entry points from the loader's chain info and
//! advance the chain. Every intercepted call is counted in the device's
//! [`DeviceState`](crate::state::DeviceState) and passed down unchanged, except for the GPU
//! timestamps the layer adds at the chosen level, written into query pools of its own
//! ([`timer`]):
//!
//! - `submit`: a timestamp at the start and the end of the submit's work. Where the layer resets
//!   its queries from the host (below), a submit of one command buffer is timed by two
//!   timestamps recorded into that command buffer after `vkBeginCommandBuffer` and before
//!   `vkEndCommandBuffer`; any other submit is wrapped in two command buffers of the layer's
//!   own (a top-of-pipe timestamp; a bottom-of-pipe timestamp);
//! - `command-buffer`: a timestamp after `vkBeginCommandBuffer` and one before
//!   `vkEndCommandBuffer`, in every primary command buffer;
//! - `dispatch`: where the device has shader clocks, every dispatch of an instrumented pipeline
//!   times itself and two timestamps bracket each command buffer ([`clock`]); elsewhere (and with
//!   `DECODESCOPE_DISPATCH_TIMING=interval`) every dispatch gets the span of its interval between
//!   the program's barriers: a
//!   bottom-of-pipe timestamp before each barrier (and the end of the command buffer) that
//!   follows a dispatch, a top-of-pipe one before a command buffer's first dispatch (and the first
//!   after a transfer). Pairs come in blocks of [`BLOCK_PAIRS`](crate::state::BLOCK_PAIRS).
//!
//! Queries are reset from the host where the device has `hostQueryReset` (the layer turns the
//! feature on at `vkCreateDevice`, [`features`]; `DECODESCOPE_QUERY_RESET=command-buffer` opts
//! out): `vkResetQueryPool` on the pairs of each command buffer at its submit, which Vulkan
//! allows because a command buffer is submitted again only once its last submission is
//! complete (one recorded with `SIMULTANEOUS_USE` is not timed then). Elsewhere a reset is
//! recorded before the first timestamp of each pair or block
//! ([`Timing::first_write`](crate::state::Timing::first_write)), and into the submit level's
//! own command buffers.
//!
//! Timestamps are read, never waited for, once the layer knows their submission complete: a
//! fence or timeline semaphore it signalled (or a later one of the same queue) was waited for or
//! polled successfully, a queue or the device went idle, or the program records, resets or frees
//! the command buffer again (which it may only do once that submission is complete). A pair that
//! is not available then counts its dispatches as untimed; nothing is dropped silently.
//!
//! Every `unsafe extern "system"` function here is called by the loader (or by the program
//! through it) with the arguments of the Vulkan command it implements; the Vulkan specification's
//! valid usage for that command is the safety contract, and each passes its arguments on to the
//! next layer unchanged, except what [`clock`] changes for shader clocks (features and extensions
//! at `vkCreateDevice`, push-constant ranges, instrumented pipelines) and the
//! calibrated-timestamps extension `vkCreateDevice` adds.
#![allow(unsafe_op_in_unsafe_fn)]

mod clock;
mod commands;
mod device;
mod features;
mod loader;
mod mapped;
mod objects;
mod queue;
mod timer;

pub use mapped::{MappedLog, Prefault, map_live};

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use ash::vk::{self, Handle};

use crate::output::Output;
use crate::recording::{Slot, Table};
use crate::state::{Announce, DeviceState, FastMap, Level, QUEUE_TRANSFER};

/// The loader's dispatch key of a dispatchable handle: its first pointer-sized word.
unsafe fn key<H: Handle>(h: H) -> usize {
    let p = h.as_raw() as usize as *const usize;
    if p.is_null() { 0 } else { *p }
}

/// The `n` command buffers at `p` as the layer's keys (each handle's `as_raw`), in place.
unsafe fn keys<'a>(p: *const vk::CommandBuffer, n: u32) -> &'a [u64] {
    const _: () = assert!(
        std::mem::size_of::<vk::CommandBuffer>() == std::mem::size_of::<u64>()
            && std::mem::align_of::<vk::CommandBuffer>() == std::mem::align_of::<u64>()
    );
    let s = slice(p, n);
    // SAFETY: a CommandBuffer is a transparent pointer-sized handle (asserted above: the size
    // and alignment of a u64), and `as_raw` is its bits read as a u64, which any bit pattern is;
    // the slice borrows the program's array for the call, as `slice` does.
    std::slice::from_raw_parts(s.as_ptr().cast::<u64>(), s.len())
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
    /// `$DECODESCOPE_DISPATCH_TIMING`: at the dispatch level, shader clocks where the device
    /// has them (`clock`, the default) or intervals between barriers (`interval`).
    shader_clock: bool,
    /// `$DECODESCOPE_CLOCK_EXCLUDE`: comma-separated parts of pipeline names (`entry@HASH`)
    /// whose pipelines are not instrumented, and timed by interval.
    clock_exclude: Vec<String>,
    /// `$DECODESCOPE_QUERY_RESET`: queries reset from the host where the device has
    /// `hostQueryReset` (`host`, the default), or always in command buffers (`command-buffer`).
    host_reset: bool,
    /// `$DECODESCOPE_CLOCK_MAX_GROUPS`: with shader clocks, the most workgroups a dispatch
    /// reads the clock with; a wider one is timed by interval.
    clock_max_groups: u32,
}

/// The most workgroups a dispatch reads the shader clock with, unless
/// `$DECODESCOPE_CLOCK_MAX_GROUPS` says otherwise.
pub const CLOCK_MAX_GROUPS: u32 = 32_768;

/// `$DECODESCOPE_CLOCK_MAX_GROUPS`: a number of workgroups; unset or empty, the default.
/// Anything else is reported and taken as the default.
fn clock_max_groups() -> u32 {
    let value = std::env::var("DECODESCOPE_CLOCK_MAX_GROUPS").unwrap_or_default();
    match value.trim() {
        "" => CLOCK_MAX_GROUPS,
        v => v.parse().unwrap_or_else(|_| {
            eprintln!(
                "decodescope layer: DECODESCOPE_CLOCK_MAX_GROUPS={value:?} is not a number of \
                 workgroups; using {CLOCK_MAX_GROUPS}"
            );
            CLOCK_MAX_GROUPS
        }),
    }
}

/// Whether `$var` chooses `first` (the default, also when it is unset or empty) rather than
/// `second`; any other value is reported and taken as `first`.
fn either(var: &str, first: &str, second: &str) -> bool {
    let value = std::env::var(var).unwrap_or_default();
    if value.is_empty() || value == first {
        return true;
    }
    if value == second {
        return false;
    }
    eprintln!("decodescope layer: {var}={value:?} is not {first} or {second}; using {first}");
    true
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
        let shader_clock = either("DECODESCOPE_DISPATCH_TIMING", "clock", "interval");
        let clock_exclude = std::env::var("DECODESCOPE_CLOCK_EXCLUDE")
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(String::from)
            .collect();
        let host_reset = either("DECODESCOPE_QUERY_RESET", "host", "command-buffer");
        Config {
            dir,
            level,
            shader_clock,
            clock_exclude,
            host_reset,
            clock_max_groups: clock_max_groups(),
        }
    })
}

fn output() -> &'static Output {
    static OUT: OnceLock<Output> = OnceLock::new();
    OUT.get_or_init(|| {
        let c = config();
        match &c.dir {
            Some(d) => {
                let out = Output::open(d, c.level.name());
                if out.enabled() {
                    // SAFETY: `at_exit` is an `extern "C" fn()` that stays loaded (the layer is
                    // never unloaded while the program runs).
                    unsafe { libc::atexit(at_exit) };
                }
                out
            }
            None => Output::disabled(),
        }
    })
}

/// The program is exiting without destroying its devices: each device's open wait group (the
/// work after its last wait) is written, and the writer drained.
extern "C" fn at_exit() {
    for d in live_devices() {
        // SAFETY: `d` is a device of the table, still alive (the program did not destroy it).
        unsafe { d.finish("exit", true) };
    }
    output().flush();
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

unsafe fn instance_of<H: Handle>(h: H) -> Option<Arc<InstanceData>> {
    let k = key(h);
    let map = instances().lock().unwrap_or_else(|e| e.into_inner());
    map.get(&k).cloned()
}

/// Devices by dispatch key, looked up on every intercepted call without a lock: a fixed table
/// of (key, data) slots. A device's data is leaked when it is created (a few hundred bytes per
/// device the program ever creates), so a `&'static` to it stays valid whatever other threads
/// do; destroying the device clears its slot's key, and its bookkeeping.
const DEVICE_SLOTS: usize = 32;

struct DeviceSlot {
    key: AtomicUsize,
    data: AtomicPtr<DeviceData>,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY_SLOT: DeviceSlot = DeviceSlot {
    key: AtomicUsize::new(0),
    data: AtomicPtr::new(std::ptr::null_mut()),
};
static DEVICES: [DeviceSlot; DEVICE_SLOTS] = [EMPTY_SLOT; DEVICE_SLOTS];

/// The device of a dispatchable handle (a device, queue or command buffer).
unsafe fn dev<H: Handle>(h: H) -> Option<&'static DeviceData> {
    let k = key(h);
    if k == 0 {
        return None;
    }
    for s in &DEVICES {
        if s.key.load(Ordering::Acquire) == k {
            let p = s.data.load(Ordering::Acquire);
            // SAFETY: a non-null pointer in the table came from `Box::leak` and is never freed.
            return p.as_ref();
        }
    }
    None
}

/// Adds a device to the table; false when the table is full (the device is then not traced).
fn add_device(k: usize, data: &'static DeviceData) -> bool {
    for s in &DEVICES {
        if s.key
            .compare_exchange(0, usize::MAX, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            s.data.store(
                data as *const DeviceData as *mut DeviceData,
                Ordering::Release,
            );
            s.key.store(k, Ordering::Release);
            return true;
        }
    }
    false
}

fn remove_device(k: usize) {
    for s in &DEVICES {
        if s.key.load(Ordering::Acquire) == k {
            s.key.store(0, Ordering::Release);
        }
    }
}

fn live_devices() -> Vec<&'static DeviceData> {
    DEVICES
        .iter()
        .filter(|s| !matches!(s.key.load(Ordering::Acquire), 0 | usize::MAX))
        // SAFETY: as in `dev`: leaked, never freed.
        .filter_map(|s| unsafe { s.data.load(Ordering::Acquire).as_ref() })
        .collect()
}

/// The next device's index within the process (creation order).
fn device_count() -> u32 {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    N.fetch_add(1, Ordering::Relaxed)
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
                    $($field: std::mem::transmute::<vk::PFN_vkVoidFunction, Option<vk::$pfn>>(
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
    get_semaphore_counter_value: PFN_vkGetSemaphoreCounterValue =
        "vkGetSemaphoreCounterValue",
    get_semaphore_counter_value_khr: PFN_vkGetSemaphoreCounterValue =
        "vkGetSemaphoreCounterValueKHR",
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
    create_shader_module: PFN_vkCreateShaderModule = "vkCreateShaderModule",
    destroy_shader_module: PFN_vkDestroyShaderModule = "vkDestroyShaderModule",
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
    create_pipeline_layout: PFN_vkCreatePipelineLayout = "vkCreatePipelineLayout",
    // The layer's own use.
    destroy_pipeline: PFN_vkDestroyPipeline = "vkDestroyPipeline",
    create_buffer: PFN_vkCreateBuffer = "vkCreateBuffer",
    destroy_buffer: PFN_vkDestroyBuffer = "vkDestroyBuffer",
    get_buffer_memory_requirements: PFN_vkGetBufferMemoryRequirements =
        "vkGetBufferMemoryRequirements",
    allocate_memory: PFN_vkAllocateMemory = "vkAllocateMemory",
    free_memory: PFN_vkFreeMemory = "vkFreeMemory",
    bind_buffer_memory: PFN_vkBindBufferMemory = "vkBindBufferMemory",
    get_buffer_device_address: PFN_vkGetBufferDeviceAddress = "vkGetBufferDeviceAddress",
    get_buffer_device_address_khr: PFN_vkGetBufferDeviceAddress = "vkGetBufferDeviceAddressKHR",
    create_query_pool: PFN_vkCreateQueryPool = "vkCreateQueryPool",
    destroy_query_pool: PFN_vkDestroyQueryPool = "vkDestroyQueryPool",
    get_query_pool_results: PFN_vkGetQueryPoolResults = "vkGetQueryPoolResults",
    cmd_reset_query_pool: PFN_vkCmdResetQueryPool = "vkCmdResetQueryPool",
    reset_query_pool: PFN_vkResetQueryPool = "vkResetQueryPool",
    reset_query_pool_ext: PFN_vkResetQueryPool = "vkResetQueryPoolEXT",
    get_calibrated_timestamps_khr: PFN_vkGetCalibratedTimestampsKHR =
        "vkGetCalibratedTimestampsKHR",
    get_calibrated_timestamps_ext: PFN_vkGetCalibratedTimestampsKHR =
        "vkGetCalibratedTimestampsEXT",
}

type SetDeviceLoaderData = unsafe extern "system" fn(vk::Device, *mut c_void) -> vk::Result;

/// The layer's own Vulkan objects on one device: its query pools, and per queue family a
/// command pool with the submit level's wrapper command buffers (recorded once per slot).
#[derive(Default)]
struct Timer {
    pools: Vec<vk::QueryPool>,
    cmd_pools: FastMap<u32, vk::CommandPool>,
    wrappers: FastMap<(u32, u32), (vk::CommandBuffer, vk::CommandBuffer)>,
}

struct Inner {
    state: DeviceState,
    timer: Timer,
}

struct DeviceData {
    handle: vk::Device,
    next_gdpa: vk::PFN_vkGetDeviceProcAddr,
    next: Next,
    set_loader_data: Option<SetDeviceLoaderData>,
    period_ns: f64,
    valid_mask: u64,
    out: Output,
    /// The timestamp level (the state's, readable without the lock).
    level: Level,
    /// Command buffers' recorded commands, counted without the lock ([`crate::recording`]).
    recordings: Option<Table>,
    /// Descriptor writes not yet added to the state (counted without the lock).
    descriptor_writes: AtomicU64,
    /// At the dispatch level on a device with shader clocks: their state ([`clock`]).
    clock: Option<clock::ShaderClock>,
    /// `vkResetQueryPool`, where the device has `hostQueryReset`: the layer's queries are then
    /// reset from the host, never in a command buffer ([`timer`]).
    host_reset: Option<vk::PFN_vkResetQueryPool>,
    inner: Mutex<Inner>,
}

impl DeviceData {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts loading `cb`'s slot into the cache, without waiting for it: a program records a
    /// command buffer after waiting for the GPU, which leaves the slot out of the cache, and
    /// a prefetch issued before the driver's call overlaps that miss with the call.
    #[inline]
    fn prefetch_slot(&self, cb: vk::CommandBuffer) {
        let Some(t) = &self.recordings else { return };
        let slot = t.home_slot(cb.as_raw()) as *const Slot as *const i8;
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a prefetch is a hint that never faults; both addresses are inside the slot
        // (64-byte aligned, more than two cache lines long).
        unsafe {
            use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
            _mm_prefetch::<_MM_HINT_T0>(slot);
            _mm_prefetch::<_MM_HINT_T0>(slot.wrapping_add(64));
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = slot;
    }

    /// `cb`'s slot in the lock-free table, if it has one.
    #[inline]
    fn slot(&self, cb: vk::CommandBuffer) -> Option<&Slot> {
        self.recordings.as_ref()?.find(cb.as_raw())
    }

    /// Moves what `cmd` recorded without the lock into the state.
    fn drain(&self, g: &mut Inner, cmd: u64) {
        if let Some(d) = self.recordings.as_ref().and_then(|t| t.drain(cmd))
            && !d.is_empty()
        {
            g.state.drained(cmd, d);
        }
    }

    /// Forgets what `cmd` recorded without the lock (its recording is gone), freeing the
    /// timestamp pairs its timing held (only the dispatch level times recordings).
    fn discard(&self, g: &mut Inner, cmd: u64) {
        if let Some(t) = &self.recordings {
            t.drain(cmd);
            if self.level == Level::Dispatch
                && let Some(timing) = t.take_timing(cmd)
            {
                g.state.discard_timing(timing);
            }
        }
    }

    /// Releases `cmd`'s slot (the command buffer is freed).
    fn release(&self, g: &mut Inner, cmd: u64) {
        if let Some(timing) = self.recordings.as_ref().and_then(|t| t.release(cmd)) {
            g.state.discard_timing(timing);
        }
    }

    /// Hands the timing `cmd`'s slot recorded to the state (the recording ended; only the
    /// dispatch level times recordings).
    fn absorb(&self, g: &mut Inner, cmd: u64) {
        if self.level != Level::Dispatch {
            return;
        }
        if let Some(t) = &self.recordings {
            t.end_timing(cmd, |timing| g.state.absorb(cmd, timing));
        }
    }

    /// Adds the descriptor writes counted without the lock to the open group.
    fn drain_descriptor_writes(&self, g: &mut Inner) {
        let n = self.descriptor_writes.swap(0, Ordering::Relaxed);
        if n > 0 {
            g.state.descriptor_writes(n);
        }
    }

    fn ns(&self, ticks: u64) -> u64 {
        ((ticks & self.valid_mask) as f64 * self.period_ns) as u64
    }

    /// Writes the ops and queues the state found since the last call.
    #[inline]
    fn announce(&self, g: &mut Inner) {
        if !g.state.announce.is_empty() {
            self.announce_found(g);
        }
    }

    #[cold]
    #[inline(never)]
    fn announce_found(&self, g: &mut Inner) {
        let device = g.state.index;
        for a in g.state.announce.drain(..) {
            let rec = match a {
                Announce::Op { id, label, kind } => {
                    profiler::capture::RawRecord::Op(profiler::capture::RawOp {
                        device,
                        id,
                        label,
                        kind: kind.to_owned(),
                    })
                }
                Announce::Queue {
                    id,
                    family,
                    index,
                    kind,
                } => profiler::capture::RawRecord::Queue(profiler::capture::RawQueue {
                    device,
                    id,
                    family,
                    index,
                    kind: if kind == QUEUE_TRANSFER {
                        "transfer"
                    } else {
                        "compute"
                    }
                    .into(),
                }),
            };
            self.out.write(rec);
        }
    }

    /// Closes the open wait group with a wait of `kind` at `end` and hands it to the writer.
    fn close(&self, g: &mut Inner, kind: &'static str, end: u64) {
        self.drain_descriptor_writes(g);
        if let Some(c) = g.state.close_group(kind, end) {
            self.announce(g);
            self.out.group(c);
        }
        self.out.live(&g.state, end);
    }

    /// The device's end (`destroy`) or the program's (`exit`): reads what is still unread and
    /// writes the open group. At exit the lock is only tried for a while: a thread that holds
    /// it while the process exits leaves the open group to the live file.
    unsafe fn finish(&self, kind: &'static str, try_lock: bool) {
        let mut guard = None;
        if try_lock {
            for _ in 0..200 {
                if let Ok(g) = self.inner.try_lock() {
                    guard = Some(g);
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        } else {
            guard = Some(self.lock());
        }
        let Some(mut g) = guard else { return };
        let jobs = g.state.all_unread();
        self.read_jobs(&mut g, jobs);
        self.close(&mut g, kind, now_ns());
    }
}
