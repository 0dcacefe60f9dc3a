//! The single-process server on PostgreSQL: restarts, outages, connection faults.

mod faults;
mod server;
