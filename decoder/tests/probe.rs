//! The bandwidth probe: its read kernel reads every element exactly once (whatever the split
//! between the unrolled loop and the tail), and the probe measures the device with the
//! validation layer clean, keeps its figures on the device, and `decoder devices --probe` prints
//! them.
#![allow(clippy::unwrap_used)] // Tests unwrap: a failure is a test failure.

mod common;
mod kernel_support;

use decoder::exec::harness::Binding;
use decoder::probe::{ProbeOptions, measure, probe_bytes};
use decoder::shaders::Shader;
use decoder::shaders::spec as id;
use kernel_support::{launch, out_f32};

fn push(n: u32, magic: u32) -> Vec<u8> {
    [n, magic, 0, 0]
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .collect()
}

/// With every element 1.0, each invocation's sum is 4 x the vec4s it read: the kernel writes
/// its workgroup's slot exactly when the magic equals that sum.
#[test]
fn bw_read_reads_every_element_once() {
    common::with_gpu(|gpu| {
        let (wg, groups) = (64u32, 3u32);
        // 5 vec4s per invocation (the unrolled loop once, the tail once), and 7 (once + 3).
        for per in [1u32, 4, 5, 7] {
            let n = wg * groups * per;
            let src = vec![1.0f32; 4 * n as usize];
            let sum = 4.0 * per as f32;
            for (magic, writes) in [(sum.to_bits(), true), ((sum + 1.0).to_bits(), false)] {
                let out = launch(
                    gpu,
                    Shader::BwRead,
                    push(n, magic),
                    [groups, 1, 1],
                    &[(id::WG, wg)],
                    &[
                        Binding::input_f32(&src),
                        Binding::output_f32(groups as usize, -1.0),
                    ],
                );
                let want = if writes { sum } else { -1.0 };
                assert_eq!(
                    out_f32(&out, 1),
                    vec![want; groups as usize],
                    "{per} vec4s per invocation, magic {}",
                    if writes { "= the sum" } else { "!= the sum" }
                );
            }
        }
    });
}

#[test]
fn probe_measures_and_keeps_the_figures() {
    common::with_gpu(|gpu| {
        assert!(gpu.bandwidth().is_none());
        let opts = ProbeOptions {
            runs: 2,
            bytes: Some(8 << 20),
        };
        let b = measure(gpu, opts).unwrap();
        assert_eq!(b.bytes, probe_bytes(gpu, Some(8 << 20)));
        assert_eq!(b.bytes % 16, 0);
        assert_eq!(b.runs, 2);
        assert!(b.read_gbps.is_finite() && b.read_gbps > 0.0, "{b:?}");
        assert!(b.copy_gbps.is_finite() && b.copy_gbps > 0.0, "{b:?}");
        assert_eq!(gpu.bandwidth(), Some(b));
        // Measured once per device: a second call returns the kept figures.
        assert_eq!(measure(gpu, ProbeOptions::default()).unwrap(), b);
    });
}

#[test]
fn probe_bytes_stay_within_the_device_limits() {
    common::with_gpu(|gpu| {
        let info = gpu.info();
        for asked in [None, Some(17), Some(1 << 40)] {
            let b = probe_bytes(gpu, asked);
            assert_eq!(b % 16, 0, "{asked:?}");
            assert!(
                b >= 16 && b <= info.max_storage_buffer_range,
                "{asked:?}: {b}"
            );
            assert!(b <= info.max_memory_allocation_size, "{asked:?}: {b}");
        }
    });
}

#[test]
fn devices_probe_prints_the_bandwidth() {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_decoder"))
        .args(["devices", "--probe", "--runs", "1", "--json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let devices = v.as_array().unwrap();
    assert!(!devices.is_empty());
    for d in devices {
        let read = d["bandwidth"]["read_gbps"].as_f64().unwrap();
        assert!(read > 0.0, "{d}");
    }
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_decoder"))
        .args(["devices", "--runs", "2"])
        .output()
        .unwrap();
    assert!(!o.status.success(), "--runs without --probe is refused");
    assert!(String::from_utf8_lossy(&o.stderr).contains("--probe"));
}
