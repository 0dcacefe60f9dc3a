//! Canonical JSON and command fingerprints (docs/protocol.md §2.0 step 4).
//!
//! The fingerprint decides whether a reused commandId carries the *same* command, so two
//! encodings of one command must give one string. The encoding mirrors what the reference computes
//! with JavaScript:
//!
//! * object keys sorted by UTF-16 code units, like `Array.prototype.sort` on `Object.keys` (for
//!   ASCII keys this is plain byte order; it differs from Rust's `str` order only for keys with
//!   characters above U+FFFF versus U+E000..U+FFFF);
//! * arrays in order, no whitespace;
//! * strings escaped as `JSON.stringify` does (serde_json escapes exactly the same set);
//! * numbers formatted like `JSON.stringify`: `1` never `1.0`, `1e+21`, `1.5e-7`, `-0` as `0`.
//!
//! Keys whose value is `undefined` cannot exist in a `serde_json::Value`; our serialisers omit
//! absent optionals instead, which is the same thing.

use std::cmp::Ordering;

use serde_json::{Number, Value};
use sha2::{Digest, Sha256};

/// The canonical JSON text of `value`.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

/// Lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// JavaScript's default string order: by UTF-16 code units.
pub fn cmp_utf16(a: &str, b: &str) -> Ordering {
    a.encode_utf16().cmp(b.encode_utf16())
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(flag) => out.push_str(if *flag { "true" } else { "false" }),
        Value::Number(number) => out.push_str(&format_number(number)),
        Value::String(text) => write_string(text, out),
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::Object(object) => {
            let mut entries: Vec<(&String, &Value)> = object.iter().collect();
            entries.sort_by(|(a, _), (b, _)| cmp_utf16(a, b));
            out.push('{');
            for (index, (key, item)) in entries.into_iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_string(key, out);
                out.push(':');
                write_canonical(item, out);
            }
            out.push('}');
        }
    }
}

fn write_string(text: &str, out: &mut String) {
    // Serialising a `str` cannot fail; the fallback keeps this total without a panic path.
    match serde_json::to_string(text) {
        Ok(encoded) => out.push_str(&encoded),
        Err(_) => out.push_str("\"\""),
    }
}

/// Formats a number the way JavaScript's `Number.prototype.toString` does (ECMA-262
/// `Number::toString`), which is what `JSON.stringify` writes.
pub fn format_number(number: &Number) -> String {
    if let Some(value) = number.as_u64() {
        return value.to_string();
    }
    if let Some(value) = number.as_i64() {
        return value.to_string();
    }
    match number.as_f64() {
        Some(value) => format_f64_like_js(value),
        None => number.to_string(),
    }
}

fn format_f64_like_js(value: f64) -> String {
    if value == 0.0 {
        // Covers -0, which JavaScript prints as "0".
        return "0".to_owned();
    }
    if !value.is_finite() {
        // Unreachable for a serde_json `Number`; JSON.stringify would write null.
        return "null".to_owned();
    }
    let sign = if value < 0.0 { "-" } else { "" };
    // `{:e}` gives the shortest digits that round-trip, e.g. "1.5e-7" or "1e21".
    let scientific = format!("{:e}", value.abs());
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let exponent: i64 = exponent.parse().unwrap_or(0);
    // ECMA-262: value = 0.d1d2…dk × 10^n.
    let k = digits.len() as i64;
    let n = exponent + 1;
    let body = if k <= n && n <= 21 {
        format!("{digits}{}", "0".repeat((n - k) as usize))
    } else if 0 < n && n <= 21 {
        let (int_part, frac_part) = digits.split_at(n as usize);
        format!("{int_part}.{frac_part}")
    } else if -6 < n && n <= 0 {
        format!("0.{}{digits}", "0".repeat((-n) as usize))
    } else {
        let exp_sign = if n - 1 < 0 { '-' } else { '+' };
        let (first, rest) = digits.split_at(1);
        let fraction = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        format!("{first}{fraction}e{exp_sign}{}", (n - 1).abs())
    };
    format!("{sign}{body}")
}

#[cfg(test)]
mod tests;
