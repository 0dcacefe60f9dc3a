//! A history checker for the event log, after the Jepsen/Elle method (docs/reliability.md,
//! "History checker"): record what clients and writers were told while faults and restarts
//! happen, then hold that record against the store's final log (docs/architecture.md, invariants
//! 1, 2, 4 and 5).
//!
//! What is recorded ([`History`]):
//! - every SSE connection of every client: the cursor it opened after (`?after=` or
//!   `Last-Event-ID`) and every event it received, in order;
//! - every acknowledged command: id, type, the exact request body, the answer, and for
//!   `input.submit` the unique text of the input;
//! - every acknowledged event-log append with the fence it was made under (the writer history,
//!   from `FaultyStore::recording_appends`);
//! - the answers of replaying acknowledged commands at the end.
//!
//! What [`check`] reports ([`Violation`]):
//! - per connection: sequences gap-free, duplicate-free and increasing by one, starting right
//!   after the connection's cursor (a reconnect with `Last-Event-ID` neither skips nor repeats);
//! - every event a client saw or a writer was acknowledged for exists in the final log with
//!   identical content at the same sequence (nothing visible before it was durable, no two
//!   different events ever claimed one `(session, sequence)`);
//! - the final log itself is contiguous;
//! - every input acknowledged as `started`, `steered` or `queued` is in the final transcript
//!   (applied or still pending), or, when started, its request ended with an error `result`;
//! - along every final transcript, each input is applied at most once, and no applied input is
//!   still pending (a pending input runs when its session is next loaded);
//! - every replay of an acknowledged command id answered exactly the first answer (reads are
//!   not stored, so their replays read again and are not compared);
//! - at most one writer per session at a time: along a session's log, fencing tokens never go
//!   down (a write under an older token after a newer one is a stale owner that got through),
//!   and one token belongs to one lease.
//!
//! And what a list-append checker (Elle) asks of the observations themselves, without the final
//! log (reliability catalogue PG-10):
//! - one total order: all observations of a session, by every client over every connection, agree
//!   at every sequence (no two clients see different events at one sequence, no client sees one
//!   event at a sequence and later another); with the per-connection checks above, every
//!   connection saw a contiguous segment of that one order;
//! - real-time order (read-your-writes across gateways and connections): an input acknowledged
//!   before a `session.read` of the loaded session was first sent is in that read's transcript
//!   (messages or pending inputs), or, when started, its request ended with an error `result`;
//! - no aborted read (G1a): no client observes an event of an append that the store definitely
//!   refused (a fenced-off or failed write), unless an acknowledged append wrote the same event.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Mutex;
use std::time::Instant;

use agent_runtime::protocol::message_compat;
use serde_json::Value;

/// One SSE connection of one client.
#[derive(Clone, Debug)]
pub struct Connection {
    pub client: String,
    pub session_id: String,
    /// The cursor the connection opened after.
    pub after: u64,
    /// The event envelopes received, in order.
    pub events: Vec<Value>,
}

/// An acknowledged command (a definite answer: a success, or a stored error result).
#[derive(Clone, Debug)]
pub struct AckedCommand {
    pub command_id: String,
    pub kind: String,
    pub session_id: Option<String>,
    /// The exact request body, for the replay.
    pub body: Vec<u8>,
    /// The whole answer body.
    pub response: Value,
    /// For `input.submit`: the input's unique text.
    pub input_text: Option<String>,
    /// When the command was first sent and when its definite answer came (real-time order).
    pub sent_at: Option<Instant>,
    pub acked_at: Option<Instant>,
}

impl AckedCommand {
    /// A command acknowledged where the real-time order does not matter (no send or answer time).
    pub fn untimed(
        command_id: String,
        kind: &str,
        session_id: Option<String>,
        body: Vec<u8>,
        response: Value,
        input_text: Option<String>,
    ) -> Self {
        Self {
            command_id,
            kind: kind.to_owned(),
            session_id,
            body,
            response,
            input_text,
            sent_at: None,
            acked_at: None,
        }
    }

