//! Tests of [`instrument`] on small compute shaders compiled by glslc (`testdata/*.comp`,
//! rebuilt by `testdata/compile.sh`) and on hand-assembled modules.
//!
//! The checker here is the tests' own: it walks every instruction by an operand table of the
//! opcodes the fixtures use (an unknown opcode fails the test, so the table grows with the
//! fixtures), checks the ids, and reads back what the instrumenter must have written.
//! `spirv-val` is not needed; during development every output was also run through it.

use std::collections::{BTreeMap, BTreeSet};

use super::words::{Module, Writer, cap, deco, en, op, read_string, storage, string_words};
use super::{Refusal, instrument};

/// The push offset the tests instrument at (past every fixture's own push constants).
const X: u32 = 64;

/// The compiled fixtures: name, SPIR-V bytes.
const FIXTURES: [(&str, &[u8]); 8] = [
    (
        "early_returns",
        include_bytes!("testdata/early_returns.spv"),
    ),
    (
        "early_returns_opt",
        include_bytes!("testdata/early_returns_opt.spv"),
    ),
    (
        "early_returns_vk10",
        include_bytes!("testdata/early_returns_vk10.spv"),
    ),
    (
        "early_returns_vk13",
        include_bytes!("testdata/early_returns_vk13.spv"),
    ),
    ("late_types", include_bytes!("testdata/late_types.spv")),
    ("no_push", include_bytes!("testdata/no_push.spv")),
    ("no_push_vk10", include_bytes!("testdata/no_push_vk10.spv")),
    ("llama_like", include_bytes!("testdata/llama_like.spv")),
];

