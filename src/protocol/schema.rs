//! The protocol as a machine-readable contract (feature `schema`): JSON Schema (draft 2020-12) for
//! every command, result, event and error, and the OpenAPI 3.1 document of the HTTP routes, both
//! generated from the types the server parses with (schemars reads their serde attributes).
//!
//! The schemas describe what the protocol's strict readers accept (the deserialising side), so
//! a server answer that validates is one the reference client reads. The committed copies
//! (`docs/openapi.json`, `docs/schema/*.schema.json`) are checked against this generator by the
//! end-to-end tests; the gateway serves `docs/openapi.json` at `{base}/openapi.json`.

use std::borrow::Cow;

use schemars::generate::{SchemaGenerator, SchemaSettings};
use schemars::{JsonSchema, Schema, json_schema};
use serde_json::{Map, Value, json};

use super::error::ProtocolError;
use super::event::EventType;
use super::fields::IDENTIFIER_PATTERN;
use super::json::ProtocolVersion;
use super::permission::PermissionRequestedData;
use super::shared_object::SharedObject;
use super::stream::StreamMessage;
use crate::session_commands::command_schemas;

impl JsonSchema for ProtocolVersion {
    fn schema_name() -> Cow<'static, str> {
        "ProtocolVersion".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({"description": "The protocol version: always 1.", "const": 1})
    }
}

impl JsonSchema for SharedObject {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "JsonObject".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({"type": "object"})
    }
}

