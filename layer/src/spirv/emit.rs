//! Writes the instrumented module from the input and its [`Analysis`].
//!
//! Nothing here can fail: [`super::analysis::analyze`] has refused every module this could not
//! write validly, and checked every instruction that grows against the 16-bit word count.

use std::collections::BTreeMap;

use super::analysis::{Analysis, Existing};
use super::words::{Inst, Module, Writer, cap, deco, en, op, storage, string_words};

/// Fresh ids, from the input's bound up.
#[derive(Debug)]
struct Ids {
    next: u32,
}

impl Ids {
    fn fresh(&mut self) -> u32 {
        let id = self.next;
        self.next += 1;
        id
    }

    /// The existing declaration's id, or a fresh one.
    fn reuse(&mut self, existing: Option<Existing>) -> u32 {
        match existing {
            Some(e) => e.id,
            None => self.fresh(),
        }
    }

    /// The program's built-in variable, or a fresh id for a new one.
    fn reuse_var(&mut self, existing: Option<u32>) -> u32 {
        existing.unwrap_or_else(|| self.fresh())
    }
}

/// The ids of every global the prologues and epilogues use.
#[derive(Debug)]
struct Globals {
    uint: u32,
    ulong: u32,
    boolean: u32,
    uvec3: u32,
    rec: u32,
    /// PhysicalStorageBuffer pointers to the record, a u64 and a u32.
    p_rec: u32,
    p_ulong: u32,
    p_uint: u32,
    /// PushConstant pointers to the members holding the record's pointer and its tag.
    pc_p_rec: u32,
    pc_uint: u32,
    /// The push-constant variable, its struct, and the index of the record's member in the
    /// struct (the tag's and the skip word's are the next two).
    push_var: u32,
    push_struct: u32,
    rec_member: u32,
    local_index: u32,
    group_id: u32,
    /// `OpConstant %uint` ids: 0, 1, 2, the Device scope, the memory semantics Relaxed, and the
    /// record's, tag's and skip word's member indices in the push-constant struct.
    zero: u32,
    one: u32,
    two: u32,
    device: u32,
    relaxed: u32,
    rec_index: u32,
    tag_index: u32,
    skip_index: u32,
    /// Every `OpConstant %uint` to declare, by value (the fields above share ids by value).
    uints: BTreeMap<u32, u32>,
    ulong_zero: u32,
}

/// Writes `m` instrumented, its record pointer at `push_offset` in the push constants.
pub(super) fn emit(m: &Module<'_>, a: &Analysis, push_offset: u32) -> Vec<u32> {
    let mut ids = Ids { next: m.bound() };
    let uint = ids.reuse(a.uint);
    let ulong = ids.reuse(a.ulong);
    let boolean = ids.reuse(a.boolean);
    let uvec3 = ids.reuse(a.uvec3);
    let [rec, p_rec, p_ulong, p_uint, pc_p_rec, pc_uint] = [(); 6].map(|()| ids.fresh());
    // Without a push-constant block of the program's, a new one: its variable, its struct and
    // (the Some) its pointer type.
    let (push_var, push_struct, new_push) = match a.push {
        Some(p) => (p.var, p.strukt.id, None),
        None => (ids.fresh(), ids.fresh(), Some(ids.fresh())),
    };
    let local_index = ids.reuse_var(a.local_index);
    let group_id = ids.reuse_var(a.group_id);
    let new_input_ptrs = (
        a.local_index.is_none().then(|| ids.fresh()),
        a.group_id.is_none().then(|| ids.fresh()),
    );
    let rec_member = a.push.map_or(0, |p| p.members);
    let mut uints = BTreeMap::new();
    let [
        zero,
        one,
        two,
        device,
        relaxed,
        rec_index,
        tag_index,
        skip_index,
    ] = [
        0,
        1,
        2,
        en::SCOPE_DEVICE,
        en::RELAXED,
        rec_member,
        rec_member + 1,
        rec_member + 2,
    ]
    .map(|value| *uints.entry(value).or_insert_with(|| ids.fresh()));
    let g = Globals {
        uint,
        ulong,
        boolean,
        uvec3,
        rec,
        p_rec,
        p_ulong,
        p_uint,
        pc_p_rec,
        pc_uint,
        push_var,
        push_struct,
        rec_member,
        local_index,
        group_id,
        zero,
        one,
        two,
        device,
        relaxed,
        rec_index,
        tag_index,
        skip_index,
        uints,
        ulong_zero: ids.fresh(),
    };

    let mut w = Writer::default();
    w.words.extend_from_slice(&m.header);
    let l = a.layout;
    for i in 0..=l.globals {
        if i == l.caps_end {
            capabilities(&mut w, a);
        }
        if i == l.exts_end {
            for ext in ["SPV_KHR_shader_clock", "SPV_KHR_physical_storage_buffer"] {
                if !a.exts.contains(ext) {
                    w.inst(op::EXTENSION, &string_words(ext));
                }
            }
        }
        if i == l.names_at {
            names(&mut w, &g, a);
        }
        if i == l.globals {
            annotations(&mut w, &g, a, push_offset);
            break;
        }
        let inst = &m.insts[i];
        if i == a.memory_model.0 {
            w.inst(
                op::MEMORY_MODEL,
                &[en::PHYSICAL_STORAGE_BUFFER_64, a.memory_model.1],
            );
        } else if let Some(ep) = a.entry_points.iter().find(|e| e.index == i) {
            let mut added = vec![g.local_index, g.group_id];
            if m.version() >= 0x0001_0400 {
                added.push(g.push_var);
            }
            added.retain(|id| !ep.interface.contains(id));
            w.inst2(op::ENTRY_POINT, inst.from(0), &added);
        } else {
            w.copy(inst);
        }
    }

    declare(&mut w, &g, a, m, new_push, new_input_ptrs);
    let moved = [a.uint, a.ulong, a.boolean, a.uvec3].map(|e| e.map(|e| e.index));
    for i in l.globals..l.functions {
        let inst = &m.insts[i];
        if moved.contains(&Some(i)) {
            continue;
        }
        if a.push.is_some_and(|p| p.strukt.index == i) {
            w.inst2(op::TYPE_STRUCT, inst.from(0), &[g.p_rec, g.uint, g.uint]);
        } else {
            w.copy(inst);
        }
    }

    let mut at = l.functions;
    for range in &a.entry_functions {
        w.copy_all(&m.insts[at..range.start]);
        instrument_function(&mut w, &mut ids, &g, a, &m.insts[range.clone()]);
        at = range.end;
    }
    w.copy_all(&m.insts[at..]);

    w.words[3] = ids.next;
    w.words
}

