//! The transcript projection: one document per session, every write an atomic read-modify-write,
//! a readable view without dangling tool calls, and the history-progress merge rules
//! (docs/storage.md §8; cases 54-57 adapted to the transcript port). Messages use the protocol's
//! `ModelMessage` shape (`tool_calls[].id`, `tool_call_id`).

use agent_runtime::protocol::JsonObject;
use serde_json::{Value, json};

use super::support::*;
use super::{Factory, Harness};
use crate::error::RuntimeErrorCode;
use crate::model::*;

fn user(text: &str) -> JsonObject {
    obj(json!({ "role": "user", "content": text }))
}

/// An assistant message calling `Search` once per id.
fn assistant_calling(content: &str, call_ids: &[&str]) -> JsonObject {
    let calls: Vec<Value> = call_ids
        .iter()
        .map(|id| {
            json!({
                "id": id,
                "type": "function",
                "function": { "name": "Search", "arguments": "{\"query\":\"blade\"}" }
            })
        })
        .collect();
    obj(json!({ "role": "assistant", "content": content, "tool_calls": calls }))
}

fn tool_result(call_id: &str) -> JsonObject {
    obj(json!({ "role": "tool", "tool_call_id": call_id, "content": "{\"matches\":1}" }))
}

fn pending_input(input_id: &str, content: &str) -> JsonObject {
    obj(json!({ "inputId": input_id, "content": content, "priority": "later", "acceptedAt": 1 }))
}

fn progress(state: HistoryState, covered: Option<&str>) -> HistoryProgress {
    HistoryProgress {
        state,
        request_id: covered.map(str::to_owned),
        turn_id: None,
        message_id: None,
        covered_request_id: covered.map(str::to_owned),
        updated_at_ms: 1,
        detail: None,
        repaired_messages: None,
    }
}

/// Tool-call ids an entry still shows (none when stripped or absent).
fn call_ids(entry: &TranscriptEntry) -> Vec<String> {
    let calls = entry.message.get("tool_calls").and_then(Value::as_array);
    calls
        .into_iter()
        .flatten()
        .filter_map(|call| call["id"].as_str().map(str::to_owned))
        .collect()
}

fn role(entry: &TranscriptEntry) -> &str {
    entry.message["role"].as_str().unwrap_or("?")
}

fn roles(transcript: &Transcript) -> Vec<&str> {
    transcript.entries.iter().map(role).collect()
}

async fn create(h: &Harness, session_id: &str) -> Transcript {
    h.store
        .create_transcript(TENANT, session_id, None)
        .await
        .expect("create transcript")
}

/// Mutates the transcript of `SESSION` and returns its readable view afterwards.
async fn mutate(h: &Harness, mutation: TranscriptMutation) -> Transcript {
    h.store
        .mutate_transcript(TENANT, SESSION, mutation, None)
        .await
        .expect("mutate transcript");
    load(h, SESSION).await.expect("the mutated transcript")
}

async fn load(h: &Harness, session_id: &str) -> Option<Transcript> {
    h.store
        .load_transcript(TENANT, session_id)
        .await
        .expect("load transcript")
}

async fn save_progress(h: &Harness, record: HistoryProgress) -> Option<HistoryProgress> {
    let saved = mutate(h, TranscriptMutation::SaveHistoryProgress(record)).await;
    saved.history_progress.map(|progress| *progress)
}

/// Case 54: user message, tool use, tool result, compaction, then a queued input.
async fn build_case_54(h: &Harness) -> Transcript {
    create(h, SESSION).await;
    let messages = vec![
        user("hello"),
        assistant_calling("", &["call-1"]),
        tool_result("call-1"),
    ];
    mutate(h, TranscriptMutation::AppendMessages(messages)).await;
    let summary = obj(json!({ "role": "system", "content": "summary" }));
    let compact = TranscriptMutation::Compact {
        summary: "summary".to_owned(),
        message: summary,
    };
    mutate(h, compact).await;
    let enqueue = TranscriptMutation::EnqueueInput(pending_input("input-1", "later please"));
    mutate(h, enqueue).await
}

