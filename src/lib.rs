//! Protocol v1 of the agent session server.
//!
//! This crate owns everything both sides of a wire agree on and nothing that does I/O: the protocol
//! v1 types with strict (de)serialisation, identifier rules, error codes and their HTTP statuses,
//! canonical JSON and command fingerprints, the clock abstraction used for every TTL, the table
//! every command is declared in, and the `SessionExecutor` port. The gRPC bindings of that port are the `agent-runtime-grpc` crate.

pub mod clock;
pub mod config;
pub mod executor_port;
pub mod ids;
pub mod protocol;
pub mod secret;
pub mod session_commands;
pub mod sync;
pub mod telemetry;
pub mod timefmt;
