//! The JSONL backend: the memory engine journaled to `<dir>/server-store.jsonl`, single process,
//! guarded by an OS advisory lock on `<dir>/server-store.lock` (docs/storage.md §9.1, decisions S7,
//! S8).
//!
//! Start-up takes the lock, replays the journal, compacts it to a snapshot and opens it for
//! append. Every state change is then one line (`{"v":1,"kind":...}`), written whole with one
//! `write(2)` before the mutating call returns, so an acknowledged write survives a process
//! crash; with `fsync` it also survives a power cut. A failed write or fsync is never retried:
//! the store refuses further writes until restarted (`RUNTIME_STORE_JOURNAL_FAILED`), and the
//! in-memory state goes back to the last acknowledged line, so the failed change is never
//! readable (nothing is visible before it is durable).
//!
//! Lines are written while the engine's state lock is held, which keeps file order equal to apply
//! order; with `fsync` each mutation therefore also holds that lock for one `fdatasync`.
//!
//! The lock is advisory (`flock`), so the kernel drops it when the process dies: a SIGKILLed
//! server never leaves a stale lock behind. The lock file itself stays in the directory; removing
//! it on close would let two later processes lock two different files of the same name.

mod compaction;
mod liveness;
mod replay;

#[cfg(test)]
mod streaming_tests;
#[cfg(test)]
mod tests;

use agent_runtime::sync::Locked;
use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use agent_runtime::protocol::JsonObject;
use serde_json::Value;

use crate::error::{RuntimeErrorCode, StoreError, StoreResult};
use crate::journal::{JournalEntry, Snapshot, encode_line, encoded_len};
use crate::memory::{Backend, DurableState, StoreEngine};
use crate::options::StoreOptions;
use compaction::Compaction;
use liveness::Liveness;
use replay::{MAX_RECORD_BYTES, compact, io_error, replay, replay_prefix};

/// A rewrite starts once at least this share of the journal is dead (3/5): it then encodes about
/// 2/3 of a byte (the live ones) per byte it reclaims (the dead ones), which leaves room for the
/// estimate's error (a snapshot writes each live entry as its own line, a few bytes longer than
/// inside a batch), and the journal stays under 2.5 times what the store retains.
const DEAD_SHARE: (u64, u64) = (3, 5);

/// File name of the journal inside the store directory.
pub const JOURNAL_FILE: &str = "server-store.jsonl";
/// File name of the lock file inside the store directory.
pub const LOCK_FILE: &str = "server-store.lock";
/// File name of the snapshot that start-up's compaction writes before renaming it over the
/// journal. Start-up never reads it: one left behind by a crash is truncated, rewritten and
/// renamed by the next compaction, so after a successful start it is gone.
pub const COMPACTION_TEMP_FILE: &str = "server-store.jsonl.tmp";

/// The JSONL store: every port, persisted to one directory.
pub type JsonlStore = StoreEngine<JsonlBackend>;

/// The journal file and the directory lock of an open JSONL store.
pub struct JsonlBackend {
    file: Arc<JournalFile>,
    /// The lock file holding the advisory lock; dropping it unlocks the directory.
    lock: Mutex<Option<File>>,
    compaction_min_bytes: u64,
    /// The rewrite in flight, if any (`compaction.rs`).
    compaction: Mutex<Option<Compaction>>,
    /// The journal's dead bytes, which start a rewrite (`liveness.rs`).
    liveness: Mutex<Liveness>,
}

