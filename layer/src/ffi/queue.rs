//! Submits, waits and polls.
//!
//! A *wait* (`vkWaitForFences`, `vkWaitSemaphores` with a timeout, `vkQueueWaitIdle`,
//! `vkDeviceWaitIdle`) that succeeds ends the open wait group: the unit from which steps are
//! made. A *poll* (`vkGetFenceStatus`, `vkGetSemaphoreCounterValue`, or a wait with a zero
//! timeout) only proves work complete, so its timestamps are read, but it ends no group: when a
//! poll succeeds depends on how fast the GPU was, and a step boundary that moves with the GPU's
//! speed would make steps differ between identical runs.

use std::ffi::c_void;

use ash::vk::{self, Handle};

use super::{DeviceData, dev, keys, now_ns, slice};
use crate::state::{Completed, Host, Level, Stamp};

/// Timeline semaphore values signalled by a `VkSubmitInfo` (from its
/// `VkTimelineSemaphoreSubmitInfo`).
unsafe fn timeline_signals(s: &vk::SubmitInfo<'_>, out: &mut Vec<(u64, u64)>) {
    let mut p = s.p_next as *const vk::BaseInStructure<'_>;
    while !p.is_null() {
        if (*p).s_type == vk::StructureType::TIMELINE_SEMAPHORE_SUBMIT_INFO {
            let t = &*(p as *const vk::TimelineSemaphoreSubmitInfo<'_>);
            let sems = slice(s.p_signal_semaphores, s.signal_semaphore_count);
            let values = slice(t.p_signal_semaphore_values, t.signal_semaphore_value_count);
            for (sem, v) in sems.iter().zip(values) {
                out.push((sem.as_raw(), *v));
            }
        }
        p = (*p).p_next;
    }
}

/// True when a submit carries a device group's submit info (the layer does not wrap those).
unsafe fn device_group(p_next: *const c_void) -> bool {
    let mut p = p_next as *const vk::BaseInStructure<'_>;
    while !p.is_null() {
        if (*p).s_type == vk::StructureType::DEVICE_GROUP_SUBMIT_INFO {
            return true;
        }
        p = (*p).p_next;
    }
    false
}

impl DeviceData {
    /// The submit level's stamp for a submit to `queue` with command buffers, and the layer's
    /// wrapper command buffers that write it.
    unsafe fn wrap(
        &self,
        g: &mut super::Inner,
        queue: u64,
    ) -> Option<(Stamp, vk::CommandBuffer, vk::CommandBuffer)> {
        let family = g.state.queue_family(queue)?;
        if !g
            .state
            .timestamp_families
            .get(family as usize)
            .copied()
            .unwrap_or(false)
        {
            return None;
        }
        let slot = self.take_slot(g)?;
        match self.wrappers(g, family, slot) {
            Some((start, end)) => {
                if g.state.host_reset {
                    g.state.resets.push((slot, 1));
                }
                let op = g.state.region_op("submit");
                Some((Stamp::pair(slot, op, 0), start, end))
            }
            None => {
                g.state.slots.put(slot);
                None
            }
        }
    }

    /// Everything a submit does to the state, before the driver gets it: reads what the
    /// submitted command buffers still hold unread, counts the submit, and returns the
    /// wrappers when the submit level wraps it.
    unsafe fn submitted<B: AsRef<[u64]>>(
        &self,
        queue: vk::Queue,
        batches: &[B],
        fence: vk::Fence,
        signals: &[(u64, u64)],
        wrappable: bool,
        t0: u64,
    ) -> Option<(vk::CommandBuffer, vk::CommandBuffer)> {
        let mut g = self.lock();
        self.drain_descriptor_writes(&mut g);
        // Nothing to drain: a submitted command buffer has ended (Vulkan lets only executable
        // ones be submitted), and its end drained its slot.
        let jobs = g.state.resubmitted(batches);
        if !jobs.is_empty() {
            self.read_jobs(&mut g, jobs);
        }
        let any = batches.iter().any(|b| !b.as_ref().is_empty());
        let wrapped = if g.state.level == Level::Submit
            && g.state.timing
            && wrappable
            && any
            && !g.state.submit_timed_by_its_command_buffer(batches)
        {
            self.wrap(&mut g, queue.as_raw())
        } else {
            None
        };
        let fence = (fence != vk::Fence::null()).then(|| fence.as_raw());
        g.state.submit(
            queue.as_raw(),
            batches,
            fence,
            signals,
            wrapped.map(|w| w.0),
        );
        self.reset_on_host(&mut g);
        let overdue = g.state.overdue(queue.as_raw());
        if !overdue.is_empty() {
            self.read_jobs(&mut g, overdue);
        }
        self.announce(&mut g);
        self.out.live(&g.state, t0);
        wrapped.map(|w| (w.1, w.2))
    }

    fn submit_span(&self, t0: u64) {
        self.lock().state.host_span(Host::Submit, t0, now_ns());
    }

    /// A wait returned `r` after starting at `start`: what it proved complete is read, and a
    /// successful blocking wait (not a poll) ends the open group.
    unsafe fn waited(&self, kind: &'static str, what: Completed<'_>, r: vk::Result, start: u64) {
        let end = now_ns();
        let mut g = self.lock();
        g.state.host_span(Host::Wait, start, end);
        if r == vk::Result::SUCCESS {
            let jobs = g.state.completed(what);
            self.read_jobs(&mut g, jobs);
            self.close(&mut g, kind, end);
        }
    }

    /// A poll (or a zero-timeout wait) that proved `what` complete.
    unsafe fn polled(&self, what: Completed<'_>) {
        let mut g = self.lock();
        let jobs = g.state.completed(what);
        if !jobs.is_empty() {
            self.read_jobs(&mut g, jobs);
        }
    }
}

pub(super) unsafe extern "system" fn queue_submit(
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
    let t0 = now_ns();
    let infos = slice(submits, count);
    // The command buffers' keys, in place: a submit allocates nothing for them.
    let mut inline: [&[u64]; 4] = [&[]; 4];
    let heap: Vec<&[u64]>;
    let batches: &[&[u64]] = if infos.len() <= inline.len() {
        for (b, s) in inline.iter_mut().zip(infos) {
            *b = keys(s.p_command_buffers, s.command_buffer_count);
        }
        &inline[..infos.len()]
    } else {
        heap = infos
            .iter()
            .map(|s| keys(s.p_command_buffers, s.command_buffer_count))
            .collect();
        &heap
    };
    let mut signals = Vec::new();
    for s in infos {
        timeline_signals(s, &mut signals);
    }
    let wrappable = !infos.iter().any(|s| device_group(s.p_next));
    let r = match d.submitted(queue, batches, fence, &signals, wrappable, t0) {
        Some((start, end)) => {
            // The layer's command buffers go first into the first batch with command buffers
            // and last into the last one.
            let mut lists: Vec<Vec<vk::CommandBuffer>> = infos
                .iter()
                .map(|s| slice(s.p_command_buffers, s.command_buffer_count).to_vec())
                .collect();
            let first = lists.iter().position(|l| !l.is_empty());
            let last = lists.iter().rposition(|l| !l.is_empty());
            if let (Some(a), Some(b)) = (first, last) {
                lists[a].insert(0, start);
                lists[b].push(end);
            }
            let mut copy: Vec<vk::SubmitInfo<'_>> = infos.to_vec();
            for (s, l) in copy.iter_mut().zip(&lists) {
                s.command_buffer_count = l.len() as u32;
                s.p_command_buffers = l.as_ptr();
            }
            f(queue, copy.len() as u32, copy.as_ptr(), fence)
        }
        None => f(queue, count, submits, fence),
    };
    d.submit_span(t0);
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
    let t0 = now_ns();
    let infos = slice(submits, count);
    let mut lists: Vec<Vec<vk::CommandBufferSubmitInfo<'_>>> = infos
        .iter()
        .map(|s| slice(s.p_command_buffer_infos, s.command_buffer_info_count).to_vec())
        .collect();
    let batches: Vec<Vec<u64>> = lists
        .iter()
        .map(|l| l.iter().map(|c| c.command_buffer.as_raw()).collect())
        .collect();
    let mut signals = Vec::new();
    for s in infos {
        for i in slice(s.p_signal_semaphore_infos, s.signal_semaphore_info_count) {
            signals.push((i.semaphore.as_raw(), i.value));
        }
    }
    // Device-group submits carry device masks in their command buffer infos; the wrappers use
    // the default mask, which is right for every other submit.
    let wrappable = !infos.iter().any(|s| {
        slice(s.p_command_buffer_infos, s.command_buffer_info_count)
            .iter()
            .any(|c| c.device_mask != 0)
    });
    let r = match d.submitted(queue, &batches, fence, &signals, wrappable, t0) {
        Some((start, end)) => {
            let first = lists.iter().position(|l| !l.is_empty());
            let last = lists.iter().rposition(|l| !l.is_empty());
            if let (Some(a), Some(b)) = (first, last) {
                lists[a].insert(
                    0,
                    vk::CommandBufferSubmitInfo::default().command_buffer(start),
                );
                lists[b].push(vk::CommandBufferSubmitInfo::default().command_buffer(end));
            }
            let mut copy: Vec<vk::SubmitInfo2<'_>> = infos.to_vec();
            for (s, l) in copy.iter_mut().zip(&lists) {
                s.command_buffer_info_count = l.len() as u32;
                s.p_command_buffer_infos = l.as_ptr();
            }
            f(queue, copy.len() as u32, copy.as_ptr(), fence)
        }
        None => f(queue, count, submits, fence),
    };
    d.submit_span(t0);
    r
}

pub(super) unsafe extern "system" fn queue_submit2(
    queue: vk::Queue,
    count: u32,
    submits: *const vk::SubmitInfo2<'_>,
    fence: vk::Fence,
) -> vk::Result {
    submit2(queue, count, submits, fence, false)
}

pub(super) unsafe extern "system" fn queue_submit2_khr(
    queue: vk::Queue,
    count: u32,
    submits: *const vk::SubmitInfo2<'_>,
    fence: vk::Fence,
) -> vk::Result {
    submit2(queue, count, submits, fence, true)
}

pub(super) unsafe extern "system" fn queue_wait_idle(queue: vk::Queue) -> vk::Result {
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

pub(super) unsafe extern "system" fn device_wait_idle(device: vk::Device) -> vk::Result {
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

pub(super) unsafe extern "system" fn wait_for_fences(
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
    if r != vk::Result::SUCCESS {
        if timeout > 0 {
            d.waited("fence", Completed::Device, r, t0);
        }
        return r;
    }
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
    if timeout == 0 {
        d.polled(Completed::Fences(&done));
    } else {
        d.waited("fence", Completed::Fences(&done), r, t0);
    }
    r
}

pub(super) unsafe extern "system" fn get_fence_status(
    device: vk::Device,
    fence: vk::Fence,
) -> vk::Result {
    let Some(d) = dev(device) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    let Some(f) = d.next.get_fence_status else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    let r = f(device, fence);
    if r == vk::Result::SUCCESS {
        d.polled(Completed::Fences(&[fence.as_raw()]));
    }
    r
}

/// The (semaphore, value) pairs a successful `vkWaitSemaphores` proves reached: all of them, or
/// with `WAIT_ANY` those whose counter has reached its value now.
unsafe fn reached(
    d: &DeviceData,
    device: vk::Device,
    info: *const vk::SemaphoreWaitInfo<'_>,
) -> Vec<(u64, u64)> {
    if info.is_null() {
        return Vec::new();
    }
    let i = &*info;
    let sems = slice(i.p_semaphores, i.semaphore_count);
    let values = slice(i.p_values, i.semaphore_count);
    let any = i.flags.contains(vk::SemaphoreWaitFlags::ANY);
    let counter = d
        .next
        .get_semaphore_counter_value
        .or(d.next.get_semaphore_counter_value_khr);
    sems.iter()
        .zip(values)
        .filter_map(|(s, &v)| {
            if !any {
                return Some((s.as_raw(), v));
            }
            let mut now = 0u64;
            let ok = counter.is_some_and(|f| f(device, *s, &mut now) == vk::Result::SUCCESS);
            (ok && now >= v).then_some((s.as_raw(), now))
        })
        .collect()
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
    if r == vk::Result::SUCCESS {
        let pairs = reached(d, device, info);
        if timeout == 0 {
            d.polled(Completed::Semaphores(&pairs));
        } else {
            d.waited("semaphore", Completed::Semaphores(&pairs), r, t0);
        }
    } else if timeout > 0 {
        d.waited("semaphore", Completed::Device, r, t0);
    }
    r
}

pub(super) unsafe extern "system" fn wait_semaphores(
    device: vk::Device,
    info: *const vk::SemaphoreWaitInfo<'_>,
    timeout: u64,
) -> vk::Result {
    semaphores(device, info, timeout, false)
}

pub(super) unsafe extern "system" fn wait_semaphores_khr(
    device: vk::Device,
    info: *const vk::SemaphoreWaitInfo<'_>,
    timeout: u64,
) -> vk::Result {
    semaphores(device, info, timeout, true)
}

unsafe fn counter_value(
    device: vk::Device,
    semaphore: vk::Semaphore,
    value: *mut u64,
    khr: bool,
) -> vk::Result {
    let Some(d) = dev(device) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    let f = if khr {
        d.next.get_semaphore_counter_value_khr
    } else {
        d.next.get_semaphore_counter_value
    };
    let Some(f) = f else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    let r = f(device, semaphore, value);
    if r == vk::Result::SUCCESS && !value.is_null() {
        d.polled(Completed::Semaphores(&[(semaphore.as_raw(), *value)]));
    }
    r
}

pub(super) unsafe extern "system" fn get_semaphore_counter_value(
    device: vk::Device,
    semaphore: vk::Semaphore,
    value: *mut u64,
) -> vk::Result {
    counter_value(device, semaphore, value, false)
}

pub(super) unsafe extern "system" fn get_semaphore_counter_value_khr(
    device: vk::Device,
    semaphore: vk::Semaphore,
    value: *mut u64,
) -> vk::Result {
    counter_value(device, semaphore, value, true)
}
