use agent_runtime::protocol::Scope;

use super::*;

#[test]
fn file_then_flags_override_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    std::fs::write(
        &path,
        r#"
[server]
listen = "127.0.0.1:9000"
store = "memory"

[gateway]
base_path = "/api/"
commands_per_minute = 5
console = false

[[auth.tokens]]
sha256 = "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b"
tenant = "acme"
subject = "alice"
scopes = ["session:admin"]
"#,
    )
    .unwrap();
    let args = ServeArgs {
        config: Some(path),
        listen: Some("127.0.0.1:0".to_owned()),
        ..ServeArgs::default()
    };
    let config = ServeConfig::load(&args).unwrap();
    assert_eq!(config.listen.port(), 0, "the flag wins over the file");
    assert_eq!(config.store, StoreKind::Memory);
    assert_eq!(config.gateway.base_path, "/api/");
    assert_eq!(config.gateway.commands_per_minute, 5);
    assert!(!config.gateway.console);
    assert!(
        ServeConfig::default().gateway.console,
        "the console is on by default"
    );
    assert_eq!(config.tokens.len(), 1);
    assert_eq!(config.tokens[0].scopes, vec![Scope::SessionAdmin]);
}

#[test]
fn provider_tools_and_sandbox_sections() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    std::fs::write(
        &path,
        r#"
[provider]
kind = "anthropic"
model = "claude-sonnet-4-20250514"
api_key_env = "ANTHROPIC_API_KEY"
idle_timeout_ms = 90000
max_retries = 5

[tools]
builtin_tools = true
allowed_tools = ["Read", "Grep", "Bash"]
roots = ["/srv/work"]
mode = "autoEdit"
deny = ["Bash:rm *"]
allow = ["Bash:git *"]
max_output_bytes = 1000
web_search_provider = "brave"
web_search_api_key_env = "BRAVE_API_KEY"

[sandbox]
enabled = true
network = false
"#,
    )
    .unwrap();
    let args = ServeArgs {
        config: Some(path.clone()),
        ..ServeArgs::default()
    };
    let config = ServeConfig::load(&args).unwrap();
    assert_eq!(config.provider.kind, ProviderKind::Anthropic);
    assert_eq!(
        config.provider.api_key_env.as_deref(),
        Some("ANTHROPIC_API_KEY")
    );
    assert_eq!(config.provider.http.max_retries, 5);
    assert_eq!(config.tools.selected().unwrap(), ["Read", "Grep", "Bash"]);
    assert_eq!(config.tools.max_output_bytes, 1000);
    let search = config.tools.web_search.as_ref().unwrap();
    assert_eq!(search.provider, SearchProvider::Brave);
    assert_eq!(search.api_key_env.as_deref(), Some("BRAVE_API_KEY"));
    assert!(config.tools.sandbox.enabled);
    let permissions = &config.executor.permissions;
    assert_eq!(permissions.mode, PermissionMode::AutoEdit);
    assert_eq!(
        permissions.rules.deny,
        vec![Rule::parse("Bash:rm *").unwrap()]
    );

    for bad in [
        "[provider]\nkind = \"gpt\"\n",
        "[tools]\nmode = \"auto\"\n",
        "[tools]\nallowed_tools = [\"Reed\"]\n",
        "[tools]\nweb_search_provider = \"google\"\n",
        "[tools]\ndeny = [\"Bash:\"]\n",
        "[sandbox]\nenable = true\n",
    ] {
        std::fs::write(&path, bad).unwrap();
        assert!(ServeConfig::load(&args).is_err(), "{bad}");
    }
}

