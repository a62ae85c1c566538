//! `decoder plot`: PNG plots of a `decoder bench` result (`bench.json`), which the bench also
//! draws when it finishes: decode tokens/s against context for every setting, KV layout and
//! batch size (and llama.cpp when it ran beside), the share of the memory roofline against
//! context, attention GPU time per step against context, and bars of every setting (presets and
//! single-knob flips) and timestamp level at each context. A run on a CPU device says so on every
//! plot. Text is drawn with the Ubuntu Light font that egui embeds, so no system font is needed.

use std::path::{Path, PathBuf};
use std::sync::Once;

use anyhow::Context as _;
use plotters::coord::Shift;
use plotters::prelude::*;
use serde::Deserialize;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// A `bench.json` written by `decoder bench`.
    pub bench: PathBuf,
    /// Folder for the PNG files (default: the folder of `bench.json`).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&args.bench)
        .with_context(|| format!("cannot read {}", args.bench.display()))?;
    let json: serde_json::Value = serde_json::from_str(&text).with_context(|| {
        format!(
            "{} is not JSON (expected the bench.json that `decoder bench` writes)",
            args.bench.display()
        )
    })?;
    let out = match args.out {
        Some(o) => o,
        None => args
            .bench
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default(),
    };
    std::fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
    let files =
        render(&json, &out).with_context(|| format!("plotting {}", args.bench.display()))?;
    for f in files {
        println!("{}", f.display());
    }
    Ok(())
}

/// The fields of a bench row the plots use.
#[derive(Clone, Debug, Deserialize)]
struct PlotRow {
    setting: String,
    kv: String,
    #[serde(default)]
    paged_attention: String,
    batch: u32,
    context: usize,
    #[serde(default)]
    timestamps: String,
    tokens_per_s: f64,
    #[serde(default)]
    attention_gpu_us: Option<f64>,
    #[serde(default)]
    roofline_share: Option<f64>,
    #[serde(default)]
    achieved_gbps: f64,
}

#[derive(Clone, Debug, Deserialize)]
struct PeerRow {
    runtime: String,
    context: usize,
    tokens_per_s: f64,
}

#[derive(Debug, Deserialize)]
struct BenchFile {
    #[serde(default)]
    device: String,
    #[serde(default)]
    device_type: String,
    #[serde(default)]
    model: String,
    rows: Vec<PlotRow>,
    #[serde(default)]
    peers: Vec<PeerRow>,
    #[serde(default)]
    bandwidth: Option<serde_json::Value>,
}

impl PlotRow {
    /// The series a row belongs to on the plots against context.
    fn series(&self, levels: usize) -> String {
        let mut s = format!("{} {}", self.setting, self.kv);
        if !self.paged_attention.is_empty() {
            s.push(' ');
            s.push_str(&self.paged_attention);
        }
        s.push_str(&format!(" b{}", self.batch));
        if levels > 1 {
            s.push_str(&format!(" ts:{}", self.timestamps));
        }
        s
    }
}

const W: u32 = 1100;
const H: u32 = 680;

static FONT: Once = Once::new();

fn register_font() {
    FONT.call_once(|| {
        // The bytes are a valid TrueType font compiled into epaint; registration cannot fail
        // for them, and a failure would only cost the plots their text.
        let _ = plotters::style::register_font(
            "sans-serif",
            FontStyle::Normal,
            epaint_default_fonts::UBUNTU_LIGHT,
        );
    });
}

