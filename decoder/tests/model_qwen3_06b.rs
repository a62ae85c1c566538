//! `decoder synth --preset qwen3-0.6b` writes a checkpoint with Qwen3-0.6B's parameter count
//! (596,049,920 with the tied embedding), and `decoder run --backend cpu` runs it. Writes
//! 1.2 GB to a temporary directory and needs about 2.5 GB of memory.
#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is a test failure.

use std::process::Command;

use decoder::model::safetensors_io::SafetensorsFile;

#[test]
fn qwen3_0_6b_synth_has_the_real_parameter_count_and_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("qwen3-0.6b");
    let bin = env!("CARGO_BIN_EXE_decoder");
    let out = Command::new(bin)
        .args(["synth", "--preset", "qwen3-0.6b", "--out"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Count from what was written, not from the config.
    let file = SafetensorsFile::open(&dir.join("model.safetensors")).unwrap();
    let mut params = 0u64;
    for name in file.names() {
        let info = file.info(&name).unwrap();
        assert_eq!(info.dtype, safetensors::Dtype::BF16, "{name}");
        params += info.shape.iter().product::<usize>() as u64;
    }
    assert_eq!(params, 596_049_920);
    assert!(file.info("lm_head.weight").is_none(), "tied: no lm_head");
    assert_eq!(file.names().len(), 1 + 28 * 11 + 1);

    let out = Command::new(bin)
        .args(["run", "--backend", "cpu", "--max-tokens", "2", "--model"])
        .arg(&dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("generated 2 tokens"), "{stderr}");
}
