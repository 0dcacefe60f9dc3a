//! Harness of the Rust client tests: a loopback TCP proxy that can lose answers and cut streams,
//! telemetry that records which commands the server executed, and a client whose retries are
//! recorded.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_runtime::protocol::ErrorCode;
use agent_runtime::protocol::command::ClientInfo;
use agent_runtime::telemetry::{AuditRecord, Telemetry, TelemetryError};
use agent_runtime_client::{AgentClient, ClientOptions, ErrorKind, RetryNotice};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// What the proxy does to the connection whose request bytes contain `marker` (each fault fires
/// once, the first armed fault whose marker arrives wins).
#[derive(Clone, Debug)]
pub enum Fault {
    /// Forward the request, wait until the server starts answering (so it has completed the
    /// command), then close both sides without relaying a byte of the answer.
    DropResponse { marker: String },
    /// Relay `after_bytes` bytes of the answer, then close both sides (mid-stream for SSE).
    CutResponse { marker: String, after_bytes: usize },
}

impl Fault {
    fn marker(&self) -> &str {
        match self {
            Fault::DropResponse { marker } | Fault::CutResponse { marker, .. } => marker,
        }
    }
}

/// A loopback proxy in front of a server.
pub struct Proxy {
    pub address: SocketAddr,
    state: Arc<ProxyState>,
    stop: CancellationToken,
}

struct ProxyState {
    upstream: SocketAddr,
    armed: Mutex<Vec<Fault>>,
    fired: AtomicUsize,
    /// Every connection's client-to-server bytes.
    requests: Mutex<Vec<Arc<Mutex<Vec<u8>>>>>,
}

impl Proxy {
    pub async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let state = Arc::new(ProxyState {
            upstream,
            armed: Mutex::new(Vec::new()),
            fired: AtomicUsize::new(0),
            requests: Mutex::new(Vec::new()),
        });
        let stop = CancellationToken::new();
        let accepting = Arc::clone(&state);
        let stopped = stop.clone();
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    () = stopped.cancelled() => return,
                    accepted = listener.accept() => accepted,
                };
                let Ok((client, _)) = accepted else { return };
                tokio::spawn(relay(Arc::clone(&accepting), client, stopped.clone()));
            }
        });
        Proxy {
            address,
            state,
            stop,
        }
    }

    /// The base URL of the API through the proxy.
    pub fn base(&self) -> String {
        format!("http://{}/v1/agent", self.address)
    }

    pub fn arm(&self, fault: Fault) {
        self.state.armed.lock().unwrap().push(fault);
    }

    /// How many faults fired.
    pub fn fired(&self) -> usize {
        self.state.fired.load(Ordering::SeqCst)
    }

    /// How often `marker` was sent to the server, over every connection.
    pub fn sent(&self, marker: &str) -> usize {
        let connections = self.state.requests.lock().unwrap();
        connections
            .iter()
            .map(|log| count(&log.lock().unwrap(), marker.as_bytes()))
            .sum()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

fn count(haystack: &[u8], needle: &[u8]) -> usize {
    if needle.is_empty() || haystack.len() < needle.len() {
        return 0;
    }
    haystack
        .windows(needle.len())
        .filter(|w| *w == needle)
        .count()
}

/// What a fired fault leaves for the answer direction of its connection.
#[derive(Clone, Copy, Debug)]
enum Doom {
    Drop,
    CutAfter(usize),
}

async fn relay(state: Arc<ProxyState>, client: TcpStream, stop: CancellationToken) {
    let Ok(server) = TcpStream::connect(state.upstream).await else {
        return;
    };
    let log = Arc::new(Mutex::new(Vec::new()));
    state.requests.lock().unwrap().push(Arc::clone(&log));
    let doom: Arc<Mutex<Option<Doom>>> = Arc::new(Mutex::new(None));
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let upward = tokio::spawn(forward_request(
        Arc::clone(&state),
        client_read,
        server_write,
        log,
        Arc::clone(&doom),
    ));
    // The answer direction decides when the connection ends; dropping every half closes both
    // sockets.
    tokio::select! {
        () = stop.cancelled() => {}
        () = forward_response(server_read, client_write, doom) => {}
    }
    upward.abort();
}

async fn forward_request(
    state: Arc<ProxyState>,
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    log: Arc<Mutex<Vec<u8>>>,
    doom: Arc<Mutex<Option<Doom>>>,
) {
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        let read = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(read) => read,
        };
        let chunk = &buffer[..read];
        {
            // Decide before forwarding, so the answer cannot overtake the decision.
            let mut log = log.lock().unwrap();
            let mut armed = state.armed.lock().unwrap();
            let position = armed.iter().position(|fault| {
                let marker = fault.marker().as_bytes();
                let before = count(&log, marker);
                let mut joined = log.clone();
                joined.extend_from_slice(chunk);
                count(&joined, marker) > before
            });
            log.extend_from_slice(chunk);
            if let Some(position) = position {
                let fault = armed.remove(position);
                state.fired.fetch_add(1, Ordering::SeqCst);
                *doom.lock().unwrap() = Some(match fault {
                    Fault::DropResponse { .. } => Doom::Drop,
                    Fault::CutResponse { after_bytes, .. } => Doom::CutAfter(after_bytes),
                });
            }
        }
        if to.write_all(chunk).await.is_err() {
            return;
        }
    }
}

