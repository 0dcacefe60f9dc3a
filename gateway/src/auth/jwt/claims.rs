//! The claims of a verified token → a validated principal (RFC 7519 §4.1, docs/protocol.md §4.3).

use agent_runtime::protocol::Principal;
use serde_json::{Map, Value};

use super::{JwtConfig, Rejection};
use crate::auth::known_scopes;

pub(super) fn principal(
    claims: &Map<String, Value>,
    config: &JwtConfig,
    now_ms: u64,
) -> Result<Principal, Rejection> {
    check_times(claims, config.leeway_secs, now_ms)?;
    if let Some(issuer) = &config.issuer
        && claims.get("iss").and_then(Value::as_str) != Some(issuer.as_str())
    {
        return Err(Rejection::WrongIssuer);
    }
    if let Some(audience) = &config.audience
        && !audience_contains(claims.get("aud"), audience)
    {
        return Err(Rejection::WrongAudience);
    }
    let Some(Value::String(tenant)) = claims.get(&config.tenant_claim) else {
        return Err(Rejection::MissingTenant);
    };
    let Some(Value::String(subject)) = claims.get(&config.subject_claim) else {
        return Err(Rejection::MissingSubject);
    };
    let scopes = match claims.get(&config.scopes_claim) {
        None => Vec::new(),
        Some(Value::String(list)) => known_scopes(list.split_ascii_whitespace()),
        Some(Value::Array(items)) => {
            let names: Option<Vec<&str>> = items.iter().map(Value::as_str).collect();
            known_scopes(names.ok_or(Rejection::BadScopes)?.into_iter())
        }
        Some(_) => return Err(Rejection::BadScopes),
    };
    let principal = Principal {
        tenant_id: tenant.clone(),
        subject: subject.clone(),
        scopes,
    };
    principal
        .validate()
        .map_err(|_| Rejection::InvalidPrincipal)?;
    Ok(principal)
}

/// When a verified token stops being accepted: `exp` plus the leeway, in milliseconds.
pub(super) fn expiry_ms(claims: &Map<String, Value>, leeway_secs: u64) -> Option<u64> {
    let exp = claims.get("exp")?.as_f64().filter(|exp| exp.is_finite())?;
    Some(((exp + leeway_secs as f64) * 1000.0).max(0.0) as u64)
}

/// `exp` is required; `nbf` and `iat` are checked when present. Times are NumericDate seconds
/// (fractions allowed); the leeway widens each window by the same amount.
fn check_times(
    claims: &Map<String, Value>,
    leeway_secs: u64,
    now_ms: u64,
) -> Result<(), Rejection> {
    let now = now_ms as f64 / 1000.0;
    let leeway = leeway_secs as f64;
    let time = |name: &str, missing: Rejection| -> Result<Option<f64>, Rejection> {
        match claims.get(name) {
            None => Ok(None),
            Some(value) => value
                .as_f64()
                .filter(|time| time.is_finite())
                .map(Some)
                .ok_or(missing),
        }
    };
    let exp = time("exp", Rejection::MissingExpiry)?.ok_or(Rejection::MissingExpiry)?;
    // RFC 7519 §4.1.4: the current time must be before `exp`.
    if now >= exp + leeway {
        return Err(Rejection::Expired);
    }
    if let Some(nbf) = time("nbf", Rejection::NotYetValid)?
        && now + leeway < nbf
    {
        return Err(Rejection::NotYetValid);
    }
    if let Some(iat) = time("iat", Rejection::IssuedInTheFuture)?
        && iat > now + leeway
    {
        return Err(Rejection::IssuedInTheFuture);
    }
    Ok(())
}

/// `aud` is a string or an array of strings (RFC 7519 §4.1.3).
fn audience_contains(aud: Option<&Value>, expected: &str) -> bool {
    match aud {
        Some(Value::String(aud)) => aud == expected,
        Some(Value::Array(items)) => items.iter().any(|item| item.as_str() == Some(expected)),
        _ => false,
    }
}
