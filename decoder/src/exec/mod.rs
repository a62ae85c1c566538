//! Execution: lowering the model description to Vulkan work, the knobs between the two modes,
//! and the kernels' host-side descriptions.

pub mod attention;
pub mod engine;
pub mod harness;
pub mod kernels;
pub mod knobs;
pub mod persistent;
pub mod program;
pub mod spans;
