//! P0 catalogue entries FUZZ-01 (fuzz the command body) and FUZZ-02 (deep nesting) of
//! docs/reliability.md (the FUZZ entries).
//!
//! FUZZ-01 here is a bounded, deterministic property run, not coverage-guided fuzzing: the corpus
//! is the checked-in golden command fixtures (tests/fixtures/protocol/commands, valid and
//! invalid), and each run replays it plus tens of thousands of seeded mutations (byte flips,
//! interesting-token inserts, truncations, splices, and structural JSON edits). The property: the
//! decoder never panics and answers either a command that re-serialises to itself or a typed 4xx
//! protocol error; a bounded sample also goes through the real HTTP server, which answers every
//! one with a protocol envelope and never a 5xx. A failure prints the seed and the case.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

use crate::support::{TOKEN_A, TestServer};
use agent_runtime::protocol::{ErrorCode, ProtocolError, parse_command};
use serde_json::{Value, json};

/// SplitMix64: a tiny deterministic generator, so a failing case is reproducible from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// The checked-in corpus: every command fixture, valid and invalid.
fn corpus() -> Vec<Vec<u8>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/protocol/commands");
    let mut seeds = Vec::new();
    for dir in ["valid", "invalid"] {
        let mut entries: Vec<_> = std::fs::read_dir(root.join(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for path in entries {
            seeds.push(std::fs::read(path).unwrap());
        }
    }
    assert!(seeds.len() >= 40, "the fixture corpus is there");
    seeds
}

const TOKENS: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    "\"",
    ",",
    ":",
    "\\",
    "\\u0000",
    "\\ud800",
    "null",
    "true",
    "false",
    "0",
    "-0",
    "1e400",
    "-1",
    "1.5",
    "18446744073709551616",
    "NaN",
    "Infinity",
    "\"\"",
    "{}",
    "[]",
    "\u{202e}",
    "\u{feff}",
    "\u{0}",
    "\"type\"",
    "\"data\"",
    "\"sessionId\"",
    "\"commandId\"",
    "\"protocolVersion\"",
    "\"metadata\"",
];

fn random_value(rng: &mut Rng, depth: usize) -> Value {
    match rng.below(if depth > 3 { 6 } else { 8 }) {
        0 => Value::Null,
        1 => json!(rng.below(2) == 0),
        2 => json!(rng.next() as i64),
        3 => json!(rng.below(1000) as f64 / 7.0),
        4 => json!(""),
        5 => json!(*rng.pick(&[
            "x",
            "s-1",
            "../..",
            "\u{0}",
            "now",
            "text",
            "a".repeat(300).as_str()
        ])),
        6 => Value::Array(
            (0..rng.below(3))
                .map(|_| random_value(rng, depth + 1))
                .collect(),
        ),
        _ => {
            let mut object = serde_json::Map::new();
            for _ in 0..rng.below(3) {
                let key = (*rng.pick(&["type", "data", "sessionId", "input", "x", "approved"]))
                    .to_owned();
                object.insert(key, random_value(rng, depth + 1));
            }
            Value::Object(object)
        }
    }
}

/// A structural edit of a JSON document: replace, drop or add at a random node.
fn mutate_value(rng: &mut Rng, value: &mut Value, depth: usize) {
    let descend = depth < 4 && rng.below(3) != 0;
    match value {
        Value::Object(object) if !object.is_empty() && descend => {
            let key = object.keys().nth(rng.below(object.len())).unwrap().clone();
            mutate_value(rng, object.get_mut(&key).unwrap(), depth + 1);
        }
        Value::Array(items) if !items.is_empty() && descend => {
            let index = rng.below(items.len());
            mutate_value(rng, &mut items[index], depth + 1);
        }
        Value::Object(object) => match rng.below(3) {
            0 if !object.is_empty() => {
                let key = object.keys().nth(rng.below(object.len())).unwrap().clone();
                object.remove(&key);
            }
            1 => {
                let key =
                    (*rng.pick(&["tenantId", "extra", "type", "status", "approved"])).to_owned();
                let new = random_value(rng, depth);
                object.insert(key, new);
            }
            _ => *value = random_value(rng, depth),
        },
        _ => *value = random_value(rng, depth),
    }
}

/// A gentle edit that keeps the shape: a string leaf gets another identifier-like value, a
/// number another small number, a boolean flips (these mostly stay valid commands).
fn tweak_leaf(rng: &mut Rng, value: &mut Value) {
    match value {
        Value::Object(object) if !object.is_empty() => {
            let key = object.keys().nth(rng.below(object.len())).unwrap().clone();
            tweak_leaf(rng, object.get_mut(&key).unwrap());
        }
        Value::Array(items) if !items.is_empty() => {
            let index = rng.below(items.len());
            tweak_leaf(rng, &mut items[index]);
        }
        Value::String(text) => {
            *text = format!(
                "{}-{}",
                rng.pick(&["s", "id", "x.y", "A_b"]),
                rng.below(1000)
            )
        }
        Value::Number(_) => *value = json!(1 + rng.below(100)),
        Value::Bool(flag) => *flag = !*flag,
        _ => {}
    }
}

