//! Just enough DER to read a public key: `SubjectPublicKeyInfo` (RFC 5280 §4.1) for RSA and
//! P-256, and PKCS#1 `RSAPublicKey` (RFC 8017 §A.1.1). Anything else is refused.

use super::key_error::KeyError;

const SEQUENCE: u8 = 0x30;
const INTEGER: u8 = 0x02;
const BIT_STRING: u8 = 0x03;
const OBJECT_ID: u8 = 0x06;
const NULL: u8 = 0x05;

/// 1.2.840.113549.1.1.1 (rsaEncryption).
const OID_RSA: &[u8] = &[0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x01, 0x01];
/// 1.2.840.10045.2.1 (id-ecPublicKey).
const OID_EC: &[u8] = &[0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x02, 0x01];
/// 1.2.840.10045.3.1.7 (prime256v1 / P-256).
const OID_P256: &[u8] = &[0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x03, 0x01, 0x07];

/// The key inside a `SubjectPublicKeyInfo`.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum SpkiKey {
    /// The `RSAPublicKey` DER.
    Rsa(Vec<u8>),
    /// The uncompressed P-256 point.
    P256(Vec<u8>),
}

pub(super) fn parse_spki(der: &[u8]) -> Result<SpkiKey, KeyError> {
    let mut outer = Reader::new(der);
    let mut spki = Reader::new(outer.expect(SEQUENCE)?);
    outer.finish()?;
    let mut algorithm = Reader::new(spki.expect(SEQUENCE)?);
    let bits = spki.expect(BIT_STRING)?;
    spki.finish()?;
    let oid = algorithm.expect(OBJECT_ID)?;
    let key = match bits.split_first() {
        Some((0, key)) => key.to_vec(),
        _ => return Err(malformed()),
    };
    if oid == OID_RSA {
        // Parameters: NULL (or, from some encoders, absent).
        if !algorithm.is_empty() {
            algorithm.expect(NULL)?;
        }
        algorithm.finish()?;
        Ok(SpkiKey::Rsa(key))
    } else if oid == OID_EC {
        if algorithm.expect(OBJECT_ID)? != OID_P256 {
            return Err(KeyError::Unsupported(
                "an EC key on a curve other than P-256",
            ));
        }
        algorithm.finish()?;
        Ok(SpkiKey::P256(key))
    } else {
        Err(KeyError::Unsupported(
            "a public key that is neither RSA nor EC",
        ))
    }
}

/// `RSAPublicKey ::= SEQUENCE { modulus INTEGER, publicExponent INTEGER }` → (n, e), big-endian
/// without leading zeros.
pub(super) fn parse_rsa_public_key(der: &[u8]) -> Result<(Vec<u8>, Vec<u8>), KeyError> {
    let mut outer = Reader::new(der);
    let mut key = Reader::new(outer.expect(SEQUENCE)?);
    outer.finish()?;
    let n = positive_integer(key.expect(INTEGER)?)?;
    let e = positive_integer(key.expect(INTEGER)?)?;
    key.finish()?;
    Ok((n, e))
}

fn positive_integer(bytes: &[u8]) -> Result<Vec<u8>, KeyError> {
    match bytes {
        [] => Err(malformed()),
        [first, ..] if first & 0x80 != 0 => Err(malformed()),
        _ => {
            let start = bytes.iter().position(|b| *b != 0).unwrap_or(bytes.len());
            Ok(bytes[start..].to_vec())
        }
    }
}

fn malformed() -> KeyError {
    KeyError::Malformed("the DER structure of the public key")
}

struct Reader<'a> {
    input: &'a [u8],
}

impl<'a> Reader<'a> {
    fn new(input: &'a [u8]) -> Self {
        Self { input }
    }

    fn is_empty(&self) -> bool {
        self.input.is_empty()
    }

    fn finish(&self) -> Result<(), KeyError> {
        if self.input.is_empty() {
            Ok(())
        } else {
            Err(malformed())
        }
    }

    /// The contents of the next element, which must have `tag`.
    fn expect(&mut self, tag: u8) -> Result<&'a [u8], KeyError> {
        let (&found, rest) = self.input.split_first().ok_or_else(malformed)?;
        if found != tag {
            return Err(malformed());
        }
        let (&first, mut rest) = rest.split_first().ok_or_else(malformed)?;
        let length = if first < 0x80 {
            usize::from(first)
        } else {
            // Long form with 1 to 3 length bytes (keys are far below 16 MiB); 0x80 would be the
            // indefinite form, which DER forbids.
            let count = usize::from(first & 0x7F);
            if !(1..=3).contains(&count) || rest.len() < count {
                return Err(malformed());
            }
            let (digits, after) = rest.split_at(count);
            rest = after;
            digits
                .iter()
                .fold(0usize, |length, digit| (length << 8) | usize::from(*digit))
        };
        if rest.len() < length {
            return Err(malformed());
        }
        let (contents, after) = rest.split_at(length);
        self.input = after;
        Ok(contents)
    }
}
