//! Compute pipelines created from a small description, through the device's pipeline cache.

use std::sync::Arc;

use ash::vk;

use super::context::{Gpu, Shared};
use super::error::{VkError, VkResult, call};
use crate::shaders::Shader;

/// Number of specialization constants a pipeline description carries (constant ids 0..N): one
/// more than the largest id the shaders declare (`crate::shaders::spec`).
pub const SPEC_CONSTANTS: usize = crate::shaders::spec::COUNT;

/// A compute pipeline's description. `Copy + Hash + Eq`, so it is the pipeline cache key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PipelineDesc {
    pub shader: Shader,
    /// Storage-buffer bindings 0..N in set 0.
    pub bindings: u32,
    /// Size of the push-constant block in bytes (0 for none).
    pub push_bytes: u32,
    /// Specialization constants by id; constant 0 is the workgroup size.
    pub spec: [u32; SPEC_CONSTANTS],
    /// Set 0 is a push-descriptor set (`VK_KHR_push_descriptor`).
    pub push_descriptor: bool,
}

/// A compute pipeline with its layouts. Destroyed when dropped.
pub struct Pipeline {
    shared: Arc<Shared>,
    pub(crate) pipeline: vk::Pipeline,
    pub(crate) layout: vk::PipelineLayout,
    pub(crate) set_layout: vk::DescriptorSetLayout,
    desc: PipelineDesc,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("desc", &self.desc)
            .finish()
    }
}

/// One statistic the driver reports for a compiled pipeline (VK_KHR_pipeline_executable_properties),
/// named as the driver names it.
#[derive(Clone, Debug, PartialEq)]
pub struct PipelineStat {
    pub name: String,
    pub value: String,
}

impl Pipeline {
    pub fn desc(&self) -> &PipelineDesc {
        &self.desc
    }

    /// The driver's statistics of this pipeline's executables; empty where the device does not
    /// report them.
    pub fn statistics(&self) -> VkResult<Vec<PipelineStat>> {
        let Some(ext) = &self.shared.pipeline_exec else {
            return Ok(Vec::new());
        };
        let info = vk::PipelineInfoKHR::default().pipeline(self.pipeline);
        let text = |c: Result<&std::ffi::CStr, std::ffi::FromBytesUntilNulError>| {
            c.map(|c| c.to_string_lossy().into_owned())
                .unwrap_or_default()
        };
        // SAFETY: the pipeline belongs to this device and was created with
        // CAPTURE_STATISTICS (the extension's loader exists only then); the outputs are sized by
        // the driver's counts.
        let execs = unsafe { ext.get_pipeline_executable_properties(&info) }
            .map_err(call("vkGetPipelineExecutablePropertiesKHR"))?;
        let mut out = Vec::new();
        for i in 0..execs.len() {
            let exec = vk::PipelineExecutableInfoKHR::default()
                .pipeline(self.pipeline)
                .executable_index(i as u32);
            // SAFETY: as above; `i` is one of the pipeline's executables.
            let stats = unsafe { ext.get_pipeline_executable_statistics(&exec) }
                .map_err(call("vkGetPipelineExecutableStatisticsKHR"))?;
            for s in &stats {
                // SAFETY: the union member read is the one `format` names.
                let value = unsafe {
                    match s.format {
                        vk::PipelineExecutableStatisticFormatKHR::BOOL32 => {
                            (s.value.b32 != 0).to_string()
                        }
                        vk::PipelineExecutableStatisticFormatKHR::INT64 => s.value.i64.to_string(),
                        vk::PipelineExecutableStatisticFormatKHR::UINT64 => s.value.u64.to_string(),
                        vk::PipelineExecutableStatisticFormatKHR::FLOAT64 => {
                            format!("{:.3}", s.value.f64)
                        }
                        _ => "?".into(),
                    }
                };
                out.push(PipelineStat {
                    name: text(s.name_as_c_str()),
                    value,
                });
            }
        }
        Ok(out)
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        // SAFETY: created on this device; callers drop pipelines only after their work finished.
        unsafe {
            self.shared.device.destroy_pipeline(self.pipeline, None);
            self.shared
                .device
                .destroy_pipeline_layout(self.layout, None);
            self.shared
                .device
                .destroy_descriptor_set_layout(self.set_layout, None);
        }
    }
}

