"""Strict validation of what the server sends (docs/protocol.md §1-§6), ported from the JS client's
schema.js: every object refuses unknown keys, identifiers follow the common rule, numbers are
finite. A validator returns its input unchanged or raises SchemaError naming the path of the
first problem. Written by hand from docs/protocol.md and the JS client (there is no JSON Schema).
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Dict, Optional

Validator = Callable[[Any, str], Any]

IDENTIFIER = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._:-]{0,255}", re.ASCII)
_ISO_DATETIME = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d+)?(Z|([+-])(\d{2}):(\d{2}))", re.ASCII
)
_MAX_SAFE_INTEGER = 2**53 - 1


class SchemaError(ValueError):
    """A value that is not of the protocol's shape."""


def _fail(path: str, problem: str) -> Any:
    raise SchemaError(f"{path or 'value'} {problem}")


def _is_number(value: Any) -> bool:
    # bool is an int subclass in Python; JSON true is never a number.
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _is_safe_integer(value: Any) -> bool:
    if not _is_number(value):
        return False
    if isinstance(value, float) and not value.is_integer():
        return False
    return abs(value) <= _MAX_SAFE_INTEGER


def string(value: Any, path: str) -> Any:
    return value if isinstance(value, str) else _fail(path, "must be a string")


def _non_empty(value: Any, path: str) -> Any:
    return value if len(string(value, path)) > 0 else _fail(path, "must not be empty")


def is_identifier(value: Any) -> bool:
    return isinstance(value, str) and IDENTIFIER.fullmatch(value) is not None


def identifier(value: Any, path: str) -> Any:
    string(value, path)
    return value if is_identifier(value) else _fail(path, "is not a valid identifier")


def _boolean(value: Any, path: str) -> Any:
    return value if isinstance(value, bool) else _fail(path, "must be a boolean")


def _number(value: Any, path: str) -> Any:
    return value if _is_number(value) else _fail(path, "must be a finite number")


def _integer(value: Any, path: str) -> Any:
    _number(value, path)
    return value if _is_safe_integer(value) else _fail(path, "must be an integer")


def _non_negative(value: Any, path: str) -> Any:
    return value if _number(value, path) >= 0 else _fail(path, "must not be negative")


def _positive_integer(value: Any, path: str) -> Any:
    return value if _integer(value, path) >= 1 else _fail(path, "must be positive")


def _datetime(value: Any, path: str) -> Any:
    match = _ISO_DATETIME.fullmatch(string(value, path))
    if match is not None:
        year, month, day, hour, minute, second = (int(match.group(i)) for i in range(1, 7))
        try:
            offset = timezone.utc
            if match.group(8) != "Z":
                delta = timedelta(hours=int(match.group(10)), minutes=int(match.group(11)))
                offset = timezone(-delta if match.group(9) == "-" else delta)
            datetime(year, month, day, hour, minute, second, tzinfo=offset)
            return value
        except ValueError:
            pass
    return _fail(path, "must be an ISO-8601 date-time with offset")


def _same(value: Any, allowed: Any) -> bool:
    # JSON true must not equal 1, nor 1 equal true; 1.0 is the number 1.
    if isinstance(allowed, bool) or isinstance(value, bool):
        return isinstance(value, bool) and isinstance(allowed, bool) and value == allowed
    if isinstance(allowed, str):
        return isinstance(value, str) and value == allowed
    return _is_number(value) and value == allowed


def literal(*allowed: Any) -> Validator:
    def check(value: Any, path: str) -> Any:
        if any(_same(value, option) for option in allowed):
            return value
        names = ", ".join(_json_text(option) for option in allowed)
        return _fail(path, f"must be one of {names}")

    return check


def _json_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    return str(value)


def json_value(value: Any, path: str) -> Any:
    """Any JSON value with finite numbers."""
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, (int, float)):
        return _number(value, path)
    if isinstance(value, list):
        for i, item in enumerate(value):
            json_value(item, f"{path}[{i}]")
        return value
    if isinstance(value, dict):
        for key, item in value.items():
            json_value(item, f"{path}.{key}")
        return value
    return _fail(path, "is not a JSON value")


def json_object(value: Any, path: str) -> Any:
    return json_value(value, path) if isinstance(value, dict) else _fail(path, "must be an object")


def array(item: Validator) -> Validator:
    def check(value: Any, path: str) -> Any:
        if not isinstance(value, list):
            _fail(path, "must be an array")
        for i, element in enumerate(value):
            item(element, f"{path}[{i}]")
        return value

    return check


