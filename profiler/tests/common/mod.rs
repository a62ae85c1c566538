//! Shared test helpers: the committed fixture traces and golden-file comparison.
//!
//! Fixtures live in `tests/data/v1/` (format version 1). They are built by [`fixture_options`]
//! with `profiler::synthetic_trace` and committed. A missing fixture fails the test (today's
//! writer would make a trace of today's format, not a version-1 one); `UPDATE_TRACES=1`
//! regenerates all of them, on purpose. Golden outputs live in `tests/data/golden/` and are
//! compared exactly; `UPDATE_GOLDEN=1 cargo test -p profiler` rewrites them (review the diff).

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use profiler::{SynthKernels, SynthOptions, SynthSubmit, SynthTimestamps, Trace};

pub fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("data")
}

pub fn fixture_dir() -> PathBuf {
    data_dir().join("v1")
}

/// Every committed fixture and how it was made.
pub fn fixture_options(name: &str) -> SynthOptions {
    let small = SynthOptions {
        layers: 2,
        prompt_tokens: 4,
        decode_tokens: 8,
        ..SynthOptions::default()
    };
    match name {
        "generic" => SynthOptions {
            kernels: SynthKernels::Primitive,
            submit: SynthSubmit::PerLayer,
            seed: 1,
            ..small
        },
        "generic_extra_submit" => SynthOptions {
            kernels: SynthKernels::Primitive,
            submit: SynthSubmit::PerLayer,
            extra_submits_per_token: 1,
            seed: 1,
            ..small
        },
        "fused" => SynthOptions {
            kernels: SynthKernels::Fused,
            submit: SynthSubmit::PerToken,
            seed: 2,
            ..small
        },
        "fused_region_uncalibrated" => SynthOptions {
            kernels: SynthKernels::Fused,
            submit: SynthSubmit::PerToken,
            timestamps: SynthTimestamps::Region,
            calibrated: false,
            seed: 3,
            ..small
        },
        other => panic!("no fixture {other}"),
    }
}

pub const FIXTURES: [&str; 4] = [
    "generic",
    "generic_extra_submit",
    "fused",
    "fused_region_uncalibrated",
];

/// Path of a committed fixture; with `UPDATE_TRACES=1` it is regenerated first. A missing one
/// fails: the golden files were made from the committed version-1 traces.
pub fn fixture_path(name: &str) -> PathBuf {
    let path = fixture_dir().join(format!("{name}.json"));
    if std::env::var_os("UPDATE_TRACES").is_some() {
        let trace = profiler::synthetic_trace(&fixture_options(name));
        profiler::write_trace(&path, &trace).expect("write fixture");
    }
    assert!(
        path.is_file(),
        "the version-1 fixture {} is missing: restore it from git (git checkout -- {}); \
         `UPDATE_TRACES=1 cargo test -p profiler` writes new ones in today's format on purpose",
        path.display(),
        path.display()
    );
    path
}

pub fn fixture(name: &str) -> Trace {
    profiler::read_trace(&fixture_path(name)).expect("read fixture")
}

/// Compares `actual` with the golden file `name`, or rewrites it with `UPDATE_GOLDEN=1`.
pub fn check_golden(name: &str, actual: &str) {
    let path = data_dir().join("golden").join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).expect("write golden file");
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read golden file {}: {e}; run `UPDATE_GOLDEN=1 cargo test -p profiler` to create it",
            path.display()
        )
    });
    if expected != actual {
        let first = expected
            .lines()
            .zip(actual.lines())
            .position(|(e, a)| e != a)
            .unwrap_or(expected.lines().count().min(actual.lines().count()));
        panic!(
            "{} differs from the output at line {}:\n  golden: {:?}\n  actual: {:?}\n\
             If the change is intended, run `UPDATE_GOLDEN=1 cargo test -p profiler` and review the diff.",
            path.display(),
            first + 1,
            expected.lines().nth(first),
            actual.lines().nth(first)
        );
    }
}

/// Runs the `profiler` binary in the fixture directory.
pub fn run_profiler(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_profiler"))
        .args(args)
        .current_dir(fixture_dir())
        .output()
        .expect("run profiler")
}

/// A llama.cpp-like capture of a foreign program, as `profiler record` writes it without op-kind
/// rules: `meta.capture` present, knobs and model unknown, every dispatch of kind `dispatch` and
/// named like a ggml-vulkan pipeline (one name per kind, shared by every layer). Its timings are
/// those of the synthetic primitive preset (`seed`); `untimed` dispatches of every decode step
/// have no GPU span.
pub fn llama_like(seed: u64, untimed: u64) -> Trace {
    let mut t = profiler::synthetic_trace(&SynthOptions {
        seed,
        ..fixture_options("generic")
    });
    t.meta.capture = Some(profiler::CaptureMeta {
        program: "llama-server".into(),
        untimed_dispatches: untimed * 9,
        ..Default::default()
    });
    let u = || profiler::UNKNOWN.to_owned();
    t.meta.knobs = profiler::Knobs {
        mode: u(),
        submit: u(),
        sync: u(),
        descriptors: u(),
        barriers: u(),
        kernels: u(),
        recording: u(),
    };
    t.meta.model.name = u();
    t.meta.model.architecture = u();
    for op in &mut t.ops {
        let name = match op.kind.as_str() {
            "matvec" => "mul_mat_vec_q4_k_f32_f32_1",
            "norm" => "rms_norm_mul_f32",
            "rope" => "rope_neox_f32",
            "attention" => "flash_attn_f32_f16_D64_cm2",
            "kv" => "set_rows_f16_i64",
            "elementwise" => "add_f32_f32_f32_norepeat",
            "embed" => "get_rows_f16",
            "copy" => "cpy_f32_f16",
            "argmax" => "argmax_f32",
            _ => continue,
        };
        // The layer knows no byte or flop facts.
        *op = profiler::OpInfo {
            label: name.to_owned(),
            kind: "dispatch".to_owned(),
            ..Default::default()
        };
    }
    for r in t
        .tokens
        .iter_mut()
        .filter(|r| r.phase == profiler::Phase::Decode)
    {
        r.gpu_untimed = untimed;
    }
    t
}
