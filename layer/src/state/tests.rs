use super::*;

fn state(level: Level) -> DeviceState {
    let mut s = DeviceState::new(0, level, 0);
    s.timestamp_families = vec![true];
    s.transfer_families = vec![false];
    s.add_pool(1, 0);
    s.add_queue(9, 0, 0);
    if level != Level::Off {
        s.timing = true;
        s.slots.grow();
    }
    s
}

#[test]
fn commands_count_at_every_submit() {
    let mut s = state(Level::Off);
    s.allocate_cmd(7, 1, false);
    s.begin_cmd(7, 0, false);
    s.bind_pipeline(7, 100);
    s.record(7, Cmd::Dispatch);
    s.record(7, Cmd::Barrier(2));
    s.end_cmd(7, 5);
    s.submit(9, &[vec![7]], Some(3), &[], None);
    s.submit(9, &[vec![7]], Some(3), &[], None);
    let c = s.group.counters;
    assert_eq!(c.command_buffers_begun, 1);
    assert_eq!(c.submits_compute, 2);
    assert_eq!(c.dispatches, 2);
    assert_eq!(c.barrier_calls, 2);
    assert_eq!(c.memory_barriers, 4);
    assert_eq!(c.pipeline_binds, 2);
    assert_eq!(s.total, c);
    assert_eq!(s.group.queues, vec![RawQueueWork(0, 2, 2, 2)]);
}

#[test]
fn a_pool_reset_touches_the_command_buffers_begun_since_the_last_one() {
    let mut s = state(Level::Off);
    for k in [7, 8, 9] {
        s.allocate_cmd(k, 1, false);
    }
    s.add_pool(2, 0);
    s.allocate_cmd(20, 2, false);
    s.begin_cmd(8, 0, false);
    s.begin_cmd(8, 1, false);
    s.begin_cmd(7, 2, false);
    s.begin_cmd(20, 3, false);
    assert_eq!(s.begun_in_pool(1), vec![7, 8]);
    assert_eq!(s.begun_in_pool(1), Vec::<u64>::new());
    s.begin_cmd(9, 4, false);
    s.free_cmd(9);
    s.begin_cmd(8, 5, false);
    assert_eq!(s.begun_in_pool(1), vec![8]);
    assert_eq!(s.begun_in_pool(2), vec![20]);
}

#[test]
fn signatures_ignore_host_side_counts() {
    let work = |s: &mut DeviceState, begin: bool| {
        if begin {
            s.begin_cmd(7, 0, false);
            s.bind_pipeline(7, 100);
            s.record(7, Cmd::Dispatch);
            s.end_cmd(7, 1);
        }
        s.submit(9, &[vec![7]], None, &[], None);
        let sig = s.group.signature;
        s.close_group("fence", 2);
        sig
    };
    let mut s = state(Level::Off);
    s.allocate_cmd(7, 1, false);
    let first = work(&mut s, true);
    let replay = work(&mut s, false);
    assert_eq!(first, replay);
}

#[test]
fn labels_then_names_then_stable_pipeline_labels() {
    let mut s = state(Level::Dispatch);
    s.allocate_cmd(7, 1, false);
    s.begin_cmd(7, 0, false);
    s.created_pipeline(100, "main", 0x1234_5678_9abc, 0);
    s.bind_pipeline(7, 100);
    let op = s.dispatch_op_of(7);
    assert_eq!(
        s.announce.last(),
        Some(&Announce::Op {
            id: op,
            label: "main@56789abc".into(),
            kind: "dispatch"
        })
    );
    s.name_pipeline(100, "matvec".into());
    let named = s.dispatch_op_of(7);
    assert_ne!(named, op);
    s.push_label(7, "L0.q_proj".into());
    let labelled = s.dispatch_op_of(7);
    assert!(matches!(s.announce.last(), Some(Announce::Op { label, .. }) if label == "L0.q_proj"));
    s.pop_label(7);
    assert_eq!(s.dispatch_op_of(7), named);
    assert_ne!(labelled, named);
    // Specialization data distinguishes pipelines of one module.
    s.created_pipeline(101, "main", 0x1234_5678_9abc, 0xbeef);
    s.bind_pipeline(7, 101);
    s.dispatch_op_of(7);
    assert!(
        matches!(s.announce.last(), Some(Announce::Op { label, .. }) if label == "main@56789abc+beef")
    );
}

