"""The synchronous client against the real server: lost responses, cut streams, stale cursors,
retry-after, approvals, and the end of a stream at session.closed."""

from __future__ import annotations

import contextlib
import json
import time
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from agent_runtime_client import AgentClient, AgentProtocolError, PermissionDecision
from support.helpers import CLIENT, finished, is_result_of, sequences_are_one_to_n, text, until_result


def connect(base_url: str, token: str, **options) -> AgentClient:
    return AgentClient(
        base_url,
        CLIENT,
        headers=lambda: {"authorization": f"Bearer {token}"},
        retry_base_delay_ms=10,
        **options,
    )


def test_a_session_streams_the_answer_to_its_input_and_the_stream_ends_at_session_closed(server):
    with connect(server.base_url, server.token) as client:
        session = client.create_session({"purpose": "python-client-test"})
        assert session.session.status == "active"
        assert session.session.metadata == {"purpose": "python-client-test"}
        submitted = session.send("hello from python")
        assert submitted.status == "started" and submitted.request_id

        events = session.events()
        seen = []
        for event in events:
            seen.append(event)
            if is_result_of(event, submitted.request_id):
                closed = session.close()
                assert closed.status == "closed"
        # The for loop ended by itself: the iterator stops after session.closed.
        assert seen[-1].type == "session.closed"
        assert seen[-1].data == {"reason": "user"}
        assert sequences_are_one_to_n(seen)
        assert "[demo] You said: hello from python" in text(seen)
        result = [event for event in seen if is_result_of(event, submitted.request_id)]
        assert result[0].data["subtype"] == "success"


def test_a_command_whose_response_was_lost_is_retried_with_its_command_id_and_returns_the_stored_result(
    server, proxy
):
    with connect(server.base_url, server.token) as direct, connect(proxy.base_url, server.token) as client:
        before = len(direct.list_sessions(limit=100).sessions)
        client.initialize()
        proxy.commands.clear()
        proxy.drop_response_of.add("session.create")

        session = client.create_session({"attempt": "lost-response"})

        creates = [command for command in proxy.commands if command["type"] == "session.create"]
        assert len(creates) == 2, "the first answer was lost, so the client asked again"
        assert creates[0]["commandId"] == creates[1]["commandId"]
        assert [command["replayed"] for command in creates] == [False, True], "the server replayed its result"
        sessions = direct.list_sessions(limit=100).sessions
        assert len(sessions) == before + 1, "the retry did not create a second session"
        assert session.session_id in {descriptor.session_id for descriptor in sessions}


def test_an_input_whose_response_was_lost_runs_once(server, proxy):
    with connect(proxy.base_url, server.token) as client:
        session = client.create_session()
        proxy.commands.clear()
        proxy.drop_response_of.add("input.submit")

        submitted = session.send("only once")

        submits = [command for command in proxy.commands if command["type"] == "input.submit"]
        assert len(submits) == 2 and submits[0]["commandId"] == submits[1]["commandId"]
        assert submits[1]["replayed"]
        until_result(session.events(), submitted.request_id)
        users = [message for message in session.read()["messages"] if message["role"] == "user"]
        assert len(users) == 1, "the retried input was accepted once"


def test_a_stream_cut_mid_flight_resumes_from_the_last_event_exactly_once_in_order(server, proxy):
    with connect(proxy.base_url, server.token) as client:
        session = client.create_session()
        submitted = session.send("demo:deltas=300")
        proxy.streams.clear()
        proxy.cut_stream_after_bytes = 20_000
        states = []

        events = until_result(session.events(on_connection=states.append), submitted.request_id)

        assert sequences_are_one_to_n(events)
        assert len({event.event_id for event in events}) == len(events)
        expected = "".join(f"delta-{i} " for i in range(1, 301))
        assert expected in text(events), "every delta arrived once and in order"
        assert len(proxy.streams) >= 2, "the cut connection was replaced"
        resumed = proxy.streams[1]
        resumed_after = int(parse_qs(urlsplit(resumed["path"]).query)["after"][0])
        assert resumed_after > 0
        assert resumed["last_event_id"] == str(resumed_after)
        assert any(state.status == "reconnecting" and state.after == resumed_after for state in states)
        assert [state.status for state in states[:2]] == ["connecting", "open"]


def test_stale_cursor_is_surfaced_and_not_retried(start):
    small = start("[server]\nmax_events_per_session = 5\n")
    streams = []
    counting = httpx.Client(event_hooks={"request": [lambda request: request.method == "GET" and streams.append(request)]})
    with connect(small.base_url, small.token, http_client=counting, max_event_reconnect_attempts=5) as client:
        session = client.create_session()
        session.send("demo:deltas=20")
        assert finished(client, session.session_id) > 5
        cursor = {"protocolVersion": 1, "sessionId": session.session_id, "sequence": 1, "eventId": "retired-event"}
        streams.clear()
        with pytest.raises(AgentProtocolError) as raised:
            next(session.events(after=cursor))
        assert (raised.value.code, raised.value.status, raised.value.retryable) == ("STALE_CURSOR", 409, False)
        assert len(streams) == 1
    counting.close()


