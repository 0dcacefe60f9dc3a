"""The synchronous client (docs/protocol.md §11) on `httpx.Client`: idempotent commands with safe
retries, and an event stream that reconnects without ever repeating or skipping an event."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any, Callable, Iterator, Mapping, Optional, Union

import httpx

from ._protocol import (
    RESULTS,
    EventStream,
    check_base_url,
    check_client_info,
    merge_headers,
    parse_event,
    read_command_answer,
    start_after,
    stream_failure,
    stream_headers,
    stream_url,
    without_none,
)
from .errors import SdkError, transport_error
from .retry import RetryPolicy, nanoid
from .sse import SseDecoder
from .types import (
    AbortResult,
    AgentEvent,
    Capabilities,
    ClientInfo,
    Command,
    ConnectionState,
    EventCursor,
    InitializeResult,
    Input,
    JsonObject,
    PermissionDecision,
    ResolveResult,
    SessionDescriptor,
    SessionList,
    SubmitResult,
)

Headers = Union[Mapping[str, str], Callable[[], Mapping[str, str]], None]
OnConnection = Optional[Callable[[ConnectionState], None]]
Cursor = Union[EventCursor, Mapping[str, Any], None]


class AgentClient:
    """A client of one server (`base_url`, e.g. `http://127.0.0.1:8787/v1/agent`).

    `headers` is a mapping, or a function called before every request (a fresh bearer token).
    `timeout` bounds each command request; an event stream has no read timeout, since it may
    legitimately wait for the next event. Pass `http_client` to reuse or configure a transport;
    the client closes only the one it created.
    """

    def __init__(
        self,
        base_url: str,
        client: Union[ClientInfo, Mapping[str, str]],
        *,
        headers: Headers = None,
        capabilities: Optional[Capabilities] = None,
        max_command_attempts: int = 3,
        max_event_reconnect_attempts: int = 5,
        retry_base_delay_ms: int = 250,
        timeout: float = 60.0,
        http_client: Optional[httpx.Client] = None,
    ) -> None:
        self._base_url = check_base_url(base_url)
        self._client_info = check_client_info(client)
        self._capabilities = capabilities
        self._headers = headers
        self._policy = RetryPolicy(max_command_attempts, max_event_reconnect_attempts, retry_base_delay_ms)
        self._timeout = httpx.Timeout(timeout)
        self._stream_timeout = httpx.Timeout(timeout, read=None)
        self._owns_http = http_client is None
        self._http = http_client if http_client is not None else httpx.Client()
        self._init_lock = threading.Lock()
        self._initialized: Optional[InitializeResult] = None

    def close(self) -> None:
        if self._owns_http:
            self._http.close()

    def __enter__(self) -> "AgentClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def initialize(self, *, command_id: Optional[str] = None) -> InitializeResult:
        """Runs `initialize` once for every caller; a failure is not kept, so the next call retries."""
        with self._init_lock:
            if self._initialized is None:
                data = without_none(
                    {
                        "client": self._client_info.to_json(),
                        "capabilities": self._capabilities.to_json() if self._capabilities else None,
                    }
                )
                self._initialized = self._command("initialize", data, command_id)
            return self._initialized

    def create_session(
        self, metadata: Optional[JsonObject] = None, *, command_id: Optional[str] = None
    ) -> "RemoteAgentSession":
        descriptor = self._ready("session.create", without_none({"metadata": metadata}), command_id)
        return RemoteAgentSession(self, descriptor)

    def resume_session(self, session_id: str, *, command_id: Optional[str] = None) -> "RemoteAgentSession":
        return RemoteAgentSession(self, self._ready("session.resume", {"sessionId": session_id}, command_id))

    def fork_session(
        self,
        session_id: str,
        *,
        message_id: Optional[str] = None,
        metadata: Optional[JsonObject] = None,
        command_id: Optional[str] = None,
    ) -> "RemoteAgentSession":
        data = without_none({"sessionId": session_id, "messageId": message_id, "metadata": metadata})
        return RemoteAgentSession(self, self._ready("session.fork", data, command_id))

    def read_session(self, session_id: str, *, command_id: Optional[str] = None) -> JsonObject:
        """The raw `data` of `session.read` (descriptor, transcript, pending inputs, recovery)."""
        return self._ready("session.read", {"sessionId": session_id}, command_id)

    def list_sessions(
        self, *, cursor: Optional[str] = None, limit: Optional[int] = None, command_id: Optional[str] = None
    ) -> SessionList:
        return self._ready("session.list", without_none({"cursor": cursor, "limit": limit}), command_id)

    def submit_input(
        self,
        session_id: str,
        input: Input,
        *,
        priority: Optional[str] = None,
        expected_request_id: Optional[str] = None,
        max_turns: Optional[int] = None,
        command_id: Optional[str] = None,
    ) -> SubmitResult:
        data = without_none(
            {
                "sessionId": session_id,
                "input": input,
                "priority": priority,
                "expectedRequestId": expected_request_id,
                "maxTurns": max_turns,
            }
        )
        return self._ready("input.submit", data, command_id)

    def abort_request(self, session_id: str, *, command_id: Optional[str] = None) -> AbortResult:
        return self._ready("request.abort", {"sessionId": session_id}, command_id)

    def close_session(self, session_id: str, *, command_id: Optional[str] = None) -> SessionDescriptor:
        return self._ready("session.close", {"sessionId": session_id}, command_id)

    def resolve_permission(
        self,
        session_id: str,
        permission_request_id: str,
        decision: PermissionDecision,
        *,
        command_id: Optional[str] = None,
    ) -> ResolveResult:
        data = without_none(
            {
                "sessionId": session_id,
                "permissionRequestId": permission_request_id,
                "approved": decision.approved,
                "reason": decision.reason,
                "scope": decision.scope,
            }
        )
        return self._ready("permission.resolve", data, command_id)

    def events(
        self, session_id: str, *, after: Cursor = None, on_connection: OnConnection = None
    ) -> Iterator[AgentEvent]:
        """The session's events after `after` (a cursor), then live ones, ending after
        `session.closed`. A bad or foreign cursor is refused here, before any request.
        Closing the iterator (or leaving a `for` loop over `contextlib.closing(...)`) closes the
        connection."""
        return self._events(session_id, start_after(session_id, after), on_connection)

    def _events(self, session_id: str, after: int, on_connection: OnConnection) -> Iterator[AgentEvent]:
        self.initialize()
        stream = EventStream(session_id, after, self._policy)
        while True:
            state = stream.connecting()
            if on_connection is not None:
                on_connection(state)
            failure: Optional[BaseException] = None
            try:
                with contextlib.closing(self._connect(stream, on_connection)) as events:
                    for event in events:
                        closed = stream.deliver(event)
                        yield event
                        if closed:
                            return
            except SdkError as error:
                failure = error
            time.sleep(stream.reconnect_delay(failure))

    def _connect(self, stream: EventStream, on_connection: OnConnection) -> Iterator[AgentEvent]:
        """One SSE connection: validated events of the session, in the order received."""
        url = stream_url(self._base_url, stream.session_id, stream.after)
        headers = merge_headers(stream_headers(stream.after), self._user_headers())
        try:
            with self._http.stream("GET", url, headers=headers, timeout=self._stream_timeout) as response:
                if not 200 <= response.status_code < 300:
                    raise stream_failure(response.status_code, response.headers, response.read())
                if on_connection is not None:
                    on_connection(stream.opened())
                decoder = SseDecoder()
                for chunk in response.iter_bytes():
                    for data in decoder.feed(chunk):
                        yield parse_event(data, stream.session_id)
        except httpx.RequestError as error:
            raise transport_error("event stream", error) from error

    def _ready(self, command_type: str, data: JsonObject, command_id: Optional[str]) -> Any:
        self.initialize()
        return self._command(command_type, data, command_id)

    def _command(self, command_type: str, data: JsonObject, command_id: Optional[str]) -> Any:
        """Sends one command, retrying with the same `commandId` while a retry can help."""
        command = Command(command_id=command_id or nanoid(), type=command_type, data=data)
        validate, convert = RESULTS[command_type]
        attempt = 1
        while True:
            try:
                return convert(self._post(command, validate))
            except SdkError as error:
                delay = self._policy.command_retry_delay(error, attempt)
                if delay is None:
                    raise
            time.sleep(delay)
            attempt += 1

    def _post(self, command: Command, validate: Callable[[Any, str], Any]) -> Any:
        headers = merge_headers({"content-type": "application/json"}, self._user_headers())
        try:
            response = self._http.post(
                f"{self._base_url}/commands", json=command.to_json(), headers=headers, timeout=self._timeout
            )
        except httpx.RequestError as error:
            raise transport_error(command.type, error) from error
        return read_command_answer(command.type, response.status_code, response.headers, response.content, validate)

    def _user_headers(self) -> Optional[Mapping[str, str]]:
        return self._headers() if callable(self._headers) else self._headers


class RemoteAgentSession:
    """One session of an `AgentClient`, with the client's methods bound to its id."""

    def __init__(self, client: AgentClient, session: SessionDescriptor) -> None:
        self.client = client
        self.session = session
        self.session_id = session.session_id

    def send(
        self,
        input: Input,
        *,
        priority: Optional[str] = None,
        expected_request_id: Optional[str] = None,
        max_turns: Optional[int] = None,
        command_id: Optional[str] = None,
    ) -> SubmitResult:
        return self.client.submit_input(
            self.session_id,
            input,
            priority=priority,
            expected_request_id=expected_request_id,
            max_turns=max_turns,
            command_id=command_id,
        )

    submit = send

    def events(self, *, after: Cursor = None, on_connection: OnConnection = None) -> Iterator[AgentEvent]:
        return self.client.events(self.session_id, after=after, on_connection=on_connection)

    def abort(self, *, command_id: Optional[str] = None) -> AbortResult:
        return self.client.abort_request(self.session_id, command_id=command_id)

    def close(self, *, command_id: Optional[str] = None) -> SessionDescriptor:
        return self.client.close_session(self.session_id, command_id=command_id)

    def fork(
        self,
        *,
        message_id: Optional[str] = None,
        metadata: Optional[JsonObject] = None,
        command_id: Optional[str] = None,
    ) -> "RemoteAgentSession":
        return self.client.fork_session(
            self.session_id, message_id=message_id, metadata=metadata, command_id=command_id
        )

    def read(self, *, command_id: Optional[str] = None) -> JsonObject:
        return self.client.read_session(self.session_id, command_id=command_id)

    def resolve_permission(
        self, permission_request_id: str, decision: PermissionDecision, *, command_id: Optional[str] = None
    ) -> ResolveResult:
        return self.client.resolve_permission(self.session_id, permission_request_id, decision, command_id=command_id)
