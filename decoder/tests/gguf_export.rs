//! `decoder export-gguf` of a model with Llama 3 RoPE scaling: llama.cpp reads the scaling from a
//! `rope_freqs` tensor (one factor per pair of dimensions that divides its frequency), which the
//! export computes from `rope_scaling`. The expected factors here follow llama.cpp's converter
//! (`convert_hf_to_gguf.py`, `LlamaModel.generate_extra_tensors`), written out independently of
//! the decoder's own RoPE code.

use decoder::gguf::GgufFile;
use decoder::gguf::dequant::GgmlType;
use decoder::gguf::export::{ExportDtype, export_gguf};
use decoder::gguf::{ImportOptions, import_gguf, load_gguf_model};

/// The converter's factors for `head_dim`, `base` and `[factor, low_freq_factor,
/// high_freq_factor, original_max_position_embeddings]`.
fn converter_factors(
    head_dim: usize,
    base: f64,
    [factor, low, high, old_ctx]: [f64; 4],
) -> Vec<f64> {
    let low_freq_wavelen = old_ctx / low;
    let high_freq_wavelen = old_ctx / high;
    (0..head_dim)
        .step_by(2)
        .map(|i| {
            let freq = 1.0 / base.powf(i as f64 / head_dim as f64);
            let wavelen = 2.0 * std::f64::consts::PI / freq;
            if wavelen < high_freq_wavelen {
                1.0
            } else if wavelen > low_freq_wavelen {
                factor
            } else {
                let smooth = (old_ctx / wavelen - low) / (high - low);
                1.0 / ((1.0 - smooth) / factor + smooth)
            }
        })
        .collect()
}

#[test]
fn llama3_rope_scaling_is_exported_as_llamacpp_rope_freqs() {
    let dir = decoder::model::resolve_model("tiny-llama").expect("preset");
    let config: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("config.json")).expect("config.json"),
    )
    .expect("json");
    let scaling = &config["rope_scaling"];
    let number = |v: &serde_json::Value| v.as_f64().expect("a number");
    let head_dim = config["hidden_size"].as_u64().expect("hidden_size")
        / config["num_attention_heads"].as_u64().expect("heads");
    let head_dim = config["head_dim"].as_u64().unwrap_or(head_dim) as usize;
    let want = converter_factors(
        head_dim,
        number(&config["rope_theta"]),
        [
            number(&scaling["factor"]),
            number(&scaling["low_freq_factor"]),
            number(&scaling["high_freq_factor"]),
            number(&scaling["original_max_position_embeddings"]),
        ],
    );
    // The synthetic model's scaling reaches all three regimes, so the test sees each.
    assert!(want.contains(&1.0), "{want:?}");
    assert!(
        want.iter().any(|&f| f == number(&scaling["factor"])),
        "{want:?}"
    );
    assert!(
        want.iter()
            .any(|&f| f > 1.0 && f < number(&scaling["factor"])),
        "{want:?}"
    );

    let tmp = tempfile::tempdir().expect("tempdir");
    for dtype in [ExportDtype::F16, ExportDtype::Q8_0] {
        let out = tmp.path().join(format!("tiny-llama-{dtype:?}.gguf"));
        export_gguf(&dir, &out, dtype).expect("export");
        let gguf = GgufFile::open(&out).expect("open");
        // The synthetic Llama's byte-level pre-tokenizer under the name llama.cpp knows.
        assert_eq!(
            gguf.get("tokenizer.ggml.pre").and_then(|v| v.as_str()),
            Some("gpt-2")
        );
        // Llama 3 puts BOS first through tokenizer.json's post-processor (its
        // tokenizer_config.json has no add_bos_token), and llama.cpp must do the same.
        assert_eq!(
            gguf.get("tokenizer.ggml.add_bos_token")
                .and_then(|v| v.as_bool()),
            Some(true)
        );
        let info = gguf.tensor("rope_freqs.weight").expect("rope_freqs.weight");
        assert_eq!(info.ggml_type, GgmlType::F32);
        assert_eq!(info.dims, vec![(head_dim / 2) as u64]);
        let bytes = gguf.read_tensor_data(info).expect("read");
        let got: Vec<f32> = bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (*g as f64 - w).abs() <= 1e-6 * w.abs(),
                "{dtype:?} pair {i}: exported {g}, the converter's {w}"
            );
        }
    }
}

