//! A timing sweep of the hot kernels over their specialization constants, for tuning on a real
//! GPU. Ignored by default (it asserts nothing about time; it prints a table):
//! `cargo test -p decoder --release --test kernel_bench -- --ignored --nocapture`
//! (`DECODESCOPE_DEVICE` picks the device). Each case runs back-to-back dispatches separated by
//! full barriers, as a decode token does, rotating over enough copies of its buffers to keep them
//! out of the L2 cache, and reports GPU microseconds per dispatch and the bytes it must move per
//! microsecond (GB/s).
mod common;

use decoder::exec::kernels::{
    AttnSplitPush, Epilogue, MatvecFusedPush, MatvecPush, RowParams, TokenParams, params_bytes,
};
use decoder::kv::KvDtype;
use decoder::shaders::Shader;
use decoder::shaders::spec as id;
use decoder::vk::{
    BufRange, BufferDesc, Gpu, GpuOptions, PipelineDesc, Queue, Recorder, SPEC_CONSTANTS,
    SetLifetime,
};

/// One binding: its size and, when the kernel's control flow depends on it, its contents.
struct Bind {
    bytes: u64,
    init: Option<Vec<u8>>,
}

fn bind(bytes: u64) -> Bind {
    Bind { bytes, init: None }
}

/// GPU microseconds per dispatch, the median of 3 rounds of `reps` dispatches.
fn time_us(
    gpu: &Gpu,
    shader: Shader,
    push: &[u8],
    spec: &[(usize, u32)],
    groups: [u32; 3],
    binds: &[Bind],
) -> f64 {
    let mut rec = Recorder::new(gpu).expect("recorder");
    let mut s = [0u32; SPEC_CONSTANTS];
    for &(id, v) in spec {
        s[id] = v;
    }
    let pipeline = gpu
        .create_pipeline(PipelineDesc {
            shader,
            bindings: binds.len() as u32,
            push_bytes: push.len() as u32,
            spec: s,
            push_descriptor: false,
        })
        .expect("pipeline");
    let total: u64 = binds.iter().map(|b| b.bytes).sum();
    let copies = ((384u64 << 20) / total).clamp(1, 16) as usize;
    let mut sets = Vec::new();
    let mut buffers = Vec::new();
    for c in 0..copies {
        let bufs: Vec<_> = binds
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let buf = gpu
                    .create_buffer(BufferDesc::device(b.bytes), &format!("bench{c}.{i}"))
                    .expect("buffer");
                let init = b
                    .init
                    .clone()
                    .unwrap_or_else(|| vec![0u8; b.bytes as usize]);
                rec.upload(&buf, 0, &init).expect("upload");
                buf
            })
            .collect();
        let set = rec
            .alloc_set(&pipeline, SetLifetime::Persistent)
            .expect("set");
        let ranges: Vec<BufRange<'_>> = bufs.iter().map(BufRange::whole).collect();
        rec.write_set(set, &ranges);
        sets.push(set);
        buffers.push(bufs);
    }
    let reps = 200;
    let pool = rec.create_query_pool(2).expect("query pool");
    let cmd = rec.new_cmd(Queue::Compute).expect("cmd");
    let fence = rec.new_fence().expect("fence");
    let period_ns = gpu.info().timestamp_period_ns as f64;
    let mut rounds = Vec::new();
    for _ in 0..4 {
        rec.reset_queries(&pool, 0, 2).expect("reset queries");
        rec.begin(cmd).expect("begin");
        rec.bind_pipeline(cmd, &pipeline);
        rec.push_constants(cmd, &pipeline, push);
        rec.write_timestamp(cmd, &pool, 0, false);
        for r in 0..reps {
            rec.bind_set(cmd, &pipeline, sets[r % copies]);
            rec.dispatch(cmd, groups);
            rec.full_barrier(cmd);
        }
        rec.write_timestamp(cmd, &pool, 1, false);
        rec.end(cmd).expect("end");
        rec.submit(&[cmd], Some(fence)).expect("submit");
        rec.wait(fence).expect("wait");
        let t = rec.read_queries(&pool, 0, 2).expect("read queries");
        rounds.push((t[1] - t[0]) as f64 * period_ns / 1e3 / reps as f64);
    }
    // The first round warms caches and clocks.
    rounds.remove(0);
    rounds.sort_by(f64::total_cmp);
    rounds[1]
}

/// `spec`'s values in the order given.
fn report(label: &str, spec: &[(usize, u32)], us: f64, bytes: u64) {
    let spec = format!("{:?}", spec.iter().map(|p| p.1).collect::<Vec<_>>());
    println!(
        "{label:<48} spec {spec:<16} {us:>9.2} us {:>8.0} GB/s",
        bytes as f64 / us / 1e3
    );
}

