//! Flags shared by the commands that run on a Vulkan device.

use anyhow::Context as _;

use crate::exec::engine::Timestamps;
use crate::exec::knobs::{KnobArgs, Knobs, Mode};
use crate::vk::{Gpu, GpuOptions};

/// Device, execution knobs and instrumentation.
#[derive(Debug, Clone, clap::Args)]
pub struct GpuArgs {
    /// Vulkan device: an index or a name substring from `decoder devices` (default: the first
    /// discrete GPU, then integrated, then CPU).
    #[arg(long, value_name = "INDEX|NAME")]
    pub device: Option<String>,
    /// Enable the Khronos validation layer (slow; fails on nothing, prints what it reports).
    #[arg(long)]
    pub validation: bool,
    /// GPU timestamp level: off | token | region | dispatch.
    #[arg(long, value_enum, default_value = "token")]
    pub timestamps: Timestamps,
    #[command(flatten)]
    pub knobs: KnobArgs,
}

impl GpuArgs {
    pub fn open(&self) -> anyhow::Result<Gpu> {
        Gpu::new(&GpuOptions {
            device: self.device.clone(),
            validation: self.validation,
        })
        .context("cannot open the Vulkan device")
    }

    /// The knobs of preset `mode` with this command line's overrides.
    pub fn knobs(&self, mode: Mode) -> Knobs {
        self.knobs.resolve(mode)
    }
}
