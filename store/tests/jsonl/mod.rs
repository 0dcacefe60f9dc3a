//! The embedded JSONL store.

mod catalogue;
mod compaction;
mod crash;
mod disk_full;
mod edge_files;
mod fuzz;
mod semantics;
mod store;
