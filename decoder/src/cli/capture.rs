//! `decoder capture`: run one or both modes headless and write their traces.

use std::path::{Path, PathBuf};

use anyhow::Context as _;

use super::gpu::GpuArgs;
use super::run::{ModelArgs, PromptArgs, load_model, prompt_ids};
use crate::capture::{CaptureSpec, Streamed, capture_to, table};
use crate::exec::knobs::Mode;
use crate::model::Tokenizer;

/// Which preset(s) to capture.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CaptureMode {
    Generic,
    Fused,
    /// Both presets, one trace each, and the A/B table.
    Both,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Preset to capture; `both` writes generic.json and fused.json into the --out directory.
    #[arg(long, value_enum, default_value = "both")]
    pub mode: CaptureMode,
    /// Output trace file (one mode) or directory (`--mode both`: generic.json and fused.json,
    /// both renamed into place once both are captured, replacing a previous pair together). A
    /// device or FIFO is written in place; a missing directory is refused before the run.
    #[arg(long, value_name = "PATH")]
    pub out: PathBuf,
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub prompt: PromptArgs,
    /// Decode tokens to generate (EOS is ignored so captures have the asked length).
    #[arg(long, default_value_t = 32)]
    pub max_tokens: usize,
    /// Prompt length in tokens: the prompt is repeated until it has this many (0: as given).
    #[arg(long, default_value_t = 0)]
    pub context: usize,
    /// Also read the logits back every step (as `run --dump` does; adds bytes to the counters).
    #[arg(long)]
    pub logits: bool,
    #[command(flatten)]
    pub gpu: GpuArgs,
}

/// The prompt ids extended by repetition to `context` tokens (when `context` is larger).
pub fn with_context(ids: Vec<u32>, context: usize) -> Vec<u32> {
    if context <= ids.len() {
        return ids;
    }
    ids.iter().copied().cycle().take(context).collect()
}

