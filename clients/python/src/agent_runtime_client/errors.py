"""Errors of docs/protocol.md §11.5, and the retry classification shared by commands and events.

No error carries a request header: messages are built from the protocol body or from the
transport failure's class and text (never from the request), so a bearer token cannot leak.
"""

from __future__ import annotations

import email.utils
import time
from dataclasses import dataclass
from typing import Any, Mapping, Optional


class SdkError(Exception):
    """Base class of every error this client raises."""


@dataclass(eq=False)
class AgentProtocolError(SdkError):
    """A failure with a protocol error code: sent by the server, or raised by a client check.

    `status` is the HTTP status of the answer, or the local one of §11.5 (400 for a bad cursor, 502
    for stream validation, frame size and a premature end).
    """

    code: str
    message: str
    status: int = 500
    retryable: bool = False
    retry_after_ms: Optional[int] = None
    details: Optional[dict] = None

    def __post_init__(self) -> None:
        super().__init__(self.message)

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


@dataclass(eq=False)
class AgentTransportError(SdkError):
    """No (complete) answer: connection refused or reset, a timeout, a body cut off.

    Always retryable: the command keeps its commandId, so a retry cannot run it twice.
    """

    message: str
    retryable: bool = True

    def __post_init__(self) -> None:
        super().__init__(self.message)

    def __str__(self) -> str:
        return self.message


def transport_error(what: str, error: BaseException) -> AgentTransportError:
    """Wraps an httpx failure. Its text names the socket problem, never a header."""
    detail = str(error) or type(error).__name__
    wrapped = AgentTransportError(f"{what}: {type(error).__name__}: {detail}")
    wrapped.__cause__ = error
    return wrapped


def is_retryable(error: BaseException) -> bool:
    """Whether a retry with the same commandId may help (§11.3)."""
    return isinstance(error, (AgentProtocolError, AgentTransportError)) and error.retryable


def retryable_status(status: int) -> bool:
    """Retryability of a response without a structured failure: 408, 429 and 5xx."""
    return status == 408 or status == 429 or status >= 500


def retry_after_header(headers: Mapping[str, str], now: Optional[float] = None) -> Optional[int]:
    """`Retry-After` in milliseconds: delta-seconds or an HTTP date; None when absent or bad."""
    value = headers.get("retry-after")
    if value is None or value.strip() == "":
        return None
    text = value.strip()
    if text.isascii() and text.isdigit():
        return int(text) * 1000
    try:
        date = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if date is None or date.tzinfo is None:
        return None
    current = time.time() if now is None else now
    return max(0, int((date.timestamp() - current) * 1000))


def server_failure(error: Mapping[str, Any], status: int) -> AgentProtocolError:
    """The structured failure of a (validated) response body. COMMAND_ABANDONED is terminal
    even if a server flags it retryable (decision P3)."""
    code = error["code"]
    return AgentProtocolError(
        code=code,
        message=error["message"],
        status=status,
        retryable=bool(error["retryable"]) and code != "COMMAND_ABANDONED",
        retry_after_ms=error.get("retryAfterMs"),
        details=error.get("details"),
    )


def unstructured_failure(status: int, headers: Mapping[str, str], message: str) -> AgentProtocolError:
    """An answer that is not a valid protocol response: INTERNAL_ERROR, retryable by status."""
    return AgentProtocolError(
        code="INTERNAL_ERROR",
        message=message,
        status=status,
        retryable=retryable_status(status),
        retry_after_ms=retry_after_header(headers),
    )
