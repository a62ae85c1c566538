//! SPIR-V as words: the header, views of the input's instructions, and a writer of new ones.
//!
//! Only what the instrumenter reads is named here: the opcodes and enumerants of the SPIR-V
//! specification (unified1) it looks for or writes.

use super::Refusal;

/// The first word of every SPIR-V module (in the host's byte order).
pub(super) const MAGIC: u32 = 0x0723_0203;
/// Words before the first instruction: magic, version, generator, id bound, schema.
pub(super) const HEADER_WORDS: usize = 5;
/// The most words one instruction can have (its word count is 16 bits).
pub(super) const MAX_INSTRUCTION_WORDS: usize = 0xffff;

/// Opcodes.
pub(super) mod op {
    pub const SOURCE_CONTINUED: u16 = 2;
    pub const SOURCE: u16 = 3;
    pub const SOURCE_EXTENSION: u16 = 4;
    pub const NAME: u16 = 5;
    pub const MEMBER_NAME: u16 = 6;
    pub const STRING: u16 = 7;
    pub const LINE: u16 = 8;
    pub const EXTENSION: u16 = 10;
    pub const EXT_INST_IMPORT: u16 = 11;
    pub const EXT_INST: u16 = 12;
    pub const MEMORY_MODEL: u16 = 14;
    pub const ENTRY_POINT: u16 = 15;
    pub const EXECUTION_MODE: u16 = 16;
    pub const CAPABILITY: u16 = 17;
    pub const TYPE_BOOL: u16 = 20;
    pub const TYPE_INT: u16 = 21;
    pub const TYPE_VECTOR: u16 = 23;
    pub const TYPE_STRUCT: u16 = 30;
    pub const TYPE_POINTER: u16 = 32;
    pub const CONSTANT: u16 = 43;
    pub const FUNCTION: u16 = 54;
    pub const FUNCTION_PARAMETER: u16 = 55;
    pub const FUNCTION_END: u16 = 56;
    pub const FUNCTION_CALL: u16 = 57;
    pub const VARIABLE: u16 = 59;
    pub const LOAD: u16 = 61;
    pub const ACCESS_CHAIN: u16 = 65;
    pub const DECORATE: u16 = 71;
    pub const MEMBER_DECORATE: u16 = 72;
    pub const DECORATION_GROUP: u16 = 73;
    pub const GROUP_DECORATE: u16 = 74;
    pub const GROUP_MEMBER_DECORATE: u16 = 75;
    pub const COMPOSITE_EXTRACT: u16 = 81;
    pub const LOGICAL_AND: u16 = 167;
    pub const IEQUAL: u16 = 170;
    pub const BITWISE_OR: u16 = 197;
    pub const ATOMIC_STORE: u16 = 228;
    pub const ATOMIC_UMAX: u16 = 239;
    pub const SELECTION_MERGE: u16 = 247;
    pub const LABEL: u16 = 248;
    pub const BRANCH: u16 = 249;
    pub const BRANCH_CONDITIONAL: u16 = 250;
    pub const RETURN: u16 = 253;
    pub const RETURN_VALUE: u16 = 254;
    pub const NO_LINE: u16 = 317;
    pub const MODULE_PROCESSED: u16 = 330;
    pub const EXECUTION_MODE_ID: u16 = 331;
    pub const DECORATE_ID: u16 = 332;
    pub const READ_CLOCK_KHR: u16 = 5056;
    pub const DECORATE_STRING: u16 = 5632;
    pub const MEMBER_DECORATE_STRING: u16 = 5633;
}

/// Capabilities.
pub(super) mod cap {
    pub const ADDRESSES: u32 = 4;
    pub const KERNEL: u32 = 6;
    pub const INT64: u32 = 11;
    pub const INT64_ATOMICS: u32 = 12;
    pub const SHADER_CLOCK_KHR: u32 = 5055;
    pub const VULKAN_MEMORY_MODEL_DEVICE_SCOPE: u32 = 5346;
    pub const PHYSICAL_STORAGE_BUFFER_ADDRESSES: u32 = 5347;
    pub const UNTYPED_POINTERS_KHR: u32 = 4473;
}

/// Storage classes.
pub(super) mod storage {
    pub const INPUT: u32 = 1;
    pub const PUSH_CONSTANT: u32 = 9;
    pub const PHYSICAL_STORAGE_BUFFER: u32 = 5349;
}

/// Decorations, and the built-ins this module reads.
pub(super) mod deco {
    pub const BLOCK: u32 = 2;
    pub const BUILT_IN: u32 = 11;
    pub const OFFSET: u32 = 35;
    pub const BUILT_IN_WORKGROUP_ID: u32 = 26;
    pub const BUILT_IN_LOCAL_INVOCATION_INDEX: u32 = 29;
}

