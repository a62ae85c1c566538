//! Op kinds for a foreign program's dispatches.
//!
//! The decoder knows what each of its dispatches does and writes it into [`OpInfo::kind`]
//! (`matvec`, `norm`, `rope`, ...). The capture layer does not: every dispatch of a program that
//! `profiler record` captured is named by its debug-utils label or pipeline name and has kind
//! `dispatch`. So that such a trace can be compared with the decoder's by what the work is (its
//! matrix-vector products against the decoder's), a [`KindRules`] table maps dispatch names to
//! the decoder's kinds:
//!
//! - a rule is a glob `pattern` (`*` matches any run of characters, every other character only
//!   itself; case-sensitive; matched against the whole label) and a `kind`;
//! - rules are tried in order and the first match wins; a label that no rule matches keeps kind
//!   `dispatch`;
//! - the built-in rules ([`KindRules::builtin`]) know the decoder's own labels (so
//!   `profiler record -- decoder capture ...` gets the kinds of the decoder's own trace) and
//!   llama.cpp's ggml-vulkan pipeline names;
//! - a user file (`--op-kinds FILE`, [`KindRules::load`]) of `[[rule]]` tables is tried before
//!   them; TRACE_FORMAT.md documents its format.
//!
//! `profiler record` applies the rules when it writes the trace; `stats`, `diff` and the viewer
//! apply them again when they read a foreign trace ([`KindRules::classify_foreign`]), to the ops
//! still of kind `dispatch`, so traces written before the rules existed, or before a rule file
//! named their kernels, get kinds too.

use std::path::Path;

use serde::Deserialize;

use crate::trace::{OpInfo, Trace};

/// The kind of a foreign dispatch that no rule matched.
pub const UNCLASSIFIED: &str = "dispatch";

/// The kinds a dispatch can have (`OpInfo::kind` of the decoder's dispatches), in the order the
/// decoder's forward pass meets them.
pub const DISPATCH_KINDS: [&str; 9] = [
    "embed",
    "norm",
    "matvec",
    "rope",
    "kv",
    "attention",
    "elementwise",
    "argmax",
    "copy",
];

