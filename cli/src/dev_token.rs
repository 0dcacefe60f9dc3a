//! The development tokens: when no token is configured, `serve` generates one for the API and one
//! for the operator's admin API (when no operator token is configured either), keeps each in the
//! data directory (mode 0600) so they survive restarts, and prints the first and where the second
//! is (`agent-runtime admin` reads it from there).

use std::io::Write;
use std::path::Path;

use agent_runtime::ids::nanoid;
use agent_runtime::protocol::Scope;
use agent_runtime_gateway::TokenGrant;
use anyhow::Context;

pub const DEV_TENANT: &str = "dev";
pub const DEV_SUBJECT: &str = "developer";
const FILE_NAME: &str = "dev-token";
/// The operator token's file in the data directory.
pub const OPERATOR_FILE_NAME: &str = "operator-token";

/// Reads or creates the token file; `None` as directory means "do not persist" (memory store).
pub fn load_or_create(data_dir: Option<&Path>) -> anyhow::Result<String> {
    load_or_create_file(data_dir, FILE_NAME, "dev")
}

/// The development operator token, read or created like [`load_or_create`].
pub fn load_or_create_operator(data_dir: Option<&Path>) -> anyhow::Result<String> {
    load_or_create_file(data_dir, OPERATOR_FILE_NAME, "op")
}

fn load_or_create_file(
    data_dir: Option<&Path>,
    file_name: &str,
    prefix: &str,
) -> anyhow::Result<String> {
    let Some(dir) = data_dir else {
        return Ok(generate(prefix));
    };
    let path = dir.join(file_name);
    if let Ok(existing) = std::fs::read_to_string(&path) {
        let token = existing.trim().to_owned();
        if !token.is_empty() {
            return Ok(token);
        }
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let token = generate(prefix);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options
        .open(&path)
        .with_context(|| format!("writing {}", path.display()))?;
    writeln!(file, "{token}").with_context(|| format!("writing {}", path.display()))?;
    Ok(token)
}

/// A token kept in a file by `serve` (what `chat` and `admin` read when no token is given);
/// `variable` is the environment variable that would give it instead.
pub fn read(path: &Path, variable: &str) -> anyhow::Result<agent_runtime::secret::Secret> {
    let token = std::fs::read_to_string(path).map_err(|_| {
        anyhow::anyhow!(
            "no token: pass --token, set {variable}, or run from the directory where `agent-runtime serve` keeps {}",
            path.display()
        )
    })?;
    Ok(agent_runtime::secret::Secret::new(token.trim()))
}

/// The grant of the development token: tenant `dev`, subject `developer`, every scope.
pub fn grant(token: &str) -> TokenGrant {
    TokenGrant::for_token(token, DEV_TENANT, DEV_SUBJECT, &[Scope::SessionAdmin])
}

fn generate(prefix: &str) -> String {
    format!("{prefix}-{}{}", nanoid(), nanoid())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_is_created_once_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let first = load_or_create(Some(dir.path())).unwrap();
        let second = load_or_create(Some(dir.path())).unwrap();
        assert_eq!(first, second);
        assert!(first.starts_with("dev-"));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join(FILE_NAME))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }
}
