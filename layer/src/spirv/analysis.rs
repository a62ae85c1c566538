//! What the instrumenter must know of a module before it changes a word, and every reason to
//! leave the module as it is.
//!
//! [`analyze`] reads the module once and either refuses it or returns an [`Analysis`] from which
//! [`super::emit`] writes the instrumented module without any further decision that could fail.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

use super::Refusal;
use super::words::{MAX_INSTRUCTION_WORDS, Module, cap, deco, en, op, read_string, storage};

/// Where the module's sections begin and end, as indices into its instructions.
#[derive(Clone, Copy, Debug)]
pub(super) struct Layout {
    /// One past the last OpCapability.
    pub caps_end: usize,
    /// One past the last OpExtension (at `caps_end` when there is none).
    pub exts_end: usize,
    /// Where new OpName / OpMemberName go: before OpModuleProcessed and the annotations.
    pub names_at: usize,
    /// The first instruction after the annotations: types, constants and global variables.
    pub globals: usize,
    /// The first OpFunction (the instruction count when there is none).
    pub functions: usize,
}

/// A declaration the module already has, which the instrumenter reuses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Existing {
    /// Its index among the module's instructions.
    pub index: usize,
    /// Its result id.
    pub id: u32,
}

/// The program's one push-constant block.
#[derive(Clone, Copy, Debug)]
pub(super) struct PushBlock {
    /// The PushConstant OpVariable.
    pub var: u32,
    /// The Block-decorated struct it points to, which gains three members.
    pub strukt: Existing,
    /// Members the struct has now: the record's pointer becomes member `members`.
    pub members: u32,
}

/// One OpEntryPoint.
#[derive(Clone, Debug)]
pub(super) struct EntryPoint {
    /// Its index among the module's instructions.
    pub index: usize,
    /// The interface ids it lists.
    pub interface: Vec<u32>,
}

/// Everything [`super::emit`] needs, found by [`analyze`].
#[derive(Clone, Debug)]
pub(super) struct Analysis {
    pub layout: Layout,
    /// The module's capabilities.
    pub caps: BTreeSet<u32>,
    /// The module's extensions.
    pub exts: BTreeSet<String>,
    /// The OpMemoryModel's index and its memory model (GLSL450, Vulkan, ...).
    pub memory_model: (usize, u32),
    pub entry_points: Vec<EntryPoint>,
    /// Ids of OpExtInstImport sets whose names start `NonSemantic.`.
    pub non_semantic: BTreeSet<u32>,
    /// `OpTypeInt 32 0`, `OpTypeInt 64 0`, `OpTypeBool`, `OpTypeVector %uint32 3`.
    pub uint: Option<Existing>,
    pub ulong: Option<Existing>,
    pub boolean: Option<Existing>,
    pub uvec3: Option<Existing>,
    pub push: Option<PushBlock>,
    /// The Input variables decorated BuiltIn LocalInvocationIndex and WorkgroupId.
    pub local_index: Option<u32>,
    pub group_id: Option<u32>,
    /// The instruction ranges (OpFunction to OpFunctionEnd, inclusive) of the distinct entry
    /// point functions.
    pub entry_functions: Vec<Range<usize>>,
}

/// The section of a pre-function instruction, in the order the SPIR-V logical layout requires;
/// None for the types, constants and global variables that come after them.
fn rank(opcode: u16) -> Option<u8> {
    Some(match opcode {
        op::CAPABILITY => 0,
        op::EXTENSION => 1,
        op::EXT_INST_IMPORT => 2,
        op::MEMORY_MODEL => 3,
        op::ENTRY_POINT => 4,
        op::EXECUTION_MODE | op::EXECUTION_MODE_ID => 5,
        op::STRING | op::SOURCE | op::SOURCE_CONTINUED | op::SOURCE_EXTENSION => 6,
        op::NAME | op::MEMBER_NAME => 7,
        op::MODULE_PROCESSED => 8,
        op::DECORATE
        | op::MEMBER_DECORATE
        | op::DECORATION_GROUP
        | op::GROUP_DECORATE
        | op::GROUP_MEMBER_DECORATE
        | op::DECORATE_ID
        | op::DECORATE_STRING
        | op::MEMBER_DECORATE_STRING => 9,
        _ => return None,
    })
}

