//! A TCP proxy between a store and PostgreSQL that cuts a connection on cue, for the
//! PostgreSQL fault tests (reliability catalogue PG-01, PG-02, PG-06; no toxiproxy in CI).
//!
//! The proxy relays bytes unchanged. An armed [`Fault`] watches the client's bytes for a marker
//! (a piece of SQL text) and fires once, on the first connection that sends it:
//! - [`Fault::ResetBefore`]: the message is not forwarded and both sides of that connection are
//!   closed, so the transaction it belonged to dies mid-way (PostgreSQL rolls it back);
//! - [`Fault::DropReplyAfter`]: the message is forwarded, the server's reply is swallowed and both
//!   sides are closed once it arrives; with `COMMIT` the client cannot know that it committed.
//!
//! SQL text only travels in a `Parse` message when the statement is not cached on the connection,
//! so [`FaultProxy::proxied_url`] turns sqlx's statement cache off (`COMMIT` and `BEGIN` are
//! simple queries and always travel as text). An optional latency delays every client chunk, so
//! a cancellation can land inside any round trip.

use agent_runtime::sync::Locked;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// What the proxy does when it sees its marker (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Do not forward the client message containing the marker; close both sides instead.
    ResetBefore(String),
    /// Forward the client message containing the marker, swallow the reply, close both sides.
    DropReplyAfter(String),
    /// On the connection that sends the marker, the next `COMMIT` is forwarded and its reply
    /// swallowed (both sides closed): the reply of one chosen transaction's commit is lost, while
    /// the commits of other connections (background work) pass.
    DropCommitReplyAfter(String),
}

impl Fault {
    fn marker(&self) -> &[u8] {
        match self {
            Fault::ResetBefore(marker)
            | Fault::DropReplyAfter(marker)
            | Fault::DropCommitReplyAfter(marker) => marker.as_bytes(),
        }
    }
}

const COMMIT: &[u8] = b"COMMIT";

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[derive(Default)]
struct Shared {
    armed: Mutex<Option<Fault>>,
    fired: AtomicUsize,
    latency_us: AtomicU64,
}

impl Shared {
    /// Takes the armed fault when its marker ends in `window[fresh..]` (the bytes just read), so
    /// a marker seen before the fault was armed never fires it.
    fn fire(&self, window: &[u8], fresh: usize) -> Option<Fault> {
        let mut armed = self.armed.locked();
        let marker = armed.as_ref()?.marker();
        let start = fresh.saturating_sub(marker.len().saturating_sub(1));
        let searched = &window[start..];
        if marker.is_empty() || !contains(searched, marker) {
            return None;
        }
        if matches!(armed.as_ref(), Some(Fault::DropCommitReplyAfter(_))) {
            // Not taken yet: the connection is primed, its next COMMIT fires it.
            return armed.clone();
        }
        self.fired.fetch_add(1, Ordering::SeqCst);
        armed.take()
    }

    /// Takes an armed [`Fault::DropCommitReplyAfter`] for a primed connection's COMMIT.
    fn fire_commit(&self) -> bool {
        let mut armed = self.armed.locked();
        if !matches!(armed.as_ref(), Some(Fault::DropCommitReplyAfter(_))) {
            return false;
        }
        self.fired.fetch_add(1, Ordering::SeqCst);
        armed.take();
        true
    }
}

