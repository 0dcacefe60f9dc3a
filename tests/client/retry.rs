//! The Rust client's command retries against the real server (docs/protocol.md §11.3): one
//! commandId across every attempt, stored results after a lost answer, `retryAfterMs` honoured, and
//! non-retryable failures returned at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::support::client::*;
use crate::support::*;
use agent_runtime::protocol::command::CreateSessionData;
use agent_runtime::protocol::{Command, CommandKind, ErrorCode, JsonObject};
use agent_runtime_cli::Overrides;
use agent_runtime_cli::config::ServeConfig;
use agent_runtime_client::{
    AgentClient, ClientError, CommandOptions, ErrorKind, ListOptions, Secret, SubmitOptions,
    TokenProvider,
};
use agent_runtime_store::{CommandClaim, CommandReceipts, MemoryStore, Store, StoreOptions};
use serde_json::json;
use tokio_util::sync::CancellationToken;

async fn start(
    executed: &Arc<ExecutedCommands>,
    store: Option<Arc<dyn Store>>,
    configure: impl FnOnce(&mut ServeConfig),
) -> TestServer {
    let mut config = memory_config();
    configure(&mut config);
    let overrides = Overrides {
        store,
        telemetry: Some(executed.clone()),
    };
    TestServer::start_with(config, overrides).await
}

fn address(server: &TestServer) -> std::net::SocketAddr {
    server.server.as_ref().unwrap().address
}

fn metadata(value: serde_json::Value) -> Option<JsonObject> {
    value.as_object().cloned()
}

#[tokio::test]
async fn a_command_whose_answer_was_lost_is_retried_with_the_same_id_and_gets_the_stored_result() {
    let executed = Arc::new(ExecutedCommands::default());
    let server = start(&executed, None, |_| {}).await;
    let proxy = Proxy::start(address(&server)).await;
    let log = RetryLog::default();
    let client = client(&proxy.base(), TOKEN_A, &log);
    client.initialize(CommandOptions::default()).await.unwrap();

    // The server completes the create, but its answer never reaches the client.
    proxy.arm(Fault::DropResponse {
        marker: "\"type\":\"session.create\"".to_owned(),
    });
    let session = client
        .create_session(
            metadata(json!({ "from": "lost-answer" })),
            CommandOptions::with_id("lost-answer-create"),
        )
        .await
        .expect("the retry returns the stored result");
    assert_eq!(proxy.fired(), 1, "the answer was dropped once");

    let retries = log.commands();
    assert_eq!(retries.len(), 1, "{retries:?}");
    let Retried::Command {
        command_type,
        command_id,
        kind,
        ..
    } = &retries[0]
    else {
        unreachable!()
    };
    assert_eq!(*command_type, "session.create");
    assert_eq!(command_id, "lost-answer-create");
    assert_eq!(*kind, ErrorKind::Transport);
    assert_eq!(proxy.sent("\"commandId\":\"lost-answer-create\""), 2);

    // The server ran it once; the retry was answered from the idempotency ledger.
    assert_eq!(
        executed.of_type("session.create"),
        vec!["lost-answer-create"]
    );
    let listed = client
        .list_sessions(ListOptions::default(), CommandOptions::default())
        .await
        .unwrap();
    assert_eq!(listed.sessions.len(), 1);
    assert_eq!(listed.sessions[0].session_id, session.session_id());
    assert_eq!(
        session.descriptor().metadata,
        metadata(json!({ "from": "lost-answer" }))
    );
    server.stop().await;
}

