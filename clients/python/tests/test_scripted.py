"""The clients against scripted answers (httpx.MockTransport): the client behaviours of
docs/protocol.md §12 (items 27-34), the retry rules of §11.3 and strict validation. Each case runs
on the synchronous and the asynchronous client."""

from __future__ import annotations

import asyncio
import json
import re

import httpx
import pytest

from agent_runtime_client import (
    AgentClient,
    AgentProtocolError,
    AgentTransportError,
    AsyncAgentClient,
    EventCursor,
    nanoid,
)
from support.scripted import INITIALIZED, BASE_URL, Script, event, failure, frame, json_response, sse, success

TOKEN = "secret-token-value-0123456789"


def sync_client(script: Script, **options) -> AgentClient:
    return AgentClient(
        BASE_URL,
        {"name": "client-test", "version": "1.0.0"},
        http_client=script.sync_client(),
        retry_base_delay_ms=0,
        **options,
    )


def async_client(script: Script, **options) -> AsyncAgentClient:
    return AsyncAgentClient(
        BASE_URL,
        {"name": "client-test", "version": "1.0.0"},
        http_client=script.async_client(),
        retry_base_delay_ms=0,
        **options,
    )


class Runner:
    """Runs one scenario on either client: `call(client.method, ...)` and `collect(events)` hide
    whether the client is synchronous."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def client(self, script: Script, **options):
        return sync_client(script, **options) if self.kind == "sync" else async_client(script, **options)

    def call(self, method, *args, **kwargs):
        result = method(*args, **kwargs)
        return asyncio.run(result) if self.kind == "async" else result

    def collect(self, events, limit=None):
        """The events until the end (or `limit` of them); raises what the stream raised."""
        if self.kind == "sync":
            seen = []
            for item in events:
                seen.append(item)
                if limit is not None and len(seen) == limit:
                    events.close()
                    break
            return seen

        async def run():
            seen = []
            try:
                async for item in events:
                    seen.append(item)
                    if limit is not None and len(seen) == limit:
                        break
            finally:
                await events.aclose()
            return seen

        return asyncio.run(run())


@pytest.fixture(params=["sync", "async"])
def run(request) -> Runner:
    return Runner(request.param)


def test_item_27_crlf_frame_reconnect_with_the_cursor_in_both_places_and_end_at_session_closed(run):
    responses = [sse(frame(event(1), "\r\n")), sse(frame(event(2, "session.closed")))]
    script = Script(lambda request, body: responses.pop(0))
    seen = run.collect(run.client(script, max_event_reconnect_attempts=1).events("session-1"))
    assert [item.sequence for item in seen] == [1, 2]
    assert seen[-1].type == "session.closed"
    gets = script.streams()
    assert len(gets) == 2
    assert gets[0]["url"] == "http://agent.test/v1/agent/sessions/session-1/events?after=0"
    assert "last-event-id" not in gets[0]["headers"]
    assert gets[1]["url"] == "http://agent.test/v1/agent/sessions/session-1/events?after=1"
    assert gets[1]["headers"]["last-event-id"] == "1"
    assert gets[1]["headers"]["accept"] == "text/event-stream"


def test_item_29_a_stream_that_always_ends_empty_is_given_up_after_max_attempts_plus_one(run):
    script = Script(lambda request, body: sse(""))
    with pytest.raises(AgentProtocolError) as raised:
        run.collect(run.client(script, max_event_reconnect_attempts=2).events("session-1"))
    assert (raised.value.code, raised.value.retryable, raised.value.status) == ("INTERNAL_ERROR", True, 502)
    assert len(script.streams()) == 3


@pytest.mark.parametrize("flagged_retryable", [False, True])
def test_item_30_stale_cursor_is_surfaced_after_one_request_and_never_retried(run, flagged_retryable):
    stale = {
        "protocolVersion": 1,
        "commandId": "events",
        "ok": False,
        "error": {"code": "STALE_CURSOR", "message": "Event cursor is stale", "retryable": flagged_retryable},
    }
    script = Script(lambda request, body: json_response(409, stale))
    with pytest.raises(AgentProtocolError) as raised:
        run.collect(run.client(script, max_event_reconnect_attempts=5).events("session-1"))
    assert (raised.value.code, raised.value.status) == ("STALE_CURSOR", 409)
    assert len(script.streams()) == 1


def test_item_31_a_cursor_of_another_session_or_a_bad_one_is_refused_before_any_request(run):
    script = Script(lambda request, body: pytest.fail("no request may be made"))
    client = run.client(script)
    foreign = EventCursor(session_id="session-2", sequence=3, event_id="event-3")
    for cursor in (
        foreign,
        {"protocolVersion": 1, "sessionId": "session-1", "sequence": 0, "eventId": "event-0"},
        {"protocolVersion": 1, "sessionId": "session-1", "sequence": 1},
    ):
        with pytest.raises(AgentProtocolError) as raised:
            client.events("session-1", after=cursor)
        assert (raised.value.code, raised.value.status) == ("INVALID_COMMAND", 400)
    assert script.calls == []


def test_item_32_a_repeated_sequence_after_a_reconnect_fails_closed(run):
    responses = [sse(frame(event(1))), sse(frame(event(1)))]
    script = Script(lambda request, body: responses.pop(0))
    seen = []

    def record(events):
        if run.kind == "sync":
            for item in events:
                seen.append(item.sequence)
            return None

        async def consume():
            async for item in events:
                seen.append(item.sequence)

        return asyncio.run(consume())

    with pytest.raises(AgentProtocolError) as raised:
        record(run.client(script).events("session-1"))
    assert seen == [1]
    assert (raised.value.code, raised.value.status) == ("INVALID_COMMAND", 502)
    assert "non-monotonic" in raised.value.message


def test_item_34_an_unstructured_429_is_retried_with_the_same_command_id(run):
    answers = iter([httpx.Response(429, content=b"slow down", headers={"retry-after": "0"})])

    def next_answer(request, body):
        return next(answers, None) or success(body["commandId"], INITIALIZED)

    script = Script(next_answer, answer_initialize=False)
    result = run.call(run.client(script, max_command_attempts=2).initialize)
    assert result.commands[0] == "initialize"
    assert len(script.calls) == 2
    assert script.calls[0]["body"]["commandId"] == script.calls[1]["body"]["commandId"]
    assert re.fullmatch(r"[A-Za-z0-9_-]{21}", script.calls[0]["body"]["commandId"])


def test_a_structured_failure_decides_retryability_by_its_body_not_its_status(run):
    not_found = Script(lambda request, body: failure(404, body["commandId"], "SESSION_NOT_FOUND", False))
    with pytest.raises(AgentProtocolError) as raised:
        run.call(run.client(not_found).resume_session, "missing")
    assert (raised.value.code, raised.value.status) == ("SESSION_NOT_FOUND", 404)
    assert len(not_found.commands("session.resume")) == 1

    overloaded = Script(lambda request, body: failure(503, body["commandId"], "OVERLOADED", True, 0))
    with pytest.raises(AgentProtocolError) as raised:
        run.call(run.client(overloaded, max_command_attempts=3).resume_session, "busy")
    assert (raised.value.code, raised.value.retry_after_ms, raised.value.retryable) == ("OVERLOADED", 0, True)
    resumes = overloaded.commands("session.resume")
    assert len(resumes) == 3
    assert len({call["body"]["commandId"] for call in resumes}) == 1


def test_command_abandoned_is_final_even_when_flagged_retryable(run):
    script = Script(lambda request, body: failure(409, body["commandId"], "COMMAND_ABANDONED", True))
    with pytest.raises(AgentProtocolError) as raised:
        run.call(run.client(script).close_session, "session-1")
    assert raised.value.code == "COMMAND_ABANDONED" and not raised.value.retryable
    assert len(script.commands("session.close")) == 1


def test_a_network_error_is_retried_with_the_same_command_id_and_reported_without_secrets(run):
    def refuse(request, body):
        raise httpx.ConnectError("connection refused", request=request)

    script = Script(refuse)
    client = run.client(script, max_command_attempts=3, headers=lambda: {"authorization": f"Bearer {TOKEN}"})
    with pytest.raises(AgentTransportError) as raised:
        run.call(client.create_session, {"purpose": "test"})
    creates = script.commands("session.create")
    assert len(creates) == 3
    assert len({call["body"]["commandId"] for call in creates}) == 1
    assert all(call["headers"]["authorization"] == f"Bearer {TOKEN}" for call in script.calls)
    assert raised.value.retryable
    assert "session.create" in str(raised.value)
    assert TOKEN not in str(raised.value) and TOKEN not in repr(raised.value)


def test_a_caller_command_id_is_sent_and_kept_across_retries(run):
    answers = iter([failure(409, "mine-1", "COMMAND_IN_PROGRESS", True, 1)])

    def next_answer(request, body):
        return next(answers, None) or success(body["commandId"], {"sessionId": "s-1", "aborted": True})

    script = Script(next_answer)
    result = run.call(run.client(script).abort_request, "s-1", command_id="mine-1")
    assert result.aborted is True and result.session_id == "s-1"
    assert [call["body"]["commandId"] for call in script.commands("request.abort")] == ["mine-1", "mine-1"]


def test_initialize_is_retried_after_a_failure_and_then_kept(run):
    answers = iter([failure(400, "x", "INVALID_COMMAND", False)])

    def next_answer(request, body):
        return next(answers, None) or success(body["commandId"], INITIALIZED)

    script = Script(next_answer, answer_initialize=False)
    client = run.client(script)
    with pytest.raises(AgentProtocolError):
        run.call(client.initialize)
    first = run.call(client.initialize)
    second = run.call(client.initialize)
    assert first == second
    assert len(script.calls) == 2


def test_async_initialize_is_shared_by_concurrent_callers():
    script = Script(lambda request, body: success(body["commandId"], INITIALIZED), answer_initialize=False)

    async def run_all():
        client = async_client(script)
        return await asyncio.gather(client.initialize(), client.initialize(), client.initialize())

    results = asyncio.run(run_all())
    assert results[0] == results[1] == results[2]
    assert len(script.calls) == 1


def test_results_and_events_are_validated_strictly(run):
    descriptor = {
        "sessionId": "s",
        "status": "active",
        "createdAt": "2026-11-29T00:00:00Z",
        "updatedAt": "2026-11-29T00:00:00Z",
        "tenantId": "leak",
    }
    extra_field = Script(lambda request, body: success(body["commandId"], {"session": descriptor}))
    with pytest.raises(AgentProtocolError) as raised:
        run.call(run.client(extra_field, max_command_attempts=1).create_session)
    assert raised.value.code == "INTERNAL_ERROR" and not raised.value.retryable
    assert "tenantId" in raised.value.message

    bad_event = {**event(1), "data": {"sessionId": "other", "type": "content", "delta": "x"}}
    script = Script(lambda request, body: sse(frame(bad_event)))
    with pytest.raises(AgentProtocolError) as raised:
        run.collect(run.client(script, max_event_reconnect_attempts=1).events("session-1"))
    assert raised.value.code == "INTERNAL_ERROR" and raised.value.retryable
    assert len(script.streams()) == 2, "an invalid frame is retried like a broken connection"


@pytest.mark.parametrize(
    "mutate",
    [
        lambda e: e.update(extra=1),
        lambda e: e["data"].pop("delta"),
        lambda e: e.update(sequence=1.5),
        lambda e: e.update(sequence=True),
        lambda e: e.update(occurredAt="yesterday"),
        lambda e: e.update(requestId=None),
        lambda e: e.update(protocolVersion=2),
        lambda e: e["data"].update(type="nonsense"),
    ],
    ids=["extra-key", "no-delta", "fractional-sequence", "boolean-sequence", "bad-date", "null-optional", "version-2", "unknown-type"],
)
def test_every_malformed_event_is_refused(mutate):
    bad = event(1)
    mutate(bad)
    script = Script(lambda request, body: sse(frame(bad)))
    with pytest.raises(AgentProtocolError) as raised:
        list(sync_client(script, max_event_reconnect_attempts=0).events("session-1"))
    assert (raised.value.code, raised.value.status) == ("INTERNAL_ERROR", 502)
    assert "invalid event" in raised.value.message


def injected(message: dict) -> dict:
    """A `tool_new_messages` event carrying `message`."""
    return {
        **event(1),
        "data": {"sessionId": "session-1", "type": "tool_new_messages", "id": "t", "name": "Skill", "messages": [message]},
    }


def test_streamed_messages_follow_the_newest_strict_message_schema():
    newest = {
        "role": "user",
        "content": "skill text",
        "provenance": {"source": "tool_injection"},
        "correlation": {"inputId": "i-1", "requestId": "r-1"},
        "telemetry": {"model": "m", "usage": {"inputTokens": 1, "outputTokens": 2}},
        "extensions": {"x": 1},
        "providerOptions": {"cache": True},
    }
    script = Script(lambda request, body: sse(frame(injected(newest)) + frame(event(2, "session.closed"))))
    seen = list(sync_client(script).events("session-1"))
    assert [item.type for item in seen] == ["session.stream", "session.closed"]

    for message in [
        {**newest, "correlation": {"inputId": "i-1"}},
        {**newest, "correlation": {"inputId": "i-1", "requestId": None}},
        {**newest, "metadata": {"correlation": {"inputId": "i-1", "requestId": "r-1"}}},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "", "type": "function", "function": {"name": "n", "arguments": "{}"}}]},
    ]:
        script = Script(lambda request, body, message=message: sse(frame(injected(message))))
        with pytest.raises(AgentProtocolError) as raised:
            list(sync_client(script, max_event_reconnect_attempts=0).events("session-1"))
        assert "invalid event" in raised.value.message, message


def test_an_event_of_another_session_is_refused(run):
    script = Script(lambda request, body: sse(frame(event(1, session_id="session-2"))))
    with pytest.raises(AgentProtocolError) as raised:
        run.collect(run.client(script).events("session-1"))
    assert (raised.value.code, raised.value.status, raised.value.retryable) == ("INVALID_COMMAND", 502, False)
    assert len(script.streams()) == 1


def test_heartbeats_comments_and_multi_line_data_are_parsed_as_the_reference_does(run):
    data = "\n".join(f"data:   {line}" for line in json.dumps(event(1), indent=1).split("\n"))
    body = f": heartbeat\n\nid: 1\nevent: message\n{data}\n\n" + frame(event(2, "session.closed"))
    script = Script(lambda request, body_: sse(body))
    seen = run.collect(run.client(script).events("session-1"))
    assert [item.type for item in seen] == ["session.stream", "session.closed"]


def test_a_stream_resumes_after_a_cursor_and_stops_at_a_consumer_limit(run):
    script = Script(lambda request, body: sse(frame(event(4)) + frame(event(5))))
    cursor = {"protocolVersion": 1, "sessionId": "session-1", "sequence": 3, "eventId": "event-3"}
    states = []
    seen = run.collect(run.client(script).events("session-1", after=cursor, on_connection=states.append), limit=1)
    assert [item.sequence for item in seen] == [4]
    assert script.streams()[0]["url"].endswith("/events?after=3")
    assert script.streams()[0]["headers"]["last-event-id"] == "3"
    assert [(state.status, state.after, state.attempt) for state in states] == [("connecting", 3, 0), ("open", 3, 0)]


def test_a_refused_stream_without_a_protocol_body_is_an_error_by_status(run):
    script = Script(lambda request, body: httpx.Response(401, content=b"no"))
    with pytest.raises(AgentProtocolError) as raised:
        run.collect(run.client(script).events("session-1"))
    assert (raised.value.code, raised.value.status, raised.value.retryable) == ("INTERNAL_ERROR", 401, False)


def test_a_success_body_with_an_error_status_is_an_unstructured_failure(run):
    script = Script(lambda request, body: json_response(
        503,
        {"protocolVersion": 1, "commandId": body["commandId"], "ok": True, "data": {"sessionId": "s", "aborted": True}},
        {"retry-after": "0"},
    ))
    with pytest.raises(AgentProtocolError) as raised:
        run.call(run.client(script, max_command_attempts=2).abort_request, "s")
    assert (raised.value.code, raised.value.status, raised.value.retryable, raised.value.retry_after_ms) == (
        "INTERNAL_ERROR",
        503,
        True,
        0,
    )
    assert len(script.commands("request.abort")) == 2


def test_headers_are_evaluated_for_every_request(run):
    tokens = iter(f"token-{i}" for i in range(100))
    script = Script(lambda request, body: success(body["commandId"], {"sessionId": "s", "aborted": True}))
    client = run.client(script, headers=lambda: {"Authorization": f"Bearer {next(tokens)}"})
    run.call(client.abort_request, "s")
    run.call(client.abort_request, "s")
    assert [call["headers"]["authorization"] for call in script.calls] == [
        "Bearer token-0",
        "Bearer token-1",
        "Bearer token-2",
    ]


def test_async_headers_may_come_from_a_coroutine():
    async def headers():
        return {"authorization": "Bearer from-a-coroutine"}

    script = Script(lambda request, body: success(body["commandId"], {"sessionId": "s", "aborted": True}))
    client = async_client(script, headers=headers)
    asyncio.run(client.abort_request("s"))
    assert {call["headers"]["authorization"] for call in script.calls} == {"Bearer from-a-coroutine"}


def test_initialize_sends_the_client_name_version_title_and_capabilities():
    from agent_runtime_client import Capabilities, ClientInfo

    script = Script(lambda request, body: success(body["commandId"], INITIALIZED), answer_initialize=False)
    client = AgentClient(
        BASE_URL,
        ClientInfo(name="my-app", version="1.2.3", title="My App"),
        capabilities=Capabilities(approvals=True, event_replay=True),
        http_client=script.sync_client(),
    )
    client.initialize()
    sent = script.calls[0]["body"]
    assert sent["protocolVersion"] == 1 and sent["type"] == "initialize"
    assert sent["data"] == {
        "client": {"name": "my-app", "version": "1.2.3", "title": "My App"},
        "capabilities": {"approvals": True, "eventReplay": True},
    }
    assert script.calls[0]["url"] == "http://agent.test/v1/agent/commands"
    assert script.calls[0]["headers"]["content-type"] == "application/json"


def test_options_are_checked_and_ids_are_url_safe():
    script = Script(lambda request, body: pytest.fail("no request"))
    for options in ({"max_command_attempts": 0}, {"max_event_reconnect_attempts": -1}, {"retry_base_delay_ms": 1.5}):
        with pytest.raises(ValueError):
            AgentClient(BASE_URL, {"name": "a", "version": "1"}, **options)
        with pytest.raises(ValueError):
            AsyncAgentClient(BASE_URL, {"name": "a", "version": "1"}, **options)
    with pytest.raises(ValueError):
        AgentClient("http://x", {"name": "../bad", "version": "1"})
    with pytest.raises(ValueError):
        AgentClient("http://x", {"name": "ok", "version": "1", "title": ""})
    with pytest.raises(ValueError) as raised:
        AgentClient("http://user:hunter2@x/v1/agent", {"name": "ok", "version": "1"})
    assert "hunter2" not in str(raised.value)
    assert script.calls == []
    for _ in range(100):
        assert re.fullmatch(r"[A-Za-z0-9_-]{21}", nanoid())