/// A running fault proxy; stops accepting (existing connections keep relaying) on drop.
pub struct FaultProxy {
    address: SocketAddr,
    upstream: SocketAddr,
    shared: Arc<Shared>,
    accept: JoinHandle<()>,
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// `host:port` of a `postgres://user@host:port/db?...` URL.
fn authority(url: &str) -> Option<&str> {
    let rest = url.split_once("://")?.1;
    let rest = rest.rsplit_once('@').map_or(rest, |(_, after)| after);
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    Some(&rest[..end])
}

impl FaultProxy {
    /// Starts a proxy on a free loopback port in front of the server of `database_url`.
    pub async fn start(database_url: &str) -> std::io::Result<Self> {
        let upstream_text = authority(database_url).ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "no host:port in the URL")
        })?;
        let upstream = tokio::net::lookup_host(upstream_text)
            .await?
            .next()
            .ok_or_else(|| std::io::Error::other("the database host did not resolve"))?;
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let shared = Arc::new(Shared::default());
        let accept = tokio::spawn({
            let shared = Arc::clone(&shared);
            async move {
                while let Ok((client, _)) = listener.accept().await {
                    tokio::spawn(relay(client, upstream, Arc::clone(&shared)));
                }
            }
        });
        Ok(Self {
            address,
            upstream,
            shared,
            accept,
        })
    }

    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The address of the real server behind the proxy.
    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }

    /// `database_url` pointed at the proxy, with sqlx's statement cache off so every statement's
    /// SQL text crosses the proxy.
    pub fn proxied_url(&self, database_url: &str) -> String {
        let authority = authority(database_url).unwrap_or_default();
        let url = database_url.replacen(authority, &self.address.to_string(), 1);
        let separator = if url.contains('?') { '&' } else { '?' };
        format!("{url}{separator}statement-cache-capacity=0")
    }

    /// Arms `fault`, replacing any armed one; it fires at most once.
    pub fn arm(&self, fault: Fault) {
        *self.shared.armed.locked() = Some(fault);
    }

    /// How many faults have fired so far.
    pub fn fired(&self) -> usize {
        self.shared.fired.load(Ordering::SeqCst)
    }

    /// Delays every client chunk by `latency` from now on (zero: none).
    pub fn set_latency(&self, latency: Duration) {
        let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.shared.latency_us.store(micros, Ordering::SeqCst);
    }
}

/// Relays one connection until either side closes or a fault fires.
async fn relay(client: TcpStream, upstream: SocketAddr, shared: Arc<Shared>) {
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let mut from_client = vec![0u8; 64 * 1024];
    let mut from_server = vec![0u8; 64 * 1024];
    // The end of the previous client chunk, so a marker split across two reads is still seen.
    let mut window: Vec<u8> = Vec::new();
    let mut swallow_reply = false;
    let mut primed = false;
    loop {
        tokio::select! {
            read = client_read.read(&mut from_client) => {
                let Ok(n @ 1..) = read else { return };
                let chunk = &from_client[..n];
                let latency = shared.latency_us.load(Ordering::SeqCst);
                if latency > 0 {
                    tokio::time::sleep(Duration::from_micros(latency)).await;
                }
                let fresh = window.len();
                window.extend_from_slice(chunk);
                match shared.fire(&window, fresh) {
                    Some(Fault::ResetBefore(_)) => return,
                    Some(Fault::DropReplyAfter(_)) => swallow_reply = true,
                    Some(Fault::DropCommitReplyAfter(_)) => primed = true,
                    None => {}
                }
                // The marker and the COMMIT in one chunk would be a pipelined transaction; the
                // COMMIT of the same chunk counts then too.
                if primed && contains(chunk, COMMIT) && shared.fire_commit() {
                    swallow_reply = true;
                }
                let keep = window.len().saturating_sub(256);
                window.drain(..keep);
                if server_write.write_all(chunk).await.is_err() {
                    return;
                }
            }
            read = server_read.read(&mut from_server) => {
                let Ok(n @ 1..) = read else { return };
                if swallow_reply {
                    // The reply reached the proxy, so the server processed the message.
                    return;
                }
                if client_write.write_all(&from_server[..n]).await.is_err() {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::authority;

    #[test]
    fn the_authority_is_found_with_and_without_user_and_query() {
        assert_eq!(
            authority("postgres://postgres@127.0.0.1:5/db?x=1"),
            Some("127.0.0.1:5")
        );
        assert_eq!(authority("postgres://h:7/db"), Some("h:7"));
        assert_eq!(authority("postgres://u:p@h:7"), Some("h:7"));
    }
}