fn capabilities(w: &mut Writer, a: &Analysis) {
    let mut wanted = vec![
        cap::INT64,
        cap::INT64_ATOMICS,
        cap::SHADER_CLOCK_KHR,
        cap::PHYSICAL_STORAGE_BUFFER_ADDRESSES,
    ];
    // Device scope under the Vulkan memory model needs its own capability.
    if a.memory_model.1 == en::VULKAN_MEMORY_MODEL {
        wanted.push(cap::VULKAN_MEMORY_MODEL_DEVICE_SCOPE);
    }
    for c in wanted {
        if !a.caps.contains(&c) {
            w.inst(op::CAPABILITY, &[c]);
        }
    }
}

/// Debug names of the new types, members and variables, so that a disassembly shows them.
fn names(w: &mut Writer, g: &Globals, a: &Analysis) {
    let name = |w: &mut Writer, id: u32, s: &str| w.inst2(op::NAME, &[id], &string_words(s));
    let member = |w: &mut Writer, id: u32, i: u32, s: &str| {
        w.inst2(op::MEMBER_NAME, &[id, i], &string_words(s));
    };
    name(w, g.rec, "DecodescopeRecord");
    member(w, g.rec, 0, "start");
    member(w, g.rec, 1, "end");
    member(w, g.rec, 2, "tag");
    if a.push.is_none() {
        name(w, g.push_struct, "DecodescopePush");
        name(w, g.push_var, "decodescope_push");
    }
    member(w, g.push_struct, g.rec_member, "decodescope_record");
    member(w, g.push_struct, g.rec_member + 1, "decodescope_tag");
    member(w, g.push_struct, g.rec_member + 2, "decodescope_skip");
    if a.local_index.is_none() {
        name(w, g.local_index, "gl_LocalInvocationIndex");
    }
    if a.group_id.is_none() {
        name(w, g.group_id, "gl_WorkGroupID");
    }
}

fn annotations(w: &mut Writer, g: &Globals, a: &Analysis, push_offset: u32) {
    let offset = |w: &mut Writer, s: u32, i: u32, bytes: u32| {
        w.inst(op::MEMBER_DECORATE, &[s, i, deco::OFFSET, bytes]);
    };
    w.inst(op::DECORATE, &[g.rec, deco::BLOCK]);
    offset(w, g.rec, 0, 0);
    offset(w, g.rec, 1, 8);
    offset(w, g.rec, 2, 16);
    if a.push.is_none() {
        w.inst(op::DECORATE, &[g.push_struct, deco::BLOCK]);
    }
    offset(w, g.push_struct, g.rec_member, push_offset);
    offset(w, g.push_struct, g.rec_member + 1, push_offset + 8);
    offset(w, g.push_struct, g.rec_member + 2, push_offset + 12);
    if a.local_index.is_none() {
        w.inst(
            op::DECORATE,
            &[
                g.local_index,
                deco::BUILT_IN,
                deco::BUILT_IN_LOCAL_INVOCATION_INDEX,
            ],
        );
    }
    if a.group_id.is_none() {
        w.inst(
            op::DECORATE,
            &[g.group_id, deco::BUILT_IN, deco::BUILT_IN_WORKGROUP_ID],
        );
    }
}

