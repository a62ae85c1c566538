//! Instance, device, queues and allocator: the [`Gpu`] every other Vulkan object hangs from.

use std::ffi::{CStr, CString, c_void};
use std::sync::{Arc, Mutex};

use ash::vk;
use gpu_allocator::vulkan::{Allocator, AllocatorCreateDesc};

use super::error::{VkError, VkResult, call};
use super::info::{DeviceInfo, Probe, probe};

const VALIDATION_LAYER: &CStr = c"VK_LAYER_KHRONOS_validation";

/// How to open a device.
#[derive(Clone, Debug, Default)]
pub struct GpuOptions {
    /// `--device INDEX|NAME`: an index from `decoder devices`, or a case-insensitive substring of a
    /// device name. `None` picks the first discrete GPU, then integrated, then any other, then CPU.
    pub device: Option<String>,
    /// Enable the Khronos validation layer and collect its warnings and errors.
    pub validation: bool,
}

/// Validation-layer messages of severity warning or error, collected while the device lives.
#[derive(Debug, Default)]
pub struct ValidationLog {
    messages: Mutex<Vec<String>>,
}

impl ValidationLog {
    /// Every warning and error reported so far.
    pub fn messages(&self) -> Vec<String> {
        self.messages.lock().map(|m| m.clone()).unwrap_or_default()
    }
    fn push(&self, m: String) {
        if let Ok(mut v) = self.messages.lock() {
            v.push(m);
        }
    }
}

/// How the device calibrates its timestamps against the host's CLOCK_MONOTONIC.
pub(crate) enum Calibrator {
    Khr(ash::khr::calibrated_timestamps::Device),
    Ext(ash::ext::calibrated_timestamps::Device),
}

/// One calibration sample: a GPU timestamp and the host time taken at the same moment.
#[derive(Clone, Copy, Debug)]
pub struct Calibration {
    pub gpu_ticks: u64,
    pub host_ns: u64,
    pub max_deviation_ns: u64,
}

/// Everything that lives as long as the device. Dropped last, after every buffer and pipeline
/// (each holds an `Arc` to it), and destroys in reverse order of creation.
pub(crate) struct Shared {
    _entry: ash::Entry,
    pub instance: ash::Instance,
    debug_instance: Option<ash::ext::debug_utils::Instance>,
    messenger: vk::DebugUtilsMessengerEXT,
    validation: Arc<ValidationLog>,
    pub device: ash::Device,
    pub info: DeviceInfo,
    pub compute_family: u32,
    pub compute_queue: vk::Queue,
    pub transfer: Option<(u32, vk::Queue)>,
    pub allocator: Mutex<Option<Allocator>>,
    pub pipeline_cache: vk::PipelineCache,
    pub debug_device: Option<ash::ext::debug_utils::Device>,
    pub push_descriptor: Option<ash::khr::push_descriptor::Device>,
    pub pipeline_exec: Option<ash::khr::pipeline_executable_properties::Device>,
    pub calibrator: Option<Calibrator>,
    /// The bandwidth probe's figures once measured on this device (`decoder::probe`).
    pub bandwidth: std::sync::OnceLock<Bandwidth>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        // SAFETY: every object created from this device holds an Arc<Shared>, so they are all
        // gone; the device is idle after the wait, and each handle is destroyed once.
        unsafe {
            let _ = self.device.device_wait_idle();
            self.device
                .destroy_pipeline_cache(self.pipeline_cache, None);
            if let Ok(mut a) = self.allocator.lock() {
                a.take();
            }
            self.device.destroy_device(None);
            if let Some(d) = &self.debug_instance {
                d.destroy_debug_utils_messenger(self.messenger, None);
            }
            self.instance.destroy_instance(None);
        }
    }
}

/// What the bandwidth probe measured on a device, in GB/s (10^9 bytes per second).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Bandwidth {
    /// Bytes a compute kernel reads per second (the decode roofline's denominator).
    pub read_gbps: f64,
    /// Bytes `vkCmdCopyBuffer` moves per second, counting each byte read and written once
    /// (memory traffic: twice the bytes copied).
    pub copy_gbps: f64,
    /// Size of the buffer each run read or copied.
    pub bytes: u64,
    /// Runs after the warm-up; the figures are the best run's.
    pub runs: u32,
    /// `gpu-timestamps` or `host-wall` (a device without compute-queue timestamps).
    pub timing: &'static str,
}

/// An opened Vulkan device with its queues, allocator and pipeline cache.
#[derive(Clone)]
pub struct Gpu {
    pub(crate) shared: Arc<Shared>,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu")
            .field("device", &self.shared.info.name)
            .finish()
    }
}