#[test]
fn a_model_without_rope_scaling_has_no_rope_freqs() {
    let dir = decoder::model::resolve_model("tiny").expect("preset");
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = tmp.path().join("tiny.gguf");
    export_gguf(&dir, &out, ExportDtype::F16).expect("export");
    let gguf = GgufFile::open(&out).expect("open");
    assert!(gguf.tensor("rope_freqs.weight").is_none());
    // Qwen3 adds no BOS.
    assert_eq!(
        gguf.get("tokenizer.ggml.add_bos_token")
            .and_then(|v| v.as_bool()),
        Some(false)
    );
}

/// The Llama 3 scaling a GGUF's `rope_freqs` carries comes back as the same RoPE frequencies,
/// whether the file is imported into a checkpoint or run as it is, at f16 and quantized.
#[test]
fn a_gguf_with_rope_freqs_loads_with_the_same_rope_frequencies() {
    let dir = decoder::model::resolve_model("tiny-llama").expect("preset");
    let want = decoder::model::ModelConfig::from_dir(&dir)
        .expect("config")
        .rope_inv_freq();
    let tmp = tempfile::tempdir().expect("tempdir");
    let same = |got: &[f32], how: &str| {
        assert_eq!(got.len(), want.len(), "{how}");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (g - w).abs() <= 2e-6 * w.abs(),
                "{how}: pair {i} has inverse frequency {g}, the checkpoint's {w}"
            );
        }
    };
    for dtype in [ExportDtype::F16, ExportDtype::Q4_0] {
        let out = tmp.path().join(format!("tiny-llama-{dtype:?}.gguf"));
        export_gguf(&dir, &out, dtype).expect("export");
        let model = load_gguf_model(&out).expect("run as it is");
        same(&model.config.rope_inv_freq(), &format!("{dtype:?}, loaded"));
        let ckpt = tmp.path().join(format!("imported-{dtype:?}"));
        import_gguf(
            &out,
            &ckpt,
            &ImportOptions::default(),
            &indicatif::ProgressBar::hidden(),
        )
        .expect("import");
        let config = decoder::model::ModelConfig::from_dir(&ckpt).expect("imported config");
        same(&config.rope_inv_freq(), &format!("{dtype:?}, imported"));
    }
}

/// A `rope_freqs` that does not follow Llama 3's rule is refused with the tensor's name, not
/// approximated.
#[test]
fn a_rope_freqs_off_llama_3s_rule_is_refused() {
    let dir = decoder::model::resolve_model("tiny-llama").expect("preset");
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = tmp.path().join("tiny-llama.gguf");
    export_gguf(&dir, &out, ExportDtype::F16).expect("export");
    let (at, factors) = {
        let gguf = GgufFile::open(&out).expect("open");
        let info = gguf.tensor("rope_freqs.weight").expect("rope_freqs.weight");
        let bytes = gguf.read_tensor_data(info).expect("read");
        (gguf.data_start() + info.offset, bytes)
    };
    // The highest frequency (pair 0), which Llama 3 leaves unchanged, divided by a factor
    // between the two regimes, while lower frequencies stay unchanged: no rising line fits that.
    let values: Vec<f32> = factors
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    assert_eq!(values[0], 1.0);
    let max = values.iter().cloned().fold(1.0f32, f32::max);
    let mut file = std::fs::read(&out).expect("read gguf");
    let p = at as usize;
    file[p..p + 4].copy_from_slice(&f32::midpoint(1.0, max).to_le_bytes());
    let bent = tmp.path().join("bent.gguf");
    std::fs::write(&bent, file).expect("write");
    let e = match load_gguf_model(&bent) {
        Ok(_) => panic!("{}: a bent rope_freqs was accepted", bent.display()),
        Err(e) => e.to_string(),
    };
    assert!(
        e.contains("rope_freqs.weight") && e.contains("bent.gguf"),
        "{e}"
    );
}
