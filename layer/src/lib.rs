//! decodescope's capture layer: a Vulkan layer that turns an unmodified program's Vulkan traffic
//! into the raw records from which `profiler record` writes a decodescope trace.
//!
//! `profiler record -- PROGRAM ARGS...` enables it through the loader's environment
//! (`VK_ADD_LAYER_PATH`, `VK_INSTANCE_LAYERS`, `VK_LOADER_LAYERS_ENABLE`) with the manifest
//! `VkLayer_decodescope_capture.json`, and passes the options in the environment:
//!
//! - `DECODESCOPE_CAPTURE_DIR`: where to write `layer.PID.jsonl` (without it the layer passes
//!   every call through untouched);
//! - `DECODESCOPE_TIMESTAMPS`: `off`, `submit`, `command-buffer` or `dispatch`;
//! - `DECODESCOPE_DISPATCH_TIMING`: at `dispatch`, `clock` (each dispatch reads the device clock
//!   in its own, instrumented shader, where the device allows; the default) or `interval`;
//! - `DECODESCOPE_CLOCK_EXCLUDE`: comma-separated parts of pipeline names (`entry@HASH`) whose
//!   pipelines keep the program's code, their dispatches timed by interval;
//! - `DECODESCOPE_CLOCK_MAX_GROUPS`: the most workgroups a dispatch reads the shader clock with
//!   (default 32768); a wider one (and an indirect one) is timed by interval.
//!
//! It counts what the decoder's recorder counts (TRACE_FORMAT.md, "counters"), per wait group,
//! with commands inside a command buffer counted each time the buffer is submitted; names
//! dispatches by the program's debug-utils labels, else by its pipeline names, else by the
//! pipeline's entry point and the hash of its shader code (`main@1a2b3c4d`, with `+SPEC` for
//! specialization constants: the same in every run of the same program); and adds GPU
//! timestamps of its own at the chosen level. `profiler::capture` documents the raw records and
//! how they become steps.
//!
//! [`ffi`] (private) holds every `unsafe` block and raw handle; [`state`] is the safe
//! bookkeeping; [`recording`] counts recorded commands without a lock; [`output`] the writer thread and the live file that outlives a killed program.
//! [`spirv`] rewrites a compute module's SPIR-V so that its dispatches time themselves with the
//! device clock.

#[allow(unsafe_code)]
mod ffi;
mod output;
pub mod recording;
pub mod spirv;
pub mod state;
