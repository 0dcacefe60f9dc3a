//! The filesystem capability (`roots`, `cwd`) and path safety for the path-taking tools.
//!
//! A path is resolved the way the kernel would walk it: component by component, every symlink
//! met on the way replaced by its canonical target, `..` applied to the already-resolved (real)
//! directory. Only the fully resolved path is compared with the roots, and the tools then use
//! that resolved path, never the text the model wrote, so what was checked is what is opened.
//! A path may end in components that do not exist yet (a new file); `..` after such a
//! component is refused because the kernel would refuse it too.
//!
//! Opening is race-free (reliability TOOL-04): the tools never open the checked path by name.
//! [`FsCapability::open`] opens it relative to its root's directory with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`. The resolved path is canonical, so it has no
//! symlink in it: one swapped in between the check and the open (a file or any directory on the
//! way replaced by a link, even one pointing back inside) makes the open fail instead of being
//! followed, and nothing can lead the open above the root. Directories a Write creates are made
//! one component at a time the same way ([`FsCapability::create_dirs`]), and the searches walk
//! and read beneath their directory's descriptor ([`open_beneath`]).

use std::io::ErrorKind;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

/// Longest path the tools take (Linux `PATH_MAX`).
const MAX_PATH_BYTES: usize = 4096;

/// Where file tools may look and write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FsCapability {
    /// Canonical root directories.
    roots: Vec<PathBuf>,
    /// Canonical directory relative paths start from.
    cwd: PathBuf,
}

impl FsCapability {
    /// Canonicalises the roots and the working directory (default: the first root), which must
    /// exist and be directories; `cwd` must lie inside a root. A root containing `/proc` (`/`
    /// itself) is refused.
    pub fn new(roots: &[PathBuf], cwd: Option<&Path>) -> Result<Self, String> {
        if roots.is_empty() {
            return Err("a filesystem capability needs at least one root".to_owned());
        }
        let mut canonical = Vec::with_capacity(roots.len());
        for root in roots {
            let real = std::fs::canonicalize(root)
                .map_err(|e| format!("filesystem root {}: {e}", root.display()))?;
            if !real.is_dir() {
                return Err(format!(
                    "filesystem root {} is not a directory",
                    root.display()
                ));
            }
            // `/proc` holds the executor's own environment, memory and open files
            // (`/proc/self/environ`, `/proc/<pid>/mem`): never under a root (SEC-06).
            if Path::new("/proc").starts_with(&real) {
                return Err(format!(
                    "filesystem root {} contains /proc, where the executor's own environment \
                     and memory are readable; choose a directory for the tools' files",
                    root.display()
                ));
            }
            canonical.push(real);
        }
        let cwd = match cwd {
            Some(cwd) => std::fs::canonicalize(cwd)
                .map_err(|e| format!("filesystem cwd {}: {e}", cwd.display()))?,
            None => canonical[0].clone(),
        };
        if !canonical.iter().any(|root| cwd.starts_with(root)) {
            return Err(format!(
                "filesystem cwd {} is outside every root",
                cwd.display()
            ));
        }
        Ok(Self {
            roots: canonical,
            cwd,
        })
    }

    pub fn cwd(&self) -> &Path {
        &self.cwd
    }

    pub fn roots(&self) -> &[PathBuf] {
        &self.roots
    }

    /// The real path `raw` (the argument `field`) names, if it is inside a root. Errors name the
    /// argument as given, never what it resolved to: that would show where the roots are on the
    /// host, where a symlink leads, or the server's PID (`/proc/self`) (TOOL-26).
    pub fn resolve(&self, field: &str, raw: &str) -> Result<PathBuf, String> {
        if raw.contains('\0') {
            return Err(format!("{field} contains a NUL byte"));
        }
        // The kernel's PATH_MAX; the error must not quote a 10 MB path back (FUZZ-10).
        if raw.len() > MAX_PATH_BYTES {
            return Err(format!(
                "{field} is {} bytes long; the limit is {MAX_PATH_BYTES} bytes",
                raw.len()
            ));
        }
        let path = Path::new(raw);
        let absolute = if path.is_absolute() {
            path.to_path_buf()
        } else {
            self.cwd.join(path)
        };
        let mut resolved = PathBuf::from("/");
        let mut missing = false;
        for component in absolute.components() {
            match component {
                Component::Prefix(_) | Component::RootDir | Component::CurDir => {}
                Component::ParentDir => {
                    if missing {
                        return Err(format!(
                            "{field} {raw}: `..` after a directory that does not exist"
                        ));
                    }
                    resolved.pop();
                }
                Component::Normal(name) => {
                    resolved.push(name);
                    if missing {
                        continue;
                    }
                    match std::fs::symlink_metadata(&resolved) {
                        Ok(meta) if meta.file_type().is_symlink() => {
                            resolved = std::fs::canonicalize(&resolved).map_err(|_| {
                                format!("{field} {raw}: a symlink on the path points nowhere")
                            })?;
                        }
                        Ok(_) => {}
                        Err(error) if error.kind() == ErrorKind::NotFound => missing = true,
                        Err(error) => return Err(format!("{field} {raw}: {error}")),
                    }
                }
            }
        }
        if !self.contains(&resolved) {
            return Err(format!("{field} {raw} is outside the allowed roots"));
        }
        Ok(resolved)
    }

