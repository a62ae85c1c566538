//! Every KV layout and attention path against the CPU reference: identical greedy tokens and
//! logits within a relative RMS of 5e-3 at every step, with the validation layer on.
//!
//! The models are built in memory with the shapes that matter to the kernels: GQA ratios 1, 3, 4
//! and 8, head_dim 64 and 128. The paged layout runs on fragmented block tables (the pool's free
//! list shuffled) with blocks of 16 and 32 positions, through both attention paths (the gather
//! into a contiguous scratch and the fused kernel that reads through the table), under both
//! presets; prompts run in chunks shorter than the prompt, so the tiled prompt attention and the
//! block writes of a prompt are exercised too. Batches of 4 sequences with different prompt
//! lengths are checked sequence by sequence against one CPU reference each. The rotating layout
//! runs across the window crossing with a prompt longer than the window, also with prompt chunks
//! longer than the window (the ring's classic failure), against the windowed CPU reference.
mod common;

use decoder::exec::engine::{Engine, EngineOptions, Timestamps};
use decoder::exec::knobs::{Kernels, Knobs, Mode, Sync};
use decoder::generate::{Generation, generate_batch};
use decoder::kv::{KvConfig, KvDtype, KvKind, PagedAttention};
use decoder::model::reference::{Reference, round_f16};
use decoder::model::{ModelConfig, Preset, Weights};

/// The seeds' bar for logits: relative RMS per step.
const LOGITS_REL_RMS: f64 = 5e-3;

/// A model built in memory.
struct TestModel {
    name: String,
    config: ModelConfig,
    weights: Weights,
}

/// A Qwen3-style model with `heads` query heads over `kv_heads` KV heads of `head_dim`, two
/// layers, f16-representable random weights (the GPU stores matrices in f16).
fn model(heads: usize, kv_heads: usize, head_dim: usize, seed: u64) -> TestModel {
    let mut config = Preset::Tiny.config().expect("tiny config");
    config.layers = 2;
    config.hidden = 192;
    config.heads = heads;
    config.kv_heads = kv_heads;
    config.head_dim = head_dim;
    config.intermediate = 384;
    config.vocab = 1024;
    let tensors: Vec<decoder::model::weights::Tensor> =
        decoder::model::weights::tensor_names_and_shapes(&config)
            .into_iter()
            .enumerate()
            .map(|(i, (name, shape))| {
                let n: usize = shape.iter().product();
                let r = common::rand_vec(n, seed * 1000 + i as u64);
                // The scales of `decoder synth` (decoder/src/model/synth.rs): logits std ~3,
                // sublayer outputs rms ~1, attention scores std ~2.5, so greedy decoding gives
                // varied tokens and attention depends on the context.
                let (center, std) =
                    if name.ends_with("q_norm.weight") || name.ends_with("k_norm.weight") {
                        (1.6, 0.1 / 3f32.sqrt())
                    } else if name.ends_with("norm.weight") {
                        (1.0, 0.1 / 3f32.sqrt())
                    } else if name.contains("embed_tokens") || name == "lm_head.weight" {
                        (0.0, 3.0 / (shape[1] as f32).sqrt())
                    } else {
                        (0.0, 1.0 / (shape[1] as f32).sqrt())
                    };
                let data: Vec<f32> = r
                    .iter()
                    .map(|v| round_f16(center + std * 3f32.sqrt() * v))
                    .collect();
                decoder::model::weights::Tensor::new(name, &shape, data)
            })
            .collect();
    let weights = Weights::from_tensors(&config, tensors).expect("weights from tensors");
    TestModel {
        name: format!("gqa{} hd{head_dim}", heads / kv_heads),
        config,
        weights,
    }
}

/// Deterministic prompt ids of `len` tokens.
fn prompt(len: usize, seed: u64, vocab: usize) -> Vec<u32> {
    common::rand_vec(len, seed)
        .iter()
        .map(|v| (((v + 1.0) * 0.5 * vocab as f32) as usize).min(vocab - 1) as u32)
        .collect()
}

fn rel_rms(a: &[f32], b: &[f32]) -> f64 {
    let num: f64 = a.iter().zip(b).map(|(x, y)| ((x - y) as f64).powi(2)).sum();
    let den: f64 = b.iter().map(|y| (*y as f64).powi(2)).sum();
    (num / den.max(1e-30)).sqrt()
}

