//! Tuning chosen per device, and the `key=value` overrides that replace its values.
//!
//! [`TUNING_KEYS`] is the one table of the keys: the parser reads its ranges, and `--tuning`'s
//! help, the refusals and docs/persistent-kernel.md's table (checked by a test) its words.

use super::WeightTypes;
use crate::model::WeightType;

/// The environment variable read when a command has no `--tuning` flag.
pub const TUNING_ENV: &str = "DECODESCOPE_TUNING";

/// A key of `--tuning`: its name, the values it takes and what it sets.
pub struct TuningKey {
    pub name: &'static str,
    /// The default on a GPU (subgroups at least 32 wide) and on a CPU driver, in words.
    pub default: &'static str,
    /// The values it takes, in words (`accepts` checks them).
    pub range: &'static str,
    /// What it sets, in one line.
    pub meaning: &'static str,
    accepts: fn(u32) -> bool,
    field: fn(&mut Tuning) -> &mut u32,
}

fn pow2_32_to_1024(v: u32) -> bool {
    v.is_power_of_two() && (32..=1024).contains(&v)
}

/// Every tuning key, in the order of docs/persistent-kernel.md's table: the persistent kernel's
/// first, then the fused preset's kernels'.
pub const TUNING_KEYS: [TuningKey; 14] = [
    TuningKey {
        name: "persistent_wg",
        default: "256 (1024 for Q8_0 and Q4_0 up to 6144 positions) / 64",
        range: "power of two, 32 to 1024",
        meaning: "the kernel's workgroup size (halved where shared memory is short)",
        accepts: pow2_32_to_1024,
        field: |t| &mut t.persistent_wg,
    },
    TuningKey {
        name: "persistent_groups",
        default: "probed",
        range: "1 to 4096",
        meaning: "the grid: probed at exactly this size instead of the candidates",
        accepts: |v| (1..=4096).contains(&v),
        field: |t| &mut t.persistent_groups,
    },
    TuningKey {
        name: "persistent_splits",
        default: "0 (grid's subgroups over the units)",
        range: "1 to 4096",
        meaning: "splits per (row, KV head) the attention aims for (tests reach the merge's rounds with it)",
        accepts: |v| (1..=4096).contains(&v),
        field: |t| &mut t.persistent_splits,
    },
    TuningKey {
        name: "persistent_kv_stage",
        default: "1 / 1",
        range: "0 to 8",
        meaning: "attention units per workgroup whose first block of K and V rows is staged in shared memory (lowered where it does not fit)",
        accepts: |v| v <= 8,
        field: |t| &mut t.persistent_kv_stage,
    },
    TuningKey {
        name: "persistent_head_groups",
        default: "0",
        range: "0 (by the grid), 1 (off), 2 (on)",
        meaning: "a subgroup per query head of each attention unit; by the grid: where it has one for every query head of every unit at the KV capacity with one block per unit",
        accepts: |v| v <= 2,
        field: |t| &mut t.persistent_head_groups,
    },
    TuningKey {
        name: "persistent_res_copies",
        default: "4 / 4",
        range: "1 to 8",
        meaning: "copies of each residual row the float atomics spread over",
        accepts: |v| (1..=8).contains(&v),
        field: |t| &mut t.persistent_res_copies,
    },
    TuningKey {
        name: "attn_wg",
        default: "256 / 64",
        range: "power of two, 32 to 1024",
        meaning: "workgroup of the fused decode attention (`attn_split`)",
        accepts: pow2_32_to_1024,
        field: |t| &mut t.attn_wg,
    },
    TuningKey {
        name: "n_splits",
        default: "2 x compute units / KV heads, raised until no split holds more than 64 positions; at most 256, at least 16 positions a split",
        range: "1 to 1024",
        meaning: "splits of the fused decode attention",
        accepts: |v| (1..=1024).contains(&v),
        field: |t| &mut t.n_splits,
    },
    TuningKey {
        name: "attn_tile",
        default: "32 / 16",
        range: "16 or 32",
        meaning: "positions per tile of `attn_split`",
        accepts: |v| v == 16 || v == 32,
        field: |t| &mut t.attn_tile,
    },
    TuningKey {
        name: "attn_prefetch",
        default: "0",
        range: "0 or 1",
        meaning: "`attn_split` loads the next tile while computing one",
        accepts: |v| v <= 1,
        field: |t| &mut t.attn_prefetch,
    },
    TuningKey {
        name: "attn_sg",
        default: "the subgroup size where the device has subgroup arithmetic and shuffles, else 0",
        range: "0, or a power of two 8 to 128",
        meaning: "the subgroup decode attention (`attn_split_sg`), 0 for the tiled one",
        accepts: |v| v == 0 || (v.is_power_of_two() && (8..=128).contains(&v)),
        field: |t| &mut t.attn_sg,
    },
    TuningKey {
        name: "prefill_max_r",
        default: "16",
        range: "16 or 32",
        meaning: "query rows per `attn_prefill` workgroup",
        accepts: |v| v == 16 || v == 32,
        field: |t| &mut t.prefill_max_r,
    },
    TuningKey {
        name: "attn_unroll",
        default: "8",
        range: "8, 16 or 32",
        meaning: "loads in flight per lane in `attn_split_sg`",
        accepts: |v| v == 8 || v == 16 || v == 32,
        field: |t| &mut t.attn_unroll,
    },
    TuningKey {
        name: "attn_kcoop",
        default: "1 / 0",
        range: "0, 1 or 2",
        meaning: "`attn_split_sg`'s K rows: 0 one lane per position, 1 eight lanes per row (coalesced), 2 as 1 with a pass's loads all issued first",
        accepts: |v| v <= 2,
        field: |t| &mut t.attn_kcoop,
    },
];

