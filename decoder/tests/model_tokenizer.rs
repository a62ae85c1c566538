//! The synthetic byte-level BPE round-trips any UTF-8 text, streaming decode emits exactly the
//! decoded text without splitting characters, stop ids and chat templates are read from the
//! files Hugging Face writes.
#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is a test failure.

mod model_support;

use decoder::model::synth::{SynthOptions, byte_level_bpe_json};
use decoder::model::{Model, Preset};
use model_support::synth;
use profiler::rng::Rng;

const SAMPLES: &[&str] = &[
    "Once upon a time",
    "  leading spaces and trailing  ",
    "tabs\tand\nnewlines\r\n\n",
    "Über café naïve résumé straße — “quotes” …",
    "日本語のテキスト、中文文本，한국어 텍스트",
    "emoji 😀🎉👩‍👩‍👧 and flags 🇫🇷",
    "control \u{0}\u{1}\u{7f} and combining e\u{301}",
    "<|im_start|>user literal specials<|im_end|>",
    "",
];

/// Deterministic random strings drawn from several Unicode ranges.
fn random_texts(n: usize) -> Vec<String> {
    let mut rng = Rng::new(7);
    (0..n)
        .map(|_| {
            let len = rng.below(40) as usize;
            (0..len)
                .map(|_| {
                    let range: std::ops::Range<u32> = match rng.below(5) {
                        0 => 0x20..0x7f,
                        1 => 0x00..0x20,
                        2 => 0xa0..0x800,
                        3 => 0x3000..0x9fff,
                        _ => 0x1f300..0x1f6ff,
                    };
                    let span = u64::from(range.end - range.start);
                    char::from_u32(range.start + rng.below(span) as u32).unwrap_or('?')
                })
                .collect()
        })
        .collect()
}

#[test]
fn synthetic_tokenizers_round_trip_and_stream() {
    for preset in [Preset::Tiny, Preset::TinyLlama] {
        let (_t, dir) = synth(preset, &SynthOptions::default());
        let model = Model::load(&dir).unwrap();
        let tok = &model.tokenizer;
        assert_eq!(tok.vocab_size(), model.config.vocab, "{}", preset.name());
        // Merges make common words single tokens.
        assert_eq!(tok.encode(" the", false).unwrap().len(), 1);
        let mut texts: Vec<String> = SAMPLES.iter().map(|s| s.to_string()).collect();
        texts.extend(random_texts(200));
        for text in &texts {
            let ids = tok.encode(text, false).unwrap();
            assert_eq!(&tok.decode(&ids).unwrap(), text, "{}", preset.name());
            // Streaming one id at a time gives the same text.
            let mut stream = tok.stream();
            let mut streamed = String::new();
            for &id in &ids {
                if let Some(piece) = stream.push(id).unwrap() {
                    assert!(!piece.contains('\u{FFFD}') || text.contains('\u{FFFD}'));
                    streamed.push_str(&piece);
                }
            }
            if let Some(piece) = stream.finish().unwrap() {
                streamed.push_str(&piece);
            }
            assert_eq!(&streamed, text);
        }
    }
}

#[test]
fn stream_holds_back_a_split_character() {
    let (_t, dir) = synth(Preset::Tiny, &SynthOptions::default());
    let model = Model::load(&dir).unwrap();
    // Byte tokens have id = byte value: "é" is C3 A9, "😀" is F0 9F 98 80.
    let mut stream = model.tokenizer.stream();
    assert_eq!(stream.push(u32::from(b'a')).unwrap().as_deref(), Some("a"));
    assert_eq!(stream.push(0xC3).unwrap(), None);
    assert_eq!(stream.push(0xA9).unwrap().as_deref(), Some("é"));
    for b in [0xF0, 0x9F, 0x98] {
        assert_eq!(stream.push(b).unwrap(), None);
    }
    assert_eq!(stream.push(0x80).unwrap().as_deref(), Some("😀"));
    // A dangling lead byte at the end comes out as U+FFFD at finish.
    assert_eq!(stream.push(0xE2).unwrap(), None);
    assert_eq!(stream.finish().unwrap().as_deref(), Some("\u{FFFD}"));
}

#[test]
fn stray_bytes_come_out_as_replacement_characters_and_the_window_stays_bounded() {
    // A model that emits continuation bytes alone never completes a character: after four
    // bytes held back, they come out as U+FFFD, keeping the last three (which may begin one).
    let (_t, dir) = synth(Preset::Tiny, &SynthOptions::default());
    let model = Model::load(&dir).unwrap();
    let mut stream = model.tokenizer.stream();
    let mut out = String::new();
    for _ in 0..1_000 {
        if let Some(piece) = stream.push(0x80).unwrap() {
            out.push_str(&piece);
        }
    }
    assert!(out.chars().all(|c| c == '\u{FFFD}'), "{out:?}");
    assert!(
        out.chars().count() >= 990,
        "{} characters",
        out.chars().count()
    );
    // A character that follows the stray bytes still comes out whole.
    for b in [0xF0, 0x9F, 0x98, 0x80] {
        if let Some(piece) = stream.push(b).unwrap() {
            out.push_str(&piece);
        }
    }
    if let Some(piece) = stream.finish().unwrap() {
        out.push_str(&piece);
    }
    assert!(out.ends_with('😀'), "{:?}", &out[out.len() - 12..]);
}

