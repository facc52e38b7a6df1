#!/usr/bin/env bash
# The main job: `multus try` on the bundled examples (bridge, macvlan, ipvlan when the kernel
# has it, static, dhcp, whereabouts). Each pod gets a throwaway node of its own (network namespaces); we show
# what the pod got, check each network, tear it down, and show that nothing is left.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
  echo "scripts/demo.sh runs as root: it creates network namespaces" >&2
  exit 1
fi
scripts/deps.sh demo
plugins=$(scripts/build.sh)
exec "$(dirname "$plugins")/multus" try "$@"
