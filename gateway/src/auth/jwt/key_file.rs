//! A key file (PEM or JWKS) that is re-read when it changes, so keys rotate without a restart.
//!
//! The check runs inside `authenticate`, at most once per refresh interval (one `stat`; the file
//! is read only when its size, mtime or inode changed), and only one request at a time does it:
//! the others keep using the current keys. A file that changed but cannot be used leaves the last
//! good keys in place and logs a warning once per change. Replace the file atomically (write a
//! temporary file, then rename) so a half-written file is never seen.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use agent_runtime::clock::SharedClock;

use super::JwtAlgorithm;
use super::key_error::KeyError;
use super::keys::{KeyFormat, KeySet, parse_jwks, parse_pem};

/// Larger key files are refused (a JWKS is a few KiB).
const MAX_KEY_FILE_BYTES: u64 = 1024 * 1024;

/// What identifies one version of the file without reading it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Stamp {
    len: u64,
    modified: Option<SystemTime>,
    inode: u64,
}

struct Check {
    last_ms: u64,
    /// `None` when the file could not be stat'ed at the last check.
    stamp: Option<Stamp>,
}

pub(super) struct KeyFile {
    path: PathBuf,
    format: KeyFormat,
    algorithm: JwtAlgorithm,
    refresh_ms: u64,
    clock: SharedClock,
    current: RwLock<Arc<KeySet>>,
    check: Mutex<Check>,
    /// Bumped on every reload, so open streams re-check their token against the new keys.
    generation: AtomicU64,
}

impl KeyFile {
    /// Loads the file; it must be usable now.
    pub fn open(
        path: PathBuf,
        format: KeyFormat,
        algorithm: JwtAlgorithm,
        refresh: Duration,
        clock: SharedClock,
    ) -> Result<Self, KeyError> {
        let stamp = stamp(&path).map_err(|message| read_error(&path, message))?;
        let keys = load(&path, format, algorithm)?;
        tracing::info!(path = %path.display(), keys = keys.len(), algorithm = algorithm.as_str(), "JWT verification keys loaded");
        let now = clock.now_ms();
        Ok(Self {
            path,
            format,
            algorithm,
            refresh_ms: refresh.as_millis() as u64,
            clock,
            current: RwLock::new(Arc::new(keys)),
            check: Mutex::new(Check {
                last_ms: now,
                stamp: Some(stamp),
            }),
            generation: AtomicU64::new(0),
        })
    }

    /// The current keys, after re-reading the file if it is time to look and it changed.
    pub fn keys(&self) -> Arc<KeySet> {
        // `try_lock`: a request never waits for another one's check.
        if let Ok(mut check) = self.check.try_lock() {
            let now = self.clock.now_ms();
            if now.saturating_sub(check.last_ms) >= self.refresh_ms {
                check.last_ms = now;
                self.reload_if_changed(&mut check);
            }
        }
        match self.current.read() {
            Ok(keys) => Arc::clone(&keys),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    /// Which version of the keys is current (after a check of the file, as in [`Self::keys`]).
    pub fn generation(&self) -> u64 {
        let _ = self.keys();
        self.generation.load(Ordering::Acquire)
    }

    fn reload_if_changed(&self, check: &mut Check) {
        let path = self.path.display();
        let stamp = match stamp(&self.path) {
            Ok(stamp) => stamp,
            Err(message) => {
                if check.stamp.take().is_some() {
                    tracing::warn!(%path, error = %message, "the JWT key file is gone; keeping the last good keys");
                }
                return;
            }
        };
        if check.stamp.as_ref() == Some(&stamp) {
            return;
        }
        check.stamp = Some(stamp);
        match load(&self.path, self.format, self.algorithm) {
            Ok(keys) => {
                tracing::info!(%path, keys = keys.len(), "JWT verification keys reloaded");
                let mut current = match self.current.write() {
                    Ok(current) => current,
                    Err(poisoned) => poisoned.into_inner(),
                };
                *current = Arc::new(keys);
                self.generation.fetch_add(1, Ordering::AcqRel);
            }
            Err(error) => {
                tracing::warn!(%path, %error, "the JWT key file changed but cannot be used; keeping the last good keys");
            }
        }
    }
}

fn stamp(path: &std::path::Path) -> Result<Stamp, String> {
    let metadata = std::fs::metadata(path).map_err(|error| error.to_string())?;
    #[cfg(unix)]
    let inode = std::os::unix::fs::MetadataExt::ino(&metadata);
    #[cfg(not(unix))]
    let inode = 0;
    Ok(Stamp {
        len: metadata.len(),
        modified: metadata.modified().ok(),
        inode,
    })
}

fn load(
    path: &std::path::Path,
    format: KeyFormat,
    algorithm: JwtAlgorithm,
) -> Result<KeySet, KeyError> {
    let metadata = std::fs::metadata(path).map_err(|error| read_error(path, error.to_string()))?;
    if metadata.len() > MAX_KEY_FILE_BYTES {
        return Err(read_error(path, "larger than 1 MiB".to_owned()));
    }
    let text =
        std::fs::read_to_string(path).map_err(|error| read_error(path, error.to_string()))?;
    parse_keys(&text, format, algorithm).map_err(|error| KeyError::InFile {
        path: path.display().to_string(),
        reason: Box::new(error),
    })
}

fn read_error(path: &std::path::Path, message: String) -> KeyError {
    KeyError::Read {
        path: path.display().to_string(),
        message,
    }
}

/// Parses a key file's text.
fn parse_keys(text: &str, format: KeyFormat, algorithm: JwtAlgorithm) -> Result<KeySet, KeyError> {
    match format {
        KeyFormat::Pem => Ok(KeySet::Single(parse_pem(text, algorithm)?)),
        KeyFormat::Jwks => parse_jwks(text, algorithm),
    }
}
