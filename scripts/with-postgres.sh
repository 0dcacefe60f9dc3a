#!/usr/bin/env bash
# Runs a command with a private PostgreSQL 15 cluster: a temporary directory, a free loopback
# port, trust authentication, stopped and deleted when the command ends. The command sees
# AGENT_RUNTIME_TEST_DATABASE_URL (the `postgres` database as superuser); tests create their own
# databases on it. Example: scripts/with-postgres.sh cargo nextest run -p agent-runtime-store
set -euo pipefail

PG_BIN_DIR="${PG_BIN_DIR:-/usr/lib/postgresql/15/bin}"
if [ ! -x "$PG_BIN_DIR/initdb" ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql-15 >/dev/null
fi
export PG_BIN_DIR

# PostgreSQL refuses to run as root: run its binaries as the `postgres` user then.
as_pg() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

PG_ROOT="$(mktemp -d -t agent-runtime-test-pg-XXXXXX)"
# A free loopback port: a random one nobody answers on (pg_ctl fails loudly on a clash).
free_port() {
  local port
  while :; do
    port=$((20000 + RANDOM % 40000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then echo "$port"; return; fi
  done
}
PG_PORT="$(free_port)"
[ "$(id -u)" = 0 ] && chown postgres:postgres "$PG_ROOT"
stop_postgres() {
  as_pg "$PG_BIN_DIR/pg_ctl" -D "$PG_ROOT/data" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$PG_ROOT"
}
trap stop_postgres EXIT

as_pg "$PG_BIN_DIR/initdb" -U postgres --auth=trust -E UTF8 --locale=C -N -D "$PG_ROOT/data" >/dev/null
as_pg "$PG_BIN_DIR/pg_ctl" -D "$PG_ROOT/data" -l "$PG_ROOT/server.log" -w -t 60 \
  -o "-c listen_addresses=127.0.0.1 -p $PG_PORT -k $PG_ROOT -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=500 -c max_wal_size=256MB" \
  start >/dev/null
export AGENT_RUNTIME_TEST_DATABASE_URL="postgres://postgres@127.0.0.1:$PG_PORT/postgres"
echo "test PostgreSQL 15 on 127.0.0.1:$PG_PORT"

"$@"
