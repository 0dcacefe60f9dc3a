//! The conformance suite (`agent_runtime_store::conformance`) on each backend.

mod jsonl;
mod memory;
mod postgres;