/// The CPU reference of every sequence of a batch.
fn reference(m: &TestModel, prompts: &[Vec<u32>], steps: usize, kv: &KvConfig) -> Vec<Generation> {
    let max_seq = prompts.iter().map(Vec::len).max().unwrap_or(0) + steps + 1;
    let mut cpus: Vec<Reference<'_>> = prompts
        .iter()
        .map(|_| {
            let mut r = Reference::new(&m.config, &m.weights, max_seq).expect("reference");
            r.set_kv(kv.dtype == KvDtype::F16, kv.attention_window() as usize);
            r
        })
        .collect();
    generate_batch(&mut cpus, prompts, steps, true).expect("CPU generation")
}

fn on_gpu(
    m: &TestModel,
    knobs: Knobs,
    kv: KvConfig,
    prompts: &[Vec<u32>],
    steps: usize,
) -> Vec<Generation> {
    common::with_gpu(|gpu| {
        let max_seq = prompts.iter().map(Vec::len).max().unwrap_or(0) + steps + 1;
        let opts = EngineOptions {
            knobs,
            timestamps: Timestamps::Token,
            max_seq: max_seq as u32,
            kv,
            logits_readback: true,
            tuning: Default::default(),
        };
        let mut engine = Engine::new(gpu, &m.config, &m.weights, opts).expect("engine");
        generate_batch(&mut engine, prompts, steps, true).expect("GPU generation")
    })
}

fn assert_matches(what: &str, got: &[Generation], want: &[Generation]) {
    assert_eq!(got.len(), want.len(), "{what}: sequences");
    let mut worst = 0.0f64;
    for (seq, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(
            g.ids, w.ids,
            "{what}: sequence {seq}: greedy tokens differ from the CPU reference"
        );
        let v = w.vocab;
        assert_eq!(g.logits.len(), w.logits.len(), "{what}: logits rows");
        for (step, (a, b)) in g.logits.chunks(v).zip(w.logits.chunks(v)).enumerate() {
            let e = rel_rms(a, b);
            worst = worst.max(e);
            assert!(
                e < LOGITS_REL_RMS,
                "{what}: sequence {seq} step {step}: logits relative RMS {e:.3e} >= {LOGITS_REL_RMS}"
            );
        }
    }
    let distinct: std::collections::BTreeSet<u32> =
        want.iter().flat_map(|g| g.ids.iter().copied()).collect();
    assert!(
        distinct.len() > 8,
        "{what}: the reference generated only {} distinct tokens; the check would be weak",
        distinct.len()
    );
    eprintln!(
        "{what}: {} sequences x {} steps match, worst logits relative RMS {worst:.2e}",
        want.len(),
        want[0].ids.len()
    );
}

/// The first `steps` tokens (and their logits) of each generation.
fn prefix(gens: &[Generation], steps: usize) -> Vec<Generation> {
    gens.iter()
        .map(|g| {
            let mut g = g.clone();
            g.ids.truncate(steps);
            g.logits.truncate(steps * g.vocab);
            g
        })
        .collect()
}

/// Decode steps of the generic preset (a submit and a wait per dispatch under the validation
/// layer on a CPU driver is slow; the fused preset runs the full 200).
const GENERIC_STEPS: usize = 64;

/// The fused preset with the persistent token kernel (one dispatch per decode token).
fn persistent() -> Knobs {
    Knobs {
        kernels: Kernels::Persistent,
        ..Knobs::preset(Mode::Fused)
    }
}

/// `knobs` with each decode step submitted before the host waits for the one before
/// (`--sync chained`): batches, block tables that grow ahead and the window's slots.
fn chained(knobs: Knobs) -> Knobs {
    Knobs {
        sync: Sync::Chained,
        ..knobs
    }
}

/// Whether `knobs` can read `kv`: the persistent kernel has no gather path.
fn runs(knobs: Knobs, kv: &KvConfig) -> bool {
    !(knobs.kernels == Kernels::Persistent && kv.gathers())
}

fn paged(block: u32, path: PagedAttention, batch: u32) -> KvConfig {
    KvConfig {
        kind: KvKind::Paged,
        block,
        fragment: true,
        paged_attention: path,
        batch,
        prefill_chunk: 24,
        ..Default::default()
    }
}

