"""The asynchronous client, on `httpx.AsyncClient`: the same behaviour as `client.AgentClient`
(same retries, same stream rules), for asyncio. Cancelling a call's task ends it at once."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any, AsyncIterator, Awaitable, Callable, Mapping, Optional, Union

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

AsyncHeaders = Union[
    Mapping[str, str],
    Callable[[], Mapping[str, str]],
    Callable[[], Awaitable[Mapping[str, str]]],
    None,
]
OnConnection = Optional[Callable[[ConnectionState], None]]
Cursor = Union[EventCursor, Mapping[str, Any], None]


class AsyncAgentClient:
    """The asyncio form of `AgentClient`; `headers` may also be an async function.

    `events()` returns an async generator: a consumer that stops early should `aclose()` it (or
    iterate inside `contextlib.aclosing`) so the connection is closed at once.
    """

    def __init__(
        self,
        base_url: str,
        client: Union[ClientInfo, Mapping[str, str]],
        *,
        headers: AsyncHeaders = None,
        capabilities: Optional[Capabilities] = None,
        max_command_attempts: int = 3,
        max_event_reconnect_attempts: int = 5,
        retry_base_delay_ms: int = 250,
        timeout: float = 60.0,
        http_client: Optional[httpx.AsyncClient] = None,
    ) -> None:
        self._base_url = check_base_url(base_url)
        self._client_info = check_client_info(client)
        self._capabilities = capabilities
        self._headers = headers
        self._policy = RetryPolicy(max_command_attempts, max_event_reconnect_attempts, retry_base_delay_ms)
        self._timeout = httpx.Timeout(timeout)
        self._stream_timeout = httpx.Timeout(timeout, read=None)
        self._owns_http = http_client is None
        self._http = http_client if http_client is not None else httpx.AsyncClient()
        self._initialized: Optional["asyncio.Future[InitializeResult]"] = None

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> "AsyncAgentClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def initialize(self, *, command_id: Optional[str] = None) -> InitializeResult:
        """`initialize`, shared by every concurrent caller; a failure is forgotten so that the
        next call tries again. A caller that is cancelled does not cancel it for the others."""
        if self._initialized is None:
            data = without_none(
                {
                    "client": self._client_info.to_json(),
                    "capabilities": self._capabilities.to_json() if self._capabilities else None,
                }
            )
            task = asyncio.ensure_future(self._command("initialize", data, command_id))
            task.add_done_callback(self._forget_failed_initialize)
            self._initialized = task
        return await asyncio.shield(self._initialized)

    def _forget_failed_initialize(self, task: "asyncio.Future[InitializeResult]") -> None:
        if task.cancelled() or task.exception() is not None:
            if self._initialized is task:
                self._initialized = None

    async def create_session(
        self, metadata: Optional[JsonObject] = None, *, command_id: Optional[str] = None
    ) -> "AsyncRemoteAgentSession":
        descriptor = await self._ready("session.create", without_none({"metadata": metadata}), command_id)
        return AsyncRemoteAgentSession(self, descriptor)

    async def resume_session(
        self, session_id: str, *, command_id: Optional[str] = None
    ) -> "AsyncRemoteAgentSession":
        descriptor = await self._ready("session.resume", {"sessionId": session_id}, command_id)
        return AsyncRemoteAgentSession(self, descriptor)

    async def fork_session(
        self,
        session_id: str,
        *,
        message_id: Optional[str] = None,
        metadata: Optional[JsonObject] = None,
        command_id: Optional[str] = None,
    ) -> "AsyncRemoteAgentSession":
        data = without_none({"sessionId": session_id, "messageId": message_id, "metadata": metadata})
        return AsyncRemoteAgentSession(self, await self._ready("session.fork", data, command_id))

    async def read_session(self, session_id: str, *, command_id: Optional[str] = None) -> JsonObject:
        """The raw `data` of `session.read` (descriptor, transcript, pending inputs, recovery)."""
        return await self._ready("session.read", {"sessionId": session_id}, command_id)

    async def list_sessions(
        self, *, cursor: Optional[str] = None, limit: Optional[int] = None, command_id: Optional[str] = None
    ) -> SessionList:
        return await self._ready("session.list", without_none({"cursor": cursor, "limit": limit}), command_id)

    async def submit_input(
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
        return await self._ready("input.submit", data, command_id)

    async def abort_request(self, session_id: str, *, command_id: Optional[str] = None) -> AbortResult:
        return await self._ready("request.abort", {"sessionId": session_id}, command_id)

    async def close_session(self, session_id: str, *, command_id: Optional[str] = None) -> SessionDescriptor:
        return await self._ready("session.close", {"sessionId": session_id}, command_id)

    async def resolve_permission(
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
        return await self._ready("permission.resolve", data, command_id)

    def events(
        self, session_id: str, *, after: Cursor = None, on_connection: OnConnection = None
    ) -> AsyncIterator[AgentEvent]:
        """The session's events after `after`, then live ones, ending after `session.closed`. A bad
        or foreign cursor is refused here, before any request."""
        return self._events(session_id, start_after(session_id, after), on_connection)

    async def _events(self, session_id: str, after: int, on_connection: OnConnection) -> AsyncIterator[AgentEvent]:
        await self.initialize()
        stream = EventStream(session_id, after, self._policy)
        while True:
            state = stream.connecting()
            if on_connection is not None:
                on_connection(state)
            failure: Optional[BaseException] = None
            events = self._connect(stream, on_connection)
            try:
                async for event in events:
                    closed = stream.deliver(event)
                    yield event
                    if closed:
                        return
            except SdkError as error:
                failure = error
            finally:
                # Closes the connection now, not whenever the generator is collected.
                await events.aclose()
            await asyncio.sleep(stream.reconnect_delay(failure))

    async def _connect(self, stream: EventStream, on_connection: OnConnection) -> AsyncIterator[AgentEvent]:
        """One SSE connection: validated events of the session, in the order received."""
        url = stream_url(self._base_url, stream.session_id, stream.after)
        headers = merge_headers(stream_headers(stream.after), await self._user_headers())
        try:
            async with self._http.stream("GET", url, headers=headers, timeout=self._stream_timeout) as response:
                if not 200 <= response.status_code < 300:
                    raise stream_failure(response.status_code, response.headers, await response.aread())
                if on_connection is not None:
                    on_connection(stream.opened())
                decoder = SseDecoder()
                async for chunk in response.aiter_bytes():
                    for data in decoder.feed(chunk):
                        yield parse_event(data, stream.session_id)
        except httpx.RequestError as error:
            raise transport_error("event stream", error) from error

    async def _ready(self, command_type: str, data: JsonObject, command_id: Optional[str]) -> Any:
        await self.initialize()
        return await self._command(command_type, data, command_id)

    async def _command(self, command_type: str, data: JsonObject, command_id: Optional[str]) -> Any:
        """Sends one command, retrying with the same `commandId` while a retry can help."""
        command = Command(command_id=command_id or nanoid(), type=command_type, data=data)
        validate, convert = RESULTS[command_type]
        attempt = 1
        while True:
            try:
                return convert(await self._post(command, validate))
            except SdkError as error:
                delay = self._policy.command_retry_delay(error, attempt)
                if delay is None:
                    raise
            await asyncio.sleep(delay)
            attempt += 1

    async def _post(self, command: Command, validate: Callable[[Any, str], Any]) -> Any:
        headers = merge_headers({"content-type": "application/json"}, await self._user_headers())
        try:
            response = await self._http.post(
                f"{self._base_url}/commands", json=command.to_json(), headers=headers, timeout=self._timeout
            )
        except httpx.RequestError as error:
            raise transport_error(command.type, error) from error
        return read_command_answer(command.type, response.status_code, response.headers, response.content, validate)

    async def _user_headers(self) -> Optional[Mapping[str, str]]:
        if not callable(self._headers):
            return self._headers
        headers = self._headers()
        return await headers if inspect.isawaitable(headers) else headers


class AsyncRemoteAgentSession:
    """One session of an `AsyncAgentClient`, with the client's methods bound to its id."""

    def __init__(self, client: AsyncAgentClient, session: SessionDescriptor) -> None:
        self.client = client
        self.session = session
        self.session_id = session.session_id

    async def send(
        self,
        input: Input,
        *,
        priority: Optional[str] = None,
        expected_request_id: Optional[str] = None,
        max_turns: Optional[int] = None,
        command_id: Optional[str] = None,
    ) -> SubmitResult:
        return await self.client.submit_input(
            self.session_id,
            input,
            priority=priority,
            expected_request_id=expected_request_id,
            max_turns=max_turns,
            command_id=command_id,
        )

    submit = send

    def events(self, *, after: Cursor = None, on_connection: OnConnection = None) -> AsyncIterator[AgentEvent]:
        return self.client.events(self.session_id, after=after, on_connection=on_connection)

    async def abort(self, *, command_id: Optional[str] = None) -> AbortResult:
        return await self.client.abort_request(self.session_id, command_id=command_id)

    async def close(self, *, command_id: Optional[str] = None) -> SessionDescriptor:
        return await self.client.close_session(self.session_id, command_id=command_id)

    async def fork(
        self,
        *,
        message_id: Optional[str] = None,
        metadata: Optional[JsonObject] = None,
        command_id: Optional[str] = None,
    ) -> "AsyncRemoteAgentSession":
        return await self.client.fork_session(
            self.session_id, message_id=message_id, metadata=metadata, command_id=command_id
        )

    async def read(self, *, command_id: Optional[str] = None) -> JsonObject:
        return await self.client.read_session(self.session_id, command_id=command_id)

    async def resolve_permission(
        self, permission_request_id: str, decision: PermissionDecision, *, command_id: Optional[str] = None
    ) -> ResolveResult:
        return await self.client.resolve_permission(
            self.session_id, permission_request_id, decision, command_id=command_id
        )
