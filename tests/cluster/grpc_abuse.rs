//! RES-05 (reliability catalogue): HTTP/2 and gRPC abuse against a real executor's gRPC port
//! (tonic over hyper and h2, on loopback), and the gateway's HTTP port, which speaks HTTP/1.1
//! only.
//!
//! The abusive peers are raw: the `h2` client for rapid resets, and hand-built frames on a plain
//! TCP socket for what no well-behaved client sends (a header block that never ends, a header
//! list far over the advertised limit, a flood of empty DATA frames). Each test checks that the
//! server cut the abuser off or absorbed it without growing, and that a legitimate gRPC call
//! made while the abuse runs and one made after it both succeed.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::support::executors::{authorized_client, executor_config, start_demo_executor};
use crate::support::*;
use agent_runtime::clock::{self, SharedClock};
use agent_runtime_cli::cluster::{GatewayProcessConfig, RunningExecutor, start_gateway};
use agent_runtime_cli::config::TelemetryConfig;
use agent_runtime_gateway::{AuthMode, GatewayConfig};
use agent_runtime_grpc::LoadRequest;
use agent_runtime_store::{MemoryStore, Store, StoreOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

const SECRET: &str = "cluster-secret-for-abuse-tests";
const LOAD_PATH: &str = "/agent_runtime.v1.SessionExecutor/Load";
/// The hang guard of every abuse loop and read.
const GUARD: Duration = Duration::from_secs(60);

async fn executor(store: &Arc<dyn Store>, clock: &SharedClock) -> RunningExecutor {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let config = executor_config("executor-abused", address, SECRET);
    start_demo_executor(config, store.clone(), clock, listener).await
}

async fn started() -> RunningExecutor {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new(StoreOptions::default()));
    executor(&store, &clock::system()).await
}

/// An executor under abuse: its address, and its resident memory before the abuse.
struct Target {
    running: RunningExecutor,
    address: SocketAddr,
    resident_before: u64,
}

impl Target {
    /// A started executor that answers a legitimate call.
    async fn start() -> Target {
        let running = started().await;
        let address = running.address;
        legitimate_call(address).await.expect("the baseline call");
        Target {
            running,
            address,
            resident_before: resident_bytes(),
        }
    }

    /// A legitimate call `when` ("during", "after") the abuse must succeed.
    async fn serves(&self, when: &str) {
        if let Err(error) = legitimate_call(self.address).await {
            panic!("a call {when} the abuse failed: {error}");
        }
    }

    /// How much the process's resident memory grew since the start.
    fn grown(&self) -> u64 {
        resident_bytes().saturating_sub(self.resident_before)
    }

    async fn stop(self) {
        self.running.shutdown();
        self.running.wait().await.unwrap();
    }
}

/// One legitimate, authenticated gRPC call on a fresh connection.
async fn legitimate_call(address: SocketAddr) -> Result<(), String> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{address}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(20))
        .connect()
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let mut client = authorized_client(channel, SECRET);
    let reply = client
        .load(LoadRequest {})
        .await
        .map_err(|status| format!("load: {status:?}"))?;
    assert_eq!(reply.into_inner().worker_id, "executor-abused");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Hand-built HTTP/2 frames (RFC 9113 §4.1) and HPACK literals (RFC 7541 §6.2.2)

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const RST_STREAM: u8 = 0x3;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
/// The GOAWAY error code a server uses to shed an abusive peer.
const ENHANCE_YOUR_CALM: u32 = 0xb;
const END_HEADERS: u8 = 0x4;
const ACK: u8 = 0x1;
/// The default SETTINGS_MAX_FRAME_SIZE.
const MAX_FRAME: usize = 16_384;

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut out = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// An HPACK integer with an `prefix`-bit prefix, the first byte's high bits set to `high`.
fn hpack_int(out: &mut Vec<u8>, high: u8, prefix: u8, value: usize) {
    let max = (1usize << prefix) - 1;
    if value < max {
        out.push(high | value as u8);
        return;
    }
    out.push(high | max as u8);
    let mut rest = value - max;
    while rest >= 128 {
        out.push((rest % 128 + 128) as u8);
        rest /= 128;
    }
    out.push(rest as u8);
}