fn contiguous(batch: u32) -> KvConfig {
    KvConfig {
        batch,
        prefill_chunk: 24,
        ..Default::default()
    }
}

/// Contiguous, paged-gather and paged-fused (fragmented, blocks of 16 and 32) against the CPU
/// reference for one model, batch 1, 200 decode steps, fused preset and persistent kernel.
fn layouts_agree(m: &TestModel, seed: u64) {
    let prompts = vec![prompt(45, seed, m.config.vocab)];
    let steps = 200;
    let want = reference(m, &prompts, steps, &contiguous(1));
    for (preset, knobs) in [
        ("fused preset", Knobs::preset(Mode::Fused)),
        ("persistent kernel", persistent()),
    ] {
        for (name, kv) in [
            ("contiguous", contiguous(1)),
            ("paged:16 gather", paged(16, PagedAttention::Gather, 1)),
            ("paged:16 fused", paged(16, PagedAttention::Fused, 1)),
            ("paged:32 gather", paged(32, PagedAttention::Gather, 1)),
            ("paged:32 fused", paged(32, PagedAttention::Fused, 1)),
        ] {
            if !runs(knobs, &kv) {
                continue;
            }
            let got = on_gpu(m, knobs, kv, &prompts, steps);
            assert_matches(&format!("{} {preset} {name}", m.name), &got, &want);
        }
    }
}

#[test]
fn layouts_agree_gqa1_head_dim_64() {
    layouts_agree(&model(4, 4, 64, 1), 11);
}

#[test]
fn layouts_agree_gqa3_head_dim_128() {
    layouts_agree(&model(6, 2, 128, 2), 12);
}

#[test]
fn layouts_agree_gqa4_head_dim_64() {
    layouts_agree(&model(8, 2, 64, 3), 13);
}

#[test]
fn layouts_agree_gqa8_head_dim_128() {
    layouts_agree(&model(8, 1, 128, 4), 14);
}

/// Both paged paths under the generic preset (primitive kernels: the KV append kernel writes
/// into blocks, scores/softmax/weighted sum read through the table or the gathered scratch).
#[test]
fn paged_paths_under_the_generic_preset() {
    let m = model(6, 2, 64, 5);
    let prompts = vec![prompt(37, 15, m.config.vocab)];
    let steps = GENERIC_STEPS;
    let want = reference(&m, &prompts, steps, &contiguous(1));
    let generic = Knobs::preset(Mode::Generic);
    for (name, kv) in [
        ("paged:16 gather", paged(16, PagedAttention::Gather, 1)),
        ("paged:32 fused", paged(32, PagedAttention::Fused, 1)),
        (
            "contiguous f32",
            KvConfig {
                dtype: KvDtype::F32,
                ..contiguous(1)
            },
        ),
    ] {
        let want = if kv.dtype == KvDtype::F32 {
            reference(&m, &prompts, steps, &kv)
        } else {
            want.clone()
        };
        let got = on_gpu(&m, generic, kv, &prompts, steps);
        assert_matches(&format!("{} generic preset {name}", m.name), &got, &want);
    }
}

/// Four sequences with different prompt lengths decode together, each with its own block table
/// and length, in both presets and with the persistent kernel.
#[test]
fn batch_of_four_with_different_lengths() {
    let m = model(8, 2, 64, 6);
    let prompts: Vec<Vec<u32>> = [41usize, 17, 33, 8]
        .iter()
        .enumerate()
        .map(|(i, &n)| prompt(n, 20 + i as u64, m.config.vocab))
        .collect();
    let steps = 200;
    let want = reference(&m, &prompts, steps, &contiguous(4));
    for (setting, knobs) in [
        ("fused", Knobs::preset(Mode::Fused)),
        ("persistent", persistent()),
        ("persistent chained", chained(persistent())),
        ("generic", Knobs::preset(Mode::Generic)),
    ] {
        let steps = if setting == "generic" {
            GENERIC_STEPS
        } else {
            steps
        };
        let want = prefix(&want, steps);
        for (name, kv) in [
            ("contiguous", contiguous(4)),
            ("paged:16 gather", paged(16, PagedAttention::Gather, 4)),
            ("paged:32 fused", paged(32, PagedAttention::Fused, 4)),
        ] {
            if !runs(knobs, &kv) {
                continue;
            }
            let got = on_gpu(&m, knobs, kv, &prompts, steps);
            assert_matches(&format!("{} batch 4 {setting} {name}", m.name), &got, &want);
        }
    }
}

