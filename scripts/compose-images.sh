#!/usr/bin/env bash
# Builds the images compose.yaml runs, without Docker Hub (CI, offline machines): a Debian
# bookworm base made from Debian's packages by mmdebstrap, PostgreSQL 15 and Prometheus from
# Debian's packages on it (tests/compose/), and the runtime image from the Dockerfile's
# `prebuilt` stage with a binary built outside Docker. Prints the variables that point
# compose.yaml at them.
#   scripts/compose-images.sh target/debug/agent-runtime
# Needs DOCKER_HOST (a running engine), mmdebstrap and Debian's docker client (/usr/bin/docker:
# its BuildKit skips the Dockerfile's cargo stage).
set -euo pipefail
cd "$(dirname "$0")/.."
binary="${1:?usage: scripts/compose-images.sh <agent-runtime binary>}"
docker_cli="${DOCKER_CLI:-/usr/bin/docker}"
base="agent-runtime-ci/bookworm:base"
tag="${COMPOSE_IMAGE_TAG:-ci}"

if ! "$docker_cli" image inspect "$base" >/dev/null 2>&1; then
  rootfs="$(mktemp -t agent-runtime-base-XXXXXX.tar)"
  trap 'rm -f "$rootfs"' EXIT
  mmdebstrap --quiet --variant=minbase --include=ca-certificates bookworm "$rootfs"
  "$docker_cli" import "$rootfs" "$base" >/dev/null
fi

build() {
  DOCKER_BUILDKIT=1 "$docker_cli" build --quiet --build-arg "BASE=$base" "$@" >/dev/null
}
build -t "agent-runtime-ci/postgres:$tag" tests/compose/postgres
build -t "agent-runtime-ci/prometheus:$tag" tests/compose/prometheus
context="$(mktemp -d -t agent-runtime-image-XXXXXX)"
cp "$binary" "$context/agent-runtime"
build -t "agent-runtime-ci/runtime:$tag" --target prebuilt \
  --build-arg "RUNTIME_BASE=$base" -f Dockerfile "$context"
rm -rf "$context"

echo "AGENT_RUNTIME_IMAGE=agent-runtime-ci/runtime:$tag"
echo "POSTGRES_IMAGE=agent-runtime-ci/postgres:$tag"
echo "PROMETHEUS_IMAGE=agent-runtime-ci/prometheus:$tag"
