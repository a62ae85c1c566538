//! Rewrites a compute shader module's SPIR-V so that each dispatch times itself with the GPU's
//! device clock (VK_KHR_shader_clock), instead of the layer writing timestamps between
//! dispatches.
//!
//! [`instrument`] takes the program's words and returns new ones, or a [`Refusal`] saying why the
//! module is left as it is (its dispatches are then timed another way). The instrumented entry
//! points behave as this GLSL would:
//!
//! ```glsl
//! layout(buffer_reference, std430, buffer_reference_align = 8) buffer Rec {
//!     uint64_t start; uint tag; };
//! layout(buffer_reference, std430, buffer_reference_align = 8) buffer Lane { uint64_t end; };
//! layout(push_constant) uniform PC { /* the program's own members */
//!     layout(offset = X) Rec rec; layout(offset = X + 8) uint tag;
//!     layout(offset = X + 12) uint lanes; };
//! Lane lane(uint l) { return Lane(uint64_t(rec) + lanes + l * STRIDE); }
//! void main() {
//!     if (gl_LocalInvocationIndex == 0 && gl_WorkGroupID == uvec3(0)) {
//!         atomicStore(rec.start, clockRealtimeEXT());   // all relaxed
//!         for (uint l = 0; l < END_LANES; l++) atomicStore(lane(l).end, 0);
//!         atomicStore(rec.tag, tag);
//!     }
//!     /* the program's body; before each of its returns: */
//!     if (gl_LocalInvocationIndex == 0) {
//!         uvec3 g = gl_WorkGroupID;
//!         atomicMax(lane((g.x + g.y + g.z) & (END_LANES - 1)).end, clockRealtimeEXT());
//!     }
//! }
//! ```
//!
//! Workgroup (0, 0, 0), the first a GPU starts, stores the dispatch's start and the tag that
//! tells the host this record is this dispatch's (not an earlier one's that used the same
//! record); the first invocation of every workgroup takes the maximum of its clock and one of
//! the record's [`END_LANES`] ends as it returns, and the host takes the largest end. A record's
//! ends lie `STRIDE` ([`LANE_STRIDE`]) bytes apart ([`lane_offset`]), so that a dispatch of
//! tens of thousands of workgroups spreads its atomics over as many places in the GPU's cache
//! instead of queueing them on one address. No invocation waits for an atomic's result, so the
//! dispatch runs as it would without them but for a few instructions a workgroup. Every clock
//! and atomic has device scope. The host must enable `shaderDeviceClock`,
//! `bufferDeviceAddress`, `shaderInt64` and `shaderBufferInt64Atomics`, push the record's
//! address, the tag and [`lanes_word`] at `push_offset` (the program's push-constant range must
//! end at or before it), and copy the records and their ends where it can read them once the
//! dispatches are done.
//!
//! The SPIR-V changes: the capabilities Int64, Int64Atomics, ShaderClockKHR and
//! PhysicalStorageBufferAddresses (and VulkanMemoryModelDeviceScope under the Vulkan memory
//! model), the extensions SPV_KHR_shader_clock and SPV_KHR_physical_storage_buffer, the
//! PhysicalStorageBuffer64 addressing model; the program's push-constant struct gains two members
//! (or a block is declared) three members; the built-ins LocalInvocationIndex and WorkgroupId are reused or
//! declared and listed in every entry point's interface. The scalar types the code needs are
//! reused where the program declares them (SPIR-V forbids a second declaration), and moved with
//! the new declarations to the start of the types section so that they precede the push-constant
//! struct. Each entry point function's first block is split after its variables: a new entry
//! block (with a fresh label) holds them and the prologue's branch, and the rest keeps the
//! original label, so every OpPhi that names it stays right. Each OpReturn becomes a selection
//! around the epilogue ending in a fresh block that returns. Every other function and
//! instruction is copied unchanged.

mod analysis;
mod emit;
mod words;

#[cfg(test)]
mod tests;

/// Bytes of a dispatch's record: the `u64` start at 0, in device clock ticks, and the `u32` tag
/// at 8, padded to 16. A buffer of `records` records holds them from its start, then its ends
/// ([`lane_offset`]).
pub const RECORD_BYTES: u64 = 16;
/// Ends of each record, each raised by the workgroups whose `(x + y + z) % END_LANES` is its
/// lane: a power of two.
pub const END_LANES: u32 = 8;
const _: () = assert!(END_LANES.is_power_of_two() && END_LANES >= 2);
/// Bytes of push constants the instrumented module reads at its push offset: the record's
/// address, then the tag, then [`lanes_word`].
pub const PUSH_BYTES: u32 = 16;

