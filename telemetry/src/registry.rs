//! A small metrics registry rendered in the Prometheus text format (version 0.0.4): counters,
//! gauges and fixed-bucket histograms with fixed label names, plus gauges sampled at scrape time.
//!
//! Label values come from closed sets (command types, error codes, operation names) or validated
//! identifiers (tenant ids, when configured); the registry escapes them anyway.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, MutexGuard};

/// A metric family's name, help and label names.
#[derive(Debug)]
struct Desc {
    name: &'static str,
    help: &'static str,
    labels: Vec<&'static str>,
}

impl Desc {
    fn header(&self, out: &mut String, kind: &str) {
        let _ = writeln!(out, "# HELP {} {}", self.name, self.help);
        let _ = writeln!(out, "# TYPE {} {kind}", self.name);
    }

    fn key(&self, values: &[&str]) -> Vec<String> {
        assert_eq!(
            values.len(),
            self.labels.len(),
            "metric {} takes labels {:?}",
            self.name,
            self.labels
        );
        values.iter().map(|value| (*value).to_owned()).collect()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// `{a="x",b="y"}` with `extra` appended (the histogram's `le`); empty values are left out, so a
/// success has no `code` label at all.
fn label_set(names: &[&'static str], values: &[String], extra: Option<(&str, &str)>) -> String {
    let mut pairs: Vec<(&str, &str)> = names
        .iter()
        .zip(values)
        .filter(|(_, value)| !value.is_empty())
        .map(|(name, value)| (*name, value.as_str()))
        .collect();
    pairs.extend(extra);
    if pairs.is_empty() {
        return String::new();
    }
    let body: Vec<String> = pairs
        .iter()
        .map(|(name, value)| format!("{name}=\"{}\"", escape(value)))
        .collect();
    format!("{{{}}}", body.join(","))
}

fn escape(value: &str) -> String {
    let mut escaped = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => escaped.push_str("\\\\"),
            '"' => escaped.push_str("\\\""),
            '\n' => escaped.push_str("\\n"),
            c => escaped.push(c),
        }
    }
    escaped
}

fn number(value: f64) -> String {
    if value.is_infinite() {
        return if value > 0.0 { "+Inf" } else { "-Inf" }.to_owned();
    }
    format!("{value}")
}

trait Family: Send + Sync {
    fn render(&self, out: &mut String);
}

/// A monotonically increasing count per label set.
#[derive(Debug)]
pub struct Counter {
    desc: Desc,
    values: Mutex<BTreeMap<Vec<String>, u64>>,
}

impl Counter {
    pub fn inc(&self, labels: &[&str]) {
        self.add(labels, 1);
    }

    pub fn add(&self, labels: &[&str], amount: u64) {
        let key = self.desc.key(labels);
        *lock(&self.values).entry(key).or_default() += amount;
    }

    /// The current value (0 for a label set never seen).
    pub fn get(&self, labels: &[&str]) -> u64 {
        let key = self.desc.key(labels);
        lock(&self.values).get(&key).copied().unwrap_or(0)
    }
}

impl Family for Counter {
    fn render(&self, out: &mut String) {
        self.desc.header(out, "counter");
        let values = lock(&self.values);
        if values.is_empty() && self.desc.labels.is_empty() {
            let _ = writeln!(out, "{} 0", self.desc.name);
        }
        for (key, value) in values.iter() {
            let labels = label_set(&self.desc.labels, key, None);
            let _ = writeln!(out, "{}{labels} {value}", self.desc.name);
        }
    }
}

/// A value that goes up and down per label set.
#[derive(Debug)]
pub struct Gauge {
    desc: Desc,
    values: Mutex<BTreeMap<Vec<String>, i64>>,
}

impl Gauge {
    pub fn add(&self, labels: &[&str], delta: i64) {
        let key = self.desc.key(labels);
        *lock(&self.values).entry(key).or_default() += delta;
    }

