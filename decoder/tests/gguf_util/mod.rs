//! Test support shared by the `gguf_*` tests: a small GGUF writer (written from the format
//! description, independently of the reader) and a tiny synthetic Llama/Qwen3 model.
#![allow(dead_code)] // Each test binary uses a different part.
#![allow(clippy::unwrap_used)] // Test support: a failure is a test failure.

use std::path::Path;

use decoder::gguf::{Array, Value, ValueType};

/// GGUF type ids used by the tests.
pub const F32: u32 = 0;
pub const F16: u32 = 1;
pub const Q4_0: u32 = 2;
pub const Q4_1: u32 = 3;
pub const Q8_0: u32 = 8;
pub const Q4_K: u32 = 12;
pub const Q5_K: u32 = 13;
pub const Q6_K: u32 = 14;
pub const BF16: u32 = 30;

/// One tensor to write: dims innermost first, its ggml type id and its raw bytes.
#[derive(Debug, Clone)]
pub struct RawTensor {
    pub name: String,
    pub dims: Vec<u64>,
    pub ggml_type: u32,
    pub data: Vec<u8>,
}

/// Builds a GGUF file in memory.
#[derive(Debug, Clone)]
pub struct GgufBuilder {
    pub version: u32,
    pub metadata: Vec<(String, Value)>,
    pub tensors: Vec<RawTensor>,
}

impl Default for GgufBuilder {
    fn default() -> Self {
        GgufBuilder {
            version: 3,
            metadata: Vec::new(),
            tensors: Vec::new(),
        }
    }
}

fn put_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn type_id(t: ValueType) -> u32 {
    t.id()
}

fn put_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => out.push(*x),
        Value::I8(x) => out.push(*x as u8),
        Value::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => out.push(u8::from(*x)),
        Value::String(s) => put_string(out, s),
        Value::Array(a) => {
            out.extend_from_slice(&type_id(a.elem_type).to_le_bytes());
            out.extend_from_slice(&(a.values.len() as u64).to_le_bytes());
            for e in &a.values {
                put_value(out, e);
            }
        }
    }
}

impl GgufBuilder {
    pub fn kv(&mut self, key: &str, value: Value) -> &mut Self {
        self.metadata.retain(|(k, _)| k != key);
        self.metadata.push((key.to_string(), value));
        self
    }

    pub fn remove_kv(&mut self, key: &str) -> &mut Self {
        self.metadata.retain(|(k, _)| k != key);
        self
    }

    pub fn tensor(&mut self, name: &str, dims: &[u64], ggml_type: u32, data: Vec<u8>) -> &mut Self {
        self.tensors.retain(|t| t.name != name);
        self.tensors.push(RawTensor {
            name: name.to_string(),
            dims: dims.to_vec(),
            ggml_type,
            data,
        });
        self
    }

    pub fn remove_tensor(&mut self, name: &str) -> &mut Self {
        self.tensors.retain(|t| t.name != name);
        self
    }

    fn alignment(&self) -> u64 {
        self.metadata
            .iter()
            .find(|(k, _)| k == "general.alignment")
            .and_then(|(_, v)| v.as_u64())
            .unwrap_or(32)
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let align = self.alignment() as usize;
        let mut out = Vec::new();
        out.extend_from_slice(b"GGUF");
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (k, v) in &self.metadata {
            put_string(&mut out, k);
            out.extend_from_slice(&type_id(v.value_type()).to_le_bytes());
            put_value(&mut out, v);
        }
        let mut offset = 0usize;
        let mut offsets = Vec::new();
        for t in &self.tensors {
            put_string(&mut out, &t.name);
            out.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&t.ggml_type.to_le_bytes());
            out.extend_from_slice(&(offset as u64).to_le_bytes());
            offsets.push(offset);
            offset = (offset + t.data.len()).div_ceil(align) * align;
        }
        out.resize(out.len().div_ceil(align) * align, 0);
        let data_start = out.len();
        for (t, off) in self.tensors.iter().zip(offsets) {
            out.resize(data_start + off, 0);
            out.extend_from_slice(&t.data);
        }
        out
    }

    pub fn write(&self, path: &Path) {
        std::fs::write(path, self.to_bytes()).unwrap();
    }
}

