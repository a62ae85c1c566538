//! Reading a trace never panics, and neither does anything done with what was read: structured
//! mutations of the golden traces (numbers set to 2^64 - 1, 2^32 - 1, 0, 1e308, ...; steps
//! removed, repeated, cleared or taken from another trace) that the reader accepts go through
//! `compute_stats`, `compute_diff`, the gates, every renderer and the Chrome export
//! (`profiler::fuzzing::exercise_mutated`, also the fuzz target `analyse_traces`). Any panic
//! (an overflow in a debug build) fails the test.

use profiler::fuzzing::exercise_mutated;
use profiler::trace::GpuSpan;

#[test]
fn mutated_traces_never_panic_in_stats_or_diff() {
    let cases = 3_000;
    let kept: usize = (0..cases).map(exercise_mutated).sum();
    // About 2.5 mutations per trace, two traces per case: most are kept, so the analysis runs on
    // odd values rather than on the seeds.
    assert!(
        kept > 3 * cases as usize,
        "only {kept} mutations were kept over {cases} cases"
    );
}

/// The case: a GPU span whose start plus duration passes 2^64 (stats.rs panicked in
/// `gpu_gap`, in both `profiler stats` and `profiler diff`).
#[test]
fn a_gpu_span_that_ends_past_2_64_is_analysed() {
    let mut t = profiler::synthetic_trace(&profiler::SynthOptions {
        layers: 1,
        prompt_tokens: 2,
        decode_tokens: 6,
        ..profiler::SynthOptions::default()
    });
    let n = t.tokens.len();
    for (i, token) in t.tokens.iter_mut().enumerate() {
        if let Some(s) = token.gpu_spans.first_mut() {
            *s = GpuSpan(s.0, u64::MAX - 10, 1_000, s.3, s.4, 1);
        }
        if i + 1 == n {
            token.start_ns = u64::MAX;
            token.wall_ns = u64::MAX;
        }
    }
    let bytes = profiler::to_vec(&t).expect("serialize");
    let t = profiler::from_slice(&bytes).expect("the reader accepts it");
    let stats = profiler::compute_stats(&t, "a", &profiler::StatsOptions::default());
    let _ = profiler::render_stats(&stats, profiler::Format::Human);
    let diff = profiler::compute_diff(
        &t,
        "a",
        &t,
        "b",
        &profiler::DiffOptions {
            resamples: 20,
            ..profiler::DiffOptions::default()
        },
    );
    let _ = profiler::render_diff(&diff, None, profiler::Format::Markdown);
}
