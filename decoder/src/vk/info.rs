//! What a device offers that matters for decode profiling, read once from the driver.

use ash::vk;
use profiler::vulkan;
use serde::Serialize;

use super::error::{VkResult, call};

/// Properties of one Vulkan physical device (the `decoder devices` table).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct DeviceInfo {
    /// Index in the loader's enumeration order; `--device INDEX` picks it.
    pub index: usize,
    pub name: String,
    /// `discrete`, `integrated`, `virtual`, `cpu` or `other`.
    pub device_type: String,
    pub vendor_id: u32,
    pub device_id: u32,
    pub driver_name: String,
    pub driver_info: String,
    /// Device API version, `major.minor.patch`.
    pub api_version: String,
    /// Timestamps can be written on the compute queue.
    pub timestamps: bool,
    /// Nanoseconds per timestamp tick.
    pub timestamp_period_ns: f32,
    /// Valid bits of the compute queue's timestamps (0: none).
    pub timestamp_valid_bits: u32,
    /// `VK_KHR_calibrated_timestamps` or `VK_EXT_calibrated_timestamps` when the device can
    /// calibrate against CLOCK_MONOTONIC, else `None`.
    pub calibrated_timestamps: Option<String>,
    pub push_descriptors: bool,
    pub max_push_descriptors: u32,
    pub subgroup_size: u32,
    /// Subgroup arithmetic (subgroupAdd, subgroupMax) in compute shaders.
    pub subgroup_arithmetic: bool,
    /// Subgroup shuffles (subgroupShuffleXor) in compute shaders.
    pub subgroup_shuffle: bool,
    pub storage_buffer_16bit: bool,
    pub shader_float16: bool,
    pub host_query_reset: bool,
    /// Buffer device addresses: what the persistent token kernel (`--kernels persistent`) needs
    /// to reach every layer's buffers from one dispatch.
    pub grid_sync: bool,
    /// Float atomic adds on storage buffers (VK_EXT_shader_atomic_float's
    /// shaderBufferFloat32AtomicAdd): the persistent kernel's residual sums.
    pub float_atomic_add: bool,
    /// 64-bit integers and 64-bit atomics on storage buffers (shaderInt64,
    /// shaderBufferInt64Atomics): the persistent kernel's tagged words.
    pub int64_atomics: bool,
    /// The device clock in shaders (VK_KHR_shader_clock's shaderDeviceClock): the persistent
    /// kernel's phase clocks at `--timestamps dispatch`.
    pub shader_device_clock: bool,
    /// The driver reports statistics of compiled pipelines (VK_KHR_pipeline_executable_properties:
    /// registers, spills, code size, as the driver names them).
    pub pipeline_statistics: bool,
    pub max_storage_buffer_range: u64,
    pub max_memory_allocation_size: u64,
    pub max_compute_workgroup_invocations: u32,
    /// Bytes of shared memory one workgroup may declare.
    pub max_compute_shared_memory: u32,
    pub min_storage_buffer_offset_alignment: u64,
    /// Streaming multiprocessors / compute units (NV or AMD extensions), or CPU threads for a CPU
    /// device; the split-K attention sizes its splits from it.
    pub compute_units: u32,
    /// Size of the largest device-local memory heap.
    pub device_local_bytes: u64,
    /// A queue family with transfer but no graphics/compute exists.
    pub separate_transfer_queue: bool,
}

pub(crate) struct Probe {
    pub info: DeviceInfo,
    pub compute_family: u32,
    pub transfer_family: Option<u32>,
    pub extensions: Vec<String>,
    pub calibrated_khr: bool,
    pub calibrated_ext: bool,
}

