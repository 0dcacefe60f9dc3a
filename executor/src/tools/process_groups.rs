//! The process groups `Bash` starts, and what becomes of them when the executor dies
//! (reliability TOOL-27). The sandbox kills a whole command with its executor (bwrap's
//! `--die-with-parent` and the pid namespace); without it nothing would:
//!
//! - Every command is started from one dedicated thread that lives as long as the process, with
//!   `PR_SET_PDEATHSIG(SIGKILL)`. The kernel sends that signal when the *thread* that forked
//!   exits, so forking on a tokio thread (blocking threads end when idle) would kill commands at
//!   random; from this thread it fires only when the executor dies, and the group leader dies
//!   with it.
//! - What the leader started does not inherit the signal. Each group is recorded in a file (one
//!   line: `<boot id> <session id> <group id> <leader start time> <shell id or ->`), dropped once
//!   the group is empty. At start the executor kills every recorded group that is still its own:
//!   the same boot and session, a leader that is the recorded process (same start time) or gone
//!   (its pid cannot be reused while the group lives), and members that all started no earlier
//!   than the leader. A reused pid is never signalled.
//! - A group is live while it has a member that is not a zombie, whatever became of the leader:
//!   `TaskOutput` and `KillShell` never call a shell exited while something it started runs.

use agent_runtime::sync::Locked;
use std::collections::HashSet;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock, mpsc};

use rustix::process::{Pid, Signal};

/// A process group this executor started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    pub pgid: u32,
    /// The leader's start time (clock ticks after boot, `/proc/<pid>/stat` field 22).
    start: u64,
    /// The session all members share (the executor's: groups are made with `setpgid`).
    session: u32,
}

/// One line of the record.
#[derive(Clone, Debug)]
struct Entry {
    group: Group,
    shell_id: Option<String>,
}

#[derive(Default)]
struct Registry {
    /// Where the record is kept; none: groups are only tracked in memory.
    file: Option<PathBuf>,
    entries: Vec<Entry>,
    /// Shells of a previous run that the start-up sweep found (and killed if they still ran).
    swept: HashSet<String>,
}

fn registry() -> &'static Mutex<Registry> {
    static REGISTRY: OnceLock<Mutex<Registry>> = OnceLock::new();
    REGISTRY.get_or_init(Mutex::default)
}

fn lock() -> std::sync::MutexGuard<'static, Registry> {
    registry().locked()
}

/// Keeps the record in `file` and kills what a previous run recorded there and left running.
/// The first call of the process decides; later ones (other profiles) are no-ops. Returns how
/// many groups were killed.
pub fn record_in(file: &Path) -> Result<usize, String> {
    let mut registry = lock();
    if registry.file.is_some() {
        return Ok(0);
    }
    let boot = boot_id();
    let previous = std::fs::read_to_string(file).unwrap_or_default();
    let mut killed = 0;
    for line in previous.lines() {
        let Some((line_boot, entry)) = parse(line) else {
            continue;
        };
        // A reboot ended the others.
        if let Some(shell) = &entry.shell_id {
            registry.swept.insert(shell.clone());
        }
        if line_boot != boot {
            continue;
        }
        if entry.group.signal(Signal::KILL) {
            killed += 1;
        }
    }
    let created = match file.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => std::fs::create_dir_all(dir),
        _ => Ok(()),
    };
    registry.file = Some(file.to_path_buf());
    created
        .and_then(|()| write(&registry))
        .map_err(|e| format!("process record {}: {e}", file.display()))?;
    Ok(killed)
}

/// Whether the start-up sweep covered the shell `id` of a previous run: nothing of it runs.
pub fn swept(id: &str) -> bool {
    lock().swept.contains(id)
}

