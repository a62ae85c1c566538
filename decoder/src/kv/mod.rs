//! KV cache layouts: how the keys and values of every sequence are stored on the device, and the
//! host side of the paged layout (the block pool, its allocator and the per-sequence block
//! tables).
//!
//! Every layout maps a (sequence, logical position) pair to a *slot*: a row of `kv_heads *
//! head_dim` elements of one layer's K (or V) buffer. The kernels compute the same mapping
//! (`shaders/kv.glsl`) from four specialization constants ([`KvGeometry::spec`]):
//!
//! | layout | slot of (seq, pos) | slots per buffer |
//! |---|---|---|
//! | contiguous | `seq * max_seq + pos` | `batch * max_seq` |
//! | paged | `table[seq][pos / block] * block + pos % block` | `pool_blocks * block` |
//! | rotating | `seq * ring + pos % ring`, `ring = window + step` | `batch * ring` |
//!
//! A rotating ring keeps `window + step` slots, `step` being the most positions one step writes
//! (the prompt chunk): a step's new positions never overwrite a position that a query of the same
//! step still attends (the failure mode of a ring of exactly `window` slots under chunked prefill).
//!
//! Attention never looks at the physical size: every kernel attends the logical range
//! `[lo, pos]` of its query row, `lo = pos + 1 - window` under a sliding window and 0 otherwise.

mod alloc;

pub use alloc::{BlockPool, BlockTables};

use std::fmt;
use std::str::FromStr;

/// Element type of the KV cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, clap::ValueEnum)]
pub enum KvDtype {
    /// Half precision (the default, as llama.cpp, vLLM and half-precision transformers keep it).
    #[default]
    F16,
    F32,
}

impl KvDtype {
    pub fn bytes(self) -> u64 {
        match self {
            KvDtype::F16 => 2,
            KvDtype::F32 => 4,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            KvDtype::F16 => "f16",
            KvDtype::F32 => "f32",
        }
    }
}

/// How the KV cache is laid out (`--kv`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, clap::ValueEnum)]
pub enum KvKind {
    /// One region of `max_seq` positions per sequence.
    #[default]
    Contiguous,
    /// A global pool of fixed-size blocks; one block table per sequence.
    Paged,
    /// A ring of `window + step` positions per sequence with sliding-window attention.
    Rotating,
}

impl KvKind {
    pub fn name(self) -> &'static str {
        match self {
            KvKind::Contiguous => "contiguous",
            KvKind::Paged => "paged",
            KvKind::Rotating => "rotating",
        }
    }
}

/// How attention reads a paged cache (`--paged-attention`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, clap::ValueEnum)]
pub enum PagedAttention {
    /// Copy the sequence's blocks into a contiguous scratch every step, then run the contiguous
    /// kernel (the baseline the seeds measure).
    Gather,
    /// Read K and V through the block table inside the attention kernel.
    #[default]
    Fused,
}

impl PagedAttention {
    pub fn name(self) -> &'static str {
        match self {
            PagedAttention::Gather => "gather",
            PagedAttention::Fused => "fused",
        }
    }
}

/// The KV cache settings of a run, as the command line gives them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KvConfig {
    pub kind: KvKind,
    pub dtype: KvDtype,
    /// Positions per block (paged).
    pub block: u32,
    /// Shuffle the pool's free list so block tables are scattered (paged).
    pub fragment: bool,
    /// Sliding window in positions (rotating).
    pub window: u32,
    pub paged_attention: PagedAttention,
    /// Sequences decoded together.
    pub batch: u32,
    /// Most prompt tokens one step processes.
    pub prefill_chunk: u32,
}

impl Default for KvConfig {
    fn default() -> Self {
        KvConfig {
            kind: KvKind::Contiguous,
            dtype: KvDtype::F16,
            block: 16,
            fragment: false,
            window: 0,
            paged_attention: PagedAttention::Fused,
            batch: 1,
            prefill_chunk: 512,
        }
    }
}

