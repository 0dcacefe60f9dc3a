//! The metric families of one process on `prometheus-client`: counters, gauges and fixed-bucket
//! histograms with fixed label names, plus gauges sampled at scrape time, rendered in the
//! Prometheus text format (0.0.4) or OpenMetrics 1.0 as the scraper asks.
//!
//! This layer only fixes the label names per family and leaves out empty label values (a success
//! has no `code` label at all); storage, escaping and both exposition formats are the crate's.
//! Label values come from closed sets (command types, error codes, operation names) or validated
//! identifiers (tenant ids, when configured).

use agent_runtime::sync::Locked;
use std::sync::atomic::AtomicI64;
use std::sync::{Mutex, MutexGuard};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter as CounterValue;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::gauge::{ConstGauge, Gauge as GaugeValue};
use prometheus_client::metrics::histogram::Histogram as HistogramValue;

/// One series' labels: the family's label names with this series' values, empty values left out.
type Labels = Vec<(&'static str, String)>;

/// Label values and the value of one sampled series (counts: loaded sessions, held leases, tools).
pub type Sample = (Vec<String>, i64);

/// The two text formats `GET /metrics` negotiates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `text/plain; version=0.0.4`: what `curl` and older scrapers get.
    Prometheus,
    /// `application/openmetrics-text; version=1.0.0`: what Prometheus asks for first.
    OpenMetrics,
}

impl Format {
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Prometheus => prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.locked()
}

/// A family's name and label names, which every observation must match.
#[derive(Debug)]
struct LabelNames {
    family: &'static str,
    names: Vec<&'static str>,
}

impl LabelNames {
    fn new(family: &'static str, names: &[&'static str]) -> Self {
        Self {
            family,
            names: names.to_vec(),
        }
    }

    fn labels(&self, values: &[&str]) -> Labels {
        assert_eq!(
            values.len(),
            self.names.len(),
            "metric {} takes labels {:?}",
            self.family,
            self.names
        );
        labels(&self.names, values.iter().copied())
    }
}

fn labels<'v>(names: &[&'static str], values: impl Iterator<Item = &'v str>) -> Labels {
    names
        .iter()
        .zip(values)
        .filter(|(_, value)| !value.is_empty())
        .map(|(name, value)| (*name, value.to_owned()))
        .collect()
}

/// A monotonically increasing count per label set.
#[derive(Debug)]
pub struct Counter {
    names: LabelNames,
    family: Family<Labels, CounterValue>,
}

impl Counter {
    pub fn inc(&self, labels: &[&str]) {
        self.add(labels, 1);
    }

    pub fn add(&self, labels: &[&str], amount: u64) {
        self.family
            .get_or_create(&self.names.labels(labels))
            .inc_by(amount);
    }

    /// The current value (0 for a label set never seen).
    pub fn get(&self, labels: &[&str]) -> u64 {
        self.family
            .get(&self.names.labels(labels))
            .map_or(0, |counter| counter.get())
    }
}

/// A value that goes up and down per label set.
#[derive(Debug)]
pub struct Gauge {
    names: LabelNames,
    family: Family<Labels, GaugeValue<i64, AtomicI64>>,
}

impl Gauge {
    pub fn add(&self, labels: &[&str], delta: i64) {
        self.family
            .get_or_create(&self.names.labels(labels))
            .inc_by(delta);
    }

    pub fn set(&self, labels: &[&str], value: i64) {
        self.family
            .get_or_create(&self.names.labels(labels))
            .set(value);
    }

    pub fn get(&self, labels: &[&str]) -> i64 {
        self.family
            .get(&self.names.labels(labels))
            .map_or(0, |gauge| gauge.get())
    }
}

/// Builds each series' histogram with the family's bucket bounds.
#[derive(Clone, Debug)]
struct Buckets(Vec<f64>);

impl MetricConstructor<HistogramValue> for Buckets {
    fn new_metric(&self) -> HistogramValue {
        HistogramValue::new(self.0.iter().copied())
    }
}

/// Observations counted into fixed buckets per label set.
#[derive(Debug)]
pub struct Histogram {
    names: LabelNames,
    family: Family<Labels, HistogramValue, Buckets>,
}

