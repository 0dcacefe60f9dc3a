#!/usr/bin/env python3
"""Validates real traffic against the published contract with an independent validator
(`jsonschema`, Draft 2020-12 with format checks; `openapi-spec-validator` for the OpenAPI
document). Used by tests/server/schema.rs.

Usage: validate.py DOCS_DIR TRAFFIC_JSON

TRAFFIC_JSON: {"commands": [body], "invalidCommands": [body], "results": [[command type, body]],
"events": [envelope]}; the invalid commands (refused by the server with 400) must fail too.
Prints one line of counts; exits 1 with every failure listed.
"""

import json
import sys
from pathlib import Path

import jsonschema
from openapi_spec_validator import validate as validate_openapi

def validator(schema: dict) -> jsonschema.Draft202012Validator:
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )


def main() -> None:
    docs, traffic = Path(sys.argv[1]), json.loads(Path(sys.argv[2]).read_text())
    validate_openapi(json.loads((docs / "openapi.json").read_text()))
    schemas = {
        name: json.loads((docs / "schema" / f"{name}.schema.json").read_text())
        for name in ["Command", "CommandResult", "AgentEvent", "ProtocolError"]
    }
    validators = {name: validator(schema) for name, schema in schemas.items()}
    # The success `data` of each command type, as the schema pairs them.
    result_data = {
        branch["properties"]["type"]["const"]: branch["x-result-data"]["$ref"]
        for branch in schemas["Command"]["oneOf"]
    }
    failures = []

    def check(name: str, instance, what: str) -> None:
        for error in validators[name].iter_errors(instance):
            failures.append(f"{what} against {name}: {error.message} at {list(error.absolute_path)}")

    for index, body in enumerate(traffic["commands"]):
        check("Command", body, f"command {index} ({body.get('type')})")
    for index, body in enumerate(traffic["invalidCommands"]):
        if validators["Command"].is_valid(body):
            failures.append(f"invalid command {index} ({body.get('type')}) passes the Command schema")
    for index, (kind, body) in enumerate(traffic["results"]):
        what = f"result {index} ({kind})"
        check("CommandResult", body, what)
        if body.get("ok") is True:
            # The data of a success against its command's own result type, not just any.
            result_schema = dict(schemas["CommandResult"])
            result_schema.pop("oneOf", None)
            result_schema["$ref"] = result_data[kind]
            for error in validator(result_schema).iter_errors(body["data"]):
                failures.append(f"{what} data against {result_data[kind]}: {error.message}")
        else:
            check("ProtocolError", body.get("error"), what)
    for index, event in enumerate(traffic["events"]):
        check("AgentEvent", event, f"event {index} ({event.get('type')} {event.get('data', {}).get('type')})")

    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print(
        f"valid: {len(traffic['commands'])} commands ({len(traffic['invalidCommands'])} invalid refused), "
        f"{len(traffic['results'])} results, "
        f"{len(traffic['events'])} events, and the OpenAPI document"
    )


if __name__ == "__main__":
    main()
