//! Command pools and command buffers, and the commands recorded into them.
//!
//! A command buffer's stamps are read before its recording goes (begin, reset, free, a pool
//! reset or destruction): the program may only do that once the command buffer's last
//! submission is complete, so its results are available whether or not the layer saw the wait.

use std::ffi::{CStr, c_void};

use ash::vk::{self, Handle};

use super::{DeviceData, Inner, dev, now_ns, slice};
use crate::recording::Slot;
use crate::state::{Cmd, Level, Stamp};

impl DeviceData {
    /// At the dispatch level, leaves the op of `cb`'s innermost debug label in its slot, for
    /// the dispatches recorded without the lock.
    fn label_changed(&self, g: &mut Inner, cb: vk::CommandBuffer) {
        if let Some(s) = self.slot(cb) {
            s.set_label_op(g.state.label_op(cb.as_raw()));
            self.announce(g);
        }
    }

    /// Reads what `cmd`'s last submission left unread.
    unsafe fn read_unread(&self, g: &mut Inner, cmd: u64) {
        if let Some(job) = g.state.unread_of(cmd) {
            self.read_jobs(g, vec![job]);
        }
    }
}

pub(super) unsafe extern "system" fn create_command_pool(
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

pub(super) unsafe extern "system" fn destroy_command_pool(
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
            d.read_unread(&mut g, c);
            g.state.free_cmd(c);
            d.release(&mut g, c);
        }
        g.state.forget_pool(pool.as_raw());
    }
    f(device, pool, alloc);
}

pub(super) unsafe extern "system" fn reset_command_pool(
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
        for c in g.state.begun_in_pool(pool.as_raw()) {
            d.read_unread(&mut g, c);
            g.state.reset_cmd(c);
            d.discard(&mut g, c);
        }
    }
    f(device, pool, flags)
}

pub(super) unsafe extern "system" fn allocate_command_buffers(
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
            if let Some(t) = &d.recordings {
                let timed = d.level == Level::Dispatch && g.state.can_time(cb.as_raw());
                t.claim(cb.as_raw(), timed);
            }
        }
    }
    r
}

pub(super) unsafe extern "system" fn free_command_buffers(
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
            d.read_unread(&mut g, cb.as_raw());
            g.state.free_cmd(cb.as_raw());
            d.release(&mut g, cb.as_raw());
        }
    }
    f(device, pool, count, cbs);
}

pub(super) unsafe extern "system" fn begin_command_buffer(
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
    d.prefetch_slot(cb);
    let r = f(cb, info);
    if r == vk::Result::SUCCESS {
        let k = cb.as_raw();
        let simultaneous = !info.is_null()
            && (*info)
                .flags
                .contains(vk::CommandBufferUsageFlags::SIMULTANEOUS_USE);
        let mut g = d.lock();
        d.read_unread(&mut g, k);
        d.discard(&mut g, k);
        if g.state.begin_cmd(k, t0, simultaneous)
            && d.level == Level::Dispatch
            && let Some(t) = &d.recordings
        {
            t.claim(k, g.state.can_time(k));
        }
        // The command-buffer level's stamp, or the submit level's where a submit of this
        // command buffer alone is timed by it.
        if d.level != Level::Dispatch
            && g.state.stamps_command_buffers()
            && g.state.can_time(k)
            && let Some(slot) = d.take_slot(&mut g)
        {
            d.reset(&g, cb, slot, 1);
            d.stamp_start(&g, cb, slot);
            let op = g.state.region_op(if d.level == Level::Submit {
                "submit"
            } else {
                "command buffer"
            });
            d.announce(&mut g);
            g.state.add_stamp(k, Stamp::pair(slot, op, 0));
        }
    }
    r
}

pub(super) unsafe extern "system" fn end_command_buffer(cb: vk::CommandBuffer) -> vk::Result {
    let Some(d) = dev(cb) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    let Some(f) = d.next.end_command_buffer else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    {
        let k = cb.as_raw();
        let mut g = d.lock();
        d.drain(&mut g, k);
        d.close_interval(&mut g, cb);
        d.close_bracket(&mut g, cb);
        d.absorb(&mut g, k);
        if d.level != Level::Dispatch
            && let Some(slot) = g.state.command_buffer_stamp(k)
        {
            d.stamp_end(&g, cb, slot);
        }
        g.state.end_cmd(k, now_ns());
    }
    f(cb)
}

pub(super) unsafe extern "system" fn reset_command_buffer(
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
        d.read_unread(&mut g, cb.as_raw());
        g.state.reset_cmd(cb.as_raw());
        d.discard(&mut g, cb.as_raw());
    }
    f(cb, flags)
}

// ---- recorded commands ------------------------------------------------------------------------

