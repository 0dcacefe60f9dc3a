//! One table per scenario: each deployment's figures, the limits measured in the same run, the
//! ratios, and the exact commands.

use std::fmt::Write as _;

use super::Results;
use super::machine::Machine;
use crate::outcome::{Outcome, format_number};

pub const INTRO: &str = "
Every figure below was measured by `scripts/bench` in one run on the machine above, with the
limits it is compared with: PostgreSQL's `pgbench` on the same PostgreSQL instance (default
durability: `fsync` and `synchronous_commit` on) at the same client count, and the *baseline
server* (`agent-runtime-bench baseline-server`), which serves the same protocol from memory with
the same HTTP stack (axum, hyper) and none of the product's work, loaded by exactly the same
scenario code. Ratios are the product's figure divided by the limit. Deployments: `jsonl` is
`agent-runtime serve --store jsonl`, `memory` is `serve --store memory` (no journal: what the
JSONL journal costs, B1-B4 and B6 only), `postgres` is `serve --store postgres`, `cluster` is two
gateways and two executors (`agent-runtime gateway`, `agent-runtime executor`) on PostgreSQL.
The commands are the exact ones this run executed (ports and temporary paths change per run).
";

pub const METHOD: &str = "
## How the figures are measured

- **Load generator**: `agent-runtime-bench run bN`, on `agent-runtime-client` (commands are sent
  once, without retries, so that failures are counted; every SSE frame is validated strictly by
  the client). It runs on the same cores as the servers and PostgreSQL.
- **B1**: `clients` workers, each owning 8 sessions, send `input.submit` round-robin; a session
  gets its next input only after its previous request ended (its `result` arrived on the
  session's SSE stream), so commands never queue behind running requests. Phase 1 runs as fast
  as possible; phase 2 is paced at half the rate phase 1 reached (latency measured from the
  send, not from the schedule). The `*-webhooks` deployments are fresh `serve` processes with
  every request's `request.completed` posted to a local receiver, against `*-fresh` without
  (same run); their phase 2 is paced at the `*-fresh` rate, so the two answer the same load,
  and the server's CPU time per command in phase 1 (from `/proc`) shows what a delivery costs.
- **B2**: `clients` sessions run `demo:deltas=N` requests back to back (no pause between deltas).
  Appended = growth of each session's last sequence (`session.read`), delivered = events the
  SSE readers received, both over the time from the first submission to the end of the last
  request.
- **B3, B6**: the demo provider streams on a fixed schedule, as a model does at its own pace (a
  delta that falls behind is sent at once; only a server that stops taking deltas slows the
  stream down), and stamps each delta with its time on that schedule in microseconds
  (`demo:stamp`); latency = arrival at the client minus the stamp. It therefore includes any
  delay in producing the delta and the append's commit, not only the delivery. B3 reads with the full client (after it
  parsed and validated the frame); B6's 1,000 subscribers read with the client's HTTP stack and a
  lean frame splitter (the arrival time is the chunk's), because 1,000 strictly validating
  clients on the same two cores would measure the validation, not the server.
  The baseline commits nothing, so on PostgreSQL B3 is also held against the baseline's p99
  plus the p99 of one PostgreSQL commit at B3's rate (`pgbench-insert-paced`: the one-row
  insert, all clients paced together at clients × 50 transactions/s, latencies from pgbench's
  per-transaction log): the floor of any server that shows an event only once it is committed.
- **B4**: the session holds exactly `events` events (none trimmed, so `after=0` is valid); the
  figure is the median of 5 full replays by one reader that splits the stream into SSE frames
  with the client's parser but does not decode them (the server's delivery rate); the rate of
  the full client, which parses and validates every envelope strictly, is the column beside it.
- **B5**: heartbeats are SSE comments, which the client hides, so B5 reads the streams with the
  client's HTTP stack directly. Memory per connection = growth of the gateway's `VmRSS` (from
  `/proc/PID/status`) from before the connections to 2.5 heartbeat intervals after the last one
  opened, divided by the connections held. Lateness = gap between heartbeats minus the interval.
- **B7**: `VmRSS` of every process right after start (idle), then after each of 5 batches of
  1,000 sessions (each loaded by an executor); per session = total growth / 5,000. The first
  batch also grows, once, what does not depend on the number of sessions (connection pools grown
  to the load, allocator arenas), and a hash table crossing a doubling makes one batch's growth
  lumpy, so per further session = the growth from the end of the first batch to the end of the
  last / 4,000: the slope without the intercept.