    /// The `status` of an acknowledged `input.submit` (`started`, `steered`, `queued`).
    pub fn input_status(&self) -> Option<&str> {
        if self.kind != "input.submit" || self.response["ok"] != true {
            return None;
        }
        self.response["data"]["status"].as_str()
    }
}

/// An event-log append the store acknowledged to a writer.
#[derive(Clone, Debug)]
pub struct Write {
    pub session_id: String,
    /// The writer's lease (`None`: unfenced).
    pub lease_id: Option<String>,
    pub fencing_token: Option<u64>,
    pub events: Vec<Value>,
}

/// The answer to replaying an acknowledged command id with the same body.
#[derive(Clone, Debug)]
pub struct Replay {
    pub command_id: String,
    pub response: Value,
}

/// Everything recorded during a run.
#[derive(Clone, Debug, Default)]
pub struct Recorded {
    pub connections: Vec<Connection>,
    pub acked: Vec<AckedCommand>,
    /// Commands whose outcome stayed unknown (never acknowledged, not checked).
    pub uncertain: Vec<String>,
    pub writes: Vec<Write>,
    /// Appends the store definitely refused (never durable); their events as written.
    pub aborted: Vec<Write>,
    pub replays: Vec<Replay>,
}

/// A thread-safe recorder shared by the clients of a run.
#[derive(Debug, Default)]
pub struct History(Mutex<Recorded>);

impl History {
    pub fn new() -> History {
        History::default()
    }

    pub fn connection(&self, connection: Connection) {
        self.0.lock().unwrap().connections.push(connection);
    }

    pub fn acked(&self, command: AckedCommand) {
        self.0.lock().unwrap().acked.push(command);
    }

    pub fn uncertain(&self, command_id: &str) {
        self.0.lock().unwrap().uncertain.push(command_id.to_owned());
    }

    pub fn write(&self, write: Write) {
        self.0.lock().unwrap().writes.push(write);
    }

    pub fn replay(&self, replay: Replay) {
        self.0.lock().unwrap().replays.push(replay);
    }

    /// Records the acknowledged appends of a recording `FaultyStore`.
    pub fn writes_from(&self, appends: Vec<agent_runtime_store::faulty::AcknowledgedAppend>) {
        for append in appends {
            self.write(Write {
                session_id: append.session_id,
                lease_id: append.fence.as_ref().map(|fence| fence.lease_id.clone()),
                fencing_token: append.fence.as_ref().map(|fence| fence.fencing_token),
                events: append
                    .events
                    .iter()
                    .map(|event| serde_json::to_value(event).unwrap())
                    .collect(),
            });
        }
    }

    /// Records the definitely refused appends of a recording `FaultyStore`.
    pub fn aborted_from(&self, appends: Vec<agent_runtime_store::faulty::RefusedAppend>) {
        let mut recorded = self.0.lock().unwrap();
        for append in appends {
            recorded.aborted.push(Write {
                session_id: append.session_id.clone(),
                lease_id: append.fence.as_ref().map(|fence| fence.lease_id.clone()),
                fencing_token: append.fence.as_ref().map(|fence| fence.fencing_token),
                events: append
                    .events
                    .iter()
                    .map(|event| {
                        serde_json::json!({
                            "sessionId": event.session_id,
                            "requestId": event.request_id,
                            "type": event.event_type,
                            "data": event.data,
                        })
                    })
                    .collect(),
            });
        }
    }

    pub fn snapshot(&self) -> Recorded {
        self.0.lock().unwrap().clone()
    }
}

/// One session of the final state, read from the store after the run (after a restart).
#[derive(Clone, Debug, Default)]
pub struct FinalSession {
    /// The first retained sequence (1 unless retention trimmed the log).
    pub first_sequence: u64,
    /// The retained events, in order.
    pub events: Vec<Value>,
    /// The transcript (messages and pending inputs) as JSON text.
    pub transcript: String,
}

/// The final state: session id → session.
pub type FinalLog = BTreeMap<String, FinalSession>;

