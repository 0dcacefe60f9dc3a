//! JSONL-14: compaction under a streaming load (docs/reliability.md).

use agent_runtime::protocol::{EventType, JsonObject};
use serde_json::json;

use super::compaction::Rewrite;
use super::*;
use crate::conformance::support::{CREATED_AT, active_session};
use crate::model::{
    CommandClaim, Correlation, DurableEventDraft, ExpectedSequence, NewEvent, TranscriptMutation,
};
use crate::ports::{
    CommandReceipts, DurableJournal, EventLog, SessionRecords, StoreLifecycle, TranscriptStore,
};

const SESSIONS: usize = 4;
const REQUESTS: usize = 25;
const DELTAS: usize = 200;
/// Deltas per append, as the executor batches a stream.
const BATCH: usize = 20;
const RETAINED: u64 = 1_000;
/// Bytes compaction may encode per byte it reclaims (the snapshot is the live part of a journal
/// at least half dead).
const K_SNAPSHOT: u64 = 1;
/// With the lines acknowledged during the rewrite, which it copies behind the snapshot: at most
/// the journal's length when it started (writers wait at twice the threshold it passed), so at
/// most 3 × reclaimed.
const K_WITH_TAIL: u64 = 3;

fn delta(session: &str, request: &str, n: usize) -> NewEvent {
    let data = json!({ "type": "content", "delta": format!("token {n} ") });
    NewEvent {
        session_id: session.to_owned(),
        request_id: Some(request.to_owned()),
        occurred_at: String::new(),
        event_type: EventType::SessionStream,
        data: data.as_object().cloned().unwrap_or_default(),
    }
}

fn draft(kind: &str, request: &str) -> DurableEventDraft {
    DurableEventDraft {
        event_type: kind.to_owned(),
        data: JsonObject::new(),
        occurred_at: None,
        correlation: Correlation {
            request_id: Some(request.to_owned()),
            ..Correlation::default()
        },
    }
}

/// One B2 request of `DELTAS` deltas on `session`, with the receipt, session record, durable
/// events and transcript turn that the server writes around it.
async fn request(store: &JsonlStore, session: &str, number: usize) {
    let request = format!("{session}-req-{number}");
    let claim = store
        .claim_command("t", &request, "fingerprint", 60_000)
        .await
        .unwrap();
    let CommandClaim::Claimed { lease_id } = claim else {
        panic!("{request} was claimed before: {claim:?}");
    };
    let accepted = [draft("request_accepted", &request)];
    store
        .append_durable("t", session, accepted.to_vec(), ExpectedSequence::Any, None)
        .await
        .unwrap();
    let updated = format!("2026-01-01T00:00:{:02}.000Z", number % 60);
    store
        .put_session(&active_session("t", session, &updated))
        .await
        .unwrap();
    let mut text = String::new();
    for first in (0..DELTAS).step_by(BATCH) {
        let batch: Vec<NewEvent> = (first..first + BATCH)
            .map(|n| delta(session, &request, n))
            .collect();
        store
            .append_events("t", session, batch, None)
            .await
            .unwrap();
        text.push_str(&format!("tokens {first}.. "));
    }
    let answer = json!({ "role": "assistant", "content": text });
    let turn = TranscriptMutation::AppendMessages(vec![answer.as_object().cloned().unwrap()]);
    store
        .mutate_transcript("t", session, turn, None)
        .await
        .unwrap();
    let completed = [draft("request_completed", &request)];
    store
        .append_durable(
            "t",
            session,
            completed.to_vec(),
            ExpectedSequence::Any,
            None,
        )
        .await
        .unwrap();
    store
        .complete_command("t", &request, &lease_id, &json!({ "requestId": request }))
        .await
        .unwrap();
}

/// JSONL-14: four sessions stream requests of 200 small deltas each, as in B2, into a store that
/// retains 1,000 events per session. Until the logs fill, nearly everything written is live and
/// a rewrite would reclaim nothing; after that, the trimmed deltas die. Over the whole run the
/// bytes compaction encodes stay within 1 × the bytes it reclaims (3 × with the lines it copies
/// behind the snapshot), it does run once enough is dead, and a restart brings back exactly the
/// state the store held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jsonl_14_streaming_deltas_compact_only_what_pays_for_its_rewrite() {
    let dir = tempfile::tempdir().unwrap();
    let options = StoreOptions {
        jsonl_compaction_min_bytes: 64 * 1024,
        max_events_per_session: RETAINED,
        ..StoreOptions::default()
    };
    let store = JsonlStore::open(dir.path(), options.clone()).await.unwrap();
    let mut clients = Vec::new();
    for client in 0..SESSIONS {
        let store = store.clone();
        clients.push(tokio::spawn(async move {
            let session = format!("s{client}");
            store
                .put_session(&active_session("t", &session, CREATED_AT))
                .await
                .unwrap();
            store.create_transcript("t", &session, None).await.unwrap();
            for number in 0..REQUESTS {
                request(&store, &session, number).await;
            }
        }));
    }
    for client in clients {
        client.await.unwrap();
    }
    store.backend().wait_for_compaction();
    let journal = std::fs::metadata(dir.path().join(JOURNAL_FILE))
        .unwrap()
        .len();
    let rewrites: Vec<Rewrite> = store.backend().file.rewrites.lock().unwrap().clone();

    // A snapshot can be longer than the journal it replaces (each entry its own line).
    let reclaimed: u64 = rewrites
        .iter()
        .map(|r| r.base.saturating_sub(r.snapshot))
        .sum();
    let encoded: u64 = rewrites.iter().map(|r| r.snapshot).sum();
    let copied: u64 = rewrites.iter().map(|r| r.tail).sum();
    assert!(
        encoded <= K_SNAPSHOT * reclaimed,
        "compaction encoded {encoded} bytes to reclaim {reclaimed}: {rewrites:?}"
    );
    assert!(
        encoded + copied <= K_WITH_TAIL * reclaimed,
        "compaction wrote {} bytes to reclaim {reclaimed}: {rewrites:?}",
        encoded + copied
    );
    // Not vacuous: the deltas that retention trimmed were reclaimed, and the journal holds
    // about what the store retains, not everything written.
    let written = (SESSIONS * REQUESTS * DELTAS) as u64 * 200;
    assert!(
        !rewrites.is_empty() && reclaimed > written / 4,
        "reclaimed {reclaimed} of at least {written} bytes written: {rewrites:?}"
    );
    let live = encode_snapshot_len(&store);
    assert!(
        journal <= 2 * live + 2 * options.jsonl_compaction_min_bytes,
        "a journal of {journal} bytes for {live} live ones: {rewrites:?}"
    );

    let before = store.snapshot().unwrap();
    store.close().await.unwrap();
    drop(store);
    let reopened = JsonlStore::open(dir.path(), options).await.unwrap();
    assert!(
        reopened.snapshot().unwrap() == before,
        "the restart rebuilt another state"
    );
    reopened.close().await.unwrap();
}

/// The length of the journal a snapshot of `store` would write.
fn encode_snapshot_len(store: &JsonlStore) -> u64 {
    store
        .snapshot()
        .unwrap()
        .iter()
        .map(|entry| encode_line(std::slice::from_ref(entry)).unwrap().len() as u64)
        .sum()
}
