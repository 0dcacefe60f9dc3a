//! What every component's configuration shares: durations written in milliseconds in the file,
//! and the rule for per-tenant overrides. Each component declares its configuration once, as a
//! struct that deserialises from its own section of the file (`[gateway]`, `[executor]`).

use std::collections::HashSet;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use crate::ids::is_valid_tenant_id;

/// A duration given as whole milliseconds (`…_ms` keys).
pub mod millis {
    use super::*;

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        u64::deserialize(deserializer).map(Duration::from_millis)
    }
}

/// An optional duration given as whole milliseconds.
pub mod option_millis {
    use super::*;

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Duration>, D::Error> {
        Option::<u64>::deserialize(deserializer).map(|ms| ms.map(Duration::from_millis))
    }
}

/// A section's `tenant_limits`: each entry names a valid tenant id (or it could never match),
/// and no tenant twice.
pub fn check_tenant_overrides<'a>(
    section: &str,
    tenants: impl IntoIterator<Item = &'a str>,
) -> Result<(), String> {
    let mut seen = HashSet::new();
    for tenant in tenants {
        if !is_valid_tenant_id(tenant) {
            return Err(format!(
                "{section}.tenant_limits: {tenant:?} is not a valid tenant id"
            ));
        }
        if !seen.insert(tenant) {
            return Err(format!(
                "{section}.tenant_limits: tenant {tenant:?} is listed twice"
            ));
        }
    }
    Ok(())
}

/// Every named limit must be positive: `Err` names the first that is zero.
pub fn check_positive<'a>(limits: impl IntoIterator<Item = (&'a str, u64)>) -> Result<(), String> {
    match limits.into_iter().find(|(_, value)| *value == 0) {
        Some((name, _)) => Err(format!("{name} must be a positive integer")),
        None => Ok(()),
    }
}

/// A tenant override's limits must be positive where given: `Err` names the first that is zero.
pub fn check_positive_overrides<'a>(
    section: &str,
    tenant: &str,
    limits: impl IntoIterator<Item = (&'a str, Option<usize>)>,
) -> Result<(), String> {
    match limits.into_iter().find(|(_, value)| *value == Some(0)) {
        Some((name, _)) => Err(format!(
            "{section}.tenant_limits: {name} of {tenant:?} must be a positive integer"
        )),
        None => Ok(()),
    }
}
