//! How `decoder bench` measures: one engine per group, its points decoded and timed, and llama.cpp beside them.

use super::*;

/// GPU time per step of the spans `pick` selects in the dispatch-level breakdown `records`: their
/// median share of a step's GPU time (the union of its spans) times the timed steps' GPU time
/// `gpu_us`. Dispatch-level timestamps lengthen a step, and a step's spans can be far off as a
/// whole (the first breakdown step after the switch on lavapipe; on an H100 the persistent rows'
/// attention came out longer than the step), which a share within one step's own spans does not
/// carry over. Without timed GPU time (timestamps off), the median of the sums.
pub(super) fn picked_us(
    records: &[TokenRecord],
    pick: &dyn Fn(u32) -> bool,
    gpu_us: Option<f64>,
) -> f64 {
    let picked = |t: &TokenRecord| {
        t.gpu_spans
            .iter()
            .filter(|s| pick(s.op()))
            .map(|s| s.dur_ns() as f64 / 1e3)
            .sum::<f64>()
    };
    match gpu_us {
        Some(gpu_us) => {
            let shares: Vec<f64> = records
                .iter()
                .filter_map(|t| {
                    let busy = profiler::stats::union_ns(&t.gpu_spans) as f64 / 1e3;
                    (busy > 0.0).then(|| (picked(t) / busy).min(1.0))
                })
                .collect();
            median(shares) * gpu_us
        }
        None => median(records.iter().map(picked).collect()),
    }
}

/// Medians of the decode records in `recs`.
pub(super) struct Medians {
    pub(super) wall_us: f64,
    pub(super) host_enqueue_us: f64,
    pub(super) gpu_us: Option<f64>,
    pub(super) submits: f64,
    pub(super) barriers: f64,
    pub(super) descriptor_writes: f64,
    pub(super) dispatches: f64,
    pub(super) kv_bytes_copied: f64,
    pub(super) kv_positions: f64,
}

pub(super) fn medians(recs: &[&TokenRecord]) -> Medians {
    let m = |f: &dyn Fn(&TokenRecord) -> f64| median(recs.iter().map(|t| f(t)).collect());
    let gpu: Vec<f64> = recs
        .iter()
        .filter_map(|t| t.gpu_busy_ns.map(|g| g as f64 / 1e3))
        .collect();
    Medians {
        wall_us: m(&|t| t.wall_ns as f64 / 1e3),
        host_enqueue_us: m(&|t| t.host_enqueue_ns as f64 / 1e3),
        gpu_us: (!gpu.is_empty()).then(|| median(gpu)),
        submits: m(&|t| t.counters.submits() as f64),
        barriers: m(&|t| t.counters.barrier_calls as f64),
        descriptor_writes: m(&|t| t.counters.descriptor_writes as f64),
        dispatches: m(&|t| t.counters.dispatches as f64),
        kv_bytes_copied: m(&|t| t.counters.kv_bytes_copied as f64),
        kv_positions: m(&|t| t.kv_len as f64),
    }
}

