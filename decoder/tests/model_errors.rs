//! Every bad input gives an error that names the culprit: the tensor and the file, the field and
//! its value, or the missing file.
#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is a test failure.

mod model_support;

use std::collections::HashMap;
use std::path::Path;

use decoder::model::safetensors_io::{SafetensorsWriter, TensorEntry};
use decoder::model::synth::{SynthOptions, write_model_tensors};
use decoder::model::{Model, Preset, WeightDtype};
use model_support::{edit_config, load_weights, synth};
use safetensors::Dtype;

fn tiny() -> (tempfile::TempDir, std::path::PathBuf) {
    synth(Preset::Tiny, &SynthOptions::default())
}

fn load_error(dir: &Path) -> String {
    Model::load(dir).unwrap_err().to_string()
}

fn assert_names(err: &str, culprits: &[&str]) {
    for c in culprits {
        assert!(err.contains(c), "error should name {c:?}: {err}");
    }
}

/// Rewrites `dir/model.safetensors` from its own weights with `entries` edited; tensors whose
/// element count changed are written as zeros.
fn rewrite(dir: &Path, edit: impl FnOnce(&mut Vec<(String, Vec<usize>)>)) {
    let weights = load_weights(dir);
    let data: HashMap<String, Vec<f32>> = weights
        .tensors()
        .into_iter()
        .map(|t| (t.name.clone(), t.data.clone()))
        .collect();
    let mut entries: Vec<(String, Vec<usize>)> = weights
        .tensors()
        .iter()
        .map(|t| (t.name.clone(), t.shape.clone()))
        .collect();
    edit(&mut entries);
    std::fs::remove_file(dir.join("model.safetensors")).unwrap();
    let shapes: HashMap<String, usize> = entries
        .iter()
        .map(|(n, s)| (n.clone(), s.iter().product()))
        .collect();
    write_model_tensors(dir, &entries, WeightDtype::Bf16, 1, &mut |name, w| {
        let n = shapes[name];
        match data.get(name) {
            Some(d) if d.len() == n => w.write_f32(d),
            _ => w.write_f32(&vec![0.0; n]),
        }
    })
    .unwrap();
}

#[test]
fn missing_tensor_names_tensor_and_file() {
    let (_t, dir) = tiny();
    rewrite(&dir, |e| {
        e.retain(|(n, _)| n != "model.layers.2.mlp.up_proj.weight")
    });
    let err = load_error(&dir);
    assert_names(
        &err,
        &["model.layers.2.mlp.up_proj.weight", "model.safetensors"],
    );
}

#[test]
fn wrong_shape_names_tensor_file_and_shapes() {
    let (_t, dir) = tiny();
    rewrite(&dir, |e| {
        for (n, s) in e.iter_mut() {
            if n == "model.layers.1.self_attn.k_proj.weight" {
                *s = vec![256, 128];
            }
        }
    });
    let err = load_error(&dir);
    assert_names(
        &err,
        &[
            "model.layers.1.self_attn.k_proj.weight",
            "model.safetensors",
            "[256, 128]",
            "[128, 256]",
        ],
    );
}

#[test]
fn unsupported_dtype_names_tensor_file_and_dtype() {
    let (_t, dir) = tiny();
    let weights = load_weights(&dir);
    let path = dir.join("model.safetensors");
    std::fs::remove_file(&path).unwrap();
    let bad = "model.layers.0.self_attn.q_proj.weight";
    let entries: Vec<TensorEntry> = weights
        .tensors()
        .iter()
        .map(|t| {
            let dtype = if t.name == bad {
                Dtype::I32
            } else {
                Dtype::BF16
            };
            TensorEntry::new(t.name.clone(), dtype, &t.shape)
        })
        .collect();
    let mut w = SafetensorsWriter::create(&path, entries, None).unwrap();
    for t in weights.tensors() {
        if t.name == bad {
            w.write_bytes(&vec![0u8; t.data.len() * 4]).unwrap();
        } else {
            w.write_f32(&t.data).unwrap();
        }
    }
    w.finish().unwrap();
    let err = load_error(&dir);
    assert_names(&err, &[bad, "model.safetensors", "I32"]);
}

#[test]
fn truncated_file_names_the_cut_tensor_and_file() {
    let (_t, dir) = tiny();
    let path = dir.join("model.safetensors");
    let len = std::fs::metadata(&path).unwrap().len();
    // The last tensor in the file is model.norm.weight (256 BF16 values = 512 bytes).
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(len - 10).unwrap();
    drop(file);
    let err = load_error(&dir);
    assert_names(
        &err,
        &["model.norm.weight", "model.safetensors", "truncated"],
    );

    // Cut 600 bytes: the norm is gone and the first tensor cut short is the last down_proj.
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(len - 600).unwrap();
    drop(file);
    let err = load_error(&dir);
    assert_names(
        &err,
        &["model.layers.3.mlp.down_proj.weight", "model.safetensors"],
    );

    // Cut inside the header: the file is named.
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(100).unwrap();
    drop(file);
    let err = load_error(&dir);
    assert_names(&err, &["model.safetensors", "truncated"]);
}