/// The keys with the values each takes, for the refusals: `persistent_wg: power of two, 32 to
/// 1024; ...`.
fn key_list() -> String {
    TUNING_KEYS
        .iter()
        .map(|k| format!("{}: {}", k.name, k.range))
        .collect::<Vec<_>>()
        .join("; ")
}

/// `--tuning`'s long help: what it does, then one line per key.
pub fn tuning_help() -> String {
    let mut s = format!(
        "Tuning overrides, `key=value` separated by commas (e.g. persistent_head_groups=2). Without \
         the flag, the {TUNING_ENV} environment variable is read; the flag wins over it. The trace \
         records every key's value. Keys (default GPU / CPU; values):\n"
    );
    for k in &TUNING_KEYS {
        s.push_str(&format!(
            "  {}: {} (default {}; {})\n",
            k.name, k.meaning, k.default, k.range
        ));
    }
    s
}

/// docs/persistent-kernel.md's table of the keys, as this table renders it.
pub fn markdown_table() -> String {
    let mut s =
        String::from("| key | default (GPU / CPU) | range | what it sets |\n|---|---|---|---|\n");
    for k in &TUNING_KEYS {
        s.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            k.name, k.default, k.range, k.meaning
        ));
    }
    s
}

/// Tuning keys given on the command line (`--tuning`) or in [`TUNING_ENV`]: a value per key of
/// [`TUNING_KEYS`], or none for the device's default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TuningOverrides {
    values: [Option<u32>; TUNING_KEYS.len()],
}

impl TuningOverrides {
    /// Parses `key=value` items separated by commas. An item that is not `key=value`, a key not
    /// in [`TUNING_KEYS`] or a value it does not take is refused with a sentence naming it, its
    /// range and every key.
    pub fn parse(spec: &str) -> Result<TuningOverrides, String> {
        let mut o = TuningOverrides::default();
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let Some((key, value)) = item.split_once('=') else {
                return Err(format!(
                    "tuning {item:?} is not key=value; the keys: {}",
                    key_list()
                ));
            };
            let (key, value) = (key.trim(), value.trim());
            let Some(i) = TUNING_KEYS.iter().position(|k| k.name == key) else {
                return Err(format!(
                    "tuning key {key:?} is not a tuning key; the keys: {}",
                    key_list()
                ));
            };
            let k = &TUNING_KEYS[i];
            match value.parse::<u32>() {
                Ok(v) if (k.accepts)(v) => o.values[i] = Some(v),
                _ => {
                    return Err(format!(
                        "tuning {key}={value} is out of range: {key} takes {}; the keys: {}",
                        k.range,
                        key_list()
                    ));
                }
            }
        }
        Ok(o)
    }

    /// The overrides of `flag` where given, else of the [`TUNING_ENV`] environment variable
    /// (unset or empty: none). Errors name where the bad value came from.
    pub fn from_flag_or_env(flag: Option<&str>) -> Result<TuningOverrides, String> {
        match flag {
            Some(spec) => TuningOverrides::parse(spec).map_err(|e| format!("--tuning: {e}")),
            None => match std::env::var(TUNING_ENV) {
                Ok(spec) => TuningOverrides::parse(&spec).map_err(|e| format!("{TUNING_ENV}: {e}")),
                Err(_) => Ok(TuningOverrides::default()),
            },
        }
    }

    /// Whether no key is set.
    pub fn is_empty(&self) -> bool {
        self.values.iter().all(Option::is_none)
    }
}