/// Starts `command` in its own process group, as a child that dies with the executor, and
/// records the group (`shell_id`: the background shell it is).
pub fn spawn(
    mut command: tokio::process::Command,
    shell_id: Option<&str>,
) -> io::Result<(tokio::process::Child, Group)> {
    command.process_group(0);
    die_with_parent(&mut command);
    let child = spawn_on_spawner(command)?;
    let pgid = child
        .id()
        .ok_or_else(|| io::Error::other("the command ended at once"))?;
    let group = Group {
        pgid,
        start: stat(pgid).map_or(0, |s| s.start),
        session: own_session(),
    };
    let mut registry = lock();
    registry.entries.push(Entry {
        group: group.clone(),
        shell_id: shell_id.map(str::to_owned),
    });
    if let Err(error) = write(&registry) {
        tracing::warn!(%error, "cannot update the record of running commands");
    }
    Ok((child, group))
}

/// Has the child ask for SIGKILL when its parent thread ends. `pre_exec` is the one way to run
/// code between fork and exec, hence the only `unsafe` of the crate.
#[allow(unsafe_code)]
fn die_with_parent(command: &mut tokio::process::Command) {
    let parent = rustix::process::getpid();
    // SAFETY: between fork and exec the closure only makes two system calls (no allocation, no
    // lock), which is what a forked child of a threaded process may do.
    unsafe {
        command.as_std_mut().pre_exec(move || {
            rustix::process::set_parent_process_death_signal(Some(Signal::KILL))?;
            // The executor died between the fork and the call above: the signal was missed.
            if rustix::process::getppid() != Some(parent) {
                return Err(io::Error::other("the executor ended"));
            }
            Ok(())
        });
    }
}

struct Job {
    command: tokio::process::Command,
    runtime: Option<tokio::runtime::Handle>,
    reply: mpsc::SyncSender<io::Result<tokio::process::Child>>,
}

/// Spawns on the one thread that forks every command (see the module documentation).
fn spawn_on_spawner(command: tokio::process::Command) -> io::Result<tokio::process::Child> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<Job>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (jobs, queue) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("command-spawner".to_owned())
            .spawn(move || {
                for mut job in queue {
                    // The child is registered with the caller's runtime, which reaps it.
                    let _entered = job.runtime.as_ref().map(tokio::runtime::Handle::enter);
                    let _ = job.reply.send(job.command.spawn());
                }
            })
            .expect("the command spawner thread starts");
        Mutex::new(jobs)
    });
    let (reply, answer) = mpsc::sync_channel(1);
    let job = Job {
        command,
        runtime: tokio::runtime::Handle::try_current().ok(),
        reply,
    };
    spawner
        .locked()
        .send(job)
        .map_err(|_| io::Error::other("the command spawner stopped"))?;
    answer
        .recv()
        .map_err(|_| io::Error::other("the command spawner stopped"))?
}

impl Group {
    /// The group's members that are not zombies, or `None` when the group is not (or no longer)
    /// verifiably ours: its leader's pid now names another process, or a member is of another
    /// session or older than the leader. `processes`: every process, as [`processes`] lists them.
    fn members_in(&self, processes: &[(u32, Stat)]) -> Option<Vec<Pid>> {
        let mut members = Vec::new();
        for (pid, stat) in processes.iter().filter(|(_, s)| s.pgrp == self.pgid) {
            if stat.session != self.session || stat.start < self.start {
                return None;
            }
            if stat.state != 'Z' {
                members.extend(i32::try_from(*pid).ok().and_then(Pid::from_raw));
            }
        }
        // The leader's pid, reused outside the group.
        if let Some((_, leader)) = processes.iter().find(|(pid, _)| *pid == self.pgid)
            && leader.start != self.start
        {
            return None;
        }
        Some(members)
    }

    fn members(&self) -> Option<Vec<Pid>> {
        self.members_in(&processes())
    }

    /// Whether a process of the group still runs.
    pub fn alive(&self) -> bool {
        self.members().is_some_and(|members| !members.is_empty())
    }

