#!/usr/bin/env bash
# Installs what the tests and the benchmarks use, when missing: Debian packages, a kernel for
# the VM, firewalld unpacked, a validator. `scripts/deps.sh demo` installs only what the demo
# (`multus try`) uses: a few small packages.
set -euo pipefail

demo_packages=(
  iproute2             # ip: tests inspect kernel state with ip -j
  iputils-ping         # connectivity checks from pod namespaces
  nftables iptables    # bridge ipMasq backends
  dnsmasq-base         # the DHCP server of the dhcp example (and of the tests)
)
packages=(
  "${demo_packages[@]}"
  containernetworking-plugins  # the Go reference plugins, /usr/lib/cni
  udhcpd               # busybox udhcpd, a second DHCP server for the tests
  systemd              # systemd-socket-activate: the dhcp daemon under socket activation
  podman runc busybox-static  # a real container runtime calling our plugins
  qemu-system-x86 cpio  # cargo xtask vm-test: a Debian kernel with VLAN filtering, ipvlan, 8021q
  qemu-system-arm      # cargo xtask vm-memory: an arm64 guest, for a call's memory on aarch64
  time                 # cargo xtask bench-multus: a call's own peak RSS
  socat                # scripts/cluster.sh: the machine's loopback port to the node's API server
  curl                 # the e2e crate: a raw PATCH with multus's own credential on the node
  containerd           # scripts/cluster.sh --containerd 1: Debian's 1.6 (never started as a service here)
  conmon               # scripts/cluster.sh --cri-o: CRI-O's container monitor
  strace               # the crash-consistency suites: SIGKILL at a chosen file write
  rpm                  # cargo xtask package: rpmbuild for the RPMs (the .deb needs only dpkg)
  lintian rpmlint      # cargo xtask package: Debian's and Fedora's package checkers
  gcc-aarch64-linux-gnu libc6-dev-arm64-cross  # scripts/build.sh aarch64: ring's C and the static libc
  qemu-user-static binfmt-support  # cargo xtask aarch64-test: the aarch64 binaries run under qemu-user
  dbus-daemon python3-dbus python3-gi python3-nftables gir1.2-glib-2.0  # firewalld's runtime (firewalld itself is unpacked below)
)

if [ "${1:-}" = demo ]; then
  packages=("${demo_packages[@]}")
fi
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
if [ "${1:-}" = demo ]; then
  exit 0
fi

# The aarch64 build: Rust's standard library for the target, from rustup (the toolchain's own
# channel), and binfmt_misc running aarch64 programs under qemu-user with the F flag, so that
# they run in every mount namespace (cargo xtask aarch64-test checks it).
if ! rustup target list --installed | grep -qx aarch64-unknown-linux-gnu; then
  rustup target add aarch64-unknown-linux-gnu
fi
if [ ! -e /proc/sys/fs/binfmt_misc/register ]; then
  mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
fi
if ! grep -qx enabled /proc/sys/fs/binfmt_misc/qemu-aarch64 2>/dev/null; then
  update-binfmts --enable qemu-aarch64
fi

# Debian's cloud kernel for the VM tests (cargo xtask vm-test), which this machine's kernel cannot
# replace: bridge VLAN filtering, ipvlan, 8021q. Downloaded here because `cargo xtask` runs in a
# network namespace of its own, with no network.
cache=/var/cache/multus-rs
kernel_package() { apt-cache depends linux-image-cloud-amd64 2>/dev/null | awk '/Depends: linux-image-/ { print $2; exit }'; }
pkg=$(kernel_package)
if [ -z "$pkg" ]; then
  apt-get update -qq
  pkg=$(kernel_package)
fi
if ! ls "$cache/${pkg}"_*.deb >/dev/null 2>&1; then
  echo "downloading $pkg for the VM tests"
  mkdir -p "$cache"
  # apt's sandbox user cannot write to a root-only directory; download as root, quietly.
  (cd "$cache" && apt-get download -q -o APT::Sandbox::User=root "$pkg" >/dev/null) \
    || { apt-get update -qq && (cd "$cache" && apt-get download -q -o APT::Sandbox::User=root "$pkg" >/dev/null); }
fi

