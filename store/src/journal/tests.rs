use serde_json::json;

use super::*;
use crate::conformance::support::{CREATED_AT, active_session};

fn session_entry(id: &str) -> JournalEntry {
    JournalEntry::Session {
        record: active_session("t", id, CREATED_AT).into(),
    }
}

#[test]
fn a_single_entry_is_one_versioned_line() {
    let line = encode_line(&[session_entry("s1")]).unwrap();
    assert_eq!(line.last(), Some(&b'\n'));
    let text = std::str::from_utf8(&line).unwrap();
    assert!(
        text.starts_with(r#"{"v":1,"kind":"session","record":"#),
        "{text}"
    );
    let value: Value = serde_json::from_slice(&line).unwrap();
    assert_eq!(decode_line(value), Some(vec![session_entry("s1")]));
}

#[test]
fn several_entries_commit_as_one_batch_line() {
    let entries = vec![session_entry("s1"), session_entry("s2")];
    let line = encode_line(&entries).unwrap();
    assert_eq!(line.iter().filter(|b| **b == b'\n').count(), 1);
    let value: Value = serde_json::from_slice(&line).unwrap();
    assert_eq!(value["kind"], "batch");
    assert_eq!(decode_line(value), Some(entries));
}

#[test]
fn unknown_versions_kinds_and_shapes_are_not_entries() {
    let mut valid: Value =
        serde_json::from_slice(&encode_line(&[session_entry("s")]).unwrap()).unwrap();
    assert!(decode_line(valid.clone()).is_some());
    valid["v"] = json!(2);
    assert_eq!(decode_line(valid), None);
    assert_eq!(decode_line(json!({"v": 1, "kind": "nope"})), None);
    assert_eq!(decode_line(json!({"kind": "session"})), None);
    assert_eq!(
        decode_line(json!({"v": 1, "kind": "session", "record": 5})),
        None
    );
    assert_eq!(
        decode_line(json!({"v": 1, "kind": "batch", "entries": []})),
        None
    );
    assert_eq!(decode_line(json!([1, 2])), None);
}

#[test]
fn a_released_command_lease_is_null() {
    let entry = JournalEntry::Lease {
        tenant_id: "t".into(),
        command_id: "c".into(),
        lease: None,
    };
    let value = serde_json::to_value(&entry).unwrap();
    assert_eq!(
        value,
        json!({"kind": "lease", "tenantId": "t", "commandId": "c", "lease": null})
    );
}
