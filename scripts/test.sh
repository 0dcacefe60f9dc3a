#!/usr/bin/env bash
# Runs every test of the workspace on a fresh machine of this kind (Debian, Rust, root).
# It installs or starts whatever the tests need, so CI and a developer run exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

if ! command -v cargo-nextest >/dev/null 2>&1; then
  cargo install --locked cargo-nextest
fi

# The Bash sandbox tests run real commands inside bubblewrap.
if ! command -v bwrap >/dev/null 2>&1; then
  if ! apt-get install -y bubblewrap; then
    apt-get update
    apt-get install -y bubblewrap
  fi
fi

cargo nextest run --workspace --all-targets --no-fail-fast
