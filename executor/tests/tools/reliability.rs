//! Reliability catalogue entries (docs/reliability.md) for tool input handling that
//! need every tool at once: FUZZ-10 (schema-invalid and hostile tool arguments). Bash runs in the
//! bubblewrap sandbox, so the test needs `bwrap` (scripts/test.sh installs it).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::support::{Harness, ScriptedModel, stream_type};
use agent_runtime::protocol::EventEnvelope;
use agent_runtime_executor::permissions::PermissionMode;
use agent_runtime_executor::provider::{ModelToolCall, ModelTurn};
use agent_runtime_executor::sandbox::{Sandbox, SandboxConfig};
use agent_runtime_executor::tools::{ToolsConfig, WebFetchConfig, schema};
use agent_runtime_executor::{DEFAULT_MAX_EVENT_BYTES, ExecutorConfig};
use agent_runtime_store::testing::rng::SeededRng;
use serde_json::{Map, Value, json};

/// Every field name of the five tools, so random objects often hit a real one with a wrong value.
const FIELDS: &[&str] = &[
    "file_path",
    "offset",
    "limit",
    "pattern",
    "path",
    "glob",
    "case_insensitive",
    "command",
    "timeout_ms",
    "description",
    "url",
];

const STRINGS: &[&str] = &[
    "",
    "null",
    "true",
    "1",
    "{}",
    "[]",
    "../../etc/passwd",
    "/proc/self/environ",
    "$(touch fuzz-ran)",
    "`touch fuzz-ran`",
    "touch fuzz-ran",
    "a\0b",
    "\u{202e}txt.exe",
    "\r\n",
    "**/*",
    "(a{1000}){1000}",
    "file:///etc/passwd",
    "http://[::1]/",
    "\u{feff}",
    "é",
];

fn random_string(rng: &mut SeededRng) -> String {
    if rng.below(2) == 0 {
        return STRINGS[rng.index(STRINGS.len())].to_owned();
    }
    const ALPHABET: &[char] = &[
        'a',
        'Z',
        '0',
        ' ',
        '/',
        '.',
        '*',
        '$',
        '(',
        ')',
        '`',
        ';',
        '|',
        '&',
        '\\',
        '"',
        '\'',
        '\n',
        '\0',
        'é',
        '\u{1F600}',
        '{',
        '}',
        '[',
        ']',
    ];
    (0..rng.below(40))
        .map(|_| ALPHABET[rng.index(ALPHABET.len())])
        .collect()
}

/// A random JSON value, at most `depth` levels of arrays and objects deep.
fn random_value(rng: &mut SeededRng, depth: u32) -> Value {
    let kinds = if depth == 0 { 5 } else { 7 };
    match rng.below(kinds) {
        0 => Value::Null,
        1 => Value::Bool(rng.below(2) == 0),
        2 => {
            const NUMBERS: &[&str] = &[
                "0",
                "-1",
                "1",
                "-9223372036854775808",
                "18446744073709551615",
                "9007199254740993",
                "0.5",
                "-0.0",
                "1e308",
                "1.0",
                "1e2",
            ];
            serde_json::from_str(NUMBERS[rng.index(NUMBERS.len())]).unwrap()
        }
        3 | 4 => Value::String(random_string(rng)),
        5 => Value::Array(
            (0..rng.below(4))
                .map(|_| random_value(rng, depth - 1))
                .collect(),
        ),
        _ => Value::Object(random_object(rng, depth - 1)),
    }
}

fn random_object(rng: &mut SeededRng, depth: u32) -> Map<String, Value> {
    (0..rng.below(5))
        .map(|_| {
            let key = match rng.below(3) {
                0 => random_string(rng),
                _ => FIELDS[rng.index(FIELDS.len())].to_owned(),
            };
            (key, random_value(rng, depth))
        })
        .collect()
}

/// A schema-invalid input for a tool whose valid input is `base`: a random value, or `base`
/// with fields replaced by random values, removed, or added. An input that happens to be valid
/// gets an unknown field, so every one of them is invalid.
fn invalid_input(rng: &mut SeededRng, base: &Value, input_schema: &Value, n: usize) -> Value {
    let mut input = match rng.below(4) {
        0 => random_value(rng, 2),
        1 => Value::Object(random_object(rng, 2)),
        _ => {
            let mut object = base.as_object().unwrap().clone();
            for _ in 0..=rng.below(3) {
                let keys: Vec<String> = object.keys().cloned().collect();
                match rng.below(3) {
                    0 if !keys.is_empty() => {
                        let key = keys[rng.index(keys.len())].clone();
                        object.insert(key, random_value(rng, 2));
                    }
                    1 if !keys.is_empty() => {
                        object.remove(&keys[rng.index(keys.len())]);
                    }
                    _ => {
                        let key = FIELDS[rng.index(FIELDS.len())].to_owned();
                        object.insert(key, random_value(rng, 2));
                    }
                }
            }
            Value::Object(object)
        }
    };
    if schema::validate(input_schema, &input).is_ok() {
        let object = match input.as_object_mut() {
            Some(object) => object,
            None => unreachable!("only objects validate"),
        };
        object.insert(format!("fuzz_{n}"), random_value(rng, 1));
    }
    input
}

