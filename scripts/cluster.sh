#!/usr/bin/env bash
# Starts the topology of compose.yaml as plain processes on this machine (no Docker engine needed):
# a private PostgreSQL 15, a migration, two executors and two gateways. Ctrl-C stops everything.
#   scripts/cluster.sh            # gateways on http://127.0.0.1:8787 and :8788
set -euo pipefail
cd "$(dirname "$0")/.."

# The release binary of command 1 of the README when it is there and newer than every source
# file; built otherwise (AGENT_RUNTIME_BIN names another one).
BIN="${AGENT_RUNTIME_BIN:-$PWD/target/release/agent-runtime}"
if [ -z "${AGENT_RUNTIME_BIN:-}" ] && { [ ! -x "$BIN" ] || [ -n "$(find . -path ./target -prune -o \
    \( -name '*.rs' -o -name '*.sql' -o -name 'Cargo.*' -o -path './gateway/console/*' \) \
    -newer "$BIN" -print -quit)" ]; }; then
  cargo build --release -p agent-runtime-cli --bin agent-runtime
fi
WORK="$(mktemp -d -t agent-runtime-cluster-XXXXXX)"
export AGENT_RUNTIME_CLUSTER_SECRET="${AGENT_RUNTIME_CLUSTER_SECRET:-$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')}"
TOKEN="${AGENT_RUNTIME_TOKEN:-dev-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')}"
cat > "$WORK/gateway.toml" <<TOML
[[auth.tokens]]
sha256 = "$(printf %s "$TOKEN" | sha256sum | cut -d' ' -f1)"
tenant = "dev"
subject = "developer"
scopes = ["session:admin"]
TOML

run_cluster() {
  # Stop the processes (gracefully: executors drain) before PostgreSQL goes away.
  trap 'kill -TERM $(jobs -p) 2>/dev/null; wait' EXIT INT TERM
  export AGENT_RUNTIME_DATABASE_URL="$AGENT_RUNTIME_TEST_DATABASE_URL"
  "$BIN" migrate
  for n in 1 2; do
    "$BIN" executor --listen "127.0.0.1:$((7000 + n))" --worker-id "executor-$n" &
  done
  for n in 0 1; do
    "$BIN" gateway --listen "127.0.0.1:$((8787 + n))" --config "$WORK/gateway.toml" &
  done
  sleep 1
  echo
  echo "gateways: http://127.0.0.1:8787/v1/agent  http://127.0.0.1:8788/v1/agent"
  echo "token:    $TOKEN   (authorization: Bearer $TOKEN)"
  echo "Ctrl-C stops the cluster."
  wait
}
export -f run_cluster
export BIN WORK TOKEN
trap 'rm -rf "$WORK"' EXIT
scripts/with-postgres.sh bash -c run_cluster
