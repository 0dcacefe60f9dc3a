//! The `[auth]` and `[audit]` sections of the configuration file (reference in the README).
//!
//! Secrets never sit in the TOML: the HS256 secret is named by `secret_env` (a variable's name)
//! or `secret_file`, and is read when the server starts.

use std::path::PathBuf;
use std::time::Duration;

use agent_runtime::protocol::Scope;
use agent_runtime_gateway::auth::{
    JwtAlgorithm, JwtConfig, JwtKeySource, SecretSource, TrustedHeadersConfig,
};
use agent_runtime_gateway::{AuditConfig, AuditTarget, AuthMode, TokenGrant};
use anyhow::{Context, bail};
use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AuthSection {
    /// `static` (default), `jwt` or `trusted_headers`.
    mode: Option<String>,
    #[serde(default)]
    tokens: Vec<TokenSection>,
    jwt: Option<JwtSection>,
    trusted_headers: Option<TrustedHeadersSection>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenSection {
    /// Hex SHA-256 of the bearer token (`printf %s TOKEN | sha256sum`).
    sha256: String,
    tenant: String,
    subject: String,
    scopes: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JwtSection {
    algorithm: String,
    secret_env: Option<String>,
    secret_file: Option<PathBuf>,
    public_key_pem_file: Option<PathBuf>,
    jwks_file: Option<PathBuf>,
    key_refresh_secs: Option<u64>,
    issuer: Option<String>,
    audience: Option<String>,
    leeway_secs: Option<u64>,
    required_typ: Option<String>,
    tenant_claim: Option<String>,
    subject_claim: Option<String>,
    scopes_claim: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TrustedHeadersSection {
    tenant_header: Option<String>,
    subject_header: Option<String>,
    scopes_header: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AuditSection {
    /// A JSON-lines file, or `-` for stdout.
    path: String,
    max_bytes: Option<u64>,
    max_files: Option<usize>,
    queue_capacity: Option<usize>,
}

/// Applies `[auth]`: the mode, and the static tokens (only with `mode = "static"`).
pub(crate) fn apply_auth(
    section: AuthSection,
    tokens: &mut Vec<TokenGrant>,
    mode: &mut AuthMode,
) -> anyhow::Result<()> {
    let name = section.mode.as_deref().unwrap_or("static");
    let misplaced = |what: &str| format!("{what} needs [auth] mode = {name:?} to be changed");
    *mode = match name {
        "static" => {
            if section.jwt.is_some() {
                bail!("[auth.jwt] is set but [auth] mode is \"static\": set mode = \"jwt\"");
            }
            if section.trusted_headers.is_some() {
                bail!(
                    "[auth.trusted_headers] is set but [auth] mode is \"static\": set mode = \"trusted_headers\""
                );
            }
            AuthMode::Static
        }
        "jwt" => {
            if section.trusted_headers.is_some() {
                bail!(misplaced("[auth.trusted_headers]"));
            }
            let jwt = section
                .jwt
                .context("[auth] mode = \"jwt\" needs an [auth.jwt] section")?;
            AuthMode::Jwt(jwt_config(jwt)?)
        }
        "trusted_headers" => {
            if section.jwt.is_some() {
                bail!(misplaced("[auth.jwt]"));
            }
            AuthMode::TrustedHeaders(trusted_headers(section.trusted_headers.unwrap_or_default()))
        }
        other => bail!("auth.mode {other:?} is not one of: static, jwt, trusted_headers"),
    };
    if !section.tokens.is_empty() && !matches!(mode, AuthMode::Static) {
        bail!("[[auth.tokens]] are only used with [auth] mode = \"static\"");
    }
    for token in section.tokens {
        tokens.push(token_grant(token)?);
    }
    Ok(())
}

fn jwt_config(section: JwtSection) -> anyhow::Result<JwtConfig> {
    let algorithm = JwtAlgorithm::parse(&section.algorithm).with_context(|| {
        format!(
            "auth.jwt.algorithm {:?} is not one of: HS256, RS256, ES256",
            section.algorithm
        )
    })?;
    let keys = match (
        algorithm,
        section.secret_env,
        section.secret_file,
        section.public_key_pem_file,
        section.jwks_file,
    ) {
        (JwtAlgorithm::Hs256, Some(env), None, None, None) => {
            JwtKeySource::Secret(SecretSource::Env(env))
        }
        (JwtAlgorithm::Hs256, None, Some(file), None, None) => {
            JwtKeySource::Secret(SecretSource::File(file))
        }
        (JwtAlgorithm::Hs256, ..) => {
            bail!(
                "auth.jwt with HS256 needs exactly one of secret_env and secret_file (and no public key)"
            )
        }
        (_, None, None, Some(pem), None) => JwtKeySource::PemFile(pem),
        (_, None, None, None, Some(jwks)) => JwtKeySource::JwksFile(jwks),
        (algorithm, ..) => bail!(
            "auth.jwt with {} needs exactly one of public_key_pem_file and jwks_file (and no secret)",
            algorithm.as_str()
        ),
    };
    let mut config = JwtConfig::new(algorithm, keys);
    config.issuer = section.issuer;
    config.audience = section.audience;
    config.required_typ = section.required_typ;
    if let Some(leeway) = section.leeway_secs {
        config.leeway_secs = leeway;
    }
    if let Some(refresh) = section.key_refresh_secs {
        if refresh == 0 {
            bail!("auth.jwt.key_refresh_secs must be a positive integer");
        }
        config.key_refresh = Duration::from_secs(refresh);
    }
    let claims = [
        (&mut config.tenant_claim, section.tenant_claim),
        (&mut config.subject_claim, section.subject_claim),
        (&mut config.scopes_claim, section.scopes_claim),
    ];
    for (target, value) in claims {
        if let Some(value) = value {
            *target = value;
        }
    }
    Ok(config)
}

fn trusted_headers(section: TrustedHeadersSection) -> TrustedHeadersConfig {
    let defaults = TrustedHeadersConfig::default();
    TrustedHeadersConfig {
        tenant_header: section.tenant_header.unwrap_or(defaults.tenant_header),
        subject_header: section.subject_header.unwrap_or(defaults.subject_header),
        scopes_header: section.scopes_header.unwrap_or(defaults.scopes_header),
    }
}

fn token_grant(token: TokenSection) -> anyhow::Result<TokenGrant> {
    let hash = token.sha256.to_ascii_lowercase();
    if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
        bail!("auth.tokens.sha256 must be 64 hex digits (the SHA-256 of the token)");
    }
    let scopes = token
        .scopes
        .iter()
        .map(|scope| Scope::parse(scope).with_context(|| format!("unknown scope {scope:?}")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(TokenGrant {
        token_sha256: hash,
        tenant_id: token.tenant,
        subject: token.subject,
        scopes,
    })
}

/// `[audit]` → the audit log's settings.
pub(crate) fn audit_config(section: AuditSection) -> anyhow::Result<AuditConfig> {
    let target = match section.path.as_str() {
        "" => bail!("audit.path must be a file path or \"-\" (stdout)"),
        "-" => AuditTarget::Stdout,
        path => AuditTarget::File(PathBuf::from(path)),
    };
    let mut config = AuditConfig::new(target);
    if let Some(max_bytes) = section.max_bytes {
        config.max_bytes = max_bytes;
    }
    if let Some(max_files) = section.max_files {
        config.max_files = max_files;
    }
    if let Some(capacity) = section.queue_capacity {
        config.queue_capacity = capacity;
    }
    if config.max_bytes == 0 || config.queue_capacity == 0 {
        bail!("audit.max_bytes and audit.queue_capacity must be positive integers");
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use crate::{ServeArgs, ServeConfig};

    use super::*;

    fn load(text: &str) -> anyhow::Result<ServeConfig> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        std::fs::write(&path, text).unwrap();
        ServeConfig::load(&ServeArgs {
            config: Some(path),
            ..ServeArgs::default()
        })
    }

    #[test]
    fn the_jwt_section_selects_jwt_authentication() {
        let config = load(
            r#"
[auth]
mode = "jwt"

[auth.jwt]
algorithm = "RS256"
jwks_file = "/etc/agent-runtime/jwks.json"
issuer = "https://id.example.com/"
audience = "agent-runtime"
leeway_secs = 30
key_refresh_secs = 10
tenant_claim = "org"
scopes_claim = "scp"
"#,
        )
        .unwrap();
        let AuthMode::Jwt(jwt) = &config.auth_mode else {
            panic!("jwt mode expected, got {:?}", config.auth_mode);
        };
        assert_eq!(jwt.algorithm, JwtAlgorithm::Rs256);
        assert_eq!(
            jwt.keys,
            JwtKeySource::JwksFile("/etc/agent-runtime/jwks.json".into())
        );
        assert_eq!(jwt.issuer.as_deref(), Some("https://id.example.com/"));
        assert_eq!(jwt.audience.as_deref(), Some("agent-runtime"));
        assert_eq!(jwt.leeway_secs, 30);
        assert_eq!(jwt.key_refresh, Duration::from_secs(10));
        assert_eq!(jwt.tenant_claim, "org");
        assert_eq!(jwt.subject_claim, "sub", "default");
        assert_eq!(jwt.scopes_claim, "scp");
        assert!(config.tokens.is_empty());
    }

    #[test]
    fn hs256_takes_the_secret_by_name_only() {
        let config = load(
            "[auth]\nmode = \"jwt\"\n[auth.jwt]\nalgorithm = \"HS256\"\nsecret_env = \"JWT_SECRET\"\n",
        )
        .unwrap();
        let AuthMode::Jwt(jwt) = config.auth_mode else {
            panic!("jwt mode expected");
        };
        assert_eq!(
            jwt.keys,
            JwtKeySource::Secret(SecretSource::Env("JWT_SECRET".to_owned()))
        );
        // There is no key for the secret itself.
        let error =
            load("[auth]\nmode = \"jwt\"\n[auth.jwt]\nalgorithm = \"HS256\"\nsecret = \"x\"\n")
                .unwrap_err();
        assert!(format!("{error:#}").contains("unknown field"), "{error:#}");
    }

    #[test]
    fn trusted_headers_and_audit_sections() {
        let config = load(
            r#"
[auth]
mode = "trusted_headers"

[auth.trusted_headers]
tenant_header = "x-org"

[audit]
path = "/var/log/agent-runtime/audit.jsonl"
max_bytes = 1000000
max_files = 3
"#,
        )
        .unwrap();
        let AuthMode::TrustedHeaders(headers) = &config.auth_mode else {
            panic!("trusted_headers mode expected");
        };
        assert_eq!(headers.tenant_header, "x-org");
        assert_eq!(headers.subject_header, "x-auth-subject");
        let audit = config.audit.unwrap();
        assert_eq!(
            audit.target,
            AuditTarget::File("/var/log/agent-runtime/audit.jsonl".into())
        );
        assert_eq!((audit.max_bytes, audit.max_files), (1_000_000, 3));
        let stdout = load("[audit]\npath = \"-\"\n").unwrap().audit.unwrap();
        assert_eq!(stdout.target, AuditTarget::Stdout);
        assert_eq!(load("").unwrap().audit, None);
        assert_eq!(load("").unwrap().auth_mode, AuthMode::Static);
    }

    #[test]
    fn inconsistent_auth_sections_are_refused() {
        let token = "[[auth.tokens]]\nsha256 = \"2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b\"\ntenant = \"t\"\nsubject = \"s\"\nscopes = []\n";
        let cases = [
            "[auth]\nmode = \"oauth\"\n".to_owned(),
            "[auth]\nmode = \"jwt\"\n".to_owned(),
            "[auth.jwt]\nalgorithm = \"HS256\"\nsecret_env = \"S\"\n".to_owned(),
            "[auth]\nmode = \"jwt\"\n[auth.jwt]\nalgorithm = \"none\"\nsecret_env = \"S\"\n"
                .to_owned(),
            "[auth]\nmode = \"jwt\"\n[auth.jwt]\nalgorithm = \"RS256\"\nsecret_env = \"S\"\n"
                .to_owned(),
            "[auth]\nmode = \"jwt\"\n[auth.jwt]\nalgorithm = \"HS256\"\nsecret_env = \"S\"\nsecret_file = \"f\"\n"
                .to_owned(),
            "[auth]\nmode = \"jwt\"\n[auth.jwt]\nalgorithm = \"ES256\"\npublic_key_pem_file = \"a\"\njwks_file = \"b\"\n"
                .to_owned(),
            format!(
                "[auth]\nmode = \"jwt\"\n{token}[auth.jwt]\nalgorithm = \"HS256\"\nsecret_env = \"S\"\n"
            ),
            "[auth]\nmode = \"trusted_headers\"\n[auth.trusted_headers]\ntenant = \"x\"\n"
                .to_owned(),
            "[audit]\npath = \"\"\n".to_owned(),
            "[audit]\npath = \"a.jsonl\"\nmax_bytes = 0\n".to_owned(),
            "[audit]\nmax_files = 3\n".to_owned(),
        ];
        for case in cases {
            assert!(load(&case).is_err(), "{case}");
        }
    }
}