/// The built-in rules, tried after a user file's. First match wins, so specific patterns come
/// before the general ones that would also match them.
const BUILTIN: &[(&str, &str)] = &[
    // The decoder's own dispatch labels (decoder/src/exec: program/, attention.rs), which the
    // layer sees as debug-utils labels when it captures the decoder: the kinds its own trace
    // gives them. `profiler::kinds` tests check these against the decoder traces in `traces/`.
    ("embed", "embed"),
    ("argmax", "argmax"),
    ("lm_head", "matvec"),
    ("final_norm", "norm"),
    ("logits_readback", "copy"),
    ("L*.attn_norm", "norm"),
    ("L*.mlp_norm", "norm"),
    ("L*.q_norm", "norm"),
    ("L*.k_norm", "norm"),
    ("L*.q_proj", "matvec"),
    ("L*.k_proj", "matvec"),
    ("L*.v_proj", "matvec"),
    ("L*.o_proj", "matvec"),
    ("L*.gate_proj", "matvec"),
    ("L*.up_proj", "matvec"),
    ("L*.down_proj", "matvec"),
    ("L*.qkv_proj", "matvec"),
    ("L*.o_proj_residual", "matvec"),
    ("L*.gate_up_silu", "matvec"),
    ("L*.down_proj_residual", "matvec"),
    ("L*.q_rope", "rope"),
    ("L*.k_rope", "rope"),
    // The fused preset's q/k norm, RoPE and cache write in one dispatch: the decoder calls it rope.
    ("L*.qk_norm_rope_kv", "rope"),
    ("L*.k_append", "kv"),
    ("L*.v_append", "kv"),
    ("L*.kv_gather", "kv"),
    ("L*.attn_prefill", "attention"),
    ("L*.attn_scores", "attention"),
    ("L*.softmax", "attention"),
    ("L*.attn_wsum", "attention"),
    ("L*.attn_split", "attention"),
    ("L*.attn_merge", "attention"),
    ("L*.attn_residual", "elementwise"),
    ("L*.mlp_residual", "elementwise"),
    ("L*.silu_mul", "elementwise"),
    // The persistent token kernel: the whole step in one dispatch, kind `token` in the decoder's
    // trace too (its per-phase spans come from the kernel's own clocks, which the layer cannot
    // read).
    ("token", "token"),
    // llama.cpp's ggml-vulkan pipeline names (its pipelines' debug names, which the layer uses
    // when the program sets no debug-utils label; GGML_VK_DEBUG_MARKERS=1 makes it name them).
    // Matrix products: the decode GEMV (mul_mat_vec_*, also mul_mat_vec_id_* for experts), the
    // GEMM (matmul_*, mul_mm*), the GEMM's split-k reduction, and the conversions done only for
    // them: activations quantized to q8_1 for the integer-dot GEMV, weights dequantized.
    ("mul_mat*", "matvec"),
    ("matmul*", "matvec"),
    ("mul_mm*", "matvec"),
    ("split_k_reduce*", "matvec"),
    ("quantize_q8_1*", "matvec"),
    ("dequant*", "matvec"),
    // Attention: flash attention and its split-k reduction (fa_*), and the softmax of the
    // unfused path (scores and weighted sum are mul_mat there, so they count as matvec).
    ("flash_attn*", "attention"),
    ("fa_*", "attention"),
    ("soft_max*", "attention"),
    // RoPE: rope_norm_* (the "normal" layout, not a norm), rope_neox_*, rope_multi_*, ...
    // Before `*norm*`, which `rope_norm_*` would also match.
    ("rope*", "rope"),
    // Norms, with what ggml-vulkan fuses into them: rms_norm_mul_* (the weight multiply) and
    // rms_norm_mul_rope_* (q/k norm, weight and RoPE). The latter counts as a norm, not a rope:
    // the norm is its reduction, the rest per-element work on its result. (The decoder's fused
    // `qk_norm_rope_kv` also writes the KV cache and is kind rope; llama.cpp writes its cache in
    // set_rows, below.) Before every rule that a fused name could also match (`mul_f*`).
    ("*norm*", "norm"),
    // KV cache writes, embedding lookups, copies.
    ("set_rows*", "kv"),
    ("get_rows*", "embed"),
    ("cpy*", "copy"),
    ("contig_cpy*", "copy"),
    ("copy*", "copy"),
    ("dup*", "copy"),
    // Sampling on the device.
    ("argmax*", "argmax"),
    ("argsort*", "argmax"),
    ("topk*", "argmax"),
    // Per-element work: residual adds (add_rms_* also accumulates the next norm's partial sums),
    // the weight multiply, gated activations, scaling.
    ("add*", "elementwise"),
    ("multi_add*", "elementwise"),
    ("mul_f*", "elementwise"),
    ("sub_f*", "elementwise"),
    ("div_f*", "elementwise"),
    ("swiglu*", "elementwise"),
    ("geglu*", "elementwise"),
    ("reglu*", "elementwise"),
    ("silu*", "elementwise"),
    ("gelu*", "elementwise"),
    ("relu*", "elementwise"),
    ("sigmoid*", "elementwise"),
    ("tanh*", "elementwise"),
    ("scale*", "elementwise"),
];

/// One rule: dispatches whose label matches `pattern` are of kind `kind`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KindRule {
    /// A glob: `*` matches any run of characters (also none), every other character itself.
    pub pattern: String,
    /// One of [`DISPATCH_KINDS`], or [`UNCLASSIFIED`] to leave matching labels unclassified.
    pub kind: String,
}

/// An ordered table of [`KindRule`]s; the first rule whose pattern matches a label decides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KindRules {
    rules: Vec<KindRule>,
    /// Where the rules came from, for notes (`built-in`, `my.toml + built-in`).
    origin: String,
}

impl Default for KindRules {
    /// The built-in rules.
    fn default() -> Self {
        KindRules::builtin()
    }
}

