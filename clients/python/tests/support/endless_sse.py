"""A fake agent server whose event stream sends `data: ` and then an endless line: only the
client's 4 MiB bound can end it. It answers `initialize`, and counts what it sent."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .scripted import INITIALIZED

CHUNK = b"x" * (1024 * 1024)
# The stream gives up after this much; a client without a bound would then see a clean end.
GIVE_UP_AFTER = 64 * 1024 * 1024


class EndlessSseServer:
    def __init__(self) -> None:
        self.sent = 0
        self.finished = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                command = json.loads(self.rfile.read(int(self.headers["content-length"])))
                body = json.dumps(
                    {"protocolVersion": 1, "commandId": command["commandId"], "ok": True, "data": INITIALIZED}
                ).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.end_headers()
                try:
                    self.wfile.write(b"data: ")
                    while server.sent < GIVE_UP_AFTER:
                        self.wfile.write(CHUNK)
                        server.sent += len(CHUNK)
                except OSError:
                    pass
                finally:
                    server.finished.set()

        class Quiet(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request, client_address) -> None:
                pass

        self._http = Quiet(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._http.serve_forever, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self._http.server_address[1]}/v1/agent"

    def close(self) -> None:
        self._http.shutdown()
        self._http.server_close()
