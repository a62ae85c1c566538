//! Scale of the viewer without a window: `cargo bench -p viewer --bench scale [-- A.json [B.json]]`.
//!
//! Without arguments it writes two synthetic 10,000-token traces at dispatch level
//! (`profiler::synthetic_trace`: primitive kernels submitted per layer, and fused kernels
//! submitted per token) into a temporary directory. It then measures what opening costs (reading
//! both traces in parallel as the app does, and the profiler analysis behind the Summary), and
//! what a frame of the token timeline and of the per-token plots costs in a headless egui
//! context: building the UI (viewer code and egui layout) and tessellating it into triangles.
//! Painting those triangles is the GPU's (or llvmpipe's) work and is measured by
//! `viewer --bench-frames N` in a real window. Nothing here is asserted; it prints figures.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, bail};
use eframe::egui;

use viewer::logic::{self, Selection, Session, SlotId};
use viewer::panels;

const FRAMES: usize = 200;

fn write_synthetic(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for (name, kernels, submit) in [
        (
            "generic.json",
            profiler::SynthKernels::Primitive,
            profiler::SynthSubmit::PerLayer,
        ),
        (
            "fused.json",
            profiler::SynthKernels::Fused,
            profiler::SynthSubmit::PerToken,
        ),
    ] {
        let t = profiler::synthetic_trace(&profiler::SynthOptions {
            decode_tokens: 10_000,
            kernels,
            submit,
            ..profiler::SynthOptions::default()
        });
        let path = dir.join(name);
        profiler::write_trace(&path, &t)?;
        out.push(path);
    }
    Ok(out)
}

fn summary(name: &str, ms: &mut [f64]) {
    ms.sort_by(f64::total_cmp);
    let mean = ms.iter().sum::<f64>() / ms.len().max(1) as f64;
    let p95 = ms[((ms.len() - 1) as f64 * 0.95).round() as usize];
    println!(
        "  {name:<34} mean {mean:6.2} ms   p95 {p95:6.2} ms   max {:6.2} ms",
        ms[ms.len() - 1]
    );
}

fn frames(title: &str, mut ui: impl FnMut(&mut egui::Ui, usize)) {
    let ctx = egui::Context::default();
    let input = || egui::RawInput {
        screen_rect: Some(egui::Rect::from_min_size(
            egui::Pos2::ZERO,
            egui::vec2(1600.0, 1000.0),
        )),
        ..Default::default()
    };
    let (mut build, mut tess, mut vertices) = (Vec::new(), Vec::new(), 0usize);
    for frame in 0..FRAMES + 5 {
        let t0 = Instant::now();
        let out = ctx.run(input(), |ctx| {
            egui::CentralPanel::default().show(ctx, |ui_| ui(ui_, frame));
        });
        let t1 = Instant::now();
        let prims = ctx.tessellate(out.shapes, out.pixels_per_point);
        let t2 = Instant::now();
        // The first frames build the font atlas.
        if frame >= 5 {
            build.push((t1 - t0).as_secs_f64() * 1e3);
            tess.push((t2 - t1).as_secs_f64() * 1e3);
            vertices = prims
                .iter()
                .map(|p| match &p.primitive {
                    egui::epaint::Primitive::Mesh(m) => m.vertices.len(),
                    egui::epaint::Primitive::Callback(_) => 0,
                })
                .sum();
        }
    }
    println!("{title} ({FRAMES} frames of 1600x1000, {vertices} vertices):");
    summary("build UI (viewer + egui layout)", &mut build);
    summary("tessellate", &mut tess);
    let mut total: Vec<f64> = build.iter().zip(&tess).map(|(a, b)| a + b).collect();
    summary("both", &mut total);
}

fn main() -> anyhow::Result<()> {
    let args: Vec<PathBuf> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .map(PathBuf::from)
        .collect();
    let tmp = tempfile::tempdir().context("create a temporary directory")?;
    let paths = if args.is_empty() {
        println!("writing two synthetic 10,000-token traces…");
        write_synthetic(tmp.path())?
    } else {
        args
    };
    if paths.len() > 2 {
        bail!("give at most two traces: A and B");
    }

    // Opening: both traces read on their own threads, as the app does.
    let started = Instant::now();
    let mut session = Session::new();
    let tickets: Vec<_> = SlotId::BOTH
        .iter()
        .zip(&paths)
        .map(|(s, p)| session.begin_load(*s, p))
        .collect();
    let handles: Vec<_> = tickets
        .iter()
        .map(|t| {
            let path = t.path.clone();
            std::thread::spawn(move || logic::load_trace(&path))
        })
        .collect();
    for (t, h) in tickets.iter().zip(handles) {
        let result = h
            .join()
            .map_err(|_| anyhow::anyhow!("the loading thread panicked"))?;
        if let Err(e) = &result {
            bail!("{e}");
        }
        session.finish_load(t, result);
    }
    let loaded = started.elapsed();
    for s in SlotId::BOTH {
        if let Some(t) = session.loaded(s) {
            let spans: usize = t
                .trace
                .tokens
                .iter()
                .map(|r| r.host_spans.len() + r.gpu_spans.len())
                .sum();
            let bytes = std::fs::metadata(&t.path).map(|m| m.len()).unwrap_or(0);
            println!(
                "{}: {} steps, {spans} spans, {:.0} MB: read + parse + series {:.2} s",
                s.name(),
                t.trace.tokens.len(),
                bytes as f64 / 1e6,
                t.load_time.as_secs_f64()
            );
        }
    }
    println!(
        "open: both traces loaded in parallel in {:.2} s",
        loaded.as_secs_f64()
    );
    let t0 = Instant::now();
    let analysis = logic::analyse(
        session.loaded(SlotId::A).map(|t| t.as_ref()),
        session.loaded(SlotId::B).map(|t| t.as_ref()),
    );
    println!(
        "analysis (profiler {} for the Summary and Op breakdown, on its own thread in the app): \
         {:.2} s",
        if paths.len() == 2 { "diff" } else { "stats" },
        t0.elapsed().as_secs_f64()
    );
    drop(analysis);

    let al = session.alignment();
    let row = al.decode_row(5_000).unwrap_or(0);
    let selection = Selection::single(row);
    let mut timeline = panels::timeline::TimelineState::default();
    frames("token timeline (decode 5000)", |ui, _| {
        timeline.bench_nudge();
        panels::timeline::ui(ui, &session, &selection, &mut timeline);
    });
    let mut sel = selection;
    let mut settings = logic::Settings::default();
    frames("per-token plots (all 10,001 steps visible)", |ui, _| {
        panels::plots::ui(ui, &session, &mut sel, &mut settings);
    });
    Ok(())
}
