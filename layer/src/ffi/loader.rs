//! The loader's layer interface (vk_layer.h): negotiation, the proc-addr functions, and the
//! instance, whose creation opens the raw stream.

use std::ffi::{CStr, c_char, c_void};
use std::mem::transmute;
use std::sync::Arc;

use ash::vk;

use super::{InstanceData, commands, device, instance_of, instances, key, objects, output, queue};

const LAYER_NEGOTIATE_INTERFACE_STRUCT: u32 = 1;
pub(super) const VK_LAYER_LINK_INFO: u32 = 0;
pub(super) const VK_LOADER_DATA_CALLBACK: u32 = 1;

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
pub(super) struct LayerDeviceLink {
    pub p_next: *mut LayerDeviceLink,
    pub pfn_next_get_instance_proc_addr: vk::PFN_vkGetInstanceProcAddr,
    pub pfn_next_get_device_proc_addr: vk::PFN_vkGetDeviceProcAddr,
}

/// `VkLayerInstanceCreateInfo` / `VkLayerDeviceCreateInfo`: only the union's first pointer is
/// read or written (the link, or the set-loader-data callback).
#[repr(C)]
pub(super) struct LayerCreateInfo {
    s_type: vk::StructureType,
    p_next: *const c_void,
    function: u32,
    pub u: *mut c_void,
}

/// Finds the loader's create info of `s_type` with `function` in a `pNext` chain.
pub(super) unsafe fn find_chain(
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
    use commands as c;
    use objects as o;
    use queue as q;
    let f: *const () = match name {
        b"vkGetDeviceProcAddr" => get_device_proc_addr as *const (),
        b"vkDestroyDevice" => device::destroy_device as *const (),
        b"vkGetDeviceQueue" => device::get_device_queue as *const (),
        b"vkGetDeviceQueue2" => device::get_device_queue2 as *const (),
        b"vkQueueSubmit" => q::queue_submit as *const (),
        b"vkQueueSubmit2" => q::queue_submit2 as *const (),
        b"vkQueueSubmit2KHR" => q::queue_submit2_khr as *const (),
        b"vkQueueWaitIdle" => q::queue_wait_idle as *const (),
        b"vkDeviceWaitIdle" => q::device_wait_idle as *const (),
        b"vkWaitForFences" => q::wait_for_fences as *const (),
        b"vkGetFenceStatus" => q::get_fence_status as *const (),
        b"vkWaitSemaphores" => q::wait_semaphores as *const (),
        b"vkWaitSemaphoresKHR" => q::wait_semaphores_khr as *const (),
        b"vkGetSemaphoreCounterValue" => q::get_semaphore_counter_value as *const (),
        b"vkGetSemaphoreCounterValueKHR" => q::get_semaphore_counter_value_khr as *const (),
        b"vkCreateCommandPool" => c::create_command_pool as *const (),
        b"vkDestroyCommandPool" => c::destroy_command_pool as *const (),
        b"vkResetCommandPool" => c::reset_command_pool as *const (),
        b"vkAllocateCommandBuffers" => c::allocate_command_buffers as *const (),
        b"vkFreeCommandBuffers" => c::free_command_buffers as *const (),
        b"vkBeginCommandBuffer" => c::begin_command_buffer as *const (),
        b"vkEndCommandBuffer" => c::end_command_buffer as *const (),
        b"vkResetCommandBuffer" => c::reset_command_buffer as *const (),
        b"vkCmdBindPipeline" => c::cmd_bind_pipeline as *const (),
        b"vkCmdBindDescriptorSets" => c::cmd_bind_descriptor_sets as *const (),
        b"vkCmdPushConstants" => c::cmd_push_constants as *const (),
        b"vkCmdPushDescriptorSetKHR" => c::cmd_push_descriptor_set_khr as *const (),
        b"vkCmdDispatch" => c::cmd_dispatch as *const (),
        b"vkCmdDispatchBase" => c::cmd_dispatch_base as *const (),
        b"vkCmdDispatchIndirect" => c::cmd_dispatch_indirect as *const (),
        b"vkCmdCopyBuffer" => c::cmd_copy_buffer as *const (),
        b"vkCmdCopyImage" => c::cmd_copy_image as *const (),
        b"vkCmdCopyBufferToImage" => c::cmd_copy_buffer_to_image as *const (),
        b"vkCmdCopyImageToBuffer" => c::cmd_copy_image_to_buffer as *const (),
        b"vkCmdFillBuffer" => c::cmd_fill_buffer as *const (),
        b"vkCmdUpdateBuffer" => c::cmd_update_buffer as *const (),
        b"vkCmdPipelineBarrier" => c::cmd_pipeline_barrier as *const (),
        b"vkCmdPipelineBarrier2" => c::cmd_pipeline_barrier2 as *const (),
        b"vkCmdPipelineBarrier2KHR" => c::cmd_pipeline_barrier2_khr as *const (),
        b"vkCmdWriteTimestamp" => c::cmd_write_timestamp as *const (),
        b"vkCmdExecuteCommands" => c::cmd_execute_commands as *const (),
        b"vkCmdBeginDebugUtilsLabelEXT" => c::cmd_begin_debug_utils_label as *const (),
        b"vkCmdEndDebugUtilsLabelEXT" => c::cmd_end_debug_utils_label as *const (),
        b"vkAllocateDescriptorSets" => o::allocate_descriptor_sets as *const (),
        b"vkUpdateDescriptorSets" => o::update_descriptor_sets as *const (),
        b"vkUpdateDescriptorSetWithTemplate" => o::update_descriptor_set_with_template as *const (),
        b"vkCreateShaderModule" => o::create_shader_module as *const (),
        b"vkDestroyShaderModule" => o::destroy_shader_module as *const (),
        b"vkCreateComputePipelines" => o::create_compute_pipelines as *const (),
        b"vkCreatePipelineLayout" => super::clock::create_pipeline_layout as *const (),
        b"vkSetDebugUtilsObjectNameEXT" => o::set_debug_utils_object_name as *const (),
        b"vkMapMemory" => o::map_memory as *const (),
        b"vkUnmapMemory" => o::unmap_memory as *const (),
        b"vkFlushMappedMemoryRanges" => o::flush_mapped_memory_ranges as *const (),
        b"vkInvalidateMappedMemoryRanges" => o::invalidate_mapped_memory_ranges as *const (),
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
        b"vkCreateDevice" => return as_void(device::create_device as *const ()),
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

pub(super) unsafe extern "system" fn get_device_proc_addr(
    device: vk::Device,
    name: *const c_char,
) -> vk::PFN_vkVoidFunction {
    if name.is_null() || device == vk::Device::null() {
        return None;
    }
    let d = super::dev(device)?;
    let next = (d.next_gdpa)(device, name);
    match (next, intercept(CStr::from_ptr(name).to_bytes())) {
        (Some(_), Some(ours)) => Some(ours),
        (next, _) => next,
    }
}

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
    let mut map = instances().lock().unwrap_or_else(|e| e.into_inner());
    map.insert(
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
