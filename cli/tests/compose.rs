//! `compose.yaml` on a real Docker engine (docs/cluster.md, *Compose*): a private `dockerd`, the
//! images built without Docker Hub (scripts/compose-images.sh: Debian's packages and this test
//! run's own binary), then the unmodified compose file run by `docker-compose`, driven from
//! outside through the published gateway ports only.
//!
//! Its own test binary: scripts/test.sh runs it after the main suite (it needs the Docker engine
//! and the compose CLI that scripts/test.sh installs; it never skips). Every container's logs are
//! saved under `target/compose-logs/` when it fails; the engine is stopped, panics included.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{EventStream, Served, contiguous, run_readme_walkthrough};

/// The compose cluster's demo token (deploy/gateway.toml).
const TOKEN: &str = "compose-demo-token";
const GATEWAYS: [&str; 2] = [
    "http://127.0.0.1:8787/v1/agent",
    "http://127.0.0.1:8788/v1/agent",
];
/// How soon a command on a session must be answered again after its executor was killed: the
/// gateway's HTTP/2 keepalive (2 s + 3 s) notices the dead host, the session's lease runs out
/// (`--lease-ttl-ms`, 10 s in compose.yaml's default) and the other executor takes it.
const FAILOVER_BOUND: Duration = Duration::from_secs(45);

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

const ENGINE_PREFIX: &str = "agent-runtime-dockerd-";

/// A private Docker engine: its own data root, exec root and socket, stopped by PID. Its
/// directory (gigabytes of images) goes with it, even when it was killed with mounts left.
struct DockerEngine {
    child: Child,
    root: tempfile::TempDir,
}

