//! Background shells: what `Bash` with `run_in_background` starts, `TaskOutput` reads and
//! `KillShell` stops (docs/agent.md §6.4).
//!
//! Shells belong to one session ([`SessionShells`], held by the live session): another
//! session's id answers like an unknown one. Each shell runs in its own process group (so a kill
//! reaches what the command started), inside the sandbox when one is configured, and keeps only
//! the newest `max_output_bytes` of each stream with a count of what it dropped. Everything a
//! session holds is killed when the session stops (close, lease loss, handoff, shutdown) and when
//! its set is dropped; a request abort leaves them running, as they belong to the session. Nothing
//! is re-spawned after a crash: a shell the transcript knows and this process does not is `lost`.

use agent_runtime::sync::Locked;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::output::now_ms;
use super::process_groups::{self, Group};

use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// How long a shell gets to end after SIGTERM before it is killed.
const TERM_GRACE: Duration = Duration::from_secs(2);
/// How long output left in the pipes is read after the shell ended.
const DRAIN: Duration = Duration::from_secs(1);
/// Ended shells a session keeps for `TaskOutput` (the oldest go first).
const KEPT_ENDED: usize = 16;
/// What `TaskOutput` says of a shell that exited while what it started runs on.
const OUTLIVED: &str = "The command's shell exited, but processes it started are still running \
                        in its process group; KillShell stops them.";

/// The limits every background shell of a process shares, and its count per tenant.
#[derive(Debug)]
pub struct ShellLimits {
    pub per_session: usize,
    pub per_tenant: usize,
    /// A shell still running after this long is killed (a runaway command ends).
    pub lifetime: Duration,
    /// Bytes kept of each stream between two reads.
    pub max_output_bytes: usize,
}

/// Running background shells per tenant, in this process: one count whatever profile (and so
/// whatever set of limits) started them.
fn running() -> &'static Mutex<HashMap<String, usize>> {
    static RUNNING: std::sync::OnceLock<Mutex<HashMap<String, usize>>> = std::sync::OnceLock::new();
    RUNNING.get_or_init(Mutex::default)
}

impl ShellLimits {
    pub fn new(
        per_session: usize,
        per_tenant: usize,
        lifetime: Duration,
        max_output_bytes: usize,
    ) -> Self {
        Self {
            per_session,
            per_tenant,
            lifetime,
            max_output_bytes,
        }
    }

    /// Takes one of the tenant's slots; the slot is given back when the shell ends.
    fn take_slot(&self, tenant_id: &str) -> Result<TenantSlot, String> {
        let mut running = running().locked();
        let count = running.entry(tenant_id.to_owned()).or_default();
        if *count >= self.per_tenant {
            return Err(format!(
                "this tenant already runs {count} background shells (the limit is {})",
                self.per_tenant
            ));
        }
        *count += 1;
        Ok(TenantSlot {
            tenant_id: tenant_id.to_owned(),
        })
    }
}

/// One running shell's share of its tenant's quota.
#[derive(Debug)]
struct TenantSlot {
    tenant_id: String,
}

impl Drop for TenantSlot {
    fn drop(&mut self) {
        let mut running = running().locked();
        if let Some(count) = running.get_mut(&self.tenant_id) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                running.remove(&self.tenant_id);
            }
        }
    }
}

/// The newest bytes of one output stream, and how many older ones were dropped.
#[derive(Debug, Default)]
struct Ring {
    bytes: VecDeque<u8>,
    dropped: u64,
}

impl Ring {
    fn push(&mut self, chunk: &[u8], limit: usize) {
        self.bytes.extend(chunk);
        let excess = self.bytes.len().saturating_sub(limit);
        self.bytes.drain(..excess);
        self.dropped += excess as u64;
    }

