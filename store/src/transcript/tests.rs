use serde_json::json;

use super::*;

fn object(value: Value) -> JsonObject {
    match value {
        Value::Object(map) => map,
        other => panic!("not an object: {other}"),
    }
}

fn progress(state: HistoryState, covered: Option<&str>, at: u64) -> HistoryProgress {
    HistoryProgress {
        state,
        request_id: None,
        turn_id: None,
        message_id: None,
        covered_request_id: covered.map(str::to_owned),
        updated_at_ms: at,
        detail: None,
        repaired_messages: None,
    }
}

fn with_messages(messages: Vec<Value>) -> Transcript {
    let mut doc = new_transcript("s", 1);
    let messages = messages.into_iter().map(object).collect();
    apply_mutation(&mut doc, TranscriptMutation::AppendMessages(messages), 2).unwrap();
    doc
}

#[test]
fn unsettled_calls_are_stripped_and_empty_assistant_messages_dropped() {
    let doc = with_messages(vec![
        json!({"role": "user", "content": "go"}),
        json!({"role": "assistant", "content": "thinking", "tool_calls": [
            {"id": "a"}, {"id": "b"}
        ]}),
        json!({"role": "tool", "tool_call_id": "a", "content": "A"}),
        json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c"}]}),
    ]);
    let view = readable(&doc);
    assert_eq!(view.entries.len(), 3);
    assert_eq!(view.entries[1].message["tool_calls"], json!([{"id": "a"}]));
    assert_eq!(view.entries[2].message["role"], "tool");
    // The stored document keeps everything; only the view hides.
    assert_eq!(doc.entries.len(), 4);
}

#[test]
fn a_result_before_its_call_does_not_settle_it() {
    let doc = with_messages(vec![
        json!({"role": "tool", "tool_call_id": "x", "content": "early"}),
        json!({"role": "assistant", "content": "kept", "tool_calls": [{"id": "x"}]}),
    ]);
    let view = readable(&doc);
    assert_eq!(view.entries.len(), 2);
    assert!(view.entries[1].message.get("tool_calls").is_none());
}

#[test]
fn messages_chain_parents_and_inputs_move_into_the_transcript() {
    let mut doc = with_messages(vec![json!({"role": "user", "content": "a"})]);
    let input = object(json!({"inputId": "i1", "content": "queued"}));
    apply_mutation(&mut doc, TranscriptMutation::EnqueueInput(input.clone()), 3).unwrap();
    apply_mutation(&mut doc, TranscriptMutation::EnqueueInput(input), 3).unwrap();
    assert_eq!(doc.pending_inputs.len(), 1);
    let bad = apply_mutation(
        &mut doc,
        TranscriptMutation::EnqueueInput(JsonObject::new()),
        3,
    );
    assert!(bad.is_err());
    let apply = TranscriptMutation::ApplyInput {
        input_id: "i1".into(),
        request_id: "r1".into(),
        message: object(json!({"role": "user", "content": "queued"})),
    };
    apply_mutation(&mut doc, apply, 4).unwrap();
    assert!(doc.pending_inputs.is_empty());
    let last = doc.entries.last().unwrap();
    assert_eq!(
        last.parent_message_id.as_deref(),
        Some(doc.entries[0].id.as_str())
    );
    assert_eq!(
        last.message["correlation"],
        json!({"inputId": "i1", "requestId": "r1"})
    );
    assert_eq!(doc.last_activity_ms, 4);
}

#[test]
fn failed_history_is_sticky_until_repaired_and_coverage_is_kept() {
    let failed = progress(HistoryState::Failed, Some("r1"), 1);
    let ignored = merge_history(Some(&failed), progress(HistoryState::Complete, None, 5));
    assert_eq!(ignored.state, HistoryState::Failed);
    assert_eq!(ignored.updated_at_ms, 5);
    let mut repair = progress(HistoryState::Complete, None, 6);
    repair.repaired_messages = Some(3);
    let repaired = merge_history(Some(&failed), repair);
    assert_eq!(repaired.state, HistoryState::Complete);
    assert_eq!(repaired.covered_request_id.as_deref(), Some("r1"));
}

#[test]
fn ordinary_writes_mark_progress_in_progress_but_keep_failed() {
    let mut doc = with_messages(vec![]);
    let complete =
        TranscriptMutation::SaveHistoryProgress(progress(HistoryState::Complete, Some("r"), 2));
    apply_mutation(&mut doc, complete, 2).unwrap();
    let message = vec![object(json!({"role": "user", "content": "x"}))];
    apply_mutation(
        &mut doc,
        TranscriptMutation::AppendMessages(message.clone()),
        9,
    )
    .unwrap();
    let state = doc.history_progress.as_ref().unwrap();
    assert_eq!(
        (state.state, state.updated_at_ms),
        (HistoryState::InProgress, 9)
    );
    let failed = TranscriptMutation::SaveHistoryProgress(progress(HistoryState::Failed, None, 10));
    apply_mutation(&mut doc, failed, 10).unwrap();
    apply_mutation(&mut doc, TranscriptMutation::AppendMessages(message), 11).unwrap();
    assert_eq!(doc.history_progress.unwrap().state, HistoryState::Failed);
}

#[test]
fn a_fork_takes_the_summary_of_the_last_compaction_in_its_prefix() {
    let mut doc = with_messages(vec![json!({"role": "user", "content": "a"})]);
    let compact = |text: &str| TranscriptMutation::Compact {
        summary: text.to_owned(),
        message: object(json!({"role": "system", "content": text})),
    };
    apply_mutation(&mut doc, compact("first"), 3).unwrap();
    apply_mutation(&mut doc, compact("second"), 4).unwrap();
    assert_eq!(
        doc.entries[1].message["provenance"],
        json!({"source": "compaction_summary"})
    );
    let at_first = fork_prefix(&doc, "f", Some(&doc.entries[1].id), 5).unwrap();
    assert_eq!(at_first.summary.as_deref(), Some("first"));
    assert_eq!(at_first.entries.len(), 2);
    let at_user = fork_prefix(&doc, "f", Some(&doc.entries[0].id), 5).unwrap();
    assert_eq!(at_user.summary, None);
    let whole = fork_prefix(&doc, "f", None, 5).unwrap();
    // A compaction stored in the older shape (`metadata.provenance`) still counts.
    let mut old = doc.clone();
    let legacy = old.entries[1].message.make_mut();
    legacy.remove("provenance");
    legacy.insert(
        "metadata".into(),
        json!({"provenance": "compaction_summary"}),
    );
    let at_old = fork_prefix(&old, "f", Some(&old.entries[1].id), 5).unwrap();
    assert_eq!(at_old.summary.as_deref(), Some("first"));
    assert_eq!(whole.summary.as_deref(), Some("second"));
    assert_eq!(whole.session_id, "f");
}