fn hpack_string(out: &mut Vec<u8>, text: &[u8]) {
    hpack_int(out, 0x00, 7, text.len());
    out.extend_from_slice(text);
}

/// A literal header field without indexing, new name.
fn hpack_literal(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.push(0x00);
    hpack_string(out, name);
    hpack_string(out, value);
}

/// The header block of a gRPC `Load` request; without `secret`, an outsider's request.
fn request_block(authority: &str, secret: Option<&str>) -> Vec<u8> {
    let mut block = vec![0x83, 0x86]; // :method POST, :scheme http (static table)
    hpack_literal(&mut block, b":path", LOAD_PATH.as_bytes());
    hpack_literal(&mut block, b":authority", authority.as_bytes());
    hpack_literal(&mut block, b"content-type", b"application/grpc");
    hpack_literal(&mut block, b"te", b"trailers");
    if let Some(secret) = secret {
        hpack_literal(
            &mut block,
            b"authorization",
            format!("Bearer {secret}").as_bytes(),
        );
    }
    block
}

/// What the server sent back on a raw connection.
#[derive(Debug, Default)]
struct ServerFrames {
    goaway: Option<u32>,
    resets: u64,
    bytes: u64,
    /// The connection ended (EOF or reset) rather than our reader stopping.
    closed: bool,
    /// Our PING was answered: the server had processed everything sent before it.
    ping_acked: bool,
}

/// Reads server frames until the connection ends or `GUARD` passes.
async fn read_frames(mut reader: tokio::net::tcp::OwnedReadHalf) -> ServerFrames {
    let mut seen = ServerFrames::default();
    let mut buffer = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    let deadline = tokio::time::Instant::now() + GUARD;
    loop {
        let read = match tokio::time::timeout_at(deadline, reader.read(&mut chunk)).await {
            Err(_) => return seen,
            Ok(Ok(0)) | Ok(Err(_)) => {
                seen.closed = true;
                return seen;
            }
            Ok(Ok(n)) => n,
        };
        seen.bytes += read as u64;
        buffer.extend_from_slice(&chunk[..read]);
        while buffer.len() >= 9 {
            let len = (usize::from(buffer[0]) << 16)
                | (usize::from(buffer[1]) << 8)
                | usize::from(buffer[2]);
            if buffer.len() < 9 + len {
                break;
            }
            let kind = buffer[3];
            let payload = &buffer[9..9 + len];
            if kind == GOAWAY && payload.len() >= 8 {
                seen.goaway = Some(u32::from_be_bytes(payload[4..8].try_into().unwrap()));
            }
            if kind == RST_STREAM {
                seen.resets += 1;
            }
            let acked = kind == PING && buffer[4] & ACK != 0;
            buffer.drain(..9 + len);
            if acked {
                seen.ping_acked = true;
                return seen;
            }
        }
    }
}

/// Opens a raw HTTP/2 connection: preface, empty SETTINGS, and an ACK of the server's.
async fn raw_connection(
    address: SocketAddr,
) -> (
    tokio::net::tcp::OwnedWriteHalf,
    tokio::task::JoinHandle<ServerFrames>,
) {
    let stream = TcpStream::connect(address).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let (reader, mut writer) = stream.into_split();
    let mut hello = PREFACE.to_vec();
    hello.extend(frame(SETTINGS, 0, 0, &[]));
    hello.extend(frame(SETTINGS, ACK, 0, &[]));
    writer.write_all(&hello).await.unwrap();
    (writer, tokio::spawn(read_frames(reader)))
}

