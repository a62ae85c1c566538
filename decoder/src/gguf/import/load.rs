//! A GGUF file loaded as a model with no conversion on disk (`--model FILE.gguf`): the config and
//! tokenizer come from its metadata exactly as [`import_gguf`] writes them, and every matrix in a
//! block type the kernels decode (Q8_0, Q4_0, Q4_1, Q4_K, Q6_K) keeps the file's blocks, which go
//! to the GPU as they are. Other tensors are read as f32 values, as the importer reads them: norms
//! stay f32, other matrices (F16, BF16, F32, Q5_0, Q5_1, Q2_K, Q3_K, Q5_K, IQ4_NL, IQ4_XS) are
//! rounded to the f16 the GPU holds.

use super::*;
use crate::model::{Blocks, Model, ModelConfig, Tensor, Tokenizer, WeightType, Weights};

/// Whether `--model` names a GGUF file (an existing file ending in `.gguf`).
pub fn is_gguf_file(path: &Path) -> bool {
    path.is_file()
        && path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
}

/// Loads `gguf_path` as a model; its matrices keep their blocks (see the module doc).
pub fn load_gguf_model(gguf_path: &Path) -> Result<Model, ImportError> {
    let gguf = GgufFile::open(gguf_path)?;
    let path = gguf.path().to_path_buf();
    let hp = read_hparams(&gguf)?;
    let plan = plan_tensors(&gguf, &hp)?;
    let tied = !plan.iter().any(|p| p.hf_name == "lm_head.weight");
    let vocab = GgufVocab::from_gguf(&gguf)?;
    let tok_files = vocab.to_files(&path, hp.context_length)?;
    vocab.validate(&path, &tok_files)?;

    // The config and tokenizer readers take a directory: a staging directory in the temporary
    // folder holds the files while they are read, and is removed when this function returns.
    let target = std::env::temp_dir().join(format!(
        "decodescope-gguf-{}-{}",
        std::process::id(),
        path.file_stem()
            .map_or("model".into(), |s| s.to_string_lossy().into_owned())
    ));
    let staging = Staging::create(&target)?;
    let dir = staging.path();
    write_json(
        &dir.join("config.json"),
        &config_json(&hp, &vocab, tied, OutDtype::F16),
    )?;
    write_json(
        &dir.join("generation_config.json"),
        &generation_config_json(&vocab),
    )?;
    write_json(&dir.join("tokenizer.json"), &tok_files.tokenizer_json)?;
    write_json(
        &dir.join("tokenizer_config.json"),
        &tok_files.tokenizer_config_json,
    )?;
    let model_err = |err| ImportError::Model {
        path: path.clone(),
        err: Box::new(err),
    };
    let config = ModelConfig::from_dir(dir).map_err(model_err)?;
    let tokenizer = Tokenizer::load(dir, &config).map_err(model_err)?;
    drop(staging);

    let mut tensors = Vec::with_capacity(plan.len());
    for p in &plan {
        tensors.push(read_tensor(&gguf, p)?);
    }
    let weights = Weights::from_tensors(&config, tensors).map_err(model_err)?;
    Ok(Model {
        dir: path,
        config,
        weights,
        tokenizer,
    })
}

/// One planned tensor: its blocks kept where the kernels decode its type, else its values.
fn read_tensor(gguf: &GgufFile, p: &Planned) -> Result<Tensor, ImportError> {
    let t = &p.gguf;
    let path = gguf.path();
    let shape: Vec<usize> = t.shape().iter().map(|&d| d as usize).collect();
    let raw = gguf.read_tensor_data(t)?;
    let cols = t.dims[0] as usize;
    let unpermute_err = |n_heads: usize| ImportError::NotRepresentable {
        path: path.to_path_buf(),
        tensor: t.name.clone(),
        what: format!(
            "shape {:?} does not split into {n_heads} heads of an even size",
            t.shape()
        ),
    };
    match WeightType::from_ggml_blocks(t.ggml_type).filter(|_| shape.len() == 2) {
        Some(wtype) => {
            // A row is a whole number of blocks: llama.cpp's row permutation moves whole rows.
            let bytes = match p.transform {
                RowTransform::UnpermuteRope { n_heads } => {
                    let row = wtype.row_bytes(cols as u64) as usize;
                    unpermute_rope_rows(&raw, n_heads, row).ok_or_else(|| unpermute_err(n_heads))?
                }
                RowTransform::None => raw,
            };
            Tensor::from_blocks(p.hf_name.clone(), &shape, Blocks { wtype, bytes }).map_err(|err| {
                ImportError::Model {
                    path: path.to_path_buf(),
                    err: Box::new(err),
                }
            })
        }
        None => {
            let n = shape.iter().product();
            let mut values =
                dequantize(t.ggml_type, &raw, n).map_err(|err| ImportError::Dequant {
                    path: path.to_path_buf(),
                    tensor: t.name.clone(),
                    err,
                })?;
            if let RowTransform::UnpermuteRope { n_heads } = p.transform {
                values = unpermute_rope_rows(&values, n_heads, cols)
                    .ok_or_else(|| unpermute_err(n_heads))?;
            }
            if shape.len() == 2 {
                // The GPU holds such a matrix in f16: the reference computes with the same
                // values, as it does with an imported f16 checkpoint.
                check_representable(path, &t.name, &values, OutDtype::F16)?;
                values
                    .iter_mut()
                    .for_each(|v| *v = half::f16::from_f32(*v).to_f32());
            }
            Ok(Tensor::new(p.hf_name.clone(), &shape, values))
        }
    }
}