/// The journal, shared with a rewrite running in the background.
struct JournalFile {
    directory: PathBuf,
    journal_path: PathBuf,
    fsync: bool,
    /// The journal opened for append; `None` once closed. Appends already run under the engine's
    /// state lock; this mutex makes the handle shareable, and holding it keeps a rewrite from
    /// swapping the file.
    journal: Mutex<Option<File>>,
    /// Why the journal could not be reopened after a rewrite, if that happened.
    lost: Mutex<Option<String>>,
    /// Length of the journal up to the end of the last acknowledged line: what a failed append
    /// rolls the in-memory state back to (JSONL-08).
    acknowledged_len: AtomicU64,
    /// Length of the last snapshot written (at start-up, the whole journal): the journal must
    /// reach twice this, i.e. take as many new bytes as the snapshot wrote, before it is
    /// compacted again (see `StoreOptions::jsonl_compaction_min_bytes`).
    compacted_len: AtomicU64,
    /// Test builds only: length of the journal that an fsync (or start-up's synced compaction)
    /// has made durable, i.e. what a power cut would leave (JSONL-07).
    #[cfg(test)]
    synced_len: AtomicU64,
    /// Test builds only: a rewrite waits for this (if set) between its snapshot and the swap.
    #[cfg(test)]
    before_swap: Mutex<Option<std::sync::mpsc::Receiver<()>>>,
    /// Test builds only: every swapped-in rewrite (JSONL-14).
    #[cfg(test)]
    rewrites: Mutex<Vec<compaction::Rewrite>>,
}

impl JournalFile {
    /// Why nothing can be appended: closed, or lost after a rewrite.
    fn unavailable(&self) -> StoreError {
        match self.lost.lock().ok().and_then(|lost| lost.clone()) {
            Some(message) => StoreError::Backend {
                message,
                retry_safe: false,
            },
            None => StoreError::NotOpen(format!("{} is closed", JsonlBackend::NAME)),
        }
    }
}

impl JsonlBackend {
    pub fn directory(&self) -> &Path {
        &self.file.directory
    }

    /// Waits for a rewrite in flight (one that finds the journal closed gives up).
    fn wait_for_compaction(&self) {
        let running = self.compaction.locked().take();
        if let Some(running) = running {
            running.wait();
        }
    }
}

impl Drop for JsonlBackend {
    fn drop(&mut self) {
        // Before the directory lock goes: another process may open the directory after it.
        self.wait_for_compaction();
    }
}

fn poisoned() -> StoreError {
    StoreError::Backend {
        message: "the JSONL journal handle was poisoned by a panic".into(),
        retry_safe: false,
    }
}

impl Backend for JsonlBackend {
    const NAME: &'static str = "JsonlStore";

    fn append(&self, entries: &[JournalEntry]) -> StoreResult<()> {
        let line = encode_line(entries).map_err(|error| StoreError::Backend {
            message: format!("encoding a journal entry failed: {error}"),
            retry_safe: false,
        })?;
        if line.len() > MAX_RECORD_BYTES {
            return Err(StoreError::invalid(format!(
                "This change is too large to store: {} bytes, where one change may hold at \
                 most {MAX_RECORD_BYTES} bytes",
                line.len()
            )));
        }
        let shared = &self.file;
        let mut journal = shared.journal.lock().map_err(|_| poisoned())?;
        let Some(file) = journal.as_mut() else {
            return Err(shared.unavailable());
        };
        // The whole line, newline included, in one write: a crash can only tear the last line,
        // which start-up skips and cuts off.
        file.write_all(&line)
            .map_err(|e| io_error("appending to", &shared.journal_path, &e))?;
        if shared.fsync {
            file.sync_data()
                .map_err(|e| io_error("syncing", &shared.journal_path, &e))?;
        }
        let _end = shared
            .acknowledged_len
            .fetch_add(line.len() as u64, Ordering::AcqRel)
            + line.len() as u64;
        #[cfg(test)]
        if shared.fsync {
            shared.synced_len.store(_end, Ordering::Release);
        }
        drop(journal);
        let mut liveness = self.liveness.lock().map_err(|_| poisoned())?;
        match entries {
            [entry] => liveness.record(entry, || line.len() as u64),
            // Inside a batch: the entry and its comma.
            _ => {
                for entry in entries {
                    liveness.record(entry, || encoded_len(entry) + 1);
                }
            }
        }
        Ok(())
    }