# The arm64 guests of `cargo xtask vm-memory` and `cargo xtask vm-test aarch64`: Debian's arm64
# cloud kernel and busybox, and the tools the VM tests run (ip, nft, iptables, ping, dnsmasq, tc)
# with the libraries they load, under tools/. Fetched through package lists of their own (the
# machine's apt stays amd64-only).
arm64=$cache/arm64
arm64_tools="iproute2 nftables iptables iputils-ping dnsmasq-base"
# The libraries among their dependencies, by name.
arm64_libs='^(lib|zlib)'
if ! ls "$arm64"/linux-image-*_arm64.deb "$arm64"/busybox-static_*_arm64.deb >/dev/null 2>&1 ||
  [ "$(cat "$arm64/tools/.packages" 2>/dev/null)" != "$arm64_tools $arm64_libs" ]; then
  echo "downloading the arm64 kernel, busybox and the VM tests' tools"
  mkdir -p "$arm64/lists/partial" "$arm64/apt/archives/partial"
  apt_arm64() {
    "$1" -q -o APT::Sandbox::User=root -o APT::Architectures::=amd64 -o APT::Architectures::=arm64 \
      -o Dir::State::Lists="$arm64/lists" -o Dir::Cache="$arm64/apt" "${@:2}"
  }
  apt_arm64 apt-get update >/dev/null
  kernel=$(apt_arm64 apt-cache depends linux-image-cloud-arm64:arm64 2>/dev/null | awk '/Depends: linux-image-/ { print $2; exit }')
  (cd "$arm64" && apt_arm64 apt-get download "$kernel" busybox-static:arm64 >/dev/null)
  # The tools and the libraries beneath them; the rest of their dependencies (debconf, dpkg,
  # netbase ...) are for installing, which the guest does not do.
  # shellcheck disable=SC2086 # a list of package names
  wanted=$(apt_arm64 apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
    --no-breaks --no-replaces --no-enhances --no-pre-depends ${arm64_tools// /:arm64 }:arm64 2>/dev/null |
    awk -v tools=" $arm64_tools " -v libs="$arm64_libs" '/^[^ <]/ { name = $1; sub(/:arm64$/, "", name)
      if ($1 ~ /:arm64$/ && (name ~ libs || index(tools, " " name " "))) print $1 }' | sort -u)
  rm -rf "$arm64/tools" "$arm64/tools.partial"
  mkdir -p "$arm64/tools.partial"
  # shellcheck disable=SC2086 # a list of package names
  (cd "$arm64/tools.partial" && apt_arm64 apt-get download $wanted >/dev/null)
  for deb in "$arm64"/tools.partial/*.deb; do dpkg-deb -x "$deb" "$arm64/tools.partial/root"; done
  rm -f "$arm64"/tools.partial/*.deb
  echo "$arm64_tools $arm64_libs" >"$arm64/tools.partial/.packages"
  mv -T "$arm64/tools.partial" "$arm64/tools"
  rm -rf "$arm64/lists" "$arm64/apt"
fi

# firewalld for the firewall plugin's firewalld backend, unpacked and never installed: the
# package would enable and start it on a systemd host, in charge of the host's own firewall. The
# tests run it in a namespace of their own, on a bus of their own.
firewalld_root=$cache/firewalld
if [ ! -x "$firewalld_root/usr/sbin/firewalld" ]; then
  echo "unpacking firewalld into $firewalld_root for the firewall plugin's tests"
  debs=$(mktemp -d)
  download() { (cd "$debs" && apt-get download -q -o APT::Sandbox::User=root firewalld python3-firewall >/dev/null); }
  download || { apt-get update -qq && download; }
  rm -rf "$firewalld_root"
  mkdir -p "$firewalld_root"
  for deb in "$debs"/*.deb; do dpkg-deb -x "$deb" "$firewalld_root"; done
  rm -rf "$debs"
fi

# kubernetes-validate checks the rendered manifests (deploy/) against Kubernetes' own schemas,
# offline; it lives in a virtualenv of its own so the system's Python stays untouched.
venv=$cache/venv
if [ ! -x "$venv/bin/kubernetes-validate" ]; then
  echo "installing kubernetes-validate into $venv"
  mkdir -p "$cache"
  python3 -m venv "$venv" 2>/dev/null || {
    apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
    rm -rf "$venv"
    python3 -m venv "$venv"
  }
  "$venv/bin/pip" install -q kubernetes-validate==1.37.0
fi
# The SPDX project's own tools check the SBOMs cargo xtask package writes (pyspdxtools).
if [ ! -x "$venv/bin/pyspdxtools" ]; then
  "$venv/bin/pip" install -q spdx-tools==0.8.5
fi

# Every crate Cargo.lock pins, for every target: the source RPM vendors them all (cargo xtask
# package, which, like every `cargo run`, has no network), and Windows or macOS crates are
# never downloaded by a Linux build.
(cd "$(dirname "$0")/.." && cargo fetch --locked -q)

# kubectl checks the testkit Kubernetes API server (crates/testkit/tests/suite/kube_api_kubectl.rs).
# It needs `patch --subresource` (kubectl >= 1.24); Debian's kubernetes-client is older, so
# kubectl must come with the machine.
if ! command -v kubectl >/dev/null; then
  echo "kubectl (>= 1.24) is missing: the testkit kube_api tests run it" >&2
  exit 1
fi

# The upstream peers the crates' suites run, built from their Go modules here because the tests
# run in a network namespace of their own, where the Go module proxy cannot be reached: the
# reference plugins v1.9.1, which the side-by-side tests run beside ours, multus v4.3.0, whose
# daemon the mixed-version thick test runs beside our shim (crates/multus-node/tests/
# thick_mixed.rs), whereabouts v0.9.4, whose plugin the e2e crate runs beside ours on one
# cluster, and the Kubernetes API's .proto files, with which testkit's API server reads
# client-go's protobuf bodies. The parts of scripts/cluster.sh's node are built by
# scripts/test.sh while those suites run, or by scripts/cluster.sh when it first needs them.
scripts_dir=$(cd "$(dirname "$0")" && pwd)
"$scripts_dir/peers.sh" build cni-plugins multus whereabouts kube-api-protos >/dev/null