pub fn string(s: &str) -> Value {
    Value::String(s.to_string())
}

pub fn array(elem_type: ValueType, values: Vec<Value>) -> Value {
    Value::Array(Array { elem_type, values })
}

pub fn strings<S: AsRef<str>>(items: &[S]) -> Value {
    array(
        ValueType::String,
        items.iter().map(|s| string(s.as_ref())).collect(),
    )
}

pub fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

pub fn f16_bytes(values: &[f32]) -> Vec<u8> {
    values
        .iter()
        .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
        .collect()
}

/// Q8_0 blocks with the fixed scale `d` (exact in f16); every value must be `d * q` for an
/// integer `q` in -127..=127.
pub fn q8_0_bytes(values: &[f32], d: f32) -> Vec<u8> {
    assert_eq!(values.len() % 32, 0);
    let mut out = Vec::new();
    for block in values.chunks(32) {
        out.extend_from_slice(&half::f16::from_f32(d).to_le_bytes());
        for v in block {
            let q = (v / d).round();
            assert!(
                q.abs() <= 127.0 && q * d == *v,
                "{v} is not a multiple of {d}"
            );
            out.push(q as i8 as u8);
        }
    }
    out
}

/// Q4_1 blocks with the fixed scale `d` and minimum `m` (exact in f16); every value must be
/// `d * q + m` for an integer `q` in 0..16.
pub fn q4_1_bytes(values: &[f32], d: f32, m: f32) -> Vec<u8> {
    assert_eq!(values.len() % 32, 0);
    let mut out = Vec::new();
    for block in values.chunks(32) {
        out.extend_from_slice(&half::f16::from_f32(d).to_le_bytes());
        out.extend_from_slice(&half::f16::from_f32(m).to_le_bytes());
        let q: Vec<u8> = block
            .iter()
            .map(|v| {
                let q = ((v - m) / d).round();
                assert!(
                    (0.0..16.0).contains(&q) && q * d + m == *v,
                    "{v} is not {d} * q + {m}"
                );
                q as u8
            })
            .collect();
        for j in 0..16 {
            out.push(q[j] | (q[j + 16] << 4));
        }
    }
    out
}