#[test]
fn a_lock_free_recording_finds_its_ops_when_it_joins_the_state() {
    // What a command buffer's slot records without the device's lock: one dispatch under a
    // debug label (its op found by the label command), one left to its pipeline, one with no
    // pipeline bound.
    let mut s = state(Level::Dispatch);
    s.allocate_cmd(7, 1, false);
    s.begin_cmd(7, 0, false);
    s.created_pipeline(100, "main", 0x1234_5678_9abc, 0);
    s.name_pipeline(100, "matvec".into());
    s.push_label(7, "L0.q_proj".into());
    let labelled = s.label_op(7).expect("a label is open");
    s.pop_label(7);
    assert_eq!(s.label_op(7), None);
    let mut t = Timing::default();
    let first = s.slots.take().expect("a block");
    t.add_block(first, 0);
    t.dispatch(first, labelled);
    t.close();
    for pipeline in [100, 0] {
        let pair = t.next_pair().expect("a pair");
        t.dispatch_of_pipeline(pair, pipeline);
        t.close();
    }
    s.absorb(7, &mut t);
    s.end_cmd(7, 1);
    let ops: Vec<u32> = s.cmds[&7].stamps.iter().map(|t| t.op).collect();
    assert_eq!(ops[0], labelled);
    assert_eq!(ops[1], s.dispatch_op("matvec"));
    assert_eq!(ops[2], s.dispatch_op("dispatch"));
    assert_eq!(s.cmds[&7].timed_dispatches, 3);
    // A pipeline named later names the dispatches recorded after.
    s.name_pipeline(100, "matvec_q8".into());
    assert_eq!(s.pipeline_op(100), s.dispatch_op("matvec_q8"));
    // The recording's block goes back to the free list with it.
    s.reset_cmd(7);
    assert_eq!(s.slots.take(), Some(first));
}

/// Records `n` timed dispatches into command buffer 7 and submits it.
fn timed_token(s: &mut DeviceState, n: u32, fence: u64) -> Submission {
    s.begin_cmd(7, 0, false);
    s.bind_pipeline(7, 100);
    for _ in 0..n {
        s.record(7, Cmd::Dispatch);
        let slot = s.dispatch_slot(7).expect("a slot");
        let op = s.dispatch_op_of(7);
        s.dispatch_stamp(7, slot, op);
        s.record(7, Cmd::Barrier(1));
        s.close_interval(7);
    }
    s.end_cmd(7, 1);
    s.submit(9, &[vec![7]], Some(fence), &[], None)
}

#[test]
fn a_fence_wait_reads_every_stamp_of_its_submission_and_blocks_hold_32() {
    let mut s = state(Level::Dispatch);
    s.allocate_cmd(7, 1, false);
    let sub = timed_token(&mut s, 40, 3);
    let jobs = s.completed(Completed::Fences(&[3]));
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].sub, sub);
    assert_eq!(jobs[0].stamps.len(), 40);
    let slots: Vec<u32> = jobs[0].stamps.iter().map(|s| s.slot).collect();
    // Two blocks: 32 consecutive pairs, then 8 of the next block.
    assert_eq!(slots[31] - slots[0], 31);
    assert_eq!(slots[39] - slots[32], 7);
    s.read_done(&jobs[0], &vec![Some((1, 2)); 40]);
    assert_eq!(s.group.gpu.len(), 40);
    assert!(s.group.untimed.is_empty());
    // Read once only.
    assert!(s.completed(Completed::Device).is_empty());
}