#[tokio::test]
async fn command_in_progress_is_retried_after_its_retry_after_ms_and_then_runs() {
    let executed = Arc::new(ExecutedCommands::default());
    let store = Arc::new(MemoryStore::new(StoreOptions::default()));
    let server = start(&executed, Some(store.clone() as Arc<dyn Store>), |_| {}).await;
    let log = RetryLog::default();
    let client = client(&server.base, TOKEN_A, &log);
    client.initialize(CommandOptions::default()).await.unwrap();

    // Another attempt of the same command holds a short, unsealed claim.
    let command = Command::new(
        "busy-create",
        CommandKind::CreateSession(CreateSessionData::default()),
    );
    let claim = store
        .claim_command("tenant-a", "busy-create", &command.fingerprint(), 300)
        .await
        .unwrap();
    assert!(matches!(claim, CommandClaim::Claimed { .. }));

    let session = client
        .create_session(None, CommandOptions::with_id("busy-create"))
        .await
        .expect("the command runs once the claim expired");

    let retries = log.commands();
    assert!(!retries.is_empty());
    let Retried::Command {
        command_id,
        code,
        delay,
        retry_after,
        ..
    } = &retries[0]
    else {
        unreachable!()
    };
    assert_eq!(command_id, "busy-create");
    assert_eq!(*code, ErrorCode::CommandInProgress);
    let retry_after = retry_after.expect("COMMAND_IN_PROGRESS carries retryAfterMs");
    assert!(retry_after > Duration::ZERO && retry_after <= Duration::from_millis(300));
    assert_eq!(*delay, retry_after, "the client waits what the server said");
    assert!(retries.iter().all(|retry| matches!(
        retry,
        Retried::Command { code: ErrorCode::CommandInProgress, command_id, .. } if command_id == "busy-create"
    )));

    assert_eq!(executed.of_type("session.create"), vec!["busy-create"]);
    assert!(!session.session_id().is_empty());
    server.stop().await;
}

#[tokio::test]
async fn non_retryable_failures_are_returned_at_once() {
    let executed = Arc::new(ExecutedCommands::default());
    let server = start(&executed, None, |_| {}).await;
    let proxy = Proxy::start(address(&server)).await;
    let log = RetryLog::default();
    let client = client(&proxy.base(), TOKEN_A, &log);

    let error = client
        .resume_session("no-such-session", CommandOptions::with_id("resume-missing"))
        .await
        .unwrap_err();
    assert_eq!(error.code, ErrorCode::SessionNotFound);
    assert_eq!(error.kind, ErrorKind::Server);
    assert_eq!(error.status, Some(404));
    assert!(!error.retryable);
    assert_eq!(proxy.sent("resume-missing"), 1);
    assert_eq!(executed.of_type("session.resume"), vec!["resume-missing"]);

    // The same commandId for another payload: COMMAND_CONFLICT, not retried either.
    client
        .create_session(None, CommandOptions::with_id("reused-id"))
        .await
        .unwrap();
    let conflict = client
        .create_session(
            metadata(json!({ "different": true })),
            CommandOptions::with_id("reused-id"),
        )
        .await
        .unwrap_err();
    assert_eq!(conflict.code, ErrorCode::CommandConflict);
    assert_eq!(proxy.sent("reused-id"), 2);

    // An argument the protocol refuses never leaves the client.
    let invalid = client
        .submit_input(
            "../unsafe",
            "hello",
            SubmitOptions::default(),
            CommandOptions::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(invalid.code, ErrorCode::InvalidCommand);
    assert_eq!(invalid.kind, ErrorKind::Local);
    assert_eq!(proxy.sent("../unsafe"), 0);

    assert!(log.commands().is_empty(), "{:?}", log.commands());
    server.stop().await;
}

#[tokio::test]
async fn rate_limited_waits_the_servers_retry_after_and_cancellation_ends_the_wait() {
    let executed = Arc::new(ExecutedCommands::default());
    let server = start(&executed, None, |config| {
        config.gateway.commands_per_minute = 2;
    })
    .await;
    let proxy = Proxy::start(address(&server)).await;
    let log = RetryLog::default();
    let client = client(&proxy.base(), TOKEN_A, &log);
    // initialize and the create use up the minute.
    let session = client
        .create_session(None, CommandOptions::default())
        .await
        .unwrap();

    let cancel = CancellationToken::new();
    let submit = tokio::spawn({
        let session = session.clone();
        let options = CommandOptions {
            command_id: Some("limited-submit".to_owned()),
            cancel: Some(cancel.clone()),
        };
        async move {
            session
                .send("hello", SubmitOptions::default(), options)
                .await
        }
    });
    let retry = wait_for(|| log.commands().into_iter().next()).await;
    let Retried::Command {
        code,
        delay,
        retry_after,
        command_id,
        ..
    } = retry
    else {
        unreachable!()
    };
    assert_eq!(code, ErrorCode::RateLimited);
    assert_eq!(command_id, "limited-submit");
    let retry_after = retry_after.expect("RATE_LIMITED carries retryAfterMs");
    assert!(retry_after > Duration::from_secs(1), "{retry_after:?}");
    assert_eq!(delay, retry_after);

    // The client is waiting those seconds; cancelling ends the call without another attempt.
    cancel.cancel();
    let error: ClientError = submit.await.unwrap().unwrap_err();
    assert!(error.is_cancelled(), "{error:?}");
    assert_eq!(proxy.sent("limited-submit"), 1);
    assert_eq!(log.commands().len(), 1);
    server.stop().await;
}

/// A token provider whose first token is wrong.
struct RotatingToken {
    calls: AtomicUsize,
}

#[async_trait::async_trait]
impl TokenProvider for RotatingToken {
    async fn bearer_token(&self) -> Result<Secret, ClientError> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst);
        Ok(Secret::new(if call == 0 {
            "wrong-token-secret"
        } else {
            TOKEN_A
        }))
    }
}