/// Finds the sections, refusing a module whose pre-function instructions are out of order.
fn layout(m: &Module<'_>) -> Result<Layout, Refusal> {
    let insts = &m.insts;
    let globals = insts
        .iter()
        .position(|i| rank(i.op).is_none())
        .unwrap_or(insts.len());
    let mut last = 0;
    for inst in &insts[..globals] {
        let r = rank(inst.op).unwrap_or(u8::MAX);
        if r < last {
            return Err(Refusal::Unsupported("module sections out of order"));
        }
        last = r;
    }
    if insts[globals..].iter().any(|i| rank(i.op).is_some()) {
        return Err(Refusal::Unsupported("module sections out of order"));
    }
    let first_above = |r: u8| {
        insts[..globals]
            .iter()
            .position(|i| rank(i.op).is_some_and(|x| x > r))
            .unwrap_or(globals)
    };
    let functions = insts
        .iter()
        .position(|i| i.op == op::FUNCTION)
        .unwrap_or(insts.len());
    Ok(Layout {
        caps_end: first_above(0),
        exts_end: first_above(1),
        names_at: first_above(7),
        globals,
        functions,
    })
}

/// Reads `m`, refusing it where instrumenting it could produce anything but a valid module.
pub(super) fn analyze(m: &Module<'_>) -> Result<Analysis, Refusal> {
    let layout = layout(m)?;
    let insts = &m.insts;
    let pre = &insts[..layout.globals];

    let mut caps = BTreeSet::new();
    let mut exts = BTreeSet::new();
    let mut non_semantic = BTreeSet::new();
    let mut memory_model = None;
    let mut entry_points = Vec::new();
    let mut blocks = BTreeSet::new();
    let mut builtins: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for (index, inst) in pre.iter().enumerate() {
        match inst.op {
            op::CAPABILITY => {
                caps.insert(inst.word(0).ok_or(Refusal::NotSpirv)?);
            }
            op::EXTENSION => {
                let (name, _) = read_string(inst.from(0)).ok_or(Refusal::NotSpirv)?;
                exts.insert(name);
            }
            op::EXT_INST_IMPORT => {
                let id = inst.word(0).ok_or(Refusal::NotSpirv)?;
                let (name, _) = read_string(inst.from(1)).ok_or(Refusal::NotSpirv)?;
                if name.starts_with("NonSemantic.") {
                    non_semantic.insert(id);
                }
            }
            op::MEMORY_MODEL => {
                if memory_model.is_some() {
                    return Err(Refusal::Unsupported("two memory models"));
                }
                let (addressing, model) =
                    inst.word(0).zip(inst.word(1)).ok_or(Refusal::NotSpirv)?;
                if addressing != en::LOGICAL && addressing != en::PHYSICAL_STORAGE_BUFFER_64 {
                    return Err(Refusal::Addressing);
                }
                memory_model = Some((index, model));
            }
            op::ENTRY_POINT => {
                if inst.word(0) != Some(en::GL_COMPUTE) {
                    return Err(Refusal::NotCompute);
                }
                let function = inst.word(1).ok_or(Refusal::NotSpirv)?;
                let (_, name_words) = read_string(inst.from(2)).ok_or(Refusal::NotSpirv)?;
                // The entry point gains at most three interface ids.
                if inst.words.len() + 3 > MAX_INSTRUCTION_WORDS {
                    return Err(Refusal::Unsupported("entry point interface too long"));
                }
                entry_points.push((function, index, inst.from(2 + name_words).to_vec()));
            }
            op::DECORATE => match (inst.word(0), inst.word(1), inst.word(2)) {
                (Some(target), Some(deco::BLOCK), _) => {
                    blocks.insert(target);
                }
                (Some(target), Some(deco::BUILT_IN), Some(builtin)) => {
                    builtins.entry(builtin).or_default().push(target);
                }
                _ => {}
            },
            op::DECORATION_GROUP | op::GROUP_DECORATE | op::GROUP_MEMBER_DECORATE => {
                return Err(Refusal::Unsupported("decoration groups"));
            }
            _ => {}
        }
    }
    if caps.contains(&cap::KERNEL) || caps.contains(&cap::ADDRESSES) {
        return Err(Refusal::Unsupported("a kernel module"));
    }
    if caps.contains(&cap::UNTYPED_POINTERS_KHR) {
        return Err(Refusal::Unsupported("untyped pointers"));
    }
    let memory_model = memory_model.ok_or(Refusal::Unsupported("no memory model"))?;
    if entry_points.is_empty() {
        return Err(Refusal::NotCompute);
    }

    let globals = scan_globals(m, &layout)?;
    let push = push_block(m, &layout, &globals, &blocks)?;
    let local_index = builtin_var(
        &globals,
        builtins.get(&deco::BUILT_IN_LOCAL_INVOCATION_INDEX),
        globals.uint,
        "the program's LocalInvocationIndex is not one 32-bit unsigned integer",
    )?;
    let group_id = builtin_var(
        &globals,
        builtins.get(&deco::BUILT_IN_WORKGROUP_ID),
        globals.uvec3,
        "the program's WorkgroupId is not one vector of three 32-bit unsigned integers",
    )?;
    let entry_functions = entry_functions(m, &layout, &entry_points)?;

    // Ids the instrumenter adds: about fifty for the declarations, thirty for each prologue and
    // epilogue.
    let returns = entry_functions
        .iter()
        .map(|r| {
            insts[r.clone()]
                .iter()
                .filter(|i| i.op == op::RETURN)
                .count()
        })
        .sum::<usize>();
    let new_ids = 64 + 32 * (entry_functions.len() + returns);
    if u64::from(m.bound()) + new_ids as u64 > u64::from(u32::MAX) {
        return Err(Refusal::Unsupported("id bound too large"));
    }

    Ok(Analysis {
        layout,
        caps,
        exts,
        memory_model,
        entry_points: entry_points
            .into_iter()
            .map(|(_, index, interface)| EntryPoint { index, interface })
            .collect(),
        non_semantic,
        uint: globals.uint,
        ulong: globals.ulong,
        boolean: globals.boolean,
        uvec3: globals.uvec3,
        push,
        local_index,
        group_id,
        entry_functions,
    })
}