pub async fn create_transcript_is_empty_and_idempotent(factory: Factory) {
    let h = factory.start().await;
    assert_eq!(load(&h, SESSION).await, None);

    let created = create(&h, SESSION).await;
    h.advance(1_000);
    mutate(&h, TranscriptMutation::AppendMessages(vec![user("hi")])).await;
    let again = create(&h, SESSION).await;

    assert_eq!(created.session_id, SESSION);
    assert!(created.entries.is_empty() && created.pending_inputs.is_empty());
    assert_eq!(
        (created.summary.as_ref(), created.history_progress.as_ref()),
        (None, None)
    );
    assert_eq!(created.created_at_ms, h.now() - 1_000);
    assert_eq!(again.created_at_ms, created.created_at_ms);
    assert_eq!(again.entries.len(), 1);
}

/// Case 54.
pub async fn transcript_holds_messages_summary_and_pending_inputs(factory: Factory) {
    let h = factory.start().await;

    let transcript = build_case_54(&h).await;

    assert_eq!(load(&h, SESSION).await, Some(transcript.clone()));
    assert_eq!(transcript.summary.as_deref(), Some("summary"));
    assert_eq!(
        roles(&transcript),
        vec!["user", "assistant", "tool", "system"]
    );
    assert_eq!(transcript.entries[0].message["content"], "hello");
    assert!(transcript.entries.iter().all(|entry| !entry.id.is_empty()));
    assert_eq!(transcript.pending_inputs.len(), 1);
    assert_eq!(transcript.pending_inputs[0]["inputId"], "input-1");
}

/// A write returns exactly the entries it appended, as stored (ids, parents, times), so a writer
/// that keeps its own copy sees what a load would; a write that appends nothing returns none.
pub async fn a_write_returns_the_entries_it_appended_as_stored(factory: Factory) {
    let h = factory.start().await;
    create(&h, SESSION).await;
    let first = h
        .store
        .mutate_transcript(
            TENANT,
            SESSION,
            TranscriptMutation::AppendMessages(vec![user("one"), user("two")]),
            None,
        )
        .await
        .expect("append");
    let queued = h
        .store
        .mutate_transcript(
            TENANT,
            SESSION,
            TranscriptMutation::EnqueueInput(pending_input("input-1", "three")),
            None,
        )
        .await
        .expect("enqueue");
    let applied = h
        .store
        .mutate_transcript(
            TENANT,
            SESSION,
            TranscriptMutation::ApplyInput {
                input_id: "input-1".to_owned(),
                request_id: "request-1".to_owned(),
                message: user("three"),
            },
            None,
        )
        .await
        .expect("apply");

    assert_eq!(first.len(), 2);
    assert!(queued.is_empty());
    assert_eq!(applied.len(), 1);
    let loaded = load(&h, SESSION).await.expect("the transcript");
    let written: Vec<TranscriptEntry> = first.into_iter().chain(applied).collect();
    assert_eq!(loaded.entries, written);
    assert_eq!(
        written[2].parent_message_id.as_deref(),
        Some(written[1].id.as_str())
    );
}

/// Case 55: applying an input moves it into the messages; a cancelled input disappears.
pub async fn applied_and_cancelled_inputs_leave_the_queue(factory: Factory) {
    let h = factory.start().await;
    build_case_54(&h).await;
    let apply = TranscriptMutation::ApplyInput {
        input_id: "input-1".to_owned(),
        request_id: "request-1".to_owned(),
        message: user("later please"),
    };
    mutate(&h, apply).await;
    mutate(
        &h,
        TranscriptMutation::EnqueueInput(pending_input("input-2", "x")),
    )
    .await;
    let cancel = TranscriptMutation::CancelInput {
        input_id: "input-2".to_owned(),
    };

    let transcript = mutate(&h, cancel).await;

    assert!(transcript.pending_inputs.is_empty());
    assert_eq!(transcript.entries.len(), 5);
    assert_eq!(transcript.entries[4].message["content"], "later please");
    let user_or_assistant = roles(&transcript)
        .into_iter()
        .filter(|role| matches!(*role, "user" | "assistant"))
        .count();
    assert_eq!(user_or_assistant, 3);
    assert_eq!(
        h.store.list_transcripts(TENANT).await,
        Ok(vec![SESSION.to_owned()])
    );
}

