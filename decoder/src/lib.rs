//! decodescope's reference decoder.
//!
//! - [`model`]: checkpoint config, weights, tokenizer, synthetic checkpoints and the CPU reference.
//! - [`gguf`]: GGUF reading and import into a Hugging Face checkpoint.
//! - [`kv`]: KV cache layouts (contiguous, paged, rotating) and the paged block allocator.
//! - [`probe`]: the memory bandwidth probe (the roofline of batch-1 decode).
//! - [`vk`]: the only module holding raw Vulkan handles and `unsafe`.
//! - [`cli`]: the `decoder` command line.

pub mod capture;
pub mod cli;
pub mod exec;
pub mod generate;
pub mod gguf;
pub mod kv;
pub mod limits;
pub mod model;
pub mod probe;
pub mod shaders;
pub mod vk;
