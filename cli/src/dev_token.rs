//! The development token: when no token is configured, `serve` generates one, keeps it in the data
//! directory (mode 0600) so it survives restarts, and prints it.

use std::io::Write;
use std::path::Path;

use agent_runtime::ids::nanoid;
use agent_runtime::protocol::Scope;
use agent_runtime_gateway::TokenGrant;
use anyhow::Context;

pub const DEV_TENANT: &str = "dev";
pub const DEV_SUBJECT: &str = "developer";
const FILE_NAME: &str = "dev-token";

/// Reads or creates the token file; `None` as directory means "do not persist" (memory store).
pub fn load_or_create(data_dir: Option<&Path>) -> anyhow::Result<String> {
    let Some(dir) = data_dir else {
        return Ok(generate());
    };
    let path = dir.join(FILE_NAME);
    if let Ok(existing) = std::fs::read_to_string(&path) {
        let token = existing.trim().to_owned();
        if !token.is_empty() {
            return Ok(token);
        }
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let token = generate();
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

/// The grant of the development token: tenant `dev`, subject `developer`, every scope.
pub fn grant(token: &str) -> TokenGrant {
    TokenGrant::for_token(token, DEV_TENANT, DEV_SUBJECT, &[Scope::SessionAdmin])
}

fn generate() -> String {
    format!("dev-{}{}", nanoid(), nanoid())
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