pub(crate) fn probe(
    entry: &ash::Entry,
    instance: &ash::Instance,
    pd: vk::PhysicalDevice,
    index: usize,
) -> VkResult<Probe> {
    // SAFETY: `pd` was enumerated from `instance`, which is alive; all out-structs are valid and
    // their p_next chains point to locals that outlive the calls.
    unsafe {
        let exts = instance
            .enumerate_device_extension_properties(pd)
            .map_err(call("vkEnumerateDeviceExtensionProperties"))?;
        let extensions: Vec<String> = exts
            .iter()
            .map(|e| vulkan::c_string(&e.extension_name))
            .collect();
        let has = |n: &str| extensions.iter().any(|e| e == n);

        let mut p11 = vk::PhysicalDeviceVulkan11Properties::default();
        let mut p12 = vk::PhysicalDeviceVulkan12Properties::default();
        let mut push = vk::PhysicalDevicePushDescriptorPropertiesKHR::default();
        let mut sm = vk::PhysicalDeviceShaderSMBuiltinsPropertiesNV::default();
        let mut amd = vk::PhysicalDeviceShaderCorePropertiesAMD::default();
        let mut props2 = vk::PhysicalDeviceProperties2::default()
            .push_next(&mut p11)
            .push_next(&mut p12);
        if has("VK_KHR_push_descriptor") {
            props2 = props2.push_next(&mut push);
        }
        if has("VK_NV_shader_sm_builtins") {
            props2 = props2.push_next(&mut sm);
        }
        if has("VK_AMD_shader_core_properties") {
            props2 = props2.push_next(&mut amd);
        }
        instance.get_physical_device_properties2(pd, &mut props2);
        let props = props2.properties;

        let mut f11 = vk::PhysicalDeviceVulkan11Features::default();
        let mut f12 = vk::PhysicalDeviceVulkan12Features::default();
        let mut clock = vk::PhysicalDeviceShaderClockFeaturesKHR::default();
        let mut exec = vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::default();
        let mut atomic_float = vk::PhysicalDeviceShaderAtomicFloatFeaturesEXT::default();
        let mut feats2 = vk::PhysicalDeviceFeatures2::default()
            .push_next(&mut f11)
            .push_next(&mut f12);
        if has("VK_KHR_shader_clock") {
            feats2 = feats2.push_next(&mut clock);
        }
        if has("VK_KHR_pipeline_executable_properties") {
            feats2 = feats2.push_next(&mut exec);
        }
        if has("VK_EXT_shader_atomic_float") {
            feats2 = feats2.push_next(&mut atomic_float);
        }
        instance.get_physical_device_features2(pd, &mut feats2);
        let shader_int64 = feats2.features.shader_int64 == vk::TRUE;

        let families = instance.get_physical_device_queue_family_properties(pd);
        let compute_family = families
            .iter()
            .position(|f| f.queue_flags.contains(vk::QueueFlags::COMPUTE))
            .unwrap_or(0) as u32;
        let transfer_family = families
            .iter()
            .position(|f| {
                f.queue_flags.contains(vk::QueueFlags::TRANSFER)
                    && !f
                        .queue_flags
                        .intersects(vk::QueueFlags::COMPUTE | vk::QueueFlags::GRAPHICS)
            })
            .map(|i| i as u32);
        let valid_bits = families
            .get(compute_family as usize)
            .map_or(0, |f| f.timestamp_valid_bits);

        let calibrated_khr = has("VK_KHR_calibrated_timestamps")
            && monotonic_domain(
                ash::khr::calibrated_timestamps::Instance::new(entry, instance)
                    .get_physical_device_calibrateable_time_domains(pd)
                    .unwrap_or_default(),
            );
        let calibrated_ext = !calibrated_khr
            && has("VK_EXT_calibrated_timestamps")
            && monotonic_domain(
                ash::ext::calibrated_timestamps::Instance::new(entry, instance)
                    .get_physical_device_calibrateable_time_domains(pd)
                    .unwrap_or_default(),
            );

        let mem = instance.get_physical_device_memory_properties(pd);
        let device_local_bytes = mem.memory_heaps[..mem.memory_heap_count as usize]
            .iter()
            .filter(|h| h.flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL))
            .map(|h| h.size)
            .max()
            .unwrap_or(0);

        let device_type = vulkan::device_type(props.device_type.as_raw());
        let compute_units = if sm.shader_sm_count > 0 {
            sm.shader_sm_count
        } else if amd.compute_units_per_shader_array > 0 {
            amd.shader_engine_count
                * amd.shader_arrays_per_engine_count
                * amd.compute_units_per_shader_array
        } else if device_type == "cpu" {
            std::thread::available_parallelism().map_or(1, |n| n.get() as u32)
        } else {
            16
        };
        let subgroup_arithmetic = p11
            .subgroup_supported_stages
            .contains(vk::ShaderStageFlags::COMPUTE)
            && p11
                .subgroup_supported_operations
                .contains(vk::SubgroupFeatureFlags::ARITHMETIC | vk::SubgroupFeatureFlags::BASIC);
        let subgroup_shuffle = subgroup_arithmetic
            && p11
                .subgroup_supported_operations
                .contains(vk::SubgroupFeatureFlags::SHUFFLE);

        let info = DeviceInfo {
            index,
            name: vulkan::c_string(&props.device_name),
            device_type: device_type.to_string(),
            vendor_id: props.vendor_id,
            device_id: props.device_id,
            driver_name: vulkan::c_string(&p12.driver_name),
            driver_info: vulkan::c_string(&p12.driver_info),
            api_version: vulkan::api_version(props.api_version),
            timestamps: props.limits.timestamp_compute_and_graphics == vk::TRUE && valid_bits > 0,
            timestamp_period_ns: props.limits.timestamp_period,
            timestamp_valid_bits: valid_bits,
            calibrated_timestamps: if calibrated_khr {
                Some("VK_KHR_calibrated_timestamps".into())
            } else if calibrated_ext {
                Some("VK_EXT_calibrated_timestamps".into())
            } else {
                None
            },
            push_descriptors: has("VK_KHR_push_descriptor"),
            max_push_descriptors: push.max_push_descriptors,
            subgroup_size: p11.subgroup_size,
            subgroup_arithmetic,
            subgroup_shuffle,
            storage_buffer_16bit: f11.storage_buffer16_bit_access == vk::TRUE,
            shader_float16: f12.shader_float16 == vk::TRUE,
            host_query_reset: f12.host_query_reset == vk::TRUE,
            grid_sync: f12.buffer_device_address == vk::TRUE,
            float_atomic_add: atomic_float.shader_buffer_float32_atomic_add == vk::TRUE,
            int64_atomics: shader_int64 && f12.shader_buffer_int64_atomics == vk::TRUE,
            shader_device_clock: clock.shader_device_clock == vk::TRUE,
            pipeline_statistics: exec.pipeline_executable_info == vk::TRUE,
            max_storage_buffer_range: props.limits.max_storage_buffer_range as u64,
            max_memory_allocation_size: p11.max_memory_allocation_size,
            max_compute_workgroup_invocations: props.limits.max_compute_work_group_invocations,
            max_compute_shared_memory: props.limits.max_compute_shared_memory_size,
            min_storage_buffer_offset_alignment: props.limits.min_storage_buffer_offset_alignment,
            compute_units,
            device_local_bytes,
            separate_transfer_queue: transfer_family.is_some(),
        };
        Ok(Probe {
            info,
            compute_family,
            transfer_family,
            extensions,
            calibrated_khr,
            calibrated_ext,
        })
    }
}

fn monotonic_domain(domains: Vec<vk::TimeDomainKHR>) -> bool {
    domains.contains(&vk::TimeDomainKHR::DEVICE)
        && domains.contains(&vk::TimeDomainKHR::CLOCK_MONOTONIC)
}