/// Reads the final event log and transcript of `sessions` from a store.
pub async fn read_final(
    store: &dyn agent_runtime_store::Store,
    tenant_id: &str,
    sessions: &[String],
) -> FinalLog {
    let mut log = FinalLog::new();
    for session_id in sessions {
        let range = store
            .event_stream_range(tenant_id, session_id)
            .await
            .expect("the final event range");
        let first_sequence = range.map_or(1, |range| range.first_sequence);
        let mut events = Vec::new();
        let mut after = first_sequence - 1;
        loop {
            let page = store
                .read_events(tenant_id, session_id, after, 500)
                .await
                .expect("the final events");
            for event in &page.events {
                after = event.sequence;
                events.push(serde_json::to_value(event).unwrap());
            }
            if !page.has_more {
                break;
            }
        }
        let transcript = store
            .load_transcript(tenant_id, session_id)
            .await
            .expect("the final transcript")
            .map(|transcript| serde_json::to_string(&transcript).unwrap())
            .unwrap_or_default();
        log.insert(
            session_id.clone(),
            FinalSession {
                first_sequence,
                events,
                transcript,
            },
        );
    }
    log
}

/// An invariant the history breaks.
#[derive(Clone, Debug, PartialEq)]
pub enum Violation {
    /// A connection skipped sequences (or did not start right after its cursor).
    Gap {
        client: String,
        session_id: String,
        expected: u64,
        got: u64,
    },
    /// A connection received a sequence twice.
    Duplicate {
        client: String,
        session_id: String,
        sequence: u64,
    },
    /// A connection received a sequence lower than one it already had.
    Reorder {
        client: String,
        session_id: String,
        previous: u64,
        got: u64,
    },
    /// Somebody saw (or was acknowledged for) an event that the final log does not have: it was
    /// visible before it was durable, or it was lost.
    NotInFinalLog {
        source: String,
        session_id: String,
        sequence: u64,
    },
    /// Two different events claimed one (session, sequence).
    Conflict {
        source: String,
        session_id: String,
        sequence: u64,
    },
    /// The final log itself is not contiguous.
    FinalLogGap {
        session_id: String,
        expected: u64,
        got: u64,
    },
    /// An acknowledged input is neither applied nor pending in the final transcript.
    LostInput {
        command_id: String,
        session_id: String,
        status: String,
    },
    /// Replaying an acknowledged command id answered something else.
    ReplayMismatch { command_id: String },
    /// A write under an older fencing token landed after one under a newer token.
    StaleWriter {
        session_id: String,
        sequence: u64,
        token: u64,
        newer_token: u64,
    },
    /// Two observations of one (session, sequence) disagree: the clients' views are not prefixes
    /// of one total order.
    Divergent {
        session_id: String,
        sequence: u64,
        first: String,
        second: String,
    },
    /// A read that started after an input was acknowledged does not show it.
    StaleRead {
        read_command_id: String,
        input_command_id: String,
        session_id: String,
    },
    /// A client observed an event of an append the store refused (G1a, aborted read).
    ObservedAborted {
        client: String,
        session_id: String,
        sequence: u64,
    },
    /// An input was applied to the transcript more than once: it ran twice (ATK-01).
    InputRanTwice {
        session_id: String,
        input_id: String,
        times: usize,
    },
    /// An input that was applied is still listed as pending: the next load would run it again.
    AppliedInputStillPending {
        session_id: String,
        input_id: String,
    },
    /// A request has two terminal `result` events in the final log: it ended twice (R1).
    EndedTwice {
        session_id: String,
        request_id: String,
    },
    /// One fencing token was used by two different leases.
    TwoWritersOneToken {
        session_id: String,
        token: u64,
        leases: Vec<String>,
    },
}

fn sequence_of(event: &Value) -> u64 {
    event["sequence"].as_u64().expect("an event has a sequence")
}

