//! The decodescope trace: one file per capture, the contract between the decoder that writes it
//! and the profiler and viewer that read it. `profiler/TRACE_FORMAT.md` documents every field
//! and unit; this module is its executable form.
//!
//! Times are nanoseconds on the host's monotonic clock (`CLOCK_MONOTONIC`), relative to
//! [`Meta::epoch_host_ns`], so host and GPU spans share one timeline. GPU ticks are converted with
//! the calibration recorded in [`ClockMeta`].
//!
//! Spans are stored as short arrays (`[name, start_ns, dur_ns, depth]`) rather than objects: a
//! 10,000-token capture at dispatch level holds millions of them.

use serde::{Deserialize, Serialize};

/// The value of [`Trace::format`]; a reader refuses any other file type.
pub const FORMAT_NAME: &str = "decodescope-trace";
/// The newest format version this crate writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// One capture.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Trace {
    /// Always [`FORMAT_NAME`].
    pub format: String,
    /// [`FORMAT_VERSION`] at the time of writing.
    pub version: u32,
    pub meta: Meta,
    /// Every label a GPU span can name, with its per-op facts. Spans refer to it by index.
    pub ops: Vec<OpInfo>,
    /// One record per step: the prefill (one record per prompt chunk of each sequence) then one
    /// per decode step (one token of every sequence).
    pub tokens: Vec<TokenRecord>,
}

/// Everything that identifies a capture and decides whether two captures are comparable.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Meta {
    pub tool: ToolMeta,
    /// Wall-clock time the capture started, milliseconds since the Unix epoch.
    #[serde(default)]
    pub created_unix_ms: u64,
    /// Host monotonic time (ns) that all `*_ns` times in this trace are relative to.
    #[serde(default)]
    pub epoch_host_ns: u64,
    pub device: DeviceMeta,
    #[serde(default)]
    pub clock: ClockMeta,
    pub model: ModelMeta,
    pub knobs: Knobs,
    pub run: RunMeta,
    /// Set by `profiler record` for a trace of a program other than the decoder, captured by the
    /// Vulkan layer; absent in the decoder's own traces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capture: Option<CaptureMeta>,
}

/// The value of a field that a capture of a foreign program cannot know (its knobs, its model);
/// `diff` does not compare a field that is unknown on either side.
pub const UNKNOWN: &str = "unknown";

/// How `profiler record` captured a program through the Vulkan layer (TRACE_FORMAT.md,
/// "`meta.capture`").
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct CaptureMeta {
    /// The program as given on the command line, and its arguments.
    pub program: String,
    pub args: Vec<String>,
    /// The executable the layer found itself in (`/proc/self/exe`) and its process id.
    pub exe: String,
    pub pid: u32,
    /// The program's exit code; `None` when a signal ended it.
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// True when the program exited with status 0 and every record of the layer was read.
    pub complete: bool,
    /// Sentences about anything partial or unusual.
    pub notes: Vec<String>,
    /// `auto` or `wait`: the rule that grouped host waits into steps.
    pub step_rule: String,
    /// What the rule found, in one sentence.
    pub step_rule_detail: String,
    /// Wait groups per decode step (the period `auto` found; 0 when none).
    pub period_waits: u32,
    /// Wait groups in the capture: every call from one host wait to the next.
    pub wait_groups: u64,
    /// Wait groups after the last decode step (teardown), summed here instead of being a step.
    pub epilogue_waits: u64,
    pub epilogue: Counters,
    pub epilogue_wall_ns: u64,
    /// GPU timestamp pairs the layer could not read back.
    pub dropped_timestamps: u64,
    /// Counters the layer cannot see completely (left at what it could count).
    pub unknown_counters: Vec<String>,
    /// Dispatches of the whole capture (steps, epilogue and tail) that have no GPU span at the
    /// capture's timestamp level; the sum of the steps' `gpu_untimed` plus the epilogue's and
    /// the tail's. 0 with timestamps `off`, where nothing is timed and nothing is claimed.
    #[serde(skip_serializing_if = "is_zero_u64")]
    pub untimed_dispatches: u64,
    /// At `--timestamps dispatch`, how the layer timed dispatches: `shader-clock` (each
    /// instrumented dispatch read the device clock inside its shader) or `interval` (timestamps
    /// between the program's barriers, shared by dispatches that overlap); empty otherwise.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub dispatch_timing: String,
    /// Where the layer reset its timestamp queries: `host` (from the host, where the device has
    /// `hostQueryReset`) or `command-buffer` (in the command buffers it timed); empty without
    /// timestamps.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub query_reset: String,
    /// Every queue of every device the program submitted to, with what it was given over the
    /// whole capture (`device` and `family` as the program created them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub queues: Vec<CaptureQueue>,
    /// Work after the last complete step of a program that did not finish (killed, crashed,
    /// interrupted): what the layer saw submitted after the last step it could close, and why
    /// it is not a step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tail: Option<CaptureTail>,
}

