//! The viewer's window under Xvfb: every panel renders the two `tiny` captures into a PNG of the
//! requested size that is not blank, and a malformed trace shows the error banner while the app
//! keeps running (and still renders the other trace).
//!
//! Needs `xvfb-run` (`scripts/setup.sh` installs it; CI has it). Without it the tests fail with a
//! message saying so rather than pass without checking anything.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use viewer::Panel;

/// xvfb-run picks a free display with `-a`, but two starting at the same instant can race for it:
/// run one at a time.
static XVFB: Mutex<()> = Mutex::new(());

const SIZE: [u32; 2] = [1600, 1000];

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

fn xvfb_run() -> PathBuf {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("xvfb-run"))
            .find(|p| p.is_file())
    });
    match found {
        Some(p) => p,
        None => panic!(
            "FAILURE: xvfb-run is not installed, so the viewer's window cannot be tested. Install \
             it (scripts/setup.sh does: apt-get install xvfb xauth libgl1 libegl1 \
             libgl1-mesa-dri libxkbcommon-x11-0) and run the tests again."
        ),
    }
}

/// Runs `viewer --screenshot OUT --panel PANEL TRACES...` under Xvfb and returns the decoded PNG
/// and the viewer's output.
fn screenshot(out: &Path, panel: Panel, traces: &[PathBuf]) -> (image::RgbaImage, String) {
    screenshot_with(out, panel, &[], traces)
}

/// [`screenshot`] with more options (`--op-view kind`).
fn screenshot_with(
    out: &Path,
    panel: Panel,
    options: &[&str],
    traces: &[PathBuf],
) -> (image::RgbaImage, String) {
    let xvfb = xvfb_run();
    let _one_at_a_time = XVFB.lock().unwrap_or_else(|e| e.into_inner());
    let mut cmd = Command::new(xvfb);
    cmd.args(["-a", "-s", "-screen 0 1920x1200x24"])
        .arg(env!("CARGO_BIN_EXE_viewer"))
        .arg("--screenshot")
        .arg(out)
        .args(["--panel", panel.name()])
        .args(options)
        .arg("--size")
        .arg(format!("{}x{}", SIZE[0], SIZE[1]))
        .args(traces)
        // One physical pixel per point, whatever the X server reports.
        .env("WINIT_X11_SCALE_FACTOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("start xvfb-run");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the viewer") {
            break status;
        }
        if started.elapsed() > Duration::from_secs(240) {
            let _ = child.kill();
            panic!("the viewer took more than 240 s to take a screenshot of {panel:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let output = child.wait_with_output().expect("viewer output");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        status.success(),
        "viewer failed for {panel:?}: {status}\n{text}"
    );
    let img = image::open(out)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}\n{text}", out.display()))
        .to_rgba8();
    (img, text)
}

fn distinct_colours(img: &image::RgbaImage) -> usize {
    img.pixels()
        .map(|p| p.0)
        .collect::<HashSet<[u8; 4]>>()
        .len()
}

/// Pixels of exactly `c` (the error banner is filled with one colour).
fn pixels_of(img: &image::RgbaImage, c: eframe::egui::Color32) -> usize {
    let want = [c.r(), c.g(), c.b()];
    img.pixels().filter(|p| p.0[..3] == want).count()
}

#[test]
fn every_panel_renders_two_real_captures() {
    let dir = tempfile::tempdir().expect("tempdir");
    let traces = [data("generic.json"), data("fused.json")];
    for panel in Panel::ALL {
        let out = dir.path().join(format!("{}.png", panel.name()));
        let (img, text) = screenshot(&out, panel, &traces);
        assert_eq!(
            img.dimensions(),
            (SIZE[0], SIZE[1]),
            "{panel:?}: the screenshot has the window's size"
        );
        let colours = distinct_colours(&img);
        assert!(
            colours > 50,
            "{panel:?}: only {colours} distinct colours, the window looks blank"
        );
        assert_eq!(
            pixels_of(&img, viewer::theme::ERROR_FILL),
            0,
            "{panel:?}: an error banner is shown for good traces\n{text}"
        );
        assert!(text.contains("wrote"), "{text}");
    }
}

#[test]
fn the_op_breakdown_renders_by_label_and_by_kind() {
    let dir = tempfile::tempdir().expect("tempdir");
    let traces = [data("generic.json"), data("fused.json")];
    for view in ["label", "kind"] {
        let out = dir.path().join(format!("ops-{view}.png"));
        let (img, text) = screenshot_with(&out, Panel::Ops, &["--op-view", view], &traces);
        assert_eq!(img.dimensions(), (SIZE[0], SIZE[1]));
        let colours = distinct_colours(&img);
        assert!(
            colours > 50,
            "{view}: only {colours} distinct colours\n{text}"
        );
        // Both sides' bars are drawn.
        for c in [viewer::theme::A_COLOR, viewer::theme::B_COLOR] {
            let n = pixels_of(&img, c);
            assert!(n > 200, "{view}: {n} pixels of {c:?}");
        }
    }
}

#[test]
fn a_malformed_trace_shows_an_error_and_the_app_keeps_running() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A is cut short; B is good and must still be shown.
    let out = dir.path().join("malformed.png");
    let (img, _) = screenshot(
        &out,
        Panel::Plots,
        &[data("truncated.json"), data("fused.json")],
    );
    assert_eq!(img.dimensions(), (SIZE[0], SIZE[1]));
    let banner = pixels_of(&img, viewer::theme::ERROR_FILL);
    assert!(
        banner > 5_000,
        "the error banner should be visible, found {banner} pixels of its colour"
    );
    // B's plots are drawn below the banner.
    let orange = pixels_of(&img, viewer::theme::B_COLOR);
    assert!(
        orange > 200,
        "B's lines should be drawn, found {orange} pixels"
    );
}
