"""The Standard Webhooks reference library (PyPI `standardwebhooks`) against our signatures.

Reads one JSON object on stdin: {"secrets": [...], "id", "timestamp", "body", "signature"} as we
produced them. For each secret, verifies the delivery as a receiver holding only that secret
would, and verifies it again with one byte of the body changed. Then signs the same delivery
with the library under the first secret. Prints one JSON object: {"verified": [bool per secret],
"tampered": [bool per secret], "signature": the library's own signature}."""

import json
import sys
from datetime import datetime, timezone

from standardwebhooks.webhooks import Webhook


def verifies(secret, body, headers):
    try:
        Webhook(secret).verify(body, headers)
        return True
    except Exception:  # the library raises WebhookVerificationError (and others on bad input)
        return False


def main():
    given = json.load(sys.stdin)
    headers = {
        "webhook-id": given["id"],
        "webhook-timestamp": str(given["timestamp"]),
        "webhook-signature": given["signature"],
    }
    body = given["body"]
    tampered = body[:-1] + ("}" if body[-1] != "}" else " ")
    when = datetime.fromtimestamp(given["timestamp"], tz=timezone.utc)
    json.dump(
        {
            "verified": [verifies(s, body, headers) for s in given["secrets"]],
            "tampered": [verifies(s, tampered, headers) for s in given["secrets"]],
            "signature": Webhook(given["secrets"][0]).sign(given["id"], when, body),
        },
        sys.stdout,
    )


main()
