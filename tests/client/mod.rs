//! The Rust client SDK against the real server.

mod events;
mod retry;
