//! The generation loop shared by every backend (the CPU reference and the Vulkan execution
//! modes): prefill the prompt in one [`Backend::step`], then decode one token per step; greedy
//! by default (the backend's argmax), temperature / top-p sampling with a seed as options; text
//! streamed as it completes; stop at EOS unless told otherwise.
//!
//! Also the `--dump FILE` format: a safetensors file with `logits` (F32, `[steps, vocab]`: row i
//! holds the logits from which generated token i was chosen, so row 0 comes from the last prompt
//! position) and `ids` (I64, `[steps]`: the generated token ids), written atomically.

use std::path::Path;
use std::time::Instant;

use anyhow::Context;
use profiler::rng::Rng;

use crate::model::error::ModelError;
use crate::model::safetensors_io::{SafetensorsFile, SafetensorsWriter, TensorEntry};
use crate::model::tokenizer::Tokenizer;

/// What one [`Backend::step`] returns: the output of the last position it ran.
#[derive(Debug, Clone, PartialEq)]
pub struct StepOutput {
    /// The logits, `(vocab)`, when they were asked for.
    pub logits: Option<Vec<f32>>,
    /// The greedy choice: the index of the largest logit, ties going to the lowest index.
    pub argmax: u32,
}

/// A decoder that can run positions and keep their keys and values.
pub trait Backend {
    /// Runs `tokens` at positions `pos..pos + tokens.len()`, appends them to the KV cache, and
    /// returns the output of the last position: its greedy argmax, and its logits when asked.
    fn step(&mut self, tokens: &[u32], pos: usize, want_logits: bool)
    -> anyhow::Result<StepOutput>;
}

/// One sequence's part of a batched step: `tokens` at positions `pos..` of sequence `seq`.
#[derive(Debug, Clone, Copy)]
pub struct SeqStep<'a> {
    pub seq: usize,
    pub tokens: &'a [u32],
    pub pos: usize,
}

