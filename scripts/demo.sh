#!/usr/bin/env bash
# The main job: a throwaway node and pod namespace; the pod gets a bridged interface with an
# address from host-local; we show what it got, ping its gateway, tear down, and show that
# nothing is left.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
  echo "scripts/demo.sh runs as root: it creates network namespaces" >&2
  exit 1
fi
scripts/deps.sh
cargo xtask demo
