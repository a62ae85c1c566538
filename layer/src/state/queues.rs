//! Queues, submits and completion: what is in flight on each queue, what a wait or a poll
//! proves finished, and the stamps to read back then.

use super::*;
use commands::cmd_mut;

/// A submission on a queue that no wait has proven complete yet.
#[derive(Clone, Debug)]
pub(super) struct Inflight {
    sub: Submission,
    cbs: Vec<u64>,
    own: Option<Stamp>,
}

#[derive(Clone, Debug, Default)]
pub(super) struct QueueInfo {
    id: u32,
    family: u32,
    kind: u8,
    /// Submits so far, and the newest one known complete.
    submitted: u64,
    completed: u64,
    inflight: VecDeque<Inflight>,
}

/// What a returned wait or a successful poll proves finished.
#[derive(Debug)]
pub enum Completed<'a> {
    Fences(&'a [u64]),
    /// Timeline semaphores that reached at least these values.
    Semaphores(&'a [(u64, u64)]),
    Queue(u64),
    Device,
}

impl DeviceState {
    pub fn add_queue(&mut self, queue: u64, family: u32, index: u32) {
        if self.queues.contains_key(&queue) {
            return;
        }
        let transfer = self
            .transfer_families
            .get(family as usize)
            .copied()
            .unwrap_or(false);
        let kind = if transfer {
            QUEUE_TRANSFER
        } else {
            QUEUE_COMPUTE
        };
        let id = self.queues.len() as u32;
        self.queues.insert(
            queue,
            QueueInfo {
                id,
                family,
                kind,
                ..QueueInfo::default()
            },
        );
        self.announce.push(Announce::Queue {
            id,
            family,
            index,
            kind,
        });
    }

    pub fn queue_family(&self, queue: u64) -> Option<u32> {
        self.queues.get(&queue).map(|q| q.family)
    }

    // ---- submits ---------------------------------------------------------------------------

    /// Read jobs for the command buffers of a submit that an earlier submission still holds
    /// unread (it is complete: a command buffer is submitted again only once it is).
    pub fn resubmitted<B: AsRef<[u64]>>(&mut self, batches: &[B]) -> Vec<ReadJob> {
        let mut jobs = Vec::new();
        if !self.stamps_command_buffers() {
            return jobs;
        }
        for cmd in batches.iter().flat_map(|b| b.as_ref()) {
            if let Some(j) = self.unread_of(*cmd) {
                jobs.push(j);
            }
        }
        jobs
    }

    /// True when a submit of `batches` at the submit level is timed by the pair its one command
    /// buffer recorded (queries reset from the host), so the layer does not wrap it: on an H200
    /// llama-server lost 5.7% of its tokens/s to the wrappers (two more command buffers a
    /// submit) and 1.6% to the stamps in its own (docs/capture-layer.md, "Host query resets").
    pub fn submit_timed_by_its_command_buffer<B: AsRef<[u64]>>(&self, batches: &[B]) -> bool {
        if !(self.level == Level::Submit && self.host_reset) {
            return false;
        }
        let mut cbs = batches.iter().flat_map(|b| b.as_ref());
        match (cbs.next(), cbs.next()) {
            (Some(c), None) => self.cmds.get(c).is_some_and(|c| !c.stamps.is_empty()),
            _ => false,
        }
    }

    /// Counts a `vkQueueSubmit` of `batches` (command buffer keys per batch) to `queue`, which
    /// signals `fence` and the timeline semaphore values `signals` when done; `own` is the
    /// layer's submit-level stamp when it wraps this submit. With host resets, the pairs of
    /// the submitted command buffers join [`Self::resets`]. Returns the submission.
    pub fn submit<B: AsRef<[u64]>>(
        &mut self,
        queue: u64,
        batches: &[B],
        fence: Option<u64>,
        signals: &[(u64, u64)],
        own: Option<Stamp>,
    ) -> Submission {
        if !self.queues.contains_key(&queue) {
            // A queue the layer did not see handed out (another layer's): count it anyway.
            self.add_queue(queue, 0, u32::MAX);
        }
        let level = self.level;
        // Unwrapped at the submit level with host resets, a lone command buffer with a stamp
        // times the submit ([`Self::submit_timed_by_its_command_buffer`], found in the loop).
        let lone = level == Level::Submit
            && self.host_reset
            && own.is_none()
            && batches.iter().map(|b| b.as_ref().len()).sum::<usize>() == 1;
        let mut by_cb = false;
        let index = self.group.counters.submits() as u32;
        let group = self.next_group;
        let Some(q) = self.queues.get_mut(&queue) else {
            unreachable!("the queue was added above")
        };
        q.submitted += 1;
        let sub = Submission {
            queue,
            seq: q.submitted,
            group,
            submit: index,
            kind: q.kind,
        };
        let qid = q.id;
        match q.kind {
            QUEUE_TRANSFER => {
                self.group.counters.submits_transfer += 1;
                self.total.submits_transfer += 1;
            }
            _ => {
                self.group.counters.submits_compute += 1;
                self.total.submits_compute += 1;
            }
        }
        self.group.signature = mix(self.group.signature, 0x5b_0000 | sub.kind as u64);
        let mut cbs = Vec::new();
        let mut known = 0u64;
        let (mut dispatches, mut untimed) = (0u64, 0u64);
        for batch in batches {
            self.group.signature = mix(self.group.signature, 0xba7c4);
            for cmd in batch.as_ref() {
                let Some(c) = cmd_mut(&mut self.cmds, *cmd) else {
                    continue;
                };
                known += 1;
                self.group.counters.add(&c.counters);
                self.total.add(&c.counters);
                self.group.signature = mix(self.group.signature, c.signature);
                self.group.work = self.group.work.wrapping_add(c.work);
                dispatches += c.counters.dispatches;
                untimed += match level {
                    Level::Off | Level::Submit => 0,
                    Level::CommandBuffer if c.stamps.is_empty() => c.counters.dispatches,
                    Level::CommandBuffer => 0,
                    Level::Dispatch => c.counters.dispatches.saturating_sub(c.timed_dispatches),
                };
                // The command buffer's last execution is complete (Vulkan submits again only
                // a command buffer that is not pending) and was read above
                // ([`Self::resubmitted`]), so its queries may be reset from the host.
                if self.host_reset {
                    if level == Level::Dispatch {
                        self.resets
                            .extend(c.blocks.iter().map(|&b| (b, super::BLOCK_PAIRS)));
                    } else {
                        self.resets.extend(c.stamps.iter().map(|s| (s.slot, 1)));
                    }
                }
                // Only command buffers with stamps have anything to read once complete (at the
                // submit level, only the one command buffer that times its submit).
                by_cb |= lone && !c.stamps.is_empty();
                if !c.stamps.is_empty() && (level != Level::Submit || lone) {
                    c.unread = Some(sub);
                    cbs.push(*cmd);
                }
            }
        }
        if level == Level::Submit && own.is_none() && !by_cb {
            untimed = dispatches;
        }
        if untimed > 0 {
            self.group.untimed.push(RawUntimed(group, untimed));
        }
        let nbuf = known;
        match self.group.queues.iter_mut().find(|w| w.0 == qid) {
            Some(w) => {
                w.1 += 1;
                w.2 += nbuf;
                w.3 += dispatches;
            }
            None => self
                .group
                .queues
                .push(RawQueueWork(qid, 1, nbuf, dispatches)),
        }
        if let Some(f) = fence {
            self.fences.insert(f, (queue, sub.seq));
        }
        for &(sem, value) in signals {
            let list = self.timelines.entry(sem).or_default();
            list.push((value, queue, sub.seq));
            if list.len() > 64 {
                // Signals nobody waits for on the host (a semaphore only the GPU waits on):
                // forget those whose queue is known complete, and keep the list bounded.
                let queues = &self.queues;
                list.retain(|&(_, q, seq)| queues.get(&q).is_none_or(|qi| qi.completed < seq));
                if list.len() > 4_096 {
                    list.drain(..list.len() - 2_048);
                }
            }
        }
        let own = own.map(|s| Stamp {
            covers: dispatches,
            ..s
        });
        let timed = own.is_some()
            || cbs
                .iter()
                .any(|c| self.cmds.get(c).is_some_and(|c| c.unread == Some(sub)));
        if timed && let Some(q) = self.queues.get_mut(&queue) {
            q.inflight.push_back(Inflight { sub, cbs, own });
        }
        sub
    }

    /// Read jobs for submissions to `queue` that have been in flight so long that its list
    /// must shrink (a program whose waits the layer cannot interpret): the oldest are read for
    /// whatever is available. Only a submit adds to a queue's list, so checking the queue just
    /// submitted to after each submit keeps every list bounded.
    pub fn overdue(&mut self, queue: u64) -> Vec<ReadJob> {
        let mut jobs = Vec::new();
        let Some(q) = self.queues.get_mut(&queue) else {
            return jobs;
        };
        if q.inflight.len() <= INFLIGHT_LIMIT {
            return jobs;
        }
        let excess = q.inflight.len() - INFLIGHT_LIMIT / 2;
        let old: Vec<Inflight> = q.inflight.drain(..excess).collect();
        for f in old {
            self.jobs_of(f, &mut jobs);
        }
        jobs
    }

    fn jobs_of(&mut self, f: Inflight, jobs: &mut Vec<ReadJob>) {
        if let Some(own) = f.own {
            jobs.push(ReadJob {
                sub: f.sub,
                stamps: vec![own],
                own: true,
            });
        }
        for cmd in f.cbs {
            if self.cmds.get(&cmd).is_some_and(|c| c.unread == Some(f.sub))
                && let Some(j) = self.unread_of(cmd)
            {
                jobs.push(j);
            }
        }
    }

    // ---- completion -------------------------------------------------------------------------

    /// Work proven complete by a wait or a poll that returned success.
    pub fn completed(&mut self, what: Completed<'_>) -> Vec<ReadJob> {
        let mut marks: Vec<(u64, u64)> = Vec::new();
        match what {
            Completed::Fences(fs) => {
                for f in fs {
                    if let Some(&(q, seq)) = self.fences.get(f) {
                        marks.push((q, seq));
                    }
                }
            }
            Completed::Semaphores(ss) => {
                for &(sem, value) in ss {
                    if let Some(list) = self.timelines.get_mut(&sem) {
                        list.retain(|&(v, q, seq)| {
                            if v <= value {
                                marks.push((q, seq));
                                false
                            } else {
                                true
                            }
                        });
                    }
                }
            }
            Completed::Queue(q) => {
                if let Some(qi) = self.queues.get(&q) {
                    marks.push((q, qi.submitted));
                }
            }
            Completed::Device => {
                for (&q, qi) in &self.queues {
                    marks.push((q, qi.submitted));
                }
            }
        }
        let mut jobs = Vec::new();
        for (q, seq) in marks {
            let Some(qi) = self.queues.get_mut(&q) else {
                continue;
            };
            if seq <= qi.completed {
                continue;
            }
            qi.completed = seq;
            let mut done = Vec::new();
            while qi.inflight.front().is_some_and(|f| f.sub.seq <= seq) {
                if let Some(f) = qi.inflight.pop_front() {
                    done.push(f);
                }
            }
            for f in done {
                self.jobs_of(f, &mut jobs);
            }
        }
        jobs
    }

    /// Everything still unread (at the device's destruction or the program's exit): read for
    /// whatever is available.
    pub fn all_unread(&mut self) -> Vec<ReadJob> {
        let mut jobs = Vec::new();
        let mut inflight = Vec::new();
        for q in self.queues.values_mut() {
            inflight.extend(q.inflight.drain(..));
        }
        inflight.sort_by_key(|f| (f.sub.group, f.sub.submit));
        for f in inflight {
            self.jobs_of(f, &mut jobs);
        }
        let mut rest: Vec<u64> = self
            .cmds
            .iter()
            .filter(|(_, c)| c.unread.is_some())
            .map(|(&k, _)| k)
            .collect();
        rest.sort_unstable();
        for cmd in rest {
            if let Some(j) = self.unread_of(cmd) {
                jobs.push(j);
            }
        }
        jobs
    }

    /// The driver's answer for a read job: `results[i]` is the (start, end) GPU ns of
    /// `job.stamps[i]`, `None` where it was not available (then its dispatches are untimed).
    pub fn read_done(&mut self, job: &ReadJob, results: &[Option<(u64, u64)>]) {
        let mut untimed = 0;
        for (s, r) in job.stamps.iter().zip(results) {
            if s.source == Source::Bracket {
                // Read only to place the clocked dispatches' spans.
                continue;
            }
            match r {
                Some((a, b)) => self.group.gpu.push(RawGpuSpan(
                    job.sub.group,
                    job.sub.submit,
                    s.op,
                    job.sub.kind,
                    *a,
                    *b,
                    s.shared,
                )),
                None => {
                    self.group.dropped += 1;
                    untimed += s.covers;
                }
            }
            if job.own {
                self.slots.put(s.slot);
            }
        }
        if untimed > 0 {
            self.group.untimed.push(RawUntimed(job.sub.group, untimed));
        }
    }
}
