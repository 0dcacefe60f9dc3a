#!/usr/bin/env bash
# Lists the processes the test suite left running: those started after the given start time (in
# clock ticks since boot, field 22 of /proc/PID/stat) that run one of this repository's binaries
# or a service a test starts (a Docker engine, a browser, Node.js, Prometheus, PostgreSQL from a
# test's own cluster). Kills them and fails when there are any.
#   started="$(cut -d' ' -f22 /proc/self/stat)"; ...; scripts/leftovers.sh "$started"
set -uo pipefail
cd "$(dirname "$0")/.."
started="${1:?usage: scripts/leftovers.sh <start time in clock ticks>}"
target="$(realpath "${CARGO_TARGET_DIR:-target}")"
services='^(dockerd|containerd|containerd-shim.*|docker-proxy|chromium|chrome|node|prometheus|postgres|bwrap)$'
leftovers=()
for stat in /proc/[0-9]*/stat; do
  pid="${stat#/proc/}"; pid="${pid%/stat}"
  [ "$pid" = "$$" ] && continue
  read -r line < "$stat" 2>/dev/null || continue
  fields="${line##*) }"
  # Field 22 overall is field 20 after the command name.
  start="$(echo "$fields" | cut -d' ' -f20)"
  [ "${start:-0}" -gt "$started" ] || continue
  exe="$(readlink "/proc/$pid/exe" 2>/dev/null)" || continue
  comm="$(cat "/proc/$pid/comm" 2>/dev/null)"
  if [[ "$exe" == "$target"/* ]] || [[ "$comm" =~ $services ]]; then
    leftovers+=("$pid")
  fi
done
if [ "${#leftovers[@]}" -eq 0 ]; then
  echo "no process of the suite is left running"
  exit 0
fi
echo "scripts/leftovers.sh: the suite left these processes running:" >&2
for pid in "${leftovers[@]}"; do
  echo "  $pid $(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | cut -c1-200) (cwd $(readlink "/proc/$pid/cwd" 2>/dev/null))" >&2
done
kill -KILL "${leftovers[@]}" 2>/dev/null
exit 1
