//! Configuration of every process: defaults → TOML file → environment → flags. The reference of
//! every key, flag and variable is `docs/configuration.md`; a test holds it to this loader.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use agent_runtime::protocol::stream::PatchScope;
use agent_runtime::secret::Secret;
pub use agent_runtime::telemetry::Sampler;
use agent_runtime_executor::ExecutorConfig;
use agent_runtime_executor::permissions::{PermissionMode, PermissionRules, Rule};
use agent_runtime_executor::profiles::DEFAULT_PROFILE;
use agent_runtime_executor::provider::{ProviderConfig, ProviderKind};
use agent_runtime_executor::sandbox::SandboxConfig;
use agent_runtime_executor::tools::{
    MemoryConfig, MemoryScope, SearchProvider, SkillDefinition, ToolsConfig, WebSearchConfig,
};
use agent_runtime_gateway::{AuditConfig, AuthMode, GatewayConfig, TokenGrant};
use agent_runtime_store::SchemaPolicy;
pub use agent_runtime_telemetry::{OtlpProtocol, TelemetryConfig};
use anyhow::{Context, bail};
use serde::Deserialize;

use crate::ServeArgs;
use crate::auth_config::{AuditSection, AuthSection, apply_auth, audit_config};

mod agents;
mod keys;
mod mcp;
mod webhooks;

pub use self::keys::accepted_keys;
pub use self::webhooks::{SecretSource, WebhookEndpointConfig, WebhooksConfig};

/// Where the server keeps its state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreKind {
    /// `server-store.jsonl` in the data directory.
    Jsonl,
    /// Nothing survives the process.
    Memory,
    /// A shared PostgreSQL database (`database_url`).
    Postgres,
}

/// One agent profile: the provider, tools and permission policy of the sessions of `tenants`.
#[derive(Clone, Debug)]
pub struct ProfileConfig {
    pub name: String,
    pub tenants: Vec<String>,
    pub provider: ProviderConfig,
    pub tools: ToolsConfig,
    pub permissions: agent_runtime_executor::permissions::PermissionPolicy,
}

/// Everything `serve` needs.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    pub store: StoreKind,
    /// PostgreSQL URL for `store = postgres`. Default: none.
    pub database_url: Option<Secret>,
    /// `store = postgres`: migrate the schema at start-up, or refuse unless it is current.
    /// Default: migrate.
    pub schema_policy: SchemaPolicy,
    pub fsync: bool,
    /// Retained agent events per session (decision S4). Default 10 000.
    pub max_events_per_session: u64,
    pub gateway: GatewayConfig,
    pub executor: ExecutorConfig,
    /// Configured bearer tokens (`auth_mode` static); none means "generate a development token".
    pub tokens: Vec<TokenGrant>,
    /// How requests authenticate. Default: the static `tokens`.
    pub auth_mode: AuthMode,
    /// The audit log (`[audit]`). Default: none.
    pub audit: Option<AuditConfig>,
    /// The model provider (default: the offline demo).
    pub provider: ProviderConfig,
    /// Built-in tools, filesystem capability and sandbox.
    pub tools: ToolsConfig,
    /// Agent profiles (`[[profiles]]`): tenants whose sessions run with another provider,
    /// tools or permissions than the top-level ones. Default: none.
    pub profiles: Vec<ProfileConfig>,
    /// Every declared MCP server (`[[mcp_servers]]`); `tools.mcp_servers` holds a tool set's.
    pub mcp_servers: Vec<agent_runtime_executor::tools::mcp::McpServerConfig>,
    /// Metrics, trace export and their privacy switch.
    pub telemetry: TelemetryConfig,
    /// `[webhooks]`: present when this process delivers webhooks. Default: none.
    pub webhooks: Option<WebhooksConfig>,
}