/// GPT-2's byte-to-character map: printable bytes stand for themselves, the others are shifted
/// to 256 and up, in byte order.
pub fn gpt2_byte_chars() -> Vec<char> {
    let mut n = 0u32;
    (0u32..256)
        .map(|b| {
            let printable =
                (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
            if printable {
                char::from_u32(b).unwrap()
            } else {
                n += 1;
                char::from_u32(255 + n).unwrap()
            }
        })
        .collect()
}

/// The tiny vocabulary: 3 control tokens, one user-defined token, the 256 byte characters and
/// a few merges.
pub const SPECIALS: [&str; 3] = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"];
pub const USER_DEFINED: &str = "<tool>";
pub const MERGES: [&str; 5] = ["h e", "l l", "he ll", "hell o", "Ġ w"];

pub fn tiny_vocab() -> (Vec<String>, Vec<i32>) {
    let mut tokens: Vec<String> = SPECIALS.iter().map(|s| s.to_string()).collect();
    let mut types = vec![3; SPECIALS.len()];
    tokens.push(USER_DEFINED.to_string());
    types.push(4);
    for c in gpt2_byte_chars() {
        tokens.push(c.to_string());
        types.push(1);
    }
    for m in MERGES {
        tokens.push(m.replace(' ', ""));
        types.push(1);
    }
    (tokens, types)
}

/// Hyper-parameters of the tiny model.
pub const HIDDEN: usize = 32;
pub const N_HEADS: usize = 4;
pub const N_KV_HEADS: usize = 2;
pub const HEAD_DIM: usize = 8;
pub const INTERMEDIATE: usize = 64;
pub const N_LAYERS: usize = 2;

/// A deterministic value that f16 holds exactly: a multiple of 1/64 in [-1, 1).
pub fn exact_value(seed: usize) -> f32 {
    let x = (seed.wrapping_mul(2654435761) >> 7) % 128;
    (x as f32 - 64.0) / 64.0
}

pub fn exact_values(n: usize, salt: usize) -> Vec<f32> {
    (0..n)
        .map(|i| exact_value(i * 31 + salt * 1_000_003))
        .collect()
}

/// llama.cpp's RoPE row permutation written as its converter does it, with numpy-style
/// reshape/swapaxes index arithmetic: view the rows as `(n_heads, 2, head_dim/2)`, swap the last
/// two axes, flatten again.
pub fn llama_cpp_permute(hf: &[f32], n_heads: usize, cols: usize) -> Vec<f32> {
    let rows = hf.len() / cols;
    let half = rows / n_heads / 2;
    let mut out = vec![0f32; hf.len()];
    for out_row in 0..rows {
        // Output index (h, i, s) in shape (n_heads, half, 2) reads input (h, s, i).
        let h = out_row / (2 * half);
        let i = (out_row % (2 * half)) / 2;
        let s = out_row % 2;
        let in_row = h * 2 * half + s * half + i;
        out[out_row * cols..(out_row + 1) * cols]
            .copy_from_slice(&hf[in_row * cols..(in_row + 1) * cols]);
    }
    out
}

/// The tiny model's Hugging Face tensors (name, shape, values) and the GGUF file holding them
/// the way llama.cpp would (`arch` is "llama" or "qwen3").
pub struct TinyModel {
    pub hf: Vec<(String, Vec<usize>, Vec<f32>)>,
    pub gguf: GgufBuilder,
}

pub fn tiny_model(arch: &str) -> TinyModel {
    let (tokens, types) = tiny_vocab();
    let vocab = tokens.len();
    let mut g = GgufBuilder::default();
    let a = |k: &str| format!("{arch}.{k}");
    g.kv("general.architecture", string(arch))
        .kv("general.name", string("tiny test model"))
        .kv(&a("block_count"), Value::U32(N_LAYERS as u32))
        .kv(&a("context_length"), Value::U32(256))
        .kv(&a("embedding_length"), Value::U32(HIDDEN as u32))
        .kv(&a("feed_forward_length"), Value::U32(INTERMEDIATE as u32))
        .kv(&a("attention.head_count"), Value::U32(N_HEADS as u32))
        .kv(&a("attention.head_count_kv"), Value::U32(N_KV_HEADS as u32))
        .kv(&a("rope.freq_base"), Value::F32(100000.0))
        .kv(&a("attention.layer_norm_rms_epsilon"), Value::F32(1e-5))
        .kv(&a("rope.dimension_count"), Value::U32(HEAD_DIM as u32))
        .kv("tokenizer.ggml.model", string("gpt2"))
        .kv("tokenizer.ggml.pre", string("smollm"))
        .kv("tokenizer.ggml.tokens", strings(&tokens))
        .kv(
            "tokenizer.ggml.token_type",
            array(
                ValueType::I32,
                types.iter().map(|&t| Value::I32(t)).collect(),
            ),
        )
        .kv("tokenizer.ggml.merges", strings(&MERGES))
        .kv("tokenizer.ggml.bos_token_id", Value::U32(1))
        .kv("tokenizer.ggml.eos_token_id", Value::U32(2))
        .kv("tokenizer.ggml.unknown_token_id", Value::U32(0))
        .kv("tokenizer.ggml.padding_token_id", Value::U32(2))
        .kv("tokenizer.ggml.add_bos_token", Value::Bool(false))
        .kv(
            "tokenizer.chat_template",
            string("{% for m in messages %}<|im_start|>{{ m['content'] }}<|im_end|>{% endfor %}"),
        );

    let mut hf = Vec::new();
    let mut salt = 0;
    let mut next = |n: usize| {
        salt += 1;
        exact_values(n, salt)
    };
    let permute = arch == "llama";

    let embed = next(vocab * HIDDEN);
    g.tensor(
        "token_embd.weight",
        &[HIDDEN as u64, vocab as u64],
        Q8_0,
        q8_0_bytes(&embed, 1.0 / 64.0),
    );
    hf.push((
        "model.embed_tokens.weight".to_string(),
        vec![vocab, HIDDEN],
        embed,
    ));
    let norm = next(HIDDEN);
    g.tensor(
        "output_norm.weight",
        &[HIDDEN as u64],
        F32,
        f32_bytes(&norm),
    );
    hf.push(("model.norm.weight".to_string(), vec![HIDDEN], norm));

    for l in 0..N_LAYERS {
        let p = |n: &str| format!("model.layers.{l}.{n}");
        let b = |n: &str| format!("blk.{l}.{n}");
        let mut push = |gname: String,
                        hname: String,
                        shape: Vec<usize>,
                        values: Vec<f32>,
                        ty: u32,
                        gguf_values: Vec<f32>| {
            let dims: Vec<u64> = shape.iter().rev().map(|&d| d as u64).collect();
            let data = match ty {
                F32 => f32_bytes(&gguf_values),
                F16 => f16_bytes(&gguf_values),
                _ => unreachable!(),
            };
            g.tensor(&gname, &dims, ty, data);
            hf.push((hname, shape, values));
        };
        let v = next(HIDDEN);
        push(
            b("attn_norm.weight"),
            p("input_layernorm.weight"),
            vec![HIDDEN],
            v.clone(),
            F32,
            v,
        );
        let v = next(HIDDEN);
        push(
            b("ffn_norm.weight"),
            p("post_attention_layernorm.weight"),
            vec![HIDDEN],
            v.clone(),
            F32,
            v,
        );
        let q = next(N_HEADS * HEAD_DIM * HIDDEN);
        let q_gguf = if permute {
            llama_cpp_permute(&q, N_HEADS, HIDDEN)
        } else {
            q.clone()
        };
        push(
            b("attn_q.weight"),
            p("self_attn.q_proj.weight"),
            vec![N_HEADS * HEAD_DIM, HIDDEN],
            q,
            F32,
            q_gguf,
        );
        let k = next(N_KV_HEADS * HEAD_DIM * HIDDEN);
        let k_gguf = if permute {
            llama_cpp_permute(&k, N_KV_HEADS, HIDDEN)
        } else {
            k.clone()
        };
        push(
            b("attn_k.weight"),
            p("self_attn.k_proj.weight"),
            vec![N_KV_HEADS * HEAD_DIM, HIDDEN],
            k,
            F32,
            k_gguf,
        );
        let v = next(N_KV_HEADS * HEAD_DIM * HIDDEN);
        push(
            b("attn_v.weight"),
            p("self_attn.v_proj.weight"),
            vec![N_KV_HEADS * HEAD_DIM, HIDDEN],
            v.clone(),
            F16,
            v,
        );
        let v = next(HIDDEN * N_HEADS * HEAD_DIM);
        push(
            b("attn_output.weight"),
            p("self_attn.o_proj.weight"),
            vec![HIDDEN, N_HEADS * HEAD_DIM],
            v.clone(),
            F32,
            v,
        );
        let v = next(INTERMEDIATE * HIDDEN);
        push(
            b("ffn_gate.weight"),
            p("mlp.gate_proj.weight"),
            vec![INTERMEDIATE, HIDDEN],
            v.clone(),
            F32,
            v,
        );
        let v = next(HIDDEN * INTERMEDIATE);
        push(
            b("ffn_down.weight"),
            p("mlp.down_proj.weight"),
            vec![HIDDEN, INTERMEDIATE],
            v.clone(),
            F32,
            v,
        );
        if arch == "qwen3" {
            let v = next(HEAD_DIM);
            push(
                b("attn_q_norm.weight"),
                p("self_attn.q_norm.weight"),
                vec![HEAD_DIM],
                v.clone(),
                F32,
                v,
            );
            let v = next(HEAD_DIM);
            push(
                b("attn_k_norm.weight"),
                p("self_attn.k_norm.weight"),
                vec![HEAD_DIM],
                v.clone(),
                F32,
                v,
            );
        }
        // ffn_up as Q4_1: values d * q + m with d = 1/16, m = -1/2.
        let up: Vec<f32> = (0..INTERMEDIATE * HIDDEN)
            .map(|i| ((i * 7 + l * 3) % 16) as f32 / 16.0 - 0.5)
            .collect();
        g.tensor(
            &b("ffn_up.weight"),
            &[HIDDEN as u64, INTERMEDIATE as u64],
            Q4_1,
            q4_1_bytes(&up, 1.0 / 16.0, -0.5),
        );
        hf.push((p("mlp.up_proj.weight"), vec![INTERMEDIATE, HIDDEN], up));
    }
    TinyModel { hf, gguf: g }
}

/// A fresh temporary directory.
pub fn temp_dir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}
