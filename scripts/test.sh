#!/usr/bin/env bash
# Runs every test of the workspace on a fresh machine of this kind (Debian, Rust, root).
# It installs or starts whatever the tests need, so CI and a developer run exactly this:
#   1. one private PostgreSQL 15 cluster (temporary directory, free loopback port, trust auth),
#      exported as AGENT_RUNTIME_TEST_DATABASE_URL (each test creates its own database on it)
#      and stopped on exit;
#   2. `cargo fmt --check`, `cargo clippy -D warnings`, then every test of the workspace (the web
#      console's in headless Chromium: see tests/browser);
#   3. the end-to-end HTTP suite of the single-process server again, on PostgreSQL;
#   4. compose.yaml on a private Docker engine (cli/tests/compose.rs);
#   5. a check that nothing the suite started is still running (scripts/leftovers.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
# A clean build gains nothing from incremental state, and it costs gigabytes of disk.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

# compose.yaml runs for real (cli/tests/compose.rs): Debian's Docker engine (the test starts a
# private dockerd), its compose CLI (1.29: no registry here offers the v2 plugin), and mmdebstrap,
# which makes the base image from Debian's packages (scripts/compose-images.sh).
if ! command -v docker-compose >/dev/null 2>&1 || ! command -v dockerd >/dev/null 2>&1 \
  || [ ! -x /usr/bin/docker ] || ! command -v mmdebstrap >/dev/null 2>&1; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    docker-compose docker.io mmdebstrap >/dev/null
fi

# The Kubernetes manifests are read as YAML with PyYAML (cli/tests/docs/kubernetes.rs).
if ! python3 -c 'import yaml' >/dev/null 2>&1; then
  if ! python3 -m pip install --quiet pyyaml >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-yaml >/dev/null
  fi
fi

# ... and validated offline against the Kubernetes 1.31 and 1.37 API schemas by
# `kubernetes-validate`, which bundles them (tests/kubernetes/validate.py). Only PyPI has it;
# pinned, since a newer release drops the oldest schemas.
if [ "$(python3 -c 'import kubernetes_validate; print(kubernetes_validate.__version__)' 2>/dev/null)" != "1.37.0" ]; then
  python3 -m pip install --quiet kubernetes-validate==1.37.0 >/dev/null
fi

# Independent checkers written in Python, from PyPI or else Debian's packages (the tests find either
# Python): JWTs minted by PyJWT on `cryptography` (tests/jwt/mint.py), and real answers validated
# against the published schemas by `jsonschema` and `openapi-spec-validator` (tests/schema/validate.py),
# and both metrics formats parsed by the Prometheus project's `prometheus_client` (tests/metrics/parse.py).
if ! python3 -c 'import jwt, cryptography, jsonschema, openapi_spec_validator, prometheus_client' >/dev/null 2>&1; then
  if ! python3 -m pip install --quiet pyjwt cryptography jsonschema openapi-spec-validator prometheus-client >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-jwt \
      python3-cryptography python3-jsonschema python3-openapi-spec-validator python3-prometheus-client >/dev/null
  fi
fi

# The independent OTLP receiver the trace tests export to (tests/otlp/receiver.py) decodes with the
# OpenTelemetry project's own protobuf classes, which only PyPI has (Debian does not package them).
if ! python3 -c 'import opentelemetry.proto.collector.trace.v1.trace_service_pb2' >/dev/null 2>&1; then
  python3 -m pip install --quiet opentelemetry-proto protobuf >/dev/null
fi

# The Python client's tests (clients/python/tests, run by cli/tests/python_client.rs) need httpx
# and pytest for the `python3` on PATH: from PyPI first, since on this kind of machine that is a
# pyenv Python which Debian's packages (the fallback, for /usr/bin/python3) do not reach.
if ! python3 -c 'import httpx, pytest' >/dev/null 2>&1; then
  if ! python3 -m pip install --quiet httpx pytest >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-httpx python3-pytest >/dev/null
  fi
fi

