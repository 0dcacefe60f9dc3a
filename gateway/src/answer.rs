//! What the pipeline answers a command with (docs/protocol.md §1.3, §2.0): a result this request
//! produced, typed, or the stored result of an earlier execution, replayed verbatim. The HTTP
//! status and `retry-after` follow from the error code alone, so a replayed failure is answered
//! with the same status as the original.

use agent_runtime::protocol::result::SuccessData;
use agent_runtime::protocol::{CommandResult, ErrorCode, ProtocolError};
use serde_json::Value;

/// The answer to one command.
pub enum Answer {
    /// Produced by this request: the command ran, or was refused.
    Fresh(CommandResult),
    /// An idempotent replay: the command's stored result.
    Replay(StoredResult),
}

impl Answer {
    pub fn success(command_id: &str, data: &SuccessData) -> Answer {
        Answer::Fresh(CommandResult::success(command_id, data.to_data()))
    }

    pub fn failure(command_id: &str, error: ProtocolError) -> Answer {
        Answer::Fresh(CommandResult::failure(command_id, error))
    }

    /// `None` for a success.
    pub fn error_code(&self) -> Option<ErrorCode> {
        match self {
            Answer::Fresh(result) => result.error().map(|error| error.code),
            Answer::Replay(stored) => stored.failure.map(|failure| failure.code),
        }
    }

    pub fn http_status(&self) -> u16 {
        self.error_code().map_or(200, ErrorCode::http_status)
    }

    /// `ceil(retryAfterMs / 1000)` of a failure with a positive delay.
    pub fn retry_after_seconds(&self) -> Option<u64> {
        match self {
            Answer::Fresh(result) => result.retry_after_seconds(),
            Answer::Replay(stored) => stored
                .failure
                .and_then(|failure| failure.retry_after_seconds),
        }
    }

    pub fn is_replay(&self) -> bool {
        matches!(self, Answer::Replay(_))
    }

    /// The JSON body: the fresh result rendered, or the stored one as it was stored.
    pub fn into_body(self) -> Value {
        match self {
            Answer::Fresh(result) => result.into_value(),
            Answer::Replay(stored) => stored.value,
        }
    }
}

/// A result read back from a command's receipt. It is never parsed into a `CommandResult`: its
/// bytes go out as stored, and only what the HTTP layer and telemetry need is read from it.
pub struct StoredResult {
    value: Value,
    failure: Option<StoredFailure>,
}

#[derive(Clone, Copy)]
struct StoredFailure {
    code: ErrorCode,
    retry_after_seconds: Option<u64>,
}

impl StoredResult {
    /// Reads the error code of a stored result. A failure whose code this server does not know
    /// is answered as `INTERNAL_ERROR` (500).
    pub fn new(value: Value) -> StoredResult {
        let failure = value.get("error").map(|error| StoredFailure {
            code: error
                .get("code")
                .and_then(Value::as_str)
                .and_then(ErrorCode::parse)
                .unwrap_or(ErrorCode::InternalError),
            retry_after_seconds: error
                .get("retryAfterMs")
                .and_then(Value::as_u64)
                .filter(|&ms| ms > 0)
                .map(|ms| ms.div_ceil(1000)),
        });
        StoredResult { value, failure }
    }
}

#[cfg(test)]
mod tests {
    use agent_runtime::protocol::result::AbortResult;
    use agent_runtime::protocol::{ResultData, parse_command_result};

    use super::*;

    /// A fresh success goes out as the client's own type reads it back.
    #[test]
    fn a_fresh_success_reads_back_as_the_clients_type() {
        let data = SuccessData::AbortRequest(AbortResult::new("s-1"));
        let answer = Answer::success("c-1", &data);
        assert_eq!((answer.http_status(), answer.error_code()), (200, None));
        let body = serde_json::to_vec(&answer.into_body()).unwrap();
        let CommandResult::Success { command_id, data } = parse_command_result(&body).unwrap()
        else {
            panic!("a success");
        };
        assert_eq!(command_id, "c-1");
        assert_eq!(
            AbortResult::from_data(&data).unwrap(),
            AbortResult::new("s-1")
        );
    }

    /// A replay keeps its stored value, and its status follows its stored code.
    #[test]
    fn a_replay_is_answered_from_its_stored_code() {
        let failure = CommandResult::failure("c-1", ProtocolError::command_in_progress(1500));
        let stored = failure.to_value();
        let answer = Answer::Replay(StoredResult::new(stored.clone()));
        assert_eq!(answer.error_code(), Some(ErrorCode::CommandInProgress));
        assert_eq!(answer.http_status(), failure.http_status());
        assert_eq!(answer.retry_after_seconds(), Some(2));
        assert!(answer.is_replay());
        assert_eq!(answer.into_body(), stored);

        let unknown = serde_json::json!({"ok": false, "error": {"code": "NEW_CODE"}});
        let answer = Answer::Replay(StoredResult::new(unknown));
        assert_eq!(answer.error_code(), Some(ErrorCode::InternalError));
        assert_eq!(answer.http_status(), 500);
    }
}
