//! The published contract is generated: `docs/openapi.json` and `docs/schema/*.schema.json` must
//! be exactly what `agent_runtime::protocol::schema` makes of the protocol types today. After a
//! change of the types, `AGENT_RUNTIME_UPDATE_SCHEMA=1 cargo nextest run -E 'test(/schema/)'`
//! writes them anew (review the diff: it is a change of the wire contract).

use std::path::PathBuf;

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