/// What the types, constants and global variables section declares that matters here.
#[derive(Debug, Default)]
struct Globals {
    uint: Option<Existing>,
    ulong: Option<Existing>,
    boolean: Option<Existing>,
    uvec3: Option<Existing>,
    /// OpTypePointer: id -> (storage class, pointee).
    pointers: BTreeMap<u32, (u32, u32)>,
    /// OpTypeStruct: id -> instruction index.
    structs: BTreeMap<u32, usize>,
    /// OpVariable: id -> (pointer type, storage class).
    variables: BTreeMap<u32, (u32, u32)>,
    /// The PushConstant variables.
    push_vars: Vec<u32>,
}

fn scan_globals(m: &Module<'_>, layout: &Layout) -> Result<Globals, Refusal> {
    let mut g = Globals::default();
    for index in layout.globals..layout.functions {
        let inst = &m.insts[index];
        let words = (inst.word(0), inst.word(1), inst.word(2));
        match (inst.op, words) {
            (op::TYPE_INT, (Some(id), Some(32), Some(0))) => g.uint = Some(Existing { index, id }),
            (op::TYPE_INT, (Some(id), Some(64), Some(0))) => {
                g.ulong = Some(Existing { index, id });
            }
            (op::TYPE_BOOL, (Some(id), _, _)) => g.boolean = Some(Existing { index, id }),
            (op::TYPE_VECTOR, (Some(id), Some(component), Some(3)))
                if g.uint.is_some_and(|u| u.id == component) =>
            {
                g.uvec3 = Some(Existing { index, id });
            }
            (op::TYPE_POINTER, (Some(id), Some(class), Some(pointee))) => {
                g.pointers.insert(id, (class, pointee));
            }
            (op::TYPE_STRUCT, (Some(id), _, _)) => {
                g.structs.insert(id, index);
            }
            (op::VARIABLE, (Some(ty), Some(id), Some(class))) => {
                g.variables.insert(id, (ty, class));
                if class == storage::PUSH_CONSTANT {
                    g.push_vars.push(id);
                }
            }
            (op::VARIABLE | op::TYPE_POINTER | op::TYPE_STRUCT, _) => {
                return Err(Refusal::NotSpirv);
            }
            _ => {}
        }
    }
    Ok(g)
}

