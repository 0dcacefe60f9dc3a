//! Agent profiles: what a tenant's sessions run with, like the reference host's
//! `resolveSessionOptions({ principal })`, chosen by the operator and never by a client. A profile
//! is a model provider (with its key), a tool set (roots or per-session workspaces, sandbox,
//! skills, memory) and a permission policy; tenants map to profiles and every other tenant gets the
//! default profile (the top-level configuration).
//!
//! The profile is resolved when a session is created and recorded with it
//! (`SessionRecord::profile`); an executor that loads the session later, after a restart or a
//! handoff, uses the recorded one, so a change to the tenant mapping applies to new sessions only.

use std::collections::HashMap;
use std::sync::Arc;

use crate::permissions::PermissionPolicy;
use crate::provider::{ModelProvider, ProviderIdentity};
use crate::tools::ToolRegistry;

/// The name recorded for sessions of the default profile.
pub const DEFAULT_PROFILE: &str = "default";

/// One operator-defined profile and the tenants it serves.
pub struct AgentProfile {
    pub name: String,
    pub tenants: Vec<String>,
    pub provider: Arc<dyn ModelProvider>,
    pub tools: ToolRegistry,
    pub permissions: PermissionPolicy,
}

/// A profile as sessions use it.
pub(crate) struct SessionProfile {
    pub name: String,
    pub provider: Arc<dyn ModelProvider>,
    /// Who answers model calls, for spans and the provider metrics' label.
    pub provider_identity: ProviderIdentity,
    /// Shared by the profile's sessions unless each has its own workspace.
    pub tools: Arc<ToolRegistry>,
    pub permissions: PermissionPolicy,
}

impl std::fmt::Debug for SessionProfile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionProfile")
            .field("name", &self.name)
            .field("provider", &self.provider_identity)
            .field("tools", &self.tools.names())
            .finish_non_exhaustive()
    }
}

impl SessionProfile {
    fn new(
        name: &str,
        provider: Arc<dyn ModelProvider>,
        tools: ToolRegistry,
        permissions: PermissionPolicy,
    ) -> Arc<Self> {
        Arc::new(Self {
            name: name.to_owned(),
            provider_identity: provider.identity(),
            provider,
            tools: Arc::new(tools),
            permissions,
        })
    }
}

/// Every profile of an executor and the tenant mapping.
#[derive(Debug)]
pub(crate) struct Profiles {
    default: Arc<SessionProfile>,
    named: HashMap<String, Arc<SessionProfile>>,
    by_tenant: HashMap<String, String>,
}

impl Profiles {
    pub fn new(
        provider: Arc<dyn ModelProvider>,
        tools: ToolRegistry,
        permissions: PermissionPolicy,
        profiles: Vec<AgentProfile>,
    ) -> Self {
        let mut named = HashMap::new();
        let mut by_tenant = HashMap::new();
        for profile in profiles {
            for tenant in &profile.tenants {
                by_tenant.insert(tenant.clone(), profile.name.clone());
            }
            let session = SessionProfile::new(
                &profile.name,
                profile.provider,
                profile.tools,
                profile.permissions,
            );
            named.insert(profile.name, session);
        }
        Self {
            default: SessionProfile::new(DEFAULT_PROFILE, provider, tools, permissions),
            named,
            by_tenant,
        }
    }

    /// The profile a new session of `tenant_id` gets.
    pub fn for_new_session(&self, tenant_id: &str) -> &Arc<SessionProfile> {
        self.by_tenant
            .get(tenant_id)
            .and_then(|name| self.named.get(name))
            .unwrap_or(&self.default)
    }

    /// The profile of a stored session: the recorded one while it exists, else (a session from
    /// before profiles, or a profile the operator removed) its tenant's.
    pub fn for_session(&self, tenant_id: &str, recorded: Option<&str>) -> &Arc<SessionProfile> {
        match recorded {
            Some(DEFAULT_PROFILE) => &self.default,
            Some(name) => match self.named.get(name) {
                Some(profile) => profile,
                None => {
                    tracing::warn!(
                        profile = name,
                        "a session's profile is no longer configured: it runs with its tenant's"
                    );
                    self.for_new_session(tenant_id)
                }
            },
            None => self.for_new_session(tenant_id),
        }
    }
}