impl Default for ServeConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8787)),
            data_dir: PathBuf::from(".agent-runtime"),
            store: StoreKind::Jsonl,
            database_url: None,
            schema_policy: SchemaPolicy::Migrate,
            fsync: false,
            max_events_per_session: 10_000,
            gateway: GatewayConfig::default(),
            executor: ExecutorConfig::default(),
            tokens: Vec::new(),
            auth_mode: AuthMode::Static,
            audit: None,
            provider: ProviderConfig::default(),
            tools: ToolsConfig::default(),
            profiles: Vec::new(),
            mcp_servers: Vec::new(),
            telemetry: TelemetryConfig::default(),
            webhooks: None,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    #[serde(default)]
    server: ServerSection,
    #[serde(default)]
    gateway: GatewayConfig,
    #[serde(default)]
    executor: ExecutorConfig,
    #[serde(default)]
    auth: AuthSection,
    #[serde(default)]
    provider: ProviderSection,
    #[serde(default)]
    tools: ToolsSection,
    #[serde(default)]
    sandbox: SandboxSection,
    /// `[[skills]]`: the skills of the `Skill` tool.
    #[serde(default)]
    skills: Vec<SkillSection>,
    /// `[memory]`: the memory tools.
    #[serde(default)]
    memory: MemorySection,
    /// `[[mcp_servers]]`: MCP servers the tool sets may use.
    #[serde(default)]
    mcp_servers: Vec<mcp::McpServerSection>,
    /// `[[agents]]`: the subagents of `Task`.
    #[serde(default)]
    agents: Vec<agents::AgentSection>,
    /// `[[profiles]]`: agent profiles of tenants.
    #[serde(default)]
    profiles: Vec<ProfileSection>,
    audit: Option<AuditSection>,
    #[serde(default)]
    telemetry: TelemetrySection,
    /// `[webhooks]`: where webhooks go (serve, gateway).
    webhooks: Option<webhooks::WebhooksSection>,
}

/// One `[[profiles]]` entry: the top-level configuration with these keys changed.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfileSection {
    name: String,
    tenants: Vec<String>,
    /// Which `[[skills]]` the profile's sessions have (default: all of them).
    skills: Option<Vec<String>>,
    #[serde(default)]
    provider: ProviderSection,
    #[serde(default)]
    tools: ToolsSection,
    #[serde(default)]
    sandbox: SandboxSection,
    #[serde(default)]
    memory: MemorySection,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct MemorySection {
    enabled: Option<bool>,
    scope: Option<String>,
    max_entries: Option<u32>,
    max_body_bytes: Option<usize>,
}

