//! Host spans of one step: the fixed puffin scope names, recorded into the trace as well.

use profiler::trace::HostSpan;

use crate::vk::host_now_ns;

/// The host spans of one step, times relative to the capture's epoch.
#[derive(Debug, Default)]
pub struct SpanLog {
    epoch_ns: u64,
    pub spans: Vec<HostSpan>,
}

impl SpanLog {
    pub fn new(epoch_ns: u64) -> Self {
        SpanLog {
            epoch_ns,
            spans: Vec::new(),
        }
    }

    /// Opens a span; returns its index for [`SpanLog::close`].
    pub fn open(&mut self, name: &'static str, depth: u32) -> usize {
        let start = host_now_ns().saturating_sub(self.epoch_ns);
        self.spans.push(HostSpan(name.to_string(), start, 0, depth));
        self.spans.len() - 1
    }

    pub fn close(&mut self, index: usize) {
        let now = host_now_ns().saturating_sub(self.epoch_ns);
        if let Some(s) = self.spans.get_mut(index) {
            s.2 = now.saturating_sub(s.1);
        }
    }

    /// Total duration of the spans called `name`.
    pub fn total_ns(&self, name: &str) -> u64 {
        self.spans.iter().filter(|s| s.0 == name).map(|s| s.2).sum()
    }
}

/// Runs `$body` inside a host span named `$name` (a puffin scope and a trace span at once).
/// `?` inside the body leaves the span open, which is fine: the step failed.
#[macro_export]
macro_rules! host_span {
    ($log:expr, $name:literal, $depth:expr, $body:block) => {{
        puffin::profile_scope!($name);
        let __i = $log.open($name, $depth);
        let __r = $body;
        $log.close(__i);
        __r
    }};
}
