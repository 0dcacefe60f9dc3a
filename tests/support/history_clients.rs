//! The clients of the history runs (tests/history/check.rs) and of the crash-point suite
//! (tests/history/crash_points.rs): a target that follows a restarted server, commands sent until they
//! get a definite answer, and the end of a run (resume, settle, replay) whose answers feed the
//! history checker.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::history::{AckedCommand, Connection, History, Replay, is_read};
use super::{SseReader, TOKEN_A, is_result};

pub fn jitter(from_ms: u64, to_ms: u64) -> Duration {
    Duration::from_millis(rand::random_range(from_ms..to_ms))
}

/// Where the clients send requests: a restarted server listens on another port.
#[derive(Clone)]
pub struct Target {
    base: Arc<RwLock<String>>,
    pub http: reqwest::Client,
}

impl Target {
    pub fn new(base: &str) -> Target {
        Target {
            base: Arc::new(RwLock::new(base.to_owned())),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(15))
                .build()
                .unwrap(),
        }
    }

    pub fn base(&self) -> String {
        self.base.read().unwrap().clone()
    }

    pub fn set_base(&self, base: &str) {
        *self.base.write().unwrap() = base.to_owned();
    }

    /// Sends one command body until it gets a definite answer: a success, or an error that is
    /// not retryable. A retryable error (a store fault, `COMMAND_IN_PROGRESS` while the outcome is
    /// uncertain, a server that is restarting) is retried with the same command id, as clients
    /// must. `None`: still unresolved when `stop` fired or after `give_up`.
    pub async fn send(
        &self,
        body: &[u8],
        stop: &CancellationToken,
        give_up: Duration,
    ) -> Option<Value> {
        self.send_or_last(body, stop, give_up).await.ok()
    }

    /// [`Target::send`]; the error is the last retryable answer (for diagnostics).
    pub async fn send_or_last(
        &self,
        body: &[u8],
        stop: &CancellationToken,
        give_up: Duration,
    ) -> Result<Value, String> {
        let until = Instant::now() + give_up;
        let mut last = String::from("no answer");
        while Instant::now() < until {
            let request = self
                .http
                .post(format!("{}/commands", self.base()))
                .bearer_auth(TOKEN_A)
                .header("content-type", "application/json")
                .body(body.to_vec())
                .send();
            let answer = tokio::select! {
                () = stop.cancelled() => return Err(last),
                answer = request => answer,
            };
            match answer {
                Ok(response) => {
                    let status = response.status().as_u16();
                    if let Ok(text) = response.text().await
                        && let Ok(value) = serde_json::from_str::<Value>(&text)
                    {
                        let retry = status >= 500 || value["error"]["retryable"] == true;
                        if value["ok"] == true || (value["ok"] == false && !retry) {
                            return Ok(value);
                        }
                        last = format!("{status} {value}");
                    }
                }
                Err(error) => last = error.to_string(),
            }
            tokio::time::sleep(jitter(20, 120)).await;
        }
        Err(last)
    }
}

pub fn command_body(command_id: &str, kind: &str, data: Value) -> Vec<u8> {
    serde_json::to_vec(
        &json!({ "protocolVersion": 1, "commandId": command_id, "type": kind, "data": data }),
    )
    .unwrap()
}

/// Resumes every session on the restarted deployment. A request that a store failure stopped
/// cannot report its own end (executor/src/session/request.rs `drive`); the resume closes it
/// from the journal, as the product documents.
pub async fn resume_all(target: &Target, history: &History, sessions: &[String]) {
    let never = CancellationToken::new();
    for session_id in sessions {
        let command_id = format!("hist-resume-{}", agent_runtime::ids::nanoid());
        let body = command_body(
            &command_id,
            "session.resume",
            json!({ "sessionId": session_id }),
        );
        let response = target
            .send_or_last(&body, &never, Duration::from_secs(60))
            .await
            .unwrap_or_else(|last| panic!("session {session_id} does not resume: {last}"));
        history.acked(AckedCommand::untimed(
            command_id,
            "session.resume",
            Some(session_id.clone()),
            body,
            response,
            None,
        ));
    }
}

/// Lets every session settle before the final log is read: per session, submits inputs until
/// one starts a request and waits for that request's `result`. A request starts only when the
/// session has none running, so every earlier request has ended by then (including one whose
/// executor died: the session's recovery writes its terminal events).
pub async fn settle(target: &Target, history: &History, sessions: &[String]) {
    let never = CancellationToken::new();
    for session_id in sessions {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            assert!(
                Instant::now() < deadline,
                "session {session_id} does not settle"
            );
            let command_id = format!("hist-settle-{}", agent_runtime::ids::nanoid());
            let text = format!("demo:deltas=1 {command_id}");
            let data = json!({ "sessionId": session_id, "input": text });
            let body = command_body(&command_id, "input.submit", data);
            let response = match target
                .send_or_last(&body, &never, Duration::from_secs(30))
                .await
            {
                Ok(response) => response,
                Err(last) => {
                    eprintln!("settle {session_id}: unresolved, last answer {last}");
                    continue;
                }
            };
            history.acked(AckedCommand::untimed(
                command_id,
                "input.submit",
                Some(session_id.clone()),
                body,
                response.clone(),
                Some(text),
            ));
            let request_id = response["data"]["requestId"].clone();
            match response["data"]["status"].as_str() {
                Some("started") => {
                    if wait_for_result(target, session_id, &request_id, deadline).await {
                        break;
                    }
                }
                // Steering extends the running request: let it end first.
                Some("steered") => {
                    wait_for_result(target, session_id, &request_id, deadline).await;
                    continue;
                }
                _ => {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    continue;
                }
            }
            eprintln!("settle {session_id}: no result for {request_id}");
        }
    }
}

