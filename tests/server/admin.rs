//! The operator's admin API (`{base}/admin/…`): who may use it, reconciling a command a fault left
//! without a result, closing sessions, deleting a tenant; every action audited.

use std::sync::{Arc, Mutex};

use agent_runtime::secret::Secret;
use agent_runtime::telemetry::{AuditRecord, Telemetry, TelemetryError};
use agent_runtime_cli::Overrides;
use agent_runtime_cli::admin::{AdminArgs, AdminCommand, CommandsAction};
use agent_runtime_cli::chat::ServerUrl;
use agent_runtime_store::faulty::FaultyStore;
use agent_runtime_store::{Operation, Store};
use serde_json::{Value, json};

use crate::support::*;

const OPERATOR: &str = "op-test-operator-token-0123456789";

/// Keeps every audit record.
#[derive(Debug, Default)]
struct Audits(Mutex<Vec<AuditRecord>>);

impl Telemetry for Audits {
    fn write_audit(&self, record: &AuditRecord) -> Result<(), TelemetryError> {
        self.0.lock().unwrap().push(record.clone());
        Ok(())
    }
}

impl Audits {
    fn admin_actions(&self) -> Vec<(String, &'static str, String)> {
        let records = self.0.lock().unwrap();
        records
            .iter()
            .filter(|r| r.command_type.starts_with("admin."))
            .map(|r| (r.tenant_id.clone(), r.command_type, r.subject.clone()))
            .collect()
    }
}

fn operator_config() -> agent_runtime_cli::ServeConfig {
    let mut config = memory_config();
    config.gateway.operator_token_sha256 = vec![agent_runtime_gateway::token_sha256(OPERATOR)];
    config
}

async fn admin_server(faulty: Option<Arc<FaultyStore>>) -> (TestServer, Arc<Audits>) {
    let audits = Arc::new(Audits::default());
    let overrides = Overrides {
        store: faulty.map(|f| f as Arc<dyn Store>),
        telemetry: Some(audits.clone()),
    };
    (
        TestServer::start_with(operator_config(), overrides).await,
        audits,
    )
}

async fn admin(
    server: &TestServer,
    token: Option<&str>,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let url = format!("{}/admin/{path}", server.base);
    let mut request = match &body {
        Some(body) => server.client.post(url).json(body),
        None => server.client.get(url),
    };
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn only_operator_tokens_reach_the_admin_api_and_they_reach_nothing_else() {
    let (server, _) = admin_server(None).await;
    for token in [None, Some(TOKEN_A), Some(TOKEN_ADMIN), Some("op-wrong")] {
        let (status, body) = admin(&server, token, "sessions", None).await;
        assert_eq!(status, 401, "{token:?}: {body}");
        assert_eq!(body["error"]["code"], "UNAUTHENTICATED");
        let (status, _) = admin(
            &server,
            token,
            "tenants/delete",
            Some(json!({"tenantId": "tenant-a"})),
        )
        .await;
        assert_eq!(status, 401);
    }
    let (status, body) = admin(&server, Some(OPERATOR), "sessions", None).await;
    assert_eq!(status, 200, "{body}");
    // An operator token is not a principal of the command API.
    let (status, body) = server
        .command(OPERATOR, "op-create", "session.create", json!({}))
        .await;
    assert_eq!(status, 401, "{body}");
    // Guessing operator tokens is braked like guessing tenant tokens.
    let mut braked = None;
    for attempt in 0..200 {
        let (status, body) = admin(&server, Some("op-guess"), "sessions", None).await;
        if status == 429 {
            braked = Some((attempt, body));
            break;
        }
        assert_eq!(status, 401, "{body}");
    }
    let (_, body) = braked.expect("a client failing again and again is braked");
    assert_eq!(body["error"]["code"], "RATE_LIMITED");
    server.stop().await;

    // Without an operator token configured, the admin routes answer like any unknown route:
    // 401 to a stranger, 404 to an authenticated caller.
    let server = TestServer::memory().await;
    let (status, _) = admin(&server, Some(OPERATOR), "sessions", None).await;
    assert_eq!(status, 401);
    let (status, body) = admin(&server, Some(TOKEN_A), "sessions", None).await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["message"], "Route not found");
    server.stop().await;
}

