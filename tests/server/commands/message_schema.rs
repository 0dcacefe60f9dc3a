//! Transcript messages on the wire follow the newest reference message schema: strict,
//! no `metadata` bag, the input and request a user message records in a typed top-level
//! `correlation`. Transcripts stored in the older shape still load and read in the newest one. On
//! the memory store and (in the PostgreSQL rerun) on PostgreSQL.

use std::sync::Arc;

use crate::support::*;
use agent_runtime::protocol::content::{ModelMessage, ProvenanceSource, Role};
use agent_runtime::protocol::result::ReadSessionResult;
use agent_runtime_cli::Overrides;
use agent_runtime_store::Store;
use agent_runtime_store::model::TranscriptMutation;
use serde_json::{Value, json};

/// Submits `text`, waits for its `result`, and returns the request id.
async fn run_input(server: &TestServer, session: &str, text: &str, after: u64) -> (String, String) {
    let submitted = server.submit(TOKEN_A, session, text).await;
    let request_id = submitted["requestId"].as_str().unwrap().to_owned();
    let input_id = submitted["inputId"].as_str().unwrap().to_owned();
    let events = server
        .until_result(TOKEN_A, session, after, &request_id)
        .await;
    assert!(events.iter().any(is_result), "the request ends: {events:?}");
    (input_id, request_id)
}

/// `session.read`, with every message checked against the strict schema: the typed result parses
/// (unknown keys anywhere are refused) and no message carries `metadata`.
async fn read_strict(server: &TestServer, session: &str) -> ReadSessionResult {
    let data = server.read(TOKEN_A, session).await;
    for message in data["messages"].as_array().unwrap() {
        assert!(message.get("metadata").is_none(), "{message}");
    }
    serde_json::from_value(data.clone())
        .unwrap_or_else(|error| panic!("session.read fits the strict schema ({error}): {data}"))
}

fn last_sequence(read: &ReadSessionResult) -> u64 {
    read.recovery.last_event_sequence.unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_read_messages_fit_the_newest_strict_schema_with_typed_correlation() {
    let server = TestServer::memory().await;
    let session = server.create_session(TOKEN_A).await;
    let (first_input, first_request) = run_input(&server, &session, "hello", 0).await;
    let read = read_strict(&server, &session).await;
    let (second_input, second_request) =
        run_input(&server, &session, "again", last_sequence(&read)).await;

    let read = read_strict(&server, &session).await;
    let users: Vec<&ModelMessage> = read
        .messages
        .iter()
        .filter(|m| m.role == Role::User)
        .collect();
    assert_eq!(users.len(), 2, "{:?}", read.messages);
    for (user, (input, request)) in users.iter().zip([
        (&first_input, &first_request),
        (&second_input, &second_request),
    ]) {
        let correlation = user
            .correlation
            .as_ref()
            .expect("a user message's correlation");
        assert_eq!(&correlation.input_id, input);
        assert_eq!(&correlation.request_id, request);
    }
    assert!(read.messages.iter().any(|m| m.role == Role::Assistant));
    assert!(read.messages.iter().all(|m| m.id.is_some()));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transcript_stored_in_the_older_shape_loads_and_reads_in_the_newest() {
    let store: Arc<dyn Store> = selected_store(DEFAULT_RETENTION).await;
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_with(
        test_config(agent_runtime_cli::config::StoreKind::Memory, dir.path()),
        Overrides {
            store: Some(Arc::clone(&store)),
            ..Overrides::default()
        },
    )
    .await;
    let session = server.create_session(TOKEN_A).await;

    // Before the session first runs (so it loads its conversation from the store): what a server
    // before the newest schema wrote: `metadata.correlation` on applied inputs,
    // `metadata.provenance` on a compaction's summary, and a key of the caller's own.
    let old = [
        json!({"role": "user", "content": "from before",
               "metadata": {"correlation": {"inputId": "i-old", "requestId": "r-old"}}}),
        json!({"role": "assistant", "content": "answer from before"}),
        json!({"role": "system", "content": "summary from before",
               "metadata": {"provenance": "compaction_summary", "note": "kept"}}),
    ]
    .map(|message| message.as_object().cloned().unwrap());
    store
        .mutate_transcript(
            "tenant-a",
            &session,
            TranscriptMutation::AppendMessages(old.to_vec()),
            None,
        )
        .await
        .unwrap();

    // The session loads its stored transcript, old entries included, and runs on.
    run_input(&server, &session, "after the upgrade", 0).await;
    let read = read_strict(&server, &session).await;
    let old_user = read
        .messages
        .iter()
        .find(|m| m.content == "from before".into())
        .expect("the old user message reads");
    let correlation = old_user.correlation.as_ref().unwrap();
    assert_eq!(correlation.input_id, "i-old");
    assert_eq!(correlation.request_id, "r-old");
    let summary = read
        .messages
        .iter()
        .find(|m| m.content == "summary from before".into())
        .expect("the old summary reads");
    assert_eq!(
        summary.provenance.as_ref().map(|p| p.source),
        Some(ProvenanceSource::CompactionSummary)
    );
    assert_eq!(
        summary
            .extensions
            .as_ref()
            .map(|e| Value::Object(e.clone())),
        Some(json!({"legacyMetadata": {"note": "kept"}}))
    );
    assert_eq!(
        read.messages
            .iter()
            .filter(|m| m.role == Role::User)
            .count(),
        2,
        "{:?}",
        read.messages
    );
    server.stop().await;
}

/// What a tool adds to the conversation (`tool_new_messages`: a skill's system prompt addition)
/// fits the strict schema too, in the event and in `session.read`, tagged as a tool injection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_new_messages_and_the_messages_they_add_fit_the_strict_schema() {
    use agent_runtime::protocol::stream::{PatchScope, StreamMessage};
    use agent_runtime_executor::tools::SkillDefinition;
    let mut config = test_config(
        agent_runtime_cli::config::StoreKind::Memory,
        &std::env::temp_dir(),
    );
    config.tools.skills = vec![SkillDefinition {
        name: "concise".into(),
        description: "Answers briefly.".into(),
        instructions: "Be brief.".into(),
        allowed_tools: None,
        disallowed_tools: Vec::new(),
        scope: PatchScope::Session,
        system_prompt_append: Some("Keep every answer under 50 words.".into()),
        model: None,
    }];
    let server = TestServer::start(config).await;
    let session = server.create_session(TOKEN_A).await;
    let loaded = crate::support::tool_calls::call_tool(
        &server,
        &session,
        "Skill",
        json!({ "skill": "concise" }),
    )
    .await;
    let event = &loaded.stream("tool_new_messages")[0]["data"];
    let parsed: StreamMessage = serde_json::from_value(event.clone()).unwrap_or_else(|error| {
        panic!("tool_new_messages fits the strict schema ({error}): {event}")
    });
    let StreamMessage::ToolNewMessages { messages, .. } = parsed else {
        panic!("{event}");
    };
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0].role, Role::System);
    let read = read_strict(&server, &session).await;
    let injected: Vec<&ModelMessage> = read
        .messages
        .iter()
        .filter(|m| {
            m.provenance.as_ref().map(|p| p.source) == Some(ProvenanceSource::ToolInjection)
        })
        .collect();
    assert_eq!(injected.len(), 1);
    assert_eq!(injected[0].role, Role::System);
    server.stop().await;
}