fn mutate(rng: &mut Rng, seeds: &[Vec<u8>]) -> Vec<u8> {
    let mut bytes = rng.pick(seeds).clone();
    if rng.below(4) == 0
        && let Ok(mut value) = serde_json::from_slice::<Value>(&bytes)
    {
        tweak_leaf(rng, &mut value);
        return serde_json::to_vec(&value).unwrap();
    }
    for _ in 0..1 + rng.below(3) {
        let len = bytes.len();
        match rng.below(7) {
            0 if len > 0 => {
                let i = rng.below(len);
                bytes[i] ^= 1 << rng.below(8);
            }
            1 => {
                let i = rng.below(len + 1);
                let token = rng.pick(TOKENS).as_bytes().to_vec();
                bytes.splice(i..i, token);
            }
            2 if len > 0 => {
                let start = rng.below(len);
                let end = (start + 1 + rng.below(16)).min(len);
                bytes.drain(start..end);
            }
            3 => bytes.truncate(rng.below(len + 1)),
            4 => {
                let other = rng.pick(seeds);
                let from = rng.below(other.len());
                let to = (from + rng.below(64)).min(other.len());
                let at = rng.below(len + 1);
                bytes.splice(at..at, other[from..to].iter().copied());
            }
            5 if len > 0 => {
                let i = rng.below(len);
                bytes[i] = rng.next() as u8;
            }
            _ => {
                if let Ok(mut value) = serde_json::from_slice::<Value>(&bytes) {
                    mutate_value(rng, &mut value, 0);
                    bytes = serde_json::to_vec(&value).unwrap();
                }
            }
        }
    }
    bytes
}

/// The FUZZ-01 property for one body; `Err` describes the violation.
fn check_decoder(body: &[u8]) -> Result<(), String> {
    let outcome = catch_unwind(AssertUnwindSafe(|| parse_command(body)))
        .map_err(|_| "the decoder panicked".to_owned())?;
    match outcome {
        Ok(command) => {
            let wire = serde_json::to_vec(&command.to_value()).unwrap();
            let again = parse_command(&wire).map_err(|e| format!("re-parse failed: {e:?}"))?;
            if again != command || again.fingerprint() != command.fingerprint() {
                return Err("a parsed command does not round-trip".to_owned());
            }
            Ok(())
        }
        Err(error) => typed_4xx(&error),
    }
}

fn typed_4xx(error: &ProtocolError) -> Result<(), String> {
    let status = error.http_status();
    let known = matches!(
        error.code,
        ErrorCode::InvalidCommand | ErrorCode::ProtocolVersionUnsupported
    );
    if known && (400..500).contains(&status) && !error.message.is_empty() {
        Ok(())
    } else {
        Err(format!("not a typed 4xx protocol error: {error:?}"))
    }
}

/// Scaled down from a fuzzing campaign to what runs in seconds in CI: 40,000 mutations.
const DECODER_CASES: usize = 40_000;
/// Mutated bodies sent through the real HTTP server (each is a full request).
const HTTP_CASES: usize = 300;

#[tokio::test]
async fn fuzz_01_command_decoder_never_panics() {
    let seeds = corpus();
    for seed in &seeds {
        check_decoder(seed).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(seed)));
    }
    let seed = 0x5EED_F022_0001_u64;
    let mut rng = Rng(seed);
    let (mut accepted, mut refused) = (0, 0);
    for case in 0..DECODER_CASES {
        let body = mutate(&mut rng, &seeds);
        if let Err(problem) = check_decoder(&body) {
            panic!(
                "seed {seed:#x} case {case}: {problem}\n{}",
                String::from_utf8_lossy(&body)
            );
        }
        if parse_command(&body).is_ok() {
            accepted += 1;
        } else {
            refused += 1;
        }
    }
    // The mutations reach both outcomes (a mutator that only produced garbage would prove little).
    assert!(
        accepted > 2_000 && refused > 20_000,
        "{accepted} accepted, {refused} refused"
    );

    // A bounded sample through real HTTP: every answer is a protocol envelope, never a 5xx.
    let server = TestServer::memory().await;
    let mut rng = Rng(seed ^ 0xFFFF);
    for case in 0..HTTP_CASES {
        let body = mutate(&mut rng, &seeds);
        let (status, _, answer) = server.post_raw(TOKEN_A, body.clone()).await;
        let context = || {
            format!(
                "HTTP case {case}: {status} {answer}\n{}",
                String::from_utf8_lossy(&body)
            )
        };
        assert!(status < 500, "{}", context());
        assert_eq!(answer["protocolVersion"], 1, "{}", context());
        assert!(answer["commandId"].is_string(), "{}", context());
        match answer["ok"].as_bool() {
            Some(true) => assert_eq!(status, 200, "{}", context()),
            Some(false) => {
                assert!(status >= 400, "{}", context());
                assert!(answer["error"]["code"].is_string(), "{}", context());
                assert!(answer["error"]["retryable"].is_boolean(), "{}", context());
            }
            None => panic!("no ok flag: {}", context()),
        }
    }
    let (status, _) = server.readyz().await;
    assert_eq!(status, 200, "the server still answers");
    server.stop().await;
}