/// One queue of a foreign program and what was submitted to it (`meta.capture.queues`).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct CaptureQueue {
    /// The device's index in the process (creation order) and its name.
    pub device: u32,
    pub device_name: String,
    /// Queue family and index within the family (`vkGetDeviceQueue`).
    pub family: u32,
    pub index: u32,
    /// `compute` or `transfer` (a transfer-only family), as `GpuSpan::queue` numbers them.
    pub kind: String,
    pub submits: u64,
    pub command_buffers: u64,
    pub dispatches: u64,
}

/// Work a stopped program submitted after its last complete step (`meta.capture.tail`).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct CaptureTail {
    /// Why the work is not a step (the program's end, in a sentence).
    pub reason: String,
    /// Wait groups after the last step (the open one, whose wait never came, included).
    pub wait_groups: u64,
    pub counters: Counters,
    /// Host time from the end of the last step to the last call the layer saw.
    pub wall_ns: u64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ToolMeta {
    pub name: String,
    pub version: String,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct DeviceMeta {
    /// `VkPhysicalDeviceProperties::deviceName`, or `cpu` for the CPU reference.
    pub name: String,
    /// `discrete`, `integrated`, `virtual`, `cpu` or `other`.
    #[serde(default)]
    pub device_type: String,
    #[serde(default)]
    pub vendor_id: u32,
    #[serde(default)]
    pub device_id: u32,
    /// `VkPhysicalDeviceDriverProperties::driverName` and `driverInfo`.
    #[serde(default)]
    pub driver: String,
    /// Vulkan API version of the device, `major.minor.patch`.
    #[serde(default)]
    pub api_version: String,
    /// Nanoseconds per GPU timestamp tick (`timestampPeriod`); 0 when timestamps are unsupported.
    #[serde(default)]
    pub timestamp_period_ns: f64,
    /// Number of compute units the kernels were tuned for (SMs, CUs, or CPU threads on lavapipe).
    #[serde(default)]
    pub compute_units: u32,
    /// Measured device memory bandwidth in GB/s (10^9 bytes/s) when the capture measured it.
    /// Reports show achieved GB/s as a share of it.
    #[serde(default)]
    pub memory_bandwidth_gbps: Option<f64>,
}

/// How GPU ticks became host nanoseconds.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ClockMeta {
    /// True when `VK_KHR/EXT_calibrated_timestamps` aligned the GPU clock to the host clock.
    pub calibrated: bool,
    /// `VK_KHR_calibrated_timestamps`, `VK_EXT_calibrated_timestamps`, `fence-fallback`
    /// (see TRACE_FORMAT.md), or `none` when no GPU timestamps were written.
    pub method: String,
    /// The calibration's maximum deviation in ns as reported by the driver.
    #[serde(default)]
    pub max_deviation_ns: Option<u64>,
    /// GPU time (ns, ticks x period) minus host monotonic time (ns) at calibration.
    #[serde(default)]
    pub gpu_minus_host_ns: i64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ModelMeta {
    /// Preset name (`tiny`, `smollm2`, ...) or the checkpoint directory's name.
    pub name: String,
    /// `qwen3` or `llama`.
    pub architecture: String,
    #[serde(default)]
    pub parameters: u64,
    #[serde(default)]
    pub layers: u32,
    #[serde(default)]
    pub hidden: u32,
    #[serde(default)]
    pub heads: u32,
    #[serde(default)]
    pub kv_heads: u32,
    #[serde(default)]
    pub head_dim: u32,
    #[serde(default)]
    pub intermediate: u32,
    #[serde(default)]
    pub vocab: u32,
    /// Element type of the matrix weights on the device (`f16`).
    #[serde(default)]
    pub weight_dtype: String,
    /// Bytes of weights that one decode token must read (every matrix once, plus the embedding row).
    #[serde(default)]
    pub weight_bytes_per_token: u64,
}

/// The six execution knobs of docs/design.md, as given on the command line (`--submit every:4`,
/// ...).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Knobs {
    /// Preset the knobs started from: `generic`, `fused`, or `custom` when a flag overrode one.
    pub mode: String,
    pub submit: String,
    pub sync: String,
    pub descriptors: String,
    pub barriers: String,
    pub kernels: String,
    pub recording: String,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct RunMeta {
    pub prompt: String,
    pub prompt_tokens: u32,
    /// Decode tokens asked for.
    pub decode_tokens: u32,
    /// Positions already in the KV cache before the prompt (a synthetic context), usually 0.
    #[serde(default)]
    pub context: u32,
    /// `contiguous`, `paged:BLOCK` or `rotating:WINDOW`.
    #[serde(default)]
    pub kv_layout: String,
    /// KV cache element type, `f16` or `f32` (empty in traces older than the field: f32).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kv_dtype: String,
    /// Paged layout: positions per block (0 otherwise).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub kv_block_size: u32,
    /// Sliding-window attention span in positions (0: full causal attention).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub kv_window: u32,
    /// Paged layout: `gather` or `fused` attention (empty otherwise).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub paged_attention: String,
    /// Sequences decoded together; a decode record's `n_tokens` is this many sequence-tokens.
    #[serde(default = "one", skip_serializing_if = "at_most_one")]
    pub batch: u32,
    /// Most prompt tokens one prefill record processes (0: the whole prompt at once).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub prefill_chunk: u32,
    /// `off`, `token`, `region` or `dispatch`.
    pub timestamps: String,
    /// Generated token ids, in order (the prefill's token first).
    #[serde(default)]
    pub generated_ids: Vec<u32>,
    #[serde(default)]
    pub generated_text: String,
    /// The kernels' tuning as the decoder resolved it (absent in traces written before the field
    /// and in captures of other programs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tuning: Option<TuningMeta>,
}

/// The tuning a decoder run used (TRACE_FORMAT.md, "`meta.run.tuning`").
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct TuningMeta {
    /// Every tuning key with the value the run used, defaults included, by name.
    pub keys: std::collections::BTreeMap<String, u32>,
    /// The keys set by `--tuning` or `DECODESCOPE_TUNING`, as `key=value,...` (empty: none).
    pub overrides: String,
    /// The persistent kernel's grid as resolved at run time; absent for the other kernels.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub persistent_grid: Option<PersistentGridMeta>,
}

/// What the persistent kernel resolved on the device: its grid and its attention's head groups.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct PersistentGridMeta {
    /// Workgroups of the one dispatch (the residency probe's, or `persistent_groups`).
    pub workgroups: u32,
    /// Invocations per workgroup.
    pub invocations: u32,
    /// Lanes per subgroup.
    pub subgroup_size: u32,
    /// Subgroups per attention unit of a decode step (1, or the query heads per KV head).
    pub head_groups: u32,
}