#[test]
fn large_vocabulary_is_filled_exactly_and_round_trips() {
    let specials: Vec<String> = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
        .map(String::from)
        .to_vec();
    let json = byte_level_bpe_json(151_936, &specials, None);
    let tok: tokenizers::Tokenizer = json.to_string().parse().unwrap();
    assert_eq!(tok.get_vocab_size(true), 151_936);
    assert_eq!(tok.token_to_id("<|im_end|>"), Some(151_935));
    for text in SAMPLES {
        let ids = tok.encode(*text, false).unwrap().get_ids().to_vec();
        assert_eq!(&tok.decode(&ids, false).unwrap(), text);
    }
}

#[test]
fn eos_ids_come_from_generation_config_then_config() {
    let (_t, dir) = synth(Preset::Tiny, &SynthOptions::default());
    let model = Model::load(&dir).unwrap();
    let im_end = model.tokenizer.token_to_id("<|im_end|>").unwrap();
    let eot = model.tokenizer.token_to_id("<|endoftext|>").unwrap();
    let mut both = vec![im_end, eot];
    both.sort();
    assert_eq!(model.tokenizer.eos_ids(), both.as_slice());
    std::fs::remove_file(dir.join("generation_config.json")).unwrap();
    let model = Model::load(&dir).unwrap();
    assert_eq!(model.tokenizer.eos_ids(), &[im_end]);
}

#[test]
fn chat_templates_render_like_hugging_face() {
    let (_t, dir) = synth(Preset::Tiny, &SynthOptions::default());
    let tok = Model::load(&dir).unwrap().tokenizer;
    assert_eq!(
        tok.apply_chat_template("Hi there").unwrap(),
        "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n"
    );
    let ids = tok.encode_prompt("Hi there", true).unwrap();
    assert_eq!(ids[0], tok.token_to_id("<|im_start|>").unwrap());

    let (_t, dir) = synth(Preset::TinyLlama, &SynthOptions::default());
    let tok = Model::load(&dir).unwrap().tokenizer;
    let bos = tok.token_to_id("<|begin_of_text|>").unwrap();
    assert_eq!(
        tok.apply_chat_template("  Hi there ").unwrap(),
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>\
         <|start_header_id|>assistant<|end_header_id|>\n\n"
    );
    // The template brings its own BOS: exactly one, as with Hugging Face's apply_chat_template.
    let chat = tok.encode_prompt("Hi", true).unwrap();
    assert_eq!(chat[0], bos);
    assert_eq!(chat.iter().filter(|&&i| i == bos).count(), 1);
    // A plain prompt gets its BOS from the post-processor.
    let plain = tok.encode_prompt("Hi", false).unwrap();
    assert_eq!(plain[0], bos);
    assert_eq!(tok.decode(&plain[1..]).unwrap(), "Hi");
}

/// Features real templates use (Qwen3's among them): Python string methods, namespace(), loop
/// controls, raise_exception, trim_blocks / lstrip_blocks, a list of named templates.
#[test]
fn python_flavoured_templates_render() {
    let (_t, dir) = synth(Preset::Tiny, &SynthOptions::default());
    let template = "{%- set ns = namespace(found=false) %}\n\
        {%- for message in messages %}\n\
            {%- if message.content.strip().startswith('Hi') %}{%- set ns.found = true %}{% endif %}\n\
            {%- if loop.index > 5 %}{% break %}{% endif %}\n\
            {{- '<|im_start|>' + message['role'] + '\\n' + message.content.strip() + '<|im_end|>\\n' }}\n\
        {%- endfor %}\n\
        {%- if not ns.found %}{{ raise_exception('no greeting') }}{% endif %}\n\
        {%- if add_generation_prompt %}\n\
            {{- '<|im_start|>assistant\\n' }}\n\
        {%- endif %}\n";
    let config = serde_json::json!({
        "eos_token": {"content": "<|im_end|>"},
        "chat_template": [
            {"name": "tool_use", "template": "unused"},
            {"name": "default", "template": template}
        ]
    });
    std::fs::write(dir.join("tokenizer_config.json"), config.to_string()).unwrap();
    let tok = Model::load(&dir).unwrap().tokenizer;
    assert_eq!(
        tok.apply_chat_template("  Hi you  ").unwrap(),
        "<|im_start|>user\nHi you<|im_end|>\n<|im_start|>assistant\n"
    );
    let err = tok.apply_chat_template("Bye").unwrap_err().to_string();
    assert!(
        err.contains("no greeting") && err.contains("tokenizer_config.json"),
        "{err}"
    );

    std::fs::write(dir.join("tokenizer_config.json"), "{}").unwrap();
    let tok = Model::load(&dir).unwrap().tokenizer;
    assert!(!tok.has_chat_template());
    let err = tok.encode_prompt("Hi", true).unwrap_err().to_string();
    assert!(
        err.contains("chat_template") && err.contains("--chat"),
        "{err}"
    );
}
