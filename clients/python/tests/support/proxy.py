"""An HTTP proxy in front of the real server that can lose a command's response after the server
handled it, or cut an event stream mid-flight: the failures a client must survive."""

from __future__ import annotations

import http.client
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import List, Optional, Set
from urllib.parse import urlsplit

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "te", "trailer", "upgrade"}


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        # A connection this proxy cut on purpose is not worth a traceback.
        pass


class FaultProxy:
    def __init__(self, upstream_base_url: str) -> None:
        target = urlsplit(upstream_base_url)
        self.upstream = (target.hostname, target.port)
        self.lock = threading.Lock()
        # Command types whose next response is dropped (the server still handles the command).
        self.drop_response_of: Set[str] = set()
        # After this many body bytes of the next event stream, the connection is cut.
        self.cut_stream_after_bytes: Optional[int] = None
        # Every command: {"commandId", "type", "status", "replayed"} (replayed: the server's
        # `idempotent-replayed` header).
        self.commands: List[dict] = []
        # Every event-stream request: {"path", "last_event_id"}.
        self.streams: List[dict] = []
        # Event-stream connections currently open between a client and this proxy.
        self.open_streams = 0
        self._server = _QuietServer(("127.0.0.1", 0), self._handler())
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}{target.path}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler(self):
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                self._forward()

            def do_POST(self) -> None:
                self._forward()

            def _forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
                upstream = http.client.HTTPConnection(*proxy.upstream, timeout=120)
                try:
                    upstream.request(self.command, self.path, body=body or None, headers=headers)
                    response = upstream.getresponse()
                    if self.command == "POST" and self.path.endswith("/commands"):
                        self._relay_command(json.loads(body), response)
                    else:
                        self._relay_stream(response, upstream.sock)
                finally:
                    upstream.close()

            def _relay_command(self, command: dict, response: http.client.HTTPResponse) -> None:
                answer = response.read()
                with proxy.lock:
                    proxy.commands.append(
                        {
                            "commandId": command.get("commandId"),
                            "type": command.get("type"),
                            "status": response.status,
                            "replayed": response.getheader("idempotent-replayed") == "true",
                        }
                    )
                    drop = command.get("type") in proxy.drop_response_of
                    proxy.drop_response_of.discard(command.get("type"))
                if drop:
                    # The command completed; the client never hears of it.
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self.send_response_only(response.status)
                for key, value in response.getheaders():
                    if key.lower() not in _HOP_BY_HOP:
                        self.send_header(key, value)
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def _relay_stream(self, response: http.client.HTTPResponse, upstream: socket.socket) -> None:
                threading.Thread(target=self._watch_client, args=(upstream,), daemon=True).start()
                with proxy.lock:
                    proxy.streams.append({"path": self.path, "last_event_id": self.headers.get("last-event-id")})
                    proxy.open_streams += 1
                    cut_after = proxy.cut_stream_after_bytes
                    proxy.cut_stream_after_bytes = None
                self.close_connection = True
                try:
                    self.send_response_only(response.status)
                    for key, value in response.getheaders():
                        if key.lower() not in _HOP_BY_HOP:
                            self.send_header(key, value)
                    self.send_header("transfer-encoding", "chunked")
                    self.send_header("connection", "close")
                    self.end_headers()
                    sent = 0
                    while True:
                        chunk = response.read1(65536)
                        if not chunk:
                            self.wfile.write(b"0\r\n\r\n")
                            return
                        if cut_after is not None and sent + len(chunk) >= cut_after:
                            part = chunk[: cut_after - sent]
                            self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                            self.wfile.flush()
                            # Mid-body, most likely mid-frame: the client must resume from its
                            # last complete event.
                            self.connection.shutdown(socket.SHUT_RDWR)
                            return
                        sent += len(chunk)
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        self.wfile.flush()
                except OSError:
                    return
                finally:
                    with proxy.lock:
                        proxy.open_streams -= 1

            def _watch_client(self, upstream: socket.socket) -> None:
                # A client that hangs up is noticed at once (not at the next write), and the
                # server then sees its stream closed too.
                try:
                    while self.connection.recv(4096):
                        pass
                except OSError:
                    pass
                try:
                    upstream.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

        return Handler
