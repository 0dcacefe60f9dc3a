//! Rewriting the journal of a running store as a snapshot, off the state lock.
//!
//! The snapshot is taken with the state lock held, right after a write, so it is exactly the
//! first `base` bytes of the journal. A background thread then encodes, writes and syncs it while
//! reads and writes go on. To finish, the thread takes the journal handle (which holds appends
//! back, not reads), copies the lines acknowledged after `base` behind the snapshot, syncs, renames
//! the file over the journal and reopens it. Off the lock, because a rewrite under it stalls every
//! read and write of the store for as long as a large journal takes to encode and sync.
//!
//! A crash at any step leaves one whole journal under its name, as at start-up (`replay::compact`):
//! the temp file is never read. A failure before the rename leaves the journal as it was, dead
//! bytes included (the rewrite is tried again once the journal has grown as much again); a failure
//! after it leaves no journal to append to, so the next write fails the store closed.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::replay::{io_error, sync_directory, write_snapshot};
use super::{COMPACTION_TEMP_FILE, JournalFile, poisoned};
use crate::error::StoreResult;
use crate::journal::Snapshot;

/// A rewrite in flight.
pub(super) struct Compaction {
    /// Whether the rewrite was swapped in.
    thread: JoinHandle<bool>,
    /// Journal length at which writers stop and wait for it: twice the threshold it passed (the
    /// minimum, or twice the last snapshot), so the disk stays bounded even when writes outrun
    /// the rewrite.
    cap: u64,
    /// The dead bytes (estimated) that the rewrite drops.
    dead: u64,
}

/// Test builds only: the lengths of one swapped-in rewrite (JSONL-14).
#[cfg(test)]
#[derive(Clone, Copy, Debug)]
pub(super) struct Rewrite {
    /// The journal's length when the snapshot was taken.
    pub base: u64,
    /// The snapshot's length: what the rewrite encoded and wrote.
    pub snapshot: u64,
    /// The lines acknowledged meanwhile, copied behind the snapshot.
    pub tail: u64,
}

impl Compaction {
    /// Starts rewriting the journal as `snapshot`, the state after its first `base` bytes (which
    /// passed `threshold`), of which `dead` are estimated dead; `None` if no thread could be
    /// started (the journal is left as it is).
    pub(super) fn start(
        file: &Arc<JournalFile>,
        snapshot: &dyn Fn() -> Snapshot,
        base: u64,
        threshold: u64,
        dead: u64,
    ) -> Option<Self> {
        // The one part of a rewrite that holds the state lock: logged with the rewrite.
        let taken = Instant::now();
        let snapshot = snapshot();
        let held = taken.elapsed();
        let shared = Arc::clone(file);
        let thread = std::thread::Builder::new()
            .name("jsonl-compaction".to_owned())
            .spawn(move || rewrite(&shared, snapshot, base, dead, held));
        match thread {
            Ok(thread) => Some(Self {
                thread,
                cap: threshold.saturating_mul(2),
                dead,
            }),
            Err(error) => {
                tracing::warn!(%error, "starting the JSONL compaction failed; appending to the journal as before");
                None
            }
        }
    }

    /// Whether a writer that left the journal at `length` may go on without waiting.
    pub(super) fn running_below(&self, length: u64) -> bool {
        !self.thread.is_finished() && length < self.cap
    }

    /// Waits until the rewrite is over (done, failed or given up); returns the dead bytes it
    /// left in the journal (all of them unless it was swapped in).
    pub(super) fn wait(self) -> u64 {
        match self.thread.join() {
            Ok(true) => 0,
            Ok(false) => self.dead,
            Err(_) => {
                tracing::error!(
                    "the JSONL compaction panicked; appending to the journal as before"
                );
                self.dead
            }
        }
    }
}

/// Whether the rewrite was swapped in.
fn rewrite(file: &JournalFile, snapshot: Snapshot, base: u64, dead: u64, held: Duration) -> bool {
    let temp = file.directory.join(COMPACTION_TEMP_FILE);
    let started = Instant::now();
    match write_and_swap(file, &temp, snapshot, base) {
        Ok(Some((from_bytes, to_bytes))) => {
            tracing::info!(
                from_bytes,
                to_bytes,
                estimated_dead_bytes = dead,
                snapshot_ms = held.as_millis() as u64,
                rewrite_ms = started.elapsed().as_millis() as u64,
                "compacted the JSONL journal"
            );
            true
        }
        // The store was closed meanwhile.
        Ok(None) => {
            let _ = fs::remove_file(&temp);
            false
        }
        Err(error) => {
            // A snapshot that could not be written (a full disk, JSONL-09) would otherwise keep
            // its space until the next start-up: give it back now. The journal is untouched.
            let _ = fs::remove_file(&temp);
            tracing::warn!(%error, "compacting the JSONL journal failed; appending to it as before");
            // Try again once it has grown as much again.
            file.compacted_len.store(
                file.acknowledged_len.load(Ordering::Acquire),
                Ordering::Release,
            );
            false
        }
    }
}

