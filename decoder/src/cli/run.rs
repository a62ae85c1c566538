//! `decoder run`: generate text from a prompt with one backend, print it as it is generated,
//! then a one-line summary.
//!
//! The argument groups ([`ModelArgs`], [`PromptArgs`], [`GenerationArgs`]) and the helpers
//! ([`load_model`], [`prompt_ids`], [`run_generation`]) are shared with the other commands that
//! generate (the Vulkan backends and `capture` reuse them).

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;

use crate::generate::{Backend, GenerateOptions, Generation, generate, write_dump};
use crate::model::{DEFAULT_MODEL, Model, resolve_model};

/// Which decoder runs the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendKind {
    /// The scalar f32 CPU reference.
    Cpu,
    /// The Vulkan decoder.
    Vulkan,
}

/// The model to load.
#[derive(Debug, Clone, clap::Args)]
pub struct ModelArgs {
    /// A Hugging Face checkpoint directory, a model name: tiny, tiny-llama, qwen3-0.6b,
    /// llama-1b (generated into the cache on first use) or smollm2 (imported by setup), or a
    /// GGUF file, whose Q8_0, Q4_0, Q4_1, Q4_K and Q6_K matrices stay in their blocks on the GPU.
    #[arg(long, default_value = DEFAULT_MODEL)]
    pub model: String,
}

/// The prompt.
#[derive(Debug, Clone, clap::Args)]
pub struct PromptArgs {
    /// The prompt text.
    #[arg(long, default_value = "Once upon a time")]
    pub prompt: String,
    /// Wrap the prompt in the checkpoint's chat template (from tokenizer_config.json), when it
    /// has one.
    #[arg(long)]
    pub chat: bool,
}

/// How many tokens to generate and how to choose them.
#[derive(Debug, Clone, clap::Args)]
pub struct GenerationArgs {
    /// Tokens to generate.
    #[arg(long, default_value_t = 64)]
    pub max_tokens: usize,
    /// 0 is greedy; above 0 samples from softmax(logits / temperature).
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    /// Nucleus sampling: keep the most likely tokens up to this total probability.
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    /// Seed of the sampler.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Keep generating past the end-of-sequence token.
    #[arg(long)]
    pub ignore_eos: bool,
    /// Write the logits of every step (`logits`, F32 [steps, vocab]) and the generated ids
    /// (`ids`, I64) to this safetensors file.
    #[arg(long, value_name = "FILE")]
    pub dump: Option<PathBuf>,
}

impl GenerationArgs {
    pub fn options(&self) -> GenerateOptions {
        GenerateOptions {
            max_tokens: self.max_tokens,
            temperature: self.temperature,
            top_p: self.top_p,
            seed: self.seed,
            ignore_eos: self.ignore_eos,
            dump_logits: self.dump.is_some(),
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The decoder to run.
    #[arg(long, value_enum, default_value_t = BackendKind::Cpu)]
    pub backend: BackendKind,
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub prompt: PromptArgs,
    #[command(flatten)]
    pub generation: GenerationArgs,
    /// Preset for `--backend vulkan`; the knob flags override single knobs of it.
    #[arg(long, value_enum, default_value = "fused")]
    pub mode: crate::exec::knobs::Mode,
    #[command(flatten)]
    pub gpu: super::gpu::GpuArgs,
}

impl Args {
    /// The CPU reference for a prompt of `prompt_tokens`, with the KV cache's rounding and
    /// window of the `--kv` flags.
    pub fn reference<'m>(
        &self,
        model: &'m Model,
        prompt_tokens: usize,
    ) -> anyhow::Result<crate::model::Reference<'m>> {
        let kv = self.gpu.kv.config()?;
        let mut backend = model
            .reference(prompt_tokens + self.generation.max_tokens)
            .context("cannot set up the CPU reference")?;
        backend.set_kv(
            kv.dtype == crate::kv::KvDtype::F16,
            kv.attention_window() as usize,
        );
        Ok(backend)
    }

