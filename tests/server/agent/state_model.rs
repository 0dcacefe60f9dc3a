//! FUZZ-06: the session state machine against a reference model. Seeded random sequences of
//! create, submit, approve, deny, abort, resume, fork, close, read and list run over HTTP; every
//! answer is the exact status and code the model predicts (an illegal transition is its specific
//! 4xx, never a 500), and after every step the server's sessions, their statuses and pending
//! approvals equal the model's.

use std::collections::BTreeMap;

use crate::support::*;
use agent_runtime_store::testing::rng::SeededRng;
use serde_json::{Value, json};

#[derive(Clone, Debug, PartialEq)]
struct ModelSession {
    closed: bool,
    /// The permission request the session's running request waits on.
    pending: Option<String>,
    /// The last event sequence the test has read.
    cursor: u64,
}

#[derive(Default)]
struct Model {
    sessions: BTreeMap<String, ModelSession>,
    /// Session ids in creation order.
    created: Vec<String>,
    /// Permission ids that were resolved, cancelled or aborted: never pending again.
    finished_permissions: Vec<String>,
}

struct Run<'a> {
    server: &'a TestServer,
    model: Model,
    rng: SeededRng,
    log: Vec<String>,
}

impl Run<'_> {
    async fn send(&mut self, kind: &str, data: Value) -> (u16, Value) {
        let id = agent_runtime::ids::nanoid();
        let (status, body) = self.server.command(TOKEN_A, &id, kind, data.clone()).await;
        self.log.push(format!(
            "{kind} {data} -> {status} {}",
            body["error"]["code"]
        ));
        // Shown when the test fails: the steps that led there.
        eprintln!("{}", self.log.last().unwrap());
        assert_ne!(status, 500, "{kind}: {body}\n{:#?}", self.log);
        (status, body)
    }

    fn expect(&self, answer: &(u16, Value), status: u16, code: Option<&str>) {
        assert_eq!(answer.0, status, "{}\n{:#?}", answer.1, self.log);
        if let Some(code) = code {
            assert_eq!(answer.1["error"]["code"], code, "{:#?}", self.log);
        }
    }

    /// Reads the session's events from its cursor until `until` matches one.
    async fn follow(&mut self, session: &str, until: impl Fn(&Value) -> bool) -> Vec<Value> {
        let after = self.model.sessions[session].cursor;
        let events = self
            .server
            .collect_events(TOKEN_A, session, after, until)
            .await;
        if let Some(last) = events.last() {
            self.model.sessions.get_mut(session).unwrap().cursor =
                last["sequence"].as_u64().unwrap();
        }
        events
    }

    /// A session, in creation order, so that a seed replays the same steps.
    fn pick(&mut self) -> Option<String> {
        let ids = &self.model.created;
        (!ids.is_empty()).then(|| ids[self.rng.index(ids.len())].clone())
    }

    fn finish_pending(&mut self, session: &str) {
        if let Some(id) = self.model.sessions.get_mut(session).unwrap().pending.take() {
            self.model.finished_permissions.push(id);
        }
    }

    async fn create(&mut self) {
        let answer = self.send("session.create", json!({})).await;
        self.expect(&answer, 200, None);
        let id = answer.1["data"]["session"]["sessionId"]
            .as_str()
            .unwrap()
            .to_owned();
        self.add(id);
    }

    fn add(&mut self, id: String) {
        self.model.created.push(id.clone());
        self.model.sessions.insert(
            id,
            ModelSession {
                closed: false,
                pending: None,
                cursor: 0,
            },
        );
    }

    async fn step(&mut self) {
        let Some(session) = self.pick().filter(|_| self.rng.below(8) != 0) else {
            return self.create().await;
        };
        let state = self.model.sessions[&session].clone();
        match self.rng.below(9) {
            0 | 1 => {
                let approval = self.rng.below(2) == 0;
                if state.pending.is_some() {
                    // A running request takes further inputs as steering; the model keeps to
                    // idle sessions.
                    return;
                }
                let text = if approval { "needs approval" } else { "hello" };
                let answer = self
                    .send(
                        "input.submit",
                        json!({ "sessionId": session, "input": text }),
                    )
                    .await;
                if state.closed {
                    return self.expect(&answer, 404, Some("SESSION_NOT_FOUND"));
                }
                self.expect(&answer, 200, None);
                assert_eq!(answer.1["data"]["status"], "started");
                let request = answer.1["data"]["requestId"].as_str().unwrap().to_owned();
                if approval {
                    let events = self
                        .follow(&session, |e| e["type"] == "permission.requested")
                        .await;
                    let id = events.last().unwrap()["data"]["permissionRequestId"]
                        .as_str()
                        .unwrap()
                        .to_owned();
                    self.model.sessions.get_mut(&session).unwrap().pending = Some(id);
                } else {
                    self.follow(&session, |e| {
                        is_result(e) && e["requestId"] == request.as_str()
                    })
                    .await;
                }
            }
            2 => {
                let approved = self.rng.below(2) == 0;
                let id = match &state.pending {
                    Some(id) => id.clone(),
                    None => match self.model.finished_permissions.last() {
                        Some(old) => old.clone(),
                        None => "never-requested".to_owned(),
                    },
                };
                let answer = self
                    .send("permission.resolve", json!({ "sessionId": session, "permissionRequestId": id, "approved": approved }))
                    .await;
                if state.pending.is_none() || state.closed {
                    return self.expect(&answer, 404, Some("PERMISSION_NOT_FOUND"));
                }
                self.expect(&answer, 200, None);
                assert_eq!(answer.1["data"]["resolved"], true);
                self.finish_pending(&session);
                self.follow(&session, is_result).await;
            }
            3 => {
                let answer = self
                    .send("request.abort", json!({ "sessionId": session }))
                    .await;
                if state.closed {
                    return self.expect(&answer, 404, Some("SESSION_NOT_FOUND"));
                }
                self.expect(&answer, 200, None);
                assert_eq!(answer.1["data"]["aborted"], true);
                if state.pending.is_some() {
                    self.finish_pending(&session);
                    self.follow(&session, is_result).await;
                }
            }
            4 => {
                let answer = self
                    .send("session.resume", json!({ "sessionId": session }))
                    .await;
                if state.closed {
                    return self.expect(&answer, 409, Some("SESSION_CONFLICT"));
                }
                self.expect(&answer, 200, None);
            }
            5 => {
                let answer = self
                    .send("session.fork", json!({ "sessionId": session }))
                    .await;
                self.expect(&answer, 200, None);
                let id = answer.1["data"]["session"]["sessionId"]
                    .as_str()
                    .unwrap()
                    .to_owned();
                self.add(id);
            }
            6 => {
                let answer = self
                    .send("session.close", json!({ "sessionId": session }))
                    .await;
                self.expect(&answer, 200, None);
                assert_eq!(answer.1["data"]["session"]["status"], "closed");
                if state.closed {
                    // Decision P4: closing a closed session publishes nothing. A replay sends
                    // what is stored before the first heartbeat, and the close stored any event
                    // before it answered: nothing may come before the heartbeat.
                    let mut response = self
                        .server
                        .events(TOKEN_A, &session, &format!("?after={}", state.cursor), None)
                        .await;
                    let mut received = String::new();
                    while !received.contains(": heartbeat") {
                        let chunk = tokio::time::timeout(
                            std::time::Duration::from_secs(20),
                            response.chunk(),
                        )
                        .await
                        .expect("a heartbeat")
                        .unwrap()
                        .expect("the stream stays open");
                        received.push_str(&String::from_utf8_lossy(&chunk));
                    }
                    assert!(!received.contains("data:"), "{received}");
                    return;
                }
                self.finish_pending(&session);
                self.model.sessions.get_mut(&session).unwrap().closed = true;
                self.follow(&session, |e| e["type"] == "session.closed")
                    .await;
            }
            _ => {
                let answer = self
                    .send("session.read", json!({ "sessionId": session }))
                    .await;
                self.expect(&answer, 200, None);
            }
        }
    }

    /// The server's sessions and statuses equal the model's, and so does each pending approval.
    async fn check(&mut self) {
        let answer = self.send("session.list", json!({ "limit": 100 })).await;
        self.expect(&answer, 200, None);
        let listed: BTreeMap<String, String> = answer.1["data"]["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                (
                    s["sessionId"].as_str().unwrap().to_owned(),
                    s["status"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        let modelled: BTreeMap<String, String> = self
            .model
            .sessions
            .iter()
            .map(|(id, s)| {
                (
                    id.clone(),
                    if s.closed { "closed" } else { "active" }.to_owned(),
                )
            })
            .collect();
        assert_eq!(listed, modelled, "{:#?}", self.log);
        // A session with a pending approval answers resolve of another id with 404, and its
        // read shows it loaded; a finished permission is never pending again.
        if let Some(old) = self.model.finished_permissions.first().cloned()
            && let Some(session) = self.pick()
        {
            let answer = self
                .send(
                    "permission.resolve",
                    json!({ "sessionId": session, "permissionRequestId": old, "approved": true }),
                )
                .await;
            self.expect(&answer, 404, Some("PERMISSION_NOT_FOUND"));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fuzz_06_random_command_sequences_follow_the_session_state_machine() {
    let mut answers = Vec::new();
    for seed in [6, 60, 606, 6060] {
        let server = TestServer::memory().await;
        let mut run = Run {
            server: &server,
            model: Model::default(),
            rng: SeededRng::new(seed),
            log: Vec::new(),
        };
        for _ in 0..80 {
            run.step().await;
            run.check().await;
        }
        assert!(run.model.sessions.len() > 2, "seed {seed} made sessions");
        answers.append(&mut run.log);
        server.stop().await;
    }
    // The seeds reach every kind of answer the model knows, legal and illegal.
    for reached in [
        "input.submit",
        "permission.resolve",
        "request.abort",
        "session.fork",
        "session.close",
        "-> 404 \"SESSION_NOT_FOUND\"",
        "-> 404 \"PERMISSION_NOT_FOUND\"",
        "-> 409 \"SESSION_CONFLICT\"",
    ] {
        assert!(
            answers.iter().any(|line| line.contains(reached)),
            "no step reached {reached}"
        );
    }
    let approvals = answers
        .iter()
        .filter(|line| line.starts_with("permission.resolve") && line.contains("-> 200"))
        .count();
    assert!(approvals > 0, "an approval was resolved");
}
