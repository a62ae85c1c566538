//! Descriptors, shader modules and pipelines (and their names), mapped memory.

use std::ffi::{CStr, c_void};
use std::sync::atomic::Ordering;

use ash::vk::{self, Handle};

use super::{dev, now_ns, slice};
use crate::state::{Host, hash_bytes, mix};

pub(super) unsafe extern "system" fn allocate_descriptor_sets(
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
    let t1 = now_ns();
    let mut g = d.lock();
    if r == vk::Result::SUCCESS {
        g.state
            .descriptor_sets_allocated((*info).descriptor_set_count as u64);
    }
    g.state.host_span(Host::Descriptors, t0, t1);
    r
}

pub(super) unsafe extern "system" fn update_descriptor_sets(
    device: vk::Device,
    write_count: u32,
    writes: *const vk::WriteDescriptorSet<'_>,
    copy_count: u32,
    copies: *const vk::CopyDescriptorSet<'_>,
) {
    let Some(d) = dev(device) else { return };
    d.descriptor_writes
        .fetch_add(write_count as u64, Ordering::Relaxed);
    if let Some(f) = d.next.update_descriptor_sets {
        f(device, write_count, writes, copy_count, copies);
    }
}

pub(super) unsafe extern "system" fn update_descriptor_set_with_template(
    device: vk::Device,
    set: vk::DescriptorSet,
    template: vk::DescriptorUpdateTemplate,
    data: *const c_void,
) {
    let Some(d) = dev(device) else { return };
    d.descriptor_writes.fetch_add(1, Ordering::Relaxed);
    if let Some(f) = d.next.update_descriptor_set_with_template {
        f(device, set, template, data);
    }
}

/// The hash of SPIR-V code of `size` bytes at `code`.
unsafe fn code_hash(code: *const u32, size: usize) -> u64 {
    if code.is_null() {
        return 0;
    }
    hash_bytes(std::slice::from_raw_parts(code.cast::<u8>(), size))
}

pub(super) unsafe extern "system" fn create_shader_module(
    device: vk::Device,
    info: *const vk::ShaderModuleCreateInfo<'_>,
    alloc: *const vk::AllocationCallbacks<'_>,
    out: *mut vk::ShaderModule,
) -> vk::Result {
    let Some(d) = dev(device) else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    let Some(f) = d.next.create_shader_module else {
        return vk::Result::ERROR_INITIALIZATION_FAILED;
    };
    let r = f(device, info, alloc, out);
    if r == vk::Result::SUCCESS && !info.is_null() {
        let h = code_hash((*info).p_code, (*info).code_size);
        d.lock().state.shader_module((*out).as_raw(), h);
        if let Some(c) = &d.clock {
            c.module_created(*out, (*info).p_code, (*info).code_size);
        }
    }
    r
}

pub(super) unsafe extern "system" fn destroy_shader_module(
    device: vk::Device,
    module: vk::ShaderModule,
    alloc: *const vk::AllocationCallbacks<'_>,
) {
    let Some(d) = dev(device) else { return };
    d.lock().state.destroy_shader_module(module.as_raw());
    if let Some(c) = &d.clock {
        c.module_destroyed(module);
    }
    if let Some(f) = d.next.destroy_shader_module {
        f(device, module, alloc);
    }
}