impl KvConfig {
    /// Refuses settings that cannot work, with one sentence naming the flag.
    pub fn validate(&self) -> Result<(), String> {
        if self.batch == 0 {
            return Err("--batch must be at least 1".into());
        }
        if self.prefill_chunk == 0 {
            return Err("--prefill-chunk must be at least 1".into());
        }
        match self.kind {
            KvKind::Paged if !matches!(self.block, 16 | 32) => Err(format!(
                "--block-size {} is not supported; use 16 or 32",
                self.block
            )),
            KvKind::Rotating if self.window == 0 => Err(
                "--kv rotating needs a sliding window: give --window W (the model's config has none)"
                    .into(),
            ),
            KvKind::Contiguous | KvKind::Paged if self.window != 0 => Err(format!(
                "--window {} only applies to --kv rotating (the sliding-window layout)",
                self.window
            )),
            _ if self.fragment && self.kind != KvKind::Paged => {
                Err("--fragment only applies to --kv paged".into())
            }
            _ => Ok(()),
        }
    }

    /// The attention window in positions (0: full causal attention).
    pub fn attention_window(&self) -> u32 {
        if self.kind == KvKind::Rotating {
            self.window
        } else {
            0
        }
    }

    /// The layout as the trace records it: `contiguous`, `paged:16`, `rotating:4096`.
    pub fn layout_name(&self) -> String {
        match self.kind {
            KvKind::Contiguous => "contiguous".into(),
            KvKind::Paged => format!("paged:{}", self.block),
            KvKind::Rotating => format!("rotating:{}", self.window),
        }
    }

    /// Whether attention first gathers the blocks into a contiguous scratch.
    pub fn gathers(&self) -> bool {
        self.kind == KvKind::Paged && self.paged_attention == PagedAttention::Gather
    }
}

impl fmt::Display for KvConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "--kv {} --kv-dtype {}",
            self.kind.name(),
            self.dtype.name()
        )?;
        match self.kind {
            KvKind::Paged => write!(
                f,
                " --block-size {}{} --paged-attention {}",
                self.block,
                if self.fragment { " --fragment" } else { "" },
                self.paged_attention.name()
            )?,
            KvKind::Rotating => write!(f, " --window {}", self.window)?,
            KvKind::Contiguous => {}
        }
        if self.batch > 1 {
            write!(f, " --batch {}", self.batch)?;
        }
        Ok(())
    }
}

impl FromStr for KvKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        <KvKind as clap::ValueEnum>::from_str(s, true)
            .map_err(|_| format!("unknown KV layout {s:?}: use contiguous, paged or rotating"))
    }
}

/// The physical shape of one layer's K (or V) buffer under a layout, and the specialization
/// constants that tell the kernels how to address it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KvGeometry {
    pub kind: KvKind,
    pub dtype: KvDtype,
    /// Contiguous: positions per sequence; rotating: ring slots per sequence; paged: block size.
    pub unit: u32,
    /// Paged: block-table entries per sequence (else 1).
    pub table_stride: u32,
    /// Rows (slots) in each layer's K or V buffer.
    pub slots: u64,
    /// Sequences.
    pub seqs: u32,
}

impl KvGeometry {
    /// The geometry of `cfg` for sequences of up to `max_seq` positions.
    pub fn new(cfg: &KvConfig, max_seq: u32) -> KvGeometry {
        let seqs = cfg.batch.max(1);
        match cfg.kind {
            KvKind::Contiguous => KvGeometry {
                kind: cfg.kind,
                dtype: cfg.dtype,
                unit: max_seq,
                table_stride: 1,
                slots: seqs as u64 * max_seq as u64,
                seqs,
            },
            KvKind::Paged => {
                let stride = max_seq.div_ceil(cfg.block);
                KvGeometry {
                    kind: cfg.kind,
                    dtype: cfg.dtype,
                    unit: cfg.block,
                    table_stride: stride,
                    slots: seqs as u64 * stride as u64 * cfg.block as u64,
                    seqs,
                }
            }
            KvKind::Rotating => {
                // Never more slots than positions: a ring longer than the sequence never wraps.
                let ring = (cfg.window + cfg.prefill_chunk.max(1)).min(max_seq.max(1));
                KvGeometry {
                    kind: cfg.kind,
                    dtype: cfg.dtype,
                    unit: ring,
                    table_stride: 1,
                    slots: seqs as u64 * ring as u64,
                    seqs,
                }
            }
        }
    }