#[test]
fn telemetry_section_and_otel_variables() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    std::fs::write(
        &path,
        r#"
[telemetry]
metrics = false
metrics_listen = "127.0.0.1:9464"
include_tenant_attributes = true
otlp_endpoint = "http://collector:4318"
service_name = "edge"
otlp_flush_interval_ms = 200
"#,
    )
    .unwrap();
    let args = ServeArgs {
        config: Some(path.clone()),
        ..ServeArgs::default()
    };
    let mut config = ServeConfig::load(&args).unwrap();
    let t = &config.telemetry;
    assert!(!t.metrics);
    assert_eq!(t.metrics_listen.unwrap().port(), 9464);
    assert!(t.include_tenant_attributes);
    assert_eq!(
        t.otlp_target(),
        Some((
            "http://collector:4318/v1/traces".to_owned(),
            OtlpProtocol::HttpProtobuf
        ))
    );
    assert_eq!(t.otlp_flush_interval, Duration::from_millis(200));

    config
        .apply_otel_env(|name| match name {
            "OTEL_EXPORTER_OTLP_ENDPOINT" => Some("http://other:4317".to_owned()),
            "OTEL_EXPORTER_OTLP_PROTOCOL" => Some("http/protobuf".to_owned()),
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL" => Some("grpc".to_owned()),
            "OTEL_SERVICE_NAME" => Some("renamed".to_owned()),
            _ => None,
        })
        .unwrap();
    assert_eq!(
        config.telemetry.otlp_target(),
        Some(("http://other:4317".to_owned(), OtlpProtocol::Grpc))
    );
    let refused = config
        .apply_otel_env(|name| {
            (name == "OTEL_EXPORTER_OTLP_PROTOCOL").then(|| "http/json".to_owned())
        })
        .unwrap_err();
    assert!(
        refused.to_string().contains("OTEL_EXPORTER_OTLP_PROTOCOL"),
        "{refused}"
    );
    assert_eq!(config.telemetry.service_name.as_deref(), Some("renamed"));
    assert_eq!(config.telemetry.sampler, Sampler::default());
    config
        .apply_otel_env(|name| match name {
            "OTEL_TRACES_SAMPLER" => Some("parentbased_traceidratio".to_owned()),
            "OTEL_TRACES_SAMPLER_ARG" => Some("0.125".to_owned()),
            _ => None,
        })
        .unwrap();
    assert_eq!(
        config.telemetry.sampler,
        Sampler::ParentBased(Box::new(Sampler::TraceIdRatio(0.125)))
    );
    let refused = config
        .apply_otel_env(|name| (name == "OTEL_TRACES_SAMPLER").then(|| "xray".to_owned()))
        .unwrap_err();
    assert!(
        refused.to_string().contains("OTEL_TRACES_SAMPLER"),
        "{refused}"
    );

    std::fs::write(
        &path,
        "[telemetry]\ntraces_sampler = \"traceidratio\"\ntraces_sampler_arg = 0.5\n",
    )
    .unwrap();
    let loaded = ServeConfig::load(&args).unwrap();
    assert_eq!(loaded.telemetry.sampler, Sampler::TraceIdRatio(0.5));
    std::fs::write(
        &path,
        "[telemetry]\ntraces_sampler = \"traceidratio\"\ntraces_sampler_arg = 2.0\n",
    )
    .unwrap();
    let error = ServeConfig::load(&args).unwrap_err().to_string();
    assert!(error.contains("telemetry.traces_sampler"), "{error}");

    std::fs::write(&path, "[telemetry]\notlp_endpoint = \"collector:4318\"\n").unwrap();
    let error = ServeConfig::load(&args).unwrap_err().to_string();
    assert!(error.contains("otlp_endpoint"), "{error}");
    std::fs::write(&path, "[telemetry]\nmetric = true\n").unwrap();
    assert!(ServeConfig::load(&args).is_err());
}

