//! Hugging Face tokenizer files from a GGUF file's `tokenizer.ggml.*` metadata.
//!
//! Only byte-level BPE vocabularies (`tokenizer.ggml.model == "gpt2"`) are converted: the
//! tokens become the BPE vocab (id = position), `tokenizer.ggml.merges` the merge list, tokens of
//! type CONTROL (3) become special added tokens and USER_DEFINED (4) non-special added tokens.
//! `tokenizer.ggml.pre` names llama.cpp's pre-tokenizer; [`pre_tokenizer_json`] maps it to the
//! Hugging Face pre-tokenizer whose splits are the same.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::{Value as Json, json};

use super::reader::{GgufFile, Value};

/// llama.cpp's token types (`tokenizer.ggml.token_type`).
pub mod token_type {
    pub const NORMAL: i64 = 1;
    pub const UNKNOWN: i64 = 2;
    pub const CONTROL: i64 = 3;
    pub const USER_DEFINED: i64 = 4;
    pub const UNUSED: i64 = 5;
    pub const BYTE: i64 = 6;
}

/// Llama 3's split regex, as in its `tokenizer.json`.
const LLAMA3_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen2/Qwen3's split regex, as in their `tokenizer.json`.
const QWEN2_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The `tokenizer.ggml.pre` values [`pre_tokenizer_json`] maps, for error messages.
pub const SUPPORTED_PRE: &str = "gpt-2, gpt2, mpt, olmo, smollm, starcoder, refact, command-r, \
     codeshell, exaone, minerva, llama3, llama-v3, llama-bpe, dbrx, smaug-bpe, qwen2, stablelm2";

/// Errors from building the tokenizer files. Every variant names the GGUF file.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error(
        "{}: tokenizer model {model:?} is not supported; only byte-level BPE (\"gpt2\") \
         vocabularies can be converted",
        path.display()
    )]
    UnsupportedModel { path: PathBuf, model: String },
    #[error(
        "{}: pre-tokenizer {pre:?} (tokenizer.ggml.pre) is not supported; supported: {SUPPORTED_PRE}",
        path.display()
    )]
    UnsupportedPre { path: PathBuf, pre: String },
    #[error("{}: metadata key {key} is missing; the file has no usable vocabulary", path.display())]
    Missing { path: PathBuf, key: &'static str },
    #[error("{}: metadata key {key} is malformed: {what}", path.display())]
    Malformed {
        path: PathBuf,
        key: &'static str,
        what: String,
    },
    #[error(
        "{}: the converted tokenizer does not load or does not round-trip: {what}; this is a \
         decodescope bug, please report it with the file",
        path.display()
    )]
    Validation { path: PathBuf, what: String },
}

/// The vocabulary of a GGUF file, read from its `tokenizer.ggml.*` metadata.
#[derive(Debug, Clone)]
pub struct GgufVocab {
    pub tokens: Vec<String>,
    pub token_types: Vec<i64>,
    pub merges: Vec<String>,
    pub pre: String,
    pub bos_id: Option<u32>,
    pub eos_id: Option<u32>,
    pub eot_id: Option<u32>,
    pub unk_id: Option<u32>,
    pub pad_id: Option<u32>,
    pub add_bos: bool,
    pub add_eos: bool,
    pub chat_template: Option<String>,
}

/// The contents of `tokenizer.json` and `tokenizer_config.json`.
#[derive(Debug, Clone)]
pub struct TokenizerFiles {
    pub tokenizer_json: Json,
    pub tokenizer_config_json: Json,
}

/// The byte each character of GPT-2's byte-level alphabet stands for (a byte-level BPE
/// vocabulary writes byte b as itself when it is printable, else as U+0100 onwards, in order).
fn byte_level_bytes() -> HashMap<char, u8> {
    let mut map = HashMap::with_capacity(256);
    let mut shifted = 0u32;
    for b in 0u32..256 {
        let printable =
            (0x21..=0x7e).contains(&b) || (0xa1..=0xac).contains(&b) || (0xae..=0xff).contains(&b);
        let c = if printable {
            b
        } else {
            shifted += 1;
            255 + shifted
        };
        if let Some(c) = char::from_u32(c) {
            map.insert(c, b as u8);
        }
    }
    map
}

