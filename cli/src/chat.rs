//! `agent-runtime chat`: a terminal client of a running server, built on `agent-runtime-client`.
//!
//! It creates a session (or resumes `--session ID`) and prints its id, then sends every line read
//! from stdin as input and streams the session's events: assistant text as it arrives, tool
//! activity and the end of each request on a line of their own. A `permission.requested` event
//! asks `Allow <tool>? [y]es / [n]o / [a]lways for this session` and the next line answers it.
//! `/quit` or end of input leaves without closing the session, `/close` closes it. Ctrl-C while a
//! request runs aborts that request (`request.abort`); when idle it leaves like `/quit`.
//!
//! The token comes from `--token`, `AGENT_RUNTIME_TOKEN`, or the development token file of a
//! `serve` started in the current directory; it is never printed.

mod render;

use std::collections::VecDeque;
use std::io::Write;
use std::path::Path;

use agent_runtime::protocol::command::{ClientInfo, PermissionScope};
use agent_runtime::protocol::result::{SubmitOutcome, SubmitResult};
use agent_runtime::protocol::{ErrorCode, PermissionRequestedData};
use agent_runtime_client::{
    AgentClient, ClientError, ClientOptions, CommandOptions, EventStream, EventsOptions,
    PermissionDecision, RemoteSession, Secret, SessionEvent, SubmitOptions,
};
use anyhow::Context;
use futures_util::StreamExt;
use tokio::sync::mpsc;

use self::render::{Renderer, Shown, is_plan, permission_prompt, question_answer, questions_of};

/// Arguments of `chat`.
#[derive(Debug, Clone, clap::Args)]
pub struct ChatArgs {
    #[command(flatten)]
    pub server: ServerUrl,
    /// Bearer token (never printed). Default: `.agent-runtime/dev-token` of a local `serve`.
    #[arg(long, env = "AGENT_RUNTIME_TOKEN", hide_env_values = true)]
    pub token: Option<Secret>,
    /// Resume this session instead of creating a new one. Session ids may start with `-`.
    #[arg(long, allow_hyphen_values = true)]
    pub session: Option<String>,
}

/// The server a client subcommand talks to.
#[derive(Debug, Clone, clap::Args)]
pub struct ServerUrl {
    /// Server URL (a `serve` or any cluster gateway); `/v1/agent` is added when it has no path.
    #[arg(
        long,
        env = "AGENT_RUNTIME_URL",
        default_value = "http://127.0.0.1:8787"
    )]
    pub url: String,
}

/// Where `serve` keeps its development token by default.
const DEV_TOKEN_FILE: &str = ".agent-runtime/dev-token";

pub async fn run(args: ChatArgs) -> anyhow::Result<()> {
    let token = match args.token {
        Some(token) => token,
        None => crate::dev_token::read(Path::new(DEV_TOKEN_FILE), "AGENT_RUNTIME_TOKEN")?,
    };
    let info = ClientInfo {
        name: "agent-runtime-chat".to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        title: Some("agent-runtime chat".to_owned()),
    };
    let options = ClientOptions::new(api_base(&args.server.url), info).bearer_token(token);
    let client = AgentClient::new(options).context("invalid server URL")?;

    let mut out = Terminal::default();
    let (session, after) = open_session(&client, args.session.as_deref()).await?;
    let id = session.session_id().to_owned();
    out.print(&format!(
        "session {id}\nType a message and press Enter. /quit leaves (resume later with --session {id}), /close closes the session, Ctrl-C aborts a running request.\n"
    ));

    let chat = Chat {
        events: session.events(EventsOptions::after(after)),
        session,
        out,
        running: None,
        permissions: VecDeque::new(),
        idle_exit: false,
    };
    chat.run(stdin_lines()).await
}

/// Creates a session, or resumes one and starts its events after the recovery cursor (the end of
/// its last completed request), so old answers are not printed again.
async fn open_session(
    client: &AgentClient,
    session_id: Option<&str>,
) -> anyhow::Result<(RemoteSession, u64)> {
    let Some(session_id) = session_id else {
        let session = client
            .create_session(None, CommandOptions::default())
            .await
            .map_err(|error| failure("creating a session", &error))?;
        return Ok((session, 0));
    };
    let session = client
        .resume_session(session_id, CommandOptions::default())
        .await
        .map_err(|error| failure("resuming the session", &error))?;
    let read = session
        .read(CommandOptions::default())
        .await
        .map_err(|error| failure("reading the session", &error))?;
    let after = read
        .get("recovery")
        .and_then(|recovery| recovery.get("lastEventSequence"))
        .and_then(serde_json::Value::as_u64)
        .unwrap_or(0);
    let messages = read
        .get("messages")
        .and_then(serde_json::Value::as_array)
        .map_or(0, Vec::len);
    println!(
        "resumed session {} ({messages} messages)",
        session.session_id()
    );
    Ok((session, after))
}

