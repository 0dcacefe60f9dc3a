//! Golden wire fixtures (tests/fixtures/protocol/README.md): every valid fixture parses and
//! round-trips to identical canonical JSON; every invalid one is rejected with the code its name
//! states.

use std::fs;
use std::path::{Path, PathBuf};

use agent_runtime::protocol::command::COMMAND_TYPES;
use agent_runtime::protocol::result::{
    AbortResult, InitializeResult, ListSessionsResult, ReadSessionResult, ResolvePermissionResult,
    SessionResult, SubmitResult,
};
use agent_runtime::protocol::stream::STREAM_MESSAGE_TYPES;
use agent_runtime::protocol::strict_json::parse_strict;
use agent_runtime::protocol::{
    CommandResult, ErrorCode, EventPayload, JsonObject, ProtocolError, ResultData, StreamMessage,
    canonical_json, parse_command, parse_command_result, parse_event,
};
use serde_json::Value;

struct Fixture {
    name: String,
    bytes: Vec<u8>,
}

fn fixtures(kind: &str, validity: &str) -> Vec<Fixture> {
    let dir: PathBuf = [
        env!("CARGO_MANIFEST_DIR"),
        "fixtures/protocol",
        kind,
        validity,
    ]
    .iter()
    .collect();
    let mut found: Vec<Fixture> = fs::read_dir(&dir)
        .unwrap_or_else(|error| panic!("{}: {error}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .map(|path| Fixture {
            name: file_stem(&path),
            bytes: fs::read(&path).expect("fixture is readable"),
        })
        .collect();
    found.sort_by(|a, b| a.name.cmp(&b.name));
    assert!(!found.is_empty(), "no fixtures in {}", dir.display());
    found
}

fn file_stem(path: &Path) -> String {
    path.file_stem()
        .and_then(|stem| stem.to_str())
        .expect("UTF-8 file name")
        .to_owned()
}

/// The canonical JSON of a fixture's own text.
fn canonical_input(fixture: &Fixture) -> String {
    let value = parse_strict(&fixture.bytes).unwrap_or_else(|error| {
        panic!(
            "{}: valid fixture is not strict JSON: {error}",
            fixture.name
        )
    });
    canonical_json(&value)
}

/// `<CODE>--rest` → (code, rest).
fn expected_code(name: &str) -> (ErrorCode, &str) {
    let (code, rest) = name
        .split_once("--")
        .unwrap_or_else(|| panic!("{name}: invalid fixture names start with <CODE>--"));
    let code = ErrorCode::parse(code).unwrap_or_else(|| panic!("{name}: unknown code {code}"));
    (code, rest)
}

/// Records a failure unless `outcome` is a rejection with `code`.
fn expect_rejection<T: std::fmt::Debug>(
    fixture: &Fixture,
    code: ErrorCode,
    outcome: Result<T, ProtocolError>,
    failures: &mut Vec<String>,
) -> Option<ProtocolError> {
    match outcome {
        Ok(accepted) => failures.push(format!("{}: accepted as {accepted:?}", fixture.name)),
        Err(error) if error.code != code => failures.push(format!(
            "{}: got {} ({})",
            fixture.name, error.code, error.message
        )),
        Err(error) => return Some(error),
    }
    None
}

