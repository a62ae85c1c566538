//! GGUF reader: a hand-built file with metadata of every value type (arrays included) and a few
//! tensors round-trips through the reader; damaged files give errors that name the file.

#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is a test failure.

mod gguf_util;

use decoder::gguf::{GgmlType, GgufError, GgufFile, Value, ValueType, dequantize};
use gguf_util::{GgufBuilder, array, f16_bytes, f32_bytes, string, strings, temp_dir};

fn every_value_type() -> Vec<(String, Value)> {
    vec![
        ("t.u8".into(), Value::U8(200)),
        ("t.i8".into(), Value::I8(-100)),
        ("t.u16".into(), Value::U16(60_000)),
        ("t.i16".into(), Value::I16(-30_000)),
        ("t.u32".into(), Value::U32(4_000_000_000)),
        ("t.i32".into(), Value::I32(-2_000_000_000)),
        ("t.f32".into(), Value::F32(-1.25e-5)),
        ("t.bool.true".into(), Value::Bool(true)),
        ("t.bool.false".into(), Value::Bool(false)),
        ("t.string".into(), string("héllo, 世界 🌍")),
        ("t.string.empty".into(), string("")),
        ("t.u64".into(), Value::U64(u64::MAX)),
        ("t.i64".into(), Value::I64(i64::MIN)),
        ("t.f64".into(), Value::F64(std::f64::consts::PI)),
        (
            "t.array.strings".into(),
            strings(&["a", "Ġb", "<|im_end|>"]),
        ),
        (
            "t.array.i32".into(),
            array(
                ValueType::I32,
                vec![Value::I32(1), Value::I32(-2), Value::I32(3)],
            ),
        ),
        (
            "t.array.f32".into(),
            array(ValueType::F32, vec![Value::F32(0.5), Value::F32(-0.25)]),
        ),
        (
            "t.array.bool".into(),
            array(ValueType::Bool, vec![Value::Bool(true), Value::Bool(false)]),
        ),
        ("t.array.empty".into(), array(ValueType::U64, vec![])),
        (
            "t.array.nested".into(),
            array(
                ValueType::Array,
                vec![
                    array(ValueType::U8, vec![Value::U8(1), Value::U8(2)]),
                    array(ValueType::U8, vec![]),
                ],
            ),
        ),
    ]
}