/// llama.cpp at every context of the sweep (batch 1), on the bench's weights exported to GGUF (or
/// on the GGUF file itself when `--model` names one).
pub(super) fn llama_rows(
    args: &Args,
    path: &std::path::Path,
    base_ids: &[u32],
    rows: &[Row],
) -> anyhow::Result<Vec<peer::PeerRow>> {
    let bin = peer::server_binary(path)?;
    let spec = std::path::Path::new(&args.model.model);
    let gguf = if crate::gguf::is_gguf_file(spec) {
        // The same file, its blocks as they are, for both decoders.
        spec.to_path_buf()
    } else {
        let dir = crate::model::resolve_model(&args.model.model)
            .with_context(|| format!("cannot find the model {:?}", args.model.model))?;
        eprintln!("llama.cpp: exporting {} to GGUF", dir.display());
        peer::export_model(&dir, &args.out)?
    };
    let prompts: Vec<Vec<u32>> = args
        .context
        .iter()
        .map(|&c| with_context(base_ids.to_vec(), c))
        .collect();
    let n_predict = args.warmup + args.max_tokens;
    let n_ctx = prompts.iter().map(Vec::len).max().unwrap_or(0) + n_predict + 64;
    let log = args.out.join("llama-server.log");
    eprintln!(
        "llama.cpp: starting {} (log {})",
        bin.display(),
        log.display()
    );
    let server = peer::Server::start(&bin, &gguf, n_ctx, &log)?;
    let mut out = Vec::new();
    for ids in &prompts {
        let mut runs = Vec::new();
        let mut first = None;
        for k in 0..args.llama_runs {
            let c = server
                .complete(ids, n_predict)
                .with_context(|| format!("llama.cpp at context {}, run {}", ids.len(), k + 1))?;
            runs.push(c.predicted_per_second);
            first.get_or_insert(c);
        }
        let mut c = first.context("--llama-runs: llama.cpp ran no completion")?;
        c.predicted_per_second = median(runs.clone());
        // decodescope's sequence 0 at this context, batch 1 (the first setting measured).
        let ours = rows
            .iter()
            .find(|r| r.context == ids.len() && r.batch == 1)
            .map(|r| r.ids.as_slice())
            .unwrap_or(&[]);
        let (shared, compared) = peer::shared_prefix(&c.tokens, ours);
        if c.banned_tokens > 0 {
            eprintln!(
                "llama.cpp context {}: run with the {} tokens that are not whole UTF-8 characters \
                 banned (llama-server refuses greedy text that is not valid UTF-8)",
                ids.len(),
                c.banned_tokens
            );
        }
        eprintln!(
            "llama.cpp context {}: {:.1} tokens/s (median of {:?}), {shared} of {compared} leading tokens as decodescope",
            ids.len(),
            c.predicted_per_second,
            runs.iter()
                .map(|r| (r * 10.0).round() / 10.0)
                .collect::<Vec<_>>()
        );
        out.push(peer::PeerRow {
            runtime: "llama.cpp (Vulkan)".into(),
            context: ids.len(),
            decode_tokens: c.predicted_n,
            tokens_per_s: c.predicted_per_second,
            tokens_per_s_runs: runs,
            ms_per_token: if c.predicted_per_second > 0.0 {
                1e3 / c.predicted_per_second
            } else {
                0.0
            },
            prompt_tokens_per_s: c.prompt_per_second,
            shared_leading_tokens: shared,
            compared_tokens: compared,
            banned_tokens: c.banned_tokens,
            ids: c.tokens,
        });
    }
    Ok(out)
}

/// The sequences of a point as they decode: each one's last token and next position.
pub(super) struct Decoding {
    pub(super) last: Vec<u32>,
    pub(super) positions: Vec<u32>,
    /// Sequence 0's tokens, for the trace.
    pub(super) first_ids: Vec<u32>,
}

impl Decoding {
    pub(super) fn run(&mut self, engine: &mut Engine, steps: usize) -> anyhow::Result<()> {
        for _ in 0..steps {
            let outs = engine.decode_step(&self.last, &self.positions)?;
            for (i, o) in outs.iter().enumerate() {
                self.last[i] = o.argmax;
                self.positions[i] += 1;
            }
            self.first_ids.push(self.last[0]);
        }
        Ok(())
    }
}