/// `key=value` of every key set, in table order (empty: none).
impl std::fmt::Display for TuningOverrides {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let set: Vec<String> = TUNING_KEYS
            .iter()
            .zip(self.values)
            .filter_map(|(k, v)| v.map(|v| format!("{}={v}", k.name)))
            .collect();
        f.write_str(&set.join(","))
    }
}

/// Tuning chosen per device: workgroup sizes and rows per workgroup, passed as specialization
/// constants.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tuning {
    /// Workgroup size of the primitive kernels.
    pub wg: u32,
    /// Rows per workgroup of the primitive matvec.
    pub matvec_rows: u32,
    /// (workgroup size, rows per workgroup) of `matvec_fused` by role.
    pub qkv: (u32, u32),
    pub gate_up: (u32, u32),
    /// o-projection and down-projection (residual epilogue).
    pub residual: (u32, u32),
    /// lm_head over the vocabulary.
    pub head: (u32, u32),
    pub attn_wg: u32,
    pub n_splits: u32,
    /// Prompt attention with one invocation per row and no barriers (CPU drivers), instead of
    /// the tiled kernel.
    pub prefill_rows: bool,
    /// Positions per tile of the split-K decode attention (shared memory: 16 fits a CPU
    /// driver's 32 KiB, 32 halves the barriers per position on GPUs).
    pub attn_tile: u32,
    /// 1: `attn_split` loads the next tile into registers while computing the current one.
    pub attn_prefetch: u32,
    /// Subgroup size of `attn_split_sg` (one subgroup per split, no workgroup barriers), or 0
    /// for the tiled `attn_split` (devices without subgroup arithmetic).
    pub attn_sg: u32,
    /// Query rows per `attn_prefill` workgroup (16 or 32).
    pub prefill_max_r: u32,
    /// Loads in flight per lane in `attn_split_sg`'s K and V loops (8, 16 or 32; at most the
    /// subgroup size).
    pub attn_unroll: u32,
    /// 1: `attn_split_sg` reads each K row with 8 lanes (coalesced) instead of one lane per
    /// position; 2: as 1, with all the rows' loads of a pass issued before the first dot product
    /// (H100, fused, batch 1: 484 against 470 tokens/s at context 512, but 246 against 297 at
    /// 16K, where its 32 extra vec4 registers per lane cost more resident subgroups than the
    /// fewer round trips save; so 1 stays the default).
    pub attn_kcoop: u32,
    /// The device's subgroup size (the persistent kernel's SG).
    pub subgroup: u32,
    /// Workgroup size of the persistent token kernel.
    pub persistent_wg: u32,
    /// Workgroups of the persistent token kernel: 0 until the engine's residency probe sets it,
    /// or the `persistent_groups` override (then probed at exactly that size).
    pub persistent_groups: u32,
    /// Splits per (row, KV head) the persistent kernel's attention aims for: 0 (the default)
    /// for the grid's subgroups over the units, or the `persistent_splits` override (tests use it
    /// to reach the merge's several rounds on a one-workgroup CPU grid).
    pub persistent_splits: u32,
    /// Attention units per workgroup whose first block of K and V rows the persistent kernel
    /// stages in shared memory, loaded during the QKV phase (`KV_STAGE`); 0: none.
    /// Lowered (to 0 at worst) where the device's shared memory cannot hold them.
    pub persistent_kv_stage: u32,
    /// Head groups of the persistent kernel's attention (`persistent::head_groups`): 0 (the
    /// default) gives each query head of a unit a subgroup of its own where the grid has one for
    /// every query head of every unit up to the KV capacity, 1 never, 2 always (tests use it to
    /// reach them on a one-workgroup CPU grid).
    pub persistent_head_groups: u32,
    /// Copies of each residual row the persistent kernel's float atomics spread over (`RC`, at
    /// most `persistent::MAX_RESIDUAL_COPIES`), so each word takes 1 / RC of the grid's atomics.
    pub persistent_res_copies: u32,
    /// The persistent kernel writes a device clock per phase (`--timestamps dispatch` on a
    /// device with shaderDeviceClock): set by the engine, not a tuning key.
    pub phase_clocks: bool,
}