#[test]
fn only_levels_that_stamp_command_buffers_leave_them_unread() {
    // `unread_of` does not look for unread results below the command-buffer level (or the
    // submit level with host resets, where a submit's one command buffer times it).
    for host_reset in [false, true] {
        for level in [
            Level::Off,
            Level::Submit,
            Level::CommandBuffer,
            Level::Dispatch,
        ] {
            let mut s = state(level);
            s.host_reset = host_reset;
            s.allocate_cmd(7, 1, false);
            s.begin_cmd(7, 0, false);
            if level == Level::CommandBuffer || level == Level::Submit && host_reset {
                let slot = s.slots.take().expect("a pair");
                s.add_stamp(7, Stamp::pair(slot, 0, 0));
            }
            s.bind_pipeline(7, 100);
            s.record(7, Cmd::Dispatch);
            if level == Level::Dispatch {
                let slot = s.dispatch_slot(7).expect("a slot");
                s.dispatch_stamp(7, slot, 0);
            }
            s.record(7, Cmd::Barrier(1));
            s.close_interval(7);
            s.end_cmd(7, 1);
            s.submit(9, &[vec![7]], Some(3), &[], None);
            let stamps = s.stamps_command_buffers();
            assert_eq!(
                stamps,
                matches!(level, Level::CommandBuffer | Level::Dispatch)
                    || level == Level::Submit && host_reset
            );
            assert_eq!(s.cmds[&7].unread.is_some(), stamps, "{}", level.name());
            assert_eq!(s.unread_of(7).is_some(), stamps);
        }
    }
}

/// A command buffer `cmd` recorded at `s`'s level with `dispatches` dispatches, each with a
/// stamp at the dispatch level, and at the other levels one stamp of its own (as the ffi side
/// adds at its begin).
fn recorded(s: &mut DeviceState, cmd: u64, dispatches: u32) {
    s.allocate_cmd(cmd, 1, false);
    s.begin_cmd(cmd, 0, false);
    if s.level != Level::Dispatch && s.stamps_command_buffers() {
        let slot = s.slots.take().expect("a pair");
        s.add_stamp(cmd, Stamp::pair(slot, 0, 0));
    }
    for _ in 0..dispatches {
        s.record(cmd, Cmd::Dispatch);
        if s.level == Level::Dispatch {
            let slot = s.dispatch_slot(cmd).expect("a slot");
            s.dispatch_stamp(cmd, slot, 0);
            s.record(cmd, Cmd::Barrier(1));
            s.close_interval(cmd);
        }
    }
    s.end_cmd(cmd, 1);
}

#[test]
fn with_host_resets_each_submit_lists_the_pairs_its_command_buffers_write() {
    for level in [Level::Submit, Level::CommandBuffer, Level::Dispatch] {
        let mut s = state(level);
        s.host_reset = true;
        recorded(&mut s, 7, 40);
        let pairs: Vec<(u32, u32)> = match level {
            Level::Dispatch => s.cmds[&7]
                .blocks
                .iter()
                .map(|&b| (b, BLOCK_PAIRS))
                .collect(),
            _ => s.cmds[&7].stamps.iter().map(|t| (t.slot, 1)).collect(),
        };
        // 40 dispatches take two blocks of 32 pairs; the other levels, one pair.
        assert_eq!(pairs.len(), if level == Level::Dispatch { 2 } else { 1 });
        // Every submit of the recording, the first and a second once the first was read.
        for seq in 0..2 {
            s.submit(9, &[vec![7]], Some(3), &[], None);
            assert_eq!(s.resets, pairs, "{} submit {seq}", level.name());
            s.resets.clear();
            let jobs = s.completed(Completed::Fences(&[3]));
            assert_eq!(jobs.len(), 1, "{}", level.name());
        }
        // Without host resets nothing is listed: the resets are in the command buffers.
        let mut s = state(level);
        recorded(&mut s, 7, 40);
        s.submit(9, &[vec![7]], Some(3), &[], None);
        assert!(s.resets.is_empty());
    }
}