unsafe extern "system" fn debug_callback(
    severity: vk::DebugUtilsMessageSeverityFlagsEXT,
    kind: vk::DebugUtilsMessageTypeFlagsEXT,
    data: *const vk::DebugUtilsMessengerCallbackDataEXT<'_>,
    user: *mut c_void,
) -> vk::Bool32 {
    if data.is_null() || user.is_null() {
        return vk::FALSE;
    }
    // SAFETY: the loader passes a valid callback-data struct; `user` is the `ValidationLog`
    // pointer given at messenger creation, kept alive by `Shared` until the messenger is destroyed.
    let (msg, log) = unsafe {
        let d = &*data;
        let msg = if d.p_message.is_null() {
            String::new()
        } else {
            CStr::from_ptr(d.p_message).to_string_lossy().into_owned()
        };
        (msg, &*(user as *const ValidationLog))
    };
    // An older layer than the driver warns that it cannot validate a newer extension it does
    // not know (VK_KHR_calibrated_timestamps with Debian 12's 1.3.239 layer): a statement about
    // the layer's coverage, not about this program's use of the API.
    if msg.contains("is not supported by this layer") {
        return vk::FALSE;
    }
    let level = if severity.contains(vk::DebugUtilsMessageSeverityFlagsEXT::ERROR) {
        "error"
    } else {
        "warning"
    };
    let line = format!("validation {level} ({kind:?}): {msg}");
    eprintln!("{line}");
    log.push(line);
    vk::FALSE
}

fn load_entry() -> VkResult<ash::Entry> {
    // SAFETY: loading the system Vulkan loader; ash keeps the library alive in the Entry.
    unsafe { ash::Entry::load() }.map_err(|e| VkError::Loader(e.to_string()))
}

struct InstanceBundle {
    entry: ash::Entry,
    instance: ash::Instance,
    debug_instance: Option<ash::ext::debug_utils::Instance>,
    messenger: vk::DebugUtilsMessengerEXT,
    validation: Arc<ValidationLog>,
}

fn create_instance(validation: bool) -> VkResult<InstanceBundle> {
    let entry = load_entry()?;
    // SAFETY: plain enumeration and creation calls with valid, fully initialized create-infos.
    unsafe {
        let layers = entry
            .enumerate_instance_layer_properties()
            .map_err(call("vkEnumerateInstanceLayerProperties"))?;
        let has_layer = layers
            .iter()
            .any(|l| CStr::from_ptr(l.layer_name.as_ptr()) == VALIDATION_LAYER);
        if validation && !has_layer {
            return Err(VkError::NoValidationLayer);
        }
        let exts = entry
            .enumerate_instance_extension_properties(None)
            .map_err(call("vkEnumerateInstanceExtensionProperties"))?;
        let has_debug_utils = exts
            .iter()
            .any(|e| CStr::from_ptr(e.extension_name.as_ptr()) == ash::ext::debug_utils::NAME);

        let app_name = CString::new("decodescope").unwrap_or_default();
        let app = vk::ApplicationInfo::default()
            .application_name(&app_name)
            .application_version(vk::make_api_version(0, 0, 1, 0))
            .engine_name(&app_name)
            .api_version(vk::API_VERSION_1_2);
        let layer_ptrs = if validation {
            vec![VALIDATION_LAYER.as_ptr()]
        } else {
            vec![]
        };
        let mut ext_ptrs = vec![];
        if has_debug_utils {
            ext_ptrs.push(ash::ext::debug_utils::NAME.as_ptr());
        }
        let log = Arc::new(ValidationLog::default());
        let mut messenger_info = vk::DebugUtilsMessengerCreateInfoEXT::default()
            .message_severity(
                vk::DebugUtilsMessageSeverityFlagsEXT::WARNING
                    | vk::DebugUtilsMessageSeverityFlagsEXT::ERROR,
            )
            .message_type(
                vk::DebugUtilsMessageTypeFlagsEXT::GENERAL
                    | vk::DebugUtilsMessageTypeFlagsEXT::VALIDATION
                    | vk::DebugUtilsMessageTypeFlagsEXT::PERFORMANCE,
            )
            .pfn_user_callback(Some(debug_callback))
            .user_data(Arc::as_ptr(&log) as *mut c_void);
        let mut create = vk::InstanceCreateInfo::default()
            .application_info(&app)
            .enabled_layer_names(&layer_ptrs)
            .enabled_extension_names(&ext_ptrs);
        if validation && has_debug_utils {
            // Also catches messages from vkCreateInstance / vkDestroyInstance themselves.
            create = create.push_next(&mut messenger_info);
        }
        let instance = entry
            .create_instance(&create, None)
            .map_err(call("vkCreateInstance"))?;
        let (debug_instance, messenger) = if has_debug_utils {
            let d = ash::ext::debug_utils::Instance::new(&entry, &instance);
            let m = if validation {
                match d.create_debug_utils_messenger(&messenger_info, None) {
                    Ok(m) => m,
                    Err(e) => {
                        instance.destroy_instance(None);
                        return Err(call("vkCreateDebugUtilsMessengerEXT")(e));
                    }
                }
            } else {
                vk::DebugUtilsMessengerEXT::null()
            };
            (Some(d), m)
        } else {
            (None, vk::DebugUtilsMessengerEXT::null())
        };
        Ok(InstanceBundle {
            entry,
            instance,
            debug_instance,
            messenger,
            validation: log,
        })
    }
}

