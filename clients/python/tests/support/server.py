"""Starts the real `agent-runtime serve` binary (path in AGENT_RUNTIME_BIN) on a free port with a
private data directory, and reads the URL and development token it prints."""

from __future__ import annotations

import os
import queue
import re
import shutil
import signal
import subprocess
import tempfile
import threading
from dataclasses import dataclass

_SERVING = re.compile(r"^agent-runtime is serving on (\S+)")
_TOKEN = re.compile(r"^\s*token:\s*(\S+)")


@dataclass
class RunningServer:
    url: str
    token: str
    process: subprocess.Popen
    directory: str

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1/agent"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)


def binary() -> str:
    path = os.environ.get("AGENT_RUNTIME_BIN")
    if not path:
        raise RuntimeError("AGENT_RUNTIME_BIN must name the agent-runtime binary (cargo builds it as target/*/agent-runtime)")
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"AGENT_RUNTIME_BIN={path} is not an executable file")
    return path


def start_server(config_toml: str = "") -> RunningServer:
    directory = tempfile.mkdtemp(prefix="agent-client-py-test-")
    config = os.path.join(directory, "config.toml")
    with open(config, "w", encoding="utf-8") as file:
        file.write(config_toml)
    process = subprocess.Popen(
        [binary(), "serve", "--listen", "127.0.0.1:0", "--data-dir", os.path.join(directory, "data"), "--config", config],
        env={**os.environ, "AGENT_RUNTIME_LOG": "warn"},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
    )
    lines: "queue.Queue[str | None]" = queue.Queue()

    def drain() -> None:
        # Keeps reading to the end so the server never blocks on a full pipe.
        for line in process.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=drain, daemon=True).start()
    url = token = None
    try:
        while url is None or token is None:
            line = lines.get(timeout=60)
            if line is None:
                raise RuntimeError(f"the server exited with {process.wait()} before printing its URL and token")
            served = _SERVING.match(line)
            if served:
                url = served.group(1)
            printed = _TOKEN.match(line)
            if printed:
                token = printed.group(1)
    except BaseException:
        process.kill()
        process.wait()
        shutil.rmtree(directory, ignore_errors=True)
        raise
    return RunningServer(url=url, token=token, process=process, directory=directory)
