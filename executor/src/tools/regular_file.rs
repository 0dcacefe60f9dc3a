//! Reading and writing through the file tools touches regular files only (reliability TOOL-05): a
//! FIFO would block the tool until someone writes to it, and a device or a socket has no end. The
//! path is opened without blocking and the check is made on the opened file, so swapping a special
//! file in after the path was checked does not get around it.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The opened file and its size.
fn open_regular(path: &Path, options: &mut OpenOptions) -> Result<(File, u64), String> {
    let file = options
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let meta = file
        .metadata()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if meta.is_dir() {
        return Err(format!("{} is a directory", path.display()));
    }
    if !meta.is_file() {
        return Err(format!(
            "{} is not a regular file (a FIFO, device or socket); file tools only use regular files",
            path.display()
        ));
    }
    Ok((file, meta.len()))
}

/// Reads a UTF-8 regular file of at most `max_bytes`.
pub async fn read_text(path: PathBuf, max_bytes: u64) -> Result<String, String> {
    tokio::task::spawn_blocking(move || {
        let (file, size) = open_regular(&path, OpenOptions::new().read(true))?;
        let too_large = |size: u64| {
            format!(
                "{} is too large ({size} bytes; the limit is {max_bytes})",
                path.display()
            )
        };
        if size > max_bytes {
            return Err(too_large(size));
        }
        // Bounded even if the file grows while it is read.
        let mut bytes = Vec::with_capacity(size as usize);
        file.take(max_bytes + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        if bytes.len() as u64 > max_bytes {
            return Err(too_large(bytes.len() as u64));
        }
        String::from_utf8(bytes).map_err(|_| format!("{} is not a UTF-8 text file", path.display()))
    })
    .await
    .map_err(|_| "reading the file was interrupted".to_owned())?
}

/// Creates or replaces a regular file's content.
pub async fn write_text(path: PathBuf, content: String) -> Result<(), String> {
    tokio::task::spawn_blocking(move || {
        let (mut file, _) = open_regular(
            &path,
            OpenOptions::new().write(true).create(true).truncate(true),
        )?;
        file.write_all(content.as_bytes())
            .map_err(|e| format!("{}: {e}", path.display()))
    })
    .await
    .map_err(|_| "writing the file was interrupted".to_owned())?
}