#[test]
fn unknown_keys_and_bad_values_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    std::fs::write(&path, "[server]\nlisten_on = \"x\"\n").unwrap();
    let args = ServeArgs {
        config: Some(path.clone()),
        ..ServeArgs::default()
    };
    assert!(ServeConfig::load(&args).is_err());

    std::fs::write(&path, "[gateway]\nmax_concurrent_commands = 0\n").unwrap();
    let error = ServeConfig::load(&args).unwrap_err().to_string();
    assert!(error.contains("max_concurrent_commands"), "{error}");

    // Spend caps (RES-11): positive, and the default turn count within the client's limit.
    for (toml, key) in [
        ("[executor]\nmax_request_tokens = 0\n", "max_request_tokens"),
        ("[executor]\nmax_turns_limit = 0\n", "max_turns_limit"),
        (
            "[executor]\ndefault_max_turns = 20\nmax_turns_limit = 10\n",
            "max_turns_limit",
        ),
        // One event's data: frames stay under the 4 MiB clients accept.
        ("[executor]\nmax_event_bytes = 1000\n", "max_event_bytes"),
        ("[executor]\nmax_event_bytes = 4194304\n", "max_event_bytes"),
    ] {
        std::fs::write(&path, toml).unwrap();
        let error = ServeConfig::load(&args).unwrap_err().to_string();
        assert!(error.contains(key), "{toml}: {error}");
    }
    std::fs::write(
        &path,
        "[executor]\nmax_turns_limit = 40\nmax_request_tokens = 50000\n",
    )
    .unwrap();
    let config = ServeConfig::load(&args).unwrap();
    assert_eq!(config.executor.max_turns_limit, 40);
    assert_eq!(config.executor.max_request_tokens, Some(50_000));
    assert_eq!(config.executor.max_event_bytes, 1 << 20);
    std::fs::write(&path, "[executor]\nmax_event_bytes = 2097152\n").unwrap();
    let config = ServeConfig::load(&args).unwrap();
    assert_eq!(config.executor.max_event_bytes, 2 << 20);
}

/// Loads `toml` as the configuration file (written into `dir`).
fn load_file(dir: &std::path::Path, toml: &str) -> anyhow::Result<ServeConfig> {
    let path = dir.join("config.toml");
    std::fs::write(&path, toml).unwrap();
    ServeConfig::load(&ServeArgs {
        config: Some(path),
        ..ServeArgs::default()
    })
}

#[test]
fn profiles_inherit_the_top_level_sections_and_change_only_their_keys() {
    let dir = tempfile::tempdir().unwrap();
    let load = |toml: &str| load_file(dir.path(), toml);
    let config = load(
        r#"
[provider]
kind = "openai"
model = "gpt-4o-mini"
api_key_env = "OPENAI_API_KEY"

[tools]
builtin_tools = true
allowed_tools = ["Read", "Grep"]
roots = ["/srv/shared"]
mode = "default"

[[skills]]
name = "review"
description = "Reviews"
instructions = "Review it."

[[skills]]
name = "plan"
description = "Plans"
instructions = "Plan it."

[[profiles]]
name = "acme"
tenants = ["acme", "acme-eu"]
skills = ["plan"]

[profiles.provider]
model = "gpt-4.1"
api_key_env = "ACME_OPENAI_KEY"

[profiles.tools]
roots = ["/srv/acme"]
mode = "autoEdit"

[profiles.memory]
enabled = true
scope = "user"
"#,
    )
    .unwrap();
    assert_eq!(config.tools.roots, [PathBuf::from("/srv/shared")]);
    assert!(!config.tools.memory.enabled);
    let acme = &config.profiles[0];
    assert_eq!(acme.name, "acme");
    assert_eq!(acme.tenants, ["acme", "acme-eu"]);
    assert_eq!(acme.provider.model.as_deref(), Some("gpt-4.1"));
    assert_eq!(
        acme.provider.api_key_env.as_deref(),
        Some("ACME_OPENAI_KEY")
    );
    assert_eq!(acme.provider.kind, ProviderKind::OpenAi, "inherited");
    assert_eq!(acme.tools.roots, [PathBuf::from("/srv/acme")]);
    assert_eq!(
        acme.tools.allowed_tools.as_deref(),
        Some(&["Read".to_owned(), "Grep".to_owned()][..]),
        "inherited"
    );
    assert_eq!(acme.permissions.mode, PermissionMode::AutoEdit);
    assert_eq!(config.executor.permissions.mode, PermissionMode::Default);
    assert!(acme.tools.memory.enabled);
    assert_eq!(acme.tools.memory.scope, MemoryScope::User);
    let skills: Vec<&str> = acme.tools.skills.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(skills, ["plan"]);

    for (toml, why) in [
        (
            "[[profiles]]\nname = \"default\"\ntenants = [\"t\"]\n",
            "not a profile name",
        ),
        (
            "[[profiles]]\nname = \"p\"\ntenants = []\n",
            "serves no tenant",
        ),
        (
            "[[profiles]]\nname = \"p\"\ntenants = [\"t\"]\n[[profiles]]\nname = \"q\"\ntenants = [\"t\"]\n",
            "is in both p and q",
        ),
        (
            "[[profiles]]\nname = \"p\"\ntenants = [\"t\"]\n[[profiles]]\nname = \"p\"\ntenants = [\"u\"]\n",
            "two profiles are named p",
        ),
        (
            "[[profiles]]\nname = \"p\"\ntenants = [\"t\"]\nskills = [\"nope\"]\n",
            "no [[skills]] entry",
        ),
        (
            "[[profiles]]\nname = \"p\"\ntenants = [\"t\"]\n[profiles.tools]\nmode = \"wild\"\n",
            "profile p",
        ),
    ] {
        let error = format!("{:#}", load(toml).unwrap_err());
        assert!(error.contains(why), "{toml}: {error}");
    }

    // A profile that sends its calls to another endpoint never inherits the top-level key.
    let moved = load(
        "[provider]\nkind = \"openai\"\napi_key_env = \"TOP_KEY\"\n\
         [[profiles]]\nname = \"p\"\ntenants = [\"t\"]\n\
         [profiles.provider]\nbase_url = \"https://other.example/v1\"\n",
    )
    .unwrap();
    assert_eq!(moved.provider.api_key_env.as_deref(), Some("TOP_KEY"));
    assert_eq!(moved.profiles[0].provider.api_key_env, None);
    assert_eq!(moved.profiles[0].provider.api_key_file, None);
}

