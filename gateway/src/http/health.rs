//! `healthz` (always ok) and `readyz` (the store's health; 503 while not ready or shutting down,
//! decision P6; with the MCP servers' health as details). Neither needs authentication, so
//! `readyz` answers an anonymous caller with fixed states, codes and counts only; names, paths and
//! error text from outside (an MCP server's) are for a `session:admin` bearer.

use std::sync::Arc;

use axum::Extension;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};

use agent_runtime::protocol::Scope;
use axum::http::header::AUTHORIZATION;

use super::{ClientAddr, Route, authenticate, not_found};
use crate::response::json_response;
use crate::state::AppState;

pub async fn healthz(
    State(state): State<Arc<AppState>>,
    method: Method,
    headers: HeaderMap,
    client: Option<Extension<ClientAddr>>,
) -> Response {
    if method != Method::GET {
        return not_found(&state, &headers, ClientAddr::of(client));
    }
    json_response(StatusCode::OK, &json!({ "status": "ok" }), None)
}

/// What a store's health says that anyone may read: which backend, its phase, and reasons that
/// are fixed strings of ours (never a path or a message from outside).
const PUBLIC_STORE_DETAILS: [&str; 5] = ["backend", "state", "reason", "error", "schemaVersion"];

pub async fn readyz(
    State(state): State<Arc<AppState>>,
    method: Method,
    headers: HeaderMap,
    client: Option<Extension<ClientAddr>>,
) -> Response {
    if method != Method::GET {
        return not_found(&state, &headers, ClientAddr::of(client));
    }
    let detailed = headers.contains_key(AUTHORIZATION)
        && authenticate(&state, &headers, ClientAddr::of(client), Route::Other)
            .is_ok_and(|principal| principal.scopes.contains(&Scope::SessionAdmin));
    let health = state.store.health_check().await;
    let shutting_down = !state.lifecycle.is_ready();
    let ready = health.ready && !shutting_down;
    let mut body = serde_json::Map::new();
    body.insert(
        "status".to_owned(),
        Value::from(if ready { "ready" } else { "not_ready" }),
    );
    for (key, value) in health.details {
        if key != "status" && (detailed || PUBLIC_STORE_DETAILS.contains(&key.as_str())) {
            body.insert(key, value);
        }
    }
    if let Some(details) = &state.readiness {
        for (key, value) in details(detailed) {
            body.entry(key).or_insert(value);
        }
    }
    if shutting_down {
        body.insert("reason".to_owned(), Value::from("shutting down"));
    }
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    json_response(status, &Value::Object(body), None)
}
