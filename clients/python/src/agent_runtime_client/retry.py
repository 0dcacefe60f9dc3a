"""The retry policy of docs/protocol.md §11.3-§11.4 (the JS client's defaults and backoff), and
the ids commands are sent with."""

from __future__ import annotations

import random
import secrets
from dataclasses import dataclass
from typing import Optional

from .errors import AgentProtocolError, is_retryable

_ALPHABET = "useandom-26T198340PX75pxJACKVERYMINDBUSHWOLF_GQZbfghjklqvwyzrict"


def nanoid(size: int = 21) -> str:
    """A URL-safe random id in the format of server-generated ids (21 characters of A-Za-z0-9_-)."""
    return "".join(_ALPHABET[byte & 63] for byte in secrets.token_bytes(size))


@dataclass(frozen=True)
class RetryPolicy:
    """§11.1: attempts per command (>= 1), reconnects per stream (>= 0), base delay in ms (>= 0)."""

    max_command_attempts: int = 3
    max_event_reconnect_attempts: int = 5
    retry_base_delay_ms: int = 250

    def __post_init__(self) -> None:
        for name, minimum in (
            ("max_command_attempts", 1),
            ("max_event_reconnect_attempts", 0),
            ("retry_base_delay_ms", 0),
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ValueError(f"{name} must be an integer of at least {minimum}")

    def backoff_seconds(self, attempt: int) -> float:
        """`base × 2^(attempt−1)` plus a jitter below `base`, for retry number `attempt` (1-based)."""
        base = self.retry_base_delay_ms
        jitter = random.randrange(base) if base > 0 else 0
        return (base * 2 ** (attempt - 1) + jitter) / 1000

    def command_retry_delay(self, error: BaseException, attempt: int) -> Optional[float]:
        """Seconds to wait before retrying a command that failed on `attempt`, or None to give up:
        only network errors and `retryable` failures are retried, after `retryAfterMs` if given."""
        if not is_retryable(error) or attempt >= self.max_command_attempts:
            return None
        if isinstance(error, AgentProtocolError) and error.retry_after_ms is not None:
            return error.retry_after_ms / 1000
        return self.backoff_seconds(attempt)
