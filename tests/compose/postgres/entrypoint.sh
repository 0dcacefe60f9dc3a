#!/bin/sh
# The official image's start-up, for what compose.yaml uses of it: POSTGRES_USER,
# POSTGRES_PASSWORD, POSTGRES_DB, password authentication over the network.
set -eu
if [ "$(id -u)" = 0 ]; then
  mkdir -p "$PGDATA" /var/run/postgresql
  chown -R postgres:postgres "$PGDATA" /var/run/postgresql
  chmod 700 "$PGDATA"
  exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi
user="${POSTGRES_USER:-postgres}"
database="${POSTGRES_DB:-$user}"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  password_file="$(mktemp)"
  printf '%s' "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD is required}" > "$password_file"
  initdb -D "$PGDATA" -U "$user" --pwfile="$password_file" \
    --auth-local=trust --auth-host=scram-sha-256 >/dev/null
  rm -f "$password_file"
  echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
  pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
  if [ "$database" != "postgres" ]; then
    psql -v ON_ERROR_STOP=1 -U "$user" -d postgres -c "CREATE DATABASE \"$database\"" >/dev/null
  fi
  pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
fi
exec postgres -D "$PGDATA" -c listen_addresses='*'
