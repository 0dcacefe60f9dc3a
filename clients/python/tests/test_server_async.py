"""The asynchronous client against the real server: the same guarantees as the synchronous one
(lost responses, cut streams, stale cursors, session.closed), each test on one event loop."""

from __future__ import annotations

import asyncio
import json
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from agent_runtime_client import AgentProtocolError, AsyncAgentClient, PermissionDecision
from support.helpers import (
    CLIENT,
    finished_async,
    is_result_of,
    sequences_are_one_to_n,
    text,
    until_result_async,
)


def connect(base_url: str, token: str, **options) -> AsyncAgentClient:
    async def headers():
        return {"authorization": f"Bearer {token}"}

    return AsyncAgentClient(base_url, CLIENT, headers=headers, retry_base_delay_ms=10, **options)


def test_a_session_streams_its_answer_and_the_stream_ends_at_session_closed(server):
    async def scenario():
        async with connect(server.base_url, server.token) as client:
            session = await client.create_session({"purpose": "python-async-test"})
            submitted = await session.send("hello from asyncio")
            assert submitted.status == "started"
            seen = []
            async for event in session.events():
                seen.append(event)
                if is_result_of(event, submitted.request_id):
                    assert (await session.close()).status == "closed"
            return seen, submitted

    seen, submitted = asyncio.run(scenario())
    assert seen[-1].type == "session.closed"
    assert sequences_are_one_to_n(seen)
    assert "[demo] You said: hello from asyncio" in text(seen)


def test_concurrent_calls_share_one_initialize(server):
    async def scenario():
        posts = []

        async def record(request: httpx.Request) -> None:
            posts.append(json.loads(request.content)["type"])

        async with httpx.AsyncClient(event_hooks={"request": [record]}) as http:
            client = connect(server.base_url, server.token, http_client=http)
            listed = await asyncio.gather(*(client.list_sessions(limit=1) for _ in range(4)))
        return posts, listed

    posts, listed = asyncio.run(scenario())
    assert posts.count("initialize") == 1
    assert posts.count("session.list") == 4
    assert all(len(page.sessions) <= 1 for page in listed)


def test_a_lost_response_is_retried_with_its_command_id_and_replayed(server, proxy):
    async def scenario():
        async with connect(proxy.base_url, server.token) as client:
            await client.initialize()
            proxy.commands.clear()
            proxy.drop_response_of.add("session.create")
            session = await client.create_session({"attempt": "async-lost-response"})
            read = await session.read()
            return session, read

    session, read = asyncio.run(scenario())
    creates = [command for command in proxy.commands if command["type"] == "session.create"]
    assert len(creates) == 2
    assert creates[0]["commandId"] == creates[1]["commandId"]
    assert creates[1]["replayed"], "the retry got the stored result"
    assert read["session"]["metadata"] == {"attempt": "async-lost-response"}
    assert read["session"]["sessionId"] == session.session_id


def test_a_cut_stream_resumes_with_last_event_id_every_event_once(server, proxy):
    async def scenario():
        async with connect(proxy.base_url, server.token) as client:
            session = await client.create_session()
            submitted = await session.send("demo:deltas=300")
            proxy.streams.clear()
            proxy.cut_stream_after_bytes = 20_000
            states = []
            events = await until_result_async(session.events(on_connection=states.append), submitted.request_id)
            return events, states

    events, states = asyncio.run(scenario())
    assert sequences_are_one_to_n(events)
    assert "".join(f"delta-{i} " for i in range(1, 301)) in text(events)
    assert len(proxy.streams) >= 2
    resumed = proxy.streams[1]
    resumed_after = int(parse_qs(urlsplit(resumed["path"]).query)["after"][0])
    assert resumed_after > 0 and resumed["last_event_id"] == str(resumed_after)
    assert any(state.status == "reconnecting" and state.after == resumed_after for state in states)


def test_stale_cursor_is_surfaced_and_not_retried(start):
    small = start("[server]\nmax_events_per_session = 5\n")

    async def scenario():
        streams = []

        async def count(request: httpx.Request) -> None:
            if request.method == "GET":
                streams.append(request.url)

        async with httpx.AsyncClient(event_hooks={"request": [count]}) as http:
            client = connect(small.base_url, small.token, http_client=http, max_event_reconnect_attempts=5)
            session = await client.create_session()
            await session.send("demo:deltas=20")
            assert await finished_async(client, session.session_id) > 5
            streams.clear()
            cursor = {"protocolVersion": 1, "sessionId": session.session_id, "sequence": 1, "eventId": "retired"}
            events = session.events(after=cursor)
            try:
                with pytest.raises(AgentProtocolError) as raised:
                    await events.__anext__()
            finally:
                await events.aclose()
            return raised.value, streams

    error, streams = asyncio.run(scenario())
    assert (error.code, error.status, error.retryable) == ("STALE_CURSOR", 409, False)
    assert len(streams) == 1


def test_an_approval_is_resolved_through_the_async_session(server):
    async def scenario():
        async with connect(server.base_url, server.token) as client:
            session = await client.create_session()
            submitted = await session.send("this needs approval")
            seen = []
            async for event in session.events():
                seen.append(event)
                if event.type == "permission.requested":
                    await session.resolve_permission(
                        event.data["permissionRequestId"], PermissionDecision(approved=True, scope="once")
                    )
                if is_result_of(event, submitted.request_id):
                    await session.close()
            return seen

    seen = asyncio.run(scenario())
    assert seen[-1].type == "session.closed"
    assert any(event.type == "permission.requested" for event in seen)
    assert "approved" in text(seen)


def test_closing_the_async_iterator_closes_its_connection(server, proxy):
    async def scenario():
        async with connect(proxy.base_url, server.token) as client:
            session = await client.create_session()
            submitted = await session.send("demo:slow")
            events = session.events()
            async for event in events:
                if event.stream_type == "content":
                    break
            await events.aclose()
            for _ in range(100):
                if proxy.open_streams == 0:
                    break
                await asyncio.sleep(0.02)
            open_after_close = proxy.open_streams
            await session.abort()
            rest = await until_result_async(session.events(), submitted.request_id)
            return open_after_close, rest

    open_after_close, rest = asyncio.run(scenario())
    assert open_after_close == 0
    assert rest[-1].data["type"] == "result"