/// A rule file that cannot be read or is wrong. Every message names the file.
#[derive(Debug, thiserror::Error)]
pub enum KindsError {
    #[error("cannot read op-kind rule file {path}: {err}")]
    Read {
        path: String,
        /// In the message, so not a `#[source]`: `{:#}` chains would say it twice.
        err: std::io::Error,
    },
    #[error(
        "op-kind rule file {path} is not valid: {message}; a rule file holds `[[rule]]` tables \
         with `pattern` and `kind` (see profiler/TRACE_FORMAT.md, \"Op kinds\")"
    )]
    Parse { path: String, message: String },
    #[error("op-kind rule file {path}, line {line}, rule {index}, field `{field}`: {message}")]
    Rule {
        path: String,
        /// 1-based line of the field in the file.
        line: usize,
        /// 1-based position of the rule in the file.
        index: usize,
        field: &'static str,
        message: String,
    },
}

/// The file's schema: `[[rule]]` tables.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleFile {
    #[serde(default)]
    rule: Vec<RawRule>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    pattern: toml::Spanned<String>,
    kind: toml::Spanned<String>,
}

/// Whether `label` matches the glob `pattern` as a whole: `*` matches any run of characters
/// (also none), every other character only itself (case-sensitive).
pub fn glob_match(pattern: &str, label: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), label.chars().collect());
    let (mut pi, mut ti) = (0, 0);
    // Where the last `*` was, and the label position it has been tried to end at.
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if pi < p.len() && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if let Some((sp, st)) = star {
            // Let the last `*` swallow one more character and try again after it.
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// The 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

impl KindRules {
    /// The built-in rules: the decoder's labels and llama.cpp's ggml-vulkan pipeline names.
    pub fn builtin() -> KindRules {
        KindRules {
            rules: BUILTIN
                .iter()
                .map(|&(pattern, kind)| KindRule {
                    pattern: pattern.to_owned(),
                    kind: kind.to_owned(),
                })
                .collect(),
            origin: "built-in".to_owned(),
        }
    }

    /// No rules at all: every foreign dispatch keeps kind `dispatch`.
    pub fn empty() -> KindRules {
        KindRules {
            rules: Vec::new(),
            origin: "none".to_owned(),
        }
    }

    /// Parses a rule file's TOML text; `source` names the file in errors.
    pub fn parse(text: &str, source: &str) -> Result<KindRules, KindsError> {
        let file: RuleFile = toml::from_str(text).map_err(|e| KindsError::Parse {
            path: source.to_owned(),
            message: match e.span() {
                Some(span) => format!("line {}: {}", line_of(text, span.start), e.message()),
                None => e.message().to_owned(),
            },
        })?;
        if file.rule.is_empty() {
            return Err(KindsError::Parse {
                path: source.to_owned(),
                message: "it has no `[[rule]]` tables".to_owned(),
            });
        }
        let mut rules = Vec::with_capacity(file.rule.len());
        for (i, r) in file.rule.into_iter().enumerate() {
            let err = |field: &'static str, span: std::ops::Range<usize>, message: String| {
                KindsError::Rule {
                    path: source.to_owned(),
                    line: line_of(text, span.start),
                    index: i + 1,
                    field,
                    message,
                }
            };
            let (pattern_span, kind_span) = (r.pattern.span(), r.kind.span());
            let (pattern, kind) = (r.pattern.into_inner(), r.kind.into_inner());
            if pattern.is_empty() {
                return Err(err(
                    "pattern",
                    pattern_span,
                    "the pattern is empty; give a dispatch name, with `*` for any run of \
                     characters (e.g. \"my_gemv_*\")"
                        .to_owned(),
                ));
            }
            if kind != UNCLASSIFIED && !DISPATCH_KINDS.contains(&kind.as_str()) {
                return Err(err(
                    "kind",
                    kind_span,
                    format!(
                        "unknown kind \"{kind}\"; use one of {}, or \"{UNCLASSIFIED}\" to leave \
                         the matching dispatches unclassified",
                        DISPATCH_KINDS.join(", ")
                    ),
                ));
            }
            rules.push(KindRule { pattern, kind });
        }
        Ok(KindRules {
            rules,
            origin: source.to_owned(),
        })
    }

    /// Reads and checks a rule file.
    pub fn load(path: &Path) -> Result<KindRules, KindsError> {
        let source = path.display().to_string();
        let bytes = crate::io::read_regular_file(path).map_err(|err| KindsError::Read {
            path: source.clone(),
            err,
        })?;
        let text = String::from_utf8(bytes).map_err(|_| KindsError::Parse {
            path: source.clone(),
            message: "it is not UTF-8 text; a rule file is TOML".to_owned(),
        })?;
        KindRules::parse(&text, &source)
    }

    /// The rules of `--op-kinds FILE` (when given) followed by the built-in ones (unless
    /// `builtin` is false): what `record`, `stats`, `diff` and the viewer use.
    pub fn from_options(file: Option<&Path>, builtin: bool) -> Result<KindRules, KindsError> {
        let user = file.map(KindRules::load).transpose()?;
        let base = if builtin {
            KindRules::builtin()
        } else {
            KindRules::empty()
        };
        Ok(match user {
            Some(u) => u.then(base),
            None => base,
        })
    }

    /// These rules, then `later`'s (tried only where none of these matches).
    pub fn then(mut self, later: KindRules) -> KindRules {
        if self.rules.is_empty() {
            return later;
        }
        if !later.rules.is_empty() {
            self.origin = format!("{} + {}", self.origin, later.origin);
        }
        self.rules.extend(later.rules);
        self
    }

    pub fn rules(&self) -> &[KindRule] {
        &self.rules
    }

    /// Where the rules came from: `built-in`, `FILE + built-in`, `FILE` or `none`.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The kind of the first rule matching `label`; `None` when none does.
    pub fn kind_of(&self, label: &str) -> Option<&str> {
        self.rules
            .iter()
            .find(|r| glob_match(&r.pattern, label))
            .map(|r| r.kind.as_str())
    }

    /// The kind a foreign op gets: the first matching rule's when the layer recorded it as a
    /// plain `dispatch`; any other kind (the layer's `region` spans) is kept.
    pub fn classify<'a>(&'a self, label: &str, kind: &'a str) -> &'a str {
        if kind != UNCLASSIFIED {
            return kind;
        }
        self.kind_of(label).unwrap_or(UNCLASSIFIED)
    }

    /// Gives the ops of kind `dispatch` of a foreign trace (`meta.capture` present) their kinds;
    /// the decoder's own traces are left as they are. Returns how many ops got a kind.
    pub fn classify_foreign(&self, trace: &mut Trace) -> usize {
        if trace.meta.capture.is_none() {
            return 0;
        }
        let mut changed = 0;
        for op in &mut trace.ops {
            let kind = self.classify(&op.label, &op.kind);
            if kind != op.kind {
                op.kind = kind.to_owned();
                changed += 1;
            }
        }
        changed
    }
}