    pub fn get(&self, labels: &[&str]) -> i64 {
        let key = self.desc.key(labels);
        lock(&self.values).get(&key).copied().unwrap_or(0)
    }
}

impl Family for Gauge {
    fn render(&self, out: &mut String) {
        self.desc.header(out, "gauge");
        let values = lock(&self.values);
        if values.is_empty() && self.desc.labels.is_empty() {
            let _ = writeln!(out, "{} 0", self.desc.name);
        }
        for (key, value) in values.iter() {
            let labels = label_set(&self.desc.labels, key, None);
            let _ = writeln!(out, "{}{labels} {value}", self.desc.name);
        }
    }
}

/// Label values and the value of one sampled series.
pub type Sample = (Vec<String>, f64);

/// Gauges read at scrape time (loaded sessions, held leases, MCP servers' health).
struct SampledGauge {
    desc: Desc,
    sample: Box<dyn Fn() -> Vec<Sample> + Send + Sync>,
}

impl Family for SampledGauge {
    fn render(&self, out: &mut String) {
        self.desc.header(out, "gauge");
        for (key, value) in (self.sample)() {
            let labels = label_set(&self.desc.labels, &key, None);
            let _ = writeln!(out, "{}{labels} {}", self.desc.name, number(value));
        }
    }
}

#[derive(Debug, Clone)]
struct HistogramValues {
    /// Per bucket (not cumulative), plus the `+Inf` overflow at the end.
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

/// Observations counted into fixed buckets per label set.
#[derive(Debug)]
pub struct Histogram {
    desc: Desc,
    /// Upper bounds, ascending.
    bounds: Vec<f64>,
    values: Mutex<BTreeMap<Vec<String>, HistogramValues>>,
}

impl Histogram {
    pub fn observe(&self, labels: &[&str], value: f64) {
        let key = self.desc.key(labels);
        let slot = self
            .bounds
            .iter()
            .position(|bound| value <= *bound)
            .unwrap_or(self.bounds.len());
        let mut values = lock(&self.values);
        let entry = values.entry(key).or_insert_with(|| HistogramValues {
            counts: vec![0; self.bounds.len() + 1],
            sum: 0.0,
            count: 0,
        });
        entry.counts[slot] += 1;
        entry.sum += value;
        entry.count += 1;
    }

    /// How many observations a label set has.
    pub fn count(&self, labels: &[&str]) -> u64 {
        let key = self.desc.key(labels);
        lock(&self.values)
            .get(&key)
            .map_or(0, |values| values.count)
    }
}

impl Family for Histogram {
    fn render(&self, out: &mut String) {
        self.desc.header(out, "histogram");
        let name = self.desc.name;
        let names = &self.desc.labels;
        for (key, values) in lock(&self.values).iter() {
            let mut cumulative = 0;
            for (bound, count) in self.bounds.iter().zip(&values.counts) {
                cumulative += count;
                let le = number(*bound);
                let labels = label_set(names, key, Some(("le", &le)));
                let _ = writeln!(out, "{name}_bucket{labels} {cumulative}");
            }
            let labels = label_set(names, key, Some(("le", "+Inf")));
            let _ = writeln!(out, "{name}_bucket{labels} {}", values.count);
            let labels = label_set(names, key, None);
            let _ = writeln!(out, "{name}_sum{labels} {}", number(values.sum));
            let _ = writeln!(out, "{name}_count{labels} {}", values.count);
        }
    }
}

/// The families of one process, rendered in registration order.
#[derive(Default)]
pub struct Registry {
    families: Mutex<Vec<Arc<dyn Family>>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("families", &lock(&self.families).len())
            .finish()
    }
}

impl Registry {
    fn desc(name: &'static str, help: &'static str, labels: &[&'static str]) -> Desc {
        Desc {
            name,
            help,
            labels: labels.to_vec(),
        }
    }

    fn add<F: Family + 'static>(&self, family: F) -> Arc<F> {
        let family = Arc::new(family);
        lock(&self.families).push(family.clone());
        family
    }

