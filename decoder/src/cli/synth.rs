//! `decoder synth`: write a synthetic Hugging Face checkpoint with deterministic random weights.

use std::path::PathBuf;

use anyhow::Context;

use crate::model::synth::{ConfigLayout, DEFAULT_SEED, SynthOptions, write_preset};
use crate::model::{Preset, WeightDtype};

/// Parses a preset name (the names are those of [`Preset::name`]).
fn parse_preset(name: &str) -> Result<Preset, String> {
    Preset::from_name(name).ok_or_else(|| {
        format!(
            "unknown preset '{name}'; the presets are {}",
            Preset::names()
        )
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DtypeArg {
    Bf16,
    F16,
    F32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LayoutArg {
    /// rope_theta / rope_scaling / torch_dtype at the top level.
    Transformers4,
    /// rope_parameters, dtype, layer_types.
    Transformers5,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The shape to write: tiny (Qwen3, hidden 256, 4 layers), tiny-llama (Llama, hidden 288,
    /// 9/3 heads, untied), qwen3-0.6b (596 M parameters, 1.2 GB) or llama-1b (the Llama-3.2-1B
    /// shape, 1.24 B parameters, 2.5 GB).
    #[arg(long, value_parser = parse_preset)]
    pub preset: Preset,
    /// The checkpoint directory to create (it must not exist).
    #[arg(long)]
    pub out: PathBuf,
    /// Seed of the weights.
    #[arg(long, default_value_t = DEFAULT_SEED)]
    pub seed: u64,
    /// Element type of the stored weights (the values are the same in all three).
    #[arg(long, value_enum, default_value_t = DtypeArg::Bf16)]
    pub dtype: DtypeArg,
    /// Split the weights into this many safetensors shards with an index.
    #[arg(long, default_value_t = 1)]
    pub shards: usize,
    /// Which transformers version's config.json layout to write.
    #[arg(long, value_enum, default_value_t = LayoutArg::Transformers4)]
    pub config_layout: LayoutArg,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let preset = args.preset;
    let opts = SynthOptions {
        seed: args.seed,
        dtype: match args.dtype {
            DtypeArg::Bf16 => WeightDtype::Bf16,
            DtypeArg::F16 => WeightDtype::F16,
            DtypeArg::F32 => WeightDtype::F32,
        },
        shards: args.shards,
        layout: match args.config_layout {
            LayoutArg::Transformers4 => ConfigLayout::Transformers4,
            LayoutArg::Transformers5 => ConfigLayout::Transformers5,
        },
        progress: true,
    };
    let start = std::time::Instant::now();
    write_preset(preset, &args.out, &opts)
        .with_context(|| format!("cannot write the {} preset", preset.name()))?;
    let config = preset.config()?;
    let params = config.parameter_count();
    println!(
        "wrote {} ({} parameters, {:.2} GB of weights) to {} in {:.1} s",
        preset.name(),
        params,
        (params * opts.dtype.bytes_per_element() as u64) as f64 * 1e-9,
        args.out.display(),
        start.elapsed().as_secs_f64()
    );
    Ok(())
}