fn one() -> u32 {
    1
}
fn at_most_one(v: &u32) -> bool {
    *v <= 1
}
fn is_zero_u32(v: &u32) -> bool {
    *v == 0
}
fn is_zero_u64(v: &u64) -> bool {
    *v == 0
}

/// What a label does and what it costs, from the shapes alone.
///
/// For a decode step attending `kv_len` positions the op reads
/// `bytes_read + bytes_read_per_kv * kv_len` bytes, writes `bytes_written + bytes_written_per_kv * kv_len`
/// and performs `flops + flops_per_kv * kv_len` floating-point operations, each time it runs.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct OpInfo {
    pub label: String,
    /// Op family for colouring and grouping: `matvec`, `norm`, `rope`, `attention`, `kv`,
    /// `elementwise`, `embed`, `argmax`, `copy`, `region`, `token`.
    pub kind: String,
    #[serde(default)]
    pub bytes_read: u64,
    #[serde(default)]
    pub bytes_written: u64,
    #[serde(default)]
    pub flops: u64,
    #[serde(default)]
    pub bytes_read_per_kv: u64,
    #[serde(default)]
    pub bytes_written_per_kv: u64,
    #[serde(default)]
    pub flops_per_kv: u64,
}

impl OpInfo {
    /// Bytes read plus bytes written for one run at `kv_len` cached positions.
    /// Saturates rather than overflowing on crafted files.
    pub fn bytes_at(&self, kv_len: u64) -> u64 {
        let per_kv = self
            .bytes_read_per_kv
            .saturating_add(self.bytes_written_per_kv);
        self.bytes_read
            .saturating_add(self.bytes_written)
            .saturating_add(per_kv.saturating_mul(kv_len))
    }
    /// Floating-point operations for one run at `kv_len` cached positions.
    pub fn flops_at(&self, kv_len: u64) -> u64 {
        self.flops
            .saturating_add(self.flops_per_kv.saturating_mul(kv_len))
    }
}

