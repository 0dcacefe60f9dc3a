"""Fixtures: one real server (demo provider, slow deltas every 20 ms) and a fault proxy in front
of it, shared by the whole run. A missing AGENT_RUNTIME_BIN fails the tests; it never skips them."""

from __future__ import annotations

import pytest

from support.proxy import FaultProxy
from support.server import RunningServer, start_server

DEMO_CONFIG = "[executor]\ndemo_slow_delta_interval_ms = 20\n"


def launch(config_toml: str) -> RunningServer:
    try:
        return start_server(config_toml)
    except RuntimeError as error:
        problem = str(error)
    pytest.fail(f"cannot start the agent-runtime server: {problem}", pytrace=False)


@pytest.fixture(scope="session")
def server():
    running = launch(DEMO_CONFIG)
    yield running
    running.stop()


@pytest.fixture(scope="session")
def proxy(server):
    fault_proxy = FaultProxy(server.base_url)
    yield fault_proxy
    fault_proxy.close()


@pytest.fixture
def start():
    """Starts extra servers with their own configuration; stops them after the test."""
    started = []

    def run(config_toml: str) -> RunningServer:
        running = launch(config_toml)
        started.append(running)
        return running

    yield run
    for running in started:
        running.stop()
