#!/usr/bin/env bash
# Installs the Debian packages the tests, the demo and the benchmarks use, when missing.
set -euo pipefail

packages=(
  iproute2             # ip: tests inspect kernel state with ip -j
  iputils-ping         # connectivity checks from pod namespaces
  nftables iptables    # bridge ipMasq backends
  containernetworking-plugins  # the Go reference plugins, /usr/lib/cni
  dnsmasq-base         # a real DHCP server for tests
  podman runc busybox-static  # a real container runtime calling our plugins
  qemu-system-x86 cpio  # cargo xtask vm-test: a Debian kernel with VLAN filtering, ipvlan, 8021q
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then
    echo "need root to install packages" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
