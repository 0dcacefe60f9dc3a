//! Reading and writing through the file tools touches regular files only (reliability TOOL-05): a
//! FIFO would block the tool until someone writes to it, and a device or a socket has no end. The
//! path is opened without blocking, beneath its root and without following any symlink
//! ([`FsCapability::open`], TOOL-04), and the checks are made on the opened file, so swapping a
//! special file, a hard link or a symlink in after the path was checked does not get around them.
//! Errors name the file as `shown`, the argument the model gave, never its real host path
//! (TOOL-26).

use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};

use super::fs::FsCapability;

/// The opened file `real` and its size.
fn open_regular(
    fs: &FsCapability,
    real: &Path,
    shown: &str,
    flags: OFlags,
) -> Result<(File, u64), String> {
    let mode = if flags.contains(OFlags::CREATE) {
        Mode::from_raw_mode(0o666)
    } else {
        Mode::empty()
    };
    let file = File::from(fs.open(real, shown, flags | OFlags::NONBLOCK, mode)?);
    let meta = file.metadata().map_err(|e| format!("{shown}: {e}"))?;
    checked_regular(Path::new(shown), &meta)?;
    Ok((file, meta.len()))
}

/// Refuses what file tools do not read or write: directories, special files, and files with more
/// than one hard link (another name of the file may lie outside the roots, TOOL-01/03).
pub(super) fn checked_regular(path: &Path, meta: &std::fs::Metadata) -> Result<(), String> {
    if meta.is_dir() {
        return Err(format!("Cannot read a directory: {}", path.display()));
    }
    if !meta.is_file() {
        return Err(format!(
            "{} is not a regular file (a FIFO, device or socket); file tools only use regular files",
            path.display()
        ));
    }
    if meta.nlink() > 1 {
        return Err(format!(
            "{} has {} hard links; another name of it may lie outside the allowed roots, so \
             file tools do not use it",
            path.display(),
            meta.nlink()
        ));
    }
    Ok(())
}

/// Reads all of an opened file of `size` bytes, refusing more than `max_bytes` (bounded even if
/// the file grows while it is read).
pub(super) fn read_bounded(
    path: &Path,
    file: File,
    size: u64,
    max_bytes: u64,
) -> Result<Vec<u8>, String> {
    let too_large = |size: u64| {
        format!(
            "{} is too large ({size} bytes; the limit is {max_bytes})",
            path.display()
        )
    };
    if size > max_bytes {
        return Err(too_large(size));
    }
    let mut bytes = Vec::with_capacity(size as usize);
    file.take(max_bytes + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if bytes.len() as u64 > max_bytes {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}

/// Reads the regular file `real` of at most `max_bytes`, as bytes.
pub async fn read_bytes(
    fs: FsCapability,
    real: PathBuf,
    shown: String,
    max_bytes: u64,
) -> Result<Vec<u8>, String> {
    tokio::task::spawn_blocking(move || {
        let (file, size) = open_regular(&fs, &real, &shown, OFlags::RDONLY)?;
        read_bounded(Path::new(&shown), file, size, max_bytes)
    })
    .await
    .map_err(|_| "reading the file was interrupted".to_owned())?
}

/// Reads the UTF-8 regular file `real` of at most `max_bytes`.
pub async fn read_text(
    fs: FsCapability,
    real: PathBuf,
    shown: String,
    max_bytes: u64,
) -> Result<String, String> {
    tokio::task::spawn_blocking(move || {
        let (file, size) = open_regular(&fs, &real, &shown, OFlags::RDONLY)?;
        let bytes = read_bounded(Path::new(&shown), file, size, max_bytes)?;
        String::from_utf8(bytes).map_err(|_| format!("{shown} is not a UTF-8 text file"))
    })
    .await
    .map_err(|_| "reading the file was interrupted".to_owned())?
}

/// Creates or replaces the content of the regular file `real`. The file is truncated only once
/// the opened file has passed the checks.
pub async fn write_text(
    fs: FsCapability,
    real: PathBuf,
    shown: String,
    content: String,
) -> Result<(), String> {
    write_bytes(fs, real, shown, content.into_bytes()).await
}

/// [`write_text`] for bytes.
pub async fn write_bytes(
    fs: FsCapability,
    real: PathBuf,
    shown: String,
    content: Vec<u8>,
) -> Result<(), String> {
    tokio::task::spawn_blocking(move || {
        let (mut file, _) = open_regular(&fs, &real, &shown, OFlags::WRONLY | OFlags::CREATE)?;
        file.set_len(0)
            .and_then(|()| file.write_all(&content))
            .map_err(|e| format!("{shown}: {e}"))
    })
    .await
    .map_err(|_| "writing the file was interrupted".to_owned())?
}
