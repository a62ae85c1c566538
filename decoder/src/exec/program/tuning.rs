//! Tuning chosen per device, and the `key=value` overrides that replace its values.

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

impl Tuning {
    /// Uses the subgroup decode attention when the device has subgroup arithmetic and shuffles
    /// (`ops`) with subgroups of `subgroup` lanes (8 to 128, a power of two).
    pub fn with_subgroups(mut self, subgroup: u32, ops: bool) -> Tuning {
        if ops && subgroup.is_power_of_two() && (8..=128).contains(&subgroup) {
            self.attn_sg = subgroup;
        }
        self
    }

    /// Applies `key=value` overrides separated by commas (`attn_wg`, `n_splits`, `attn_tile`),
    /// the form the `DECODESCOPE_TUNING` environment variable takes when tuning kernels on a new
    /// device. Unknown keys and values the kernels cannot take are refused, naming them.
    pub fn with_overrides(mut self, spec: &str) -> Result<Tuning, String> {
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (key, value) = item
                .split_once('=')
                .ok_or_else(|| format!("DECODESCOPE_TUNING: {item:?} is not key=value"))?;
            let v: u32 = value.parse().map_err(|_| {
                format!("DECODESCOPE_TUNING: {key}={value:?} is not a whole number")
            })?;
            match key {
                "attn_wg" if v.is_power_of_two() && (32..=1024).contains(&v) => self.attn_wg = v,
                "n_splits" if (1..=1024).contains(&v) => self.n_splits = v,
                "attn_tile" if v == 16 || v == 32 => self.attn_tile = v,
                "attn_prefetch" if v <= 1 => self.attn_prefetch = v,
                "attn_sg" if v == 0 || (v.is_power_of_two() && (8..=128).contains(&v)) => {
                    self.attn_sg = v
                }
                "prefill_max_r" if v == 16 || v == 32 => self.prefill_max_r = v,
                "attn_unroll" if v == 8 || v == 16 || v == 32 => self.attn_unroll = v,
                "attn_kcoop" if v <= 2 => self.attn_kcoop = v,
                "persistent_wg" if v.is_power_of_two() && (32..=1024).contains(&v) => {
                    self.persistent_wg = v
                }
                "persistent_groups" if (1..=4096).contains(&v) => self.persistent_groups = v,
                "persistent_splits" if (1..=4096).contains(&v) => self.persistent_splits = v,
                "persistent_kv_stage" if v <= 8 => self.persistent_kv_stage = v,
                "persistent_head_groups" if v <= 2 => self.persistent_head_groups = v,
                "persistent_res_copies" if (1..=8).contains(&v) => self.persistent_res_copies = v,
                "attn_wg"
                | "n_splits"
                | "attn_tile"
                | "attn_prefetch"
                | "attn_sg"
                | "prefill_max_r"
                | "attn_unroll"
                | "attn_kcoop"
                | "persistent_wg"
                | "persistent_groups"
                | "persistent_splits"
                | "persistent_kv_stage"
                | "persistent_head_groups"
                | "persistent_res_copies" => {
                    return Err(format!(
                        "DECODESCOPE_TUNING: {key}={v} is out of range (attn_wg: a power of two \
                         from 32 to 1024, n_splits: 1 to 1024, attn_tile: 16 or 32, attn_prefetch: 0 or 1, attn_sg: 0 or \
                         the device's subgroup size, prefill_max_r: 16 or 32, attn_unroll: 8, 16 or 32, attn_kcoop: 0, 1 or 2, \
                         persistent_wg: a power of two from 32 to 1024, persistent_groups and persistent_splits: 1 to 4096, \
                         persistent_kv_stage: 0 to 8, persistent_head_groups: 0 (by the grid), 1 (off) or 2 (on), persistent_res_copies: 1 to 8)"
                    ));
                }
                _ => {
                    return Err(format!(
                        "DECODESCOPE_TUNING: unknown key {key:?} (use attn_wg, n_splits, attn_tile, attn_prefetch, attn_sg, \
                         prefill_max_r, attn_unroll, attn_kcoop, persistent_wg, persistent_groups, persistent_splits, \
                         persistent_kv_stage, persistent_head_groups or persistent_res_copies)"
                    ));
                }
            }
        }
        Ok(self)
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