    /// What was collected since the last read, emptied.
    fn take(&mut self) -> (String, u64) {
        let bytes: Vec<u8> = self.bytes.drain(..).collect();
        let dropped = std::mem::take(&mut self.dropped);
        (String::from_utf8_lossy(&bytes).into_owned(), dropped)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShellStatus {
    Running,
    Exited,
    Killed,
    Error,
}

impl ShellStatus {
    fn as_str(self) -> &'static str {
        match self {
            ShellStatus::Running => "running",
            ShellStatus::Exited => "exited",
            ShellStatus::Killed => "killed",
            ShellStatus::Error => "error",
        }
    }
}

#[derive(Debug)]
struct ShellState {
    status: ShellStatus,
    stdout: Ring,
    stderr: Ring,
    exit_code: Option<i32>,
    signal: Option<String>,
    finished_at: Option<u64>,
}

/// One background shell.
#[derive(Debug)]
pub struct Shell {
    pub id: String,
    pub command: String,
    pub pid: Option<u32>,
    group: Group,
    started_at: u64,
    state: Mutex<ShellState>,
    /// `true` once the process has ended and its output is read to the end.
    finished: watch::Sender<bool>,
    kill: CancellationToken,
}

impl Shell {
    fn lock(&self) -> std::sync::MutexGuard<'_, ShellState> {
        self.state.locked()
    }

    pub fn status(&self) -> ShellStatus {
        self.lock().status
    }

    /// Whether something the command started still runs after the shell ended (a `cmd &` whose
    /// output went elsewhere): the shell is then not reported as exited.
    fn outlived(&self) -> bool {
        *self.finished.borrow() && self.group.alive()
    }

    /// Waits until the shell has ended, at most `timeout`.
    pub async fn wait(&self, timeout: Duration) {
        let mut finished = self.finished.subscribe();
        let _ = tokio::time::timeout(timeout, finished.wait_for(|done| *done)).await;
    }

    /// Asks the shell to end (SIGTERM to its process group, SIGKILL after a grace period) and
    /// waits for it; `false` when it had already ended, and so had everything in its group.
    pub async fn terminate(&self) -> bool {
        if self.outlived() {
            end_stragglers(&self.group).await;
            let mut state = self.lock();
            state.status = ShellStatus::Killed;
            state.signal = Some(signal_name(rustix::process::Signal::TERM.as_raw()));
            return true;
        }
        if *self.finished.borrow() {
            return false;
        }
        self.kill.cancel();
        self.wait(TERM_GRACE * 2).await;
        true
    }

    /// The shell as `TaskOutput` reports it, with the output collected since the last read
    /// (which this read empties).
    pub fn read(&self) -> Value {
        let mut state = self.lock();
        let (stdout, stdout_dropped) = state.stdout.take();
        let (stderr, stderr_dropped) = state.stderr.take();
        let outlived = self.outlived();
        let status = match outlived {
            true => ShellStatus::Running,
            false => state.status,
        };
        let mut report = json!({
            "task_id": self.id,
            "type": "shell",
            "status": status.as_str(),
            "command": self.command,
            "pid": self.pid,
            "exit_code": state.exit_code,
            "signal": state.signal,
            "started_at": agent_runtime::timefmt::format_iso_ms(self.started_at),
            "finished_at": state.finished_at.map(agent_runtime::timefmt::format_iso_ms),
            "stdout": stdout,
            "stderr": stderr,
        });
        if stdout_dropped + stderr_dropped > 0 {
            report["dropped_bytes"] = json!({ "stdout": stdout_dropped, "stderr": stderr_dropped });
        }
        if outlived {
            report["message"] = Value::from(OUTLIVED);
        }
        report
    }

    /// The shell as `KillShell` reports it.
    pub fn summary(&self, already_exited: bool) -> Value {
        let state = self.lock();
        json!({
            "shell_id": self.id,
            "status": state.status.as_str(),
            "already_exited": already_exited,
            "pid": self.pid,
            "exit_code": state.exit_code,
            "signal": state.signal,
        })
    }
}

/// Why a background shell did not start.
#[derive(Debug)]
pub enum SpawnError {
    /// A cap of the session or the tenant is reached.
    Quota(String),
    Start(String),
}

/// The background shells of one session.
#[derive(Debug)]
pub struct SessionShells {
    tenant_id: String,
    shells: Mutex<BTreeMap<String, Arc<Shell>>>,
}

