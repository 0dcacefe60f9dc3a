//! A2A 1.0 over the one event log (docs/protocols.md §2): the JSON-RPC binding at `POST
//! {base}/a2a` and the agent card at `/.well-known/agent-card.json`. A context is a session, a
//! task one request of it, a message's `messageId` the idempotency key of the command it
//! becomes; every call goes through the same authentication, scopes, admission and idempotent
//! pipeline as protocol v1.

mod card;
mod content;
mod methods;
mod rpc;
mod task;

use std::sync::Arc;

use axum::Extension;
use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::Response;
use axum::routing::{any, get};
use serde_json::Value;

use self::methods::{Call, Reply};
use self::rpc::RpcError;
use crate::http::commands::client_trace;
use crate::http::{ClientAddr, authenticated_body};
use crate::internal::Caller;
use crate::response::json_response;
use crate::state::AppState;

/// The A2A protocol version this server speaks.
pub const PROTOCOL_VERSION: &str = "1.0";

/// Our extension: streamed updates carry their event sequence, and `Last-Event-ID` resumes.
pub const SEQUENCE_EXTENSION: &str = "urn:agent-runtime:a2a:event-sequence:v1";

/// Adds the A2A routes: the JSON-RPC endpoint under `base`, the card at the well-known path.
pub fn add_routes(router: Router<Arc<AppState>>, base: &str) -> Router<Arc<AppState>> {
    router
        .route(&format!("{base}/a2a"), any(endpoint))
        .route("/.well-known/agent-card.json", get(card::public_card))
}

// Stays whole: the binding's steps in order (authenticate, read, parse, version, dispatch).
async fn endpoint(
    State(state): State<Arc<AppState>>,
    method: Method,
    headers: HeaderMap,
    client: Option<Extension<ClientAddr>>,
    body: Body,
) -> Response {
    let (principal, bytes) = match authenticated_body(&state, &method, &headers, client, body).await
    {
        Ok(read) => read,
        Err(response) => return *response,
    };
    let request = match rpc::parse(&bytes) {
        Ok(request) => request,
        Err((id, error)) => return answer(rpc::error(&id, &error), false),
    };
    let asked = headers
        .get("a2a-version")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .trim();
    if !matches!(asked, "1.0" | "1") {
        let error = RpcError::version_not_supported(if asked.is_empty() { "0.3" } else { asked });
        return answer(rpc::error(&request.id, &error), false);
    }
    let sequences = headers
        .get_all("a2a-extensions")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|uri| uri.trim() == SEQUENCE_EXTENSION);
    if state.lifecycle.is_draining() {
        let error =
            RpcError::from_protocol(&agent_runtime::protocol::ProtocolError::shutting_down());
        return answer(rpc::error(&request.id, &error), sequences);
    }
    let tenant = principal.tenant_id.clone();
    let call = Call {
        state: &state,
        caller: Caller {
            principal,
            trace: client_trace(&headers),
        },
        headers: &headers,
        id: request.id.clone(),
        sequences,
    };
    let params = &request.params;
    let reply = match request.method.as_str() {
        "SendMessage" => call.send(params, false).await,
        "SendStreamingMessage" => call.send(params, true).await,
        "GetTask" => call.get_task(params).await,
        "CancelTask" => call.cancel(params).await,
        "SubscribeToTask" => call.subscribe(params).await,
        "GetExtendedAgentCard" => {
            let host = headers
                .get(header::HOST)
                .and_then(|value| value.to_str().ok())
                .unwrap_or("localhost");
            let skills = card::tenant_skills(&state, &tenant).await;
            Ok(Reply::Result(card::card(&state, host, skills)))
        }
        "ListTasks" => Err(RpcError::unsupported(
            "ListTasks is not supported: list a context's tasks with GetTask",
        )),
        "CreateTaskPushNotificationConfig"
        | "GetTaskPushNotificationConfig"
        | "ListTaskPushNotificationConfigs"
        | "DeleteTaskPushNotificationConfig" => Err(RpcError::push_not_supported()),
        other => Err(RpcError::method_not_found(other)),
    };
    match reply {
        Ok(Reply::Result(result)) => answer(rpc::result(&request.id, result), sequences),
        Ok(Reply::Stream(mut response)) => {
            if sequences {
                echo_extension(response.headers_mut());
            }
            response
        }
        Err(error) => answer(rpc::error(&request.id, &error), sequences),
    }
}

/// A JSON-RPC answer: `200`, the response object as JSON.
fn answer(body: Value, sequences: bool) -> Response {
    let mut response = json_response(StatusCode::OK, &body, None);
    if sequences {
        echo_extension(response.headers_mut());
    }
    response
}

/// Says the extension was activated (A2A 1.0 §3.2.6).
fn echo_extension(headers: &mut HeaderMap) {
    headers.insert(
        "a2a-extensions",
        HeaderValue::from_static(SEQUENCE_EXTENSION),
    );
}
