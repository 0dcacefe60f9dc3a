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

/// Every target, scenario by scenario.
pub fn verdicts(results: &Results) -> Vec<Verdict> {
    let figures = Figures { results };
    [
        b1(&figures),
        b2(&figures),
        b3(&figures),
        b4(&figures),
        b5(&figures),
        b6(&figures),
        b7(&figures),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// The figures of one run.
struct Figures<'a> {
    results: &'a Results,
}

impl Figures<'_> {
    fn get(&self, scenario: &str, deployment: &str, key: &str) -> Option<f64> {
        self.results
            .scenario(scenario, deployment)
            .and_then(|o| value(o, key))
    }

    fn param(&self, scenario: &str, deployment: &str, key: &str) -> Option<f64> {
        self.results
            .scenario(scenario, deployment)
            .and_then(|o| o.params.get(key).and_then(|v| v.as_f64()))
    }

    /// The TPS of pgbench run `name` at the client count of `scenario` on `deployment`.
    fn pgbench(&self, name: &str, scenario: &str, deployment: &str) -> Option<f64> {
        let clients = self.param(scenario, deployment, "clients")? as u64;
        self.results.limit(name, clients).and_then(|o| o.get("tps"))
    }
}

/// The `serve` deployments B1 runs without and with webhooks, in the same run.
const WEBHOOK_PAIRS: [(&str, &str); 2] = [
    ("jsonl-fresh", "jsonl-webhooks"),
    ("postgres-fresh", "postgres-webhooks"),
];

/// B1, cluster: throughput against the command-shaped pgbench, latency at half rate; and on
/// `serve`, what webhooks on every request cost (fresh servers without and with, same run).
fn b1(figures: &Figures) -> Vec<Verdict> {
    let webhooks = WEBHOOK_PAIRS.into_iter().map(|(without, with)| {
        at_least_times(
            "B1",
            with,
            &format!("commands/s ≥ 0.9 × `{without}` (webhooks off, same run)"),
            figures.get("b1", with, "commandsPerSecond"),
            figures.get("b1", without, "commandsPerSecond"),
            0.9,
        )
    });
    let mut verdicts: Vec<Verdict> = webhooks.collect();
    // What "delivery never slows the command path" asks: the same load with webhooks on
    // (paced at the rate without them) answers as fast.
    verdicts.extend(WEBHOOK_PAIRS.into_iter().map(|(without, with)| {
        at_most_times(
            "B1",
            with,
            &format!("p99 at `{without}`'s half rate ≤ 1.1 × `{without}`'s (same rate, same run)"),
            figures.get("b1", with, "halfRateLatencyP99Ms"),
            figures.get("b1", without, "halfRateLatencyP99Ms"),
            1.1,
            "ms",
        )
    }));
    verdicts.extend([
        at_least_times(
            "B1",
            "cluster",
            "commands/s ≥ 0.5 × pgbench 3-statement TPS (same clients)",
            figures.get("b1", "cluster", "commandsPerSecond"),
            figures.pgbench("pgbench-command", "b1", "cluster"),
            0.5,
        ),
        at_most(
            "B1",
            "cluster",
            "p99 at half the maximum rate ≤ 20 ms",
            figures.get("b1", "cluster", "halfRateLatencyP99Ms"),
            20.0,
            "ms",
        ),
    ]);
    verdicts
}

/// B2: group commit beats one-row transactions; on JSONL, the journal's cost against the memory
/// store in the same run.
fn b2(figures: &Figures) -> Vec<Verdict> {
    let mut verdicts: Vec<Verdict> = ["postgres", "cluster"]
        .into_iter()
        .map(|deployment| {
            at_least_times(
                "B2",
                deployment,
                "appended/s ≥ 1.5 × pgbench 1-row insert TPS (same clients)",
                figures.get("b2", deployment, "eventsAppendedPerSecond"),
                figures.pgbench("pgbench-insert", "b2", deployment),
                1.5,
            )
        })
        .collect();
    verdicts.push(at_least_times(
        "B2",
        "jsonl",
        "appended/s ≥ 0.67 × `serve --store memory` (same run)",
        figures.get("b2", "jsonl", "eventsAppendedPerSecond"),
        figures.get("b2", "memory", "eventsAppendedPerSecond"),
        1.0 / 1.5,
    ));
    verdicts
}

/// B3: absolute bounds, and the live path's cost over the bare HTTP stack (the baseline's p99 in
/// the same run).
fn b3(figures: &Figures) -> Vec<Verdict> {
    let mut verdicts: Vec<Verdict> = [("jsonl", 5.0), ("postgres", 5.0), ("cluster", 25.0)]
        .into_iter()
        .map(|(deployment, bound)| {
            at_most(
                "B3",
                deployment,
                &format!("p99 ≤ {bound} ms"),
                figures.get("b3", deployment, "latencyP99Ms"),
                bound,
                "ms",
            )
        })
        .collect();
    let baseline = figures.get("b3", "baseline", "latencyP99Ms");
    // What no durable server can go below: the bare HTTP stack plus one PostgreSQL commit at
    // B3's rate (an event is visible only once committed).
    // B3's clients are its sessions, each streaming 50 events/s.
    let commit = figures
        .param("b3", "postgres", "sessions")
        .and_then(|sessions| {
            figures
                .results
                .limit("pgbench-insert-paced", sessions as u64)
        })
        .and_then(|limit| limit.get("latencyP99Ms"));
    let floor = baseline
        .zip(commit)
        .map(|(baseline, commit)| baseline + commit);
    let limits = [
        ("p99 ≤ 1.5 × the baseline's p99 (same run)", baseline),
        (
            "p99 ≤ 1.5 × (the baseline's p99 + one paced PostgreSQL commit's p99) (same run)",
            floor,
        ),
    ];
    for (target, limit) in limits {
        for deployment in ["postgres", "cluster"] {
            let p99 = figures.get("b3", deployment, "latencyP99Ms");
            verdicts.push(at_most_times(
                "B3", deployment, target, p99, limit, 1.5, "ms",
            ));
        }
    }
    verdicts
}

