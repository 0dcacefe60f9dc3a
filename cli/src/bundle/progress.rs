//! Progress of a long export or import on standard error: on a terminal one line rewritten in
//! place, elsewhere one line every ten seconds, so a log keeps a trace without flooding.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use super::format::{PartKind, PartLine};

pub struct Progress {
    verb: &'static str,
    /// The number of session parts, when known (an import knows it from the index).
    total: Option<u64>,
    sessions: u64,
    events: u64,
    records: u64,
    terminal: bool,
    quiet: bool,
    started: Instant,
    last: Option<Instant>,
}

impl Progress {
    pub fn new(verb: &'static str, total: Option<u64>, quiet: bool) -> Self {
        Self {
            verb,
            total,
            sessions: 0,
            events: 0,
            records: 0,
            terminal: std::io::stderr().is_terminal(),
            quiet,
            started: Instant::now(),
            last: None,
        }
    }

    pub fn part_done(&mut self, part: &PartLine) {
        match part.kind {
            PartKind::Session => self.sessions += 1,
            PartKind::Records => self.records += part.receipts + part.memories,
        }
        self.events += part.events;
        let every = match self.terminal {
            true => Duration::from_millis(200),
            false => Duration::from_secs(10),
        };
        // A run shorter than a second prints nothing but its summary.
        let due = match self.last {
            None => self.started.elapsed() >= Duration::from_secs(1),
            Some(last) => last.elapsed() >= every,
        };
        if due {
            self.last = Some(Instant::now());
            self.print(false);
        }
    }

    pub fn finish(&mut self) {
        if self.last.is_some() {
            self.print(true);
        }
    }

    fn print(&self, last: bool) {
        if self.quiet {
            return;
        }
        let sessions = match self.total {
            Some(total) => format!("{}/{total}", self.sessions),
            None => self.sessions.to_string(),
        };
        let line = format!(
            "{} {sessions} sessions, {} events, {} receipts and memories",
            self.verb, self.events, self.records
        );
        let mut stderr = std::io::stderr().lock();
        let _ = match (self.terminal, last) {
            (true, false) => write!(stderr, "\r{line}"),
            (true, true) => writeln!(stderr, "\r{line}"),
            (false, _) => writeln!(stderr, "{line}"),
        };
    }
}
