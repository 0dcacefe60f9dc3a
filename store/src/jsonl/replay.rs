//! Start-up of the JSONL store: parsing `server-store.jsonl` into journal entries, replaying them,
//! and compacting the file to a snapshot.
//!
//! Only newline-terminated lines are committed (a line is written whole, `\n` included, in one
//! write): an unterminated last line is a write torn by a crash, so it is skipped, and the
//! compaction that follows removes it from the file (decision S7). Any other damage is
//! `RUNTIME_STORE_CORRUPT_JOURNAL` naming `file:line`.

use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::path::Path;

use serde_json::Value;

use crate::error::{RuntimeErrorCode, StoreError, StoreResult};
use crate::journal::{Snapshot, decode_line};
use crate::memory::State;

const DELETE_HINT: &str = "Delete the directory to start from an empty store.";

pub(super) fn io_error(action: &str, path: &Path, error: &std::io::Error) -> StoreError {
    StoreError::Backend {
        message: format!("{action} {} failed: {error}", path.display()),
        retry_safe: false,
    }
}

fn corrupt(path: &Path, line: usize, what: &str) -> StoreError {
    StoreError::runtime(
        RuntimeErrorCode::CorruptJournal,
        format!("{}:{line} {what}. {DELETE_HINT}", path.display()),
    )
}

/// Test builds only: the durability steps of start-up, per store directory, in order (JSONL-07).
#[cfg(test)]
pub(super) static DURABLE_STEPS: std::sync::Mutex<Vec<(std::path::PathBuf, &'static str)>> =
    std::sync::Mutex::new(Vec::new());

#[cfg(test)]
pub(super) fn durable_step(directory: &Path, step: &'static str) {
    if let Ok(mut steps) = DURABLE_STEPS.lock() {
        steps.push((directory.to_path_buf(), step));
    }
}

#[cfg(not(test))]
pub(super) fn durable_step(_directory: &Path, _step: &'static str) {}

/// The longest journal line (one committed record) this store writes or reads back. A longer
/// line is refused when written and is corruption when read: start-up never holds more than one
/// line of this size in memory, however large a damaged file is.
pub(super) const MAX_RECORD_BYTES: usize = 64 << 20;

/// Reads the journal (a missing file is an empty journal) and replays it into a fresh state.
pub(super) fn replay(path: &Path, retention: u64) -> StoreResult<State> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(error) if error.kind() == ErrorKind::NotFound => return Ok(State::default()),
        Err(error) => return Err(io_error("reading", path, &error)),
    };
    replay_lines(path, BufReader::new(file), retention, MAX_RECORD_BYTES)
}

/// Replays the first `length` bytes of the journal: the acknowledged prefix, after a failed
/// append (see `JsonlBackend::durable_state`).
pub(super) fn replay_prefix(path: &Path, length: u64, retention: u64) -> StoreResult<State> {
    let file = File::open(path).map_err(|error| io_error("reading", path, &error))?;
    let size = file
        .metadata()
        .map_err(|error| io_error("reading", path, &error))?
        .len();
    if size < length {
        return Err(StoreError::Backend {
            message: format!(
                "{} is shorter than its acknowledged length {length}",
                path.display()
            ),
            retry_safe: false,
        });
    }
    let prefix = BufReader::new(file).take(length);
    replay_lines(path, prefix, retention, MAX_RECORD_BYTES)
}

/// Replays journal lines into a fresh state, one line in memory at a time; `path` only names
/// the file in errors.
pub(super) fn replay_lines(
    path: &Path,
    mut reader: impl BufRead,
    retention: u64,
    max_line: usize,
) -> StoreResult<State> {
    let mut state = State::default();
    let mut piece = Vec::new();
    for line in 1.. {
        piece.clear();
        // At most one byte past the cap: enough to tell that the line is too long.
        let limit = u64::try_from(max_line)
            .unwrap_or(u64::MAX)
            .saturating_add(2);
        let read = (&mut reader)
            .take(limit)
            .read_until(b'\n', &mut piece)
            .map_err(|error| io_error("reading", path, &error))?;
        if read == 0 {
            break;
        }
        let Some(record) = piece.strip_suffix(b"\n") else {
            if piece.len() > max_line {
                let what = format!("is longer than the largest record ({max_line} bytes)");
                return Err(corrupt(path, line, &what));
            }
            // Only newline-terminated lines were committed: this is a write torn by a crash.
            tracing::warn!(
                journal = %format!("{}:{line}", path.display()),
                "skipping the unterminated last line of the journal (a write torn by a crash); compaction removes it"
            );
            break;
        };
        if record.len() > max_line {
            let what = format!("is longer than the largest record ({max_line} bytes)");
            return Err(corrupt(path, line, &what));
        }
        if record.is_empty() {
            continue;
        }
        let Ok(value) = serde_json::from_slice::<Value>(record) else {
            return Err(corrupt(path, line, "is not valid JSON"));
        };
        let Some(entries) = decode_line(value) else {
            return Err(corrupt(path, line, "is not a known journal entry"));
        };
        for entry in entries {
            if let Err(detail) = state.apply(entry, retention) {
                let what = format!("is not a known journal entry ({detail})");
                return Err(corrupt(path, line, &what));
            }
        }
    }
    Ok(state)
}

/// Writes `snapshot` (one entry per line) to a new or truncated `temp` file, unsynced; returns the
/// open file and the snapshot's length.
pub(super) fn write_snapshot(temp: &Path, snapshot: &Snapshot) -> StoreResult<(File, u64)> {
    let mut text = Vec::new();
    snapshot
        .encode(&mut text)
        .map_err(|error| StoreError::Backend {
            message: format!("encoding a journal entry failed: {error}"),
            retry_safe: false,
        })?;
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(temp)
        .map_err(|e| io_error("creating", temp, &e))?;
    file.write_all(&text)
        .map_err(|e| io_error("writing", temp, &e))?;
    Ok((file, text.len() as u64))
}

/// Makes a rename inside `directory` durable.
pub(super) fn sync_directory(directory: &Path) -> StoreResult<()> {
    File::open(directory)
        .and_then(|dir| dir.sync_all())
        .map_err(|e| io_error("syncing", directory, &e))
}

/// Atomically replaces the journal with `snapshot`: temp file, fsync, rename, fsync directory.
///
/// A crash at any step leaves exactly one version under the journal's name: before the rename
/// the old journal (the temp file is never read, and is truncated by the next compaction), after
/// it the new one. The fsync before the rename keeps a power cut from putting an empty or partial
/// snapshot under that name (JSONL-12).
pub(super) fn compact(directory: &Path, path: &Path, snapshot: &Snapshot) -> StoreResult<()> {
    let temp = directory.join(super::COMPACTION_TEMP_FILE);
    let written = write_snapshot(&temp, snapshot)
        .and_then(|(file, _)| {
            file.sync_all()
                .map_err(|e| io_error("syncing", &temp, &e))?;
            durable_step(directory, "snapshot synced");
            Ok(())
        })
        .and_then(|()| {
            fs::rename(&temp, path)
                .map_err(|e| io_error("renaming the compacted journal to", path, &e))?;
            durable_step(directory, "snapshot renamed over the journal");
            Ok(())
        });
    if let Err(error) = written {
        // A snapshot that could not be written (a full disk, JSONL-09) would otherwise keep its
        // space until the next start-up: give it back now. The journal itself is untouched.
        let _ = fs::remove_file(&temp);
        return Err(error);
    }
    sync_directory(directory)?;
    durable_step(directory, "directory synced");
    Ok(())
}