/// Follows a session from the start until the `result` of `request_id`; false if the stream
/// ended first. When retention trimmed the start (`409 STALE_CURSOR`), it resumes where the
/// protocol tells a client to: just before `session.read`'s `recovery.lastEventSequence`, which
/// is the last `result` or earlier.
pub async fn wait_for_result(
    target: &Target,
    session_id: &str,
    request_id: &Value,
    deadline: Instant,
) -> bool {
    let open = |after: u64| {
        target
            .http
            .get(format!(
                "{}/sessions/{session_id}/events?after={after}",
                target.base()
            ))
            .bearer_auth(TOKEN_A)
            .timeout(Duration::from_secs(120))
            .send()
    };
    let Ok(mut response) = open(0).await else {
        return false;
    };
    if response.status().as_u16() == 409 {
        let Some(after) = recovery_point(target, session_id).await else {
            return false;
        };
        let Ok(resumed) = open(after.saturating_sub(1)).await else {
            return false;
        };
        response = resumed;
    }
    if response.status().as_u16() != 200 {
        return false;
    }
    let mut reader = SseReader::new(response);
    while let Ok(Some(frame)) = tokio::time::timeout_at(deadline, reader.next_event()).await {
        if frame.data["requestId"] == *request_id && is_result(&frame.data) {
            return true;
        }
    }
    false
}

/// `recovery.lastEventSequence` of `session.read` (a read: not part of the history).
async fn recovery_point(target: &Target, session_id: &str) -> Option<u64> {
    let command_id = format!("hist-read-{}", agent_runtime::ids::nanoid());
    let body = command_body(
        &command_id,
        "session.read",
        json!({ "sessionId": session_id }),
    );
    let never = CancellationToken::new();
    let answer = target.send(&body, &never, Duration::from_secs(30)).await?;
    answer["data"]["recovery"]["lastEventSequence"].as_u64()
}

/// Replays every acknowledged command id with its exact body (faults healed) and records the
/// answers.
pub async fn replay_acknowledged(target: &Target, history: &History) {
    let never = CancellationToken::new();
    for command in history.snapshot().acked {
        // A read keeps no result under its id (ATK-02): its replay would read again, and count
        // against the tenant's rate like any read.
        if is_read(&command.kind) {
            continue;
        }
        let response = target
            .send_or_last(&command.body, &never, Duration::from_secs(30))
            .await
            .unwrap_or_else(|last| {
                panic!(
                    "the replay of {} {} gets no answer: {last}",
                    command.kind, command.command_id
                )
            });
        history.replay(Replay {
            command_id: command.command_id,
            response,
        });
    }
}

/// Creates a session under a command id starting with `prefix` (an acknowledged command of the
/// history); panics when it cannot.
pub async fn create_session(target: &Target, history: &History, prefix: &str) -> String {
    let never = CancellationToken::new();
    let command_id = format!("{prefix}-{}", agent_runtime::ids::nanoid());
    let body = command_body(&command_id, "session.create", json!({}));
    let response = target
        .send_or_last(&body, &never, Duration::from_secs(60))
        .await
        .unwrap_or_else(|last| panic!("a session is created: {last}"));
    assert_eq!(response["ok"], true, "{response}");
    let session_id = response["data"]["session"]["sessionId"]
        .as_str()
        .expect("a created session has an id")
        .to_owned();
    history.acked(AckedCommand::untimed(
        command_id,
        "session.create",
        Some(session_id.clone()),
        body,
        response,
        None,
    ));
    session_id
}

/// Follows a session from `after` until the stream ends or `stop` fires; records the connection.
pub fn follow(
    target: &Target,
    history: &Arc<History>,
    client: &str,
    session_id: &str,
    after: u64,
    stop: CancellationToken,
) -> JoinHandle<u64> {
    let (target, history) = (target.clone(), Arc::clone(history));
    let (client, session_id) = (client.to_owned(), session_id.to_owned());
    tokio::spawn(async move {
        let request = target
            .http
            .get(format!(
                "{}/sessions/{session_id}/events?after={after}",
                target.base()
            ))
            .bearer_auth(TOKEN_A)
            .timeout(Duration::from_secs(300))
            .send();
        let mut events = Vec::new();
        if let Ok(response) = request.await
            && response.status().as_u16() == 200
        {
            let mut reader = SseReader::new(response);
            loop {
                tokio::select! {
                    () = stop.cancelled() => break,
                    frame = reader.next_event() => match frame {
                        Some(frame) => events.push(frame.data),
                        None => break,
                    },
                }
            }
        }
        let cursor = events
            .last()
            .and_then(|event| event["sequence"].as_u64())
            .unwrap_or(after);
        history.connection(Connection {
            client,
            session_id,
            after,
            events,
        });
        cursor
    })
}
