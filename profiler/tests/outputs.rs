//! The one writer of every output (`profiler::write_output`) and the check that runs before any
//! work (`profiler::check_output`): a regular file or a missing path is replaced atomically; a
//! character device or a FIFO is written in place and never replaced; a symbolic link to a file
//! is followed and kept; a directory, a dangling link or an output whose directory is missing is
//! refused with a sentence that names the path (and the flag).

mod common;

use std::io::Write as _;
use std::os::unix::fs::{FileTypeExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{fixture_path, run_profiler};
use profiler::{OutputTarget, check_output, output_target, write_output, write_trace};

fn small_trace() -> profiler::Trace {
    profiler::synthetic_trace(&profiler::SynthOptions {
        layers: 1,
        prompt_tokens: 2,
        decode_tokens: 3,
        ..profiler::SynthOptions::default()
    })
}

fn write_text(path: &Path, text: &str) -> std::io::Result<()> {
    write_output(path, |w| w.write_all(text.as_bytes()))
}

/// The hidden temporary and probe files a writer might leave beside its output.
fn leftovers(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with('.'))
        })
        .collect();
    v.sort();
    v
}

fn mknod_null(path: &Path) -> bool {
    // /dev/null's numbers (1, 3): writes are discarded. Needs root (CAP_MKNOD).
    Command::new("mknod")
        .arg(path)
        .args(["c", "1", "3"])
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn a_regular_file_is_replaced_atomically_with_its_permissions() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("t.json");
    std::fs::write(&path, "old").expect("write");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).expect("chmod");
    write_text(&path, "new").expect("write_output");
    assert_eq!(std::fs::read_to_string(&path).expect("read"), "new");
    let mode = std::fs::metadata(&path).expect("meta").permissions().mode() & 0o777;
    assert_eq!(mode, 0o640);
    assert!(
        leftovers(dir.path()).is_empty(),
        "{:?}",
        leftovers(dir.path())
    );

    // A failing writer leaves the old contents and no temporary file.
    let err = write_output(&path, |w| {
        w.write_all(b"partial")?;
        Err::<(), _>(std::io::Error::other("stopped"))
    })
    .expect_err("the fill failed");
    assert_eq!(err.to_string(), "stopped");
    assert_eq!(std::fs::read_to_string(&path).expect("read"), "new");
    assert!(
        leftovers(dir.path()).is_empty(),
        "{:?}",
        leftovers(dir.path())
    );
}

#[test]
fn a_character_device_is_written_in_place_and_never_replaced() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = dir.path().join("null");
    if !mknod_null(&dev) {
        eprintln!("skipped: mknod needs root");
        return;
    }
    assert_eq!(
        output_target(&dev).expect("target"),
        OutputTarget::InPlace {
            what: "a character device"
        }
    );
    write_trace(&dev, &small_trace()).expect("write_trace");
    profiler::export_chrome(&small_trace(), &dev).expect("export_chrome");
    let meta = std::fs::symlink_metadata(&dev).expect("meta");
    assert!(meta.file_type().is_char_device(), "{meta:?}");
    assert!(
        leftovers(dir.path()).is_empty(),
        "{:?}",
        leftovers(dir.path())
    );
    check_output(&dev, "--out").expect("a device is a valid output");
}

#[test]
fn the_cli_export_into_a_device_leaves_the_device() {
    // The repro: `mknod /tmp/x c 1 3; profiler export --format chrome fused.json /tmp/x`.
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = dir.path().join("x");
    if !mknod_null(&dev) {
        eprintln!("skipped: mknod needs root");
        return;
    }
    fixture_path("fused");
    let out = run_profiler(&[
        "export",
        "--format",
        "chrome",
        "fused.json",
        dev.to_str().expect("utf-8"),
    ]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let meta = std::fs::symlink_metadata(&dev).expect("meta");
    assert!(meta.file_type().is_char_device(), "{meta:?}");
}

#[test]
fn a_fifo_is_written_in_place() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join("pipe");
    let ok = Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "mkfifo failed");
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read_to_string(fifo))
    };
    write_text(&fifo, "through the pipe").expect("write_output");
    let got = reader.join().expect("reader thread").expect("read fifo");
    assert_eq!(got, "through the pipe");
    let meta = std::fs::symlink_metadata(&fifo).expect("meta");
    assert!(meta.file_type().is_fifo(), "{meta:?}");
    // The check does not open it (that would block until a reader came).
    check_output(&fifo, "--out").expect("a FIFO is a valid output");
}

#[test]
fn a_symlink_to_a_file_is_followed_and_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let real_dir = dir.path().join("real");
    std::fs::create_dir(&real_dir).expect("mkdir");
    let target = real_dir.join("t.json");
    std::fs::write(&target, "old").expect("write");
    let link = dir.path().join("link.json");
    std::os::unix::fs::symlink(&target, &link).expect("symlink");
    write_text(&link, "new").expect("write_output");
    assert!(
        std::fs::symlink_metadata(&link)
            .expect("meta")
            .file_type()
            .is_symlink(),
        "the link itself was replaced"
    );
    assert_eq!(std::fs::read_to_string(&target).expect("read"), "new");
    assert!(
        leftovers(&real_dir).is_empty(),
        "{:?}",
        leftovers(&real_dir)
    );
    assert!(
        leftovers(dir.path()).is_empty(),
        "{:?}",
        leftovers(dir.path())
    );
}

