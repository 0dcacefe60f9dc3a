//! The transcript document rules of docs/storage.md §8, as pure functions over [`Transcript`]: how
//! a mutation changes the document, the readable view that never shows a dangling tool call, the
//! history-progress merge, and the prefix copied by a fork.

use std::collections::HashSet;

use agent_runtime::ids::nanoid;
use agent_runtime::protocol::JsonObject;
use agent_runtime::protocol::content::{Correlation, Provenance, ProvenanceSource};
use agent_runtime::protocol::message_compat;
use serde_json::Value;

use crate::error::{StoreError, StoreResult};
use crate::model::{
    HistoryProgress, HistoryState, Transcript, TranscriptEntry, TranscriptMutation,
};

/// An empty document for a new session.
pub fn new_transcript(session_id: &str, now: u64) -> Transcript {
    Transcript {
        session_id: session_id.to_owned(),
        created_at_ms: now,
        last_activity_ms: now,
        entries: Vec::new(),
        pending_inputs: Vec::new(),
        summary: None,
        history_progress: None,
    }
}

fn append_message(doc: &mut Transcript, message: JsonObject, now: u64) {
    let parent_message_id = doc.entries.last().map(|entry| entry.id.clone());
    doc.entries.push(TranscriptEntry {
        id: nanoid(),
        parent_message_id,
        created_at_ms: now,
        message: message.into(),
    });
}

pub(crate) fn input_id(input: &JsonObject) -> Option<&str> {
    input.get("inputId").and_then(Value::as_str)
}

/// Adds a pending input at the end, or replaces the one with its `inputId` in place.
pub(crate) fn enqueue_pending(pending: &mut Vec<JsonObject>, input: JsonObject) {
    let id = input_id(&input).map(str::to_owned);
    match pending
        .iter_mut()
        .find(|existing| input_id(existing) == id.as_deref())
    {
        Some(existing) => *existing = input,
        None => pending.push(input),
    }
}

pub(crate) fn remove_pending(pending: &mut Vec<JsonObject>, id: &str) {
    pending.retain(|existing| input_id(existing) != Some(id));
}

/// What a mutation does to the pending inputs: the one it removes (by `inputId`) and the one it
/// adds or replaces. A journal records this instead of the whole list, so queueing an input
/// costs its own size, not the queue's.
pub fn pending_change(mutation: &TranscriptMutation) -> (Option<String>, Option<JsonObject>) {
    match mutation {
        TranscriptMutation::EnqueueInput(input) => (None, Some(input.clone())),
        TranscriptMutation::CancelInput { input_id }
        | TranscriptMutation::ApplyInput { input_id, .. } => (Some(input_id.clone()), None),
        _ => (None, None),
    }
}

/// Applies one mutation. Validation happens before anything changes, so an error leaves the
/// document untouched.
pub fn apply_mutation(
    doc: &mut Transcript,
    mutation: TranscriptMutation,
    now: u64,
) -> StoreResult<()> {
    let ordinary = !matches!(mutation, TranscriptMutation::SaveHistoryProgress(_));
    match mutation {
        TranscriptMutation::AppendMessages(messages) => {
            for message in messages {
                append_message(doc, message, now);
            }
        }
        TranscriptMutation::EnqueueInput(input) => {
            if input_id(&input).is_none() {
                return Err(StoreError::invalid("A pending input requires an inputId"));
            }
            enqueue_pending(&mut doc.pending_inputs, input);
        }
        TranscriptMutation::CancelInput { input_id: id } => {
            remove_pending(&mut doc.pending_inputs, &id);
        }
        TranscriptMutation::ApplyInput {
            input_id: id,
            request_id,
            mut message,
        } => {
            remove_pending(&mut doc.pending_inputs, &id);
            let correlation = Correlation {
                input_id: id,
                request_id,
            };
            message.insert("correlation".to_owned(), json_of(&correlation));
            append_message(doc, message, now);
        }
        TranscriptMutation::Compact {
            summary,
            mut message,
        } => {
            message.entry("provenance").or_insert_with(|| {
                json_of(&Provenance {
                    source: ProvenanceSource::CompactionSummary,
                })
            });
            append_message(doc, message, now);
            doc.summary = Some(summary);
        }
        TranscriptMutation::SaveHistoryProgress(progress) => {
            doc.history_progress = Some(Box::new(merge_history(
                doc.history_progress.as_deref(),
                progress,
            )));
        }
    }
    // Every ordinary write marks known progress as moving again; a failed gap stays failed.
    if ordinary && let Some(progress) = doc.history_progress.as_mut() {
        if progress.state != HistoryState::Failed {
            progress.state = HistoryState::InProgress;
        }
        progress.updated_at_ms = now;
    }
    doc.last_activity_ms = now;
    Ok(())
}

