//! Export a Hugging Face checkpoint directory (Llama or Qwen3) as a GGUF file that llama.cpp
//! loads: the inverse of [`import_gguf`](super::import_gguf), written from the GGUF format
//! description and llama.cpp's tensor naming.
//!
//! - Matrices are written as F16 (`--dtype f16`), F32, or quantized as `llama-quantize` does
//!   (`--dtype q8_0|q4_0|q4_1|q4_k_m`, see [`super::quantize`]); norms always as F32.
//! - Llama's q/k projections are permuted for llama.cpp's RoPE layout as its converter does
//!   ([`permute_rope_rows`]); Qwen3's are written as they are.
//! - The BPE tokenizer comes from `tokenizer.json` (`tokenizer.ggml.model = "gpt2"`), with the
//!   pre-tokenizer name llama.cpp expects (`smollm` for SmolLM's digits-then-byte-level split,
//!   `qwen2` for Qwen, `gpt-2` for a plain byte-level one).
//!
//! The file is written to a temporary sibling and renamed into place.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result, bail};
use serde_json::Value as Json;

use super::dequant::GgmlType;
use super::import::permute_rope_rows;
use super::quantize::{QuantScheme, quantize, role_of};
use crate::model::WeightType;
use crate::model::config::{Arch, ModelConfig};
use crate::model::safetensors_io::SafetensorsFile;

/// Element type of the exported matrices: f16, f32, or a `llama-quantize` file type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ExportDtype {
    F16,
    F32,
    #[value(name = "q8_0")]
    Q8_0,
    #[value(name = "q4_0")]
    Q4_0,
    #[value(name = "q4_1")]
    Q4_1,
    /// Q4_K, with Q6_K for the output and half of the `attn_v` and `ffn_down` matrices.
    #[value(name = "q4_k_m")]
    Q4KM,
}

impl ExportDtype {
    /// The quantization scheme, for the quantized types.
    pub fn scheme(self) -> Option<QuantScheme> {
        match self {
            ExportDtype::F16 | ExportDtype::F32 => None,
            ExportDtype::Q8_0 => Some(QuantScheme::Q8_0),
            ExportDtype::Q4_0 => Some(QuantScheme::Q4_0),
            ExportDtype::Q4_1 => Some(QuantScheme::Q4_1),
            ExportDtype::Q4KM => Some(QuantScheme::Q4KM),
        }
    }
}

const GGML_F32: u32 = 0;
const GGML_F16: u32 = 1;
const ALIGN: u64 = 32;

/// A metadata value of the kinds the export writes.
enum Kv {
    U32(u32),
    F32(f32),
    Bool(bool),
    Str(String),
    Strs(Vec<String>),
    I32s(Vec<i32>),
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_kv(out: &mut Vec<u8>, key: &str, v: &Kv) {
    put_str(out, key);
    match v {
        Kv::U32(x) => {
            out.extend_from_slice(&4u32.to_le_bytes());
            out.extend_from_slice(&x.to_le_bytes());
        }
        Kv::F32(x) => {
            out.extend_from_slice(&6u32.to_le_bytes());
            out.extend_from_slice(&x.to_le_bytes());
        }
        Kv::Bool(x) => {
            out.extend_from_slice(&7u32.to_le_bytes());
            out.push(u8::from(*x));
        }
        Kv::Str(s) => {
            out.extend_from_slice(&8u32.to_le_bytes());
            put_str(out, s);
        }
        Kv::Strs(v) => {
            out.extend_from_slice(&9u32.to_le_bytes());
            out.extend_from_slice(&8u32.to_le_bytes());
            out.extend_from_slice(&(v.len() as u64).to_le_bytes());
            for s in v {
                put_str(out, s);
            }
        }
        Kv::I32s(v) => {
            out.extend_from_slice(&9u32.to_le_bytes());
            out.extend_from_slice(&5u32.to_le_bytes());
            out.extend_from_slice(&(v.len() as u64).to_le_bytes());
            for x in v {
                out.extend_from_slice(&x.to_le_bytes());
            }
        }
    }
}

/// One tensor to export: the GGUF name, the checkpoint name, its (rows, cols) and how to write it.
struct Plan {
    gguf: String,
    hf: String,
    shape: Vec<usize>,
    ggml_type: u32,
    /// Permute rows for llama.cpp's RoPE layout, heads of this many.
    permute_heads: Option<usize>,
    /// Values computed from the config rather than read from the checkpoint (`rope_freqs`).
    computed: Option<Vec<f32>>,
}

impl Plan {
    /// The block type of a quantized matrix.
    fn blocks(&self) -> Option<WeightType> {
        WeightType::from_ggml_blocks(GgmlType::from_id(self.ggml_type))
    }