    /// Whether a real path lies inside a root.
    pub fn contains(&self, real: &Path) -> bool {
        self.roots.iter().any(|root| real.starts_with(root))
    }

    /// The root `real` lies in, opened, and `real` relative to it. Errors name `real` as `shown`.
    fn split<'a>(&self, real: &'a Path, shown: &str) -> Result<(OwnedFd, &'a Path), String> {
        let Some((root, relative)) = self
            .roots
            .iter()
            .find_map(|root| Some((root, real.strip_prefix(root).ok()?)))
        else {
            return Err(format!("{shown} is outside the allowed roots"));
        };
        // The roots are canonical and set by the operator, not by the model.
        let dir = rustix::fs::open(
            root,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| format!("filesystem root {}: {e}", root.display()))?;
        Ok((dir, relative))
    }

    /// Opens `real`, a path [`resolve`](Self::resolve) answered, beneath its root (see the module
    /// documentation). `flags` get `O_CLOEXEC` and `O_NOFOLLOW` added. Errors name the path as
    /// `shown`: the argument the model gave.
    pub fn open(
        &self,
        real: &Path,
        shown: &str,
        flags: OFlags,
        mode: Mode,
    ) -> Result<OwnedFd, String> {
        let (root, relative) = self.split(real, shown)?;
        open_beneath(root.as_fd(), relative, flags, mode).map_err(|e| open_error(shown, e))
    }

    /// Creates the directory `real` (a path [`resolve`](Self::resolve) answered) and its missing
    /// parents, one component at a time beneath its root, never through a symlink. Errors name
    /// it as `shown`.
    pub fn create_dirs(&self, real: &Path, shown: &str) -> Result<(), String> {
        let (mut dir, relative) = self.split(real, shown)?;
        for component in relative.components() {
            let Component::Normal(name) = component else {
                return Err(format!("{shown}: not a canonical path"));
            };
            match rustix::fs::mkdirat(&dir, name, Mode::from_raw_mode(0o777)) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(e) => return Err(format!("{shown}: {e}")),
            }
            dir = open_beneath(
                dir.as_fd(),
                Path::new(name),
                OFlags::PATH | OFlags::DIRECTORY,
                Mode::empty(),
            )
            .map_err(|e| open_error(shown, e))?;
        }
        Ok(())
    }
}

/// The answer to a failed open beneath a root: what the kernel refused, in the tools' words.
fn open_error(shown: &str, error: Errno) -> String {
    match error {
        Errno::XDEV => {
            format!("{shown} is outside the allowed roots (it changed while it was opened)")
        }
        Errno::LOOP => format!(
            "{shown}: a symlink appeared on the path after it was checked; file tools do not \
             follow it"
        ),
        error => format!("{shown}: {}", std::io::Error::from(error)),
    }
}

/// Opens `relative` beneath the directory `dir` with `openat2(RESOLVE_BENEATH |
/// RESOLVE_NO_SYMLINKS)` (no symlink is followed, not even the last component, and nothing
/// leads above `dir`); an empty path opens `dir` itself. `flags` get `O_CLOEXEC` and
/// `O_NOFOLLOW` added. Where `openat2` is unavailable (before Linux 5.6, or refused by a seccomp
/// profile) it walks the components with `O_NOFOLLOW` from `dir` instead, which is as strict for
/// the canonical paths the tools open (no `..`, no symlinks).
pub(crate) fn open_beneath(
    dir: rustix::fd::BorrowedFd<'_>,
    relative: &Path,
    flags: OFlags,
    mode: Mode,
) -> Result<OwnedFd, Errno> {
    let relative = if relative.as_os_str().is_empty() {
        Path::new(".")
    } else {
        relative
    };
    let flags = flags | OFlags::CLOEXEC | OFlags::NOFOLLOW;
    let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS;
    // EAGAIN: a rename elsewhere on the system raced the lookup; the kernel asks to try again.
    for _ in 0..64 {
        match rustix::fs::openat2(dir, relative, flags, mode, resolve) {
            Err(Errno::AGAIN) => continue,
            // No `openat2` in this kernel, or a seccomp profile that refuses it (older container
            // runtimes answer EPERM for system calls they do not know).
            Err(Errno::NOSYS | Errno::PERM) => {
                return open_by_components(dir, relative, flags, mode);
            }
            other => return other,
        }
    }
    Err(Errno::AGAIN)
}