/// The rotating layout across the window crossing: a prompt longer than the window, prompt
/// chunks shorter and longer than the window, 200 decode steps, both presets and the persistent
/// kernel, batch 1 and 2.
#[test]
fn rotating_window_crossing() {
    let m = model(8, 2, 64, 7);
    let window = 40;
    let steps = 200;
    for (chunk, batch) in [(16u32, 1u32), (64, 1), (24, 2)] {
        let prompts: Vec<Vec<u32>> = (0..batch as usize)
            .map(|i| prompt(70 - 9 * i, 30 + i as u64, m.config.vocab))
            .collect();
        let kv = KvConfig {
            kind: KvKind::Rotating,
            window,
            prefill_chunk: chunk,
            batch,
            ..Default::default()
        };
        let want = reference(&m, &prompts, steps, &kv);
        for (setting, knobs) in [
            ("fused", Knobs::preset(Mode::Fused)),
            ("persistent", persistent()),
            ("persistent chained", chained(persistent())),
            ("generic", Knobs::preset(Mode::Generic)),
        ] {
            let steps = if setting == "generic" {
                GENERIC_STEPS
            } else {
                steps
            };
            let want = prefix(&want, steps);
            let got = on_gpu(&m, knobs, kv, &prompts, steps);
            assert_matches(
                &format!(
                    "{} rotating:{window} chunk {chunk} batch {batch} {setting}",
                    m.name
                ),
                &got,
                &want,
            );
        }
    }
}

/// The windowed reference really differs from full attention once the window is crossed (a
/// control for the rotating test).
#[test]
fn window_changes_the_reference() {
    let m = model(8, 2, 64, 7);
    let prompts = vec![prompt(70, 30, m.config.vocab)];
    let full = reference(&m, &prompts, 8, &contiguous(1));
    let windowed = reference(
        &m,
        &prompts,
        8,
        &KvConfig {
            kind: KvKind::Rotating,
            window: 40,
            ..Default::default()
        },
    );
    let e = rel_rms(&full[0].logits, &windowed[0].logits);
    assert!(e > 1e-2, "windowed and full logits differ by only {e:.2e}");
}

/// The persistent kernel reads paged blocks in place: the gather path is refused with a sentence
/// that names the flag and what to use, at engine creation and when a running engine switches.
#[test]
fn persistent_kernel_refuses_the_gather_path() {
    let m = model(4, 2, 64, 9);
    let err = common::with_gpu(|gpu| {
        let opts = EngineOptions {
            knobs: persistent(),
            timestamps: Timestamps::Off,
            max_seq: 64,
            kv: paged(16, PagedAttention::Gather, 1),
            logits_readback: false,
            tuning: Default::default(),
        };
        match Engine::new(gpu, &m.config, &m.weights, opts) {
            Ok(_) => panic!("the persistent kernel accepted --paged-attention gather"),
            Err(e) => format!("{e:#}"),
        }
    });
    assert!(
        err.contains("--paged-attention gather") && err.contains("--paged-attention fused"),
        "{err}"
    );
    let err = common::with_gpu(|gpu| {
        let opts = EngineOptions {
            knobs: persistent(),
            timestamps: Timestamps::Off,
            max_seq: 64,
            kv: paged(16, PagedAttention::Fused, 1),
            logits_readback: false,
            tuning: Default::default(),
        };
        let mut engine = Engine::new(gpu, &m.config, &m.weights, opts).expect("engine");
        format!(
            "{:#}",
            engine
                .set_paged_attention(PagedAttention::Gather)
                .expect_err("switching to gather was accepted")
        )
    });
    assert!(err.contains("--paged-attention fused"), "{err}");
}

