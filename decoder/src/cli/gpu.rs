//! Flags shared by the commands that run on a Vulkan device.

use anyhow::Context as _;

use crate::exec::engine::Timestamps;
use crate::exec::knobs::{KnobArgs, Knobs, Mode};
use crate::exec::program::TuningOverrides;
use crate::exec::program::tuning::tuning_help;
use crate::kv::{KvConfig, KvDtype, KvKind, PagedAttention};
use crate::vk::{Gpu, GpuOptions};

/// The KV cache: layout, element type, batch and prompt chunk.
#[derive(Debug, Clone, clap::Args)]
pub struct KvArgs {
    /// KV cache layout: one contiguous region per sequence, a global pool of blocks with a block
    /// table per sequence, or a ring of the last --window positions (sliding-window attention).
    #[arg(
        long = "kv",
        value_enum,
        default_value = "contiguous",
        help_heading = "KV cache"
    )]
    pub kind: KvKind,
    /// KV cache element type (f16 halves the bytes every decode step reads).
    #[arg(long, value_enum, default_value = "f16", help_heading = "KV cache")]
    pub kv_dtype: KvDtype,
    /// Positions per block of the paged layout: 16 or 32 [default: 16]. Only with --kv paged.
    #[arg(long, help_heading = "KV cache")]
    pub block_size: Option<u32>,
    /// Paged layout: shuffle the block pool so every block table is scattered.
    #[arg(long, help_heading = "KV cache")]
    pub fragment: bool,
    /// Sliding window in positions (--kv rotating; the model's config has none).
    #[arg(long, default_value_t = 0, help_heading = "KV cache")]
    pub window: u32,
    /// How attention reads a paged cache: copy the blocks into a contiguous scratch first
    /// (gather), or read them through the block table (fused) [default: fused]. Only with
    /// --kv paged.
    #[arg(long, value_enum, help_heading = "KV cache")]
    pub paged_attention: Option<PagedAttention>,
    /// Sequences decoded together; sequence b's prompt is the prompt cut to a different length.
    #[arg(long, default_value_t = 1, help_heading = "KV cache")]
    pub batch: u32,
    /// Most prompt tokens one step processes (longer prompts run in chunks; the activations
    /// grow with it, the attention scratch does not).
    #[arg(long, default_value_t = 2048, help_heading = "KV cache")]
    pub prefill_chunk: u32,
}

impl KvArgs {
    /// The settings, checked (errors name the flag). A paged-layout flag without `--kv paged`
    /// is refused rather than ignored: the run would not be the one the command line describes.
    pub fn config(&self) -> anyhow::Result<KvConfig> {
        if self.kind != KvKind::Paged {
            let given = [
                self.block_size.map(|b| format!("--block-size {b}")),
                self.paged_attention
                    .map(|p| format!("--paged-attention {}", p.name())),
            ];
            if let Some(flag) = given.into_iter().flatten().next() {
                anyhow::bail!(
                    "{flag} applies to the paged KV layout only, and this run uses --kv {}; add \
                     --kv paged, or drop {}",
                    self.kind.name(),
                    flag.split(' ').next().unwrap_or_default()
                );
            }
        }
        let cfg = KvConfig {
            kind: self.kind,
            dtype: self.kv_dtype,
            block: self.block_size.unwrap_or(16),
            fragment: self.fragment,
            window: self.window,
            paged_attention: self.paged_attention.unwrap_or(PagedAttention::Fused),
            batch: self.batch,
            prefill_chunk: self.prefill_chunk,
        };
        cfg.validate().map_err(|e| anyhow::anyhow!(e))?;
        Ok(cfg)
    }
}

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
    /// GPU timestamp level: off | token | region | dispatch. At `dispatch`, `--kernels persistent`
    /// reports one span per phase of its single dispatch (`token/L3.attention`, ...) from its
    /// phase clocks, where the device has a shader device clock.
    #[arg(long, value_enum, default_value = "token")]
    pub timestamps: Timestamps,
    /// Skip the memory bandwidth probe (a fraction of a second at start-up); traces then leave
    /// `memory_bandwidth_gbps` empty and reports show no share of bandwidth.
    #[arg(long)]
    pub no_probe: bool,
    #[command(flatten)]
    pub knobs: KnobArgs,
    #[command(flatten)]
    pub kv: KvArgs,
    #[command(flatten)]
    pub tuning: TuningArgs,
}

/// The kernels' tuning (`--tuning`), over the device's defaults.
#[derive(Debug, Clone, clap::Args)]
pub struct TuningArgs {
    /// Tuning overrides, `key=value,...` (e.g. `persistent_head_groups=2`); the flag wins over
    /// the DECODESCOPE_TUNING environment variable. `--help` lists the keys.
    #[arg(
        long = "tuning",
        value_name = "KEY=VALUE,...",
        long_help = tuning_help(),
        value_parser = parse_tuning,
    )]
    pub tuning: Option<TuningOverrides>,
}

fn parse_tuning(spec: &str) -> Result<TuningOverrides, String> {
    TuningOverrides::parse(spec)
}

impl TuningArgs {
    /// The flag's overrides, else those of the DECODESCOPE_TUNING environment variable.
    pub fn overrides(&self) -> anyhow::Result<TuningOverrides> {
        match self.tuning {
            Some(o) => Ok(o),
            None => TuningOverrides::from_flag_or_env(None).map_err(anyhow::Error::msg),
        }
    }
}

impl GpuArgs {
    /// Opens the device and, unless `--no-probe`, measures its memory bandwidth for the traces.
    pub fn open(&self) -> anyhow::Result<Gpu> {
        let gpu = Gpu::new(&GpuOptions {
            device: self.device.clone(),
            validation: self.validation,
        })
        .context("cannot open the Vulkan device")?;
        if !self.no_probe {
            probe_or_warn(&gpu);
        }
        Ok(gpu)
    }

    /// The knobs of preset `mode` with this command line's overrides.
    pub fn knobs(&self, mode: Mode) -> Knobs {
        self.knobs.resolve(mode)
    }
}

/// Runs the bandwidth probe on `gpu`; a probe that fails costs the traces their bandwidth figure
/// (a warning says why), not the run.
pub fn probe_or_warn(gpu: &Gpu) -> Option<crate::vk::Bandwidth> {
    match crate::probe::measure(gpu, crate::probe::ProbeOptions::default()) {
        Ok(b) => Some(b),
        Err(e) => {
            eprintln!(
                "warning: the memory bandwidth probe failed on {} ({e}); traces leave memory_bandwidth_gbps empty (--no-probe skips it)",
                gpu.info().name
            );
            None
        }
    }
}