#[test]
fn a_dangling_symlink_and_a_directory_are_refused_and_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let link = dir.path().join("dangling.json");
    std::os::unix::fs::symlink(dir.path().join("nowhere/x.json"), &link).expect("symlink");
    let err = write_text(&link, "x").expect_err("a dangling link");
    assert!(
        err.to_string().contains("symbolic link") && err.to_string().contains("nowhere"),
        "{err}"
    );
    assert!(
        std::fs::symlink_metadata(&link)
            .expect("meta")
            .file_type()
            .is_symlink()
    );

    let sub = dir.path().join("sub");
    std::fs::create_dir(&sub).expect("mkdir");
    let err = write_text(&sub, "x").expect_err("a directory");
    assert!(err.to_string().contains("is a directory"), "{err}");
    assert!(sub.is_dir());
    let err = check_output(&sub, "--out").expect_err("a directory");
    let msg = err.to_string();
    assert!(
        msg.contains("--out") && msg.contains("sub") && msg.contains("directory"),
        "{msg}"
    );
}

#[test]
fn the_check_names_the_flag_and_the_missing_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("nodir/x.json");
    let msg = check_output(&missing, "--out")
        .expect_err("missing directory")
        .to_string();
    assert!(
        msg.contains("--out")
            && msg.contains("nodir/x.json")
            && msg.contains("does not exist")
            && msg.contains("mkdir -p"),
        "{msg}"
    );
    // A path under a regular file.
    let file = dir.path().join("file");
    std::fs::write(&file, "x").expect("write");
    let msg = check_output(&file.join("x.json"), "OUT")
        .expect_err("not a directory")
        .to_string();
    assert!(
        msg.contains("OUT") && msg.contains("not a directory"),
        "{msg}"
    );
    // A good path passes and leaves nothing behind.
    check_output(&dir.path().join("ok.json"), "--out").expect("writable");
    assert!(
        leftovers(dir.path()).is_empty(),
        "{:?}",
        leftovers(dir.path())
    );
}

#[test]
fn record_refuses_an_unwritable_out_before_running_the_program() {
    // The repro: `profiler record --out /tmp/nodir/x.json -- decoder run ...` ran the
    // whole workload, then exited 2. The program must not run at all.
    let dir = tempfile::tempdir().expect("tempdir");
    let marker = dir.path().join("ran");
    let out_path = dir.path().join("nodir/x.json");
    let out = run_profiler(&[
        "record",
        "--out",
        out_path.to_str().expect("utf-8"),
        "--",
        "touch",
        marker.to_str().expect("utf-8"),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--out") && stderr.contains("nodir") && stderr.contains("does not exist"),
        "{stderr}"
    );
    assert!(
        !marker.exists(),
        "the program ran before the output was checked"
    );
}

#[test]
fn export_refuses_an_unwritable_out_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out_path = dir.path().join("nodir/x.json");
    fixture_path("fused");
    let out = run_profiler(&[
        "export",
        "--format",
        "chrome",
        "fused.json",
        out_path.to_str().expect("utf-8"),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("nodir") && stderr.contains("does not exist"),
        "{stderr}"
    );
}

#[test]
fn a_staged_output_appears_only_when_committed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = dir.path().join("generic.json");
    let b = dir.path().join("fused.json");
    std::fs::write(&a, "old a").expect("write");
    std::fs::write(&b, "old b").expect("write");
    // Both staged, the run fails before committing: both old files stay, no temporary is left.
    {
        let (_, sa) = profiler::stage_output(&a, |w| w.write_all(b"new a")).expect("stage a");
        let (_, _sb) = profiler::stage_output(&b, |w| w.write_all(b"new b")).expect("stage b");
        assert_eq!(std::fs::read_to_string(&a).expect("read"), "old a");
        drop(sa);
    }
    assert_eq!(std::fs::read_to_string(&a).expect("read"), "old a");
    assert_eq!(std::fs::read_to_string(&b).expect("read"), "old b");
    assert!(
        leftovers(dir.path()).is_empty(),
        "{:?}",
        leftovers(dir.path())
    );
    // Committed together: both new.
    let (_, sa) = profiler::stage_output(&a, |w| w.write_all(b"new a")).expect("stage a");
    let (_, sb) = profiler::stage_output(&b, |w| w.write_all(b"new b")).expect("stage b");
    sa.commit().expect("commit a");
    sb.commit().expect("commit b");
    assert_eq!(std::fs::read_to_string(&a).expect("read"), "new a");
    assert_eq!(std::fs::read_to_string(&b).expect("read"), "new b");
    assert!(
        leftovers(dir.path()).is_empty(),
        "{:?}",
        leftovers(dir.path())
    );
}
