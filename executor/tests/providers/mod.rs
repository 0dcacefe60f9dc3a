//! Model providers against scripted HTTP servers.

mod calls;
mod telemetry;