/// The program's push-constant block, if it has one the instrumenter can extend.
fn push_block(
    m: &Module<'_>,
    layout: &Layout,
    g: &Globals,
    blocks: &BTreeSet<u32>,
) -> Result<Option<PushBlock>, Refusal> {
    let var = match g.push_vars.as_slice() {
        [] => return Ok(None),
        [var] => *var,
        _ => return Err(Refusal::PushConstants),
    };
    let strukt = g
        .variables
        .get(&var)
        .and_then(|(ty, _)| g.pointers.get(ty))
        .map(|&(_, pointee)| pointee)
        .filter(|s| blocks.contains(s))
        .and_then(|s| g.structs.get(&s).map(|&index| Existing { index, id: s }))
        .ok_or(Refusal::PushConstants)?;
    let words = m.insts[strukt.index].words.len();
    if words + 3 > MAX_INSTRUCTION_WORDS {
        return Err(Refusal::Unsupported(
            "push-constant block has too many members",
        ));
    }
    if struct_used_elsewhere(m, layout, strukt) {
        return Err(Refusal::Unsupported(
            "the push-constant struct is used other than through its block's pointer",
        ));
    }
    Ok(Some(PushBlock {
        var,
        strukt,
        members: (words - 2) as u32,
    }))
}

/// Whether any instruction but the struct's own declaration, a PushConstant pointer to it, its
/// names and its decorations refers to `s`. Where an instruction is not known here every operand
/// word is taken as a possible reference, so the answer errs towards refusing.
fn struct_used_elsewhere(m: &Module<'_>, layout: &Layout, s: Existing) -> bool {
    let s_id = s.id;
    let has = |words: &[u32]| words.contains(&s_id);
    for (index, inst) in m.insts[layout.globals..layout.functions].iter().enumerate() {
        if index + layout.globals == s.index {
            continue;
        }
        let used = match inst.op {
            // Types whose operands are all literals, and line information.
            19..=22 | 26 | op::LINE | op::NO_LINE => false,
            // Vector, matrix, image, sampled image, runtime array: one type operand.
            23..=25 | 27 | 29 => inst.word(1) == Some(s_id),
            // Array: element type and length.
            28 => has(&inst.from(1)[..inst.from(1).len().min(2)]),
            op::TYPE_STRUCT | 33 => has(inst.from(1)),
            op::TYPE_POINTER => {
                inst.word(2) == Some(s_id) && inst.word(1) != Some(storage::PUSH_CONSTANT)
            }
            // Scalar constants and spec constants, null, undef: the result type only.
            1 | 41..=43 | 46 | 48..=50 => inst.word(0) == Some(s_id),
            // Composites: the result type and the constituents.
            44 | 51 => inst.word(0) == Some(s_id) || has(inst.from(2)),
            // OpSpecConstantOp: result type, then a literal opcode, then ids.
            52 => inst.word(0) == Some(s_id) || has(inst.from(3)),
            op::VARIABLE => inst.word(0) == Some(s_id) || has(inst.from(3)),
            // Extended instructions: result type, then (after the set and number) ids.
            op::EXT_INST => inst.word(0) == Some(s_id) || has(inst.from(4)),
            _ => has(inst.from(0)),
        };
        if used {
            return true;
        }
    }
    // In a function every instruction's first operand is an id (a result type, a result, or an
    // operand), and a struct type can be used there only as a result type.
    m.insts[layout.functions..]
        .iter()
        .any(|i| i.word(0) == Some(s_id))
}