- **B8**: `agent-runtime-bench move` writes a JSONL deployment (10 tenants; `sessions` sessions
  of 20 events each) straight into its store, then times the product's binary on the four steps
  of a move there and back (`export` from JSONL, `import` into PostgreSQL, `export` from it,
  `import` into a new JSONL directory), sampling each process's peak resident memory (`VmHWM`,
  every 5 ms). MB/s counts the bundle's bytes. The limit is the same bytes moved without the
  product in the same run: the JSONL journal copied and synced (file steps); the bundle's lines
  `COPY`ed into a one-column table, and for the export also out of it again (PostgreSQL steps).
  It runs at 1,000 and 10,000 sessions: the peak memory of the two sizes shows what grows with
  the deployment.
";

enum Unit {
    Rate,
    Ms,
    /// Bytes, shown in KiB.
    Bytes,
    Count,
    /// A small ratio, two decimals.
    Ratio,
    /// Every `prefix*` figure (KiB), shown as `name MiB` pairs.
    RssList,
}

struct Column {
    label: &'static str,
    figure: &'static str,
    unit: Unit,
}

enum Limit {
    /// A pgbench script at the scenario's client count.
    Pgbench {
        name: &'static str,
        label: &'static str,
    },
    /// A figure of the same scenario on the baseline server.
    Baseline {
        figure: &'static str,
        label: &'static str,
    },
    /// A limit the scenario measured itself, in the same run (`limit*` figures).
    Own {
        figure: &'static str,
        label: &'static str,
    },
}

struct Spec {
    name: &'static str,
    title: &'static str,
    columns: &'static [Column],
    /// The figure the ratios are computed on.
    headline: &'static str,
    limits: &'static [Limit],
}

const fn col(label: &'static str, figure: &'static str, unit: Unit) -> Column {
    Column {
        label,
        figure,
        unit,
    }
}

