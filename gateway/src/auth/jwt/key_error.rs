//! Why a key file cannot be used: the one error type of key parsing (PEM, DER, JWKS).

/// Why a key file cannot be used. Names structures, never key bytes.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("reading {path}: {message}")]
    Read { path: String, message: String },
    #[error("the key file {path} is not usable: {reason}")]
    InFile { path: String, reason: Box<KeyError> },
    #[error("malformed {0}")]
    Malformed(&'static str),
    #[error("unsupported: {0}")]
    Unsupported(&'static str),
    #[error("the key does not fit {0}")]
    WrongAlgorithm(&'static str),
    #[error("RSA keys must have 2048 to 8192 bits")]
    RsaKeySize,
    #[error("the JWKS has two keys with the same kid")]
    DuplicateKid,
    #[error("the JWKS has no key usable with {0}")]
    NoUsableKey(&'static str),
}
