"""The dataclasses against the published JSON Schema (docs/schema/, generated from the server's
protocol types): each typed command part, result and event has exactly the properties of its
schema definition, and an optional field is exactly an optional property, so a change of the wire
contract fails here before it reaches a user."""

from __future__ import annotations

import dataclasses
import json
import re
import typing
from pathlib import Path

import pytest

from agent_runtime_client import schema, types
from agent_runtime_client._protocol import RESULTS

SCHEMAS = Path(__file__).resolve().parents[3] / "docs" / "schema"


def load(name: str) -> dict:
    return json.loads((SCHEMAS / f"{name}.schema.json").read_text())


def definitions() -> dict:
    merged = {}
    for name in ["Command", "CommandResult", "AgentEvent", "ProtocolError"]:
        merged.update(load(name).get("$defs", {}))
    return merged


def camel(name: str) -> str:
    return re.sub(r"_([a-z])", lambda match: match.group(1).upper(), name)


def fields(cls) -> dict:
    """camelCase wire name -> whether the field is optional (`Optional[...]` with a None default)."""
    hints = typing.get_type_hints(cls)
    result = {}
    for field in dataclasses.fields(cls):
        optional = type(None) in typing.get_args(hints[field.name]) and field.default is None
        result[camel(field.name)] = optional
    return result


def properties(schema: dict) -> dict:
    """Property -> whether it is optional (not required)."""
    required = set(schema.get("required", []))
    return {name: name not in required for name in schema.get("properties", {})}


@pytest.mark.parametrize(
    "cls, definition",
    [
        (types.ClientInfo, "ClientInfo"),
        (types.Capabilities, "ClientCapabilities"),
        (types.InitializeResult, "InitializeResult"),
        (types.SessionDescriptor, "SessionDescriptor"),
        (types.SessionList, "ListSessionsResult"),
        (types.SubmitResult, "SubmitResult"),
        (types.AbortResult, "AbortResult"),
        (types.ResolveResult, "ResolvePermissionResult"),
    ],
)
def test_a_dataclass_has_exactly_the_properties_of_its_schema(cls, definition):
    assert fields(cls) == properties(definitions()[definition])


def test_a_permission_decision_is_the_resolve_data_without_its_ids():
    schema = properties(definitions()["ResolvePermissionData"])
    del schema["sessionId"], schema["permissionRequestId"]
    assert fields(types.PermissionDecision) == schema


def test_the_event_dataclass_has_the_envelope_of_every_event_type():
    envelopes = load("AgentEvent")["oneOf"]
    assert len(envelopes) == 3
    for envelope in envelopes:
        assert fields(types.AgentEvent) == properties(envelope), envelope["properties"]["type"]


def test_the_command_dataclass_is_the_command_envelope():
    for command in load("Command")["oneOf"]:
        wire = properties(command)
        # `protocolVersion` has a default in the dataclass but is always sent.
        assert set(fields(types.Command)) == set(wire)
        assert not any(wire.values()), "every envelope member is required"


def commands() -> list:
    """Each command of the schema, in order: its type and the definition of its success `data`."""
    return [
        (branch["properties"]["type"]["const"], branch["x-result-data"]["$ref"].rsplit("/", 1)[-1])
        for branch in load("Command")["oneOf"]
    ]


def test_the_client_knows_exactly_the_commands_of_the_schema_in_its_order():
    assert schema.COMMAND_TYPES == tuple(kind for kind, _ in commands())
    assert set(RESULTS) == set(schema.COMMAND_TYPES)


def test_each_command_s_success_data_is_read_with_the_shape_the_schema_gives_it():
    for kind, result in commands():
        definition = definitions()[result]
        validate, _ = RESULTS[kind]
        if kind == "session.read":
            # Read as any object on purpose (as the reference client does), whatever it adds.
            assert validate is schema.json_object
            continue
        required, optional = validate.shape
        assert set(required) == set(definition["required"]), kind
        assert set(required) | set(optional) == set(definition["properties"]), kind