/// The code hash of a pipeline stage: its module's, or that of a `VkShaderModuleCreateInfo`
/// chained into the stage (no module at all, VK_KHR_maintenance5).
unsafe fn stage_hash(
    state: &crate::state::DeviceState,
    stage: &vk::PipelineShaderStageCreateInfo<'_>,
) -> u64 {
    if stage.module != vk::ShaderModule::null() {
        return state.module_hash(stage.module.as_raw()).unwrap_or(0);
    }
    let mut p = stage.p_next as *const vk::BaseInStructure<'_>;
    while !p.is_null() {
        if (*p).s_type == vk::StructureType::SHADER_MODULE_CREATE_INFO {
            let m = &*(p as *const vk::ShaderModuleCreateInfo<'_>);
            return code_hash(m.p_code, m.code_size);
        }
        p = (*p).p_next;
    }
    0
}

/// The hash of a stage's specialization constants (ids, offsets, sizes and data); 0 without.
unsafe fn spec_hash(stage: &vk::PipelineShaderStageCreateInfo<'_>) -> u64 {
    let Some(s) = stage.p_specialization_info.as_ref() else {
        return 0;
    };
    let mut h = 0x5bec;
    for e in slice(s.p_map_entries, s.map_entry_count) {
        h = mix(h, (e.constant_id as u64) << 32 | e.offset as u64);
        h = mix(h, e.size as u64);
    }
    if !s.p_data.is_null() && s.data_size > 0 {
        h = mix(
            h,
            hash_bytes(std::slice::from_raw_parts(
                s.p_data.cast::<u8>(),
                s.data_size,
            )),
        );
    }
    h.max(1)
}

pub(super) unsafe extern "system" fn create_compute_pipelines(
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
    // Each pipeline's entry point, code hash (the program's code, instrumented or not) and
    // specialization hash: its stable name.
    let named: Vec<(String, u64, u64)> = {
        let g = d.lock();
        slice(infos, count)
            .iter()
            .map(|info| {
                let stage = &info.stage;
                let entry = if stage.p_name.is_null() {
                    "main".into()
                } else {
                    CStr::from_ptr(stage.p_name).to_string_lossy().into_owned()
                };
                (entry, stage_hash(&g.state, stage), spec_hash(stage))
            })
            .collect()
    };
    let r = match &d.clock {
        Some(c) => {
            let names: Vec<String> = named
                .iter()
                .map(|(e, h, _)| format!("{e}@{:08x}", *h as u32))
                .collect();
            c.create_pipelines(&d.next, device, cache, count, infos, alloc, out, &names)
        }
        None => f(device, cache, count, infos, alloc, out),
    };
    if r == vk::Result::SUCCESS || r == vk::Result::PIPELINE_COMPILE_REQUIRED {
        let mut g = d.lock();
        for ((entry, h, spec), p) in named.iter().zip(slice(out, count)) {
            if *p != vk::Pipeline::null() {
                g.state.created_pipeline(p.as_raw(), entry, *h, *spec);
            }
        }
    }
    r
}

pub(super) unsafe extern "system" fn set_debug_utils_object_name(
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
        d.lock().state.name_pipeline((*info).object_handle, name);
    }
    match d.next.set_debug_utils_object_name {
        Some(f) => f(device, info),
        None => vk::Result::SUCCESS,
    }
}

pub(super) unsafe extern "system" fn map_memory(
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

pub(super) unsafe extern "system" fn unmap_memory(device: vk::Device, memory: vk::DeviceMemory) {
    let Some(d) = dev(device) else { return };
    d.lock().state.unmap(memory.as_raw());
    if let Some(f) = d.next.unmap_memory {
        f(device, memory);
    }
}

/// Bytes of the `count` mapped ranges at `ranges` (flushed or invalidated).
unsafe fn range_total(
    state: &crate::state::DeviceState,
    ranges: *const vk::MappedMemoryRange<'_>,
    count: u32,
) -> u64 {
    slice(ranges, count)
        .iter()
        .map(|r| state.range_bytes(r.memory.as_raw(), r.offset, r.size))
        .sum()
}

pub(super) unsafe extern "system" fn flush_mapped_memory_ranges(
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
        let bytes = range_total(&g.state, ranges, count);
        g.state.bytes_to_device(bytes);
    }
    f(device, count, ranges)
}

pub(super) unsafe extern "system" fn invalidate_mapped_memory_ranges(
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
    let bytes = range_total(&g.state, ranges, count);
    g.state.bytes_from_device(bytes);
    r
}
