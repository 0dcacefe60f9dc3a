//! Which model provider a deployment runs, and building it. The API key is read once, at start-up,
//! from an environment variable *name* or a file *path* given in the configuration, so the key
//! itself never sits in a config file or a process listing.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::{
    AnthropicProvider, DEFAULT_ANTHROPIC_BASE_URL, DEFAULT_OPENAI_BASE_URL, DemoProvider,
    HttpSettings, ModelProvider, OpenAiProvider,
};
use agent_runtime::secret::Secret;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ProviderKind {
    /// The offline demo model (the default until an operator picks a real one).
    #[default]
    Demo,
    OpenAi,
    Anthropic,
}

impl ProviderKind {
    /// The variable the vendor's own SDKs read the key from: the key when the configuration
    /// names none.
    pub fn key_variable(self) -> Option<&'static str> {
        match self {
            Self::Demo => None,
            Self::OpenAi => Some("OPENAI_API_KEY"),
            Self::Anthropic => Some("ANTHROPIC_API_KEY"),
        }
    }

    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "demo" => Some(Self::Demo),
            "openai" => Some(Self::OpenAi),
            "anthropic" => Some(Self::Anthropic),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Demo => "demo",
            Self::OpenAi => "openai",
            Self::Anthropic => "anthropic",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct ProviderConfig {
    /// `demo`, `openai` or `anthropic`. Default `demo`.
    pub kind: ProviderKind,
    /// Model id sent to the API; required for `openai` and `anthropic`.
    pub model: Option<String>,
    /// API root. Defaults: `https://api.openai.com/v1`, `https://api.anthropic.com`.
    pub base_url: Option<String>,
    /// Name of the environment variable holding the API key.
    pub api_key_env: Option<String>,
    /// File holding the API key (surrounding whitespace is ignored).
    pub api_key_file: Option<PathBuf>,
    /// Without either of the two above, read the vendor's variable (`OPENAI_API_KEY`,
    /// `ANTHROPIC_API_KEY`). Default true; false for a profile that sends its calls elsewhere
    /// without naming its own key (the operator's key never goes to another endpoint).
    pub key_from_vendor_variable: bool,
    /// Output token limit per model call. Default: none for `openai`, 4096 for `anthropic`
    /// (which requires one).
    pub max_output_tokens: Option<u32>,
    /// Context window reported in `usage.maxContextTokens`. Default 128 000 (`openai`),
    /// 200 000 (`anthropic`).
    pub context_window: Option<u64>,
    /// Timeouts and retries.
    pub http: HttpSettings,
    /// Pause between the deltas of the demo's `demo:slow` (`executor.demo_slow_delta_interval_ms`).
    pub demo_slow_delta_interval: Duration,
}

/// The demo provider's default pause between `demo:slow` deltas.
pub const DEFAULT_DEMO_SLOW_DELTA_INTERVAL: Duration = Duration::from_millis(250);

impl Default for ProviderConfig {
    fn default() -> Self {
        Self {
            kind: ProviderKind::Demo,
            model: None,
            base_url: None,
            api_key_env: None,
            api_key_file: None,
            key_from_vendor_variable: true,
            max_output_tokens: None,
            context_window: None,
            http: HttpSettings::default(),
            demo_slow_delta_interval: DEFAULT_DEMO_SLOW_DELTA_INTERVAL,
        }
    }
}

/// Why a provider could not be built. Never carries the key.
#[derive(Debug, thiserror::Error)]
pub enum ProviderConfigError {
    #[error("provider {0}: `model` is required")]
    MissingModel(&'static str),
    #[error("provider {0}: an API key is required (set {1}, or `api_key_env` or `api_key_file`)")]
    MissingKey(&'static str, &'static str),
    #[error(
        "provider: `api_key_env` must name an environment variable (letters, digits and _), not \
         hold the key itself"
    )]
    KeyEnvNotAName,
    #[error("provider: set only one of `api_key_env` and `api_key_file`")]
    TwoKeySources,
    #[error("provider: the environment variable {0} named by `api_key_env` is not set or empty")]
    KeyEnvUnset(String),
    #[error("provider: cannot read the key file {path}: {source}")]
    KeyFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("provider: the key file {0} is empty")]
    KeyFileEmpty(PathBuf),
    #[error("provider: {0}")]
    Build(String),
}

impl ProviderConfig {
    /// The API key: from `api_key_env` or `api_key_file`, else from the vendor's variable
    /// ([`ProviderKind::key_variable`]); `None` when there is none.
    pub fn load_key(&self) -> Result<Option<Secret>, ProviderConfigError> {
        self.load_key_from(|name| std::env::var(name).ok())
    }

