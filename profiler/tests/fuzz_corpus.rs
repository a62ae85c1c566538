//! Runs the fuzz target's body (`profiler::fuzzing::exercise_reader`) on stable: over every file of
//! the committed corpus (`fuzz/corpus/read_trace/`) and over seeded mutations of them (byte flips,
//! truncations, splices, digit edits). Any panic fails the test. `cargo +nightly fuzz run
//! read_trace` explores further; crashes it finds belong in the corpus.

use std::path::Path;

use profiler::fuzzing::exercise_reader;

/// The crate's SplitMix64, so the mutations are the same on every run.
struct Rng(profiler::rng::Rng);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0.below(n.max(1) as u64) as usize
    }
}

fn corpus() -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/read_trace");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("corpus directory")
        .map(|e| e.expect("entry").path())
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let bytes = std::fs::read(&p).expect("corpus file");
            (p.display().to_string(), bytes)
        })
        .collect()
}

fn mutate(rng: &mut Rng, input: &[u8], other: &[u8]) -> Vec<u8> {
    let mut v = input.to_vec();
    if v.is_empty() {
        return other.to_vec();
    }
    match rng.below(6) {
        0 => {
            let i = rng.below(v.len());
            v[i] ^= 1 << rng.below(8);
        }
        1 => v.truncate(rng.below(v.len())),
        2 => {
            // Replace a digit with a large number.
            let digits: Vec<usize> = (0..v.len()).filter(|&i| v[i].is_ascii_digit()).collect();
            if !digits.is_empty() {
                let i = digits[rng.below(digits.len())];
                let big = [
                    "18446744073709551615",
                    "4294967295",
                    "0",
                    "99999999999",
                    "-1",
                    "1e308",
                ];
                let s = big[rng.below(big.len())].as_bytes();
                v.splice(i..i + 1, s.iter().copied());
            }
        }
        3 => {
            // Splice a piece of another input.
            if !other.is_empty() {
                let a = rng.below(other.len());
                let b = (a + rng.below(200)).min(other.len());
                let at = rng.below(v.len());
                v.splice(at..at, other[a..b].iter().copied());
            }
        }
        4 => {
            // Delete a range.
            let a = rng.below(v.len());
            let b = (a + rng.below(50)).min(v.len());
            v.drain(a..b);
        }
        _ => {
            // Swap a structural character.
            let chars = b"{}[],:\"0n";
            let i = rng.below(v.len());
            v[i] = chars[rng.below(chars.len())];
        }
    }
    v
}

#[test]
fn corpus_inputs_never_panic() {
    let files = corpus();
    assert!(files.len() >= 4, "the corpus is seeded");
    let accepted = files.iter().filter(|(_, b)| exercise_reader(b)).count();
    assert!(accepted >= 2, "the valid seeds are accepted");
}

#[test]
fn mutated_inputs_never_panic() {
    let files = corpus();
    let mut rng = Rng(profiler::rng::Rng::new(0x5eed));
    let mut accepted = 0;
    let rounds = 5_000;
    for _ in 0..rounds {
        let (_, a) = &files[rng.below(files.len())];
        let (_, b) = &files[rng.below(files.len())];
        let mut input = mutate(&mut rng, a, b);
        for _ in 0..rng.below(3) {
            input = mutate(&mut rng, &input, b);
        }
        if exercise_reader(&input) {
            accepted += 1;
        }
    }
    // Digit edits keep many inputs valid, so the analysis paths run on odd values too.
    assert!(
        accepted > rounds / 20,
        "only {accepted} mutated inputs were accepted"
    );
}