    /// Replays the journal up to the end of the last acknowledged line. A line whose write or
    /// fsync failed is left out even when its bytes reached the file: it was never acknowledged,
    /// and a restart either replays it (it was never shown) or drops it as a torn tail.
    fn durable_state(&self, retention: u64) -> Option<StoreResult<DurableState>> {
        let shared = &self.file;
        // Held while reading, so a rewrite cannot swap the file between the length and the read.
        let Ok(_journal) = shared.journal.lock() else {
            return Some(Err(poisoned()));
        };
        let length = shared.acknowledged_len.load(Ordering::Acquire);
        Some(replay_prefix(&shared.journal_path, length, retention).map(DurableState))
    }

    /// Starts a rewrite in the background (`compaction.rs`) once it pays: `DEAD_SHARE` of the
    /// journal is dead (so it rewrites less than it reclaims), the journal has reached
    /// `jsonl_compaction_min_bytes`, and it has taken as many bytes since the last rewrite as
    /// that rewrite's snapshot (never back to back). The writer only waits for a rewrite that the
    /// journal has outgrown twice over.
    fn compact_if_grown(
        &self,
        dropped_bytes: u64,
        snapshot: &dyn Fn() -> Snapshot,
    ) -> StoreResult<()> {
        let shared = &self.file;
        let mut running = self.compaction.lock().map_err(|_| poisoned())?;
        let mut liveness = self.liveness.lock().map_err(|_| poisoned())?;
        liveness.dead += dropped_bytes;
        if let Some(rewrite) = running.take() {
            let length = shared.acknowledged_len.load(Ordering::Acquire);
            if rewrite.running_below(length) {
                *running = Some(rewrite);
                return Ok(());
            }
            // A rewrite that did not swap leaves its dead bytes in the journal.
            liveness.dead += rewrite.wait();
            if shared.journal.lock().map_err(|_| poisoned())?.is_none() {
                // Lost by the rewrite: the engine fails closed.
                return Err(shared.unavailable());
            }
        }
        let length = shared.acknowledged_len.load(Ordering::Acquire);
        let compacted = shared.compacted_len.load(Ordering::Acquire);
        let threshold = self.compaction_min_bytes.max(compacted.saturating_mul(2));
        let (share, of) = DEAD_SHARE;
        if length < threshold || liveness.dead.saturating_mul(of) < length.saturating_mul(share) {
            return Ok(());
        }
        // Exactly the state of the journal's first `length` bytes: the state lock is held.
        *running = Compaction::start(shared, snapshot, length, threshold, liveness.dead);
        match *running {
            Some(_) => liveness.dead = 0,
            None => shared.compacted_len.store(length, Ordering::Release),
        }
        Ok(())
    }

    fn close(&self) -> StoreResult<()> {
        let shared = &self.file;
        let file = shared.journal.lock().map_err(|_| poisoned())?.take();
        let synced = match &file {
            Some(file) if shared.fsync => file
                .sync_all()
                .map_err(|e| io_error("syncing", &shared.journal_path, &e)),
            _ => Ok(()),
        };
        drop(file);
        self.wait_for_compaction();
        // Unlock even when the final sync failed: the process is done with the directory.
        if let Some(lock) = self.lock.lock().map_err(|_| poisoned())?.take() {
            let lock_path = shared.directory.join(LOCK_FILE);
            lock.unlock()
                .map_err(|e| io_error("unlocking", &lock_path, &e))?;
        }
        synced
    }

    fn describe(&self, details: &mut JsonObject) {
        details.insert("backend".to_owned(), Value::from("jsonl"));
        details.insert(
            "directory".to_owned(),
            Value::from(self.file.directory.display().to_string()),
        );
    }
}