/// Draws every plot `json` (a bench.json) supports into `out` and returns the files written.
pub fn render(json: &serde_json::Value, out: &Path) -> anyhow::Result<Vec<PathBuf>> {
    register_font();
    let bench: BenchFile = serde_json::from_value(json.clone())
        .context("bench.json lacks a field the plots need (rows with setting, kv, batch, context, tokens_per_s)")?;
    if bench.rows.is_empty() {
        anyhow::bail!("bench.json has no rows to plot");
    }
    let mut levels: Vec<&str> = bench.rows.iter().map(|r| r.timestamps.as_str()).collect();
    levels.sort_unstable();
    levels.dedup();
    let first_level = bench.rows[0].timestamps.clone();
    let footer = footer(&bench);
    let mut files = vec![];
    let contexts: Vec<usize> = {
        let mut c: Vec<usize> = bench.rows.iter().map(|r| r.context).collect();
        c.sort_unstable();
        c.dedup();
        c
    };

    // Plots against context: one series per setting, layout, path and batch, at the first
    // timestamp level (the others are the bars' business).
    let at_level: Vec<&PlotRow> = bench
        .rows
        .iter()
        .filter(|r| r.timestamps == first_level)
        .collect();
    if contexts.len() > 1 {
        let mut tps = series(&at_level, |r| Some(r.tokens_per_s));
        for p in &bench.peers {
            push_point(&mut tps, &p.runtime, p.context, p.tokens_per_s);
        }
        files.push(line_plot(
            out,
            "tokens-per-s.png",
            "decode tokens/s against context",
            "decode tokens/s (sequence-tokens per second)",
            &tps,
            &footer,
        )?);
        let att = series(&at_level, |r| r.attention_gpu_us);
        if !att.is_empty() {
            files.push(line_plot(
                out,
                "attention.png",
                "attention GPU time per decode step against context",
                "attention GPU us per step",
                &att,
                &footer,
            )?);
        }
        let roof = series(&at_level, |r| r.roofline_share.map(|v| 100.0 * v));
        if !roof.is_empty() {
            files.push(line_plot(
                out,
                "roofline.png",
                "share of the memory roofline (bytes per step / wall time / probe read GB/s)",
                "% of the probe's read bandwidth",
                &roof,
                &footer,
            )?);
        } else {
            let gbps = series(&at_level, |r| Some(r.achieved_gbps));
            files.push(line_plot(
                out,
                "roofline.png",
                "achieved GB/s (bytes per step / wall time; no bandwidth probe in this run)",
                "GB/s",
                &gbps,
                &footer,
            )?);
        }
    }

    // Bars: every setting and timestamp level at each context (batch 1, the first KV setting).
    for &c in &contexts {
        let rows: Vec<&PlotRow> = bench
            .rows
            .iter()
            .filter(|r| r.context == c && r.batch == bench.rows[0].batch)
            .filter(|r| {
                r.kv == bench.rows[0].kv && r.paged_attention == bench.rows[0].paged_attention
            })
            .collect();
        let mut bars: Vec<(String, f64, Option<f64>)> = rows
            .iter()
            .map(|r| {
                let name = if levels.len() > 1 {
                    format!("{} (timestamps {})", r.setting, r.timestamps)
                } else {
                    r.setting.clone()
                };
                (name, r.tokens_per_s, r.roofline_share)
            })
            .collect();
        for p in bench.peers.iter().filter(|p| p.context == c) {
            bars.push((p.runtime.clone(), p.tokens_per_s, None));
        }
        if bars.len() > 1 {
            files.push(bar_plot(
                out,
                &format!("settings-c{c}.png"),
                &format!(
                    "decode tokens/s at context {c}, batch {} ({})",
                    bench.rows[0].batch, bench.rows[0].kv
                ),
                &bars,
                &footer,
            )?);
        }
    }
    Ok(files)
}

/// Series label -> points (context, value), in first-seen order.
type Series = Vec<(String, Vec<(f64, f64)>)>;

fn push_point(s: &mut Series, name: &str, x: usize, y: f64) {
    match s.iter_mut().find(|(n, _)| n == name) {
        Some((_, pts)) => pts.push((x as f64, y)),
        None => s.push((name.to_string(), vec![(x as f64, y)])),
    }
}

