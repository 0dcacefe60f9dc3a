use serde_json::json;

use serde::{Deserialize, Serialize};

use super::{SchemaError, decode_exact, parse_strict};

#[test]
fn parses_ordinary_documents() {
    let value = parse_strict(br#"{"a":[1,-2,3.5,"x",null,true],"b":{"c":{}}}"#).unwrap();
    assert_eq!(value, json!({"a":[1,-2,3.5,"x",null,true],"b":{"c":{}}}));
}

#[test]
fn rejects_duplicate_keys_at_the_top_level() {
    assert!(parse_strict(br#"{"a":1,"a":1}"#).is_err());
}

#[test]
fn rejects_duplicate_keys_at_depth() {
    let body = br#"{"data":{"list":[{"ok":1},{"x":{"k":1,"k":2}}]}}"#;
    let error = parse_strict(body).unwrap_err();
    assert!(
        error.to_string().contains("duplicate object key"),
        "{error}"
    );
}

#[test]
fn same_key_in_sibling_objects_is_fine() {
    assert!(parse_strict(br#"[{"k":1},{"k":2}]"#).is_ok());
}

#[test]
fn rejects_non_finite_numbers() {
    assert!(parse_strict(b"1e400").is_err());
    assert!(parse_strict(b"-1e400").is_err());
    assert!(parse_strict(br#"{"n":NaN}"#).is_err());
    assert!(parse_strict(br#"{"n":Infinity}"#).is_err());
}

#[test]
fn rejects_trailing_garbage_and_bad_utf8() {
    assert!(parse_strict(b"{} {}").is_err());
    assert!(parse_strict(b"\"\xff\"").is_err());
    assert!(parse_strict(b"").is_err());
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Sample {
    name: String,
    #[serde(
        default,
        deserialize_with = "crate::protocol::fields::opt_int",
        skip_serializing_if = "Option::is_none"
    )]
    count: Option<u64>,
}

#[test]
fn decode_exact_accepts_the_exact_shape() {
    let sample: Sample = decode_exact(json!({"name": "a", "count": 2.0})).unwrap();
    assert_eq!(
        sample,
        Sample {
            name: "a".into(),
            count: Some(2)
        }
    );
}

#[test]
fn decode_exact_rejects_a_struct_written_as_an_array() {
    // Plain serde takes the array as the struct's fields in order.
    assert!(serde_json::from_value::<Sample>(json!(["a", 2])).is_ok());
    assert!(matches!(
        decode_exact::<Sample>(json!(["a", 2])),
        Err(SchemaError::NotExact)
    ));
}

#[test]
fn decode_exact_reports_schema_errors() {
    assert!(matches!(
        decode_exact::<Sample>(json!({"name": "a", "x": 1})),
        Err(SchemaError::Invalid(_))
    ));
}
