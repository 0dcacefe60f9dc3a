//! The web console.

mod browser;
mod http;
