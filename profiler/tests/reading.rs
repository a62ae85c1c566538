//! Robust reading and atomic writing of trace files.

mod common;

use profiler::{FORMAT_VERSION, TraceError, from_slice, read_trace, write_trace};
use serde_json::Value;

fn fixture_json() -> Value {
    let bytes = std::fs::read(common::fixture_path("generic")).expect("read fixture");
    serde_json::from_slice(&bytes).expect("fixture is JSON")
}

fn write_tmp(dir: &tempfile::TempDir, name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let p = dir.path().join(name);
    std::fs::write(&p, bytes).expect("write");
    p
}

#[test]
fn committed_v1_fixtures_read() {
    for name in common::FIXTURES {
        let t = common::fixture(name);
        assert_eq!(t.version, 1, "{name}");
        assert!(!t.tokens.is_empty(), "{name}");
    }
}

#[test]
fn newer_version_names_file_and_versions() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut v = fixture_json();
    v["version"] = Value::from(FORMAT_VERSION + 98);
    // A future version may also change the structure; the version is still what is reported.
    v["tokens"] = Value::from("restructured");
    let p = write_tmp(&dir, "future.json", &serde_json::to_vec(&v).expect("json"));
    let err = read_trace(&p).expect_err("newer version must fail");
    assert!(
        matches!(
            err,
            TraceError::NewerVersion {
                found: 99,
                newest: 1,
                ..
            }
        ),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("future.json") && msg.contains("version 99") && msg.contains("up to 1"),
        "{msg}"
    );
    // Same when it parses fine otherwise.
    let mut v = fixture_json();
    v["version"] = Value::from(2);
    let err = from_slice(&serde_json::to_vec(&v).expect("json")).expect_err("v2");
    assert!(
        matches!(err, TraceError::NewerVersion { found: 2, .. }),
        "{err:?}"
    );
}

#[test]
fn truncated_file_reports_the_byte_offset() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bytes = std::fs::read(common::fixture_path("generic")).expect("read");
    for cut in [
        1usize,
        10,
        bytes.len() / 3,
        bytes.len() / 2,
        bytes.len() - 2,
    ] {
        let p = write_tmp(&dir, "cut.json", &bytes[..cut]);
        let err = read_trace(&p).expect_err("truncated must fail");
        match &err {
            TraceError::Truncated { offset, .. } => assert_eq!(*offset, cut as u64),
            other => panic!("cut at {cut}: expected Truncated, got {other:?}"),
        }
        let msg = err.to_string();
        assert!(
            msg.contains("cut.json") && msg.contains(&format!("byte {cut}")),
            "{msg}"
        );
    }
}

#[test]
fn wrong_file_types_get_clear_messages() {
    let cases: [(&[u8], &str); 7] = [
        (b"", "empty"),
        (b"   \n", "empty"),
        (b"hello world", "does not start with a JSON object"),
        (b"\x1f\x8b\x08\x00", "gzip"),
        (b"{\"traceEvents\": []}", "Chrome trace-event file"),
        (
            b"{\"a\": 1}",
            "JSON without \"format\": \"decodescope-trace\"",
        ),
        (
            b"{\"format\": \"something-else\", \"version\": 1}",
            "\"format\" is \"something-else\"",
        ),
    ];
    for (bytes, expected) in cases {
        let err = from_slice(bytes).expect_err("must fail");
        assert!(matches!(err, TraceError::WrongType { .. }), "{err:?}");
        assert!(
            err.to_string().contains(expected),
            "{err} lacks {expected:?}"
        );
    }
    // Valid JSON but a wrong type inside a known field: offset and field named.
    let mut v = fixture_json();
    v["tokens"][0]["wall_ns"] = Value::from("slow");
    let text = serde_json::to_vec(&v).expect("json");
    let err = from_slice(&text).expect_err("bad field");
    match &err {
        TraceError::Invalid {
            offset, message, ..
        } => {
            assert!(message.contains("invalid type"), "{message}");
            let at = *offset as usize;
            assert!(at > 0 && at <= text.len());
        }
        other => panic!("expected Invalid, got {other:?}"),
    }
    // Broken syntax in the middle.
    let mut broken = serde_json::to_vec(&fixture_json()).expect("json");
    let mid = broken.len() / 2;
    broken[mid] = b'#';
    let err = from_slice(&broken).expect_err("syntax");
    assert!(matches!(err, TraceError::Invalid { .. }), "{err:?}");
}