/// A decoder that runs several sequences, each with its own KV cache: prompts one sequence at a
/// time, then one token of every sequence per decode step.
pub trait BatchBackend {
    /// Sequences decoded together.
    fn batch(&self) -> usize;
    /// Runs `steps` (a prompt of one or more sequences, or one token of every sequence) and
    /// returns each step's last-position output, in order.
    fn step_batch(
        &mut self,
        steps: &[SeqStep<'_>],
        want_logits: bool,
    ) -> anyhow::Result<Vec<StepOutput>>;
}

/// B independent single-sequence backends (for example CPU references) as one batch.
impl<B: Backend> BatchBackend for Vec<B> {
    fn batch(&self) -> usize {
        self.len()
    }
    fn step_batch(
        &mut self,
        steps: &[SeqStep<'_>],
        want_logits: bool,
    ) -> anyhow::Result<Vec<StepOutput>> {
        steps
            .iter()
            .map(|s| {
                let n = self.len();
                let b = self.get_mut(s.seq).ok_or_else(|| {
                    anyhow::anyhow!("sequence {} is past the batch of {n}", s.seq)
                })?;
                b.step(s.tokens, s.pos, want_logits)
            })
            .collect()
    }
}

/// Greedy generation of `steps` tokens for every prompt of a batch (EOS ignored): each prompt is
/// prefilled on its own, then every decode step advances all sequences by one token. Returns
/// each sequence's generated ids and, with `dump_logits`, the logits they were chosen from.
pub fn generate_batch(
    backend: &mut dyn BatchBackend,
    prompts: &[Vec<u32>],
    steps: usize,
    dump_logits: bool,
) -> anyhow::Result<Vec<Generation>> {
    anyhow::ensure!(
        prompts.len() == backend.batch(),
        "{} prompts for a batch of {} sequences",
        prompts.len(),
        backend.batch()
    );
    anyhow::ensure!(
        prompts.iter().all(|p| !p.is_empty()),
        "every prompt of a batch needs at least one token"
    );
    let mut outs: Vec<Generation> = prompts
        .iter()
        .map(|p| Generation::started(p.len(), steps))
        .collect();
    let record =
        |outs: &mut Vec<Generation>, seq: usize, o: &StepOutput, ns: u64, prefill: bool| {
            let g = &mut outs[seq];
            if let Some(l) = &o.logits {
                g.vocab = l.len();
                if dump_logits {
                    g.logits.extend_from_slice(l);
                }
            }
            g.ids.push(o.argmax);
            g.step_ns.push(ns);
            if prefill {
                g.prefill_ns = ns;
            } else {
                g.decode_ns += ns;
            }
        };
    if steps == 0 {
        return Ok(outs);
    }
    for (seq, p) in prompts.iter().enumerate() {
        let start = Instant::now();
        let o = backend
            .step_batch(
                &[SeqStep {
                    seq,
                    tokens: p,
                    pos: 0,
                }],
                dump_logits,
            )
            .with_context(|| format!("prefill of sequence {seq} failed"))?;
        let o = o
            .into_iter()
            .next()
            .context("the backend returned no output for a prompt")?;
        record(&mut outs, seq, &o, start.elapsed().as_nanos() as u64, true);
    }
    for step in 1..steps {
        let last: Vec<[u32; 1]> = outs.iter().map(|g| [g.ids[g.ids.len() - 1]]).collect();
        let batch: Vec<SeqStep<'_>> = last
            .iter()
            .enumerate()
            .map(|(seq, t)| SeqStep {
                seq,
                tokens: t,
                pos: prompts[seq].len() + step - 1,
            })
            .collect();
        let start = Instant::now();
        let res = backend
            .step_batch(&batch, dump_logits)
            .with_context(|| format!("batched decode step {step} failed"))?;
        anyhow::ensure!(
            res.len() == prompts.len(),
            "the backend returned {} outputs for {} sequences",
            res.len(),
            prompts.len()
        );
        let ns = start.elapsed().as_nanos() as u64;
        for (seq, o) in res.iter().enumerate() {
            record(&mut outs, seq, o, ns, false);
        }
    }
    Ok(outs)
}

/// How to generate.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerateOptions {
    /// Tokens to generate (EOS, when it stops generation, counts as one).
    pub max_tokens: usize,
    /// 0 is greedy; above 0, sampling from softmax(logits / temperature).
    pub temperature: f32,
    /// Nucleus sampling: the smallest set of most likely tokens whose probability reaches
    /// `top_p` (in (0, 1]; 1 keeps every token).
    pub top_p: f32,
    /// Seed of the sampler.
    pub seed: u64,
    /// Keep generating past EOS.
    pub ignore_eos: bool,
    /// Keep every step's logits in [`Generation::logits`] (for `--dump`).
    pub dump_logits: bool,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        Self {
            max_tokens: 64,
            temperature: 0.0,
            top_p: 1.0,
            seed: 0,
            ignore_eos: false,
            dump_logits: false,
        }
    }
}

impl GenerateOptions {
    /// Checks the sampling parameters.
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.temperature.is_finite() && self.temperature >= 0.0,
            "--temperature must be 0 (greedy) or a positive number, not {}",
            self.temperature
        );
        anyhow::ensure!(
            self.top_p > 0.0 && self.top_p <= 1.0,
            "--top-p must be in (0, 1], not {}",
            self.top_p
        );
        Ok(())
    }

    /// Whether tokens are sampled (else greedy).
    pub fn sampling(&self) -> bool {
        self.temperature > 0.0
    }
}

/// Why generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// An EOS id was generated (it is the last entry of `ids`).
    Eos,
    /// `max_tokens` were generated.
    MaxTokens,
}

/// The result of [`generate`].
#[derive(Debug, Clone, PartialEq)]
pub struct Generation {
    pub prompt_tokens: usize,
    /// Generated token ids, in order.
    pub ids: Vec<u32>,
    /// Logits that each generated id was chosen from, `(ids.len(), vocab)` row-major, when
    /// `dump_logits`; else empty.
    pub logits: Vec<f32>,
    /// Width of a logits row (0 when no logits were returned).
    pub vocab: usize,
    /// The text streamed to `on_text`, concatenated.
    pub text: String,
    pub stop: StopReason,
    /// Wall time of the prefill step (the whole prompt and the first token's logits).
    pub prefill_ns: u64,
    /// Wall time of all decode steps together.
    pub decode_ns: u64,
    /// Wall time of every step, prefill first.
    pub step_ns: Vec<u64>,
}