    fn bytes(&self) -> u64 {
        let n: usize = self.shape.iter().product();
        match self.blocks() {
            Some(t) => t.row_bytes(n as u64),
            None => n as u64 * if self.ggml_type == GGML_F16 { 2 } else { 4 },
        }
    }
}

/// The tensors to write; a quantized scheme gives each matrix the type llama.cpp would.
fn plans(cfg: &ModelConfig, dtype: ExportDtype) -> Result<Vec<Plan>> {
    let mut plans = plans_of(
        cfg,
        if dtype == ExportDtype::F32 {
            GGML_F32
        } else {
            GGML_F16
        },
    );
    if let Some(scheme) = dtype.scheme() {
        for p in &mut plans {
            let Some(role) = role_of(&p.hf, cfg.layers, cfg.tie_word_embeddings) else {
                continue;
            };
            let cols = p.shape.last().copied().unwrap_or(0);
            let t = scheme.type_for(role, cols).with_context(|| {
                format!(
                    "tensor {}: rows of {cols} elements are not whole blocks of the type \
                     {scheme:?} gives it; export this model as q8_0, q4_0 or q4_1",
                    p.hf
                )
            })?;
            p.ggml_type = t.ggml().id();
        }
    }
    Ok(plans)
}

fn plans_of(cfg: &ModelConfig, mat: u32) -> Vec<Plan> {
    let (h, q, kv, i, d) = (
        cfg.hidden,
        cfg.heads * cfg.head_dim,
        cfg.kv_heads * cfg.head_dim,
        cfg.intermediate,
        cfg.head_dim,
    );
    let llama = cfg.arch == Arch::Llama;
    let p = |gguf: String, hf: String, shape: Vec<usize>, t: u32, permute: Option<usize>| Plan {
        gguf,
        hf,
        shape,
        ggml_type: t,
        permute_heads: permute,
        computed: None,
    };
    let mut v = vec![p(
        "token_embd.weight".into(),
        "model.embed_tokens.weight".into(),
        vec![cfg.vocab, h],
        mat,
        None,
    )];
    for l in 0..cfg.layers {
        let (b, m) = (format!("blk.{l}"), format!("model.layers.{l}"));
        v.push(p(
            format!("{b}.attn_norm.weight"),
            format!("{m}.input_layernorm.weight"),
            vec![h],
            GGML_F32,
            None,
        ));
        v.push(p(
            format!("{b}.attn_q.weight"),
            format!("{m}.self_attn.q_proj.weight"),
            vec![q, h],
            mat,
            llama.then_some(cfg.heads),
        ));
        v.push(p(
            format!("{b}.attn_k.weight"),
            format!("{m}.self_attn.k_proj.weight"),
            vec![kv, h],
            mat,
            llama.then_some(cfg.kv_heads),
        ));
        v.push(p(
            format!("{b}.attn_v.weight"),
            format!("{m}.self_attn.v_proj.weight"),
            vec![kv, h],
            mat,
            None,
        ));
        v.push(p(
            format!("{b}.attn_output.weight"),
            format!("{m}.self_attn.o_proj.weight"),
            vec![h, q],
            mat,
            None,
        ));
        if cfg.qk_norm {
            v.push(p(
                format!("{b}.attn_q_norm.weight"),
                format!("{m}.self_attn.q_norm.weight"),
                vec![d],
                GGML_F32,
                None,
            ));
            v.push(p(
                format!("{b}.attn_k_norm.weight"),
                format!("{m}.self_attn.k_norm.weight"),
                vec![d],
                GGML_F32,
                None,
            ));
        }
        v.push(p(
            format!("{b}.ffn_norm.weight"),
            format!("{m}.post_attention_layernorm.weight"),
            vec![h],
            GGML_F32,
            None,
        ));
        for (g, hf) in [("ffn_gate", "mlp.gate_proj"), ("ffn_up", "mlp.up_proj")] {
            v.push(p(
                format!("{b}.{g}.weight"),
                format!("{m}.{hf}.weight"),
                vec![i, h],
                mat,
                None,
            ));
        }
        v.push(p(
            format!("{b}.ffn_down.weight"),
            format!("{m}.mlp.down_proj.weight"),
            vec![h, i],
            mat,
            None,
        ));
    }
    v.push(p(
        "output_norm.weight".into(),
        "model.norm.weight".into(),
        vec![h],
        GGML_F32,
        None,
    ));
    if !cfg.tie_word_embeddings {
        v.push(p(
            "output.weight".into(),
            "lm_head.weight".into(),
            vec![cfg.vocab, h],
            mat,
            None,
        ));
    }
    v
}

/// The tokenizer as GGUF metadata, from `tokenizer.json` and `tokenizer_config.json`.
fn tokenizer_kvs(dir: &Path, cfg: &ModelConfig, out: &mut Vec<(String, Kv)>) -> Result<()> {
    let path = dir.join("tokenizer.json");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let t: Json = serde_json::from_str(&text)
        .with_context(|| format!("{} is not valid JSON", path.display()))?;
    let model = &t["model"];
    if model["type"].as_str() != Some("BPE") {
        bail!(
            "{}: the tokenizer model is {}, but the export writes BPE (gpt2-style) tokenizers only",
            path.display(),
            model["type"]
        );
    }
    let vocab = model["vocab"]
        .as_object()
        .with_context(|| format!("{}: model.vocab is missing", path.display()))?;
    let mut tokens = vec![String::new(); cfg.vocab];
    let mut types = vec![1i32; cfg.vocab];
    let mut seen = vec![false; cfg.vocab];
    let mut put = |id: u64, s: &str, ty: i32| {
        if let Some(slot) = tokens.get_mut(id as usize) {
            *slot = s.to_owned();
            types[id as usize] = ty;
            seen[id as usize] = true;
        }
    };
    for (s, id) in vocab {
        if let Some(id) = id.as_u64() {
            put(id, s, 1);
        }
    }
    for a in t["added_tokens"].as_array().into_iter().flatten() {
        if let (Some(id), Some(s)) = (a["id"].as_u64(), a["content"].as_str()) {
            let special = a["special"].as_bool().unwrap_or(false);
            put(id, s, if special { 3 } else { 4 });
        }
    }
    for (i, s) in seen.iter().enumerate() {
        if !s {
            tokens[i] = format!("[PAD{i}]");
            types[i] = 5; // unused
        }
    }
    let merges: Vec<String> = model["merges"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| match m {
            Json::String(s) => Some(s.clone()),
            Json::Array(p) => Some(format!("{} {}", p.first()?.as_str()?, p.get(1)?.as_str()?)),
            _ => None,
        })
        .collect();
    let bos_text: Option<String> = cfg
        .bos_token_id
        .and_then(|b| tokens.get(b as usize))
        .cloned();
    let pre = pre_tokenizer_name(&t["pre_tokenizer"], cfg.arch);
    out.push(("tokenizer.ggml.model".into(), Kv::Str("gpt2".into())));
    out.push(("tokenizer.ggml.pre".into(), Kv::Str(pre.into())));
    out.push(("tokenizer.ggml.tokens".into(), Kv::Strs(tokens)));
    out.push(("tokenizer.ggml.token_type".into(), Kv::I32s(types)));
    out.push(("tokenizer.ggml.merges".into(), Kv::Strs(merges)));
    if let Some(b) = cfg.bos_token_id {
        out.push(("tokenizer.ggml.bos_token_id".into(), Kv::U32(b)));
    }
    if let Some(&e) = cfg.eos_token_ids.first() {
        out.push(("tokenizer.ggml.eos_token_id".into(), Kv::U32(e)));
    }
    let tc_path = dir.join("tokenizer_config.json");
    let tc: Json = match std::fs::read_to_string(&tc_path) {
        Ok(text) => serde_json::from_str(&text)
            .with_context(|| format!("{} is not valid JSON", tc_path.display()))?,
        Err(_) => Json::Null,
    };
    // tokenizer_config.json's flag where it has one; else whether tokenizer.json's post-processor
    // puts the BOS token first (Llama 3's does, and its tokenizer_config.json says nothing).
    let add_bos = tc["add_bos_token"]
        .as_bool()
        .unwrap_or_else(|| post_processor_adds(&t["post_processor"], bos_text.as_deref()));
    out.push(("tokenizer.ggml.add_bos_token".into(), Kv::Bool(add_bos)));
    if let Some(tpl) = tc["chat_template"].as_str() {
        out.push(("tokenizer.chat_template".into(), Kv::Str(tpl.into())));
    }
    Ok(())
}

/// Whether a tokenizer.json post-processor (`TemplateProcessing`, possibly inside a `Sequence`)
/// starts a single sequence with the special token `bos`.
fn post_processor_adds(p: &Json, bos: Option<&str>) -> bool {
    let Some(bos) = bos else { return false };
    match p["type"].as_str() {
        Some("TemplateProcessing") => {
            p["single"]
                .as_array()
                .and_then(|s| s.first())
                .and_then(|first| first["SpecialToken"]["id"].as_str())
                == Some(bos)
        }
        Some("Sequence") => p["processors"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|q| post_processor_adds(q, Some(bos))),
        _ => false,
    }
}

/// llama.cpp's name for a tokenizer.json pre-tokenizer.
fn pre_tokenizer_name(pre: &Json, arch: Arch) -> &'static str {
    if arch == Arch::Qwen3 {
        return "qwen2";
    }
    let kinds: Vec<&str> = match pre["type"].as_str() {
        Some("Sequence") => pre["pretokenizers"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["type"].as_str())
            .collect(),
        Some(k) => vec![k],
        None => vec![],
    };
    match kinds.as_slice() {
        ["Digits", "ByteLevel"] => "smollm",
        // llama.cpp's name for GPT-2's byte-level split (it refuses "gpt2").
        ["ByteLevel"] => "gpt-2",
        _ => "default",
    }
}

