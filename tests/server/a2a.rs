//! A2A over real HTTP (docs/protocols.md §2): the isolation matrix of tasks between tenants, the
//! JSON-RPC binding's errors, scopes, the card, and a message sent twice at once that runs once.
//! The official client's own run is in cli/tests/a2a.rs.

use crate::support::*;
use agent_runtime_cli::config::StoreKind;
use serde_json::{Value, json};

async fn rpc(server: &TestServer, token: &str, method: &str, params: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": format!("call-{method}"), "method": method, "params": params});
    let response = server
        .client
        .post(format!("{}/a2a", server.base))
        .header("authorization", format!("Bearer {token}"))
        .header("a2a-version", "1.0")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    response.json().await.unwrap()
}

fn message(text: &str, id: &str) -> Value {
    json!({"message": {"messageId": id, "role": "ROLE_USER", "parts": [{"text": text}]}})
}

fn code(reply: &Value) -> i64 {
    reply["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("an error: {reply}"))
}

#[tokio::test]
async fn another_tenant_can_neither_see_nor_touch_a_task() {
    let server = TestServer::memory().await;
    let sent = rpc(
        &server,
        TOKEN_A,
        "SendMessage",
        message("needs approval", "a-1"),
    )
    .await;
    let task = &sent["result"]["task"];
    assert_eq!(
        task["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{sent}"
    );
    let (task_id, context) = (
        task["id"].as_str().unwrap(),
        task["contextId"].as_str().unwrap(),
    );

    let attempts = [
        ("GetTask", json!({"id": task_id})),
        ("CancelTask", json!({"id": task_id})),
        ("SubscribeToTask", json!({"id": task_id})),
        (
            "SendMessage",
            json!({"message": {"messageId": "b-answer", "role": "ROLE_USER", "contextId": context,
                "taskId": task_id, "parts": [{"text": "yes"}]}}),
        ),
    ];
    for (method, params) in attempts {
        let reply = rpc(&server, TOKEN_B, method, params.clone()).await;
        assert_eq!(code(&reply), -32001, "{method}: {reply}");
        // Indistinguishable from a task that does not exist.
        let mut missing = params;
        let fake = "no-such-context~no-such-request";
        if method == "SendMessage" {
            missing["message"]["taskId"] = json!(fake);
            missing["message"]["contextId"] = json!("no-such-context");
            missing["message"]["messageId"] = json!("b-missing");
        } else {
            missing["id"] = json!(fake);
        }
        let reply = rpc(&server, TOKEN_B, method, missing).await;
        assert_eq!(code(&reply), -32001, "{method} of a missing task: {reply}");
    }
    // A's task still waits for A, and A's answer finishes it.
    let answer = json!({"message": {"messageId": "a-answer", "role": "ROLE_USER", "contextId": context,
        "taskId": task_id, "parts": [{"data": {"approved": true}}]}});
    let done = rpc(&server, TOKEN_A, "SendMessage", answer.clone()).await;
    assert_eq!(
        done["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{done}"
    );
    // The same answer again (a client that lost the reply) replays: the same finished task.
    let again = rpc(&server, TOKEN_A, "SendMessage", answer).await;
    assert_eq!(
        again["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{again}"
    );
    assert_eq!(again["result"]["task"]["id"], done["result"]["task"]["id"]);
    // A new message to the finished task is refused: it waits for nothing.
    let late = json!({"message": {"messageId": "a-late", "role": "ROLE_USER", "taskId": task_id,
        "parts": [{"text": "yes"}]}});
    assert_eq!(
        code(&rpc(&server, TOKEN_A, "SendMessage", late).await),
        -32004
    );
    let text = done["result"]["task"]["artifacts"][0]["parts"][0]["text"]
        .as_str()
        .unwrap();
    assert!(text.contains("approved"), "{text}");
    // Another subject of A's tenant cannot answer A's approvals either.
    let again = rpc(
        &server,
        TOKEN_A,
        "SendMessage",
        message("needs approval", "a-2"),
    )
    .await;
    let task = &again["result"]["task"];
    let other = json!({"message": {"messageId": "a2-answer", "role": "ROLE_USER",
        "contextId": task["contextId"], "taskId": task["id"], "parts": [{"text": "yes"}]}});
    let reply = rpc(&server, TOKEN_A2, "SendMessage", other).await;
    assert_eq!(code(&reply), -32001, "{reply}");
}

#[tokio::test]
async fn the_binding_answers_bad_calls_with_the_specifications_errors() {
    let server = TestServer::memory().await;
    let post = |body: String, version: Option<&'static str>| {
        let mut request = server
            .client
            .post(format!("{}/a2a", server.base))
            .header("authorization", format!("Bearer {TOKEN_A}"))
            .header("content-type", "application/json")
            .body(body);
        if let Some(version) = version {
            request = request.header("a2a-version", version);
        }
        request.send()
    };
    let call = |method: &str| {
        json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": {}}).to_string()
    };
    for (body, version, expected) in [
        ("{".to_owned(), Some("1.0"), -32700),
        ("[]".to_owned(), Some("1.0"), -32600),
        (
            json!({"jsonrpc": "2.0", "method": "GetTask"}).to_string(),
            Some("1.0"),
            -32600,
        ),
        (call("GetTask"), None, -32009),
        (call("GetTask"), Some("0.3"), -32009),
        (call("tasks/get"), Some("1.0"), -32601),
        (
            call("CreateTaskPushNotificationConfig"),
            Some("1.0"),
            -32003,
        ),
        (call("ListTasks"), Some("1.0"), -32004),
        (call("GetTask"), Some("1.0"), -32602),
        (call("SendMessage"), Some("1.0"), -32602),
    ] {
        let response = post(body.clone(), version).await.unwrap();
        assert_eq!(response.status().as_u16(), 200, "{body}");
        let reply: Value = response.json().await.unwrap();
        assert_eq!(code(&reply), expected, "{body} ({version:?}): {reply}");
        let info = &reply["error"]["data"][0];
        assert_eq!(info["@type"], "type.googleapis.com/google.rpc.ErrorInfo");
    }
    // An id too long to repeat on every frame is refused, and not repeated.
    let long = json!({"jsonrpc": "2.0", "id": "x".repeat(200), "method": "GetTask", "params": {}})
        .to_string();
    let reply: Value = post(long, Some("1.0")).await.unwrap().json().await.unwrap();
    assert_eq!(
        (code(&reply), &reply["id"]),
        (-32600, &Value::Null),
        "{reply}"
    );
    // A message naming a task (and no context) creates nothing when the task does not exist.
    let orphan = json!({"message": {"messageId": "orphan", "role": "ROLE_USER", "taskId": "ctx-x~req-y", "parts": [{"text": "yes"}]}});
    assert_eq!(
        code(&rpc(&server, TOKEN_A, "SendMessage", orphan).await),
        -32001
    );
    let list = server.ok(TOKEN_A, "session.list", json!({})).await;
    assert_eq!(list["sessions"], json!([]), "{list}");
    let no_content = json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"url": "https://x/a.mp3", "mediaType": "audio/mpeg"}]}});
    assert_eq!(
        code(&rpc(&server, TOKEN_A, "SendMessage", no_content).await),
        -32005
    );
    let unauthenticated = server
        .client
        .post(format!("{}/a2a", server.base))
        .header("a2a-version", "1.0")
        .body(call("GetTask"))
        .send()
        .await
        .unwrap();
    assert_eq!(unauthenticated.status().as_u16(), 401);
}

