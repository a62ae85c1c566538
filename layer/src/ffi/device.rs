//! The device: its creation (the next layer's entry points, the calibrated-timestamps
//! extension, the layer's first query pool, the clock calibration), its queues, its end.

use std::ffi::{CStr, c_char};
use std::mem::transmute;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;

use ash::vk::{self, Handle};
use profiler::capture::{RawDevice, RawRecord};
use profiler::trace::{ClockMeta, DeviceMeta};
use profiler::vulkan;

use super::features::HostReset;
use super::loader::{LayerDeviceLink, VK_LAYER_LINK_INFO, VK_LOADER_DATA_CALLBACK, find_chain};
use super::{
    DeviceData, Inner, InstanceData, Next, SetDeviceLoaderData, Timer, add_device, config, dev,
    instance_of, key, now_ns, output, remove_device, slice,
};
use crate::recording::Table;
use crate::state::{DeviceState, Level};

unsafe fn device_meta(inst: &InstanceData, pd: vk::PhysicalDevice) -> DeviceMeta {
    let props = inst.fns.get_physical_device_properties(pd);
    let mut driver = String::new();
    if props.api_version >= vk::API_VERSION_1_2 {
        let mut dp = vk::PhysicalDeviceDriverProperties::default();
        let mut p2 = vk::PhysicalDeviceProperties2::default().push_next(&mut dp);
        (inst.fns.fp_v1_1().get_physical_device_properties2)(pd, &mut p2);
        driver = vulkan::driver(
            &vulkan::c_string(&dp.driver_name),
            &vulkan::c_string(&dp.driver_info),
        );
    }
    DeviceMeta {
        name: vulkan::c_string(&props.device_name),
        device_type: vulkan::device_type(props.device_type.as_raw()).into(),
        vendor_id: props.vendor_id,
        device_id: props.device_id,
        driver,
        api_version: vulkan::api_version(props.api_version),
        timestamp_period_ns: props.limits.timestamp_period as f64,
        compute_units: 0,
        memory_bandwidth_gbps: None,
    }
}

/// One calibrated (GPU, host) sample: how GPU timestamps map to the host clock.
unsafe fn calibrate(
    next: &Next,
    device: vk::Device,
    calib: Option<&CStr>,
    valid_mask: u64,
    period_ns: f64,
) -> ClockMeta {
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
}