impl DockerEngine {
    fn start() -> Self {
        remove_stale_engines();
        let root = tempfile::Builder::new()
            .prefix(ENGINE_PREFIX)
            .tempdir()
            .unwrap();
        let log = std::fs::File::create(root.path().join("dockerd.log")).unwrap();
        let child = Command::new("dockerd")
            .arg("--data-root")
            .arg(root.path().join("data"))
            .arg("--exec-root")
            .arg(root.path().join("exec"))
            .arg("--pidfile")
            .arg(root.path().join("dockerd.pid"))
            .arg("-H")
            .arg(format!(
                "unix://{}",
                root.path().join("docker.sock").display()
            ))
            .args([
                "--storage-driver",
                "overlay2",
                "--exec-opt",
                "native.cgroupdriver=cgroupfs",
            ])
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("dockerd runs (scripts/test.sh installs Debian's docker.io)");
        let engine = Self { child, root };
        let deadline = Instant::now() + Duration::from_secs(60);
        while !engine.docker(&["info"]).status.success() {
            assert!(
                Instant::now() < deadline,
                "dockerd did not start: {}",
                std::fs::read_to_string(engine.root.path().join("dockerd.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
        engine
    }

    fn host(&self) -> String {
        format!("unix://{}", self.root.path().join("docker.sock").display())
    }

    fn docker(&self, args: &[&str]) -> Output {
        Command::new("/usr/bin/docker")
            .args(args)
            .env("DOCKER_HOST", self.host())
            .output()
            .expect("Debian's docker client runs")
    }
}

impl Drop for DockerEngine {
    fn drop(&mut self) {
        // SIGTERM: dockerd stops its containers and unmounts; then SIGKILL if it hangs.
        let pid = rustix::process::Pid::from_child(&self.child);
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        // A dockerd that was killed leaves its overlays and network namespaces mounted, and
        // the directory (dropped next) cannot be deleted under them.
        unmount_under(self.root.path());
    }
}

/// Unmounts everything mounted at or below `root`, deepest first (lazily: nothing may be using
/// it any more).
fn unmount_under(root: &Path) {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let mut points: Vec<&str> = mounts
        .lines()
        .filter_map(|line| line.split(' ').nth(1))
        .filter(|point| Path::new(point).starts_with(root))
        .collect();
    points.sort_by_key(|point| std::cmp::Reverse(point.len()));
    for point in points {
        let _ = Command::new("umount").arg("-l").arg(point).status();
    }
}

/// Deletes the directories of engines an earlier run left behind (its test process killed
/// before it could stop them): those whose dockerd is gone, or that never got one.
fn remove_stale_engines() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let named = entry
            .file_name()
            .to_string_lossy()
            .starts_with(ENGINE_PREFIX);
        if !named || !path.is_dir() {
            continue;
        }
        let pid = std::fs::read_to_string(path.join("dockerd.pid"))
            .ok()
            .and_then(|pid| pid.trim().parse::<u32>().ok());
        let stale = match pid {
            Some(pid) => !Path::new(&format!("/proc/{pid}")).exists(),
            // An engine another run is starting has no pidfile yet for a moment.
            None => entry
                .metadata()
                .and_then(|meta| meta.modified())
                .is_ok_and(|at| at.elapsed().is_ok_and(|age| age > Duration::from_secs(600))),
        };
        if !stale {
            continue;
        }
        unmount_under(&path);
        let _ = std::fs::remove_dir_all(&path);
    }
}

/// The compose project: `docker-compose` with the CI images, logs saved if the test fails, and
/// taken down (volumes too) at the end.
struct Compose<'a> {
    engine: &'a DockerEngine,
    images: Vec<(String, String)>,
    project: String,
}

impl<'a> Compose<'a> {
    fn new(engine: &'a DockerEngine) -> Self {
        let binary = env!("CARGO_BIN_EXE_agent-runtime");
        let built = Command::new(repository().join("scripts/compose-images.sh"))
            .arg(binary)
            .env("DOCKER_HOST", engine.host())
            .output()
            .expect("scripts/compose-images.sh runs");
        assert!(
            built.status.success(),
            "the images did not build: {}",
            String::from_utf8_lossy(&built.stderr)
        );
        let images = String::from_utf8_lossy(&built.stdout)
            .lines()
            .filter_map(|line| line.split_once('='))
            .map(|(name, value)| (name.to_owned(), value.to_owned()))
            .collect();
        Self {
            engine,
            images,
            project: format!("agent-runtime-ci-{}", std::process::id()),
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new("docker-compose");
        command
            .arg("--project-name")
            .arg(&self.project)
            .arg("--file")
            .arg(repository().join("compose.yaml"))
            .args(args)
            .env("DOCKER_HOST", self.engine.host())
            .env("AGENT_RUNTIME_CLUSTER_SECRET", "compose-ci-cluster-secret")
            .envs(self.images.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        command
    }

    /// Runs `docker-compose ARGS`, which must succeed.
    fn run(&self, args: &[&str]) {
        let output = self.command(args).output().expect("docker-compose runs");
        assert!(
            output.status.success(),
            "docker-compose {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// `up -d` (the images exist: never built here) and both gateways ready.
    async fn up(&self, services: &[&str]) {
        let mut args = vec!["up", "-d", "--no-build"];
        args.extend_from_slice(services);
        self.run(&args);
        for base in GATEWAYS {
            wait_ready(base).await;
        }
    }
}

impl Drop for Compose<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let logs = repository().join("target/compose-logs");
            let _ = std::fs::create_dir_all(&logs);
            let path = logs.join(format!("{}.log", self.project));
            if let Ok(output) = self
                .command(&["logs", "--no-color", "--timestamps"])
                .stdout(Stdio::piped())
                .output()
            {
                let _ = std::fs::write(&path, &output.stdout);
                eprintln!("the containers' logs are in {}", path.display());
            }
        }
        let _ = self
            .command(&[
                "--profile",
                "monitoring",
                "down",
                "--volumes",
                "--timeout",
                "5",
            ])
            .output();
    }
}

fn http() -> reqwest::Client {
    agent_runtime_executor::provider::client_builder()
        .build()
        .unwrap()
}

fn gateway(index: usize) -> Served {
    Served::remote(GATEWAYS[index], TOKEN)
}

async fn wait_ready(base: &str) {
    let url = format!("{base}/readyz");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Ok(response) = http().get(&url).send().await
            && response.status().is_success()
        {
            return;
        }
        assert!(Instant::now() < deadline, "{url} never became ready");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Sends a command under `command_id`, retrying (same id) while the answer is retryable or the
/// connection fails, until `deadline`; returns the answer's `data`.
async fn command_until(
    base: &str,
    command_id: &str,
    kind: &str,
    data: Value,
    deadline: Instant,
) -> Value {
    let body = json!({ "protocolVersion": 1, "commandId": command_id, "type": kind, "data": data });
    loop {
        let sent = http()
            .post(format!("{base}/commands"))
            .bearer_auth(TOKEN)
            .json(&body)
            .timeout(Duration::from_secs(20))
            .send()
            .await;
        let last = match sent {
            Ok(response) => {
                let answer: Value = response.json().await.unwrap_or(Value::Null);
                if answer["ok"] == true {
                    return answer["data"].clone();
                }
                let retryable = answer["error"]["retryable"] == true
                    || answer["error"]["code"] == "COMMAND_IN_PROGRESS";
                assert!(retryable, "{kind} {command_id}: {answer}");
                answer.to_string()
            }
            Err(error) => error.to_string(),
        };
        assert!(
            Instant::now() < deadline,
            "{kind} {command_id} was not answered in time: {last}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn command(base: &str, kind: &str, data: Value) -> Value {
    let id = agent_runtime::ids::nanoid();
    command_until(
        base,
        &id,
        kind,
        data,
        Instant::now() + Duration::from_secs(60),
    )
    .await
}

async fn create_session(base: &str) -> String {
    let created = command(base, "session.create", json!({})).await;
    created["session"]["sessionId"].as_str().unwrap().to_owned()
}

/// Every event of `session` from the start, read from `base` until `until` matches.
async fn events_until(base: &str, session: &str, until: impl Fn(&Value) -> bool) -> Vec<Value> {
    let mut events: Vec<Value> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(90);
    // Reconnects from the last event, as a client does, until the wanted one arrives.
    loop {
        let after = events.last().map_or(0, |e| e["sequence"].as_u64().unwrap());
        let mut stream = EventStream::open(&Served::remote(base, TOKEN), session, after).await;
        loop {
            let next = tokio::time::timeout_at(deadline.into(), stream.next()).await;
            let Ok(next) = next else {
                panic!("no wanted event before the deadline: {events:?}");
            };
            let Some(event) = next else {
                break;
            };
            let done = until(&event);
            events.push(event);
            if done {
                return events;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the stream kept ending: {events:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Every event of `session` from the start, once none has come for two seconds.
async fn settled_events(base: &str, session: &str) -> Vec<Value> {
    let mut stream = EventStream::open(&Served::remote(base, TOKEN), session, 0).await;
    let mut events = Vec::new();
    while let Ok(Some(event)) = tokio::time::timeout(Duration::from_secs(2), stream.next()).await {
        events.push(event);
    }
    events
}

fn ends(request: &str) -> impl Fn(&Value) -> bool + '_ {
    move |event| event["requestId"] == request && event["data"]["type"] == "result"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_compose_cluster_serves_fails_over_and_keeps_its_data_on_a_real_docker_engine() {
    let engine = DockerEngine::start();
    let compose = Compose::new(&engine);
    compose.up(&[]).await;

    // The README's walkthrough, as written, against each gateway.
    for base in GATEWAYS {
        run_readme_walkthrough(base, TOKEN);
    }

    // A session created on one gateway, fed on the other, followed live on both.
    let session = create_session(GATEWAYS[0]).await;
    let followers: Vec<_> = GATEWAYS
        .iter()
        .map(|base| {
            let session = session.clone();
            tokio::spawn(async move {
                events_until(base, &session, |e| e["data"]["type"] == "result").await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let submitted = command(
        GATEWAYS[1],
        "input.submit",
        json!({ "sessionId": session, "input": "hello from gateway 2" }),
    )
    .await;
    for follower in followers {
        let events = follower.await.unwrap();
        assert!(contiguous(&events), "{events:?}");
        assert_eq!(events.last().unwrap()["requestId"], submitted["requestId"]);
        let answer: String = events
            .iter()
            .filter_map(|e| e["data"]["delta"].as_str())
            .collect();
        assert!(answer.contains("hello from gateway 2"), "{answer}");
    }

    executor_killed_mid_request(&compose).await;
    gateway_killed_under_streams(&compose).await;
    postgres_restarted_under_load(&compose).await;

    // Down and up again: the volume keeps every session and its history.
    let before = events_until(
        GATEWAYS[0],
        &session,
        ends(submitted["requestId"].as_str().unwrap()),
    )
    .await;
    compose.run(&["down", "--timeout", "10"]);
    compose.up(&[]).await;
    let after = events_until(
        GATEWAYS[1],
        &session,
        ends(submitted["requestId"].as_str().unwrap()),
    )
    .await;
    assert_eq!(before, after, "the history survives down and up");

    monitoring_scrapes_every_process(&compose).await;
}

/// `docker kill` of the executor that runs a request: the request ends with `EXECUTOR_LOST`,
/// the session takes a new command within [`FAILOVER_BOUND`], nothing acknowledged is lost and
/// the event sequence has no gap.
async fn executor_killed_mid_request(compose: &Compose<'_>) {
    let session = create_session(GATEWAYS[0]).await;
    let running = command(
        GATEWAYS[0],
        "input.submit",
        json!({ "sessionId": session, "input": "demo:slow" }),
    )
    .await;
    let request = running["requestId"].as_str().unwrap().to_owned();
    events_until(GATEWAYS[0], &session, |e| e["data"]["type"] == "content").await;
    let read = command(GATEWAYS[0], "session.read", json!({ "sessionId": session })).await;
    let owner = read["recovery"]["workerId"]
        .as_str()
        .unwrap_or_else(|| panic!("a running session has a worker: {read}"))
        .to_owned();
    compose.run(&["kill", &owner]);
    let killed = Instant::now();
    let next = command_until(
        GATEWAYS[1],
        &format!("after-kill-{session}"),
        "input.submit",
        json!({ "sessionId": session, "input": "after the kill" }),
        killed + FAILOVER_BOUND,
    )
    .await;
    let answered = killed.elapsed();
    eprintln!("compose: a command on the killed executor's session answered after {answered:?}");
    assert!(
        answered <= FAILOVER_BOUND,
        "answered {answered:?} after the kill"
    );
    let next_request = next["requestId"].as_str().unwrap_or_default().to_owned();
    let events = events_until(GATEWAYS[1], &session, |e| {
        !next_request.is_empty() && ends(&next_request)(e)
    })
    .await;
    assert!(contiguous(&events), "no gap: {events:?}");
    let lost = events
        .iter()
        .find(|e| e["requestId"] == request.as_str() && e["data"]["type"] == "error")
        .unwrap_or_else(|| panic!("the running request ends: {events:?}"));
    assert_eq!(lost["data"]["code"], "EXECUTOR_LOST", "{lost}");
    assert!(events.iter().any(ends(&request)), "with its result");
    // The acknowledged input after the kill ran.
    let answer: String = events
        .iter()
        .filter(|e| e["requestId"] == next_request.as_str())
        .filter_map(|e| e["data"]["delta"].as_str())
        .collect();
    assert!(answer.contains("after the kill"), "{answer}");
    compose.up(&[&owner]).await;
}

/// `docker kill` of a gateway under SSE clients: each resumes on the other gateway from its last
/// event and misses nothing.
async fn gateway_killed_under_streams(compose: &Compose<'_>) {
    let session = create_session(GATEWAYS[1]).await;
    let running = command(
        GATEWAYS[1],
        "input.submit",
        json!({ "sessionId": session, "input": "demo:slow" }),
    )
    .await;
    let request = running["requestId"].as_str().unwrap().to_owned();
    let mut clients = Vec::new();
    for _ in 0..3 {
        let mut stream = EventStream::open(&gateway(0), &session, 0).await;
        let first = stream.next().await.expect("an event before the kill");
        clients.push((stream, vec![first]));
    }
    compose.run(&["kill", "gateway-1"]);
    for (mut stream, mut events) in clients {
        // The stream on the killed gateway ends; the client resumes on the other one.
        while let Ok(Some(event)) =
            tokio::time::timeout(Duration::from_secs(30), stream.next()).await
        {
            events.push(event);
        }
        let last = events.last().unwrap()["sequence"].as_u64().unwrap();
        let mut resumed = EventStream::open(&gateway(1), &session, last).await;
        while !events.iter().any(ends(&request)) {
            let event = tokio::time::timeout(Duration::from_secs(60), resumed.next())
                .await
                .expect("events on the other gateway")
                .expect("the stream goes on");
            events.push(event);
        }
        assert!(contiguous(&events), "resumed without a gap: {events:?}");
    }
    compose.up(&["gateway-1"]).await;
}

/// `restart postgres` while commands arrive: every command is answered once PostgreSQL is back
/// (clients retry under the same id), and nothing acknowledged is lost.
async fn postgres_restarted_under_load(compose: &Compose<'_>) {
    let sessions = [
        create_session(GATEWAYS[0]).await,
        create_session(GATEWAYS[1]).await,
    ];
    let load = {
        let sessions = sessions.clone();
        tokio::spawn(async move {
            let mut acknowledged = Vec::new();
            for round in 0..12 {
                for (index, session) in sessions.iter().enumerate() {
                    let id = format!("load-{session}-{round}");
                    let data = command_until(
                        GATEWAYS[index],
                        &id,
                        "input.submit",
                        json!({ "sessionId": session, "input": format!("round {round}"), "priority": "later" }),
                        Instant::now() + Duration::from_secs(120),
                    )
                    .await;
                    acknowledged.push((
                        session.clone(),
                        data["inputId"].as_str().unwrap().to_owned(),
                    ));
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            acknowledged
        })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    compose.run(&["restart", "--timeout", "5", "postgres"]);
    let acknowledged = load.await.unwrap();
    assert_eq!(acknowledged.len(), 24);
    for session in &sessions {
        // Every acknowledged input is in the transcript once its queue has drained.
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let read = command(GATEWAYS[0], "session.read", json!({ "sessionId": session })).await;
            let transcript = read["messages"].to_string();
            let missing: Vec<&String> = acknowledged
                .iter()
                .filter(|(owner, input)| owner == session && !transcript.contains(input.as_str()))
                .map(|(_, input)| input)
                .collect();
            if missing.is_empty() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "acknowledged inputs missing after the restart: {missing:?}"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let events = settled_events(GATEWAYS[1], session).await;
        assert!(contiguous(&events), "no gap: {events:?}");
    }
}

/// The monitoring profile's Prometheus scrapes both gateways and both executors.
async fn monitoring_scrapes_every_process(compose: &Compose<'_>) {
    compose.run(&[
        "--profile",
        "monitoring",
        "up",
        "-d",
        "--no-build",
        "prometheus",
    ]);
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let targets: Value = match http()
            .get("http://127.0.0.1:9090/api/v1/targets")
            .send()
            .await
        {
            Ok(response) => response.json().await.unwrap_or(Value::Null),
            Err(_) => Value::Null,
        };
        let up: Vec<&str> = targets["data"]["activeTargets"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|target| target["health"] == "up")
            .filter_map(|target| target["labels"]["instance"].as_str())
            .collect();
        if up.len() == 4 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "Prometheus scrapes {up:?}, not all four: {targets}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
