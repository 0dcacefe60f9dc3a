"""The SSE frame reader (docs/protocol.md §11.4) and its 4 MiB bound, the bound also end to end
against a server that never ends its frame."""

from __future__ import annotations

import asyncio
import tracemalloc

import pytest

from agent_runtime_client import MAX_FRAME_BYTES, AgentClient, AgentProtocolError, AsyncAgentClient
from agent_runtime_client.sse import SseDecoder
from support.endless_sse import GIVE_UP_AFTER, EndlessSseServer


def feed_all(decoder: SseDecoder, *chunks: bytes) -> list:
    frames = []
    for chunk in chunks:
        frames.extend(decoder.feed(chunk))
    return frames


def test_frames_split_at_lf_and_crlf_blank_lines_even_across_chunks():
    decoder = SseDecoder()
    assert feed_all(decoder, b"data: a\r\n", b"\r", b"\ndata: b\n", b"\n") == ["a", "b"]


def test_only_data_lines_count_and_heartbeats_are_skipped():
    decoder = SseDecoder()
    body = b": heartbeat\n\nid: 7\nevent: message\nretry: 10\ndata:   one\ndata:two\n\n"
    assert decoder.feed(body) == ["one\ntwo"]


def test_a_lone_cr_is_not_a_line_end_and_a_partial_frame_is_kept_until_completed():
    decoder = SseDecoder()
    assert decoder.feed(b"data: a\r\rdata: b") == []
    assert decoder.feed(b"\n\n") == ["a\r\rdata: b"]


def test_utf8_split_between_chunks_is_decoded_once_whole():
    encoded = "data: été 🎉\n\n".encode()
    decoder = SseDecoder()
    assert feed_all(decoder, *(encoded[i : i + 1] for i in range(len(encoded)))) == ["été 🎉"]


def test_the_bound_is_4_mib_of_utf8_without_a_delimiter():
    assert MAX_FRAME_BYTES == 4 * 1024 * 1024
    decoder = SseDecoder()
    decoder.feed(b"x" * MAX_FRAME_BYTES)
    with pytest.raises(AgentProtocolError) as raised:
        decoder.feed(b"x")
    assert (raised.value.code, raised.value.status, raised.value.retryable) == ("STREAM_FRAME_TOO_LARGE", 502, False)

    # "é" is two bytes of UTF-8 (one UTF-16 unit, the older rule's measure).
    accented = SseDecoder()
    accented.feed("é".encode() * (MAX_FRAME_BYTES // 2))
    with pytest.raises(AgentProtocolError):
        accented.feed(b"x")


def test_a_complete_frame_over_4_mib_of_utf8_is_refused_even_in_one_chunk():
    # 1.4 M CJK characters: 4.2 MB of UTF-8, fewer than 4 Mi UTF-16 units.
    with pytest.raises(AgentProtocolError) as raised:
        SseDecoder().feed(("data: " + "漢" * 1_400_000 + "\n\n").encode())
    assert (raised.value.code, raised.value.status, raised.value.retryable) == ("STREAM_FRAME_TOO_LARGE", 502, False)
    fits = b"data: " + b"y" * (MAX_FRAME_BYTES - 6) + b"\n\n"
    assert len(SseDecoder().feed(fits)) == 1


def test_complete_frames_free_their_share_of_the_bound():
    decoder = SseDecoder()
    frame = b"data: " + b"y" * (1024 * 1024) + b"\n\n"
    for _ in range(8):
        assert len(decoder.feed(frame)) == 1


@pytest.fixture
def endless():
    server = EndlessSseServer()
    yield server
    server.close()


def test_an_endless_frame_ends_the_stream_with_stream_frame_too_large(endless):
    client = AgentClient(endless.base_url, {"name": "bound-test", "version": "1"}, max_event_reconnect_attempts=0)
    tracemalloc.start()
    try:
        with pytest.raises(AgentProtocolError) as raised:
            next(client.events("session-1"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        client.close()
    assert (raised.value.code, raised.value.status, raised.value.retryable) == ("STREAM_FRAME_TOO_LARGE", 502, False)
    # Without the bound the client would read all 64 MiB and see a clean end instead.
    assert endless.finished.wait(10), "the client closed the connection"
    assert endless.sent < GIVE_UP_AFTER / 2
    assert peak < 24 * 1024 * 1024, f"buffered {peak} bytes"


def test_the_async_client_has_the_same_bound(endless):
    async def first_event():
        async with AsyncAgentClient(
            endless.base_url, {"name": "bound-test", "version": "1"}, max_event_reconnect_attempts=0
        ) as client:
            events = client.events("session-1")
            try:
                return await events.__anext__()
            finally:
                await events.aclose()

    with pytest.raises(AgentProtocolError) as raised:
        asyncio.run(first_event())
    assert raised.value.code == "STREAM_FRAME_TOO_LARGE"
    assert endless.finished.wait(10)
    assert endless.sent < GIVE_UP_AFTER / 2