/// What [`export_gguf`] wrote.
#[derive(Debug)]
pub struct ExportSummary {
    pub tensors: usize,
    pub bytes: u64,
}

/// Writes `dir` (a Llama or Qwen3 checkpoint) as the GGUF file `out`.
/// llama.cpp's `rope_freqs` for Llama 3 RoPE scaling: per pair of dimensions, the factor its
/// frequency is divided by (1 for the high frequencies, `factor` for the low ones, smoothly in
/// between), so that llama.cpp's angles are the ones [`ModelConfig::rope_inv_freq`] gives. `None`
/// without scaling.
pub fn rope_freq_factors(cfg: &ModelConfig) -> Option<Vec<f32>> {
    let s = cfg.rope_scaling.as_ref()?;
    Some(
        crate::model::rope_base_inv_freq(cfg.rope_theta, cfg.head_dim)
            .into_iter()
            .map(|inv_freq| s.divisor(inv_freq) as f32)
            .collect(),
    )
}

pub fn export_gguf(dir: &Path, out: &Path, dtype: ExportDtype) -> Result<ExportSummary> {
    let cfg = ModelConfig::from_dir(dir)
        .with_context(|| format!("cannot read the checkpoint config in {}", dir.display()))?;
    let st_path = dir.join("model.safetensors");
    let st = SafetensorsFile::open(&st_path)
        .with_context(|| format!("cannot open {}", st_path.display()))?;
    let arch = match cfg.arch {
        Arch::Llama => "llama",
        Arch::Qwen3 => "qwen3",
    };
    let name = dir
        .file_name()
        .map_or("model".to_owned(), |n| n.to_string_lossy().into_owned());
    let mut kvs: Vec<(String, Kv)> = vec![
        ("general.architecture".into(), Kv::Str(arch.into())),
        ("general.name".into(), Kv::Str(name)),
        ("general.alignment".into(), Kv::U32(ALIGN as u32)),
        (
            "general.file_type".into(),
            Kv::U32(match dtype.scheme() {
                Some(scheme) => scheme.file_type(),
                None if dtype == ExportDtype::F32 => 0,
                None => 1,
            }),
        ),
    ];
    let k = |s: &str| format!("{arch}.{s}");
    kvs.extend([
        (
            k("context_length"),
            Kv::U32(cfg.max_position_embeddings as u32),
        ),
        (k("embedding_length"), Kv::U32(cfg.hidden as u32)),
        (k("block_count"), Kv::U32(cfg.layers as u32)),
        (k("feed_forward_length"), Kv::U32(cfg.intermediate as u32)),
        (k("attention.head_count"), Kv::U32(cfg.heads as u32)),
        (k("attention.head_count_kv"), Kv::U32(cfg.kv_heads as u32)),
        (k("attention.key_length"), Kv::U32(cfg.head_dim as u32)),
        (k("attention.value_length"), Kv::U32(cfg.head_dim as u32)),
        (k("rope.dimension_count"), Kv::U32(cfg.head_dim as u32)),
        (k("rope.freq_base"), Kv::F32(cfg.rope_theta as f32)),
        (
            k("attention.layer_norm_rms_epsilon"),
            Kv::F32(cfg.rms_norm_eps),
        ),
        (k("vocab_size"), Kv::U32(cfg.vocab as u32)),
    ]);
    tokenizer_kvs(dir, &cfg, &mut kvs)?;
    let mut plans = plans(&cfg, dtype)?;
    if let Some(factors) = rope_freq_factors(&cfg) {
        plans.push(Plan {
            gguf: "rope_freqs.weight".into(),
            hf: "(computed from rope_scaling)".into(),
            shape: vec![factors.len()],
            ggml_type: GGML_F32,
            permute_heads: None,
            computed: Some(factors),
        });
    }

    let mut header = Vec::new();
    header.extend_from_slice(b"GGUF");
    header.extend_from_slice(&3u32.to_le_bytes());
    header.extend_from_slice(&(plans.len() as u64).to_le_bytes());
    header.extend_from_slice(&(kvs.len() as u64).to_le_bytes());
    for (key, v) in &kvs {
        put_kv(&mut header, key, v);
    }
    let mut offset = 0u64;
    for p in &plans {
        put_str(&mut header, &p.gguf);
        header.extend_from_slice(&(p.shape.len() as u32).to_le_bytes());
        // GGUF dims run innermost first: (cols, rows).
        for d in p.shape.iter().rev() {
            header.extend_from_slice(&(*d as u64).to_le_bytes());
        }
        header.extend_from_slice(&p.ggml_type.to_le_bytes());
        header.extend_from_slice(&offset.to_le_bytes());
        offset = (offset + p.bytes()).div_ceil(ALIGN) * ALIGN;
    }
    header.resize(
        (header.len() as u64).div_ceil(ALIGN) as usize * ALIGN as usize,
        0,
    );

    let written = profiler::io::write_output(out, |w| -> Result<u64> {
        w.write_all(&header)?;
        let mut written = 0u64;
        for p in &plans {
            let values = match &p.computed {
                Some(v) => v.clone(),
                None => st
                    .read_f32(&p.hf, &p.shape)
                    .with_context(|| format!("{}: tensor {}", st_path.display(), p.hf))?,
            };
            let values = match p.permute_heads {
                Some(heads) => {
                    permute_rope_rows(&values, heads, p.shape[1]).with_context(|| {
                        format!("{}: cannot permute {} for RoPE", st_path.display(), p.hf)
                    })?
                }
                None => values,
            };
            let bytes: Vec<u8> = if let Some(t) = p.blocks() {
                quantize(t, &values)
            } else if p.ggml_type == GGML_F16 {
                values
                    .iter()
                    .flat_map(|&x| half::f16::from_f32(x).to_le_bytes())
                    .collect()
            } else {
                values.iter().flat_map(|x| x.to_le_bytes()).collect()
            };
            w.write_all(&bytes)?;
            let pad = (bytes.len() as u64).div_ceil(ALIGN) * ALIGN - bytes.len() as u64;
            w.write_all(&vec![0u8; pad as usize])?;
            written += bytes.len() as u64;
        }
        Ok(written)
    })
    .with_context(|| format!("cannot write {}", out.display()))?;
    Ok(ExportSummary {
        tensors: plans.len(),
        bytes: written,
    })
}
