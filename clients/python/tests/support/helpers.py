"""What the real-server tests share: reading a stream to a request's result, its text."""

from __future__ import annotations

import asyncio
import time
from typing import AsyncIterator, Iterable, List

from agent_runtime_client import AgentEvent

CLIENT = {"name": "python-client-test", "version": "0.1.0"}


def is_result_of(event: AgentEvent, request_id: str) -> bool:
    return event.stream_type == "result" and event.request_id == request_id


def until_result(events: Iterable[AgentEvent], request_id: str) -> List[AgentEvent]:
    """Every event until the `result` of `request_id` (the iterator is closed after it)."""
    seen = []
    try:
        for event in events:
            seen.append(event)
            if is_result_of(event, request_id):
                return seen
    finally:
        getattr(events, "close", lambda: None)()
    raise AssertionError("the stream ended before the result")


async def until_result_async(events: AsyncIterator[AgentEvent], request_id: str) -> List[AgentEvent]:
    seen = []
    try:
        async for event in events:
            seen.append(event)
            if is_result_of(event, request_id):
                return seen
    finally:
        await events.aclose()
    raise AssertionError("the stream ended before the result")


def text(events: Iterable[AgentEvent]) -> str:
    return "".join(event.data["delta"] for event in events if event.stream_type == "content")


def sequences_are_one_to_n(events: List[AgentEvent]) -> bool:
    return [event.sequence for event in events] == list(range(1, len(events) + 1))


def finished(client, session_id: str) -> int:
    """Waits (through session.read, never the stream) for the assistant's answer; returns the
    session's last event sequence."""
    for _ in range(200):
        data = client.read_session(session_id)
        sequence = data["recovery"].get("lastEventSequence", 0)
        if any(message["role"] == "assistant" for message in data["messages"]) and sequence > 0:
            return sequence
        time.sleep(0.05)
    raise AssertionError(f"session {session_id} did not finish its request")


async def finished_async(client, session_id: str) -> int:
    for _ in range(200):
        data = await client.read_session(session_id)
        sequence = data["recovery"].get("lastEventSequence", 0)
        if any(message["role"] == "assistant" for message in data["messages"]) and sequence > 0:
            return sequence
        await asyncio.sleep(0.05)
    raise AssertionError(f"session {session_id} did not finish its request")
