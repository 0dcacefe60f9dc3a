//! Tools end to end: built-ins, background shells, permissions, MCP, subagents, memory.

mod background_shells;
mod builtin;
mod mcp;
mod memory;
mod permissions;
mod subagents;
