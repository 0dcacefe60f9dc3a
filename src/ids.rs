//! Protocol identifiers: the common identifier rule (docs/protocol.md §1.1) and nanoid generation.

use rand::Rng;

const NANOID_ALPHABET: &[u8; 64] =
    b"useandom-26T198340PX75pxJACKVERYMINDBUSHWOLF_GQZbfghjklqvwyzrict";

/// A 21-character URL-safe random identifier, like the reference's `nanoid()`.
pub fn nanoid() -> String {
    let mut rng = rand::rng();
    (0..21)
        .map(|_| NANOID_ALPHABET[rng.random_range(0..64)] as char)
        .collect()
}

/// A nanoid-shaped identifier derived from `seed` (a random execution id) for `purpose`: as
/// unguessable as the seed, and found again from it. What a command creates takes such an id,
/// so that whoever holds the command's receipt can look for its effect after a crash.
pub fn derived_nanoid(seed: &str, purpose: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::new()
        .chain_update(purpose.as_bytes())
        .chain_update([0u8])
        .chain_update(seed.as_bytes())
        .finalize();
    digest
        .iter()
        .take(21)
        .map(|&byte| NANOID_ALPHABET[usize::from(byte & 63)] as char)
        .collect()
}

/// Purposes of the ids derived from an execution id: the session a create or fork makes, the
/// input a submit accepts.
pub const SESSION_PURPOSE: &str = "session";
pub const INPUT_PURPOSE: &str = "input";

/// A new id for what a command creates: derived from its execution id when it has one.
pub fn effect_id(execution_id: Option<&str>, purpose: &str) -> String {
    match execution_id {
        Some(seed) => derived_nanoid(seed, purpose),
        None => nanoid(),
    }
}

/// The common identifier rule: `^[A-Za-z0-9_-][A-Za-z0-9._:-]{0,255}$`.
pub fn is_valid_identifier(value: &str) -> bool {
    let bytes = value.as_bytes();
    let Some((&first, rest)) = bytes.split_first() else {
        return false;
    };
    if bytes.len() > 256 {
        return false;
    }
    let first_ok = first.is_ascii_alphanumeric() || first == b'_' || first == b'-';
    first_ok
        && rest
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'))
}

/// The tenant identifier rule (docs/protocol.md §4.3): `^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`.
pub fn is_valid_tenant_id(value: &str) -> bool {
    let bytes = value.as_bytes();
    let Some((&first, rest)) = bytes.split_first() else {
        return false;
    };
    bytes.len() <= 128
        && first.is_ascii_alphanumeric()
        && rest
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifier_rule_matches_the_protocol() {
        assert!(is_valid_identifier("1.0.0"));
        assert!(is_valid_identifier("-a:b.c_d"));
        assert!(is_valid_identifier(&"a".repeat(256)));
        assert!(!is_valid_identifier(&"a".repeat(257)));
        assert!(!is_valid_identifier("../unsafe"));
        assert!(!is_valid_identifier(".a"));
        assert!(!is_valid_identifier(":a"));
        assert!(!is_valid_identifier(""));
        assert!(!is_valid_identifier("a b"));
        assert!(!is_valid_identifier("é"));
    }

    #[test]
    fn derived_ids_are_stable_valid_and_distinct_per_purpose() {
        let session = derived_nanoid("lease-1", "session");
        assert_eq!(session, derived_nanoid("lease-1", "session"));
        assert!(is_valid_identifier(&session) && session.len() == 21);
        assert_ne!(session, derived_nanoid("lease-1", "input"));
        assert_ne!(session, derived_nanoid("lease-2", "session"));
        assert_ne!(effect_id(None, "session"), effect_id(None, "session"));
    }

    #[test]
    fn nanoids_are_valid_identifiers_and_distinct() {
        let a = nanoid();
        let b = nanoid();
        assert_eq!(a.len(), 21);
        assert!(is_valid_identifier(&a));
        assert_ne!(a, b);
    }

    #[test]
    fn tenant_rule_matches_the_protocol() {
        assert!(is_valid_tenant_id("tenant-a"));
        assert!(!is_valid_tenant_id("-tenant"));
        assert!(!is_valid_tenant_id("tenant-a\u{0}tenant-b"));
        assert!(!is_valid_tenant_id(&"t".repeat(129)));
    }
}
