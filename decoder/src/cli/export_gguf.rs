//! `decoder export-gguf DIR --out FILE.gguf [--dtype f16|f32|q8_0|q4_0|q4_1|q4_k_m]`: write a Hugging Face checkpoint
//! (Llama or Qwen3, or a model name such as `smollm2`) as a GGUF file that llama.cpp loads.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;

use crate::gguf::export::{ExportDtype, export_gguf};
use crate::model::resolve_model;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// A checkpoint directory, or a model name (tiny, tiny-llama, smollm2, ...).
    pub model: String,
    /// The GGUF file to write (atomically; a device or FIFO is written in place).
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    /// Element type of the matrices (norms are always f32); the quantized types choose each
    /// matrix's block type as llama-quantize does.
    #[arg(long, value_enum, default_value_t = ExportDtype::F16)]
    pub dtype: ExportDtype,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let started = Instant::now();
    profiler::io::check_output(&args.out, "--out")?;
    let dir = resolve_model(&args.model)
        .with_context(|| format!("cannot find the model {:?}", args.model))?;
    let s = export_gguf(&dir, &args.out, args.dtype)
        .with_context(|| format!("exporting {} to {}", dir.display(), args.out.display()))?;
    println!(
        "exported {} to {}: {} tensors, {:.1} MB in {:.1} s",
        dir.display(),
        args.out.display(),
        s.tensors,
        s.bytes as f64 / 1e6,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
