"""A webhook receiver built on the Standard Webhooks reference library (PyPI `standardwebhooks`).

Usage: receiver.py LOG SECRET. Listens on a free loopback port and prints it. Every POST to
/hook is verified with `standardwebhooks.Webhook(SECRET).verify`; what arrives is appended to LOG
as one JSON line ({"id", "verified", "mode", "type", "data"}), flushed before answering. How it answers depends on its mode, set
with POST /mode and a body of:
  accept  - 204 after a valid signature, 401 after an invalid one
  slow    - the same, after 0.2 s
  refuse  - 503
  hang    - keeps the request open (never answers)
"""

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks.webhooks import Webhook

LOG, SECRET = sys.argv[1], sys.argv[2]
state = {"mode": "accept"}
lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        if self.path == "/mode":
            state["mode"] = body.decode().strip()
            self.send_response(204)
            self.end_headers()
            return
        headers = {name.lower(): value for name, value in self.headers.items()}
        try:
            payload = Webhook(SECRET).verify(body, headers)
            verified = True
        except Exception:  # WebhookVerificationError, or a malformed header
            payload, verified = json.loads(body), False
        mode = state["mode"]
        if mode == "slow":
            time.sleep(0.2)
        with lock, open(LOG, "a") as log:
            line = {"id": headers.get("webhook-id"), "verified": verified, "mode": mode,
                    "type": payload.get("type"), "data": payload.get("data")}
            log.write(json.dumps(line) + "\n")
        if mode == "hang":
            time.sleep(3600)
            return
        status = 503 if mode == "refuse" else (204 if verified else 401)  # accept, slow
        self.send_response(status)
        self.end_headers()


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
print(server.server_address[1], flush=True)
server.serve_forever()