#[tokio::test]
async fn initialize_runs_once_and_a_failed_one_is_tried_again_with_a_fresh_token() {
    let executed = Arc::new(ExecutedCommands::default());
    let server = start(&executed, None, |_| {}).await;
    let log = RetryLog::default();
    let provider = Arc::new(RotatingToken {
        calls: AtomicUsize::new(0),
    });
    let options = client_options(&server.base, TOKEN_A, &log).token_provider(provider.clone());
    let client = AgentClient::new(options).unwrap();

    let first = client
        .list_sessions(ListOptions::default(), CommandOptions::default())
        .await
        .unwrap_err();
    assert_eq!(first.code, ErrorCode::Unauthenticated);
    assert!(!format!("{first:?} {first}").contains("wrong-token-secret"));
    assert!(!format!("{client:?}").contains(TOKEN_A));

    // The failed initialize was forgotten: the next calls initialize again, once for all.
    let (a, b, c) = tokio::join!(
        client.list_sessions(ListOptions::default(), CommandOptions::default()),
        client.create_session(None, CommandOptions::default()),
        client.initialize(CommandOptions::default()),
    );
    a.unwrap();
    b.unwrap();
    let init = c.unwrap();
    assert!(
        init.commands
            .iter()
            .any(|name| name == "permission.resolve")
    );
    assert_eq!(executed.of_type("initialize").len(), 1);
    assert!(
        provider.calls.load(Ordering::SeqCst) >= 4,
        "asked per request"
    );
    server.stop().await;
}

#[tokio::test]
async fn an_unreachable_server_is_tried_max_attempts_times_with_one_command_id() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}/v1/agent", listener.local_addr().unwrap());
    drop(listener);
    let log = RetryLog::default();
    let client = client(&base, "secret-token-value", &log);

    let error = client
        .initialize(CommandOptions::with_id("unreachable-init"))
        .await
        .unwrap_err();
    assert_eq!(error.kind, ErrorKind::Transport);
    assert!(error.retryable);
    assert!(!format!("{error:?}").contains("secret-token-value"));
    let retries = log.commands();
    assert_eq!(retries.len(), 2, "3 attempts: 2 retries");
    assert!(retries.iter().all(|retry| matches!(
        retry,
        Retried::Command { command_id, kind: ErrorKind::Transport, .. } if command_id == "unreachable-init"
    )));
}

/// Polls `probe` until it returns something, for at most 20 s.
async fn wait_for<T>(probe: impl Fn() -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(value) = probe() {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "condition not met in time"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