impl InstanceBundle {
    fn destroy(self) {
        // SAFETY: nothing else was created from this instance.
        unsafe {
            if let Some(d) = &self.debug_instance {
                d.destroy_debug_utils_messenger(self.messenger, None);
            }
            self.instance.destroy_instance(None);
        }
    }

    fn probes(&self) -> VkResult<Vec<(vk::PhysicalDevice, Probe)>> {
        // SAFETY: the instance is alive.
        let pds = unsafe { self.instance.enumerate_physical_devices() }
            .map_err(call("vkEnumeratePhysicalDevices"))?;
        pds.into_iter()
            .enumerate()
            .map(|(i, pd)| probe(&self.entry, &self.instance, pd, i).map(|p| (pd, p)))
            .collect()
    }
}

/// Lists every Vulkan device with the properties `decoder devices` shows.
pub fn list_devices() -> VkResult<Vec<DeviceInfo>> {
    let bundle = create_instance(false)?;
    let result = bundle
        .probes()
        .map(|v| v.into_iter().map(|(_, p)| p.info).collect());
    bundle.destroy();
    result
}

fn choose(probes: &[(vk::PhysicalDevice, Probe)], selector: Option<&str>) -> VkResult<usize> {
    if probes.is_empty() {
        return Err(VkError::NoDevice);
    }
    if let Some(sel) = selector {
        if let Ok(i) = sel.parse::<usize>() {
            return if i < probes.len() {
                Ok(i)
            } else {
                Err(VkError::DeviceNotFound(sel.to_string()))
            };
        }
        let s = sel.to_lowercase();
        return probes
            .iter()
            .position(|(_, p)| p.info.name.to_lowercase().contains(&s))
            .ok_or_else(|| VkError::DeviceNotFound(sel.to_string()));
    }
    for kind in ["discrete", "integrated", "virtual", "other", "cpu"] {
        if let Some(i) = probes.iter().position(|(_, p)| p.info.device_type == kind) {
            return Ok(i);
        }
    }
    Ok(0)
}

impl Gpu {
    /// Opens the device chosen by `opts` with a compute queue, a transfer queue where the device
    /// has a separate family, the allocator and a pipeline cache.
    pub fn new(opts: &GpuOptions) -> VkResult<Gpu> {
        let bundle = create_instance(opts.validation)?;
        match Self::open(&bundle, opts) {
            Ok(parts) => Ok(parts.finish(bundle)),
            Err(e) => {
                bundle.destroy();
                Err(e)
            }
        }
    }

