//! Histories of concurrent clients checked against the protocol's invariants, with crashes.

mod check;
mod crash_points;
