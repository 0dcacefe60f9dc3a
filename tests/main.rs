//! The end-to-end suite: the real `serve` server, clusters of real gateways and executors,
//! and the clients, over real HTTP, SSE and gRPC. Everything under `server` runs twice in CI: on
//! the default store and again on PostgreSQL (`AGENT_RUNTIME_TEST_STORE=postgres`, scripts/test.sh).

mod support;

mod client;
mod cluster;
mod docs;
mod history;
mod postgres;
mod protocol;
mod server;
