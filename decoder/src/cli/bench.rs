//! `decoder bench`: load a model once and capture a sweep of knob settings: both presets and,
//! with `--ablation`, every single knob flipped alone from each preset toward the other. Prints
//! one table of per-decode-token medians and writes one trace per setting.

use std::path::PathBuf;

use anyhow::Context as _;

use super::capture::with_context;
use super::run::{ModelArgs, PromptArgs, load_model, prompt_ids};
use crate::capture::{CaptureSpec, Summary, capture, summarize};
use crate::exec::engine::Timestamps;
use crate::exec::knobs::{Knobs, Mode};
use crate::vk::{Gpu, GpuOptions};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub prompt: PromptArgs,
    /// Decode tokens per setting.
    #[arg(long, default_value_t = 64)]
    pub max_tokens: usize,
    /// Prompt length in tokens (the prompt repeated); the KV cache holds this much context.
    #[arg(long, default_value_t = 0)]
    pub context: usize,
    /// Also flip every knob alone from each preset toward the other.
    #[arg(long)]
    pub ablation: bool,
    /// GPU timestamp level.
    #[arg(long, value_enum, default_value = "token")]
    pub timestamps: Timestamps,
    /// Vulkan device (index or name substring).
    #[arg(long)]
    pub device: Option<String>,
    /// Directory for one trace per setting and the table (`bench.md`).
    #[arg(long, default_value = "results/bench")]
    pub out: PathBuf,
}

/// A named knob setting of a sweep.
pub type Setting = (String, Knobs);

/// The settings of a sweep: `(name, knobs)`, presets first; refused combinations are returned
/// apart with the reason.
pub fn sweep(ablation: bool, push_descriptors: bool) -> (Vec<Setting>, Vec<(String, String)>) {
    let (g, f) = (Knobs::preset(Mode::Generic), Knobs::preset(Mode::Fused));
    let mut run = vec![("generic".to_string(), g), ("fused".to_string(), f)];
    let mut refused = vec![];
    if ablation {
        for (from, base, toward) in [("generic", g, f), ("fused", f, g)] {
            for (knob, value, k) in base.single_flips(&toward) {
                let name = format!("{from} --{knob} {value}");
                match k.validate(push_descriptors) {
                    Ok(()) => run.push((name, k)),
                    Err(e) => refused.push((name, e)),
                }
            }
        }
    }
    (run, refused)
}

fn fmt(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// The sweep as a Markdown table.
pub fn table(rows: &[(String, Summary)]) -> String {
    let mut out = String::from(
        "| setting | tokens/s | host enqueue us | GPU us | wall us | submits | barriers | descriptor writes | dispatches |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for (name, s) in rows {
        out.push_str(&format!(
            "| {name} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            fmt(s.tokens_per_s),
            fmt(s.host_enqueue_us),
            s.gpu_us.map_or("-".into(), fmt),
            fmt(s.wall_us),
            s.submits,
            s.barriers,
            s.descriptor_writes,
            s.dispatches
        ));
    }
    out
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let model = load_model(&args.model.model)?;
    let ids = with_context(prompt_ids(&model, &args.prompt)?, args.context);
    let gpu = Gpu::new(&GpuOptions {
        device: args.device.clone(),
        validation: false,
    })
    .context("cannot open the Vulkan device")?;
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;
    let (settings, refused) = sweep(args.ablation, gpu.info().push_descriptors);
    eprintln!(
        "bench on {}: {} settings, {} prompt + {} decode tokens each",
        gpu.info().name,
        settings.len(),
        ids.len(),
        args.max_tokens
    );
    let mut rows = Vec::new();
    let mut reference_ids: Option<Vec<u32>> = None;
    for (i, (name, knobs)) in settings.iter().enumerate() {
        eprintln!("[{}/{}] {name}: {knobs}", i + 1, settings.len());
        let spec = CaptureSpec {
            model_name: args.model.model.clone(),
            prompt: args.prompt.prompt.clone(),
            prompt_ids: ids.clone(),
            decode_tokens: args.max_tokens,
            knobs: *knobs,
            timestamps: args.timestamps,
            logits_readback: false,
        };
        let (trace, generation) = capture(&gpu, &model, &spec)?;
        match &reference_ids {
            None => reference_ids = Some(generation.ids.clone()),
            Some(r) if *r != generation.ids => {
                anyhow::bail!("{name} generated different tokens than {}", settings[0].0)
            }
            Some(_) => {}
        }
        let file = args.out.join(format!(
            "{}.json",
            name.replace([' ', ':'], "_").replace("--", "")
        ));
        profiler::io::write_trace(&file, &trace)
            .with_context(|| format!("cannot write {}", file.display()))?;
        let s = summarize(&trace);
        eprintln!(
            "    {:.1} tokens/s, host enqueue {:.1} us, GPU {} us",
            s.tokens_per_s,
            s.host_enqueue_us,
            s.gpu_us.map_or("-".into(), |g| format!("{g:.1}"))
        );
        rows.push((name.clone(), s));
    }
    let mut text = table(&rows);
    for (name, why) in &refused {
        text.push_str(&format!("\nrefused: {name}: {why}\n"));
    }
    println!("{text}");
    let md = args.out.join("bench.md");
    std::fs::write(&md, &text).with_context(|| format!("cannot write {}", md.display()))?;
    eprintln!("wrote {} and one trace per setting", md.display());
    Ok(())
}