#[test]
fn with_host_resets_the_submit_level_times_a_lone_command_buffer_by_its_own_pair() {
    let mut s = state(Level::Submit);
    s.host_reset = true;
    recorded(&mut s, 7, 3);
    recorded(&mut s, 8, 2);
    // One command buffer: timed by its pair, covering its dispatches; nothing untimed.
    assert!(s.submit_timed_by_its_command_buffer(&[vec![7]]));
    s.submit(9, &[vec![7]], Some(3), &[], None);
    assert!(s.group.untimed.is_empty());
    assert_eq!(s.resets.len(), 1);
    s.resets.clear();
    let jobs = s.completed(Completed::Fences(&[3]));
    assert_eq!(jobs.len(), 1);
    assert!(!jobs[0].own);
    assert_eq!(jobs[0].stamps[0].covers, 3);
    // Two command buffers: the layer's wrappers time the submit, and the command buffers'
    // own pairs are left unread (but still reset before they are written again).
    assert!(!s.submit_timed_by_its_command_buffer(&[vec![7], vec![8]]));
    s.submit(9, &[vec![7], vec![8]], Some(4), &[], None);
    assert_eq!(s.resets.len(), 2);
    assert!(s.cmds[&7].unread.is_none() && s.cmds[&8].unread.is_none());
    // Unwrapped (no pair to be had), its dispatches are untimed.
    assert_eq!(s.group.untimed, vec![RawUntimed(0, 5)]);
    // Without host resets the submit level never times a submit by a command buffer.
    let mut s = state(Level::Submit);
    recorded(&mut s, 7, 3);
    assert!(!s.submit_timed_by_its_command_buffer(&[vec![7]]));
}

#[test]
fn with_host_resets_a_command_buffer_that_may_be_pending_when_submitted_is_not_timed() {
    let mut s = state(Level::CommandBuffer);
    s.allocate_cmd(7, 1, false);
    assert!(!s.begin_cmd(7, 0, false));
    assert!(s.can_time(7));
    s.host_reset = true;
    // SIMULTANEOUS_USE: its queries could be in use at its next submit.
    assert!(s.begin_cmd(7, 0, true));
    assert!(!s.can_time(7));
    assert!(!s.begin_cmd(7, 0, true));
    assert!(s.begin_cmd(7, 0, false));
    assert!(s.can_time(7));
}

#[test]
fn a_command_buffer_recorded_again_gives_up_its_unread_stamps_first() {
    // The program learnt of the completion in a way the layer did not see (a poll, a
    // binary semaphore): the stamps are read when the command buffer is reused.
    let mut s = state(Level::Dispatch);
    s.allocate_cmd(7, 1, false);
    timed_token(&mut s, 3, 3);
    let job = s.unread_of(7).expect("unread stamps");
    assert_eq!(job.stamps.len(), 3);
    s.read_done(&job, &[Some((1, 2)), None, Some((3, 4))]);
    assert_eq!(s.group.gpu.len(), 2);
    assert_eq!(s.group.untimed, vec![RawUntimed(0, 1)]);
    // The queue's later completion finds nothing left to read.
    timed_token(&mut s, 3, 4);
    let jobs = s.completed(Completed::Fences(&[3]));
    assert!(jobs.is_empty(), "{jobs:?}");
    assert_eq!(s.completed(Completed::Fences(&[4])).len(), 1);
}

#[test]
fn timeline_semaphore_values_complete_their_submissions() {
    let mut s = state(Level::Dispatch);
    s.allocate_cmd(7, 1, false);
    s.begin_cmd(7, 0, false);
    s.record(7, Cmd::Dispatch);
    let slot = s.dispatch_slot(7).expect("slot");
    s.dispatch_stamp(7, slot, 0);
    s.close_interval(7);
    s.end_cmd(7, 1);
    s.submit(9, &[vec![7]], None, &[(55, 10)], None);
    assert!(s.completed(Completed::Semaphores(&[(55, 9)])).is_empty());
    assert_eq!(s.completed(Completed::Semaphores(&[(55, 10)])).len(), 1);
}

#[test]
fn untimed_dispatches_are_counted() {
    // A secondary command buffer's dispatches cannot be timed at the dispatch level.
    let mut s = state(Level::Dispatch);
    s.allocate_cmd(8, 1, true);
    s.allocate_cmd(7, 1, false);
    s.begin_cmd(8, 0, false);
    s.record(8, Cmd::Dispatch);
    s.record(8, Cmd::Dispatch);
    s.end_cmd(8, 0);
    s.begin_cmd(7, 0, false);
    s.execute_secondaries(7, &[8]);
    s.end_cmd(7, 0);
    s.submit(9, &[vec![7]], None, &[], None);
    assert_eq!(s.group.untimed, vec![RawUntimed(0, 2)]);
    // A submit the submit level could not wrap.
    let mut s = state(Level::Submit);
    s.allocate_cmd(7, 1, false);
    s.begin_cmd(7, 0, false);
    s.record(7, Cmd::Dispatch);
    s.end_cmd(7, 0);
    s.submit(9, &[vec![7]], None, &[], None);
    assert_eq!(s.group.untimed, vec![RawUntimed(0, 1)]);
}

