//! The compute shaders of `shaders/`, compiled to SPIR-V by `build.rs` and embedded here.

include!(concat!(env!("OUT_DIR"), "/shaders.rs"));
