#!/usr/bin/env python3
"""Validates Kubernetes manifests against the API schemas of one Kubernetes release, offline, with
`kubernetes-validate` (it bundles the schemas; nothing is downloaded). Strict: a property the
schema does not define is an error, and so is a kind it has no schema for (its command line only
warns about those). Used by cli/tests/docs/configuration_reference.rs.

Usage: validate.py VERSION FILE...    (VERSION: major.minor, e.g. 1.31)

Prints one `ok` line per document; exits 1 with every failure listed.
"""

import sys

import kubernetes_validate
import yaml
from kubernetes_validate.utils import VersionNotSupportedError


def main() -> int:
    version, files = sys.argv[1], sys.argv[2:]
    failures = []
    for path in files:
        with open(path, encoding="utf-8") as f:
            documents = [d for d in yaml.safe_load_all(f) if d is not None]
        if not documents:
            failures.append(f"{path}: no document")
        for document in documents:
            name = f"{path}: {document.get('kind')}/{document.get('metadata', {}).get('name')}"
            try:
                validated = kubernetes_validate.validate(document, version, strict=True)
            except kubernetes_validate.ValidationError as e:
                where = ".".join(str(part) for part in e.path) or "(top level)"
                failures.append(f"{name}: {where}: {e.message}")
            except (
                kubernetes_validate.SchemaNotFoundError,
                kubernetes_validate.InvalidSchemaError,
                VersionNotSupportedError,
            ) as e:
                failures.append(f"{name}: {e.message}")
            else:
                # The validator falls back to the newest release it has that is not newer.
                if validated != version:
                    failures.append(f"{name}: validated against {validated}, not {version}")
                else:
                    print(f"ok {name} (Kubernetes {validated})")
    for failure in failures:
        print(f"FAILED {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