/// Sends `next()` frames (batched) until it returns `None`, the connection breaks or `GUARD`
/// passes; counts the frames sent into `sent`. Returns whether a write failed (the server closed
/// the connection under us).
async fn flood(
    writer: &mut tokio::net::tcp::OwnedWriteHalf,
    sent: &AtomicU64,
    mut next: impl FnMut(u64) -> Option<Vec<u8>>,
) -> bool {
    let deadline = tokio::time::Instant::now() + GUARD;
    let mut index = 0;
    loop {
        let mut batch = Vec::new();
        for _ in 0..64 {
            match next(index) {
                Some(bytes) => batch.extend(bytes),
                None => break,
            }
            index += 1;
        }
        if batch.is_empty() {
            return false;
        }
        match tokio::time::timeout_at(deadline, writer.write_all(&batch)).await {
            Ok(Ok(())) => {
                sent.store(index, Ordering::SeqCst);
            }
            Ok(Err(_)) => return true,
            // The server stopped reading and never closed: its window holds us; that is bounded
            // too (nothing more is buffered), the caller judges.
            Err(_) => return false,
        }
    }
}

/// Ends a flood: unless the connection already broke, a PING whose answer tells that the server
/// processed every frame before it; then what the server sent.
async fn finish(
    broke: bool,
    mut writer: tokio::net::tcp::OwnedWriteHalf,
    frames: tokio::task::JoinHandle<ServerFrames>,
) -> ServerFrames {
    if !broke {
        let _ = writer.write_all(&frame(PING, 0, 0, &[7; 8])).await;
    }
    let seen = frames.await.unwrap();
    drop(writer);
    seen
}

/// Waits until `sent` reaches `at_least` (the abuse is under way) or the abuse task ended.
async fn under_way(sent: &AtomicU64, at_least: u64, abuse: &tokio::task::JoinHandle<impl Sized>) {
    let deadline = tokio::time::Instant::now() + GUARD;
    while sent.load(Ordering::SeqCst) < at_least && !abuse.is_finished() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the abuse never got going"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// The tests

/// Rapid reset (CVE-2023-44487): one connection opens and at once cancels 20 000 streams with the
/// `h2` client. The server sheds the abuser (GOAWAY, or the connection ends) or absorbs it
/// without growing, and a legitimate call during and after the abuse succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn res_05_rapid_reset_streams_do_not_take_the_executor_down() {
    let target = Target::start().await;
    let address = target.address;

    let sent = Arc::new(AtomicU64::new(0));
    let abuse = tokio::spawn({
        let sent = Arc::clone(&sent);
        async move {
            let tcp = TcpStream::connect(address).await.unwrap();
            let (mut client, connection) = h2::client::handshake(tcp).await.unwrap();
            let driver = tokio::spawn(connection);
            let deadline = tokio::time::Instant::now() + GUARD;
            let mut refused = None;
            for index in 0..20_000u64 {
                let ready = tokio::time::timeout_at(deadline, client.clone().ready()).await;
                let mut ready = match ready {
                    Ok(Ok(ready)) => ready,
                    Ok(Err(error)) => {
                        refused = Some(error.to_string());
                        break;
                    }
                    Err(_) => {
                        refused = Some("the server stopped granting streams".to_owned());
                        break;
                    }
                };
                let request = http::Request::post(format!("http://{address}{LOAD_PATH}"))
                    .header("content-type", "application/grpc")
                    .header("te", "trailers")
                    .body(())
                    .unwrap();
                match ready.send_request(request, false) {
                    Ok((_response, mut stream)) => stream.send_reset(h2::Reason::CANCEL),
                    Err(error) => {
                        refused = Some(error.to_string());
                        break;
                    }
                }
                sent.store(index + 1, Ordering::SeqCst);
                client = ready;
            }
            drop(client);
            let ended = timeout(Duration::from_secs(10), driver).await;
            (
                refused,
                ended.map(|joined| joined.unwrap().err().map(|e| e.to_string())),
            )
        }
    });
    under_way(&sent, 500, &abuse).await;
    target.serves("during").await;
    let (refused, ended) = abuse.await.unwrap();
    let opened = sent.load(Ordering::SeqCst);
    eprintln!(
        "rapid reset: {opened} streams opened and reset; refused: {refused:?}; connection: {ended:?}"
    );
    target.serves("after").await;
    let grown = target.grown();
    eprintln!("rapid reset: the process grew by {grown} bytes");
    assert!(
        refused.is_some() || grown < 256 << 20,
        "20 000 reset streams were absorbed but the process grew by {grown} bytes"
    );
    target.stop().await;
}

