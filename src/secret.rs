//! A secret string (a provider API key, a bearer token, the cluster secret, a database URL with
//! its password) that never prints: `Debug` and `Display` show a fixed placeholder, so a secret
//! cannot leak through a log line, an error or a config dump by accident. The value is reachable
//! only through [`Secret::expose`], used where it goes on the wire.

use std::fmt;

#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The secret itself; only where it goes on the wire.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// `text` with every occurrence of the secret replaced (error bodies sometimes echo a key
    /// back), so text from outside can be logged.
    pub fn scrub(&self, text: &str) -> String {
        if self.0.is_empty() {
            return text.to_owned();
        }
        text.replace(&self.0, "[redacted]")
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret([redacted])")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Secret {
        Secret(value)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Secret {
        Secret(value.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::Secret;

    #[test]
    fn never_prints_and_scrubs() {
        let secret = Secret::new("sk-live-123456");
        assert!(!format!("{secret:?} {secret}").contains("sk-live"));
        assert_eq!(
            secret.scrub("bad key sk-live-123456!"),
            "bad key [redacted]!"
        );
        assert_eq!(secret.expose(), "sk-live-123456");
        assert_eq!(Secret::new(""), Secret::from(""));
        assert_eq!(Secret::new("").scrub("text"), "text");
    }
}