/// Enqueueing an input id again replaces it.
pub async fn enqueue_input_upserts_by_input_id(factory: Factory) {
    let h = factory.start().await;
    create(&h, SESSION).await;
    mutate(
        &h,
        TranscriptMutation::EnqueueInput(pending_input("input-1", "v1")),
    )
    .await;

    let transcript = mutate(
        &h,
        TranscriptMutation::EnqueueInput(pending_input("input-1", "v2")),
    )
    .await;

    assert_eq!(
        transcript.pending_inputs,
        vec![pending_input("input-1", "v2")]
    );
}

/// Unsettled calls are stripped; an assistant message left empty and unsettled tool messages
/// are hidden; settling a call reveals it.
pub async fn readable_view_hides_unsettled_tool_calls(factory: Factory) {
    let h = factory.start().await;
    create(&h, SESSION).await;
    let first = vec![user("find blade"), assistant_calling("", &["call-1"])];
    let after_first = mutate(&h, TranscriptMutation::AppendMessages(first)).await;
    assert_eq!(roles(&after_first), vec!["user"]);

    let second = vec![
        assistant_calling("Looking", &["call-2", "call-3"]),
        tool_result("call-2"),
    ];
    let partly = mutate(&h, TranscriptMutation::AppendMessages(second)).await;
    assert_eq!(roles(&partly), vec!["user", "assistant", "tool"]);
    assert_eq!(call_ids(&partly.entries[1]), vec!["call-2"]);
    assert_eq!(partly.entries[1].message["content"], "Looking");

    let settled = mutate(
        &h,
        TranscriptMutation::AppendMessages(vec![tool_result("call-1")]),
    )
    .await;

    assert_eq!(load(&h, SESSION).await, Some(settled.clone()));
    assert_eq!(
        roles(&settled),
        vec!["user", "assistant", "assistant", "tool", "tool"]
    );
    assert_eq!(call_ids(&settled.entries[1]), vec!["call-1"]);
}

/// `coveredRequestId` is kept when an update omits it.
pub async fn covered_request_id_is_kept_when_omitted(factory: Factory) {
    let h = factory.start().await;
    create(&h, SESSION).await;
    save_progress(&h, progress(HistoryState::Complete, Some("request-1"))).await;

    let mut next = progress(HistoryState::InProgress, None);
    next.request_id = Some("request-2".to_owned());
    let saved = save_progress(&h, next).await.expect("progress");

    assert_eq!(saved.state, HistoryState::InProgress);
    assert_eq!(saved.covered_request_id.as_deref(), Some("request-1"));
    let later = save_progress(&h, progress(HistoryState::Complete, Some("request-2"))).await;
    assert_eq!(
        later.and_then(|p| p.covered_request_id).as_deref(),
        Some("request-2")
    );
}

/// A failed gap stays failed until an update carries `repairedMessages`.
pub async fn failed_history_progress_is_sticky_until_repaired(factory: Factory) {
    let h = factory.start().await;
    create(&h, SESSION).await;
    let mut gap = progress(HistoryState::Failed, Some("request-1"));
    gap.detail = Some("transcript write failed".to_owned());
    save_progress(&h, gap).await;

    let ignored = save_progress(&h, progress(HistoryState::Complete, Some("request-2"))).await;
    assert_eq!(ignored.map(|p| p.state), Some(HistoryState::Failed));

    let mut repair = progress(HistoryState::Complete, Some("request-2"));
    repair.repaired_messages = Some(3);
    let repaired = save_progress(&h, repair).await.expect("progress");

    assert_eq!(repaired.state, HistoryState::Complete);
    assert_eq!(repaired.repaired_messages, Some(3));
    assert_eq!(repaired.covered_request_id.as_deref(), Some("request-2"));
}

/// A write that does not set progress marks it in progress again, but never clears a gap (S6).
pub async fn ordinary_writes_mark_history_in_progress_unless_failed(factory: Factory) {
    let h = factory.start().await;
    create(&h, SESSION).await;
    save_progress(&h, progress(HistoryState::Complete, Some("request-1"))).await;

    let written = mutate(&h, TranscriptMutation::AppendMessages(vec![user("more")])).await;

    let progressed = written.history_progress.expect("progress");
    assert_eq!(progressed.state, HistoryState::InProgress);
    assert_eq!(progressed.covered_request_id.as_deref(), Some("request-1"));
    save_progress(&h, progress(HistoryState::Failed, None)).await;
    let after_gap = mutate(&h, TranscriptMutation::AppendMessages(vec![user("x")])).await;
    assert_eq!(
        after_gap.history_progress.map(|p| p.state),
        Some(HistoryState::Failed)
    );
}