impl Gpu {
    /// Creates the compute pipeline described by `desc`.
    pub fn create_pipeline(&self, desc: PipelineDesc) -> VkResult<Pipeline> {
        let s = &self.shared;
        if desc.push_descriptor && s.push_descriptor.is_none() {
            return Err(VkError::Unsupported(format!(
                "device {:?} has no VK_KHR_push_descriptor; use --descriptors per-dispatch, cached or bound-once",
                s.info.name
            )));
        }
        let bindings: Vec<vk::DescriptorSetLayoutBinding> = (0..desc.bindings)
            .map(|b| {
                vk::DescriptorSetLayoutBinding::default()
                    .binding(b)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .descriptor_count(1)
                    .stage_flags(vk::ShaderStageFlags::COMPUTE)
            })
            .collect();
        let flags = if desc.push_descriptor {
            vk::DescriptorSetLayoutCreateFlags::PUSH_DESCRIPTOR_KHR
        } else {
            vk::DescriptorSetLayoutCreateFlags::empty()
        };
        let words =
            ash::util::read_spv(&mut std::io::Cursor::new(desc.shader.spirv())).map_err(|e| {
                VkError::Shader {
                    shader: desc.shader.name(),
                    message: format!("invalid SPIR-V: {e}"),
                }
            })?;
        let entries: Vec<vk::SpecializationMapEntry> = (0..SPEC_CONSTANTS as u32)
            .map(|i| {
                vk::SpecializationMapEntry::default()
                    .constant_id(i)
                    .offset(i * 4)
                    .size(4)
            })
            .collect();
        let spec_bytes: &[u8] = bytemuck::cast_slice(&desc.spec);
        let spec = vk::SpecializationInfo::default()
            .map_entries(&entries)
            .data(spec_bytes);
        let entry_name = c"main";
        // SAFETY: every create-info is a valid local; each object is destroyed on the error paths
        // below or in Drop, in reverse order of creation.
        unsafe {
            let set_layout = s
                .device
                .create_descriptor_set_layout(
                    &vk::DescriptorSetLayoutCreateInfo::default()
                        .bindings(&bindings)
                        .flags(flags),
                    None,
                )
                .map_err(call("vkCreateDescriptorSetLayout"))?;
            let ranges = [vk::PushConstantRange::default()
                .stage_flags(vk::ShaderStageFlags::COMPUTE)
                .offset(0)
                .size(desc.push_bytes)];
            let set_layouts = [set_layout];
            let mut layout_info = vk::PipelineLayoutCreateInfo::default().set_layouts(&set_layouts);
            if desc.push_bytes > 0 {
                layout_info = layout_info.push_constant_ranges(&ranges);
            }
            let layout = match s.device.create_pipeline_layout(&layout_info, None) {
                Ok(l) => l,
                Err(e) => {
                    s.device.destroy_descriptor_set_layout(set_layout, None);
                    return Err(call("vkCreatePipelineLayout")(e));
                }
            };
            let module = match s
                .device
                .create_shader_module(&vk::ShaderModuleCreateInfo::default().code(&words), None)
            {
                Ok(m) => m,
                Err(e) => {
                    s.device.destroy_pipeline_layout(layout, None);
                    s.device.destroy_descriptor_set_layout(set_layout, None);
                    return Err(call("vkCreateShaderModule")(e));
                }
            };
            let stage = vk::PipelineShaderStageCreateInfo::default()
                .stage(vk::ShaderStageFlags::COMPUTE)
                .module(module)
                .name(entry_name)
                .specialization_info(&spec);
            let mut info = vk::ComputePipelineCreateInfo::default()
                .stage(stage)
                .layout(layout);
            if s.pipeline_exec.is_some() {
                info = info.flags(vk::PipelineCreateFlags::CAPTURE_STATISTICS_KHR);
            }
            let result = s
                .device
                .create_compute_pipelines(s.pipeline_cache, &[info], None);
            s.device.destroy_shader_module(module, None);
            let pipeline = match result {
                Ok(p) => p[0],
                Err((_, e)) => {
                    s.device.destroy_pipeline_layout(layout, None);
                    s.device.destroy_descriptor_set_layout(set_layout, None);
                    return Err(call("vkCreateComputePipelines")(e));
                }
            };
            self.set_name(pipeline, desc.shader.name());
            Ok(Pipeline {
                shared: s.clone(),
                pipeline,
                layout,
                set_layout,
                desc,
            })
        }
    }
}
