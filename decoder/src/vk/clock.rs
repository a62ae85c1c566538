//! The host clock that every span in a trace uses: `CLOCK_MONOTONIC`, the same clock domain that
//! `VK_KHR_calibrated_timestamps` calibrates GPU timestamps against.

/// Nanoseconds on the host's monotonic clock.
pub fn host_now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if rc != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
