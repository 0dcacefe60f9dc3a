//! The `Bash` sandbox: every command runs inside bubblewrap (`bwrap`) with a read-only view of
//! the system directories only (not `/home`, `/root`, `/srv`, the data directory…), the working
//! directory bound writable, a private `/tmp`, fresh namespaces (`--unshare-all`: no network
//! unless `network = true`) and `--die-with-parent` so a cancelled call leaves nothing behind.
//!
//! Start-up probes the wrapper by running `true` through it; if that fails the executor does not
//! start. There is no fallback to running unsandboxed.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

/// Directories of the host visible (read-only) inside the sandbox, when they exist. Enough for
/// a shell and the usual tools; user data directories are deliberately absent.
const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt",
];

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SandboxConfig {
    /// Wrap every `Bash` command in bubblewrap. Default off.
    pub enabled: bool,
    /// Let sandboxed commands use the network. Default off.
    pub network: bool,
    /// The `bwrap` binary. Default: `bwrap` on `PATH`.
    pub bwrap: Option<PathBuf>,
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

/// A probed, working sandbox.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sandbox {
    bwrap: PathBuf,
    network: bool,
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
        // Order matters: the private /tmp is mounted before the working directory, so a working
        // directory under /tmp is bound on top of it rather than hidden by it.
        wrapped
            .args(["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"])
            .arg("--bind")
            .arg(cwd)
            .arg(cwd)
            .arg("--chdir")
            .arg(cwd)
            .args(["--unshare-all", "--die-with-parent", "--new-session"]);
        if self.network {
            wrapped.arg("--share-net");
        }
        wrapped.args(["--", "bash", "-c", command]);
        wrapped
    }
}