/// Counts `what`, recorded into `cb`, with what the timestamp level adds to it (a dispatch's
/// span, the stamp a barrier closes an interval with); the device's data, `None` for a device
/// the layer does not trace.
///
/// One function for every recorded command: a program records right after it waits, with the
/// caches left cold by the GPU's work (on lavapipe, by the driver's shader threads), and when
/// each command had its own inlined copy of this code each copy missed the instruction cache
/// once a recording. Shared, it misses at the recording's first command only; the rare paths
/// (the dispatch level, a command buffer without a lock-free slot) are out of line.
///
/// `groups` is a dispatch's workgroup count (`u32::MAX` where the GPU reads it from a buffer),
/// 0 for other commands: at the dispatch level it decides whether an instrumented dispatch reads
/// the clock ([`ShaderClock::clocks`](super::clock::ShaderClock::clocks)).
#[inline(never)]
unsafe fn count(cb: vk::CommandBuffer, what: Cmd, groups: u32) -> Option<&'static DeviceData> {
    let d = dev(cb)?;
    match d.slot(cb) {
        Some(s) if s.record(what) => {
            if d.level == Level::Dispatch {
                slot_dispatch_level(d, cb, s, what, groups);
            }
        }
        _ => locked_count(d, cb, what, groups),
    }
    Some(d)
}

/// The dispatch level's part of a command counted in `cb`'s lock-free slot `s`.
#[cold]
#[inline(never)]
unsafe fn slot_dispatch_level(
    d: &DeviceData,
    cb: vk::CommandBuffer,
    s: &Slot,
    what: Cmd,
    groups: u32,
) {
    match what {
        Cmd::Dispatch if s.timed() => d.time_dispatch(cb, s, groups),
        Cmd::Transfer => s.timing().transfer(),
        Cmd::Barrier(_) => d.close_slot_interval(cb, s),
        _ => {}
    }
}

/// A command counted under the device's lock (`cb` has no lock-free slot).
#[cold]
#[inline(never)]
unsafe fn locked_count(d: &DeviceData, cb: vk::CommandBuffer, what: Cmd, groups: u32) {
    let k = cb.as_raw();
    let mut g = d.lock();
    match what {
        Cmd::Dispatch => locked_dispatch(d, &mut g, cb, groups),
        Cmd::Barrier(_) => {
            d.close_interval(&mut g, cb);
            g.state.record(k, what);
        }
        Cmd::BindPipeline(p) => g.state.bind_pipeline(k, p),
        _ => g.state.record(k, what),
    }
}

/// A dispatch recorded under the lock: counted, and at the dispatch level given the span of its
/// interval ([`Timing`](crate::state::Timing)): a timestamp is written here only when the
/// interval starts with this dispatch.
unsafe fn locked_dispatch(d: &DeviceData, g: &mut Inner, cb: vk::CommandBuffer, groups: u32) {
    let k = cb.as_raw();
    g.state.record(k, Cmd::Dispatch);
    if g.state.level != Level::Dispatch || !g.state.can_time(k) {
        return;
    }
    let mut s = g.state.dispatch_slot(k);
    if s.is_none() && d.add_pool(g) {
        s = g.state.dispatch_slot(k);
    }
    let Some(slot) = s else { return };
    let op = g.state.dispatch_op_of(k);
    d.announce(g);
    let instrumented = d
        .clock
        .as_ref()
        .and_then(|c| Some((c, c.pipeline(g.state.bound_pipeline(k)?)?)));
    let clocked = instrumented.filter(|(c, _)| c.clocks(groups));
    let fresh = match clocked {
        Some((c, _)) => g.state.clocked_stamp(k, slot, op, || c.wants_bracket()),
        None => g.state.dispatch_stamp(k, slot, op),
    };
    if fresh {
        if let Some(block) = g.state.first_write(k, 2 * slot) {
            d.reset(g, cb, block, crate::state::BLOCK_PAIRS);
        }
        d.stamp_start(g, cb, slot);
    }
    if let Some((c, target)) = instrumented {
        c.arm(&d.next, cb, target, clocked.is_some().then_some(slot));
    }
}

/// Counts `what` in `cb` ([`count`]) and passes the command down with `call`.
#[inline(always)]
unsafe fn recorded(cb: vk::CommandBuffer, what: Cmd, call: impl FnOnce(&super::Next)) {
    if let Some(d) = count(cb, what, 0) {
        call(&d.next);
    }
}

/// Counts a dispatch of `groups` workgroups in `cb` ([`count`]) and passes it down with `call`.
#[inline(always)]
unsafe fn dispatched(cb: vk::CommandBuffer, groups: u32, call: impl FnOnce(&super::Next)) {
    if let Some(d) = count(cb, Cmd::Dispatch, groups) {
        call(&d.next);
    }
}

pub(super) unsafe extern "system" fn cmd_bind_pipeline(
    cb: vk::CommandBuffer,
    bind_point: vk::PipelineBindPoint,
    pipeline: vk::Pipeline,
) {
    recorded(cb, Cmd::BindPipeline(pipeline.as_raw()), |n| {
        if let Some(f) = n.cmd_bind_pipeline {
            f(cb, bind_point, pipeline);
        }
    });
}