/// Rewrites the JSON header of `path` (a safetensors file) with `edit`, keeping its data.
fn edit_header(path: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let bytes = std::fs::read(path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let mut header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    edit(&mut header);
    let h = serde_json::to_vec(&header).unwrap();
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&h);
    out.extend_from_slice(&bytes[8 + n..]);
    std::fs::write(path, out).unwrap();
}

#[test]
fn a_header_whose_dtype_shape_or_offsets_disagree_names_the_tensor() {
    const NORM: &str = "model.layers.2.input_layernorm.weight";
    let norm = NORM;
    // A dtype of another size than the bytes written, a shape of other elements, offsets that
    // overlap the next tensor's: each names the tensor and what disagrees.
    type Edit = fn(&mut serde_json::Value);
    let edits: [(&str, Edit); 3] = [
        ("F32 of shape [256], 1024 bytes", |h| {
            h[NORM]["dtype"] = "F32".into()
        }),
        ("BF16 of shape [128], 256 bytes", |h| {
            h[NORM]["shape"] = serde_json::json!([128])
        }),
        ("must follow one another", |h| {
            let mut o = h[NORM]["data_offsets"].clone();
            o[0] = (o[0].as_u64().unwrap() + 2).into();
            o[1] = (o[1].as_u64().unwrap() + 2).into();
            h[NORM]["data_offsets"] = o;
        }),
    ];
    for (what, edit) in edits {
        let (_t, dir) = tiny();
        edit_header(&dir.join("model.safetensors"), edit);
        assert_names(&load_error(&dir), &[norm, "model.safetensors", what]);
    }
}

#[test]
fn malformed_json_names_the_file() {
    for file in [
        "config.json",
        "generation_config.json",
        "tokenizer_config.json",
        "tokenizer.json",
    ] {
        let (_t, dir) = tiny();
        std::fs::write(dir.join(file), "{\"architectures\": [\"Qwen3ForCausalLM\"").unwrap();
        let err = load_error(&dir);
        assert_names(&err, &[file]);
    }
    // The shard index of a sharded checkpoint.
    let opts = SynthOptions {
        shards: 2,
        ..SynthOptions::default()
    };
    let (_t, dir) = synth(Preset::Tiny, &opts);
    std::fs::write(
        dir.join("model.safetensors.index.json"),
        "{ \"weight_map\": ",
    )
    .unwrap();
    assert_names(
        &load_error(&dir),
        &["model.safetensors.index.json", "malformed JSON"],
    );
}

#[test]
fn unsupported_architecture_names_field_and_value() {
    let (_t, dir) = tiny();
    edit_config(&dir, |c| {
        c["architectures"] = serde_json::json!(["MistralForCausalLM"])
    });
    assert_names(
        &load_error(&dir),
        &["config.json", "architectures", "MistralForCausalLM"],
    );
}

/// A Qwen3 checkpoint whose config.json names Llama would run without its q and k norms (another
/// model's tokens); it is refused, naming the norm and the class.
#[test]
fn qwen3_norms_under_a_llama_config_are_refused() {
    for edit in [
        serde_json::json!({"architectures": ["LlamaForCausalLM"]}),
        serde_json::json!({"architectures": null, "model_type": "llama"}),
    ] {
        let (_t, dir) = tiny();
        edit_config(&dir, |c| {
            for (k, v) in edit.as_object().unwrap() {
                c[k] = v.clone();
            }
        });
        assert_names(
            &load_error(&dir),
            &[
                "model.safetensors",
                "model.layers.0.self_attn.k_norm.weight",
                "LlamaForCausalLM",
                "architectures",
            ],
        );
    }
}

/// A tokenizer.json with a token beyond the model's vocabulary (another model's tokenizer): a
/// prompt that uses it is refused at encoding, naming the file, the token and vocab_size.
#[test]
fn a_prompt_token_beyond_the_vocabulary_names_tokenizer_and_vocab_size() {
    let (_t, dir) = tiny();
    let path = dir.join("tokenizer.json");
    let mut tok: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let vocab = Model::load(&dir).unwrap().config.vocab;
    tok["added_tokens"].as_array_mut().unwrap().push(
        serde_json::json!({"id": vocab + 10, "content": "<far>", "single_word": false,
            "lstrip": false, "rstrip": false, "normalized": false, "special": true}),
    );
    std::fs::write(&path, tok.to_string()).unwrap();
    let model = Model::load(&dir).unwrap();
    // Prompts without the token still encode.
    assert!(model.tokenizer.encode_prompt("hello", false).is_ok());
    let err = model
        .tokenizer
        .encode_prompt("hello <far>", false)
        .unwrap_err()
        .to_string();
    assert_names(
        &err,
        &[
            "tokenizer.json",
            "\"<far>\"",
            "has id",
            &format!("vocab_size (config.json) is {vocab}"),
        ],
    );
}

