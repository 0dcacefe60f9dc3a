"""What the synchronous and the asynchronous client share: building requests, reading answers,
and the state of one event stream. Everything here is I/O-free; `client` and `aio` only add the
transport and the waiting."""

from __future__ import annotations

import json
from typing import Any, Callable, Mapping, Optional, Tuple, Union
from urllib.parse import quote, urlsplit

from . import schema
from .errors import (
    AgentProtocolError,
    retryable_status,
    server_failure,
    unstructured_failure,
)
from .retry import RetryPolicy
from .types import (
    AbortResult,
    AgentEvent,
    ClientInfo,
    ConnectionState,
    EventCursor,
    InitializeResult,
    JsonObject,
    ResolveResult,
    SessionDescriptor,
    SessionList,
    SubmitResult,
)

def check_base_url(base_url: str) -> str:
    """Trailing `/` stripped. Credentials in the URL are refused: they would end up in errors."""
    if not isinstance(base_url, str) or base_url == "":
        raise ValueError("base_url is required")
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError("base_url must be an http or https URL")
    if parts.username is not None or parts.password is not None:
        raise ValueError("base_url must not hold credentials; pass them as headers")
    return base_url.rstrip("/")


def check_client_info(client: Union[ClientInfo, Mapping[str, str]]) -> ClientInfo:
    if isinstance(client, Mapping):
        client = ClientInfo(name=client.get("name"), version=client.get("version"), title=client.get("title"))  # type: ignore[arg-type]
    if not isinstance(client, ClientInfo):
        raise TypeError("client must be a ClientInfo(name, version)")
    for key in ("name", "version"):
        if not schema.is_identifier(getattr(client, key)):
            raise ValueError(f"client.{key} must be a protocol identifier")
    if client.title is not None and (not isinstance(client.title, str) or not 1 <= len(client.title) <= 256):
        raise ValueError("client.title must be 1 to 256 characters")
    return client


def without_none(values: Mapping[str, Any]) -> JsonObject:
    return {key: value for key, value in values.items() if value is not None}


def merge_headers(base: Mapping[str, str], user: Optional[Mapping[str, str]]) -> dict:
    """The request's headers: ours, then the caller's (which win, case-insensitively)."""
    headers = {key.lower(): value for key, value in base.items()}
    for key, value in (user or {}).items():
        headers[key.lower()] = value
    return headers


def read_command_answer(
    command_type: str,
    status: int,
    headers: Mapping[str, str],
    body: bytes,
    validate: Callable[[Any, str], Any],
) -> Any:
    """The validated `data` of a command answer, or raises what §11.3 says it means."""
    try:
        answer = schema.command_response(json.loads(body))
    except (ValueError, RecursionError):
        raise unstructured_failure(
            status, headers, f"Agent server answered HTTP {status} without a valid command response"
        ) from None
    if answer["ok"] is False:
        raise server_failure(answer["error"], status)
    if not 200 <= status < 300:
        raise unstructured_failure(status, headers, f"Agent server answered HTTP {status} with a success body")
    try:
        return validate(answer["data"], "data")
    except schema.SchemaError as error:
        raise AgentProtocolError(
            code="INTERNAL_ERROR",
            message=f"Agent server sent an invalid {command_type} result: {error}",
            status=status,
            retryable=retryable_status(status),
        ) from error


def stream_failure(status: int, headers: Mapping[str, str], body: bytes) -> AgentProtocolError:
    """A refused event stream: the structured failure if the body has one, else by status."""
    try:
        answer = schema.command_response(json.loads(body))
        if answer["ok"] is False:
            return server_failure(answer["error"], status)
    except (ValueError, RecursionError):
        pass
    effective = 502 if 200 <= status < 300 else status
    return unstructured_failure(effective, headers, f"Agent event stream request failed with HTTP {status}")


def stream_url(base_url: str, session_id: str, after: int) -> str:
    # The characters encodeURIComponent leaves alone.
    return f"{base_url}/sessions/{quote(session_id, safe=chr(39) + '!()*-._~')}/events?after={after}"


def stream_headers(after: int) -> dict:
    headers = {"accept": "text/event-stream"}
    if after > 0:
        headers["last-event-id"] = str(after)
    return headers


