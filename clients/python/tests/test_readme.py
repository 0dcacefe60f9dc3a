"""The examples of clients/python/README.md, run as written against the real server: a user who
copies them gets a streamed answer."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def blocks() -> list:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)


def test_the_readme_has_a_sync_and_an_async_example():
    examples = blocks()
    assert len(examples) == 2
    assert "AgentClient(" in examples[0] and "AsyncAgentClient(" in examples[1]


@pytest.mark.parametrize("index", [0, 1], ids=["sync", "async"])
def test_a_readme_example_streams_an_answer(server, index):
    source = Path(__file__).resolve().parents[1] / "src"
    env = {
        **os.environ,
        "AGENT_RUNTIME_URL": server.base_url,
        "AGENT_RUNTIME_TOKEN": server.token,
        "PYTHONPATH": str(source),
    }
    run = subprocess.run(
        [sys.executable, "-c", blocks()[index]], env=env, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    assert "[demo] You said: hello" in run.stdout, run.stdout
