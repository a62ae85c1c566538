//! The `decoder` command line: one module per subcommand, each with its clap `Args` and a `run`.

use clap::{Parser, Subcommand};

pub mod bench;
pub mod capture;
pub mod devices;
pub mod export_gguf;
pub mod gpu;
pub mod import_gguf;
pub mod peer;
pub mod plot;
pub mod run;
pub mod selfcheck;
pub mod synth;

/// decodescope's reference decoder: a Qwen3 / Llama decoder on Vulkan with two instrumented
/// execution modes (generic-primitive and fused token-region), and the CPU reference they are
/// checked against.
#[derive(Debug, Parser)]
#[command(name = "decoder", version, about, long_about = None, max_term_width = 100, args_override_self = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// List the Vulkan devices and the properties that matter for decode profiling.
    Devices(devices::Args),
    /// Generate text from a prompt and print a per-token summary.
    Run(run::Args),
    /// Run one or both modes headless and write their traces (and the A/B table).
    Capture(capture::Args),
    /// Capture a sweep of knob settings (both presets, optionally every single-knob flip).
    Bench(bench::Args),
    /// Draw the PNG plots of a `decoder bench` result (bench.json) again.
    Plot(plot::Args),
    /// Check the first kernel and both presets against the CPU reference on this device.
    Selfcheck(selfcheck::Args),
    /// Write a synthetic Hugging Face checkpoint with deterministic random weights.
    Synth(synth::Args),
    /// Convert a GGUF file into a Hugging Face checkpoint directory.
    ImportGguf(import_gguf::Args),
    /// Write a checkpoint (Llama or Qwen3) as a GGUF file that llama.cpp loads.
    ExportGguf(export_gguf::Args),
}

pub fn dispatch(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Devices(a) => devices::run(a),
        Command::Run(a) => run::run(a),
        Command::Capture(a) => capture::run(a),
        Command::Bench(a) => bench::run(a),
        Command::Plot(a) => plot::run(a),
        Command::Selfcheck(a) => selfcheck::run(a),
        Command::Synth(a) => synth::run(a),
        Command::ImportGguf(a) => import_gguf::run(a),
        Command::ExportGguf(a) => export_gguf::run(a),
    }
}