    fn open(bundle: &InstanceBundle, opts: &GpuOptions) -> VkResult<DeviceParts> {
        let probes = bundle.probes()?;
        let idx = choose(&probes, opts.device.as_deref())?;
        let (pd, p) = &probes[idx];
        let info = p.info.clone();
        if parse_api(&info.api_version) < vk::API_VERSION_1_2 {
            return Err(VkError::MissingFeature {
                device: info.name,
                feature: "Vulkan 1.2".into(),
            });
        }
        if !info.storage_buffer_16bit {
            return Err(VkError::MissingFeature {
                device: info.name,
                feature:
                    "16-bit storage buffers (storageBuffer16BitAccess), needed for f16 weights"
                        .into(),
            });
        }
        let has = |n: &CStr| p.extensions.iter().any(|e| e.as_bytes() == n.to_bytes());
        let mut ext_ptrs = vec![];
        if has(ash::khr::push_descriptor::NAME) {
            ext_ptrs.push(ash::khr::push_descriptor::NAME.as_ptr());
        }
        if p.calibrated_khr {
            ext_ptrs.push(ash::khr::calibrated_timestamps::NAME.as_ptr());
        } else if p.calibrated_ext {
            ext_ptrs.push(ash::ext::calibrated_timestamps::NAME.as_ptr());
        }
        if info.shader_device_clock {
            ext_ptrs.push(ash::khr::shader_clock::NAME.as_ptr());
        }
        if info.pipeline_statistics {
            ext_ptrs.push(ash::khr::pipeline_executable_properties::NAME.as_ptr());
        }
        if info.float_atomic_add {
            ext_ptrs.push(ash::ext::shader_atomic_float::NAME.as_ptr());
        }
        let prio = [1.0f32];
        let mut queue_infos = vec![
            vk::DeviceQueueCreateInfo::default()
                .queue_family_index(p.compute_family)
                .queue_priorities(&prio),
        ];
        if let Some(t) = p.transfer_family {
            queue_infos.push(
                vk::DeviceQueueCreateInfo::default()
                    .queue_family_index(t)
                    .queue_priorities(&prio),
            );
        }
        let mut f11 =
            vk::PhysicalDeviceVulkan11Features::default().storage_buffer16_bit_access(true);
        let mut f12 = vk::PhysicalDeviceVulkan12Features::default()
            .shader_float16(info.shader_float16)
            .host_query_reset(info.host_query_reset)
            .buffer_device_address(info.grid_sync)
            .shader_buffer_int64_atomics(info.int64_atomics);
        let core = vk::PhysicalDeviceFeatures::default().shader_int64(info.int64_atomics);
        let mut clock =
            vk::PhysicalDeviceShaderClockFeaturesKHR::default().shader_device_clock(true);
        let mut create = vk::DeviceCreateInfo::default()
            .queue_create_infos(&queue_infos)
            .enabled_extension_names(&ext_ptrs)
            .enabled_features(&core)
            .push_next(&mut f11)
            .push_next(&mut f12);
        if info.shader_device_clock {
            create = create.push_next(&mut clock);
        }
        let mut exec = vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::default()
            .pipeline_executable_info(true);
        if info.pipeline_statistics {
            create = create.push_next(&mut exec);
        }
        let mut atomic_float = vk::PhysicalDeviceShaderAtomicFloatFeaturesEXT::default()
            .shader_buffer_float32_atomic_add(true);
        if info.float_atomic_add {
            create = create.push_next(&mut atomic_float);
        }
        // SAFETY: `pd` belongs to the live instance; the create-info and its chain are locals.
        let device = unsafe { bundle.instance.create_device(*pd, &create, None) }
            .map_err(call("vkCreateDevice"))?;
        // SAFETY: queue families and indices were requested above.
        let compute_queue = unsafe { device.get_device_queue(p.compute_family, 0) };
        let transfer = p
            .transfer_family
            .map(|t| (t, unsafe { device.get_device_queue(t, 0) }));
        let allocator = Allocator::new(&AllocatorCreateDesc {
            instance: bundle.instance.clone(),
            device: device.clone(),
            physical_device: *pd,
            debug_settings: Default::default(),
            buffer_device_address: info.grid_sync,
            allocation_sizes: Default::default(),
        });
        let allocator = match allocator {
            Ok(a) => a,
            Err(e) => {
                // SAFETY: nothing was created from the device yet.
                unsafe { device.destroy_device(None) };
                return Err(VkError::Unsupported(format!("gpu-allocator: {e}")));
            }
        };
        // SAFETY: a valid device and an empty cache create-info.
        let pipeline_cache = match unsafe {
            device.create_pipeline_cache(&vk::PipelineCacheCreateInfo::default(), None)
        } {
            Ok(c) => c,
            Err(e) => {
                drop(allocator);
                // SAFETY: nothing else was created from the device.
                unsafe { device.destroy_device(None) };
                return Err(call("vkCreatePipelineCache")(e));
            }
        };
        let debug_device = bundle
            .debug_instance
            .as_ref()
            .map(|_| ash::ext::debug_utils::Device::new(&bundle.instance, &device));
        let push_descriptor = info
            .push_descriptors
            .then(|| ash::khr::push_descriptor::Device::new(&bundle.instance, &device));
        let pipeline_exec = info.pipeline_statistics.then(|| {
            ash::khr::pipeline_executable_properties::Device::new(&bundle.instance, &device)
        });
        let calibrator = if p.calibrated_khr {
            Some(Calibrator::Khr(
                ash::khr::calibrated_timestamps::Device::new(&bundle.instance, &device),
            ))
        } else if p.calibrated_ext {
            Some(Calibrator::Ext(
                ash::ext::calibrated_timestamps::Device::new(&bundle.instance, &device),
            ))
        } else {
            None
        };
        Ok(DeviceParts {
            device,
            info,
            compute_family: p.compute_family,
            compute_queue,
            transfer,
            allocator,
            pipeline_cache,
            debug_device,
            push_descriptor,
            pipeline_exec,
            calibrator,
        })
    }

