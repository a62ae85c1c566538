//! Models: checkpoint config, weights, tokenizer, synthetic checkpoints and the CPU reference.
//!
//! - [`config`]: `config.json` file schema and the normalized [`ModelConfig`].
//! - [`weights`]: f32 host tensors in a tree mirroring the Hugging Face names.
//! - [`quant`]: how a matrix is stored on the GPU (f16, or GGUF blocks kept as they are).
//! - [`tokenizer`]: `tokenizer.json`, stop ids, chat template, streaming detokenization.
//! - [`synth`]: `decoder synth` presets written as real Hugging Face directories.
//! - [`reference`]: the scalar CPU forward pass every GPU path is checked against.
//! - [`safetensors_io`]: tensor-by-tensor safetensors reading and streaming writing.
//!
//! [`Model::load`] reads a checkpoint directory; [`resolve_model`] turns a `--model` argument
//! (a directory or a preset name) into one, generating presets into a cache on first use.

pub mod config;
pub mod error;
pub mod quant;
pub mod reference;
pub mod safetensors_io;
pub mod synth;
pub mod tokenizer;
pub mod weights;

use std::path::{Path, PathBuf};

pub use config::{Arch, Llama3Scaling, ModelConfig, WeightDtype, rope_base_inv_freq};
pub use error::ModelError;
pub use quant::{Blocks, WeightType};
pub use reference::Reference;
pub use synth::Preset;
pub use tokenizer::Tokenizer;
pub use weights::{LayerWeights, Tensor, Weights};

/// The model every command uses when none is given.
pub const DEFAULT_MODEL: &str = "tiny";

/// The name under which the GGUF import of SmolLM2 lives in the cache.
pub const SMOLLM2: &str = "smollm2";

/// A loaded checkpoint: config, f32 weights and tokenizer.
#[derive(Debug)]
pub struct Model {
    /// The checkpoint directory.
    pub dir: PathBuf,
    pub config: ModelConfig,
    pub weights: Weights,
    pub tokenizer: Tokenizer,
}

impl Model {
    /// Loads `dir`: config.json first, then the tokenizer (both cheap, so a broken checkpoint
    /// fails before gigabytes are read), then the weights.
    pub fn load(dir: &Path) -> Result<Self, ModelError> {
        let config = ModelConfig::from_dir(dir)?;
        let tokenizer = Tokenizer::load(dir, &config)?;
        let weights = Weights::load(dir, &config)?;
        Ok(Self {
            dir: dir.to_path_buf(),
            config,
            weights,
            tokenizer,
        })
    }

    /// A CPU reference decoder over this model's weights with room for `max_seq` positions.
    pub fn reference(&self, max_seq: usize) -> Result<Reference<'_>, ModelError> {
        Reference::new(&self.config, &self.weights, max_seq)
    }
}

/// The decodescope cache: `$DECODESCOPE_CACHE`, else `$XDG_CACHE_HOME/decodescope`, else
/// `~/.cache/decodescope`.
pub fn cache_dir() -> Result<PathBuf, ModelError> {
    let non_empty = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    if let Some(dir) = non_empty("DECODESCOPE_CACHE") {
        return Ok(PathBuf::from(dir));
    }
    if let Some(dir) = non_empty("XDG_CACHE_HOME") {
        return Ok(PathBuf::from(dir).join("decodescope"));
    }
    if let Some(home) = non_empty("HOME") {
        return Ok(PathBuf::from(home).join(".cache").join("decodescope"));
    }
    Err(ModelError::UnknownModel {
        message: "cannot find a cache directory: set DECODESCOPE_CACHE (or XDG_CACHE_HOME or \
                  HOME)"
            .into(),
    })
}

/// The cache directory of a named model: `<cache>/models/<name>`.
pub fn cached_model_dir(name: &str) -> Result<PathBuf, ModelError> {
    Ok(cache_dir()?.join("models").join(name))
}

/// Turns a `--model` argument into a checkpoint directory: an existing directory is used as it
/// is; a preset name (tiny, tiny-llama, qwen3-0.6b, llama-1b) is generated on first use into
/// `<cache>/models/<preset>` (safe when two processes race: each writes a temporary directory
/// and renames it into place, and the loser uses the winner's); `smollm2` is the GGUF import in
/// `<cache>/models/smollm2`.
pub fn resolve_model(spec: &str) -> Result<PathBuf, ModelError> {
    let path = Path::new(spec);
    if path.is_dir() {
        return Ok(path.to_path_buf());
    }
    if let Some(preset) = Preset::from_name(spec) {
        let dir = cached_model_dir(preset.name())?;
        if dir.join("config.json").is_file() {
            return Ok(dir);
        }
        eprintln!(
            "decodescope: generating the {} preset into {} (first use)",
            preset.name(),
            dir.display()
        );
        let opts = synth::SynthOptions {
            progress: true,
            ..synth::SynthOptions::default()
        };
        return match synth::write_preset(preset, &dir, &opts) {
            Ok(()) => Ok(dir),
            // Another process finished the same preset first.
            Err(_) if dir.join("config.json").is_file() => Ok(dir),
            Err(e) => Err(e),
        };
    }
    if spec == SMOLLM2 {
        let dir = cached_model_dir(SMOLLM2)?;
        if dir.join("config.json").is_file() {
            return Ok(dir);
        }
        return Err(ModelError::UnknownModel {
            message: format!(
                "the smollm2 checkpoint is not in {}; run scripts/setup.sh, or convert a GGUF \
                 file with `decoder import-gguf`",
                dir.display()
            ),
        });
    }
    Err(ModelError::UnknownModel {
        message: format!(
            "'{spec}' is neither a checkpoint directory nor a known model name; give a \
             directory holding config.json, or one of: {}, {SMOLLM2}",
            Preset::names()
        ),
    })
}