/// Every single-knob change away from either preset, and every knob value neither preset uses,
/// on both paged paths (fragmented tables).
#[test]
fn single_knob_changes_on_paged_layouts() {
    let m = model(6, 2, 64, 8);
    let prompts = vec![prompt(29, 40, m.config.vocab)];
    // Short: 2 paths x 15 settings, most of them submitting and waiting per dispatch.
    let steps = 24;
    let want = reference(&m, &prompts, steps, &contiguous(1));
    let (g, f) = (Knobs::preset(Mode::Generic), Knobs::preset(Mode::Fused));
    let mut settings = vec![];
    for (from, base, toward) in [("generic", g, f), ("fused", f, g)] {
        for (knob, value, k) in base.single_flips(&toward) {
            if k.validate(true).is_ok() {
                settings.push((format!("{from} --{knob} {value}"), k));
            }
        }
    }
    for (from, knob, value, k) in Knobs::beyond_presets() {
        if k.validate(true).is_ok() {
            settings.push((format!("{from} --{knob} {value}"), k));
        }
    }
    for (i, (name, knobs)) in settings.iter().enumerate() {
        // Alternate the paths and block sizes so every knob value meets both paths (the
        // persistent kernel has only the fused one).
        for (path, block) in [
            (PagedAttention::Fused, if i % 2 == 0 { 16 } else { 32 }),
            (PagedAttention::Gather, if i % 2 == 0 { 32 } else { 16 }),
        ] {
            let kv = paged(block, path, 1);
            if !runs(*knobs, &kv) {
                continue;
            }
            let got = on_gpu(&m, *knobs, kv, &prompts, steps);
            assert_matches(
                &format!("{} {name} paged:{block} {}", m.name, path.name()),
                &got,
                &want,
            );
        }
    }
}

/// A prompt of 4096 tokens on `tiny` runs through the tiled prompt attention (in chunks of 512)
/// and matches the CPU reference.
#[test]
fn prompt_of_4096_tokens_on_tiny() {
    let model = decoder::cli::run::load_model("tiny").expect("tiny");
    let m = TestModel {
        name: "tiny".into(),
        config: model.config.clone(),
        weights: model.weights.clone(),
    };
    let prompts = vec![prompt(4096, 99, m.config.vocab)];
    let steps = 4;
    let kv = KvConfig::default();
    assert_eq!(kv.prefill_chunk, 512);
    let want = reference(&m, &prompts, steps, &kv);
    let got = on_gpu(&m, Knobs::preset(Mode::Fused), kv, &prompts, steps);
    assert_eq!(got[0].ids, want[0].ids, "tiny 4096: tokens");
    for (step, (a, b)) in got[0]
        .logits
        .chunks(want[0].vocab)
        .zip(want[0].logits.chunks(want[0].vocab))
        .enumerate()
    {
        let e = rel_rms(a, b);
        assert!(
            e < LOGITS_REL_RMS,
            "tiny 4096 step {step}: relative RMS {e:.3e}"
        );
        eprintln!("tiny 4096-token prompt, step {step}: logits relative RMS {e:.2e}");
    }
}

/// Quantized weights (Q4_1 matrices, the tied embedding Q8_0 since 192 columns are not whole
/// Q6_K blocks) with a batch of two sequences over paged caches: the fused matvecs read one row
/// of x per sequence and the primitive ones a column of tokens, from the same blocks.
#[test]
fn quantized_weights_in_a_paged_batch() {
    let mut m = model(8, 2, 64, 7);
    m.weights = decoder::gguf::quantize::quantize_weights(
        &m.config,
        &m.weights,
        decoder::gguf::quantize::QuantScheme::Q4_1,
    )
    .expect("quantize");
    let types = decoder::exec::program::WeightTypes::of(&m.weights).describe();
    assert_eq!(types, "q8_0+q4_1");
    m.name = format!("{} {types}", m.name);
    let prompts: Vec<Vec<u32>> = [29usize, 12]
        .iter()
        .enumerate()
        .map(|(i, &len)| prompt(len, 30 + i as u64, m.config.vocab))
        .collect();
    let steps = GENERIC_STEPS;
    let want = reference(&m, &prompts, steps, &contiguous(2));
    for (preset, knobs, kv) in [
        (
            "fused preset paged:16 fused",
            Knobs::preset(Mode::Fused),
            paged(16, PagedAttention::Fused, 2),
        ),
        (
            "generic preset paged:32 gather",
            Knobs::preset(Mode::Generic),
            paged(32, PagedAttention::Gather, 2),
        ),
    ] {
        let got = on_gpu(&m, knobs, kv, &prompts, steps);
        assert_matches(&format!("{} {preset}", m.name), &got, &want);
    }
}
