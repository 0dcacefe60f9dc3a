"""Python client of the agent-runtime session server, protocol v1 (docs/protocol.md §11).

`AgentClient` is synchronous, `AsyncAgentClient` its asyncio twin; both send every command with
one `commandId` across its retries and stream a session's events without repeats or gaps.
"""

from .aio import AsyncAgentClient, AsyncRemoteAgentSession
from .client import AgentClient, RemoteAgentSession
from .errors import AgentProtocolError, AgentTransportError, SdkError
from .retry import RetryPolicy, nanoid
from .schema import SchemaError
from .sse import MAX_FRAME_BYTES
from .types import (
    PROTOCOL_VERSION,
    AbortResult,
    AgentEvent,
    Capabilities,
    ClientInfo,
    Command,
    ConnectionState,
    EventCursor,
    InitializeResult,
    PermissionDecision,
    ResolveResult,
    SessionDescriptor,
    SessionList,
    SubmitResult,
)

__version__ = "0.1.0"

__all__ = [
    "PROTOCOL_VERSION",
    "MAX_FRAME_BYTES",
    "AbortResult",
    "AgentClient",
    "AgentEvent",
    "AgentProtocolError",
    "AgentTransportError",
    "AsyncAgentClient",
    "AsyncRemoteAgentSession",
    "Capabilities",
    "ClientInfo",
    "Command",
    "ConnectionState",
    "EventCursor",
    "InitializeResult",
    "PermissionDecision",
    "RemoteAgentSession",
    "ResolveResult",
    "RetryPolicy",
    "SchemaError",
    "SdkError",
    "SessionDescriptor",
    "SessionList",
    "SubmitResult",
    "nanoid",
]