def start_after(session_id: str, after: Union[None, EventCursor, Mapping[str, Any]]) -> int:
    """The sequence a stream starts after; a bad or foreign cursor is refused before any request."""
    if after is None:
        return 0
    cursor = after.to_json() if isinstance(after, EventCursor) else after
    try:
        schema.event_cursor(dict(cursor) if isinstance(cursor, Mapping) else cursor, "after")
    except schema.SchemaError:
        raise AgentProtocolError("INVALID_COMMAND", "Event cursor is invalid", status=400) from None
    if cursor["sessionId"] != session_id:
        raise AgentProtocolError("INVALID_COMMAND", "Event cursor belongs to another Session", status=400)
    return int(cursor["sequence"])


def parse_event(data: str, session_id: str) -> AgentEvent:
    """One frame's data as a validated event of this session."""
    try:
        event = schema.agent_event(json.loads(data))
    except (ValueError, RecursionError) as error:
        raise AgentProtocolError(
            "INTERNAL_ERROR", f"Agent event stream sent an invalid event: {error}", status=502, retryable=True
        ) from error
    if event["sessionId"] != session_id:
        raise AgentProtocolError("INVALID_COMMAND", "Received an event of another Session", status=502)
    return AgentEvent.from_json(event)


class EventStream:
    """The bookkeeping of one `events()` call (§11.4): the cursor, the reconnect count, and the
    decision after each connection. Never delivers a sequence twice."""

    def __init__(self, session_id: str, after: int, policy: RetryPolicy) -> None:
        self.session_id = session_id
        self.after = after
        self._policy = policy
        self._attempts = 0
        self._received = False

    def connecting(self) -> ConnectionState:
        self._received = False
        status = "connecting" if self._attempts == 0 else "reconnecting"
        return ConnectionState(status=status, after=self.after, attempt=self._attempts)

    def opened(self) -> ConnectionState:
        return ConnectionState(status="open", after=self.after, attempt=0)

    def deliver(self, event: AgentEvent) -> bool:
        """Moves the cursor to `event`; True when the stream is over (`session.closed`)."""
        if event.sequence <= self.after:
            raise AgentProtocolError(
                "INVALID_COMMAND",
                f"Received non-monotonic event sequence {event.sequence} after {self.after}",
                status=502,
            )
        self.after = event.sequence
        self._attempts = 0
        self._received = True
        return event.type == "session.closed"

    def reconnect_delay(self, failure: Optional[BaseException]) -> float:
        """After a connection ended (`failure` None: the body ended early): seconds to wait
        before reconnecting, or raises. STALE_CURSOR and final failures end the stream at once."""
        if isinstance(failure, AgentProtocolError) and (not failure.retryable or failure.code == "STALE_CURSOR"):
            raise failure
        self._attempts = 1 if self._received else self._attempts + 1
        if self._attempts > self._policy.max_event_reconnect_attempts:
            if failure is not None:
                raise failure
            raise AgentProtocolError(
                "INTERNAL_ERROR", "Agent event stream ended before Session closure", status=502, retryable=True
            )
        return self._policy.backoff_seconds(self._attempts)


def _session(data: JsonObject) -> SessionDescriptor:
    return SessionDescriptor.from_json(data["session"])


def _raw(data: JsonObject) -> JsonObject:
    return data


# Per command type: the strict validator of its result `data`, and its conversion to a dataclass.
# `session.read` is only checked to be an object, as in the JS client.
RESULTS: Mapping[str, Tuple[Callable[[Any, str], Any], Callable[[JsonObject], Any]]] = {
    "initialize": (schema.initialize_result, InitializeResult.from_json),
    "session.create": (schema.session_result, _session),
    "session.resume": (schema.session_result, _session),
    "session.fork": (schema.session_result, _session),
    "session.close": (schema.session_result, _session),
    "session.read": (schema.json_object, _raw),
    "session.list": (schema.list_result, SessionList.from_json),
    "input.submit": (schema.submit_result, SubmitResult.from_json),
    "request.abort": (schema.abort_result, AbortResult.from_json),
    "permission.resolve": (schema.resolve_result, ResolveResult.from_json),
}