impl SessionShells {
    pub fn new(tenant_id: &str) -> Arc<Self> {
        Arc::new(Self {
            tenant_id: tenant_id.to_owned(),
            shells: Mutex::new(BTreeMap::new()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Arc<Shell>>> {
        self.shells.locked()
    }

    pub fn get(&self, id: &str) -> Option<Arc<Shell>> {
        self.lock().get(id).cloned()
    }

    /// Starts `command` (already configured: working directory, environment, sandbox) as a
    /// background shell of this session, within the session's and the tenant's caps.
    pub fn spawn(
        &self,
        limits: &Arc<ShellLimits>,
        mut command: tokio::process::Command,
        line: &str,
    ) -> Result<Arc<Shell>, SpawnError> {
        let mut shells = self.lock();
        let running = shells
            .values()
            .filter(|shell| shell.status() == ShellStatus::Running)
            .count();
        if running >= limits.per_session {
            return Err(SpawnError::Quota(format!(
                "this session already runs {running} background shells (the limit is {}); \
                 stop one with KillShell first",
                limits.per_session
            )));
        }
        let slot = limits
            .take_slot(&self.tenant_id)
            .map_err(SpawnError::Quota)?;
        // Ended shells hold their unread output: only the newest few stay readable.
        let mut ended: Vec<(u64, String)> = shells
            .iter()
            .filter(|(_, shell)| *shell.finished.borrow())
            .map(|(id, shell)| (shell.started_at, id.clone()))
            .collect();
        ended.sort();
        let excess = (ended.len() + 1).saturating_sub(KEPT_ENDED);
        for (_, id) in ended.into_iter().take(excess) {
            shells.remove(&id);
        }
        // Its own process group (a kill reaches everything the command started), dying with
        // the executor.
        command.kill_on_drop(true);
        let id = format!("bash_{}", agent_runtime::ids::nanoid());
        let (mut child, group) = process_groups::spawn(command, Some(&id))
            .map_err(|error| SpawnError::Start(format!("cannot start the command: {error}")))?;
        let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
            return Err(SpawnError::Start(
                "cannot capture the command's output".to_owned(),
            ));
        };
        let shell = Arc::new(Shell {
            id: id.clone(),
            command: line.to_owned(),
            pid: Some(group.pgid),
            group,
            started_at: now_ms(),
            state: Mutex::new(ShellState {
                status: ShellStatus::Running,
                stdout: Ring::default(),
                stderr: Ring::default(),
                exit_code: None,
                signal: None,
                finished_at: None,
            }),
            finished: watch::Sender::new(false),
            kill: CancellationToken::new(),
        });
        shells.insert(id, Arc::clone(&shell));
        tokio::spawn(supervise(
            Arc::clone(&shell),
            child,
            stdout,
            stderr,
            Arc::clone(limits),
            slot,
        ));
        Ok(shell)
    }

    /// Kills every running shell of the session and waits for them (the session stops).
    pub async fn kill_all(&self) {
        let shells: Vec<Arc<Shell>> = self.lock().values().cloned().collect();
        futures_util::future::join_all(shells.iter().map(|shell| shell.terminate())).await;
    }
}

impl Drop for SessionShells {
    fn drop(&mut self) {
        for shell in self.lock().values() {
            shell.kill.cancel();
        }
    }
}

/// Collects a shell's output until it ends, and ends it when asked or when its lifetime is up.
/// The process is waited for while its output is read (not after: a descendant that escaped the
/// process group may hold the pipes open for ever), and once it has ended what is left in the
/// pipes is read for at most [`DRAIN`]. Every path ends with the shell marked finished and its
/// tenant slot given back.
async fn supervise(
    shell: Arc<Shell>,
    mut child: tokio::process::Child,
    stdout: impl AsyncRead + Unpin,
    stderr: impl AsyncRead + Unpin,
    limits: Arc<ShellLimits>,
    slot: TenantSlot,
) {
    let limit = limits.max_output_bytes;
    let pumps = async {
        let out = pump(stdout, &shell, limit, |state| &mut state.stdout);
        let err = pump(stderr, &shell, limit, |state| &mut state.stderr);
        tokio::join!(out, err);
    };
    tokio::pin!(pumps);
    let mut drained = false;
    let lifetime = tokio::time::sleep(limits.lifetime);
    tokio::pin!(lifetime);
    let stop = loop {
        tokio::select! {
            status = child.wait() => break Err(status),
            () = &mut pumps, if !drained => drained = true,
            () = shell.kill.cancelled() => break Ok(None),
            () = &mut lifetime => break Ok(Some(limits.lifetime)),
        }
    };
    let status = match stop {
        Err(status) => status,
        Ok(lifetime) => {
            let status = end_group(&shell, &mut child).await;
            let mut state = shell.lock();
            if let Some(lifetime) = lifetime {
                let note = format!(
                    "\n[killed: still running after the background shell lifetime of {} s]\n",
                    lifetime.as_secs()
                );
                state.stderr.push(note.as_bytes(), limit);
            }
            state.status = ShellStatus::Killed;
            status
        }
    };
    if !drained {
        let _ = tokio::time::timeout(DRAIN, &mut pumps).await;
    }
    {
        use std::os::unix::process::ExitStatusExt;
        let mut state = shell.lock();
        match status {
            Ok(status) => {
                state.exit_code = status.code();
                state.signal = status.signal().map(signal_name);
                if state.status == ShellStatus::Running {
                    state.status = ShellStatus::Exited;
                }
            }
            Err(_) => state.status = ShellStatus::Error,
        }
        state.finished_at = Some(now_ms());
    }
    // The slot first: whoever sees the shell finished may start another at once.
    drop(slot);
    shell.finished.send_replace(true);
    shell.group.release();
}

/// Ends what is left of a shell's group after its shell exited: SIGTERM, SIGKILL after
/// [`TERM_GRACE`], and waits (as long again at most) until nothing of it runs.
async fn end_stragglers(group: &Group) {
    use rustix::process::Signal;
    for (signal, patience) in [(Signal::TERM, TERM_GRACE), (Signal::KILL, TERM_GRACE)] {
        group.signal(signal);
        let deadline = tokio::time::Instant::now() + patience;
        while group.alive() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if !group.alive() {
            break;
        }
    }
    group.release();
}

/// SIGTERM to the shell's process group, SIGKILL after [`TERM_GRACE`]; the direct child is
/// reaped either way (a SIGKILL cannot be ignored).
async fn end_group(
    shell: &Shell,
    child: &mut tokio::process::Child,
) -> std::io::Result<std::process::ExitStatus> {
    if let Some(pid) = shell.pid {
        signal_group(pid, rustix::process::Signal::TERM);
        if let Ok(status) = tokio::time::timeout(TERM_GRACE, child.wait()).await {
            return status;
        }
        signal_group(pid, rustix::process::Signal::KILL);
    }
    let _ = child.start_kill();
    child.wait().await
}

/// Reads one stream into the shell's ring for it until the end.
async fn pump(
    mut reader: impl AsyncRead + Unpin,
    shell: &Shell,
    limit: usize,
    ring: impl Fn(&mut ShellState) -> &mut Ring,
) {
    let mut buffer = [0u8; 8192];
    while let Ok(read @ 1..) = reader.read(&mut buffer).await {
        ring(&mut shell.lock()).push(&buffer[..read], limit);
    }
}

pub(super) fn signal_group(pid: u32, signal: rustix::process::Signal) {
    if let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        // The group may be gone already; that is the outcome we want.
        let _ = rustix::process::kill_process_group(pid, signal);
    }
}

/// The background shell a tool result of this conversation started with `id`, if any: its
/// command line. A shell the transcript knows and this process does not ran on an executor that
/// stopped (crash, handoff, restart): it is reported lost, never started again.
pub fn started_in_transcript(
    conversation: &[Arc<agent_runtime::protocol::content::ModelMessage>],
    id: &str,
) -> Option<String> {
    let output = super::background_output(conversation, "shell_id", id)?;
    Some(output["command"].as_str().unwrap_or_default().to_owned())
}

/// A signal's name, as the reference reports it.
pub(super) fn signal_name(signal: i32) -> String {
    let name = match signal {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        6 => "SIGABRT",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        24 => "SIGXCPU",
        25 => "SIGXFSZ",
        _ => return format!("SIG{signal}"),
    };
    name.to_owned()
}

#[cfg(test)]
mod tests {
    use super::Ring;

    #[test]
    fn a_ring_keeps_the_newest_bytes_and_counts_the_dropped_ones() {
        let mut ring = Ring::default();
        ring.push(b"hello ", 8);
        ring.push(b"world", 8);
        assert_eq!(ring.take(), ("lo world".to_owned(), 3));
        assert_eq!(ring.take(), (String::new(), 0));
    }
}
