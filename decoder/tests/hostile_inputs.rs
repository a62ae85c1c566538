//! Inputs a hostile but fair user gives (issue 38): each is refused at once with a sentence that
//! names the field or flag, the value, the limit and what to do, before memory is spent or a run
//! starts; outputs are checked before the work and never replace what is not a regular file.

#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is a test failure.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use decoder::model::{Model, ModelConfig};

fn decoder(cache: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_decoder"))
        .args(args)
        .env("DECODESCOPE_CACHE", cache)
        .output()
        .unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A fresh `tiny` checkpoint (4 layers) in `tmp/name`.
fn tiny(tmp: &Path, name: &str) -> PathBuf {
    let dir = tmp.join(name);
    let out = decoder(
        tmp,
        &["synth", "--preset", "tiny", "--out", dir.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    dir
}

/// Sets `field` of `dir/config.json` to `value`.
fn set_config(dir: &Path, field: &str, value: serde_json::Value) {
    let path = dir.join("config.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    v[field] = value;
    std::fs::write(&path, serde_json::to_string_pretty(&v).unwrap()).unwrap();
}

fn load_err(dir: &Path) -> String {
    match Model::load(dir) {
        Ok(_) => panic!("{} loaded", dir.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_billion_layers_in_the_config_fail_at_once() {
    // Listed every expected tensor before checking any: 23 GB before it was stopped.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tiny(tmp.path(), "m");
    set_config(&dir, "num_hidden_layers", 1_000_000_000.into());
    let msg = load_err(&dir);
    assert!(
        msg.contains("num_hidden_layers = 1000000000")
            && msg.contains("4 layers")
            && msg.contains("config.json"),
        "{msg}"
    );
}

#[test]
fn a_checkpoint_with_more_layers_than_its_config_is_refused() {
    // Ran without a word on the first 3 of 4 layers, with different output.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tiny(tmp.path(), "m");
    set_config(&dir, "num_hidden_layers", 3.into());
    let msg = load_err(&dir);
    assert!(
        msg.contains("num_hidden_layers = 3") && msg.contains("4 layers"),
        "{msg}"
    );
}

#[test]
fn max_position_embeddings_below_the_minimum_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tiny(tmp.path(), "m");
    for bad in [0, 5] {
        set_config(&dir, "max_position_embeddings", bad.into());
        let msg = match ModelConfig::from_dir(&dir) {
            Ok(c) => panic!("accepted max_position_embeddings {bad}: {c:?}"),
            Err(e) => e.to_string(),
        };
        assert!(
            msg.contains(&format!("max_position_embeddings = {bad}")) && msg.contains("16"),
            "{msg}"
        );
    }
}

#[test]
fn absurd_sizes_in_the_config_are_refused_without_overflow() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tiny(tmp.path(), "m");
    set_config(&dir, "vocab_size", u64::MAX.into());
    let msg = load_err(&dir);
    assert!(msg.contains("vocab_size"), "{msg}");
    set_config(&dir, "vocab_size", 4096.into());
    set_config(&dir, "intermediate_size", (1u64 << 40).into());
    let msg = load_err(&dir);
    assert!(msg.contains("intermediate_size"), "{msg}");
}

#[test]
fn huge_context_and_token_counts_are_refused_before_allocating() {
    // Aborted with `memory allocation of 17179869180 bytes failed` (exit 134), or ran for
    // minutes past max_position_embeddings.
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("t.json");
    let out = out.to_str().unwrap();
    for (flag, value, needle) in [
        ("--context", "4294967295", "--context 4294967295"),
        ("--max-tokens", "4294967295", "--max-tokens 4294967295"),
        ("--context", "40000", "--context 40000"),
        ("--max-tokens", "18446744073709551615", "--max-tokens"),
    ] {
        let r = decoder(
            tmp.path(),
            &[
                "capture", "--model", "tiny", "--mode", "generic", flag, value, "--out", out,
            ],
        );
        let e = stderr(&r);
        assert_eq!(r.status.code(), Some(1), "{flag} {value}: {e}");
        assert!(
            e.contains(needle) && e.contains("max_position_embeddings = 32768"),
            "{flag} {value}: {e}"
        );
        assert!(!e.contains("capturing"), "{flag} {value} started: {e}");
    }
}

#[test]
fn an_unwritable_out_is_refused_before_the_capture() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nodir/x.json");
    let r = decoder(
        tmp.path(),
        &[
            "capture",
            "--model",
            "tiny",
            "--mode",
            "generic",
            "--out",
            missing.to_str().unwrap(),
        ],
    );
    let e = stderr(&r);
    assert!(!r.status.success(), "{e}");
    assert!(
        e.contains("--out") && e.contains("nodir") && e.contains("does not exist"),
        "{e}"
    );
    assert!(!e.contains("capturing"), "the capture ran first: {e}");

    // --mode both: the directory's parent must exist (only the last component is created).
    let r = decoder(
        tmp.path(),
        &[
            "capture",
            "--model",
            "tiny",
            "--out",
            tmp.path().join("a/b").to_str().unwrap(),
        ],
    );
    let e = stderr(&r);
    assert!(!r.status.success() && e.contains("mkdir -p"), "{e}");
    assert!(!tmp.path().join("a").exists());

    // --mode both into a file.
    let file = tmp.path().join("file");
    std::fs::write(&file, "x").unwrap();
    let r = decoder(
        tmp.path(),
        &[
            "capture",
            "--model",
            "tiny",
            "--out",
            file.to_str().unwrap(),
        ],
    );
    let e = stderr(&r);
    assert!(!r.status.success() && e.contains("directory"), "{e}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "x");
}

#[test]
fn paged_flags_without_the_paged_layout_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("t.json");
    for flags in [
        &["--block-size", "32"][..],
        &["--paged-attention", "gather"][..],
        &["--kv", "rotating", "--window", "64", "--block-size", "16"][..],
    ] {
        let mut args = vec![
            "capture",
            "--model",
            "tiny",
            "--mode",
            "generic",
            "--out",
            out.to_str().unwrap(),
        ];
        args.extend_from_slice(flags);
        let r = decoder(tmp.path(), &args);
        let e = stderr(&r);
        assert!(!r.status.success(), "{flags:?}: {e}");
        assert!(
            e.contains("--kv paged") && e.contains(flags[flags.len() - 2]),
            "{flags:?}: {e}"
        );
    }
}

/// `--mode both` into a directory that already holds a pair: both traces are written beside their
/// names and renamed into place together once both captures have run, so the pair is always from
/// one run (a failed run leaves the old pair), and nothing else is left in the directory.
#[test]
fn both_modes_replace_a_previous_pair_together() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pair");
    let prompt_of = |mode: &str| -> String {
        let t = profiler::read_trace(&dir.join(format!("{mode}.json"))).unwrap();
        t.meta.run.prompt
    };
    for prompt in ["first run", "second run"] {
        let r = decoder(
            tmp.path(),
            &[
                "capture",
                "--model",
                "tiny",
                "--max-tokens",
                "2",
                "--no-probe",
                "--prompt",
                prompt,
                "--out",
                dir.to_str().unwrap(),
            ],
        );
        assert!(r.status.success(), "{}", stderr(&r));
        assert_eq!(prompt_of("generic"), prompt);
        assert_eq!(prompt_of("fused"), prompt);
    }
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["fused.json", "generic.json"]);
    // That a staged trace dropped uncommitted (a run that fails after its first capture) leaves
    // the old file is tested in profiler/tests/outputs.rs.
}

/// `--out` naming a character device (here one made with mknod with /dev/null's numbers) is
/// written in place: the device is still a device afterwards, never replaced by a regular file.
#[test]
fn a_capture_into_a_device_leaves_the_device() {
    use std::os::unix::fs::FileTypeExt as _;
    let tmp = tempfile::tempdir().unwrap();
    let dev = tmp.path().join("null");
    let made = Command::new("mknod")
        .arg(&dev)
        .args(["c", "1", "3"])
        .status()
        .is_ok_and(|s| s.success());
    if !made {
        eprintln!("skipped: mknod needs root");
        return;
    }
    let r = decoder(
        tmp.path(),
        &[
            "capture",
            "--model",
            "tiny",
            "--mode",
            "generic",
            "--max-tokens",
            "2",
            "--no-probe",
            "--out",
            dev.to_str().unwrap(),
        ],
    );
    assert!(r.status.success(), "{}", stderr(&r));
    let t = std::fs::symlink_metadata(&dev).unwrap().file_type();
    assert!(t.is_char_device(), "{t:?}");
}