/// `{protocolVersion, commandId}` plus `fields`, all required, nothing else.
fn envelope(generator: &mut SchemaGenerator, fields: Vec<(&str, Value)>) -> Value {
    let mut properties = Map::new();
    properties.insert(
        "protocolVersion".into(),
        generator.subschema_for::<ProtocolVersion>().to_value(),
    );
    properties.insert("commandId".into(), identifier());
    let mut required = vec!["protocolVersion".to_owned(), "commandId".to_owned()];
    for (name, schema) in fields {
        properties.insert(name.to_owned(), schema);
        required.push(name.to_owned());
    }
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

fn identifier() -> Value {
    json!({"type": "string", "pattern": IDENTIFIER_PATTERN})
}

/// The root schemas, by name: every definition they use is in the generator afterwards.
fn roots(generator: &mut SchemaGenerator) -> Vec<(&'static str, Value)> {
    let commands = command_schemas(generator);
    let command = commands
        .iter()
        .map(|(kind, data, ok)| {
            let fields = vec![
                ("type", json!({"const": kind})),
                ("data", data.as_value().clone()),
            ];
            let mut command = envelope(generator, fields);
            // The success `data` this command answers: what pairs a command with its result
            // for clients and validators (an annotation; it validates nothing).
            command["x-result-data"] = ok.as_value().clone();
            command
        })
        .collect::<Vec<_>>();
    // Several commands share a result type: each schema once. `anyOf`, as a success's data is
    // told apart by the command it answers, not by its own shape.
    let mut successes: Vec<Value> = Vec::new();
    for (_, _, ok) in &commands {
        let ok = ok.as_value().clone();
        if !successes.contains(&ok) {
            successes.push(ok);
        }
    }
    let success = envelope(
        generator,
        vec![
            ("ok", json!({"const": true})),
            ("data", json!({"anyOf": successes})),
        ],
    );
    let error = generator.subschema_for::<ProtocolError>().to_value();
    let failure = envelope(
        generator,
        vec![("ok", json!({"const": false})), ("error", error.clone())],
    );
    let event_data = [
        (
            EventType::SessionStream,
            generator.subschema_for::<StreamMessage>().to_value(),
        ),
        (
            EventType::PermissionRequested,
            generator
                .subschema_for::<PermissionRequestedData>()
                .to_value(),
        ),
        (EventType::SessionClosed, json!({"type": "object"})),
    ];
    let events = event_data
        .into_iter()
        .map(|(event_type, data)| event(generator, event_type, data))
        .collect::<Vec<_>>();
    vec![
        (
            "Command",
            json!({"description": "A command: the body of POST {base}/commands.", "oneOf": command}),
        ),
        (
            "CommandResult",
            json!({"description": "The answer to a command.", "oneOf": [success, failure]}),
        ),
        (
            "AgentEvent",
            json!({"description": "One event of a session's stream: the JSON of an SSE `data:` line.", "oneOf": events}),
        ),
        (
            "ProtocolError",
            json!({"description": "The `error` of a failed command.", "allOf": [error]}),
        ),
    ]
}

/// The envelope of one event type with its `data` schema.
fn event(generator: &mut SchemaGenerator, event_type: EventType, data: Value) -> Value {
    json!({
        "type": "object",
        "properties": {
            "protocolVersion": generator.subschema_for::<ProtocolVersion>().to_value(),
            "eventId": {"type": "string", "minLength": 1},
            "sequence": {"type": "integer", "minimum": 1},
            "sessionId": {"type": "string", "minLength": 1},
            "requestId": {"type": "string", "minLength": 1},
            "occurredAt": {"type": "string", "format": "date-time"},
            "type": {"const": event_type.as_str()},
            "data": data,
        },
        "required": ["protocolVersion", "eventId", "sequence", "sessionId", "occurredAt", "type", "data"],
        "additionalProperties": false,
    })
}

fn generator(definitions_path: &'static str) -> SchemaGenerator {
    SchemaSettings::draft2020_12()
        .with(|settings| settings.definitions_path = definitions_path.into())
        .into_generator()
}

/// The JSON Schema documents, `(file stem, schema)`: one per root (command, command result,
/// event, error), each with the definitions it uses under `$defs`.
pub fn json_schemas() -> Vec<(String, Value)> {
    let mut generator = generator("#/$defs/");
    let roots = roots(&mut generator);
    let definitions = generator.take_definitions(true);
    roots
        .into_iter()
        .map(|(name, schema)| {
            let mut document = json!({
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "$id": format!("https://agent-runtime.invalid/schema/{name}.schema.json"),
                "title": name,
            });
            if let (Value::Object(object), Value::Object(root)) = (&mut document, schema) {
                object.extend(root);
            }
            let used = used_definitions(&document, &definitions);
            document["$defs"] = Value::Object(used);
            (name.to_owned(), document)
        })
        .collect()
}

/// The definitions `document` refers to, directly or through other definitions.
fn used_definitions(document: &Value, definitions: &Map<String, Value>) -> Map<String, Value> {
    let mut used = Map::new();
    let mut pending = vec![document];
    while let Some(value) = pending.pop() {
        match value {
            Value::Object(object) => {
                if let Some(Value::String(reference)) = object.get("$ref")
                    && let Some(name) = reference.strip_prefix("#/$defs/")
                    && !used.contains_key(name)
                    && let Some(definition) = definitions.get(name)
                {
                    used.insert(name.to_owned(), definition.clone());
                    pending.push(definition);
                }
                pending.extend(object.values());
            }
            Value::Array(items) => pending.extend(items),
            _ => {}
        }
    }
    used.sort_keys();
    used
}

/// The OpenAPI 3.1 document of the HTTP API under the default base path `/v1/agent`.
pub fn openapi() -> Value {
    let mut generator = generator("#/components/schemas/");
    let roots = roots(&mut generator);
    let mut schemas = generator.take_definitions(true);
    for (name, schema) in roots {
        // `ProtocolError` is a definition already; the other roots are documents of their own.
        schemas.entry(name).or_insert(schema);
    }
    let reference = |name: &str| json!({"$ref": format!("#/components/schemas/{name}")});
    let failure = json!({
        "description": "A failure: `ok` is false and `error` says why (docs/protocol.md §3).",
        "content": {"application/json": {"schema": reference("CommandResult")}},
    });
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "agent-runtime: agent session API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Protocol v1 of the agent session server (docs/protocol.md): idempotent commands and a replayable event stream per session.",
        },
        "jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
        "security": [{"bearer": []}],
        "paths": {
            "/v1/agent/commands": {
                "post": {
                    "operationId": "runCommand",
                    "summary": "Runs one command; a retry with the same commandId and body replays its stored result.",
                    "requestBody": {
                        "required": true,
                        "content": {"application/json": {"schema": reference("Command")}},
                    },
                    "responses": {
                        "200": {
                            "description": "The command's result (`ok` true).",
                            "headers": {"idempotent-replayed": {
                                "description": "`true` when the body is the stored result of an earlier run.",
                                "schema": {"type": "string", "enum": ["true"]},
                            }},
                            "content": {"application/json": {"schema": reference("CommandResult")}},
                        },
                        "4XX": failure,
                        "5XX": failure,
                    },
                },
            },
            "/v1/agent/sessions/{sessionId}/events": {
                "get": {
                    "operationId": "followSessionEvents",
                    "summary": "The session's events as Server-Sent Events, from after a sequence; replayed from the store, then live.",
                    "parameters": [
                        {"name": "sessionId", "in": "path", "required": true, "schema": identifier()},
                        {"name": "after", "in": "query", "required": false, "description": "Deliver events with a greater sequence (default 0).", "schema": {"type": "integer", "minimum": 0}},
                        {"name": "Last-Event-ID", "in": "header", "required": false, "description": "The last sequence the client received; wins over `after` on a reconnect.", "schema": {"type": "string"}},
                    ],
                    "responses": {
                        "200": {
                            "description": "An SSE stream: each event's `id:` is its sequence, its `data:` one AgentEvent; `: heartbeat` comments keep it open. It ends after `session.closed`.",
                            "content": {"text/event-stream": {
                                "schema": {"type": "string"},
                                "x-event-schema": reference("AgentEvent"),
                            }},
                        },
                        "4XX": failure,
                        "5XX": failure,
                    },
                },
            },
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer", "description": "A configured token, a JWT, or none behind a trusted proxy (README, Authentication)."}},
            "schemas": schemas,
        },
    })
}