#[allow(clippy::too_many_arguments)]
pub(super) unsafe extern "system" fn cmd_bind_descriptor_sets(
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

pub(super) unsafe extern "system" fn cmd_push_constants(
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

pub(super) unsafe extern "system" fn cmd_push_descriptor_set_khr(
    cb: vk::CommandBuffer,
    bind_point: vk::PipelineBindPoint,
    layout: vk::PipelineLayout,
    set: u32,
    count: u32,
    writes: *const vk::WriteDescriptorSet<'_>,
) {
    let Some(d) = dev(cb) else { return };
    // Counted when recorded, as the decoder's recorder counts a push.
    d.descriptor_writes
        .fetch_add(count as u64, std::sync::atomic::Ordering::Relaxed);
    if let Some(f) = d.next.cmd_push_descriptor_set_khr {
        f(cb, bind_point, layout, set, count, writes);
    }
}

/// A dispatch's workgroups, `x * y * z` (at most `u32::MAX`).
fn groups(x: u32, y: u32, z: u32) -> u32 {
    x.saturating_mul(y).saturating_mul(z)
}

pub(super) unsafe extern "system" fn cmd_dispatch(cb: vk::CommandBuffer, x: u32, y: u32, z: u32) {
    dispatched(cb, groups(x, y, z), |n| {
        if let Some(f) = n.cmd_dispatch {
            f(cb, x, y, z);
        }
    });
}

pub(super) unsafe extern "system" fn cmd_dispatch_base(
    cb: vk::CommandBuffer,
    bx: u32,
    by: u32,
    bz: u32,
    x: u32,
    y: u32,
    z: u32,
) {
    dispatched(cb, groups(x, y, z), |n| {
        if let Some(f) = n.cmd_dispatch_base {
            f(cb, bx, by, bz, x, y, z);
        }
    });
}

pub(super) unsafe extern "system" fn cmd_dispatch_indirect(
    cb: vk::CommandBuffer,
    buffer: vk::Buffer,
    offset: vk::DeviceSize,
) {
    // The GPU reads the workgroup count from the buffer: taken as large.
    dispatched(cb, u32::MAX, |n| {
        if let Some(f) = n.cmd_dispatch_indirect {
            f(cb, buffer, offset);
        }
    });
}

pub(super) unsafe extern "system" fn cmd_copy_buffer(
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

pub(super) unsafe extern "system" fn cmd_copy_image(
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

pub(super) unsafe extern "system" fn cmd_copy_buffer_to_image(
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

pub(super) unsafe extern "system" fn cmd_copy_image_to_buffer(
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

pub(super) unsafe extern "system" fn cmd_fill_buffer(
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

pub(super) unsafe extern "system" fn cmd_update_buffer(
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
pub(super) unsafe extern "system" fn cmd_pipeline_barrier(
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

pub(super) unsafe extern "system" fn cmd_pipeline_barrier2(
    cb: vk::CommandBuffer,
    info: *const vk::DependencyInfo<'_>,
) {
    barrier2(cb, info, false);
}

pub(super) unsafe extern "system" fn cmd_pipeline_barrier2_khr(
    cb: vk::CommandBuffer,
    info: *const vk::DependencyInfo<'_>,
) {
    barrier2(cb, info, true);
}

pub(super) unsafe extern "system" fn cmd_write_timestamp(
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

pub(super) unsafe extern "system" fn cmd_execute_commands(
    cb: vk::CommandBuffer,
    count: u32,
    cbs: *const vk::CommandBuffer,
) {
    let Some(d) = dev(cb) else { return };
    let secondaries: Vec<u64> = slice(cbs, count).iter().map(|c| c.as_raw()).collect();
    {
        let mut g = d.lock();
        // In order: the primary's commands so far, then the secondaries' whole recordings.
        d.drain(&mut g, cb.as_raw());
        d.close_interval(&mut g, cb);
        for &s in &secondaries {
            d.drain(&mut g, s);
        }
        g.state.execute_secondaries(cb.as_raw(), &secondaries);
    }
    if let Some(f) = d.next.cmd_execute_commands {
        f(cb, count, cbs);
    }
}

pub(super) unsafe extern "system" fn cmd_begin_debug_utils_label(
    cb: vk::CommandBuffer,
    label: *const vk::DebugUtilsLabelEXT<'_>,
) {
    let Some(d) = dev(cb) else { return };
    // Labels name dispatches' ops, which only the dispatch level has.
    if d.level == Level::Dispatch && !label.is_null() && !(*label).p_label_name.is_null() {
        let name = CStr::from_ptr((*label).p_label_name)
            .to_string_lossy()
            .into_owned();
        let mut g = d.lock();
        g.state.push_label(cb.as_raw(), name);
        d.label_changed(&mut g, cb);
    }
    if let Some(f) = d.next.cmd_begin_debug_utils_label {
        f(cb, label);
    }
}

pub(super) unsafe extern "system" fn cmd_end_debug_utils_label(cb: vk::CommandBuffer) {
    let Some(d) = dev(cb) else { return };
    if d.level == Level::Dispatch {
        let mut g = d.lock();
        g.state.pop_label(cb.as_raw());
        d.label_changed(&mut g, cb);
    }
    if let Some(f) = d.next.cmd_end_debug_utils_label {
        f(cb);
    }
}