/// Records whose ends lie together: after the records, each chunk of `CHUNK` records has its
/// ends in lane 0, then in lane 1, and so on, `LANE_STRIDE` bytes apart. A record's lanes then
/// differ in the address bits a GPU spreads its cache over (ends a megabyte apart queued their
/// atomics as one address does on an H200), and a run of records copies as one region a lane.
pub const CHUNK: u64 = 128;
/// Bytes from a record's end in one lane to its end in the next (the module's `STRIDE`).
pub const LANE_STRIDE: u32 = (CHUNK * 8) as u32;

/// Bytes of a buffer of `records` records and their ends.
pub const fn buffer_bytes(records: u64) -> u64 {
    records * RECORD_BYTES + records.div_ceil(CHUNK) * END_LANES as u64 * LANE_STRIDE as u64
}

/// Where end `lane` of record `pair` lies in a buffer of `records` records.
pub const fn lane_offset(records: u64, pair: u64, lane: u32) -> u64 {
    records * RECORD_BYTES
        + (pair / CHUNK) * END_LANES as u64 * LANE_STRIDE as u64
        + lane as u64 * LANE_STRIDE as u64
        + (pair % CHUNK) * 8
}

/// The last push-constant word for record `pair`: what the module adds to the record's address
/// to reach its end in lane 0.
pub const fn lanes_word(records: u64, pair: u64) -> u32 {
    (lane_offset(records, pair, 0) - pair * RECORD_BYTES) as u32
}

/// Why a module was left as it was (its dispatches are then not clock-timed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Not SPIR-V: too short, a wrong magic number, or a truncated instruction.
    NotSpirv,
    /// A SPIR-V version other than 1.0 to 1.6 (the version word).
    Version(u32),
    /// An entry point that is not GLCompute, or no entry point.
    NotCompute,
    /// An addressing model other than Logical or PhysicalStorageBuffer64.
    Addressing,
    /// More than one PushConstant variable, or one whose type is not a pointer to a
    /// Block-decorated struct.
    PushConstants,
    /// Something else the instrumenter does not handle, said in a few words.
    Unsupported(&'static str),
}

impl Refusal {
    /// One short human sentence fragment, e.g. "not a compute module".
    pub fn reason(&self) -> String {
        match self {
            Refusal::NotSpirv => "not SPIR-V (bad magic number or a truncated instruction)".into(),
            Refusal::Version(v) => format!(
                "SPIR-V version {}.{} (word {v:#010x}) is not 1.0 to 1.6",
                (v >> 16) & 0xff,
                (v >> 8) & 0xff
            ),
            Refusal::NotCompute => "not a compute module".into(),
            Refusal::Addressing => {
                "an addressing model other than Logical or PhysicalStorageBuffer64".into()
            }
            Refusal::PushConstants => {
                "push constants other than one pointer to a Block struct".into()
            }
            Refusal::Unsupported(what) => format!("unsupported: {what}"),
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason())
    }
}

/// The instrumented module: reads its record's address, tag and [`lanes_word`] from 16 bytes of
/// push constants at `push_offset` (a multiple of 8), for records in a buffer of `records`
/// records ([`buffer_bytes`]). The result is the same for the same input.
pub fn instrument(words: &[u32], push_offset: u32, records: u32) -> Result<Vec<u32>, Refusal> {
    if !push_offset.is_multiple_of(8) || push_offset.checked_add(PUSH_BYTES).is_none() {
        return Err(Refusal::Unsupported(
            "push offset not a multiple of 8 below 4 GiB",
        ));
    }
    if buffer_bytes(records as u64) > u32::MAX as u64 {
        return Err(Refusal::Unsupported("a record buffer of 4 GiB or more"));
    }
    let module = words::Module::parse(words)?;
    let analysis = analysis::analyze(&module)?;
    Ok(emit::emit(&module, &analysis, push_offset, LANE_STRIDE))
}

/// True when the module uses the Vulkan memory model: instrumented, it then needs the device
/// feature `vulkanMemoryModelDeviceScope` (its atomics have device scope).
pub fn uses_vulkan_memory_model(words: &[u32]) -> bool {
    words::Module::parse(words).is_ok_and(|m| {
        m.insts.iter().any(|i| {
            i.op == words::op::MEMORY_MODEL && i.word(1) == Some(words::en::VULKAN_MEMORY_MODEL)
        })
    })
}
