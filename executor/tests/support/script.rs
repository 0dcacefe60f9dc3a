//! A model provider that plays back scripted turns, for tests that drive tools through a real
//! session without a model server.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use agent_runtime_executor::provider::{
    ModelDelta, ModelProvider, ModelRequest, ModelToolCall, ModelTurn, ProviderError,
    ProviderIdentity,
};
use async_trait::async_trait;
use serde_json::Value;
use tokio::sync::mpsc;

/// Plays back its turns in order, then repeats `forever` (or answers "done").
#[derive(Debug)]
pub struct ScriptedModel {
    turns: Mutex<VecDeque<ModelTurn>>,
    forever: Option<ModelTurn>,
    calls: AtomicUsize,
}

impl ScriptedModel {
    pub fn new(turns: impl IntoIterator<Item = ModelTurn>) -> Arc<Self> {
        Arc::new(Self {
            turns: Mutex::new(turns.into_iter().collect()),
            forever: None,
            calls: AtomicUsize::new(0),
        })
    }

    /// Answers `turn` on every call.
    pub fn forever(turn: ModelTurn) -> Arc<Self> {
        Arc::new(Self {
            turns: Mutex::default(),
            forever: Some(turn),
            calls: AtomicUsize::new(0),
        })
    }

    /// Appends turns to play after the ones left.
    pub fn push(&self, turns: impl IntoIterator<Item = ModelTurn>) {
        self.turns.lock().unwrap().extend(turns);
    }

    /// How many model calls the session made.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl ModelProvider for ScriptedModel {
    fn identity(&self) -> ProviderIdentity {
        ProviderIdentity {
            provider: "script".into(),
            api: "script".into(),
            model: "script".into(),
        }
    }

    async fn complete(
        &self,
        _request: &ModelRequest,
        _deltas: mpsc::Sender<ModelDelta>,
    ) -> Result<ModelTurn, ProviderError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let next = self.turns.lock().unwrap().pop_front();
        Ok(next.or_else(|| self.forever.clone()).unwrap_or(ModelTurn {
            content: "done".into(),
            ..ModelTurn::default()
        }))
    }
}

/// A turn with `text` that asks for these tool calls (ids `c0`, `c1`, …).
pub fn tool_turn(text: &str, calls: &[(&str, Value)]) -> ModelTurn {
    ModelTurn {
        content: text.into(),
        tool_calls: calls
            .iter()
            .enumerate()
            .map(|(i, (name, input))| ModelToolCall {
                id: format!("c{i}"),
                name: (*name).into(),
                arguments: input.to_string(),
            })
            .collect(),
        ..ModelTurn::default()
    }
}
