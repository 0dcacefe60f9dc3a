//! The audit writer thread and its sinks: stdout, or a file rotated by size.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::Receiver;

use super::{AuditConfig, AuditTarget};

pub(super) enum Sink {
    Stdout,
    File(RotatingFile),
}

impl Sink {
    pub fn open(config: &AuditConfig) -> std::io::Result<Sink> {
        match &config.target {
            AuditTarget::Stdout => Ok(Sink::Stdout),
            AuditTarget::File(path) => Ok(Sink::File(RotatingFile::open(
                path.clone(),
                config.max_bytes,
                config.max_files,
            )?)),
        }
    }

    fn write_batch(&mut self, lines: &[String]) -> std::io::Result<()> {
        match self {
            Sink::Stdout => {
                let mut out = std::io::stdout().lock();
                for line in lines {
                    writeln!(out, "{line}")?;
                }
                out.flush()
            }
            Sink::File(file) => {
                for line in lines {
                    file.write_line(line)?;
                }
                file.flush()
            }
        }
    }
}

/// Writes whatever is queued, in batches, until every sender is gone; then flushes and returns.
pub(super) fn run(receiver: Receiver<String>, mut sink: Sink) {
    let mut failing = false;
    let mut lost: u64 = 0;
    while let Ok(first) = receiver.recv() {
        let mut batch = vec![first];
        batch.extend(receiver.try_iter().take(1023));
        match sink.write_batch(&batch) {
            Ok(()) if failing => {
                failing = false;
                tracing::warn!(lost, "the audit log is writable again");
            }
            Ok(()) => {}
            Err(error) => {
                lost += batch.len() as u64;
                if !failing {
                    failing = true;
                    tracing::warn!(%error, "writing the audit log failed; records are lost until it recovers");
                }
            }
        }
    }
}

/// An append-only file that rotates before it would pass `max_bytes`.
pub(super) struct RotatingFile {
    path: PathBuf,
    max_bytes: u64,
    max_files: usize,
    /// `None` after a failure: the next write reopens the file.
    file: Option<BufWriter<File>>,
    size: u64,
}

impl RotatingFile {
    fn open(path: PathBuf, max_bytes: u64, max_files: usize) -> std::io::Result<Self> {
        let (file, size) = open_append(&path)?;
        Ok(Self {
            path,
            max_bytes: max_bytes.max(1),
            max_files,
            file: Some(file),
            size,
        })
    }

    fn write_line(&mut self, line: &str) -> std::io::Result<()> {
        let needed = line.len() as u64 + 1;
        if self.size > 0 && self.size + needed > self.max_bytes {
            self.rotate()?;
        }
        let file = match &mut self.file {
            Some(file) => file,
            None => {
                let (file, size) = open_append(&self.path)?;
                self.size = size;
                self.file.insert(file)
            }
        };
        let written = file
            .write_all(line.as_bytes())
            .and_then(|()| file.write_all(b"\n"));
        if written.is_err() {
            self.file = None;
        }
        written?;
        self.size += needed;
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match &mut self.file {
            Some(file) => file.flush(),
            None => Ok(()),
        }
    }

    /// `PATH` → `PATH.1` → … → `PATH.max_files`; the oldest is deleted.
    fn rotate(&mut self) -> std::io::Result<()> {
        if let Some(mut file) = self.file.take() {
            file.flush()?;
        }
        if self.max_files == 0 {
            remove_if_present(&self.path)?;
        } else {
            remove_if_present(&numbered(&self.path, self.max_files))?;
            for index in (1..self.max_files).rev() {
                rename_if_present(
                    &numbered(&self.path, index),
                    &numbered(&self.path, index + 1),
                )?;
            }
            rename_if_present(&self.path, &numbered(&self.path, 1))?;
        }
        let (file, size) = open_append(&self.path)?;
        self.file = Some(file);
        self.size = size;
        Ok(())
    }
}

pub(super) fn numbered(path: &Path, index: usize) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{index}"));
    PathBuf::from(name)
}

fn open_append(path: &Path) -> std::io::Result<(BufWriter<File>, u64)> {
    let mut options = OpenOptions::new();
    options.create(true).append(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // Who did what, per tenant: readable by the server's user only.
        options.mode(0o600);
    }
    let file = options.open(path)?;
    let size = file.metadata()?.len();
    Ok((BufWriter::new(file), size))
}

fn remove_if_present(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => Err(error),
        _ => Ok(()),
    }
}

fn rename_if_present(from: &Path, to: &Path) -> std::io::Result<()> {
    match std::fs::rename(from, to) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => Err(error),
        _ => Ok(()),
    }
}
