//! The persistent kernel under tuning overrides (`--tuning`) that a one-workgroup CPU grid does not
//! reach by itself, with `decoder run`'s flags parsed as the command line parses them: greedy
//! steps on tiny against the CPU reference, identical tokens, logits within a relative RMS of
//! 5e-3 at every step, and no message from the validation layer (caught by its debug-utils
//! callback, [`common::with_gpu`]).
//! - Many splits per (row, KV head), so the merge gives a lane several splits and the lane
//!   rescales its running max between them (and the subgroups meet at the largest of their
//!   maxima). A GPU grid gets there past 32 splits a workgroup; the CPU grid with the
//!   `persistent_wg` and `persistent_splits` overrides.
//! - Head groups (`persistent_head_groups=2`): a subgroup per query head of each attention unit
//!   (tiny has 4 query heads per KV head). A GPU grid takes them at short contexts; the CPU
//!   grid's 8 subgroups only with the override. With each KV layout the kernel reads.
//! - Workgroups of 1024 (`persistent_wg=1024`), which a GPU takes for a Q8_0 model at short
//!   contexts (`Tuning::for_weights`): on tiny exported at Q8_0.
#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is a test failure.

mod common;

use clap::Parser as _;
use decoder::cli::run::{Args, load_model, prompt_ids};
use decoder::exec::engine::Engine;
use decoder::generate::{Backend, Generation, generate};
use decoder::model::Model;

/// `decoder run`'s arguments.
#[derive(clap::Parser)]
struct Run {
    #[command(flatten)]
    args: Args,
}

/// `decoder run --model MODEL --max-tokens STEPS --ignore-eos FLAGS`, parsed.
fn run_args(model: &str, steps: u32, flags: &[&str]) -> Args {
    let steps = steps.to_string();
    let line = [
        "decoder-run",
        "--model",
        model,
        "--max-tokens",
        &steps,
        "--ignore-eos",
    ];
    Run::try_parse_from(line.iter().chain(flags)).unwrap().args
}

/// Generates under `args` with `backend`, keeping every step's logits.
fn generate_with(backend: &mut dyn Backend, model: &Model, args: &Args) -> Generation {
    let ids = prompt_ids(model, &args.prompt).unwrap();
    let mut opts = args.generation.options();
    opts.dump_logits = true;
    generate(backend, &model.tokenizer, &ids, &opts, &mut |_| {}).unwrap()
}

/// `steps` greedy steps of the persistent kernel on tiny with `kv` (the cache flags) under
/// `tuning` against the CPU reference on the same cache layout.
fn check(steps: u32, kv: &[&str], tuning: &str) {
    check_model("tiny", steps, kv, tuning);
}

/// [`check`] on `name` (a model name or a GGUF file).
fn check_model(name: &str, steps: u32, kv: &[&str], tuning: &str) {
    let model = load_model(name).unwrap();
    let cpu_args = run_args(name, steps, kv);
    let prompt_tokens = prompt_ids(&model, &cpu_args.prompt).unwrap().len();
    let mut cpu = cpu_args.reference(&model, prompt_tokens).unwrap();
    let want = generate_with(&mut cpu, &model, &cpu_args);

    let mut flags = vec!["--backend", "vulkan", "--kernels", "persistent"];
    flags.extend_from_slice(kv);
    flags.extend_from_slice(&["--tuning", tuning]);
    let gpu_args = run_args(name, steps, &flags);
    let max_seq = (prompt_tokens + steps as usize + 2) as u32;
    let got = common::with_gpu(|gpu| {
        let mut opts = gpu_args.engine_options(max_seq).unwrap();
        opts.logits_readback = true;
        let mut engine = Engine::new(gpu, &model.config, &model.weights, opts).unwrap();
        generate_with(&mut engine, &model, &gpu_args)
    });

    assert_eq!(
        got.ids, want.ids,
        "{tuning} {kv:?}: greedy tokens differ from the CPU reference"
    );
    assert!(
        want.ids.len() >= steps as usize / 2,
        "only {} steps",
        want.ids.len()
    );
    let v = want.vocab;
    for (step, (g, w)) in got.logits.chunks(v).zip(want.logits.chunks(v)).enumerate() {
        let num: f64 = g.iter().zip(w).map(|(x, y)| ((x - y) as f64).powi(2)).sum();
        let den: f64 = w.iter().map(|y| (*y as f64).powi(2)).sum();
        let e = (num / den.max(1e-30)).sqrt();
        assert!(
            e < 5e-3,
            "{tuning} {kv:?}: step {step}: logits relative RMS {e:.3e}"
        );
    }
}

// Workgroups of 32 on 8 lanes: 4 subgroups of 8 lanes, 32 splits a round; one split per block of
// 8 positions (up to 64), so from position 256 on some lanes take two splits.
const ROUNDS: &str = "persistent_wg=32,persistent_splits=64";

#[test]
fn merge_rounds_match_the_reference() {
    check(300, &[], &format!("{ROUNDS},persistent_head_groups=1"));
}

/// The same with a subgroup per query head (the grid's rule takes them here: a unit per block).
#[test]
fn merge_rounds_with_head_groups_match_the_reference() {
    check(300, &[], ROUNDS);
}

/// Head groups with one split per KV head (the default split plan on one workgroup), so each
/// unit scores many blocks, its first one staged; on the contiguous f32 cache, a paged f16 one
/// read in place, and a rotating window. (A window of 64 meets a near tie at step 129: the top two
/// logits 0.002 apart, which round-off of either kernel order flips.)
#[test]
fn head_groups_match_the_reference_on_each_kv_layout() {
    for kv in [
        &[][..],
        &[
            "--kv",
            "paged",
            "--block-size",
            "16",
            "--paged-attention",
            "fused",
            "--kv-dtype",
            "f16",
        ][..],
        &["--kv", "rotating", "--window", "48"][..],
    ] {
        check(200, kv, "persistent_head_groups=2");
    }
}

/// The kernels that a GPU runs in workgroups of 1024 at short contexts (`Tuning::for_weights`),
/// at that size: tiny exported by `decoder export-gguf --dtype q8_0` and `--dtype q4_0` (their
/// matrices stay in their blocks; Q4_0's lm_head is Q6_K, as llama-quantize writes it).
#[test]
fn wide_workgroup_kernels_match_the_reference() {
    use decoder::gguf::export::{ExportDtype, export_gguf};
    let tmp = tempfile::tempdir().unwrap();
    let dir = decoder::model::resolve_model("tiny").unwrap();
    for (dtype, types) in [
        (ExportDtype::Q8_0, "q8_0"),
        (ExportDtype::Q4_0, "q4_0+q6_k"),
    ] {
        let file = tmp.path().join(format!("tiny-{types}.gguf"));
        export_gguf(&dir, &file, dtype).unwrap();
        let name = file.display().to_string();
        let w = decoder::exec::program::WeightTypes::of(&load_model(&name).unwrap().weights);
        assert_eq!(w.describe(), types, "the weight types of {name}");
        check_model(&name, 200, &[], "persistent_wg=1024");
    }
}
