//! Whether every number literal of a JSON document survives parsing exactly.
//!
//! Without serde_json's `arbitrary_precision` (which would change every `Value` of the workspace),
//! an integer literal that fits `i64`/`u64` is kept exactly and any other literal becomes the
//! nearest `f64`. A literal is exact when its decimal value equals that of the shortest decimal
//! that reads back as the same `f64` (what the canonical form writes): `1.0`, `1.5e3`, `0.1` and
//! `0.30000000000000004` are exact; `18446744073709551616` (2^64) and `0.10000000000000000001`
//! are not.

/// Scans a document that already parsed as JSON.
pub(super) fn all_exact(document: &[u8]) -> bool {
    let mut index = 0;
    while index < document.len() {
        match document[index] {
            b'"' => index = skip_string(document, index + 1),
            b'-' | b'0'..=b'9' => {
                let start = index;
                while index < document.len()
                    && matches!(
                        document[index],
                        b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'
                    )
                {
                    index += 1;
                }
                // A parsed document's number literals are ASCII.
                let literal = std::str::from_utf8(&document[start..index]).unwrap_or_default();
                if !is_exact(literal) {
                    return false;
                }
            }
            _ => index += 1,
        }
    }
    true
}

/// The index just past the string whose contents start at `index`.
fn skip_string(document: &[u8], mut index: usize) -> usize {
    while index < document.len() {
        match document[index] {
            b'\\' => index += 2,
            b'"' => return index + 1,
            _ => index += 1,
        }
    }
    index
}

fn is_exact(literal: &str) -> bool {
    let integer = !literal.contains(['.', 'e', 'E']);
    if integer && (literal.parse::<i64>().is_ok() || literal.parse::<u64>().is_ok()) {
        return true;
    }
    match literal.parse::<f64>() {
        Ok(float) if float.is_finite() => {
            decimal(literal) == decimal(&format!("{:e}", float.abs()))
        }
        _ => false,
    }
}

/// A non-negative decimal literal as (significant digits, power of ten of the last digit); zero
/// is `("", 0)`. The sign is left out: the shortest form of `-x` is that of `x` with a sign.
fn decimal(literal: &str) -> (String, i64) {
    let unsigned = literal.trim_start_matches(['-', '+']);
    let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
        Some(at) => (
            &unsigned[..at],
            unsigned[at + 1..].parse::<i64>().unwrap_or(0),
        ),
        None => (unsigned, 0),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = format!("{whole}{fraction}");
    let mut power = exponent - fraction.len() as i64;
    let significant = digits.trim_start_matches('0');
    let trimmed = significant.trim_end_matches('0');
    power += (significant.len() - trimmed.len()) as i64;
    if trimmed.is_empty() {
        return (String::new(), 0);
    }
    (trimmed.to_owned(), power)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_that_parse_exactly_pass() {
        for literal in [
            "0",
            "-0",
            "0.0",
            "1",
            "-1",
            "1.0",
            "2.50",
            "1e0",
            "1.5e3",
            "1500",
            "0.1",
            "-0.1",
            "0.30000000000000004",
            "9007199254740993",
            "18446744073709551615",
            "-9223372036854775808",
            "1e300",
            "5e-324",
            "123456789012345680000",
        ] {
            assert!(is_exact(literal), "{literal} is exact");
        }
    }

    #[test]
    fn numbers_that_would_change_are_refused() {
        for literal in [
            "18446744073709551616",
            "-9223372036854775809",
            "123456789012345678901",
            "0.10000000000000000001",
            "1.00000000000000000001",
            "9007199254740993.0",
        ] {
            assert!(!is_exact(literal), "{literal} is not exact");
        }
    }

    #[test]
    fn only_numbers_outside_strings_are_judged() {
        assert!(all_exact(
            br#"{"a":"18446744073709551616","b\"":1.5,"c":[1,2e2]}"#
        ));
        assert!(!all_exact(br#"{"a":"x","b":[1,18446744073709551616]}"#));
        assert!(!all_exact(b"-123456789012345678901"));
    }
}
