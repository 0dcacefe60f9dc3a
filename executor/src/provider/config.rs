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
use crate::secret::SecretString;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ProviderKind {
    /// The offline demo model (the default until an operator picks a real one).
    #[default]
    Demo,
    OpenAi,
    Anthropic,
}

impl ProviderKind {
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
    /// Output token limit per model call. Default: none for `openai`, 4096 for `anthropic`
    /// (which requires one).
    pub max_output_tokens: Option<u32>,
    /// Context window reported in `usage.maxContextTokens`. Default 128 000 (`openai`),
    /// 200 000 (`anthropic`).
    pub context_window: Option<u64>,
    /// Timeouts and retries.
    pub http: HttpSettings,
    /// Pause between the deltas of the demo's `demo:slow`. Default 250 ms.
    pub demo_slow_delta_interval: Duration,
}

impl Default for ProviderConfig {
    fn default() -> Self {
        Self {
            kind: ProviderKind::Demo,
            model: None,
            base_url: None,
            api_key_env: None,
            api_key_file: None,
            max_output_tokens: None,
            context_window: None,
            http: HttpSettings::default(),
            demo_slow_delta_interval: Duration::from_millis(250),
        }
    }
}

/// Why a provider could not be built. Never carries the key.
#[derive(Debug, thiserror::Error)]
pub enum ProviderConfigError {
    #[error("provider {0}: `model` is required")]
    MissingModel(&'static str),
    #[error("provider {0}: an API key is required (set `api_key_env` or `api_key_file`)")]
    MissingKey(&'static str),
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
    /// The API key, if one is configured.
    pub fn load_key(&self) -> Result<Option<SecretString>, ProviderConfigError> {
        match (&self.api_key_env, &self.api_key_file) {
            (Some(_), Some(_)) => Err(ProviderConfigError::TwoKeySources),
            (Some(name), None) => match std::env::var(name) {
                Ok(value) if !value.trim().is_empty() => Ok(Some(SecretString::new(value.trim()))),
                _ => Err(ProviderConfigError::KeyEnvUnset(name.clone())),
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
                    key => Ok(Some(SecretString::new(key))),
                }
            }
            (None, None) => Ok(None),
        }
    }
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
            // Local OpenAI-compatible servers often need no key.
            let provider = OpenAiProvider::new(
                model()?,
                config
                    .base_url
                    .as_deref()
                    .unwrap_or(DEFAULT_OPENAI_BASE_URL),
                config.load_key()?,
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
                .ok_or(ProviderConfigError::MissingKey(kind))?;
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