def _record(item: Validator) -> Validator:
    def check(value: Any, path: str) -> Any:
        if not isinstance(value, dict):
            _fail(path, "must be an object")
        for key, element in value.items():
            item(element, f"{path}.{key}")
        return value

    return check


def _any_of(*alternatives: Validator) -> Validator:
    def check(value: Any, path: str) -> Any:
        for alternative in alternatives:
            try:
                return alternative(value, path)
            except SchemaError:
                continue
        return _fail(path, "matches none of the allowed shapes")

    return check


def strict(required: Dict[str, Validator], optional: Optional[Dict[str, Validator]] = None) -> Validator:
    """A strict object: `required` and `optional` map keys to validators; other keys are refused.
    An optional key holding null is a validation error (§1.1)."""

    optional = optional or {}

    def check(value: Any, path: str) -> Any:
        if not isinstance(value, dict):
            _fail(path, "must be an object")
        for key in value:
            if key not in required and key not in optional:
                _fail(f"{path}.{key}", "is not an allowed field")
        for key, validate in required.items():
            if key not in value:
                _fail(f"{path}.{key}", "is required")
            validate(value[key], f"{path}.{key}")
        for key, validate in optional.items():
            if key in value:
                validate(value[key], f"{path}.{key}")
        return value

    # The keys it requires and allows: what tests/test_schema.py compares with the published schema.
    check.shape = (tuple(required), tuple(optional))  # type: ignore[attr-defined]
    return check


def _tagged(variants: Dict[str, Validator]) -> Validator:
    """A union of strict objects told apart by their `type` field."""

    def check(value: Any, path: str) -> Any:
        if not isinstance(value, dict):
            _fail(path, "must be an object")
        tag = value.get("type")
        variant = variants.get(tag) if isinstance(tag, str) else None
        if variant is None:
            return _fail(f"{path}.type", "is not a known type")
        return variant(value, path)

    return check


_strings = array(string)

_content_part = _tagged(
    {
        "text": strict({"type": literal("text"), "text": string}, {"providerOptions": json_object}),
        "image_url": strict({"type": literal("image_url"), "image_url": strict({"url": _non_empty})}),
    }
)
_user_content = _any_of(string, array(_content_part))

# The newest reference message schema: what a message belongs to is a typed `correlation` with
# both ids, where it came from a typed `provenance`; no free-form `metadata`.
model_message = strict(
    {"role": literal("system", "user", "assistant", "tool"), "content": _user_content},
    {
        "id": string,
        "reasoningContent": string,
        "tool_call_id": string,
        "name": string,
        "tool_calls": array(
            strict(
                {
                    "id": _non_empty,
                    "type": literal("function"),
                    "function": strict({"name": string, "arguments": string}),
                }
            )
        ),
        "modelIdentity": strict({"provider": string, "api": string, "model": string}),
        "providerOptions": json_object,
        "provenance": strict({"source": literal("catalog", "tool_injection", "compaction_summary")}),
        "correlation": strict({"inputId": _non_empty, "requestId": _non_empty}),
        "telemetry": strict(
            {},
            {"model": string, "usage": strict({"inputTokens": _integer, "outputTokens": _integer})},
        ),
        "extensions": json_object,
    },
)

session_descriptor = strict(
    {
        "sessionId": identifier,
        "status": literal("active", "closed"),
        "createdAt": _datetime,
        "updatedAt": _datetime,
    },
    {"metadata": json_object},
)