/// The command line prints an error with its causes (`{:#}`): a cause the message already
/// holds (an I/O or JSON error) is said once.
#[test]
fn causes_are_printed_once() {
    let (_t, dir) = tiny();
    std::fs::remove_file(dir.join("config.json")).unwrap();
    std::fs::create_dir(dir.join("config.json")).unwrap();
    let (_u, dir2) = tiny();
    std::fs::write(dir2.join("tokenizer_config.json"), "{").unwrap();
    for (dir, cause) in [(&dir, "Is a directory"), (&dir2, "EOF while parsing")] {
        let e = anyhow::Error::from(Model::load(dir).unwrap_err()).context("cannot load the model");
        let printed = format!("{e:#}");
        assert_eq!(printed.matches(cause).count(), 1, "{printed}");
    }
}

#[test]
fn missing_tokenizer_json_names_the_file() {
    let (_t, dir) = tiny();
    std::fs::remove_file(dir.join("tokenizer.json")).unwrap();
    let err = load_error(&dir);
    assert_names(&err, &["tokenizer.json", "missing"]);
}

#[test]
fn missing_config_and_weights_name_the_file() {
    let (_t, dir) = tiny();
    std::fs::remove_file(dir.join("model.safetensors")).unwrap();
    assert_names(&load_error(&dir), &["model.safetensors"]);
    std::fs::remove_file(dir.join("config.json")).unwrap();
    assert_names(&load_error(&dir), &["config.json", "missing"]);
}

#[test]
fn unsupported_options_name_field_and_value() {
    let cases: Vec<(&str, serde_json::Value, Vec<&str>)> = vec![
        (
            "rope_scaling",
            serde_json::json!({"rope_type": "yarn", "factor": 4.0}),
            vec!["rope_scaling.rope_type", "yarn"],
        ),
        (
            "use_sliding_window",
            serde_json::json!(true),
            vec!["use_sliding_window", "true"],
        ),
        (
            "layer_types",
            serde_json::json!(["full_attention", "sliding_attention"]),
            vec!["layer_types", "sliding_attention"],
        ),
        (
            "attention_bias",
            serde_json::json!(true),
            vec!["attention_bias", "true"],
        ),
        (
            "mlp_bias",
            serde_json::json!(true),
            vec!["mlp_bias", "true"],
        ),
        (
            "torch_dtype",
            serde_json::json!("float8_e4m3fn"),
            vec!["torch_dtype", "float8_e4m3fn"],
        ),
        (
            "hidden_act",
            serde_json::json!("gelu"),
            vec!["hidden_act", "gelu"],
        ),
        (
            "num_key_value_heads",
            serde_json::json!(3),
            vec!["num_key_value_heads", "3"],
        ),
    ];
    for (field, value, culprits) in cases {
        let (_t, dir) = tiny();
        edit_config(&dir, |c| c[field] = value.clone());
        let err = load_error(&dir);
        assert_names(&err, &culprits);
        assert!(err.contains("config.json"), "{err}");
    }
    // 5.x layout: rope_parameters.
    let (_t, dir) = tiny();
    edit_config(&dir, |c| {
        c["rope_parameters"] = serde_json::json!({"rope_type": "dynamic", "rope_theta": 1e6});
    });
    assert_names(&load_error(&dir), &["rope_parameters.rope_type", "dynamic"]);
}

#[test]
fn bias_tensors_are_rejected_by_name() {
    let (_t, dir) = tiny();
    rewrite(&dir, |e| {
        e.push(("model.layers.0.self_attn.q_proj.bias".into(), vec![512]));
    });
    assert_names(
        &load_error(&dir),
        &["model.layers.0.self_attn.q_proj.bias", "model.safetensors"],
    );
}

#[test]
fn sharded_checkpoint_errors_name_the_shard() {
    let opts = SynthOptions {
        shards: 3,
        ..SynthOptions::default()
    };
    let (_t, dir) = synth(Preset::Tiny, &opts);
    std::fs::remove_file(dir.join("model-00002-of-00003.safetensors")).unwrap();
    assert_names(&load_error(&dir), &["model-00002-of-00003.safetensors"]);

    // A tensor the index places in a shard that does not hold it.
    let (_t, dir) = synth(Preset::Tiny, &opts);
    let index_path = dir.join("model.safetensors.index.json");
    let mut index: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&index_path).unwrap()).unwrap();
    index["weight_map"]["model.norm.weight"] = "model-00001-of-00003.safetensors".into();
    std::fs::write(&index_path, index.to_string()).unwrap();
    assert_names(
        &load_error(&dir),
        &["model.norm.weight", "model-00001-of-00003.safetensors"],
    );
}
