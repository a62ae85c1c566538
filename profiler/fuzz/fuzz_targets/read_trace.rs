//! Fuzzes the trace reader and everything that consumes what it accepts: any input must either be
//! refused with an error or be analysed, diffed, gated, rendered and exported without a panic.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = profiler::fuzzing::exercise_reader(data);
});