_display = strict({"summary": string}, {"detail": json_value})
_string_or_number = _any_of(string, _number)
_patch_scope = literal("turn", "session")
_runtime_patch = strict(
    {"scope": _patch_scope, "source": literal("skill", "tool", "system")},
    {
        "skill": strict({"id": string, "name": string, "basePath": string}),
        "toolPolicy": strict({}, {"allow": _strings, "deny": _strings}),
        "toolDiscovery": strict({}, {"discover": _strings, "reset": _boolean}),
        "modelOverride": strict({"modelId": string}, {"effort": _string_or_number}),
        "systemPromptAppend": string,
        "environment": _record(string),
        "hooks": array(
            strict(
                {
                    "event": literal(
                        "PreToolUse",
                        "PostToolUse",
                        "PostToolUseFailure",
                        "PermissionRequest",
                        "UserPromptSubmit",
                        "SessionStart",
                        "SessionEnd",
                        "TaskCompleted",
                    ),
                    "type": string,
                },
                {"value": string, "tools": _strings, "once": _boolean},
            )
        ),
    },
)
_context_patch = strict(
    {"scope": _patch_scope},
    {
        "context": strict(
            {},
            {
                "id": string,
                "capabilities": strict(
                    {},
                    {
                        "filesystem": strict({"roots": _strings}, {"cwd": string}),
                        "browser": strict({}, {"pageId": string, "tabId": _string_or_number}),
                        "network": strict({}, {"allowDomains": _strings}),
                    },
                ),
                "environment": _record(string),
                "metadata": json_object,
            },
        ),
        "reset": _boolean,
    },
)
_permission_rules = array(strict({"toolName": string}, {"ruleContent": string}))
_permission_update = _tagged(
    {
        "addRules": strict(
            {"type": literal("addRules"), "rules": _permission_rules, "behavior": literal("allow", "deny")}
        ),
        "removeRules": strict({"type": literal("removeRules"), "rules": _permission_rules}),
    }
)
_usage = strict(
    {
        "inputTokens": _non_negative,
        "outputTokens": _non_negative,
        "totalTokens": _non_negative,
        "maxContextTokens": _non_negative,
    },
    {
        "cacheReadInputTokens": _non_negative,
        "cacheMissInputTokens": _non_negative,
        "billableInputTokens": _non_negative,
        "reasoningTokens": _non_negative,
    },
)


def _stream(kind: str, required: Dict[str, Validator], optional: Optional[Dict[str, Validator]] = None) -> Validator:
    """A `session.stream` variant of §6.2: `sessionId`, `type` and its own fields."""
    return strict({"sessionId": _non_empty, "type": literal(kind), **required}, optional)


def _tool(kind: str, required: Dict[str, Validator], optional: Optional[Dict[str, Validator]] = None) -> Validator:
    return _stream(kind, {"id": _non_empty, "name": string, **required}, optional)


stream_message = _tagged(
    {
        "turn_start": _stream("turn_start", {"turn": _integer}),
        "turn_end": _stream("turn_end", {"turn": _integer}),
        "turn_interrupted": _stream(
            "turn_interrupted", {"inputId": _non_empty, "requestId": _non_empty, "turn": _integer}
        ),
        "input_applied": _stream(
            "input_applied",
            {
                "inputId": _non_empty,
                "requestId": _non_empty,
                "priority": literal("now", "next"),
                "turn": _integer,
            },
        ),
        "content": _stream("content", {"delta": string}),
        "thinking": _stream("thinking", {"delta": string}),
        "tool_use": _tool("tool_use", {"input": json_value}),
        "tool_progress": _tool(
            "tool_progress",
            {
                "progress": strict(
                    {"kind": literal("progress")},
                    {
                        "message": string,
                        "data": json_value,
                        "completed": _number,
                        "total": _number,
                        "resumeToken": string,
                    },
                )
            },
        ),
        "tool_message": _tool("tool_message", {"content": _display}),
        "tool_runtime_patch": _tool("tool_runtime_patch", {"patch": _runtime_patch}),
        "tool_context_patch": _tool("tool_context_patch", {"patch": _context_patch}),
        "tool_new_messages": _tool("tool_new_messages", {"messages": array(model_message)}),
        "tool_permission_updates": _tool("tool_permission_updates", {"updates": array(_permission_update)}),
        "tool_result": _tool("tool_result", {"output": json_value}, {"display": _display, "isError": _boolean}),
        "usage": _stream("usage", {"usage": _usage}),
        "result": _stream(
            "result", {"subtype": literal("success", "error")}, {"content": string, "error": string}
        ),
        "error": _stream("error", {"message": string}, {"code": string}),
    }
)

_permission_requested = strict(
    {
        "permissionRequestId": identifier,
        "toolName": string,
        "input": json_object,
        "title": string,
        "message": string,
        "affectedPaths": _strings,
        "risks": _strings,
    },
    {"kind": string},
)


def _envelope(kind: str, data: Validator) -> Validator:
    return strict(
        {
            "protocolVersion": literal(1),
            "eventId": identifier,
            "sequence": _positive_integer,
            "sessionId": identifier,
            "occurredAt": _datetime,
            "type": literal(kind),
            "data": data,
        },
        {"requestId": identifier},
    )


