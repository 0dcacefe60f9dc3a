//! Signing secrets, signatures and their verification (Standard Webhooks, "Signature scheme").

use std::fmt;

use agent_runtime::secret::Secret;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use ring::hmac;

/// The prefix of a signing secret's text.
const SECRET_PREFIX: &str = "whsec_";
/// Key bytes a secret must have at least (the specification asks for 24 to 64).
const MIN_KEY_BYTES: usize = 24;
const MAX_KEY_BYTES: usize = 64;
/// The signature scheme of every signature we write.
const SCHEME: &str = "v1";
/// How far a delivery's timestamp may be from the verifier's clock (the specification's
/// default), in seconds: older deliveries are refused as replays.
pub const TOLERANCE_SECS: i64 = 5 * 60;

/// One endpoint's signing secret: `whsec_` and the base64 of 24 to 64 random bytes. Never
/// printed: `Debug` shows a placeholder.
#[derive(Clone)]
pub struct SigningSecret {
    key: hmac::Key,
}

impl SigningSecret {
    /// Reads a secret's text (`whsec_…`). The error never repeats the text.
    pub fn parse(text: &Secret) -> Result<SigningSecret, SignatureError> {
        let encoded = text
            .expose()
            .strip_prefix(SECRET_PREFIX)
            .ok_or(SignatureError::SecretFormat)?;
        let bytes = BASE64
            .decode(encoded)
            .map_err(|_| SignatureError::SecretFormat)?;
        if !(MIN_KEY_BYTES..=MAX_KEY_BYTES).contains(&bytes.len()) {
            return Err(SignatureError::SecretFormat);
        }
        Ok(SigningSecret {
            key: hmac::Key::new(hmac::HMAC_SHA256, &bytes),
        })
    }

    /// `v1,` and the base64 signature of one delivery.
    fn signature(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        let mut context = hmac::Context::with_key(&self.key);
        context.update(id.as_bytes());
        context.update(b".");
        context.update(timestamp.to_string().as_bytes());
        context.update(b".");
        context.update(body);
        let tag = context.sign();
        format!("{SCHEME},{}", BASE64.encode(tag.as_ref()))
    }
}

impl fmt::Debug for SigningSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SigningSecret([redacted])")
    }
}

/// The three headers of one delivery.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignedHeaders {
    /// `webhook-id`: the same for every attempt of one delivery, so receivers can deduplicate.
    pub id: String,
    /// `webhook-timestamp`: seconds since the Unix epoch, when this attempt was signed.
    pub timestamp: i64,
    /// `webhook-signature`: one `v1,…` per secret, separated by spaces.
    pub signature: String,
}

impl SignedHeaders {
    /// The headers as (name, value) pairs.
    pub fn pairs(&self) -> [(&'static str, String); 3] {
        [
            ("webhook-id", self.id.clone()),
            ("webhook-timestamp", self.timestamp.to_string()),
            ("webhook-signature", self.signature.clone()),
        ]
    }
}

/// Signs one attempt of a delivery with every secret of its endpoint (newest first is the
/// convention, any order verifies).
pub fn sign(secrets: &[SigningSecret], id: &str, timestamp: i64, body: &[u8]) -> SignedHeaders {
    let signature = secrets
        .iter()
        .map(|secret| secret.signature(id, timestamp, body))
        .collect::<Vec<_>>()
        .join(" ");
    SignedHeaders {
        id: id.to_owned(),
        timestamp,
        signature,
    }
}

/// Verifies a delivery as a receiver does: its timestamp within [`TOLERANCE_SECS`] of `now` and
/// one of its `v1` signatures made with one of `secrets` (compared in constant time).
pub fn verify(
    secrets: &[SigningSecret],
    headers: &SignedHeaders,
    body: &[u8],
    now: i64,
) -> Result<(), SignatureError> {
    if (now - headers.timestamp).abs() > TOLERANCE_SECS {
        return Err(SignatureError::Timestamp);
    }
    let mut signed = Vec::with_capacity(headers.id.len() + body.len() + 24);
    signed.extend_from_slice(headers.id.as_bytes());
    signed.push(b'.');
    signed.extend_from_slice(headers.timestamp.to_string().as_bytes());
    signed.push(b'.');
    signed.extend_from_slice(body);
    let given = headers
        .signature
        .split(' ')
        .filter_map(|entry| entry.strip_prefix("v1,"))
        .filter_map(|encoded| BASE64.decode(encoded).ok());
    for tag in given {
        if secrets
            .iter()
            .any(|secret| hmac::verify(&secret.key, &signed, &tag).is_ok())
        {
            return Ok(());
        }
    }
    Err(SignatureError::Mismatch)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("a webhook signing secret is `whsec_` followed by the base64 of 24 to 64 bytes")]
    SecretFormat,
    #[error("the webhook timestamp is more than 5 minutes away from now")]
    Timestamp,
    #[error("no webhook signature matches")]
    Mismatch,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of the Standard Webhooks specification and its reference libraries.
    const SPEC_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const SPEC_ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const SPEC_TIMESTAMP: i64 = 1_614_265_330;
    const SPEC_BODY: &str = r#"{"test": 2432232314}"#;
    const SPEC_SIGNATURE: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    fn secret(text: &str) -> SigningSecret {
        SigningSecret::parse(&Secret::new(text)).unwrap()
    }

