//! An MCP server that lies and misbehaves, for the MCP reliability tests: streamable HTTP with
//! plain JSON answers (no event stream), tools whose results are huge, slow or oddly shaped,
//! names that do not fit, schemas that are not objects or not even JSON objects, descriptions
//! of any size, and tool lists whose pages never end.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

/// Size of the `huge` tool's text: past the client's default message cap (4 MiB).
pub const HUGE_BYTES: usize = 6 << 20;
/// Size of the `big` tool's text: under the message cap, over the tool output cap.
pub const BIG_BYTES: usize = 200_000;

pub struct HostileServer {
    pub address: SocketAddr,
    pub state: Arc<Hostility>,
    task: tokio::task::JoinHandle<()>,
}

/// What the server does, switched at run time, and what it saw.
#[derive(Default)]
pub struct Hostility {
    /// Adds the tool `late` to its list (a list that changes at run time).
    pub late: AtomicBool,
    /// How `tools/list` pages: [`PAGES_END`], [`PAGES_REPEAT`] (always the same next cursor) or
    /// [`PAGES_ENDLESS`] (always a new one).
    pub pages: AtomicU8,
    /// `tools/list` requests answered.
    pub tool_lists: AtomicUsize,
}

pub const PAGES_END: u8 = 0;
pub const PAGES_REPEAT: u8 = 1;
pub const PAGES_ENDLESS: u8 = 2;

impl Drop for HostileServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl HostileServer {
    pub async fn start() -> Self {
        let state = Arc::new(Hostility::default());
        let app = Router::new()
            .route(
                "/mcp",
                post(answer)
                    .get(|| async { StatusCode::METHOD_NOT_ALLOWED })
                    .delete(|| async { StatusCode::OK }),
            )
            .with_state(Arc::clone(&state));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self {
            address,
            state,
            task,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.address)
    }
}

fn tool(name: &str, schema: Value, description: &str) -> Value {
    json!({ "name": name, "description": description, "inputSchema": schema })
}

fn tools(late: bool) -> Value {
    let object = json!({ "type": "object", "properties": {} });
    let mut tools = json!([
        tool(
            "huge",
            object.clone(),
            "Answers more than any client should take."
        ),
        tool("big", object.clone(), "Answers a lot of text."),
        tool("slow", object.clone(), "Never answers in time."),
        tool(
            "odd",
            object.clone(),
            "Answers content of a type nobody knows."
        ),
        tool("wordy", object.clone(), &"blah ".repeat(50_000)),
        tool(
            &"x".repeat(100),
            object.clone(),
            "Its name is too long for providers."
        ),
        tool("dotted.name", object.clone(), "Its name has a dot."),
        tool("meta", object.clone(), "Answers the `_meta` of its call."),
        tool(
            "scalar",
            json!({ "type": "string" }),
            "Its input is not an object."
        ),
        tool(
            "strict",
            json!({ "type": "object", "properties": { "n": { "type": "integer" } }, "required": ["n"] }),
            "Needs an integer."
        ),
        tool(
            "broken",
            json!("not a schema"),
            "Its input schema is not a JSON object."
        ),
    ]);
    if late {
        let late = tool("late", object, "Added at run time.");
        tools.as_array_mut().unwrap().push(late);
    }
    tools
}

async fn answer(State(state): State<Arc<Hostility>>, body: String) -> Response {
    let Ok(message) = serde_json::from_str::<Value>(&body) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let Some(id) = message.get("id").cloned() else {
        // A notification.
        return StatusCode::ACCEPTED.into_response();
    };
    let result = match message["method"].as_str().unwrap_or_default() {
        "initialize" => json!({
            "protocolVersion": "2025-11-25",
            "capabilities": { "tools": {} },
            "serverInfo": { "name": "hostile", "version": "1" },
        }),
        "tools/list" => {
            let page = state.tool_lists.fetch_add(1, Ordering::SeqCst);
            let mut listed = json!({ "tools": tools(state.late.load(Ordering::SeqCst)) });
            match state.pages.load(Ordering::SeqCst) {
                PAGES_REPEAT => listed["nextCursor"] = json!("again"),
                PAGES_ENDLESS => listed["nextCursor"] = json!(format!("page-{page}")),
                _ => {}
            }
            listed
        }
        "ping" => json!({}),
        "tools/call" => match message["params"]["name"].as_str().unwrap_or_default() {
            "huge" => text_result(&"h".repeat(HUGE_BYTES)),
            "big" => text_result(&"b".repeat(BIG_BYTES)),
            "slow" => {
                tokio::time::sleep(Duration::from_secs(30)).await;
                text_result("too late")
            }
            "odd" => json!({ "content": [
                { "type": "hologram", "data": "?" },
                { "type": "text", "text": "and some text" },
            ]}),
            "strict" => text_result(&format!("n = {}", message["params"]["arguments"]["n"])),
            "meta" => text_result(&message["params"]["_meta"].to_string()),
            _ => text_result("ok"),
        },
        _ => {
            let error = json!({ "code": -32601, "message": "Method not found" });
            return rpc(json!({ "jsonrpc": "2.0", "id": id, "error": error }));
        }
    };
    rpc(json!({ "jsonrpc": "2.0", "id": id, "result": result }))
}

fn text_result(text: &str) -> Value {
    json!({ "content": [{ "type": "text", "text": text }] })
}

fn rpc(body: Value) -> Response {
    (
        [
            ("content-type", "application/json"),
            ("mcp-session-id", "hostile-session"),
        ],
        body.to_string(),
    )
        .into_response()
}
