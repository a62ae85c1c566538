//! Both architectures load from either config.json layout, in BF16, F16 and F32, from one file
//! or sharded, and give the same weights and logits.
#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is a test failure.

mod model_support;

use decoder::model::config::{ConfigFile, WeightDtype};
use decoder::model::synth::{ConfigLayout, SynthOptions};
use decoder::model::weights::INDEX_FILE;
use decoder::model::{Arch, Model, Preset};
use model_support::{cached_logits, synth};

fn variants() -> Vec<(WeightDtype, usize, ConfigLayout)> {
    vec![
        (WeightDtype::Bf16, 1, ConfigLayout::Transformers5),
        (WeightDtype::Bf16, 4, ConfigLayout::Transformers4),
        (WeightDtype::F16, 1, ConfigLayout::Transformers5),
        (WeightDtype::F16, 3, ConfigLayout::Transformers4),
        (WeightDtype::F32, 1, ConfigLayout::Transformers4),
        (WeightDtype::F32, 2, ConfigLayout::Transformers5),
    ]
}

#[test]
fn every_layout_dtype_and_sharding_gives_identical_logits() {
    for preset in [Preset::Tiny, Preset::TinyLlama] {
        let (_base_tmp, base_dir) = synth(preset, &SynthOptions::default());
        let base = Model::load(&base_dir).unwrap();
        let tokens = base
            .tokenizer
            .encode(
                "The quick brown fox jumps over the lazy dog. Über café 日本",
                true,
            )
            .unwrap();
        assert!(tokens.len() > 8, "{tokens:?}");
        let expected = cached_logits(&base, &tokens);

        for (dtype, shards, layout) in variants() {
            let what = format!("{} {dtype:?} {shards} shard(s) {layout:?}", preset.name());
            let opts = SynthOptions {
                dtype,
                shards,
                layout,
                ..SynthOptions::default()
            };
            let (_tmp, dir) = synth(preset, &opts);
            let files: Vec<String> = std::fs::read_dir(&dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            let shard_files = files.iter().filter(|f| f.starts_with("model-")).count();
            if shards > 1 {
                assert!(files.iter().any(|f| f == INDEX_FILE), "{what}: {files:?}");
                assert_eq!(shard_files, shards, "{what}: {files:?}");
            } else {
                assert_eq!(shard_files, 0, "{what}: {files:?}");
            }

            let model = Model::load(&dir).unwrap();
            let mut config = model.config.clone();
            assert_eq!(config.dtype, dtype, "{what}");
            config.dtype = base.config.dtype;
            assert_eq!(config, base.config, "{what}: configs differ beyond dtype");
            // The synthetic values are exact in all three dtypes, so the weights are identical.
            assert!(model.weights == base.weights, "{what}: weights differ");
            let logits = cached_logits(&model, &tokens);
            assert_eq!(logits, expected, "{what}: logits differ");
        }
    }
}

#[test]
fn the_two_presets_have_the_shapes_the_issue_names() {
    let tiny = Preset::Tiny.config().unwrap();
    assert_eq!(tiny.arch, Arch::Qwen3);
    assert_eq!(
        (
            tiny.hidden,
            tiny.layers,
            tiny.heads,
            tiny.kv_heads,
            tiny.head_dim
        ),
        (256, 4, 8, 2, 64)
    );
    assert!(tiny.tie_word_embeddings && tiny.qk_norm);
    assert_eq!(tiny.vocab, 4096);

    let llama = Preset::TinyLlama.config().unwrap();
    assert_eq!(llama.arch, Arch::Llama);
    assert_eq!((llama.heads, llama.kv_heads, llama.head_dim), (9, 3, 32));
    assert!(!llama.tie_word_embeddings && !llama.qk_norm);
    assert!(llama.rope_scaling.is_some());

    let l1b = Preset::Llama1b.config().unwrap();
    assert_eq!(
        (
            l1b.hidden,
            l1b.layers,
            l1b.heads,
            l1b.kv_heads,
            l1b.head_dim,
            l1b.intermediate
        ),
        (2048, 16, 32, 8, 64, 8192)
    );
    assert_eq!(l1b.vocab, 128_256);
    // Llama-3.2-1B: 1,235,814,400 parameters with the tied embedding.
    assert_eq!(l1b.parameter_count(), 1_235_814_400);
}

fn parse(json: &str) -> decoder::model::ModelConfig {
    let file: ConfigFile = serde_json::from_str(json).unwrap();
    file.normalize().unwrap()
}

/// Llama-3.2-1B's config.json as transformers 4.x writes it, and the same in the 5.x layout.
#[test]
fn real_llama_config_in_both_layouts() {
    let v4 = r#"{
      "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
      "bos_token_id": 128000, "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu",
      "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 8192,
      "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
      "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8,
      "pretraining_tp": 1, "rms_norm_eps": 1e-05,
      "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                       "original_max_position_embeddings": 8192, "rope_type": "llama3"},
      "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
      "transformers_version": "4.45.0.dev0", "use_cache": true, "vocab_size": 128256
    }"#;
    let v5 = r#"{
      "architectures": ["LlamaForCausalLM"], "attention_bias": false,
      "bos_token_id": 128000, "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu",
      "hidden_size": 2048, "intermediate_size": 8192,
      "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
      "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8,
      "rms_norm_eps": 1e-05,
      "rope_parameters": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                          "original_max_position_embeddings": 8192, "rope_type": "llama3",
                          "rope_theta": 500000.0},
      "tie_word_embeddings": true, "dtype": "bfloat16", "vocab_size": 128256
    }"#;
    let a = parse(v4);
    let b = parse(v5);
    assert_eq!(a, b);
    assert_eq!(a.rope_theta, 500000.0);
    let s = a.rope_scaling.unwrap();
    assert_eq!(
        (s.factor, s.low_freq_factor, s.high_freq_factor),
        (32.0, 1.0, 4.0)
    );
    assert_eq!(s.original_max_position_embeddings, 8192.0);
    assert_eq!(a.eos_token_ids, vec![128001]);
    assert_eq!(a.dtype, WeightDtype::Bf16);
}

