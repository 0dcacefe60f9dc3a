//! Latency samples and their percentiles (nearest rank over a sorted vector: exact, and cheap
//! enough for the few million samples of a run).

use std::time::Duration;

use serde::Serialize;

/// Latency samples in microseconds.
#[derive(Debug, Default, Clone)]
pub struct Latencies {
    micros: Vec<u64>,
}

/// Percentiles of a set of samples, in milliseconds.
#[derive(Debug, Default, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub count: u64,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl Latencies {
    pub fn new() -> Latencies {
        Latencies::default()
    }

    pub fn record(&mut self, latency: Duration) {
        self.record_micros(u64::try_from(latency.as_micros()).unwrap_or(u64::MAX));
    }

    pub fn record_micros(&mut self, micros: u64) {
        self.micros.push(micros);
    }

    pub fn merge(&mut self, other: Latencies) {
        self.micros.extend(other.micros);
    }

    pub fn len(&self) -> usize {
        self.micros.len()
    }

    pub fn is_empty(&self) -> bool {
        self.micros.is_empty()
    }

    pub fn summary(&mut self) -> Summary {
        if self.micros.is_empty() {
            return Summary::default();
        }
        self.micros.sort_unstable();
        let total: u128 = self.micros.iter().map(|&m| u128::from(m)).sum();
        let count = self.micros.len();
        Summary {
            count: count as u64,
            mean_ms: total as f64 / count as f64 / 1000.0,
            p50_ms: self.rank(0.50),
            p99_ms: self.rank(0.99),
            max_ms: self.micros[count - 1] as f64 / 1000.0,
        }
    }

    /// Nearest-rank percentile of the sorted samples, in milliseconds.
    fn rank(&self, quantile: f64) -> f64 {
        let count = self.micros.len();
        let rank = ((quantile * count as f64).ceil() as usize).clamp(1, count);
        self.micros[rank - 1] as f64 / 1000.0
    }
}

/// The median of some values (0 when there are none).
pub fn median(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let middle = sorted.len() / 2;
    if sorted.len().is_multiple_of(2) {
        (sorted[middle - 1] + sorted[middle]) / 2.0
    } else {
        sorted[middle]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let mut latencies = Latencies::new();
        for micros in (1..=100).rev() {
            latencies.record_micros(micros * 1000);
        }
        let summary = latencies.summary();
        assert_eq!(summary.count, 100);
        assert_eq!(summary.p50_ms, 50.0);
        assert_eq!(summary.p99_ms, 99.0);
        assert_eq!(summary.max_ms, 100.0);
        assert!((summary.mean_ms - 50.5).abs() < 1e-9);
    }

    #[test]
    fn empty_and_single_samples() {
        assert_eq!(Latencies::new().summary(), Summary::default());
        let mut one = Latencies::new();
        one.record(Duration::from_millis(3));
        let summary = one.summary();
        assert_eq!(
            (summary.p50_ms, summary.p99_ms, summary.max_ms),
            (3.0, 3.0, 3.0)
        );
    }

    #[test]
    fn median_of_even_and_odd_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
    }
}