struct Chat {
    session: RemoteSession,
    events: EventStream,
    out: Terminal,
    /// The request started by this terminal and not yet ended.
    running: Option<String>,
    /// Approvals asked and not yet answered; the first is on screen.
    permissions: VecDeque<PermissionRequestedData>,
    /// Input ended: leave as soon as no request of ours runs.
    idle_exit: bool,
}

enum Next {
    Continue,
    Leave,
}

impl Chat {
    async fn run(mut self, mut lines: mpsc::Receiver<String>) -> anyhow::Result<()> {
        let mut interrupts = Interrupts::new()?;
        let mut input_open = true;
        self.prompt();
        loop {
            let next = tokio::select! {
                line = lines.recv(), if input_open => match line {
                    Some(line) => self.line(line.trim()).await,
                    // End of input (e.g. piped): let the running request finish first.
                    None => {
                        input_open = false;
                        self.idle_exit = true;
                        if self.running.is_some() && self.permissions.is_empty() { Next::Continue } else { Next::Leave }
                    }
                },
                event = self.events.next() => self.event(event).await?,
                () = interrupts.next() => self.interrupt().await,
            };
            if let Next::Leave = next {
                break;
            }
        }
        let id = self.session.session_id().to_owned();
        self.out.line(&format!(
            "bye. Resume this session with: agent-runtime chat --session {id}"
        ));
        Ok(())
    }

    async fn line(&mut self, line: &str) -> Next {
        self.out.renderer.user_newline();
        if let Some(request) = self.permissions.front().cloned() {
            return self.answer_permission(&request, line).await;
        }
        match line {
            "" => {}
            "/quit" | "/exit" => return Next::Leave,
            "/close" => {
                match self.session.close(CommandOptions::default()).await {
                    Ok(_) => self.out.line("[session closed]"),
                    Err(error) => self.out.error("close", &error),
                }
                return Next::Leave;
            }
            input => {
                let submitted = self
                    .session
                    .send(input, SubmitOptions::default(), CommandOptions::default())
                    .await;
                match submitted {
                    Ok(result) => self.submitted(&result),
                    Err(error) => self.out.error("submit", &error),
                }
            }
        }
        self.prompt();
        Next::Continue
    }

    fn submitted(&mut self, result: &SubmitResult) {
        match &result.outcome {
            SubmitOutcome::Started { request_id } => self.running = Some(request_id.clone()),
            SubmitOutcome::Steered { .. } => self.out.line("[steering the running request]"),
            SubmitOutcome::Queued => self.out.line("[queued after the running request]"),
        }
    }

    async fn answer_permission(&mut self, request: &PermissionRequestedData, line: &str) -> Next {
        let plan = is_plan(request);
        let decision = match (questions_of(request), line.to_ascii_lowercase().as_str()) {
            (None, "y" | "yes") if plan => PermissionDecision::approve(PermissionScope::Once),
            (None, "n" | "no") if plan => PermissionDecision::deny(),
            (None, _) if plan && !line.trim().is_empty() => PermissionDecision {
                approved: false,
                reason: Some(line.trim().to_owned()),
                scope: None,
            },
            (Some(_), "/skip") => PermissionDecision::deny(),
            (Some(questions), _) => PermissionDecision {
                approved: true,
                reason: Some(question_answer(questions, line)),
                scope: None,
            },
            (None, "y" | "yes") => PermissionDecision::approve(PermissionScope::Once),
            (None, "a" | "always") => PermissionDecision::approve(PermissionScope::Session),
            (None, "n" | "no") => PermissionDecision::deny(),
            (None, _) => {
                self.out.print(&permission_prompt(request));
                return Next::Continue;
            }
        };
        self.permissions.pop_front();
        let resolved = self
            .session
            .resolve_permission(
                &request.permission_request_id,
                decision,
                CommandOptions::default(),
            )
            .await;
        if let Err(error) = resolved {
            self.out.error("permission", &error);
        }
        self.prompt();
        Next::Continue
    }

    async fn event(
        &mut self,
        event: Option<Result<SessionEvent, ClientError>>,
    ) -> anyhow::Result<Next> {
        let event = match event {
            Some(Ok(event)) => event,
            None => return Ok(Next::Leave),
            Some(Err(error)) if error.code == ErrorCode::StaleCursor => {
                // Retention overtook this terminal: skip to the recovery cursor.
                self.out
                    .line("[some events expired before they were shown]");
                let after = self.recovery_cursor().await?;
                self.events = self.session.events(EventsOptions::after(after));
                return Ok(Next::Continue);
            }
            Some(Err(error)) => return Err(failure("the event stream", &error)),
        };
        let (text, shown) = self.out.renderer.event(&event);
        self.out.print(&text);
        match shown {
            Shown::Nothing => {}
            Shown::RequestEnded(request) => {
                if request.is_some() && request == self.running {
                    self.running = None;
                    if self.idle_exit {
                        return Ok(Next::Leave);
                    }
                    self.prompt();
                }
            }
            Shown::Permission(request) => {
                if self.idle_exit {
                    // Nobody is left to answer; the request waits on the server until resumed.
                    return Ok(Next::Leave);
                }
                self.permissions.push_back(request);
                if self.permissions.len() == 1 {
                    self.prompt();
                }
            }
            Shown::SessionClosed => return Ok(Next::Leave),
        }
        Ok(Next::Continue)
    }

