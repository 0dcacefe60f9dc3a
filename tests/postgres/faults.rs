//! PG-01 and PG-02 of the reliability catalogue (docs/reliability.md) over HTTP:
//! the server's PostgreSQL connections go through `testing::fault_proxy`, which cuts one on cue.
//! (Store-level variants with every claim/seal/complete case: store/tests/postgres/catalogue.rs.)

use crate::support::*;
use agent_runtime::secret::Secret;
use agent_runtime_cli::config::StoreKind;
use agent_runtime_store::testing::fault_proxy::{Fault, FaultProxy};
use agent_runtime_store::testing::postgres::fresh_database_url;
use serde_json::json;

async fn proxied_server() -> (FaultProxy, TestServer) {
    let url = fresh_database_url().await.unwrap();
    let proxy = FaultProxy::start(&url).await.unwrap();
    let mut config = test_config(StoreKind::Postgres, &std::env::temp_dir());
    config.database_url = Some(Secret::new(proxy.proxied_url(&url)));
    // A claim that committed without its caller knowing holds the command for this long.
    config.gateway.command_lease_ttl_ms = 1_000;
    (proxy, TestServer::start(config).await)
}

async fn sessions(server: &TestServer) -> usize {
    let list = server.ok(TOKEN_A, "session.list", json!({})).await;
    list["sessions"].as_array().unwrap().len()
}

/// PG-01: the command's claim transaction loses its connection mid-way. Our protocol answers a
/// store failure with 500 INTERNAL_ERROR, retryable (docs/protocol.md §3 error table; the
/// catalogue's "503 STORE_UNAVAILABLE" is not a code of ours). Nothing is half-written and the
/// retry with the same command id succeeds exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_01_connection_drop_mid_transaction_over_http() {
    let (proxy, server) = proxied_server().await;
    proxy.arm(Fault::ResetBefore("INSERT INTO commands".into()));
    let (status, body) = server
        .command(TOKEN_A, "pg-01-create", "session.create", json!({}))
        .await;
    assert_eq!(proxy.fired(), 1);
    assert_eq!(status, 500, "{body}");
    assert_eq!(body["error"]["code"], "INTERNAL_ERROR");
    assert_eq!(body["error"]["retryable"], true);
    assert_eq!(sessions(&server).await, 0, "nothing half-written");

    let (status, first) = server
        .command(TOKEN_A, "pg-01-create", "session.create", json!({}))
        .await;
    assert_eq!(status, 200, "{first}");
    let (status, replay) = server
        .command(TOKEN_A, "pg-01-create", "session.create", json!({}))
        .await;
    assert_eq!(status, 200);
    assert_eq!(replay, first, "the retry replays the one result");
    assert_eq!(sessions(&server).await, 1, "created exactly once");
    server.stop().await;
}

/// PG-02: the claim's COMMIT reaches PostgreSQL and commits, its reply is lost. The command's
/// claim is sealed in that same commit (its tenant had a slot free), and nobody has run it: the
/// store takes the receipt back by its lease id, so the answer is a plain retryable failure
/// instead of a `COMMAND_IN_PROGRESS` that would last until the sealed receipt is abandoned. The
/// retry runs the command exactly once. (A claim that only claims and whose commit is unknown is
/// answered `COMMAND_IN_PROGRESS` and expires: store/tests/postgres/catalogue.rs.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_02_ambiguous_commit_over_http_never_executes_twice() {
    let (proxy, server) = proxied_server().await;
    // The claim's own commit: a background commit (a sweep) must not take the fault.
    proxy.arm(Fault::DropCommitReplyAfter("INSERT INTO commands".into()));
    let (status, body) = server
        .command(TOKEN_A, "pg-02-create", "session.create", json!({}))
        .await;
    assert_eq!(proxy.fired(), 1);
    assert_eq!(status, 500, "{body}");
    assert_eq!(body["error"]["code"], "INTERNAL_ERROR");
    assert_eq!(body["error"]["retryable"], true);
    assert_eq!(sessions(&server).await, 0, "it never ran");

    let (status, created) = server
        .command(TOKEN_A, "pg-02-create", "session.create", json!({}))
        .await;
    assert_eq!(status, 200, "the retry runs at once: {created}");
    let (_, replay) = server
        .command(TOKEN_A, "pg-02-create", "session.create", json!({}))
        .await;
    assert_eq!(replay, created);
    assert_eq!(sessions(&server).await, 1, "executed exactly once");
    server.stop().await;
}
