//! The `Bash` sandbox: every command runs inside bubblewrap (`bwrap`) with a read-only view of
//! the system directories only (not `/home`, `/root`, `/srv`, the data directory…), the working
//! directory bound writable, a private size-capped `/tmp`, everything else read-only (absent paths
//! included: the sandbox's own root is remounted read-only), fresh namespaces (`--unshare-all`: no
//! network unless `network = true`), no capabilities (`--cap-drop ALL` for a root executor) and
//! `--die-with-parent` so a cancelled call leaves nothing behind.
//!
//! Of `/etc` only the files a shell and the usual tools need are visible ([`ETC_ENTRIES`]): the
//! deploy files put the executor's configuration under `/etc/agent-runtime/`, and an operator may
//! keep key files under `/etc` too (reliability TOOL-10).
//!
//! bwrap itself sets no resource limits (RES-08): the command runs under hard rlimits set by a
//! wrapping shell (`ulimit -H -S`; nothing inside the sandbox may raise a hard limit) on the
//! number of processes, address space, file size and CPU time. The process cap is enforced by the
//! kernel per user, and not at all for processes of uid 0: an executor running as root gets no
//! process cap from it (the wall-clock timeout and the pid namespace, torn down with the
//! command, still bound a fork bomb).
//!
//! Start-up probes the wrapper by running `true` through it; if that fails the executor does not
//! start. There is no fallback to running unsandboxed.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

/// Directories of the host visible (read-only) inside the sandbox, when they exist. Enough for
/// a shell and the usual tools; user data directories are deliberately absent, and so is `/etc`
/// (only [`ETC_ENTRIES`] of it).
const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt",
];

/// The entries of the host's `/etc` a sandboxed command sees (read-only, when they exist): user
/// and host name lookup, the dynamic linker, TLS certificates, time zone, shell start-up files.
pub const ETC_ENTRIES: &[&str] = &[
    "alternatives",
    "bash.bashrc",
    "ca-certificates",
    "ca-certificates.conf",
    "crypto-policies",
    "gai.conf",
    "group",
    "host.conf",
    "hostname",
    "hosts",
    "inputrc",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "mime.types",
    "nsswitch.conf",
    "os-release",
    "passwd",
    "pki",
    "profile",
    "protocols",
    "resolv.conf",
    "services",
    "ssl",
    "timezone",
];

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxConfig {
    /// Wrap every `Bash` command in bubblewrap. Default off.
    pub enabled: bool,
    /// Let sandboxed commands use the network. Default off.
    pub network: bool,
    /// The `bwrap` binary. Default: `bwrap` on `PATH`.
    pub bwrap: Option<PathBuf>,
    /// Most processes of one command (`RLIMIT_NPROC`; not enforced for root). Default 512;
    /// 0: no limit.
    pub max_processes: u64,
    /// Most address space of one process, in bytes (`RLIMIT_AS`). Default 4 GiB; 0: no limit.
    pub max_memory_bytes: u64,
    /// Largest file a command may write, in bytes (`RLIMIT_FSIZE`). Default 1 GiB; 0: no limit.
    pub max_file_bytes: u64,
    /// Most CPU time of one process, in seconds (`RLIMIT_CPU`). Default 600; 0: no limit.
    pub max_cpu_seconds: u64,
    /// Size of the private `/tmp` (memory-backed), in bytes. Default 512 MiB; 0: no cap.
    pub tmp_size_bytes: u64,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            network: false,
            bwrap: None,
            max_processes: 512,
            max_memory_bytes: 4 << 30,
            max_file_bytes: 1 << 30,
            max_cpu_seconds: 600,
            tmp_size_bytes: 512 << 20,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error(
        "sandbox.enabled is set but bubblewrap cannot run here ({0}); install bubblewrap \
         (`apt-get install bubblewrap`) and allow user namespaces, or disable the sandbox — \
         commands never run unsandboxed instead"
    )]
    Unavailable(String),
}

/// `bash -c line` in `cwd` the way tools run commands: in the sandbox when there is one, with a
/// cleared environment but for a plain `PATH`, `HOME` and `LANG`, killed when dropped.
pub(crate) fn shell_command(
    sandbox: Option<&Sandbox>,
    cwd: &Path,
    home: &Path,
    line: &str,
) -> tokio::process::Command {
    let mut command = match sandbox {
        Some(sandbox) => sandbox.command(cwd, line),
        None => {
            let mut command = tokio::process::Command::new("bash");
            command.arg("-c").arg(line).current_dir(cwd);
            command
        }
    };
    command
        .env_clear()
        .env(
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        )
        .env("HOME", home)
        .env("LANG", "C.UTF-8")
        .kill_on_drop(true);
    command
}

/// A probed, working sandbox.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sandbox {
    bwrap: PathBuf,
    network: bool,
    limits: Limits,
    /// The executor runs as root: bwrap would keep every capability inside the sandbox's user
    /// namespace unless told to drop them (a setuid bwrap refuses `--cap-drop` from other users,
    /// who get no capabilities anyway).
    drop_caps: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Limits {
    processes: u64,
    memory_bytes: u64,
    file_bytes: u64,
    cpu_seconds: u64,
    tmp_bytes: u64,
}

