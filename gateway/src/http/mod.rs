//! The HTTP surface (protocol.md §4): routes, authentication before routing, CORS before
//! authentication (decision P10), and the web console's static files.

mod commands;
pub mod console;
mod events;
mod health;
mod metrics;

use std::sync::Arc;

use agent_runtime::protocol::error::pseudo_command_id;
use agent_runtime::protocol::{Principal, ProtocolError};
use axum::Router;
use axum::http::{HeaderMap, HeaderValue, Method};
use axum::response::Response;
use axum::routing::{any, get};
use tower_http::cors::{AllowOrigin, Any, CorsLayer};
use tower_http::trace::TraceLayer;

use crate::response::failure_response;
use crate::state::AppState;

/// Builds the router for `state.config.base_path`.
pub fn router(state: Arc<AppState>) -> Router {
    let base = state.config.base_path.clone();
    let cors = cors_layer(&state.config.cors_allowed_origins);
    let mut router = Router::new();
    if state.metrics.is_some() {
        // Outside the base path and without a token, like any Prometheus target; operators who
        // do not want it on this listener turn it off or move it (README, Telemetry).
        router = router.route("/metrics", get(metrics::metrics));
    }
    let router = router
        .route(&format!("{base}/healthz"), any(health::healthz))
        .route(&format!("{base}/readyz"), any(health::readyz))
        .route(&format!("{base}/commands"), any(commands::commands))
        .route(
            &format!("{base}/sessions/{{session_id}}/events"),
            any(events::events),
        )
        .fallback(route_not_found);
    // The console's files are registered one by one, so every other path keeps the
    // authenticate-first fallback.
    let router = if state.config.console {
        console::add_routes(router, &base)
    } else {
        router
    };
    let router = router.with_state(state).layer(TraceLayer::new_for_http());
    match cors {
        Some(cors) => router.layer(cors),
        None => router,
    }
}

fn cors_layer(origins: &[String]) -> Option<CorsLayer> {
    if origins.is_empty() {
        return None;
    }
    let allow_origin = if origins.iter().any(|origin| origin == "*") {
        AllowOrigin::any()
    } else {
        let values: Vec<HeaderValue> = origins
            .iter()
            .filter_map(|origin| HeaderValue::from_str(origin).ok())
            .collect();
        AllowOrigin::list(values)
    };
    Some(
        CorsLayer::new()
            .allow_origin(allow_origin)
            .allow_methods([Method::GET, Method::POST, Method::OPTIONS])
            .allow_headers(Any)
            .expose_headers([axum::http::header::RETRY_AFTER]),
    )
}

/// Authenticates and validates the principal (protocol.md §4.3); the error is the response.
fn authenticate(state: &AppState, headers: &HeaderMap) -> Result<Principal, Box<Response>> {
    let failure = |error: ProtocolError| {
        Box::new(failure_response(
            pseudo_command_id::AUTHENTICATION,
            &error,
            false,
        ))
    };
    match state.auth.authenticate(headers) {
        Ok(Some(principal)) => match principal.validate() {
            Ok(()) => Ok(principal),
            Err(error) => Err(failure(error)),
        },
        Ok(None) => Err(failure(ProtocolError::unauthenticated())),
        Err(error) => Err(failure(error)),
    }
}

/// Anything that is not a route: authentication first, so an anonymous caller learns nothing.
async fn route_not_found(
    axum::extract::State(state): axum::extract::State<Arc<AppState>>,
    headers: HeaderMap,
) -> Response {
    not_found(&state, &headers)
}

fn not_found(state: &AppState, headers: &HeaderMap) -> Response {
    if let Err(response) = authenticate(state, headers) {
        return *response;
    }
    failure_response(
        pseudo_command_id::ROUTING,
        &ProtocolError::route_not_found(),
        false,
    )
}