/// Collects failures so that one run reports every broken fixture.
fn assert_no_failures(failures: Vec<String>) {
    assert!(
        failures.is_empty(),
        "{} fixture(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn valid_commands_parse_and_round_trip() {
    let mut failures = Vec::new();
    for fixture in fixtures("commands", "valid") {
        match parse_command(&fixture.bytes) {
            Ok(command) => {
                let output = canonical_json(&serde_json::to_value(&command).expect("serialises"));
                if output != canonical_input(&fixture) {
                    failures.push(format!("{}: round trip differs: {output}", fixture.name));
                }
                if !fixture.name.starts_with(command.command_type()) {
                    failures.push(format!(
                        "{}: parsed as {}",
                        fixture.name,
                        command.command_type()
                    ));
                }
            }
            Err(error) => failures.push(format!("{}: rejected: {error}", fixture.name)),
        }
    }
    assert_no_failures(failures);
}

#[test]
fn invalid_commands_are_rejected_with_the_expected_code() {
    let mut failures = Vec::new();
    for fixture in fixtures("commands", "invalid") {
        let (code, label) = expected_code(&fixture.name);
        let expected_message = match code {
            ErrorCode::InvalidCommand if label.starts_with("bad-json-") => {
                Some("Command body is not valid JSON")
            }
            ErrorCode::InvalidCommand => Some("Command validation failed"),
            _ => None,
        };
        let outcome = parse_command(&fixture.bytes);
        if let Some(error) = expect_rejection(&fixture, code, outcome, &mut failures)
            && expected_message.is_some_and(|message| message != error.message)
        {
            failures.push(format!("{}: message {:?}", fixture.name, error.message));
        }
    }
    assert_no_failures(failures);
}

/// Reads `data` as the typed result of `kind` and returns it re-serialised.
fn typed_result_data(kind: &str, data: &JsonObject) -> Result<Option<JsonObject>, ProtocolError> {
    fn round_trip<T: ResultData>(data: &JsonObject) -> Result<Option<JsonObject>, ProtocolError> {
        T::from_data(data).map(|typed| Some(typed.to_data()))
    }
    match kind {
        "any" => Ok(None),
        "initialize" => round_trip::<InitializeResult>(data),
        "session.create" | "session.resume" | "session.fork" | "session.close" => {
            round_trip::<SessionResult>(data)
        }
        "session.list" => round_trip::<ListSessionsResult>(data),
        "session.read" => round_trip::<ReadSessionResult>(data),
        "input.submit" => round_trip::<SubmitResult>(data),
        "request.abort" => round_trip::<AbortResult>(data),
        "permission.resolve" => round_trip::<ResolvePermissionResult>(data),
        other => panic!("unknown result kind {other}"),
    }
}

/// Parses a result fixture fully: the envelope, then the typed data its kind names.
fn parse_result_fixture(
    kind: &str,
    bytes: &[u8],
) -> Result<(CommandResult, Option<JsonObject>), ProtocolError> {
    let result = parse_command_result(bytes)?;
    let typed = match &result {
        CommandResult::Success { data, .. } => typed_result_data(kind, data)?,
        CommandResult::Failure { .. } => None,
    };
    Ok((result, typed))
}

#[test]
fn valid_results_parse_and_round_trip() {
    let mut failures = Vec::new();
    for fixture in fixtures("results", "valid") {
        let (kind, _) = fixture.name.split_once("--").expect("<kind>--<label>");
        match parse_result_fixture(kind, &fixture.bytes) {
            Ok((result, typed)) => {
                let output = canonical_json(&result.to_value());
                if output != canonical_input(&fixture) {
                    failures.push(format!("{}: round trip differs: {output}", fixture.name));
                }
                if let (Some(typed), CommandResult::Success { data, .. }) = (typed, &result) {
                    let original = canonical_json(&Value::Object(data.clone()));
                    let reserialised = canonical_json(&Value::Object(typed));
                    if original != reserialised {
                        failures.push(format!(
                            "{}: typed data differs: {reserialised}",
                            fixture.name
                        ));
                    }
                }
            }
            Err(error) => failures.push(format!("{}: rejected: {error}", fixture.name)),
        }
    }
    assert_no_failures(failures);
}

#[test]
fn invalid_results_are_rejected_with_the_expected_code() {
    let mut failures = Vec::new();
    for fixture in fixtures("results", "invalid") {
        let (code, rest) = expected_code(&fixture.name);
        let (kind, _) = rest.split_once("--").expect("<CODE>--<kind>--<label>");
        let outcome = parse_result_fixture(kind, &fixture.bytes);
        expect_rejection(&fixture, code, outcome, &mut failures);
    }
    assert_no_failures(failures);
}

#[test]
fn valid_events_parse_and_round_trip() {
    let mut failures = Vec::new();
    for fixture in fixtures("events", "valid") {
        let parsed = parse_event(&fixture.bytes)
            .and_then(|event| EventPayload::from_event(&event).map(|payload| (event, payload)));
        match parsed {
            Ok((event, payload)) => {
                let output = canonical_json(&serde_json::to_value(&event).expect("serialises"));
                if output != canonical_input(&fixture) {
                    failures.push(format!("{}: round trip differs: {output}", fixture.name));
                }
                let typed = canonical_json(&Value::Object(payload.to_data()));
                if typed != canonical_json(&Value::Object((*event.data).clone())) {
                    failures.push(format!("{}: typed data differs: {typed}", fixture.name));
                }
                if !fixture.name.starts_with(event.event_type.as_str()) {
                    failures.push(format!(
                        "{}: parsed as {}",
                        fixture.name,
                        event.event_type.as_str()
                    ));
                }
            }
            Err(error) => failures.push(format!("{}: rejected: {error}", fixture.name)),
        }
    }
    assert_no_failures(failures);
}

#[test]
fn invalid_events_are_rejected_with_the_expected_code() {
    let mut failures = Vec::new();
    for fixture in fixtures("events", "invalid") {
        let (code, _) = expected_code(&fixture.name);
        expect_rejection(&fixture, code, parse_event(&fixture.bytes), &mut failures);
    }
    assert_no_failures(failures);
}

#[test]
fn fixtures_cover_every_command_result_and_stream_variant() {
    let valid_commands = fixtures("commands", "valid");
    let valid_results = fixtures("results", "valid");
    for command_type in COMMAND_TYPES {
        assert!(
            valid_commands
                .iter()
                .any(|f| f.name.starts_with(command_type)),
            "no valid command fixture for {command_type}"
        );
        assert!(
            valid_results
                .iter()
                .any(|f| f.name.starts_with(command_type)),
            "no valid result fixture for {command_type}"
        );
    }
    let stream_types: Vec<String> = fixtures("events", "valid")
        .iter()
        .filter_map(|fixture| {
            let event = parse_event(&fixture.bytes).ok()?;
            let message = StreamMessage::from_data(&event.data).ok()?;
            Some(message.message_type().to_owned())
        })
        .collect();
    for variant in STREAM_MESSAGE_TYPES {
        assert!(
            stream_types.iter().any(|t| t == variant),
            "no valid event fixture for {variant}"
        );
    }
    let failure_with_retry_after = valid_results.iter().any(|fixture| {
        matches!(
            parse_command_result(&fixture.bytes),
            Ok(CommandResult::Failure { ref error, .. }) if error.retry_after_ms.is_some()
        )
    });
    assert!(
        failure_with_retry_after,
        "no failure fixture with retryAfterMs"
    );
}