pub(super) unsafe extern "system" fn create_device(
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
        Some(transmute::<*mut std::ffi::c_void, SetDeviceLoaderData>(
            (*cb).u,
        ))
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
    let has = |name: &CStr| super::features::named(&requested, name);
    let available = inst
        .fns
        .enumerate_device_extension_properties(pd)
        .unwrap_or_default();
    let supports = |name: &CStr| super::features::offered(&available, name);
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
    // Shader clocks for the dispatch level, where the device has them.
    let mut plan = match (level, config().shader_clock) {
        (Level::Dispatch, true) => super::clock::plan(&inst, pd, &*info, &requested, &available)
            .map_err(|why| {
                eprintln!("decodescope layer: dispatches are timed by interval: {why}");
                why
            }),
        _ => Err(String::new()),
    }
    .ok();
    // Host query resets for every timed level, where the device has them.
    let mut reset = if level == Level::Off || !config().host_reset {
        None
    } else {
        HostReset::plan(&inst, pd, &*info, &requested, &available)
            .map_err(|why| {
                eprintln!("decodescope layer: queries are reset in command buffers: {why}");
            })
            .ok()
    };
    let without_added = names.clone();
    if let Some(p) = &plan {
        names.extend(p.extensions.iter().map(|n| n.as_ptr()));
    }
    if let Some(n) = reset.as_ref().and_then(|p| p.extension) {
        names.push(n.as_ptr());
    }
    let mut ci = *info;
    ci.enabled_extension_count = names.len() as u32;
    ci.pp_enabled_extension_names = names.as_ptr();
    if let Some(p) = plan.as_mut() {
        p.apply(&mut ci);
    }
    if let Some(p) = reset.as_mut() {
        p.apply(&mut ci);
    }
    let mut r = create(pd, &ci, alloc, out);
    if let Some(p) = &reset {
        p.restore();
    }
    if let Some(p) = &plan {
        p.restore();
    }
    if r != vk::Result::SUCCESS && (plan.is_some() || reset.is_some()) {
        // The driver refused what the layer added: the program's own request, timed by
        // interval, with queries reset in command buffers.
        eprintln!(
            "decodescope layer: vkCreateDevice with the layer's features failed ({r:?}); \
             dispatches are timed by interval and queries reset in command buffers"
        );
        plan = None;
        reset = None;
        let mut ci = *info;
        ci.enabled_extension_count = without_added.len() as u32;
        ci.pp_enabled_extension_names = without_added.as_ptr();
        r = create(pd, &ci, alloc, out);
    }
    if r != vk::Result::SUCCESS {
        return r;
    }
    let device = *out;
    let next = Next::load(next_gdpa, device);
    let host_reset = reset.and(next.reset_query_pool.or(next.reset_query_pool_ext));
    let meta = device_meta(&inst, pd);
    let families = inst.fns.get_physical_device_queue_family_properties(pd);
    let valid_bits = families
        .iter()
        .map(|f| f.timestamp_valid_bits)
        .max()
        .unwrap_or(0);
    let index = super::device_count();
    let mut state = DeviceState::new(index, level, now_ns());
    state.host_reset = host_reset.is_some();
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
    let period_ns = meta.timestamp_period_ns;
    let valid_mask = if valid_bits >= 64 {
        u64::MAX
    } else {
        (1u64 << valid_bits) - 1
    };
    let clock = plan.as_ref().and_then(|p| {
        let memory = inst.fns.get_physical_device_memory_properties(pd);
        super::clock::ShaderClock::create(&next, device, &memory, p)
            .map_err(|why| eprintln!("decodescope layer: dispatches are timed by interval: {why}"))
            .ok()
    });
    let data: &'static DeviceData = Box::leak(Box::new(DeviceData {
        handle: device,
        next_gdpa,
        next,
        set_loader_data,
        period_ns,
        valid_mask,
        out: output().clone(),
        level,
        recordings: Some(Table::default()),
        descriptor_writes: AtomicU64::new(0),
        clock,
        host_reset,
        inner: Mutex::new(Inner {
            state,
            timer: Timer::default(),
        }),
    }));
    // The layer's first query pool decides whether this device is timed at all.
    let timed = {
        let mut g = data.lock();
        level != Level::Off && valid_bits > 0 && period_ns > 0.0 && data.add_pool(&mut g)
    };
    let clock = if timed {
        calibrate(&next, device, calib, valid_mask, period_ns)
    } else {
        ClockMeta {
            calibrated: false,
            method: "none".into(),
            max_deviation_ns: None,
            gpu_minus_host_ns: 0,
        }
    };
    let dispatch_timing = match (timed && level == Level::Dispatch, &data.clock) {
        (false, _) => "",
        (true, Some(_)) => "shader-clock",
        (true, None) => "interval",
    };
    data.out.write(RawRecord::Device(RawDevice {
        device: index,
        info: meta,
        clock,
        timestamps: if timed { level.name() } else { "off" }.into(),
        dispatch_timing: dispatch_timing.into(),
        query_reset: match (timed, host_reset) {
            (false, _) => "",
            (true, Some(_)) => "host",
            (true, None) => "command-buffer",
        }
        .into(),
    }));
    if !add_device(key(device), data) {
        eprintln!(
            "decodescope layer: more than {} devices at once; this one is not traced",
            super::DEVICE_SLOTS
        );
    }
    r
}

pub(super) unsafe extern "system" fn destroy_device(
    device: vk::Device,
    alloc: *const vk::AllocationCallbacks<'_>,
) {
    let Some(d) = dev(device) else {
        return;
    };
    let destroy = d.next.destroy_device;
    d.finish("destroy", false);
    remove_device(key(device));
    {
        let mut g = d.lock();
        let t = std::mem::take(&mut g.timer);
        if let Some(f) = d.next.destroy_command_pool {
            for p in t.cmd_pools.values() {
                f(device, *p, std::ptr::null());
            }
        }
        if let Some(f) = d.next.destroy_query_pool {
            for p in t.pools {
                f(device, p, std::ptr::null());
            }
        }
        if let Some(c) = &d.clock {
            c.destroy(&d.next, device);
        }
        // The bookkeeping goes; the leaked shell stays (see DEVICE_SLOTS).
        let (index, level) = (g.state.index, g.state.level);
        g.state = DeviceState::new(index, level, 0);
    }
    d.out.flush();
    if let Some(f) = destroy {
        f(device, alloc);
    }
}

pub(super) unsafe extern "system" fn get_device_queue(
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
        let mut g = d.lock();
        g.state.add_queue((*out).as_raw(), family, index);
        d.announce(&mut g);
    }
}

pub(super) unsafe extern "system" fn get_device_queue2(
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
        let mut g = d.lock();
        g.state.add_queue(
            (*out).as_raw(),
            (*info).queue_family_index,
            (*info).queue_index,
        );
        d.announce(&mut g);
    }
}
