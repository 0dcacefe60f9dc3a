//! `RunAgentInput`, read the AG-UI way (docs/protocols.md §1.2): `threadId`, `runId` and
//! `messages` are required, everything else is optional, members we do not use are ignored; a
//! malformed input is refused before any stream byte.

use agent_runtime::ids::is_valid_identifier;
use agent_runtime::protocol::content::{ContentPart, ImageUrl, UserContent};
use agent_runtime::protocol::{ErrorCode, ProtocolError};
use serde::Deserialize;
use serde_json::Value;

use super::projection::parse_interrupt_id;

/// The most answers one run may carry (each is a command).
pub const MAX_RESUME_ENTRIES: usize = 64;

/// The longest `runId`: the command ids made from it (`ag-ui.<kind>.<runId>`) must stay within the
/// identifier rule's 256 characters.
pub const MAX_RUN_ID_CHARS: usize = 200;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Wire {
    thread_id: Value,
    run_id: Value,
    messages: Vec<Value>,
    #[serde(default)]
    resume: Option<Vec<ResumeWire>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ResumeWire {
    interrupt_id: String,
    status: String,
    #[serde(default)]
    payload: Option<Value>,
}

/// What one run asks for.
#[derive(Debug, PartialEq)]
pub struct RunInput {
    pub thread_id: String,
    pub run_id: String,
    pub action: Action,
}

#[derive(Debug, PartialEq)]
pub enum Action {
    /// Run the newest message, a user's.
    Submit(UserContent),
    /// Answer the interrupts of the previous run (approvals).
    Resume(Vec<Answer>),
}

/// One approval's answer: the `permission.resolve` a resume entry becomes.
#[derive(Debug, PartialEq)]
pub struct Answer {
    /// Where the approval's `permission.requested` is in the log.
    pub sequence: u64,
    pub permission_request_id: String,
    pub approved: bool,
    pub reason: Option<String>,
    pub scope: Option<String>,
}

fn invalid(message: impl Into<String>) -> ProtocolError {
    ProtocolError::new(ErrorCode::InvalidCommand, message)
}

/// Reads one `RunAgentInput`.
pub fn parse(body: &[u8]) -> Result<RunInput, ProtocolError> {
    let wire: Wire = serde_json::from_slice(body).map_err(|_| {
        invalid(
            "The body is not an AG-UI RunAgentInput (threadId, runId and messages are required)",
        )
    })?;
    let thread_id = identifier(&wire.thread_id, "threadId", 256)?;
    let run_id = identifier(&wire.run_id, "runId", MAX_RUN_ID_CHARS)?;
    let resume = wire.resume.unwrap_or_default();
    if resume.len() > MAX_RESUME_ENTRIES {
        return Err(invalid(format!(
            "resume holds at most {MAX_RESUME_ENTRIES} entries"
        )));
    }
    let action = if resume.is_empty() {
        Action::Submit(newest_user_message(&wire.messages)?)
    } else {
        Action::Resume(resume.into_iter().map(answer).collect::<Result<_, _>>()?)
    };
    Ok(RunInput {
        thread_id,
        run_id,
        action,
    })
}

fn identifier(value: &Value, name: &str, max_chars: usize) -> Result<String, ProtocolError> {
    match value.as_str() {
        Some(text) if text.len() <= max_chars && is_valid_identifier(text) => Ok(text.to_owned()),
        _ => Err(invalid(format!(
            "{name} must be 1 to {max_chars} characters of letters, digits, '_', '-', '.' and ':'"
        ))),
    }
}

/// The input of a run without `resume`: its newest message, which must be a user's (the ones
/// before it are history the thread holds already).
fn newest_user_message(messages: &[Value]) -> Result<UserContent, ProtocolError> {
    let Some(newest) = messages.last() else {
        return Err(invalid("messages is empty: there is nothing to run"));
    };
    if newest.get("role").and_then(Value::as_str) != Some("user") {
        return Err(invalid(
            "The newest message must be a user message (tools the client runs are not supported)",
        ));
    }
    let content = match newest.get("content") {
        Some(Value::String(text)) => UserContent::Text(text.clone()),
        Some(Value::Array(parts)) => {
            let parts: Vec<ContentPart> = parts.iter().filter_map(content_part).collect();
            if parts.is_empty() {
                return Err(invalid("The user message has no text or image part"));
            }
            UserContent::Parts(parts)
        }
        _ => return Err(invalid("The user message has no content")),
    };
    Ok(content)
}

/// A text or image part; other parts (audio, video, documents, provider files) are left out.
fn content_part(part: &Value) -> Option<ContentPart> {
    let text = |name: &str| part.get(name).and_then(Value::as_str);
    match text("type")? {
        "text" => Some(ContentPart::Text {
            text: text("text")?.to_owned(),
            provider_options: None,
        }),
        "image" => {
            let source = part.get("source")?;
            let value = source.get("value").and_then(Value::as_str)?;
            let url = match source.get("type").and_then(Value::as_str)? {
                "url" => value.to_owned(),
                "data" => {
                    let mime = source.get("mimeType").and_then(Value::as_str)?;
                    format!("data:{mime};base64,{value}")
                }
                _ => return None,
            };
            (!url.is_empty()).then_some(ContentPart::ImageUrl {
                image_url: ImageUrl { url },
            })
        }
        _ => None,
    }
}

/// A resume entry: `resolved` with `payload.approved` (absent: approved) or `cancelled` (denied).
fn answer(entry: ResumeWire) -> Result<Answer, ProtocolError> {
    let Some((sequence, permission)) = parse_interrupt_id(&entry.interrupt_id) else {
        return Err(invalid(
            "A resume entry's interruptId names no interrupt of this server",
        ));
    };
    let payload = entry.payload.unwrap_or(Value::Null);
    let approved = match entry.status.as_str() {
        "resolved" => payload
            .get("approved")
            .and_then(Value::as_bool)
            .unwrap_or(true),
        "cancelled" => false,
        _ => {
            return Err(invalid(
                "A resume entry's status must be resolved or cancelled",
            ));
        }
    };
    let reason = payload
        .get("reason")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let scope = payload
        .get("scope")
        .and_then(Value::as_str)
        .map(str::to_owned);
    Ok(Answer {
        sequence,
        permission_request_id: permission.to_owned(),
        approved,
        reason,
        scope,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parsed(value: Value) -> Result<RunInput, ProtocolError> {
        parse(&serde_json::to_vec(&value).unwrap())
    }

    #[test]
    fn the_minimal_and_the_full_input_are_read_and_unknown_members_ignored() {
        let minimal = parsed(json!({
            "threadId": "t-1", "runId": "r-1",
            "messages": [{"id": "u1", "role": "user", "content": "hello"}],
        }))
        .unwrap();
        assert_eq!(
            minimal.action,
            Action::Submit(UserContent::Text("hello".into()))
        );
        let full = parsed(json!({
            "threadId": "t-1", "runId": "r-2", "protocolVersion": "1.0", "state": {},
            "tools": [], "context": [], "forwardedProps": {}, "somethingNew": 1,
            "messages": [
                {"id": "a0", "role": "assistant", "content": "earlier"},
                {"id": "u1", "role": "user", "content": [
                    {"type": "text", "text": "look"},
                    {"type": "image", "source": {"type": "data", "value": "AAAA", "mimeType": "image/png"}},
                    {"type": "audio", "source": {"type": "url", "value": "https://x/a.mp3"}},
                ]},
            ],
        }))
        .unwrap();
        let Action::Submit(UserContent::Parts(parts)) = full.action else {
            panic!("parts");
        };
        assert_eq!(parts.len(), 2, "the audio part is left out");
    }

    #[test]
    fn malformed_inputs_are_refused_with_what_is_wrong() {
        for (input, needle) in [
            (
                json!({"runId": "r", "messages": []}),
                "threadId, runId and messages",
            ),
            (
                json!({"threadId": "t/1", "runId": "r", "messages": []}),
                "threadId must",
            ),
            (
                json!({"threadId": "t", "runId": "r", "messages": []}),
                "nothing to run",
            ),
            (
                json!({"threadId": "t", "runId": "r", "messages": [{"id": "a", "role": "assistant", "content": "x"}]}),
                "newest message must be a user",
            ),
            (
                json!({"threadId": "t", "runId": "r", "messages": [], "resume": [{"interruptId": "nope", "status": "resolved"}]}),
                "names no interrupt",
            ),
        ] {
            let error = parsed(input).unwrap_err();
            assert!(
                error.message.contains(needle),
                "{} lacks {needle}",
                error.message
            );
        }
    }

    /// The bounds at their defaults: a `runId` of 200 characters and 64 resume entries pass, one
    /// more of either is refused in the user's words.
    #[test]
    fn run_ids_and_resume_entries_are_bounded() {
        let message = json!([{"id": "u", "role": "user", "content": "x"}]);
        let run =
            |run_id: String| parsed(json!({"threadId": "t", "runId": run_id, "messages": message}));
        assert!(run("r".repeat(MAX_RUN_ID_CHARS)).is_ok());
        let error = run("r".repeat(MAX_RUN_ID_CHARS + 1)).unwrap_err();
        assert!(
            error.message.contains("runId must be 1 to 200 characters"),
            "{}",
            error.message
        );

        let entries = |count: usize| {
            let entry = json!({"interruptId": "7:p", "status": "resolved"});
            parsed(
                json!({"threadId": "t", "runId": "r", "messages": [], "resume": vec![entry; count]}),
            )
        };
        assert!(entries(MAX_RESUME_ENTRIES).is_ok());
        let error = entries(MAX_RESUME_ENTRIES + 1).unwrap_err();
        assert_eq!(error.message, "resume holds at most 64 entries");
    }

    #[test]
    fn resume_entries_become_approvals_and_denials() {
        let input = parsed(json!({
            "threadId": "t", "runId": "r", "messages": [],
            "resume": [
                {"interruptId": "7:perm-1", "status": "resolved", "payload": {"approved": true, "scope": "session"}},
                {"interruptId": "9:perm-2", "status": "resolved", "payload": {"approved": false, "reason": "no"}},
                {"interruptId": "11:perm-3", "status": "cancelled"},
            ],
        }))
        .unwrap();
        let Action::Resume(answers) = input.action else {
            panic!("resume");
        };
        let decided: Vec<_> = answers
            .iter()
            .map(|answer| (answer.sequence, answer.approved, answer.scope.as_deref()))
            .collect();
        assert_eq!(
            decided,
            [
                (7, true, Some("session")),
                (9, false, None),
                (11, false, None)
            ]
        );
        assert_eq!(answers[1].reason.as_deref(), Some("no"));
    }
}
