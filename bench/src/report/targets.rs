//! The benchmark targets (docs/benchmarks.md, *Targets*), checked against this run's figures and
//! limits.

use std::fmt::Write as _;

use super::Results;
use super::tables::value;
use crate::outcome::format_number;

/// A target's verdict.
pub struct Verdict {
    pub scenario: &'static str,
    pub deployment: &'static str,
    pub target: String,
    pub measured: String,
    /// `None`: the figure (or its limit) is missing from the run.
    pub met: Option<bool>,
}

/// B6's session must stream at least this share of the rate it was asked for (200 events/s): a
/// server that cannot keep up slows the producer down instead of losing events.
pub const STREAM_RATE_SHARE: f64 = 0.95;

/// Heartbeats count as on time when the p99 gap exceeds the interval by at most this much.
pub const HEARTBEAT_SLACK_MS: f64 = 500.0;

pub fn verdicts(results: &Results) -> Vec<Verdict> {
    let mut verdicts = Vec::new();
    let figure = |scenario: &str, deployment: &str, key: &str| {
        results
            .scenario(scenario, deployment)
            .and_then(|o| value(o, key))
    };
    let clients = |scenario: &str, deployment: &str| {
        results
            .scenario(scenario, deployment)
            .and_then(|o| o.params.get("clients").and_then(|c| c.as_u64()))
    };
    let pgbench = |name: &str, clients: Option<u64>| {
        clients
            .and_then(|c| results.limit(name, c))
            .and_then(|o| o.get("tps"))
    };

    // B1, cluster: throughput against the command-shaped pgbench, latency at half rate.
    let limit = pgbench("pgbench-command", clients("b1", "cluster"));
    let rate = figure("b1", "cluster", "commandsPerSecond");
    verdicts.push(at_least_times(
        "B1",
        "cluster",
        "commands/s ≥ 0.5 × pgbench 3-statement TPS (same clients)",
        rate,
        limit,
        0.5,
    ));
    let p99 = figure("b1", "cluster", "halfRateLatencyP99Ms");
    verdicts.push(at_most(
        "B1",
        "cluster",
        "p99 at half the maximum rate ≤ 20 ms",
        p99,
        20.0,
        "ms",
    ));

    // B2: group commit beats one-row transactions.
    for deployment in ["postgres", "cluster"] {
        let limit = pgbench("pgbench-insert", clients("b2", deployment));
        let rate = figure("b2", deployment, "eventsAppendedPerSecond");
        verdicts.push(at_least_times(
            "B2",
            deployment,
            "appended/s ≥ 1.5 × pgbench 1-row insert TPS (same clients)",
            rate,
            limit,
            1.5,
        ));
    }

    // B2 and B6 on JSONL against the memory store in the same run: the journal's cost.
    verdicts.push(at_least_times(
        "B2",
        "jsonl",
        "appended/s ≥ 0.67 × `serve --store memory` (same run)",
        figure("b2", "jsonl", "eventsAppendedPerSecond"),
        figure("b2", "memory", "eventsAppendedPerSecond"),
        1.0 / 1.5,
    ));
    let (jsonl, memory) = (
        figure("b6", "jsonl", "latencyP99Ms"),
        figure("b6", "memory", "latencyP99Ms"),
    );
    verdicts.push(Verdict {
        scenario: "B6",
        deployment: "jsonl",
        target: "p99 ≤ 1.5 × `serve --store memory` (same run)".to_owned(),
        measured: match (jsonl, memory) {
            (Some(jsonl), Some(memory)) => {
                format!("{jsonl:.1} ms = {:.2} × {memory:.1} ms", jsonl / memory)
            }
            _ => "not measured".to_owned(),
        },
        met: jsonl
            .zip(memory)
            .map(|(jsonl, memory)| jsonl <= 1.5 * memory),
    });

    for (deployment, bound) in [("jsonl", 5.0), ("postgres", 5.0), ("cluster", 25.0)] {
        let p99 = figure("b3", deployment, "latencyP99Ms");
        verdicts.push(at_most(
            "B3",
            deployment,
            &format!("p99 ≤ {bound} ms"),
            p99,
            bound,
            "ms",
        ));
    }

    for (deployment, bound) in [
        ("jsonl", 500_000.0),
        ("postgres", 150_000.0),
        ("cluster", 150_000.0),
    ] {
        let rate = figure("b4", deployment, "eventsPerSecond");
        verdicts.push(Verdict {
            scenario: "B4",
            deployment,
            target: format!("≥ {} events/s", format_number(bound)),
            measured: rate.map_or("not measured".to_owned(), format_number),
            met: rate.map(|rate| rate >= bound),
        });
    }

    for deployment in ["jsonl", "postgres", "cluster"] {
        let held = figure("b5", deployment, "held");
        let connections = figure("b5", deployment, "connections");
        let per = figure("b5", deployment, "bytesPerConnection");
        let lateness = figure("b5", deployment, "heartbeatLatenessP99Ms");
        let met = match (held, connections, per, lateness) {
            (Some(held), Some(connections), Some(per), Some(lateness)) => Some(
                held >= connections
                    && connections >= 10_000.0
                    && per <= 32.0 * 1024.0
                    && lateness <= HEARTBEAT_SLACK_MS,
            ),
            _ => None,
        };
        verdicts.push(Verdict {
            scenario: "B5",
            deployment,
            target: format!(
                "10,000 held, ≤ 32 KiB each, heartbeat p99 lateness ≤ {HEARTBEAT_SLACK_MS} ms"
            ),
            measured: match (held, per, lateness) {
                (Some(held), Some(per), Some(lateness)) => format!(
                    "{} held, {:.1} KiB, {lateness:.1} ms",
                    format_number(held),
                    per / 1024.0
                ),
                _ => "not measured".to_owned(),
            },
            met,
        });
    }

    for deployment in ["jsonl", "postgres", "cluster"] {
        let missing = figure("b6", deployment, "missing");
        let p99 = figure("b6", deployment, "latencyP99Ms");
        let streamed = figure("b6", deployment, "streamedEventsPerSecond");
        let wanted = results
            .scenario("b6", deployment)
            .and_then(|o| o.params.get("eventsPerSecond").and_then(|r| r.as_f64()));
        let met = match (streamed, wanted, missing, p99) {
            (Some(streamed), Some(wanted), Some(missing), Some(p99)) => {
                Some(streamed >= STREAM_RATE_SHARE * wanted && missing == 0.0 && p99 <= 100.0)
            }
            _ => None,
        };
        verdicts.push(Verdict {
            scenario: "B6",
            deployment,
            target: format!(
                "streams ≥ {STREAM_RATE_SHARE} × the asked 200 events/s; every event to every subscriber; p99 ≤ 100 ms"
            ),
            measured: match (streamed, missing, p99) {
                (Some(streamed), Some(missing), Some(p99)) => format!(
                    "{} events/s, {} missing, p99 {p99:.1} ms",
                    format_number(streamed),
                    format_number(missing)
                ),
                _ => "not measured".to_owned(),
            },
            met,
        });
    }
    verdicts
}

