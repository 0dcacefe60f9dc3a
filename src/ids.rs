//! Protocol identifiers: the common identifier rule (protocol.md §1.1) and nanoid generation.

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

/// The tenant identifier rule (protocol.md §4.3): `^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`.
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