# Webhook signatures are checked by the Standard Webhooks project's own Python library
# (webhooks/src/signature/interop.py); only PyPI has it.
if ! python3 -c 'import standardwebhooks' >/dev/null 2>&1; then
  python3 -m pip install --quiet standardwebhooks >/dev/null
fi

# AG-UI events are validated by the AG-UI project's own Python models (tests/agui/validate.py),
# and A2A is driven by the A2A project's own Python client; only PyPI has them. Pinned: the
# protocol versions this server speaks.
if [ "$(python3 -c 'import importlib.metadata as m; print(m.version("ag-ui-protocol"))' 2>/dev/null)" != "1.0.0" ]; then
  python3 -m pip install --quiet ag-ui-protocol==1.0.0 >/dev/null
fi
if [ "$(python3 -c 'import importlib.metadata as m; print(m.version("a2a-sdk"))' 2>/dev/null)" != "1.3.0" ]; then
  python3 -m pip install --quiet a2a-sdk==1.3.0 >/dev/null
fi

# The alert rules, the scrape configuration and the dashboard are checked with Prometheus itself
# (promtool, and a real server scraping the processes: cli/tests/deploy/prometheus.rs).
if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi

if ! command -v cargo-nextest >/dev/null 2>&1; then
  cargo install --locked cargo-nextest
fi

# The Bash sandbox tests run real commands inside bubblewrap.
if ! command -v bwrap >/dev/null 2>&1; then
  if ! apt-get install -y -qq bubblewrap >/dev/null; then
    apt-get update -qq
    apt-get install -y -qq bubblewrap >/dev/null
  fi
fi

# The browser client's tests and the console's browser test run on Node.js 20 or newer (this kind
# of machine has 20; playwright-core refuses older ones). Debian's package is the fallback.
if ! command -v node >/dev/null 2>&1; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs >/dev/null
fi
node_major="$(node -p 'process.versions.node.split(".")[0]')"
if [ "$node_major" -lt 20 ]; then
  echo "scripts/test.sh: Node.js $(node --version) is too old: the browser tests need 20 or newer" >&2
  exit 1
fi

# The web console's browser test drives Debian's chromium with playwright-core (tests/browser).
if [ ! -x /usr/bin/chromium ]; then
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  fi
fi
if ! command -v npm >/dev/null 2>&1; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null
fi
npm ci --prefix tests/browser --no-audit --no-fund --loglevel=error
# The MCP tests start a real third-party MCP server (tests/server/tools/mcp.rs), pinned by its lockfile.
npm ci --prefix tests/mcp-server --no-audit --no-fund --loglevel=error
# The official AG-UI client (tests/agui, run by cli/tests/agui.rs), pinned by its lockfile.
npm ci --prefix tests/agui --no-audit --no-fund --loglevel=error

# Formatting and lints are part of passing: the same checks every push makes.
cargo fmt --all --check
cargo clippy --workspace --all-targets --locked -- -D warnings

# What the suite starts must end with it: processes started from here on that are still alive
# at the end are reported (and killed), and fail the run.
started="$(cut -d' ' -f22 /proc/self/stat)"

# Everything below runs against one private PostgreSQL cluster (see scripts/with-postgres.sh).
status=0
scripts/with-postgres.sh bash -c '
  status=0
  cargo nextest run --workspace --all-targets --no-fail-fast \
    -E "not binary_id(agent-runtime-cli::compose)" || status=$?
  # The same end-to-end HTTP suite, with every server on a fresh PostgreSQL database.
  # (Same build as above: only a filter, so nothing is compiled again.)
  AGENT_RUNTIME_TEST_STORE=postgres \
    cargo nextest run --workspace --all-targets --no-fail-fast \
      -E "package(agent-runtime-e2e) & test(/^server::/)" || status=$?
  exit "$status"
' || status=$?
# compose.yaml on a real Docker engine, alone: it publishes fixed ports and loads both cores.
# (The whole workspace with a filter: the same build as above, nothing compiled again.)
cargo nextest run --workspace --all-targets --no-fail-fast \
  -E "binary_id(agent-runtime-cli::compose)" || status=$?
scripts/leftovers.sh "$started" || status=$?
exit "$status"