    #[test]
    fn signs_the_specifications_example() {
        let headers = sign(
            &[secret(SPEC_SECRET)],
            SPEC_ID,
            SPEC_TIMESTAMP,
            SPEC_BODY.as_bytes(),
        );
        assert_eq!(headers.signature, SPEC_SIGNATURE);
        assert_eq!(
            verify(
                &[secret(SPEC_SECRET)],
                &headers,
                SPEC_BODY.as_bytes(),
                SPEC_TIMESTAMP + 60
            ),
            Ok(())
        );
    }

    #[test]
    fn verification_refuses_a_tampered_body_another_secret_and_an_old_timestamp() {
        let key = [secret(SPEC_SECRET)];
        let headers = sign(&key, SPEC_ID, SPEC_TIMESTAMP, SPEC_BODY.as_bytes());
        let now = SPEC_TIMESTAMP;
        let tampered = br#"{"test": 2432232315}"#;
        assert_eq!(
            verify(&key, &headers, tampered, now),
            Err(SignatureError::Mismatch)
        );
        let other = [secret("whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")];
        assert_eq!(
            verify(&other, &headers, SPEC_BODY.as_bytes(), now),
            Err(SignatureError::Mismatch)
        );
        let late = now + TOLERANCE_SECS + 1;
        assert_eq!(
            verify(&key, &headers, SPEC_BODY.as_bytes(), late),
            Err(SignatureError::Timestamp)
        );
    }

    #[test]
    fn every_secret_signs_so_a_rotation_keeps_verifying() {
        let old = secret(SPEC_SECRET);
        let new = secret("whsec_BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB");
        let headers = sign(&[new.clone(), old.clone()], SPEC_ID, SPEC_TIMESTAMP, b"{}");
        assert_eq!(headers.signature.split(' ').count(), 2);
        for receiver in [old, new] {
            assert_eq!(verify(&[receiver], &headers, b"{}", SPEC_TIMESTAMP), Ok(()));
        }
    }

    #[test]
    fn a_malformed_secret_is_refused_without_repeating_it() {
        for text in [
            "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "whsec_not base64!",
            "whsec_c2hvcnQ=",
        ] {
            let error = SigningSecret::parse(&Secret::new(text)).unwrap_err();
            assert_eq!(error, SignatureError::SecretFormat);
            assert!(!error.to_string().contains(text));
        }
        assert_eq!(
            format!("{:?}", secret(SPEC_SECRET)),
            "SigningSecret([redacted])"
        );
    }

    /// The reference library verifies what we sign (each secret of a rotation on its own) and
    /// refuses it once the body changed; its own signature of the same delivery is ours.
    #[test]
    fn the_standard_webhooks_library_verifies_our_signatures() {
        use std::io::Write as _;
        use std::process::{Command, Stdio};

        let texts = ["whsec_BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB", SPEC_SECRET];
        let secrets: Vec<SigningSecret> = texts.iter().map(|t| secret(t)).collect();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        let body = r#"{"type":"request.completed","data":{"subtype":"success"}}"#;
        let headers = sign(&secrets, "msg_interop", now, body.as_bytes());
        let input = serde_json::json!({
            "secrets": texts,
            "id": headers.id,
            "timestamp": headers.timestamp,
            "body": body,
            "signature": headers.signature,
        });
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/src/signature/interop.py");
        let mut child = Command::new("python3")
            .arg(script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("python3 runs");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.to_string().as_bytes())
            .unwrap();
        let output = child.wait_with_output().unwrap();
        assert!(
            output.status.success(),
            "the reference library ran (scripts/test.sh installs `standardwebhooks`): {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let answer: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(
            answer["verified"],
            serde_json::json!([true, true]),
            "{answer}"
        );
        assert_eq!(
            answer["tampered"],
            serde_json::json!([false, false]),
            "{answer}"
        );
        let first_only = sign(&secrets[..1], "msg_interop", now, body.as_bytes());
        assert_eq!(answer["signature"], first_only.signature.as_str());
    }
}
