//! `decoder import-gguf FILE --out DIR [--dtype f16|bf16] [--force]`: convert a GGUF file
//! (llama.cpp's format) into a Hugging Face checkpoint directory.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};

use crate::gguf::{ImportOptions, OutDtype, import_gguf};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The GGUF file to convert (version 2 or 3; architectures llama and qwen3; tensor types
    /// F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS).
    pub file: PathBuf,
    /// The checkpoint directory to create (config.json, model.safetensors, tokenizer files).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// The dtype of the written weights.
    #[arg(long, value_enum, default_value_t = OutDtype::F16)]
    pub dtype: OutDtype,
    /// Replace DIR if it already exists.
    #[arg(long)]
    pub force: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let started = Instant::now();
    let progress = ProgressBar::new(0);
    progress.set_style(
        ProgressStyle::with_template(
            "{spinner} importing [{bar:32}] {bytes}/{total_bytes} {wide_msg} ({eta})",
        )
        .context("building the progress bar style")?
        .progress_chars("=> "),
    );
    let options = ImportOptions {
        dtype: args.dtype,
        overwrite: args.force,
    };
    let result = import_gguf(&args.file, &args.out, &options, &progress);
    progress.finish_and_clear();
    let summary = result.with_context(|| {
        format!(
            "importing {} into {}",
            args.file.display(),
            args.out.display()
        )
    })?;
    println!(
        "imported {} ({}, {} layers, {:.1}M parameters{}) into {} as {}: {:.1} MB of weights in {:.1} s",
        args.file.display(),
        summary.architecture,
        summary.n_layers,
        summary.n_params as f64 / 1e6,
        if summary.tied_embeddings {
            ", tied embeddings"
        } else {
            ""
        },
        summary.out_dir.display(),
        options.dtype.safetensors_name(),
        summary.bytes_weights as f64 / 1e6,
        started.elapsed().as_secs_f64(),
    );
    Ok(())
}
