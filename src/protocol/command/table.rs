//! The table of every command: the one place a command is declared (docs/architecture.md,
//! "Commands: declared once").
//!
//! `command_table!(callback)` hands the table to `callback!`, which generates what its module
//! needs from it: the command names and the scopes they need ([`super::names`]), the typed
//! command, its success data, the gateway's handler and the executor port
//! ([`crate::session_commands`]), and the schema's command list. A command's type string, its
//! result and its executor call therefore cannot disagree between those places.
//!
//! `commands`: every command in the order of docs/protocol.md §2 (what `initialize` lists), as
//! `Variant handler_method "type" (Data => Success) [scopes] read-only, names-a-session`.
//! `executor`: the commands an executor runs, as `Variant port_method(Data) -> Output,
//! Placement`, where `New` runs on any executor with room (it creates a session), `Loads` on
//! the session's owner and loads the session, and `Session` on the session's owner.

#[macro_export]
#[doc(hidden)]
macro_rules! command_table {
    ($callback:ident) => {
        $callback! {
            commands {
                Initialize initialize "initialize"
                    (InitializeData => InitializeResult) [] true, none;
                CreateSession create_session "session.create"
                    (CreateSessionData => SessionResult) [SessionCreate] false, none;
                ReadSession read_session "session.read"
                    (SessionRef => ReadSessionResult) [SessionRead] true, session;
                ListSessions list_sessions "session.list"
                    (ListSessionsData => ListSessionsResult) [SessionRead] true, none;
                ResumeSession resume_session "session.resume"
                    (SessionRef => SessionResult) [SessionWrite] false, session;
                ForkSession fork_session "session.fork"
                    (ForkSessionData => SessionResult) [SessionRead, SessionCreate] false, session;
                CloseSession close_session "session.close"
                    (SessionRef => SessionResult) [SessionWrite] false, session;
                SubmitInput submit_input "input.submit"
                    (SubmitInputData => SubmitResult) [SessionWrite] false, session;
                AbortRequest abort_request "request.abort"
                    (SessionRef => AbortResult) [SessionWrite] false, session;
                ResolvePermission resolve_permission "permission.resolve"
                    (ResolvePermissionData => ResolvePermissionResult) [PermissionResolve] false, session;
            }
            executor {
                CreateSession create(CreateSessionData) -> SessionDescriptor, New;
                ReadSession read(SessionRef) -> SessionSnapshot, Session;
                ResumeSession resume(SessionRef) -> SessionDescriptor, Loads;
                ForkSession fork(ForkSessionData) -> SessionDescriptor, New;
                CloseSession close(SessionRef) -> SessionDescriptor, Session;
                SubmitInput submit(SubmitInputData) -> Submitted, Session;
                AbortRequest abort(SessionRef) -> (), Session;
                ResolvePermission resolve_permission(ResolvePermissionData) -> (), Session;
            }
        }
    };
}