/// Checks a recorded history against the final state; no violation is an empty list.
pub fn check(history: &Recorded, final_log: &FinalLog) -> Vec<Violation> {
    let mut violations = Vec::new();
    check_final_logs(final_log, &mut violations);
    for connection in &history.connections {
        check_connection(connection, &mut violations);
        for event in &connection.events {
            check_against_final(
                &format!("client {}", connection.client),
                &connection.session_id,
                event,
                final_log,
                &mut violations,
            );
        }
    }
    for write in &history.writes {
        let source = format!("writer {}", write.lease_id.as_deref().unwrap_or("unfenced"));
        for event in &write.events {
            check_against_final(
                &source,
                &write.session_id,
                event,
                final_log,
                &mut violations,
            );
        }
    }
    check_inputs(history, final_log, &mut violations);
    check_inputs_run_once(final_log, &mut violations);
    check_replays(history, &mut violations);
    check_fencing(history, &mut violations);
    check_total_order(history, &mut violations);
    check_real_time(history, final_log, &mut violations);
    check_aborted_reads(history, &mut violations);
    violations
}

/// All observations of a session agree at every sequence, across clients and connections.
fn check_total_order(history: &Recorded, violations: &mut Vec<Violation>) {
    // (session, sequence) → (first observer, event)
    let mut first: HashMap<(&str, u64), (String, &Value)> = HashMap::new();
    let mut reported: HashSet<(&str, u64)> = HashSet::new();
    for (index, connection) in history.connections.iter().enumerate() {
        let observer = format!("client {} (connection {index})", connection.client);
        for event in &connection.events {
            let key = (connection.session_id.as_str(), sequence_of(event));
            match first.get(&key) {
                None => {
                    first.insert(key, (observer.clone(), event));
                }
                Some((earlier, seen)) if *seen != event && reported.insert(key) => {
                    violations.push(Violation::Divergent {
                        session_id: key.0.to_owned(),
                        sequence: key.1,
                        first: earlier.clone(),
                        second: observer.clone(),
                    });
                }
                Some(_) => {}
            }
        }
    }
}

/// Read-your-writes across gateways and connections: an input acknowledged before a read was
/// first sent is in the read's transcript.
fn check_real_time(history: &Recorded, final_log: &FinalLog, violations: &mut Vec<Violation>) {
    // Only reads of a loaded session show the transcript: an executor that does not hold the
    // session answers `loaded: false` with empty placeholders (docs/storage.md §5.2).
    let reads = history.acked.iter().filter(|command| {
        command.kind == "session.read"
            && command.response["ok"] == true
            && command.response["data"]["loaded"] == true
            && command.sent_at.is_some()
    });
    for read in reads {
        let (Some(read_sent), Some(session_id)) = (read.sent_at, read.session_id.as_deref()) else {
            continue;
        };
        let data = &read.response["data"];
        let shown = format!("{}{}", data["messages"], data["pendingInputs"]);
        for input in &history.acked {
            let Some(status) = input.input_status() else {
                continue;
            };
            let acked_before = input.acked_at.is_some_and(|acked| acked < read_sent);
            if !acked_before || input.session_id.as_deref() != Some(session_id) {
                continue;
            }
            let text = input.input_text.as_deref().expect("inputs carry a text");
            let text_json = serde_json::to_string(text).unwrap();
            let inner = &text_json[1..text_json.len() - 1];
            let request_id = &input.response["data"]["requestId"];
            let ended_in_error = status == "started"
                && final_log.get(session_id).is_some_and(|session| {
                    session.events.iter().any(|event| {
                        event["requestId"] == *request_id
                            && event["data"]["type"] == "result"
                            && event["data"]["subtype"] == "error"
                    })
                });
            if !shown.contains(inner) && !ended_in_error {
                violations.push(Violation::StaleRead {
                    read_command_id: read.command_id.clone(),
                    input_command_id: input.command_id.clone(),
                    session_id: session_id.to_owned(),
                });
            }
        }
    }
}

/// The content of an event that identifies it across a retry: session, request, type and data.
fn content_key(session_id: &str, event: &Value) -> String {
    format!(
        "{session_id}\u{0}{}\u{0}{}\u{0}{}",
        event["requestId"], event["type"], event["data"]
    )
}

