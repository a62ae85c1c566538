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
//!     uint64_t start; uint64_t end; uint tag; };
//! layout(push_constant) uniform PC { /* the program's own members */
//!     layout(offset = X) Rec rec; layout(offset = X + 8) uint tag;
//!     layout(offset = X + 12) uint skip; };
//! void main() {
//!     bool is0 = gl_LocalInvocationIndex == 0 && skip == 0;
//!     if (is0 && gl_WorkGroupID == uvec3(0)) {
//!         atomicStore(rec.start, clockRealtimeEXT());   // all relaxed
//!         atomicStore(rec.end, 0);
//!         atomicStore(rec.tag, tag);
//!     }
//!     /* the program's body; before each of its returns: */
//!     if (is0) atomicMax(rec.end, clockRealtimeEXT());
//! }
//! ```
//!
//! Workgroup (0, 0, 0), the first a GPU starts, stores the dispatch's start and the tag that
//! tells the host this record is this dispatch's (not an earlier one's that used the same
//! record); the first invocation of every workgroup takes the maximum of the end and its clock
//! as it returns. No invocation waits for an atomic's result, so the dispatch runs as it would
//! without them but for a few instructions a workgroup. Every clock and atomic has device scope.
//! The host must enable `shaderDeviceClock`, `bufferDeviceAddress`, `shaderInt64` and
//! `shaderBufferInt64Atomics`, push the record's address, the tag and a zero skip word at
//! `push_offset` (the program's push-constant range must end at or before it), and copy the
//! records where it can read them once the dispatches are done.
//!
//! A nonzero skip word turns the clock off for one dispatch: no workgroup touches a record. A
//! dispatch of tens of thousands of short workgroups (a language model's output matvec) spends
//! tens of microseconds in its workgroups' atomics, wherever their addresses are; the host
//! times such a dispatch by interval instead, and pushes the skip word.
//!
//! The SPIR-V changes: the capabilities Int64, Int64Atomics, ShaderClockKHR and
//! PhysicalStorageBufferAddresses (and VulkanMemoryModelDeviceScope under the Vulkan memory
//! model), the extensions SPV_KHR_shader_clock and SPV_KHR_physical_storage_buffer, the
//! PhysicalStorageBuffer64 addressing model; the program's push-constant struct gains three
//! members (or a block is declared); the built-ins LocalInvocationIndex and WorkgroupId are reused or
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

/// Bytes of a dispatch's record: `u64` start at 0, `u64` end at 8, in device clock ticks, and
/// the `u32` tag at 16, padded to 24.
pub const RECORD_BYTES: u64 = 24;
/// Bytes of push constants the instrumented module reads at its push offset: the record's
/// address, then the tag and the skip word (nonzero: the dispatch is not clocked).
pub const PUSH_BYTES: u32 = 16;

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

/// The instrumented module: reads its record's address, tag and skip word from 16 bytes of push
/// constants at `push_offset` (a multiple of 8): the address at `push_offset`, the tag at
/// `push_offset + 8`, the skip word at `push_offset + 12`. The result is the same for the same
/// input.
pub fn instrument(words: &[u32], push_offset: u32) -> Result<Vec<u32>, Refusal> {
    if !push_offset.is_multiple_of(8) || push_offset.checked_add(PUSH_BYTES).is_none() {
        return Err(Refusal::Unsupported(
            "push offset not a multiple of 8 below 4 GiB",
        ));
    }
    let module = words::Module::parse(words)?;
    let analysis = analysis::analyze(&module)?;
    Ok(emit::emit(&module, &analysis, push_offset))
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