impl Limits {
    /// `ulimit` options setting hard and soft limits at once, `-H -S` first.
    fn ulimit(&self) -> String {
        let kib = |bytes: u64| bytes.div_ceil(1024);
        let mut line = String::new();
        for (flag, value) in [
            ("-u", self.processes),
            ("-v", kib(self.memory_bytes)),
            ("-f", kib(self.file_bytes)),
            ("-t", self.cpu_seconds),
        ] {
            if value > 0 {
                line.push_str(&format!(" {flag} {value}"));
            }
        }
        match line.is_empty() {
            true => String::new(),
            false => format!("ulimit -H -S{line} || exit 126; "),
        }
    }
}

impl Sandbox {
    /// `None` when the sandbox is disabled; an error when it is enabled but cannot run.
    pub async fn probe(config: &SandboxConfig) -> Result<Option<Self>, SandboxError> {
        if !config.enabled {
            return Ok(None);
        }
        let sandbox = Self {
            bwrap: config
                .bwrap
                .clone()
                .unwrap_or_else(|| PathBuf::from("bwrap")),
            network: config.network,
            limits: Limits {
                processes: config.max_processes,
                memory_bytes: config.max_memory_bytes,
                file_bytes: config.max_file_bytes,
                cpu_seconds: config.max_cpu_seconds,
                tmp_bytes: config.tmp_size_bytes,
            },
            drop_caps: std::fs::metadata("/proc/self")
                .map(|meta| std::os::unix::fs::MetadataExt::uid(&meta) == 0)
                .unwrap_or(true),
        };
        let cwd = std::env::temp_dir();
        let mut probe = sandbox.command(&cwd, "true");
        probe.stdout(Stdio::null()).stderr(Stdio::piped());
        let run = tokio::time::timeout(Duration::from_secs(10), probe.output()).await;
        match run {
            Err(_) => Err(SandboxError::Unavailable(
                "the probe command timed out".to_owned(),
            )),
            Ok(Err(error)) => Err(SandboxError::Unavailable(format!(
                "cannot start {}: {error}",
                sandbox.bwrap.display()
            ))),
            Ok(Ok(output)) if !output.status.success() => {
                let stderr = String::from_utf8_lossy(&output.stderr);
                Err(SandboxError::Unavailable(stderr.trim().to_owned()))
            }
            Ok(Ok(_)) => Ok(Some(sandbox)),
        }
    }

    /// `bash -c command` inside the sandbox, with `cwd` writable and current.
    pub fn command(&self, cwd: &Path, command: &str) -> tokio::process::Command {
        let mut wrapped = tokio::process::Command::new(&self.bwrap);
        for dir in SYSTEM_DIRS {
            let path = Path::new(dir);
            match std::fs::symlink_metadata(path) {
                // Merged-/usr systems have `/bin -> usr/bin`: recreate the link, not a copy.
                Ok(meta) if meta.file_type().is_symlink() => {
                    if let Ok(target) = std::fs::read_link(path) {
                        wrapped.arg("--symlink").arg(target).arg(path);
                    }
                }
                Ok(_) => {
                    wrapped.arg("--ro-bind").arg(path).arg(path);
                }
                Err(_) => {}
            }
        }
        for entry in ETC_ENTRIES {
            let path = Path::new("/etc").join(entry);
            // `-try`: a dangling link (e.g. `resolv.conf` into an absent `/run`) is skipped.
            if std::fs::symlink_metadata(&path).is_ok() {
                wrapped.arg("--ro-bind-try").arg(&path).arg(&path);
            }
        }
        wrapped.args(["--dev", "/dev", "--proc", "/proc"]);
        if self.limits.tmp_bytes > 0 {
            wrapped.arg("--size").arg(self.limits.tmp_bytes.to_string());
        }
        // Order matters: the private /tmp is mounted before the working directory, so a working
        // directory under /tmp is bound on top of it rather than hidden by it.
        wrapped
            .args(["--tmpfs", "/tmp"])
            .arg("--bind")
            .arg(cwd)
            .arg(cwd)
            // The root bwrap builds is a writable tmpfs holding the mount points: read-only once
            // they are made, so creating anything outside the working directory, `/tmp` and
            // `/dev` (`/etc/agent-runtime/…`, `~/.ssh/…`) fails instead of landing in a
            // private copy (TOOL-11).
            .args(["--remount-ro", "/"])
            .arg("--chdir")
            .arg(cwd)
            .args(["--unshare-all", "--die-with-parent", "--new-session"]);
        if self.drop_caps {
            wrapped.args(["--cap-drop", "ALL"]);
        }
        if self.network {
            wrapped.arg("--share-net");
        }
        // The limits are set by a shell that then `exec`s the command's own `bash -c`, so the
        // command line runs exactly as given (its `$0`, its parse) under limits it cannot raise.
        let limited = format!("{}exec bash -c \"$1\"", self.limits.ulimit());
        wrapped.args(["--", "bash", "-c", &limited, "bash", command]);
        wrapped
    }
}
