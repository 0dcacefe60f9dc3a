use std::sync::Arc;
use std::time::Duration;

use crate::faulty::FaultyStore;
use crate::follow::{FollowOptions, Followed, StoreSignal, follow};
use crate::{
    EventLog, EventReader, MemoryStore, NewEvent, Operation, Store, StoreError, StoreOptions,
};
use agent_runtime::protocol::EventType;
use agent_runtime::timefmt::format_iso_ms;
use futures_util::StreamExt;
use tokio_util::sync::CancellationToken;

use super::{SharedTails, TailLog};

const TENANT: &str = "tenant-a";
const SESSION: &str = "session-1";
const DEADLINE: Duration = Duration::from_secs(10);

fn event(index: u64) -> NewEvent {
    let data = serde_json::json!({ "type": "content", "sessionId": SESSION, "delta": format!("d{index}") });
    let serde_json::Value::Object(data) = data else {
        unreachable!("an object literal");
    };
    NewEvent {
        session_id: SESSION.to_owned(),
        request_id: Some("request-1".to_owned()),
        occurred_at: format_iso_ms(1_767_225_600_000),
        event_type: EventType::SessionStream,
        data,
    }
}

struct Fixture {
    store: Arc<FaultyStore>,
    log: Arc<TailLog>,
    stop: CancellationToken,
}

impl Fixture {
    fn new() -> Fixture {
        Fixture::with_options(StoreOptions::default())
    }

    fn with_options(options: StoreOptions) -> Fixture {
        let memory: Arc<dyn Store> = Arc::new(MemoryStore::new(options));
        let store = Arc::new(FaultyStore::new(memory));
        let events: Arc<dyn EventReader> = store.clone();
        let stop = CancellationToken::new();
        let signal = Arc::new(StoreSignal(events.clone()));
        let log = Arc::new(TailLog(SharedTails::new(events, signal, stop.clone())));
        Fixture { store, log, stop }
    }

    async fn append(&self, index: u64) {
        self.store
            .append_event(TENANT, event(index), None)
            .await
            .unwrap();
    }

    /// A follower from `after` that collects sequences until `last`.
    fn follower(&self, after: u64, last: u64) -> tokio::task::JoinHandle<Vec<u64>> {
        let options = FollowOptions {
            flush_on_stop: None,
            idle: Duration::from_secs(30),
            recheck: Duration::from_secs(5),
            stop: self.stop.clone(),
        };
        let stream = follow(
            self.log.clone(),
            self.log.clone(),
            TENANT.to_owned(),
            SESSION.to_owned(),
            after,
            options,
        );
        tokio::spawn(async move {
            let mut seen = Vec::new();
            let mut stream = std::pin::pin!(stream);
            while let Some(item) = stream.next().await {
                if let Followed::Event(event) = item.unwrap() {
                    seen.push(event.sequence);
                    if event.sequence == last {
                        break;
                    }
                }
            }
            seen
        })
    }
}

#[tokio::test]
async fn subscribers_of_a_session_share_its_store_reads_and_see_every_event_in_order() {
    let fixture = Fixture::new();
    fixture.append(1).await;
    let followers: Vec<_> = (0..50).map(|_| fixture.follower(0, 40)).collect();
    for index in 2..=40 {
        fixture.append(index).await;
        tokio::task::yield_now().await;
    }
    for follower in followers {
        let seen = tokio::time::timeout(DEADLINE, follower)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(seen, (1..=40).collect::<Vec<_>>());
    }
    // Reading alone, 50 followers would read the store at least twice per event (4,000 reads).
    let reads = fixture.store.calls(Operation::ReadEvents);
    assert!(
        reads < 400,
        "{reads} store reads for 50 followers of 40 events"
    );
    fixture.stop.cancel();
}