#[test]
fn mcp_servers_are_declared_once_and_picked_per_tool_set() {
    use agent_runtime_executor::tools::mcp::{McpTransport, SecretSource};
    let dir = tempfile::tempdir().unwrap();
    let load = |toml: &str| load_file(dir.path(), toml);
    let config = load(
        r#"
[[mcp_servers]]
name = "docs"
url = "https://mcp.example.com/mcp"
bearer_token_env = "DOCS_TOKEN"
headers_file = { "X-Team" = "/run/secrets/team" }
call_timeout_ms = 5000
trust_annotations = false

[[mcp_servers]]
name = "local"
command = "node server.js stdio"
env = ["NODE_OPTIONS"]

[tools]
mcp_allow_stdio = true

[[profiles]]
name = "acme"
tenants = ["acme"]

[profiles.tools]
mcp_servers = ["docs"]
"#,
    )
    .unwrap();
    let names = |servers: &[agent_runtime_executor::tools::mcp::McpServerConfig]| {
        servers.iter().map(|s| s.name.clone()).collect::<Vec<_>>()
    };
    assert_eq!(names(&config.tools.mcp_servers), ["docs", "local"]);
    assert!(config.tools.mcp_allow_stdio);
    assert_eq!(names(&config.profiles[0].tools.mcp_servers), ["docs"]);
    let docs = &config.mcp_servers[0];
    assert_eq!(
        docs.transport,
        McpTransport::Http {
            url: "https://mcp.example.com/mcp".to_owned()
        }
    );
    assert_eq!(
        docs.bearer_token,
        Some(SecretSource::Env("DOCS_TOKEN".to_owned()))
    );
    assert_eq!(
        docs.headers,
        [(
            "X-Team".to_owned(),
            SecretSource::File("/run/secrets/team".into())
        )]
    );
    assert_eq!(docs.call_timeout, Duration::from_secs(5));
    assert!(!docs.trust_annotations);
    assert_eq!(docs.connect_timeout, Duration::from_secs(10), "default");

    for (toml, expected) in [
        (
            "[[mcp_servers]]\nname = \"x\"\nurl = \"http://a/mcp\"\ncommand = \"y\"\n",
            "exactly one of url and command",
        ),
        (
            "[[mcp_servers]]\nname = \"a__b\"\nurl = \"http://a/mcp\"\n",
            "is not a server name",
        ),
        // `docs` and `docs_` would both name their tool x `mcp__docs___x`.
        (
            "[[mcp_servers]]\nname = \"docs\"\nurl = \"http://a/mcp\"\n\n[[mcp_servers]]\nname = \"docs_\"\nurl = \"http://b/mcp\"\n",
            "\"docs_\" is not a server name",
        ),
        (
            "[[mcp_servers]]\nname = \"x\"\nurl = \"http://a/mcp\"\n\n[[mcp_servers]]\nname = \"x\"\nurl = \"http://b/mcp\"\n",
            "two servers are named x",
        ),
        (
            "[tools]\nmcp_servers = [\"nope\"]\n",
            "no [[mcp_servers]] entry is named \"nope\"",
        ),
        (
            "[[mcp_servers]]\nname = \"x\"\nurl = \"http://a/mcp\"\ncall_timeout_ms = 0\n",
            "call_timeout_ms must be positive",
        ),
    ] {
        let error = format!("{:#}", load(toml).unwrap_err());
        assert!(error.contains(expected), "{toml}: {error}");
    }
}