impl Generation {
    /// Nothing generated yet from a prompt of `prompt_tokens`, with room for `steps` steps.
    pub fn started(prompt_tokens: usize, steps: usize) -> Generation {
        Generation {
            prompt_tokens,
            ids: Vec::with_capacity(steps),
            logits: Vec::new(),
            vocab: 0,
            text: String::new(),
            stop: StopReason::MaxTokens,
            prefill_ns: 0,
            decode_ns: 0,
            step_ns: Vec::with_capacity(steps),
        }
    }

    /// Decode steps per second (tokens after the first, which prefill produced).
    pub fn decode_tokens_per_s(&self) -> f64 {
        let steps = self.step_ns.len().saturating_sub(1);
        if steps == 0 || self.decode_ns == 0 {
            0.0
        } else {
            steps as f64 / (self.decode_ns as f64 * 1e-9)
        }
    }

    /// One line: prompt and generated token counts, prefill time, decode rate, stop reason.
    pub fn summary(&self) -> String {
        format!(
            "prompt {} tokens, generated {} tokens, prefill {:.1} ms, decode {:.2} tokens/s ({} \
             steps in {:.1} ms){}",
            self.prompt_tokens,
            self.ids.len(),
            self.prefill_ns as f64 * 1e-6,
            self.decode_tokens_per_s(),
            self.step_ns.len().saturating_sub(1),
            self.decode_ns as f64 * 1e-6,
            match self.stop {
                StopReason::Eos => ", stopped at EOS",
                StopReason::MaxTokens => "",
            }
        )
    }
}

/// Generates up to `opts.max_tokens` tokens after `prompt_ids`, calling `on_text` with each
/// piece of text as soon as it is complete UTF-8. The EOS token that stops generation is kept
/// in `ids` (and its logits row) but its text is not emitted.
pub fn generate(
    backend: &mut dyn Backend,
    tokenizer: &Tokenizer,
    prompt_ids: &[u32],
    opts: &GenerateOptions,
    on_text: &mut dyn FnMut(&str),
) -> anyhow::Result<Generation> {
    opts.validate()?;
    anyhow::ensure!(
        !prompt_ids.is_empty(),
        "the prompt encodes to no tokens; give a non-empty --prompt"
    );
    let want_logits = opts.dump_logits || opts.sampling();
    let mut rng = Rng::new(opts.seed);
    let mut stream = tokenizer.stream();
    let mut out = Generation::started(prompt_ids.len(), opts.max_tokens);

    let mut input: Vec<u32> = prompt_ids.to_vec();
    let mut pos = 0usize;
    while out.ids.len() < opts.max_tokens {
        let step = out.ids.len();
        let start = Instant::now();
        let result = backend
            .step(&input, pos, want_logits)
            .with_context(|| format!("generation step {step} (position {pos}) failed"))?;
        let ns = start.elapsed().as_nanos() as u64;
        pos += input.len();

        let id = if want_logits {
            let logits = result.logits.as_deref().with_context(|| {
                format!("the backend returned no logits at step {step} though they were asked for")
            })?;
            if out.vocab == 0 {
                out.vocab = logits.len();
            }
            anyhow::ensure!(
                logits.len() == out.vocab && out.vocab > 0,
                "the backend returned {} logits at step {step}, expected {}",
                logits.len(),
                out.vocab
            );
            if let Some(i) = logits.iter().position(|v| !v.is_finite()) {
                anyhow::bail!("logit {i} at step {step} is {}", logits[i]);
            }
            if opts.dump_logits {
                out.logits.extend_from_slice(logits);
            }
            if opts.sampling() {
                sample(logits, opts.temperature, opts.top_p, &mut rng)
            } else {
                result.argmax
            }
        } else {
            result.argmax
        };

        out.ids.push(id);
        out.step_ns.push(ns);
        if step == 0 {
            out.prefill_ns = ns;
        } else {
            out.decode_ns += ns;
        }
        if !opts.ignore_eos && tokenizer.is_eos(id) {
            out.stop = StopReason::Eos;
            break;
        }
        if let Some(text) = stream.push(id)? {
            on_text(&text);
            out.text.push_str(&text);
        }
        input.clear();
        input.push(id);
    }
    if let Some(text) = stream.finish()? {
        on_text(&text);
        out.text.push_str(&text);
    }
    Ok(out)
}

/// Index of the largest value, ties going to the lowest index; NaN is never chosen.
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0usize;
    let mut best_value = f32::NEG_INFINITY;
    for (i, &v) in logits.iter().enumerate() {
        if v > best_value {
            best = i;
            best_value = v;
        }
    }
    best as u32
}