impl GgufVocab {
    /// Ids of the normal tokens whose bytes are not whole UTF-8 text on their own: lone bytes
    /// and parts of multi-byte characters. (Added and control tokens are written as text.)
    pub fn partial_utf8_ids(&self) -> Vec<u32> {
        let bytes_of = byte_level_bytes();
        self.tokens
            .iter()
            .zip(&self.token_types)
            .enumerate()
            .filter(|(_, (_, kind))| **kind == token_type::NORMAL)
            .filter(|(_, (t, _))| {
                let bytes: Option<Vec<u8>> = t.chars().map(|c| bytes_of.get(&c).copied()).collect();
                bytes.is_some_and(|b| std::str::from_utf8(&b).is_err())
            })
            .map(|(id, _)| id as u32)
            .collect()
    }

    /// Reads the vocabulary; fails for anything but a byte-level BPE vocabulary.
    pub fn from_gguf(gguf: &GgufFile) -> Result<Self, TokenizerError> {
        let path = gguf.path();
        let model = str_key(gguf, "tokenizer.ggml.model")?.ok_or(TokenizerError::Missing {
            path: path.to_path_buf(),
            key: "tokenizer.ggml.model",
        })?;
        if model != "gpt2" {
            return Err(TokenizerError::UnsupportedModel {
                path: path.to_path_buf(),
                model: model.to_string(),
            });
        }
        let tokens = string_array(gguf, "tokenizer.ggml.tokens")?;
        let merges = string_array(gguf, "tokenizer.ggml.merges")?;
        let token_types = match gguf.get("tokenizer.ggml.token_type") {
            None => vec![token_type::NORMAL; tokens.len()],
            Some(v) => {
                let arr = v
                    .as_array()
                    .ok_or_else(|| malformed(path, "tokenizer.ggml.token_type", "not an array"))?;
                let types = arr
                    .values
                    .iter()
                    .map(Value::as_i64)
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| malformed(path, "tokenizer.ggml.token_type", "not integers"))?;
                if types.len() != tokens.len() {
                    return Err(malformed(
                        path,
                        "tokenizer.ggml.token_type",
                        &format!("{} entries for {} tokens", types.len(), tokens.len()),
                    ));
                }
                types
            }
        };
        // Files written before llama.cpp named pre-tokenizers behave like GPT-2.
        let pre = str_key(gguf, "tokenizer.ggml.pre")?
            .unwrap_or("gpt2")
            .to_string();
        let id = |key: &'static str| -> Result<Option<u32>, TokenizerError> {
            let Some(v) = gguf.get(key) else {
                return Ok(None);
            };
            let id = v
                .as_u64()
                .and_then(|i| u32::try_from(i).ok())
                .ok_or_else(|| malformed(path, key, &format!("{v:?} is not a token id")))?;
            if id as usize >= tokens.len() {
                return Err(malformed(
                    path,
                    key,
                    &format!(
                        "id {id} is outside the vocabulary of {} tokens",
                        tokens.len()
                    ),
                ));
            }
            Ok(Some(id))
        };
        let flag = |key: &'static str, default: bool| -> Result<bool, TokenizerError> {
            match gguf.get(key) {
                None => Ok(default),
                Some(v) => v
                    .as_bool()
                    .ok_or_else(|| malformed(path, key, "not a bool")),
            }
        };
        Ok(GgufVocab {
            bos_id: id("tokenizer.ggml.bos_token_id")?,
            eos_id: id("tokenizer.ggml.eos_token_id")?,
            eot_id: id("tokenizer.ggml.eot_token_id")?,
            unk_id: id("tokenizer.ggml.unknown_token_id")?,
            pad_id: id("tokenizer.ggml.padding_token_id")?,
            // llama.cpp's default for BPE vocabularies is to add neither.
            add_bos: flag("tokenizer.ggml.add_bos_token", false)?,
            add_eos: flag("tokenizer.ggml.add_eos_token", false)?,
            chat_template: str_key(gguf, "tokenizer.chat_template")?.map(str::to_string),
            tokens,
            token_types,
            merges,
            pre,
        })
    }

    fn token(&self, id: Option<u32>) -> Option<&str> {
        id.and_then(|i| self.tokens.get(i as usize))
            .map(String::as_str)
    }

    /// Whether id `i` becomes an added token, and if so whether it is special.
    fn added(&self, i: usize) -> Option<bool> {
        let id = Some(i as u32);
        let named = [
            self.bos_id,
            self.eos_id,
            self.eot_id,
            self.unk_id,
            self.pad_id,
        ]
        .contains(&id);
        match self.token_types[i] {
            token_type::CONTROL => Some(true),
            _ if named => Some(true),
            token_type::USER_DEFINED => Some(false),
            _ => None,
        }
    }

    /// Builds `tokenizer.json` and `tokenizer_config.json`.
    /// `path` is the GGUF file (for errors), `max_length` the model's context length.
    pub fn to_files(&self, path: &Path, max_length: u64) -> Result<TokenizerFiles, TokenizerError> {
        let mut vocab = serde_json::Map::with_capacity(self.tokens.len());
        let mut seen: HashMap<&str, usize> = HashMap::with_capacity(self.tokens.len());
        for (i, t) in self.tokens.iter().enumerate() {
            if let Some(first) = seen.insert(t, i) {
                return Err(malformed(
                    path,
                    "tokenizer.ggml.tokens",
                    &format!("token {t:?} appears twice (ids {first} and {i})"),
                ));
            }
            vocab.insert(t.clone(), json!(i));
        }
        let merges = self
            .merges
            .iter()
            .map(|m| {
                m.split_once(' ')
                    .map(|(a, b)| json!([a, b]))
                    .ok_or_else(|| {
                        malformed(
                            path,
                            "tokenizer.ggml.merges",
                            &format!("merge {m:?} has no space"),
                        )
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;

        let mut added_tokens = Vec::new();
        let mut added_decoder = serde_json::Map::new();
        let mut additional_special = Vec::new();
        let named = [self.bos_id, self.eos_id, self.unk_id, self.pad_id];
        for (i, t) in self.tokens.iter().enumerate() {
            let Some(special) = self.added(i) else {
                continue;
            };
            let entry = json!({
                "content": t, "single_word": false, "lstrip": false, "rstrip": false,
                "normalized": false, "special": special,
            });
            added_tokens.push({
                let mut e = entry.clone();
                e["id"] = json!(i);
                e
            });
            added_decoder.insert(i.to_string(), entry);
            if special && !named.contains(&Some(i as u32)) {
                additional_special.push(json!(t));
            }
        }

        let pre_tokenizer =
            pre_tokenizer_json(&self.pre).ok_or_else(|| TokenizerError::UnsupportedPre {
                path: path.to_path_buf(),
                pre: self.pre.clone(),
            })?;
        let post_processor = self.post_processor_json(path)?;

        let tokenizer_json = json!({
            "version": "1.0",
            "truncation": null,
            "padding": null,
            "added_tokens": added_tokens,
            "normalizer": null,
            "pre_tokenizer": pre_tokenizer,
            "post_processor": post_processor,
            "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
            "model": {
                "type": "BPE",
                "dropout": null,
                "unk_token": null,
                "continuing_subword_prefix": null,
                "end_of_word_suffix": null,
                "fuse_unk": false,
                "byte_fallback": false,
                "ignore_merges": false,
                "vocab": vocab,
                "merges": merges,
            },
        });

        let mut config = json!({
            "add_bos_token": self.add_bos,
            "add_eos_token": self.add_eos,
            "added_tokens_decoder": added_decoder,
            "additional_special_tokens": additional_special,
            "clean_up_tokenization_spaces": false,
            "model_max_length": max_length,
            "tokenizer_class": "GPT2Tokenizer",
        });
        for (key, id) in [
            ("bos_token", self.bos_id),
            ("eos_token", self.eos_id),
            ("unk_token", self.unk_id),
            ("pad_token", self.pad_id),
        ] {
            if let Some(t) = self.token(id) {
                config[key] = json!(t);
            }
        }
        if let Some(template) = &self.chat_template {
            config["chat_template"] = json!(template);
        }
        Ok(TokenizerFiles {
            tokenizer_json,
            tokenizer_config_json: config,
        })
    }

    fn post_processor_json(&self, path: &Path) -> Result<Json, TokenizerError> {
        if !self.add_bos && !self.add_eos {
            return Ok(
                json!({"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true}),
            );
        }
        let mut single = Vec::new();
        let mut pair = Vec::new();
        let mut special_tokens = serde_json::Map::new();
        let mut add = |key: &'static str,
                       id: Option<u32>,
                       seq: &mut Vec<Json>|
         -> Result<(), TokenizerError> {
            let t = self.token(id).ok_or_else(|| {
                malformed(
                    path,
                    key,
                    "the file asks to add this token but does not name it",
                )
            })?;
            seq.push(json!({"SpecialToken": {"id": t, "type_id": 0}}));
            special_tokens.insert(t.to_string(), json!({"id": t, "ids": [id], "tokens": [t]}));
            Ok(())
        };
        if self.add_bos {
            add("tokenizer.ggml.bos_token_id", self.bos_id, &mut single)?;
            add("tokenizer.ggml.bos_token_id", self.bos_id, &mut pair)?;
        }
        single.push(json!({"Sequence": {"id": "A", "type_id": 0}}));
        pair.push(json!({"Sequence": {"id": "A", "type_id": 0}}));
        if self.add_eos {
            add("tokenizer.ggml.eos_token_id", self.eos_id, &mut single)?;
            add("tokenizer.ggml.eos_token_id", self.eos_id, &mut pair)?;
        }
        pair.push(json!({"Sequence": {"id": "B", "type_id": 1}}));
        Ok(
            json!({"type": "TemplateProcessing", "single": single, "pair": pair, "special_tokens": special_tokens}),
        )
    }

    /// Loads `tokenizer_json` with the `tokenizers` crate and checks that every added token
    /// encodes to its own id and that a few strings survive encode then decode.
    pub fn validate(&self, path: &Path, files: &TokenizerFiles) -> Result<(), TokenizerError> {
        let fail = |what: String| TokenizerError::Validation {
            path: path.to_path_buf(),
            what,
        };
        let text = files.tokenizer_json.to_string();
        let tok: tokenizers::Tokenizer = text
            .parse()
            .map_err(|e| fail(format!("tokenizers rejects it: {e}")))?;
        for i in (0..self.tokens.len()).filter(|&i| self.added(i).is_some()) {
            let t = &self.tokens[i];
            let enc = tok
                .encode(t.as_str(), false)
                .map_err(|e| fail(format!("encoding {t:?}: {e}")))?;
            if enc.get_ids() != [i as u32] {
                return Err(fail(format!(
                    "{t:?} encodes to {:?}, expected [{i}]",
                    enc.get_ids()
                )));
            }
        }
        for s in [
            "Hello, world! 123",
            " two  spaces\nand a newline",
            "naïve café",
        ] {
            let enc = tok
                .encode(s, false)
                .map_err(|e| fail(format!("encoding {s:?}: {e}")))?;
            let back = tok
                .decode(enc.get_ids(), false)
                .map_err(|e| fail(format!("decoding {s:?}: {e}")))?;
            if back != s {
                return Err(fail(format!("{s:?} decodes back as {back:?}")));
            }
        }
        Ok(())
    }
}

/// The Hugging Face pre-tokenizer equivalent to llama.cpp's pre-tokenizer `pre`
/// (`tokenizer.ggml.pre`), or `None` when decodescope does not know it.
pub fn pre_tokenizer_json(pre: &str) -> Option<Json> {
    let byte_level = |use_regex: bool| json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": use_regex});
    let split_then_bytes = |regex: &str| {
        json!({"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": false},
            byte_level(false),
        ]})
    };
    Some(match pre {
        // The GPT-2 regex alone (`'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+|...`), which
        // ByteLevel applies itself with `use_regex`.
        "gpt-2" | "gpt2" | "mpt" | "olmo" => byte_level(true),
        // Each digit on its own (llama.cpp's `\p{N}` split), then the GPT-2 regex: the
        // StarCoder family, SmolLM among them.
        "smollm" | "starcoder" | "refact" | "command-r" | "codeshell" | "exaone" | "minerva" => {
            json!({"type": "Sequence", "pretokenizers": [
                {"type": "Digits", "individual_digits": true},
                byte_level(true),
            ]})
        }
        "llama3" | "llama-v3" | "llama-bpe" | "dbrx" | "smaug-bpe" => {
            split_then_bytes(LLAMA3_REGEX)
        }
        "qwen2" | "stablelm2" => split_then_bytes(QWEN2_REGEX),
        _ => return None,
    })
}

fn malformed(path: &Path, key: &'static str, what: &str) -> TokenizerError {
    TokenizerError::Malformed {
        path: path.to_path_buf(),
        key,
        what: what.to_string(),
    }
}

fn str_key<'a>(gguf: &'a GgufFile, key: &'static str) -> Result<Option<&'a str>, TokenizerError> {
    match gguf.get(key) {
        None => Ok(None),
        Some(v) => v.as_str().map(Some).ok_or_else(|| {
            malformed(
                gguf.path(),
                key,
                &format!("expected a string, found {}", v.value_type()),
            )
        }),
    }
}

fn string_array(gguf: &GgufFile, key: &'static str) -> Result<Vec<String>, TokenizerError> {
    let v = gguf.get(key).ok_or(TokenizerError::Missing {
        path: gguf.path().to_path_buf(),
        key,
    })?;
    let arr = v.as_array().ok_or_else(|| {
        malformed(
            gguf.path(),
            key,
            &format!("expected an array, found {}", v.value_type()),
        )
    })?;
    arr.values
        .iter()
        .map(|v| v.as_str().map(str::to_string))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| malformed(gguf.path(), key, "expected an array of strings"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_byte_level_alphabet_covers_every_byte_once() {
        let map = byte_level_bytes();
        assert_eq!(map.len(), 256);
        let mut bytes: Vec<u8> = map.values().copied().collect();
        bytes.sort_unstable();
        bytes.dedup();
        assert_eq!(bytes.len(), 256);
        // Printable bytes are themselves; the others are written from U+0100 on, in order.
        assert_eq!(map[&'!'], b'!');
        assert_eq!(map[&'\u{0100}'], 0x00);
        assert_eq!(map[&'\u{0120}'], b' ');
        assert_eq!(map[&'\u{00e4}'], 0xe4);
    }

    #[test]
    fn partial_characters_and_lone_bytes_are_found_and_text_is_not() {
        let tokens = [
            "\u{0120}the",      // " the"
            "\u{00c3}\u{00a4}", // C3 A4: "ä", whole
            "\u{00c3}",         // C3: the first byte of a two-byte character
            "\u{00e4}\u{00bd}", // E4 BD: two of a three-byte character's bytes
            "<|im_end|>",       // a control token, written as text
            "\u{00a4}",         // A4 alone: a continuation byte
        ];
        let vocab = GgufVocab {
            tokens: tokens.iter().map(|t| t.to_string()).collect(),
            token_types: vec![
                token_type::NORMAL,
                token_type::NORMAL,
                token_type::NORMAL,
                token_type::NORMAL,
                token_type::CONTROL,
                token_type::NORMAL,
            ],
            merges: Vec::new(),
            pre: "qwen2".into(),
            bos_id: None,
            eos_id: None,
            eot_id: None,
            unk_id: None,
            pad_id: None,
            add_bos: false,
            add_eos: false,
            chat_template: None,
        };
        assert_eq!(vocab.partial_utf8_ids(), vec![2, 3, 5]);
    }
}