impl Histogram {
    pub fn observe(&self, labels: &[&str], value: f64) {
        self.family
            .get_or_create(&self.names.labels(labels))
            .observe(value);
    }
}

/// Gauges read at scrape time (loaded sessions, held leases, MCP servers' health).
struct SampledGauges {
    name: &'static str,
    help: String,
    names: Vec<&'static str>,
    sample: Box<dyn Fn() -> Vec<Sample> + Send + Sync>,
}

impl std::fmt::Debug for SampledGauges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SampledGauges")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Collector for SampledGauges {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut family =
            encoder.encode_descriptor(self.name, &self.help, None, MetricType::Gauge)?;
        for (values, value) in (self.sample)() {
            let labels = labels(&self.names, values.iter().map(String::as_str));
            ConstGauge::new(value).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

/// The families of one process, rendered in registration order.
#[derive(Debug, Default)]
pub struct Registry {
    inner: Mutex<prometheus_client::registry::Registry>,
}

impl Registry {
    /// A counter family. `name` is without the `_total` suffix, which both formats add; `help`
    /// is without its final period, which the crate adds.
    pub fn counter(
        &self,
        name: &'static str,
        help: &'static str,
        labels: &[&'static str],
    ) -> Counter {
        let counter = Counter {
            names: LabelNames::new(name, labels),
            family: Family::default(),
        };
        if labels.is_empty() {
            // An unlabelled series exists from the start, so `rate()` sees its first increase.
            drop(counter.family.get_or_create(&Vec::new()));
        }
        lock(&self.inner).register(name, help, counter.family.clone());
        counter
    }

    pub fn gauge(&self, name: &'static str, help: &'static str, labels: &[&'static str]) -> Gauge {
        let gauge = Gauge {
            names: LabelNames::new(name, labels),
            family: Family::default(),
        };
        if labels.is_empty() {
            drop(gauge.family.get_or_create(&Vec::new()));
        }
        lock(&self.inner).register(name, help, gauge.family.clone());
        gauge
    }

    pub fn histogram(
        &self,
        name: &'static str,
        help: &'static str,
        labels: &[&'static str],
        bounds: &[f64],
    ) -> Histogram {
        let histogram = Histogram {
            names: LabelNames::new(name, labels),
            family: Family::new_with_constructor(Buckets(bounds.to_vec())),
        };
        lock(&self.inner).register(name, help, histogram.family.clone());
        histogram
    }

    /// A gauge without labels whose value is read from `sample` at every scrape.
    pub fn sampled_gauge(
        &self,
        name: &'static str,
        help: &'static str,
        sample: impl Fn() -> i64 + Send + Sync + 'static,
    ) {
        self.sampled_gauges(name, help, &[], move || vec![(Vec::new(), sample())]);
    }

    /// A gauge family whose series (label values and value) are read from `sample` at every
    /// scrape.
    pub fn sampled_gauges(
        &self,
        name: &'static str,
        help: &'static str,
        labels: &[&'static str],
        sample: impl Fn() -> Vec<Sample> + Send + Sync + 'static,
    ) {
        lock(&self.inner).register_collector(Box::new(SampledGauges {
            name,
            // The crate ends registered help texts with a period; collectors pass theirs as is.
            help: format!("{help}."),
            names: labels.to_vec(),
            sample: Box::new(sample),
        }));
    }

    /// The exposition of every family in `format`.
    pub fn render(&self, format: Format) -> String {
        let registry = lock(&self.inner);
        let mut out = String::new();
        let encoded = match format {
            Format::Prometheus => {
                prometheus_client::encoding::prometheus_text::encode(&mut out, &registry)
            }
            Format::OpenMetrics => prometheus_client::encoding::text::encode(&mut out, &registry),
        };
        // Writing into a String does not fail; if an encoder ever does, the scrape still gets
        // the families before it rather than nothing.
        if encoded.is_err() {
            tracing::warn!("a metric family failed to encode");
        }
        out
    }
}

#[cfg(test)]
mod tests;