#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Prefill,
    #[default]
    Decode,
}

/// One step: the prefill over the whole prompt, or one decode token.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct TokenRecord {
    /// 0-based index of the record in the trace.
    pub index: u32,
    pub phase: Phase,
    /// Position of the first token this step processes.
    pub position: u32,
    /// Tokens processed in this step (the prompt length for prefill, 1 for decode).
    pub n_tokens: u32,
    /// Cached positions attended by the last token of this step (position + n_tokens).
    pub kv_len: u32,
    /// The token id this step produced.
    #[serde(default)]
    pub token_id: Option<u32>,
    /// Host time the step started and its wall time, ns.
    pub start_ns: u64,
    pub wall_ns: u64,
    /// Host time spent recording, binding and submitting (the step's wall time minus waits).
    pub host_enqueue_ns: u64,
    /// Host time spent blocked on fences.
    #[serde(default)]
    pub host_wait_ns: u64,
    /// GPU busy time: the union of the step's GPU spans; `None` with timestamps `off`.
    #[serde(default)]
    pub gpu_busy_ns: Option<u64>,
    pub counters: Counters,
    #[serde(default)]
    pub host_spans: Vec<HostSpan>,
    #[serde(default)]
    pub gpu_spans: Vec<GpuSpan>,
    /// Dispatches of this step without a GPU span at the capture's timestamp level (a queue
    /// without timestamps, a secondary command buffer, a full query pool, results that never
    /// became available): `gpu_busy_ns` and the op table cover the rest. Only a foreign
    /// program's trace (`profiler record`) has any; 0 is not written.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub gpu_untimed: u64,
}

/// Exact per-step Vulkan API counters, counted where the decoder calls Vulkan.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq, Hash)]
#[serde(default)]
pub struct Counters {
    pub submits_compute: u64,
    pub submits_transfer: u64,
    pub command_buffers_begun: u64,
    pub dispatches: u64,
    pub transfer_commands: u64,
    pub barrier_calls: u64,
    pub memory_barriers: u64,
    pub descriptor_sets_allocated: u64,
    pub descriptor_writes: u64,
    pub pipeline_binds: u64,
    pub descriptor_set_binds: u64,
    pub push_constant_updates: u64,
    pub fence_waits: u64,
    pub bytes_to_device: u64,
    pub bytes_from_device: u64,
    pub timestamp_writes: u64,
    /// K and V bytes copied on the device by the paged layout's gather (read from the blocks
    /// plus written to the contiguous scratch); 0 for the other attention paths (and then not
    /// written to the file).
    #[serde(skip_serializing_if = "is_zero_u64")]
    pub kv_bytes_copied: u64,
}

impl Counters {
    /// Names of every counter, in the order [`Counters::values`] returns them; `submits` is the
    /// sum of both queues.
    pub const NAMES: [&'static str; 18] = [
        "submits",
        "submits_compute",
        "submits_transfer",
        "command_buffers_begun",
        "dispatches",
        "transfer_commands",
        "barrier_calls",
        "memory_barriers",
        "descriptor_sets_allocated",
        "descriptor_writes",
        "pipeline_binds",
        "descriptor_set_binds",
        "push_constant_updates",
        "fence_waits",
        "bytes_to_device",
        "bytes_from_device",
        "timestamp_writes",
        "kv_bytes_copied",
    ];