fn call(id: usize, name: &str, arguments: String) -> ModelToolCall {
    ModelToolCall {
        id: format!("c{id}"),
        name: name.to_owned(),
        arguments,
    }
}

/// Counts every request it gets, on any path.
async fn counting_upstream() -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let app = axum::Router::new().fallback(move || {
        let counter = counter.clone();
        async move {
            counter.fetch_add(1, Ordering::SeqCst);
            "upstream reached"
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (address, hits)
}

/// FUZZ-10: schema-invalid arguments for Read, Glob, Grep, Bash and WebFetch reach the real
/// pipeline in `yolo` mode (every valid call would run, so the schema and the tools' own checks
/// are all that stand in the way): for each tool the input as null, an array, a string, a
/// number, a boolean, `{}`, each required field as every wrong type, an extra field, arguments
/// that are not JSON at all, 10 MB strings (as an extra field, and in the tool's own string
/// field, which is schema-valid), and 60 seeded random inputs per tool (seed 10, a fixed
/// xorshift). Every call gets an error `tool_result`, the schema-invalid ones "Invalid input";
/// no error quotes a 10 MB value back; nothing ran (no Bash marker, no request reached the
/// upstream WebFetch was pointed at); the executor goes on: valid calls afterwards run, and a
/// second request of the session completes.
#[tokio::test]
async fn fuzz_10_schema_invalid_tool_arguments_are_tool_errors_and_run_nothing() {
    let sandbox = SandboxConfig {
        enabled: true,
        ..SandboxConfig::default()
    };
    assert!(
        matches!(Sandbox::probe(&sandbox).await, Ok(Some(_))),
        "bubblewrap must be installed and runnable for this test"
    );
    let cwd = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    std::fs::write(cwd.path().join("notes.txt"), "alpha\n").unwrap();
    let (upstream, hits) = counting_upstream().await;
    let url = format!("http://127.0.0.1:{}/fuzz", upstream.port());
    let tools = ToolsConfig {
        builtin_tools: true,
        allowed_tools: Some(
            ["Read", "Glob", "Grep", "Bash", "WebFetch"]
                .map(String::from)
                .to_vec(),
        ),
        roots: vec![cwd.path().to_path_buf()],
        sandbox,
        web_fetch: WebFetchConfig {
            allow_private_addresses: true,
            ..WebFetchConfig::default()
        },
        ..ToolsConfig::default()
    }
    .build(Vec::new())
    .await
    .unwrap();
    // Valid inputs; each would leave a trace if it ran (Bash a marker, WebFetch a hit).
    let bases = [
        (
            "Read",
            json!({ "file_path": "notes.txt", "offset": 1, "limit": 5 }),
        ),
        ("Glob", json!({ "pattern": "**/*", "path": "." })),
        (
            "Grep",
            json!({ "pattern": "alpha", "path": ".", "glob": "*", "case_insensitive": true }),
        ),
        (
            "Bash",
            json!({ "command": "touch fuzz-ran", "timeout_ms": 5000, "description": "d" }),
        ),
        ("WebFetch", json!({ "url": url })),
    ];
    let ten_mb = "a".repeat(10 * 1024 * 1024);
    let mut rng = SeededRng::new(10);
    // (call, schema-valid)
    let mut calls: Vec<(ModelToolCall, bool)> = Vec::new();
    // The 10 MB cases, in a session of their own: a conversation of many turns that each carry
    // 50 MB of arguments is slow to run, not what is tested here.
    let mut huge_calls: Vec<(ModelToolCall, bool)> = Vec::new();
    for (name, base) in &bases {
        let input_schema = tools.get(name).unwrap().spec().input_schema;
        let required = input_schema["required"][0].as_str().unwrap().to_owned();
        let mut inputs: Vec<Value> = vec![
            Value::Null,
            json!([base]),
            json!("notes.txt"),
            json!(42),
            json!(true),
            json!({}),
        ];
        for wrong in [
            json!(42),
            json!(1.5),
            json!(true),
            Value::Null,
            json!([base[&required]]),
            json!({ "value": base[&required] }),
            json!(""),
        ] {
            let mut input = base.clone();
            input[&required] = wrong;
            inputs.push(input);
        }
        let mut extra = base.clone();
        extra["extra"] = json!(1);
        inputs.push(extra);
        let mut huge_extra = base.clone();
        huge_extra["padding"] = json!(ten_mb);
        huge_calls.push((call(huge_calls.len(), name, huge_extra.to_string()), false));
        for n in 0..60 {
            inputs.push(invalid_input(&mut rng, base, &input_schema, n));
        }
        for input in inputs {
            assert!(
                schema::validate(&input_schema, &input).is_err(),
                "the generator made a valid {name} input: {input}"
            );
            calls.push((call(calls.len(), name, input.to_string()), false));
        }
        for raw in [
            String::new(),
            "not json".to_owned(),
            format!("{{\"{required}\": "),
            format!("{base}{base}"),
            format!("[{base}"),
        ] {
            calls.push((call(calls.len(), name, raw), false));
        }
        // A 10 MB string in the tool's own field is schema-valid: the tools' limits refuse it
        // (or, for Bash, the kernel refuses to start it).
        let mut huge = base.clone();
        huge[&required] = match *name {
            "Bash" => json!(format!("touch fuzz-ran; : {ten_mb}")),
            "WebFetch" => json!(format!("{url}?{ten_mb}")),
            _ => json!(ten_mb),
        };
        huge_calls.push((call(huge_calls.len(), name, huge.to_string()), true));
    }
    let turns: Vec<ModelTurn> = calls
        .chunks(40)
        .map(|chunk| ModelTurn {
            tool_calls: chunk.iter().map(|(call, _)| call.clone()).collect(),
            ..ModelTurn::default()
        })
        .collect();
    assert!(turns.len() < 16, "within the default turn limit");
    let alive = [
        call(0, "Read", json!({ "file_path": "notes.txt" }).to_string()),
        call(1, "Bash", json!({ "command": "touch alive" }).to_string()),
        call(
            2,
            "WebFetch",
            json!({ "url": format!("{url}/alive") }).to_string(),
        ),
    ];
    let huge_turn = ModelTurn {
        tool_calls: huge_calls.iter().map(|(call, _)| call.clone()).collect(),
        ..ModelTurn::default()
    };
    let mut config = ExecutorConfig::default();
    config.permissions.mode = PermissionMode::Yolo;
    let huge = Harness::new(
        ScriptedModel::new([huge_turn]),
        tools.clone(),
        config.clone(),
    );
    let huge_session = huge.create().await;
    huge.submit(&huge_session, "go").await;
    let huge_events = huge.until_result(&huge_session, 0).await;

    let mut script = turns;
    script.push(ModelTurn {
        tool_calls: alive.to_vec(),
        ..ModelTurn::default()
    });
    let harness = Harness::new(ScriptedModel::new(script), tools, config);
    let session = harness.create().await;
    harness.submit(&session, "go").await;
    let events = harness.until_result(&session, 0).await;
    let result = events.last().unwrap();
    assert_eq!(result.data["subtype"], "success", "{:?}", result.data);

    let tool_results = |events: &[EventEnvelope]| -> Vec<EventEnvelope> {
        events
            .iter()
            .filter(|e| stream_type(e) == "tool_result")
            .cloned()
            .collect()
    };
    let results = tool_results(&events);
    assert_eq!(results.len(), calls.len() + alive.len());
    let huge_results = tool_results(&huge_events);
    assert_eq!(huge_results.len(), huge_calls.len());
    for ((call, valid), result) in calls
        .iter()
        .zip(&results)
        .chain(huge_calls.iter().zip(&huge_results))
    {
        let shown: String = call.arguments.chars().take(120).collect();
        assert_eq!(result.data["name"], call.name.as_str());
        assert_eq!(result.data["isError"], true, "{} {shown}", call.name);
        let output = result.data["output"].to_string();
        assert!(
            output.len() < 10_000,
            "{} {shown}: a {} byte answer",
            call.name,
            output.len()
        );
        let error = result.data["output"]["error"].as_str().unwrap_or_default();
        if *valid {
            assert!(!error.is_empty(), "{} {shown}: {output}", call.name);
        } else if call.arguments.len() > DEFAULT_MAX_EVENT_BYTES {
            // More than one event may carry: refused before its schema is read.
            assert!(
                error.contains("more than one event may carry"),
                "{} {shown}: {error}",
                call.name
            );
        } else {
            assert!(
                error.starts_with("Invalid input"),
                "{} {shown}: {error}",
                call.name
            );
        }
    }
    assert!(
        !cwd.path().join("fuzz-ran").exists(),
        "a fuzzed Bash call ran"
    );
    // The executor goes on: the valid calls after the fuzz ran, each once.
    let after: Vec<_> = results[calls.len()..]
        .iter()
        .map(|r| (r.data["name"].clone(), r.data["isError"].clone()))
        .collect();
    assert_eq!(
        after,
        [
            (json!("Read"), json!(false)),
            (json!("Bash"), json!(false)),
            (json!("WebFetch"), json!(false)),
        ]
    );
    assert!(cwd.path().join("alive").exists());
    assert_eq!(
        hits.load(Ordering::SeqCst),
        1,
        "only the valid fetch reached the upstream"
    );
    let next = events.last().unwrap().sequence;
    harness.submit(&session, "again").await;
    let second = harness.until_result(&session, next).await;
    assert_eq!(second.last().unwrap().data["subtype"], "success");
}