/// Whether an op's kind says what the work is (not the layer's unclassified `dispatch`, nor a
/// region or token span).
pub fn is_classified(op: &OpInfo) -> bool {
    DISPATCH_KINDS.contains(&op.kind.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_whole_labels() {
        assert!(glob_match("mul_mat_vec_*", "mul_mat_vec_q4_k_f32_f32_1"));
        assert!(glob_match("*norm*", "rms_norm_mul_rope_f32_f16"));
        assert!(glob_match("*norm*", "norm"));
        assert!(glob_match("L*.q_proj", "L12.q_proj"));
        assert!(glob_match("a*b*c", "aXbYbZc"));
        assert!(glob_match("*", ""));
        assert!(glob_match("exact", "exact"));
        assert!(!glob_match("exact", "exactly"));
        assert!(!glob_match("exact", "inexact"));
        assert!(!glob_match("L*.q_proj", "L12.q_proj_x"));
        assert!(!glob_match("mul_f*", "mul_mat_vec_f16_f32_f32"));
        // Case-sensitive; `?` and `[` are literal.
        assert!(!glob_match("Mul_mat*", "mul_mat_vec"));
        assert!(glob_match("a?[b]", "a?[b]"));
        assert!(!glob_match("a?", "ab"));
    }

    #[test]
    fn llama_cpp_pipeline_names_get_the_decoders_kinds() {
        let rules = KindRules::builtin();
        let cases = [
            ("mul_mat_vec_f16_f32_f32", "matvec"),
            ("mul_mat_vec_q4_k_f32_f32_1", "matvec"),
            ("mul_mat_vec_id_q8_0_f32", "matvec"),
            ("matmul_f16_f32_l", "matvec"),
            ("matmul_id_q4_k_f32_aligned_m", "matvec"),
            ("mul_mm_q8_0_f32", "matvec"),
            ("split_k_reduce", "matvec"),
            ("quantize_q8_1_x4", "matvec"),
            ("dequant_q4_k", "matvec"),
            (
                "flash_attn_f32_f16_D128_cm2_aligned_f32acc_small_rows",
                "attention",
            ),
            ("fa_split_k_reduce", "attention"),
            ("soft_max_f32", "attention"),
            ("soft_max_f32_f16", "attention"),
            ("rms_norm_f32", "norm"),
            ("rms_norm_mul_f32", "norm"),
            ("rms_norm_mul_rope_f32_f16", "norm"),
            ("norm_f32", "norm"),
            ("rope_neox_f32", "rope"),
            ("rope_norm_f16", "rope"),
            ("rope_multi_f32", "rope"),
            ("set_rows_f16_i64", "kv"),
            ("cpy_f32_f16", "copy"),
            ("contig_cpy_f32_f32", "copy"),
            ("get_rows_f16", "embed"),
            ("get_rows_q4_k_f32", "embed"),
            ("add_f32_f32_f32_norepeat", "elementwise"),
            ("add_rms_f32_f32_f32", "elementwise"),
            ("multi_add_f32_3", "elementwise"),
            ("mul_f32", "elementwise"),
            ("swiglu_f32", "elementwise"),
            ("geglu_erf_f16", "elementwise"),
            ("silu_f32", "elementwise"),
            ("scale_f32", "elementwise"),
            ("argmax_f32", "argmax"),
            ("argsort_f32", "argmax"),
            ("topk_moe_f32_8", "argmax"),
        ];
        for (label, kind) in cases {
            assert_eq!(rules.kind_of(label), Some(kind), "{label}");
        }
        // Unknown names and the layer's fallback names stay unclassified.
        for label in ["pipeline 7", "im2col_f32", "my_gemv"] {
            assert_eq!(rules.classify(label, UNCLASSIFIED), UNCLASSIFIED, "{label}");
        }
        // Only `dispatch` is re-classified: the layer's region spans keep their kind.
        assert_eq!(rules.classify("add_f32", "region"), "region");
    }

    #[test]
    fn the_order_decides_fused_and_ambiguous_names() {
        // `rms_norm_mul_rope_*` is matched by `*norm*` (norm), never reaching a rope rule;
        // `rope_norm_*` (RoPE in the normal layout) by `rope*`, before `*norm*` could.
        let rules = KindRules::builtin();
        let first = |label: &str| {
            rules
                .rules()
                .iter()
                .find(|r| glob_match(&r.pattern, label))
                .map(|r| r.pattern.as_str())
        };
        assert_eq!(first("rms_norm_mul_rope_f32_f16"), Some("*norm*"));
        assert_eq!(first("rope_norm_f16"), Some("rope*"));
        assert_eq!(first("rms_norm_mul_f32"), Some("*norm*"));
        assert_eq!(first("mul_mat_vec_f16_f32_f32"), Some("mul_mat*"));
    }

    #[test]
    fn first_match_wins_and_user_rules_come_first() {
        let user = KindRules::parse(
            "[[rule]]\npattern = \"mul_mat_vec_special*\"\nkind = \"attention\"\n\n\
             [[rule]]\npattern = \"my_gemv_*\"\nkind = \"matvec\"\n\n\
             [[rule]]\npattern = \"my_*\"\nkind = \"elementwise\"\n\n\
             [[rule]]\npattern = \"add_debug*\"\nkind = \"dispatch\"\n",
            "user.toml",
        )
        .expect("valid");
        let rules = user.then(KindRules::builtin());
        assert_eq!(rules.origin(), "user.toml + built-in");
        assert_eq!(rules.kind_of("my_gemv_q4"), Some("matvec"));
        assert_eq!(rules.kind_of("my_add"), Some("elementwise"));
        // The user's rule shadows the built-in `mul_mat*`.
        assert_eq!(rules.kind_of("mul_mat_vec_special_f32"), Some("attention"));
        assert_eq!(rules.kind_of("mul_mat_vec_f16_f32_f32"), Some("matvec"));
        // `dispatch` leaves a name unclassified that a built-in rule would classify.
        assert_eq!(rules.classify("add_debug_f32", UNCLASSIFIED), UNCLASSIFIED);
        assert_eq!(rules.classify("add_f32", UNCLASSIFIED), "elementwise");
        // Without the built-in rules only the user's apply.
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("k.toml");
        std::fs::write(
            &path,
            "[[rule]]\npattern = \"my_gemv_*\"\nkind = \"matvec\"\n",
        )
        .expect("write");
        let only = KindRules::from_options(Some(&path), false).expect("load");
        assert_eq!(only.kind_of("my_gemv_1"), Some("matvec"));
        assert_eq!(only.kind_of("mul_mat_vec_f16_f32_f32"), None);
        let both = KindRules::from_options(Some(&path), true).expect("load");
        assert_eq!(both.kind_of("mul_mat_vec_f16_f32_f32"), Some("matvec"));
        assert_eq!(both.rules().len(), KindRules::builtin().rules().len() + 1);
    }

    #[test]
    fn bad_rule_files_name_the_file_line_and_field() {
        let unknown_kind = "[[rule]]\npattern = \"a*\"\nkind = \"matvec\"\n\n[[rule]]\n\
                            pattern = \"b*\"\nkind = \"gemv\"\n";
        let e = KindRules::parse(unknown_kind, "k.toml")
            .expect_err("unknown kind")
            .to_string();
        assert!(e.contains("k.toml"), "{e}");
        assert!(e.contains("line 7"), "{e}");
        assert!(e.contains("rule 2"), "{e}");
        assert!(e.contains("`kind`"), "{e}");
        assert!(e.contains("\"gemv\""), "{e}");
        for k in DISPATCH_KINDS {
            assert!(e.contains(k), "the message lists {k}: {e}");
        }

        let empty_pattern = "[[rule]]\npattern = \"\"\nkind = \"norm\"\n";
        let e = KindRules::parse(empty_pattern, "k.toml")
            .expect_err("empty")
            .to_string();
        assert!(
            e.contains("line 2") && e.contains("`pattern`") && e.contains("empty"),
            "{e}"
        );

        // Syntax errors, a missing field, an unknown field, no rules: the parser's line.
        for (text, expect) in [
            ("[[rule]\npattern = \"a\"\n", "line 1"),
            ("[[rule]]\npattern = \"a\"\n", "kind"),
            (
                "[[rule]]\npattern = \"a\"\nkind = \"norm\"\nkinds = \"x\"\n",
                "kinds",
            ),
            ("# nothing\n", "no `[[rule]]`"),
            ("[[rule]]\npattern = 3\nkind = \"norm\"\n", "line 2"),
        ] {
            let e = KindRules::parse(text, "k.toml")
                .expect_err(text)
                .to_string();
            assert!(e.contains("k.toml"), "{e}");
            assert!(e.contains(expect), "{text:?}: {e}");
        }

        let e = KindRules::load(Path::new("/nonexistent/kinds.toml"))
            .expect_err("missing")
            .to_string();
        assert!(e.contains("/nonexistent/kinds.toml"), "{e}");
    }

    /// The decoder's labels, as its own traces kind them: the committed baselines of both
    /// presets and the profiler's real decoder fixtures. Labels of the persistent kernel's
    /// phases (`token/...`) come from the kernel's clocks, never from a dispatch the layer sees.
    #[test]
    fn the_decoders_labels_get_the_kinds_of_its_own_traces() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let files = [
            root.join("../traces/generic.json"),
            root.join("../traces/fused.json"),
            root.join("tests/data/v1/decoder_generic.json"),
            root.join("tests/data/v1/decoder_fused.json"),
        ];
        let rules = KindRules::builtin();
        let mut checked = 0;
        for f in &files {
            let t = crate::io::read_trace_for_analysis(f).expect("a decoder trace");
            assert!(t.meta.capture.is_none());
            for op in t.ops.iter().filter(|o| !o.label.contains('/')) {
                if op.kind == "region" {
                    continue;
                }
                assert_eq!(
                    rules.kind_of(&op.label),
                    Some(op.kind.as_str()),
                    "{}: {}",
                    f.display(),
                    op.label
                );
                checked += 1;
            }
        }
        assert!(checked > 50, "only {checked} labels checked");
    }
}