/// Other enumerants.
pub(super) mod en {
    /// Execution model GLCompute.
    pub const GL_COMPUTE: u32 = 5;
    /// Addressing model Logical.
    pub const LOGICAL: u32 = 0;
    /// Addressing model PhysicalStorageBuffer64.
    pub const PHYSICAL_STORAGE_BUFFER_64: u32 = 5348;
    /// Memory model Vulkan.
    pub const VULKAN_MEMORY_MODEL: u32 = 3;
    /// Scope Device.
    pub const SCOPE_DEVICE: u32 = 1;
    /// Memory semantics Relaxed.
    pub const RELAXED: u32 = 0;
    /// Selection and function control None.
    pub const NONE: u32 = 0;
}

/// One instruction of the input: its opcode and all its words (the first holds the word count).
#[derive(Clone, Copy, Debug)]
pub(super) struct Inst<'a> {
    pub op: u16,
    pub words: &'a [u32],
}

impl<'a> Inst<'a> {
    /// Operand `i` (0 is the word after the opcode's), if the instruction has it.
    pub fn word(&self, i: usize) -> Option<u32> {
        self.words.get(i + 1).copied()
    }

    /// The operands from operand `i` on (empty past the end).
    pub fn from(&self, i: usize) -> &'a [u32] {
        self.words.get(i + 1..).unwrap_or(&[])
    }
}

/// A module split into its header and its instructions, borrowing the input.
#[derive(Debug)]
pub(super) struct Module<'a> {
    pub header: [u32; HEADER_WORDS],
    pub insts: Vec<Inst<'a>>,
}

impl<'a> Module<'a> {
    /// Splits `words` into instructions, refusing what is not SPIR-V 1.0 to 1.6.
    pub fn parse(words: &'a [u32]) -> Result<Module<'a>, Refusal> {
        let mut header = [0; HEADER_WORDS];
        match words.get(..HEADER_WORDS) {
            Some(h) if h[0] == MAGIC => header.copy_from_slice(h),
            _ => return Err(Refusal::NotSpirv),
        }
        let version = header[1];
        let (major, minor) = (version >> 16, (version >> 8) & 0xff);
        if major != 1 || minor > 6 || version & 0xff != 0 {
            return Err(Refusal::Version(version));
        }
        let mut insts = Vec::new();
        let mut rest = &words[HEADER_WORDS..];
        while let Some(&first) = rest.first() {
            let count = (first >> 16) as usize;
            if count == 0 || count > rest.len() {
                return Err(Refusal::NotSpirv);
            }
            let (this, next) = rest.split_at(count);
            insts.push(Inst {
                op: (first & 0xffff) as u16,
                words: this,
            });
            rest = next;
        }
        Ok(Module { header, insts })
    }

    /// The SPIR-V version word (`0x00010500` for 1.5).
    pub fn version(&self) -> u32 {
        self.header[1]
    }

    /// The id bound: every id is below it.
    pub fn bound(&self) -> u32 {
        self.header[3]
    }
}

/// A literal string as SPIR-V packs it: UTF-8 bytes, nul-terminated, padded with nuls to whole
/// words, the first byte in the lowest-order byte of its word.
pub(super) fn string_words(s: &str) -> Vec<u32> {
    let mut bytes = s.as_bytes().to_vec();
    bytes.push(0);
    while !bytes.len().is_multiple_of(4) {
        bytes.push(0);
    }
    bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// The literal string at the start of `words` and how many words it takes, or None if it has no
/// terminating nul.
pub(super) fn read_string(words: &[u32]) -> Option<(String, usize)> {
    let mut bytes = Vec::new();
    for (i, w) in words.iter().enumerate() {
        for b in w.to_le_bytes() {
            if b == 0 {
                return Some((String::from_utf8_lossy(&bytes).into_owned(), i + 1));
            }
            bytes.push(b);
        }
    }
    None
}

/// Instructions written one after another.
#[derive(Debug, Default)]
pub(super) struct Writer {
    pub words: Vec<u32>,
}

impl Writer {
    /// Appends an instruction of opcode `op` with `operands`; the caller keeps instructions
    /// under [`MAX_INSTRUCTION_WORDS`] (every one this module writes is checked or short).
    pub fn inst(&mut self, op: u16, operands: &[u32]) {
        let count = (operands.len() + 1) as u32;
        self.words.push(count << 16 | u32::from(op));
        self.words.extend_from_slice(operands);
    }

    /// Appends an instruction whose operands are `head` then `tail`.
    pub fn inst2(&mut self, op: u16, head: &[u32], tail: &[u32]) {
        let count = (head.len() + tail.len() + 1) as u32;
        self.words.push(count << 16 | u32::from(op));
        self.words.extend_from_slice(head);
        self.words.extend_from_slice(tail);
    }

    /// Appends an instruction of the input unchanged.
    pub fn copy(&mut self, inst: &Inst<'_>) {
        self.words.extend_from_slice(inst.words);
    }

    /// Appends every instruction of `insts` unchanged.
    pub fn copy_all(&mut self, insts: &[Inst<'_>]) {
        for inst in insts {
            self.copy(inst);
        }
    }
}
