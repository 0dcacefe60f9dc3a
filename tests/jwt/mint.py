#!/usr/bin/env python3
"""Mints keys and tokens with an independent library (PyJWT on `cryptography`) for the server's
JWT tests (tests/server/auth/independent_tokens.rs): nothing here shares code with the server.

Usage: mint.py OUT_DIR ISSUER AUDIENCE

Writes into OUT_DIR: `hs256.secret`, `es256.pem` (SubjectPublicKeyInfo), `rs256-old.jwks`,
`rs256-both.jwks`, `rs256-new.jwks`, and prints one JSON object on stdout:
{"hs256": {name: token}, "rs256": {name: token}, "es256": {name: token}}.
Names starting with `ok-` must be accepted, all others refused (the Rust test says when).
"""

import base64
import hashlib
import hmac
import json
import secrets
import sys
import time
from pathlib import Path

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import RSAAlgorithm


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def hmac_token(header: dict, claims: dict, key: bytes) -> str:
    """HS256 over any key bytes: PyJWT (rightly) refuses a PEM public key as an HMAC secret, and
    that is exactly the key-confusion token the server must refuse."""
    signing_input = b64url(json.dumps(header).encode()) + "." + b64url(json.dumps(claims).encode())
    signature = hmac.new(key, signing_input.encode(), hashlib.sha256).digest()
    return signing_input + "." + b64url(signature)


def public_jwk(algorithm, key, kid: str, alg: str) -> dict:
    jwk = algorithm.to_jwk(key.public_key(), as_dict=True)
    jwk.update({"kid": kid, "use": "sig", "alg": alg})
    return jwk


def main() -> None:
    out, issuer, audience = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    now = int(time.time())
    good = {
        "iss": issuer,
        "aud": audience,
        "tenant": "acme",
        "sub": "alice@example.test",
        "scope": "session:create session:read",
        "iat": now,
        "nbf": now,
        "exp": now + 3600,
    }

    def claims(**changes) -> dict:
        result = dict(good)
        for name, value in changes.items():
            if value is None:
                result.pop(name, None)
            else:
                result[name] = value
        return result

    # Claims every algorithm must refuse, each for one reason.
    refused_claims = {
        "expired": claims(exp=now - 3600, iat=now - 7200, nbf=now - 7200),
        "not-yet-valid": claims(nbf=now + 3600),
        "issued-in-the-future": claims(iat=now + 3600),
        "no-expiry": claims(exp=None),
        "wrong-audience": claims(aud="another-api"),
        "wrong-issuer": claims(iss="https://evil.test/"),
        "no-tenant": claims(tenant=None),
        "invalid-tenant": claims(tenant="../acme"),
    }

    secret = secrets.token_urlsafe(48)
    (out / "hs256.secret").write_text(secret + "\n")
    rsa_old = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    rsa_new = rsa.generate_private_key(public_exponent=65537, key_size=3072)
    ec_key = ec.generate_private_key(ec.SECP256R1())
    ec_other = ec.generate_private_key(ec.SECP256R1())
    rsa_old_public_pem = rsa_old.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    (out / "es256.pem").write_bytes(
        ec_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    old_jwk = public_jwk(RSAAlgorithm, rsa_old, "old", "RS256")
    new_jwk = public_jwk(RSAAlgorithm, rsa_new, "new", "RS256")
    (out / "rs256-old.jwks").write_text(json.dumps({"keys": [old_jwk]}))
    (out / "rs256-both.jwks").write_text(json.dumps({"keys": [old_jwk, new_jwk]}))
    (out / "rs256-new.jwks").write_text(json.dumps({"keys": [new_jwk]}))

    typ = {"typ": "at+jwt"}
    hs = {"ok-valid": jwt.encode(good, secret, "HS256", headers=typ)}
    for name, body in refused_claims.items():
        hs[name] = jwt.encode(body, secret, "HS256", headers=typ)
    hs["wrong-secret"] = jwt.encode(good, secrets.token_urlsafe(48), "HS256", headers=typ)
    hs["wrong-type"] = jwt.encode(good, secret, "HS256", headers={"typ": "JWT"})
    hs["critical-header"] = jwt.encode(good, secret, "HS256", headers={**typ, "crit": ["exp"]})
    hs["alg-none"] = jwt.encode(good, None, "none", headers=typ)
    hs["rs256-token"] = jwt.encode(good, rsa_old, "RS256", headers=typ)

    rs = {
        "ok-old": jwt.encode(good, rsa_old, "RS256", headers={"kid": "old"}),
        "ok-new": jwt.encode(good, rsa_new, "RS256", headers={"kid": "new"}),
        "unknown-kid": jwt.encode(good, rsa_old, "RS256", headers={"kid": "elsewhere"}),
        "signed-by-another-key": jwt.encode(good, rsa_new, "RS256", headers={"kid": "old"}),
        "alg-none": jwt.encode(good, None, "none", headers={"kid": "old"}),
        "hs-rs-confusion": hmac_token({"alg": "HS256", "kid": "old"}, good, rsa_old_public_pem),
        "critical-header": jwt.encode(good, rsa_old, "RS256", headers={"kid": "old", "crit": ["exp"]}),
        "ps256-with-the-right-key": jwt.encode(good, rsa_old, "PS256", headers={"kid": "old"}),
    }
    for name, body in refused_claims.items():
        rs[name] = jwt.encode(body, rsa_old, "RS256", headers={"kid": "old"})

    es = {
        "ok-valid": jwt.encode(good, ec_key, "ES256"),
        "signed-by-another-key": jwt.encode(good, ec_other, "ES256"),
        "es384-header": hmac_token({"alg": "ES384"}, good, b"x" * 32),
        "hs256-with-the-public-pem": hmac_token(
            {"alg": "HS256"},
            good,
            ec_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            ),
        ),
    }
    for name, body in refused_claims.items():
        es[name] = jwt.encode(body, ec_key, "ES256")

    json.dump({"hs256": hs, "rs256": rs, "es256": es}, sys.stdout)


if __name__ == "__main__":
    main()