fn words_of(bytes: &[u8]) -> Vec<u32> {
    assert_eq!(bytes.len() % 4, 0);
    bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn fixture(name: &str) -> Vec<u32> {
    let (_, bytes) = FIXTURES
        .iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no fixture {name}"));
    words_of(bytes)
}

/// The operands of `opcode` as (prefix, repeated group): `T` a result type, `R` a result id,
/// `i` an id operand, `l` a literal word, `s` a literal string, `.` the rest unchecked.
fn shape(opcode: u16) -> Option<(&'static str, &'static str)> {
    Some(match opcode {
        3 => ("ll.", ""),                                              // OpSource
        4 | 10 => ("s", ""),    // OpSourceExtension, OpExtension
        5 => ("is", ""),        // OpName
        6 => ("ils", ""),       // OpMemberName
        11 => ("Rs", ""),       // OpExtInstImport
        12 => ("TRil", "i"),    // OpExtInst
        14 => ("ll", ""),       // OpMemoryModel
        15 => ("lis", "i"),     // OpEntryPoint
        16 => ("il.", ""),      // OpExecutionMode
        331 => ("il", "i"),     // OpExecutionModeId
        17 => ("l", ""),        // OpCapability
        19 | 20 => ("R", ""),   // OpTypeVoid, OpTypeBool
        21 => ("Rll", ""),      // OpTypeInt
        22 => ("Rl.", ""),      // OpTypeFloat
        23 => ("Ril", ""),      // OpTypeVector
        28 => ("Rii", ""),      // OpTypeArray
        29 => ("Ri", ""),       // OpTypeRuntimeArray
        30 | 33 => ("R", "i"),  // OpTypeStruct, OpTypeFunction
        32 => ("Rli", ""),      // OpTypePointer
        41 | 42 => ("TR", ""),  // OpConstantTrue, OpConstantFalse
        43 | 50 => ("TR", "l"), // OpConstant, OpSpecConstant
        44 | 51 => ("TR", "i"), // OpConstantComposite, OpSpecConstantComposite
        54 => ("TRli", ""),     // OpFunction
        56 | 253 => ("", ""),   // OpFunctionEnd, OpReturn
        57 => ("TRi", "i"),     // OpFunctionCall
        59 => ("TRl", "i"),     // OpVariable (with an optional initializer)
        61 => ("TRi.", ""),     // OpLoad
        62 => ("ii.", ""),      // OpStore
        65 => ("TRi", "i"),     // OpAccessChain
        71 => ("il.", ""),      // OpDecorate
        72 => ("ill.", ""),     // OpMemberDecorate
        81 => ("TRi", "l"),     // OpCompositeExtract
        109..=115 | 124 | 126 | 127 | 168 | 200 => ("TRi", ""), // conversions, negations, nots
        128..=133 | 164..=167 | 170..=191 | 194..=199 => ("TRii", ""), // binary operators
        224 => ("iii", ""),     // OpControlBarrier
        227 => ("TRiii", ""),   // OpAtomicLoad
        228 => ("iiii", ""),    // OpAtomicStore
        234 | 239 => ("TRiiii", ""), // OpAtomicIAdd, OpAtomicUMax
        245 => ("TR", "ii"),    // OpPhi
        246 => ("iil.", ""),    // OpLoopMerge
        247 => ("il", ""),      // OpSelectionMerge
        248 => ("R", ""),       // OpLabel
        249 => ("i", ""),       // OpBranch
        250 => ("iii", "l"),    // OpBranchConditional
        251 => ("ii", "li"),    // OpSwitch
        350 => ("TRil", "i"),   // OpGroupNonUniformFAdd
        5056 => ("TRi", ""),    // OpReadClockKHR
        _ => return None,
    })
}

/// Walks `operands` by `kinds`, sending each result id to `def` and each used id to `uses`;
/// false where the words do not fit the kinds.
fn walk(
    kinds: &str,
    operands: &[u32],
    at: &mut usize,
    def: &mut Vec<u32>,
    uses: &mut Vec<u32>,
) -> bool {
    for k in kinds.chars() {
        match k {
            '.' => {
                *at = operands.len();
                return true;
            }
            's' => match read_string(&operands[(*at).min(operands.len())..]) {
                Some((_, n)) => *at += n,
                None => return false,
            },
            _ => {
                let Some(&w) = operands.get(*at) else {
                    return false;
                };
                match k {
                    'R' => def.push(w),
                    'T' | 'i' => uses.push(w),
                    _ => {}
                }
                *at += 1;
            }
        }
    }
    true
}

/// Checks that `words` is well formed: every instruction's word count fits its operands, every
/// id is below the bound and defined once, every used id is defined.
fn check_well_formed(words: &[u32]) {
    let m = Module::parse(words).expect("parses");
    let mut defined = BTreeSet::new();
    let mut used = Vec::new();
    for (n, inst) in m.insts.iter().enumerate() {
        let (prefix, group) =
            shape(inst.op).unwrap_or_else(|| panic!("opcode {} is not in the table", inst.op));
        let operands = inst.from(0);
        let mut at = 0;
        let mut def = Vec::new();
        assert!(
            walk(prefix, operands, &mut at, &mut def, &mut used),
            "instruction {n} (opcode {}) is too short",
            inst.op
        );
        while at < operands.len() {
            assert!(
                !group.is_empty(),
                "instruction {n} (opcode {}) is too long",
                inst.op
            );
            assert!(
                walk(group, operands, &mut at, &mut def, &mut used),
                "instruction {n} (opcode {}) ends inside an operand group",
                inst.op
            );
        }
        for id in def {
            assert!(
                id != 0 && id < m.bound(),
                "id {id} outside the bound {}",
                m.bound()
            );
            assert!(defined.insert(id), "id {id} defined twice");
        }
    }
    for id in used {
        assert!(defined.contains(&id), "id {id} used but not defined");
    }
}

/// What the tests read back from a module.
#[derive(Debug, Default)]
struct Facts {
    version: u32,
    caps: BTreeSet<u32>,
    exts: BTreeSet<String>,
    addressing: u32,
    /// (execution model, function, interface) of each entry point.
    entries: Vec<(u32, u32, Vec<u32>)>,
    /// Built-in by decorated id.
    builtins: BTreeMap<u32, u32>,
    blocks: BTreeSet<u32>,
    offsets: BTreeMap<(u32, u32), u32>,
    /// Result id -> the instruction's words, for the types, constants and global variables.
    globals: BTreeMap<u32, Vec<u32>>,
    /// The order in which the globals are declared.
    global_order: Vec<u32>,
    /// The functions: id -> instructions (opcode, operands).
    functions: BTreeMap<u32, Vec<(u16, Vec<u32>)>>,
}

impl Facts {
    fn of(words: &[u32]) -> Facts {
        let m = Module::parse(words).expect("parses");
        let mut f = Facts {
            version: m.version(),
            ..Facts::default()
        };
        let mut current = None;
        for inst in &m.insts {
            let w = inst.from(0).to_vec();
            if let Some(id) = current {
                f.functions
                    .entry(id)
                    .or_default()
                    .push((inst.op, w.clone()));
                if inst.op == op::FUNCTION_END {
                    current = None;
                }
                continue;
            }
            match inst.op {
                op::CAPABILITY => {
                    f.caps.insert(w[0]);
                }
                op::EXTENSION => {
                    f.exts.insert(read_string(&w).expect("a string").0);
                }
                op::MEMORY_MODEL => f.addressing = w[0],
                op::ENTRY_POINT => {
                    let (_, n) = read_string(&w[2..]).expect("a name");
                    f.entries.push((w[0], w[1], w[2 + n..].to_vec()));
                }
                op::DECORATE if w[1] == deco::BUILT_IN => {
                    f.builtins.insert(w[0], w[2]);
                }
                op::DECORATE if w[1] == deco::BLOCK => {
                    f.blocks.insert(w[0]);
                }
                op::MEMBER_DECORATE if w[2] == deco::OFFSET => {
                    f.offsets.insert((w[0], w[1]), w[3]);
                }
                op::FUNCTION => {
                    current = Some(w[1]);
                    f.functions.insert(w[1], vec![(inst.op, w.clone())]);
                }
                19..=33 => {
                    f.global_order.push(w[0]);
                    f.globals.insert(w[0], inst.words.to_vec());
                }
                op::CONSTANT | op::VARIABLE | 41 | 42 | 44 | 50 | 51 => {
                    f.global_order.push(w[1]);
                    f.globals.insert(w[1], inst.words.to_vec());
                }
                _ => {}
            }
        }
        f
    }

    /// The instructions of entry point `n`'s function.
    fn entry_function(&self, n: usize) -> &[(u16, Vec<u32>)] {
        &self.functions[&self.entries[n].1]
    }

    fn count(&self, function: &[(u16, Vec<u32>)], opcode: u16) -> usize {
        function.iter().filter(|(o, _)| *o == opcode).count()
    }

    /// The variable decorated with `builtin`, if one is.
    fn builtin_var(&self, builtin: u32) -> Option<u32> {
        self.builtins
            .iter()
            .find(|&(_, &b)| b == builtin)
            .map(|(&id, _)| id)
    }

    /// The PushConstant variables.
    fn push_vars(&self) -> Vec<u32> {
        self.globals
            .iter()
            .filter(|(_, w)| {
                (w[0] & 0xffff) as u16 == op::VARIABLE && w[3] == storage::PUSH_CONSTANT
            })
            .map(|(&id, _)| id)
            .collect()
    }

    /// The struct a pointer-typed variable points to.
    fn pointee_of_var(&self, var: u32) -> u32 {
        let ptr = self.globals[&var][1];
        self.globals[&ptr][3]
    }

    /// Where `id` is declared among the globals.
    fn position(&self, id: u32) -> usize {
        self.global_order
            .iter()
            .position(|&g| g == id)
            .unwrap_or_else(|| panic!("{id} is not a global"))
    }
}

/// Checks one instrumented module against its input: well formed, the capabilities, extensions
/// and addressing, the push-constant members at `X` and `X + 8`, the interfaces, one clock in
/// each prologue and epilogue, and every OpPhi's parents the predecessors of its block.
fn check_instrumented(input: &[u32], output: &[u32]) {
    check_well_formed(output);
    let before = Facts::of(input);
    let after = Facts::of(output);
    assert_eq!(
        output[..3],
        input[..3],
        "magic, version and generator are kept"
    );
    assert!(output[3] > input[3], "new ids raise the bound");
    for c in [
        cap::INT64,
        cap::INT64_ATOMICS,
        cap::SHADER_CLOCK_KHR,
        cap::PHYSICAL_STORAGE_BUFFER_ADDRESSES,
    ] {
        assert!(after.caps.contains(&c), "capability {c}");
    }
    for e in ["SPV_KHR_shader_clock", "SPV_KHR_physical_storage_buffer"] {
        assert!(after.exts.contains(e), "extension {e}");
    }
    assert_eq!(after.addressing, en::PHYSICAL_STORAGE_BUFFER_64);

    // The push-constant block: one, its last three members at X, X + 8 and X + 12: a pointer
    // to the PhysicalStorageBuffer Block record, the 32-bit tag and the 32-bit skip word.
    let vars = after.push_vars();
    assert_eq!(vars.len(), 1, "one push-constant variable");
    let s = after.pointee_of_var(vars[0]);
    assert!(after.blocks.contains(&s));
    let members = &after.globals[&s][2..];
    let n = members.len() as u32;
    assert!(n >= 3);
    assert_eq!(after.offsets[&(s, n - 3)], X);
    assert_eq!(after.offsets[&(s, n - 2)], X + 8);
    assert_eq!(after.offsets[&(s, n - 1)], X + 12);
    let ptr = &after.globals[&members[n as usize - 3]];
    assert_eq!(ptr[2], storage::PHYSICAL_STORAGE_BUFFER);
    assert!(after.blocks.contains(&ptr[3]));
    assert_eq!(after.globals[&ptr[3]].len(), 2 + 3, "start, end, tag");
    for (m, what) in [(n - 2, "tag"), (n - 1, "skip word")] {
        assert_eq!(
            after.globals[&members[m as usize]][2..],
            [32, 0],
            "the {what} is a 32-bit unsigned integer"
        );
    }
    if let Some(&old) = before.push_vars().first() {
        let old_s = before.pointee_of_var(old);
        assert_eq!(old_s, s, "the program's struct is extended, not replaced");
        assert_eq!(before.globals[&s].len() + 3, after.globals[&s].len());
        for m in 0..n - 3 {
            assert_eq!(before.offsets[&(s, m)], after.offsets[&(s, m)]);
        }
    }

    // The built-ins, reused where the program had them, and in every interface.
    let lii = after
        .builtin_var(deco::BUILT_IN_LOCAL_INVOCATION_INDEX)
        .expect("a LocalInvocationIndex variable");
    let nwg = after
        .builtin_var(deco::BUILT_IN_WORKGROUP_ID)
        .expect("a WorkgroupId variable");
    if let Some(old) = before.builtin_var(deco::BUILT_IN_LOCAL_INVOCATION_INDEX) {
        assert_eq!(old, lii);
    }
    if let Some(old) = before.builtin_var(deco::BUILT_IN_WORKGROUP_ID) {
        assert_eq!(old, nwg);
    }
    let mut functions = BTreeSet::new();
    for (n, (model, function, interface)) in after.entries.iter().enumerate() {
        assert_eq!(*model, en::GL_COMPUTE);
        assert!(interface.contains(&lii) && interface.contains(&nwg));
        if after.version >= 0x0001_0400 {
            assert!(interface.contains(&vars[0]));
        }
        let unique: BTreeSet<_> = interface.iter().collect();
        assert_eq!(unique.len(), interface.len(), "no interface id twice");
        let old = &before.entries[n];
        assert_eq!(
            &interface[..old.2.len()],
            &old.2[..],
            "the interface is appended to"
        );
        functions.insert(*function);
    }

    // The scalar types are declared once and before the push-constant struct.
    for (opcode, operands) in [(21, vec![32, 0]), (21, vec![64, 0]), (20, vec![])] {
        let found: Vec<_> = after
            .globals
            .iter()
            .filter(|(_, w)| (w[0] & 0xffff) as u16 == opcode && w[2..] == operands[..])
            .map(|(&id, _)| id)
            .collect();
        assert_eq!(
            found.len(),
            1,
            "one declaration of opcode {opcode} {operands:?}"
        );
        assert!(after.position(found[0]) < after.position(s));
    }

    // One clock per prologue and per original return; the returns are in blocks of their own.
    for &f in &functions {
        let old = &before.functions[&f];
        let new = &after.functions[&f];
        let returns = before.count(old, op::RETURN);
        assert_eq!(
            after.count(new, op::READ_CLOCK_KHR),
            before.count(old, op::READ_CLOCK_KHR) + 1 + returns
        );
        assert_eq!(after.count(new, op::RETURN), returns);
        // The start, end and tag stored once, and the end raised at each return.
        assert_eq!(after.count(new, op::ATOMIC_STORE), 3);
        assert_eq!(after.count(new, op::ATOMIC_UMAX), returns);
        for (i, (o, _)) in new.iter().enumerate() {
            if *o == op::RETURN {
                assert_eq!(new[i - 1].0, op::LABEL, "a return alone in its block");
            }
        }
        check_phis(new);
        check_entry_block(new);
    }
    for (f, instructions) in &before.functions {
        if !functions.contains(f) {
            assert_eq!(
                &after.functions[f], instructions,
                "other functions are unchanged"
            );
        }
    }
}

/// Every OpPhi names exactly its block's predecessors.
fn check_phis(function: &[(u16, Vec<u32>)]) {
    let mut preds: BTreeMap<u32, BTreeSet<u32>> = BTreeMap::new();
    let mut block = 0;
    for (o, w) in function {
        match *o {
            op::LABEL => block = w[0],
            op::BRANCH => {
                preds.entry(w[0]).or_default().insert(block);
            }
            op::BRANCH_CONDITIONAL => {
                for &t in &w[1..3] {
                    preds.entry(t).or_default().insert(block);
                }
            }
            251 => {
                preds.entry(w[1]).or_default().insert(block);
                for pair in w[2..].chunks(2) {
                    preds.entry(pair[1]).or_default().insert(block);
                }
            }
            _ => {}
        }
    }
    for (o, w) in function {
        match *o {
            op::LABEL => block = w[0],
            245 => {
                let parents: BTreeSet<u32> = w[2..].chunks(2).map(|p| p[1]).collect();
                assert_eq!(
                    parents,
                    preds.get(&block).cloned().unwrap_or_default(),
                    "an OpPhi of block {block} names other parents than its predecessors"
                );
            }
            _ => {}
        }
    }
}

/// The entry block: its label, the function's variables, then the test of the local
/// invocation index and of the skip word, of the workgroup id, and the branch around the
/// prologue.
fn check_entry_block(function: &[(u16, Vec<u32>)]) {
    let body: Vec<u16> = function
        .iter()
        .map(|(o, _)| *o)
        .skip_while(|&o| o != op::LABEL)
        .skip(1)
        .skip_while(|&o| o == op::VARIABLE)
        .take(16)
        .collect();
    assert_eq!(
        body,
        [
            op::LOAD,
            op::IEQUAL,
            op::ACCESS_CHAIN,
            op::LOAD,
            op::IEQUAL,
            op::LOGICAL_AND,
            op::LOAD,
            op::COMPOSITE_EXTRACT,
            op::COMPOSITE_EXTRACT,
            op::COMPOSITE_EXTRACT,
            op::BITWISE_OR,
            op::BITWISE_OR,
            op::IEQUAL,
            op::LOGICAL_AND,
            op::SELECTION_MERGE,
            op::BRANCH_CONDITIONAL
        ]
    );
}

#[test]
fn every_fixture_is_instrumented_well_formed() {
    for (name, bytes) in FIXTURES {
        let input = words_of(bytes);
        check_well_formed(&input);
        let output = instrument(&input, X).unwrap_or_else(|r| panic!("{name}: {}", r.reason()));
        check_instrumented(&input, &output);
    }
}

#[test]
fn instrumenting_is_deterministic() {
    for (_, bytes) in FIXTURES {
        let input = words_of(bytes);
        assert_eq!(instrument(&input, X), instrument(&input, X));
    }
}

#[test]
fn the_record_layout_is_what_the_shader_declares() {
    assert_eq!(super::RECORD_BYTES, 24);
    assert_eq!(super::PUSH_BYTES, 16);
    let output = instrument(&fixture("early_returns"), X).expect("instruments");
    let f = Facts::of(&output);
    let s = f.pointee_of_var(f.push_vars()[0]);
    let members = &f.globals[&s][2..];
    let rec = f.globals[&members[members.len() - 3]][3];
    assert_eq!(
        [0, 1, 2].map(|m| f.offsets[&(rec, m)]),
        [0, 8, 16],
        "start, end, tag"
    );
}

#[test]
fn early_returns_each_get_an_epilogue() {
    let input = fixture("early_returns");
    let before = Facts::of(&input);
    // glslang without optimisation keeps the three returns: two early, one at the end.
    assert_eq!(before.count(before.entry_function(0), op::RETURN), 3);
    let after = Facts::of(&instrument(&input, X).expect("instruments"));
    assert_eq!(after.count(after.entry_function(0), op::READ_CLOCK_KHR), 4);
}

#[test]
fn types_declared_after_the_push_constants_are_moved_before_them() {
    let input = fixture("late_types");
    let before = Facts::of(&input);
    let uint = before
        .globals
        .iter()
        .find(|(_, w)| (w[0] & 0xffff) as u16 == op::TYPE_INT && w[2..] == [32, 0])
        .map(|(&id, _)| id)
        .expect("the fixture declares uint");
    let s = before.pointee_of_var(before.push_vars()[0]);
    assert!(
        before.position(uint) > before.position(s),
        "the fixture declares uint late"
    );
    let after = Facts::of(&instrument(&input, X).expect("instruments"));
    assert!(
        after.position(uint) < after.position(s),
        "the same id, moved up"
    );
}

#[test]
fn a_module_without_push_constants_gets_a_block() {
    let input = fixture("no_push");
    assert!(Facts::of(&input).push_vars().is_empty());
    let after = Facts::of(&instrument(&input, X).expect("instruments"));
    let s = after.pointee_of_var(after.push_vars()[0]);
    assert_eq!(after.globals[&s].len(), 5, "three members");
    assert_eq!(
        [0, 1, 2].map(|m| after.offsets[&(s, m)]),
        [X, X + 8, X + 12]
    );
}

#[test]
fn refusals() {
    let refusal = |words: &[u32]| instrument(words, X).expect_err("refused");
    assert_eq!(
        refusal(&words_of(include_bytes!("testdata/vertex.spv"))),
        Refusal::NotCompute
    );
    assert_eq!(refusal(&[]), Refusal::NotSpirv);
    assert_eq!(refusal(&[0xdead_beef; 16]), Refusal::NotSpirv);
    let garbage: Vec<u32> = (0..64u32).map(|i| i.wrapping_mul(0x9e37_79b9)).collect();
    assert_eq!(refusal(&garbage), Refusal::NotSpirv);

    let good = fixture("early_returns");
    assert_eq!(refusal(&good[..4]), Refusal::NotSpirv, "a header cut short");
    assert_eq!(
        refusal(&good[..good.len() - 1]),
        Refusal::NotSpirv,
        "without the last OpFunctionEnd"
    );
    // Cut inside the first instruction of more than two words.
    let m = Module::parse(&good).expect("parses");
    let mut at = 5;
    for inst in &m.insts {
        if inst.words.len() > 2 {
            break;
        }
        at += inst.words.len();
    }
    assert_eq!(
        refusal(&good[..at + 2]),
        Refusal::NotSpirv,
        "a truncated instruction"
    );

    let mut v = good.clone();
    v[1] = 0x0002_0000;
    assert_eq!(refusal(&v), Refusal::Version(0x0002_0000));
    v[1] = 0x0001_0700;
    assert_eq!(refusal(&v), Refusal::Version(0x0001_0700));

    assert_eq!(
        refusal(&patched(&good, |o, w| (o == op::MEMORY_MODEL)
            .then(|| { vec![Some((op::MEMORY_MODEL, vec![2, w[1]]))] }))),
        Refusal::Addressing,
        "Physical64 addressing"
    );

    // A second PushConstant variable of the same type.
    let f = Facts::of(&good);
    let pc = f.push_vars()[0];
    let bound = good[3];
    let mut two = patched(&good, |o, w| {
        (o == op::VARIABLE && w[1] == pc).then(|| {
            vec![
                Some((o, w.to_vec())),
                Some((o, vec![w[0], bound, storage::PUSH_CONSTANT])),
            ]
        })
    });
    two[3] = bound + 1;
    assert_eq!(refusal(&two), Refusal::PushConstants);

    // The push-constant struct without its Block decoration.
    let s = f.pointee_of_var(pc);
    let unblocked = patched(&good, |o, w| {
        (o == op::DECORATE && w == [s, deco::BLOCK]).then(Vec::new)
    });
    assert_eq!(refusal(&unblocked), Refusal::PushConstants);

    assert!(matches!(instrument(&good, 4), Err(Refusal::Unsupported(_))));
}

/// `words` with each instruction for which `f(opcode, operands)` gives replacements replaced by
/// them (none removes it).
fn patched(
    words: &[u32],
    f: impl Fn(u16, &[u32]) -> Option<Vec<Option<(u16, Vec<u32>)>>>,
) -> Vec<u32> {
    let m = Module::parse(words).expect("parses");
    let mut w = Writer::default();
    w.words.extend_from_slice(&m.header);
    for inst in &m.insts {
        match f(inst.op, inst.from(0)) {
            Some(replacements) => {
                for (o, operands) in replacements.into_iter().flatten() {
                    w.inst(o, &operands);
                }
            }
            None => w.copy(inst),
        }
    }
    w.words
}

/// Knobs of [`hand_made`].
#[derive(Clone, Copy, Default)]
struct HandMade {
    /// The LocalInvocationIndex variable is a signed int.
    signed_index: bool,
    /// A third function calls the entry point.
    call_entry: bool,
    /// A second entry point names the same function.
    second_entry: bool,
    /// The Kernel capability.
    kernel: bool,
}

/// A SPIR-V 1.0 compute module assembled by hand: `main` reads LocalInvocationIndex and calls
/// `helper`, which returns.
fn hand_made(k: HandMade) -> Vec<u32> {
    const VOID: u32 = 1;
    const FN: u32 = 2;
    const INT: u32 = 3;
    const PINT: u32 = 4;
    const LII: u32 = 5;
    const HELPER: u32 = 6;
    const MAIN: u32 = 8;
    let mut w = Writer::default();
    w.words
        .extend_from_slice(&[super::words::MAGIC, 0x0001_0000, 0, 15, 0]);
    w.inst(op::CAPABILITY, &[1]);
    if k.kernel {
        w.inst(op::CAPABILITY, &[cap::KERNEL]);
    }
    w.inst(op::MEMORY_MODEL, &[en::LOGICAL, 1]);
    w.inst2(
        op::ENTRY_POINT,
        &[en::GL_COMPUTE, MAIN],
        &[string_words("main"), vec![LII]].concat(),
    );
    if k.second_entry {
        w.inst2(
            op::ENTRY_POINT,
            &[en::GL_COMPUTE, MAIN],
            &[string_words("second"), vec![LII]].concat(),
        );
    }
    w.inst(op::EXECUTION_MODE, &[MAIN, 17, 1, 1, 1]);
    w.inst(
        op::DECORATE,
        &[LII, deco::BUILT_IN, deco::BUILT_IN_LOCAL_INVOCATION_INDEX],
    );
    w.inst(19, &[VOID]);
    w.inst(33, &[FN, VOID]);
    w.inst(op::TYPE_INT, &[INT, 32, u32::from(k.signed_index)]);
    w.inst(op::TYPE_POINTER, &[PINT, storage::INPUT, INT]);
    w.inst(op::VARIABLE, &[PINT, LII, storage::INPUT]);
    w.inst(op::FUNCTION, &[VOID, HELPER, 0, FN]);
    w.inst(op::LABEL, &[7]);
    w.inst(op::RETURN, &[]);
    w.inst(op::FUNCTION_END, &[]);
    w.inst(op::FUNCTION, &[VOID, MAIN, 0, FN]);
    w.inst(op::LABEL, &[9]);
    w.inst(op::LOAD, &[INT, 10, LII]);
    w.inst(op::FUNCTION_CALL, &[VOID, 11, HELPER]);
    w.inst(op::RETURN, &[]);
    w.inst(op::FUNCTION_END, &[]);
    if k.call_entry {
        w.inst(op::FUNCTION, &[VOID, 12, 0, FN]);
        w.inst(op::LABEL, &[13]);
        w.inst(op::FUNCTION_CALL, &[VOID, 14, MAIN]);
        w.inst(op::RETURN, &[]);
        w.inst(op::FUNCTION_END, &[]);
    }
    w.words
}

#[test]
fn hand_made_modules() {
    let plain = hand_made(HandMade::default());
    check_well_formed(&plain);
    let out = instrument(&plain, X).expect("instruments");
    check_instrumented(&plain, &out);

    let two = hand_made(HandMade {
        second_entry: true,
        ..HandMade::default()
    });
    let out = instrument(&two, X).expect("instruments");
    check_instrumented(&two, &out);
    let f = Facts::of(&out);
    assert_eq!(f.entries.len(), 2);
    assert_eq!(
        f.count(f.entry_function(0), op::READ_CLOCK_KHR),
        2,
        "one function instrumented once"
    );

    let refused = |k| instrument(&hand_made(k), X).expect_err("refused");
    assert!(matches!(
        refused(HandMade {
            signed_index: true,
            ..HandMade::default()
        }),
        Refusal::Unsupported(_)
    ));
    assert!(matches!(
        refused(HandMade {
            call_entry: true,
            ..HandMade::default()
        }),
        Refusal::Unsupported(_)
    ));
    assert!(matches!(
        refused(HandMade {
            kernel: true,
            ..HandMade::default()
        }),
        Refusal::Unsupported(_)
    ));
}

#[test]
fn reasons_are_short_sentences() {
    for r in [
        Refusal::NotSpirv,
        Refusal::Version(0x0002_0000),
        Refusal::NotCompute,
        Refusal::Addressing,
        Refusal::PushConstants,
        Refusal::Unsupported("decoration groups"),
    ] {
        let s = r.reason();
        assert!(!s.is_empty() && s.len() < 80 && !s.ends_with('.'), "{s}");
    }
    assert_eq!(Refusal::NotCompute.reason(), "not a compute module");
    assert_eq!(
        Refusal::Version(0x0002_0000).reason(),
        "SPIR-V version 2.0 (word 0x00020000) is not 1.0 to 1.6"
    );
}

#[test]
fn a_module_of_the_vulkan_memory_model_is_told_apart() {
    let mut words = fixture("llama_like");
    assert!(!super::uses_vulkan_memory_model(&words), "GLSL450");
    // OpMemoryModel (opcode 14, two operands) turned to the Vulkan memory model (3).
    let at = (5..words.len())
        .find(|&i| words[i] == (3 << 16 | 14))
        .expect("an OpMemoryModel");
    words[at + 2] = 3;
    assert!(super::uses_vulkan_memory_model(&words));
    assert!(!super::uses_vulkan_memory_model(&[1, 2, 3]), "not SPIR-V");
}