pub fn run(args: Args) -> anyhow::Result<()> {
    // Before anything runs: an output that cannot be written would lose the whole capture.
    let outputs = output_paths(args.mode, &args.out)?;
    let kv = args.gpu.kv.config()?;
    let tuning = args.gpu.tuning.overrides()?;
    let model = load_model(&args.model.model)?;
    let prompt = prompt_ids(&model, &args.prompt)?;
    // The sizes against the model and the host before the prompt is repeated to --context tokens.
    let run_size = crate::limits::RunSize {
        prompt_tokens: prompt.len(),
        context: args.context,
        max_tokens: args.max_tokens,
        batch: kv.batch,
        logits_per_token: args.logits,
    };
    let max_seq = crate::limits::check_positions(&model.config, &run_size, "--max-tokens")?;
    crate::limits::check_host_memory(&model.config, &run_size, max_seq, "--max-tokens")?;
    let ids = with_context(prompt, args.context);
    let gpu = args.gpu.open()?;
    eprintln!("device: {} ({})", gpu.info().name, gpu.info().driver_name);
    crate::limits::check_device(&model.config, gpu.info(), &kv, max_seq)?;
    let mut summaries = Vec::new();
    let mut texts = Vec::new();
    // Every trace is streamed into a file beside its path as the steps run, and all are renamed
    // into place together once every mode has been captured: a failed or stopped run leaves the
    // previous pair as it was, never one new trace beside an old one.
    let mut staged = Vec::new();
    for (mode, path) in outputs {
        let spec = CaptureSpec {
            model_name: args.model.model.clone(),
            prompt: args.prompt.prompt.clone(),
            prompt_ids: ids.clone(),
            decode_tokens: args.max_tokens,
            knobs: args.gpu.knobs(mode),
            timestamps: args.gpu.timestamps,
            logits_readback: args.logits,
            kv,
            tuning,
        };
        eprintln!(
            "capturing {} ({}): {} prompt + {} decode tokens",
            mode.name(),
            spec.knobs,
            ids.len(),
            args.max_tokens
        );
        let Streamed {
            staged: trace,
            summary,
            generation,
        } = capture_to(&gpu, &model, &spec, &path)
            .with_context(|| format!("cannot write the trace {}", path.display()))?;
        staged.push((path.clone(), trace));
        summaries.push((mode.name(), summary));
        texts.push((mode.name(), generation));
    }
    for (path, s) in staged {
        s.commit()
            .with_context(|| format!("cannot write the trace {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    let cols: Vec<(&str, &crate::capture::Summary)> =
        summaries.iter().map(|(n, s)| (*n, s)).collect();
    println!("{}", table(&cols));
    for (name, generation) in &texts {
        println!(
            "{name}: {}",
            shown_text(&model.tokenizer, &generation.ids, &generation.text)
        );
    }
    if texts.len() == 2 && texts[0].1.ids != texts[1].1.ids {
        anyhow::bail!("the two modes generated different text; one of them is wrong");
    }
    Ok(())
}

/// The trace path of every mode to capture, checked before any work: `--out` itself for one
/// mode; for `--mode both`, `generic.json` and `fused.json` in the `--out` directory (created when
/// missing; a pair already there is replaced, both traces together).
pub fn output_paths(mode: CaptureMode, out: &Path) -> anyhow::Result<Vec<(Mode, PathBuf)>> {
    let paths = match mode {
        CaptureMode::Generic => vec![(Mode::Generic, out.to_path_buf())],
        CaptureMode::Fused => vec![(Mode::Fused, out.to_path_buf())],
        CaptureMode::Both => {
            match std::fs::metadata(out) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => anyhow::bail!(
                    "--out {} is a file, but --mode both writes generic.json and fused.json into \
                     a directory; give a directory (created when missing), or --mode generic or \
                     fused for one trace",
                    out.display()
                ),
                // Only the last component is created: a missing parent is more likely a typo.
                Err(_) => std::fs::create_dir(out).map_err(|e| {
                    let parent = match out.parent() {
                        Some(p) if !p.as_os_str().is_empty() => p.display().to_string(),
                        _ => ".".to_string(),
                    };
                    if e.kind() == std::io::ErrorKind::NotFound {
                        anyhow::anyhow!(
                            "cannot create the --out directory {}: its parent {parent} does not \
                             exist; create it (mkdir -p {parent}) or give another --out",
                            out.display()
                        )
                    } else {
                        anyhow::anyhow!(
                            "cannot create the --out directory {}: {e}; give a directory that \
                             can be created (--mode both writes generic.json and fused.json \
                             into it)",
                            out.display()
                        )
                    }
                })?,
            }
            vec![
                (Mode::Generic, out.join("generic.json")),
                (Mode::Fused, out.join("fused.json")),
            ]
        }
    };
    for (_, p) in &paths {
        profiler::io::check_output(p, "--out")?;
    }
    Ok(paths)
}

/// The generated text as a reader wants it, quoted: up to the first end-of-sequence token, with
/// a note of how many tokens the capture decoded past it (captures ignore EOS so that every
/// capture has the asked length and the two presets time the same work).
pub fn shown_text(tokenizer: &Tokenizer, ids: &[u32], text: &str) -> String {
    let Some(eos) = ids.iter().position(|&id| tokenizer.is_eos(id)) else {
        return format!("{text:?}");
    };
    let past = ids.len() - eos - 1;
    match tokenizer.decode(&ids[..eos]) {
        Ok(answer) if past > 0 => format!(
            "{answer:?} (end of sequence after {eos} tokens; {past} more decoded past it for \
             the timing)"
        ),
        Ok(answer) => format!("{answer:?} (end of sequence)"),
        // The ids decoded once already; if they do not now, show what was generated.
        Err(_) => format!("{text:?}"),
    }
}

#[cfg(test)]
mod tests {
    use std::str::FromStr as _;

    use super::*;
    use crate::model::synth::byte_level_bpe_json;

    /// A byte-level tokenizer (byte b is id b) with `<eos>` as its end-of-sequence token.
    fn tokenizer() -> Tokenizer {
        let json = byte_level_bpe_json(300, &["<eos>".to_owned()], None);
        let inner = tokenizers::Tokenizer::from_str(&json.to_string()).expect("tokenizer.json");
        let eos = inner.token_to_id("<eos>").expect("<eos> id");
        Tokenizer::from_parts("test/tokenizer.json".into(), inner, vec![eos])
    }

    #[test]
    fn the_shown_text_ends_at_the_end_of_sequence() {
        let tok = tokenizer();
        let eos = tok.eos_ids()[0];
        let bytes = |s: &str| s.bytes().map(u32::from).collect::<Vec<u32>>();
        let mut ids = bytes("Paris.");
        ids.push(eos);
        ids.extend(bytes("xy"));
        assert_eq!(
            shown_text(&tok, &ids, "unused"),
            "\"Paris.\" (end of sequence after 6 tokens; 2 more decoded past it for the timing)"
        );
        ids.truncate(7);
        assert_eq!(
            shown_text(&tok, &ids, "unused"),
            "\"Paris.\" (end of sequence)"
        );
        // Without an end-of-sequence token the text is shown as generated.
        assert_eq!(shown_text(&tok, &bytes("abc"), "abc"), "\"abc\"");
    }
}