    /// The unit a counter is read in: `bytes` for the byte counters, `count` for the rest.
    pub fn unit(name: &str) -> &'static str {
        if name.starts_with("bytes_") || name.contains("_bytes_") {
            "bytes"
        } else {
            "count"
        }
    }

    pub fn submits(&self) -> u64 {
        self.submits_compute.saturating_add(self.submits_transfer)
    }

    /// Values in the order of [`Counters::NAMES`].
    pub fn values(&self) -> [u64; 18] {
        let f = self.to_fields();
        std::array::from_fn(|i| if i == 0 { self.submits() } else { f[i - 1] })
    }

    /// The value of the counter called `name` (see [`Counters::NAMES`]).
    pub fn get(&self, name: &str) -> Option<u64> {
        let i = Self::NAMES.iter().position(|n| *n == name)?;
        Some(self.values()[i])
    }

    /// Number of stored fields (every counter but the `submits` sum).
    pub const FIELDS: usize = 17;

    /// The stored fields in declaration order (the raw capture's live file stores them so).
    pub fn to_fields(&self) -> [u64; Self::FIELDS] {
        [
            self.submits_compute,
            self.submits_transfer,
            self.command_buffers_begun,
            self.dispatches,
            self.transfer_commands,
            self.barrier_calls,
            self.memory_barriers,
            self.descriptor_sets_allocated,
            self.descriptor_writes,
            self.pipeline_binds,
            self.descriptor_set_binds,
            self.push_constant_updates,
            self.fence_waits,
            self.bytes_to_device,
            self.bytes_from_device,
            self.timestamp_writes,
            self.kv_bytes_copied,
        ]
    }

    /// The inverse of [`Counters::to_fields`].
    pub fn from_fields(f: [u64; Self::FIELDS]) -> Counters {
        Counters {
            submits_compute: f[0],
            submits_transfer: f[1],
            command_buffers_begun: f[2],
            dispatches: f[3],
            transfer_commands: f[4],
            barrier_calls: f[5],
            memory_barriers: f[6],
            descriptor_sets_allocated: f[7],
            descriptor_writes: f[8],
            pipeline_binds: f[9],
            descriptor_set_binds: f[10],
            push_constant_updates: f[11],
            fence_waits: f[12],
            bytes_to_device: f[13],
            bytes_from_device: f[14],
            timestamp_writes: f[15],
            kv_bytes_copied: f[16],
        }
    }

    /// Field by field `self - o`, at least 0.
    pub fn saturating_sub(&self, o: &Counters) -> Counters {
        let (a, b) = (self.to_fields(), o.to_fields());
        Counters::from_fields(std::array::from_fn(|i| a[i].saturating_sub(b[i])))
    }

    /// Field by field `self + o`, saturating (a crafted trace cannot overflow a sum).
    pub fn add(&mut self, o: &Counters) {
        let (a, b) = (self.to_fields(), o.to_fields());
        *self = Counters::from_fields(std::array::from_fn(|i| a[i].saturating_add(b[i])));
    }
}

/// The fixed host span names (puffin scope names).
pub const HOST_SPAN_NAMES: [&str; 7] = [
    "token",
    "record",
    "descriptors",
    "submit",
    "wait",
    "readback",
    "sample",
];

/// A host span: `[name, start_ns, dur_ns, depth]`. `name` is one of [`HOST_SPAN_NAMES`];
/// `depth` is 0 for `token`, 1 for its children, and so on.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct HostSpan(pub String, pub u64, pub u64, pub u32);

impl HostSpan {
    pub fn name(&self) -> &str {
        &self.0
    }
    pub fn start_ns(&self) -> u64 {
        self.1
    }
    pub fn dur_ns(&self) -> u64 {
        self.2
    }
    pub fn depth(&self) -> u32 {
        self.3
    }
}