fn sample(version: u32, alignment: Option<u32>) -> GgufBuilder {
    let mut b = GgufBuilder {
        version,
        ..Default::default()
    };
    for (k, v) in every_value_type() {
        b.kv(&k, v);
    }
    if let Some(a) = alignment {
        b.kv("general.alignment", Value::U32(a));
    }
    // A 3x2 f32 matrix (dims innermost first: 2 columns, 3 rows), an f16 vector of 5 (its
    // size is not a multiple of the alignment, so the next tensor is padded), a Q8_0 row.
    b.tensor(
        "m.f32",
        &[2, 3],
        0,
        f32_bytes(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
    );
    b.tensor("v.f16", &[5], 1, f16_bytes(&[0.5, -1.0, 2.0, 0.0, 8.0]));
    let mut q8 = half::f16::from_f32(0.25).to_le_bytes().to_vec();
    q8.extend((0..32).map(|q: i8| q as u8));
    b.tensor("r.q8_0", &[32, 1], 8, q8);
    b
}

#[test]
fn every_metadata_type_and_tensor_round_trips() {
    for (version, alignment) in [(3, None), (2, None), (3, Some(64)), (3, Some(8))] {
        let dir = temp_dir();
        let path = dir.path().join("sample.gguf");
        sample(version, alignment).write(&path);
        let g = GgufFile::open(&path).unwrap();
        assert_eq!(g.version(), version);
        assert_eq!(g.alignment(), u64::from(alignment.unwrap_or(32)));
        assert_eq!(g.data_start() % g.alignment(), 0);
        for (k, v) in every_value_type() {
            assert_eq!(g.get(&k), Some(&v), "key {k} (version {version})");
        }
        assert_eq!(
            g.metadata().len(),
            every_value_type().len() + usize::from(alignment.is_some())
        );

        let names: Vec<&str> = g.tensors().iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["m.f32", "v.f16", "r.q8_0"]);
        let m = g.tensor("m.f32").unwrap();
        assert_eq!(m.dims, [2, 3]);
        assert_eq!(m.shape(), [3, 2]);
        assert_eq!(m.ggml_type, GgmlType::F32);
        let data = g.read_tensor_data(m).unwrap();
        assert_eq!(
            dequantize(m.ggml_type, &data, 6).unwrap(),
            [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
        );

        let v = g.tensor("v.f16").unwrap();
        assert_eq!(v.bytes_len(), Some(10));
        let data = g.read_tensor_data(v).unwrap();
        assert_eq!(
            dequantize(v.ggml_type, &data, 5).unwrap(),
            [0.5, -1.0, 2.0, 0.0, 8.0]
        );

        let r = g.tensor("r.q8_0").unwrap();
        assert_eq!(r.offset % g.alignment(), 0);
        let data = g.read_tensor_data(r).unwrap();
        let got = dequantize(r.ggml_type, &data, 32).unwrap();
        assert_eq!(got[31], 0.25 * 31.0);
    }
}

#[test]
fn value_accessors_widen_and_refuse_wrong_types() {
    let dir = temp_dir();
    let path = dir.path().join("sample.gguf");
    sample(3, None).write(&path);
    let g = GgufFile::open(&path).unwrap();
    assert_eq!(g.get("t.u16").and_then(Value::as_u64), Some(60_000));
    assert_eq!(g.get("t.i8").and_then(Value::as_u64), None);
    assert_eq!(g.get("t.f32").and_then(Value::as_f64), Some(-1.25e-5));
    assert_eq!(
        g.get("t.string").and_then(Value::as_str),
        Some("héllo, 世界 🌍")
    );
    assert_eq!(g.get("t.string").and_then(Value::as_u64), None);
    let arr = g.get("t.array.strings").and_then(Value::as_array).unwrap();
    assert_eq!(arr.elem_type, ValueType::String);
    assert_eq!(arr.values.len(), 3);
}

fn open_err(bytes: &[u8]) -> (String, GgufError) {
    let dir = temp_dir();
    let path = dir.path().join("damaged-model.gguf");
    std::fs::write(&path, bytes).unwrap();
    let err = GgufFile::open(&path).unwrap_err();
    (err.to_string(), err)
}

#[test]
fn bad_magic_names_the_file() {
    let mut bytes = sample(3, None).to_bytes();
    bytes[..4].copy_from_slice(b"PK\x03\x04");
    let (msg, err) = open_err(&bytes);
    assert!(matches!(err, GgufError::BadMagic { .. }), "{err:?}");
    assert!(
        msg.contains("damaged-model.gguf") && msg.contains("not a GGUF file"),
        "{msg}"
    );
}

#[test]
fn unsupported_versions_are_named() {
    let mut bytes = sample(3, None).to_bytes();
    bytes[4..8].copy_from_slice(&1u32.to_le_bytes());
    let (msg, _) = open_err(&bytes);
    assert!(
        msg.contains("damaged-model.gguf") && msg.contains("version 1"),
        "{msg}"
    );
    bytes[4..8].copy_from_slice(&3u32.to_be_bytes());
    let (msg, _) = open_err(&bytes);
    assert!(msg.contains("big-endian"), "{msg}");
}

#[test]
fn truncation_anywhere_is_reported_with_the_file_name() {
    let bytes = sample(3, None).to_bytes();
    let g_dir = temp_dir();
    let full = g_dir.path().join("full.gguf");
    std::fs::write(&full, &bytes).unwrap();
    let data_start = GgufFile::open(&full).unwrap().data_start() as usize;
    // Cut inside the header, inside the metadata, inside the tensor infos and inside the data.
    for cut in [
        0,
        3,
        6,
        20,
        40,
        200,
        data_start - 10,
        data_start + 4,
        bytes.len() - 1,
    ] {
        let (msg, err) = open_err(&bytes[..cut]);
        assert!(
            matches!(err, GgufError::Truncated { .. }),
            "cut at {cut}: {err:?}"
        );
        assert!(
            msg.contains("damaged-model.gguf") && msg.contains("truncated"),
            "cut at {cut}: {msg}"
        );
    }
}

#[test]
fn absurd_counts_fail_without_allocating() {
    let mut bytes = sample(3, None).to_bytes();
    // Claim 2^60 metadata entries.
    bytes[16..24].copy_from_slice(&(1u64 << 60).to_le_bytes());
    let (msg, err) = open_err(&bytes);
    assert!(matches!(err, GgufError::Truncated { .. }), "{err:?}");
    assert!(msg.contains("metadata count"), "{msg}");
}

#[test]
fn unknown_tensor_types_are_kept_and_named_when_read() {
    let mut b = GgufBuilder::default();
    b.tensor("iq", &[256], 16, vec![0u8; 66]);
    let dir = temp_dir();
    let path = dir.path().join("iq.gguf");
    b.write(&path);
    let g = GgufFile::open(&path).unwrap();
    let t = g.tensor("iq").unwrap();
    assert_eq!(t.ggml_type, GgmlType::Other(16));
    let msg = g.read_tensor_data(t).unwrap_err().to_string();
    assert!(
        msg.contains("iq.gguf") && msg.contains("IQ2_XXS") && msg.contains("\"iq\""),
        "{msg}"
    );
}

#[test]
fn missing_file_names_the_path() {
    let err = GgufFile::open(std::path::Path::new("/nonexistent/dir/model.gguf")).unwrap_err();
    assert!(
        err.to_string().contains("/nonexistent/dir/model.gguf"),
        "{err}"
    );
}

/// The case: a real model's GGUF cut at byte 1000 (inside its vocabulary) was reported
/// as ending "inside the tensor count", because the tensor count was checked against the bytes
/// left before the metadata was read. The message names what was being read where it ended.
#[test]
fn a_file_cut_in_the_metadata_names_the_entry_being_read() {
    let mut b = GgufBuilder::default();
    b.kv("general.architecture", string("llama"));
    let vocab: Vec<String> = (0..500).map(|i| format!("token{i}")).collect();
    b.kv("tokenizer.ggml.tokens", strings(&vocab));
    // More tensors than the first 1000 bytes could describe.
    for i in 0..60 {
        b.tensor(&format!("t{i}"), &[4], 0, f32_bytes(&[1.0, 2.0, 3.0, 4.0]));
    }
    let bytes = b.to_bytes();
    let (msg, err) = open_err(&bytes[..1000]);
    assert!(matches!(err, GgufError::Truncated { .. }), "{err:?}");
    assert!(
        msg.contains("ends at byte 1000")
            && msg.contains("tokenizer.ggml.tokens")
            && !msg.contains("tensor count"),
        "{msg}"
    );
}

#[test]
fn a_fifo_is_refused_without_waiting_for_a_writer() {
    let dir = temp_dir();
    let fifo = dir.path().join("model.gguf");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .is_ok_and(|s| s.success());
    assert!(made, "mkfifo failed");
    let (tx, rx) = std::sync::mpsc::channel();
    let path = fifo.clone();
    std::thread::spawn(move || {
        let _ = tx.send(GgufFile::open(&path).map(|_| ()).map_err(|e| e.to_string()));
    });
    let result = rx.recv_timeout(std::time::Duration::from_secs(20));
    if result.is_err() {
        // Unblock the reader thread before failing.
        let _ = std::fs::OpenOptions::new().write(true).open(&fifo);
    }
    let msg = result
        .expect("opening a FIFO hung")
        .expect_err("a FIFO is not a GGUF file");
    assert!(msg.contains("model.gguf") && msg.contains("FIFO"), "{msg}");
}

#[test]
fn a_tensor_whose_type_or_shape_does_not_match_its_bytes_is_refused() {
    // 64 f32 values declared F16 (the bytes of 128 values): read as written, every element
    // after the 32nd would come from the wrong bytes, and the next tensor would start inside it.
    let values: Vec<f32> = (0..64).map(|i| i as f32).collect();
    for (ggml_type, dims) in [(1u32, [64u64, 1]), (0, [32, 1])] {
        let mut b = GgufBuilder::default();
        b.tensor("wrong", &dims, ggml_type, f32_bytes(&values));
        b.tensor("next", &[4], 0, f32_bytes(&[1.0, 2.0, 3.0, 4.0]));
        let (msg, err) = open_err(&b.to_bytes());
        assert!(matches!(err, GgufError::Malformed { .. }), "{err:?}");
        assert!(
            msg.contains("damaged-model.gguf")
                && msg.contains("\"next\"")
                && msg.contains("\"wrong\"")
                && msg.contains("starts at offset 256")
                && msg.contains("does not match the bytes written"),
            "{msg}"
        );
    }
    // The same bytes declared as what they are open.
    let mut b = GgufBuilder::default();
    b.tensor("right", &[64, 1], 0, f32_bytes(&values));
    b.tensor("next", &[4], 0, f32_bytes(&[1.0, 2.0, 3.0, 4.0]));
    let dir = temp_dir();
    let path = dir.path().join("right.gguf");
    b.write(&path);
    assert!(GgufFile::open(&path).is_ok());
}