    /// [`Self::load_key`] reading variables through `var`.
    pub fn load_key_from(
        &self,
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Secret>, ProviderConfigError> {
        let set = |name: &str| var(name).filter(|value| !value.trim().is_empty());
        match (&self.api_key_env, &self.api_key_file) {
            (Some(_), Some(_)) => Err(ProviderConfigError::TwoKeySources),
            // A key pasted where its variable's name belongs is never echoed.
            (Some(name), None) if !is_variable_name(name) => {
                Err(ProviderConfigError::KeyEnvNotAName)
            }
            (Some(name), None) => match set(name) {
                Some(value) => Ok(Some(Secret::new(value.trim()))),
                None => Err(ProviderConfigError::KeyEnvUnset(name.clone())),
            },
            (None, Some(path)) => {
                let text = std::fs::read_to_string(path).map_err(|source| {
                    ProviderConfigError::KeyFile {
                        path: path.clone(),
                        source,
                    }
                })?;
                match text.trim() {
                    "" => Err(ProviderConfigError::KeyFileEmpty(path.clone())),
                    key => Ok(Some(Secret::new(key))),
                }
            }
            (None, None) => Ok(self
                .kind
                .key_variable()
                .filter(|_| self.key_from_vendor_variable)
                .and_then(set)
                .map(|value| Secret::new(value.trim()))),
        }
    }
}

fn is_variable_name(name: &str) -> bool {
    name.len() <= 128
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && !name.is_empty()
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Builds the configured provider (keys are read here, once).
pub fn build_provider(
    config: &ProviderConfig,
) -> Result<Arc<dyn ModelProvider>, ProviderConfigError> {
    let kind = config.kind.as_str();
    let model = || {
        config
            .model
            .clone()
            .filter(|m| !m.is_empty())
            .ok_or(ProviderConfigError::MissingModel(kind))
    };
    let built = |error: super::ProviderError| ProviderConfigError::Build(error.message);
    match config.kind {
        ProviderKind::Demo => Ok(Arc::new(DemoProvider {
            slow_delta_interval: config.demo_slow_delta_interval,
        })),
        ProviderKind::OpenAi => {
            // Local OpenAI-compatible servers often need no key: say so, since a hosted one
            // would answer every request 401.
            let key = config.load_key()?;
            if key.is_none() {
                tracing::warn!(
                    "provider openai: no API key (none of `api_key_env`, `api_key_file` or \
                     OPENAI_API_KEY is set): requests are sent without one"
                );
            }
            let provider = OpenAiProvider::new(
                model()?,
                config
                    .base_url
                    .as_deref()
                    .unwrap_or(DEFAULT_OPENAI_BASE_URL),
                key,
                config.max_output_tokens,
                config.context_window.unwrap_or(128_000),
                config.http.clone(),
            )
            .map_err(built)?;
            Ok(Arc::new(provider))
        }
        ProviderKind::Anthropic => {
            let key = config
                .load_key()?
                .ok_or(ProviderConfigError::MissingKey(kind, "ANTHROPIC_API_KEY"))?;
            let provider = AnthropicProvider::new(
                model()?,
                config
                    .base_url
                    .as_deref()
                    .unwrap_or(DEFAULT_ANTHROPIC_BASE_URL),
                key,
                config.max_output_tokens.unwrap_or(4096),
                config.context_window.unwrap_or(200_000),
                config.http.clone(),
            )
            .map_err(built)?;
            Ok(Arc::new(provider))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{ProviderConfig, ProviderConfigError, ProviderKind};

    fn config(kind: ProviderKind, api_key_env: Option<&str>) -> ProviderConfig {
        ProviderConfig {
            kind,
            api_key_env: api_key_env.map(str::to_owned),
            ..ProviderConfig::default()
        }
    }

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            pairs
                .iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| (*value).to_owned())
        }
    }

    /// Issue 39 item 5: without `api_key_env`/`api_key_file`, both kinds read their vendor's
    /// variable, as the vendors' SDKs do; a configured variable wins over it.
    #[test]
    fn a_key_comes_from_the_vendors_variable_when_none_is_configured() {
        let vendor = env(&[("OPENAI_API_KEY", "sk-o"), ("ANTHROPIC_API_KEY", "sk-a")]);
        let key = |config: ProviderConfig| {
            config
                .load_key_from(&vendor)
                .unwrap()
                .map(|key| key.expose().to_owned())
        };
        assert_eq!(
            key(config(ProviderKind::OpenAi, None)).as_deref(),
            Some("sk-o")
        );
        assert_eq!(
            key(config(ProviderKind::Anthropic, None)).as_deref(),
            Some("sk-a")
        );
        assert_eq!(key(config(ProviderKind::Demo, None)), None);
        let configured = env(&[("OPENAI_API_KEY", "sk-o"), ("TEAM_KEY", "sk-team")]);
        let chosen = config(ProviderKind::OpenAi, Some("TEAM_KEY"))
            .load_key_from(configured)
            .unwrap();
        assert_eq!(chosen.unwrap().expose(), "sk-team");
        let none = config(ProviderKind::OpenAi, None).load_key_from(env(&[]));
        assert!(none.unwrap().is_none(), "openai may run without a key");
        // A profile that moved elsewhere without its own key never takes the operator's.
        let moved = ProviderConfig {
            key_from_vendor_variable: false,
            ..config(ProviderKind::OpenAi, None)
        };
        assert!(moved.load_key_from(&vendor).unwrap().is_none());
    }

    /// A key pasted into `api_key_env` is refused without being echoed; a missing variable is
    /// named (a name is not a secret).
    #[test]
    fn configuration_errors_never_echo_a_key() {
        let pasted = "sk-proj-0123456789abcdef-XYZ";
        let error = config(ProviderKind::OpenAi, Some(pasted))
            .load_key_from(env(&[]))
            .unwrap_err();
        assert!(matches!(error, ProviderConfigError::KeyEnvNotAName));
        assert!(!error.to_string().contains(pasted), "{error}");
        assert!(!error.to_string().contains("sk-"), "{error}");
        let unset = config(ProviderKind::OpenAi, Some("TEAM_KEY"))
            .load_key_from(env(&[]))
            .unwrap_err();
        assert!(unset.to_string().contains("TEAM_KEY"), "{unset}");
        let missing = super::build_provider(&ProviderConfig {
            model: Some("claude".into()),
            ..config(ProviderKind::Anthropic, None)
        });
        if std::env::var("ANTHROPIC_API_KEY").is_err() {
            let Err(error) = missing else {
                panic!("anthropic needs a key");
            };
            let error = error.to_string();
            assert!(error.contains("ANTHROPIC_API_KEY"), "{error}");
        }
    }
}
