"""The commands, results and events of protocol v1 (docs/protocol.md §1-§6) as dataclasses.

Hand-written from docs/protocol.md and the JS client. Results are built from answers that
`schema` already validated strictly, so `from_json` only renames fields. Free-form JSON
(metadata, stream payloads, `session.read`) stays a dict.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple, Union

PROTOCOL_VERSION = 1

JsonObject = Dict[str, Any]
# A string, or parts: {"type": "text", "text"} / {"type": "image_url", "image_url": {"url"}}.
Input = Union[str, List[JsonObject]]


def _without_none(values: Dict[str, Any]) -> JsonObject:
    # Absent values are omitted, never sent as null (§1.1 refuses an explicit null).
    return {key: value for key, value in values.items() if value is not None}


@dataclass(frozen=True)
class ClientInfo:
    """Who is calling, sent by `initialize`: protocol identifiers, `title` 1 to 256 characters."""

    name: str
    version: str
    title: Optional[str] = None

    def to_json(self) -> JsonObject:
        return _without_none({"name": self.name, "version": self.version, "title": self.title})


@dataclass(frozen=True)
class Capabilities:
    approvals: Optional[bool] = None
    durable_events: Optional[bool] = None
    event_replay: Optional[bool] = None

    def to_json(self) -> JsonObject:
        return _without_none(
            {"approvals": self.approvals, "durableEvents": self.durable_events, "eventReplay": self.event_replay}
        )


@dataclass(frozen=True)
class Command:
    """The command envelope of §1.2. `command_id` is the idempotency key, reused by every retry."""

    command_id: str
    type: str
    data: JsonObject
    protocol_version: int = PROTOCOL_VERSION

    def to_json(self) -> JsonObject:
        return {
            "protocolVersion": self.protocol_version,
            "commandId": self.command_id,
            "type": self.type,
            "data": self.data,
        }


@dataclass(frozen=True)
class InitializeResult:
    protocol_version: int
    commands: Tuple[str, ...]
    transports: Tuple[str, ...]
    features: Dict[str, bool]
    server_time: str

    @classmethod
    def from_json(cls, data: JsonObject) -> "InitializeResult":
        return cls(
            protocol_version=data["protocolVersion"],
            commands=tuple(data["commands"]),
            transports=tuple(data["transports"]),
            features=dict(data["features"]),
            server_time=data["serverTime"],
        )


@dataclass(frozen=True)
class SessionDescriptor:
    session_id: str
    status: str
    created_at: str
    updated_at: str
    metadata: Optional[JsonObject] = None

    @classmethod
    def from_json(cls, data: JsonObject) -> "SessionDescriptor":
        return cls(
            session_id=data["sessionId"],
            status=data["status"],
            created_at=data["createdAt"],
            updated_at=data["updatedAt"],
            metadata=data.get("metadata"),
        )


@dataclass(frozen=True)
class SessionList:
    sessions: List[SessionDescriptor]
    next_cursor: Optional[str] = None

    @classmethod
    def from_json(cls, data: JsonObject) -> "SessionList":
        return cls(
            sessions=[SessionDescriptor.from_json(item) for item in data["sessions"]],
            next_cursor=data.get("nextCursor"),
        )


@dataclass(frozen=True)
class SubmitResult:
    """`started` (with `request_id`), `steered` (with `request_id` and `priority`) or `queued`."""

    session_id: str
    input_id: str
    status: str
    request_id: Optional[str] = None
    priority: Optional[str] = None

    @classmethod
    def from_json(cls, data: JsonObject) -> "SubmitResult":
        return cls(
            session_id=data["sessionId"],
            input_id=data["inputId"],
            status=data["status"],
            request_id=data.get("requestId"),
            priority=data.get("priority"),
        )


@dataclass(frozen=True)
class AbortResult:
    session_id: str
    aborted: bool

    @classmethod
    def from_json(cls, data: JsonObject) -> "AbortResult":
        return cls(session_id=data["sessionId"], aborted=data["aborted"])


@dataclass(frozen=True)
class ResolveResult:
    session_id: str
    permission_request_id: str
    resolved: bool

    @classmethod
    def from_json(cls, data: JsonObject) -> "ResolveResult":
        return cls(
            session_id=data["sessionId"],
            permission_request_id=data["permissionRequestId"],
            resolved=data["resolved"],
        )


@dataclass(frozen=True)
class PermissionDecision:
    """The answer to a `permission.requested` event; `scope` is `once` or `session`."""

    approved: bool
    reason: Optional[str] = None
    scope: Optional[str] = None


@dataclass(frozen=True)
class EventCursor:
    """§1.5: where a stream resumes. Only `sequence` travels on the wire."""

    session_id: str
    sequence: int
    event_id: str
    protocol_version: int = PROTOCOL_VERSION

    def to_json(self) -> JsonObject:
        return {
            "protocolVersion": self.protocol_version,
            "sessionId": self.session_id,
            "sequence": self.sequence,
            "eventId": self.event_id,
        }


@dataclass(frozen=True)
class AgentEvent:
    """An event envelope (§1.4). `data` is the validated payload of its `type` (§6): a stream
    message for `session.stream`, the approval for `permission.requested`."""

    protocol_version: int
    event_id: str
    sequence: int
    session_id: str
    occurred_at: str
    type: str
    data: JsonObject
    request_id: Optional[str] = None

    @classmethod
    def from_json(cls, data: JsonObject) -> "AgentEvent":
        return cls(
            protocol_version=data["protocolVersion"],
            event_id=data["eventId"],
            sequence=int(data["sequence"]),
            session_id=data["sessionId"],
            occurred_at=data["occurredAt"],
            type=data["type"],
            data=data["data"],
            request_id=data.get("requestId"),
        )

    @property
    def stream_type(self) -> Optional[str]:
        """The stream message's `type` (`content`, `result`, ...) of a `session.stream` event."""
        return self.data["type"] if self.type == "session.stream" else None

    def cursor(self) -> EventCursor:
        return EventCursor(session_id=self.session_id, sequence=self.sequence, event_id=self.event_id)


@dataclass(frozen=True)
class ConnectionState:
    """What `on_connection` receives: `connecting`, `reconnecting` (before a request) or `open`
    (the stream answered 200); `after` is the cursor sent, `attempt` the reconnect count."""

    status: str
    after: int
    attempt: int


__all__ = [
    "AbortResult",
    "AgentEvent",
    "Capabilities",
    "ClientInfo",
    "Command",
    "ConnectionState",
    "EventCursor",
    "InitializeResult",
    "Input",
    "JsonObject",
    "PROTOCOL_VERSION",
    "PermissionDecision",
    "ResolveResult",
    "SessionDescriptor",
    "SessionList",
    "SubmitResult",
]
