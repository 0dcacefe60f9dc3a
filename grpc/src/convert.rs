//! Conversions between the protocol types and the gRPC messages of `proto/`.
//!
//! Protocol JSON travels as UTF-8 JSON bytes and is parsed on arrival with the same strict parser
//! the HTTP surface uses, so a peer can never smuggle a shape the protocol forbids.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate as grpc;
use agent_runtime::executor_port::{CommandContext, ExecutorCommand, ExecutorOutput};
use agent_runtime::protocol::strict_json::{decode_exact, parse_strict};
use agent_runtime::protocol::{ErrorCode, JsonObject, Principal, ProtocolError, Scope};

/// Why a gRPC message could not be turned into protocol values.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConvertError(pub String);

pub fn principal_to_proto(principal: &Principal) -> grpc::Principal {
    grpc::Principal {
        tenant_id: principal.tenant_id.clone(),
        subject: principal.subject.clone(),
        scopes: principal
            .scopes
            .iter()
            .map(|s| s.as_str().to_owned())
            .collect(),
    }
}

/// The principal, validated again (docs/protocol.md §4.3): an executor trusts the gateway's
/// authentication but not the shape of what arrives.
pub fn principal_from_proto(principal: Option<grpc::Principal>) -> Result<Principal, ConvertError> {
    let principal = principal.ok_or_else(|| ConvertError("missing principal".to_owned()))?;
    let scopes = principal
        .scopes
        .iter()
        .map(|scope| {
            Scope::parse(scope).ok_or_else(|| ConvertError(format!("unknown scope {scope:?}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let principal = Principal {
        tenant_id: principal.tenant_id,
        subject: principal.subject,
        scopes,
    };
    principal
        .validate()
        .map_err(|_| ConvertError("invalid principal".to_owned()))?;
    Ok(principal)
}

pub fn context_to_proto(context: &CommandContext) -> grpc::CallContext {
    grpc::CallContext {
        principal: Some(principal_to_proto(&context.principal)),
        command_id: context.command_id.clone(),
        execution_id: context.execution_id.clone().unwrap_or_default(),
        chosen_session_id: context.chosen_session_id.clone().unwrap_or_default(),
    }
}

pub fn context_from_proto(
    context: Option<grpc::CallContext>,
) -> Result<CommandContext, ConvertError> {
    let context = context.ok_or_else(|| ConvertError("missing call context".to_owned()))?;
    Ok(CommandContext {
        principal: principal_from_proto(context.principal)?,
        command_id: context.command_id,
        // The trace context is the call's metadata (crate::trace), not part of the message.
        trace: None,
        execution_id: Some(context.execution_id).filter(|id| !id.is_empty()),
        chosen_session_id: Some(context.chosen_session_id).filter(|id| !id.is_empty()),
    })
}

/// A command for an executor: its context, its type and its `data` as JSON.
pub fn command_request(
    context: &CommandContext,
    command: &ExecutorCommand,
) -> grpc::CommandRequest {
    grpc::CommandRequest {
        context: Some(context_to_proto(context)),
        command_type: command.name().as_str().to_owned(),
        data_json: command.data_json(),
    }
}

/// Parses JSON bytes strictly into a protocol type.
pub fn decode_json<T: DeserializeOwned + Serialize>(bytes: &[u8]) -> Result<T, ConvertError> {
    let value = parse_strict(bytes).map_err(|e| ConvertError(format!("invalid JSON: {e}")))?;
    decode_exact(value).map_err(|e| ConvertError(format!("invalid shape: {e}")))
}

pub fn failure_to_proto(error: &ProtocolError) -> grpc::Failure {
    grpc::Failure {
        code: error.code.as_str().to_owned(),
        message: error.message.clone(),
        retryable: error.retryable,
        retry_after_ms: error.retry_after_ms,
        details_json: error
            .details
            .as_ref()
            .map(|details| serde_json::to_vec(details).expect("a JSON object serialises")),
    }
}

pub fn failure_from_proto(failure: grpc::Failure) -> ProtocolError {
    // An internal error, or a code this build does not know, says nothing more to a client than
    // any internal error (docs/protocol.md §3): the executor's message stays out of the answer.
    let Some(code) = ErrorCode::parse(&failure.code).filter(|c| *c != ErrorCode::InternalError)
    else {
        let mut error = ProtocolError::internal();
        error.retryable = failure.retryable;
        return error;
    };
    let mut error = ProtocolError::new(code, failure.message);
    error.retryable = failure.retryable;
    error.retry_after_ms = failure.retry_after_ms;
    error.details = failure
        .details_json
        .and_then(|bytes| decode_json::<JsonObject>(&bytes).ok());
    error
}

/// The reply to a command: the executor's output as JSON, or a protocol failure.
pub fn reply(outcome: Result<ExecutorOutput, ProtocolError>) -> grpc::CommandReply {
    let outcome = match outcome {
        Ok(output) => grpc::command_reply::Outcome::DataJson(output.to_json()),
        Err(error) => grpc::command_reply::Outcome::Failure(failure_to_proto(&error)),
    };
    grpc::CommandReply {
        outcome: Some(outcome),
    }
}

/// Reads a reply to `command` back: its output, or the executor's protocol failure.
pub fn from_reply(
    command: &ExecutorCommand,
    reply: grpc::CommandReply,
) -> Result<Result<ExecutorOutput, ProtocolError>, ConvertError> {
    match reply.outcome {
        Some(grpc::command_reply::Outcome::DataJson(bytes)) => command
            .output_from_json(&bytes)
            .map(Ok)
            .map_err(|error| ConvertError(error.to_string())),
        Some(grpc::command_reply::Outcome::Failure(failure)) => {
            Ok(Err(failure_from_proto(failure)))
        }
        None => Err(ConvertError("empty command reply".to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_round_trip() {
        let error = ProtocolError::session_limit();
        let back = failure_from_proto(failure_to_proto(&error));
        assert_eq!(back, error);
    }

    #[test]
    fn an_invalid_principal_is_refused() {
        let proto = grpc::Principal {
            tenant_id: "tenant-a\u{0}b".to_owned(),
            subject: "user".to_owned(),
            scopes: vec![],
        };
        assert!(principal_from_proto(Some(proto)).is_err());
        let unknown_scope = grpc::Principal {
            tenant_id: "tenant-a".to_owned(),
            subject: "user".to_owned(),
            scopes: vec!["root".to_owned()],
        };
        assert!(principal_from_proto(Some(unknown_scope)).is_err());
    }

    #[test]
    fn the_call_context_round_trips_without_the_trace() {
        use agent_runtime::telemetry::TraceContext;
        let principal = Principal {
            tenant_id: "tenant-a".to_owned(),
            subject: "user".to_owned(),
            scopes: vec![Scope::SessionRead],
        };
        let context = CommandContext {
            principal,
            command_id: "command-1".to_owned(),
            trace: Some(TraceContext::new_root()),
            execution_id: Some("lease-1".to_owned()),
            chosen_session_id: Some("thread-1".to_owned()),
        };
        let decoded = context_from_proto(Some(context_to_proto(&context))).unwrap();
        assert_eq!(
            decoded,
            CommandContext {
                trace: None,
                ..context
            }
        );
    }

    #[test]
    fn replies_round_trip_and_are_parsed_strictly() {
        use agent_runtime::protocol::command::SessionRef;
        let abort = ExecutorCommand::AbortRequest(SessionRef::new("s-1"));
        let ok = reply(Ok(ExecutorOutput::AbortRequest(())));
        assert_eq!(
            from_reply(&abort, ok).unwrap(),
            Ok(ExecutorOutput::AbortRequest(()))
        );
        let failed = reply(Err(ProtocolError::session_limit()));
        assert_eq!(
            from_reply(&abort, failed).unwrap(),
            Err(ProtocolError::session_limit())
        );
        let read = ExecutorCommand::ReadSession(SessionRef::new("s-1"));
        let duplicate = grpc::CommandReply {
            outcome: Some(grpc::command_reply::Outcome::DataJson(
                br#"{"loaded":true,"loaded":false}"#.to_vec(),
            )),
        };
        assert!(from_reply(&read, duplicate).is_err());
    }
}