/// Writes the snapshot, then swaps it in; `None` if the store was closed before the swap.
/// Stays whole: the crash-safe sequence of a compaction (write, fsync, rename, fsync the
/// directory).
fn write_and_swap(
    file: &JournalFile,
    temp: &std::path::Path,
    snapshot: Snapshot,
    base: u64,
) -> StoreResult<Option<(u64, u64)>> {
    let (mut written, snapshot_len) = write_snapshot(temp, &snapshot)?;
    drop(snapshot);
    // The bulk is synced here, so the sync under the journal handle only covers the tail.
    written
        .sync_data()
        .map_err(|e| io_error("syncing", temp, &e))?;
    #[cfg(test)]
    if let Some(paused) = file
        .before_swap
        .lock()
        .ok()
        .and_then(|mut hook| hook.take())
    {
        let _ = paused.recv();
    }

    let mut journal = file.journal.lock().map_err(|_| poisoned())?;
    if journal.is_none() {
        return Ok(None);
    }
    let end = file.acknowledged_len.load(Ordering::Acquire);
    let path = &file.journal_path;
    // The lines acknowledged since the snapshot, and nothing a failed write left after them.
    let mut old = File::open(path).map_err(|e| io_error("reading", path, &e))?;
    old.seek(SeekFrom::Start(base))
        .map_err(|e| io_error("reading", path, &e))?;
    let copied = std::io::copy(&mut old.take(end.saturating_sub(base)), &mut written)
        .map_err(|e| io_error("writing", temp, &e))?;
    if copied != end.saturating_sub(base) {
        return Err(io_error(
            "reading",
            path,
            &std::io::Error::other("the journal is shorter than its acknowledged length"),
        ));
    }
    // A power cut after the rename must not find an empty or partial file there (JSONL-12).
    written
        .sync_all()
        .map_err(|e| io_error("syncing", temp, &e))?;
    drop(written);
    fs::rename(temp, path).map_err(|e| io_error("renaming the compacted journal to", path, &e))?;

    // From here on the old handle appends to a file that is no longer the journal: keep nothing
    // unless the new one is open and its name durable.
    let reopened = sync_directory(&file.directory).and_then(|()| {
        let reopened = OpenOptions::new()
            .append(true)
            .open(path)
            .map_err(|e| io_error("reopening", path, &e))?;
        let length = reopened
            .metadata()
            .map_err(|e| io_error("reopening", path, &e))?
            .len();
        Ok((reopened, length))
    });
    match reopened {
        Ok((reopened, length)) => {
            *journal = Some(reopened);
            file.acknowledged_len.store(length, Ordering::Release);
            // The snapshot, not the tail copied behind it: the tail is mostly what the next
            // snapshot drops, and counting it would raise every later threshold.
            file.compacted_len.store(snapshot_len, Ordering::Release);
            #[cfg(test)]
            {
                file.synced_len.store(length, Ordering::Release);
                let rewrite = Rewrite {
                    base,
                    snapshot: snapshot_len,
                    tail: copied,
                };
                file.rewrites.lock().map_err(|_| poisoned())?.push(rewrite);
            }
            Ok(Some((end, length)))
        }
        Err(error) => {
            tracing::error!(%error, "the compacted JSONL journal could not be reopened; the store stops taking writes");
            *journal = None;
            *file.lost.lock().map_err(|_| poisoned())? = Some(error.to_string());
            Ok(None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{numbered_event as event, record};
    use super::super::{JOURNAL_FILE, JsonlStore};
    use crate::options::StoreOptions;
    use crate::ports::{EventLog, EventReader, SessionRecords, StoreLifecycle};

    fn numbers(page: &crate::model::EventPage) -> Vec<u64> {
        page.events
            .iter()
            .map(|e| e.data["n"].as_u64().unwrap())
            .collect()
    }

    /// A rewrite paused between its snapshot and the swap holds nothing back: reads and writes
    /// go on, and the swapped-in journal carries the writes made meanwhile, across a restart.
    #[tokio::test]
    async fn a_rewrite_runs_beside_reads_and_writes_and_keeps_what_they_wrote() {
        let dir = tempfile::tempdir().unwrap();
        let options = StoreOptions {
            jsonl_compaction_min_bytes: 4096,
            max_events_per_session: 5,
            ..StoreOptions::default()
        };
        let store = JsonlStore::open(dir.path(), options.clone()).await.unwrap();
        let (release, paused) = std::sync::mpsc::channel();
        *store.backend().file.before_swap.lock().unwrap() = Some(paused);
        store.put_session(&record()).await.unwrap();
        let mut n = 0;
        while store.backend().compaction.lock().unwrap().is_none() {
            n += 1;
            store.append_event("t", event(n), None).await.unwrap();
        }
        let journal = dir.path().join(JOURNAL_FILE);
        let before = std::fs::metadata(&journal).unwrap().len();

        for _ in 0..3 {
            n += 1;
            store.append_event("t", event(n), None).await.unwrap();
        }
        let page = store.read_events("t", "s", n as u64 - 5, 10).await.unwrap();
        assert_eq!(
            numbers(&page),
            ((n - 4)..=n).map(|k| k as u64).collect::<Vec<_>>()
        );
        assert!(
            std::fs::metadata(&journal).unwrap().len() > before,
            "the writes went to the old journal while the rewrite waited"
        );

        release.send(()).unwrap();
        store.backend().wait_for_compaction();
        let after = std::fs::metadata(&journal).unwrap().len();
        assert!(
            after < before,
            "the rewrite replaced {before} bytes with {after}"
        );
        n += 1;
        store.append_event("t", event(n), None).await.unwrap();
        store.close().await.unwrap();

        let reopened = JsonlStore::open(dir.path(), options).await.unwrap();
        let page = reopened
            .read_events("t", "s", n as u64 - 5, 10)
            .await
            .unwrap();
        assert_eq!(
            numbers(&page),
            ((n - 4)..=n).map(|k| k as u64).collect::<Vec<_>>()
        );
        reopened.close().await.unwrap();
    }
}
