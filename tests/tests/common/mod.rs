//! Helpers shared by the end-to-end tests: the workspace root and its freshly built binaries.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A workspace binary or the capture layer's library, next to this test's own executable. The
/// decoder, the profiler, the layer and `wgpu-step` (the capture layer's second Vulkan program)
/// are built once per test run, so a stale one is never tested.
pub fn built(name: &str) -> PathBuf {
    static BUILT: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    BUILT.get_or_init(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args([
                "build",
                "--quiet",
                "-p",
                "decoder",
                "-p",
                "profiler",
                "-p",
                "decodescope-layer",
                "-p",
                "wgpu-step",
            ])
            .current_dir(root())
            .status()
            .expect("run cargo build");
        assert!(
            status.success(),
            "building the decoder, the profiler, the layer and wgpu-step failed"
        );
    });
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target directory");
    let p = dir.join(name);
    assert!(p.exists(), "{} is missing after the build", p.display());
    p
}

/// `profiler stats TRACE` exits 0 and its table lists the dispatches.
// Each test binary compiles this module and uses some of it (ci_gates does not run stats).
#[allow(dead_code)]
pub fn assert_stats_list_dispatches(trace: &Path) {
    let stats = Command::new(built("profiler"))
        .arg("stats")
        .arg(trace)
        .output()
        .expect("stats");
    assert!(stats.status.success());
    assert!(String::from_utf8_lossy(&stats.stdout).contains("dispatches"));
}

/// Every polling loop of these tests: calls `step` every `every` until it returns a value. After
/// `limit` it kills `child` (the process the loop watches, so that nothing outlives the test) and
/// fails naming `what` it waited for.
#[allow(dead_code)]
pub fn poll<T>(
    child: &mut Child,
    what: &str,
    limit: Duration,
    every: Duration,
    mut step: impl FnMut(&mut Child) -> Option<T>,
) -> T {
    let started = Instant::now();
    loop {
        if let Some(done) = step(child) {
            return done;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: not there after {} s", limit.as_secs());
        }
        std::thread::sleep(every);
    }
}