/// The declarations at the start of the types section: the program's reused scalar and vector
/// types moved up, then the new types, variables and constants.
fn declare(
    w: &mut Writer,
    g: &Globals,
    a: &Analysis,
    m: &Module<'_>,
    new_push: Option<u32>,
    new_input_ptrs: (Option<u32>, Option<u32>),
) {
    let mut moved_or_new =
        |existing: Option<Existing>, opcode: u16, operands: &[u32]| match existing {
            Some(e) => w.copy(&m.insts[e.index]),
            None => w.inst(opcode, operands),
        };
    moved_or_new(a.uint, op::TYPE_INT, &[g.uint, 32, 0]);
    moved_or_new(a.ulong, op::TYPE_INT, &[g.ulong, 64, 0]);
    moved_or_new(a.boolean, op::TYPE_BOOL, &[g.boolean]);
    moved_or_new(a.uvec3, op::TYPE_VECTOR, &[g.uvec3, g.uint, 3]);

    w.inst(op::TYPE_STRUCT, &[g.rec, g.ulong, g.ulong, g.uint]);
    let psb = storage::PHYSICAL_STORAGE_BUFFER;
    w.inst(op::TYPE_POINTER, &[g.p_rec, psb, g.rec]);
    w.inst(op::TYPE_POINTER, &[g.p_ulong, psb, g.ulong]);
    w.inst(op::TYPE_POINTER, &[g.p_uint, psb, g.uint]);
    let pc = storage::PUSH_CONSTANT;
    w.inst(op::TYPE_POINTER, &[g.pc_p_rec, pc, g.p_rec]);
    w.inst(op::TYPE_POINTER, &[g.pc_uint, pc, g.uint]);
    if let Some(pointer) = new_push {
        w.inst(op::TYPE_STRUCT, &[g.push_struct, g.p_rec, g.uint, g.uint]);
        w.inst(op::TYPE_POINTER, &[pointer, pc, g.push_struct]);
        w.inst(op::VARIABLE, &[pointer, g.push_var, pc]);
    }
    if let Some(pointer) = new_input_ptrs.0 {
        w.inst(op::TYPE_POINTER, &[pointer, storage::INPUT, g.uint]);
        w.inst(op::VARIABLE, &[pointer, g.local_index, storage::INPUT]);
    }
    if let Some(pointer) = new_input_ptrs.1 {
        w.inst(op::TYPE_POINTER, &[pointer, storage::INPUT, g.uvec3]);
        w.inst(op::VARIABLE, &[pointer, g.group_id, storage::INPUT]);
    }
    for (&value, &id) in &g.uints {
        w.inst(op::CONSTANT, &[g.uint, id, value]);
    }
    w.inst(op::CONSTANT, &[g.ulong, g.ulong_zero, 0, 0]);
}

