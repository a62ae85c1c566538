//! The generation loop: prefill then one token per step at the right positions, greedy and
//! seeded sampling, EOS handling, the `--dump` file.
#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is a test failure.

mod model_support;

use decoder::generate::{
    Backend, GenerateOptions, StepOutput, StopReason, argmax, generate, read_dump, sample,
    write_dump,
};
use decoder::model::synth::SynthOptions;
use decoder::model::{Model, Preset};
use model_support::synth;
use profiler::rng::Rng;

/// A backend whose next token is a fixed function of the last input token; it records every
/// call's (tokens, pos).
struct Scripted {
    vocab: usize,
    next: fn(u32) -> u32,
    calls: Vec<(Vec<u32>, usize)>,
}

impl Backend for Scripted {
    fn step(
        &mut self,
        tokens: &[u32],
        pos: usize,
        want_logits: bool,
    ) -> anyhow::Result<StepOutput> {
        self.calls.push((tokens.to_vec(), pos));
        let winner = (self.next)(*tokens.last().unwrap());
        let logits: Vec<f32> = (0..self.vocab)
            .map(|i| {
                if i as u32 == winner {
                    5.0
                } else {
                    (i % 7) as f32 * 0.1
                }
            })
            .collect();
        Ok(StepOutput {
            argmax: argmax(&logits),
            logits: want_logits.then_some(logits),
        })
    }
}

fn tiny_model() -> (tempfile::TempDir, Model) {
    let (t, dir) = synth(Preset::Tiny, &SynthOptions::default());
    let model = Model::load(&dir).unwrap();
    (t, model)
}

/// The scripted next token after `t`.
fn rule(t: u32) -> u32 {
    (t * 7 + 3) % 200 + 32
}

#[test]
fn prefill_then_one_token_per_step_at_increasing_positions() {
    let (_t, model) = tiny_model();
    let mut backend = Scripted {
        vocab: model.config.vocab,
        next: rule,
        calls: vec![],
    };
    let prompt = [10u32, 11, 12];
    let opts = GenerateOptions {
        max_tokens: 5,
        dump_logits: true,
        ..GenerateOptions::default()
    };
    let mut pieces = String::new();
    let g = generate(&mut backend, &model.tokenizer, &prompt, &opts, &mut |s| {
        pieces.push_str(s)
    })
    .unwrap();
    let expected_ids: Vec<u32> = std::iter::successors(Some(rule(12)), |&t| Some(rule(t)))
        .take(5)
        .collect();
    assert_eq!(g.ids, expected_ids);
    assert_eq!(backend.calls[0], (prompt.to_vec(), 0));
    for (i, call) in backend.calls[1..].iter().enumerate() {
        assert_eq!(call, &(vec![expected_ids[i]], 3 + i));
    }
    assert_eq!(backend.calls.len(), 5, "no step after the last token");
    assert_eq!(g.stop, StopReason::MaxTokens);
    assert_eq!(g.step_ns.len(), 5);
    assert_eq!(g.vocab, model.config.vocab);
    assert_eq!(g.logits.len(), 5 * g.vocab);
    for (i, row) in g.logits.chunks(g.vocab).enumerate() {
        assert_eq!(
            argmax(row),
            g.ids[i],
            "row {i} is what token {i} was chosen from"
        );
    }
    assert_eq!(pieces, model.tokenizer.decode(&g.ids).unwrap());
    assert_eq!(g.text, pieces);
}

#[test]
fn eos_stops_unless_ignored() {
    let (_t, model) = tiny_model();
    let eos = model.tokenizer.eos_ids()[0];
    let next = |t: u32| if t == 50 { 4093 } else { 50 };
    assert!(model.tokenizer.is_eos(4093) && eos >= 4093);
    let mut backend = Scripted {
        vocab: model.config.vocab,
        next,
        calls: vec![],
    };
    let opts = GenerateOptions {
        max_tokens: 10,
        ..GenerateOptions::default()
    };
    let g = generate(&mut backend, &model.tokenizer, &[7], &opts, &mut |_| {}).unwrap();
    assert_eq!(g.ids, vec![50, 4093]);
    assert_eq!(g.stop, StopReason::Eos);
    assert_eq!(g.text, "2", "the EOS text is not emitted");

    let opts = GenerateOptions {
        max_tokens: 4,
        ignore_eos: true,
        ..GenerateOptions::default()
    };
    let g = generate(&mut backend, &model.tokenizer, &[7], &opts, &mut |_| {}).unwrap();
    assert_eq!(g.ids, vec![50, 4093, 50, 4093]);
    assert_eq!(g.stop, StopReason::MaxTokens);
}