/// CONTINUATION flood (CVE-2024-27316 class, h2 fix 0.4.4): a HEADERS frame without
/// END_HEADERS followed by CONTINUATION frames that never end the block, up to 256 MiB. The
/// server must not buffer it: it ends the connection long before (a write fails or a GOAWAY
/// comes back), and legitimate calls go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn res_05_a_continuation_flood_is_cut_off() {
    let target = Target::start().await;
    let address = target.address;

    let (mut writer, frames) = raw_connection(address).await;
    let first = frame(HEADERS, 0, 1, &request_block(&address.to_string(), None));
    writer.write_all(&first).await.unwrap();
    // Each CONTINUATION frame is full of literal headers, ~16 KiB.
    let mut fragment = Vec::new();
    let mut n = 0;
    while fragment.len() + 1100 < MAX_FRAME {
        hpack_literal(
            &mut fragment,
            format!("x-flood-{n}").as_bytes(),
            &[b'a'; 1000],
        );
        n += 1;
    }
    let continuation = frame(CONTINUATION, 0, 1, &fragment);
    let total_frames = (256u64 << 20) / continuation.len() as u64;
    let sent = Arc::new(AtomicU64::new(0));
    let abuse = tokio::spawn({
        let sent = Arc::clone(&sent);
        async move {
            let broke = flood(&mut writer, &sent, |index| {
                (index < total_frames).then(|| continuation.clone())
            })
            .await;
            (broke, writer)
        }
    });
    under_way(&sent, 64, &abuse).await;
    target.serves("during").await;
    let (broke, writer) = abuse.await.unwrap();
    let seen = finish(broke, writer, frames).await;
    let flooded = sent.load(Ordering::SeqCst);
    eprintln!(
        "continuation flood: {flooded} of {total_frames} frames written; write failed: {broke}; server: {seen:?}"
    );
    assert!(
        broke || seen.goaway.is_some(),
        "the server neither closed the connection nor sent GOAWAY: {seen:?}"
    );
    assert!(
        flooded < total_frames,
        "all 256 MiB of the never-ending header block were taken"
    );
    target.serves("after").await;
    let grown = target.grown();
    assert!(grown < 128 << 20, "the process grew by {grown} bytes");
    target.stop().await;
}

/// A huge HPACK header list: complete header blocks (END_HEADERS set) of 1 MiB each, far over the
/// server's advertised SETTINGS_MAX_HEADER_LIST_SIZE, on 200 streams. Each is refused (the stream
/// reset, a 431-style error, or the connection ended), none reaches the service, and legitimate
/// calls go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn res_05_huge_header_lists_are_refused() {
    let target = Target::start().await;
    let address = target.address;

    let (mut writer, frames) = raw_connection(address).await;
    let mut block = request_block(&address.to_string(), None);
    let mut n = 0;
    while block.len() < 1 << 20 {
        hpack_literal(&mut block, format!("x-huge-{n}").as_bytes(), &[b'b'; 4000]);
        n += 1;
    }
    // One stream's header block: HEADERS and CONTINUATIONs, the last with END_HEADERS.
    let stream_frames = move |stream: u32| -> Vec<u8> {
        let chunks: Vec<&[u8]> = block.chunks(MAX_FRAME).collect();
        let mut out = Vec::new();
        for (i, chunk) in chunks.iter().enumerate() {
            let kind = if i == 0 { HEADERS } else { CONTINUATION };
            let mut flags = if i + 1 == chunks.len() {
                END_HEADERS
            } else {
                0
            };
            if i == 0 {
                flags |= END_STREAM;
            }
            out.extend(frame(kind, flags, stream, chunk));
        }
        out
    };
    let streams = 200u64;
    let sent = Arc::new(AtomicU64::new(0));
    let abuse = tokio::spawn({
        let sent = Arc::clone(&sent);
        async move {
            let broke = flood(&mut writer, &sent, |index| {
                (index < streams).then(|| stream_frames(1 + 2 * index as u32))
            })
            .await;
            (broke, writer)
        }
    });
    under_way(&sent, 1, &abuse).await;
    target.serves("during").await;
    let (broke, writer) = abuse.await.unwrap();
    let seen = finish(broke, writer, frames).await;
    let written = sent.load(Ordering::SeqCst);
    eprintln!(
        "huge header lists: {written} of {streams} blocks written; write failed: {broke}; server: {seen:?}"
    );
    assert!(
        broke || seen.goaway.is_some() || seen.resets >= written.min(streams),
        "the oversized header lists were not all refused: {seen:?}"
    );
    target.serves("after").await;
    let grown = target.grown();
    assert!(grown < 256 << 20, "the process grew by {grown} bytes");
    target.stop().await;
}