/// [`open_beneath`] without `openat2`: one `openat(O_NOFOLLOW)` per component.
fn open_by_components(
    dir: rustix::fd::BorrowedFd<'_>,
    relative: &Path,
    flags: OFlags,
    mode: Mode,
) -> Result<OwnedFd, Errno> {
    let flags = flags | OFlags::CLOEXEC | OFlags::NOFOLLOW;
    let names: Vec<_> = relative
        .components()
        .filter(|c| !matches!(c, Component::CurDir))
        .map(|c| match c {
            Component::Normal(name) => Ok(name),
            // `..` or an absolute path would lead above `dir`.
            _ => Err(Errno::XDEV),
        })
        .collect::<Result<_, _>>()?;
    let Some((last, parents)) = names.split_last() else {
        return rustix::fs::openat(dir, ".", flags, mode);
    };
    let mut current: Option<OwnedFd> = None;
    for name in parents {
        let at = current.as_ref().map_or(dir, |fd| fd.as_fd());
        current = Some(rustix::fs::openat(
            at,
            *name,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?);
    }
    let at = current.as_ref().map_or(dir, |fd| fd.as_fd());
    rustix::fs::openat(at, *last, flags, mode)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_inside_and_refuses_escapes() {
        let outside = tempfile::tempdir().unwrap();
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("sub")).unwrap();
        std::fs::write(outside.path().join("secret"), "x").unwrap();
        std::os::unix::fs::symlink(outside.path(), root.path().join("out")).unwrap();
        std::os::unix::fs::symlink(root.path().join("sub"), root.path().join("in")).unwrap();
        let fs = FsCapability::new(&[root.path().to_path_buf()], None).unwrap();
        let real_root = std::fs::canonicalize(root.path()).unwrap();

        assert_eq!(
            fs.resolve("file_path", "sub/new.txt").unwrap(),
            real_root.join("sub/new.txt")
        );
        assert_eq!(
            fs.resolve("file_path", "in/../x").unwrap(),
            real_root.join("x")
        );
        assert_eq!(
            fs.resolve("file_path", "./sub/./a").unwrap(),
            real_root.join("sub/a")
        );
        for bad in [
            "../x".to_owned(),
            "sub/../../x".to_owned(),
            "/etc/passwd".to_owned(),
            "out/secret".to_owned(),
            "out/new".to_owned(),
            "nothere/../../x".to_owned(),
            outside.path().join("secret").display().to_string(),
        ] {
            assert!(
                fs.resolve("file_path", &bad).is_err(),
                "{bad} must be refused"
            );
        }
    }

    /// The open beneath a root, with `openat2` and with its per-component fallback, and the
    /// directory creation of Write: a symlink anywhere on the path is refused, even one leading
    /// back inside, and nothing leads above the root (TOOL-04).
    #[test]
    fn opens_and_creates_beneath_a_root_without_following_symlinks() {
        let outside = tempfile::tempdir().unwrap();
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("sub")).unwrap();
        std::fs::write(root.path().join("sub/a.txt"), "a").unwrap();
        std::fs::write(outside.path().join("secret"), "x").unwrap();
        std::os::unix::fs::symlink(outside.path(), root.path().join("out")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), root.path().join("s")).unwrap();
        std::os::unix::fs::symlink(root.path().join("sub"), root.path().join("in")).unwrap();
        std::os::unix::fs::symlink("sub/a.txt", root.path().join("a-link")).unwrap();
        let dir =
            rustix::fs::open(root.path(), OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap();
        type Opener = fn(rustix::fd::BorrowedFd<'_>, &Path, OFlags, Mode) -> Result<OwnedFd, Errno>;
        for (name, open) in [
            ("openat2", open_beneath as Opener),
            ("per component", open_by_components as Opener),
        ] {
            let read =
                |path: &str| open(dir.as_fd(), Path::new(path), OFlags::RDONLY, Mode::empty());
            assert!(read("sub/a.txt").is_ok(), "{name}");
            assert!(read("").is_ok(), "{name}: the directory itself");
            for refused in [
                "out/secret",
                "s",
                "in/a.txt",
                "a-link",
                "../x",
                "sub/../../x",
                "/etc/passwd",
            ] {
                assert!(read(refused).is_err(), "{name}: {refused}");
            }
        }

        let fs = FsCapability::new(&[root.path().to_path_buf()], None).unwrap();
        let real_root = std::fs::canonicalize(root.path()).unwrap();
        fs.create_dirs(&real_root.join("new/deeper"), "new/deeper")
            .unwrap();
        assert!(real_root.join("new/deeper").is_dir());
        // Refused as "not a directory": the link itself, not its target, is what was opened.
        fs.create_dirs(&real_root.join("out/planted"), "out/planted")
            .unwrap_err();
        assert!(!outside.path().join("planted").exists());
        let error = fs
            .open(&real_root.join("s"), "s", OFlags::RDONLY, Mode::empty())
            .unwrap_err();
        assert!(error.contains("a symlink appeared"), "{error}");
        let error = fs
            .open(
                Path::new("/etc/passwd"),
                "/etc/passwd",
                OFlags::RDONLY,
                Mode::empty(),
            )
            .unwrap_err();
        assert!(error.contains("outside the allowed roots"), "{error}");
    }
}