/// §8 merge rules: a `failed` gap is sticky (a non-failed update only moves `updatedAt`) unless
/// the update is a repair (`repairedMessages` set); `coveredRequestId` is kept when omitted.
pub fn merge_history(previous: Option<&HistoryProgress>, next: HistoryProgress) -> HistoryProgress {
    if let Some(previous) = previous {
        let sticky = previous.state == HistoryState::Failed
            && next.state != HistoryState::Failed
            && next.repaired_messages.is_none();
        if sticky {
            let mut kept = previous.clone();
            kept.updated_at_ms = next.updated_at_ms;
            return kept;
        }
    }
    let mut merged = next;
    if merged.covered_request_id.is_none() {
        merged.covered_request_id = previous.and_then(|p| p.covered_request_id.clone());
    }
    merged
}

fn role(message: &JsonObject) -> Option<&str> {
    message.get("role").and_then(Value::as_str)
}

fn has_content(message: &JsonObject) -> bool {
    match message.get("content") {
        None | Some(Value::Null) => false,
        Some(Value::String(text)) => !text.is_empty(),
        Some(Value::Array(parts)) => !parts.is_empty(),
        Some(_) => true,
    }
}

/// The readable view: strips from assistant messages every `tool_calls` entry with no later
/// `tool` message answering it, and drops an assistant message left with neither calls nor
/// content, so a reader never sees a dangling tool call.
pub fn readable(doc: &Transcript) -> Transcript {
    into_readable(doc.clone())
}

/// [`readable`] of a document the caller owns: its entries are moved, never copied.
pub fn into_readable(mut doc: Transcript) -> Transcript {
    doc.entries = readable_entries(std::mem::take(&mut doc.entries));
    doc
}

/// The readable view of a sequence of entries (see [`readable`]).
pub fn readable_entries(entries: Vec<TranscriptEntry>) -> Vec<TranscriptEntry> {
    let mut answered: HashSet<String> = HashSet::new();
    let mut kept: Vec<TranscriptEntry> = Vec::with_capacity(entries.len());
    // Walk backwards so "answered" holds exactly the results that come later.
    for mut entry in entries.into_iter().rev() {
        let message = &entry.message;
        if role(message) == Some("tool") {
            if let Some(id) = message.get("tool_call_id").and_then(Value::as_str) {
                answered.insert(id.to_owned());
            }
            kept.push(entry);
            continue;
        }
        let settled: Vec<Value> = match message.get("tool_calls") {
            Some(Value::Array(calls)) if role(message) == Some("assistant") => {
                let settled: Vec<Value> = calls
                    .iter()
                    .filter(|call| {
                        call.get("id")
                            .and_then(Value::as_str)
                            .is_some_and(|id| answered.contains(id))
                    })
                    .cloned()
                    .collect();
                if settled.len() == calls.len() {
                    kept.push(entry);
                    continue;
                }
                settled
            }
            _ => {
                kept.push(entry);
                continue;
            }
        };
        if settled.is_empty() {
            entry.message.make_mut().remove("tool_calls");
            if !has_content(&entry.message) {
                continue;
            }
        } else {
            entry
                .message
                .make_mut()
                .insert("tool_calls".to_owned(), Value::Array(settled));
        }
        kept.push(entry);
    }
    kept.reverse();
    kept
}

/// The document a fork starts from: the prefix of `source` up to and including `message_id`
/// (all of it when `None`), with the summary of the last compaction inside that prefix.
pub fn fork_prefix(
    source: &Transcript,
    target_session_id: &str,
    message_id: Option<&str>,
    now: u64,
) -> StoreResult<Transcript> {
    let mut doc = new_transcript(target_session_id, now);
    let Some(message_id) = message_id else {
        doc.entries = source.entries.clone();
        doc.summary = source.summary.clone();
        return Ok(doc);
    };
    let Some(end) = source.entries.iter().position(|e| e.id == message_id) else {
        return Err(StoreError::invalid(format!(
            "Message with ID \"{message_id}\" not found in session history"
        )));
    };
    doc.entries = source.entries[..=end].to_vec();
    let is_compaction = |entry: &TranscriptEntry| {
        message_compat::provenance_of(&entry.message) == Some(ProvenanceSource::CompactionSummary)
    };
    let latest_in_source = source.entries.iter().rposition(is_compaction);
    let latest_in_prefix = doc.entries.iter().rposition(is_compaction);
    doc.summary = match latest_in_prefix {
        None => None,
        // The source's summary belongs to its latest compaction.
        Some(index) if Some(index) == latest_in_source => source.summary.clone(),
        // An older compaction: its message carries the summary text.
        Some(index) => doc.entries[index]
            .message
            .get("content")
            .and_then(Value::as_str)
            .map(str::to_owned),
    };
    Ok(doc)
}

#[cfg(test)]
mod tests;

fn json_of(value: &impl serde::Serialize) -> Value {
    serde_json::to_value(value).expect("a protocol type serialises to JSON")
}
