//! `decoder selfcheck`: the first kernel against its CPU computation on sizes that are not
//! multiples of the workgroup size, then both presets against the CPU reference on a model. For
//! machines without cargo (the GPU machine); the test suite checks the same things on lavapipe.

use anyhow::{Context as _, bail};

use super::run::load_model;
use crate::exec::engine::{Engine, EngineOptions, Timestamps};
use crate::exec::harness::{Binding, Launch, f32s, run_kernel};
use crate::exec::kernels::{RmsNormPush, rmsnorm_cpu};
use crate::exec::knobs::{Knobs, Mode};
use crate::generate::{GenerateOptions, generate};
use crate::shaders::Shader;
use crate::vk::{Gpu, GpuOptions};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Vulkan device (index or name substring).
    #[arg(long)]
    pub device: Option<String>,
    /// Model for the end-to-end check.
    #[arg(long, default_value = "tiny")]
    pub model: String,
    /// Decode steps compared with the CPU reference.
    #[arg(long, default_value_t = 64)]
    pub steps: usize,
    /// Enable the validation layer and fail on any message.
    #[arg(long)]
    pub validation: bool,
}

fn pseudo(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = profiler::rng::Rng::new(seed);
    (0..n).map(|_| rng.uniform() as f32 * 2.0 - 1.0).collect()
}

/// rmsnorm.comp against `rmsnorm_cpu`; returns the largest absolute difference over all shapes.
pub fn rmsnorm_check(gpu: &Gpu) -> anyhow::Result<f32> {
    let mut worst = 0.0f32;
    for (n, rows, wg) in [
        (1usize, 1usize, 64u32),
        (63, 3, 64),
        (65, 5, 64),
        (257, 2, 256),
        (1000, 7, 128),
        (1025, 9, 256),
    ] {
        let x = pseudo(n * rows, n as u64);
        let w: Vec<f32> = pseudo(n, 7).iter().map(|v| 1.0 + 0.5 * v).collect();
        let push = RmsNormPush {
            n: n as u32,
            rows: rows as u32,
            eps: 1e-6,
            pad0: 0,
        };
        let mut spec = [0; crate::vk::SPEC_CONSTANTS];
        spec[crate::shaders::spec::WG] = wg;
        let launch = Launch {
            shader: Shader::Rmsnorm,
            push: push.bytes(),
            groups: [rows as u32, 1, 1],
            spec,
        };
        let out = run_kernel(
            gpu,
            &launch,
            &[
                Binding::input_f32(&x),
                Binding::input_f32(&w),
                Binding::output_f32(n * rows, f32::NAN),
            ],
        )?;
        let got = f32s(out[2].as_deref().unwrap_or_default());
        let want = rmsnorm_cpu(&x, &w, n, 1e-6);
        let err = got
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        println!("rmsnorm n={n:<5} rows={rows:<2} wg={wg:<3} max |gpu - cpu| = {err:.2e}");
        if err.is_nan() || err >= 1e-4 {
            bail!("rmsnorm n={n} rows={rows}: max abs difference {err} >= 1e-4");
        }
        worst = worst.max(err);
    }
    Ok(worst)
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let gpu = Gpu::new(&GpuOptions {
        device: args.device.clone(),
        validation: args.validation,
    })
    .context("cannot open the Vulkan device")?;
    println!(
        "device: {} ({} {})",
        gpu.info().name,
        gpu.info().driver_name,
        gpu.info().driver_info
    );
    rmsnorm_check(&gpu)?;
    let model = load_model(&args.model)?;
    let ids = model
        .tokenizer
        .encode_prompt("The capital of France is", false)?;
    let opts = GenerateOptions {
        max_tokens: args.steps,
        ignore_eos: true,
        dump_logits: true,
        ..Default::default()
    };
    let mut cpu = model.reference(ids.len() + args.steps + 1)?;
    // The engine's default KV cache is f16: the reference rounds K and V the same way.
    cpu.set_kv(true, 0);
    let want = generate(&mut cpu, &model.tokenizer, &ids, &opts, &mut |_| {})?;
    for mode in [Mode::Generic, Mode::Fused] {
        let eo = EngineOptions {
            knobs: Knobs::preset(mode),
            timestamps: Timestamps::Off,
            max_seq: (ids.len() + args.steps + 1) as u32,
            kv: crate::kv::KvConfig::default(),
            logits_readback: true,
            tuning: crate::exec::program::TuningOverrides::from_flag_or_env(None)
                .map_err(anyhow::Error::msg)?,
        };
        let mut engine = Engine::new(&gpu, &model.config, &model.weights, eo)?;
        let got = generate(&mut engine, &model.tokenizer, &ids, &opts, &mut |_| {})?;
        let v = want.vocab;
        let worst = got
            .logits
            .chunks(v)
            .zip(want.logits.chunks(v))
            .map(|(g, w)| {
                let num: f64 = g.iter().zip(w).map(|(a, b)| ((a - b) as f64).powi(2)).sum();
                let den: f64 = w.iter().map(|b| (*b as f64).powi(2)).sum();
                (num / den.max(1e-30)).sqrt()
            })
            .fold(0.0f64, f64::max);
        let same = got.ids == want.ids;
        println!(
            "{} on {}: {} steps, tokens {} the CPU reference, worst logits relative RMS {worst:.2e}",
            mode.name(),
            args.model,
            want.ids.len(),
            if same {
                "identical to"
            } else {
                "DIFFERENT from"
            }
        );
        if !same || worst.is_nan() || worst >= 5e-3 {
            bail!("{} does not match the CPU reference", mode.name());
        }
    }
    let messages = gpu.validation_messages();
    if !messages.is_empty() {
        bail!(
            "the validation layer reported {} message(s)",
            messages.len()
        );
    }
    println!("selfcheck: ok");
    Ok(())
}