/// A GPU span: `[op, start_ns, dur_ns, queue, submit]`, or `[op, start_ns, dur_ns, queue,
/// submit, shared]` when `shared` is over 1. `op` indexes [`Trace::ops`]; `queue` is 0 for the
/// compute queue and 1 for the transfer queue; `submit` is the 0-based index, within its step, of
/// the `submit` host span whose work contains this span (for flow arrows). `shared` is how many
/// dispatch spans of the step have this same interval because the program let those dispatches
/// run concurrently (no barrier between them): each ran somewhere inside it, and each counts for
/// `dur_ns / shared` of the op table's time ([`GpuSpan::share_ns`]). 0 reads as 1.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpuSpan(pub u32, pub u64, pub u64, pub u8, pub u32, pub u32);

impl Serialize for GpuSpan {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeTuple;
        let shared = self.shared() > 1;
        let mut t = s.serialize_tuple(if shared { 6 } else { 5 })?;
        t.serialize_element(&self.0)?;
        t.serialize_element(&self.1)?;
        t.serialize_element(&self.2)?;
        t.serialize_element(&self.3)?;
        t.serialize_element(&self.4)?;
        if shared {
            t.serialize_element(&self.5)?;
        }
        t.end()
    }
}

impl<'de> Deserialize<'de> for GpuSpan {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = GpuSpan;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a GPU span [op, start_ns, dur_ns, queue, submit(, shared)]")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<GpuSpan, A::Error> {
                use serde::de::Error;
                let mut next = |i: usize| -> Result<u64, A::Error> {
                    a.next_element::<u64>()?
                        .ok_or_else(|| A::Error::invalid_length(i, &self))
                };
                let op = next(0)?;
                let (start, dur, queue, submit) = (next(1)?, next(2)?, next(3)?, next(4)?);
                let shared = a.next_element::<u32>()?.unwrap_or(1);
                if a.next_element::<serde::de::IgnoredAny>()?.is_some() {
                    return Err(A::Error::invalid_length(7, &self));
                }
                let narrow = |v: u64, what: &str, max: u64| {
                    if v > max {
                        Err(A::Error::custom(format!(
                            "GPU span {what} {v} is over {max}"
                        )))
                    } else {
                        Ok(v)
                    }
                };
                Ok(GpuSpan(
                    narrow(op, "op", u32::MAX as u64)? as u32,
                    start,
                    dur,
                    narrow(queue, "queue", u8::MAX as u64)? as u8,
                    narrow(submit, "submit", u32::MAX as u64)? as u32,
                    shared,
                ))
            }
        }
        d.deserialize_tuple(6, V)
    }
}

impl GpuSpan {
    pub fn op(&self) -> u32 {
        self.0
    }
    pub fn start_ns(&self) -> u64 {
        self.1
    }
    pub fn dur_ns(&self) -> u64 {
        self.2
    }
    pub fn queue(&self) -> u8 {
        self.3
    }
    pub fn submit(&self) -> u32 {
        self.4
    }
    /// How many dispatch spans share this interval (1 for a span of its own).
    pub fn shared(&self) -> u32 {
        self.5.max(1)
    }
    /// This span's share of its interval: `dur_ns / shared`, what the op table counts for it.
    pub fn share_ns(&self) -> u64 {
        self.2 / self.shared() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::GpuSpan;

    #[test]
    fn a_gpu_span_writes_shared_only_when_it_is_shared() {
        let own = GpuSpan(3, 10, 20, 0, 1, 1);
        assert_eq!(serde_json::to_string(&own).unwrap(), "[3,10,20,0,1]");
        let shared = GpuSpan(3, 10, 20, 0, 1, 4);
        assert_eq!(serde_json::to_string(&shared).unwrap(), "[3,10,20,0,1,4]");
        assert_eq!(shared.share_ns(), 5);
        for s in [own, shared] {
            let back: GpuSpan = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
            assert_eq!(back, s);
        }
        let zero: GpuSpan = serde_json::from_str("[3,10,20,0,1,0]").unwrap();
        assert_eq!((zero.shared(), zero.share_ns()), (1, 20));
    }

    #[test]
    fn a_gpu_span_of_the_wrong_length_or_range_is_refused() {
        for bad in [
            "[3,10,20,0]",
            "[3,10,20,0,1,2,3]",
            "[3,10,20,256,1]",
            "[-1,10,20,0,1]",
        ] {
            assert!(serde_json::from_str::<GpuSpan>(bad).is_err(), "{bad}");
        }
    }
}
