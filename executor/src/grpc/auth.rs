//! The cluster secret: executors trust only gateways that present it (docs/architecture.md).

use subtle::ConstantTimeEq;
use tonic::metadata::MetadataValue;
use tonic::{Request, Status};

/// A shared secret that never prints.
#[derive(Clone)]
pub struct ClusterSecret(String);

impl ClusterSecret {
    /// A secret must be long enough not to be guessed.
    pub fn new(secret: impl Into<String>) -> Result<Self, String> {
        let secret = secret.into();
        if secret.len() < 16 {
            return Err("the cluster secret must be at least 16 characters".to_owned());
        }
        Ok(Self(secret))
    }

    /// The `authorization` metadata value a gateway sends.
    pub fn header_value(&self) -> MetadataValue<tonic::metadata::Ascii> {
        MetadataValue::try_from(format!("Bearer {}", self.0)).expect("a secret is ASCII metadata")
    }

    fn matches(&self, presented: &str) -> bool {
        presented.as_bytes().ct_eq(self.0.as_bytes()).into()
    }
}

impl std::fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterSecret(<redacted>)")
    }
}

/// A tonic interceptor: anything without the secret is `UNAUTHENTICATED`.
pub fn check_secret(secret: &ClusterSecret, request: Request<()>) -> Result<Request<()>, Status> {
    let presented = request
        .metadata()
        .get("authorization")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "));
    match presented {
        Some(token) if secret.matches(token) => Ok(request),
        _ => Err(Status::unauthenticated("cluster secret required")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_secret_passes_and_it_never_prints() {
        let secret = ClusterSecret::new("a-very-long-cluster-secret").unwrap();
        let mut good = Request::new(());
        good.metadata_mut()
            .insert("authorization", secret.header_value());
        assert!(check_secret(&secret, good).is_ok());
        let mut bad = Request::new(());
        bad.metadata_mut()
            .insert("authorization", MetadataValue::from_static("Bearer nope"));
        assert_eq!(
            check_secret(&secret, bad).unwrap_err().code(),
            tonic::Code::Unauthenticated
        );
        assert_eq!(
            check_secret(&secret, Request::new(())).unwrap_err().code(),
            tonic::Code::Unauthenticated
        );
        assert!(!format!("{secret:?}").contains("a-very-long"));
        assert!(ClusterSecret::new("short").is_err());
    }
}