/// Measures a group's points: for each context (ascending), an engine whose KV capacity is that
/// context's (the tuning that a run of that context gets: the split plans and the persistent
/// kernel's workgroup follow the capacity, `Tuning::for_device` and `Tuning::for_weights`)
/// prefills the prompts, then for each paged attention path decodes warm-up, timed and breakdown
/// steps from the same cache and hands the row to `emit`; the decode steps are rewound before the
/// next path.
#[allow(clippy::too_many_arguments)]
pub(super) fn run_group(
    args: &Args,
    gpu: &Gpu,
    model: &crate::model::Model,
    base_ids: &[u32],
    contexts: &[usize],
    g: &Group,
    bar: &indicatif::ProgressBar,
    emit: &mut dyn FnMut(Row) -> anyhow::Result<String>,
) -> anyhow::Result<()> {
    let steps = args.warmup + args.max_tokens + args.breakdown;
    for &context in contexts {
        let ids = with_context(base_ids.to_vec(), context);
        let opts = EngineOptions {
            knobs: g.knobs,
            timestamps: args.timestamps[0],
            max_seq: (ids.len() + steps + 2) as u32,
            kv: g.kv,
            logits_readback: false,
            tuning: args.tuning.overrides()?,
        };
        let mut engine = Engine::new(gpu, &model.config, &model.weights, opts)
            .context("cannot set up the Vulkan decoder")?;
        for line in engine.persistent_report() {
            bar.println(line);
        }
        let prompts = batch_prompts(&ids, g.kv.batch);
        bar.set_message(format!(
            "{} {} batch {} context {}: prompt",
            g.name,
            g.kv.layout_name(),
            g.kv.batch,
            ids.len()
        ));
        let prefill_start = std::time::Instant::now();
        let mut after = Vec::with_capacity(prompts.len());
        let mut added = 0;
        for (seq, p) in prompts.iter().enumerate() {
            after.push(engine.prefill(seq as u32, p, 0)?.argmax);
            added += p.len();
        }
        let prefill_s = prefill_start.elapsed().as_secs_f64();
        let mark = engine.records().len();
        for &path in &g.paths {
            let mut kv = g.kv;
            if kv.kind == KvKind::Paged {
                engine.set_paged_attention(path)?;
                kv.paged_attention = path;
            }
            for &level in &args.timestamps {
                engine.set_timestamps(level)?;
                bar.set_message(format!(
                    "{} {}{} batch {} context {} timestamps {}: decode",
                    g.name,
                    kv.layout_name(),
                    if kv.gathers() { " gather" } else { "" },
                    kv.batch,
                    ids.len(),
                    level.name()
                ));
                let mut row = measure(
                    args,
                    &mut engine,
                    model,
                    &ids,
                    &prompts,
                    &after,
                    kv,
                    g,
                    level,
                )?;
                row.prompt_tokens_per_s = if prefill_s > 0.0 {
                    added as f64 / prefill_s
                } else {
                    0.0
                };
                engine.truncate_records(mark);
                emit(row)?;
            }
        }
    }
    Ok(())
}

/// Decodes one point from the prompts already in `engine`'s cache (`first[i]` is sequence i's
/// token after its prompt): warm-up, timed steps, breakdown steps; writes its trace.
#[allow(clippy::too_many_arguments)]
pub(super) fn measure(
    args: &Args,
    engine: &mut Engine,
    model: &crate::model::Model,
    ids: &[u32],
    prompts: &[Vec<u32>],
    first: &[u32],
    kv: KvConfig,
    g: &Group,
    level: Timestamps,
) -> anyhow::Result<Row> {
    let (name, knobs) = (g.name.as_str(), g.knobs);
    let mut seqs = Decoding {
        positions: prompts.iter().map(|p| p.len() as u32).collect(),
        first_ids: vec![first[0]],
        last: first.to_vec(),
    };
    seqs.run(engine, args.warmup)?;
    let timed_from = engine.records().len();
    seqs.run(engine, args.max_tokens)?;
    let timed_to = engine.records().len();
    let generation = Generation {
        ids: seqs.first_ids.clone(),
        ..Generation::started(prompts[0].len(), 0)
    };
    let spec = CaptureSpec {
        model_name: args.model.model.clone(),
        prompt: args.prompt.prompt.clone(),
        prompt_ids: ids.to_vec(),
        decode_tokens: args.warmup + args.max_tokens,
        knobs,
        timestamps: level,
        logits_readback: false,
        kv,
        tuning: args.tuning.overrides()?,
    };
    let trace = build_trace(engine, model, &spec, &generation);
    let timed: Vec<&TokenRecord> = engine.records()[timed_from..timed_to]
        .iter()
        .filter(|t| t.phase == Phase::Decode)
        .collect();
    let m = medians(&timed);
    let gpu_gap_us = gpu_gap_us(engine, timed_from..timed_to);
    let decode_steps = timed.len();
    let (attention_gpu_us, gather_gpu_us) = if args.breakdown > 0 {
        breakdown(engine, &mut seqs, args.breakdown, kv, m.gpu_us)?
    } else {
        (None, None)
    };
    let context = prompts[0].len();
    let file = trace_path(args, name, kv, context, level);
    profiler::io::write_trace(&file, &trace)
        .with_context(|| format!("cannot write {}", file.display()))?;
    let shape = engine.shape();
    let kv_row_bytes = shape.kv_dim() as u64 * kv.dtype.bytes();
    let bytes_per_step = shape.weight_bytes_per_token(engine.weight_types()) as f64
        + m.kv_positions * 2.0 * shape.layers as f64 * kv_row_bytes as f64;
    let wall_s = m.wall_us * 1e-6;
    Ok(Row {
        setting: name.to_string(),
        mode: knobs.mode_name().to_string(),
        kv: kv.layout_name(),
        paged_attention: if kv.kind == KvKind::Paged {
            kv.paged_attention.name().into()
        } else {
            String::new()
        },
        batch: kv.batch,
        context,
        timestamps: level.name().into(),
        decode_steps,
        tokens_per_s: if wall_s > 0.0 {
            kv.batch as f64 / wall_s
        } else {
            0.0
        },
        ms_per_step: m.wall_us / 1e3,
        host_enqueue_us: m.host_enqueue_us,
        gpu_us: m.gpu_us,
        gpu_gap_us,
        attention_gpu_us,
        gather_gpu_us,
        submits: m.submits,
        barriers: m.barriers,
        descriptor_writes: m.descriptor_writes,
        dispatches: m.dispatches,
        kv_bytes_copied: m.kv_bytes_copied,
        persistent_grid: engine
            .persistent_grid()
            .map(|(groups, invocations)| format!("{groups}x{invocations}"))
            .unwrap_or_default(),
        // Set by the group, which ran the prompt.
        prompt_tokens_per_s: 0.0,
        bytes_per_step,
        achieved_gbps: if wall_s > 0.0 {
            bytes_per_step / wall_s / 1e9
        } else {
            0.0
        },
        roofline_share: engine
            .gpu()
            .bandwidth()
            .filter(|b| b.read_gbps > 0.0 && wall_s > 0.0)
            .map(|b| bytes_per_step / wall_s / 1e9 / b.read_gbps),
        tokens_match: true,
        ids: seqs.first_ids.clone(),
    })
}

