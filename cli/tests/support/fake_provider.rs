//! A fake OpenAI-compatible provider (`POST /v1/chat/completions`) answering from a script, and
//! the streamed answers it sends.

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

pub fn chunk(delta: Value, finish: Option<&str>) -> String {
    let body = json!({
        "id": "c1", "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    });
    format!("data: {body}\n\n")
}

pub fn text_answer(text: &str) -> String {
    let mut out = chunk(json!({"role": "assistant", "content": text}), None);
    out.push_str(&chunk(json!({}), Some("stop")));
    out.push_str("data: [DONE]\n\n");
    out
}

pub fn bash_call(command: &str) -> String {
    tool_call("Bash", &json!({ "command": command }).to_string())
}

/// One call of the tool `name` with `arguments` (JSON text), streamed in one chunk.
pub fn tool_call(name: &str, arguments: &str) -> String {
    let call = json!({"role": "assistant", "tool_calls": [{
        "index": 0, "id": "call_1", "type": "function",
        "function": {"name": name, "arguments": arguments},
    }]});
    let mut out = chunk(call, None);
    out.push_str(&chunk(json!({}), Some("tool_calls")));
    out.push_str("data: [DONE]\n\n");
    out
}

/// What the fake provider does with a call, decided from the request.
pub type Script =
    Arc<dyn Fn(&str, &Value) -> (u16, Vec<(&'static str, String)>, String) + Send + Sync>;

#[derive(Clone)]
pub struct FakeProvider {
    /// (headers, request body) of every call.
    requests: Arc<Mutex<Vec<(axum::http::HeaderMap, Value)>>>,
    script: Script,
}

impl FakeProvider {
    pub async fn start(script: Script) -> (FakeProvider, String) {
        let provider = FakeProvider {
            requests: Arc::default(),
            script,
        };
        let state = provider.clone();
        let app = axum::Router::new().route(
            "/v1/chat/completions",
            axum::routing::post(
                move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                    let state = state.clone();
                    async move {
                        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                        let authorization = headers
                            .get("authorization")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or_default()
                            .to_owned();
                        let (status, answer_headers, text) = (state.script)(&authorization, &body);
                        state.requests.lock().unwrap().push((headers, body));
                        let mut response = axum::response::Response::builder().status(status);
                        let streaming = status == 200;
                        response = response.header(
                            "content-type",
                            if streaming {
                                "text/event-stream"
                            } else {
                                "application/json"
                            },
                        );
                        for (name, value) in answer_headers {
                            response = response.header(name, value);
                        }
                        response.body(axum::body::Body::from(text)).unwrap()
                    }
                },
            ),
        );
        // Conversations carrying large tool inputs are larger than axum's default 2 MB.
        let app = app.layer(axum::extract::DefaultBodyLimit::disable());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        (provider, format!("http://{address}/v1"))
    }

    /// (authorization header, request body) of every call.
    pub fn calls(&self) -> Vec<(String, Value)> {
        self.requests()
            .into_iter()
            .map(|(headers, body)| {
                let authorization = headers
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned();
                (authorization, body)
            })
            .collect()
    }

    /// (headers, request body) of every call.
    pub fn requests(&self) -> Vec<(axum::http::HeaderMap, Value)> {
        self.requests.lock().unwrap().clone()
    }
}