/// KV capacities (positions) up to which a GPU runs the persistent kernel of a model whose
/// matrices are all Q8_0, or all Q4_0 with a Q6_K lm_head, in workgroups of 1024 invocations
/// ([`Tuning::for_weights`]).
pub const WIDE_MAX_SEQ: u32 = 6144;

impl Tuning {
    /// The persistent kernel's workgroup for weights of types `w` and a KV capacity of `max_seq`
    /// positions: on a GPU ([`Tuning::for_device`]'s branch for subgroups of 32 lanes or more,
    /// 256 otherwise), 1024 up to [`WIDE_MAX_SEQ`] positions for a model whose every matrix
    /// is Q8_0, or every matrix Q4_0 but a Q6_K lm_head (as `llama-quantize` writes Q4_0). The
    /// driver then gives the kernel 128 registers instead of about 250, and the row matvecs,
    /// with four times the subgroups of a compute unit in flight, read faster than the attention
    /// slows. Measured on H200s (qwen3-0.6b, tokens/s at 256 and 1024): Q8_0 907 and 1132 at 512
    /// positions, 930 and 1007 at 2048, 859 and 919 at 4096, 745 and 694 at 8192, 621 and 564 at
    /// 16K; Q4_0 691 and 834 at 512, 423 and 424 at 16K. The f16 kernel (1451 and 1100 at 512)
    /// and the K-quants' (886 and 889 at 512) keep 256 (docs/persistent-kernel.md, rows 108 and
    /// 109). A `persistent_wg` override replaces this.
    pub fn for_weights(mut self, w: &WeightTypes, max_seq: u32) -> Tuning {
        use WeightType::{Q4_0, Q6K, Q8_0};
        let wide = matches!(w.distinct()[..], [Q8_0] | [Q4_0] | [Q4_0, Q6K]);
        if self.subgroup >= 32 && wide && max_seq <= WIDE_MAX_SEQ {
            self.persistent_wg = 1024;
        }
        self
    }

    /// Uses the subgroup decode attention when the device has subgroup arithmetic and shuffles
    /// (`ops`) with subgroups of `subgroup` lanes (8 to 128, a power of two).
    pub fn with_subgroups(mut self, subgroup: u32, ops: bool) -> Tuning {
        if ops && subgroup.is_power_of_two() && (8..=128).contains(&subgroup) {
            self.attn_sg = subgroup;
        }
        self
    }

    /// Sets every key that `o` overrides.
    pub fn with(mut self, o: &TuningOverrides) -> Tuning {
        for (key, v) in TUNING_KEYS.iter().zip(o.values) {
            if let Some(v) = v {
                *(key.field)(&mut self) = v;
            }
        }
        self
    }

    /// Every tuning key with its value here, in table order.
    pub fn values(&self) -> Vec<(&'static str, u32)> {
        let mut t = *self;
        TUNING_KEYS
            .iter()
            .map(|k| (k.name, *(k.field)(&mut t)))
            .collect()
    }
}

