//! `decoder synth` and `decoder run --backend cpu` end to end, with presets generated into a
//! private cache on first use.
#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is a test failure.

use std::path::Path;
use std::process::{Command, Output};

use decoder::generate::read_dump;

fn decoder(cache: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_decoder"))
        .args(args)
        .env("DECODESCOPE_CACHE", cache)
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn synth_then_run_with_dump() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("tl");
    let dir_s = dir.to_str().unwrap();
    let out = decoder(
        tmp.path(),
        &["synth", "--preset", "tiny-llama", "--out", dir_s],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("parameters"));
    // Writing over an existing directory is refused.
    let again = decoder(
        tmp.path(),
        &["synth", "--preset", "tiny-llama", "--out", dir_s],
    );
    assert!(!again.status.success());
    assert!(text(&again.stderr).contains("already exists"));

    let dump = tmp.path().join("d.safetensors");
    let out = decoder(
        tmp.path(),
        &[
            "run",
            "--backend",
            "cpu",
            "--model",
            dir_s,
            "--prompt",
            "The quick brown fox",
            "--max-tokens",
            "16",
            "--ignore-eos",
            "--dump",
            dump.to_str().unwrap(),
        ],
    );
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!text(&out.stdout).trim().is_empty());
    assert!(
        stderr.contains("generated 16 tokens") && stderr.contains("tokens/s"),
        "{stderr}"
    );
    let d = read_dump(&dump).unwrap();
    assert_eq!(d.ids.len(), 16);
    assert_eq!(d.vocab, 3000);
    assert_eq!(d.logits.len(), 16 * 3000);
}

#[test]
fn presets_are_generated_once_into_the_cache_even_when_racing() {
    let cache = tempfile::tempdir().unwrap();
    // First use of `tiny`: generated, then reused.
    for _ in 0..2 {
        let out = decoder(
            cache.path(),
            &["run", "--model", "tiny", "--max-tokens", "4"],
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    // Three processes racing on the first use of `tiny-llama`.
    let spawned: Vec<_> = (0..3)
        .map(|i| {
            Command::new(env!("CARGO_BIN_EXE_decoder"))
                .args(["run", "--model", "tiny-llama", "--max-tokens", "4"])
                .env("DECODESCOPE_CACHE", cache.path())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap_or_else(|e| panic!("spawn {i}: {e}"))
        })
        .collect();
    let mut stdouts = vec![];
    for child in spawned {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        stdouts.push(out.stdout);
    }
    assert!(
        stdouts.windows(2).all(|w| w[0] == w[1]),
        "same model, same text"
    );
    let models = cache.path().join("models");
    let mut entries: Vec<String> = std::fs::read_dir(&models)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    entries.sort();
    assert_eq!(
        entries,
        vec!["tiny", "tiny-llama"],
        "no temporary directories left"
    );
    assert!(models.join("tiny-llama/model.safetensors").is_file());
}

#[test]
fn chat_prompt_runs() {
    let cache = tempfile::tempdir().unwrap();
    let out = decoder(
        cache.path(),
        &["run", "--chat", "--prompt", "Hi", "--max-tokens", "3"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let model = decoder::model::Model::load(&cache.path().join("models/tiny")).unwrap();
    let ids = model.tokenizer.encode_prompt("Hi", true).unwrap();
    assert!(ids.len() > 7, "the template wraps the message: {ids:?}");
    let want = format!("prompt {} tokens", ids.len());
    assert!(text(&out.stderr).contains(&want), "{}", text(&out.stderr));
}

#[test]
fn unknown_models_say_what_to_do() {
    let cache = tempfile::tempdir().unwrap();
    let out = decoder(cache.path(), &["run", "--model", "smollm2"]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("scripts/setup.sh") && err.contains("import-gguf"),
        "{err}"
    );

    let out = decoder(cache.path(), &["run", "--model", "no-such-model"]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("no-such-model") && err.contains("tiny-llama") && err.contains("qwen3-0.6b"),
        "{err}"
    );
}