#[tokio::test]
async fn history_before_the_tail_comes_from_the_store() {
    let fixture = Fixture::new();
    for index in 1..=10 {
        fixture.append(index).await;
    }
    // A first follower starts the pump at the head (10); a second one replays from the start.
    let early = fixture.follower(10, 15);
    let late = fixture.follower(0, 15);
    for index in 11..=15 {
        fixture.append(index).await;
    }
    let early = tokio::time::timeout(DEADLINE, early)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(early, (11..=15).collect::<Vec<_>>());
    let late = tokio::time::timeout(DEADLINE, late).await.unwrap().unwrap();
    assert_eq!(late, (1..=15).collect::<Vec<_>>());
    fixture.stop.cancel();
}

#[tokio::test]
async fn a_store_failure_of_the_pump_ends_the_followers_streams() {
    let fixture = Fixture::new();
    fixture.append(1).await;
    let options = FollowOptions {
        flush_on_stop: None,
        idle: Duration::from_secs(30),
        recheck: Duration::from_secs(5),
        stop: fixture.stop.clone(),
    };
    let stream = follow(
        fixture.log.clone(),
        fixture.log.clone(),
        TENANT.to_owned(),
        SESSION.to_owned(),
        0,
        options,
    );
    let mut stream = std::pin::pin!(stream);
    let first = tokio::time::timeout(DEADLINE, stream.next()).await.unwrap();
    assert!(matches!(first, Some(Ok(Followed::Event(_)))));
    // Let the pump reach the head, then break the store.
    tokio::time::timeout(DEADLINE, fixture.log.0.wait(TENANT, SESSION, 0))
        .await
        .unwrap();
    fixture.store.fail_always(Operation::ReadEvents);
    fixture.append(2).await;
    let failed = tokio::time::timeout(DEADLINE, stream.next()).await.unwrap();
    assert!(matches!(failed, Some(Err(_))), "{failed:?}");
    fixture.store.heal();
    fixture.stop.cancel();
}

#[tokio::test]
async fn a_pump_overtaken_by_retention_continues_from_the_oldest_retained_event() {
    let fixture = Fixture::with_options(StoreOptions {
        max_events_per_session: 5,
        ..StoreOptions::default()
    });
    fixture.append(1).await;
    // A follower at the head starts the pump there (1).
    let options = FollowOptions {
        flush_on_stop: None,
        idle: Duration::from_secs(30),
        recheck: Duration::from_secs(5),
        stop: fixture.stop.clone(),
    };
    let behind = follow(
        fixture.log.clone(),
        fixture.log.clone(),
        TENANT.to_owned(),
        SESSION.to_owned(),
        1,
        options,
    );
    let mut behind = std::pin::pin!(behind);
    let waiting = tokio::time::timeout(Duration::from_millis(100), behind.next()).await;
    assert!(waiting.is_err(), "nothing after 1 yet: {waiting:?}");
    tokio::time::timeout(DEADLINE, fixture.log.0.wait(TENANT, SESSION, 0))
        .await
        .unwrap();

    // One burst of 19 events, of which the store keeps the last 5 (16..=20): the pump's cursor
    // (1) is older than anything retained when it reads again.
    fixture
        .store
        .append_events(TENANT, SESSION, (2..=20).map(event).collect(), None)
        .await
        .unwrap();
    // The follower that was at 1 missed trimmed events: the store's own STALE_CURSOR ends it.
    let missed = tokio::time::timeout(DEADLINE, behind.next()).await.unwrap();
    assert!(
        matches!(missed, Some(Err(StoreError::StaleCursor(_)))),
        "{missed:?}"
    );

    // The session goes on: a follower from a retained cursor is served, live events included.
    let replaying = fixture.follower(15, 22);
    let live = fixture.follower(20, 22);
    fixture.append(21).await;
    fixture.append(22).await;
    let replaying = tokio::time::timeout(DEADLINE, replaying)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(replaying, (16..=22).collect::<Vec<_>>());
    let live = tokio::time::timeout(DEADLINE, live).await.unwrap().unwrap();
    assert_eq!(live, vec![21, 22]);
    fixture.stop.cancel();
}

