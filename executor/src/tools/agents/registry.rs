//! The subagents of one session: running and finished children with their records, the
//! per-session cap, and cancellation (abort, close, `TaskStop`, lease loss all end them).

use agent_runtime::sync::Locked;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::tools::output::now_ms;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Finished children kept readable by `TaskOutput`; older ones are dropped.
const KEPT_FINISHED: usize = 16;

/// What a child came to.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ChildOutcome {
    /// Its final assistant text.
    pub result: String,
    pub tokens: u64,
    pub tool_calls: u64,
    pub turns: u64,
}

/// One child's record, as `TaskOutput` reports it.
#[derive(Debug)]
pub struct AgentRecord {
    pub id: String,
    pub subagent_type: String,
    pub description: String,
    created_at: u64,
    cancel: CancellationToken,
    state: watch::Sender<ChildState>,
}

#[derive(Clone, Debug, PartialEq)]
enum ChildState {
    Running,
    Completed(ChildOutcome),
    Failed(String),
    Cancelled,
}

impl AgentRecord {
    pub fn cancel_token(&self) -> CancellationToken {
        self.cancel.clone()
    }

    pub fn is_running(&self) -> bool {
        *self.state.borrow() == ChildState::Running
    }

    /// Records how the child ended (the first end wins: a cancelled child stays cancelled).
    pub fn finish(&self, outcome: Result<ChildOutcome, String>) {
        self.state.send_if_modified(|state| {
            if *state != ChildState::Running {
                return false;
            }
            *state = match outcome {
                _ if self.cancel.is_cancelled() => ChildState::Cancelled,
                Ok(outcome) => ChildState::Completed(outcome),
                Err(error) => ChildState::Failed(error),
            };
            true
        });
    }

    /// Stops the child; whether it was running.
    pub fn stop(&self) -> bool {
        let running = self.is_running();
        self.cancel.cancel();
        self.state.send_if_modified(|state| {
            let stop = *state == ChildState::Running;
            if stop {
                *state = ChildState::Cancelled;
            }
            stop
        });
        running
    }

    /// Waits until it ends, at most `timeout`.
    pub async fn wait(&self, timeout: Duration) {
        let mut state = self.state.subscribe();
        let _ = tokio::time::timeout(
            timeout,
            state.wait_for(|state| *state != ChildState::Running),
        )
        .await;
    }

    /// The reference's agent record (`TaskOutput` of an agent).
    pub fn report(&self) -> Value {
        let state = self.state.borrow().clone();
        let (status, result, stats) = match &state {
            ChildState::Running => ("running", Value::Null, Value::Null),
            ChildState::Completed(outcome) => (
                "completed",
                json!(outcome.result),
                json!({ "tokens": outcome.tokens, "toolCalls": outcome.tool_calls, "turns": outcome.turns }),
            ),
            ChildState::Failed(error) => ("failed", json!(error), Value::Null),
            ChildState::Cancelled => ("cancelled", Value::Null, Value::Null),
        };
        json!({
            "task_id": self.id, "type": "agent", "status": status,
            "subagent_type": self.subagent_type, "description": self.description,
            "created_at": self.created_at, "result": result, "stats": stats,
        })
    }
}

/// The children of one session.
#[derive(Debug)]
pub struct SessionAgents {
    children: Mutex<BTreeMap<String, Arc<AgentRecord>>>,
    max_running: usize,
}

impl SessionAgents {
    pub fn new(max_running: usize) -> Arc<Self> {
        Arc::new(Self {
            children: Mutex::new(BTreeMap::new()),
            max_running,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Arc<AgentRecord>>> {
        self.children.locked()
    }

    pub fn get(&self, id: &str) -> Option<Arc<AgentRecord>> {
        self.lock().get(id).cloned()
    }

    /// Registers a new running child, within the session's cap of running children.
    pub fn admit(
        &self,
        id: String,
        subagent_type: &str,
        description: &str,
    ) -> Result<Arc<AgentRecord>, String> {
        let mut children = self.lock();
        let running = children.values().filter(|c| c.is_running()).count();
        if running >= self.max_running {
            return Err(format!(
                "this session already runs {running} subagents (the limit is {})",
                self.max_running
            ));
        }
        let finished: Vec<String> = children
            .iter()
            .filter(|(_, c)| !c.is_running())
            .map(|(id, _)| id.clone())
            .collect();
        for old in finished
            .iter()
            .take(finished.len().saturating_sub(KEPT_FINISHED - 1))
        {
            children.remove(old);
        }
        let record = Arc::new(AgentRecord {
            id: id.clone(),
            subagent_type: subagent_type.to_owned(),
            description: description.to_owned(),
            created_at: now_ms(),
            cancel: CancellationToken::new(),
            state: watch::Sender::new(ChildState::Running),
        });
        children.insert(id, Arc::clone(&record));
        Ok(record)
    }

    /// Ends every running child (abort, close, shutdown, lease loss).
    pub fn stop_all(&self) {
        for child in self.lock().values() {
            child.stop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_counts_running_children_and_a_stopped_child_stays_cancelled() {
        let agents = SessionAgents::new(2);
        let a = agents.admit("a".into(), "Explore", "one").unwrap();
        let _b = agents.admit("b".into(), "Explore", "two").unwrap();
        let refused = agents.admit("c".into(), "Explore", "three").unwrap_err();
        assert!(refused.contains("limit is 2"), "{refused}");
        assert!(a.stop());
        a.finish(Ok(ChildOutcome::default()));
        assert_eq!(a.report()["status"], "cancelled");
        assert!(agents.admit("c".into(), "Explore", "three").is_ok());
        agents.stop_all();
        assert!(!agents.get("b").unwrap().is_running());
    }
}
