//! PostgreSQL's own counters around a scenario (`--database-url`): how many transactions, written
//! rows and WAL flushes the product spent per command. Read with `psql` from `pg_stat_database`
//! and `pg_stat_wal`.

use std::time::Duration;

use anyhow::{Context, bail};
use tokio::process::Command;

/// Backends publish their statistics when idle for this long (PostgreSQL 15's
/// `PGSTAT_IDLE_INTERVAL` is 10 s), so a reading taken sooner misses the last writes.
pub const SETTLE: Duration = Duration::from_secs(11);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counters {
    /// Committed transactions of the database, read-only ones included.
    pub commits: u64,
    /// Rows inserted, updated and deleted.
    pub rows_written: u64,
    /// WAL flushes to disk (`fsync`/`fdatasync`), for the whole cluster.
    pub wal_syncs: u64,
}

const QUERY: &str = "SELECT d.xact_commit, d.tup_inserted + d.tup_updated + d.tup_deleted, w.wal_sync \
                     FROM pg_stat_database d, pg_stat_wal w WHERE d.datname = current_database()";

pub async fn read(database_url: &str) -> anyhow::Result<Counters> {
    let output = Command::new("psql")
        .args(["-X", "-A", "-t", "-c", QUERY, database_url])
        .output()
        .await
        .context("running psql")?;
    if !output.status.success() {
        bail!("psql failed: {}", String::from_utf8_lossy(&output.stderr));
    }
    parse(&String::from_utf8_lossy(&output.stdout)).context("reading PostgreSQL's counters")
}

fn parse(text: &str) -> Option<Counters> {
    let mut fields = text
        .trim()
        .split('|')
        .map(|field| field.parse::<u64>().ok());
    Some(Counters {
        commits: fields.next()??,
        rows_written: fields.next()??,
        wal_syncs: fields.next()??,
    })
}

impl Counters {
    /// The growth from `before`, per `unit` (e.g. per accepted command).
    pub fn per(&self, before: &Counters, unit: u64) -> [(&'static str, f64); 3] {
        let unit = unit.max(1) as f64;
        [
            (
                "transactions",
                self.commits.saturating_sub(before.commits) as f64 / unit,
            ),
            (
                "rowsWritten",
                self.rows_written.saturating_sub(before.rows_written) as f64 / unit,
            ),
            (
                "walSyncs",
                self.wal_syncs.saturating_sub(before.wal_syncs) as f64 / unit,
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_psql_output() {
        let counters = parse(" 8751|11352|4021\n").unwrap();
        assert_eq!(
            counters,
            Counters {
                commits: 8751,
                rows_written: 11352,
                wal_syncs: 4021
            }
        );
        let before = Counters {
            commits: 751,
            rows_written: 1352,
            wal_syncs: 21,
        };
        let per = counters.per(&before, 100);
        assert_eq!(per[0], ("transactions", 80.0));
        assert_eq!(per[2], ("walSyncs", 40.0));
        assert_eq!(parse("garbage"), None);
    }
}