const SPECS: &[Spec] = &[
    Spec {
        name: "b1",
        title: "B1 — command throughput and latency (`input.submit` and the request it starts)",
        columns: &[
            col("commands/s", "commandsPerSecond", Unit::Rate),
            col("p50 ms", "latencyP50Ms", Unit::Ms),
            col("p99 ms", "latencyP99Ms", Unit::Ms),
            col("max ms", "latencyMaxMs", Unit::Ms),
            col(
                "half-rate commands/s",
                "halfRateCommandsPerSecond",
                Unit::Rate,
            ),
            col("half-rate p50 ms", "halfRateLatencyP50Ms", Unit::Ms),
            col("half-rate p99 ms", "halfRateLatencyP99Ms", Unit::Ms),
            col("server CPU ms / command", "serverCpuMsPerCommand", Unit::Ms),
            col("errors", "failed", Unit::Count),
            col(
                "PG transactions / command",
                "transactionsPerCommand",
                Unit::Ratio,
            ),
            col(
                "PG WAL flushes / command",
                "walSyncsPerCommand",
                Unit::Ratio,
            ),
        ],
        headline: "commandsPerSecond",
        limits: &[
            Limit::Pgbench {
                name: "pgbench-command",
                label: "pgbench 3-statement TPS",
            },
            Limit::Pgbench {
                name: "pgbench-b1-rows",
                label: "pgbench, one command's rows as plain SQL (no server), TPS",
            },
            Limit::Baseline {
                figure: "commandsPerSecond",
                label: "baseline HTTP commands/s",
            },
        ],
    },
    Spec {
        name: "b2",
        title: "B2 — event throughput (requests streaming many small deltas)",
        columns: &[
            col("appended/s", "eventsAppendedPerSecond", Unit::Rate),
            col("delivered/s", "eventsDeliveredPerSecond", Unit::Rate),
            col("requests/s", "requestsPerSecond", Unit::Rate),
            col(
                "PG transactions / event",
                "transactionsPerEvent",
                Unit::Ratio,
            ),
            col("PG WAL flushes / event", "walSyncsPerEvent", Unit::Ratio),
        ],
        headline: "eventsAppendedPerSecond",
        limits: &[
            Limit::Pgbench {
                name: "pgbench-insert",
                label: "pgbench 1-row insert TPS",
            },
            Limit::Baseline {
                figure: "eventsAppendedPerSecond",
                label: "baseline events/s",
            },
        ],
    },
    Spec {
        name: "b3",
        title: "B3 — live latency (event produced → arrived at an SSE client)",
        columns: &[
            col("p50 ms", "latencyP50Ms", Unit::Ms),
            col("p99 ms", "latencyP99Ms", Unit::Ms),
            col("max ms", "latencyMaxMs", Unit::Ms),
            col("events", "latencySamples", Unit::Count),
        ],
        headline: "latencyP99Ms",
        limits: &[Limit::Baseline {
            figure: "latencyP99Ms",
            label: "baseline p99 ms",
        }],
    },
    Spec {
        name: "b4",
        title: "B4 — replay of 10,000 retained events from `after=0`",
        columns: &[
            col("events/s (median)", "eventsPerSecond", Unit::Rate),
            col("best events/s", "bestEventsPerSecond", Unit::Rate),
            col(
                "validated by the client, events/s",
                "validatedEventsPerSecond",
                Unit::Rate,
            ),
        ],
        headline: "eventsPerSecond",
        limits: &[Limit::Baseline {
            figure: "eventsPerSecond",
            label: "baseline events/s",
        }],
    },
    Spec {
        name: "b5",
        title: "B5 — 10,000 idle SSE connections on one gateway",
        columns: &[
            col("held", "held", Unit::Count),
            col("failed", "failed", Unit::Count),
            col("KiB per connection", "bytesPerConnection", Unit::Bytes),
            col(
                "heartbeat lateness p99 ms",
                "heartbeatLatenessP99Ms",
                Unit::Ms,
            ),
            col("lateness max ms", "heartbeatLatenessMaxMs", Unit::Ms),
            col("connections opened/s", "connectionsPerSecond", Unit::Rate),
        ],
        headline: "bytesPerConnection",
        limits: &[Limit::Baseline {
            figure: "bytesPerConnection",
            label: "baseline KiB/connection",
        }],
    },
    Spec {
        name: "b6",
        title: "B6 — fan-out: 1,000 subscribers of one session streaming 200 events/s",
        columns: &[
            col("streamed events/s", "streamedEventsPerSecond", Unit::Rate),
            col("delivered", "delivered", Unit::Count),
            col("missing", "missing", Unit::Count),
            col("p50 ms", "latencyP50Ms", Unit::Ms),
            col("p99 ms", "latencyP99Ms", Unit::Ms),
            col("max ms", "latencyMaxMs", Unit::Ms),
        ],
        headline: "latencyP99Ms",
        limits: &[Limit::Baseline {
            figure: "latencyP99Ms",
            label: "baseline p99 ms",
        }],
    },
    Spec {
        name: "b7",
        title: "B7 — footprint: idle resident memory, memory per loaded idle session",
        columns: &[
            col("idle RSS", "idleRssKiB.", Unit::RssList),
            col("KiB per session", "bytesPerSession", Unit::Bytes),
            col(
                "KiB per further session",
                "marginalBytesPerSession",
                Unit::Bytes,
            ),
            col("sessions created/s", "sessionsCreatedPerSecond", Unit::Rate),
        ],
        headline: "bytesPerSession",
        limits: &[Limit::Baseline {
            figure: "bytesPerSession",
            label: "baseline KiB/session",
        }],
    },
    Spec {
        name: "b8",
        title: "B8 — moving a deployment with session bundles: JSONL → PostgreSQL → JSONL",
        columns: &[
            col("sessions/s", "sessionsPerSecond", Unit::Rate),
            col("events/s", "eventsPerSecond", Unit::Rate),
            col("MB/s", "megabytesPerSecond", Unit::Ratio),
            col("peak RSS MiB", "peakRssMiB", Unit::Ratio),
        ],
        headline: "megabytesPerSecond",
        limits: &[Limit::Own {
            figure: "limitMegabytesPerSecond",
            label: "same bytes without the product, MB/s",
        }],
    },
];

/// A figure or a count of an outcome.
pub fn value(outcome: &Outcome, key: &str) -> Option<f64> {
    outcome
        .get(key)
        .or_else(|| outcome.counts.get(key).map(|&c| c as f64))
}

fn show(outcome: &Outcome, column: &Column) -> String {
    if let Unit::RssList = column.unit {
        let list: Vec<String> = outcome
            .figures
            .iter()
            .filter_map(|(key, kib)| {
                let name = key.strip_prefix(column.figure)?;
                Some(format!("{name} {:.1} MiB", kib / 1024.0))
            })
            .collect();
        return if list.is_empty() {
            "—".to_owned()
        } else {
            list.join(", ")
        };
    }
    let Some(number) = value(outcome, column.figure) else {
        return "—".to_owned();
    };
    match column.unit {
        Unit::Rate | Unit::Count => format_number(number),
        Unit::Ms | Unit::Ratio => format!("{number:.2}"),
        Unit::Bytes => format!("{:.1}", number / 1024.0),
        Unit::RssList => unreachable!("handled above"),
    }
}

