//! `decoder devices`: the Vulkan devices and the properties that matter for decode profiling.

use anyhow::Context as _;

use crate::probe::{ProbeOptions, measure};
use crate::vk::{Bandwidth, DeviceInfo, Gpu, GpuOptions, list_devices};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Print JSON (one object per device) instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Also measure each device's memory bandwidth: a compute kernel reading a large buffer and
    /// a buffer copy, best of several runs (about a second per device).
    #[arg(long)]
    pub probe: bool,
    /// Timed runs of the probe (after one warm-up).
    #[arg(long, default_value_t = 5, requires = "probe")]
    pub runs: u32,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let devices = list_devices().context("listing Vulkan devices")?;
    let mut probes: Vec<Option<Bandwidth>> = vec![None; devices.len()];
    if args.probe {
        if args.runs == 0 {
            anyhow::bail!("--runs must be at least 1");
        }
        for (d, slot) in devices.iter().zip(&mut probes) {
            eprintln!("probing the memory bandwidth of #{} {}", d.index, d.name);
            let gpu = Gpu::new(&GpuOptions {
                device: Some(d.index.to_string()),
                validation: false,
            })
            .with_context(|| format!("cannot open device #{} {}", d.index, d.name))?;
            let opts = ProbeOptions {
                runs: args.runs,
                bytes: None,
            };
            *slot = Some(
                measure(&gpu, opts)
                    .with_context(|| format!("bandwidth probe on #{} {}", d.index, d.name))?,
            );
        }
    }
    if args.json {
        let rows: Vec<serde_json::Value> = devices
            .iter()
            .zip(&probes)
            .map(|(d, b)| {
                let mut v = serde_json::to_value(d).unwrap_or_default();
                if let (Some(b), Some(o)) = (b, v.as_object_mut()) {
                    o.insert(
                        "bandwidth".into(),
                        serde_json::to_value(b).unwrap_or_default(),
                    );
                }
                v
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        print!("{}", table(&devices, &probes));
    }
    Ok(())
}

fn gbps(b: &Option<Bandwidth>, f: fn(&Bandwidth) -> f64) -> String {
    match b {
        Some(b) => format!(
            "{:.0} GB/s ({}, {} MiB, best of {})",
            f(b),
            b.timing,
            b.bytes >> 20,
            b.runs
        ),
        None => "-".into(),
    }
}

fn mib(bytes: u64) -> String {
    if bytes >= 1 << 30 {
        format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
    } else {
        format!("{} MiB", bytes >> 20)
    }
}

fn yes(b: bool) -> String {
    if b { "yes".into() } else { "no".into() }
}

/// The devices as a table: one row per property, one column per device.
pub fn table(devices: &[DeviceInfo], probes: &[Option<Bandwidth>]) -> String {
    type Row = (&'static str, fn(&DeviceInfo) -> String);
    let rows: &[Row] = &[
        ("name", |d| d.name.clone()),
        ("type", |d| d.device_type.clone()),
        ("driver", |d| {
            format!("{} {}", d.driver_name, d.driver_info)
                .trim()
                .to_string()
        }),
        ("Vulkan API", |d| d.api_version.clone()),
        ("vendor:device", |d| {
            format!("{:04x}:{:04x}", d.vendor_id, d.device_id)
        }),
        ("compute units", |d| d.compute_units.to_string()),
        ("device-local memory", |d| mib(d.device_local_bytes)),
        ("timestamps", |d| yes(d.timestamps)),
        ("timestamp period", |d| {
            format!("{} ns", d.timestamp_period_ns)
        }),
        ("timestamp valid bits", |d| {
            d.timestamp_valid_bits.to_string()
        }),
        ("calibrated timestamps", |d| {
            d.calibrated_timestamps
                .clone()
                .unwrap_or_else(|| "no".into())
        }),
        ("push descriptors", |d| {
            if d.push_descriptors {
                format!("yes (max {})", d.max_push_descriptors)
            } else {
                "no".into()
            }
        }),
        ("compute shared memory", |d| {
            format!("{} KiB per workgroup", d.max_compute_shared_memory >> 10)
        }),
        ("subgroup size", |d| d.subgroup_size.to_string()),
        ("subgroup arithmetic", |d| yes(d.subgroup_arithmetic)),
        ("subgroup shuffle", |d| yes(d.subgroup_shuffle)),
        ("16-bit storage", |d| yes(d.storage_buffer_16bit)),
        ("float16 arithmetic", |d| yes(d.shader_float16)),
        ("host query reset", |d| yes(d.host_query_reset)),
        ("shader device clock", |d| yes(d.shader_device_clock)),
        ("pipeline statistics", |d| yes(d.pipeline_statistics)),
        ("float atomic add", |d| yes(d.float_atomic_add)),
        ("64-bit atomics", |d| yes(d.int64_atomics)),
        (
            "separate transfer queue",
            |d| yes(d.separate_transfer_queue),
        ),
        ("max storage buffer range", |d| {
            mib(d.max_storage_buffer_range)
        }),
        ("max allocation size", |d| mib(d.max_memory_allocation_size)),
        ("max workgroup invocations", |d| {
            d.max_compute_workgroup_invocations.to_string()
        }),
    ];
    let header: Vec<String> = std::iter::once("device".to_string())
        .chain(devices.iter().map(|d| format!("#{}", d.index)))
        .collect();
    let mut cells: Vec<Vec<String>> = vec![header];
    for (name, f) in rows {
        cells.push(
            std::iter::once(name.to_string())
                .chain(devices.iter().map(f))
                .collect(),
        );
    }
    if probes.iter().any(Option::is_some) {
        type Probe = (&'static str, fn(&Bandwidth) -> f64);
        let probe_rows: [Probe; 2] = [
            ("read bandwidth", |b| b.read_gbps),
            ("copy bandwidth (read + write)", |b| b.copy_gbps),
        ];
        for (name, f) in probe_rows {
            cells.push(
                std::iter::once(name.to_string())
                    .chain(probes.iter().map(|b| gbps(b, f)))
                    .collect(),
            );
        }
    }
    let cols = cells[0].len();
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            cells
                .iter()
                .map(|r| r[c].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for (i, r) in cells.iter().enumerate() {
        let line: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(s, w)| format!("{s:<w$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
        if i == 0 {
            let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
            out.push_str(&rule.join("  "));
            out.push('\n');
        }
    }
    if devices.is_empty() {
        out.push_str("no Vulkan devices found: run scripts/setup.sh to install lavapipe\n");
    } else if probes.iter().all(Option::is_none) {
        out.push_str("(--probe also measures each device's memory bandwidth)\n");
    }
    out
}