/// Qwen3-0.6B's config.json (transformers 4.x), its parameter count, and the 5.x layout.
#[test]
fn real_qwen3_config_in_both_layouts() {
    let v4 = r#"{
      "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
      "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
      "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
      "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
      "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
      "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000,
      "sliding_window": null, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
      "transformers_version": "4.51.0", "use_cache": true, "use_sliding_window": false,
      "vocab_size": 151936
    }"#;
    let v5 = r#"{
      "architectures": ["Qwen3ForCausalLM"], "attention_bias": false,
      "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
      "hidden_size": 1024, "intermediate_size": 3072,
      "layer_types": ["full_attention", "full_attention"],
      "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
      "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
      "rms_norm_eps": 1e-06, "rope_parameters": {"rope_type": "default", "rope_theta": 1000000},
      "sliding_window": null, "tie_word_embeddings": true, "dtype": "bfloat16",
      "use_sliding_window": false, "vocab_size": 151936
    }"#;
    let a = parse(v4);
    assert_eq!(a, parse(v5));
    assert_eq!(a.arch, Arch::Qwen3);
    assert!(a.qk_norm && a.tie_word_embeddings && a.rope_scaling.is_none());
    assert_eq!(a.parameter_count(), 596_049_920);
    assert_eq!(
        a,
        Preset::Qwen3_0_6b
            .config()
            .map(|mut c| {
                // The synthetic checkpoint puts its special tokens at the top of the vocabulary.
                c.bos_token_id = a.bos_token_id;
                c.eos_token_ids = a.eos_token_ids.clone();
                c
            })
            .unwrap()
    );
}

#[test]
fn head_dim_and_kv_heads_are_derived_when_absent() {
    let c = parse(
        r#"{"architectures": ["LlamaForCausalLM"], "hidden_size": 96, "intermediate_size": 64,
            "num_attention_heads": 6, "num_hidden_layers": 1, "vocab_size": 10}"#,
    );
    assert_eq!((c.heads, c.kv_heads, c.head_dim), (6, 6, 16));
    assert_eq!(c.rope_theta, 10000.0);
    assert!(!c.tie_word_embeddings);
    assert_eq!(c.dtype, WeightDtype::F32);
    // model_type alone identifies the architecture when `architectures` is absent.
    let q = parse(
        r#"{"model_type": "qwen3", "hidden_size": 64, "intermediate_size": 64, "head_dim": 32,
            "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 1,
            "vocab_size": 10, "eos_token_id": [3, 4]}"#,
    );
    assert_eq!((q.arch, q.head_dim, q.kv_heads), (Arch::Qwen3, 32, 2));
    assert_eq!(q.eos_token_ids, vec![3, 4]);
}

/// Llama 3 scaling checked band by band against Hugging Face's rule, for Llama 3.2's values:
/// wavelengths below 8192 / 4 are kept, above 8192 / 1 divided by 32, and in between
/// interpolated with smooth = (8192 / wavelength - 1) / (4 - 1).
#[test]
fn llama3_rope_scaling_per_band() {
    let mut c = Preset::Llama1b.config().unwrap();
    let scaled = c.rope_inv_freq();
    c.rope_scaling = None;
    let plain = c.rope_inv_freq();
    assert_eq!(scaled.len(), 32);
    let mut bands = [0usize; 3];
    for (i, (&s, &p)) in scaled.iter().zip(&plain).enumerate() {
        let base = 1.0 / 500000f64.powf(2.0 * i as f64 / 64.0);
        assert!((f64::from(p) - base).abs() <= base * 1e-6, "i={i}");
        let wavelen = 2.0 * std::f64::consts::PI / base;
        let want = if wavelen < 2048.0 {
            bands[0] += 1;
            base
        } else if wavelen > 8192.0 {
            bands[2] += 1;
            base / 32.0
        } else {
            bands[1] += 1;
            let smooth = (8192.0 / wavelen - 1.0) / 3.0;
            (1.0 - smooth) * base / 32.0 + smooth * base
        };
        assert!(
            (f64::from(s) - want).abs() <= want * 1e-6,
            "i={i}: {s} vs {want}"
        );
    }
    assert!(
        bands.iter().all(|&n| n > 0),
        "every band is exercised: {bands:?}"
    );

    // tiny-llama's own scaling also crosses all three bands.
    let t = Preset::TinyLlama.config().unwrap();
    let mut t_plain = t.clone();
    t_plain.rope_scaling = None;
    let (a, b) = (t.rope_inv_freq(), t_plain.rope_inv_freq());
    assert_eq!(a[0], b[0], "highest frequency unchanged");
    assert!(
        (a[15] * 8.0 - b[15]).abs() < 1e-9,
        "lowest frequency divided by 8"
    );
    assert!(
        a.iter().zip(&b).any(|(x, y)| x < y && x * 8.0 > y * 1.0001),
        "a smoothed band"
    );
}