    /// Sends `signal` to the group if it is verifiably ours and runs; whether it was sent.
    pub fn signal(&self, signal: Signal) -> bool {
        let Some(pgid) = i32::try_from(self.pgid).ok().and_then(Pid::from_raw) else {
            return false;
        };
        self.alive() && rustix::process::kill_process_group(pgid, signal).is_ok()
    }

    /// Forgets the group once nothing of it runs (and, on the way, every other such group).
    pub fn release(&self) {
        let mut registry = lock();
        let before = registry.entries.len();
        let processes = processes();
        registry.entries.retain(|entry| {
            let members = entry.group.members_in(&processes);
            members.is_some_and(|members| !members.is_empty())
        });
        if registry.entries.len() != before
            && let Err(error) = write(&registry)
        {
            tracing::warn!(%error, "cannot update the record of running commands");
        }
    }
}

/// Writes the record (a new file renamed over the old one: a crash leaves one or the other).
fn write(registry: &Registry) -> io::Result<()> {
    let Some(file) = &registry.file else {
        return Ok(());
    };
    let boot = boot_id();
    let mut text = String::new();
    for Entry { group, shell_id } in &registry.entries {
        let shell = shell_id.as_deref().unwrap_or("-");
        text.push_str(&format!(
            "{boot} {} {} {} {shell}\n",
            group.session, group.pgid, group.start
        ));
    }
    let fresh = file.with_extension("new");
    std::fs::write(&fresh, text)?;
    std::fs::rename(&fresh, file)
}

fn parse(line: &str) -> Option<(String, Entry)> {
    let mut fields = line.split_whitespace();
    let boot = fields.next()?.to_owned();
    let session = fields.next()?.parse().ok()?;
    let pgid = fields.next()?.parse().ok()?;
    let start = fields.next()?.parse().ok()?;
    let shell_id = Some(fields.next()?)
        .filter(|id| *id != "-")
        .map(str::to_owned);
    let group = Group {
        pgid,
        start,
        session,
    };
    Some((boot, Entry { group, shell_id }))
}

/// This boot's id: pids and start times are only comparable within one boot.
fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|id| id.trim().to_owned())
        .unwrap_or_default()
}

/// Read from `/proc` rather than `getsid`: a process whose session leader is outside its pid
/// namespace (a container's first process, a CI runner) is in session 0, which `getsid` wrappers
/// refuse.
fn own_session() -> u32 {
    stat(std::process::id()).map_or(0, |stat| stat.session)
}

/// What `/proc/<pid>/stat` says of a process.
struct Stat {
    state: char,
    pgrp: u32,
    session: u32,
    start: u64,
}

/// Every process of the host (of this pid namespace), read once.
fn processes() -> Vec<(u32, Stat)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
        .filter_map(|pid| Some((pid, stat(pid)?)))
        .collect()
}

fn stat(pid: u32) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command name, which may hold spaces and parentheses: field 3 on.
    let (_, rest) = text.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some(Stat {
        state: fields.first()?.chars().next()?,
        pgrp: fields.get(2)?.parse().ok()?,
        session: fields.get(3)?.parse().ok()?,
        start: fields.get(19)?.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::{Group, parse, stat};

    #[test]
    fn record_lines_parse_and_a_reused_leader_pid_is_not_ours() {
        let (boot, entry) = parse("b00t 7 1234 99 bash_x").unwrap();
        assert_eq!(boot, "b00t");
        assert_eq!(entry.shell_id.as_deref(), Some("bash_x"));
        assert_eq!((entry.group.session, entry.group.pgid), (7, 1234));
        assert!(parse("b00t 7 1234 99 -").unwrap().1.shell_id.is_none());
        assert!(parse("garbage").is_none());

        // This test process as a recorded leader with another start time: its pid was reused.
        let me = std::process::id();
        let real = stat(me).unwrap();
        let reused = Group {
            pgid: me,
            start: real.start + 1,
            session: real.session,
        };
        assert!(reused.members().is_none());
        assert!(!reused.signal(rustix::process::Signal::CONT));
    }
}