    pub fn counter(
        &self,
        name: &'static str,
        help: &'static str,
        labels: &[&'static str],
    ) -> Arc<Counter> {
        self.add(Counter {
            desc: Self::desc(name, help, labels),
            values: Mutex::new(BTreeMap::new()),
        })
    }

    pub fn gauge(
        &self,
        name: &'static str,
        help: &'static str,
        labels: &[&'static str],
    ) -> Arc<Gauge> {
        self.add(Gauge {
            desc: Self::desc(name, help, labels),
            values: Mutex::new(BTreeMap::new()),
        })
    }

    pub fn histogram(
        &self,
        name: &'static str,
        help: &'static str,
        labels: &[&'static str],
        bounds: &[f64],
    ) -> Arc<Histogram> {
        self.add(Histogram {
            desc: Self::desc(name, help, labels),
            bounds: bounds.to_vec(),
            values: Mutex::new(BTreeMap::new()),
        })
    }

    /// A gauge without labels whose value is read from `sample` at every scrape.
    pub fn sampled_gauge(
        &self,
        name: &'static str,
        help: &'static str,
        sample: impl Fn() -> f64 + Send + Sync + 'static,
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
        self.add(SampledGauge {
            desc: Self::desc(name, help, labels),
            sample: Box::new(sample),
        });
    }

    /// The text exposition of every family.
    pub fn render(&self) -> String {
        let families: Vec<Arc<dyn Family>> = lock(&self.families).clone();
        let mut out = String::new();
        for family in families {
            family.render(&mut out);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_and_gauges_render_per_label_set() {
        let registry = Registry::default();
        let commands = registry.counter("t_commands_total", "Commands.", &["type", "code"]);
        let plain = registry.counter("t_plain_total", "No labels.", &[]);
        let open = registry.gauge("t_open", "Open things.", &[]);
        commands.inc(&["session.create", ""]);
        commands.add(&["input.submit", "SESSION_NOT_FOUND"], 2);
        open.add(&[], 3);
        open.add(&[], -1);
        assert_eq!(commands.get(&["input.submit", "SESSION_NOT_FOUND"]), 2);
        assert_eq!(plain.get(&[]), 0);
        let text = registry.render();
        assert_eq!(
            text,
            "# HELP t_commands_total Commands.\n\
             # TYPE t_commands_total counter\n\
             t_commands_total{type=\"input.submit\",code=\"SESSION_NOT_FOUND\"} 2\n\
             t_commands_total{type=\"session.create\"} 1\n\
             # HELP t_plain_total No labels.\n\
             # TYPE t_plain_total counter\n\
             t_plain_total 0\n\
             # HELP t_open Open things.\n\
             # TYPE t_open gauge\n\
             t_open 2\n"
        );
    }

    #[test]
    fn histograms_render_cumulative_buckets_sum_and_count() {
        let registry = Registry::default();
        let latency = registry.histogram("t_seconds", "Latency.", &["op"], &[0.1, 1.0]);
        latency.observe(&["read"], 0.05);
        latency.observe(&["read"], 0.5);
        latency.observe(&["read"], 1.0);
        latency.observe(&["read"], 7.0);
        assert_eq!(latency.count(&["read"]), 4);
        assert_eq!(latency.count(&["write"]), 0);
        let text = registry.render();
        assert!(
            text.contains("t_seconds_bucket{op=\"read\",le=\"0.1\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("t_seconds_bucket{op=\"read\",le=\"1\"} 3\n"),
            "{text}"
        );
        assert!(
            text.contains("t_seconds_bucket{op=\"read\",le=\"+Inf\"} 4\n"),
            "{text}"
        );
        assert!(text.contains("t_seconds_sum{op=\"read\"} 8.55\n"), "{text}");
        assert!(text.contains("t_seconds_count{op=\"read\"} 4\n"), "{text}");
    }

    #[test]
    fn label_values_are_escaped_and_sampled_gauges_read_at_scrape_time() {
        let registry = Registry::default();
        let tenants = registry.counter("t_total", "By tenant.", &["tenant"]);
        tenants.inc(&["a\"b\\c\nd"]);
        let loaded = Arc::new(std::sync::atomic::AtomicUsize::new(1));
        let sample = loaded.clone();
        registry.sampled_gauge("t_loaded", "Loaded.", move || {
            sample.load(std::sync::atomic::Ordering::SeqCst) as f64
        });
        loaded.store(5, std::sync::atomic::Ordering::SeqCst);
        let text = registry.render();
        assert!(
            text.contains("t_total{tenant=\"a\\\"b\\\\c\\nd\"} 1\n"),
            "{text}"
        );
        assert!(text.contains("t_loaded 5\n"), "{text}");
        registry.sampled_gauges("t_up", "Up.", &["server"], || {
            vec![(vec!["a".to_owned()], 1.0), (vec!["b".to_owned()], 0.0)]
        });
        let text = registry.render();
        assert!(
            text.contains("t_up{server=\"a\"} 1\nt_up{server=\"b\"} 0\n"),
            "{text}"
        );
    }

    #[test]
    #[should_panic(expected = "takes labels")]
    fn a_wrong_label_count_is_a_programming_error() {
        let registry = Registry::default();
        registry.counter("t_total", "x", &["a"]).inc(&[]);
    }
}