#[test]
fn argmax_ties_go_to_the_lowest_index() {
    assert_eq!(argmax(&[1.0, 3.0, 3.0, 2.0]), 1);
    assert_eq!(argmax(&[f32::NAN, 0.5, 0.5]), 1);
    assert_eq!(argmax(&[-1.0]), 0);
}

#[test]
fn sampling_is_seeded_and_follows_temperature_and_top_p() {
    let logits = [0.0f32, 3f32.ln(), -20.0, -20.0];
    // softmax at T=1: p = [0.25, 0.75, ~0, ~0].
    let mut rng = Rng::new(42);
    let draws: Vec<u32> = (0..4000)
        .map(|_| sample(&logits, 1.0, 1.0, &mut rng))
        .collect();
    let ones = draws.iter().filter(|&&d| d == 1).count() as f64 / 4000.0;
    // Binomial std at n=4000 is 0.007; 0.03 is over four of them.
    assert!((ones - 0.75).abs() < 0.03, "{ones}");
    // Same seed, same draws; another seed, other draws.
    let mut again = Rng::new(42);
    let redo: Vec<u32> = (0..4000)
        .map(|_| sample(&logits, 1.0, 1.0, &mut again))
        .collect();
    assert_eq!(draws, redo);
    let mut other = Rng::new(43);
    let diff: Vec<u32> = (0..4000)
        .map(|_| sample(&logits, 1.0, 1.0, &mut other))
        .collect();
    assert_ne!(draws, diff);
    // top_p 0.5 keeps only the 0.75 token.
    let mut rng = Rng::new(1);
    assert!((0..500).all(|_| sample(&logits, 1.0, 0.5, &mut rng) == 1));
    // A low temperature is nearly greedy.
    let mut rng = Rng::new(1);
    assert!((0..500).all(|_| sample(&logits, 0.05, 1.0, &mut rng) == 1));
}

#[test]
fn reference_generation_is_deterministic_and_dumps_what_it_chose_from() {
    let (_t, model) = tiny_model();
    let prompt = model.tokenizer.encode("Once upon a time", true).unwrap();
    let run = |opts: &GenerateOptions| {
        let mut reference = model.reference(prompt.len() + opts.max_tokens).unwrap();
        generate(&mut reference, &model.tokenizer, &prompt, opts, &mut |_| {}).unwrap()
    };
    let greedy = GenerateOptions {
        max_tokens: 24,
        dump_logits: true,
        ignore_eos: true,
        ..GenerateOptions::default()
    };
    let a = run(&greedy);
    let b = run(&greedy);
    assert_eq!(a.ids, b.ids);
    assert_eq!(a.logits, b.logits);

    // Row 0 is the last prompt position's logits.
    let mut reference = model.reference(prompt.len()).unwrap();
    for (pos, &t) in prompt.iter().enumerate() {
        reference.forward(t, pos).unwrap();
    }
    assert_eq!(&a.logits[..a.vocab], reference.logits());

    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("dump.safetensors");
    write_dump(&path, &a).unwrap();
    let dump = read_dump(&path).unwrap();
    assert_eq!(dump.ids, a.ids);
    assert_eq!(dump.vocab, model.config.vocab);
    assert_eq!(dump.logits, a.logits);
    let leftovers = std::fs::read_dir(tmp.path()).unwrap().count();
    assert_eq!(leftovers, 1, "only the dump itself, no temporary file");

    // Seeded sampling: reproducible, and different from greedy.
    let sampled = GenerateOptions {
        temperature: 1.0,
        top_p: 0.95,
        seed: 9,
        ..greedy.clone()
    };
    let s1 = run(&sampled);
    assert_eq!(s1.ids, run(&sampled).ids);
    assert_ne!(s1.ids, a.ids);
}

#[test]
fn bad_options_are_rejected() {
    let (_t, model) = tiny_model();
    let mut reference = model.reference(8).unwrap();
    for opts in [
        GenerateOptions {
            temperature: -1.0,
            ..GenerateOptions::default()
        },
        GenerateOptions {
            top_p: 0.0,
            ..GenerateOptions::default()
        },
    ] {
        assert!(generate(&mut reference, &model.tokenizer, &[1], &opts, &mut |_| {}).is_err());
    }
    let err = generate(
        &mut reference,
        &model.tokenizer,
        &[],
        &GenerateOptions::default(),
        &mut |_| {},
    )
    .unwrap_err();
    assert!(err.to_string().contains("prompt"), "{err}");
    // Past the allocated cache: an error naming the position, not a panic.
    let opts = GenerateOptions {
        max_tokens: 20,
        ignore_eos: true,
        ..GenerateOptions::default()
    };
    let err = generate(
        &mut reference,
        &model.tokenizer,
        &[1, 2],
        &opts,
        &mut |_| {},
    )
    .unwrap_err();
    assert!(format!("{err:#}").contains("position 8"), "{err:#}");
}