/// G1a: nobody observes an event that only a refused append ever wrote.
fn check_aborted_reads(history: &Recorded, violations: &mut Vec<Violation>) {
    if history.aborted.is_empty() {
        return;
    }
    let written: HashSet<String> = history
        .writes
        .iter()
        .flat_map(|write| {
            write
                .events
                .iter()
                .map(|event| content_key(&write.session_id, event))
        })
        .collect();
    let aborted: HashSet<String> = history
        .aborted
        .iter()
        .flat_map(|write| {
            write
                .events
                .iter()
                .map(|event| content_key(&write.session_id, event))
        })
        .filter(|key| !written.contains(key))
        .collect();
    for connection in &history.connections {
        for event in &connection.events {
            if aborted.contains(&content_key(&connection.session_id, event)) {
                violations.push(Violation::ObservedAborted {
                    client: connection.client.clone(),
                    session_id: connection.session_id.clone(),
                    sequence: sequence_of(event),
                });
            }
        }
    }
}

fn check_final_logs(final_log: &FinalLog, violations: &mut Vec<Violation>) {
    for (session_id, session) in final_log {
        let mut ended = HashSet::new();
        let results = session
            .events
            .iter()
            .filter(|event| event["type"] == "session.stream" && event["data"]["type"] == "result");
        for result in results {
            let request_id = result["requestId"].as_str().unwrap_or_default();
            if !ended.insert(request_id) {
                violations.push(Violation::EndedTwice {
                    session_id: session_id.clone(),
                    request_id: request_id.to_owned(),
                });
            }
        }
        for (offset, event) in session.events.iter().enumerate() {
            let expected = session.first_sequence + offset as u64;
            let got = sequence_of(event);
            if got != expected {
                violations.push(Violation::FinalLogGap {
                    session_id: session_id.clone(),
                    expected,
                    got,
                });
                break;
            }
        }
    }
}

fn check_connection(connection: &Connection, violations: &mut Vec<Violation>) {
    let mut previous = connection.after;
    let mut seen = HashSet::new();
    for event in &connection.events {
        let got = sequence_of(event);
        let (client, session_id) = (connection.client.clone(), connection.session_id.clone());
        if !seen.insert(got) || got == previous {
            violations.push(Violation::Duplicate {
                client,
                session_id,
                sequence: got,
            });
        } else if got < previous {
            violations.push(Violation::Reorder {
                client,
                session_id,
                previous,
                got,
            });
        } else if got != previous + 1 {
            violations.push(Violation::Gap {
                client,
                session_id,
                expected: previous + 1,
                got,
            });
        }
        previous = previous.max(got);
    }
}

fn check_against_final(
    source: &str,
    session_id: &str,
    event: &Value,
    final_log: &FinalLog,
    violations: &mut Vec<Violation>,
) {
    let sequence = sequence_of(event);
    let not_in_final = || Violation::NotInFinalLog {
        source: source.to_owned(),
        session_id: session_id.to_owned(),
        sequence,
    };
    let Some(session) = final_log.get(session_id) else {
        violations.push(not_in_final());
        return;
    };
    if sequence < session.first_sequence {
        // Trimmed by retention: nothing left to compare with.
        return;
    }
    match session
        .events
        .get((sequence - session.first_sequence) as usize)
    {
        None => violations.push(not_in_final()),
        Some(stored) if stored != event => violations.push(Violation::Conflict {
            source: source.to_owned(),
            session_id: session_id.to_owned(),
            sequence,
        }),
        Some(_) => {}
    }
}

fn check_inputs(history: &Recorded, final_log: &FinalLog, violations: &mut Vec<Violation>) {
    for command in &history.acked {
        let Some(status) = command.input_status() else {
            continue;
        };
        if !matches!(status, "started" | "steered" | "queued") {
            continue;
        }
        let text = command.input_text.as_deref().expect("inputs carry a text");
        let session_id = command.session_id.clone().unwrap_or_default();
        let request_id = &command.response["data"]["requestId"];
        // Kept: applied or pending in the transcript. A started request whose executor died
        // before it applied the input ends with an error `result` instead (docs/agent.md §5:
        // never replayed, it ends with `EXECUTOR_LOST`), which tells the client its fate.
        let kept = final_log.get(&session_id).is_some_and(|session| {
            session.transcript.contains(text)
                || (status == "started"
                    && session.events.iter().any(|event| {
                        event["requestId"] == *request_id
                            && event["data"]["type"] == "result"
                            && event["data"]["subtype"] == "error"
                    }))
        });
        if !kept {
            violations.push(Violation::LostInput {
                command_id: command.command_id.clone(),
                session_id,
                status: status.to_owned(),
            });
        }
    }
}

