//! The compact JWS serialisation (RFC 7515 §7.1): `header.payload.signature`, each part
//! base64url without padding. Only the header is parsed before the signature is checked.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Map, Value};

use super::Rejection;

/// Longer bearer values are refused before any decoding (a cheap bound on the work an
/// unauthenticated caller can cause).
pub(super) const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// The header fields this verifier looks at.
#[derive(Debug)]
pub(super) struct Header {
    pub alg: String,
    pub kid: Option<String>,
    pub typ: Option<String>,
    pub has_crit: bool,
}

/// A parsed token whose signature is not yet checked.
pub(super) struct Jws<'a> {
    pub header: Header,
    /// `header.payload` as sent: what the signature covers.
    pub signing_input: &'a [u8],
    /// The encoded payload, decoded only after the signature holds.
    pub payload: &'a str,
    pub signature: Vec<u8>,
}

pub(super) fn parse(token: &str) -> Result<Jws<'_>, Rejection> {
    if token.len() > MAX_TOKEN_BYTES {
        return Err(Rejection::TooLong);
    }
    let mut parts = token.split('.');
    let (Some(header), Some(payload), Some(signature), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Rejection::Malformed);
    };
    // What the signature covers: the first two parts as sent, with their dot.
    let signing_input = &token.as_bytes()[..header.len() + 1 + payload.len()];
    let header = parse_header(&decode(header)?)?;
    // An empty signature decodes to nothing (and then verifies under no key), so `alg: none`
    // tokens are refused by the algorithm check like any other wrong algorithm.
    let signature = if signature.is_empty() {
        Vec::new()
    } else {
        decode(signature)?
    };
    Ok(Jws {
        header,
        signing_input,
        payload,
        signature,
    })
}

/// The payload as a JSON object (call only after the signature was verified).
pub(super) fn decode_claims(payload: &str) -> Result<Map<String, Value>, Rejection> {
    let bytes = decode(payload)?;
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(claims)) => Ok(claims),
        _ => Err(Rejection::Malformed),
    }
}

fn decode(part: &str) -> Result<Vec<u8>, Rejection> {
    if part.is_empty() {
        return Err(Rejection::Malformed);
    }
    URL_SAFE_NO_PAD
        .decode(part)
        .map_err(|_| Rejection::Malformed)
}

fn parse_header(bytes: &[u8]) -> Result<Header, Rejection> {
    let Ok(Value::Object(header)) = serde_json::from_slice::<Value>(bytes) else {
        return Err(Rejection::Malformed);
    };
    let Some(Value::String(alg)) = header.get("alg") else {
        return Err(Rejection::Malformed);
    };
    let optional_string = |name: &str| match header.get(name) {
        None => Ok(None),
        Some(Value::String(value)) => Ok(Some(value.clone())),
        Some(_) => Err(Rejection::Malformed),
    };
    Ok(Header {
        alg: alg.clone(),
        kid: optional_string("kid")?,
        typ: optional_string("typ")?,
        has_crit: header.contains_key("crit"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(value: &str) -> String {
        URL_SAFE_NO_PAD.encode(value)
    }

    #[test]
    fn the_three_parts_are_split_and_the_header_read() {
        let token = format!(
            "{}.{}.{}",
            encode(r#"{"alg":"RS256","kid":"k1","typ":"JWT"}"#),
            encode(r#"{"sub":"a"}"#),
            encode("sig")
        );
        let jws = parse(&token).unwrap();
        assert_eq!(jws.header.alg, "RS256");
        assert_eq!(jws.header.kid.as_deref(), Some("k1"));
        assert_eq!(jws.header.typ.as_deref(), Some("JWT"));
        assert!(!jws.header.has_crit);
        assert_eq!(jws.signature, b"sig");
        let dot = token.rfind('.').unwrap();
        assert_eq!(jws.signing_input, &token.as_bytes()[..dot]);
        assert_eq!(decode_claims(jws.payload).unwrap()["sub"], "a");
    }

    #[test]
    fn malformed_tokens_are_refused() {
        let header = encode(r#"{"alg":"HS256"}"#);
        let payload = encode("{}");
        let cases = [
            "not-a-jwt".to_owned(),
            format!("{header}.{payload}"),
            format!("{header}.{payload}.c2ln.extra"),
            format!("{header}.{payload}.c2ln=="),
            format!("{}.{payload}.c2ln", encode("[]")),
            format!("{}.{payload}.c2ln", encode(r#"{"alg":1}"#)),
            format!("{}.{payload}.c2ln", encode(r#"{"alg":"HS256","kid":3}"#)),
            format!("{}.{payload}.c2ln", encode("not json")),
        ];
        for token in cases {
            assert_eq!(
                parse(&token).err(),
                Some(Rejection::Malformed),
                "{token} must be malformed"
            );
        }
        let oversized = format!("{header}.{}.c2ln", "A".repeat(MAX_TOKEN_BYTES));
        assert_eq!(parse(&oversized).err(), Some(Rejection::TooLong));
        assert_eq!(
            decode_claims(&encode("[1]")).err(),
            Some(Rejection::Malformed)
        );
    }

    #[test]
    fn crit_is_noticed() {
        let token = format!(
            "{}.{}.c2ln",
            encode(r#"{"alg":"HS256","crit":["b64"],"b64":false}"#),
            encode("{}")
        );
        assert!(parse(&token).unwrap().header.has_crit);
    }
}
