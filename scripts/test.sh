#!/usr/bin/env bash
# The project's one test command: formatting, lints, and every test suite.
# Tests create network namespaces and run plugins in them, so this runs as root.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" -ne 0 ]; then
  echo "scripts/test.sh runs as root: the tests create network namespaces" >&2
  exit 1
fi
scripts/deps.sh

cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
cargo test --workspace --no-fail-fast
