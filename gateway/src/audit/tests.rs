use std::path::Path;

use agent_runtime::protocol::ErrorCode;
use agent_runtime::telemetry::Outcome;
use serde_json::Value;

use super::writer::numbered;
use super::*;

fn record(index: usize, session: Option<&str>, error: Option<ErrorCode>) -> AuditRecord {
    AuditRecord {
        occurred_at: "2026-08-25T00:00:00.000Z".to_owned(),
        tenant_id: "acme".to_owned(),
        subject: "alice@example.com".to_owned(),
        command_id: format!("cmd-{index}"),
        command_type: if session.is_some() {
            "session.read"
        } else {
            "session.create"
        },
        session_id: session.map(str::to_owned),
        outcome: if error.is_some() {
            Outcome::Error
        } else {
            Outcome::Success
        },
        error_code: error,
    }
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).expect("every line is one JSON object"))
        .collect()
}

fn file_config(path: &Path) -> AuditConfig {
    AuditConfig::new(AuditTarget::File(path.to_path_buf()))
}

#[test]
fn each_record_is_one_json_line_with_the_audit_fields() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let log = AuditLog::start(&file_config(&path)).unwrap();
    log.write_audit(&record(1, None, None)).unwrap();
    log.write_audit(&record(2, Some("s-1"), Some(ErrorCode::SessionNotFound)))
        .unwrap();
    log.close();

    let written = lines(&path);
    assert_eq!(written.len(), 2);
    assert_eq!(
        written[0],
        serde_json::json!({
            "occurredAt": "2026-08-25T00:00:00.000Z",
            "tenantId": "acme",
            "subject": "alice@example.com",
            "commandId": "cmd-1",
            "commandType": "session.create",
            "outcome": "success",
        })
    );
    assert_eq!(written[1]["sessionId"], "s-1");
    assert_eq!(written[1]["outcome"], "error");
    assert_eq!(written[1]["errorCode"], "SESSION_NOT_FOUND");
    let first_line = std::fs::read_to_string(&path).unwrap();
    assert!(
        first_line.starts_with(r#"{"occurredAt":"#),
        "fields in record order"
    );
}

#[test]
fn an_existing_file_is_appended_to() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    for index in 0..2 {
        let log = AuditLog::start(&file_config(&path)).unwrap();
        log.write_audit(&record(index, None, None)).unwrap();
        log.close();
    }
    let ids: Vec<Value> = lines(&path)
        .into_iter()
        .map(|line| line["commandId"].clone())
        .collect();
    assert_eq!(ids, vec!["cmd-0", "cmd-1"]);
}

#[test]
fn the_file_rotates_by_size_and_keeps_max_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let config = AuditConfig {
        max_bytes: 400,
        max_files: 2,
        ..file_config(&path)
    };
    let log = AuditLog::start(&config).unwrap();
    for index in 0..40 {
        log.write_audit(&record(index, Some("s-1"), None)).unwrap();
    }
    log.close();

    assert!(numbered(&path, 1).exists());
    assert!(numbered(&path, 2).exists());
    assert!(
        !numbered(&path, 3).exists(),
        "only max_files rotated files are kept"
    );
    let mut kept = Vec::new();
    for file in [numbered(&path, 2), numbered(&path, 1), path.clone()] {
        assert!(
            std::fs::metadata(&file).unwrap().len() <= 400,
            "{}",
            file.display()
        );
        kept.extend(
            lines(&file)
                .into_iter()
                .map(|line| line["commandId"].clone()),
        );
    }
    // Oldest first across the files, ending with the newest record, none duplicated.
    let expected: Vec<Value> = (40 - kept.len()..40)
        .map(|index| format!("cmd-{index}").into())
        .collect();
    assert_eq!(kept, expected);
}

#[test]
fn max_files_zero_keeps_no_rotated_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let config = AuditConfig {
        max_bytes: 300,
        max_files: 0,
        ..file_config(&path)
    };
    let log = AuditLog::start(&config).unwrap();
    for index in 0..10 {
        log.write_audit(&record(index, None, None)).unwrap();
    }
    log.close();
    assert!(!numbered(&path, 1).exists());
    let last = lines(&path).pop().unwrap();
    assert_eq!(last["commandId"], "cmd-9");
}

#[test]
fn a_full_queue_drops_and_counts_instead_of_blocking() {
    // A queue of one that nobody drains: the second and third records cannot wait.
    let (sender, receiver) = sync_channel(1);
    let log = AuditLog::from_parts(sender, None);
    assert!(log.write_audit(&record(1, None, None)).is_ok());
    assert!(log.write_audit(&record(2, None, None)).is_err());
    assert!(log.write_audit(&record(3, None, None)).is_err());
    assert_eq!(log.dropped(), 2);
    let queued: Value = serde_json::from_str(&receiver.recv().unwrap()).unwrap();
    assert_eq!(queued["commandId"], "cmd-1");
}

#[test]
fn a_closed_log_refuses_records_and_an_unopenable_file_fails_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::start(&file_config(&dir.path().join("audit.jsonl"))).unwrap();
    log.close();
    assert!(log.write_audit(&record(1, None, None)).is_err());
    let missing_dir = dir.path().join("no-such-dir").join("audit.jsonl");
    assert!(AuditLog::start(&file_config(&missing_dir)).is_err());
}
