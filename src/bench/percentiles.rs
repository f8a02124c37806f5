//! Percentiles of timed samples, as the bench's JSON lines report them.

use serde_json::{json, Value};

/// The sample at fraction `p` (0 to 1) of `sorted` (nearest rank); 0 for no sample.
pub(super) fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// `base` with the samples' p50, p95, p99 and max in milliseconds, to two decimals.
pub(super) fn with_percentiles(mut base: Value, mut samples: Vec<f64>) -> Value {
    samples.sort_by(|a, b| a.total_cmp(b));
    let pick = |p: f64| (percentile(&samples, p) * 100.0).round() / 100.0;
    if let Value::Object(m) = &mut base {
        m.insert("p50_ms".into(), json!(pick(0.50)));
        m.insert("p95_ms".into(), json!(pick(0.95)));
        m.insert("p99_ms".into(), json!(pick(0.99)));
        m.insert("max_ms".into(), json!(pick(1.0)));
    }
    base
}