const DEPTH: usize = 100_000;

/// FUZZ-02: bodies nested 100,000 levels deep (arrays, objects, at the top and inside
/// `data.metadata` and `data.input`) are refused by the decoder with INVALID_COMMAND "Command
/// body is not valid JSON" (serde_json's recursion limit of 128) without a stack overflow, and
/// the same bodies over HTTP get a 400 protocol error while the server keeps answering. No crate
/// of the workspace enables `serde_json/unbounded_depth`. (Deep tool-call arguments from a model
/// are the executor-level half of this entry, tested with the executor's tools.)
#[tokio::test]
async fn fuzz_02_deep_nesting_is_refused_without_overflow() {
    let arrays = format!("{}{}", "[".repeat(DEPTH), "]".repeat(DEPTH));
    let objects = format!("{}1{}", "{\"a\":".repeat(DEPTH), "}".repeat(DEPTH));
    let bodies = [
        ("top-level arrays", arrays.clone()),
        ("top-level objects", objects.clone()),
        (
            "metadata arrays",
            format!(
                r#"{{"protocolVersion":1,"commandId":"deep-1","type":"session.create","data":{{"metadata":{{"x":{arrays}}}}}}}"#
            ),
        ),
        (
            "metadata objects",
            format!(
                r#"{{"protocolVersion":1,"commandId":"deep-2","type":"session.create","data":{{"metadata":{objects}}}}}"#
            ),
        ),
        (
            "input parts",
            format!(
                r#"{{"protocolVersion":1,"commandId":"deep-3","type":"input.submit","data":{{"sessionId":"s","input":[{{"type":"text","text":"x","providerOptions":{{"p":{arrays}}}}}]}}}}"#
            ),
        ),
        ("unterminated", "[".repeat(DEPTH)),
    ];
    for (name, body) in &bodies {
        let error = parse_command(body.as_bytes()).expect_err(name);
        assert_eq!(error.code, ErrorCode::InvalidCommand, "{name}");
        assert_eq!(error.message, "Command body is not valid JSON", "{name}");
        assert_eq!(error.http_status(), 400, "{name}");
    }
    // Just under the limit still parses: the refusal is the depth, not the shape.
    let shallow = format!(
        r#"{{"protocolVersion":1,"commandId":"deep-ok","type":"session.create","data":{{"metadata":{{"x":{}{}}}}}}}"#,
        "[".repeat(100),
        "]".repeat(100)
    );
    parse_command(shallow.as_bytes()).expect("100 levels are fine");

    let server = TestServer::memory().await;
    for (name, body) in &bodies {
        let (status, _, answer) = server.post_raw(TOKEN_A, body.clone().into_bytes()).await;
        assert_eq!(status, 400, "{name}: {answer}");
        assert_eq!(answer["error"]["code"], "INVALID_COMMAND", "{name}");
        assert_eq!(answer["ok"], false);
    }
    let (status, _) = server.readyz().await;
    assert_eq!(status, 200);
    let listed = server.ok(TOKEN_A, "session.list", json!({})).await;
    assert_eq!(listed["sessions"], json!([]), "nothing was created");
    server.stop().await;

    // CI check: no workspace manifest turns the recursion limit off.
    let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let workspace = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let members = workspace
        .split("members = [")
        .nth(1)
        .and_then(|rest| rest.split(']').next())
        .expect("the workspace members");
    let manifests: Vec<_> = members
        .split(',')
        .map(|m| m.trim().trim_matches('"'))
        .filter(|m| !m.is_empty())
        .map(|m| root.join(m).join("Cargo.toml"))
        .collect();
    assert!(manifests.len() >= 7, "{manifests:?}");
    for manifest in manifests {
        let text = std::fs::read_to_string(&manifest).unwrap();
        assert!(
            !text.contains("unbounded_depth"),
            "{} enables serde_json/unbounded_depth",
            manifest.display()
        );
    }
}