#[tokio::test]
async fn scopes_hold_and_a_message_sent_twice_at_once_runs_once() {
    let server = TestServer::memory().await;
    let refused = rpc(
        &server,
        TOKEN_READ_ONLY,
        "SendMessage",
        message("hi", "ro-1"),
    )
    .await;
    assert_eq!(
        refused["error"]["data"][0]["reason"], "FORBIDDEN",
        "{refused}"
    );
    for (method, params) in [
        ("GetTask", json!({"id": "a~b"})),
        ("SendMessage", message("hi", "nr-1")),
    ] {
        // The answer shows the task's output: no reading without `session:read`.
        let refused = rpc(&server, TOKEN_NO_READ, method, params).await;
        assert_eq!(
            refused["error"]["data"][0]["reason"], "FORBIDDEN",
            "{method}: {refused}"
        );
    }

    let first = rpc(
        &server,
        TOKEN_A,
        "SendMessage",
        message("demo:deltas=2 first", "twice-ctx"),
    )
    .await;
    let context = first["result"]["task"]["contextId"]
        .as_str()
        .unwrap()
        .to_owned();
    let params = json!({"message": {"messageId": "twice", "role": "ROLE_USER", "contextId": context,
        "parts": [{"text": "demo:deltas=2 once"}]}});
    let (one, two) = tokio::join!(
        rpc(&server, TOKEN_A, "SendMessage", params.clone()),
        rpc(&server, TOKEN_A, "SendMessage", params.clone()),
    );
    let tasks: Vec<&Value> = [&one, &two]
        .into_iter()
        .filter_map(|reply| {
            reply["result"]["task"]["id"]
                .as_str()
                .map(|_| &reply["result"]["task"]["id"])
        })
        .collect();
    assert!(!tasks.is_empty(), "{one} {two}");
    for reply in [&one, &two] {
        // The one that did not run answers the same task, or that it is still in progress.
        if reply.get("error").is_some() {
            assert_eq!(
                reply["error"]["data"][0]["reason"], "COMMAND_IN_PROGRESS",
                "{reply}"
            );
        }
    }
    assert!(tasks.windows(2).all(|pair| pair[0] == pair[1]));
    let read = server.read(TOKEN_A, &context).await;
    let inputs = read["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .count();
    assert_eq!(inputs, 2, "the first message and the one sent twice");
}

#[tokio::test]
async fn the_card_is_public_and_the_extended_card_lists_the_tenants_tools() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(StoreKind::Memory, dir.path());
    config.gateway.public_url = Some("https://agents.example.com".to_owned());
    let server = TestServer::start(config).await;
    let card: Value = server
        .client
        .get(format!("{}/.well-known/agent-card.json", server.origin()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        card["supportedInterfaces"][0]["url"],
        "https://agents.example.com/v1/agent/a2a"
    );
    assert_eq!(card["capabilities"]["streaming"], true);
    let public: Vec<&str> = card["skills"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        public,
        ["agent-session"],
        "no tool is named to an anonymous caller"
    );
    let extended = rpc(&server, TOKEN_A, "GetExtendedAgentCard", json!({})).await;
    let skills: Vec<&str> = extended["result"]["skills"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert!(skills.contains(&"demo_approval"), "{skills:?}");
}
