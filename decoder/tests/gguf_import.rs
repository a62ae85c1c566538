//! `import_gguf` on tiny hand-built GGUF files: every weight comes back exactly (q/k rows
//! un-permuted for Llama, untouched for Qwen3), the tokenizer files load and keep the ids, the
//! checkpoint loads through the normal Hugging Face loader, and every unsupported input is named
//! in the error without leaving a directory behind.

#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is a test failure.

mod gguf_util;

use std::path::{Path, PathBuf};

use decoder::gguf::{ImportError, ImportOptions, OutDtype, Value, import_gguf};
use decoder::model::Model;
use gguf_util::{GgufBuilder, TinyModel, string, temp_dir, tiny_model};
use indicatif::ProgressBar;

fn import(
    g: &GgufBuilder,
    dtype: OutDtype,
) -> (tempfile::TempDir, PathBuf, Result<(), ImportError>) {
    let dir = temp_dir();
    let gguf = dir.path().join("tiny.gguf");
    g.write(&gguf);
    let out = dir.path().join("models").join("tiny");
    let opts = ImportOptions {
        dtype,
        overwrite: false,
    };
    let r = import_gguf(&gguf, &out, &opts, &ProgressBar::hidden()).map(|_| ());
    (dir, out, r)
}

fn read_json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Every tensor of `model.safetensors` as f32, with its dtype name and shape.
fn read_weights(dir: &Path) -> Vec<(String, String, Vec<usize>, Vec<f32>)> {
    let bytes = std::fs::read(dir.join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut out: Vec<_> = st
        .tensors()
        .into_iter()
        .map(|(name, view)| {
            let values: Vec<f32> = match view.dtype() {
                safetensors::Dtype::F16 => view
                    .data()
                    .chunks_exact(2)
                    .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
                    .collect(),
                safetensors::Dtype::BF16 => view
                    .data()
                    .chunks_exact(2)
                    .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
                    .collect(),
                other => panic!("{name} has dtype {other:?}"),
            };
            (
                name,
                format!("{:?}", view.dtype()),
                view.shape().to_vec(),
                values,
            )
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn assert_weights_match(dir: &Path, tiny: &TinyModel, dtype: &str) {
    let got = read_weights(dir);
    let mut want: Vec<_> = tiny.hf.iter().collect();
    want.sort_by(|a, b| a.0.cmp(&b.0));
    let got_names: Vec<&str> = got.iter().map(|g| g.0.as_str()).collect();
    let want_names: Vec<&str> = want.iter().map(|w| w.0.as_str()).collect();
    assert_eq!(got_names, want_names);
    for ((name, got_dtype, shape, values), (_, want_shape, want_values)) in got.iter().zip(want) {
        assert_eq!(got_dtype, dtype, "{name}");
        assert_eq!(shape, want_shape, "{name}");
        // Every test value is a multiple of 1/64 in [-1, 1): exact in f16 and bf16.
        assert_eq!(values, want_values, "{name}");
    }
}

#[test]
fn llama_weights_come_back_exactly_with_q_k_unpermuted() {
    let tiny = tiny_model("llama");
    let (_tmp, out, r) = import(&tiny.gguf, OutDtype::F16);
    r.unwrap();
    assert!(decoder::gguf::is_complete_checkpoint(&out));
    assert_weights_match(&out, &tiny, "F16");

    let config = read_json(&out.join("config.json"));
    assert_eq!(config["architectures"][0], "LlamaForCausalLM");
    assert_eq!(config["model_type"], "llama");
    assert_eq!(config["hidden_size"], 32);
    assert_eq!(config["num_hidden_layers"], 2);
    assert_eq!(config["num_attention_heads"], 4);
    assert_eq!(config["num_key_value_heads"], 2);
    assert_eq!(config["head_dim"], 8);
    assert_eq!(config["intermediate_size"], 64);
    assert_eq!(config["vocab_size"], gguf_util::tiny_vocab().0.len());
    assert_eq!(config["max_position_embeddings"], 256);
    assert_eq!(config["rope_theta"], 100000.0);
    assert_eq!(config["rms_norm_eps"], 1e-5);
    assert_eq!(config["tie_word_embeddings"], true);
    assert_eq!(config["torch_dtype"], "float16");
    assert_eq!(config["bos_token_id"], 1);
    assert_eq!(config["eos_token_id"], 2);

    let generation = read_json(&out.join("generation_config.json"));
    assert_eq!(generation["eos_token_id"], 2);
    assert_eq!(generation["bos_token_id"], 1);

    // Nothing but the checkpoint is left beside it.
    let siblings: Vec<_> = std::fs::read_dir(out.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(siblings, ["tiny"]);
}

#[test]
fn qwen3_weights_are_not_permuted_and_keep_q_k_norms() {
    let tiny = tiny_model("qwen3");
    let (_tmp, out, r) = import(&tiny.gguf, OutDtype::Bf16);
    r.unwrap();
    assert_weights_match(&out, &tiny, "BF16");
    let config = read_json(&out.join("config.json"));
    assert_eq!(config["architectures"][0], "Qwen3ForCausalLM");
    assert_eq!(config["torch_dtype"], "bfloat16");
    let model = Model::load(&out).unwrap();
    assert!(model.config.qk_norm);
}

#[test]
fn untied_output_becomes_lm_head() {
    let mut tiny = tiny_model("llama");
    let vocab = gguf_util::tiny_vocab().0.len();
    let lm_head = gguf_util::exact_values(vocab * gguf_util::HIDDEN, 99);
    tiny.gguf.tensor(
        "output.weight",
        &[gguf_util::HIDDEN as u64, vocab as u64],
        gguf_util::F16,
        gguf_util::f16_bytes(&lm_head),
    );
    tiny.hf.push((
        "lm_head.weight".into(),
        vec![vocab, gguf_util::HIDDEN],
        lm_head,
    ));
    let (_tmp, out, r) = import(&tiny.gguf, OutDtype::F16);
    r.unwrap();
    assert_weights_match(&out, &tiny, "F16");
    assert_eq!(
        read_json(&out.join("config.json"))["tie_word_embeddings"],
        false
    );
}

#[test]
fn imported_checkpoint_loads_through_the_normal_loader_and_runs() {
    let tiny = tiny_model("llama");
    let (_tmp, out, r) = import(&tiny.gguf, OutDtype::F16);
    r.unwrap();
    let model = Model::load(&out).unwrap();
    assert_eq!(model.config.heads, gguf_util::N_HEADS);
    assert_eq!(model.config.kv_heads, gguf_util::N_KV_HEADS);
    assert!(model.config.tie_word_embeddings);
    // The loader sees the un-permuted q projection of layer 1.
    let q_hf = &tiny
        .hf
        .iter()
        .find(|t| t.0 == "model.layers.1.self_attn.q_proj.weight")
        .unwrap()
        .2;
    assert_eq!(&model.weights.layers[1].q_proj.data, q_hf);

    let mut reference = model.reference(8).unwrap();
    let ids = model.tokenizer.encode("hello world", false).unwrap();
    for (pos, &id) in ids.iter().enumerate() {
        let logits = reference.forward(id, pos).unwrap();
        assert!(logits.iter().all(|v| v.is_finite()));
    }
}

#[test]
fn tokenizer_files_keep_ids_merges_and_the_chat_template() {
    let tiny = tiny_model("llama");
    let (_tmp, out, r) = import(&tiny.gguf, OutDtype::F16);
    r.unwrap();
    let tok = tokenizers::Tokenizer::from_file(out.join("tokenizer.json")).unwrap();
    let (tokens, _) = gguf_util::tiny_vocab();
    assert_eq!(tok.get_vocab_size(true), tokens.len());
    for (id, t) in tokens.iter().enumerate() {
        assert_eq!(tok.token_to_id(t), Some(id as u32), "{t:?}");
    }
    // The merges apply: "hello" is one token, " w" is one token (the "Ġw" merge).
    let enc = tok.encode("hello world", false).unwrap();
    let pieces: Vec<&str> = enc.get_tokens().iter().map(String::as_str).collect();
    assert_eq!(pieces, ["hello", "Ġw", "o", "r", "l", "d"]);
    // Special tokens are never split; digits are split one by one ("smollm" pre-tokenizer).
    let enc = tok.encode("<|im_start|>x<|im_end|>42", false).unwrap();
    assert_eq!(enc.get_ids()[0], 1);
    assert_eq!(enc.get_ids()[2], 2);
    assert_eq!(enc.get_tokens()[3..], ["4", "2"]);
    for s in [
        "hello world",
        "<tool> naïve 漢字 🙂 \n\t x",
        "<|im_start|>user\nhi<|im_end|>\n",
    ] {
        let ids = tok.encode(s, false).unwrap().get_ids().to_vec();
        assert_eq!(tok.decode(&ids, false).unwrap(), s);
    }
    // The user-defined token is an added token but not a special one.
    let added = tok.get_added_tokens_decoder();
    assert!(added[&1].special);
    assert!(!added[&3].special, "{:?}", added[&3]);

    let tc = read_json(&out.join("tokenizer_config.json"));
    assert_eq!(tc["bos_token"], "<|im_start|>");
    assert_eq!(tc["eos_token"], "<|im_end|>");
    assert_eq!(tc["unk_token"], "<|endoftext|>");
    assert_eq!(tc["add_bos_token"], false);
    assert!(
        tc["chat_template"]
            .as_str()
            .unwrap()
            .contains("<|im_start|>")
    );
}

#[test]
fn add_bos_becomes_a_template_post_processor() {
    let mut tiny = tiny_model("llama");
    tiny.gguf
        .kv("tokenizer.ggml.add_bos_token", Value::Bool(true));
    let (_tmp, out, r) = import(&tiny.gguf, OutDtype::F16);
    r.unwrap();
    let tok = tokenizers::Tokenizer::from_file(out.join("tokenizer.json")).unwrap();
    assert_eq!(tok.encode("he", true).unwrap().get_ids()[0], 1);
    assert_eq!(tok.encode("he", false).unwrap().get_ids().len(), 1);
}

/// Imports `g` expecting failure; checks that the message names the GGUF file and contains
/// every one of `needles`, and that no directory was left behind.
fn assert_import_fails(g: &GgufBuilder, needles: &[&str]) {
    let (tmp, out, r) = import(g, OutDtype::F16);
    let msg = r.unwrap_err().to_string();
    assert!(msg.contains("tiny.gguf"), "{msg}");
    for n in needles {
        assert!(msg.contains(n), "{n:?} missing from: {msg}");
    }
    assert!(!out.exists());
    if let Ok(entries) = std::fs::read_dir(tmp.path().join("models")) {
        let left: Vec<_> = entries.map(|e| e.unwrap().file_name()).collect();
        assert!(left.is_empty(), "left behind: {left:?}");
    }
}

#[test]
fn unsupported_inputs_are_named() {
    let base = tiny_model("llama").gguf;

    let mut g = base.clone();
    g.kv("general.architecture", string("mamba"));
    assert_import_fails(&g, &["mamba", "architecture"]);

    let mut g = base.clone();
    // IQ2_XXS (type 16), whose block layout decodescope does not know: the reader keeps it,
    // the import names it.
    g.tensor("blk.0.ffn_up.weight", &[32, 64], 16, vec![0u8; 528]);
    assert_import_fails(&g, &["blk.0.ffn_up.weight", "IQ2_XXS"]);

    let mut g = base.clone();
    g.kv("tokenizer.ggml.model", string("llama"));
    assert_import_fails(&g, &["tokenizer model", "\"llama\""]);

    let mut g = base.clone();
    g.kv("tokenizer.ggml.pre", string("mystery-pre"));
    assert_import_fails(&g, &["mystery-pre", "pre-tokenizer"]);

    let mut g = base.clone();
    g.remove_tensor("blk.1.attn_k.weight");
    assert_import_fails(&g, &["blk.1.attn_k.weight", "missing"]);

    let mut g = base.clone();
    g.tensor(
        "blk.0.attn_q.bias",
        &[32],
        gguf_util::F32,
        gguf_util::f32_bytes(&[0.0; 32]),
    );
    assert_import_fails(&g, &["blk.0.attn_q.bias"]);

    let mut g = base.clone();
    g.tensor(
        "blk.0.attn_q.weight",
        &[32, 16],
        gguf_util::F32,
        gguf_util::f32_bytes(&[0.0; 512]),
    );
    assert_import_fails(&g, &["blk.0.attn_q.weight", "shape"]);

    let mut g = base.clone();
    g.remove_kv("llama.attention.layer_norm_rms_epsilon");
    assert_import_fails(&g, &["llama.attention.layer_norm_rms_epsilon"]);

    let mut g = base.clone();
    g.kv("llama.rope.scaling.type", string("yarn"));
    assert_import_fails(&g, &["yarn"]);

    // More layers than the file holds, fast: no name is built for each of two billion layers.
    let mut g = base.clone();
    g.kv("llama.block_count", Value::U32(2_000_000_000));
    assert_import_fails(
        &g,
        &["llama.block_count is 2000000000", "tensors of 2 layers"],
    );

    let mut g = base;
    g.kv("llama.block_count", string("two"));
    assert_import_fails(&g, &["llama.block_count", "string"]);
}

#[test]
fn values_beyond_f16_need_bf16() {
    let mut tiny = tiny_model("llama");
    tiny.gguf.tensor(
        "output_norm.weight",
        &[gguf_util::HIDDEN as u64],
        gguf_util::F32,
        gguf_util::f32_bytes(&[1e6; gguf_util::HIDDEN]),
    );
    assert_import_fails(&tiny.gguf, &["output_norm.weight", "--dtype bf16"]);
    let (_tmp, _out, r) = import(&tiny.gguf, OutDtype::Bf16);
    r.unwrap();
}

#[test]
fn existing_output_is_kept_unless_overwrite() {
    let tiny = tiny_model("llama");
    let (tmp, out, r) = import(&tiny.gguf, OutDtype::F16);
    r.unwrap();
    let gguf = tmp.path().join("tiny.gguf");
    let err = import_gguf(
        &gguf,
        &out,
        &ImportOptions::default(),
        &ProgressBar::hidden(),
    )
    .unwrap_err();
    assert!(matches!(err, ImportError::OutputExists { .. }), "{err}");
    assert!(err.to_string().contains("--force"), "{err}");

    std::fs::write(out.join("stale.txt"), "old").unwrap();
    let opts = ImportOptions {
        dtype: OutDtype::Bf16,
        overwrite: true,
    };
    import_gguf(&gguf, &out, &opts, &ProgressBar::hidden()).unwrap();
    assert!(!out.join("stale.txt").exists());
    assert_eq!(
        read_json(&out.join("config.json"))["torch_dtype"],
        "bfloat16"
    );
    let siblings: Vec<_> = std::fs::read_dir(out.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(siblings, ["tiny"]);
}

#[test]
fn command_line_imports_and_reports_errors_with_the_file() {
    let tiny = tiny_model("llama");
    let dir = temp_dir();
    let gguf = dir.path().join("tiny.gguf");
    tiny.gguf.write(&gguf);
    let out = dir.path().join("ckpt");
    let run = |extra: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_decoder"))
            .arg("import-gguf")
            .arg(&gguf)
            .arg("--out")
            .arg(&out)
            .args(extra)
            .output()
            .unwrap()
    };
    let ok = run(&["--dtype", "bf16"]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let stdout = String::from_utf8_lossy(&ok.stdout);
    assert!(
        stdout.contains("imported") && stdout.contains("llama") && stdout.contains("BF16"),
        "{stdout}"
    );
    assert_eq!(
        read_json(&out.join("config.json"))["torch_dtype"],
        "bfloat16"
    );

    let again = run(&[]);
    assert!(!again.status.success());
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(
        stderr.contains("already exists") && stderr.contains("--force"),
        "{stderr}"
    );
    assert!(run(&["--force"]).status.success());

    std::fs::write(&gguf, b"not a gguf file at all").unwrap();
    let bad = run(&["--force"]);
    assert!(!bad.status.success());
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(
        stderr.contains("tiny.gguf") && stderr.contains("not a GGUF file"),
        "{stderr}"
    );
    assert!(
        out.join("config.json").exists(),
        "a failed import must not touch the existing output"
    );
}

/// `--force` onto a regular file moved the file away under a hidden name, put a directory in its
/// place and then failed. A file is never replaced by a directory: refused before any work, the
/// file kept, nothing left beside it.
#[test]
fn force_onto_a_regular_file_is_refused_and_keeps_it() {
    let tiny = tiny_model("llama");
    let dir = temp_dir();
    let gguf = dir.path().join("tiny.gguf");
    tiny.gguf.write(&gguf);
    let out = dir.path().join("ckpt");
    std::fs::write(&out, "keep me").unwrap();
    let opts = ImportOptions {
        dtype: OutDtype::F16,
        overwrite: true,
    };
    let err = import_gguf(&gguf, &out, &opts, &ProgressBar::hidden()).unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, ImportError::OutputNotDirectory { .. })
            && msg.contains("ckpt")
            && msg.contains("regular file"),
        "{msg}"
    );
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "keep me");
    let mut names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["ckpt", "tiny.gguf"]);
}
