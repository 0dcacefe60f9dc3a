use serde_json::{Number, json};

use super::*;
use crate::protocol::command::{command_fingerprint, parse_command};

fn js(value: f64) -> String {
    format_number(&Number::from_f64(value).unwrap())
}

#[test]
fn object_keys_are_sorted_at_every_depth() {
    let value = json!({"b": 1, "a": {"z": [3, {"y": 1, "x": 2}], "_": null}, "B": true});
    assert_eq!(
        canonical_json(&value),
        r#"{"B":true,"a":{"_":null,"z":[3,{"x":2,"y":1}]},"b":1}"#
    );
}

#[test]
fn keys_sort_by_utf16_code_units_like_javascript() {
    // U+FF61 is one code unit 0xFF61; U+1F600 is the surrogate pair 0xD83D 0xDE00. JavaScript puts
    // the emoji first, Rust's byte order would put it last.
    let value = json!({"\u{FF61}": 1, "\u{1F600}": 2});
    assert_eq!(canonical_json(&value), "{\"\u{1F600}\":2,\"\u{FF61}\":1}");
}

#[test]
fn numbers_are_formatted_like_json_stringify() {
    assert_eq!(js(1.0), "1");
    assert_eq!(js(-0.0), "0");
    assert_eq!(js(1.5), "1.5");
    assert_eq!(js(-2.25), "-2.25");
    assert_eq!(js(0.1), "0.1");
    assert_eq!(js(0.000001), "0.000001");
    assert_eq!(js(1.5e-7), "1.5e-7");
    assert_eq!(js(1e-7), "1e-7");
    assert_eq!(js(123456789012345680000.0), "123456789012345680000");
    assert_eq!(js(1e21), "1e+21");
    assert_eq!(js(1.25e30), "1.25e+30");
    assert_eq!(format_number(&Number::from(7u64)), "7");
    assert_eq!(format_number(&Number::from(-7i64)), "-7");
}

#[test]
fn integral_floats_and_integers_encode_alike() {
    let from_float = crate::protocol::strict_json::parse_strict(b"{\"n\":100.0}").unwrap();
    let from_int = json!({"n": 100});
    assert_eq!(canonical_json(&from_float), canonical_json(&from_int));
}

#[test]
fn strings_are_escaped_like_json_stringify() {
    let value = json!("quote\" backslash\\ nl\n tab\t bell\u{7} del\u{7f} slash/");
    // DEL and `/` stay literal, as in JSON.stringify.
    let expected = concat!(
        r#""quote\" backslash\\ nl\n tab\t bell\u0007 del"#,
        "\u{7f}",
        r#" slash/""#
    );
    assert_eq!(canonical_json(&value), expected);
}

const CREATE: &str = r#"{"protocolVersion":1,"commandId":"c-1","type":"session.create","data":{"metadata":{"b":1,"a":2}}}"#;

#[test]
fn fingerprint_is_stable_across_key_order_and_whitespace() {
    let first = parse_command(CREATE.as_bytes()).unwrap();
    let reordered = r#"{ "data": {"metadata": {"a": 2, "b": 1.0}}, "type": "session.create",
        "commandId": "c-1", "protocolVersion": 1 }"#;
    let second = parse_command(reordered.as_bytes()).unwrap();
    let fingerprint = command_fingerprint(&first);
    assert_eq!(fingerprint, command_fingerprint(&second));
    assert_eq!(fingerprint.len(), 64);
    assert!(
        fingerprint
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
    );
    // The fingerprint is the hash of exactly this canonical text.
    let canonical = r#"{"commandId":"c-1","data":{"metadata":{"a":2,"b":1}},"protocolVersion":1,"type":"session.create"}"#;
    assert_eq!(fingerprint, sha256_hex(canonical.as_bytes()));
}

#[test]
fn fingerprint_differs_when_data_differs() {
    let first = parse_command(CREATE.as_bytes()).unwrap();
    let other = CREATE.replace(r#""a":2"#, r#""a":3"#);
    let second = parse_command(other.as_bytes()).unwrap();
    assert_ne!(command_fingerprint(&first), command_fingerprint(&second));
    let no_metadata = parse_command(
        br#"{"protocolVersion":1,"commandId":"c-1","type":"session.create","data":{}}"#,
    )
    .unwrap();
    assert_ne!(
        command_fingerprint(&first),
        command_fingerprint(&no_metadata)
    );
}
