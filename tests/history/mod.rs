//! Histories of concurrent clients checked against the protocol's invariants, with crashes.

mod bundle_move;
mod check;
mod crash_points;
