"""Scripted server answers for httpx.MockTransport: the client against exact bytes, as the JS
client's client.test.js does with its scripted fetch."""

from __future__ import annotations

import json
from typing import Callable, List, Optional

import httpx

from agent_runtime_client.schema import COMMAND_TYPES

INITIALIZED = {
    "protocolVersion": 1,
    "commands": list(COMMAND_TYPES),
    "transports": ["http-sse"],
    "features": {"approvals": True, "durableEvents": True, "eventReplay": True, "idempotentCommands": True},
    "serverTime": "2026-11-29T00:00:00.000Z",
}

BASE_URL = "http://agent.test/v1/agent/"


def json_response(status: int, body, headers: Optional[dict] = None) -> httpx.Response:
    text = body if isinstance(body, str) else json.dumps(body)
    return httpx.Response(status, content=text.encode(), headers={"content-type": "application/json", **(headers or {})})


def success(command_id: str, data: dict) -> httpx.Response:
    return json_response(200, {"protocolVersion": 1, "commandId": command_id, "ok": True, "data": data})


def failure(status: int, command_id: str, code: str, retryable: bool, retry_after_ms: Optional[int] = None) -> httpx.Response:
    error = {"code": code, "message": code, "retryable": retryable}
    if retry_after_ms is not None:
        error["retryAfterMs"] = retry_after_ms
    return json_response(status, {"protocolVersion": 1, "commandId": command_id, "ok": False, "error": error})


def sse(text: str) -> httpx.Response:
    return httpx.Response(200, content=text.encode(), headers={"content-type": "text/event-stream"})


def event(sequence: int, type: str = "session.stream", session_id: str = "session-1") -> dict:
    data = (
        {"sessionId": session_id, "type": "content", "delta": f"d{sequence}"}
        if type == "session.stream"
        else {"reason": "user"}
    )
    return {
        "protocolVersion": 1,
        "eventId": f"event-{sequence}",
        "sequence": sequence,
        "sessionId": session_id,
        "occurredAt": "2026-11-29T00:00:00.000Z",
        "type": type,
        "data": data,
    }


def frame(value: dict, newline: str = "\n") -> str:
    return f"data: {json.dumps(value)}{newline}{newline}"


class Script:
    """A transport that answers `initialize` itself (unless `answer_initialize` is False) and every
    other request with `next(request, body)`; it records every request."""

    def __init__(self, next: Callable[[httpx.Request, Optional[dict]], httpx.Response], answer_initialize: bool = True):
        self.next = next
        self.answer_initialize = answer_initialize
        self.calls: List[dict] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.method == "POST" else None
        self.calls.append({"url": str(request.url), "method": request.method, "headers": request.headers, "body": body})
        if self.answer_initialize and body is not None and body["type"] == "initialize":
            return success(body["commandId"], INITIALIZED)
        return self.next(request, body)

    def sync_client(self) -> httpx.Client:
        return httpx.Client(transport=httpx.MockTransport(self.handle))

    def async_client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.MockTransport(self.handle))

    def streams(self) -> List[dict]:
        return [call for call in self.calls if call["method"] == "GET"]

    def commands(self, type: str) -> List[dict]:
        return [call for call in self.calls if call["body"] is not None and call["body"]["type"] == type]