/// Samples from softmax(logits / temperature) restricted to the top-p nucleus. Deterministic
/// for a given rng state: candidates are ordered by probability, then by index.
pub fn sample(logits: &[f32], temperature: f32, top_p: f32, rng: &mut Rng) -> u32 {
    let t = f64::from(temperature.max(1e-6));
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut probs: Vec<(f64, u32)> = logits
        .iter()
        .enumerate()
        .map(|(i, &l)| (((f64::from(l) - f64::from(max)) / t).exp(), i as u32))
        .collect();
    let total: f64 = probs.iter().map(|p| p.0).sum();
    if top_p < 1.0 {
        probs.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        let mut cumulative = 0.0;
        let mut keep = probs.len();
        for (k, p) in probs.iter().enumerate() {
            cumulative += p.0 / total;
            if cumulative >= f64::from(top_p) {
                keep = k + 1;
                break;
            }
        }
        probs.truncate(keep);
    }
    let kept: f64 = probs.iter().map(|p| p.0).sum();
    let r = rng.uniform() * kept;
    let mut cumulative = 0.0;
    for &(p, i) in &probs {
        cumulative += p;
        if r < cumulative {
            return i;
        }
    }
    probs.last().map_or(0, |p| p.1)
}

/// A `--dump` file read back.
#[derive(Debug, Clone, PartialEq)]
pub struct Dump {
    /// (steps, vocab) row-major
    pub logits: Vec<f32>,
    pub vocab: usize,
    pub ids: Vec<u32>,
}

/// Writes `logits` (F32 `[steps, vocab]`) and `ids` (I64 `[steps]`) to `path` with
/// [`profiler::io::write_output`]: through a temporary file renamed into place (a device or FIFO
/// is written in place).
pub fn write_dump(path: &Path, generation: &Generation) -> Result<(), ModelError> {
    let steps = generation.ids.len();
    let vocab = generation.vocab;
    if generation.logits.len() != steps * vocab {
        return Err(ModelError::Safetensors {
            path: path.to_path_buf(),
            reason: format!(
                "the generation holds {} logits for {steps} steps of {vocab}; generate with \
                 dump_logits to dump",
                generation.logits.len()
            ),
        });
    }
    // The one output writer: atomically over a file, in place into a device or FIFO.
    profiler::io::write_output(path, |w| {
        let file = w.get_ref().try_clone()?;
        let written = (|| {
            let mut writer = SafetensorsWriter::from_file(
                path,
                file,
                vec![
                    TensorEntry::new("ids", safetensors::Dtype::I64, &[steps]),
                    TensorEntry::new("logits", safetensors::Dtype::F32, &[steps, vocab]),
                ],
                None,
            )?;
            let ids: Vec<u8> = generation
                .ids
                .iter()
                .flat_map(|&id| i64::from(id).to_le_bytes())
                .collect();
            writer.write_bytes(&ids)?;
            writer.write_f32(&generation.logits)?;
            writer.finish()
        })();
        written.map_err(std::io::Error::other)
    })
    .map_err(|e| ModelError::write(path, e))
}

/// Reads a file written by [`write_dump`].
pub fn read_dump(path: &Path) -> Result<Dump, ModelError> {
    let file = SafetensorsFile::open(path)?;
    let shape = |name: &str| {
        file.info(name)
            .map(|i| i.shape.clone())
            .ok_or_else(|| ModelError::MissingTensor {
                name: name.to_string(),
                path: path.to_path_buf(),
            })
    };
    let logits_shape = shape("logits")?;
    let ids_shape = shape("ids")?;
    let (steps, vocab) = match logits_shape.as_slice() {
        [s, v] => (*s, *v),
        _ => {
            return Err(ModelError::TensorShape {
                name: "logits".into(),
                path: path.to_path_buf(),
                expected: vec![ids_shape.first().copied().unwrap_or(0), 0],
                found: logits_shape.clone(),
            });
        }
    };
    let logits = file.read_f32("logits", &[steps, vocab])?;
    let ids = file
        .read_i64("ids", &[steps])?
        .into_iter()
        .map(|v| u32::try_from(v).unwrap_or(u32::MAX))
        .collect();
    Ok(Dump { logits, vocab, ids })
}
