//! The published contract is generated: `docs/openapi.json` and `docs/schema/*.schema.json` must
//! be exactly what `agent_runtime::protocol::schema` makes of the protocol types today. After a
//! change of the types, `AGENT_RUNTIME_UPDATE_SCHEMA=1 cargo nextest run -E 'test(/schema/)'`
//! writes them anew (review the diff: it is a change of the wire contract).

use std::path::PathBuf;

use agent_runtime::ids::is_valid_identifier;
use agent_runtime::protocol::fields::IDENTIFIER_PATTERN;
use agent_runtime::protocol::schema::{json_schemas, openapi};
use serde_json::Value;

fn docs() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs"))
}

/// Every generated document with its path.
pub fn generated() -> Vec<(PathBuf, Value)> {
    let mut documents = vec![(docs().join("openapi.json"), openapi())];
    for (name, schema) in json_schemas() {
        documents.push((docs().join(format!("schema/{name}.schema.json")), schema));
    }
    documents
}

fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap() + "\n"
}

#[test]
fn the_committed_openapi_document_and_schemas_are_the_generated_ones() {
    let update = std::env::var_os("AGENT_RUNTIME_UPDATE_SCHEMA").is_some();
    for (path, document) in generated() {
        let text = pretty(&document);
        if update {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &text).unwrap();
            continue;
        }
        let committed = std::fs::read_to_string(&path)
            .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
        assert!(
            committed == text,
            "{} differs from what the protocol types generate: run with \
             AGENT_RUNTIME_UPDATE_SCHEMA=1 and review the change",
            path.display()
        );
    }
}

/// The schema states the identifier rule as a pattern; the server reads it with code. Both must
/// say the same of every kind of string.
#[test]
fn the_identifier_pattern_of_the_schema_is_the_identifier_rule() {
    let pattern = regex::Regex::new(IDENTIFIER_PATTERN).unwrap();
    let longest = "a".repeat(256);
    let too_long = "a".repeat(257);
    let samples = [
        "a",
        "Z9",
        "_a",
        "-a",
        ".a",
        ":a",
        "a.b:c_d-e",
        "../x",
        "1.0.0",
        "",
        "a b",
        "é",
        "a/b",
        "x\n",
        "\nx",
        "a\u{0}",
        &longest,
        &too_long,
    ];
    for sample in samples {
        assert_eq!(
            pattern.is_match(sample),
            is_valid_identifier(sample),
            "{sample:?}"
        );
    }
}
