//! The binary's tests: `serve`, the cluster processes, the console, secrets, the docs.

mod support;

mod a2a;
mod agui;
mod bundle;
mod chat_pty;
mod cluster;
mod console;
mod deploy;
mod docs;
mod js_client;
mod python_client;
mod secrets;
mod serve;