/// The median idle GPU time before each decode record of `range` (None without calibrated
/// timestamps).
fn gpu_gap_us(engine: &Engine, range: std::ops::Range<usize>) -> Option<f64> {
    if !engine.clock().calibrated {
        return None;
    }
    let recs = engine.records();
    let gaps: Vec<f64> = range
        .filter(|&i| recs[i].phase == Phase::Decode)
        .filter_map(|i| profiler::stats::gpu_gap_ns(recs, i).map(|g| g as f64 / 1e3))
        .collect();
    (!gaps.is_empty()).then(|| median(gaps))
}

/// Decodes `steps` more steps at dispatch level and returns the attention and (for the gather
/// path) the gather GPU time per step, as shares of `gpu_us`. A program with no attention
/// dispatch of its own (the persistent kernel runs the whole token in one) has no attention
/// time to report.
fn breakdown(
    engine: &mut Engine,
    seqs: &mut Decoding,
    steps: usize,
    kv: KvConfig,
    gpu_us: Option<f64>,
) -> anyhow::Result<(Option<f64>, Option<f64>)> {
    engine.set_timestamps(Timestamps::Dispatch)?;
    let from = engine.records().len();
    seqs.run(engine, steps)?;
    let ops = engine.ops();
    let is_attention = |op: u32| {
        ops.get(op as usize)
            .is_some_and(|o| o.kind == "attention" || o.label.ends_with("kv_gather"))
    };
    let is_gather = |op: u32| {
        ops.get(op as usize)
            .is_some_and(|o| o.label.ends_with("kv_gather"))
    };
    let records = &engine.records()[from..];
    let per_step = |pick: &dyn Fn(u32) -> bool| picked_us(records, pick, gpu_us);
    let separate = records
        .iter()
        .any(|t| t.gpu_spans.iter().any(|s| is_attention(s.op())));
    Ok((
        separate.then(|| per_step(&is_attention)),
        kv.gathers().then(|| per_step(&is_gather)),
    ))
}

/// The point's trace file in `--out`: setting, layout, batch, context and (when the sweep has
/// several) timestamp level.
fn trace_path(
    args: &Args,
    name: &str,
    kv: KvConfig,
    context: usize,
    level: Timestamps,
) -> std::path::PathBuf {
    args.out.join(format!(
        "{}-{}-b{}-c{}{}.json",
        name.replace([' ', ':'], "_").replace("--", ""),
        kv.layout_name().replace(':', "") + if kv.gathers() { "-gather" } else { "" },
        kv.batch,
        context,
        if args.timestamps.len() > 1 {
            format!("-t{}", level.name())
        } else {
            String::new()
        }
    ))
}
