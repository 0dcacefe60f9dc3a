//! The JSON result of one scenario or one limit: what the report is generated from.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::stats::Summary;

/// Whether a result is a product figure or a limit of the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Scenario,
    Limit,
}

/// One scenario run (or one limit measurement).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Outcome {
    pub kind: Kind,
    /// `b1` … `b7`, or the limit's name (`pgbench-insert`, `pgbench-command`, `pgbench-b1-rows`).
    pub name: String,
    /// `jsonl`, `postgres`, `cluster`, `baseline`, or `postgresql` for pgbench.
    pub deployment: String,
    /// The exact command that produced it.
    pub command: String,
    /// RFC 3339 UTC.
    pub started_at: String,
    pub elapsed_s: f64,
    /// The parameters in effect (defaults resolved).
    pub params: BTreeMap<String, Value>,
    /// The measured figures (rates per second, latencies in ms, memory in KiB).
    pub figures: BTreeMap<String, f64>,
    /// Counts that must add up (checked by the smoke test).
    pub counts: BTreeMap<String, u64>,
    /// Errors by code.
    pub errors: BTreeMap<String, u64>,
}

impl Outcome {
    pub fn new(kind: Kind, name: &str, deployment: &str) -> Outcome {
        Outcome {
            kind,
            name: name.to_owned(),
            deployment: deployment.to_owned(),
            command: crate::command_line(),
            started_at: now_rfc3339(),
            elapsed_s: 0.0,
            params: BTreeMap::new(),
            figures: BTreeMap::new(),
            counts: BTreeMap::new(),
            errors: BTreeMap::new(),
        }
    }

    pub fn param(&mut self, name: &str, value: impl Into<Value>) {
        self.params.insert(name.to_owned(), value.into());
    }

    pub fn figure(&mut self, name: &str, value: f64) {
        self.figures.insert(name.to_owned(), value);
    }

    pub fn count(&mut self, name: &str, value: u64) {
        self.counts.insert(name.to_owned(), value);
    }

    pub fn error(&mut self, code: &str) {
        *self.errors.entry(code.to_owned()).or_default() += 1;
    }

    /// Records a latency summary as `{prefix}P50Ms`, `{prefix}P99Ms`, `{prefix}MaxMs`,
    /// `{prefix}MeanMs` and the count `{prefix}Samples`.
    pub fn latency(&mut self, prefix: &str, summary: &Summary) {
        self.figure(&format!("{prefix}P50Ms"), summary.p50_ms);
        self.figure(&format!("{prefix}P99Ms"), summary.p99_ms);
        self.figure(&format!("{prefix}MaxMs"), summary.max_ms);
        self.figure(&format!("{prefix}MeanMs"), summary.mean_ms);
        self.count(&format!("{prefix}Samples"), summary.count);
    }

    pub fn get(&self, figure: &str) -> Option<f64> {
        self.figures.get(figure).copied()
    }

    /// A short human summary.
    pub fn human(&self) -> String {
        let mut text = format!(
            "{} on {} ({:.1} s)\n",
            self.name, self.deployment, self.elapsed_s
        );
        for (name, value) in &self.figures {
            text.push_str(&format!("  {name:<28} {}\n", format_number(*value)));
        }
        for (name, value) in &self.counts {
            text.push_str(&format!("  {name:<28} {value}\n"));
        }
        if !self.errors.is_empty() {
            text.push_str(&format!(
                "  errors                       {:?}\n",
                self.errors
            ));
        }
        text
    }

    /// Prints the summary on stderr and the JSON on stdout, and writes it to `out` if given.
    pub fn emit(&self, out: Option<&Path>) -> anyhow::Result<()> {
        eprint!("{}", self.human());
        let json = serde_json::to_string_pretty(self)?;
        if let Some(path) = out {
            std::fs::write(path, format!("{json}\n"))
                .with_context(|| format!("writing {}", path.display()))?;
        }
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "{json}")?;
        Ok(())
    }
}

/// A figure for people: thousands separated, at most two decimals.
pub fn format_number(value: f64) -> String {
    if !value.is_finite() {
        return value.to_string();
    }
    if value.abs() >= 100.0 {
        let rounded = value.round() as i64;
        let digits = rounded.unsigned_abs().to_string();
        let mut grouped = String::new();
        for (index, digit) in digits.chars().enumerate() {
            if index > 0 && (digits.len() - index).is_multiple_of(3) {
                grouped.push(',');
            }
            grouped.push(digit);
        }
        if rounded < 0 {
            grouped.insert(0, '-');
        }
        grouped
    } else if value.abs() >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    }
}

pub fn now_rfc3339() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_grouped_and_rounded() {
        assert_eq!(format_number(1234567.8), "1,234,568");
        assert_eq!(format_number(100.0), "100");
        assert_eq!(format_number(12.345), "12.3");
        assert_eq!(format_number(1.234), "1.23");
        assert_eq!(format_number(-4321.0), "-4,321");
    }
}
