//! A secret string (provider API keys) that never prints: `Debug` and `Display` show a fixed
//! placeholder, so a secret cannot leak through a log line, an error or a config dump by accident.
//! The value is reachable only through [`SecretString::expose`], used where it goes on the wire.

use std::fmt;

#[derive(Clone, PartialEq, Eq)]
pub struct SecretString(String);

impl SecretString {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret itself; only for putting it into an outgoing request header.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Replaces every occurrence of the secret in `text` (provider error bodies sometimes echo
    /// the key back), so text from outside can be logged.
    pub fn scrub(&self, text: &str) -> String {
        if self.0.is_empty() {
            return text.to_owned();
        }
        text.replace(&self.0, "[redacted]")
    }
}

impl fmt::Debug for SecretString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretString([redacted])")
    }
}

impl fmt::Display for SecretString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

#[cfg(test)]
mod tests {
    use super::SecretString;

    #[test]
    fn never_prints_and_scrubs() {
        let secret = SecretString::new("sk-live-123456");
        assert!(!format!("{secret:?} {secret}").contains("sk-live"));
        assert_eq!(
            secret.scrub("bad key sk-live-123456!"),
            "bad key [redacted]!"
        );
        assert_eq!(secret.expose(), "sk-live-123456");
    }
}