/// A rate that must reach `factor` times a limit measured in the same run.
fn at_least_times(
    scenario: &'static str,
    deployment: &'static str,
    target: &str,
    rate: Option<f64>,
    limit: Option<f64>,
    factor: f64,
) -> Verdict {
    let measured = match (rate, limit) {
        (Some(rate), Some(limit)) => format!(
            "{} = {:.2} × {}",
            format_number(rate),
            rate / limit,
            format_number(limit)
        ),
        _ => "not measured".to_owned(),
    };
    Verdict {
        scenario,
        deployment,
        target: target.to_owned(),
        measured,
        met: rate.zip(limit).map(|(rate, limit)| rate >= factor * limit),
    }
}

fn at_most(
    scenario: &'static str,
    deployment: &'static str,
    target: &str,
    value: Option<f64>,
    bound: f64,
    unit: &str,
) -> Verdict {
    Verdict {
        scenario,
        deployment,
        target: target.to_owned(),
        measured: value.map_or("not measured".to_owned(), |v| format!("{v:.2} {unit}")),
        met: value.map(|v| v <= bound),
    }
}

pub fn render(text: &mut String, results: &Results) {
    let verdicts = verdicts(results);
    let met = verdicts.iter().filter(|v| v.met == Some(true)).count();
    let _ = writeln!(
        text,
        "\n## Targets\n\n{met} of {} targets met in this run.\n",
        verdicts.len()
    );
    let _ = writeln!(
        text,
        "| scenario | deployment | target | measured | met |\n|---|---|---|---|---|"
    );
    for verdict in verdicts {
        let met = match verdict.met {
            Some(true) => "met",
            Some(false) => "**missed**",
            None => "not measured",
        };
        let _ = writeln!(
            text,
            "| {} | `{}` | {} | {} | {met} |",
            verdict.scenario, verdict.deployment, verdict.target, verdict.measured
        );
    }
}