/// A durable `request_completed` marks the transcript complete up to that request (S6).
pub async fn durable_request_completed_marks_history_complete(factory: Factory) {
    let h = factory.start().await;
    create(&h, SESSION).await;
    let mut completed = draft("request_completed");
    completed.correlation.request_id = Some("request-7".to_owned());

    h.store
        .append_durable(
            TENANT,
            SESSION,
            vec![completed],
            ExpectedSequence::Any,
            None,
        )
        .await
        .unwrap();

    let progress = load(&h, SESSION).await.and_then(|t| t.history_progress);
    let progress = progress.expect("history progress after request_completed");
    assert_eq!(progress.state, HistoryState::Complete);
    assert_eq!(progress.covered_request_id.as_deref(), Some("request-7"));
}

/// Fork copies the prefix up to and including the message; the summary is the prefix's own.
pub async fn fork_copies_the_prefix_up_to_the_message(factory: Factory) {
    let h = factory.start().await;
    let source = build_case_54(&h).await;
    let tool_result_id = source.entries[2].id.clone();

    let prefix = h
        .store
        .fork_transcript(TENANT, SESSION, "fork-prefix", Some(&tool_result_id))
        .await
        .unwrap();
    let whole = h
        .store
        .fork_transcript(TENANT, SESSION, "fork-whole", None)
        .await
        .unwrap();

    assert_eq!(prefix.session_id, "fork-prefix");
    assert_eq!(roles(&prefix), vec!["user", "assistant", "tool"]);
    assert_eq!(prefix.summary, None);
    assert_eq!(roles(&whole), roles(&source));
    assert_eq!(whole.summary.as_deref(), Some("summary"));
    assert_eq!(load(&h, "fork-prefix").await, Some(prefix));
    assert_eq!(load(&h, SESSION).await, Some(source));
}

pub async fn fork_at_an_unknown_message_is_invalid(factory: Factory) {
    let h = factory.start().await;
    build_case_54(&h).await;

    let forked = h
        .store
        .fork_transcript(TENANT, SESSION, "fork", Some("no-such-message"))
        .await;

    expect_invalid(
        forked,
        "Message with ID \"no-such-message\" not found in session history",
    );
    assert_eq!(load(&h, "fork").await, None);
}

/// Case 57.
pub async fn deleted_transcript_is_gone(factory: Factory) {
    let h = factory.start().await;
    create(&h, "session-d").await;
    create(&h, SESSION).await;

    h.store
        .delete_transcript(TENANT, "session-d")
        .await
        .expect("delete");

    assert_eq!(load(&h, "session-d").await, None);
    assert_eq!(
        h.store.list_transcripts(TENANT).await,
        Ok(vec![SESSION.to_owned()])
    );
}

pub async fn transcripts_list_in_ascending_id_order(factory: Factory) {
    let h = factory.start().await;
    for id in ["session-c", "session-a", "session-b"] {
        create(&h, id).await;
    }

    let listed = h.store.list_transcripts(TENANT).await.unwrap();

    assert_eq!(listed, vec!["session-a", "session-b", "session-c"]);
}

/// Case 56: another tenant neither sees nor writes the transcript.
pub async fn transcripts_are_partitioned_by_tenant(factory: Factory) {
    let h = factory.start().await;
    create(&h, SESSION).await;
    let mutation = TranscriptMutation::AppendMessages(vec![user("intruder")]);

    let written = h
        .store
        .mutate_transcript(OTHER_TENANT, SESSION, mutation, None)
        .await;

    expect_runtime(written, RuntimeErrorCode::TranscriptNotFound);
    assert_eq!(
        h.store.load_transcript(OTHER_TENANT, SESSION).await,
        Ok(None)
    );
    assert_eq!(h.store.list_transcripts(OTHER_TENANT).await, Ok(vec![]));
    assert!(load(&h, SESSION).await.unwrap().entries.is_empty());
}
