//! The bounded directory walk behind `Glob` and `Grep`.
//!
//! It never follows a symlink: a link inside a root may point anywhere, and a link loop
//! (`a/b -> ..`, or `x -> y -> x`) is then just an entry, so every directory is entered once,
//! through its real path. It skips `.git`, and it stops after [`MAX_VISITED`] entries so a huge
//! tree cannot stall the executor; a walk stopped that way says so, because a search over part
//! of a tree must not read as "nothing else matches".

use std::path::{Path, PathBuf};

/// Directory entries a walk looks at before it stops.
pub(super) const MAX_VISITED: usize = 100_000;

/// The regular files a walk found.
#[derive(Debug, Default)]
pub(super) struct Walk {
    /// (path relative to the root, real path), sorted.
    pub files: Vec<(String, PathBuf)>,
    /// The walk stopped at [`MAX_VISITED`] entries: `files` is a part of the tree.
    pub stopped_early: bool,
}

/// Regular files under `root`.
pub(super) fn walk(root: &Path) -> Walk {
    let mut found = Walk::default();
    let mut pending = vec![root.to_path_buf()];
    let mut visited = 0;
    'dirs: while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            visited += 1;
            if visited > MAX_VISITED {
                found.stopped_early = true;
                break 'dirs;
            }
            // `file_type` does not follow symlinks: links are neither descended nor read.
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let path = entry.path();
            if kind.is_dir() && entry.file_name() != ".git" {
                pending.push(path);
            } else if kind.is_file() {
                let relative = path
                    .strip_prefix(root)
                    .unwrap_or(&path)
                    .display()
                    .to_string();
                found.files.push((relative, path));
            }
        }
    }
    found.files.sort();
    found
}
