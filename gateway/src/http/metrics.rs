//! `GET /metrics`: this process's metrics in the text format the scraper asks for (no token;
//! see README).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;

use crate::state::AppState;

pub async fn metrics(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|value| value.to_str().ok());
    let Some(render) = state.metrics.as_ref() else {
        // The route exists only when metrics are on; an empty answer keeps it harmless anyway.
        return Response::new(Body::empty());
    };
    let (content_type, body) = render(accept);
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = StatusCode::OK;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}