    /// The contiguous scratch a gather writes: one region of `max_seq` positions per sequence.
    pub fn scratch(&self, max_seq: u32) -> KvGeometry {
        KvGeometry {
            kind: KvKind::Contiguous,
            dtype: self.dtype,
            unit: max_seq,
            table_stride: 1,
            slots: self.seqs as u64 * max_seq as u64,
            seqs: self.seqs,
        }
    }

    /// Blocks in the paged pool (0 for the other layouts).
    pub fn pool_blocks(&self) -> u32 {
        match self.kind {
            KvKind::Paged => self.seqs * self.table_stride,
            _ => 0,
        }
    }

    /// The specialization constants of every kernel that addresses the cache (`kv.glsl`), by id:
    /// layout (0 contiguous, 1 paged, 2 rotating), unit, table stride, f16.
    pub fn spec(&self) -> [(usize, u32); 4] {
        let layout = match self.kind {
            KvKind::Contiguous => 0,
            KvKind::Paged => 1,
            KvKind::Rotating => 2,
        };
        use crate::shaders::spec as id;
        [
            (id::KV_LAYOUT, layout),
            (id::KV_UNIT, self.unit),
            (id::KV_TABLE_STRIDE, self.table_stride),
            (id::KV_F16, (self.dtype == KvDtype::F16) as u32),
        ]
    }

    /// Bytes of one layer's K (or V) buffer for `kv_dim` elements per slot.
    pub fn buffer_bytes(&self, kv_dim: u32) -> u64 {
        self.slots * kv_dim as u64 * self.dtype.bytes()
    }

    /// The slot of (seq, pos) (the host mirror of `kv_slot` in `shaders/kv.glsl`).
    pub fn slot(&self, tables: &BlockTables, seq: u32, pos: u32) -> u64 {
        match self.kind {
            KvKind::Contiguous => seq as u64 * self.unit as u64 + pos as u64,
            KvKind::Rotating => seq as u64 * self.unit as u64 + (pos % self.unit) as u64,
            KvKind::Paged => {
                let block = tables.block(seq, pos / self.unit);
                block as u64 * self.unit as u64 + (pos % self.unit) as u64
            }
        }
    }
}

/// The first position a query at `pos` attends under `window` (0: full attention).
pub fn window_start(pos: u32, window: u32) -> u32 {
    if window == 0 {
        0
    } else {
        (pos + 1).saturating_sub(window)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_names_the_flag() {
        let paged = KvConfig {
            kind: KvKind::Paged,
            block: 8,
            ..Default::default()
        };
        assert!(paged.validate().unwrap_err().contains("--block-size 8"));
        let rot = KvConfig {
            kind: KvKind::Rotating,
            ..Default::default()
        };
        assert!(rot.validate().unwrap_err().contains("--window"));
        let win = KvConfig {
            window: 64,
            ..Default::default()
        };
        assert!(win.validate().unwrap_err().contains("--kv rotating"));
        let frag = KvConfig {
            fragment: true,
            ..Default::default()
        };
        assert!(frag.validate().unwrap_err().contains("--fragment"));
        assert!(KvConfig::default().validate().is_ok());
    }

    #[test]
    fn ring_holds_window_plus_step() {
        let cfg = KvConfig {
            kind: KvKind::Rotating,
            window: 100,
            prefill_chunk: 32,
            batch: 2,
            ..Default::default()
        };
        let g = KvGeometry::new(&cfg, 1000);
        assert_eq!(g.unit, 132);
        assert_eq!(g.slots, 264);
        let t = BlockTables::new(2, 1);
        assert_eq!(g.slot(&t, 1, 140), 132 + 8);
        assert_eq!(window_start(140, 100), 41);
        assert_eq!(window_start(50, 100), 0);
        assert_eq!(window_start(50, 0), 0);
    }
}