fn limit_value(results: &Results, outcome: &Outcome, limit: &Limit) -> Option<(f64, String)> {
    match limit {
        Limit::Pgbench { name, .. } => {
            let clients = outcome.params.get("clients").and_then(|c| c.as_u64())?;
            let pgbench = results.limit(name, clients)?;
            Some((pgbench.get("tps")?, format!("{name} @ {clients} clients")))
        }
        Limit::Baseline { figure, .. } => {
            let baseline = results.scenario(&outcome.name, "baseline")?;
            Some((value(baseline, figure)?, "baseline".to_owned()))
        }
        Limit::Own { figure, .. } => Some((value(outcome, figure)?, "own".to_owned())),
    }
}

pub fn render_scenarios(text: &mut String, results: &Results, machine: &Machine, date: &str) {
    for spec in SPECS {
        let rows = results.deployments(spec.name);
        if rows.is_empty() {
            continue;
        }
        let _ = writeln!(text, "\n## {}\n", spec.title);
        let _ = writeln!(text, "Machine: {}; date: {date}.\n", machine.short());
        let mut header = vec!["deployment".to_owned()];
        header.extend(spec.columns.iter().map(|c| c.label.to_owned()));
        for limit in spec.limits {
            let label = match limit {
                Limit::Pgbench { label, .. }
                | Limit::Baseline { label, .. }
                | Limit::Own { label, .. } => *label,
            };
            header.push(format!("limit: {label}"));
            header.push("ratio".to_owned());
        }
        let _ = writeln!(text, "| {} |", header.join(" | "));
        let _ = writeln!(text, "|{}", "---|".repeat(header.len()));
        for outcome in &rows {
            let mut cells = vec![format!("`{}`", outcome.deployment)];
            cells.extend(spec.columns.iter().map(|c| show(outcome, c)));
            for limit in spec.limits {
                let own_baseline =
                    outcome.deployment == "baseline" && matches!(limit, Limit::Baseline { .. });
                match limit_value(results, outcome, limit).filter(|_| !own_baseline) {
                    Some((limit, _)) => {
                        cells.push(format_limit(spec.headline, limit));
                        let ratio = value(outcome, spec.headline).map(|v| v / limit);
                        cells.push(ratio.map_or("—".to_owned(), |r| format!("{r:.2}")));
                    }
                    None => {
                        cells.push("—".to_owned());
                        cells.push("—".to_owned());
                    }
                }
            }
            let _ = writeln!(text, "| {} |", cells.join(" | "));
        }
        let _ = writeln!(text, "\nCommands:\n");
        for outcome in &rows {
            let _ = writeln!(text, "- `{}`: `{}`", outcome.deployment, outcome.command);
        }
        for outcome in &rows {
            if !outcome.errors.is_empty() {
                let _ = writeln!(
                    text,
                    "- errors on `{}`: {:?}",
                    outcome.deployment, outcome.errors
                );
            }
        }
    }
}

fn format_limit(headline: &str, limit: f64) -> String {
    if headline.ends_with("Ms") || headline.starts_with("megabytes") {
        format!("{limit:.2}")
    } else if headline.starts_with("bytes") {
        format!("{:.1}", limit / 1024.0)
    } else {
        format_number(limit)
    }
}

pub fn render_limits(text: &mut String, results: &Results) {
    let _ = writeln!(text, "\n## Limits measured in this run\n");
    let _ = writeln!(
        text,
        "| limit | clients | figure | command |\n|---|---|---|---|"
    );
    for limit in results.limits() {
        let clients = limit
            .params
            .get("clients")
            .map(|c| c.to_string())
            .unwrap_or_default();
        let latency = match limit.get("latencyP99Ms") {
            Some(p99) => format!(
                "p50 {:.2} ms, p99 {p99:.2} ms",
                limit.get("latencyP50Ms").unwrap_or(0.0)
            ),
            None => format!(
                "mean latency {:.2} ms",
                limit.get("latencyMeanMs").unwrap_or(0.0)
            ),
        };
        let _ = writeln!(
            text,
            "| {} | {clients} | {} tx/s ({latency}) | `{}` |",
            limit.name,
            format_number(limit.get("tps").unwrap_or(0.0)),
            limit.command
        );
    }
    let _ = writeln!(
        text,
        "\nThe baseline server's figures are the `baseline` rows of each scenario table. The pgbench scripts (`bench/sql/`):\n"
    );
    for (name, sql) in [
        ("insert.sql", crate::pgbench::INSERT_SQL),
        ("command.sql", crate::pgbench::COMMAND_SQL),
        ("b1-rows.sql", crate::pgbench::B1_ROWS_SQL),
    ] {
        let _ = writeln!(text, "`{name}`:\n\n```sql\n{}\n```\n", sql.trim());
    }
}