#[test]
#[ignore = "a timing sweep for tuning on a real GPU; prints a table"]
fn bench_hot_kernels() {
    let gpu = Gpu::new(&GpuOptions {
        device: std::env::var("DECODESCOPE_DEVICE").ok(),
        validation: false,
    })
    .expect("open a Vulkan device");
    println!(
        "device: {} (subgroup {}, {} compute units)",
        gpu.info().name,
        gpu.info().subgroup_size,
        gpu.info().compute_units
    );

    // The floor: a dispatch that does (almost) nothing, plus its barrier.
    let push = decoder::exec::kernels::AddPush {
        n: 1,
        ..Default::default()
    }
    .bytes();
    let us = time_us(
        &gpu,
        Shader::Add,
        &push,
        &[(id::WG, 64)],
        [1, 1, 1],
        &[bind(4), bind(4)],
    );
    report("floor: add n=1", &[(id::WG, 64)], us, 0);

    // Qwen3-0.6B decode shapes: (label, weight rows, cols, epilogue, norm).
    let shapes = [
        (
            "qkv 4096x1024 norm",
            4096u32,
            1024u32,
            Epilogue::Store,
            true,
        ),
        (
            "o_proj 1024x2048 residual",
            1024,
            2048,
            Epilogue::Residual,
            false,
        ),
        (
            "gate_up 2x3072x1024 swiglu norm",
            3072,
            1024,
            Epilogue::SwiGlu,
            true,
        ),
        (
            "down 1024x3072 residual",
            1024,
            3072,
            Epilogue::Residual,
            false,
        ),
        (
            "lm_head 151936x1024 norm",
            151936,
            1024,
            Epilogue::Store,
            true,
        ),
    ];
    for (label, rows, cols, epi, norm) in shapes {
        let w_rows = if epi == Epilogue::SwiGlu {
            2 * rows
        } else {
            rows
        } as u64;
        let bytes =
            w_rows * cols as u64 * 2 + cols as u64 * 4 * (1 + norm as u64) + rows as u64 * 4;
        let push = MatvecFusedPush {
            rows,
            cols,
            eps: 1e-6,
            ..Default::default()
        }
        .bytes();
        let binds = [
            bind(w_rows * cols as u64 * 2),
            bind(cols as u64 * 4),
            bind(rows as u64 * 4),
            bind(cols as u64 * 4),
        ];
        for wg in [32u32, 64, 128, 256] {
            for rows_per_group in [1u32, 2, 4, 8] {
                let spec = [
                    (id::WG, wg),
                    (id::ROWS, rows_per_group),
                    (id::NORM, norm as u32),
                    (id::EPILOGUE, epi.spec()),
                ];
                let groups = [rows.div_ceil(rows_per_group), 1, 1];
                let us = time_us(&gpu, Shader::MatvecFused, &push, &spec, groups, &binds);
                report(&format!("matvec_fused {label}"), &spec, us, bytes);
            }
        }
        // The primitive matvec on the same weight, for comparison (no norm, no epilogue).
        let push = MatvecPush {
            rows: w_rows as u32,
            cols,
            n_tokens: 1,
            pad0: 0,
        }
        .bytes();
        let binds = [
            bind(w_rows * cols as u64 * 2),
            bind(cols as u64 * 4),
            bind(w_rows * 4),
        ];
        for wg in [64u32, 128, 256] {
            for rows_per_group in [1u32, 2, 4] {
                let spec = [(id::WG, wg), (id::ROWS, rows_per_group)];
                let us = time_us(
                    &gpu,
                    Shader::Matvec,
                    &push,
                    &spec,
                    [(w_rows as u32).div_ceil(rows_per_group), 1, 1],
                    &binds,
                );
                report(
                    &format!("matvec {label}"),
                    &spec,
                    us,
                    w_rows * cols as u64 * 2,
                );
            }
        }
    }

    // Split-K attention: 16 q heads, 8 KV heads, head_dim 128, contiguous f16 and f32 caches,
    // one decode row, the tile the engine's tuning picks for this device.
    let (heads, kv_heads, hd) = (16u32, 8u32, 128u32);
    let tile = decoder::exec::program::Tuning::for_device(
        gpu.info().compute_units,
        gpu.info().subgroup_size,
        2048,
        kv_heads,
    )
    .attn_tile;
    for dtype in [KvDtype::F16, KvDtype::F32] {
        for kv_len in [512u32, 2048] {
            let max_seq = kv_len as u64;
            let cache = max_seq * kv_heads as u64 * hd as u64 * dtype.bytes();
            let header = TokenParams {
                pos0: kv_len - 1,
                n_tokens: 1,
                kv_len,
                n_seqs: 1,
            };
            let row = RowParams {
                pos: kv_len - 1,
                seq: 0,
                lo: 0,
                pad0: 0,
            };
            let params = params_bytes(&header, &[row]);
            for n_splits in [8u32, 16, 32, 64] {
                let push = AttnSplitPush {
                    heads,
                    kv_heads,
                    head_dim: hd,
                    n_splits,
                    scale: 0.088,
                    ..Default::default()
                }
                .bytes();
                let binds = [
                    Bind {
                        bytes: params.len() as u64,
                        init: Some(params.clone()),
                    },
                    bind(heads as u64 * hd as u64 * 4),
                    // The block table (unused by the contiguous layout).
                    bind(16),
                    bind(cache),
                    bind(cache),
                    bind(heads as u64 * n_splits as u64 * (hd as u64 + 2) * 4),
                ];
                for wg in [32u32, 64, 128, 256] {
                    // Contiguous, max_seq positions, table stride 1, the f16 flag.
                    let spec = [
                        (id::WG, wg),
                        (id::TILE, tile),
                        (id::KV_LAYOUT, 0),
                        (id::KV_UNIT, kv_len),
                        (id::KV_TABLE_STRIDE, 1),
                        (id::KV_F16, (dtype == KvDtype::F16) as u32),
                    ];
                    let us = time_us(
                        &gpu,
                        Shader::AttnSplit,
                        &push,
                        &spec,
                        [n_splits, kv_heads, 1],
                        &binds,
                    );
                    report(
                        &format!(
                            "attn_split {} kv_len={kv_len} splits={n_splits}",
                            dtype.name()
                        ),
                        &spec,
                        us,
                        2 * cache,
                    );
                }
            }
        }
    }
}