#[test]
fn whole_size_ranges_run_to_the_end_of_the_map() {
    let mut s = state(Level::Off);
    s.map(5, 256, 1024);
    assert_eq!(s.range_bytes(5, 512, u64::MAX), 768);
    assert_eq!(s.range_bytes(5, 512, 64), 64);
}

#[test]
fn code_hashes_are_stable() {
    assert_eq!(hash_bytes(b"spirv"), hash_bytes(b"spirv"));
    assert_ne!(hash_bytes(b"spirv"), hash_bytes(b"spirw"));
    assert_ne!(hash_bytes(&[0; 8]), hash_bytes(&[0; 16]));
}

/// Records a dispatch into `cmd` at the dispatch level: its pair, and whether it opened its
/// interval with a timestamp of its own.
fn dispatch(s: &mut DeviceState, cmd: u64) -> (u32, bool) {
    s.record(cmd, Cmd::Dispatch);
    let slot = s.dispatch_slot(cmd).expect("a slot");
    let op = s.dispatch_op_of(cmd);
    (slot, s.dispatch_stamp(cmd, slot, op))
}

#[test]
fn dispatches_are_timed_by_the_interval_between_barriers() {
    let mut s = state(Level::Dispatch);
    s.allocate_cmd(7, 1, false);
    s.begin_cmd(7, 0, false);
    s.bind_pipeline(7, 100);
    // A alone; B and C concurrent (no barrier between them); a transfer; D alone.
    let (a, a_opens) = dispatch(&mut s, 7);
    assert!(
        a_opens,
        "the command buffer's first dispatch writes its start"
    );
    assert_eq!(s.close_interval(7), Some(2 * a + 1));
    s.record(7, Cmd::Barrier(1));
    assert_eq!(
        s.close_interval(7),
        None,
        "a second barrier ends no interval"
    );
    let (b, b_opens) = dispatch(&mut s, 7);
    let (c, c_opens) = dispatch(&mut s, 7);
    assert!(!b_opens && !c_opens, "they start at A's end");
    assert_eq!(s.close_interval(7), Some(2 * c + 1));
    s.record(7, Cmd::Transfer);
    let (d, d_opens) = dispatch(&mut s, 7);
    assert!(
        d_opens,
        "after a transfer the interval starts at a timestamp of its own"
    );
    assert_eq!(s.close_interval(7), Some(2 * d + 1));
    // The recording's stamps join the command buffer's state when it ends.
    assert!(s.cmds[&7].stamps.is_empty());
    s.end_cmd(7, 1);
    let spans: Vec<(u32, u32, u32)> = s.cmds[&7]
        .stamps
        .iter()
        .map(|t| (t.start, t.end, t.shared))
        .collect();
    assert_eq!(
        spans,
        vec![
            (2 * a, 2 * a + 1, 1),
            (2 * a + 1, 2 * c + 1, 2),
            (2 * a + 1, 2 * c + 1, 2),
            (2 * d, 2 * d + 1, 1),
        ]
    );
    let _ = b;
    // Every dispatch has a span; the shared one reaches the trace with `shared` 2.
    s.submit(9, &[vec![7]], Some(3), &[], None);
    let job = s.completed(Completed::Fences(&[3])).remove(0);
    s.read_done(
        &job,
        &[
            Some((0, 10)),
            Some((10, 30)),
            Some((10, 30)),
            Some((40, 45)),
        ],
    );
    let shared: Vec<u32> = s.group.gpu.iter().map(|g| g.6).collect();
    assert_eq!(shared, vec![1, 2, 2, 1]);
    assert!(s.group.untimed.is_empty());
}

#[test]
fn a_new_recording_starts_without_a_boundary() {
    let mut s = state(Level::Dispatch);
    s.allocate_cmd(7, 1, false);
    s.begin_cmd(7, 0, false);
    dispatch(&mut s, 7);
    s.close_interval(7);
    s.end_cmd(7, 1);
    s.reset_cmd(7);
    s.begin_cmd(7, 2, false);
    assert!(dispatch(&mut s, 7).1);
}