def test_a_retryable_failure_is_retried_after_its_retry_after_ms_and_a_final_one_is_not(start):
    capped = start("[executor]\nmax_active_sessions_per_tenant = 1\n")
    posts = []

    def record(response: httpx.Response) -> None:
        command = json.loads(response.request.content)
        posts.append({"type": command["type"], "commandId": command["commandId"], "at": time.monotonic()})

    recording = httpx.Client(event_hooks={"response": [record]})
    with connect(capped.base_url, capped.token, http_client=recording, max_command_attempts=2) as client:
        client.create_session()
        with pytest.raises(AgentProtocolError) as raised:
            client.create_session()
        assert (raised.value.code, raised.value.retryable, raised.value.retry_after_ms) == ("OVERLOADED", True, 1000)
        creates = [post for post in posts if post["type"] == "session.create"]
        assert len(creates) == 3
        assert creates[1]["commandId"] == creates[2]["commandId"]
        assert creates[2]["at"] - creates[1]["at"] >= 0.9, "the retry waited for retryAfterMs"

        posts.clear()
        with pytest.raises(AgentProtocolError) as raised:
            client.resume_session("no-such-session")
        assert (raised.value.code, raised.value.status) == ("SESSION_NOT_FOUND", 404)
        assert len([post for post in posts if post["type"] == "session.resume"]) == 1
    recording.close()


def test_an_approval_is_requested_resolved_and_reported(server):
    with connect(server.base_url, server.token) as client:
        session = client.create_session()
        submitted = session.send("this needs approval")
        seen = []
        for event in session.events():
            seen.append(event)
            if event.type == "permission.requested":
                resolved = session.resolve_permission(
                    event.data["permissionRequestId"], PermissionDecision(approved=True, scope="once")
                )
                assert resolved.resolved and resolved.permission_request_id == event.data["permissionRequestId"]
            if is_result_of(event, submitted.request_id):
                session.close()
        assert seen[-1].type == "session.closed"
        assert any(event.type == "permission.requested" for event in seen)
        assert "approved" in text(seen)


def test_a_consumer_that_stops_iterating_closes_its_connection(server, proxy):
    with connect(proxy.base_url, server.token) as client:
        session = client.create_session()
        submitted = session.send("demo:slow")
        with contextlib.closing(session.events()) as events:
            for event in events:
                if event.stream_type == "content":
                    break
        for _ in range(100):
            if proxy.open_streams == 0:
                break
            time.sleep(0.02)
        assert proxy.open_streams == 0, "closing the iterator closed the connection"
        assert session.abort().aborted
        rest = until_result(session.events(), submitted.request_id)
        assert rest[-1].data["type"] == "result"


def test_a_stream_resumes_after_a_cursor_taken_from_an_event(server):
    with connect(server.base_url, server.token) as client:
        session = client.create_session()
        submitted = session.send("demo:deltas=5")
        first = until_result(session.events(), submitted.request_id)
        assert len(first) > 3
        again = session.send("second")
        rest = until_result(session.events(after=first[2].cursor()), again.request_id)
        assert rest[0].sequence == 4
        assert [event.event_id for event in rest[: len(first) - 3]] == [event.event_id for event in first[3:]]


def test_session_helpers_list_fork_resume_read_and_abort(server):
    with connect(server.base_url, server.token) as client:
        session = client.create_session({"helper": "source"})
        submitted = session.send("hello fork")
        until_result(session.events(), submitted.request_id)

        read = session.read()
        assert set(read) == {"session", "messages", "pendingInputs", "loaded", "recovery", "historyProgress"}
        assert read["historyProgress"]["state"] in {"in_progress", "complete", "failed"}
        assert read["session"]["sessionId"] == session.session_id

        forked = session.fork(metadata={"helper": "fork"})
        assert forked.session_id != session.session_id
        assert forked.session.metadata == {"helper": "fork"}
        assert [m["content"] for m in forked.read()["messages"]] == [m["content"] for m in read["messages"]]

        page = client.list_sessions(limit=1)
        assert len(page.sessions) == 1 and page.next_cursor
        next_page = client.list_sessions(limit=1, cursor=page.next_cursor)
        assert next_page.sessions[0].session_id != page.sessions[0].session_id

        assert client.resume_session(session.session_id).session_id == session.session_id
        aborted = client.abort_request(session.session_id)
        assert aborted.aborted and aborted.session_id == session.session_id

        session.close()
        with pytest.raises(AgentProtocolError) as raised:
            session.send("after close")
        assert (raised.value.code, raised.value.status) == ("SESSION_NOT_FOUND", 404)


def test_a_wrong_token_is_unauthenticated_and_never_echoed(server):
    wrong = "wrong-token-that-must-not-leak-42"
    with connect(server.base_url, wrong) as client:
        with pytest.raises(AgentProtocolError) as raised:
            client.create_session()
    assert (raised.value.code, raised.value.status, raised.value.retryable) == ("UNAUTHENTICATED", 401, False)
    assert wrong not in str(raised.value) and wrong not in repr(raised.value)