/// Relays the answer; returns when it ends or a fault kills the connection.
async fn forward_response(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    doom: Arc<Mutex<Option<Doom>>>,
) {
    let mut buffer = vec![0u8; 16 * 1024];
    let mut relayed_since_doom = 0usize;
    loop {
        let read = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(read) => read,
        };
        let fate = *doom.lock().unwrap();
        let chunk = match fate {
            None => &buffer[..read],
            Some(Doom::Drop) => return,
            Some(Doom::CutAfter(limit)) => {
                let allowed = limit.saturating_sub(relayed_since_doom).min(read);
                relayed_since_doom += allowed;
                if allowed < read || relayed_since_doom >= limit {
                    let _ = to.write_all(&buffer[..allowed]).await;
                    let _ = to.flush().await;
                    return;
                }
                &buffer[..read]
            }
        };
        if to.write_all(chunk).await.is_err() {
            return;
        }
    }
}

/// Records the `(commandType, commandId)` of every command the server executed (not replays,
/// conflicts or in-progress answers: docs/protocol.md §10).
#[derive(Debug, Default)]
pub struct ExecutedCommands {
    records: Mutex<Vec<(String, String)>>,
}

impl ExecutedCommands {
    pub fn of_type(&self, command_type: &str) -> Vec<String> {
        self.records
            .lock()
            .unwrap()
            .iter()
            .filter(|(kind, _)| kind == command_type)
            .map(|(_, id)| id.clone())
            .collect()
    }
}

impl Telemetry for ExecutedCommands {
    fn write_audit(&self, record: &AuditRecord) -> Result<(), TelemetryError> {
        self.records
            .lock()
            .unwrap()
            .push((record.command_type.to_owned(), record.command_id.clone()));
        Ok(())
    }
}

/// One retry the client announced.
#[derive(Clone, Debug, PartialEq)]
pub enum Retried {
    Command {
        command_type: &'static str,
        command_id: String,
        delay: Duration,
        code: ErrorCode,
        kind: ErrorKind,
        retry_after: Option<Duration>,
    },
    Reconnect {
        after: u64,
        error: Option<ErrorCode>,
    },
}

/// The retries of a client, in order.
#[derive(Clone, Debug, Default)]
pub struct RetryLog(Arc<Mutex<Vec<Retried>>>);

impl RetryLog {
    pub fn entries(&self) -> Vec<Retried> {
        self.0.lock().unwrap().clone()
    }

    pub fn commands(&self) -> Vec<Retried> {
        self.entries()
            .into_iter()
            .filter(|entry| matches!(entry, Retried::Command { .. }))
            .collect()
    }

    pub fn reconnects(&self) -> Vec<Retried> {
        self.entries()
            .into_iter()
            .filter(|entry| matches!(entry, Retried::Reconnect { .. }))
            .collect()
    }
}

/// Client options for `base` with `token`, short retry delays and a retry log.
pub fn client_options(base: &str, token: &str, log: &RetryLog) -> ClientOptions {
    let info = ClientInfo {
        name: "client-tests".to_owned(),
        version: "1.0.0".to_owned(),
        title: Some("Rust client tests".to_owned()),
    };
    let mut options = ClientOptions::new(base, info).bearer_token(token);
    options.retry_base_delay = Duration::from_millis(10);
    let log = log.clone();
    options.on_retry = Some(Arc::new(move |notice: &RetryNotice<'_>| {
        let entry = match *notice {
            RetryNotice::Command {
                command_type,
                command_id,
                delay,
                error,
                ..
            } => Retried::Command {
                command_type,
                command_id: command_id.to_owned(),
                delay,
                code: error.code,
                kind: error.kind,
                retry_after: error.retry_after,
            },
            RetryNotice::EventReconnect { after, error, .. } => Retried::Reconnect {
                after,
                error: error.map(|error| error.code),
            },
        };
        log.0.lock().unwrap().push(entry);
    }));
    options
}

/// A client of `base` (see [`client_options`]).
pub fn client(base: &str, token: &str, log: &RetryLog) -> AgentClient {
    AgentClient::new(client_options(base, token, log)).expect("valid client options")
}