    /// The Vulkan engine's options for `max_seq` positions: knobs, KV cache and tuning from the
    /// flags; the logits are read back where the dump or sampling needs them.
    pub fn engine_options(
        &self,
        max_seq: u32,
    ) -> anyhow::Result<crate::exec::engine::EngineOptions> {
        Ok(crate::exec::engine::EngineOptions {
            knobs: self.gpu.knobs(self.mode),
            timestamps: self.gpu.timestamps,
            max_seq,
            kv: self.gpu.kv.config()?,
            logits_readback: self.generation.dump.is_some() || self.generation.temperature > 0.0,
            tuning: self.gpu.tuning.overrides()?,
        })
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    args.generation.options().validate()?;
    if let Some(dump) = &args.generation.dump {
        // Before the run: an unwritable dump would be found only after it.
        profiler::io::check_output(dump, "--dump")?;
    }
    let model = load_model(&args.model.model)?;
    let ids = prompt_ids(&model, &args.prompt)?;
    let size = crate::limits::RunSize {
        prompt_tokens: ids.len(),
        max_tokens: args.generation.max_tokens,
        batch: 1,
        logits_per_token: args.generation.dump.is_some(),
        ..Default::default()
    };
    let max_seq = crate::limits::check_positions(&model.config, &size, "--max-tokens")?;
    crate::limits::check_host_memory(&model.config, &size, max_seq, "--max-tokens")?;
    if args.gpu.kv.batch > 1 {
        anyhow::bail!(
            "decoder run generates one sequence; --batch {} applies to decoder capture and decoder bench",
            args.gpu.kv.batch
        );
    }
    match args.backend {
        BackendKind::Cpu => {
            let mut backend = args.reference(&model, ids.len())?;
            run_generation(&mut backend, &model, &ids, &args.generation)?;
        }
        BackendKind::Vulkan => {
            let gpu = args.gpu.open()?;
            let opts = args.engine_options(max_seq)?;
            crate::limits::check_device(&model.config, gpu.info(), &opts.kv, max_seq)?;
            eprintln!("device: {}; {}", gpu.info().name, opts.knobs);
            let mut engine =
                crate::exec::engine::Engine::new(&gpu, &model.config, &model.weights, opts)
                    .context("cannot set up the Vulkan decoder")?;
            run_generation(&mut engine, &model, &ids, &args.generation)?;
            let trace = profiler::trace::Trace {
                format: profiler::trace::FORMAT_NAME.into(),
                version: profiler::trace::FORMAT_VERSION,
                meta: Default::default(),
                ops: engine.ops().to_vec(),
                tokens: engine.records().to_vec(),
            };
            let summary = crate::capture::summarize(&trace);
            eprint!("{}", crate::capture::table(&[(args.mode.name(), &summary)]));
        }
    }
    Ok(())
}

/// Resolves `--model` (directory, name or GGUF file) and loads it.
pub fn load_model(spec: &str) -> anyhow::Result<Model> {
    let path = std::path::Path::new(spec);
    if crate::gguf::is_gguf_file(path) {
        // A GGUF file: its matrices keep their blocks on the GPU.
        return crate::gguf::load_gguf_model(path)
            .with_context(|| format!("cannot load the GGUF model {}", path.display()));
    }
    let dir = resolve_model(spec).with_context(|| format!("cannot find the model '{spec}'"))?;
    Model::load(&dir).with_context(|| format!("cannot load the model in {}", dir.display()))
}

/// The prompt's token ids, through the chat template with `--chat`.
pub fn prompt_ids(model: &Model, prompt: &PromptArgs) -> anyhow::Result<Vec<u32>> {
    let chat = prompt.chat && model.tokenizer.has_chat_template();
    if prompt.chat && !chat {
        eprintln!(
            "note: {} has no chat_template in tokenizer_config.json; --chat is ignored",
            model.dir.display()
        );
    }
    let ids = model
        .tokenizer
        .encode_prompt(&prompt.prompt, chat)
        .context("cannot tokenize the prompt")?;
    anyhow::ensure!(
        !ids.is_empty(),
        "the prompt encodes to no tokens; give a non-empty --prompt"
    );
    Ok(ids)
}

/// Generates with `backend`, printing text to stdout as it arrives and the summary line to
/// stderr, and writes `--dump` when asked.
pub fn run_generation(
    backend: &mut dyn Backend,
    model: &Model,
    prompt_ids: &[u32],
    args: &GenerationArgs,
) -> anyhow::Result<Generation> {
    let opts = args.options();
    let mut stdout = std::io::stdout().lock();
    let mut write_error: Option<std::io::Error> = None;
    let generation = generate(backend, &model.tokenizer, prompt_ids, &opts, &mut |text| {
        if write_error.is_none()
            && let Err(e) = stdout
                .write_all(text.as_bytes())
                .and_then(|()| stdout.flush())
        {
            write_error = Some(e);
        }
    })?;
    if let Some(e) = write_error {
        return Err(e).context("cannot write the generated text to stdout");
    }
    writeln!(stdout).context("cannot write to stdout")?;
    drop(stdout);
    eprintln!("{}", generation.summary());
    if let Some(path) = &args.dump {
        write_dump(path, &generation)
            .with_context(|| format!("cannot write the dump {}", path.display()))?;
        eprintln!(
            "wrote {} steps of logits to {}",
            generation.ids.len(),
            path.display()
        );
    }
    Ok(generation)
}
