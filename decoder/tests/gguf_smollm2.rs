//! The real SmolLM2-135M-Instruct, imported from its GGUF file by `scripts/fetch-smollm2.sh`
//! (which setup runs) into `<cache>/models/smollm2`: its tokenizer round-trips text and keeps
//! the GGUF's special-token ids, it loads through the normal Hugging Face loader, and the CPU
//! reference answers "Paris".
//!
//! The q/k un-permutation is checked end to end twice: the chat answer (with the rows left in
//! llama.cpp's order the model answers nothing sensible: the chat prompt is long enough for the
//! wrongly paired RoPE rotations to matter; the short completion prompt survives it), and the
//! likelihood of a plain English text, which must be clearly better with the imported layout
//! than with llama.cpp's.

#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is a test failure.

use std::path::PathBuf;

use decoder::generate::{GenerateOptions, StopReason, generate};
use decoder::gguf::{GgufFile, permute_rope_rows};
use decoder::model::{Model, SMOLLM2, cache_dir, cached_model_dir};

/// The imported checkpoint; fails (not skips) when setup has not run, since CI runs setup first.
fn smollm2_dir() -> PathBuf {
    let dir = cached_model_dir(SMOLLM2).expect("the decodescope cache directory");
    assert!(
        decoder::gguf::is_complete_checkpoint(&dir),
        "the SmolLM2 checkpoint is missing or incomplete in {}; run `scripts/fetch-smollm2.sh \
         target/debug/decoder` (scripts/setup.sh does) to download and import it",
        dir.display()
    );
    dir
}

/// The GGUF file the checkpoint was imported from (kept by the fetch script).
fn smollm2_gguf() -> PathBuf {
    let path = cache_dir()
        .expect("the decodescope cache directory")
        .join("downloads/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        path.is_file(),
        "{} is missing; run `scripts/fetch-smollm2.sh target/debug/decoder`",
        path.display()
    );
    path
}

fn tokenizer() -> tokenizers::Tokenizer {
    let path = smollm2_dir().join("tokenizer.json");
    tokenizers::Tokenizer::from_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn tokenizer_round_trips_text_in_many_scripts() {
    let tok = tokenizer();
    let samples = [
        "The capital of France is Paris.",
        "  leading spaces, tabs\tand\nnew lines\n\n",
        "Numbers: 1234567890, 3.14159, -42",
        "code: fn main() { println!(\"{}\", x[0]); }",
        "Accents: naïve café, crème brûlée, Ærøskøbing, São Paulo, Übermaß",
        "CJK: 北京是中国的首都。東京は日本の首都です。서울은 한국의 수도입니다.",
        "Emoji: 🇫🇷 👩‍👩‍👧 🤖🚀 ❤️",
        "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
        "<|endoftext|><repo_name>x<file_sep>y",
    ];
    for s in samples {
        let enc = tok.encode(s, false).unwrap();
        assert!(!enc.get_ids().is_empty(), "{s:?}");
        let back = tok.decode(enc.get_ids(), false).unwrap();
        assert_eq!(
            back,
            s,
            "decode(encode(s)) != s for ids {:?}",
            enc.get_ids()
        );
    }
    // Digits are split one by one (the "smollm" pre-tokenizer), so "2024" is four tokens.
    let ids = tok.encode("2024", false).unwrap().get_ids().to_vec();
    assert_eq!(ids.len(), 4, "{ids:?}");
}

#[test]
fn special_tokens_keep_the_gguf_ids() {
    let gguf = GgufFile::open(&smollm2_gguf()).unwrap();
    let tokens = gguf
        .get("tokenizer.ggml.tokens")
        .and_then(|v| v.as_array())
        .unwrap();
    let types = gguf
        .get("tokenizer.ggml.token_type")
        .and_then(|v| v.as_array())
        .unwrap();
    let tok = tokenizer();
    assert_eq!(tok.get_vocab_size(true), tokens.values.len());

    let mut n_control = 0;
    for (id, (t, ty)) in tokens.values.iter().zip(&types.values).enumerate() {
        if ty.as_i64() != Some(3) {
            continue;
        }
        n_control += 1;
        let t = t.as_str().unwrap();
        assert_eq!(tok.token_to_id(t), Some(id as u32), "{t}");
        assert_eq!(tok.encode(t, false).unwrap().get_ids(), [id as u32], "{t}");
    }
    assert!(
        n_control >= 3,
        "SmolLM2 has at least <|endoftext|>, <|im_start|>, <|im_end|>"
    );

    let id_of = |key: &str| gguf.get(key).and_then(|v| v.as_u64()).unwrap() as u32;
    let bos = id_of("tokenizer.ggml.bos_token_id");
    let eos = id_of("tokenizer.ggml.eos_token_id");
    assert_eq!(tok.token_to_id("<|im_start|>"), Some(bos));
    assert_eq!(tok.token_to_id("<|im_end|>"), Some(eos));
    assert_eq!(tok.token_to_id("<|endoftext|>"), Some(0));

    // The files around it agree with the GGUF.
    let dir = smollm2_dir();
    let read = |f: &str| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(dir.join(f)).unwrap()).unwrap()
    };
    let tc = read("tokenizer_config.json");
    assert_eq!(tc["bos_token"], "<|im_start|>");
    assert_eq!(tc["eos_token"], "<|im_end|>");
    assert_eq!(
        tc["chat_template"].as_str(),
        gguf.get("tokenizer.chat_template").and_then(|v| v.as_str())
    );
    assert_eq!(read("generation_config.json")["eos_token_id"], eos);
    let config = read("config.json");
    assert_eq!(config["eos_token_id"], eos);
    assert_eq!(config["bos_token_id"], bos);
}