#[test]
fn missing_optional_fields_take_documented_defaults() {
    let mut v = fixture_json();
    let meta = v["meta"].as_object_mut().expect("meta");
    meta.remove("clock");
    meta.remove("created_unix_ms");
    meta.remove("epoch_host_ns");
    let device = meta["device"].as_object_mut().expect("device");
    for k in [
        "device_type",
        "driver",
        "memory_bandwidth_gbps",
        "timestamp_period_ns",
    ] {
        device.remove(k);
    }
    let run = meta["run"].as_object_mut().expect("run");
    run.remove("generated_ids");
    run.remove("kv_layout");
    for op in v["ops"].as_array_mut().expect("ops") {
        let op = op.as_object_mut().expect("op");
        op.remove("bytes_written");
        op.remove("flops_per_kv");
    }
    for t in v["tokens"].as_array_mut().expect("tokens") {
        let t = t.as_object_mut().expect("token");
        t.remove("host_spans");
        t.remove("gpu_busy_ns");
        t.remove("host_wait_ns");
        t.remove("token_id");
        t["counters"] = serde_json::json!({ "dispatches": 7 });
    }
    let trace = from_slice(&serde_json::to_vec(&v).expect("json")).expect("defaults apply");
    assert!(!trace.meta.clock.calibrated);
    assert_eq!(trace.meta.device.memory_bandwidth_gbps, None);
    assert!(trace.meta.run.generated_ids.is_empty());
    let t = &trace.tokens[1];
    assert!(t.host_spans.is_empty() && t.gpu_busy_ns.is_none() && t.token_id.is_none());
    assert_eq!(t.counters.dispatches, 7);
    assert_eq!(t.counters.submits(), 0);
    // Analysis still works: GPU busy time falls back to the union of dispatch spans.
    let s = profiler::compute_stats(&trace, "x", &Default::default());
    let gpu = s
        .decode
        .as_ref()
        .and_then(|d| d.metric("gpu_us"))
        .expect("gpu_us from spans");
    assert!(gpu.summary.median > 0.0);
    assert!(s.ops.iter().all(|o| o.bandwidth_share.is_none()));
}

#[test]
fn op_index_out_of_range_is_inconsistent() {
    let mut v = fixture_json();
    v["tokens"][1]["gpu_spans"][0][0] = Value::from(100_000);
    let err = from_slice(&serde_json::to_vec(&v).expect("json")).expect_err("bad op");
    assert!(matches!(err, TraceError::Inconsistent { .. }), "{err:?}");
    assert!(err.to_string().contains("op 100000"), "{err}");
}

#[test]
fn write_is_atomic_and_round_trips() {
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = common::fixture("fused");
    let p = dir.path().join("out.json");
    write_trace(&p, &trace).expect("write");
    assert_eq!(read_trace(&p).expect("read back"), trace);
    // Overwrite in place.
    write_trace(&p, &trace).expect("overwrite");
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        vec!["out.json".to_owned()],
        "no temporary file left behind"
    );
    // A missing directory fails with the path in the message and leaves nothing.
    let bad = dir.path().join("missing").join("t.json");
    let err = write_trace(&bad, &trace).expect_err("missing dir");
    assert!(err.to_string().contains("missing/t.json"), "{err}");
    // Writing over a directory fails and removes the temporary file.
    let sub = dir.path().join("sub");
    std::fs::create_dir(&sub).expect("mkdir");
    std::fs::create_dir(sub.join("t.json")).expect("mkdir");
    assert!(write_trace(&sub.join("t.json"), &trace).is_err());
    let left: Vec<_> = std::fs::read_dir(&sub).expect("list").collect();
    assert_eq!(left.len(), 1, "only the directory remains");
}

#[test]
fn analysis_reader_equals_full_reader_without_host_spans() {
    for name in common::FIXTURES {
        let path = common::fixture_path(name);
        let mut full = read_trace(&path).expect("full");
        let lean = profiler::read_trace_for_analysis(&path).expect("lean");
        for t in &mut full.tokens {
            t.host_spans.clear();
        }
        assert_eq!(full, lean, "{name}");
    }
    // Same errors as the full reader.
    let dir = tempfile::tempdir().expect("tempdir");
    let bytes = std::fs::read(common::fixture_path("fused")).expect("read");
    let p = write_tmp(&dir, "cut.json", &bytes[..bytes.len() / 2]);
    let err = profiler::read_trace_for_analysis(&p).expect_err("truncated");
    assert!(matches!(err, TraceError::Truncated { .. }), "{err:?}");
}

#[cfg(unix)]
#[test]
fn a_device_is_refused_before_it_is_read() {
    for read in [read_trace, profiler::read_trace_for_analysis] {
        let err = read(std::path::Path::new("/dev/zero")).expect_err("/dev/zero is no trace");
        match &err {
            TraceError::Read { source_name, err } => {
                assert_eq!(source_name, "/dev/zero");
                assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
            }
            other => panic!("expected a read error, got {other:?}"),
        }
        assert_eq!(
            err.to_string(),
            "cannot read trace /dev/zero: it is a character device, not a regular file; give \
             the path of a file"
        );
    }
}

#[test]
fn a_regular_file_is_read_whole() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bytes = std::fs::read(common::fixture_path("generic")).expect("read fixture");
    let p = write_tmp(&dir, "t.json", &bytes);
    assert_eq!(
        profiler::io::read_regular_file(&p).expect("read"),
        bytes,
        "the whole file"
    );
    assert_eq!(read_trace(&p).expect("trace"), common::fixture("generic"));
}