impl Tuning {
    /// Workgroup and split sizes for a device with `compute_units` units and `subgroup` lanes,
    /// for contexts up to `max_seq` positions over `kv_heads` KV heads.
    pub fn for_device(compute_units: u32, subgroup: u32, max_seq: u32, kv_heads: u32) -> Tuning {
        // Split-K: about two workgroups per compute unit over all KV heads, at least 16 positions
        // per split, no more than 256 splits (32 splits of 8 KV heads measured best on an H200 at
        // 512 and 2048 positions).
        let want = (2 * compute_units).div_ceil(kv_heads.max(1)).max(1);
        // Long contexts: enough splits that no workgroup walks more than ~128 positions
        // serially (its tiles are latency-bound; more workgroups keep more loads in flight).
        // (64: measured on an H100 at 16K positions, where 256 splits of the subgroup kernel
        // and 33 of the tiled one come out level.)
        let by_len = max_seq.div_ceil(64);
        let n_splits = want.max(by_len).min(max_seq.div_ceil(16)).clamp(1, 256);
        if subgroup >= 32 {
            // GPUs: the sizes that `kernel_bench` measured fastest on an H200 (wide subgroups,
            // many compute units): small workgroups with few rows for the short matrices, more
            // rows for the vocabulary-sized lm_head.
            Tuning {
                wg: 128,
                matvec_rows: 2,
                qkv: (128, 4),
                gate_up: (32, 2),
                residual: (128, 2),
                head: (64, 4),
                attn_wg: 256,
                n_splits,
                prefill_rows: false,
                attn_tile: 32,
                attn_prefetch: 0,
                attn_sg: 0,
                // 16 query rows per group: 1157 prompt tokens/s at 16K on an H100 against
                // 904 with 32 (chunks of 2048, `scripts/device/tune.sh`).
                prefill_max_r: 16,
                attn_unroll: 8,
                // Eight lanes per K row: attention at 16K on an H100 from 2889 to 1807 us per
                // token (the one-lane-per-row loads are 2 KiB apart across the subgroup).
                attn_kcoop: 1,
                subgroup,
                // 256. 512 (half the workgroups: the probe gives one per SM either way) made the
                // driver cap the kernel at 128 registers and spill (docs/persistent-kernel.md).
                persistent_wg: 256,
                persistent_groups: 0,
                persistent_splits: 0,
                // The first unit's first block: its loads go out during the QKV phase, so their
                // round trip runs beside its matvec and the attention at short contexts reads no
                // cache. (Staged after the QKV phase instead, its round trip came before the
                // attention's polls and it lost: docs/persistent-kernel.md.)
                persistent_kv_stage: 1,
                persistent_head_groups: 0,
                // Each residual word takes an atomic from every workgroup twice a layer; 4 copies
                // measured best of 1, 2, 4 and 8 (docs/persistent-kernel.md).
                persistent_res_copies: 4,
                phase_clocks: false,
            }
        } else {
            // CPU drivers (lavapipe) and narrow subgroups.
            Tuning {
                wg: 128,
                matvec_rows: 2,
                qkv: (64, 4),
                gate_up: (64, 4),
                residual: (64, 4),
                head: (64, 4),
                attn_wg: 64,
                n_splits,
                prefill_rows: true,
                attn_tile: 16,
                attn_prefetch: 0,
                attn_sg: 0,
                prefill_max_r: 16,
                attn_unroll: 8,
                attn_kcoop: 0,
                subgroup,
                persistent_wg: 64,
                persistent_groups: 0,
                persistent_splits: 0,
                // One subgroup's, so CI checks the staged blocks (DECODESCOPE_TUNING
                // persistent_kv_stage on a GPU) beside the loaded ones.
                persistent_kv_stage: 1,
                persistent_head_groups: 0,
                // The GPU's value, so CI runs the copies' code (on one workgroup every atomic
                // goes to the first copy; the others are cleared and summed).
                persistent_res_copies: 4,
                phase_clocks: false,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpu() -> Tuning {
        Tuning::for_device(1, 8, 4096, 2)
    }

    #[test]
    fn q8_0_and_q4_0_models_run_the_persistent_kernel_wide_on_a_gpu_at_short_contexts() {
        use crate::exec::program::LayerTypes;
        let types = |t: WeightType| WeightTypes {
            embed: t,
            lm_head: t,
            layers: vec![
                LayerTypes {
                    q: t,
                    k: t,
                    v: t,
                    o: t,
                    gate: t,
                    up: t,
                    down: t,
                };
                2
            ],
        };
        let gpu = |max_seq| Tuning::for_device(132, 32, max_seq, 8);
        let q8 = types(WeightType::Q8_0);
        assert_eq!(gpu(768).for_weights(&q8, 768).persistent_wg, 1024);
        assert_eq!(
            gpu(WIDE_MAX_SEQ)
                .for_weights(&q8, WIDE_MAX_SEQ)
                .persistent_wg,
            1024
        );
        let long = WIDE_MAX_SEQ + 1;
        assert_eq!(gpu(long).for_weights(&q8, long).persistent_wg, 256);
        // Q4_0 as llama-quantize writes it (a Q6_K lm_head), and all Q4_0.
        let mut q4_0 = types(WeightType::Q4_0);
        assert_eq!(gpu(768).for_weights(&q4_0, 768).persistent_wg, 1024);
        q4_0.lm_head = WeightType::Q6K;
        assert_eq!(gpu(768).for_weights(&q4_0, 768).persistent_wg, 1024);
        assert_eq!(gpu(long).for_weights(&q4_0, long).persistent_wg, 256);
        for t in [
            WeightType::F16,
            WeightType::Q4K,
            WeightType::Q4_1,
            WeightType::Q6K,
        ] {
            assert_eq!(gpu(768).for_weights(&types(t), 768).persistent_wg, 256);
        }
        // A Q8_0 model with one matrix of another type keeps 256, and so does a CPU driver.
        let mut mixed = types(WeightType::Q8_0);
        mixed.lm_head = WeightType::Q6K;
        assert_eq!(gpu(768).for_weights(&mixed, 768).persistent_wg, 256);
        assert_eq!(
            cpu().for_weights(&q8, 768).persistent_wg,
            cpu().persistent_wg
        );
        // An override wins.
        let o = TuningOverrides::parse("persistent_wg=256").unwrap();
        assert_eq!(gpu(768).for_weights(&q8, 768).with(&o).persistent_wg, 256);
    }

    #[test]
    fn overrides_set_their_keys_and_only_those() {
        let o = TuningOverrides::parse("persistent_head_groups=2, attn_tile=32").unwrap();
        let t = cpu().with(&o);
        assert_eq!((t.persistent_head_groups, t.attn_tile), (2, 32));
        assert_eq!(t.attn_wg, cpu().attn_wg);
        assert_eq!(o.to_string(), "persistent_head_groups=2,attn_tile=32");
        assert!(TuningOverrides::parse("").unwrap().is_empty());
    }

    #[test]
    fn every_key_reads_and_writes_its_own_field() {
        for (i, k) in TUNING_KEYS.iter().enumerate() {
            let mut o = TuningOverrides::default();
            // A value every key takes except the power-of-two and 16-or-32 ones, which take 32.
            let v = [1, 2, 8, 32].into_iter().find(|&v| (k.accepts)(v)).unwrap();
            o.values[i] = Some(v);
            let changed: Vec<&str> = cpu()
                .with(&o)
                .values()
                .into_iter()
                .zip(cpu().values())
                .filter(|(a, b)| a != b)
                .map(|(a, _)| a.0)
                .collect();
            assert!(
                changed.is_empty() || changed == [k.name],
                "{}: {changed:?}",
                k.name
            );
            assert_eq!(cpu().with(&o).values()[i], (k.name, v), "{}", k.name);
        }
    }

    #[test]
    fn a_wrong_key_or_value_is_refused_with_the_keys() {
        for (spec, says) in [
            (
                "persistent_head_grups=1",
                "\"persistent_head_grups\" is not a tuning key",
            ),
            (
                "persistent_head_groups=3",
                "persistent_head_groups=3 is out of range: persistent_head_groups takes 0 (by the grid), 1 (off), 2 (on)",
            ),
            (
                "attn_tile=x",
                "attn_tile=x is out of range: attn_tile takes 16 or 32",
            ),
            ("attn_tile", "\"attn_tile\" is not key=value"),
        ] {
            let e = TuningOverrides::parse(spec).unwrap_err();
            assert!(e.contains(says), "{spec}: {e}");
            for k in &TUNING_KEYS {
                assert!(e.contains(k.name), "{spec}: {e} lacks {}", k.name);
            }
        }
    }

    #[test]
    fn the_flag_wins_over_the_environment() {
        let o = TuningOverrides::from_flag_or_env(Some("attn_prefetch=1")).unwrap();
        assert_eq!(o.to_string(), "attn_prefetch=1");
        let e = TuningOverrides::from_flag_or_env(Some("nope=1")).unwrap_err();
        assert!(e.starts_with("--tuning: "), "{e}");
    }

    /// docs/persistent-kernel.md lists every key as this table does.
    #[test]
    fn the_document_lists_every_key() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/persistent-kernel.md");
        let doc = std::fs::read_to_string(path).unwrap();
        assert!(
            doc.contains(&markdown_table()),
            "{path}: its table of tuning keys differs from TUNING_KEYS; put this one in:\n{}",
            markdown_table()
        );
    }

    /// The defaults the table states as numbers are those of `for_device` (GPU / CPU).
    #[test]
    fn the_stated_defaults_are_the_devices() {
        let (gpu, cpu) = (
            Tuning::for_device(132, 32, 4096, 8).values(),
            cpu().values(),
        );
        for (i, k) in TUNING_KEYS.iter().enumerate() {
            let nums: Vec<u32> = k
                .default
                .split(" / ")
                .filter_map(|v| v.split(" (").next()?.parse().ok())
                .collect();
            match nums[..] {
                [both] => assert_eq!((gpu[i].1, cpu[i].1), (both, both), "{}", k.name),
                [g, c] => assert_eq!((gpu[i].1, cpu[i].1), (g, c), "{}", k.name),
                _ => {}
            }
        }
    }
}
