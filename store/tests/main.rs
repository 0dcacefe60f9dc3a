//! The store's integration tests: the conformance suite on every backend, then each backend's own.

mod common;
mod support;

mod conformance;
mod jsonl;
mod memory_journal;
mod persisted_tool_data;
mod portable;
mod postgres;
