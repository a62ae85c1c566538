//! The synthetic presets stay well behaved over thousands of positions: finite logits with a
//! spread that neither vanishes nor explodes, and greedy decoding that keeps producing varied
//! tokens instead of locking onto one.
#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is a test failure.

mod model_support;

use decoder::generate::argmax;
use decoder::model::synth::SynthOptions;
use decoder::model::{Model, Preset};
use model_support::synth;

fn check(preset: Preset, positions: usize) {
    let (_t, dir) = synth(preset, &SynthOptions::default());
    let model = Model::load(&dir).unwrap();
    let mut reference = model.reference(positions).unwrap();
    let mut token = model.tokenizer.encode("Once", true).unwrap()[0];
    let mut generated = Vec::with_capacity(positions);
    for pos in 0..positions {
        let logits = reference.forward(token, pos).unwrap();
        assert!(
            logits.iter().all(|v| v.is_finite()),
            "{} pos {pos}",
            preset.name()
        );
        if pos % 256 == 0 || pos + 1 == positions {
            let mean = logits.iter().sum::<f32>() / logits.len() as f32;
            let var = logits.iter().map(|v| (v - mean).powi(2)).sum::<f32>() / logits.len() as f32;
            let std = var.sqrt();
            // The synthetic scales aim at a logit std of about 3.
            assert!(
                (0.5..20.0).contains(&std),
                "{} pos {pos}: logit std {std}",
                preset.name()
            );
        }
        token = argmax(logits);
        generated.push(token);
    }
    let tail = &generated[positions / 2..];
    let distinct: std::collections::BTreeSet<_> = tail.iter().collect();
    eprintln!(
        "{}: {} distinct tokens among the last {} greedy tokens",
        preset.name(),
        distinct.len(),
        tail.len()
    );
    assert!(
        distinct.len() >= 20,
        "{}: greedy decoding collapsed to {} distinct tokens",
        preset.name(),
        distinct.len()
    );
}

#[test]
fn tiny_stays_finite_and_varied_over_2048_positions() {
    check(Preset::Tiny, 2048);
}

#[test]
fn tiny_llama_stays_finite_and_varied_over_2048_positions() {
    check(Preset::TinyLlama, 2048);
}