/// B4: replay throughput.
fn b4(figures: &Figures) -> Vec<Verdict> {
    [
        ("jsonl", 500_000.0),
        ("postgres", 150_000.0),
        ("cluster", 150_000.0),
    ]
    .into_iter()
    .map(|(deployment, bound)| {
        let rate = figures.get("b4", deployment, "eventsPerSecond");
        Verdict {
            scenario: "B4",
            deployment,
            target: format!("≥ {} events/s", format_number(bound)),
            measured: rate.map_or("not measured".to_owned(), format_number),
            met: rate.map(|rate| rate >= bound),
        }
    })
    .collect()
}

/// B5: 10,000 idle connections, small and on time.
fn b5(figures: &Figures) -> Vec<Verdict> {
    ["jsonl", "postgres", "cluster"]
        .into_iter()
        .map(|deployment| {
            let held = figures.get("b5", deployment, "held");
            let connections = figures.get("b5", deployment, "connections");
            let per = figures.get("b5", deployment, "bytesPerConnection");
            let lateness = figures.get("b5", deployment, "heartbeatLatenessP99Ms");
            let met = match (held, connections, per, lateness) {
                (Some(held), Some(connections), Some(per), Some(lateness)) => Some(
                    held >= connections
                        && connections >= 10_000.0
                        && per <= 32.0 * 1024.0
                        && lateness <= HEARTBEAT_SLACK_MS,
                ),
                _ => None,
            };
            Verdict {
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
            }
        })
        .collect()
}

/// B6: fan-out keeps the producer's pace and loses nothing; on JSONL, against the memory store.
fn b6(figures: &Figures) -> Vec<Verdict> {
    let mut verdicts: Vec<Verdict> = ["jsonl", "postgres", "cluster"]
        .into_iter()
        .map(|deployment| b6_fan_out(figures, deployment))
        .collect();
    verdicts.push(at_most_times(
        "B6",
        "jsonl",
        "p99 ≤ 1.5 × `serve --store memory` (same run)",
        figures.get("b6", "jsonl", "latencyP99Ms"),
        figures.get("b6", "memory", "latencyP99Ms"),
        1.5,
        "ms",
    ));
    verdicts
}

fn b6_fan_out(figures: &Figures, deployment: &'static str) -> Verdict {
    let missing = figures.get("b6", deployment, "missing");
    let p99 = figures.get("b6", deployment, "latencyP99Ms");
    let streamed = figures.get("b6", deployment, "streamedEventsPerSecond");
    let wanted = figures.param("b6", deployment, "eventsPerSecond");
    let met = match (streamed, wanted, missing, p99) {
        (Some(streamed), Some(wanted), Some(missing), Some(p99)) => {
            Some(streamed >= STREAM_RATE_SHARE * wanted && missing == 0.0 && p99 <= 100.0)
        }
        _ => None,
    };
    Verdict {
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
    }
}

/// B7: what a loaded idle session holds (LangGraph's in-memory server holds an empty thread in
/// about 1.8 KiB), from idle and for each further session.
fn b7(figures: &Figures) -> Vec<Verdict> {
    let mut verdicts = Vec::new();
    for (figure, what) in [
        ("bytesPerSession", "per loaded session, from idle"),
        ("marginalBytesPerSession", "per further loaded session"),
    ] {
        for (deployment, kib) in [("jsonl", 3.0), ("cluster", 12.0)] {
            let per = figures.get("b7", deployment, figure).map(|b| b / 1024.0);
            let target = format!("≤ {kib} KiB {what} (every process)");
            verdicts.push(at_most("B7", deployment, &target, per, kib, "KiB"));
        }
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

/// A value that must stay within `factor` times a limit measured in the same run.
fn at_most_times(
    scenario: &'static str,
    deployment: &'static str,
    target: &str,
    value: Option<f64>,
    limit: Option<f64>,
    factor: f64,
    unit: &str,
) -> Verdict {
    let measured = match (value, limit) {
        (Some(value), Some(limit)) => {
            format!(
                "{value:.2} {unit} = {:.2} × {limit:.2} {unit}",
                value / limit
            )
        }
        _ => "not measured".to_owned(),
    };
    Verdict {
        scenario,
        deployment,
        target: target.to_owned(),
        measured,
        met: value
            .zip(limit)
            .map(|(value, limit)| value <= factor * limit),
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