    async fn recovery_cursor(&self) -> anyhow::Result<u64> {
        let read = self
            .session
            .read(CommandOptions::default())
            .await
            .map_err(|error| failure("reading the session", &error))?;
        Ok(read["recovery"]["lastEventSequence"].as_u64().unwrap_or(0))
    }

    /// Ctrl-C: abort the running request, or leave when there is none.
    async fn interrupt(&mut self) -> Next {
        if self.running.is_none() {
            self.out.line("");
            return Next::Leave;
        }
        self.out.line("[aborting the request]");
        if let Err(error) = self.session.abort(CommandOptions::default()).await {
            self.out.error("abort", &error);
        }
        Next::Continue
    }

    /// `> ` for the next message, or the approval question when one is waiting.
    fn prompt(&mut self) {
        let question = match self.permissions.front() {
            Some(request) => permission_prompt(request),
            None if self.running.is_none() => "> ".to_owned(),
            None => return,
        };
        let text = self.out.renderer.prompt(&question);
        self.out.print(&text);
    }
}

/// stdout with the renderer's idea of where the cursor is.
#[derive(Default)]
struct Terminal {
    renderer: Renderer,
}

impl Terminal {
    fn print(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        let mut stdout = std::io::stdout().lock();
        // A closed terminal is noticed by the input side (end of input); nothing to do here.
        let _ = stdout.write_all(text.as_bytes());
        let _ = stdout.flush();
    }

    fn line(&mut self, text: &str) {
        let text = self.renderer.line(text);
        self.print(&text);
    }

    fn error(&mut self, what: &str, error: &ClientError) {
        let text = self.renderer.error(what, error);
        self.print(&text);
    }
}

/// Lines of stdin, read on a thread of their own: a blocking read must not hold up the runtime,
/// and the thread does not keep the process alive once `chat` returns.
fn stdin_lines() -> mpsc::Receiver<String> {
    let (sender, receiver) = mpsc::channel(16);
    std::thread::spawn(move || {
        let stdin = std::io::stdin();
        let mut line = String::new();
        loop {
            line.clear();
            match stdin.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {
                    if sender.blocking_send(line.clone()).is_err() {
                        return;
                    }
                }
            }
        }
    });
    receiver
}

/// Repeated Ctrl-C (SIGINT): handled, so it never kills the process while `chat` runs.
struct Interrupts {
    #[cfg(unix)]
    signal: tokio::signal::unix::Signal,
}

impl Interrupts {
    fn new() -> anyhow::Result<Interrupts> {
        #[cfg(unix)]
        {
            let signal = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
                .context("listening for Ctrl-C")?;
            Ok(Interrupts { signal })
        }
        #[cfg(not(unix))]
        {
            Ok(Interrupts {})
        }
    }

    async fn next(&mut self) {
        #[cfg(unix)]
        {
            if self.signal.recv().await.is_none() {
                std::future::pending::<()>().await;
            }
        }
        #[cfg(not(unix))]
        {
            if tokio::signal::ctrl_c().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }
}

/// `--url` as the API base: `/v1/agent` is added to a URL without a path.
pub fn api_base(url: &str) -> String {
    let trimmed = url.trim_end_matches('/');
    let after_scheme = trimmed.split_once("://").map_or(trimmed, |(_, rest)| rest);
    if after_scheme.contains('/') {
        trimmed.to_owned()
    } else {
        format!("{trimmed}/v1/agent")
    }
}

/// A failed command as an error of the whole `chat` (code and message; never the token).
fn failure(what: &str, error: &ClientError) -> anyhow::Error {
    anyhow::anyhow!("{what} failed: {}: {}", error.code, error.message)
}

#[cfg(test)]
mod tests {
    #[test]
    fn mcp_tools_and_subagents_are_named_for_people() {
        use super::render::tool_label;
        use serde_json::json;
        assert_eq!(
            tool_label("mcp__docs__search", &json!({})),
            "search (MCP server docs)"
        );
        assert_eq!(
            tool_label("Task", &json!({ "subagent_type": "Explore" })),
            "Task (subagent Explore)"
        );
        assert_eq!(tool_label("Read", &json!({})), "Read");
    }

    use super::*;

    #[test]
    fn the_api_path_is_added_only_to_a_bare_server_url() {
        assert_eq!(
            api_base("http://127.0.0.1:8787"),
            "http://127.0.0.1:8787/v1/agent"
        );
        assert_eq!(
            api_base("http://127.0.0.1:8787/"),
            "http://127.0.0.1:8787/v1/agent"
        );
        assert_eq!(api_base("https://h/custom/api/"), "https://h/custom/api");
    }

    #[test]
    fn the_token_never_shows_in_debug_output() {
        use clap::Parser;
        let cli = crate::Cli::parse_from(["agent-runtime", "chat", "--token", "sekrit-value"]);
        assert!(!format!("{cli:?}").contains("sekrit-value"));
    }
}
