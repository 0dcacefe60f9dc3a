use std::sync::Mutex;

use super::*;
use crate::protocol::Principal;
use crate::protocol::command::COMMAND_TYPES;

fn context() -> CommandContext {
    CommandContext {
        principal: Principal::new("tenant-a", "user", &[]),
        command_id: "c-1".to_owned(),
        trace: None,
        execution_id: None,
        chosen_session_id: None,
    }
}

#[test]
fn every_command_name_reads_back_from_its_wire_type() {
    assert_eq!(CommandName::ALL.len(), COMMAND_TYPES.len());
    for (name, wire) in CommandName::ALL.into_iter().zip(COMMAND_TYPES) {
        assert_eq!(name.as_str(), wire);
        assert_eq!(CommandName::parse(wire), Some(name));
        assert_eq!(serde_json::to_value(name).unwrap(), wire);
    }
    assert_eq!(CommandName::parse("session.rename"), None);
}

#[test]
fn an_executor_command_travels_as_its_type_and_data() {
    let command = ExecutorCommand::SubmitInput(SubmitInputData {
        session_id: "s-1".to_owned(),
        input: "hello".into(),
        priority: None,
        expected_request_id: None,
        max_turns: Some(3),
    });
    let back = ExecutorCommand::from_wire(command.name().as_str(), &command.data_json()).unwrap();
    assert_eq!(back, command);
    assert_eq!(command.placement(), Placement::Session("s-1"));
    assert!(command.runs_while_draining());

    let create = ExecutorCommand::CreateSession(CreateSessionData { metadata: None });
    assert_eq!(create.placement(), Placement::New);
    assert!(!create.runs_while_draining());
    assert!(!ExecutorCommand::ResumeSession(SessionRef::new("s-1")).runs_while_draining());

    // A command the gateway answers itself, an unknown one, or data of another shape: refused.
    assert!(ExecutorCommand::from_wire("session.list", b"{}").is_err());
    assert!(ExecutorCommand::from_wire("session.rename", b"{}").is_err());
    assert!(ExecutorCommand::from_wire("session.read", br#"{"sessionId":"s","x":1}"#).is_err());
}

#[test]
fn an_output_is_read_as_its_command_s_output_only() {
    let abort = ExecutorCommand::AbortRequest(SessionRef::new("s-1"));
    let done = ExecutorOutput::AbortRequest(());
    assert_eq!(abort.output_from_json(&done.to_json()).unwrap(), done);
    // A session descriptor is not what an abort answers.
    let read = ExecutorCommand::ReadSession(SessionRef::new("s-1"));
    assert!(read.output_from_json(br#"{"id":"s-1"}"#).is_err());
}

/// Answers every command with the output of `answer`'s variant, whatever it was asked.
struct Answering {
    answer: ExecutorOutput,
    asked: Mutex<Vec<CommandName>>,
}

#[async_trait]
impl SessionExecutor for Answering {
    async fn execute(
        &self,
        _context: &CommandContext,
        command: ExecutorCommand,
    ) -> Result<ExecutorOutput, ProtocolError> {
        self.asked.lock().unwrap().push(command.name());
        Ok(self.answer.clone())
    }

    async fn shutdown(&self) {}
}

#[tokio::test]
async fn a_typed_call_takes_only_its_own_output() {
    let executor: Box<dyn SessionExecutor> = Box::new(Answering {
        answer: ExecutorOutput::AbortRequest(()),
        asked: Mutex::new(Vec::new()),
    });
    executor
        .abort(&context(), SessionRef::new("s-1"))
        .await
        .unwrap();
    let error = executor
        .close(&context(), SessionRef::new("s-1"))
        .await
        .unwrap_err();
    assert_eq!(error, ProtocolError::internal());
}

struct Handler;

#[async_trait]
impl CommandHandler for Handler {
    async fn initialize(
        &self,
        _: &CommandContext,
        _: InitializeData,
    ) -> Result<Reply<InitializeResult>, ProtocolError> {
        Ok(InitializeResult::new("2026-01-01T00:00:00.000Z").into())
    }

    async fn create_session(
        &self,
        _: &CommandContext,
        _: CreateSessionData,
    ) -> Result<Reply<SessionResult>, ProtocolError> {
        Err(ProtocolError::session_limit())
    }

    async fn read_session(
        &self,
        _: &CommandContext,
        _: SessionRef,
    ) -> Result<Reply<ReadSessionResult>, ProtocolError> {
        Err(ProtocolError::internal())
    }

    async fn list_sessions(
        &self,
        _: &CommandContext,
        _: ListSessionsData,
    ) -> Result<Reply<ListSessionsResult>, ProtocolError> {
        Err(ProtocolError::internal())
    }

    async fn resume_session(
        &self,
        _: &CommandContext,
        _: SessionRef,
    ) -> Result<Reply<SessionResult>, ProtocolError> {
        Err(ProtocolError::internal())
    }

    async fn fork_session(
        &self,
        _: &CommandContext,
        _: ForkSessionData,
    ) -> Result<Reply<SessionResult>, ProtocolError> {
        Err(ProtocolError::internal())
    }

    async fn close_session(
        &self,
        _: &CommandContext,
        _: SessionRef,
    ) -> Result<Reply<SessionResult>, ProtocolError> {
        Err(ProtocolError::internal())
    }

    async fn submit_input(
        &self,
        _: &CommandContext,
        _: SubmitInputData,
    ) -> Result<Reply<SubmitResult>, ProtocolError> {
        Err(ProtocolError::internal())
    }

    async fn abort_request(
        &self,
        _: &CommandContext,
        data: SessionRef,
    ) -> Result<Reply<AbortResult>, ProtocolError> {
        Ok(Reply {
            data: AbortResult::new(&data.session_id),
            receipt_completed: true,
        })
    }

    async fn resolve_permission(
        &self,
        _: &CommandContext,
        _: ResolvePermissionData,
    ) -> Result<Reply<ResolvePermissionResult>, ProtocolError> {
        Err(ProtocolError::internal())
    }
}

#[tokio::test]
async fn handle_hands_each_command_to_its_own_method() {
    let abort = CommandKind::AbortRequest(SessionRef::new("s-1"));
    let reply = handle(&Handler, &context(), abort).await.unwrap();
    assert_eq!(
        reply.data,
        SuccessData::AbortRequest(AbortResult::new("s-1"))
    );
    assert!(reply.receipt_completed);
    let initialize: CommandKind = serde_json::from_value(serde_json::json!({
        "type": "initialize",
        "data": {"client": {"name": "test", "version": "1"}},
    }))
    .unwrap();
    let reply = handle(&Handler, &context(), initialize).await.unwrap();
    assert_eq!(reply.data.name(), CommandName::Initialize);
    assert!(!reply.receipt_completed);
    let create = CommandKind::CreateSession(CreateSessionData { metadata: None });
    let error = handle(&Handler, &context(), create).await.unwrap_err();
    assert_eq!(error, ProtocolError::session_limit());
}