/// Copies one entry point function with the prologue after its first block's variables and an
/// epilogue before each OpReturn.
fn instrument_function(
    w: &mut Writer,
    ids: &mut Ids,
    g: &Globals,
    a: &Analysis,
    insts: &[Inst<'_>],
) {
    let is0 = ids.fresh();
    // The first block's label (its remainder keeps it) while its leading variables are copied.
    let mut leading: Option<u32> = None;
    let mut seen_label = false;
    for inst in insts {
        if !seen_label && inst.op == op::LABEL {
            seen_label = true;
            leading = inst.word(0);
            w.inst(op::LABEL, &[ids.fresh()]);
            continue;
        }
        if let Some(cont) = leading {
            let stays = match inst.op {
                op::VARIABLE | op::LINE | op::NO_LINE => true,
                op::EXT_INST => inst.word(2).is_some_and(|s| a.non_semantic.contains(&s)),
                _ => false,
            };
            if stays {
                w.copy(inst);
                continue;
            }
            prologue(w, ids, g, is0, cont);
            leading = None;
        }
        if inst.op == op::RETURN {
            epilogue(w, ids, g, is0);
        } else {
            w.copy(inst);
        }
    }
}

/// Loads the record's PhysicalStorageBuffer pointer from the push constants.
fn load_pointer(w: &mut Writer, ids: &mut Ids, g: &Globals) -> u32 {
    let chain = ids.fresh();
    w.inst(
        op::ACCESS_CHAIN,
        &[g.pc_p_rec, chain, g.push_var, g.rec_index],
    );
    let loaded = ids.fresh();
    w.inst(op::LOAD, &[g.p_rec, loaded, chain]);
    loaded
}

/// A pointer of type `ty` to the member (its index the constant `index`) of the struct that
/// `base` points to.
fn member(w: &mut Writer, ids: &mut Ids, ty: u32, base: u32, index: u32) -> u32 {
    let id = ids.fresh();
    w.inst(op::ACCESS_CHAIN, &[ty, id, base, index]);
    id
}

/// Ends the entry block (computing `is0`, true in each workgroup's first invocation unless the
/// host pushed a nonzero skip word): the first invocation of workgroup (0, 0, 0), the first to
/// start, stores the clock as the dispatch's start, zeroes its end and stores the tag the host
/// pushed with the record. Then all go on at the original label `cont`.
fn prologue(w: &mut Writer, ids: &mut Ids, g: &Globals, is0: u32, cont: u32) {
    let device = g.device;
    let relaxed = g.relaxed;
    let index = ids.fresh();
    w.inst(op::LOAD, &[g.uint, index, g.local_index]);
    let first_invocation = ids.fresh();
    w.inst(op::IEQUAL, &[g.boolean, first_invocation, index, g.zero]);
    let skip_chain = ids.fresh();
    w.inst(
        op::ACCESS_CHAIN,
        &[g.pc_uint, skip_chain, g.push_var, g.skip_index],
    );
    let skip = ids.fresh();
    w.inst(op::LOAD, &[g.uint, skip, skip_chain]);
    let timed = ids.fresh();
    w.inst(op::IEQUAL, &[g.boolean, timed, skip, g.zero]);
    w.inst(op::LOGICAL_AND, &[g.boolean, is0, first_invocation, timed]);
    let group = ids.fresh();
    w.inst(op::LOAD, &[g.uvec3, group, g.group_id]);
    let xyz = [0, 1, 2].map(|i| {
        let id = ids.fresh();
        w.inst(op::COMPOSITE_EXTRACT, &[g.uint, id, group, i]);
        id
    });
    let xy = ids.fresh();
    w.inst(op::BITWISE_OR, &[g.uint, xy, xyz[0], xyz[1]]);
    let any = ids.fresh();
    w.inst(op::BITWISE_OR, &[g.uint, any, xy, xyz[2]]);
    let first_group = ids.fresh();
    w.inst(op::IEQUAL, &[g.boolean, first_group, any, g.zero]);
    let first = ids.fresh();
    w.inst(op::LOGICAL_AND, &[g.boolean, first, is0, first_group]);
    let then = ids.fresh();
    w.inst(op::SELECTION_MERGE, &[cont, en::NONE]);
    w.inst(op::BRANCH_CONDITIONAL, &[first, then, cont]);

    w.inst(op::LABEL, &[then]);
    let clock = ids.fresh();
    w.inst(op::READ_CLOCK_KHR, &[g.ulong, clock, device]);
    let rec = load_pointer(w, ids, g);
    let start = member(w, ids, g.p_ulong, rec, g.zero);
    w.inst(op::ATOMIC_STORE, &[start, device, relaxed, clock]);
    let end = member(w, ids, g.p_ulong, rec, g.one);
    w.inst(op::ATOMIC_STORE, &[end, device, relaxed, g.ulong_zero]);
    let tag_chain = ids.fresh();
    w.inst(
        op::ACCESS_CHAIN,
        &[g.pc_uint, tag_chain, g.push_var, g.tag_index],
    );
    let tag = ids.fresh();
    w.inst(op::LOAD, &[g.uint, tag, tag_chain]);
    let tag_field = member(w, ids, g.p_uint, rec, g.two);
    w.inst(op::ATOMIC_STORE, &[tag_field, device, relaxed, tag]);
    w.inst(op::BRANCH, &[cont]);
    w.inst(op::LABEL, &[cont]);
}

/// Replaces an OpReturn: the first invocation of each workgroup takes the maximum of the
/// record's end and the clock (an atomic whose result nothing waits for).
fn epilogue(w: &mut Writer, ids: &mut Ids, g: &Globals, is0: u32) {
    let device = g.device;
    let ret = ids.fresh();
    let epi = ids.fresh();
    w.inst(op::SELECTION_MERGE, &[ret, en::NONE]);
    w.inst(op::BRANCH_CONDITIONAL, &[is0, epi, ret]);

    w.inst(op::LABEL, &[epi]);
    let clock = ids.fresh();
    w.inst(op::READ_CLOCK_KHR, &[g.ulong, clock, device]);
    let rec = load_pointer(w, ids, g);
    let end = member(w, ids, g.p_ulong, rec, g.one);
    let old = ids.fresh();
    w.inst(
        op::ATOMIC_UMAX,
        &[g.ulong, old, end, device, g.relaxed, clock],
    );
    w.inst(op::BRANCH, &[ret]);
    w.inst(op::LABEL, &[ret]);
    w.inst(op::RETURN, &[]);
}