_event_variants = _tagged(
    {
        "session.stream": _envelope("session.stream", stream_message),
        "permission.requested": _envelope("permission.requested", _permission_requested),
        "session.closed": _envelope("session.closed", json_object),
    }
)


def agent_event(value: Any, path: str = "event") -> Any:
    """An event envelope (§1.4) with the cross-field rule of the stream variants."""
    _event_variants(value, path)
    if value["type"] == "session.stream" and value["data"]["sessionId"] != value["sessionId"]:
        raise SchemaError("Stream event Session does not match the server event envelope")
    return value


event_cursor = strict(
    {
        "protocolVersion": literal(1),
        "sessionId": identifier,
        "sequence": _positive_integer,
        "eventId": identifier,
    }
)

COMMAND_TYPES = (
    "initialize",
    "session.create",
    "session.read",
    "session.list",
    "session.resume",
    "session.fork",
    "session.close",
    "input.submit",
    "request.abort",
    "permission.resolve",
)


def _command_list(value: Any, path: str) -> Any:
    array(literal(*COMMAND_TYPES))(value, path)
    if tuple(value) != COMMAND_TYPES:
        _fail(path, "must list the 10 commands in order")
    return value


def _transports(value: Any, path: str) -> Any:
    return value if len(array(literal("http-sse"))(value, path)) == 1 else _fail(path, 'must be ["http-sse"]')


initialize_result = strict(
    {
        "protocolVersion": literal(1),
        "commands": _command_list,
        "transports": _transports,
        "features": strict(
            {
                "approvals": literal(True),
                "durableEvents": literal(True),
                "eventReplay": literal(True),
                "idempotentCommands": literal(True),
            }
        ),
        "serverTime": _datetime,
    }
)

session_result = strict({"session": session_descriptor})
list_result = strict({"sessions": array(session_descriptor)}, {"nextCursor": _non_empty})

_submit_base = {"sessionId": identifier, "inputId": identifier}
_submit_shapes = {
    "started": strict({**_submit_base, "status": literal("started"), "requestId": identifier}),
    "steered": strict(
        {**_submit_base, "status": literal("steered"), "requestId": identifier, "priority": literal("now", "next")}
    ),
    "queued": strict({**_submit_base, "status": literal("queued"), "priority": literal("later")}),
}


def submit_result(value: Any, path: str) -> Any:
    status = value.get("status") if isinstance(value, dict) else None
    if not isinstance(status, str) or status not in _submit_shapes:
        return _fail(f"{path}.status", "is not a known status")
    return _submit_shapes[status](value, path)


# The union of its statuses' shapes (see `strict`).
submit_result.shape = (("sessionId", "inputId", "status"), ("requestId", "priority"))  # type: ignore[attr-defined]


abort_result = strict({"sessionId": identifier, "aborted": literal(True)})
resolve_result = strict(
    {"sessionId": identifier, "permissionRequestId": identifier, "resolved": literal(True)}
)

ERROR_CODES = (
    "PROTOCOL_VERSION_UNSUPPORTED",
    "INVALID_COMMAND",
    "UNAUTHENTICATED",
    "FORBIDDEN",
    "SESSION_NOT_FOUND",
    "PERMISSION_NOT_FOUND",
    "SESSION_CONFLICT",
    "COMMAND_CONFLICT",
    "COMMAND_IN_PROGRESS",
    "COMMAND_ABANDONED",
    "STREAM_FRAME_TOO_LARGE",
    "RATE_LIMITED",
    "OVERLOADED",
    "STALE_CURSOR",
    "INTERNAL_ERROR",
)


def _retry_after_ms(value: Any, path: str) -> Any:
    return value if _is_safe_integer(value) and value >= 0 else _fail(path, "must be a non-negative integer")


_success = strict(
    {"protocolVersion": literal(1), "commandId": string, "ok": literal(True), "data": json_object}
)
_failure = strict(
    {
        "protocolVersion": literal(1),
        "commandId": string,
        "ok": literal(False),
        "error": strict(
            {"code": literal(*ERROR_CODES), "message": string, "retryable": _boolean},
            {"retryAfterMs": _retry_after_ms, "details": json_object},
        ),
    }
)


def command_response(value: Any, path: str = "response") -> Any:
    """A command response (§1.3): success with an object `data`, or a structured failure."""
    if not isinstance(value, dict):
        return _fail(path, "must be an object")
    if value.get("ok") is True:
        return _success(value, path)
    return _failure(value, path)
