use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;

#[test]
fn counters_and_gauges_render_per_label_set_in_both_formats() {
    let registry = Registry::default();
    let commands = registry.counter("t_commands", "Commands", &["type", "code"]);
    let plain = registry.counter("t_plain", "No labels", &[]);
    let open = registry.gauge("t_open", "Open things", &[]);
    commands.inc(&["input.submit", "SESSION_NOT_FOUND"]);
    commands.add(&["input.submit", "SESSION_NOT_FOUND"], 1);
    open.add(&[], 3);
    open.add(&[], -1);
    assert_eq!(commands.get(&["input.submit", "SESSION_NOT_FOUND"]), 2);
    assert_eq!(plain.get(&[]), 0);
    assert_eq!(open.get(&[]), 2);
    assert_eq!(
        registry.render(Format::Prometheus),
        "# HELP t_commands_total Commands.\n\
         # TYPE t_commands_total counter\n\
         t_commands_total{type=\"input.submit\",code=\"SESSION_NOT_FOUND\"} 2\n\
         # HELP t_plain_total No labels.\n\
         # TYPE t_plain_total counter\n\
         t_plain_total 0\n\
         # HELP t_open Open things.\n\
         # TYPE t_open gauge\n\
         t_open 2\n"
    );
    assert_eq!(
        registry.render(Format::OpenMetrics),
        "# HELP t_commands Commands.\n\
         # TYPE t_commands counter\n\
         t_commands_total{type=\"input.submit\",code=\"SESSION_NOT_FOUND\"} 2\n\
         # HELP t_plain No labels.\n\
         # TYPE t_plain counter\n\
         t_plain_total 0\n\
         # HELP t_open Open things.\n\
         # TYPE t_open gauge\n\
         t_open 2\n\
         # EOF\n"
    );
}

#[test]
fn an_empty_label_value_leaves_the_label_out() {
    let registry = Registry::default();
    let commands = registry.counter("t_commands", "Commands", &["type", "code"]);
    commands.inc(&["session.create", ""]);
    let text = registry.render(Format::Prometheus);
    assert!(
        text.contains("t_commands_total{type=\"session.create\"} 1\n"),
        "{text}"
    );
}

#[test]
fn histograms_render_cumulative_buckets_sum_and_count() {
    let registry = Registry::default();
    let latency = registry.histogram("t_seconds", "Latency", &["op"], &[0.1, 1.0]);
    for value in [0.05, 0.5, 1.0, 7.0] {
        latency.observe(&["read"], value);
    }
    let text = registry.render(Format::Prometheus);
    for line in [
        "# TYPE t_seconds histogram\n",
        "t_seconds_bucket{op=\"read\",le=\"0.1\"} 1\n",
        "t_seconds_bucket{op=\"read\",le=\"1\"} 3\n",
        "t_seconds_bucket{op=\"read\",le=\"+Inf\"} 4\n",
        "t_seconds_sum{op=\"read\"} 8.55\n",
        "t_seconds_count{op=\"read\"} 4\n",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
    // OpenMetrics writes bucket bounds as floats.
    let text = registry.render(Format::OpenMetrics);
    assert!(
        text.contains("t_seconds_bucket{le=\"1.0\",op=\"read\"} 3\n"),
        "{text}"
    );
}

#[test]
fn label_values_are_escaped_and_sampled_gauges_read_at_scrape_time() {
    let registry = Registry::default();
    let tenants = registry.counter("t", "By tenant", &["tenant"]);
    tenants.inc(&["a\"b\\c\nd"]);
    let loaded = Arc::new(AtomicUsize::new(1));
    let sample = loaded.clone();
    registry.sampled_gauge("t_loaded", "Loaded", move || {
        sample.load(Ordering::SeqCst) as i64
    });
    loaded.store(5, Ordering::SeqCst);
    registry.sampled_gauges("t_up", "Up", &["server"], || {
        vec![(vec!["a".to_owned()], 1), (vec!["b".to_owned()], 0)]
    });
    for format in [Format::Prometheus, Format::OpenMetrics] {
        let text = registry.render(format);
        assert!(
            text.contains("t_total{tenant=\"a\\\"b\\\\c\\nd\"} 1\n"),
            "{text}"
        );
        assert!(text.contains("# HELP t_loaded Loaded.\n"), "{text}");
        assert!(text.contains("t_loaded 5\n"), "{text}");
        assert!(
            text.contains("t_up{server=\"a\"} 1\nt_up{server=\"b\"} 0\n"),
            "{text}"
        );
    }
}

#[test]
#[should_panic(expected = "takes labels")]
fn a_wrong_label_count_is_a_programming_error() {
    let registry = Registry::default();
    registry.counter("t", "x", &["a"]).inc(&[]);
}
