//! The filesystem capability (`roots`, `cwd`) and path safety for the path-taking tools.
//!
//! A path is resolved the way the kernel would walk it: component by component, every symlink
//! met on the way replaced by its canonical target, `..` applied to the already-resolved (real)
//! directory. Only the fully resolved path is compared with the roots, and the tools then use
//! that resolved path, never the text the model wrote, so what was checked is what is opened.
//! A path may end in components that do not exist yet (a new file); `..` after such a
//! component is refused because the kernel would refuse it too.
//!
//! Known limit: a symlink swapped in between the check and the open is not detected (no
//! `openat2(RESOLVE_BENEATH)`); the sandbox is the defence against a hostile local process.

use std::io::ErrorKind;
use std::path::{Component, Path, PathBuf};

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
    /// exist and be directories; `cwd` must lie inside a root.
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

    /// The real path `raw` names, if it is inside a root.
    pub fn resolve(&self, raw: &str) -> Result<PathBuf, String> {
        if raw.contains('\0') {
            return Err("the path contains a NUL byte".to_owned());
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
                        return Err(format!("{raw}: `..` after a directory that does not exist"));
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
                                format!("{raw}: a symlink on the path points nowhere")
                            })?;
                        }
                        Ok(_) => {}
                        Err(error) if error.kind() == ErrorKind::NotFound => missing = true,
                        Err(error) => return Err(format!("{raw}: {error}")),
                    }
                }
            }
        }
        if !self.contains(&resolved) {
            return Err(format!(
                "{raw} is outside the allowed roots (resolved to {})",
                resolved.display()
            ));
        }
        Ok(resolved)
    }

    /// Whether a real path lies inside a root.
    pub fn contains(&self, real: &Path) -> bool {
        self.roots.iter().any(|root| real.starts_with(root))
    }
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
            fs.resolve("sub/new.txt").unwrap(),
            real_root.join("sub/new.txt")
        );
        assert_eq!(fs.resolve("in/../x").unwrap(), real_root.join("x"));
        assert_eq!(fs.resolve("./sub/./a").unwrap(), real_root.join("sub/a"));
        for bad in [
            "../x".to_owned(),
            "sub/../../x".to_owned(),
            "/etc/passwd".to_owned(),
            "out/secret".to_owned(),
            "out/new".to_owned(),
            "nothere/../../x".to_owned(),
            outside.path().join("secret").display().to_string(),
        ] {
            assert!(fs.resolve(&bad).is_err(), "{bad} must be refused");
        }
    }
}
