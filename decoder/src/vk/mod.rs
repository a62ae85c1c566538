//! The Vulkan layer: the only module that holds raw Vulkan handles and `unsafe` code.
//!
//! - [`Gpu`]: instance (with the Khronos validation layer and a debug-utils messenger when
//!   asked), the chosen physical device, a compute queue and a transfer queue where the device has
//!   a separate family, the `gpu-allocator` allocator and a pipeline cache.
//! - [`Buffer`] and [`Pipeline`]: resources created from a small `Copy + Hash + Eq` description
//!   plus a debug name.
//! - [`Recorder`]: every command the decoder issues, counted per token.
//! - [`DeviceInfo`]: the device properties `decoder devices` lists.
//!
//! Every object holds a reference to the device it was created on, so the device and instance
//! are destroyed last, after everything created from them.
#![allow(unsafe_code)]

mod buffer;
mod clock;
mod context;
mod error;
mod info;
mod pipeline;
mod recorder;

pub use buffer::{Buffer, BufferDesc, Memory};
pub use clock::host_now_ns;
pub use context::{Bandwidth, Calibration, Gpu, GpuOptions, ValidationLog, list_devices};
pub use error::{VkError, VkResult};
pub use info::DeviceInfo;
pub use pipeline::{Pipeline, PipelineDesc, PipelineStat, SPEC_CONSTANTS};
pub use recorder::{BufRange, Cmd, DescSet, FenceId, QueryPool, Queue, Recorder, SetLifetime};
