"""The SSE frame reader of docs/protocol.md §11.4: UTF-8 decoded across chunks, frames split at a
blank line (LF or CRLF; a lone CR is not a line end), only `data:` lines count, heartbeats
skipped, a partial frame at the end dropped, and the newest reference client's bound: 4 MiB of
UTF-8 per complete frame and for the text buffered without a frame's end."""

from __future__ import annotations

import codecs
import re
from typing import List

from .errors import AgentProtocolError

MAX_FRAME_BYTES = 4 * 1024 * 1024

_BLANK_LINE = re.compile(r"\r?\n\r?\n")
_LINE_END = re.compile(r"\r?\n")


def _utf8_bytes(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def frame_data(frame: str) -> str:
    """The joined `data:` payload of one frame; '' for frames without data (comments, heartbeats)."""
    lines = [line[5:].lstrip() for line in _LINE_END.split(frame) if line.startswith("data:")]
    return "\n".join(lines)


def frame_too_large() -> AgentProtocolError:
    return AgentProtocolError(
        code="STREAM_FRAME_TOO_LARGE",
        message="Agent event stream frame exceeds 4 MiB",
        status=502,
        retryable=False,
    )


class SseDecoder:
    """Incremental: `feed` a chunk of bytes, get the data of every frame it completed. Dropping
    the decoder drops a partial frame."""

    def __init__(self, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        self._max_bytes = max_frame_bytes
        # Invalid bytes become U+FFFD, as TextDecoder does.
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._buffer = ""
        self._bytes = 0
        self._scanned = 0

    def feed(self, chunk: bytes) -> List[str]:
        text = self._decoder.decode(chunk)
        self._buffer += text
        self._bytes += _utf8_bytes(text)
        # A delimiter can straddle the previous scan's end by up to 3 characters ("\r\n\r").
        position = max(0, self._scanned - 3)
        start = 0
        frames: List[str] = []
        while True:
            match = _BLANK_LINE.search(self._buffer, position)
            if match is None:
                break
            frame = self._buffer[start : match.start()]
            if _utf8_bytes(frame) > self._max_bytes:
                raise frame_too_large()
            data = frame_data(frame)
            if data:
                frames.append(data)
            start = position = match.end()
        if start:
            self._bytes -= _utf8_bytes(self._buffer[:start])
            self._buffer = self._buffer[start:]
        self._scanned = len(self._buffer)
        if self._bytes > self._max_bytes:
            raise frame_too_large()
        return frames