fn series(rows: &[&PlotRow], value: impl Fn(&PlotRow) -> Option<f64>) -> Series {
    let mut levels: Vec<&str> = rows.iter().map(|r| r.timestamps.as_str()).collect();
    levels.sort_unstable();
    levels.dedup();
    let mut s = Series::new();
    for r in rows {
        if let Some(v) = value(r) {
            push_point(&mut s, &r.series(levels.len()), r.context, v);
        }
    }
    for (_, pts) in &mut s {
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    s
}

fn footer(b: &BenchFile) -> (String, bool) {
    let cpu = b.device_type == "cpu";
    let mut text = format!("{} on {}", b.model, b.device);
    if let Some(bw) = b
        .bandwidth
        .as_ref()
        .and_then(|v| v.get("read_gbps"))
        .and_then(|v| v.as_f64())
    {
        text.push_str(&format!(", probe read bandwidth {bw:.0} GB/s"));
    }
    if cpu {
        text.push_str(" - a CPU device: CPU times, not GPU performance");
    }
    (text, cpu)
}

const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// One PNG of W x H: a white canvas whose plot area (all but the footer strip) `draw` fills,
/// the footer line, then the file written whole (`save`).
fn png(
    out: &Path,
    name: &str,
    footer: &(String, bool),
    draw: impl FnOnce(&DrawingArea<BitMapBackend<'_>, Shift>) -> anyhow::Result<()>,
) -> anyhow::Result<PathBuf> {
    let mut buf = vec![0u8; (W * H * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut buf, (W, H)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e}"))?;
        let (plot, _) = root.split_vertically(H - 36);
        draw(&plot)?;
        draw_footer(&root, footer)?;
        root.present().map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    save(out, name, buf)
}

fn draw_footer(
    root: &DrawingArea<BitMapBackend<'_>, Shift>,
    footer: &(String, bool),
) -> anyhow::Result<()> {
    let color = if footer.1 { RED } else { BLACK };
    root.draw(&Text::new(
        footer.0.clone(),
        (12, H as i32 - 24),
        ("sans-serif", 16).into_font().color(&color),
    ))
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(())
}

fn save(out: &Path, name: &str, buf: Vec<u8>) -> anyhow::Result<PathBuf> {
    anyhow::ensure!(
        buf.len() == (W * H * 3) as usize,
        "plot buffer of the wrong size"
    );
    let path = out.join(name);
    profiler::io::write_output(&path, |w| {
        let mut enc = png::Encoder::new(w, W, H);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let mut png = enc.write_header().map_err(std::io::Error::other)?;
        png.write_image_data(&buf).map_err(std::io::Error::other)?;
        png.finish().map_err(std::io::Error::other)
    })
    .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

fn line_plot(
    out: &Path,
    name: &str,
    title: &str,
    y_desc: &str,
    series: &Series,
    footer: &(String, bool),
) -> anyhow::Result<PathBuf> {
    png(out, name, footer, |plot| {
        let xs = series.iter().flat_map(|(_, p)| p.iter().map(|q| q.0));
        let (x0, x1) = xs.fold((f64::INFINITY, 0f64), |(a, b), x| (a.min(x), b.max(x)));
        let y1 = series
            .iter()
            .flat_map(|(_, p)| p.iter().map(|q| q.1))
            .fold(0f64, f64::max)
            .max(1e-9)
            * 1.1;
        let x0 = x0.max(1.0);
        let x1 = x1.max(x0 * 2.0);
        // One tick per measured context, whatever the range.
        let mut contexts: Vec<f64> = series
            .iter()
            .flat_map(|(_, p)| p.iter().map(|q| q.0))
            .collect();
        contexts.sort_by(f64::total_cmp);
        contexts.dedup();
        let mut chart = ChartBuilder::on(plot)
            .caption(title, ("sans-serif", 24))
            .margin(16)
            .x_label_area_size(48)
            .y_label_area_size(80)
            .build_cartesian_2d(
                (x0 / 1.3..x1 * 1.3).log_scale().with_key_points(contexts),
                0f64..y1,
            )
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        chart
            .configure_mesh()
            .x_desc("context (tokens in the KV cache when decoding starts)")
            .y_desc(y_desc)
            .x_label_formatter(&|v| {
                if *v >= 1024.0 {
                    format!("{:.0}K", v / 1024.0)
                } else {
                    format!("{v:.0}")
                }
            })
            .label_style(("sans-serif", 15))
            .axis_desc_style(("sans-serif", 17))
            .draw()
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        for (i, (label, pts)) in series.iter().enumerate() {
            let color = PALETTE[i % PALETTE.len()];
            let dashed = label.starts_with("llama.cpp");
            let style = color.stroke_width(if dashed { 4 } else { 2 });
            chart
                .draw_series(LineSeries::new(pts.iter().copied(), style))
                .map_err(|e| anyhow::anyhow!("{e}"))?
                .label(label.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], style));
            chart
                .draw_series(pts.iter().map(|p| Circle::new(*p, 4, color.filled())))
                .map_err(|e| anyhow::anyhow!("{e}"))?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 15))
            .position(SeriesLabelPosition::UpperRight)
            .draw()
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok(())
    })
}

fn bar_plot(
    out: &Path,
    name: &str,
    title: &str,
    bars: &[(String, f64, Option<f64>)],
    footer: &(String, bool),
) -> anyhow::Result<PathBuf> {
    png(out, name, footer, |plot| {
        let x1 = bars.iter().map(|b| b.1).fold(0f64, f64::max).max(1e-9) * 1.25;
        let n = bars.len();
        let names: Vec<String> = bars.iter().map(|b| b.0.clone()).collect();
        let label_width =
            names.iter().map(|s| s.chars().count()).max().unwrap_or(8) as u32 * 8 + 16;
        let mut chart = ChartBuilder::on(plot)
            .caption(title, ("sans-serif", 24))
            .margin(16)
            .x_label_area_size(48)
            .y_label_area_size(label_width.min(W / 2))
            .build_cartesian_2d(0f64..x1, -0.5f64..(n as f64 - 0.5))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(n)
            .y_label_formatter(&|v| {
                let i = v.round();
                if (v - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < names.len() {
                    names[n - 1 - i as usize].clone()
                } else {
                    String::new()
                }
            })
            .x_desc("decode tokens/s")
            .label_style(("sans-serif", 15))
            .axis_desc_style(("sans-serif", 17))
            .draw()
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        for (k, (label, v, roof)) in bars.iter().enumerate() {
            // First bar on top.
            let y = (n - 1 - k) as f64;
            let color = if label.starts_with("llama.cpp") {
                PALETTE[1]
            } else {
                PALETTE[0]
            };
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(0.0, y - 0.35), (*v, y + 0.35)],
                    color.filled(),
                )))
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            let text = match roof {
                Some(r) => format!("{v:.0}  ({:.0}% of roofline)", 100.0 * r),
                None => format!("{v:.0}"),
            };
            chart
                .draw_series(std::iter::once(Text::new(
                    text,
                    (*v + x1 * 0.01, y + 0.15),
                    ("sans-serif", 15).into_font(),
                )))
                .map_err(|e| anyhow::anyhow!("{e}"))?;
        }
        Ok(())
    })
}
