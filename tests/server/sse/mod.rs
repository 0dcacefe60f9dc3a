//! The per-session SSE stream.

mod catalogue;
mod stream;