#[test]
fn imported_config_matches_the_published_model() {
    let model_config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(smollm2_dir().join("config.json")).unwrap())
            .unwrap();
    // SmolLM2-135M-Instruct's published shape.
    for (key, want) in [
        ("num_hidden_layers", 30.0),
        ("hidden_size", 576.0),
        ("intermediate_size", 1536.0),
        ("num_attention_heads", 9.0),
        ("num_key_value_heads", 3.0),
        ("head_dim", 64.0),
        ("vocab_size", 49152.0),
        ("rope_theta", 100000.0),
        ("rms_norm_eps", 1e-5),
    ] {
        assert_eq!(model_config[key].as_f64(), Some(want), "{key}");
    }
    assert_eq!(model_config["architectures"][0], "LlamaForCausalLM");
    assert_eq!(model_config["tie_word_embeddings"], true);
}

/// Loads the checkpoint through the normal loader and greedily generates `max_tokens` on the
/// CPU reference.
fn greedy(prompt: &str, chat: bool, max_tokens: usize) -> (String, StopReason) {
    let model = Model::load(&smollm2_dir()).unwrap();
    let ids = model.tokenizer.encode_prompt(prompt, chat).unwrap();
    let mut reference = model.reference(ids.len() + max_tokens).unwrap();
    let opts = GenerateOptions {
        max_tokens,
        ..GenerateOptions::default()
    };
    let g = generate(&mut reference, &model.tokenizer, &ids, &opts, &mut |_| {}).unwrap();
    eprintln!("prompt {prompt:?} (chat: {chat}) -> {:?}", g.text);
    (g.text, g.stop)
}

#[test]
fn cpu_reference_completes_the_capital_of_france() {
    let (text, _) = greedy("The capital of France is", false, 12);
    assert!(text.contains("Paris"), "greedy continuation: {text:?}");
}

#[test]
fn cpu_reference_answers_the_chat_question() {
    let (text, _) = greedy("What is the capital of France?", true, 24);
    assert!(text.contains("Paris"), "greedy chat answer: {text:?}");
}

/// Mean negative log-likelihood (nats per token) of `ids[1..]` given the previous tokens, on the
/// CPU reference.
fn mean_nll(model: &Model, ids: &[u32]) -> f64 {
    let mut reference = model.reference(ids.len()).unwrap();
    let mut total = 0.0f64;
    for (pos, pair) in ids.windows(2).enumerate() {
        let logits = reference.forward(pair[0], pos).unwrap();
        let max = logits.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
        let log_sum: f64 = logits
            .iter()
            .map(|&v| f64::from(v - max).exp())
            .sum::<f64>()
            .ln();
        total += log_sum - f64::from(logits[pair[1] as usize] - max);
    }
    total / (ids.len() - 1) as f64
}

#[test]
fn imported_q_k_layout_explains_text_better_than_llama_cpp_layout() {
    let text = "Paris is the capital and largest city of France. The city is known for the \
                Eiffel Tower, the Louvre museum and its cafes. Every year, millions of tourists \
                visit the city to see its monuments, walk along the river Seine and enjoy French \
                food.";
    let mut model = Model::load(&smollm2_dir()).unwrap();
    let ids = model.tokenizer.encode(text, false).unwrap();
    assert!(ids.len() > 40, "{} tokens", ids.len());
    let imported = mean_nll(&model, &ids);

    // Put q and k back into llama.cpp's row order and measure again.
    let (heads, kv_heads, hidden) = (
        model.config.heads,
        model.config.kv_heads,
        model.config.hidden,
    );
    for layer in &mut model.weights.layers {
        layer.q_proj.data = permute_rope_rows(&layer.q_proj.data, heads, hidden).unwrap();
        layer.k_proj.data = permute_rope_rows(&layer.k_proj.data, kv_heads, hidden).unwrap();
    }
    let gguf_order = mean_nll(&model, &ids);
    eprintln!(
        "mean NLL over {} tokens: imported layout {imported:.3} nats, llama.cpp layout {gguf_order:.3} nats",
        ids.len() - 1
    );
    // A trained 135M model reads fluent English at roughly 2-3 nats per token.
    assert!(imported < 3.5, "imported layout: {imported:.3} nats/token");
    assert!(
        imported + 0.5 < gguf_order,
        "the imported layout ({imported:.3} nats/token) must beat llama.cpp's row order \
         ({gguf_order:.3}) clearly"
    );
}
