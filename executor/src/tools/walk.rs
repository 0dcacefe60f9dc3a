//! The bounded directory walk behind `Glob` and `Grep`.
//!
//! It never follows a symlink: a link inside a root may point anywhere, and a link loop
//! (`a/b -> ..`, or `x -> y -> x`) is then just an entry, so every directory is entered once,
//! through its real path. Directories are opened beneath the search root's descriptor without
//! following symlinks ([`open_beneath`]), so a directory swapped for a link while the walk runs
//! is not entered (TOOL-04). It skips `.git`, and it stops after [`MAX_VISITED`] entries so a
//! huge tree cannot stall the executor; a walk stopped that way says so, because a search over
//! part of a tree must not read as "nothing else matches".

use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};

use super::fs::{FsCapability, open_beneath};

/// Directory entries a walk looks at before it stops.
pub(super) const MAX_VISITED: usize = 100_000;

/// The regular files a walk found.
#[derive(Debug, Default)]
pub(super) struct Walk {
    /// The search root, opened: the files are opened beneath it.
    pub root: Option<OwnedFd>,
    /// (path relative to the root as shown, path relative to the root), sorted.
    pub files: Vec<(String, PathBuf)>,
    /// The directories under the root (not `.git`), the same way.
    pub dirs: Vec<(String, PathBuf)>,
    /// The walk stopped at [`MAX_VISITED`] entries: `files` is a part of the tree.
    pub stopped_early: bool,
}

fn open_dir(at: rustix::fd::BorrowedFd<'_>, relative: &Path) -> Option<Dir> {
    let fd = open_beneath(
        at,
        relative,
        OFlags::RDONLY | OFlags::DIRECTORY,
        Mode::empty(),
    )
    .ok()?;
    Dir::new(fd).ok()
}

/// Regular files under `root`, a path [`FsCapability::resolve`] answered.
pub(super) fn walk(fs: &FsCapability, root: &Path) -> Walk {
    let mut found = Walk::default();
    let opened = fs.open(
        root,
        "path",
        OFlags::RDONLY | OFlags::DIRECTORY,
        Mode::empty(),
    );
    let Ok(root) = opened else {
        return found;
    };
    let mut pending = vec![PathBuf::new()];
    let mut visited = 0;
    'dirs: while let Some(relative_dir) = pending.pop() {
        let Some(mut dir) = open_dir(root.as_fd(), &relative_dir) else {
            continue;
        };
        while let Some(entry) = dir.read() {
            let Ok(entry) = entry else {
                break;
            };
            let name = OsStr::from_bytes(entry.file_name().to_bytes());
            if name == "." || name == ".." {
                continue;
            }
            visited += 1;
            if visited > MAX_VISITED {
                found.stopped_early = true;
                break 'dirs;
            }
            // The entry's own type, never its target's: links are neither descended nor read.
            let kind = match entry.file_type() {
                FileType::Unknown => match dir
                    .fd()
                    .and_then(|fd| rustix::fs::statat(fd, name, AtFlags::SYMLINK_NOFOLLOW))
                {
                    Ok(stat) => FileType::from_raw_mode(stat.st_mode),
                    Err(_) => continue,
                },
                kind => kind,
            };
            let path = relative_dir.join(name);
            if kind == FileType::Directory && name != ".git" {
                found.dirs.push((path.display().to_string(), path.clone()));
                pending.push(path);
            } else if kind == FileType::RegularFile {
                found.files.push((path.display().to_string(), path));
            }
        }
    }
    found.files.sort();
    found.dirs.sort();
    found.root = Some(root);
    found
}
