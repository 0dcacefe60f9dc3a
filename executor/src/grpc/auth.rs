//! The cluster secret: executors trust only gateways that present it (docs/architecture.md).

use agent_runtime::secret::Secret;
use subtle::ConstantTimeEq;
use tonic::{Request, Status};

/// Refuses a cluster secret short enough to be guessed.
pub fn check_cluster_secret(secret: &Secret) -> Result<(), String> {
    if secret.expose().len() < 16 {
        return Err("the cluster secret must be at least 16 characters".to_owned());
    }
    Ok(())
}

/// A tonic interceptor: anything without the secret is `UNAUTHENTICATED`.
pub fn check_secret(secret: &Secret, request: Request<()>) -> Result<Request<()>, Status> {
    let presented = request
        .metadata()
        .get("authorization")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "));
    match presented {
        Some(token) if bool::from(token.as_bytes().ct_eq(secret.expose().as_bytes())) => {
            Ok(request)
        }
        _ => Err(Status::unauthenticated("cluster secret required")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::metadata::MetadataValue;

    #[test]
    fn only_the_secret_passes_and_it_never_prints() {
        let secret = Secret::new("a-very-long-cluster-secret");
        check_cluster_secret(&secret).unwrap();
        let mut good = Request::new(());
        good.metadata_mut().insert(
            "authorization",
            MetadataValue::from_static("Bearer a-very-long-cluster-secret"),
        );
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
        assert!(check_cluster_secret(&Secret::new("short")).is_err());
    }
}