/// `[gateway]` and `[executor]` deserialise into the components' own configuration: durations
/// in milliseconds, per-tenant overrides checked, unknown keys refused at every level.
#[test]
fn component_sections_and_their_tenant_overrides() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    let args = ServeArgs {
        config: Some(path.clone()),
        ..ServeArgs::default()
    };
    std::fs::write(
        &path,
        r#"
[gateway]
heartbeat_interval_ms = 1500
max_queued_commands = 7

[[gateway.tenant_limits]]
tenant = "acme"
commands_per_minute = 3
closed_session_retention_ms = 60000

[executor]
approval_timeout_ms = 2000
shutdown_grace_ms = 4000
max_pending_inputs_per_session = 5

[[executor.tenant_limits]]
tenant = "acme"
max_active_sessions = 2
max_pending_input_bytes = 100
"#,
    )
    .unwrap();
    let config = ServeConfig::load(&args).unwrap();
    let gateway = &config.gateway;
    assert_eq!(gateway.heartbeat_interval, Duration::from_millis(1500));
    assert_eq!(gateway.admission().max_queued_commands, 7);
    assert_eq!(gateway.tenant_limits[0].commands_per_minute, Some(3));
    assert_eq!(
        gateway.tenant_limits[0].closed_session_retention,
        Some(Duration::from_secs(60))
    );
    let executor = &config.executor;
    assert_eq!(executor.approval_timeout, Duration::from_secs(2));
    assert_eq!(executor.shutdown_grace, Duration::from_secs(4));
    assert_eq!(executor.session_caps().for_tenant("acme"), 2);
    assert_eq!(executor.session_caps().for_tenant("other"), 100);
    let acme = executor.pending_input_caps().for_tenant("acme");
    assert_eq!((acme.inputs, acme.bytes), (5, 100));

    for (toml, said) in [
        ("[gateway]\nheartbeat_interval = 5\n", "heartbeat_interval"),
        (
            "[[gateway.tenant_limits]]\ntenant = \"a\"\nmax_streams = 1\n",
            "unknown field",
        ),
        (
            "[[gateway.tenant_limits]]\ntenant = \"a b\"\n",
            "not a valid tenant id",
        ),
        (
            "[[executor.tenant_limits]]\ntenant = \"a\"\n[[executor.tenant_limits]]\ntenant = \"a\"\n",
            "listed twice",
        ),
        (
            "[[executor.tenant_limits]]\ntenant = \"a\"\nmax_active_sessions = 0\n",
            "max_active_sessions of \"a\" must be a positive integer",
        ),
        ("[executor]\npermissions = 1\n", "unknown field"),
    ] {
        std::fs::write(&path, toml).unwrap();
        let error = format!("{:#}", ServeConfig::load(&args).unwrap_err());
        assert!(error.contains(said), "{toml}: {error}");
    }
}