/// The program's own variable for a built-in, checked to be an Input variable of `pointee`.
fn builtin_var(
    g: &Globals,
    decorated: Option<&Vec<u32>>,
    pointee: Option<Existing>,
    wrong_type: &'static str,
) -> Result<Option<u32>, Refusal> {
    let var = match decorated.map(Vec::as_slice) {
        None | Some([]) => return Ok(None),
        Some([var]) => *var,
        Some(_) => return Err(Refusal::Unsupported("a built-in declared twice")),
    };
    let (ty, class) = g
        .variables
        .get(&var)
        .copied()
        .ok_or(Refusal::Unsupported("a built-in that is not a variable"))?;
    let ok = class == storage::INPUT
        && g.pointers
            .get(&ty)
            .is_some_and(|&(c, p)| c == storage::INPUT && pointee.is_some_and(|want| want.id == p));
    if ok {
        Ok(Some(var))
    } else {
        Err(Refusal::Unsupported(wrong_type))
    }
}

/// The distinct entry point functions' instruction ranges, in module order, refusing functions
/// the prologue and epilogue cannot be added to.
fn entry_functions(
    m: &Module<'_>,
    layout: &Layout,
    entry_points: &[(u32, usize, Vec<u32>)],
) -> Result<Vec<Range<usize>>, Refusal> {
    let wanted: BTreeSet<u32> = entry_points.iter().map(|e| e.0).collect();
    let mut found = Vec::new();
    let mut current: Option<(u32, usize)> = None;
    let mut labels = 0;
    for index in layout.functions..m.insts.len() {
        let inst = &m.insts[index];
        let in_entry = current.is_some_and(|(id, _)| wanted.contains(&id));
        match inst.op {
            op::FUNCTION => {
                if current.is_some() {
                    return Err(Refusal::NotSpirv);
                }
                current = Some((inst.word(1).ok_or(Refusal::NotSpirv)?, index));
                labels = 0;
            }
            op::FUNCTION_END => {
                let (id, start) = current.take().ok_or(Refusal::NotSpirv)?;
                if wanted.contains(&id) {
                    if labels == 0 {
                        return Err(Refusal::Unsupported("an entry point without a body"));
                    }
                    found.push((id, start..index + 1));
                }
            }
            op::FUNCTION_CALL if inst.word(2).is_some_and(|f| wanted.contains(&f)) => {
                return Err(Refusal::Unsupported(
                    "an entry point function that is also called",
                ));
            }
            op::LABEL => labels += 1,
            op::FUNCTION_PARAMETER if in_entry => {
                return Err(Refusal::Unsupported(
                    "an entry point function with parameters",
                ));
            }
            op::RETURN_VALUE if in_entry => {
                return Err(Refusal::Unsupported(
                    "an entry point function that returns a value",
                ));
            }
            _ => {}
        }
    }
    if current.is_some() {
        return Err(Refusal::NotSpirv);
    }
    if found.len() != wanted.len() {
        return Err(Refusal::Unsupported("an entry point without a function"));
    }
    Ok(found.into_iter().map(|(_, range)| range).collect())
}
