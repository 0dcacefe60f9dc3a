//! The A2A agent card (docs/protocols.md §2.1): `GET /.well-known/agent-card.json` without a
//! token describes the server, its JSON-RPC interface, its bearer authentication and its
//! event-sequence extension, with one skill; `GetExtendedAgentCard` (authenticated) lists the
//! tenant's own skills: the tools of its profile, where this process knows them.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use serde_json::{Value, json};

use super::SEQUENCE_EXTENSION;
use crate::response::json_response;
use crate::state::AppState;

/// The one skill of the public card, and of a tenant whose tools this process does not know.
fn session_skill() -> Value {
    json!({
        "id": "agent-session",
        "name": "Agent session",
        "description": "Runs a conversation turn with a tool-using agent: it answers, runs its tools, and asks for approval when a tool needs one (the task's input-required state).",
        "tags": ["agent", "tools", "approvals"],
        "examples": ["Summarise the files in the workspace"],
    })
}

/// The card, for a request that reached this server through `host` (its interface URL is this
/// server's as the client sees it).
pub fn card(state: &AppState, host: &str, skills: Vec<Value>) -> Value {
    let base = &state.config.base_path;
    let origin = match &state.config.public_url {
        Some(url) => url.trim_end_matches('/').to_owned(),
        None => format!("http://{host}"),
    };
    json!({
        "name": "agent-runtime",
        "description": "A multi-tenant agent session server. A context is a session, a task one request of it; every task can be followed again from its durable event log.",
        "supportedInterfaces": [{
            "url": format!("{origin}{base}/a2a"),
            "protocolBinding": "JSONRPC",
            "protocolVersion": super::PROTOCOL_VERSION,
        }],
        "version": env!("CARGO_PKG_VERSION"),
        "capabilities": {
            "streaming": true,
            "pushNotifications": false,
            "extendedAgentCard": true,
            "extensions": [{
                "uri": SEQUENCE_EXTENSION,
                "description": "Every streamed update carries its cursor in metadata (`cursor`: the event sequence, or `SEQ:K` inside the updates of one event); a SendStreamingMessage or SubscribeToTask sent `Last-Event-ID: <cursor>` continues right after that update: none lost or repeated across a reconnection.",
                "required": false,
            }],
        },
        "securitySchemes": {
            "bearer": {"httpAuthSecurityScheme": {
                "scheme": "Bearer",
                "description": "The token of a tenant (static, or a JWT), as for the server's own API",
            }},
        },
        "securityRequirements": [{"schemes": {"bearer": {"list": []}}}],
        "defaultInputModes": ["text/plain", "application/json", "image/*"],
        "defaultOutputModes": ["text/plain"],
        "skills": if skills.is_empty() { vec![session_skill()] } else { skills },
    })
}

/// The skills of a tenant: the tools of its profile.
pub async fn tenant_skills(state: &AppState, tenant: &str) -> Vec<Value> {
    let Some(tools) = &state.tenant_tools else {
        return Vec::new();
    };
    let mut skills = vec![session_skill()];
    skills.extend(tools(tenant.to_owned()).await.into_iter().map(|(name, description)| {
        json!({"id": name, "name": name, "description": description, "tags": ["tool"]})
    }));
    skills
}

/// `GET /.well-known/agent-card.json`: public, cacheable for a minute.
pub async fn public_card(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let host = headers
        .get(header::HOST)
        .and_then(|value| value.to_str().ok())
        .unwrap_or("localhost");
    let mut response = json_response(StatusCode::OK, &card(&state, host, Vec::new()), None);
    let headers = response.headers_mut();
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=60"),
    );
    // Without `gateway.public_url` the interface URL is made from `Host`.
    headers.insert(header::VARY, HeaderValue::from_static("host"));
    response
}