    /// The opened device's properties.
    pub fn info(&self) -> &DeviceInfo {
        &self.shared.info
    }

    /// The validation layer's warnings and errors so far (empty without validation).
    pub fn validation_messages(&self) -> Vec<String> {
        self.shared.validation.messages()
    }

    /// Takes one calibrated (GPU, host) timestamp pair, or `None` where the device cannot.
    pub fn calibrate(&self) -> VkResult<Option<Calibration>> {
        let Some(c) = &self.shared.calibrator else {
            return Ok(None);
        };
        let infos = [
            vk::CalibratedTimestampInfoKHR::default().time_domain(vk::TimeDomainKHR::DEVICE),
            vk::CalibratedTimestampInfoKHR::default()
                .time_domain(vk::TimeDomainKHR::CLOCK_MONOTONIC),
        ];
        // SAFETY: the extension was enabled on this device and both domains are supported.
        let (ts, dev) = unsafe {
            match c {
                Calibrator::Khr(d) => d.get_calibrated_timestamps(&infos),
                Calibrator::Ext(d) => d.get_calibrated_timestamps(&infos),
            }
        }
        .map_err(call("vkGetCalibratedTimestampsKHR"))?;
        Ok(Some(Calibration {
            gpu_ticks: ts[0],
            host_ns: ts[1],
            max_deviation_ns: dev,
        }))
    }

    /// The bandwidth probe's figures, once `decoder::probe` has measured this device.
    pub fn bandwidth(&self) -> Option<Bandwidth> {
        self.shared.bandwidth.get().copied()
    }

    /// Keeps the probe's figures for the traces this device's runs write (the first one stays).
    pub fn set_bandwidth(&self, b: Bandwidth) {
        let _ = self.shared.bandwidth.set(b);
    }

    /// Waits until the device has finished all work.
    pub fn wait_idle(&self) -> VkResult<()> {
        // SAFETY: the device is alive.
        unsafe { self.shared.device.device_wait_idle() }.map_err(call("vkDeviceWaitIdle"))
    }

    /// Names a Vulkan object for debug-utils tools (RenderDoc, Nsight, validation messages).
    pub(crate) fn set_name<H: vk::Handle>(&self, handle: H, name: &str) {
        if let Some(d) = &self.shared.debug_device {
            let Ok(n) = CString::new(name) else { return };
            let info = vk::DebugUtilsObjectNameInfoEXT::default()
                .object_handle(handle)
                .object_name(&n);
            // SAFETY: the handle belongs to this device; the name outlives the call.
            let _ = unsafe { d.set_debug_utils_object_name(&info) };
        }
    }
}

fn parse_api(s: &str) -> u32 {
    let mut it = s.split('.').map(|x| x.parse::<u32>().unwrap_or(0));
    vk::make_api_version(
        0,
        it.next().unwrap_or(0),
        it.next().unwrap_or(0),
        it.next().unwrap_or(0),
    )
}

struct DeviceParts {
    device: ash::Device,
    info: DeviceInfo,
    compute_family: u32,
    compute_queue: vk::Queue,
    transfer: Option<(u32, vk::Queue)>,
    allocator: Allocator,
    pipeline_cache: vk::PipelineCache,
    debug_device: Option<ash::ext::debug_utils::Device>,
    push_descriptor: Option<ash::khr::push_descriptor::Device>,
    pipeline_exec: Option<ash::khr::pipeline_executable_properties::Device>,
    calibrator: Option<Calibrator>,
}

impl DeviceParts {
    fn finish(self, b: InstanceBundle) -> Gpu {
        Gpu {
            shared: Arc::new(Shared {
                _entry: b.entry,
                instance: b.instance,
                debug_instance: b.debug_instance,
                messenger: b.messenger,
                validation: b.validation,
                device: self.device,
                info: self.info,
                compute_family: self.compute_family,
                compute_queue: self.compute_queue,
                transfer: self.transfer,
                allocator: Mutex::new(Some(self.allocator)),
                pipeline_cache: self.pipeline_cache,
                debug_device: self.debug_device,
                push_descriptor: self.push_descriptor,
                pipeline_exec: self.pipeline_exec,
                calibrator: self.calibrator,
                bandwidth: std::sync::OnceLock::new(),
            }),
        }
    }
}
