//! The baseline server: protocol v1 served from memory by the product's HTTP stack (axum on
//! hyper, the same versions), with none of the product's work: no authentication, no store, no
//! idempotency, no executor. `initialize`, `session.create`, `session.read` and `input.submit`
//! get canned answers; a submission "runs" the demo provider's plan (echo, or
//! `demo:deltas=N [demo:interval=MS] [demo:stamp]`) by appending pre-rendered SSE frames to an
//! in-memory log that every event stream of the session follows.
//!
//! Because it speaks the same protocol, the scenarios load it with exactly the code that loads the
//! product; its figures are the limits of this machine's HTTP stack and load generator.

mod emulate;
mod http;

use agent_runtime::sync::{Locked, ReadWriteLocked};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use anyhow::Context;
use axum::serve::ListenerExt;
use bytes::Bytes;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone, clap::Args)]
pub struct BaselineArgs {
    /// Listen address (`127.0.0.1:0` picks a free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// Heartbeat comment after this much SSE silence (milliseconds), as the product's gateway.
    #[arg(long, default_value_t = 2000)]
    pub heartbeat_ms: u64,
}

/// One session's event log: SSE frames in sequence order (frame `i` has sequence `i + 1`).
pub(crate) struct Log {
    pub session_id: String,
    pub frames: RwLock<Vec<Bytes>>,
    /// The last sequence; followers wait on it.
    pub head: watch::Sender<u64>,
}

impl Log {
    fn new(session_id: String) -> Log {
        Log {
            session_id,
            frames: RwLock::new(Vec::new()),
            head: watch::Sender::new(0),
        }
    }

    /// Appends frames built from their sequence numbers and wakes the followers.
    pub fn append(&self, frame: impl FnOnce(u64) -> Bytes) {
        let mut frames = self.frames.write_locked();
        let sequence = frames.len() as u64 + 1;
        frames.push(frame(sequence));
        drop(frames);
        self.head.send_replace(sequence);
    }

    /// Frames from index `from`, at most `limit`.
    pub fn read(&self, from: usize, limit: usize) -> Vec<Bytes> {
        let frames = self.frames.read_locked();
        frames.iter().skip(from).take(limit).cloned().collect()
    }

    pub fn last_sequence(&self) -> u64 {
        *self.head.borrow()
    }
}

pub(crate) struct State {
    pub sessions: Mutex<HashMap<String, Arc<Log>>>,
    pub heartbeat: Duration,
    pub shutdown: CancellationToken,
}

impl State {
    pub fn session(&self, session_id: &str) -> Option<Arc<Log>> {
        let sessions = self.sessions.locked();
        sessions.get(session_id).cloned()
    }

    pub fn create(&self, session_id: &str) -> Arc<Log> {
        let log = Arc::new(Log::new(session_id.to_owned()));
        let mut sessions = self.sessions.locked();
        sessions.insert(session_id.to_owned(), Arc::clone(&log));
        log
    }
}

/// A started baseline server.
pub struct Running {
    pub address: SocketAddr,
    pub shutdown: CancellationToken,
    pub task: tokio::task::JoinHandle<std::io::Result<()>>,
}

/// Serves on `listener` until `shutdown` fires.
pub fn start(listener: TcpListener, heartbeat: Duration) -> anyhow::Result<Running> {
    let address = listener.local_addr()?;
    let shutdown = CancellationToken::new();
    let state = Arc::new(State {
        sessions: Mutex::new(HashMap::new()),
        heartbeat,
        shutdown: shutdown.clone(),
    });
    let router = http::router(state);
    let stop = shutdown.clone();
    let task = tokio::spawn(async move {
        // The product's gateway sets TCP_NODELAY on every connection; so does its baseline.
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        axum::serve(listener, router)
            .with_graceful_shutdown(async move { stop.cancelled().await })
            .await
    });
    Ok(Running {
        address,
        shutdown,
        task,
    })
}

/// `baseline-server`: serves until SIGINT or SIGTERM.
pub async fn serve(args: BaselineArgs) -> anyhow::Result<()> {
    let listener = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    let running = start(listener, Duration::from_millis(args.heartbeat_ms.max(1)))?;
    println!(
        "agent-runtime-bench baseline is serving on http://{}",
        running.address
    );
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
    running.shutdown.cancel();
    running.task.await??;
    Ok(())
}