impl MemorySection {
    fn apply(self, memory: &mut MemoryConfig) -> anyhow::Result<()> {
        set(&mut memory.enabled, self.enabled);
        if let Some(scope) = self.scope {
            memory.scope = MemoryScope::parse(&scope)
                .with_context(|| format!("memory.scope {scope:?} is not one of: tenant, user"))?;
        }
        set(&mut memory.max_entries, self.max_entries);
        set(&mut memory.max_body_bytes, self.max_body_bytes);
        anyhow::ensure!(
            memory.max_entries >= 1 && memory.max_body_bytes >= 1,
            "memory.max_entries and memory.max_body_bytes must be at least 1"
        );
        Ok(())
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SkillSection {
    name: String,
    description: String,
    /// The instructions inline, or
    instructions: Option<String>,
    /// in a file read once at start-up.
    instructions_file: Option<PathBuf>,
    allowed_tools: Option<Vec<String>>,
    #[serde(default)]
    disallowed_tools: Vec<String>,
    /// `session` (default) or `turn`.
    scope: Option<String>,
    /// Added as a system message when the skill loads.
    system_prompt_append: Option<String>,
    /// The model the session uses while the skill is active.
    model: Option<String>,
}

impl SkillSection {
    fn definition(self) -> anyhow::Result<SkillDefinition> {
        let owner = format!("skill {}", self.name);
        let keys = ["instructions", "instructions_file"];
        let instructions =
            inline_or_file(&owner, keys, self.instructions, &self.instructions_file)?;
        let scope = match self.scope.as_deref() {
            None | Some("session") => PatchScope::Session,
            Some("turn") => PatchScope::Turn,
            Some(other) => anyhow::bail!(
                "skill {}: scope {other:?} is not one of: session, turn",
                self.name
            ),
        };
        let definition = SkillDefinition {
            name: self.name,
            description: self.description,
            instructions,
            allowed_tools: self.allowed_tools,
            disallowed_tools: self.disallowed_tools,
            scope,
            system_prompt_append: self.system_prompt_append,
            model: self.model,
        };
        definition.validate().map_err(anyhow::Error::msg)?;
        Ok(definition)
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TelemetrySection {
    metrics: Option<bool>,
    metrics_listen: Option<String>,
    include_tenant_attributes: Option<bool>,
    otlp_endpoint: Option<String>,
    otlp_protocol: Option<String>,
    service_name: Option<String>,
    otlp_flush_interval_ms: Option<u64>,
    traces_sampler: Option<String>,
    traces_sampler_arg: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProviderSection {
    kind: Option<String>,
    model: Option<String>,
    base_url: Option<String>,
    api_key_env: Option<String>,
    api_key_file: Option<PathBuf>,
    max_output_tokens: Option<u32>,
    context_window: Option<u64>,
    connect_timeout_ms: Option<u64>,
    idle_timeout_ms: Option<u64>,
    max_retries: Option<u32>,
    initial_backoff_ms: Option<u64>,
    max_backoff_ms: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolsSection {
    builtin_tools: Option<bool>,
    allowed_tools: Option<Vec<String>>,
    disallowed_tools: Option<Vec<String>>,
    roots: Option<Vec<PathBuf>>,
    cwd: Option<PathBuf>,
    workspace_root: Option<PathBuf>,
    max_output_bytes: Option<usize>,
    bash_timeout_ms: Option<u64>,
    bash_progress_interval_ms: Option<u64>,
    max_background_shells: Option<usize>,
    max_background_shells_per_tenant: Option<usize>,
    background_shell_lifetime_ms: Option<u64>,
    deferred_tools: Option<Vec<String>>,
    mcp_servers: Option<Vec<String>>,
    mcp_allow_stdio: Option<bool>,
    max_subagents: Option<usize>,
    subagent_timeout_ms: Option<u64>,
    mode: Option<String>,
    allow: Option<Vec<String>>,
    ask: Option<Vec<String>>,
    deny: Option<Vec<String>>,
    web_fetch_allow_private_addresses: Option<bool>,
    web_fetch_allow_write_methods: Option<bool>,
    web_fetch_allow_hosts: Option<Vec<String>>,
    web_fetch_max_body_bytes: Option<usize>,
    web_fetch_timeout_ms: Option<u64>,
    web_search_provider: Option<String>,
    web_search_url: Option<String>,
    web_search_api_key_env: Option<String>,
    web_search_api_key_file: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct SandboxSection {
    enabled: Option<bool>,
    network: Option<bool>,
    bwrap: Option<PathBuf>,
    max_processes: Option<u64>,
    max_memory_bytes: Option<u64>,
    max_file_bytes: Option<u64>,
    max_cpu_seconds: Option<u64>,
    tmp_size_bytes: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ServerSection {
    listen: Option<String>,
    data_dir: Option<PathBuf>,
    store: Option<String>,
    database_url: Option<String>,
    schema: Option<String>,
    fsync: Option<bool>,
    max_events_per_session: Option<u64>,
}

impl ServeConfig {
    /// Layers the config file, then the environment and flags (already merged by clap).
    pub fn load(args: &ServeArgs) -> anyhow::Result<Self> {
        let mut config = ServeConfig::default();
        if let Some(path) = &args.config {
            let file = read_file(path)?;
            config.apply_file(file)?;
        }
        if let Some(listen) = &args.listen {
            config.listen = parse_listen(listen)?;
        }
        if let Some(dir) = &args.data_dir {
            config.data_dir = dir.clone();
        }
        if let Some(store) = &args.store {
            config.store = parse_store(store)?;
        }
        if let Some(url) = &args.database_url {
            config.database_url = Some(Secret::new(url.clone()));
        }
        if let Some(schema) = &args.schema {
            config.schema_policy = parse_schema(schema)?;
        }
        if args.fsync {
            config.fsync = true;
        }
        config.apply_otel_env(|name| std::env::var(name).ok())?;
        config.validate()?;
        Ok(config)
    }

    fn apply_file(&mut self, file: FileConfig) -> anyhow::Result<()> {
        let server = file.server;
        if let Some(listen) = server.listen {
            self.listen = parse_listen(&listen)?;
        }
        set(&mut self.data_dir, server.data_dir);
        if let Some(store) = server.store {
            self.store = parse_store(&store)?;
        }
        if let Some(url) = server.database_url {
            self.database_url = Some(Secret::new(url));
        }
        if let Some(schema) = server.schema {
            self.schema_policy = parse_schema(&schema)?;
        }
        set(&mut self.fsync, server.fsync);
        set(
            &mut self.max_events_per_session,
            server.max_events_per_session,
        );

        self.gateway = file.gateway;
        // `permissions` is not in `[executor]`: `[tools]` sets it below.
        self.executor = file.executor;

        self.apply_provider(file.provider)?;
        if !file.mcp_servers.is_empty() {
            self.mcp_servers = file
                .mcp_servers
                .into_iter()
                .map(mcp::McpServerSection::server)
                .collect::<anyhow::Result<_>>()?;
            for (index, server) in self.mcp_servers.iter().enumerate() {
                anyhow::ensure!(
                    !self.mcp_servers[..index]
                        .iter()
                        .any(|s| s.name == server.name),
                    "mcp_servers: two servers are named {}",
                    server.name
                );
            }
            // The top-level tool set has them all unless `tools.mcp_servers` picks.
            self.tools.mcp_servers = self.mcp_servers.clone();
        }
        self.apply_tools(file.tools, file.sandbox)?;
        if !file.skills.is_empty() {
            self.tools.skills = file
                .skills
                .into_iter()
                .map(SkillSection::definition)
                .collect::<anyhow::Result<_>>()?;
        }
        file.memory.apply(&mut self.tools.memory)?;
        if !file.agents.is_empty() {
            self.tools.agents = file
                .agents
                .into_iter()
                .map(agents::AgentSection::definition)
                .collect::<anyhow::Result<_>>()?;
        }
        for section in file.profiles {
            self.apply_profile(section)?;
        }
        self.apply_telemetry(file.telemetry)?;

        apply_auth(file.auth, &mut self.tokens, &mut self.auth_mode)?;
        if let Some(audit) = file.audit {
            self.audit = Some(audit_config(audit)?);
        }
        if let Some(section) = file.webhooks {
            self.webhooks = Some(section.config()?);
        }
        Ok(())
    }

    fn apply_telemetry(&mut self, section: TelemetrySection) -> anyhow::Result<()> {
        let t = &mut self.telemetry;
        set(&mut t.metrics, section.metrics);
        if let Some(listen) = section.metrics_listen {
            t.metrics_listen = Some(parse_listen(&listen)?);
        }
        set(
            &mut t.include_tenant_attributes,
            section.include_tenant_attributes,
        );
        t.otlp_endpoint = section.otlp_endpoint.or(t.otlp_endpoint.take());
        if let Some(protocol) = section.otlp_protocol {
            t.otlp_protocol = OtlpProtocol::parse(&protocol)
                .map_err(|error| anyhow::anyhow!("telemetry.otlp_protocol: {error}"))?;
        }
        t.service_name = section.service_name.or(t.service_name.take());
        if let Some(name) = section.traces_sampler {
            let arg = section.traces_sampler_arg.map(|arg| arg.to_string());
            t.sampler = Sampler::parse(&name, arg.as_deref())
                .map_err(|error| anyhow::anyhow!("telemetry.traces_sampler: {error}"))?;
        }
        set(
            &mut t.otlp_flush_interval,
            section.otlp_flush_interval_ms.map(Duration::from_millis),
        );
        Ok(())
    }

    /// The standard OpenTelemetry variables win over the file: `OTEL_EXPORTER_OTLP_ENDPOINT`,
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` (then
    /// `OTEL_EXPORTER_OTLP_PROTOCOL`), `OTEL_SERVICE_NAME`, and `OTEL_TRACES_SAMPLER` with its
    /// `OTEL_TRACES_SAMPLER_ARG`.
    pub fn apply_otel_env(&mut self, var: impl Fn(&str) -> Option<String>) -> anyhow::Result<()> {
        let t = &mut self.telemetry;
        let non_empty = |name: &str| var(name).filter(|value| !value.trim().is_empty());
        if let Some(endpoint) = non_empty("OTEL_EXPORTER_OTLP_ENDPOINT") {
            t.otlp_endpoint = Some(endpoint);
        }
        if let Some(url) = non_empty("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
            t.otlp_traces_endpoint = Some(url);
        }
        for name in [
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ] {
            if let Some(protocol) = non_empty(name) {
                t.otlp_protocol = OtlpProtocol::parse(&protocol)
                    .map_err(|error| anyhow::anyhow!("{name}: {error}"))?;
                break;
            }
        }
        if let Some(name) = non_empty("OTEL_SERVICE_NAME") {
            t.service_name = Some(name);
        }
        if let Some(name) = non_empty("OTEL_TRACES_SAMPLER") {
            let arg = non_empty("OTEL_TRACES_SAMPLER_ARG");
            t.sampler = Sampler::parse(&name, arg.as_deref())
                .map_err(|error| anyhow::anyhow!("OTEL_TRACES_SAMPLER: {error}"))?;
        }
        Ok(())
    }

    fn apply_provider(&mut self, section: ProviderSection) -> anyhow::Result<()> {
        let p = &mut self.provider;
        if let Some(kind) = section.kind {
            p.kind = ProviderKind::parse(&kind).with_context(|| {
                format!("provider.kind {kind:?} is not one of: demo, openai, anthropic")
            })?;
        }
        p.model = section.model.or(p.model.take());
        p.base_url = section.base_url.or(p.base_url.take());
        p.api_key_env = section.api_key_env.or(p.api_key_env.take());
        p.api_key_file = section.api_key_file.or(p.api_key_file.take());
        p.max_output_tokens = section.max_output_tokens.or(p.max_output_tokens);
        p.context_window = section.context_window.or(p.context_window);
        let ms = |v: Option<u64>| v.map(Duration::from_millis);
        set(&mut p.http.connect_timeout, ms(section.connect_timeout_ms));
        set(&mut p.http.idle_timeout, ms(section.idle_timeout_ms));
        set(&mut p.http.max_retries, section.max_retries);
        set(&mut p.http.initial_backoff, ms(section.initial_backoff_ms));
        set(&mut p.http.max_backoff, ms(section.max_backoff_ms));
        Ok(())
    }

    /// Adds one profile: this configuration (as loaded so far) with the profile's sections
    /// applied on top, key by key.
    fn apply_profile(&mut self, section: ProfileSection) -> anyhow::Result<()> {
        let name = section.name;
        let plain = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b));
        anyhow::ensure!(
            plain && name != DEFAULT_PROFILE,
            "profiles: {name:?} is not a profile name (letters, digits, - and _; not \"default\")"
        );
        anyhow::ensure!(
            !self.profiles.iter().any(|p| p.name == name),
            "profiles: two profiles are named {name}"
        );
        anyhow::ensure!(
            !section.tenants.is_empty(),
            "profiles: {name} serves no tenant (tenants = [...])"
        );
        for tenant in &section.tenants {
            if let Some(other) = self.profiles.iter().find(|p| p.tenants.contains(tenant)) {
                anyhow::bail!(
                    "profiles: tenant {tenant:?} is in both {} and {name}",
                    other.name
                );
            }
        }
        let mut scratch = self.clone();
        // A profile that sends its model calls elsewhere names its own key: the top-level key
        // is never sent to another endpoint.
        let moved = section.provider.base_url.is_some() || section.provider.kind.is_some();
        let keyed =
            section.provider.api_key_env.is_some() || section.provider.api_key_file.is_some();
        if moved && !keyed {
            scratch.provider.api_key_env = None;
            scratch.provider.api_key_file = None;
            scratch.provider.key_from_vendor_variable = false;
        }
        scratch
            .apply_provider(section.provider)
            .with_context(|| format!("profile {name}"))?;
        scratch
            .apply_tools(section.tools, section.sandbox)
            .with_context(|| format!("profile {name}"))?;
        section
            .memory
            .apply(&mut scratch.tools.memory)
            .with_context(|| format!("profile {name}"))?;
        if let Some(skills) = section.skills {
            if let Some(unknown) = skills
                .iter()
                .find(|s| !self.tools.skills.iter().any(|k| &k.name == *s))
            {
                anyhow::bail!("profile {name}: no [[skills]] entry is named {unknown:?}");
            }
            scratch.tools.skills.retain(|k| skills.contains(&k.name));
        }
        self.profiles.push(ProfileConfig {
            name,
            tenants: section.tenants,
            provider: scratch.provider,
            tools: scratch.tools,
            permissions: scratch.executor.permissions,
        });
        Ok(())
    }

    fn apply_tools(
        &mut self,
        section: ToolsSection,
        sandbox: SandboxSection,
    ) -> anyhow::Result<()> {
        let t = &mut self.tools;
        let ms = |v: Option<u64>| v.map(Duration::from_millis);
        set(&mut t.builtin_tools, section.builtin_tools);
        if section.allowed_tools.is_some() {
            t.allowed_tools = section.allowed_tools;
        }
        set(&mut t.disallowed_tools, section.disallowed_tools);
        set(&mut t.roots, section.roots);
        t.cwd = section.cwd.or(t.cwd.take());
        t.workspace_root = section.workspace_root.or(t.workspace_root.take());
        set(&mut t.max_output_bytes, section.max_output_bytes);
        set(&mut t.bash_timeout, ms(section.bash_timeout_ms));
        set(
            &mut t.bash_progress_interval,
            ms(section.bash_progress_interval_ms),
        );
        set(&mut t.max_background_shells, section.max_background_shells);
        set(&mut t.deferred_tools, section.deferred_tools);
        if let Some(names) = section.mcp_servers {
            t.mcp_servers = mcp::pick(&self.mcp_servers, &names)?;
        }
        set(&mut t.mcp_allow_stdio, section.mcp_allow_stdio);
        set(&mut t.max_subagents, section.max_subagents);
        set(&mut t.subagent_timeout, ms(section.subagent_timeout_ms));
        set(
            &mut t.max_background_shells_per_tenant,
            section.max_background_shells_per_tenant,
        );
        set(
            &mut t.background_shell_lifetime,
            ms(section.background_shell_lifetime_ms),
        );
        let w = &mut t.web_fetch;
        set(
            &mut w.allow_private_addresses,
            section.web_fetch_allow_private_addresses,
        );
        set(
            &mut w.allow_write_methods,
            section.web_fetch_allow_write_methods,
        );
        set(&mut w.allow_hosts, section.web_fetch_allow_hosts);
        set(&mut w.max_body_bytes, section.web_fetch_max_body_bytes);
        set(&mut w.timeout, ms(section.web_fetch_timeout_ms));
        if let Some(name) = section.web_search_provider {
            let provider = SearchProvider::parse(&name).with_context(|| {
                format!("tools.web_search_provider {name:?} is not one of: searxng, brave")
            })?;
            t.web_search = Some(WebSearchConfig {
                provider,
                url: section.web_search_url,
                api_key_env: section.web_search_api_key_env,
                api_key_file: section.web_search_api_key_file,
            });
        }
        apply_sandbox(&mut t.sandbox, sandbox);
        t.selected().map_err(anyhow::Error::from)?;
        self.apply_permissions(section.mode, [section.deny, section.ask, section.allow])
    }

    /// `tools.mode` and the permission rules of `[tools]` (`deny`, `ask`, `allow`).
    fn apply_permissions(
        &mut self,
        mode: Option<String>,
        [deny_rules, ask_rules, allow_rules]: [Option<Vec<String>>; 3],
    ) -> anyhow::Result<()> {
        let permissions = &mut self.executor.permissions;
        if let Some(mode) = mode {
            permissions.mode = PermissionMode::parse(&mode).with_context(|| {
                format!("tools.mode {mode:?} is not one of: default, autoEdit, plan, yolo")
            })?;
        }
        let rules = |list: Option<Vec<String>>, current: &mut Vec<Rule>| -> anyhow::Result<()> {
            if let Some(list) = list {
                *current = list
                    .iter()
                    .map(|rule| Rule::parse(rule).map_err(anyhow::Error::msg))
                    .collect::<anyhow::Result<_>>()?;
            }
            Ok(())
        };
        let PermissionRules { deny, ask, allow } = &mut permissions.rules;
        rules(deny_rules, deny)?;
        rules(ask_rules, ask)?;
        rules(allow_rules, allow)?;
        Ok(())
    }

    /// Every number must be positive, like the reference's constructor checks.
    fn validate(&self) -> anyhow::Result<()> {
        self.gateway.validate().map_err(anyhow::Error::msg)?;
        self.executor.validate().map_err(anyhow::Error::msg)?;
        let positive = [
            ("server.max_events_per_session", self.max_events_per_session),
            ("tools.max_output_bytes", self.tools.max_output_bytes as u64),
            ("tools.max_subagents", self.tools.max_subagents as u64),
            (
                "tools.subagent_timeout_ms",
                self.tools.subagent_timeout.as_millis() as u64,
            ),
            (
                "tools.bash_timeout_ms",
                self.tools.bash_timeout.as_millis() as u64,
            ),
            (
                "provider.idle_timeout_ms",
                self.provider.http.idle_timeout.as_millis() as u64,
            ),
        ];
        if self.store == StoreKind::Postgres && self.database_url.is_none() {
            bail!(
                "store \"postgres\" needs a database URL: --database-url, \
                 AGENT_RUNTIME_DATABASE_URL or [server] database_url"
            );
        }
        agent_runtime::config::check_positive(positive).map_err(anyhow::Error::msg)?;
        self.telemetry.validate().map_err(anyhow::Error::msg)?;
        Ok(())
    }
}

/// A text given inline or as a file read now: exactly one of the two `keys`.
pub(super) fn inline_or_file(
    owner: &str,
    keys: [&str; 2],
    inline: Option<String>,
    file: &Option<PathBuf>,
) -> anyhow::Result<String> {
    match (inline, file) {
        (Some(text), None) => Ok(text),
        (None, Some(path)) => std::fs::read_to_string(path)
            .with_context(|| format!("{owner}: reading {}", path.display())),
        _ => bail!("{owner}: give exactly one of {} and {}", keys[0], keys[1]),
    }
}

/// `[sandbox]`.
fn apply_sandbox(target: &mut SandboxConfig, sandbox: SandboxSection) {
    set(&mut target.enabled, sandbox.enabled);
    set(&mut target.network, sandbox.network);
    target.bwrap = sandbox.bwrap.or(target.bwrap.take());
    set(&mut target.max_processes, sandbox.max_processes);
    set(&mut target.max_memory_bytes, sandbox.max_memory_bytes);
    set(&mut target.max_file_bytes, sandbox.max_file_bytes);
    set(&mut target.max_cpu_seconds, sandbox.max_cpu_seconds);
    set(&mut target.tmp_size_bytes, sandbox.tmp_size_bytes);
}

pub(crate) fn set<T>(target: &mut T, value: Option<T>) {
    if let Some(value) = value {
        *target = value;
    }
}

fn read_file(path: &Path) -> anyhow::Result<FileConfig> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the config file {}", path.display()))?;
    toml::from_str(&text).with_context(|| format!("parsing the config file {}", path.display()))
}

fn parse_listen(value: &str) -> anyhow::Result<SocketAddr> {
    value
        .parse()
        .with_context(|| format!("listen address {value:?} is not HOST:PORT"))
}

fn parse_store(value: &str) -> anyhow::Result<StoreKind> {
    match value {
        "jsonl" => Ok(StoreKind::Jsonl),
        "memory" => Ok(StoreKind::Memory),
        "postgres" | "postgresql" => Ok(StoreKind::Postgres),
        other => bail!("store {other:?} is not one of: jsonl, memory, postgres"),
    }
}

fn parse_schema(value: &str) -> anyhow::Result<SchemaPolicy> {
    match value {
        "migrate" => Ok(SchemaPolicy::Migrate),
        "require" => Ok(SchemaPolicy::RequireCurrent),
        other => bail!("schema {other:?} is not one of: migrate, require"),
    }
}

#[cfg(test)]
mod tests;