/// A flood of empty DATA frames (no flow-control cost to the sender) on an open, authenticated
/// request stream, 1 000 000 frames. The server either ends the connection or absorbs them without growing, and
/// legitimate calls go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn res_05_an_empty_data_frame_flood_is_absorbed_or_cut_off() {
    let target = Target::start().await;
    let address = target.address;

    let (mut writer, frames) = raw_connection(address).await;
    // An authenticated request whose body never ends: the stream stays open while the service
    // waits for the message.
    let open = frame(
        HEADERS,
        END_HEADERS,
        1,
        &request_block(&address.to_string(), Some(SECRET)),
    );
    writer.write_all(&open).await.unwrap();
    let empty = frame(DATA, 0, 1, &[]);
    let total = 1_000_000u64;
    let sent = Arc::new(AtomicU64::new(0));
    let abuse = tokio::spawn({
        let sent = Arc::clone(&sent);
        async move {
            let broke = flood(&mut writer, &sent, |index| {
                (index < total).then(|| empty.clone())
            })
            .await;
            (broke, writer)
        }
    });
    under_way(&sent, 10_000, &abuse).await;
    target.serves("during").await;
    let (broke, writer) = abuse.await.unwrap();
    let seen = finish(broke, writer, frames).await;
    let flooded = sent.load(Ordering::SeqCst);
    eprintln!(
        "empty DATA flood: {flooded} of {total} frames written; write failed: {broke}; server: {seen:?}"
    );
    target.serves("after").await;
    let grown = target.grown();
    eprintln!("empty DATA flood: the process grew by {grown} bytes");
    assert!(
        broke || seen.goaway.is_some() || grown < 64 << 20,
        "a million empty DATA frames were absorbed but the process grew by {grown} bytes"
    );
    assert!(
        flooded < total,
        "all million empty DATA frames were taken: {seen:?}"
    );
    target.stop().await;
}

/// Server-side resets provoked by the client ("MadeYouReset", CVE-2025-8671, the sibling of rapid
/// reset): 5 000 streams each opened with a malformed header (an upper-case name), which the
/// server must answer with RST_STREAM. The server caps how many resets a peer can make it send:
/// past the cap it ends the connection with GOAWAY `ENHANCE_YOUR_CALM`. Legitimate calls go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn res_05_provoked_stream_resets_are_capped() {
    let target = Target::start().await;
    let address = target.address;

    let (mut writer, frames) = raw_connection(address).await;
    let mut block = request_block(&address.to_string(), None);
    hpack_literal(&mut block, b"content-length", b"not-a-number");
    let streams = 5_000u64;
    let sent = Arc::new(AtomicU64::new(0));
    let abuse = tokio::spawn({
        let sent = Arc::clone(&sent);
        async move {
            let broke = flood(&mut writer, &sent, |index| {
                (index < streams).then(|| {
                    frame(
                        HEADERS,
                        END_HEADERS | END_STREAM,
                        1 + 2 * index as u32,
                        &block,
                    )
                })
            })
            .await;
            (broke, writer)
        }
    });
    under_way(&sent, 100, &abuse).await;
    target.serves("during").await;
    let (broke, writer) = abuse.await.unwrap();
    let seen = finish(broke, writer, frames).await;
    let written = sent.load(Ordering::SeqCst);
    eprintln!(
        "provoked resets: {written} of {streams} malformed streams written; write failed: {broke}; server: {seen:?}"
    );
    // Before the cap was set (tonic turns h2's off by default) every malformed stream was reset
    // and the connection lived on: 5 000 streams, no GOAWAY.
    assert_eq!(
        seen.goaway,
        Some(ENHANCE_YOUR_CALM),
        "the server was made to reset streams without ever cutting the peer off: {seen:?}"
    );
    assert!(seen.closed && !seen.ping_acked, "{seen:?}");
    target.serves("after").await;
    target.stop().await;
}