/// Bursts this process appended and handed over reach a live follower although retention
/// trimmed them from the store at once, each event once (the pump never repeats what was handed
/// over); a hand-over that does not join what the tail holds is not taken.
#[tokio::test]
async fn events_handed_over_reach_a_live_follower_though_retention_trimmed_them() {
    use crate::follow::AppendedEvents;

    let fixture = Fixture::with_options(StoreOptions {
        max_events_per_session: 5,
        ..StoreOptions::default()
    });
    fixture.append(1).await;
    let live = fixture.follower(1, 60);
    tokio::time::timeout(DEADLINE, fixture.log.0.wait(TENANT, SESSION, 0))
        .await
        .unwrap();
    for burst in [2..=20, 21..=40, 41..=60] {
        let stored = fixture
            .store
            .append_events(TENANT, SESSION, burst.map(event).collect(), None)
            .await
            .unwrap();
        // The end of the burst first: it does not join what is held, so it is not taken.
        fixture.log.0.appended(TENANT, &stored[stored.len() - 2..]);
        fixture.log.0.appended(TENANT, &stored);
        // A repeat of what is held changes nothing.
        fixture.log.0.appended(TENANT, &stored);
    }
    let seen = tokio::time::timeout(DEADLINE, live).await.unwrap().unwrap();
    assert_eq!(seen, (2..=60).collect::<Vec<_>>());
    fixture.stop.cancel();
}

/// The defect behind `SharedTails::follow`: the SSE route answered before its session was
/// followed, so a burst its process appended in between was handed to no tail, and once retention
/// had trimmed it the client that already had its response head got `STALE_CURSOR`. A session
/// followed first keeps every handed-over event for a follower that reads only later; without
/// it (the route before the fix) the follower's first read finds retention past its cursor.
#[tokio::test]
async fn a_session_followed_before_its_first_read_keeps_what_was_handed_over_meanwhile() {
    use crate::follow::AppendedEvents;

    for followed_first in [true, false] {
        let fixture = Fixture::with_options(StoreOptions {
            max_events_per_session: 5,
            ..StoreOptions::default()
        });
        if followed_first {
            fixture.log.0.follow(TENANT, SESSION);
        }
        let stored = fixture
            .store
            .append_events(TENANT, SESSION, (1..=20).map(event).collect(), None)
            .await
            .unwrap();
        fixture.log.0.appended(TENANT, &stored);
        let read = tokio::time::timeout(DEADLINE, fixture.follower(0, 20))
            .await
            .unwrap();
        if followed_first {
            assert_eq!(read.unwrap(), (1..=20).collect::<Vec<_>>());
        } else {
            assert!(read.is_err(), "the store's STALE_CURSOR ends the follower");
        }
        fixture.stop.cancel();
    }
}

/// A stored event of `sequence` whose delta is `bytes` long.
fn stored(sequence: u64, bytes: usize) -> agent_runtime::protocol::EventEnvelope {
    serde_json::from_value(serde_json::json!({
        "protocolVersion": 1,
        "eventId": format!("event-{sequence}"),
        "sequence": sequence,
        "sessionId": SESSION,
        "occurredAt": "2026-01-01T00:00:00.000Z",
        "type": "session.stream",
        "data": { "type": "content", "sessionId": SESSION, "delta": "x".repeat(bytes) }
    }))
    .unwrap()
}

#[test]
fn a_tail_holds_a_bounded_count_and_bytes_of_events() {
    use super::{RECENT, RECENT_BYTES, Recent};

    let mut recent = Recent::default();
    recent.extend((1..=600).map(|n| stored(n, 10)).collect());
    assert_eq!(recent.len(), RECENT);
    assert_eq!(recent.back().unwrap().sequence, 600);

    // Events of a mebibyte: a handful, not 512 of them.
    let mut recent = Recent::default();
    recent.extend((1..=40).map(|n| stored(n, 1 << 20)).collect());
    let held: usize = recent.iter().map(|event| event.json().len()).sum();
    assert!(held <= RECENT_BYTES, "{held} bytes held");
    assert_eq!(held, recent.bytes);
    assert!(recent.len() >= 7 && recent.back().unwrap().sequence == 40);

    // One event over the bound is still kept: the newest always is.
    recent.extend(vec![stored(41, RECENT_BYTES + 1)]);
    assert_eq!(recent.len(), 1);
    assert_eq!(recent.back().unwrap().sequence, 41);
}