/// Along each final transcript, every input is applied at most once and no applied input is
/// still pending.
fn check_inputs_run_once(final_log: &FinalLog, violations: &mut Vec<Violation>) {
    for (session_id, session) in final_log {
        // Hand-made histories may carry a bare text; a stored transcript is always JSON.
        let Ok(transcript) = serde_json::from_str::<Value>(&session.transcript) else {
            continue;
        };
        let mut applied: BTreeMap<&str, usize> = BTreeMap::new();
        for entry in transcript["entries"].as_array().into_iter().flatten() {
            if let Some(input_id) = entry["message"]
                .as_object()
                .and_then(message_compat::correlated_input_id)
            {
                *applied.entry(input_id).or_default() += 1;
            }
        }
        for (input_id, &times) in &applied {
            if times > 1 {
                violations.push(Violation::InputRanTwice {
                    session_id: session_id.clone(),
                    input_id: (*input_id).to_owned(),
                    times,
                });
            }
        }
        for pending in transcript["pendingInputs"].as_array().into_iter().flatten() {
            let input_id = pending["inputId"].as_str().unwrap_or_default();
            if applied.contains_key(input_id) {
                violations.push(Violation::AppliedInputStillPending {
                    session_id: session_id.clone(),
                    input_id: input_id.to_owned(),
                });
            }
        }
    }
}

/// Whether a command type is a read, which keeps no result under its id.
pub fn is_read(kind: &str) -> bool {
    matches!(kind, "session.read" | "session.list" | "initialize")
}

fn check_replays(history: &Recorded, violations: &mut Vec<Violation>) {
    // Reads keep no result under their id: a replay reads again (ATK-02).
    let first: HashMap<&str, &Value> = history
        .acked
        .iter()
        .filter(|command| {
            !matches!(
                command.kind.as_str(),
                "session.read" | "session.list" | "initialize"
            )
        })
        .map(|command| (command.command_id.as_str(), &command.response))
        .collect();
    for replay in &history.replays {
        if let Some(response) = first.get(replay.command_id.as_str())
            && **response != replay.response
        {
            violations.push(Violation::ReplayMismatch {
                command_id: replay.command_id.clone(),
            });
        }
    }
}

fn check_fencing(history: &Recorded, violations: &mut Vec<Violation>) {
    // session → sequence → (token, lease)
    let mut by_session: BTreeMap<&str, BTreeMap<u64, (u64, &str)>> = BTreeMap::new();
    let mut leases: BTreeMap<(&str, u64), Vec<&str>> = BTreeMap::new();
    for write in &history.writes {
        let (Some(token), Some(lease)) = (write.fencing_token, write.lease_id.as_deref()) else {
            continue;
        };
        let holders = leases.entry((&write.session_id, token)).or_default();
        if !holders.contains(&lease) {
            holders.push(lease);
        }
        let log = by_session.entry(&write.session_id).or_default();
        for event in &write.events {
            log.insert(sequence_of(event), (token, lease));
        }
    }
    for ((session_id, token), holders) in leases {
        if holders.len() > 1 {
            violations.push(Violation::TwoWritersOneToken {
                session_id: session_id.to_owned(),
                token,
                leases: holders.iter().map(|lease| (*lease).to_owned()).collect(),
            });
        }
    }
    for (session_id, log) in by_session {
        let mut newest = 0;
        for (sequence, (token, _)) in log {
            if token < newest {
                violations.push(Violation::StaleWriter {
                    session_id: session_id.to_owned(),
                    sequence,
                    token,
                    newer_token: newest,
                });
            }
            newest = newest.max(token);
        }
    }
}