/// The gateway's HTTP port speaks HTTP/1.1 only: an HTTP/2 prior-knowledge connection preface is
/// not answered with HTTP/2 (no SETTINGS frame comes back), so none of the HTTP/2 attacks above
/// reach it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn res_05_the_gateway_refuses_http2_prior_knowledge() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new(StoreOptions::default()));
    let clock = clock::system();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let config = GatewayProcessConfig {
        gateway: GatewayConfig::default(),
        tokens: test_tokens(),
        auth_mode: AuthMode::Static,
        audit: None,
        secret: agent_runtime::secret::Secret::new(SECRET),
        failover_window: Duration::from_secs(1),
        telemetry: TelemetryConfig::default(),
        webhooks: None,
    };
    let gateway =
        TestServer::from_running(start_gateway(config, store, clock, listener).await.unwrap());
    let mut stream = TcpStream::connect(address).await.unwrap();
    let mut hello = PREFACE.to_vec();
    hello.extend(frame(SETTINGS, 0, 0, &[]));
    stream.write_all(&hello).await.unwrap();
    let mut answer = Vec::new();
    let _ = timeout(GUARD, stream.read_to_end(&mut answer))
        .await
        .expect("the gateway answers or closes");
    let text = String::from_utf8_lossy(&answer);
    eprintln!(
        "the gateway answered an HTTP/2 preface with: {:?}",
        text.lines().next()
    );
    assert!(
        answer.is_empty() || text.starts_with("HTTP/1.1 4"),
        "the gateway answered an HTTP/2 preface with: {text:?}"
    );
    let speaks_h2 = answer.len() >= 9 && answer[3] == SETTINGS;
    assert!(
        !speaks_h2,
        "the gateway answered with an HTTP/2 SETTINGS frame"
    );
    // And HTTP/1.1 still works.
    let (status, _) = gateway.readyz().await;
    assert_eq!(status, 200);
    gateway.stop().await;
}

/// The `cargo deny` stand-in: the h2 in Cargo.lock carries the rapid-reset fix (CVE-2023-44487:
/// 0.3.24 / 0.4.x) and the CONTINUATION-flood fix (0.3.26 / 0.4.4).
#[test]
fn res_05_cargo_lock_pins_h2_at_or_above_the_patched_versions() {
    let lock =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.lock")).unwrap();
    let versions: Vec<(u64, u64, u64)> = lock
        .split("[[package]]")
        .filter(|package| package.lines().any(|line| line.trim() == "name = \"h2\""))
        .map(|package| {
            let version = package
                .lines()
                .find_map(|line| line.trim().strip_prefix("version = "))
                .expect("a version")
                .trim_matches('"');
            let parts: Vec<u64> = version
                .split(['.', '-', '+'])
                .take(3)
                .map(|part| part.parse().unwrap())
                .collect();
            (parts[0], parts[1], parts[2])
        })
        .collect();
    assert!(!versions.is_empty(), "h2 is in the tree (tonic, hyper)");
    for version in versions {
        let patched = match version {
            (0, 3, patch) => patch >= 26,
            (0, 4, patch) => patch >= 4,
            (0, minor, _) => minor > 4,
            _ => true,
        };
        assert!(
            patched,
            "h2 {version:?} lacks the rapid-reset or CONTINUATION-flood fix"
        );
    }
}