/// Takes the advisory lock on `<dir>/server-store.lock` without waiting.
fn lock_directory(directory: &Path) -> StoreResult<File> {
    let lock_path = directory.join(LOCK_FILE);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&lock_path)
        .map_err(|e| io_error("opening", &lock_path, &e))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(TryLockError::WouldBlock) => Err(StoreError::runtime(
            RuntimeErrorCode::Locked,
            format!(
                "{} is locked: another process may be using {}. Stop it or use another directory.",
                lock_path.display(),
                directory.display()
            ),
        )),
        Err(TryLockError::Error(error)) => Err(io_error("locking", &lock_path, &error)),
    }
}

/// Syncs the parent of a directory this process just created (its entry in the parent).
fn sync_parent(directory: &Path) -> StoreResult<()> {
    let Some(parent) = directory.parent().filter(|p| !p.as_os_str().is_empty()) else {
        return Ok(());
    };
    File::open(parent)
        .and_then(|dir| dir.sync_all())
        .map_err(|e| io_error("syncing", parent, &e))?;
    replay::durable_step(directory, "created directory synced in its parent");
    Ok(())
}

fn open_blocking(directory: PathBuf, options: StoreOptions) -> StoreResult<JsonlStore> {
    let created = !directory.exists();
    fs::create_dir_all(&directory).map_err(|e| io_error("creating", &directory, &e))?;
    if created {
        // A new directory's own entry is durable only once its parent is synced; otherwise a
        // power cut right after the first acknowledged write could lose the whole store.
        sync_parent(&directory)?;
    }
    // Every early return below drops `lock`, which releases the directory again, so a failed
    // start-up never leaves it locked and a retry sees the real error.
    let lock = lock_directory(&directory)?;
    let journal_path = directory.join(JOURNAL_FILE);
    let state = replay(&journal_path, options.retention())?;
    let snapshot = state.snapshot_parts();
    compact(&directory, &journal_path, &snapshot)?;
    let liveness = Liveness::of_snapshot(&snapshot);
    drop(snapshot);
    let journal = OpenOptions::new()
        .append(true)
        .open(&journal_path)
        .map_err(|e| io_error("opening", &journal_path, &e))?;
    let compacted_len = journal
        .metadata()
        .map_err(|e| io_error("inspecting", &journal_path, &e))?
        .len();
    let file = JournalFile {
        fsync: options.fsync,
        directory,
        journal_path,
        journal: Mutex::new(Some(journal)),
        lost: Mutex::new(None),
        acknowledged_len: AtomicU64::new(compacted_len),
        compacted_len: AtomicU64::new(compacted_len),
        #[cfg(test)]
        synced_len: AtomicU64::new(compacted_len),
        #[cfg(test)]
        before_swap: Mutex::new(None),
        #[cfg(test)]
        rewrites: Mutex::new(Vec::new()),
    };
    let backend = JsonlBackend {
        file: Arc::new(file),
        lock: Mutex::new(Some(lock)),
        compaction_min_bytes: options.jsonl_compaction_min_bytes,
        compaction: Mutex::new(None),
        liveness: Mutex::new(liveness),
    };
    Ok(StoreEngine::from_parts(state, options, backend))
}

impl StoreEngine<JsonlBackend> {
    /// Opens (creating if needed) the store in `directory`: lock, replay, compact, append.
    ///
    /// Fails with `RUNTIME_STORE_LOCKED` while another process holds the directory and with
    /// `RUNTIME_STORE_CORRUPT_JOURNAL` (naming `file:line`) for a damaged journal.
    pub async fn open(directory: impl AsRef<Path>, options: StoreOptions) -> StoreResult<Self> {
        let directory = directory.as_ref().to_path_buf();
        tokio::task::spawn_blocking(move || open_blocking(directory, options))
            .await
            .map_err(|error| StoreError::Backend {
                message: format!("opening the JSONL store panicked: {error}"),
                retry_safe: false,
            })?
    }

    /// The store directory.
    pub fn directory(&self) -> &Path {
        self.backend().directory()
    }
}
