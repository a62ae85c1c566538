//! `viewer`: the decodescope desktop viewer.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{Context, bail};
use clap::Parser;
use eframe::egui;

use viewer::logic::OpView;
use viewer::{AutoRun, Panel, ViewerApp, ViewerOptions};

/// Compare two decodescope captures side by side.
///
/// Opens one or two traces (A is the baseline). Without a display, run the screenshot and bench
/// modes under `xvfb-run -a`.
#[derive(Parser, Debug)]
#[command(name = "viewer", version)]
struct Cli {
    /// Trace A (the baseline).
    a: Option<PathBuf>,
    /// Trace B.
    b: Option<PathBuf>,
    /// Render the window once the traces are loaded, save it as a PNG, and exit.
    #[arg(long, value_name = "OUT.png")]
    screenshot: Option<PathBuf>,
    /// The panel to show: summary, plots, timeline, ops or flamegraph.
    #[arg(long, value_name = "NAME", value_parser = parse_panel)]
    panel: Option<Panel>,
    /// Select this decode token (0-based) instead of the first analysed one.
    #[arg(long, value_name = "N")]
    token: Option<usize>,
    /// The Op breakdown's rows: `label` (per folded label) or `kind` (per op kind: matvec,
    /// norm, ...). Without it the panel opens by kind when the labels of A and B do not line up
    /// (a foreign program's capture against the decoder's), else by label.
    #[arg(long, value_name = "VIEW", value_parser = parse_op_view)]
    op_view: Option<OpView>,
    /// A TOML file of op-kind rules for a foreign program's dispatch names, tried before the
    /// built-in rules (as `profiler stats --op-kinds`; see profiler/TRACE_FORMAT.md, "Op kinds").
    #[arg(long, value_name = "FILE")]
    op_kinds: Option<PathBuf>,
    /// Window size for --screenshot and --bench-frames, in pixels.
    #[arg(long, value_name = "WxH", default_value = "1600x1000", value_parser = parse_size)]
    size: [f32; 2],
    /// Report the load time, then redraw the token timeline N times and report frame times.
    #[arg(long, value_name = "N", conflicts_with = "screenshot")]
    bench_frames: Option<usize>,
}

fn parse_panel(s: &str) -> Result<Panel, String> {
    Panel::from_name(s).ok_or_else(|| {
        let names: Vec<&str> = Panel::ALL.iter().map(|p| p.name()).collect();
        format!("unknown panel `{s}`; use one of {}", names.join(", "))
    })
}

fn parse_op_view(s: &str) -> Result<OpView, String> {
    OpView::from_name(s).ok_or_else(|| {
        let names: Vec<&str> = OpView::ALL.iter().map(|v| v.name()).collect();
        format!("unknown op view `{s}`; use one of {}", names.join(", "))
    })
}

fn parse_size(s: &str) -> Result<[f32; 2], String> {
    let err = || format!("`{s}` is not a size like 1600x1000");
    let (w, h) = s.split_once('x').ok_or_else(err)?;
    let w: u32 = w.trim().parse().map_err(|_| err())?;
    let h: u32 = h.trim().parse().map_err(|_| err())?;
    if !(200..=8192).contains(&w) || !(200..=8192).contains(&h) {
        return Err(format!(
            "`{s}`: width and height must be between 200 and 8192"
        ));
    }
    Ok([w as f32, h as f32])
}

fn main() -> anyhow::Result<()> {
    let started = Instant::now();
    let cli = Cli::parse();
    // A bad rule file is reported before a window opens.
    let op_kinds = profiler::KindRules::from_options(cli.op_kinds.as_deref(), true)?;
    let auto = match (&cli.screenshot, cli.bench_frames) {
        (Some(out), _) => Some(AutoRun::Screenshot { out: out.clone() }),
        (None, Some(frames)) => Some(AutoRun::Bench { frames }),
        (None, None) => None,
    };
    let paths: Vec<PathBuf> = [cli.a.clone(), cli.b.clone()]
        .into_iter()
        .flatten()
        .collect();
    if auto.is_some() && paths.is_empty() {
        bail!(
            "--screenshot and --bench-frames need at least one trace: viewer --screenshot OUT.png A.json [B.json]"
        );
    }
    let mut viewport = egui::ViewportBuilder::default()
        .with_title("decodescope viewer")
        .with_app_id("decodescope-viewer")
        .with_drag_and_drop(true);
    viewport = if auto.is_some() {
        viewport.with_inner_size(cli.size).with_resizable(false)
    } else {
        viewport.with_inner_size([1500.0, 950.0])
    };
    let native = eframe::NativeOptions {
        viewport,
        renderer: eframe::Renderer::Glow,
        // Frame times are measured without waiting for the display.
        vsync: !matches!(auto, Some(AutoRun::Bench { .. })),
        persist_window: auto.is_none(),
        ..Default::default()
    };
    let outcome = Arc::new(Mutex::new(None));
    let app_outcome = Arc::clone(&outcome);
    let options = ViewerOptions {
        paths,
        panel: cli.panel,
        token: cli.token,
        op_view: cli.op_view,
        op_kinds,
        auto: auto.clone(),
        started: Some(started),
    };
    eframe::run_native(
        "decodescope-viewer",
        native,
        Box::new(move |cc| Ok(Box::new(ViewerApp::new(cc, options, app_outcome)))),
    )
    .map_err(|e| anyhow::anyhow!("{e}"))
    .context(
        "could not open the viewer window (is DISPLAY set? without a display, run it under \
         `xvfb-run -a`)",
    )?;
    if auto.is_some() {
        let result = outcome
            .lock()
            .map_err(|_| anyhow::anyhow!("the viewer's result was lost (a thread panicked)"))?
            .take();
        match result {
            Some(Ok(report)) => println!("{}", report.trim_end()),
            Some(Err(e)) => bail!("{e}"),
            None => bail!("the window closed before the screenshot or benchmark finished"),
        }
    }
    Ok(())
}