/// The reconciliation the production checklist asks for: a command whose result could not be
/// stored answers `COMMAND_IN_PROGRESS`; the operator sees that its effect is stored, refuses to
/// release it (that would run it twice), completes it, and the client's retry replays it.
#[tokio::test]
async fn an_uncertain_command_is_reconciled_by_the_operator_and_replays_once() {
    let inner = selected_store(DEFAULT_RETENTION).await;
    let faulty = Arc::new(FaultyStore::new(inner));
    let (server, audits) = admin_server(Some(faulty.clone())).await;
    faulty.fail_next(Operation::CompleteCommand, 1);
    let (status, body) = server
        .command(TOKEN_A, "uncertain-create", "session.create", json!({}))
        .await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "COMMAND_IN_PROGRESS");

    let (status, listed) = admin(&server, Some(OPERATOR), "commands", None).await;
    assert_eq!(status, 200, "{listed}");
    let commands = listed["data"]["commands"].as_array().unwrap();
    let uncertain = commands
        .iter()
        .find(|c| c["commandId"] == "uncertain-create")
        .unwrap_or_else(|| panic!("listed: {listed}"));
    assert_eq!(uncertain["tenantId"], "tenant-a");
    assert_eq!(uncertain["commandType"], "session.create");
    assert_eq!(uncertain["state"], "sealed");
    assert_eq!(uncertain["effect"], "stored");

    // Decided with `agent-runtime admin commands resolve`, as an operator would.
    let resolve = |action: &str| {
        agent_runtime_cli::admin::run(AdminArgs {
            server: ServerUrl {
                url: server.origin().to_owned(),
            },
            token: Some(Secret::new(OPERATOR)),
            command: AdminCommand::Commands {
                action: CommandsAction::Resolve {
                    tenant: "tenant-a".to_owned(),
                    command: "uncertain-create".to_owned(),
                    action: action.to_owned(),
                },
            },
        })
    };
    let refused = resolve("release").await.unwrap_err().to_string();
    assert!(refused.starts_with("CONFLICT: "), "{refused}");
    assert!(refused.contains("twice"), "{refused}");
    resolve("complete").await.expect("completed");

    let (status, replay) = server
        .command(TOKEN_A, "uncertain-create", "session.create", json!({}))
        .await;
    assert_eq!(status, 200, "{replay}");
    let session = replay["data"]["session"]["sessionId"].as_str().unwrap();
    let list = server.ok(TOKEN_A, "session.list", json!({})).await;
    let sessions = list["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 1, "created exactly once");
    assert_eq!(sessions[0]["sessionId"], session);
    let (_, after) = admin(&server, Some(OPERATOR), "commands", None).await;
    assert!(after["data"]["commands"].as_array().unwrap().is_empty());

    let actions = audits.admin_actions();
    assert_eq!(actions.len(), 2, "{actions:?}");
    assert!(
        actions
            .iter()
            .all(|(tenant, kind, subject)| tenant == "tenant-a"
                && *kind == "admin.command.resolve"
                && subject.starts_with("operator:")
                && !subject.contains(OPERATOR))
    );
    server.stop().await;
}

#[tokio::test]
async fn the_operator_closes_a_session_and_deletes_a_tenant_leaving_nothing_readable() {
    let (server, audits) = admin_server(None).await;
    let closed_by_operator = server.create_session(TOKEN_A).await;
    let running = server.create_session(TOKEN_A).await;
    server
        .run_request(TOKEN_A, &running, "remember this", 0)
        .await;
    let other = server.create_session(TOKEN_B).await;

    let (status, listed) = admin(&server, Some(OPERATOR), "sessions", None).await;
    assert_eq!(status, 200);
    let open: Vec<(&str, &str)> = listed["data"]["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["tenantId"].as_str().unwrap(),
                s["sessionId"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(open.len(), 3, "every tenant's open sessions: {listed}");

    let close = json!({"tenantId": "tenant-a", "sessionId": closed_by_operator});
    let (status, body) = admin(&server, Some(OPERATOR), "sessions/close", Some(close)).await;
    assert_eq!(status, 200, "{body}");
    let read = server.read(TOKEN_A, &closed_by_operator).await;
    assert_eq!(read["session"]["status"], "closed");
    let unknown = json!({"tenantId": "tenant-b", "sessionId": closed_by_operator});
    let (status, _) = admin(&server, Some(OPERATOR), "sessions/close", Some(unknown)).await;
    assert_eq!(status, 404, "a session is closed only within its tenant");

    let (status, deleted) = admin(
        &server,
        Some(OPERATOR),
        "tenants/delete",
        Some(json!({"tenantId": "tenant-a"})),
    )
    .await;
    assert_eq!(status, 200, "{deleted}");
    assert_eq!(deleted["data"]["closedSessions"], 1);
    assert!(deleted["data"]["deletedRecords"].as_u64().unwrap() > 0);

    let list = server.ok(TOKEN_A, "session.list", json!({})).await;
    assert!(list["sessions"].as_array().unwrap().is_empty(), "{list}");
    for session in [&closed_by_operator, &running] {
        let (status, body) = server
            .command(
                TOKEN_A,
                &format!("read-{session}"),
                "session.read",
                json!({"sessionId": session}),
            )
            .await;
        assert_eq!(status, 404, "{body}");
        assert_eq!(body["error"]["code"], "SESSION_NOT_FOUND");
    }
    // The other tenant keeps everything.
    let read = server.read(TOKEN_B, &other).await;
    assert_eq!(read["session"]["status"], "active");
    let kinds: Vec<&str> = audits
        .admin_actions()
        .iter()
        .map(|(_, kind, _)| *kind)
        .collect();
    assert_eq!(
        kinds,
        [
            "admin.session.close",
            "admin.session.close",
            "admin.tenant.delete"
        ]
    );
    server.stop().await;
}
